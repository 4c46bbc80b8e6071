"""Corner cases of fpemu.quant found by an outside check, each against an independent oracle.

- scaled_matmul's epilogue keeps the sign of a product that underflows (mmaemu 0.1.0, which
  records it on hardware) and writes the hardware's NaN word 0x7FFFFFFF.
- NVFP4 with torchao's rule on zero, tiny and infinite tensors reproduces torchao itself.
- quantize accepts ml_dtypes bfloat16 arrays.
- te_delayed_update(fused=False) follows Transformer Engine's unfused order.
"""

from __future__ import annotations

import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpemu.quant import dequantize, quantize
from fpemu.quant.matmul import scaled_matmul
from fpemu.quant.tensor_scaling import te_delayed_update
from reference.arith import fma as ref_fma
from reference.spec import FLOAT32

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    mmaemu = pytest.importorskip("mmaemu")
    nvt = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    from torchao.prototype.mx_formats.kernels import unpack_uint4


def _words(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float32).view(np.uint32)


# -- scaled_matmul epilogue ---------------------------------------------------------------------


def _mmaemu(a: np.ndarray, b: np.ndarray, sa: float, sb: float, fast: bool) -> np.ndarray:
    at = torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(torch.float8_e4m3fn)
    bt = torch.from_numpy(np.ascontiguousarray(b.T, np.float32)).to(torch.float8_e4m3fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = mmaemu.scaled_mm(at, bt.T, torch.tensor(sa), torch.tensor(sb), out_dtype=torch.float32,
                             use_fast_accum=fast, profile="hopper", splitk=1)  # fmt: skip
    return y.numpy().view(np.uint32)


@pytest.mark.parametrize("accumulation", ["fast", "split"])
def test_epilogue_keeps_the_sign_of_an_underflowing_product(accumulation: str) -> None:
    """acc = -0.25, scale = RN32(2**-75 * 2**-74) = 2**-149: the exact product -2**-151 is
    below half the smallest subnormal, so FFMA(acc, scale, +0) rounds it to -0 (the sign of the
    exact nonzero result). Row 1 has acc = +0 (exact zero): +0."""
    a = np.zeros((16, 32))
    a[0, 0] = -0.25
    b = np.ones((32, 16))
    sa, sb = 2.0**-75, 2.0**-74
    exact = Fraction(-1, 4) * Fraction(2) ** -149
    assert abs(exact) < Fraction(2) ** -150  # rounds to zero, sign kept
    want = _mmaemu(a, b, sa, sb, accumulation == "fast")
    assert want[0, 0] == 0x80000000 and want[1, 0] == 0
    got = scaled_matmul(a, b, scale_a=sa, scale_b=sb, accumulation=accumulation)
    assert np.array_equal(_words(got), want)  # was +0 at [0, 0]


def test_epilogue_nan_word_is_the_hardware_nan() -> None:
    """A NaN element makes its row NaN: the FP32 word is 0x7FFFFFFF (mmaemu's canonical NaN,
    measured; fpemu.tensorcore.specials for the tensor cores), not NumPy's 0x7FC00000."""
    a = np.ones((16, 32))
    a[3, 5] = np.nan
    b = np.ones((32, 16))
    for accumulation, fast in (("fast", True), ("split", False)):
        want = _mmaemu(a, b, 1.0, 1.0, fast)
        assert (want[3] == 0x7FFFFFFF).all()
        got = scaled_matmul(a, b, accumulation=accumulation)
        assert np.array_equal(_words(got), want)


def test_blockwise_epilogue_keeps_the_sign_of_an_underflowing_product() -> None:
    """Scales along K (TE's blockwise order): y = fma32(RN32(P_k * sa_k), sb_k, y) from +0.
    Block 0 is all zeros: y = fma(+0, 1, +0) = +0. Block 1 has P_1 = -0.25 (row 0), sa_1 =
    2**-75, sb_1 = 2**-74: fma(-2**-77, 2**-74, +0) rounds the exact -2**-151 to -0. The
    expected words come from ``reference.arith.fma`` (exact rationals, one rounding)."""
    a = np.zeros((2, 256))
    a[0, 128] = -0.25
    b = np.ones((256, 2))
    sa = np.array([[1.0, 2.0**-75], [1.0, 2.0**-75]])
    sb = np.array([[1.0, 1.0], [2.0**-74, 2.0**-74]])
    got = scaled_matmul(a, b, scale_a=sa, scale_b=sb)
    for i in range(2):
        for j in range(2):
            y = 0.0
            for k in range(2):
                p = float(a[i, 128 * k : 128 * (k + 1)].sum())  # exact: one nonzero term
                t = float(np.float32(p * sa[i, k]))
                y = ref_fma(t, float(sb[k, j]), y, FLOAT32)
            assert _words(got)[i, j] == _words(np.array(y)), (i, j)
    assert _words(got)[0, 0] == 0x80000000  # was +0: a trailing + 0.0 after the fma


@pytest.mark.slow
def test_scope_split_k_is_not_modelled() -> None:
    """docs/fp8-mx-nvfp4.md: fpemu's agreement with mmaemu is at splitk=1. With mmaemu's
    recorded cuBLASLt decision for (64, 8192) x (8192, 64) on hopper (S = 3 contiguous K
    slices) and fast accumulation, most outputs differ; at splitk=1 none do."""
    g = torch.Generator().manual_seed(0)
    M, K, N = 64, 8192, 64
    a = (torch.randn(M, K, generator=g) * 4).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g) * 4).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0)
    got = scaled_matmul(a.float().numpy().astype(np.float64),
                        b.float().numpy().astype(np.float64).T, accumulation="fast")  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan = mmaemu.explain(a, b.T, one, one, out_dtype=torch.float32, use_fast_accum=True,
                              profile="hopper")  # fmt: skip
        auto = mmaemu.scaled_mm(a, b.T, one, one, out_dtype=torch.float32, use_fast_accum=True,
                                profile="hopper").numpy()  # fmt: skip
        single = mmaemu.scaled_mm(a, b.T, one, one, out_dtype=torch.float32, use_fast_accum=True,
                                  profile="hopper", splitk=1).numpy()  # fmt: skip
    assert plan.split.S == 3
    assert (_words(got) != auto.view(np.uint32)).mean() > 0.9  # 0.995 measured
    assert np.array_equal(_words(got), single.view(np.uint32))


