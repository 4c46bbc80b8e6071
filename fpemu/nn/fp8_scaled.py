"""Row-wise and blockwise FP8 GEMM operands: torchao rowwise, TE Float8BlockScaling, DeepSeek-V3.

Every GEMM operand is quantized from the high-precision tensor with scales along that GEMM's
reduction dimension K (never by transposing quantized data: fp8-mx.md §5.2 "both the row-wise
and the column-wise versions are quantized from the high-precision input"). A scale tile is
``(rows, K-elements)`` of the operand laid out K-last:

============  ===========================  =================================================
granularity   tile of an operand (R, K)    used for
============  ===========================  =================================================
``tensor``    the whole operand            (mixing with the others)
``row``       ``(1, K)``: one per row      torchao rowwise (fp8-mx.md §4.3, axiswise)
``block1x128``  ``(1, 128)``               activations and gradients (§5.1, §5.2)
``block128x128``  ``(128, 128)``           weights (§5.1, §5.2)
============  ===========================  =================================================

The three GEMMs (``y = x @ w.T``; ``dx = dy @ w``; ``dw = dy.T @ x``) therefore use:
fprop ``x`` row-wise along K_in and ``w`` along K_in; dgrad ``dy`` along N_out and ``w``
along N_out; wgrad ``dy.T`` and ``x.T`` along the batch (the column-wise copies: 128x1 tiles of
``dy`` and ``x``, i.e. 1x128 tiles of their transposes, §5.2; torchao: ``axiswise_dim=0``,
float8_linear.py backward). A 128x128 weight block is the same block in ``w`` and ``w.T``,
so fprop and dgrad quantize the weight identically (§5.2).

Scale rules per tile (``amax`` of the tile):

- ``te_current`` (TE Float8BlockScaling, §5.2 and §4.2): ``te_scale`` (pow2 mask by default),
  ``q = E4M3_sat(RN32(x * s))``, dequantization ``RN32(1/s)`` (exact for a power of two);
  NaN elements are dropped from the amax (fp32 ``fmaxf``).
- ``torchao`` (§4.3): ``RN32(448 / max(amax, 1e-12))``, pow2 floor, dequantization
  ``RN32(1/s)`` (``Tensor.reciprocal``); NaN propagates (then the layer refuses the scale).
- ``deepseek`` (§2.1, §5.1): ``sf = ceil_ue8m0(RN32(max(amax, 1e-4) / 448))``,
  ``q = E4M3_sat(RN32(x * RN32(1/sf)))``, dequantization ``sf``.
- ``none``: scale 1.

GEMM: row-wise scales run :func:`fpemu.quant.scaled_matmul` with (M, 1) x (1, N) scales
(``RN32(acc * RN32(sa * sb))``, torchao's ``output *= a_inv * b_inv``, §4.3). Scales along K
run TE's blockwise reference order (§5.3): per 128-element K tile ``k`` (the last may be
short) a tensor-core chain ``P_k`` from +0, then ``y = fma32(RN32(P_k * sa_k), sb_k, y)``.

>>> import numpy as np
>>> from fpemu.nn.fp8_state import FP8State
>>> from fpemu.nn.tensor import Tensor
>>> st = FP8State("deepseek_v3")
>>> x = Tensor(np.array([[1.0, 300.0]], np.float32)); w = Tensor(np.eye(2, dtype=np.float32))
>>> scaled_linear(x, w, None, st).data.tolist(), st.last["input"][1].tolist()  # 1/sf = 1
([[1.0, 288.0]], [[1.0]])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.recipes import Recipe
from fpemu.formats import get_format
from fpemu.nn.fp8_state import FP8State
from fpemu.nn.tensor import Tensor
from fpemu.quant import deepseek_scale, fma32, quantize_fp8, scaled_matmul, te_scale, torchao_scale

F32 = np.float32
GRANS = ("tensor", "row", "block1x128", "block128x128")
RULES = ("none", "te_current", "torchao", "deepseek")
_BLOCKS = ("block1x128", "block128x128")
_KT = 128  # K elements per scale tile and per FP32 promotion (§5.1 N_C = 128, §5.3)


def runs(r: Recipe) -> bool:
    """Whether this module runs ``r``: one FP8 format, GRANS x RULES, not all per-tensor."""
    specs = r.roles().values()
    return (
        len({s.fmt for s in specs}) == 1
        and all(s.granularity in GRANS and s.scale_rule in RULES for s in specs)
        and any(s.granularity != "tensor" for s in specs)
    )


def _tile(gran: str, rows: int, k: int) -> tuple[int, int]:
    return {"tensor": (max(rows, 1), max(k, 1)), "row": (1, max(k, 1)),
            "block1x128": (1, _KT), "block128x128": (_KT, _KT)}[gran]  # fmt: skip


def _tile_amax(m: Any, tile: tuple[int, int], drop_nan: bool) -> Any:
    """amax per tile of ``m`` (R, K), zero-padded to whole tiles; NaN dropped or propagated."""
    a = np.abs(np.asarray(m, F32))
    if drop_nan:
        a = np.where(np.isnan(a), F32(0.0), a)  # fmaxf reduction: NaN operands dropped (§4.2)
    r, c = tile
    p = np.pad(a, ((0, -a.shape[0] % r), (0, -a.shape[1] % c)))
    return p.reshape(p.shape[0] // r, r, p.shape[1] // c, c).max(axis=(1, 3))


def _tile_scales(amax: Any, rule: str, fmt: str, power_2: bool, r: Recipe) -> tuple[Any, Any]:
    """(quantize multiplier, dequantization factor) per tile, float32."""
    if rule == "none":
        one = np.ones_like(amax, F32)
        return one, one
    if rule == "deepseek":
        sf = np.asarray(deepseek_scale(amax, fmt), F32)
        return (F32(1.0) / sf).astype(F32), sf  # exact: sf is a power of two
    if rule == "te_current":
        s = np.asarray(te_scale(amax, fmt, margin=int(r.margin), power_2=power_2,
                                epsilon=r.epsilon), F32)  # fmt: skip
    else:
        s = np.asarray(torchao_scale(amax, fmt, power_of_2=power_2), F32)
    if not bool(np.all(np.isfinite(s) & (s > 0))):
        bad = float(s[~(np.isfinite(s) & (s > 0))].flat[0])
        raise ValueError(f"scale {bad!r} is not a finite positive float (torchao gives NaN/0 "
                         "for a NaN/Inf amax)")  # fmt: skip
    with np.errstate(divide="ignore", over="ignore"):
        return s, (F32(1.0) / s).astype(F32)  # __frcp_rn / Tensor.reciprocal


class Operand:
    """One quantized GEMM operand laid out K-last: values ``q`` (R, K), tile scales.

    ``mult``: per-tile quantize multiplier; ``inv``: per-tile dequantization factor (the GEMM's
    scale); ``tile``: (rows, K elements) of a tile; ``amax``: per-tile amax.
    """

    def __init__(self, m: Any, role: str, state: FP8State) -> None:
        spec = state.recipe.roles()[role]
        self.role, self.fmt, self.gran = role, spec.fmt, spec.granularity
        self.src = np.asarray(m, F32)
        self.tile = _tile(spec.granularity, *self.src.shape)
        self.amax = _tile_amax(self.src, self.tile, spec.scale_rule != "torchao")
        self.mult, self.inv = _tile_scales(self.amax, spec.scale_rule, spec.fmt, spec.power_2,
                                           state.recipe)  # fmt: skip
        full = self.expand(self.mult)
        self.q = np.asarray(quantize_fp8(self.src, full, spec.fmt))
        self._full = full

    def expand(self, s: Any) -> Any:
        """Per-tile values repeated to the operand's (R, K) shape."""
        r, c = self.tile
        R, K = self.src.shape
        return np.repeat(np.repeat(s, r, axis=0), c, axis=1)[:R, :K]

    def record(self, state: FP8State) -> None:
        """Open (input) or fill the step's record for this role; keep the operand in ``last``."""
        f = get_format(self.fmt)
        with np.errstate(all="ignore"):
            y = np.abs(self.src * self._full)
        n = max(self.src.size, 1)
        if self.role == "input":
            state.records.append({})
        state.records[-1][self.role] = {
            "amax": float(np.max(self.amax)) if self.amax.size else 0.0,
            "scale": float("nan"),  # one scale per row/tile: see state.last
            "saturated": float(np.count_nonzero(y > f.max)) / n,
            "flushed": float(np.count_nonzero((self.src != 0) & (self.q == 0))) / n,
            "subnormal": float(np.count_nonzero((self.q != 0) & (np.abs(self.q) < f.tiny))) / n,
        }
        state.last[self.role] = (self.q, self.mult)


