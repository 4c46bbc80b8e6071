"""Emulations of torch's CPU normalisation kernels: layer norm (forward exact, backward bounded)
and batch norm.

torch 2.13 CPU ``native_layer_norm`` (``layer_norm_kernel.cpp`` + ``moments_utils.h``), measured:

* mean and variance come from ``RowwiseMoments``: a Welford update per SIMD lane over chunks of
  16 vectors (``m1 += delta / (j + 1)``, ``m2 += delta * (x - m1)``), chunk results merged by a
  cascade (binary counter) with ``AddMomentsVec``, the elements past the last whole vector by a
  scalar Welford loop, then the 8 lanes merged into it by ``AddMoments``. The lanes are 8 float32
  on every capability (a bfloat16/float16 vector is 16 elements, split into two float halves,
  each merged in turn). The ``default`` build rounds every operation; the SIMD builds (avx2,
  avx512) fuse the ``fmadd`` calls, the scalar ``AddMoments`` products into the adds, and the
  output expressions; the scalar tail loop is fused only in the float16 instantiation.
* ``rstd = 1 / sqrt(var + eps)`` in float32 (``eps`` rounded to float32).
* float32: ``y = ((x - mean) * rstd) * gamma + beta``; bfloat16/float16 (with float32 or
  low-precision weights): ``y = (x * rstd + (-rstd * mean)) * gamma + beta`` in float32,
  rounded once to the input format; mean/rstd are stored in the weights' format.

Because x - mean cancels, torch's float32 result can be far (E5: 71,877 ulp) from the correctly
rounded layer norm; this emulation reproduces the kernel's rounding sequence instead, and the
tests prove bit equality on all three capabilities.

``native_layer_norm_backward``: for float32 the input gradient is exact: ``ds = sum(dy*x*w)``
and ``db = sum(dy*w)`` on 8 lanes (the partial last vector fused into the accumulator on the
SIMD builds), reduced by the AVX2 shuffle tree (``default``: lane by lane), then
``b = (db*mean - ds)*rstd^3/N``, ``c = -b*mean - db*rstd/N``, ``dx = (b*x + rstd*dy*w) + c``
with the first multiply-add of each fused on the SIMD builds (measured on avx512, avx2,
default). The weight and bias gradients are sums over rows per thread, so they depend on
torch's thread count: given ``Call.options["num_threads"]`` (torch.get_num_threads() when the
op ran) they are exact (:func:`_layer_norm_dwdb`, every dtype), otherwise bounded. The
bfloat16/float16 input gradient (a different mixed-type kernel, not pinned: float16 on the SIMD
builds matched no candidate order) is bounded. The bounds are derived below.

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> x = np.float32([[1.0, 2.0, 3.0, 4.0]])
>>> call = Call("aten.native_layer_norm.default", (x, [4], None, None, 1e-5), {},
...             ("float32", "float32", "float32"), capability="avx2")
>>> y, mean, rstd = lookup("aten.native_layer_norm.default")(call)
>>> mean.value.tolist(), y.exact
([[2.5]], True)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact, lazy, register
from fpemu.validate.ops._fma import U32, gamma, mad
from fpemu.validate.ops._ln_grads import _layer_norm_dwdb, _layer_norm_dx_f32
from fpemu.validate.ops._moments import row_moments
from fpemu.validate.ops._num import to

__all__ = ["layer_norm", "layer_norm_backward", "row_moments"]

_F = np.float32


def _args(call: Call, *names: str) -> list[Any]:
    """The call's arguments by schema position and name."""
    return [call.arg(i, n) for i, n in enumerate(names)]


def _split(x: np.ndarray, shape: Any) -> tuple[int, int]:
    k = len(shape)
    n = int(math.prod(shape))
    m = int(math.prod(x.shape[: x.ndim - k]))
    return m, n


