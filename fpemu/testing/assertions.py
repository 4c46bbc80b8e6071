"""Assertions for tests of low-precision code: bitwise equality and ulp closeness per format.

Failures raise :class:`AssertionError` with a multi-line message that pytest shows as is: the
number of mismatched elements and, for the first few, their index, both values, their bits
and fields in the format, and how many ulps apart they are.

>>> import numpy as np
>>> assert_bitwise_equal([0.5, -0.0], np.array([0.5, -0.0]), "fp16")
>>> assert_ulp_close([1.0, 2.0], [1.0009765625, 2.0], "fp16", max_ulp=1)
>>> int(ulp_distance(1.0, 1.0078125, "bf16"))
1
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.backend import to_numpy
from fpemu.bits import encode
from fpemu.describe import describe_code
from fpemu.formats import FORMATS, Format, FormatLike, get_format
from fpemu.inputs import as_array, as_float_array
from fpemu.rounding import round as fround
from fpemu.storage import format_of

#: How many mismatched elements a failure message lists.
MAX_REPORTED = 5


# ----- values -> ordered codes ----------------------------------------------------------------
def _as_float64(x: Any, arg: str) -> np.ndarray:
    """``x`` as exact float64 values on the host (inputs as :mod:`fpemu.inputs` accepts them)."""
    return np.asarray(to_numpy(as_float_array(x, arg=arg)))


def _representable(a: np.ndarray, f: Format) -> np.ndarray:
    """Mask of the elements that are values of ``f`` (NaN only where the format has NaN)."""
    nan = np.isnan(a)
    finite_or_inf = np.where(nan, 0.0, a)
    with np.errstate(over="ignore", invalid="ignore"):
        rounded = fround(finite_or_inf, f, overflow="inf" if f.has_inf else "saturate")
    same = rounded == finite_or_inf
    same &= ~np.isinf(a) | f.has_inf
    return np.where(nan, f.has_nan, same)


def _codes(a: np.ndarray, f: Format, ok: np.ndarray) -> np.ndarray:
    """Bit patterns (uint64) of the representable elements; 0 elsewhere."""
    if f == FORMATS["float64"]:
        return a.view(np.uint64).copy()
    clean = np.where(ok, a, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):  # encode warns on float64 internals
        return np.asarray(encode(clean, f), dtype=np.uint64).reshape(a.shape)


def _ordinal(codes: np.ndarray, f: Format) -> np.ndarray:
    """Signed position in the format's ordered values: -n ... -1, 0 (both zeros), 1 ... n."""
    sign = (codes >> np.uint64(f.bits - 1)).astype(bool)
    mag = (codes & np.uint64((1 << (f.bits - 1)) - 1)).astype(np.int64)
    if not f.subnormals:  # the subnormal codes are not values: close the gap
        mag = np.where(mag > 0, mag - ((1 << f.mbits) - 1), 0)
    return np.where(sign, -mag, mag)


def ulp_distance(a: Any, b: Any, fmt: FormatLike) -> Any:
    """Number of steps between values of ``fmt``: how many values lie in ``(a, b]``.

    Computed from the bit patterns made monotonic (negative codes mirrored), so it counts
    subnormals, is 0 between +0 and -0, and counts infinity as one step beyond the largest
    finite value.

    Args:
        a: values of ``fmt`` (arrays broadcast together with ``b``).
        b: values of ``fmt``.
        fmt: format name, alias or :class:`~fpemu.formats.Format`.

    Returns:
        ``|ordinal(a) - ordinal(b)|`` as int64 (a NumPy scalar for scalar inputs).

    Raises:
        ValueError: an element is NaN or not a value of ``fmt`` (the message names it).

    >>> int(ulp_distance(-2.0**-24, 2.0**-24, "fp16"))
    2
    >>> ulp_distance([448.0, 1.0], [416.0, 0.875], "e4m3").tolist()
    [1, 2]
    """
    f = get_format(fmt)
    x, y = np.broadcast_arrays(_as_float64(a, "a"), _as_float64(b, "b"))
    for arg, v in (("a", x), ("b", y)):
        bad = np.isnan(v) | ~_representable(v, f)
        if bad.any():
            i = _index(np.argwhere(bad)[0]) if v.ndim else ""
            raise ValueError(
                f"{arg}{i} = {float(v[bad].reshape(-1)[0])!r} is NaN or not a value of {f.name}; "
                "ulp_distance needs values of the format (round them first with fpemu.round)"
            )
    ok = np.ones(x.shape, dtype=bool)
    d = np.abs(_ordinal(_codes(x, f, ok), f) - _ordinal(_codes(y, f, ok), f))
    return d[()] if d.ndim == 0 else d


def _index(idx: Any) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


