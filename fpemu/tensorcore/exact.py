"""Exactness of instruction operands, checked from their bits, and their exponent powers.

Every instruction model takes values exact in its operand formats. Rounding every operand to
check it (``fpemu.round(x, fmt) == x``) costs more than most models; the checks here read the
float64 bits instead: no fraction bit below the format's ``mbits``, no magnitude above its
maximum, and the few values below ``2**emin`` (subnormal in the format) checked one by one.
The same pass gives ``2**e`` of every value, from which the models read exponent labels.

>>> import numpy as np
>>> from fpemu.formats import get_format
>>> check_exact(np.array([1.5, -2.0**-24, 0.0]), get_format("float16"), "a")
>>> check_exact(np.array([1.0 + 2.0**-11]), get_format("float16"), "b")
Traceback (most recent call last):
ValueError: b holds values that are not exact in float16; round them first
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format
from fpemu.rounding import round as fround

F64 = np.typing.NDArray[np.float64]
_EXP = np.uint64(0x7FF0_0000_0000_0000)


@functools.lru_cache(maxsize=64)
def _constants(fmt: Format) -> tuple[np.uint64, np.uint64, bool, np.uint64]:
    """(fraction bits below ``fmt``'s, exponent bits of its maximum, whether every code of its
    top binade is finite, bits of ``2**emin``)."""
    low = np.uint64((1 << (52 - fmt.mbits)) - 1)
    top = np.uint64(np.float64(fmt.max).view(np.uint64)) & _EXP
    full = fmt.max == (2.0 - 2.0**-fmt.mbits) * 2.0**fmt.emax
    tiny = np.uint64(np.float64(2.0**fmt.emin).view(np.uint64))
    return low, top, full, tiny


def check_exact(x: Any, fmt: Format, arg: str) -> None:
    """Raise ``ValueError`` naming ``arg`` unless every finite value of ``x`` is exact in
    ``fmt`` (a signed floating-point format); NaN and infinities pass."""
    np_ = xp(x)
    powers(np_.ascontiguousarray(x, dtype=np_.float64), fmt, arg)


def powers(x: F64, fmt: Format, arg: str) -> tuple[F64, bool, Any]:
    """``2**e`` of each value (``e`` its float64 exponent; 0 for a zero), after checking ``x``
    exact in ``fmt``.

    Returns the powers (float64, ``inf`` where ``x`` is not finite), whether every value is
    finite, and the flat indices of the values subnormal in ``fmt`` (whose label is
    ``fmt.emin``, above their exponent), or None if there are none. Where they are more than
    one in 256, their powers are raised to ``2**fmt.emin`` instead and None is returned.

    Raises:
        ValueError: a finite value not exact in ``fmt`` (naming ``arg``).

    >>> from fpemu.formats import get_format
    >>> x = np.array([3.0, 2.0**-15, 0.0, -0.5] + [1.0] * 1020)
    >>> q, finite, sub = powers(x, get_format("float16"), "a")
    >>> q[:4].tolist(), finite, sub.tolist()  # one subnormal in 1024: its index
    ([2.0, 3.0517578125e-05, 0.0, 0.5], True, [1])
    >>> powers(x[:4], get_format("float16"), "a")[0].tolist()  # many: raised to 2**emin
    [2.0, 6.103515625e-05, 0.0, 0.5]
    >>> powers(np.array([1.0 + 2.0**-11]), get_format("float16"), "a")
    Traceback (most recent call last):
    ValueError: a holds values that are not exact in float16; round them first
    """
    np_ = xp(x)
    u = x.view(np.uint64)
    q = u & _EXP  # 2**exponent as float64 bits; 0 for a zero, inf for inf/NaN
    if not q.size:
        return q.view(np.float64), True, None
    low, top, full, tiny = _constants(fmt)
    qmax = q.max()
    finite = bool(qmax <= top)
    if not finite or (not full and qmax == top and bool(np_.abs(x).max() > fmt.max)) \
            or _low_bits(np_, u, low):  # fmt: skip
        with np.errstate(over="ignore", invalid="ignore"):
            bad = np_.asarray(fround(x, fmt)) != x  # out of range or too many bits
        if bool((bad & np_.isfinite(x)).any()):
            raise ValueError(
                f"{arg} holds values that are not exact in {fmt.name}; round them first"
            )
        finite = bool(np_.isfinite(x).all())
    sub = None
    if bool(q.min() < tiny):  # zeros or values subnormal in fmt
        flat = q.reshape(-1)
        # Many of them (FP4, FP8 data), judged from a sample: all at once; else one by one.
        if np_.count_nonzero(flat[::61] < tiny) * 32 > flat[::61].size:
            with np.errstate(over="ignore", invalid="ignore"):
                t = np_.ldexp(x, fmt.mbits - fmt.emin)  # exact values: multiples of 2**(emin-m)
                if bool(
                    (t != np_.trunc(t)).any() and (np_.isfinite(t) & (t != np_.trunc(t))).any()
                ):
                    raise ValueError(
                        f"{arg} holds values that are not exact in {fmt.name}; round them first"
                    )
            one = np.uint64(1)
            q -= one  # a zero wraps to the top, is left there by the maximum and comes back
            np_.maximum(q, tiny - one, out=q)
            q += one
        else:
            idx = np_.flatnonzero(q < tiny)
            sub = idx[flat[idx] != 0]
            with np.errstate(over="ignore"):
                t = np_.ldexp(x.reshape(-1)[sub], fmt.mbits - fmt.emin)  # multiples of 2**(emin-m)
            if bool((t != np_.trunc(t)).any()):
                raise ValueError(
                    f"{arg} holds values that are not exact in {fmt.name}; round them first"
                )
            if sub.size * 256 > q.size:  # raise these few hundred to 2**emin here
                q.reshape(-1)[sub] = tiny
            if sub.size * 256 > q.size or not sub.size:
                sub = None
    out: F64 = q.view(np.float64)
    return out, finite, sub


def _low_bits(np_: Any, u: Any, low: np.uint64) -> bool:
    """Whether any word of ``u`` has a bit of ``low`` set (one OR-reduction on NumPy)."""
    if np_ is np:
        return bool(np.bitwise_or.reduce(u, axis=None) & low)
    return bool((u & low).any())