@register("aten.native_layer_norm.default")
def layer_norm(call: Call) -> list[Out | None]:
    """``native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)``:
    torch's float32 rounding sequence (see the module docstring), exact."""
    x, shape, w, b, eps = _args(call, "input", "normalized_shape", "weight", "bias", "eps")
    rows, cols = _split(x, shape)
    low = x.dtype != np.float32
    fused = call.capability != "default"
    x2 = np.asarray(x, _F).reshape(rows, cols)
    mean, var = row_moments(x2, low=low, capability=call.capability,
                            tail_fused=x.dtype == np.float16)  # fmt: skip
    with np.errstate(divide="ignore", invalid="ignore"):
        rstd = (_F(1) / np.sqrt((var + _F(eps)).astype(_F))).astype(_F)
    g = np.ones(cols, _F) if w is None else np.asarray(w, _F).reshape(cols)
    bb = np.zeros(cols, _F) if b is None else np.asarray(b, _F).reshape(cols)
    with np.errstate(all="ignore"):
        if low:
            bias = (-rstd * mean).astype(_F)
            t = mad(x2, rstd[:, None], bias[:, None], fused=fused)
        else:
            t = (x2 + (-mean)[:, None]) * rstd[:, None]  # float32 operands: float32 roundings
        y = mad(t, g, bb, fused=fused)
    stat_shape = x.shape[: x.ndim - len(shape)] + (1,) * len(shape)
    ynames = call.out_dtypes
    return [exact(to(y, ynames[0]).reshape(x.shape)),
            exact(to(mean, ynames[1]).reshape(stat_shape)),
            exact(to(rstd, ynames[2]).reshape(stat_shape))]  # fmt: skip


_REASON_DX = ("layer_norm_backward dX: float32 row sums ds=sum(dy*x*w), db=sum(dy*w) in SIMD-lane "
              "order, then b=(db*mean-ds)*rstd^3/N, c=-b*mean-db*rstd/N, dx=rstd*dy*w+b*x+c; "
              "bound: gamma_{N+2} on the sums propagated through b, c, dx (+gamma_7, gamma_4, "
              "gamma_5 for their own roundings)")  # fmt: skip
_REASON_DW = ("layer_norm_backward dweight/dbias: per-thread row sums in the input's format "
              "(bfloat16/float16 buffers round every row), then a float32 sum over threads; "
              "bound ((1+u_in)^M (1+u32)^(2M+3) - 1) * sum of |terms|")  # fmt: skip


def _unit(name: str) -> float:
    return {"float32": U32, "bfloat16": 2.0**-8, "float16": 2.0**-11}.get(name, U32)


@register("aten.native_layer_norm_backward.default")
def layer_norm_backward(call: Call) -> list[Out | None]:
    """``native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?,
    bias?, output_mask) -> (grad_input?, grad_weight?, grad_bias?)``: float32 grad_input exact
    (:func:`_layer_norm_dx_f32`); grad_weight/grad_bias exact when ``call.options`` carries
    ``num_threads`` (:func:`_layer_norm_dwdb`); the rest bounded.

    Derivation (u = 2^-24, g_k = (1+u)^k - 1, a = rstd, s = float32(1/N); mean, rstd, x, dy,
    w are the kernel's exact inputs): the float32 sums ds, db of N products (two roundings per
    term, N-1 additions in any order) err by e_ds <= g_{N+2} sum|dy x w|, e_db <= g_{N+1}
    sum|dy w|. b = (db*mean - ds)*a*a*a*s (6 roundings): |db - b| <= a^3 s ((|mean| e_db +
    e_ds)(1+g_7) + g_7 (|db mean| + |ds|)) =: Eb. c = -b*mean - db*a*s (4 roundings): Ec =
    (Eb |mean| + e_db a s)(1+g_4) + g_4 (|b mean| + |db| a s). dx = a*dy*w + b*x + c (at most 5
    roundings, fused or not): Edx = (Eb |x| + Ec)(1+g_5) + g_5 (|a dy w| + |b x| + |c|).
    dweight_j = sum_i dy_ij (a_i x_ij + b_i) with b_i = float32(-a_i mean_i): see _REASON_DW.
    """
    dy, x, shape, mean, rstd, w, b, mask = _args(
        call, "grad_out", "input", "normalized_shape", "mean", "rstd", "weight", "bias",
        "output_mask",
    )  # fmt: skip
    rows, cols = _split(x, shape)

    def wide(v: Any) -> np.ndarray:  # float64 copies only for the bounded outputs
        return np.asarray(v, np.float64).reshape(rows, cols)

    mu = np.asarray(mean, np.float64).reshape(rows, 1)
    a = np.asarray(rstd, np.float64).reshape(rows, 1)
    g = np.ones((1, cols)) if w is None else np.asarray(w, np.float64).reshape(1, cols)
    outs: list[Out | None] = []
    names = iter(call.out_dtypes)
    with np.errstate(over="ignore", invalid="ignore"):
        if mask[0]:
            name = next(names)
            if x.dtype == np.float32:  # the float32 kernel's order is pinned: exact
                g32 = None if w is None else np.asarray(w, _F).reshape(cols)
                dx32 = _layer_norm_dx_f32(
                    np.asarray(dy, _F).reshape(rows, cols), np.asarray(x, _F).reshape(rows, cols),
                    np.asarray(mean, _F).reshape(rows), np.asarray(rstd, _F).reshape(rows), g32,
                    call.capability != "default",
                )  # fmt: skip
                outs.append(exact(dx32.reshape(x.shape)))
            else:
                outs.append(_dx_bounded(wide(dy), wide(x), mu, a, g, cols, name, x.shape))
        u_in = _unit(str(np.dtype(x.dtype).name))
        omega = float(np.expm1(rows * np.log1p(u_in) + (2 * rows + 3) * np.log1p(U32)))
        threads = call.options.get("num_threads")
        pinned = None
        if (mask[1] and w is not None) or (mask[2] and b is not None):
            if isinstance(threads, int) and threads >= 1:
                pinned = _layer_norm_dwdb(
                    np.asarray(dy, _F).reshape(rows, cols), np.asarray(x, _F).reshape(rows, cols),
                    np.asarray(mean, _F).reshape(rows), np.asarray(rstd, _F).reshape(rows),
                    threads, call.capability != "default", str(np.dtype(x.dtype).name),
                )  # fmt: skip
        if mask[1] and w is not None:
            name = next(names)
            if pinned is not None:
                outs.append(exact(to(pinned[0], name).reshape(np.shape(w))))
            else:
                bi = np.asarray((-np.asarray(rstd, _F) * np.asarray(mean, _F)), np.float64)
                bi = bi.reshape(rows, 1)
                d, xx = wide(dy), wide(x)
                center = (d * (a * xx + bi)).sum(0)
                err = omega * (np.abs(d) * (np.abs(a * xx) + np.abs(bi))).sum(0)
                outs.append(bounded(to(center, name).reshape(np.shape(w)),
                                    err.reshape(np.shape(w)), _REASON_DW,
                                    center=center.reshape(np.shape(w))))  # fmt: skip
        if mask[2] and b is not None:
            name = next(names)
            if pinned is not None:
                outs.append(exact(to(pinned[1], name).reshape(np.shape(b))))
            else:
                d = wide(dy)
                center = d.sum(0)
                err = omega * np.abs(d).sum(0)
                outs.append(bounded(to(center, name).reshape(np.shape(b)),
                                    err.reshape(np.shape(b)), _REASON_DW,
                                    center=center.reshape(np.shape(b))))  # fmt: skip
    return outs


