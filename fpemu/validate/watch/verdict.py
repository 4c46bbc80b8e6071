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

import numpy as np

from fpemu.validate.ops import Call, Out, lookup
from fpemu.validate.ops._num import FLOATS, max_ulps, to
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


def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f" or a.dtype.name in FLOATS


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
    idx = np.flatnonzero(diff)
    tv, vv = t.ravel()[idx], v.ravel()[idx]
    tf, vf = tv.astype(np.float64), vv.astype(np.float64)
    if is_float:  # any NaN equals any NaN: only the differing elements are looked at
        keep = ~(np.isnan(tf) & np.isnan(vf))
        if not keep.all():
            idx, tf, vf = idx[keep], tf[keep], vf[keep]
            if idx.size == 0:
                return Judged("identical", t.size)
    nd = int(idx.size)
    first = tuple(int(i) for i in np.unravel_index(int(idx[0]), t.shape))
    if is_float:
        name = fmt_name(t)
        ulps = max_ulps(tf, vf, name)
    else:
        name, ulps = t.dtype.name, float("inf")
    base: dict[str, Any] = {
        "n": t.size,
        "ndiff": nd,
        "ulps": ulps,
        "first": first,
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
    return Judged(
        "differs",
        cause=f"outside the bound ({out.reason}): {int(np.count_nonzero(~ok))} elements",
        **base,
    )


def _bounds(out: Out, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    b = out.bounds_at(idx)
    assert b is not None  # the caller saw a bound or an err
    return b


def _admitted(tf: np.ndarray, center: np.ndarray, err: np.ndarray, name: str) -> np.ndarray:
    """Which of torch's values ``tf`` (float64) the bound admits. The kernel rounds its value
    to nearest (even), a monotone map: the admissible results are exactly
    ``[RN(center - err), RN(center + err)]``. The float64 ends carry one float64 rounding
    each, covered by widening ``err`` by 2 ulps of float64."""
    center, err = np.asarray(center, np.float64), np.asarray(err, np.float64)
    err = err + np.abs(center) * 2.0**-51
    lo = to(center - err, name).astype(np.float64)
    hi = to(center + err, name).astype(np.float64)
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
