"""Emulations of torch's CPU batch norm (``native_batch_norm`` and its backward); registered by
:mod:`fpemu.validate.ops.norms` (it imports this module).

torch 2.13 CPU ``native_batch_norm`` on a contiguous (N, C, *spatial) input with a spatial size
above 1 (``batch_norm_kernel.cpp``, ``Normalization.cpp``), measured:

* float32 statistics: per channel, ``sum`` in double over (n, spatial) in order, ``mean =
  float(sum / count)`` (double division); ``var_sum`` = the double sum of the float32 products
  ``(x - mean) * (x - mean)``, stored as float32;
* bfloat16/float16 (autocast: float32 weights; or weights in the input format) statistics: 8
  float32 lanes add the two halves of each 16-element vector, a scalar float32 sum takes the tail
  of every plane, ``sum = tail + ((lane0 + lane1) + ...)``; ``mean = sum / count`` (float32);
  the squared deviations likewise (not fused);
* ``invstd = float(1 / sqrt(double(float32(var_sum / count)) + eps))``;
* ``running_mean = m * mean + (1 - m) * running_mean`` in float32 (``m`` = float32 momentum,
  ``1 - m`` rounded from double), ``running_var = fma(m, var_sum / (count - 1), (1 - m) *
  running_var)`` (one rounding for the last multiply-add, measured);
* ``alpha = invstd * weight``, ``beta = bias - mean * alpha``, ``out = x * alpha + beta``, the
  last two fused on the SIMD builds (``default``: two roundings); eval mode uses ``invstd =
  1 / sqrt(running_var + float(eps))`` in float32 and leaves the running statistics alone.

A 2-D input, spatial size 1 and channels-last inputs take torch's channels-last kernels:
per-thread partial sums whose split depends on the thread count, exact when ``Call.options``
carries ``num_threads`` (:func:`_stats_rows`), else bounded; eval mode needs no statistics and
is exact on both layouts. Other strides, training with statistics kept in bfloat16/float16 (a
model cast to the low format: the statistics and ``count - 1`` are rounded to it), and the
backward with statistics in a low format are bounded, with the bounds derived below; the
backward on the contiguous layout is exact in float32 (:func:`_backward_f32`) and for autocast's
bfloat16/float16 input with float32 weights (:func:`_backward_low`).

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> x = np.float32([[[1.0, 3.0]], [[5.0, 7.0]]])  # (N=2, C=1, L=2)
>>> call = Call("aten.native_batch_norm.default", (x, None, None, None, None, True, 0.1, 0.0),
...             {}, ("float32", "float32", "float32"))
>>> y, mean, invstd = lookup("aten.native_batch_norm.default")(call)
>>> mean.value.tolist(), invstd.value.tolist(), y.exact
([4.0], [0.4472135901451111], True)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact, register
from fpemu.validate.ops._fma import U32, fma32, gamma, mad, row_dot
from fpemu.validate.ops._num import dtype, to

__all__ = ["batch_norm", "batch_norm_backward"]

_F = np.float32
_LANES = 8


def _planes(x: np.ndarray) -> np.ndarray:
    """(N, C, S) view of an (N, C, *spatial) array."""
    return np.asarray(x).reshape(x.shape[0], x.shape[1], -1)


def _exact_layout(x: np.ndarray) -> bool:
    """The contiguous-kernel layout: C-contiguous with a spatial size above 1 (torch sends a
    2-D input, spatial size 1 and channels-last to its per-thread channels-last kernels)."""
    return bool(x.ndim >= 3 and x.flags["C_CONTIGUOUS"] and _planes(x).shape[2] > 1)


def _stats_f32(x3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = x3.shape[1]
    seq = np.ascontiguousarray(np.swapaxes(x3, 0, 1)).reshape(c, -1)
    count = seq.shape[1]
    total = np.add.accumulate(seq.astype(np.float64), axis=1)[:, -1]
    mean = (total / count).astype(_F)  # double division, then float
    dev = (seq - mean[:, None]).astype(_F)
    sq = (dev * dev).astype(_F).astype(np.float64)
    return mean, np.add.accumulate(sq, axis=1)[:, -1].astype(_F)


def _lane_sum(terms: np.ndarray, tail: np.ndarray, terms_q: np.ndarray | None = None,
              tail_q: np.ndarray | None = None, fused: bool = False,
              tail_fused: bool = False) -> np.ndarray:  # fmt: skip
    """Sum (C, N, vectors*16) terms on 8 lanes (low half then high half of each vector), the
    (C, N, tail) terms in a scalar, then ``tail + ((lane0 + lane1) + ...)``. With ``terms_q``
    / ``tail_q`` the terms are products ``terms * terms_q`` accumulated by multiply-adds
    (fused where ``fused`` / ``tail_fused``)."""
    c = terms.shape[0]
    acc = np.zeros((c, _LANES), _F)
    vec = terms.reshape(c, -1, 2 * _LANES)
    vq = None if terms_q is None else terms_q.reshape(c, -1, 2 * _LANES)
    for j in range(vec.shape[1]):
        for h in (slice(0, _LANES), slice(_LANES, 2 * _LANES)):
            if vq is None:
                acc = (acc + vec[:, j, h]).astype(_F)
            else:
                acc = mad(vec[:, j, h], vq[:, j, h], acc, fused=fused)
    sc = np.zeros(c, _F)
    tl = tail.reshape(c, -1)
    tq = None if tail_q is None else tail_q.reshape(c, -1)
    for j in range(tl.shape[1]):
        sc = (sc + tl[:, j]).astype(_F) if tq is None else mad(tl[:, j], tq[:, j], sc,
                                                                fused=tail_fused)  # fmt: skip
    red = acc[:, 0]
    for i in range(1, _LANES):
        red = (red + acc[:, i]).astype(_F)
    return (sc + red).astype(_F)


def _stats_low(x3: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, _, s = x3.shape
    nv = s - s % (2 * _LANES)
    xf = np.swapaxes(x3.astype(_F), 0, 1)  # (C, N, S)
    count = n * s
    mean = (_lane_sum(xf[:, :, :nv], xf[:, :, nv:]) / _F(count)).astype(_F)
    dev = (xf - mean[:, None, None]).astype(_F)
    sq = (dev * dev).astype(_F)
    return mean, _lane_sum(sq[:, :, :nv], sq[:, :, nv:])


def _cl_rows(x: np.ndarray) -> np.ndarray | None:
    """(rows, C) float32 in memory order where torch takes its channels-last kernels (a 2-D
    input, spatial size 1, or a channels-last array), else None."""
    c = x.shape[1]
    if x.flags["C_CONTIGUOUS"] and (x.ndim == 2 or x.size == x.shape[0] * c):
        return np.asarray(x, _F).reshape(-1, c)
    xt = np.transpose(x, (0, *range(2, x.ndim), 1))
    return np.asarray(xt, _F).reshape(-1, c) if xt.flags["C_CONTIGUOUS"] else None


def _thread_rows(total: int, threads: int) -> tuple[int, int]:
    """``parallel_for(0, total, 1)``: threads used and rows per thread (the last may get fewer)."""
    used = min(threads, total) if threads > 1 and total > 1 else 1
    return used, -(-total // used) if total else 0


def _thread_sums(rows: np.ndarray, threads: int, step: Any) -> np.ndarray:
    """Per-thread float32 buffers, each thread folding its rows in order with ``step(buf, r)``
    (the threads advance side by side); returns the (threads, C) buffers (unused ones zero)."""
    used, chunk = _thread_rows(rows.shape[0], threads)
    buf = np.zeros((threads, rows.shape[1]), _F)
    for k in range(chunk):
        tids = np.arange(used)
        r = tids * chunk + k
        live = r < rows.shape[0]
        buf[tids[live]] = step(buf[tids[live]], r[live])
    return buf


def _fold(buf: np.ndarray, double: bool) -> np.ndarray:
    """The buffers added in thread order: in double (float32 kernels' acc_type), else float32."""
    acc = np.zeros(buf.shape[1], np.float64 if double else _F)
    for row in buf:
        acc = acc + row.astype(acc.dtype) if double else (acc + row).astype(_F)
    return acc


def _stats_rows(rows: np.ndarray, threads: int, fused: bool, low: bool) -> tuple[Any, Any]:
    """Channels-last statistics (measured, float32 and bf16/fp16 with float32 weights): each
    thread adds its rows into a float32 buffer, ``sum`` folds the buffers (double for a float32
    input, float32 for bf16/fp16), ``mean = sum / count``; then ``buf + (x - mean)^2`` (fused on
    the SIMD builds) folded the same way."""
    count = rows.shape[0]
    total = _fold(_thread_sums(rows, threads, lambda b, r: (b + rows[r]).astype(_F)), not low)
    mean = (total / count).astype(_F) if not low else (total / _F(count)).astype(_F)

    def sq(b: np.ndarray, r: np.ndarray) -> np.ndarray:
        dev = (rows[r] - mean).astype(_F)
        return mad(dev, dev, b, fused=fused)

    return mean, _fold(_thread_sums(rows, threads, sq), not low).astype(_F)


@register("aten.native_batch_norm.default")
def batch_norm(call: Call) -> list[Out | None]:
    """``native_batch_norm(input, weight?, bias?, running_mean?, running_var?, training,
    momentum, eps) -> (out, save_mean, save_invstd)`` then the written running_mean and
    running_var (``UNDECLARED_WRITES``); exact on the contiguous layout, and on the
    channels-last layouts in eval mode or given ``call.options["num_threads"]``; else bounded."""
    names = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum",
             "eps")  # fmt: skip
    x, w, b, rm, rv, train, momentum, eps = (call.arg(i, n) for i, n in enumerate(names))
    low_stats = call.out_dtypes[1] != "float32"  # statistics kept in bfloat16/float16
    fused = call.capability != "default"
    low = x.dtype != np.float32
    rows = None if _exact_layout(x) else _cl_rows(x)
    opt = call.options.get("num_threads")
    threads = opt if isinstance(opt, int) and opt >= 1 else 0
    known = threads > 0
    if (
        (rows is None and not _exact_layout(x))
        or (train and low_stats)
        or (train and rows is not None and not known)
    ):
        return _batch_norm_bounded(call, x, w, b, rm, rv, bool(train), float(momentum), eps)
    c = x.shape[1]
    pname = call.out_dtypes[1]
    count = x.size // max(c, 1)
    outs: list[Out | None] = []
    with np.errstate(all="ignore"):
        if train:
            if rows is not None:
                mean, vs = _stats_rows(rows, threads, fused, low)
            else:
                mean, vs = _stats_low(_planes(x)) if low else _stats_f32(_planes(x))
            mean_p, vs_p = to(mean, pname), to(vs, pname)  # stored in the statistics format
            var = (vs_p.astype(_F) / _F(count)).astype(_F)
            invstd = (1.0 / np.sqrt(var.astype(np.float64) + float(eps))).astype(_F)
            mean_use = mean_p.astype(_F)
        else:
            mean_use = np.asarray(rm, _F)
            invstd = (_F(1) / np.sqrt((np.asarray(rv, _F) + _F(eps)).astype(_F))).astype(_F)
        # training reads back the stored (statistics-format) invstd; eval uses the float32 value
        invstd_p = to(invstd, pname).astype(_F) if train else invstd
        wv = np.ones(c, _F) if w is None else np.asarray(w, _F)
        bv = np.zeros(c, _F) if b is None else np.asarray(b, _F)
        alpha = (invstd_p * wv).astype(_F)
        beta = mad(-mean_use, alpha, bv, fused=fused)
        shp = (1, c) + (1,) * (x.ndim - 2)
        y = mad(np.asarray(x, _F), alpha.reshape(shp), beta.reshape(shp), fused=fused)
        outs.append(exact(to(y, call.out_dtypes[0])))
        if not train:  # the kernel returns empty save_mean / save_invstd in eval mode
            outs += [exact(np.zeros(0, dtype(pname))), exact(np.zeros(0, dtype(pname)))]
            outs += [exact(np.asarray(a)) for a in (rm, rv) if a is not None]
            return outs
        outs += [exact(mean_p), exact(to(invstd, pname))]
        m32, om32 = _F(momentum), _F(1.0 - float(momentum))
        if rm is not None:
            new = (m32 * mean_p.astype(_F) + (om32 * np.asarray(rm, _F)).astype(_F)).astype(_F)
            outs.append(exact(to(new, rm.dtype.name)))
        if rv is not None:
            unbiased = (vs_p.astype(_F) / _F(count - 1)).astype(_F)
            rest = (om32 * np.asarray(rv, _F)).astype(_F)
            # measured: fused in the float32 instantiation, two roundings in the mixed one
            new = fma32(m32, unbiased, rest) if not low else (m32 * unbiased + rest).astype(_F)
            outs.append(exact(to(new, rv.dtype.name)))
    return outs