def _dx_bounded(d: np.ndarray, xx: np.ndarray, mu: np.ndarray, a: np.ndarray, g: np.ndarray,
                cols: int, name: str, shape: tuple[int, ...]) -> Out:  # fmt: skip
    """The bounded 16-bit grad_input (derivation in :func:`layer_norm_backward`): the value
    everywhere, the per-row terms of the bound everywhere (row sums), its per-element part
    only where the watcher asks (:func:`fpemu.validate.ops.lazy`)."""
    s = float(_F(1) / _F(cols))
    dg = d * g
    ds = (dg * xx).sum(1, keepdims=True)
    db = dg.sum(1, keepdims=True)
    e_ds = gamma(cols + 2) * np.abs(dg * xx).sum(1, keepdims=True) * (1 + 2.0**-40)
    e_db = gamma(cols + 1) * np.abs(dg).sum(1, keepdims=True) * (1 + 2.0**-40)
    a3s = a * a * a * s
    bc = (db * mu - ds) * a3s
    cc = -bc * mu - db * a * s
    eb = a3s * ((np.abs(mu) * e_db + e_ds) * (1 + gamma(7))
                + gamma(7) * (np.abs(db * mu) + np.abs(ds)))  # fmt: skip
    ec = (eb * np.abs(mu) + e_db * a * s) * (1 + gamma(4)) + gamma(4) * (
        np.abs(bc * mu) + np.abs(db) * a * s
    )
    dx = a * dg + bc * xx + cc
    g5 = float(gamma(5))
    dgf, xf, dxf = dg.reshape(-1), xx.reshape(-1), dx.reshape(-1)
    row = np.arange(dx.size) // cols  # the row of each flat element

    def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        r = row[idx]
        ar, bcr, ccr, xi = a[r, 0], bc[r, 0], cc[r, 0], xf[idx]
        with np.errstate(over="ignore", invalid="ignore"):
            edx = (eb[r, 0] * np.abs(xi) + ec[r, 0]) * (1 + g5) + g5 * (
                np.abs(ar * dgf[idx]) + np.abs(bcr * xi) + np.abs(ccr)
            )
        return dxf[idx], edx

    return lazy(to(dx, name).reshape(shape), bound, _REASON_DX)


# batch norm lives in its own module (size); importing it registers its emulations
from fpemu.validate.ops import _batchnorm  # noqa: E402, F401
