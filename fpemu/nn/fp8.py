"""FP8 linear layers: fprop, dgrad and wgrad GEMMs quantized by a recipe, with per-tensor state.

:func:`fp8_linear` computes ``y = x @ w.T + b`` as a Transformer Engine / torchao FP8 linear
does it (fp8-mx.md §4): each GEMM quantizes its operands per tensor role (``input``,
``weight``, ``grad_output``), multiplies on the FP8 tensor-core model with the recipe's
accumulation (fprop fast, dgrad/wgrad split every 128 K for TE, §4.4), and applies the
dequantization scales ``scale_inv = RN32(1/scale)`` in the epilogue (§4.1, §6.4).

Scales (per tensor, this module; rules from :mod:`fpemu.quant.tensor_scaling`):

- ``te_delayed`` (§4.1): the quantize uses the state's scale; the measured amax goes into
  ``history[0]``; after the backward pass the layer calls :meth:`FP8State.update`, which rolls
  the history and computes the next scale (TE's fused bulk update), so step t uses the amax
  of steps <= t-1.
- ``te_current`` (§4.2): the scale from the tensor's own amax (fp32 ``fmaxf``: NaN dropped).
- ``torchao`` (§4.3): ``RN32(fp8_max / max(amax, 1e-12))`` (``torch.max``: NaN propagates).
- ``none``: scale 1 (a plain saturating cast).

``recipe=None`` runs the same code with quantization off and float64 GEMMs (the reference the
gradient tests use). MX (``te_mxfp8``: E8M0 scales per 32, RCEIL rule) and NVFP4
(``te_nvfp4``: 16-blocks, 16x16 weight tiles, stochastic rounding of grad_output, Hadamard
transform of the wgrad operands) run in :mod:`fpemu.nn.fp8_block`; their records carry
``scale`` NaN (one scale per block). Row-wise and 1x128/128x128 blockwise recipes
(``torchao_rowwise``, ``te_blockwise``, ``deepseek_v3``) run in :mod:`fpemu.nn.fp8_scaled`
(records: ``scale`` NaN).

>>> import numpy as np
>>> st = FP8State("te_current")
>>> x = Tensor(np.array([[1.0, 2.0]], np.float32), requires_grad=True)
>>> w = Tensor(np.array([[3.0, -1.0]], np.float32), requires_grad=True)
>>> y = fp8_linear(x, w, None, recipe="te_current", state=st)
>>> y.data.tolist(), st.records[-1]["input"]["scale"]  # -1 * 448/3 rounds to -144 in E4M3
([[1.071428656578064]], 224.0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fpemu.amp.recipes import Recipe, get_recipe
from fpemu.formats import get_format
from fpemu.nn.fp8_block import BLOCK_GRANS, block_linear
from fpemu.nn.fp8_scaled import runs as runs_scaled
from fpemu.nn.fp8_scaled import scaled_linear
from fpemu.nn.fp8_state import ROLES, FP8State
from fpemu.nn.modules import MLP, Linear
from fpemu.nn.tensor import Tensor, round_to
from fpemu.quant import quantize_fp8, scaled_matmul
from fpemu.tensorcore.arch import get_arch
from fpemu.tensorcore.block import chain_blocks

F32 = np.float32
__all__ = ["ROLES", "FP8Linear", "FP8State", "fp8_linear", "fp8_mlp", "supported"]
_PATHS = ("none", "te_delayed", "te_current", "torchao")
_BLOCK = BLOCK_GRANS


def _amax(x: Any, rule: str) -> Any:
    a = np.abs(np.asarray(x, F32))
    if a.size == 0:
        return F32(0.0)
    if rule == "torchao":
        return F32(np.max(a))  # torch.max propagates NaN (§4.3)
    finite = a[~np.isnan(a)]  # TE's fp32 fmaxf reduction drops NaN operands (§4.2)
    return F32(finite.max()) if finite.size else F32(0.0)


def _quant(x: Any, role: str, state: FP8State) -> tuple[Any, Any]:
    """(values exact in the role's FP8 format, dequantization scale_inv)."""
    spec = state.recipe.roles()[role]
    amax = _amax(x, spec.scale_rule)
    scale = state.scale_for(role, amax)
    if not np.isfinite(scale) or scale <= 0:
        raise ValueError(
            f"{role}: scale {float(scale)!r} from amax {float(amax)!r} is not a "
            "finite positive float (torchao gives NaN/0 for NaN/Inf amax)"
        )
    q = np.asarray(quantize_fp8(np.asarray(x, F32), scale, spec.fmt))
    state._record(role, amax, scale, x, q)
    state.last[role] = (q, scale)
    with np.errstate(divide="ignore", over="ignore"):
        inv = F32(F32(1.0) / F32(scale))  # __frcp_rn / Tensor.reciprocal (§4.1, §4.3)
    return q, inv


def _gemm(a: Any, fa: str, sa: Any, b: Any, fb: str, sb: Any, acc: str) -> Any:
    """``RN32(chain(a @ b) * RN32(sa * sb))``; mixed E5M2 x E4M3 (HYBRID) chains directly."""
    if fa == fb:
        return scaled_matmul(a, b, scale_a=sa, scale_b=sb, fmt=fa, accumulation=acc)
    spec = get_arch("h100").block_spec(get_format(fa), get_format("float32"))
    K = a.shape[1]
    step = K if acc == "fast" else 128
    y = np.zeros((a.shape[0], b.shape[1]), F32)
    for k0 in range(0, max(K, 1), step):  # split: per-128 chains from +0 summed in FP32 RN
        z = np.zeros_like(y, dtype=np.float64)
        p = chain_blocks(a[:, k0 : k0 + step], b[k0 : k0 + step], z, spec=spec,
                         fmt=get_format(fa), b_fmt=get_format(fb)).astype(F32)  # fmt: skip
        y = p if acc == "fast" else (y + p).astype(F32)
    s = F32(F32(sa) * F32(sb))
    return ((y * s).astype(F32) + F32(0.0)).astype(np.float64)


def supported(recipe: Recipe | str) -> bool:
    """Whether :func:`fp8_linear` runs ``recipe``: per-tensor rules, MX/NVFP4 for all roles, or
    row-wise/blockwise FP8 (:mod:`fpemu.nn.fp8_scaled`).

    >>> supported("te_delayed"), supported("te_mxfp8"), supported("deepseek_v3")
    (True, True, True)
    """
    r = get_recipe(recipe)
    grans = {spec.granularity for spec in r.roles().values()}
    if grans <= set(_BLOCK):
        return True
    if runs_scaled(r):
        return True
    return grans == {"tensor"} and all(v.scale_rule in _PATHS for v in r.roles().values())


def fp8_linear(x: Tensor, w: Tensor, b: Tensor | None = None, *, recipe: Recipe | str | None,
               state: FP8State | None = None) -> Tensor:  # fmt: skip
    """``x @ w.T + b`` with FP8 fprop/dgrad/wgrad GEMMs (float32 output, FP32 bias add).

    Raises:
        ValueError: shapes, a recipe whose granularity this layer does not run, a state made
            for another recipe.
    """
    if x.data.ndim != 2 or w.data.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"fp8_linear needs x (B, K) and w (N, K); got {x.shape}, {w.shape}")
    if recipe is None:
        return _linear_off(x, w, b)
    r = get_recipe(recipe)
    grans = {spec.granularity for spec in r.roles().values()}
    if not supported(r):
        what = ", ".join(f"{k} {v.granularity}/{v.scale_rule}" for k, v in r.roles().items())
        raise ValueError(f"recipe={r.name!r} ({what}); fp8_linear runs: tensor granularity "
                         f"with {', '.join(_PATHS)}; mx/nvfp4 for all roles; or one FP8 "
                         "format with tensor/row/block1x128/block128x128 granularity and "
                         "none/te_current/torchao/deepseek rules")  # fmt: skip
    state = FP8State(r) if state is None else state
    if state.recipe != r:
        raise ValueError(f"state belongs to recipe {state.recipe.name!r}, not {r.name!r}")
    if grans <= set(_BLOCK):
        return block_linear(x, w, b, r, state)
    if runs_scaled(r):
        return scaled_linear(x, w, b, state)
    fx, fw, fg = r.input.fmt, r.weight.fmt, r.grad_output.fmt
    qx, sx = _quant(x.data, "input", state)
    qw, sw = _quant(w.data, "weight", state)
    y = _gemm(qx, fx, sx, qw.T, fw, sw, r.fprop).astype(F32)
    if b is not None:
        y = (y + np.asarray(b.data, F32)).astype(F32)  # bias in the FP32 epilogue
    out = Tensor.derived(y, get_format("float32"), (x, w) if b is None else (x, w, b), "fp8_linear")

    def _backward() -> None:
        g = out.grad
        assert g is not None
        qg, sg = _quant(g, "grad_output", state)
        if x.requires_grad:  # dgrad: dX = dY @ W
            x.accumulate(_gemm(qg, fg, sg, qw, fw, sw, r.dgrad))
        if w.requires_grad:  # wgrad: dW = dY.T @ X
            w.accumulate(_gemm(qg.T, fg, sg, qx, fx, sx, r.wgrad))
        if b is not None and b.requires_grad:  # dbias from the unquantized dY, in FP32
            b.accumulate(np.sum(np.asarray(g, np.float64), axis=0).astype(F32))
        state.update()

    out._backward = _backward
    return out