# ----- comparison and report ------------------------------------------------------------------
class _Compared:
    """Two arrays broadcast together, with their codes and ordinals in one format."""

    def __init__(self, actual: Any, desired: Any, f: Format) -> None:
        a, d = _as_float64(actual, "actual"), _as_float64(desired, "desired")
        try:
            a, d = np.broadcast_arrays(a, d)
        except ValueError:
            raise AssertionError(
                f"shapes differ: actual {a.shape} vs desired {d.shape} (not broadcastable)"
            ) from None
        self.f, self.a, self.d = f, a, d
        self.ok_a, self.ok_d = _representable(a, f), _representable(d, f)
        self.code_a, self.code_d = _codes(a, f, self.ok_a), _codes(d, f, self.ok_d)
        self.nan_a, self.nan_d = np.isnan(a), np.isnan(d)
        comparable = self.ok_a & self.ok_d & ~self.nan_a & ~self.nan_d
        self.ulps = np.where(
            comparable,
            np.abs(_ordinal(self.code_a, f) - _ordinal(self.code_d, f)),
            -1,  # not comparable: NaN or not a value of the format
        )

    def report(self, title: str, bad: np.ndarray, max_report: int) -> str:
        n, total = int(bad.sum()), bad.size
        lines = [f"{title}", f"Mismatched elements: {n} / {total} ({100 * n / total:.3g}%)"]
        finite = bad & (self.ulps >= 0)
        if finite.any():
            worst = np.unravel_index(int(np.argmax(np.where(finite, self.ulps, -1))), bad.shape)
            lines.append(f"Max ulp distance: {int(self.ulps[worst])} at index {_index(worst)}")
        lines.append(f"First {min(n, max_report)} mismatches:")
        for idx in np.argwhere(bad)[:max_report]:
            i = tuple(int(k) for k in idx)
            ulps = int(self.ulps[i])
            lines.append(f"  index {_index(i)}: ulp distance {ulps if ulps >= 0 else '-'}")
            lines.append(f"    actual : {self._side(self.a, self.ok_a, self.code_a, i)}")
            lines.append(f"    desired: {self._side(self.d, self.ok_d, self.code_d, i)}")
        return "\n".join(lines)

    def _side(self, v: np.ndarray, ok: np.ndarray, code: np.ndarray, i: tuple[int, ...]) -> str:
        value = float(v[i])
        if not ok[i]:
            return f"{value!r} (not a value of {self.f.name})"
        return f"{value!r} = {describe_code(int(code[i]), self.f)}"


def _common_format(actual: Any, desired: Any) -> Format:
    """The narrowest known format holding both arrays' dtypes (float64 for lists and others)."""
    found = []
    for arg, x in (("actual", actual), ("desired", desired)):
        try:
            found.append(format_of(as_array(x, arg=arg).dtype))
        except (ValueError, TypeError):
            return FORMATS["float64"]
    a, b = found
    if a == b:
        return a
    wide = max(a, b, key=lambda f: f.bits)
    narrow = min(a, b, key=lambda f: f.bits)
    fits = wide.mbits >= narrow.mbits and wide.emin <= narrow.emin and wide.emax >= narrow.emax
    if fits and wide.bits > narrow.bits:
        return wide
    return FORMATS["float32" if wide.bits < 32 else "float64"]


def assert_bitwise_equal(
    actual: Any,
    desired: Any,
    fmt: FormatLike | None = None,
    *,
    equal_nan: bool = True,
    err_msg: str = "",
    max_report: int = MAX_REPORTED,
) -> None:
    """Assert that two arrays hold the same bit patterns in ``fmt``, element by element.

    Unlike ``==``, ``+0`` and ``-0`` differ; unlike :func:`numpy.testing.assert_allclose`,
    nothing is "close enough". Elements that are not values of ``fmt`` always mismatch.

    Args:
        actual: the array obtained (anything :func:`numpy.asarray` takes, or a CuPy array).
        desired: the array expected; broadcast against ``actual``.
        fmt: the format whose bits are compared. None: the narrowest format holding both
            dtypes (float16, bfloat16, ...; float64 for lists and float64 arrays).
        equal_nan: whether a NaN matches any NaN (fpemu keeps no NaN payloads). If False,
            NaN never matches, as with ``==``.
        err_msg: text put at the top of the failure message.
        max_report: how many mismatched elements the message lists.

    Raises:
        AssertionError: some element differs (the message lists the first ones with their
            bits, fields and ulp distance, and the count), or the shapes do not broadcast.

    >>> assert_bitwise_equal(0.0, -0.0, "fp16")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: Arrays are not bitwise equal in float16
    Mismatched elements: 1 / 1 (100%)
    Max ulp distance: 0 at index []
    First 1 mismatches:
      index []: ulp distance 0
        actual : 0.0 = 0x0000 [s=0 e=0(zero) m=0x000]
        desired: -0.0 = 0x8000 [s=1 e=0(zero) m=0x000]
    """
    f = _common_format(actual, desired) if fmt is None else get_format(fmt)
    c = _Compared(actual, desired, f)
    same = c.ok_a & c.ok_d & (c.code_a == c.code_d) & ~c.nan_a
    if equal_nan:
        same |= c.nan_a & c.nan_d & c.ok_a & c.ok_d
    if not same.all():
        title = f"{err_msg}\n" if err_msg else ""
        head = f"Arrays are not bitwise equal in {f.name}"
        raise AssertionError(c.report(title + head, ~same, max_report))


