"""Losses as torch 2.13's CPU kernels compute them: ``nll_loss`` / ``nll_loss2d`` forward and
backward (LossNLL.cpp, LossNLL2d.cpp) and ``mse_loss`` forward and backward (Loss.cpp,
PointwiseOpsKernel.cpp). ``cross_entropy`` (with or without ``label_smoothing``) reaches ATen as
``_log_softmax`` + ``nll_loss_forward`` + elementwise ops and sums (measured with a dispatch
mode), each emulated by its own family.

``nll_loss`` with reduction mean/sum: torch 2.13's summation order is not the sequential
cascade of older LossNLL.cpp (measured: float32 sums agree with a pairwise order, float64 with
neither, 16-bit ones round partial sums in the dtype), so the loss is bounded by the recursive
summation bound in the tensor's own format, ``gamma_{K-1} * sum|x[b, t_b]|`` (any order or tree,
every partial sum rounded), and the mean's division adds one rounding; ``total_weight`` (the
kept count in the dtype) and ``reduction='none'`` are exact, and so is the backward.

``mse_loss``: ``d = a - b; d*d`` elementwise (exact); mean/sum reduce with torch's vectorised
cascade sum, bounded by ``gamma_{K-1} * sum d*d``. Backward: ``norm * (a - b) * grad`` with
``norm = 2/N`` (mean) or 2 in the tensor's type, rounding left to right.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> x = np.log(np.float32([[0.25, 0.75], [0.5, 0.5]]))
>>> out, tw = nll_loss(Call("aten.nll_loss_forward.default", (x, np.int64([1, 0]), None, 1, -100),
...                         {}, ("float32", "float32")))
>>> round(float(out.value), 6), out.exact, float(tw.value)
(0.490415, False, 2.0)
"""

from __future__ import annotations

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact
from fpemu.validate.ops._fp import quiet
from fpemu.validate.ops._iv import U
from fpemu.validate.ops._num import LOW, dtype, to

__all__ = ["mse_loss", "mse_loss_backward", "nll_loss", "nll_loss_backward"]


def _unit(name: str) -> float:
    """The unit roundoff of the format the kernel accumulates in."""
    return {"float64": 2.0**-53, "float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}[
        name
    ]


def _sum_bound(terms: np.ndarray, name: str) -> tuple[float, float]:
    """The exact sum of ``terms`` (float64, compensated enough) and the recursive-summation bound
    ``gamma_{K-1} * sum|t|`` in the accumulation format ``name`` (any order, any tree)."""
    v = np.asarray(terms, np.float64).ravel()
    k = max(v.size, 1)
    u = _unit(name)
    total = float(np.sum(v))
    absum = float(np.sum(np.abs(v)))
    g = (k - 1) * u / (1 - (k - 1) * u) if (k - 1) * u < 1 else np.inf
    return total, g * absum + k * 2.0**-52 * absum


@quiet("aten.nll_loss_forward.default", "aten.nll_loss2d_forward.default")
def nll_loss(call: Call) -> list[Out | None]:
    """``(output, total_weight)`` of ``nll_loss_forward(self, target, weight, reduction,
    ignore_index)`` (and ``nll_loss2d_forward``: class dim 1, the rest flattened in order)."""
    x, t, w = call.args[0], np.asarray(call.args[1]), call.arg(2, "weight")
    reduction, ignore = int(call.args[3]), int(call.args[4])
    if w is not None:
        raise NotImplementedError("nll_loss with a class weight is not emulated")
    name = call.out_dtypes[0]
    xs = x.reshape(1, -1) if x.ndim == 1 else np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])
    tf = t.reshape(-1)
    keep = tf != ignore
    safe = np.where(keep, tf, 0)
    picked = xs[np.arange(tf.size), safe] if tf.size else xs[:0, 0]
    if reduction == 0:  # none: -x[b, t_b] (0 where ignored)
        out = np.where(keep, -picked, np.zeros_like(picked)).reshape(t.shape)
        # total_weight (measured): zeroed for a batch, the kept count for a single 1-d sample
        tw0 = float(keep.sum()) if x.ndim == 1 else 0.0
        return [exact(out.astype(dtype(name))), exact(np.asarray(tw0, dtype(call.out_dtypes[1])))]
    count = int(keep.sum())
    total, err = _sum_bound(-picked[keep].astype(np.float64), name)
    dt = dtype(name)
    tw = np.asarray(float(count)).astype(np.float32 if name != "float64" else np.float64)
    tw_out = exact(to(tw.reshape(1), name).reshape(()))
    if reduction == 1:
        if count == 0:  # 0/0
            return [exact(np.asarray(np.nan, dt)), tw_out]
        u = _unit(name)
        total, err = total / count, err / count + u * (abs(total) / count + err / count)
    why = "summation order not pinned (cascade/vector lanes): gamma_{K-1}*sum|x| in the dtype"
    return [bounded(to(np.asarray([total]), name).reshape(()), err, why,
                    center=np.asarray(total)), tw_out]  # fmt: skip


