"""Judge one torch output against fpemu's emulation of it: identical, bounded or differs.

* ``identical``: the bits are equal (any NaN equals any NaN: payloads are not judged).
* ``bounded``: not identical, and the emulation does not claim exactness, and every element of
  torch's output is the output format's round-to-nearest-even of some value within the
  emulation's ``center +- err`` (the kernel's value before its final rounding).
* ``differs``: anything else, including a different shape or dtype.

>>> import numpy as np
>>> from fpemu.validate.ops import Out, bounded
>>> judge(np.float32([1.0, 2.0]), Out(np.float32([1.0, 2.0]))).verdict
'identical'
>>> j = judge(np.float32([1.0 + 2**-23]), bounded(np.float32([1.0]), 2**-22, "sum order"))
>>> j.verdict, j.ulps
('bounded', 1.0)
>>> judge(np.float32([1.0 + 2**-21]), bounded(np.float32([1.0]), 2**-22, "sum order")).verdict
'differs'
"""

from __future__ import annotations

from typing import Any, NamedTuple

import ml_dtypes
import numpy as np

from fpemu.validate.ops import Call, Out, lookup
from fpemu.validate.ops._num import FLOATS, max_ulps, to
from fpemu.validate.ops._num import dtype as dtype_of
from fpemu.validate.ops._num import fmt as fmt_name

__all__ = ["ORDER", "Judged", "apply", "judge", "judge_call", "judge_view"]

#: verdicts from best to worst; a row's verdict is the worst over its outputs
ORDER = ("identical", "bounded", "not_emulated", "policy", "differs")


class Judged(NamedTuple):
    """The verdict on one output: counts, distance in ulps of its format, the first differing
    element, and the cause (the emulation's bound reason, or what differs). A tuple: made for
    every output of every op, where a frozen dataclass costs several times more."""

    verdict: str
    n: int = 0
    ndiff: int = 0
    ulps: float = 0.0
    first: tuple[int, ...] | None = None
    torch_value: float | None = None
    fpemu_value: float | None = None
    cause: str = ""
    #: identical by the same-memory proof (torch's output is the emulation's view, at the same
    #: address and strides: equal for any values), not by comparing these values
    by_layout: bool = False


_UINT: dict[int, np.dtype[Any]] = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16),
                                   4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}  # fmt: skip


def _bits(a: np.ndarray) -> np.ndarray:
    """The bits of ``a`` as unsigned ints, without copying (a strided view of the same memory;
    a layout NumPy cannot reinterpret in place is copied first)."""
    u = _UINT[a.dtype.itemsize]
    try:
        return a.view(u)
    except ValueError:
        return np.ascontiguousarray(a).view(u)


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


#: the dtypes of :data:`FLOATS` (a set lookup: ``dtype.name`` of an ml_dtypes type costs ~0.6 us)
_FLOAT_DTYPES = frozenset(dtype_of(n) for n in FLOATS)


def _is_float(a: np.ndarray) -> bool:
    """A float format: NumPy's (kind "f") or one of :data:`FLOATS` (ml_dtypes'), found by
    dtype first and by name only for the others (the same answer)."""
    dt = a.dtype
    return dt in _FLOAT_DTYPES or dt.kind == "f" or dt.name in FLOATS


