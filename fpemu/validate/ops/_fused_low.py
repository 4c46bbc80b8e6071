"""Fused Adam/AdamW on float16/bfloat16 tensors (FusedAdamKernel.cpp's reduced-precision path):
every tensor widened to float32, the step computed in float32, each state rounded once to its
format when stored; ``exp_avg``, ``exp_avg_sq`` and the denominator are used unrounded.

Which float32 multiply-adds GCC fuses cannot all be read off the low-format outputs: on 2^20
random elements per format the SIMD vector loop is pinned to the float32 kernel's choices
(exp_avg fused, ``fma(c2*g, g, v*beta2)``), its weight decay and the scalar loop (the last
``numel % 32`` elements on avx512, ``% 16`` on avx2) are not (every candidate gave the same
low-format results). So the claim is: exact where every candidate contraction left open
(weight decay; in the scalar loop also the lerp and exp_avg_sq) rounds to the same output, else
bounded by the span of the candidates' float32 values (the kernel's value before its final
rounding is one of them). The default build fuses nothing.

>>> import numpy as np, ml_dtypes
>>> bf = ml_dtypes.bfloat16
>>> x = [np.array([1.0, -2.0], bf), np.array([0.5, 0.25], bf), np.zeros(2, bf), np.zeros(2, bf)]
>>> h = dict(lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, scale=None,
...          adamw=True, maximize=False)
>>> [o.value.astype(float).tolist() for o in adam_low(*x, None, 1.0, h, False, "bfloat16")][0]
[0.8984375, -2.09375]
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from fpemu.validate.ops import Out, bounded, exact
from fpemu.validate.ops._num import to
from fpemu.validate.ops.optim import F32, fma32, madd

__all__ = ["adam_low"]

_WHY = ("fused Adam in float32 on a low format: the candidate FMA contractions of weight "
        "decay, lerp and exp_avg_sq disagree here; bounded by their span")  # fmt: skip


def _math(
    p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, vmax: np.ndarray | None,
    c: dict[str, Any], wd_f: bool, lerp_f: bool, sq: str,
) -> list[np.ndarray]:  # fmt: skip
    """One candidate: the float32 values of param, exp_avg, exp_avg_sq (, max_exp_avg_sq)."""
    with np.errstate(all="ignore"):
        gg = -g if c["maximize"] else g
        if c["weight_decay"] != 0:
            if c["adamw"]:
                p = p * F32(1 - c["lr"] * c["weight_decay"])
            else:
                gg = madd(p, F32(c["weight_decay"]), gg, fused=wd_f)
        w = F32(1 - c["beta1"])
        d = gg - m
        if abs(w) < 0.5:
            m_new = madd(w, d, m, fused=lerp_f)
        else:
            m_new = madd(w - F32(1), d, gg, fused=lerp_f)
        c2, vb, cgg = F32(1 - c["beta2"]), v * F32(c["beta2"]), (F32(1 - c["beta2"]) * gg) * gg
        if sq == "fma_g":
            v_new = fma32(c2 * gg, gg, vb)
        elif sq == "fma_v":
            v_new = fma32(v, F32(c["beta2"]), cgg)
        else:
            v_new = np.asarray(vb + cgg, F32)
        out = [m_new, v_new]
        vx = v_new
        if vmax is not None:
            vx = np.asarray(np.maximum(vmax, v_new), F32)
            out.append(vx)
        denom = np.sqrt(vx) / F32(c["bc2_sqrt"]) + F32(c["eps"])
        p_new = p + (F32(-c["step_size"]) * m_new) / denom
    return [np.asarray(x, F32) for x in [p_new, *out]]


def adam_low(
    p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, vmax: np.ndarray | None,
    step: float, h: dict[str, Any], fused: bool, name: str, vs: int = 16,
) -> list[Out]:  # fmt: skip
    """Outs for one tensor: param, grad, exp_avg, exp_avg_sq (, max_exp_avg_sq); ``vs`` is
    the vector loop's width in elements (32 on avx512, 16 on avx2/default)."""
    c = dict(h)
    c["step_size"] = h["lr"] / (1 - h["beta1"] ** step)
    c["bc2_sqrt"] = math.sqrt(1 - h["beta2"] ** step)
    shape = p.shape
    p32, g32, m32, v32 = (x.astype(F32).ravel() for x in (p, g, m, v))
    vmax32 = None if vmax is None else vmax.astype(F32).ravel()
    with np.errstate(all="ignore"):
        if h["scale"] is not None:
            g32 = g32 / h["scale"]
    g_out = to(g32.reshape(shape), name) if h["scale"] is not None else np.array(g, copy=True)
    if not fused:
        body: list[tuple[bool, bool, str]] = [(False, False, "none")]
        tail = body
    else:  # vector loop (measured): lerp fused, fma(c2*g, g, v*beta2); weight decay: either
        body = [(True, True, "fma_g"), (False, True, "fma_g")]
        tail = list(itertools.product((True, False), (True, False), ("fma_g", "fma_v", "none")))
    k = p32.size - p32.size % vs  # the scalar loop's first element
    cands = [_math(p32, g32, m32, v32, vmax32, c, *x) for x in body]
    sl = slice(k, None)
    tails = [_math(p32[sl], g32[sl], m32[sl], v32[sl], None if vmax32 is None else vmax32[sl],
                   c, *x) for x in tail] if fused and k < p32.size else []  # fmt: skip
    outs: list[Out] = []
    for j in range(len(cands[0])):
        vals = np.stack([cand[j] for cand in cands])
        lo, hi = vals.min(axis=0), vals.max(axis=0)
        if tails:
            tv = np.stack([t[j] for t in tails])
            lo[k:], hi[k:] = np.minimum(lo[k:], tv.min(axis=0)), np.maximum(hi[k:], tv.max(axis=0))
        value = to(vals[0], name).reshape(shape)
        if np.array_equal(to(lo, name).view(np.uint16), to(hi, name).view(np.uint16)):
            outs.append(exact(value))
            continue
        with np.errstate(all="ignore"):
            lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
            same = hi64 == lo64
            err = np.where(same, 0.0, (hi64 - lo64) / 2).reshape(shape)
            center = np.where(same, lo64, (lo64 + hi64) / 2).reshape(shape)
        outs.append(bounded(value, err, _WHY, center=center))
    p_o, *states = outs
    return [p_o, exact(g_out), *states]