# -- NVFP4 torchao rule on zero, tiny and infinite tensors ----------------------------------------


def _torchao_nvfp4(t: object) -> tuple[np.ndarray, np.ndarray, float]:
    """torchao 0.18's eager NVFP4 (``per_tensor_amax_to_scale``, ``nvfp4_quantize``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pts = nvt.per_tensor_amax_to_scale(t.abs().max())  # type: ignore[attr-defined]
        s, d = nvt.nvfp4_quantize(t.contiguous(), 16, pts)  # type: ignore[attr-defined]
    shape = tuple(t.shape)  # type: ignore[attr-defined]
    codes = unpack_uint4(d.view(torch.uint8)).numpy().reshape(shape)
    return s.view(torch.uint8).numpy().reshape(shape[0], -1), codes, float(pts)


TINY = np.float32(1e-40)  # a float32 subnormal: 1 / RN32(G / 2688) overflows to inf
NVFP4_CORNERS = {
    "zero": np.zeros((1, 16), np.float32),
    "zero-two-rows": np.zeros((2, 32), np.float32),
    "smallest-subnormal": np.full((1, 16), np.float32(2.0**-149)),  # G / 2688 -> +0
    "tiny-with-zeros": np.array([[TINY] + [0.0] * 15, [-TINY] * 8 + [0.0] * 8], np.float32),
    "tiny-signed": np.array([[TINY, -TINY, 0.0, -0.0] * 4], np.float32),
    "inf": np.array([[np.inf] + [1.0] * 15, [2.0] * 16], np.float32),
    "minus-inf-and-zero-block": np.array([[-np.inf, 0.0] * 8 + [0.5] * 16], np.float32),
}


@pytest.mark.parametrize("name", list(NVFP4_CORNERS))
def test_nvfp4_torchao_rule_reproduces_torchao_on_degenerate_tensors(name: str) -> None:
    """Scale codes, element codes and the tensor scale equal torchao's, bit for bit.

    torchao's arithmetic goes through NaN here: amax 0 over a tensor scale 0 (0/0), inf/inf,
    0 * inf; a NaN block scale is E4M3 code 0xFF and torchao's bit-level E2M1 conversion
    turns each NaN element into a code (0xC for the NaN that follows a NaN scale, 0xB for
    0 * inf) that depends on the NaN's bits. fpemu reproduces torchao (the rule's name)."""
    x = NVFP4_CORNERS[name]
    s, codes, pts = _torchao_nvfp4(torch.from_numpy(x))
    q = quantize(x, "nvfp4", scale_rule="torchao")
    assert np.array_equal(q.scale_codes, s), (q.scale_codes, s)
    assert np.array_equal(q.element_codes, codes), (q.element_codes, codes)
    assert np.float32(q.tensor_scale).view(np.uint32) == np.float32(pts).view(np.uint32)
    # the element values are those of the codes (E2M1 has no NaN)
    table = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6] * 2) * np.repeat([1.0, -1.0], 8)
    assert np.array_equal(q.elements, table[q.element_codes], equal_nan=False)


def test_nvfp4_torchao_zero_tensor_documented_words() -> None:
    """The words named in docs/fp8-mx-nvfp4.md for an all-zero tensor."""
    q = quantize(np.zeros((1, 16), np.float32), "nvfp4", scale_rule="torchao")
    assert q.scale_codes.tolist() == [[0xFF]] and np.isnan(q.scales).all()
    assert (q.element_codes == 0xC).all() and q.tensor_scale == 0.0
    assert np.isnan(dequantize(q)).all()  # a NaN scale decodes its block to NaN


# -- quantize takes ml_dtypes floats --------------------------------------------------------------


@pytest.mark.parametrize("name", ["nvfp4", "mxfp8_e4m3", "mxfp4"])
def test_quantize_accepts_bfloat16(name: str) -> None:
    """A bfloat16 array is quantized as its exact float32 values: the codes equal those of the
    float32 array, and (NVFP4, MX) those of torchao given the torch bfloat16 tensor."""
    rng = np.random.default_rng(9)
    x16 = (rng.standard_normal((4, 64)) * 3).astype(ml_dtypes.bfloat16)
    x32 = x16.astype(np.float32)
    assert np.array_equal(x32.astype(ml_dtypes.bfloat16).view(np.uint16), x16.view(np.uint16))
    rule = "torchao" if name == "nvfp4" else None
    q16 = quantize(x16, name, scale_rule=rule)
    q32 = quantize(x32, name, scale_rule=rule)
    assert np.array_equal(q16.element_codes, q32.element_codes)
    assert np.array_equal(q16.scale_codes, q32.scale_codes)
    tb = torch.from_numpy(x16.view(np.int16)).view(torch.bfloat16)
    if name == "nvfp4":
        s, codes, _ = _torchao_nvfp4(tb)
        assert np.array_equal(q16.scale_codes, s) and np.array_equal(q16.element_codes, codes)
    elif name == "mxfp8_e4m3":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sc, d = mx_tensor.to_mx(tb, torch.float8_e4m3fn, 32)
        assert np.array_equal(q16.scale_codes.reshape(-1), sc.view(torch.uint8).numpy().ravel())
        assert np.array_equal(q16.element_codes, d.view(torch.uint8).numpy().reshape(4, 64))
    with pytest.raises(TypeError, match="ml_dtypes floats"):
        quantize(np.ones((1, 32), np.int32), name)


# -- TE delayed scaling: the unfused order -------------------------------------------------------

# Transformer Engine's unfused update (transformer_engine/pytorch/quantization.py,
# _default_get_amax_and_update_history and _default_sf_compute, as transcribed in the research
# note fp8-mx.md section 4.1), copied here as the facts the oracle below uses:
#   amax = torch.max(history, dim=0)            ("max"; "most_recent": history[0])
#   history = torch.roll(history, -1, 0); history[0] = 0     (always, unlike the fused kernel)
#   sf = (fp8_max / amax) / (2 ** margin)        one float32 division each, nearest even
#   sf = where(amax > 0, sf, scale); sf = where(isfinite(amax), sf, scale)
#   sf = where(isinf(sf), FLT_MAX, sf)
FLT_MAX32 = float(np.finfo(np.float32).max)


def _te_unfused(history: np.ndarray, scale: np.ndarray, fp8_max: float, margin: int,
                algo: str) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The unfused update in torch float32 (true division: torch.div of two tensors)."""
    h = torch.from_numpy(history.copy())
    amax = torch.max(h, dim=0).values if algo == "max" else h[0].clone()
    if h.shape[0] > 1:
        h = torch.roll(h, -1, 0)
    h[0] = 0.0
    top = torch.full_like(amax, fp8_max)
    sf = torch.div(torch.div(top, amax), torch.full_like(amax, 2.0**margin))
    old = torch.from_numpy(scale)
    sf = torch.where(amax > 0.0, sf, old)
    sf = torch.where(torch.isfinite(amax), sf, old)
    sf = torch.where(torch.isinf(sf), torch.full_like(sf, FLT_MAX32), sf)
    return h.numpy(), sf.numpy()