def judge(t: np.ndarray, out: Out) -> Judged:
    """The verdict on torch's output ``t`` (an array in its own dtype) against ``out``."""
    v = np.asarray(out.value)
    t = np.asarray(t)
    if t.shape != v.shape or t.dtype != v.dtype:
        return Judged(
            "differs",
            t.size,
            t.size,
            float("inf"),
            cause=f"shape/dtype: torch {t.dtype}{list(t.shape)}, fpemu {v.dtype}{list(v.shape)}",
        )
    # (an array that owns its memory was made by the emulation: not torch's)
    if t.size and not v.flags.owndata and t.strides == v.strides and _address(t) == _address(v):
        # the same memory read the same way (a view op's output and its emulation, both views
        # of torch's own storage): the same bits, proved without reading them
        return Judged("identical", t.size, by_layout=True)
    is_float = _is_float(t)
    diff = np.asarray(t != v) if not is_float else _bits(t) != _bits(v)
    if not diff.any():  # most outputs: a reduction, no index array
        return Judged("identical", t.size)
    if (
        out.bound is None
        and out.err is not None
        and not out.exact
        and t.size >= _DENSE_MIN
        and t.dtype in _MONOTONE
    ):
        nd = int(np.count_nonzero(diff))
        if nd * _DENSE >= t.size:  # many differ: whole arrays cost less than gathers
            j = _judge_dense(t, v, diff, nd, out, _MONOTONE[t.dtype])
            if j is not None:
                return j
    idx = np.flatnonzero(diff)
    tf, vf = t.ravel()[idx].astype(np.float64), v.ravel()[idx].astype(np.float64)
    if is_float:
        name = fmt_name(t)
        ulps = max_ulps(tf, vf, name)
        # any NaN equals any NaN: only the differing elements are looked at. A finite ulps
        # has no NaN term, so neither side holds a NaN (a NaN's term is NaN) and nothing is
        # dropped: the NaN pairs are looked for only where the distance is infinite
        if not ulps < _INF:
            keep = ~(np.isnan(tf) & np.isnan(vf))
            if not keep.all():
                idx, tf, vf = idx[keep], tf[keep], vf[keep]
                if idx.size == 0:
                    return Judged("identical", t.size)
                ulps = max_ulps(tf, vf, name)
    else:
        name, ulps = t.dtype.name, _INF
    base: dict[str, Any] = {
        "n": t.size,
        "ndiff": int(idx.size),
        "ulps": ulps,
        "first": tuple(int(i) for i in np.unravel_index(int(idx[0]), t.shape)),
        "torch_value": float(tf[0]),
        "fpemu_value": float(vf[0]),
    }
    if out.exact or not is_float or (out.bound is None and out.err is None):
        return Judged(
            "differs",
            cause="emulation claims exact" if out.exact else (out.reason or "no bound"),
            **base,
        )
    with np.errstate(all="ignore"):  # a lazy bound meets NaN and inf as data, not errors
        if out.quick is None:
            ok = _admitted(tf, *_bounds(out, idx), name)
        else:
            # a cheaper, smaller bound first (``Out.quick``): the full one only where it
            # does not admit torch's value (every range it admits lies inside the full one's)
            ok = _admitted(tf, *out.quick(idx), name)
            rest = np.flatnonzero(~ok)
            if rest.size:
                ok[rest] = _admitted(tf[rest], *_bounds(out, idx[rest]), name)
    if bool(ok.all()):
        return Judged("bounded", cause=out.reason, **base)
    bad = int(np.flatnonzero(~ok)[0])
    first = tuple(int(i) for i in np.unravel_index(int(idx[bad]), t.shape))
    base.update(first=first, torch_value=float(tf[bad]), fpemu_value=float(vf[bad]))
    return _outside(out, int(np.count_nonzero(~ok)), base)


_INF = float("inf")
#: the formats whose rounding ``to`` is a monotone map that leaves each value of the format
#: as it is (round to nearest even, overflow to inf): :func:`_admitted`'s sufficient test
#: holds for them (float8_e4m3fn has no inf: it overflows to NaN, which admits nothing)
_MONOTONE: dict[np.dtype[Any], str] = {
    np.dtype(np.float64): "float64",
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(ml_dtypes.bfloat16): "bfloat16",
}
_MONOTONE_NAMES = frozenset(_MONOTONE.values())
#: a bounded output (``center``/``err``) is judged on whole arrays where at least 1/_DENSE of
#: its elements differ and it has at least _DENSE_MIN of them (measured on the bench GPT's
#: attention outputs, 64K elements: with 74-86% differing (float32) the whole arrays cost
#: ~0.75x the gathered ones, with 28-42% (bfloat16) ~1.15x)
_DENSE = 2
_DENSE_MIN = 4096


def _outside(out: Out, count: int, base: dict[str, Any]) -> Judged:
    cause = f"outside the bound ({out.reason}): {count} elements"
    return Judged("differs", cause=cause, **base)


