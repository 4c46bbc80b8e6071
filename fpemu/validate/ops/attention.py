"""Emulations of torch's CPU flash-attention kernels behind ``F.scaled_dot_product_attention``
(``_scaled_dot_product_flash_attention_for_cpu`` and its backward), bounded.

torch 2.13 CPU (``FlashAttentionKernel.cpp``): q is cut in blocks of 32/64/256 rows (by
length), k/v in blocks of 512; per block ``s = scale * (q @ k^T)`` (+ mask; causal entries
-inf) by a float32 GEMM, then an online softmax in float32: running max, ``p = exp_u20(s - max)``
(a vectorised exp the source documents as ULP=20, flushing arguments below ln(FLT_MIN) to 0;
the scalar tail uses libm ``exp``), running sum, ``dst = dst * exp(max_old - max)`` and
``dst += p @ v`` (float32 GEMM); finally ``out = dst * (1 / sum)`` and
``logsumexp = max + log(sum)``. Finding, from the source and consistent with the measured
error: for bfloat16/float16 inputs ``p`` is rounded to the input format before ``p @ v`` while
``sum`` adds the unrounded float32 ``p``. The backward recomputes ``p = exp(s - logsumexp)``
(Sleef/libm exp, 1 ulp), ``dV += p^T dO``, ``dS = p * (dO v^T - rowsum(dO * out))``,
``dQ += scale dS k``, ``dK += scale dS^T q``; for low formats ``p`` and ``dS`` are rounded to
the input format before the GEMMs and dQ/dK/dV accumulate across blocks in the input format.

GEMM summation orders (MKL/oneDNN) are not specified, so every output is bounded: the
derivation is in :func:`_forward_bound` and :func:`flash_attention_backward`. The float64
centers carry their own error (at most ~2^-50 of the magnitudes each bound term carries with a
coefficient >= 2^-24); every bound is widened by a factor (1 + 2^-20) to cover it.
The bound arrays themselves are computed in float32 (watch only; the emulate path computes the
centers alone): widened by W32 <= 1 + 2^-16.4 plus float32 underflow floors, derivation in
:mod:`._attention_bound`.

Cost (watch; measured on the bench GPT's calls, benchmarks/bench_attention_ops.py): the centers
are rounded by :func:`._num.to`'s fast float64 path; with a finite shift, float64 exp runs on the
unmasked keys only (as -inf, masked ones would take its slow per-lane path: probs); inputs and
temporaries live in scratch arrays (inside a watched step fresh ones may fault: up to ~300 minor
faults a backward call: benchmarks/bench_attention_step.py). Kept as they are, measured: the
float64 GEMMs' transposed operands are copied (a transposed view gives BLAS another routine
whose bits differ, 0.4% of elements over random shapes); every bound is computed whole, not
lazily (98-100% of the bench calls' rows hold an element whose bits differ from the value, so
the judge reads nearly all of them); the e_s GEMM keeps its transposed |k| view (float32 BLAS
is ~3x slower there than on a contiguous copy, whose bits are not proved the same).

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> q = np.float32(np.arange(8).reshape(1, 1, 2, 4) / 8)
>>> call = Call("aten._scaled_dot_product_flash_attention_for_cpu.default", (q, q, q, 0.0, True),
...             {}, ("float32", "float32"))
>>> out, lse = lookup(call.op)(call)
>>> out.value[0, 0, 0].tolist(), out.exact
([0.0, 0.125, 0.25, 0.375], False)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.backend import scratch
from fpemu.validate.ops import Call, Out, bounded, register
from fpemu.validate.ops._attention_bound import (
    ETA,
    F32,
    W32,
    add_unmasked,
    colsum,
    const,
    f32abs,
    f64,
    finish,
    gamma_f,
    mag_mm,
    nan_to_inf,
    probs,
    rowmax,
    widen,
)
from fpemu.validate.ops._attention_scores import mm as _mm
from fpemu.validate.ops._attention_scores import q_block as _q_block
from fpemu.validate.ops._attention_scores import scores as _scores
from fpemu.validate.ops._fma import U32
from fpemu.validate.ops._num import to

__all__ = ["flash_attention", "flash_attention_backward"]

_KV_BLOCK = 512
_EXP_U20 = 20 * 2.0**-23  # relative error of 20 ulp (ulp <= 2^-23 |x| for normal float32)
_EXP_U10 = 2.0**-23  # Sleef u10 / libm exp: 1 ulp
# fexp_u20 (Malossi et al.; vec512_float.h): 2^y ~ 2^floor(y) (1 + f - P(f)) with a cubic P;
# max over f in [0, 1] of |(1 + f - P(f)) / 2^f - 1| = 1.0704e-4 (evaluated on a 2e6-point grid
# with the header's float32 constants), plus the float32 rounding of 2^23 z + 127 2^23 (at most
# 64 units of 2^-23 in z: 2^-17), the truncation to int (< 2^-23) and the Horner FMAs (< 2^-21).
# Measured: bf16/fp16 logsumexp errs by ~6e-5 relative (beyond exp_u20's 20 ulp), so the
# bf16/fp16 kernels use this exp (forward and, conservatively, backward).
_FEXP = 1.0704e-4 + 2.0**-17 + 2.0**-23 + 2.0**-21
_SLACK = 1.0 + 2.0**-20
# float32 underflow: every operation may add an absolute error of half the smallest subnormal
_UFL = 2.0**-150
_UNIT = {"bfloat16": 2.0**-8, "float16": 2.0**-11, "float32": 0.0}
# absolute error of one low-format value near zero: the low-precision GEMMs (AVX512-BF16/AMX
# dot products) treat subnormals as zero, measured: bf16 dK/dV of ~1e-39 come back as 0; so a
# value below the smallest normal may be lost entirely (2^-126 bf16, 2^-14 fp16)
_TINY = {"bfloat16": 2.0**-126, "float16": 2.0**-14, "float32": 0.0}


def _forward_bound(call: Call) -> tuple[Any, ...]:
    """Center and bound of out and logsumexp.

    With p_j = exp(s_j - m) (m the exact row max; the ratio below does not depend on the
    shift) and rho_j from :func:`.probs` (times ((1+2^-23)(1+u)^2 exp(u R))^(B-1) for the
    B-1 rescalings of B kv blocks, R the row's score range), the kernel's sum S~ and numerator
    N~ = sum_j lowround(p~_j) v_j satisfy |S~ - S| <= ES = sum p rho + g_{Lk+2B} sum p (1+rho)
    and |N~ - N| <= EN = sum |v| (p rho + u_low p (1+rho) + tiny) + g_{Lk+B} sum |v| p (1+rho)
    (1+u_low); so |N~/S~ - N/S| <= (EN + |o| ES) / (S - ES), plus g_2 for ``dst * (1/sum)``.
    logsumexp: |lse~ - lse| <= -log(1 - ES/S) + 2^-23 |log S| + u |lse|. ES = (1 + g) sum p rho
    + g S; sum p rho and the weights of EN's GEMM are float32 (widened by W32, plus the
    underflow floors of :mod:`._attention_bound`).
    """
    watch = call.model is None  # the copies in scratch arrays
    q, k, v = (
        f64(call.arg(i, n), n if watch else "") for i, n in enumerate(("query", "key", "value"))
    )
    causal = bool(call.arg(4, "is_causal", False))
    name = call.out_dtypes[0]
    s, e_s, _, masked, buf, _ = _scores(call, q, k, causal, bound=call.model is None)
    lk = s.shape[-1]
    blocks = -(-lk // _KV_BLOCK)
    finite = ~np.isneginf(s) if masked is None else ~masked
    empty = ~finite.any(axis=-1, keepdims=True)  # fully masked rows: out 0, lse 0 (kernel)
    m = np.where(empty, 0.0, rowmax(s))  # s is -inf where masked (rowmax: the same values)
    if e_s is None:  # emulate: the center only (the same operations as below)
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            p = np.exp(s - m)
            S = p.sum(-1, keepdims=True)
            o = _mm(p, v) / np.where(empty, 1.0, S)
            np.copyto(o, 0.0, where=empty)
            lse = np.where(empty, 0.0, m + np.log(np.where(empty, 1.0, S)))
        return o, np.inf, lse[..., 0], np.inf
    low = name != "float32"
    e_g = float(e_s.max()) if e_s.size else 0.0
    emax = e_g * W32 + 2.0**-140 if e_s.size else 0.0
    span = m - np.min(np.where(finite, s, m), axis=-1, keepdims=True) if blocks > 1 else m
    p, rho = probs(s, m, e_s, masked, _FEXP if low else _EXP_U20, 3 if low else 1, buf, e_g)
    if blocks > 1:
        r_blk = (1 + 2.0**-23) * (1 + U32) ** 2 * np.exp(U32 * (span + 2 * emax))
        # rho' = (1 + rho) r - 1 = rho r + (r - 1); r and r - 1 rounded up as float32
        r = r_blk ** (blocks - 1)
        rho *= (r * (1 + 2.0**-22)).astype(F32)
        rho += ((r - 1) * (1 + 2.0**-22)).astype(F32)
    u_low, tiny = _UNIT[name], _TINY[name]
    S = p.sum(-1, keepdims=True)
    N = _mm(p, v, "N")  # o: fresh
    r_max = float(rho.max(initial=0.0))
    p32 = e_s  # e_s is dead: its buffer takes p as float32 (its shape is s's)
    np.copyto(p32, p, casting="same_kind")
    pr = np.multiply(p32, rho, out=rho)
    g_es, g_en = gamma_f(lk + 2 * blocks), gamma_f(lk + blocks)
    av = f32abs(v, "av")
    # underflow (_attention_bound): p rho loses ETA in the cast of p (times rho <= R) and ETA in
    # the product; w loses that times (1 + c), plus ETA in each product and c ETA (cast of p)
    fl = ETA * (r_max + 1)
    es = (1 + g_es) * (widen(pr.sum(-1, keepdims=True, dtype=np.float64)) + W32 * lk * fl)
    es += g_es * S
    # EN = sum |v| (p rho + u_low big + tiny) + g sum |v| (big (1 + u_low) + tiny), big = p (1 +
    # rho): one GEMM of p rho (1 + c) + c p + (1 + g) tiny, c = u_low + g (1 + u_low)
    c = u_low + g_en * (1 + u_low)
    w = np.multiply(pr, const(1 + c), out=pr)
    p32 *= const(c)
    w += p32
    if tiny:
        add_unmasked(w, (1 + g_en) * tiny * math.exp(emax), masked)
    fl_w = fl * (1 + c) + (2 + c) * ETA
    # each weight's loss times |v| summed over the keys (per column), and ETA per GEMM term
    en = finish(mag_mm(w, av), W32, W32 * (fl_w * colsum(av) + lk * ETA))
    en += (lk + 2) * _UFL
    with np.errstate(invalid="ignore", divide="ignore"):
        any_empty = bool(empty.any())
        o = np.divide(N, np.where(empty, 1.0, S) if any_empty else S, out=N)
        if any_empty:
            np.copyto(o, 0.0, where=empty)
        # e_o = ((en + |o| es) / (S - es))(1 + g2) + g2 |o| + tiny, times _SLACK, in place as
        # en kr + |o| (es kr + g2 _SLACK) + tiny _SLACK with the row factor kr = (1 + g2)
        # _SLACK / (S - es)
        den = S - es
        bad = ~(den > 0)  # NaN (float32 inf * 0) included
        g2 = gamma_f(2)
        kr = (1 + g2) * _SLACK / np.where(bad, 1.0, den)
        e_o = en
        e_o *= kr
        ao = np.abs(o, out=scratch(o.shape, o.dtype, key="att.ao"))
        ao *= es * kr + g2 * _SLACK
        e_o += ao
        if tiny:  # (e_o + 0 is e_o: it is >= 0 or NaN)
            e_o += tiny * _SLACK
        if bad.any():
            np.copyto(e_o, np.inf, where=bad)
        if np.isnan(e_o).any():
            nan_to_inf(e_o)
        if any_empty:
            np.copyto(e_o, 0.0, where=empty)
        lse = np.where(empty, 0.0, m + np.log(np.where(empty, 1.0, S)))
        e_l = -np.log1p(-np.minimum(es / S, 1.0)) + 2.0**-23 * np.abs(np.log(S)) + U32 * np.abs(lse)
        e_l = np.where(empty[..., 0:1], 0.0, nan_to_inf(e_l))
    return o, e_o, lse[..., 0], e_l[..., 0] * _SLACK


_REASON_F = (
    "flash attention: float32 GEMMs (order unspecified), exp_u20 (20 ulp, source comment; "
    "fexp_u20 for bf16/fp16), online-softmax rescaling per 512-key block, p rounded to the "
    "input format before p@v for bf16/fp16; bound derived in attention._forward_bound"
)


def _no_dropout(call: Call) -> None:
    p = float(call.arg(3, "dropout_p", 0.0) or 0.0) if "backward" not in call.op else float(
        call.arg(6, "dropout_p", 0.0) or 0.0)  # fmt: skip
    if p != 0.0:
        raise NotImplementedError(f"dropout_p={p}: the kernel's random mask is not emulated")


_REASON_EMU = ("emulate: fpemu's attention (exact softmax attention in float64, rounded once "
               "to the output format); the kernel's error bound is not computed")  # fmt: skip


@register("aten._scaled_dot_product_flash_attention_for_cpu.default")
def flash_attention(call: Call) -> list[Out | None]:
    """``(query, key, value, dropout_p=0, is_causal=False, *, attn_mask=None, scale=None) ->
    (output, logsumexp)``, bounded (see :func:`_forward_bound`). Under ``emulate``
    (``call.model`` set) only the value is computed: the bound is infinite."""
    _no_dropout(call)
    o, e_o, lse, e_l = _forward_bound(call)
    why = _REASON_F if call.model is None else _REASON_EMU
    return [bounded(to(o, call.out_dtypes[0]), e_o, why, center=o),
            bounded(to(lse, call.out_dtypes[1]), e_l, why, center=lse)]  # fmt: skip


_REASON_B = ("flash attention backward: p = exp(s - lse) (1 ulp), float32 GEMMs (order "
             "unspecified), dS = p (dP - rowsum(dO*out)); bf16/fp16 round p and dS to the input "
             "format and accumulate dQ/dK/dV per block in it; bound derived in "
             "attention.flash_attention_backward")  # fmt: skip


@register("aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
def flash_attention_backward(call: Call) -> list[Out | None]:
    """``(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask,
    scale) -> (grad_query, grad_key, grad_value)``, bounded.

    P = exp(s - lse) with the given lse, rho its relative error (:func:`.probs`, 1-ulp exp),
    P' = P(1+rho') with rho' = (1+rho)(1+u_low)-1 (+tiny). dV = P'^T dO: E = sum P rho' |dO| +
    g_{Lq+2} sum P(1+rho')|dO|, plus g_{Bq}(u_low) of that magnitude for the per-q-block
    accumulation in a low format. dP = dO v^T (e <= g_D sum|dO||v|), D = rowsum(dO*out)
    (e <= g_{D+1} sum|dO out|); dS = P~ (dP~ - D~) (2 roundings): e_dS = (P rho |dP-D| +
    P(1+rho)(e_dP+e_D))(1+g_2) + g_2 P(1+rho)|dP-D|, then the low rounding u_low(|dS|+e_dS)
    (+tiny, + 4 half-subnormals for underflow). dQ = scale dS' k: scale (sum e_dS' |k| +
    g_{Lk+3} sum (|dS|+e_dS')|k|) plus
    g_{Bk}(u_low) of that magnitude, plus (Lk+4) half-subnormals for underflow in the sums;
    dK likewise with q and the q blocks.
    """
    _no_dropout(call)
    go, q, k, v, out = (f64(call.arg(i, n), "" if call.model is not None else n) for i, n in
                        enumerate(("grad_out", "query", "key", "value", "out")))  # fmt: skip
    lse = np.asarray(call.arg(5, "logsumexp"), np.float64)[..., None]
    causal = bool(call.arg(7, "is_causal", False))
    name = call.out_dtypes[0]
    u_low, tiny = _UNIT[name], _TINY[name]
    # s keeps its causal keys where probs zeroes them itself (lse finite)
    fill = call.model is not None or not np.isfinite(lse).all()
    s, e_s, scale, masked, buf, absqk = _scores(call, q, k, causal, bound=call.model is None,
                                                fill=fill)  # fmt: skip
    lq, lk, d = s.shape[-2], s.shape[-1], q.shape[-1]
    names = call.out_dtypes
    if e_s is None:  # emulate: the centers only (the same operations as below)
        with np.errstate(invalid="ignore", over="ignore"):
            p = np.exp(s - lse)
        ds = p * (_mm(go, np.swapaxes(v, -1, -2)) - (go * out).sum(-1, keepdims=True))
        centers = (scale * _mm(ds, k), scale * _mm(np.swapaxes(ds, -1, -2), q),
                   _mm(np.swapaxes(p, -1, -2), go))  # fmt: skip
        return [bounded(to(x, nm), np.inf, _REASON_EMU, center=x)
                for x, nm in zip(centers, names, strict=True)]  # fmt: skip
    bq = -(-lq // _q_block(lq))
    bk = -(-lk // _KV_BLOCK)
    low = name != "float32"
    p, rho = probs(s, lse, e_s, masked, _FEXP if low else _EXP_U10, 3 if low else 1, buf)
    p32 = e_s  # e_s is dead: its buffer takes p as float32
    np.copyto(p32, p, casting="same_kind")
    agt, av = f32abs(go, "agt"), f32abs(v, "av")
    aq, ak = absqk[0], np.swapaxes(absqk[1], -1, -2)  # |q|, |k| (contiguous) from _scores
    dv = _mm(np.swapaxes(p, -1, -2), go, "dv")  # a center: fresh
    # e_dv = E + g M, then + g' (M + e_dv), E = sum (p rho1 + tiny)|dO|, M = sum (p (1 + rho1) +
    # tiny)|dO|, rho1 = (1 + rho)(1 + u_low) - 1: one GEMM of (c1 + c2)(p rho1 + tiny) + c2 p
    # = p (a rho + b) + (c1 + c2) tiny; likewise dQ, dK
    g, g_ = gamma_f(lq + 2), gamma_f(bq, u_low) if u_low else 0.0
    c1, c2 = 1 + g_, g * (1 + g_) + g_
    w = np.multiply(rho, const((c1 + c2) * (1 + u_low)), out=scratch(rho.shape, F32, key="att.w"))
    w += const((c1 + c2) * u_low + c2)
    w *= p32
    if tiny:
        add_unmasked(w, (c1 + c2) * tiny, masked)
    # underflow (_attention_bound): the cast of p loses ETA times the factor a rho + b after
    # it, the product ETA; the GEMM ETA per term
    r_max, p_max = (float(x.max(initial=0.0)) for x in (rho, p32))
    fl_v = ETA * (r_max * (c1 + c2) * (1 + u_low) + (c1 + c2) * u_low + c2 + 1)
    fl_v = fl_v * colsum(agt) + lq * ETA  # times |dO| summed over the queries, per column
    add = (W32 * fl_v + (lq + 4) * _UFL + tiny) * _SLACK  # tiny: a flushed subnormal
    e_dv = finish(mag_mm(np.swapaxes(w, -1, -2), agt), W32 * _SLACK, add)
    dp = _mm(go, np.swapaxes(v, -1, -2), "dp", out=True)
    gout = np.multiply(go, out, out=scratch(go.shape, go.dtype, key="att.gout"))
    dd = gout.sum(-1, keepdims=True)
    diff = np.subtract(dp, dd, out=dp)
    ad = scratch(diff.shape, F32, key="att.ad")
    np.copyto(ad, diff, casting="same_kind")
    ds = np.multiply(p, diff, out=diff)  # diff is consumed (|diff| kept in float32)
    # e_ds = (p rho |dP - D| + p (1 + rho)(e_dp + e_d))(1 + g2) + g2 p (1 + rho) |dP - D|, then
    # (1 + u_low) e_ds + u_low |dS| (+ tiny + 4 half-subnormals) with |dS| = p |dP - D|:
    # p (|dP - D| (rho a1 + a0) + (1 + rho) a2 (e_dp + e_d)), a1 = (1 + 2 g2)(1 + u_low),
    # a0 = g2 (1 + u_low) + u_low, a2 = (1 + g2)(1 + u_low)
    g2 = gamma_f(2)
    a1, a0, a2 = (1 + 2 * g2) * (1 + u_low), g2 * (1 + u_low) + u_low, (1 + g2) * (1 + u_low)
    e_d = gamma_f(d + 1) * np.abs(gout, out=gout).sum(-1, keepdims=True)
    avt = scratch(av.shape[:-2] + av.shape[:-3:-1], F32, key="att.avt")
    np.copyto(avt, np.swapaxes(av, -1, -2))  # contiguous (a transposed view: another GEMM)
    ee = mag_mm(agt, avt, scratch(ad.shape, F32, key="att.ee"))
    ee *= const(gamma_f(d) * a2)
    ee += (e_d * a2 * (1 + 2.0**-22)).astype(F32)  # rounded up (the cast and its product)
    np.abs(ad, out=ad)
    e_ds = np.multiply(rho, const(a1), out=w)  # w is consumed (its GEMM is done)
    e_ds += const(a0)
    e_ds *= ad
    rho += F32(1.0)
    rho *= ee
    e_ds += rho
    e_ds *= p32
    add_unmasked(e_ds, tiny + 4 * _UFL, masked)
    a_max = float(ad.max(initial=0.0))
    p32 *= ad  # |dS|
    # underflow: the cast of p loses ETA times X = |dP - D|(rho a1 + a0) + (1 + rho) ee, the
    # cast of |dP - D| ETA (rho a1 + a0) p, the products ad (..), (1 + rho) ee, X p ETA (times
    # p for the first two), ee's own 3 ETA (its GEMM's D ETA times g_D a2 < 2^-16, the cast of
    # e_d, the scaling; times (1 + rho) p); |dS| = p ad: ETA ad + ETA
    e_max = float(ee.max(initial=0.0))
    x_max = a_max * (r_max * a1 + a0) + (1 + r_max) * e_max
    fl_s = ETA * (x_max + p_max * (r_max * a1 + a0 + 2 + (1 + r_max) * 3) + 1)
    fl_ds = ETA * (a_max + 1)
    out_e = []
    # e_dq = scale (E + g M) then + g' (M + e_dq), E = sum e_ds |k|, M = sum (|dS| + e_ds)|k|
    cs_prev = None
    for n_sum, n_blk, ab, tr in ((lk, bk, ak, False), (lq, bq, aq, True)):
        gs, gs_ = gamma_f(n_sum + 3), gamma_f(n_blk, u_low) if u_low else 0.0
        cs1, cs2 = 1 + gs_, gs * (1 + gs_) + gs_
        # weights in dead buffers: rho (then e_ds itself), ad as the scratch; the dK weights
        # are the dQ ones where their constants are (float32 with lq = lk): kept, not redone
        if (cs1, cs2) != cs_prev:
            wt = np.multiply(e_ds, const(cs1 + cs2), out=e_ds if tr else rho)
            wt += np.multiply(p32, const(cs2), out=ad)
        cs_prev = (cs1, cs2)
        mm = mag_mm(np.swapaxes(wt, -1, -2) if tr else wt, ab)
        fl = (fl_s * (cs1 + cs2) + fl_ds * cs2 + 2 * ETA) * colsum(ab) + n_sum * ETA
        add = (scale * W32 * fl + (n_sum + 4) * _UFL + tiny) * _SLACK
        out_e.append(finish(mm, scale * W32 * _SLACK, add))
    e_dq, e_dk = out_e
    dq = scale * _mm(ds, k, "dq", out=True)
    dk = scale * _mm(np.swapaxes(ds, -1, -2), q, "dk", out=True)
    return [bounded(to(dq, names[0]), e_dq, _REASON_B, center=dq),
            bounded(to(dk, names[1]), e_dk, _REASON_B, center=dk),
            bounded(to(dv, names[2]), e_dv, _REASON_B, center=dv)]  # fmt: skip
