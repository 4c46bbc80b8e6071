"""Row-wise and blockwise FP8 recipes (issue 15): torchao_rowwise, te_blockwise, deepseek_v3.

Each step's six quantized operand copies (fprop x and w; dgrad dy and w.T; wgrad dy.T and x.T)
and their per-row/per-tile scales are compared bit for bit with a transcription written here
from fp8-mx.md (§4.3 torchao, §5.2 TE Float8BlockScaling with §4.2's scale formula, §2.1/§5.1
DeepGEMM), one tile at a time with Python floats, ``fractions.Fraction`` and ml_dtypes' E4M3
cast (a library fpemu did not write). No fpemu scale or quantize code is called here.
"""

from __future__ import annotations

import dataclasses
import math
import struct
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpemu.amp.recipes import RoleSpec, get_recipe
from fpemu.nn import Tensor
from fpemu.nn.fp8 import FP8State, fp8_linear, supported

FLT_MAX = float(np.finfo(np.float32).max)
TILES = {"row": None, "block1x128": (1, 128), "block128x128": (128, 128)}
COPIES = {  # state.last key -> (role, source of the K-last operand)
    "input": ("input", lambda x, w, g: x),
    "weight": ("weight", lambda x, w, g: w),
    "grad_output": ("grad_output", lambda x, w, g: g),
    "weight_t": ("weight", lambda x, w, g: w.T),
    "grad_output_t": ("grad_output", lambda x, w, g: g.T),
    "input_t": ("input", lambda x, w, g: x.T),
}


def rn32(v: float | Fraction) -> float:
    f = float(v)
    try:
        return float(struct.unpack("f", struct.pack("f", f))[0])
    except OverflowError:
        return math.copysign(math.inf, f)


def pow2_floor(s: float) -> float:
    return math.ldexp(0.5, math.frexp(s)[1])


def te_tile_scale(amax: float, pow2: bool) -> tuple[float, float]:
    """fp8-mx.md §4.2 compute_scale_from_amax (eps 0), value_for_inf FLT_MAX for float32
    input (§5.2); dequantization 1/s."""
    if amax == 0 or math.isinf(amax) or math.isnan(amax):
        s = 1.0
    else:
        s = rn32(Fraction(448) / Fraction(amax))
        s = FLT_MAX if s == math.inf else s
        s = pow2_floor(s) if pow2 else s
    return s, rn32(Fraction(1) / Fraction(s))


def torchao_tile_scale(amax: float, pow2: bool) -> tuple[float, float]:
    """fp8-mx.md §4.3: RN32(448 / max(amax, 1e-12)), pow2 floor; Tensor.reciprocal."""
    s = rn32(448.0 / max(amax, 1e-12))
    s = pow2_floor(s) if pow2 else s
    return s, rn32(Fraction(1) / Fraction(s))


def deepseek_tile_scale(amax: float, pow2: bool) -> tuple[float, float]:
    """fp8-mx.md §2.1: sf = ceil_to_ue8m0(RN32(max(amax, 1e-4) / 448)), codes 1..254."""
    sf = rn32(Fraction(max(amax, rn32(1e-4))) / 448)
    m, e = math.frexp(sf)  # sf = m * 2**e, 0.5 <= m < 1
    sf = sf if m == 0.5 else math.ldexp(1.0, e)
    sf = min(max(sf, 2.0**-126), 2.0**127)
    return 1.0 / sf, sf


RULES = {"te_current": te_tile_scale, "torchao": torchao_tile_scale,
         "deepseek": deepseek_tile_scale}  # fmt: skip


def e4m3(v: np.ndarray) -> np.ndarray:
    """satfinite RNE to E4M3 (clamp, then ml_dtypes' RNE cast)."""
    return np.clip(v, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)


