"""Emulations of torch's CPU 2-D pooling kernels, exact; registered by
:mod:`fpemu.validate.ops.conv` (it imports this module).

torch 2.13 CPU (``MaxPoolKernel.cpp``, ``AvgPoolKernel.cpp``, ``AdaptiveAvgPoolKernel.cpp``),
measured against these emulations (tests/test_ops_pooling.py):

* ``max_pool2d_with_indices``: each window is scanned row-major from its first in-bounds element
  (padding never wins); an element replaces the running maximum when it is greater or NaN (ties
  keep the first; a NaN wins); the index is ``h * W + w`` in the input plane.
* ``max_pool2d_with_indices_backward``: every grad_output element is added to the input element
  its index names, in output order, in float32 and rounded to the gradient format per addition.
* ``avg_pool2d``: the window (clipped to the padded input, then to the input) is summed row-major
  in float32 (opmath), then divided once by the divisor (``divisor_override``, else the window
  size with or without padding per ``count_include_pad``).
* ``avg_pool2d_backward``: ``grad_output / divisor`` (rounded to the gradient format: scalar
  arithmetic in bfloat16/float16) added to every element of its window, in output order,
  rounded to the gradient format per addition.
* ``_adaptive_avg_pool2d``: window ``[floor(i*H/O), ceil((i+1)*H/O))``, float32 row-major sum,
  then ``sum / kh / kw`` (two divisions); its backward adds ``grad / kh / kw`` likewise (each
  quotient rounded to the gradient format; measured: a float32 quotient differs in bf16/fp16).

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> x = np.float32([[[[1, 5], [5, 2]]]])
>>> call = Call("aten.max_pool2d_with_indices.default", (x, [2, 2]), {}, ("float32", "int64"))
>>> out, idx = lookup("aten.max_pool2d_with_indices.default")(call)
>>> out.value.ravel().tolist(), idx.value.ravel().tolist()
([5.0], [1])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, exact, register
from fpemu.validate.ops._num import dtype, to

__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]

_F = np.float32


def _pair(v: Any, default: Any = None) -> tuple[int, int]:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    if isinstance(v, (list, tuple)):
        return (int(v[0]), int(v[-1]))
    return (int(v), int(v))


def _out_size(n: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """torch's pooling_output_shape."""
    span = n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)
    out = span // s + 1
    if ceil and (out - 1) * s >= n + p:
        out -= 1
    return out


