"""Emulations of torch's CPU embedding kernels: the lookup and its dense gradient, both exact.

torch 2.13 CPU ``embedding_dense_backward`` (``Embedding.cpp``): the gradient table starts at
+0 and, for every weight row ``k``, the gradient rows of the positions holding index ``k`` are
added one at a time in ascending position order (``add_kernel``: float32 opmath, the sum
rounded to the gradient's format after every addition: bfloat16/float16 round per add).
Positions holding ``padding_idx`` are skipped. The order is pinned, so the result is exact.
With ``scale_grad_by_freq`` each addition is ``acc + (1/count) * g``: in float32 the scale is
the double ``1/count`` rounded to float32 and the SIMD builds fuse the multiply-add (exact,
proved); for bfloat16/float16 the kernel's handling of the scale was not pinned (neither a
float32 nor a low-format scale, fused or not, matches), so those are bounded.

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> g = np.float32([[1.0], [2.0], [4.0]])
>>> call = Call("aten.embedding_dense_backward.default", (g, np.int64([1, 0, 1]), 3, -1, False),
...             {}, ("float32",))
>>> lookup("aten.embedding_dense_backward.default")(call)[0].value.ravel().tolist()
[2.0, 5.0, 0.0]
"""

from __future__ import annotations

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact, register
from fpemu.validate.ops._fma import gamma, mad
from fpemu.validate.ops._num import dtype, to

__all__ = ["embedding", "embedding_dense_backward"]


@register("aten.embedding.default")
def embedding(call: Call) -> list[Out | None]:
    """``embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)``: a gather of
    whole rows (no arithmetic), exact."""
    w = np.asarray(call.arg(0, "weight"))
    idx = np.asarray(call.arg(1, "indices"))
    return [exact(np.take(w, idx.astype(np.int64), axis=0))]


def _ranks(sorted_idx: np.ndarray) -> np.ndarray:
    """Occurrence number of every entry of a sorted index array within its run of equals.

    >>> _ranks(np.int64([0, 0, 2, 5, 5, 5])).tolist()
    [0, 1, 0, 0, 1, 2]
    """
    start = np.r_[True, sorted_idx[1:] != sorted_idx[:-1]] if sorted_idx.size else np.zeros(0, bool)
    group = np.cumsum(start) - 1
    return np.asarray(np.arange(sorted_idx.size) - np.flatnonzero(start)[group], np.int64)


@register("aten.embedding_dense_backward.default")
def embedding_dense_backward(call: Call) -> list[Out | None]:
    """``embedding_dense_backward(grad_output, indices, num_weights, padding_idx,
    scale_grad_by_freq)``: the kernel's per-row sequential sum in position order, exact."""
    grad = np.asarray(call.arg(0, "grad_output"))
    idx = np.asarray(call.arg(1, "indices")).astype(np.int64).ravel()
    num = int(call.arg(2, "num_weights"))
    pad = int(call.arg(3, "padding_idx"))
    by_freq = bool(call.arg(4, "scale_grad_by_freq"))
    name = call.out_dtypes[0]
    width = grad.shape[-1] if grad.ndim else 1
    g = np.asarray(grad, np.float32).reshape(idx.size, width)
    keep = idx != pad
    pos = np.flatnonzero(keep)
    order = pos[np.argsort(idx[pos], kind="stable")]  # ascending index, then position
    rows = idx[order]
    rank = _ranks(rows)
    acc = np.zeros((num, width), dtype(name))
    scale: np.ndarray | None = None
    if by_freq:
        counts = np.bincount(idx, minlength=num)
        # the kernel's double 1/count, converted to float32 for the float32 add
        scale = (1.0 / counts[rows].astype(np.float64)).astype(np.float32)[:, None]
    fused = call.capability != "default"
    with np.errstate(over="ignore", invalid="ignore"):
        for r in range(int(rank.max()) + 1 if rank.size else 0):
            sel = rank == r
            k = rows[sel]
            terms = g[order[sel]]
            a32 = acc[k].astype(np.float32)
            if scale is None:
                total = (a32 + terms).astype(np.float32)
            else:
                total = mad(terms, scale[sel], a32, fused=fused)
            acc[k] = to(total, name)
    if by_freq and name != "float32":
        # count additions of scale*g, each step (scale, product, sum, rounding to the format)
        # within unit u of its magnitude: |err| <= gamma_{count+3}(u) * sum |g| / count
        u = 2.0**-8 if name == "bfloat16" else 2.0**-11
        cnt = np.bincount(rows, minlength=num).astype(np.float64)[:, None]
        mag = np.zeros((num, width))
        np.add.at(mag, rows, np.abs(g[order].astype(np.float64)))
        center = np.zeros((num, width))
        np.add.at(center, rows, g[order].astype(np.float64))
        safe = np.maximum(cnt, 1.0)
        err = gamma(cnt + 3, u) * mag / safe
        reason = "scale_grad_by_freq in a low format: count additions, gamma_{count+3}(u)"
        return [bounded(acc, err, reason, center=center / safe)]
    return [exact(acc)]