def _judge_dense(
    t: np.ndarray, v: np.ndarray, diff: np.ndarray, nd: int, out: Out, name: str
) -> Judged | None:
    """:func:`judge`'s result on a bounded output (``center``/``err``, not lazy) of which
    ``nd >= 1`` elements differ (``diff``), computed on the whole arrays without gathering
    them; None where it cannot vouch for that result (an infinite or NaN ulp distance), and
    the caller then gathers. It is the gathered path's result:

    * ``ulps``: :func:`max_ulps` is the maximum of elementwise terms, here over every
      element. A finite result means no term is NaN or infinite: neither array holds a NaN
      (whose term is NaN), so no differing element is a NaN pair (none is dropped), and no
      element has ``t == v == +-inf`` (inf - inf is NaN); every element with equal bits then
      has ``|t - v| = 0``, a term 0. The terms are >= 0 and at least one element differs,
      so the maximum over all elements is the maximum over the differing ones (the same
      float64 terms: elementwise operations do not depend on the gather).
    * ``ndiff``, ``first``, ``torch_value``, ``fpemu_value``: the count of differing
      elements, and the first in C order (``argmax`` of a bool array: its first True).
    * the verdict: :func:`_inside` (which implies :func:`_admitted`'s exact test) on the
      whole arrays, with ``center`` and ``err`` broadcast to the output as ``bounds_at``
      broadcasts them (raising where it raises), then the exact test at the differing
      elements it leaves, on the same values ``bounds_at`` gathers: the same admitted set,
      so the same count and, in C order, the same first element outside the bound.
    """
    shape = t.shape
    with np.errstate(all="ignore"):
        tf, vf = t.astype(np.float64), v.astype(np.float64)
        # the center defaults to the value: vf holds its values as float64
        center = vf if out.center is None else np.asarray(out.center, np.float64)
        err = np.asarray(out.err, np.float64)
        if center.shape != shape:
            center = np.broadcast_to(center, shape)
        if err.shape != shape:
            err = np.broadcast_to(err, shape)
        need = _inside(tf, center, err)
        np.logical_not(need, out=need)
        need &= diff  # the differing elements the sufficient test leaves
        rest = np.flatnonzero(need)
        ok = need[:0].reshape(-1)  # empty
        if rest.size:
            at = np.unravel_index(rest, shape)
            c = center[at]
            ok = _exact(tf[at], *_ends(c, err[at]), c, name)
        i = int(np.argmax(diff))  # the first differing element
        bad = int(rest[int(np.argmin(ok))]) if not ok.all() else i  # the first outside
        seen = (float(tf.flat[i]), float(vf.flat[i]), float(tf.flat[bad]), float(vf.flat[bad]))
        ulps = max_ulps(tf, vf, name, overwrite=True)  # (tf, vf and center are spent)
    if not ulps < _INF:
        return None
    base: dict[str, Any] = {
        "n": t.size,
        "ndiff": nd,
        "ulps": ulps,
        "first": tuple(int(k) for k in np.unravel_index(i, shape)),
        "torch_value": seen[0],
        "fpemu_value": seen[1],
    }
    if bool(ok.all()):
        return Judged("bounded", cause=out.reason, **base)
    base.update(
        first=tuple(int(k) for k in np.unravel_index(bad, shape)),
        torch_value=seen[2],
        fpemu_value=seen[3],
    )
    return _outside(out, int(np.count_nonzero(~ok)), base)