def assert_ulp_close(
    actual: Any,
    desired: Any,
    fmt: FormatLike,
    max_ulp: int = 1,
    *,
    equal_nan: bool = True,
    err_msg: str = "",
    max_report: int = MAX_REPORTED,
) -> None:
    """Assert that two arrays of ``fmt`` values are at most ``max_ulp`` values apart.

    Distances are :func:`ulp_distance` (steps through the format's values, subnormals
    included; ``+0`` and ``-0`` are 0 apart). Infinities must match exactly; an element that
    is not a value of ``fmt`` always mismatches (round the expected values first).

    Args:
        actual: the array obtained.
        desired: the array expected (broadcast against ``actual``).
        fmt: format name, alias or :class:`~fpemu.formats.Format`.
        max_ulp: the largest distance allowed (a non-negative int).
        equal_nan: whether a NaN matches a NaN; NaN never matches a number.
        err_msg: text put at the top of the failure message.
        max_report: how many mismatched elements the message lists.

    Raises:
        AssertionError: some element is further apart (message as in
            :func:`assert_bitwise_equal`).
        ValueError: ``max_ulp`` is not a non-negative int.

    >>> assert_ulp_close(1.0, 1.015625, "bf16", max_ulp=1)
    Traceback (most recent call last):
    ...
    AssertionError: Arrays are not within 1 ulp of each other in bfloat16
    Mismatched elements: 1 / 1 (100%)
    Max ulp distance: 2 at index []
    First 1 mismatches:
      index []: ulp distance 2
        actual : 1.0 = 0x3f80 [s=0 e=127(2^0) m=0x00]
        desired: 1.015625 = 0x3f82 [s=0 e=127(2^0) m=0x02]
    """
    if isinstance(max_ulp, bool) or not isinstance(max_ulp, (int, np.integer)) or max_ulp < 0:
        raise ValueError(f"max_ulp must be a non-negative int; got max_ulp={max_ulp!r}")
    f = get_format(fmt)
    c = _Compared(actual, desired, f)
    inf = np.isinf(c.a) | np.isinf(c.d)
    close = (c.ulps >= 0) & (c.ulps <= max_ulp) & (~inf | (c.a == c.d))
    if equal_nan:
        close |= c.nan_a & c.nan_d & c.ok_a & c.ok_d
    if not close.all():
        title = f"{err_msg}\n" if err_msg else ""
        head = f"Arrays are not within {max_ulp} ulp of each other in {f.name}"
        raise AssertionError(c.report(title + head, ~close, max_report))


def assert_representable(x: Any, fmt: FormatLike, *, max_report: int = MAX_REPORTED) -> None:
    """Assert that every element of ``x`` is a value of ``fmt`` (NaN only if it has NaN).

    Raises:
        AssertionError: some element is not; the message lists the first ones with the two
            values of ``fmt`` around them.

    >>> assert_representable([0.5, 0.1], "fp16")
    Traceback (most recent call last):
    ...
    AssertionError: 1 / 2 elements are not values of float16
      index [1]: 0.1 lies between 0.0999755859375 and 0.10003662109375
    """
    f = get_format(fmt)
    a = _as_float64(x, "x")
    ok = _representable(a, f)
    if ok.all():
        return
    lines = [f"{int((~ok).sum())} / {a.size} elements are not values of {f.name}"]
    for idx in np.argwhere(~ok)[:max_report]:
        i = tuple(int(k) for k in idx)
        v = float(a[i])
        if math.isnan(v) or math.isinf(v):
            lines.append(f"  index {_index(i)}: {v!r} ({f.name} has no {v!r})")
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            lo, hi = (float(fround(v, f, mode=m, overflow="saturate")) for m in ("rdown", "rup"))
        where = f"lies between {lo!r} and {hi!r}" if lo != hi else f"is beyond +-{f.max!r}"
        lines.append(f"  index {_index(i)}: {v!r} {where}")
    raise AssertionError("\n".join(lines))