def transcribe(m: np.ndarray, gran: str, rule: str, pow2: bool):  # type: ignore[no-untyped-def]
    """Per tile: (q (R, K), multiplier per tile, dequantization per tile)."""
    m = np.asarray(m, np.float32)
    R, K = m.shape
    tr, tc = TILES[gran] or (1, K)
    nr, nc = -(-R // tr), -(-K // tc)
    q = np.zeros((R, K))
    mult, inv = np.zeros((nr, nc)), np.zeros((nr, nc))
    for i in range(nr):
        for j in range(nc):
            blk = m[i * tr : (i + 1) * tr, j * tc : (j + 1) * tc]
            amax = float(np.max(np.abs(blk)))
            s, d = RULES[rule](amax, pow2)
            mult[i, j], inv[i, j] = s, d
            q[i * tr : (i + 1) * tr, j * tc : (j + 1) * tc] = e4m3(blk * np.float32(s))
    return q, mult, inv


def _data(seed: int, B: int = 136, K: int = 300, N: int = 130):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(B, K)).astype(np.float32)
    x[3, 5] = 40.0  # an outlier: only its row / tile gets a small scale
    w = (rng.normal(size=(N, K)) * 0.05).astype(np.float32)
    g = (rng.normal(size=(B, N)) * 1e-3).astype(np.float32)
    return x, w, g


def _step(recipe: str, x, w, g):  # type: ignore[no-untyped-def]
    st = FP8State(recipe)
    xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    y = fp8_linear(xt, wt, None, recipe=recipe, state=st)
    y.backward(g)
    return st, y, xt, wt


@pytest.mark.parametrize("recipe", ["torchao_rowwise", "te_blockwise", "deepseek_v3"])
def test_operands_and_scales_match_transcription(recipe: str) -> None:
    x, w, g = _data(1)
    st, *_ = _step(recipe, x, w, g)
    r = get_recipe(recipe)
    for key, (role, src) in COPIES.items():
        spec = r.roles()[role]
        q, mult, _ = transcribe(src(x, w, g), spec.granularity, spec.scale_rule, spec.power_2)
        ours_q, ours_mult = st.last[key]
        assert np.array_equal(np.asarray(ours_q, np.float64).view(np.uint64), q.view(np.uint64)), (
            key
        )
        assert np.array_equal(np.asarray(ours_mult, np.float32).view(np.uint32),
                              mult.astype(np.float32).view(np.uint32)), key  # fmt: skip
    # 128x128 weight blocks: fprop's w and dgrad's w.T are the same quantization (§5.2)
    if r.weight.granularity == "block128x128":
        assert np.array_equal(st.last["weight"][0].T, st.last["weight_t"][0])
    rec = st.records[-1]
    assert set(rec) == {"input", "weight", "grad_output"} and math.isnan(rec["input"]["scale"])
    assert rec["input"]["amax"] == 40.0


@pytest.mark.parametrize("recipe", ["torchao_rowwise", "te_blockwise", "deepseek_v3"])
def test_equals_disabled_on_exact_data(recipe: str) -> None:
    """Small integers: every scale is a power of two that keeps them exact in E4M3 (|x| <= 4
    times a scale <= 2**8 ... ), each chain sums integer multiples of one power of two (at most
    128 * 16 units < 2**14, inside the chain's window, fp8-mx.md §6), and the FP32 epilogue
    adds exact values: the FP8 layer must reproduce the float64 layer's bits. K = 300 has a
    short last K tile, N = 130 a partial 128x128 weight block."""
    rng = np.random.default_rng(4)
    x0 = rng.integers(-4, 5, (136, 300)).astype(np.float32)
    w0 = rng.integers(-3, 4, (130, 300)).astype(np.float32)
    b0 = rng.integers(-2, 3, 130).astype(np.float32)
    g0 = rng.integers(-3, 4, (136, 130)).astype(np.float32)
    outs = []
    for rec in (recipe, None):
        x, w, b = (Tensor(a, "float32" if rec else "float64", requires_grad=True)
                   for a in (x0, w0, b0))  # fmt: skip
        y = fp8_linear(x, w, b, recipe=rec)
        y.backward(g0.astype(y.data.dtype))
        outs.append([np.asarray(t, np.float64) for t in (y.data, x.grad, w.grad, b.grad)])
    for a, b_ in zip(*outs, strict=True):
        assert np.array_equal(a.view(np.uint64), b_.view(np.uint64))