_REASON_BN = ("batch_norm on a per-thread (channels-last / 2-D) layout: float32 partial sums "
              "per thread in an unknown split, bound gamma_{count+2} on sum, var_sum, then "
              "propagated through invstd, alpha, beta, out and the running statistics")  # fmt: skip


def _batch_norm_bounded(call: Call, x: np.ndarray, w: Any, b: Any, rm: Any, rv: Any,
                        train: bool, momentum: float, eps: float) -> list[Out | None]:  # fmt: skip
    """Bounded batch norm (derivation, u = 2^-24, g_k = (1+u)^k - 1, count = n):
    mean~ = sum~/n with |sum~ - sum| <= g_n sum|x|: e_mean = g_{n+2} sum|x| / n. var_sum~ =
    sum (x - mean~)^2 in float32: |var_sum~ - var_sum| <= g_{n+3} sum (x-mean)^2 + 2 e_mean
    sum|x - mean| + n e_mean^2 (the mean's error enters to first order only through
    sum (x - mean) = 0). invstd = 1/sqrt(v + eps), v = var_sum/n: relative error <= (e_v /
    (v + eps)) / 2 / (1 - e_v/(v+eps)) + g_3. out = x alpha + beta = (x - mean) invstd w + b:
    |err| <= |x - mean| invstd |w| e_inv + e_mean invstd |w| + g_5 (|x alpha| + |beta| +
    |x - mean| |alpha|), with g in the input format's unit for bf16/fp16 (the strided kernel
    evaluates ((x - mean) * invstd) * w + b in it).
    Statistics kept in a low format of unit u_p: mean and invstd are read back rounded
    (e_mean += u_p (|mean| + e_mean), also inside var_sum's bound; invstd relative (1 + e)(1 +
    u_p)(1 + 2 u_p) - 1 for the rounded var_sum and invstd); the running statistics may round
    every operation in the low format (momentum and ``count - 1`` included): g_5(u_p), g_6(u_p)
    of their terms' magnitudes."""
    xf = np.asarray(x, np.float64)
    c = x.shape[1]
    axes = tuple(i for i in range(x.ndim) if i != 1)
    n = xf.size // max(c, 1)
    shp = (1, c) + (1,) * (x.ndim - 2)
    wv = np.ones(c) if w is None else np.asarray(w, np.float64)
    bv = np.zeros(c) if b is None else np.asarray(b, np.float64)
    pname = call.out_dtypes[1]
    u_p = {"bfloat16": 2.0**-8, "float16": 2.0**-11}.get(pname, 0.0)
    # the strided kernel evaluates ((x - mean) * invstd) * w + b in the input's format
    u_ar = {"bfloat16": 2.0**-8, "float16": 2.0**-11}.get(np.dtype(x.dtype).name, U32)
    outs: list[Out | None] = []
    with np.errstate(all="ignore"):
        if train:
            mean = xf.mean(axis=axes)
            dev = xf - mean.reshape(shp)
            vs = (dev * dev).sum(axis=axes)
            e_mean = gamma(n + 2) * np.abs(xf).sum(axis=axes) / n
            # the statistics format's rounding of the mean can feed the deviations as well
            e_mean = e_mean + u_p * (np.abs(mean) + e_mean)
            e_vs = (gamma(n + 3) * vs + 2 * e_mean * np.abs(dev).sum(axis=axes)
                    + n * e_mean**2) * (1 + gamma(2))  # fmt: skip
            v = vs / n
            rel = e_vs / n / (v + eps)
            e_inv_rel = rel / 2 / np.maximum(1 - rel, 1e-300) + gamma(4, u_ar)
            e_inv_rel = (1 + e_inv_rel) * (1 + u_p) * (1 + 2 * u_p) - 1
            invstd = 1.0 / np.sqrt(v + eps)
        else:
            mean = np.asarray(rm, np.float64)
            e_mean = np.zeros(c)
            invstd = 1.0 / np.sqrt(np.asarray(rv, np.float64) + eps)
            e_inv_rel = np.full(c, gamma(4, u_ar))
        alpha = invstd * wv
        y = (xf - mean.reshape(shp)) * alpha.reshape(shp) + bv.reshape(shp)
        beta = np.abs(bv - mean * alpha).reshape(shp)
        centred = np.abs((xf - mean.reshape(shp)) * alpha.reshape(shp))
        e_y = (np.abs(xf - mean.reshape(shp)) * (np.abs(alpha) * e_inv_rel).reshape(shp)
               + (e_mean * np.abs(alpha) * (1 + e_inv_rel)).reshape(shp)
               + gamma(5, u_ar) * (np.abs(xf * alpha.reshape(shp)) + beta
                                   + centred))  # fmt: skip
        outs.append(bounded(to(y, call.out_dtypes[0]), e_y, _REASON_BN, center=y))
        if not train:
            outs += [exact(np.zeros(0, dtype(pname))), exact(np.zeros(0, dtype(pname)))]
            outs += [exact(np.asarray(a)) for a in (rm, rv) if a is not None]
            return outs
        e_inv = invstd * e_inv_rel
        outs += [bounded(to(mean, pname), e_mean, _REASON_BN, center=mean),
                 bounded(to(invstd, pname), e_inv, _REASON_BN, center=invstd)]  # fmt: skip
        m = float(np.float32(momentum))
        om = float(np.float32(1.0 - momentum))
        if rm is not None:
            old = np.asarray(rm, np.float64)
            new = m * mean + om * old
            # a low statistics format: every operation may round in it (momentum included)
            err = m * e_mean + gamma(3) * (m * np.abs(mean) + om * np.abs(old))
            err = err + gamma(5, u_p) * (m * np.abs(mean) + om * np.abs(old)) if u_p else err
            outs.append(bounded(to(new, rm.dtype.name), err, _REASON_BN, center=new))
        if rv is not None:
            old = np.asarray(rv, np.float64)
            ub = vs / max(n - 1, 1)
            new = m * ub + om * old
            err = m * e_vs / max(n - 1, 1) * (1 + gamma(2)) + gamma(4) * (m * ub + om * np.abs(old))
            err = err + gamma(6, u_p) * (m * ub + om * np.abs(old)) if u_p else err
            outs.append(bounded(to(new, rv.dtype.name), err, _REASON_BN, center=new))
    return outs


