"""MXFP8 and NVFP4 linear layers: every GEMM operand block-quantized along that GEMM's K.

``te_mxfp8``: E4M3 elements, one E8M0 scale per 32 (RCEIL, fp8-mx.md §2.1). ``te_nvfp4``
(TE's NVFP4BlockScaling defaults, fp8-mx.md §3.1):

- activations and gradients: 1-D 16-element blocks along K (§3.4);
- weights: **2-D 16x16 tiles** (granularity ``nvfp4_2d``): the amax of a 16x16 tile is the
  scale of its 16 row blocks, so the row-wise copy (fprop, K = in) and the column-wise copy
  (dgrad, K = out) are the same values transposed (§3.4 "2D weight scaling");
- gradients: **stochastic rounding** with 8 random bits per element from the layer state's
  seeded generator (TE's software fallback, §3.6); inputs and weights round to nearest;
- wgrad operands: the **random Hadamard transform** (``Recipe.wgrad_rht``, §3.1, §3.5):
  ``dy.T`` and ``x.T`` (K = batch) are multiplied by ``H = S H16 / 4`` in 16-wide tiles along
  the batch before quantization (amax taken after the transform); ``H`` is orthogonal, so
  ``(dy.T H)(x.T H).T = dy.T x`` up to quantization.

The transform is computed here as one float64 sum of the 16 exact terms ``+-v_i/4`` rounded
once to float32; TE's kernel order for it is not in the research note, so the RHT operands
are faithful to the maths, not bit-exact to TE's kernel (fp8-mx.md §3.5, §8).

>>> h = hadamard16()
>>> bool(np.array_equal(h @ h.T, np.eye(16))), float(h[0, 0]), float(h[3, 0])
(True, 0.25, -0.25)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fpemu.amp.recipes import Recipe
from fpemu.formats import get_format
from fpemu.nn.fp8_state import FP8State
from fpemu.nn.tensor import Tensor
from fpemu.quant import Quantized, dequantize, quantize, scaled_matmul

F32 = np.float32
BLOCK_GRANS = ("mx", "nvfp4", "nvfp4_2d")
#: TE's fixed RHT sign vector (fp8-mx.md §3.5; reference_nvfp4.py)
RHT_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


@functools.lru_cache(maxsize=1)
def hadamard16() -> Any:
    """``H = S H16 / 4`` (float64, entries +-1/4): Sylvester H16, S = diag(RHT_SIGNS)."""
    h = np.ones((1, 1))
    for _ in range(4):
        h = np.block([[h, h], [h, -h]])
    out = np.diag(np.asarray(RHT_SIGNS, np.float64)) @ h / 4.0
    out.setflags(write=False)
    return out


def rht(a: Any) -> Any:
    """``a @ H`` in 16-wide tiles of the last axis (zero-padded to 16), rounded once to float32.

    >>> e3 = np.eye(16, dtype=np.float32)[3:4]  # row 3 of H: sign -1 times H16's row 3 / 4
    >>> rht(e3)[0, :4].tolist()
    [-0.25, 0.25, 0.25, -0.25]
    """
    v = np.asarray(a, np.float64)
    v = np.pad(v, ((0, 0), (0, -v.shape[1] % 16)))
    t = v.reshape(v.shape[0], -1, 16) @ hadamard16()  # exact terms +-v/4, one float64 sum
    return t.reshape(v.shape).astype(F32)


def _name(gran: str, fmt: str) -> str:
    if gran.startswith("nvfp4"):
        return gran
    return "mxfp8_e4m3" if fmt == "float8_e4m3fn" else "mxfp8_e5m2"


def bq(x: Any, role: str, axis: int, state: FP8State, record: bool) -> Quantized:
    """Quantize ``x`` along ``axis`` (the GEMM's K) to the role's MX/NVFP4 block format, from
    the high-precision tensor (TE quantizes row- and column-wise copies that way, §5.2)."""
    spec = state.recipe.roles()[role]
    mode = "stochastic" if spec.stochastic else "rne"
    xf = np.asarray(x, F32)
    rule = "rceil" if spec.granularity == "mx" else None  # TE MXFP8 uses RCEIL (fp8-mx.md §2)
    q = quantize(xf, _name(spec.granularity, spec.fmt), axis=axis, mode=mode,
                 rng=state.rng if spec.stochastic else None, pad=True, scale_rule=rule)  # fmt: skip
    if record:
        dq = np.asarray(dequantize(q))
        el = np.asarray(q.elements)[tuple(slice(0, n) for n in xf.shape)]
        dq = dq[tuple(slice(0, n) for n in xf.shape)]
        f = q.block_format.element
        n = max(xf.size, 1)
        if role == "input":
            state.records.append({})
        finite = np.abs(np.where(np.isnan(xf), F32(0.0), xf))
        state.records[-1][role] = {
            "amax": float(finite.max()) if xf.size else 0.0,
            "scale": float("nan"),  # one scale per block: see the Quantized for them
            "saturated": float(np.count_nonzero((np.abs(el) == f.max) & (np.abs(xf) > np.abs(dq))))
            / n,
            "flushed": float(np.count_nonzero((xf != 0) & (dq == 0))) / n,
            "subnormal": float(np.count_nonzero((el != 0) & (np.abs(el) < f.tiny))) / n,
        }
        state.last[role] = (q, None)
    return q


def block_linear(x: Tensor, w: Tensor, b: Tensor | None, r: Recipe, state: FP8State) -> Tensor:
    """MXFP8 / NVFP4: every GEMM operand quantized along that GEMM's K (§1.3, §3.4)."""
    xd, wd = np.asarray(x.data, F32), np.asarray(w.data, F32)
    K = xd.shape[1]
    N = wd.shape[0]
    qx = bq(xd, "input", 1, state, True)
    qwt = bq(wd.T, "weight", 0, state, True)
    y = np.asarray(scaled_matmul(qx, qwt, accumulation=r.fprop))[:, :N].astype(F32)
    if b is not None:
        y = (y + np.asarray(b.data, F32)).astype(F32)
    out = Tensor.derived(y, get_format("float32"), (x, w) if b is None else (x, w, b), "fp8_linear")

    def _backward() -> None:
        g = np.asarray(out.grad, F32)
        if x.requires_grad:  # dgrad: dY (B, N) along N, W (N, K) along N
            qg = bq(g, "grad_output", 1, state, True)
            qw = bq(wd, "weight", 0, state, False)
            state.last["weight_t"] = (qw, None)
            x.accumulate(np.asarray(scaled_matmul(qg, qw, accumulation=r.dgrad))[:, :K])
        if w.requires_grad:  # wgrad: dY.T (N, B) along B, X (B, K) along B
            gt, xt = g.T, xd.T
            if r.wgrad_rht:  # both column-wise operands rotated along B (§3.5)
                gt, xt = rht(gt), rht(xt)
            qgt = bq(gt, "grad_output", 1, state, not x.requires_grad)
            qxt = bq(xt.T, "input", 0, state, False)
            state.last["grad_output_t"], state.last["input_t"] = (qgt, None), (qxt, None)
            w.accumulate(np.asarray(scaled_matmul(qgt, qxt, accumulation=r.wgrad))[:N, :K])
        if b is not None and b.requires_grad:
            b.accumulate(np.sum(np.asarray(g, np.float64), axis=0).astype(F32))

    out._backward = _backward
    return out