def test_blockwise_gemm_order_without_pow2() -> None:
    """FP32 (non power-of-two) TE block scales: the output follows §5.3's order
    ``fma(RN32(P_k * sx_k), sw_k, y)`` per K tile, with P_k computed here exactly: on integer
    data every P_k is an exact integer, so only the epilogue's roundings remain."""
    r = get_recipe("te_blockwise", input=RoleSpec("e4m3", "block1x128", "te_current"),
                   weight=RoleSpec("e4m3", "block128x128", "te_current"),
                   grad_output=RoleSpec("e4m3", "block1x128", "te_current"))  # fmt: skip
    rng = np.random.default_rng(5)
    x = rng.integers(-3, 4, (4, 256)).astype(np.float32)
    w = rng.integers(-3, 4, (3, 256)).astype(np.float32)
    st = FP8State(r)
    y = fp8_linear(Tensor(x), Tensor(w), None, recipe=r, state=st)
    qx, _, ix = transcribe(x, "block1x128", "te_current", False)
    qw, _, iw = transcribe(w, "block128x128", "te_current", False)
    want = np.zeros((4, 3))
    for i in range(4):
        for j in range(3):
            acc = 0.0
            for k in range(2):
                p = sum(
                    Fraction(qx[i, c]) * Fraction(qw[j, c]) for c in range(128 * k, 128 * k + 128)
                )
                t = rn32(p * Fraction(ix[i, k]))
                acc = rn32(Fraction(t) * Fraction(iw[0, k]) + Fraction(acc))  # one rounding: fma
            want[i, j] = acc
    assert np.array_equal(y.data.astype(np.float64), want)


def test_supported_and_refusals() -> None:
    assert all(supported(n) for n in ("torchao_rowwise", "te_blockwise", "deepseek_v3"))
    mixed = get_recipe("te_blockwise", grad_output=RoleSpec("e5m2", "block1x128", "te_current"))
    assert not supported(mixed)
    with pytest.raises(ValueError, match=r"te_blockwise.*grad_output block1x128/te_current"):
        fp8_linear(Tensor(np.ones((2, 4))), Tensor(np.ones((3, 4))), recipe=mixed)
    x = np.ones((2, 4), np.float32)
    x[1, 0] = np.inf  # torchao: Inf amax gives scale 0 (§4.3): refused, naming the scale
    with pytest.raises(ValueError, match=r"scale 0\.0 is not a finite positive float"):
        fp8_linear(Tensor(x), Tensor(np.ones((3, 4), np.float32)), recipe="torchao_rowwise")


def test_te_blockwise_nan_dropped_from_tile_amax() -> None:
    """TE's fp32 amax (fmaxf) drops NaN (§4.2): the tile's scale comes from the other elements;
    the NaN element itself stays NaN in E4M3."""
    x = np.full((1, 128), 2.0, np.float32)
    x[0, 7] = np.nan
    st = FP8State("te_blockwise")
    fp8_linear(Tensor(x), Tensor(np.ones((1, 128), np.float32)), None, recipe="te_blockwise",
               state=st)  # fmt: skip
    q, mult = st.last["input"]
    assert float(mult[0, 0]) == 128.0 and np.isnan(q[0, 7]) and q[0, 0] == 256.0


