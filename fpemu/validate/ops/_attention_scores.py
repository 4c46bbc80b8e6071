"""The scores of torch's CPU flash attention (``attention``'s helper): the exact float64
scores ``scale * (q k^T) + mask`` with the causal and masked keys, and the bound on the
kernel's float32 scores, from which the forward and the backward both start.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> q = np.float32(np.ones((1, 1, 2, 4)))
>>> call = Call("aten._scaled_dot_product_flash_attention_for_cpu.default", (q, q, q), {}, ())
>>> s, e_s, scale, masked, a, mags = scores(call, q, q, True)
>>> s[0, 0].tolist(), scale
([[2.0, -inf], [2.0, 2.0]], 0.5)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.backend import scratch
from fpemu.validate.ops import Call
from fpemu.validate.ops._attention_bound import F32, causal_keys, const, gamma_f, mag_mm, on_keys

__all__ = ["mm", "q_block", "scores"]


def mm(a: np.ndarray, b: np.ndarray, slot: str = "", out: bool = False) -> np.ndarray:
    """Batched matmul on contiguous operands (numpy falls back to a slow loop otherwise).
    With ``slot`` (watch path) the operand copies, and with ``out`` the result, go to scratch
    arrays (:func:`fpemu.backend.scratch`): the same values, fewer fresh pages."""
    if not slot:
        return np.asarray(np.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b)))
    ops = []
    for x, name in ((a, "a"), (b, "b")):
        if not x.flags.c_contiguous:
            c = scratch(x.shape, x.dtype, key="att." + slot + name)
            np.copyto(c, x)
            x = c
        ops.append(x)
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    o = scratch(shape, np.result_type(a, b), key="att." + slot + "o") if out else None
    return np.asarray(np.matmul(ops[0], ops[1], out=o))


def q_block(lq: int) -> int:
    return 256 if lq >= 768 else 64 if lq >= 192 else 32


def scores(call: Call, q: np.ndarray, k: np.ndarray, causal: bool, *,
            bound: bool = True, fill: bool = True) -> tuple[Any, ...]:  # fmt: skip
    """Exact scores s = scale*(q k^T) + mask in float64 with the kernel's float32 scale (-inf
    where the key is masked out: causal or a -inf mask), the masked keys, and e_s: a bound on
    the kernel's float32 s (GEMM of D products, the scale, the mask add), (g_D scale |q||k|^T +
    g_2 |s| + g_2 |mask|)(1 + g_2), in float32 (:mod:`._attention_bound`; 0 where masked).
    Without ``bound`` (emulate: the value only), e_s and the masked keys are None. Without
    ``fill`` (watch, for :func:`.probs` with a finite shift) the causal keys of s are left as
    computed (one pass fewer; they are in the masked keys). Also returned: |q| and |k|^T as
    float32 (the e_s GEMM's operands; |k|^T a transposed view of a contiguous |k|)."""
    d = q.shape[-1]
    sc = call.kwargs.get("scale")
    scale = float(np.float32(1.0 / math.sqrt(d) if sc is None else sc))
    s = mm(q, np.swapaxes(k, -1, -2), "s" if bound else "", out=bound)
    mask = call.kwargs.get("attn_mask")
    e_s = None
    g2 = gamma_f(2)
    with np.errstate(invalid="ignore", over="ignore"):
        s *= scale
        if bound:
            # exact: <= float32; |k|^T a transposed view of a contiguous |k| (the layout that
            # astype gave the transposed view of k: the same GEMM call)
            aq, ak = scratch(q.shape, F32, key="att.aq"), scratch(k.shape, F32, key="att.ak")
            np.copyto(aq, q, casting="same_kind")
            np.copyto(ak, k, casting="same_kind")
            akt = np.swapaxes(np.abs(ak, out=ak), -1, -2)
            e_s = mag_mm(np.abs(aq, out=aq), akt, scratch(s.shape, F32, key="att.es"))
            # the masked keys: the causal pattern alone (broadcast) where nothing else can
            # make s -inf (no mask, finite q and k: a float64 s of float32 products does not
            # overflow; finite exactly if the float32 |q|, |k| have a finite max, as max
            # propagates inf and NaN)
            qm, km = float(aq.max(initial=0.0)), float(ak.max(initial=0.0))
            plain = causal and mask is None and math.isfinite(qm) and math.isfinite(km)
            # plain: the factors are cached arrays, the constant at the unmasked keys and 0 at
            # the masked ones (zeroing e_s there in the same passes: a finite x times 0 is +0);
            # safe: no |q||k| sum and no float32 s can overflow (a finite scale and d max|q|
            # max|k| max(1, |scale|) < 2^120), else an inf times 0 is NaN: the masked keys
            # are then zeroed below, as they are where not plain
            safe = plain and math.isfinite(scale) and d * qm * km * max(1.0, abs(scale)) < 2.0**120
            c1, c2 = gamma_f(d) * scale * (1 + g2), g2 * (1 + g2)
            e_s *= on_keys(*s.shape[-2:], c1) if plain else const(c1)
            a = scratch(s.shape, F32, key="att.a")
            np.copyto(a, s, casting="same_kind")
            np.abs(a, out=a)
            a *= on_keys(*s.shape[-2:], c2) if plain else const(c2)
            e_s += a
        if mask is not None:
            mk = np.asarray(mask, np.float64)
            shape = np.broadcast_shapes(s.shape, mk.shape)
            if shape != s.shape:
                s = np.broadcast_to(s, shape).copy()
                e_s = None if e_s is None else np.broadcast_to(e_s, shape).copy()
            s += mk
            if e_s is not None:
                e_s += np.abs(mk).astype(F32) * const(g2 * (1 + g2))
    tri = causal_keys(s.shape[-2], s.shape[-1]) if causal else None
    if tri is not None and (fill or e_s is None):
        np.copyto(s, -np.inf, where=tri)
    if e_s is None:
        return s, None, scale, None, None, None
    masked = tri if plain else np.isneginf(s)
    if tri is not None and not plain and not fill:
        masked |= tri
    if not safe:
        np.copyto(e_s, F32(0.0), where=masked)
    return s, e_s, scale, masked, a if a.shape == s.shape else None, (aq, akt)
