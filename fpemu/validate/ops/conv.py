"""Emulations of torch's CPU convolution (``convolution``, ``convolution_backward``), bounded;
pooling lives in the private module ``_pooling`` (imported below to register it).

torch 2.13 CPU dispatches ``nn.Conv1d/2d/3d`` as ``aten.convolution.default`` and its gradient
as ``aten.convolution_backward.default`` (measured with a dispatch mode, float32 and under
bfloat16/float16 autocast); the work is done by oneDNN (mkldnn) or a im2col + GEMM fallback,
whose summation order is not specified. The center is the float64 convolution (one einsum per
kernel offset); the bound is float32 accumulation of the K = Cin/groups * prod(kernel) products
(plus the bias) in any order: |err| <= g_{K+1} (sum |x||w| + |b|) with g_k = (1+2^-24)^k - 1,
the products of bfloat16/float16 inputs being exact in float32 and accumulated in float32
(measured: the bias is added before the one rounding to the output format, see the tests).
Low-precision oneDNN kernels treat subnormals as zero, so each term may also lose 2^-126
(bfloat16) / 2^-14 (float16) times its other factor, and a subnormal result may flush. The
float64 center's own error (<= K 2^-53 of the magnitudes) is covered by widening the bound by
(1 + 2^-20).

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> x = np.float32([[[1.0, 2.0, 3.0]]]); w = np.float32([[[1.0, -1.0]]])
>>> call = Call("aten.convolution.default", (x, w, None, [1], [0], [1], False, [0], 1), {},
...             ("float32",))
>>> out = lookup("aten.convolution.default")(call)[0]
>>> out.value.tolist(), out.exact
([[[-1.0, -1.0]]], False)
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, register
from fpemu.validate.ops._fma import gamma
from fpemu.validate.ops._num import to

__all__ = ["convolution", "convolution_backward"]

_SLACK = 1.0 + 2.0**-20
_UFL = 2.0**-150  # float32 underflow: half the smallest subnormal per operation
_FLUSH = {"bfloat16": 2.0**-126, "float16": 2.0**-14}


def _geometry(x: np.ndarray, w: np.ndarray, stride: Any, padding: Any, dilation: Any) -> Any:
    nd = x.ndim - 2
    s, p, d = (list(v) * nd if len(v) == 1 else list(v) for v in (stride, padding, dilation))
    k = w.shape[2:]
    out = [(x.shape[2 + i] + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] + 1 for i in range(nd)]
    return s, p, d, k, out


def _windows(xp: np.ndarray, off: tuple[int, ...], s: list[int], d: list[int],
             out: list[int]) -> np.ndarray:  # fmt: skip
    """The input elements kernel offset ``off`` meets at every output position."""
    idx = tuple(slice(o * dd, o * dd + ss * (n - 1) + 1, ss) for o, dd, ss, n in
                zip(off, d, s, out, strict=True))  # fmt: skip
    key: Any = (slice(None), slice(None), *idx)
    return np.asarray(xp[key])


def _conv(x: np.ndarray, w: np.ndarray, s: list[int], p: list[int], d: list[int],
          out: list[int], groups: int) -> np.ndarray:  # fmt: skip
    """float64 convolution: for each kernel offset, a grouped channel contraction."""
    n, cin = x.shape[:2]
    cout = w.shape[0]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(q, q) for q in p])
    res = np.zeros((n, cout, *out))
    cg, og = cin // groups, cout // groups
    for off in itertools.product(*(range(k) for k in w.shape[2:])):
        win = _windows(xp, off, s, d, out).reshape(n, groups, cg, -1)
        at: Any = (slice(None), slice(None), *off)
        wk = w[at].reshape(groups, og, cg)
        res += np.einsum("gkc,ngcp->ngkp", wk, win).reshape(n, cout, *out)
    return res


def _flush(name: str) -> float:
    return _FLUSH.get(name, 0.0)


@register("aten.convolution.default")
def convolution(call: Call) -> list[Out | None]:
    """``convolution(input, weight, bias?, stride, padding, dilation, transposed,
    output_padding, groups)``, bounded (see the module docstring). Transposed convolutions are
    not emulated (NotImplementedError: the watcher reports them as not emulated)."""
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed",
             "output_padding", "groups")  # fmt: skip
    x, w, b, stride, padding, dilation, transposed, _, groups = (
        call.arg(i, n) for i, n in enumerate(names))  # fmt: skip
    if transposed:
        raise NotImplementedError("transposed convolution is not emulated")
    xf, wf = np.asarray(x, np.float64), np.asarray(w, np.float64)
    s, p, d, k, out = _geometry(xf, wf, stride, padding, dilation)
    g = int(groups)
    kk = (xf.shape[1] // g) * math.prod(k)
    y = _conv(xf, wf, s, p, d, out, g)
    mag = _conv(np.abs(xf), np.abs(wf), s, p, d, out, g)
    name = call.out_dtypes[0]
    fl = _flush(name)
    # a flushed input element loses |x| <= fl times |w| (and vice versa); for bfloat16 (fl =
    # 2^-126) the cheap scalar K fl (max|x| + max|w|) is as good, for float16 per output
    if fl and name == "bfloat16":
        tiny: Any = (
            fl * kk * (float(np.abs(xf).max(initial=0.0)) + float(np.abs(wf).max(initial=0.0)))
        )
    elif fl:
        tiny = _conv(np.full_like(xf, fl), np.abs(wf), s, p, d, out, g)
        tiny = tiny + _conv(np.abs(xf), np.full_like(wf, fl), s, p, d, out, g)
    else:
        tiny = 0.0
    shp = (1, -1) + (1,) * len(out)
    if b is not None:
        bf = np.asarray(b, np.float64).reshape(shp)
        y = y + bf
        mag = mag + np.abs(bf)
    err = (gamma(kk + 1) * mag + tiny + (kk + 2) * _UFL + fl) * _SLACK
    reason = (f"convolution: float32 accumulation of K={kk} products (+ bias) in an unspecified "
              "order, g_{K+1} sum|x||w|")  # fmt: skip
    return [bounded(to(y, name), err, reason, center=y)]


@register("aten.convolution_backward.default")
def convolution_backward(call: Call) -> list[Out | None]:
    """``convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding,
    dilation, transposed, output_padding, groups, output_mask)``, bounded.

    grad_input[n, ci, i] = sum over (co in the group, kernel offsets reaching i) of dy w: at
    most K_in = Cout/groups * prod(kernel) terms, g_{K_in} sum |dy||w|; grad_weight[co, ci, k]
    = sum over (n, output positions) of dy x: K_w = N * prod(out) terms, g_{K_w} sum |dy||x|;
    grad_bias = sum over (n, positions) of dy: g_{K_w} sum |dy|. Flushed low-precision
    subnormals and float32 underflow as for the forward.
    """
    names = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation",
             "transposed", "output_padding", "groups", "output_mask")  # fmt: skip
    dy, x, w, _, stride, padding, dilation, transposed, _, groups, mask = (
        call.arg(i, n) for i, n in enumerate(names))  # fmt: skip
    if transposed:
        raise NotImplementedError("transposed convolution is not emulated")
    dyf, xf, wf = (np.asarray(a, np.float64) for a in (dy, x, w))
    s, p, d, k, out = _geometry(xf, wf, stride, padding, dilation)
    g = int(groups)
    n, cin = xf.shape[:2]
    cout = wf.shape[0]
    cg, og = cin // g, cout // g
    names_out = iter(call.out_dtypes)
    outs: list[Out | None] = []
    if mask[0]:
        name = next(names_out)
        fl = _flush(name)
        gi, mag = _input_grad(dyf, wf, xf.shape, s, p, d, out, g)
        tiny = 0.0
        if fl:
            a1, _ = _input_grad(np.full_like(dyf, fl), np.abs(wf), xf.shape, s, p, d, out, g)
            a2, _ = _input_grad(np.abs(dyf), np.full_like(wf, fl), xf.shape, s, p, d, out, g)
            tiny = a1 + a2
        kk = og * math.prod(k)
        err = (gamma(kk + 1) * mag + tiny + (kk + 2) * _UFL + fl) * _SLACK
        outs.append(bounded(to(gi, name), err, f"conv grad_input: {kk} terms per element",
                            center=gi))  # fmt: skip
    terms = n * math.prod(out)
    if mask[1]:
        name = next(names_out)
        fl = _flush(name)
        xp = np.pad(xf, [(0, 0), (0, 0)] + [(q, q) for q in p])
        gw = np.zeros_like(wf)
        mag = np.zeros_like(wf)
        tiny_w = np.zeros_like(wf)
        dyg = dyf.reshape(n, g, og, -1)
        for off in itertools.product(*(range(kq) for kq in k)):
            win = _windows(xp, off, s, d, out).reshape(n, g, cg, -1)
            sel: Any = (slice(None), slice(None), *off)
            gw[sel] = np.einsum("ngkp,ngcp->gkc", dyg, win).reshape(cout, cg)
            mag[sel] = np.einsum("ngkp,ngcp->gkc", np.abs(dyg), np.abs(win)).reshape(cout, cg)
            if fl:
                t = np.einsum("ngkp,ngcp->gkc", np.abs(dyg) + fl, np.abs(win) + fl)
                tiny_w[sel] = t.reshape(cout, cg) - mag[sel]
        err = (gamma(terms + 1) * mag + tiny_w + (terms + 2) * _UFL + fl) * _SLACK
        outs.append(bounded(to(gw, name), err, f"conv grad_weight: {terms} terms per element",
                            center=gw))  # fmt: skip
    if mask[2]:
        name = next(names_out)
        axes = tuple(i for i in range(dyf.ndim) if i != 1)
        gb = dyf.sum(axis=axes)
        err = (gamma(terms + 1) * np.abs(dyf).sum(axis=axes) + (terms + 2) * _UFL) * _SLACK
        outs.append(bounded(to(gb, name), err, f"conv grad_bias: {terms} terms", center=gb))
    return outs


def _input_grad(dy: np.ndarray, w: np.ndarray, shape: tuple[int, ...], s: list[int],
                p: list[int], d: list[int], out: list[int], g: int) -> tuple[Any, Any]:  # fmt: skip
    """float64 grad_input (the transposed convolution) and its magnitude sum |dy||w|."""
    n, cin = shape[:2]
    cout = w.shape[0]
    cg, og = cin // g, cout // g
    padded = [shape[2 + i] + 2 * p[i] for i in range(len(out))]
    gi = np.zeros((n, cin, *padded))
    mag = np.zeros((n, cin, *padded))
    dyg = dy.reshape(n, g, og, -1)
    for off in itertools.product(*(range(kq) for kq in w.shape[2:])):
        at: Any = (slice(None), slice(None), *off)
        wk = w[at].reshape(g, og, cg)
        idx = tuple(slice(o * dd, o * dd + ss * (m - 1) + 1, ss) for o, dd, ss, m in
                    zip(off, d, s, out, strict=True))  # fmt: skip
        sel: Any = (slice(None), slice(None), *idx)
        gi[sel] += np.einsum("gkc,ngkp->ngcp", wk, dyg).reshape(n, cin, *out)
        mag[sel] += np.einsum("gkc,ngkp->ngcp", np.abs(wk), np.abs(dyg)).reshape(n, cin, *out)
    crop: Any = (slice(None), slice(None), *(slice(q, q + shape[2 + i]) for i, q in enumerate(p)))
    return gi[crop], mag[crop]


# pooling emulations live in their own module (size); importing it registers them
from fpemu.validate.ops import _pooling  # noqa: E402, F401