def test_te_unfused_update_overflows_where_the_fused_one_does_not() -> None:
    """history [9.87e-37], margin 1: 448 / 9.87e-37 = 4.54e38 overflows float32 (inf, then
    FLT_MAX); the fused order divides 224 and gives RN32(224 / 9.87e-37) = 2.2695e38."""
    amax = np.float32(9.87e-37)
    h = np.array([[amax]], np.float32)
    assert Fraction(448) / Fraction(float(amax)) > Fraction(FLT_MAX32)  # inf in float32
    _, fused = te_delayed_update(h, np.float32([1.0]), "e4m3", margin=1)
    _, unfused = te_delayed_update(h, np.float32([1.0]), "e4m3", margin=1, fused=False)
    assert fused[0] == np.float32(224) / amax and 2.26e38 < fused[0] < 2.27e38
    assert unfused[0] == np.float32(FLT_MAX32)  # was 2.2695e38, the fused order
    assert np.array_equal(unfused, _te_unfused(h, np.float32([1.0]), 448.0, 1, "max")[1])


@pytest.mark.parametrize("fmt,fp8_max", [("e4m3", 448.0), ("e5m2", 57344.0)])
def test_te_unfused_update_matches_te_order_scripted(fmt: str, fp8_max: float) -> None:
    """Scripted steps (random histories, tiny and huge amaxes, zeros, inf, NaN; margins 0-3;
    both algorithms): new history and scale bit for bit against the torch transcription."""
    rng = np.random.default_rng(31)
    n, steps = 64, 40
    for algo in ("max", "most_recent"):
        for margin in range(4):
            h = np.zeros((8, n), np.float32)
            scale = np.ones(n, np.float32)
            for _ in range(steps):
                e = rng.integers(-149, 128, n).astype(np.float64)
                cur = np.ldexp(rng.random(n) + 0.5, e.astype(int)).astype(np.float32)
                u = rng.random(n)
                cur = np.where(u < 0.1, 0, cur)
                cur = np.where((u >= 0.1) & (u < 0.12), np.inf, cur)
                cur = np.where((u >= 0.12) & (u < 0.13), np.nan, cur).astype(np.float32)
                h[0] = cur
                want_h, want_s = _te_unfused(h, scale, fp8_max, margin, algo)
                got_h, got_s = te_delayed_update(h, scale, fmt, margin=margin, algo=algo,
                                                 fused=False)  # fmt: skip
                assert np.array_equal(got_h.view(np.uint32), want_h.view(np.uint32))
                assert np.array_equal(got_s.view(np.uint32), want_s.view(np.uint32))
                h, scale = got_h, got_s