def gemm(a: Operand, b: Operand, acc: str) -> Any:
    """``(a.q * a.inv) @ (b.q * b.inv).T`` as the recipe's GEMM (both operands K-last)."""
    K = a.q.shape[1]
    sa_full, sb_full = a.expand(a.inv), b.expand(b.inv)  # per-element dequantization factors
    if not {a.gran, b.gran} & set(_BLOCKS):  # one scale per row: the scaled_mm epilogue
        return scaled_matmul(a.q, b.q.T, scale_a=sa_full[:, :1], scale_b=sb_full[:, :1].T,
                             fmt=a.fmt, accumulation=acc)  # fmt: skip
    y = np.zeros((a.q.shape[0], b.q.shape[0]), F32)
    for k0 in range(0, K, _KT):  # TE blockwise reference order (§5.3), chain from +0 per tile
        p = np.asarray(scaled_matmul(a.q[:, k0 : k0 + _KT], b.q[:, k0 : k0 + _KT].T, fmt=a.fmt,
                                     accumulation="fast"), F32)  # fmt: skip
        sa, sb = sa_full[:, k0 : k0 + 1], sb_full[:, k0 : k0 + 1].T
        y = fma32((p * sa).astype(F32), sb, y)
    return (y + F32(0.0)).astype(np.float64)