def _linear_off(x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
    """Quantization off: float64 GEMMs, the same forward/backward structure."""
    y = np.asarray(x.data, np.float64) @ np.asarray(w.data, np.float64).T
    if b is not None:
        y = y + np.asarray(b.data, np.float64)
    f64 = get_format("float64")
    out = Tensor.derived(y, f64, (x, w) if b is None else (x, w, b), "fp8_linear_off")

    def _backward() -> None:
        g = np.asarray(out.grad, np.float64)
        if x.requires_grad:
            x.accumulate(g @ np.asarray(w.data, np.float64))
        if w.requires_grad:
            w.accumulate(g.T @ np.asarray(x.data, np.float64))
        if b is not None and b.requires_grad:
            b.accumulate(g.sum(axis=0))

    out._backward = _backward
    return out


class FP8Linear(Linear):
    """A :class:`~fpemu.nn.modules.Linear` whose GEMMs run under an FP8 recipe.

    Built like ``Linear`` (same initialisation from ``rng``, FP32 master weights; a recipe
    with ``master="bfloat16"`` stores them in bfloat16). ``recipe=None`` turns quantization
    off (float64 GEMMs). ``state`` holds the amax histories, scales and per-step records.

    >>> lin = FP8Linear(4, 3, recipe="te_delayed")
    >>> lin(Tensor(np.ones((2, 4), np.float32))).shape, lin.state.scale["input"]
    ((2, 3), np.float32(1.0))
    """

    def __init__(self, in_features: int, out_features: int, *, recipe: Recipe | str | None,
                 bias: bool = True, rng: np.random.Generator | None = None,
                 name: str = "linear") -> None:  # fmt: skip
        self.recipe = None if recipe is None else get_recipe(recipe)
        master = "float64" if self.recipe is None else self.recipe.master
        super().__init__(in_features, out_features, bias=bias, policy=master, rng=rng,
                         name=name)  # fmt: skip
        self.state = None if self.recipe is None else FP8State(self.recipe)

    def __call__(self, x: Tensor) -> Tensor:
        return fp8_linear(x, self.weight, self.bias, recipe=self.recipe, state=self.state)


def fp8_mlp(sizes: Sequence[int], *, recipe: Recipe | str | None, activation: str = "relu",
            seed: int = 0) -> MLP:  # fmt: skip
    """An :class:`~fpemu.nn.modules.MLP` (FP32 policy between layers) with FP8 linears.

    The weights are the FP32 MLP's of the same seed (same initial bits as the baselines).

    >>> m = fp8_mlp([4, 8, 3], recipe="te_current", seed=0)
    >>> type(m.layers[0]).__name__, m(np.ones((2, 4), np.float32)).shape
    ('FP8Linear', (2, 3))
    """
    m = MLP(sizes, activation=activation, policy="fp32", seed=seed)
    layers = []
    for lin in m.layers:
        n_out, n_in = lin.weight.shape
        f = FP8Linear(n_in, n_out, recipe=recipe, bias=lin.bias is not None, name=lin.name)
        f.weight.data = round_to(np.asarray(lin.weight.data, np.float64), f.weight.fmt)
        if lin.bias is not None and f.bias is not None:
            f.bias.data = round_to(np.asarray(lin.bias.data, np.float64), f.bias.fmt)
        layers.append(f)
    m.layers = layers  # type: ignore[assignment]
    return m