_REASON_BNB = ("batch_norm_backward: float32/double sums of dy and (x - mean) dy per channel "
               "in SIMD-lane order; bound gamma_{n+3} on the sums propagated through "
               "k = dotp invstd^2 / n, grad_mean = sum / n and dx = (dy - grad_mean - "
               "(x - mean) k) invstd w")  # fmt: skip


@register("aten.native_batch_norm_backward.default")
def batch_norm_backward(call: Call) -> list[Out | None]:
    """``native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?,
    save_mean?, save_invstd?, train, eps, output_mask)``, bounded.

    Derivation (u = 2^-24, g_k = (1+u)^k - 1, n = count per channel, the saved mean/invstd
    exact inputs): sum~ = sum dy within e_s = g_{n+1} sum|dy|; dotp~ = sum (x - mean) dy
    within e_p = g_{n+3} sum|x - mean||dy|. grad_bias = sum (e_s); grad_weight = dotp invstd
    (e_p invstd + g_1 |dotp invstd|). dx (train) = (dy - sum/n - (x - mean) k) invstd w with
    k = dotp invstd^2 / n: e_k = e_p invstd^2/n (1+g_4) + g_4 |k|; e_gm = e_s/n (1+g_2) +
    g_2 |sum/n|; e_dx = ((e_gm + |x - mean| e_k)(1+g_2) + g_2 |x - mean||k|) invstd |w| (1+g_4)
    + g_4 (|dy| + |sum/n| + |(x - mean) k|) invstd |w|. Eval: dx = dy invstd w, with
    invstd = 1/sqrt(running_var + eps): g_6 |dx|. For a bf16/fp16 input the per-element and
    scalar roundings use the format's unit (the strided kernel computes in it) and the
    grad_out sum is stored in it; the counts of roundings are taken generously (g_5 for k,
    g_3 for (x - mean) k).
    """
    names = ("grad_out", "input", "weight", "running_mean", "running_var", "save_mean",
             "save_invstd", "train", "eps", "output_mask")  # fmt: skip
    dy, x, w, rm, rv, sm, si, train, eps, mask = (call.arg(i, n) for i, n in enumerate(names))
    c = x.shape[1]
    shp = (1, c) + (1,) * (x.ndim - 2)
    axes = tuple(i for i in range(x.ndim) if i != 1)
    n = np.asarray(x).size // max(c, 1)
    d = np.asarray(dy, np.float64)
    xf = np.asarray(x, np.float64)
    wv = np.ones(c) if w is None else np.asarray(w, np.float64)
    if train:
        mean, invstd = np.asarray(sm, np.float64), np.asarray(si, np.float64)
    else:  # float + double eps: sqrt and division in double, then float
        mean = np.asarray(rm, np.float64)
        invstd = np.asarray(_F(1.0 / np.sqrt(np.asarray(rv, _F).astype(np.float64) + eps)),
                            np.float64)  # fmt: skip
    opt = call.options.get("num_threads")
    rows = None if _exact_layout(x) else _cl_rows(x)
    if (
        rows is not None
        and isinstance(opt, int)
        and opt >= 1
        and (
            x.dtype == np.float32
            or all(n == "float32" for n in call.out_dtypes[1 if mask[0] else 0 :])
        )
    ):
        dyr = _cl_rows(np.asarray(dy))
        if dyr is not None:
            return _backward_rows(call, dyr, rows, x, w, mean, invstd, bool(train), mask, opt)
    if _exact_layout(x) and np.asarray(dy).flags["C_CONTIGUOUS"]:
        if x.dtype == np.float32:
            return _backward_f32(call, dy, x, w, mean, invstd, bool(train), mask)
        if all(n == "float32" for n in call.out_dtypes[1 if mask[0] else 0 :]) and (
            w is None or np.asarray(w).dtype == np.float32
        ):  # autocast's mixed kernel (float32 weights and statistics)
            return _backward_low(call, dy, x, w, mean, invstd, bool(train), mask)
    # the generic (strided) kernel computes in the input's format for bf16/fp16: its per-element
    # arithmetic, the grad_out sum (at::sum, stored in the format) and the scalars k and
    # grad_mean round in unit u_ar; the reductions accumulate in at least float32
    u_ar = {"bfloat16": 2.0**-8, "float16": 2.0**-11}.get(np.dtype(x.dtype).name, U32)

    def ga(k: int) -> Any:
        return gamma(k, u_ar)

    dev = xf - mean.reshape(shp)
    s = d.sum(axis=axes)
    e_s = gamma(n + 1) * np.abs(d).sum(axis=axes)
    e_s = e_s + u_ar * (np.abs(s) + e_s) if u_ar != U32 else e_s
    p = (dev * d).sum(axis=axes)
    e_p = gamma(n + 3) * np.abs(dev * d).sum(axis=axes) + ga(2) * np.abs(dev * d).sum(axis=axes)
    outs: list[Out | None] = []
    it = iter(call.out_dtypes)
    with np.errstate(all="ignore"):
        if mask[0]:
            if train:
                k = p * invstd**2 / n
                e_k = e_p * invstd**2 / n * (1 + ga(5)) + ga(5) * np.abs(k)
                gm = s / n
                e_gm = e_s / n * (1 + ga(2)) + ga(2) * np.abs(gm)
                sc = (invstd * np.abs(wv)).reshape(shp)
                kk = k.reshape(shp)
                dx = (d - gm.reshape(shp) - dev * kk) * (invstd * wv).reshape(shp)
                e_dx = ((e_gm.reshape(shp) + np.abs(dev) * e_k.reshape(shp)) * (1 + ga(3))
                        + ga(3) * np.abs(dev * kk)) * sc * (1 + ga(4))  # fmt: skip
                e_dx += ga(4) * (np.abs(d) + np.abs(gm).reshape(shp) + np.abs(dev * kk)) * sc
            else:
                dx = d * (invstd * wv).reshape(shp)
                e_dx = ga(6) * np.abs(dx)
            outs.append(bounded(to(dx, next(it)), e_dx * (1 + U32), _REASON_BNB, center=dx))
        if mask[1]:
            gw = p * invstd
            e_gw = e_p * invstd * (1 + ga(2)) + ga(2) * np.abs(gw)
            outs.append(bounded(to(gw, next(it)), e_gw, _REASON_BNB, center=gw))
        if mask[2]:
            outs.append(bounded(to(s, next(it)), e_s, _REASON_BNB, center=s))
    return outs