def scaled_linear(x: Tensor, w: Tensor, b: Tensor | None, state: FP8State) -> Tensor:
    """``x @ w.T + b`` with row-wise/blockwise FP8 operands (see the module docstring)."""
    r = state.recipe
    xd, wd = np.asarray(x.data, F32), np.asarray(w.data, F32)
    qx = Operand(xd, "input", state)
    qw = Operand(wd, "weight", state)  # w (N, K): K-last already
    qx.record(state)
    qw.record(state)
    y = gemm(qx, qw, r.fprop).astype(F32)
    if b is not None:
        y = (y + np.asarray(b.data, F32)).astype(F32)  # bias in the FP32 epilogue
    out = Tensor.derived(y, get_format("float32"), (x, w) if b is None else (x, w, b), "fp8_linear")

    def _backward() -> None:
        g = np.asarray(out.grad, F32)
        first = True
        if x.requires_grad:  # dgrad: dX = dY @ W, K = N_out
            qg = Operand(g, "grad_output", state)
            qg.record(state)
            first = False
            qwt = Operand(wd.T, "weight", state)  # w.T (K, N): tiles along N_out
            state.last["weight_t"] = (qwt.q, qwt.mult)
            x.accumulate(gemm(qg, qwt, r.dgrad))
        if w.requires_grad:  # wgrad: dW = dY.T @ X, K = batch (column-wise copies)
            qgt = Operand(g.T, "grad_output", state)
            if first:
                qgt.record(state)
            qxt = Operand(xd.T, "input", state)
            state.last["grad_output_t"] = (qgt.q, qgt.mult)
            state.last["input_t"] = (qxt.q, qxt.mult)
            w.accumulate(gemm(qgt, qxt, r.wgrad))
        if b is not None and b.requires_grad:  # dbias from the unquantized dY, in FP32
            b.accumulate(np.sum(np.asarray(g, np.float64), axis=0).astype(F32))

    out._backward = _backward
    return out