@quiet("aten.nll_loss_backward.default", "aten.nll_loss2d_backward.default")
def nll_loss_backward(call: Call) -> list[Out | None]:
    """``grad_input``: zeros but ``-(g / total_weight)`` (mean) or ``-g`` at each kept target."""
    g, x, t, w = call.args[0], call.args[1], np.asarray(call.args[2]), call.arg(3, "weight")
    reduction, ignore, tw = int(call.args[4]), int(call.args[5]), call.args[6]
    if w is not None:
        raise NotImplementedError("nll_loss with a class weight is not emulated")
    name = call.out_dtypes[0]
    cdt = np.float64 if name == "float64" else np.float32
    out = np.zeros(x.shape, dtype(name))
    view = out.reshape(1, -1) if x.ndim == 1 else np.moveaxis(out, 1, -1).reshape(-1, x.shape[1])
    tf = t.reshape(-1)
    keep = np.flatnonzero(tf != ignore)
    if reduction == 0:
        grads = -np.asarray(g).reshape(-1)[keep]
    else:
        gv = float(np.asarray(g).reshape(()))
        if reduction == 1:  # g / total_weight in the dtype's arithmetic (float32 opmath)
            q = np.asarray([gv], cdt) / np.asarray([float(np.asarray(tw).reshape(()))], cdt)
            gv = float(to(q, name)[0])
        grads = np.full(keep.size, -gv)
    view[keep, tf[keep]] = np.asarray(grads).astype(dtype(name))
    if x.ndim > 1:
        out = np.moveaxis(view.reshape(np.moveaxis(out, 1, -1).shape), -1, 1)
    return [exact(np.ascontiguousarray(out).reshape(x.shape))]


def _sq(a: np.ndarray, b: np.ndarray, name: str) -> np.ndarray:
    """``(a - b)**2`` elementwise: float32 opmath, the 16-bit formats rounding the difference."""
    cdt = np.float64 if name == "float64" else np.float32
    d = a.astype(cdt) - b.astype(cdt)
    if name in LOW:
        d = to(d, name).astype(np.float32)
    return np.asarray(to(d * d, name))


@quiet("aten.mse_loss.default")
def mse_loss(call: Call) -> list[Out | None]:
    """``mse_loss(self, target, reduction=mean)``."""
    a, b = call.args[0], call.args[1]
    reduction = int(call.arg(2, "reduction", 1))
    name = call.out_dtypes[0]
    sq = _sq(a, b, name)
    if reduction == 0:
        return [exact(sq)]
    v = sq.astype(np.float64)
    k = max(v.size, 1)
    u = 2.0**-53 if name == "float64" else U
    total = float(np.sum(v))
    err = (k - 1) * u / (1 - (k - 1) * u) * float(np.sum(np.abs(v))) + k * 2.0**-52 * abs(total)
    if reduction == 1:  # the mean: sum / N, or sum * (1/N): one more rounding each
        total, err = total / k, err / k + 2 * u * (abs(total) / k + err / k)
    return [bounded(to(np.asarray(total), name), err, "vectorised sum order: gamma_{K-1}*sum|x|",
                    center=np.asarray(total))]  # fmt: skip


@quiet("aten.mse_loss_backward.default")
def mse_loss_backward(call: Call) -> list[Out | None]:
    """``norm * (a - b) * grad``, ``norm = 2/N`` (mean) or 2, in the tensor's type."""
    g, a, b = call.args[0], call.args[1], call.args[2]
    reduction = int(call.args[3])
    name = call.out_dtypes[0]
    cdt = np.float64 if name == "float64" else np.float32
    n = a.size if reduction == 1 else 1
    norm = to(np.asarray([2.0 / n]), name).astype(cdt)[0]
    d = a.astype(cdt) - b.astype(cdt)
    if name in LOW:
        d = to(d, name).astype(cdt)
        return [exact(to(to(norm * d, name).astype(cdt) * np.asarray(g).astype(cdt), name))]
    return [exact(to((norm * d) * np.asarray(g).astype(cdt), name))]