def _backward_f32(call: Call, dy: Any, x: np.ndarray, w: Any, mean: np.ndarray,
                  invstd: np.ndarray, train: bool, mask: Any) -> list[Out | None]:  # fmt: skip
    """float32 contiguous ``batch_norm_cpu_backward_contiguous_impl``, exact (measured on
    avx512, avx2, default): per channel and per sample plane, ``reduce_all(dy)`` and
    ``map2_reduce_all((x - mean) * dy)`` on 8 lanes (the partial last vector fused on the SIMD
    builds) reduced by ``_fma.tree8``, accumulated over samples in
    double; ``grad_bias = float(sum)``, ``grad_weight = float(dotp * invstd)``; training:
    ``k = float(dotp) * invstd * invstd / n``, ``grad_mean = float(sum / n)``, ``dx = ((dy -
    grad_mean) - (x - mean) * k) * invstd * w`` with the inner multiply-subtract fused on the
    SIMD builds; eval: ``dx = dy * invstd * w``."""
    fused = call.capability != "default"
    x3, d3 = _planes(np.asarray(x, _F)), _planes(np.asarray(dy, _F))
    nb, c, sz = x3.shape
    count = nb * sz
    m32, i32 = mean.astype(_F), invstd.astype(_F)
    w32 = np.ones(c, _F) if w is None else np.asarray(w, _F)
    total = np.zeros(c)
    dotp = np.zeros(c)
    ones = np.ones((c, sz), _F)
    with np.errstate(all="ignore"):
        for i in range(nb):
            total += row_dot(d3[i], ones, fused).astype(np.float64)
            dev = (x3[i] - m32[:, None]).astype(_F)
            dotp += row_dot(dev, d3[i], fused).astype(np.float64)
        outs: list[Out | None] = []
        if mask[0]:
            sc = (1, c, 1)
            if train:
                k = ((((dotp.astype(_F) * i32).astype(_F) * i32).astype(_F)) / _F(count)).astype(_F)
                gm = (total / count).astype(_F)
                dev = (x3 - m32.reshape(sc)).astype(_F)
                t = mad(-dev, k.reshape(sc), (d3 - gm.reshape(sc)).astype(_F), fused=fused)
            else:
                t = d3
            dx = ((t * i32.reshape(sc)).astype(_F) * w32.reshape(sc)).astype(_F)
            outs.append(exact(to(dx, call.out_dtypes[0]).reshape(x.shape)))
        names = iter(call.out_dtypes[1 if mask[0] else 0 :])
        if mask[1]:
            outs.append(exact(to((dotp * invstd).astype(_F), next(names))))
        if mask[2]:
            outs.append(exact(to(total.astype(_F), next(names))))
    return outs