def _bounds(out: Out, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = out.bounds_at(idx)
    assert b is not None  # the caller saw a bound or an err
    return b


def _inside(tf: np.ndarray, center: np.ndarray, err: np.ndarray) -> np.ndarray:
    """The sufficient test: ``|tf - center| < err`` in float64 (3 passes, no rounding to the
    format). Where it holds, :func:`_exact` admits ``tf``, for the formats of
    :data:`_MONOTONE` (``to`` rounds to nearest even: monotone, and the identity on the
    format's values, of which ``tf`` is one: torch's output widened exactly):

    ``|fl(tf - c)| < err`` gives ``tf``, ``c`` and ``err > 0`` not NaN, ``tf`` and ``c``
    finite (inf - x is inf or NaN). If ``err`` is inf, ``w = fl(err + |c| 2**-51)`` is inf
    and ``fl(c - w) = -inf <= tf <= inf = fl(c + w)``. Else, were the exact ``|tf - c|`` above
    ``err``, its rounding would be at least ``fl(err) = err`` (rounding is monotone), so
    ``|tf - c| <= err <= w`` (``w`` rounds ``err`` plus a non-negative term), i.e.
    ``c - w <= tf <= c + w``; rounding to float64 is monotone and leaves ``tf``, so
    ``lo = fl(c - w) <= tf <= fl(c + w) = hi``; and ``to`` is monotone and leaves ``tf``:
    ``RN(lo) <= tf <= RN(hi)``, the exact test. Nothing here depends on the sign of a zero,
    on subnormals (gradual underflow: float64 subtraction is exact there), on overflow
    (``fl(tf - c) = +-inf`` fails the test), or on how ``err`` was broadcast (scalar,
    broadcast or elementwise: the same values at each element). A NaN fails the test and
    takes the exact one, like every element the test leaves.
    """
    x = np.subtract(tf, center)
    np.abs(x, out=x)
    return np.asarray(np.less(x, err))


def _ends(center: np.ndarray, err: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float64 ends ``center -+ err'`` of the range before its rounding: ``err`` widened
    by 2 ulps of float64 (``err' = err + |center| 2**-51``) to cover their own rounding."""
    err = err + np.abs(center) * 2.0**-51
    return center - err, center + err


def _admitted(tf: np.ndarray, center: np.ndarray, err: np.ndarray, name: str) -> np.ndarray:
    """Which of torch's values ``tf`` (float64) the bound admits. The kernel rounds its value
    to nearest (even), a monotone map: the admissible results are exactly
    ``[RN(center - err), RN(center + err)]``. The float64 ends carry one float64 rounding
    each, covered by widening ``err`` by 2 ulps of float64 (:func:`_ends`, :func:`_exact`).

    The sufficient test :func:`_inside` first (formats of :data:`_MONOTONE`, 1-D ``tf``):
    the exact test admits every element it admits, and decides the others, so the result is
    the exact test's at every element.
    """
    center, err = np.asarray(center, np.float64), np.asarray(err, np.float64)
    n = tf.shape
    if (
        len(n) != 1
        or name not in _MONOTONE_NAMES
        or center.shape not in (n, ())
        or err.shape not in (n, ())
    ):  # (any other shape: the exact test alone, broadcasting as it does)
        return _exact(tf, *_ends(center, err), center, name)
    ok = _inside(tf, center, err)
    rest = np.flatnonzero(~ok)
    if rest.size:  # a scalar center or err is the same at every element
        c = center[rest] if center.ndim else center
        ok[rest] = _exact(tf[rest], *_ends(c, err[rest] if err.ndim else err), c, name)
    return ok


def _exact(
    tf: np.ndarray, lo: np.ndarray, hi: np.ndarray, center: np.ndarray, name: str
) -> np.ndarray:
    """The exact test: ``RN(lo) <= tf <= RN(hi)`` in the format ``name``, or NaN where the
    center is NaN. 1-D ends are rounded by one call (``to`` is elementwise)."""
    if lo.ndim == 1 and hi.shape == lo.shape:
        ends = to(np.concatenate((lo, hi)), name).astype(np.float64)
        lo, hi = ends[: lo.size], ends[lo.size :]
    else:
        lo, hi = to(lo, name).astype(np.float64), to(hi, name).astype(np.float64)
    return np.asarray(((tf >= lo) & (tf <= hi)) | (np.isnan(tf) & np.isnan(center)))


def judge_call(call: Call) -> dict[str, Any]:
    """The row fields of one op: its emulation run on ``call`` (torch's own outputs in
    ``call.options["outputs"]``) and each output judged; the verdict is the worst.

    A plain function of the call (no torch, no watcher state): the watcher runs it in its own
    process or queues it for a worker (:mod:`fpemu.offload`).

    >>> c = Call("aten.add.Tensor", (np.float32([1.0]), np.float32([2.0])), {}, ("float32",),
    ...          options={"outputs": [np.float32([3.0])]})
    >>> judge_call(c)["verdict"]
    'identical'
    """
    return judge_view(call)[0]


def judge_view(call: Call) -> tuple[dict[str, Any], bool]:
    """:func:`judge_call`'s fields, and whether every output was proved identical by the
    same-memory proof (each is the emulation's view of the same memory: equal for any values
    with the same layout, which lets the watcher judge a repeated view by its layout)."""
    emulation = lookup(call.op)
    outs = call.options["outputs"]
    row: dict[str, Any] = {"verdict": "identical", "cause": "", "n": 0, "ndiff": 0, "ulps": 0.0}
    if emulation is None:
        return {**row, "verdict": "not_emulated", "cause": "no emulation of this ATen op"}, False
    try:
        emulated = list(emulation(call))
    except Exception as exc:  # an emulation bug must surface as a row, not vanish
        return {**row, "verdict": "not_emulated",
                "cause": f"emulation raised {type(exc).__name__}: {exc}"}, False  # fmt: skip
    if len(emulated) != len(outs):
        why = f"emulation gave {len(emulated)} outputs, torch {len(outs)}"
        return {**row, "verdict": "not_emulated", "cause": why}, False
    worst: Judged | None = None
    layout = bool(outs)
    for t, out in zip(outs, emulated, strict=True):
        if out is None:
            layout = False
            continue
        j = judge(t, out)
        layout = layout and j.by_layout
        row["n"] += j.n
        row["ndiff"] += j.ndiff
        row["ulps"] = max(row["ulps"], j.ulps)
        if worst is None or ORDER.index(j.verdict) > ORDER.index(worst.verdict):
            worst = j
    if worst is not None:
        row["verdict"] = worst.verdict
        row["cause"] = worst.cause
        if worst.first is not None:
            row.update(first=list(worst.first), torch_value=worst.torch_value,
                       fpemu_value=worst.fpemu_value)  # fmt: skip
    return row, layout


def apply(row: dict[str, Any], fields: dict[str, Any]) -> None:
    """Put :func:`judge_call`'s ``fields`` into ``row``, which the policy check may already
    have marked ``policy``: that verdict stays unless the op ``differs`` (the worse one)."""
    if row["verdict"] == "policy" and fields["verdict"] != "differs":
        fields = {k: v for k, v in fields.items() if k not in ("verdict", "cause")}
    row.update(fields)