def _planes(x: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    """(planes, H, W) float32 view of an (N, C, H, W) or (C, H, W) input, and the lead shape."""
    lead = x.shape[:-2]
    return np.asarray(x, _F).reshape(-1, x.shape[-2], x.shape[-1]), lead


def _max_args(call: Call) -> tuple[Any, ...]:
    k = _pair(call.arg(1, "kernel_size"))
    s = _pair(call.arg(2, "stride", []), k)
    p = _pair(call.arg(3, "padding", 0))
    d = _pair(call.arg(4, "dilation", 1))
    return k, s, p, d, bool(call.arg(5, "ceil_mode", False))


def _axis_windows(n: int, o: int, k: int, s: int, p: int, d: int) -> tuple[Any, Any]:
    """Per output position: the input positions of the kernel taps and whether in bounds."""
    start = np.arange(o)[:, None] * s - p + np.arange(k)[None, :] * d
    return start, (start >= 0) & (start < n)


@register("aten.max_pool2d_with_indices.default")
def max_pool2d(call: Call) -> list[Out | None]:
    """``max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode)``."""
    x = call.arg(0, "self")
    (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil = _max_args(call)
    xp, lead = _planes(x)
    h, w = xp.shape[1:]
    oh, ow = _out_size(h, kh, sh, ph, dh, ceil), _out_size(w, kw, sw, pw, dw, ceil)
    rows, rok = _axis_windows(h, oh, kh, sh, ph, dh)
    cols, cok = _axis_windows(w, ow, kw, sw, pw, dw)
    best = np.full((xp.shape[0], oh, ow), -np.inf, _F)
    # the first in-bounds tap starts the index (kept when nothing beats -inf)
    r0 = rows[np.arange(oh), np.argmax(rok, axis=1)]
    c0 = cols[np.arange(ow), np.argmax(cok, axis=1)]
    idx = np.broadcast_to(r0[:, None] * w + c0[None, :], best.shape).astype(np.int64).copy()
    for i in range(kh):
        for j in range(kw):
            ok = rok[:, i][:, None] & cok[:, j][None, :]
            r = np.clip(rows[:, i], 0, h - 1)
            c = np.clip(cols[:, j], 0, w - 1)
            val = xp[:, r[:, None], c[None, :]]
            take = ok[None] & ((val > best) | np.isnan(val))
            best = np.where(take, val, best)
            idx = np.where(take, (r[:, None] * w + c[None, :])[None], idx)
    shape = (*lead, oh, ow)
    return [exact(to(best, call.out_dtypes[0]).reshape(shape)), exact(idx.reshape(shape))]


def _scatter_add(grad: np.ndarray, targets: np.ndarray, size: int, name: str) -> np.ndarray:
    """Add grad[p, k] into acc[p, targets[p, k]] for k in order, rounding to ``name`` per add
    (sequential per plane: a target hit twice gets its additions in output order)."""
    planes = grad.shape[0]
    acc = np.zeros((planes, size), dtype(name))
    g = grad.astype(_F)
    rowsel = np.arange(planes)
    srt = np.sort(targets, axis=1)
    if targets.shape[1] < 2 or bool((srt[:, 1:] != srt[:, :-1]).all()):
        # every target hit once (non-overlapping windows): one vectorised +0 + g
        acc[rowsel[:, None], targets] = to((np.zeros_like(g) + g).astype(_F), name)
        return acc
    for k in range(grad.shape[1]):
        t = targets[:, k]
        acc[rowsel, t] = to((acc[rowsel, t].astype(_F) + g[:, k]).astype(_F), name)
    return acc


@register("aten.max_pool2d_with_indices_backward.default")
def max_pool2d_backward(call: Call) -> list[Out | None]:
    """``max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
    dilation, ceil_mode, indices)``: the scatter-add in output order, exact."""
    go = np.asarray(call.arg(0, "grad_output"))
    x = call.arg(1, "self")
    ind = np.asarray(call.arg(7, "indices")).astype(np.int64)
    h, w = x.shape[-2:]
    g2 = go.reshape(-1, go.shape[-2] * go.shape[-1])
    acc = _scatter_add(g2, ind.reshape(g2.shape), h * w, call.out_dtypes[0])
    return [exact(acc.reshape(x.shape))]


def _avg_windows(n: int, o: int, k: int, s: int, p: int) -> tuple[Any, ...]:
    start = np.arange(o) * s - p
    end = np.minimum(start + k, n + p)
    size = end - start
    return np.maximum(start, 0), np.minimum(end, n), size


def _avg_args(call: Call) -> tuple[Any, ...]:
    k = _pair(call.arg(1, "kernel_size"))
    s = _pair(call.arg(2, "stride", []), k)
    p = _pair(call.arg(3, "padding", 0))
    return k, s, p, bool(call.arg(4, "ceil_mode", False)), bool(
        call.arg(5, "count_include_pad", True)), call.arg(6, "divisor_override")  # fmt: skip


def _avg_geometry(call: Call, h: int, w: int) -> tuple[Any, ...]:
    (kh, kw), (sh, sw), (ph, pw), ceil, include, override = _avg_args(call)
    oh, ow = _out_size(h, kh, sh, ph, 1, ceil), _out_size(w, kw, sw, pw, 1, ceil)
    h0, h1, hsz = _avg_windows(h, oh, kh, sh, ph)
    w0, w1, wsz = _avg_windows(w, ow, kw, sw, pw)
    if override:
        div = np.full((oh, ow), int(override))
    elif include:
        div = hsz[:, None] * wsz[None, :]
    else:
        div = (h1 - h0)[:, None] * (w1 - w0)[None, :]
    return oh, ow, h0, h1, w0, w1, div


def _window_taps(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions, valid) per output along one axis, padded to the widest window."""
    width = int(max(1, (hi - lo).max(initial=1)))
    pos = lo[:, None] + np.arange(width)[None, :]
    return np.minimum(pos, np.maximum(hi - 1, 0)[:, None]), pos < hi[:, None]


def _window_sum(xp: np.ndarray, h0: Any, h1: Any, w0: Any, w1: Any) -> np.ndarray:
    """float32 row-major sums of every window (sequential, as the kernel's scalar loop)."""
    rows, rv = _window_taps(h0, h1)
    cols, cv = _window_taps(w0, w1)
    acc = np.zeros((xp.shape[0], len(h0), len(w0)), _F)
    for i in range(rows.shape[1]):
        for j in range(cols.shape[1]):
            ok = rv[:, i][:, None] & cv[:, j][None, :]
            val = xp[:, rows[:, i][:, None], cols[:, j][None, :]]
            acc = np.where(ok[None], (acc + val).astype(_F), acc)
    return acc


@register("aten.avg_pool2d.default")
def avg_pool2d(call: Call) -> list[Out | None]:
    """``avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad,
    divisor_override)``: float32 window sum, one division, exact."""
    x = call.arg(0, "self")
    xp, lead = _planes(x)
    h, w = xp.shape[1:]
    oh, ow, h0, h1, w0, w1, div = _avg_geometry(call, h, w)
    with np.errstate(all="ignore"):
        out = (_window_sum(xp, h0, h1, w0, w1) / div.astype(_F)).astype(_F)
    empty = ((h1 - h0) <= 0)[:, None] | ((w1 - w0) <= 0)[None, :]
    out = np.where(empty[None], _F(0), out)
    return [exact(to(out, call.out_dtypes[0]).reshape(*lead, oh, ow))]


def _spread(go: np.ndarray, delta: np.ndarray, h0: Any, h1: Any, w0: Any, w1: Any, h: int,
            w: int, name: str) -> np.ndarray:  # fmt: skip
    """Add ``delta`` of every output to each element of its window, in output order then
    window order, rounded to ``name`` per addition."""
    rows, rv = _window_taps(h0, h1)
    cols, cv = _window_taps(w0, w1)
    oh, ow = len(h0), len(w0)
    targets, deltas = [], []
    for a in range(oh):
        for b in range(ow):
            for i in range(rows.shape[1]):
                for j in range(cols.shape[1]):
                    if rv[a, i] and cv[b, j]:
                        targets.append(rows[a, i] * w + cols[b, j])
                        deltas.append(a * ow + b)
    planes = go.shape[0]
    t = np.broadcast_to(np.asarray(targets, np.int64), (planes, len(targets)))
    g = delta.reshape(planes, -1)[:, np.asarray(deltas, np.int64)]
    return _scatter_add(g, t, h * w, name)


@register("aten.avg_pool2d_backward.default")
def avg_pool2d_backward(call: Call) -> list[Out | None]:
    """``avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
    count_include_pad, divisor_override)``: grad / divisor spread in order, exact."""
    go = np.asarray(call.arg(0, "grad_output"))
    x = call.arg(1, "self")
    h, w = x.shape[-2:]
    sub = Call(call.op, (x, *call.args[2:]), {}, call.out_dtypes, call.capability)
    oh, ow, h0, h1, w0, w1, div = _avg_geometry(sub, h, w)
    g = np.asarray(go, _F).reshape(-1, oh, ow)
    name = call.out_dtypes[0]
    with np.errstate(all="ignore"):  # scalar_t arithmetic: the quotient is rounded to the format
        delta = to((g / div.astype(_F)).astype(_F), name).astype(_F)
    acc = _spread(g, delta, h0, h1, w0, w1, h, w, name)
    return [exact(acc.reshape(x.shape))]


def _adaptive(n: int, o: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(o)
    return (i * n) // o, ((i + 1) * n + o - 1) // o


@register("aten._adaptive_avg_pool2d.default")
def adaptive_avg_pool2d(call: Call) -> list[Out | None]:
    """``_adaptive_avg_pool2d(self, output_size)``: float32 window sum / kh / kw, exact."""
    x = call.arg(0, "self")
    oh, ow = _pair(call.arg(1, "output_size"))
    xp, lead = _planes(x)
    h, w = xp.shape[1:]
    h0, h1 = _adaptive(h, oh)
    w0, w1 = _adaptive(w, ow)
    with np.errstate(all="ignore"):
        s = _window_sum(xp, h0, h1, w0, w1)
        out = ((s / (h1 - h0).astype(_F)[:, None]).astype(_F) / (w1 - w0).astype(_F)).astype(_F)
    return [exact(to(out, call.out_dtypes[0]).reshape(*lead, oh, ow))]


@register("aten._adaptive_avg_pool2d_backward.default")
def adaptive_avg_pool2d_backward(call: Call) -> list[Out | None]:
    """``_adaptive_avg_pool2d_backward(grad_output, self)``: grad / kh / kw spread, exact."""
    go = np.asarray(call.arg(0, "grad_output"))
    x = call.arg(1, "self")
    h, w = x.shape[-2:]
    oh, ow = go.shape[-2:]
    h0, h1 = _adaptive(h, oh)
    w0, w1 = _adaptive(w, ow)
    g = np.asarray(go, _F).reshape(-1, oh, ow)
    name = call.out_dtypes[0]
    with np.errstate(all="ignore"):  # scalar_t arithmetic: each quotient rounded to the format
        d1 = to((g / (h1 - h0).astype(_F)[:, None]).astype(_F), name).astype(_F)
        delta = to((d1 / (w1 - w0).astype(_F)).astype(_F), name).astype(_F)
    acc = _spread(g, delta, h0, h1, w0, w1, h, w, name)
    return [exact(acc.reshape(x.shape))]