def _backward_low(call: Call, dy: Any, x: np.ndarray, w: Any, mean: np.ndarray,
                  invstd: np.ndarray, train: bool, mask: Any) -> list[Out | None]:  # fmt: skip
    """bfloat16/float16 input with float32 weights (``batch_norm_cpu_backward_contiguous_
    internal``), exact (measured on avx512, avx2, default): ``sum`` and ``dotp`` over all
    samples on 8 float32 lanes (each 16-element vector's halves in turn; ``dotp`` by
    multiply-adds fused on the SIMD builds), the plane tails in scalars (fused only in the
    float16 instantiation), ``+ ((lane0 + lane1) + ...)``; ``k = dotp*invstd*invstd/n``,
    ``dx = ((dy - sum/n) - (x - mean)*k) * invstd * w`` (multiply-subtract fused on the SIMD
    builds) rounded once to the input format; ``grad_weight = dotp*invstd``,
    ``grad_bias = sum``."""
    fused = call.capability != "default"
    tail_fused = fused and x.dtype == np.float16
    x3, d3 = _planes(np.asarray(x, _F)), _planes(np.asarray(dy, _F))
    nb, c, sz = x3.shape
    count = nb * sz
    nv = sz - sz % (2 * _LANES)
    m32, i32 = mean.astype(_F), invstd.astype(_F)
    w32 = np.ones(c, _F) if w is None else np.asarray(w, _F)
    xs, ds = np.swapaxes(x3, 0, 1), np.swapaxes(d3, 0, 1)  # (C, N, S)
    with np.errstate(all="ignore"):
        dev = (xs - m32[:, None, None]).astype(_F)
        total = _lane_sum(ds[:, :, :nv], ds[:, :, nv:])
        dotp = _lane_sum(dev[:, :, :nv], dev[:, :, nv:], ds[:, :, :nv], ds[:, :, nv:],
                         fused, tail_fused)  # fmt: skip
        outs: list[Out | None] = []
        if mask[0]:
            sc = (1, c, 1)
            if train:
                k = ((((dotp * i32).astype(_F) * i32).astype(_F)) / _F(count)).astype(_F)
                gm = (total / _F(count)).astype(_F)
                dv = (x3 - m32.reshape(sc)).astype(_F)
                t = mad(-dv, k.reshape(sc), (d3 - gm.reshape(sc)).astype(_F), fused=fused)
            else:
                t = d3
            dx = ((t * i32.reshape(sc)).astype(_F) * w32.reshape(sc)).astype(_F)
            outs.append(exact(to(dx, call.out_dtypes[0]).reshape(x.shape)))
        if mask[1]:
            outs.append(exact((dotp * i32).astype(_F)))
        if mask[2]:
            outs.append(exact(total))
    return outs