# -- torchao 0.18 rowwise Float8Linear(emulate=True) on CPU -------------------------------------
def test_torchao_rowwise_emulated_step() -> None:
    """One step against torchao's rowwise recipe (from_recipe_name("rowwise"), emulate=True).

    Bit for bit: the six FP8 operand copies and their per-row/per-column scales, captured with
    torchao's own ``hp_tensor_to_float8_dynamic`` and the arguments of float8_linear.py's
    forward/backward; torchao's output and gradients are then exactly ``torch.mm`` of those
    dequantized operands (so they are the ones its step used). fpemu's GEMMs run the FP8
    tensor-core model (fprop fast, dgrad/wgrad split) with the row-wise epilogue: bounded below.
    """
    torch = pytest.importorskip("torch")
    f8 = pytest.importorskip("torchao.float8")
    su = pytest.importorskip("torchao.float8.float8_scaling_utils")
    cfg_mod = pytest.importorskip("torchao.float8.config")
    torch.manual_seed(0)
    cfg = dataclasses.replace(f8.Float8LinearConfig.from_recipe_name("rowwise"), emulate=True)
    m = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    f8.convert_to_float8_training(m, config=cfg)
    x = torch.randn(16, 64, requires_grad=True)
    g = torch.randn(16, 32) * 1e-3
    y = m(x)
    y.backward(g)
    w = m[0].weight.detach()
    st, yo, xo, wo = _step("torchao_rowwise", x.detach().numpy(), w.numpy(), g.numpy())

    mm_cfg = m[0].linear_mm_config
    ax = cfg_mod.ScalingGranularity.AXISWISE

    def tq(t, dim):  # type: ignore[no-untyped-def]
        f = su.hp_tensor_to_float8_dynamic(
            t,
            torch.float8_e4m3fn,
            mm_cfg,
            scaling_granularity=ax,
            axiswise_dim=dim,
            round_scales_to_power_of_2=True,
        )
        return f._data.float().numpy().astype(np.float64), f._scale.numpy(), f

    xd, wt_hp = x.detach(), w.t()
    theirs = {  # key -> (data, scale), laid out K-last like state.last
        "input": tq(xd, -1), "weight": tq(wt_hp, 0), "grad_output": tq(g, -1),
        "weight_t": tq(wt_hp, -1), "grad_output_t": tq(g, 0), "input_t": tq(xd, 0),
    }  # fmt: skip
    for key, (d, s, _) in theirs.items():
        if s.shape[0] == 1:  # scales along dim 0 -> a (1, C) row: transpose to K-last
            d, s = d.T, s.T
        q, mult = st.last[key]
        assert np.array_equal(d.view(np.uint64), np.asarray(q, np.float64).view(np.uint64)), key
        assert np.array_equal(s.astype(np.float32).view(np.uint32),
                              np.asarray(mult, np.float32).view(np.uint32)), key  # fmt: skip

    def deq(key):  # type: ignore[no-untyped-def]
        f = theirs[key][2]
        return f._data.float() / f._scale

    ref_y = torch.mm(deq("input"), deq("weight"))
    ref_dx = torch.mm(deq("grad_output"), deq("weight_t").t())
    ref_dw = torch.mm(deq("grad_output_t").t(), deq("input_t"))
    for t, ref in ((y, ref_y), (x.grad, ref_dx), (m[0].weight.grad, ref_dw)):
        assert torch.equal(t.detach(), ref)
    for ours, ref, terms in (
        (yo.data, ref_y, torch.mm(deq("input").abs(), deq("weight").abs())),
        (xo.grad, ref_dx, torch.mm(deq("grad_output").abs(), deq("weight_t").t().abs())),
        (wo.grad, ref_dw, torch.mm(deq("grad_output_t").t().abs(), deq("input_t").abs())),
    ):
        # the same exact sum of dequantized products: fpemu's fast chain truncates each
        # 32-product block below its max exponent - 13 (<= 32 * 2**-13 = 2**-8 of the block's
        # |terms|) plus the epilogue's two fp32 roundings; torch's fp32 sgemm is within
        # K * 2**-24 of |terms| (K <= 64 here). 2**-7 of |terms| bounds both together.
        r64, t64 = ref.numpy().astype(np.float64), terms.numpy().astype(np.float64)
        assert np.all(np.abs(np.asarray(ours, np.float64) - r64) <= 2.0**-7 * t64 + 1e-30)


@pytest.mark.parametrize("recipe", ["te_blockwise", "deepseek_v3"])
def test_fp32_promotion_every_128(recipe: str) -> None:
    """One row: 256 in the first K tile, 128 x 2**-6 in the second. Each tile's chain starts
    from +0 and is promoted to FP32 (fp8-mx.md §5.1 N_C = 128, §5.3), so the small tile's sum
    (2) survives: y = 258 exactly. One chain over all of K (fast accumulation) aligns the small
    products to 256's exponent and truncates them away (the scaled_matmul docstring example)."""
    x = np.zeros((1, 256), np.float32)
    x[0, 0] = 256.0
    x[0, 128:] = 2.0**-6
    w = np.ones((1, 256), np.float32)
    y = fp8_linear(Tensor(x), Tensor(w), None, recipe=recipe)
    assert y.data.tolist() == [[258.0]]
    fast = fp8_linear(Tensor(x), Tensor(w), None, recipe=get_recipe("te_current"))
    assert fast.data.tolist() != [[258.0]]  # the per-tensor fast chain loses the small tile