def _backward_rows(call: Call, dyr: np.ndarray, rows: np.ndarray, x: np.ndarray, w: Any,
                   mean: np.ndarray, invstd: np.ndarray, train: bool, mask: Any,
                   threads: int) -> list[Out | None]:  # fmt: skip
    """The channels-last backward given torch's thread count (measured): per-thread float32
    buffers ``sum + dy`` and ``dotp + (x - mean) * dy`` (fused on the SIMD builds), folded over
    threads in double (float32 input) or float32 (bf16/fp16); then per element
    ``k = dotp*invstd*invstd/n``, ``dx = ((dy - sum/n) - (x - mean)*k) * invstd * w``."""
    fused = call.capability != "default"
    low = x.dtype != np.float32
    c = rows.shape[1]
    count = rows.shape[0]
    m32, i32 = mean.astype(_F), invstd.astype(_F)
    w32 = np.ones(c, _F) if w is None else np.asarray(w, _F)
    with np.errstate(all="ignore"):
        total = _fold(_thread_sums(dyr, threads, lambda b, r: (b + dyr[r]).astype(_F)), not low)
        total = total.astype(_F)

        def dot(b: np.ndarray, r: np.ndarray) -> np.ndarray:
            return mad((rows[r] - m32).astype(_F), dyr[r], b, fused=fused)

        dotp = _fold(_thread_sums(rows, threads, dot), not low).astype(_F)
        outs: list[Out | None] = []
        if mask[0]:
            if train:
                k = ((((dotp * i32).astype(_F) * i32).astype(_F)) / _F(count)).astype(_F)
                gm = (total / _F(count)).astype(_F)
                dev = (rows - m32).astype(_F)
                # measured per instantiation (the channel tail, C mod 8 / C mod 16, is compiled
                # apart): float32 fuses the multiply-subtract in whole vectors only, bfloat16 in
                # the tail only, float16 in both
                split = c - c % (2 * _LANES if low else _LANES)
                vec_f = fused and x.dtype != dtype("bfloat16")
                tail_f = fused and x.dtype != np.float32
                t = np.empty_like(dev)
                for sl, f in ((slice(0, split), vec_f), (slice(split, c), tail_f)):
                    t[:, sl] = mad(-dev[:, sl], k[sl], (dyr[:, sl] - gm[sl]).astype(_F), fused=f)
            else:
                t = dyr
            dx = ((t * i32).astype(_F) * w32).astype(_F)
            # back from (rows, C) memory order to the input's shape and layout
            perm = (0, *range(2, x.ndim), 1)
            lay = np.empty(tuple(x.shape[i] for i in perm), dtype(call.out_dtypes[0]))
            lay.reshape(-1, c)[...] = to(dx, call.out_dtypes[0])
            outs.append(exact(np.transpose(lay, np.argsort(perm))))
        names = iter(call.out_dtypes[1 if mask[0] else 0 :])
        if mask[1]:
            outs.append(exact(to((dotp * i32).astype(_F), next(names))))
        if mask[2]:
            outs.append(exact(to(total, next(names))))
    return outs
