"""scaled_matmul against mmaemu 0.1.0 (fast and split accumulation, hopper and ada presets),
the blockwise epilogue against exact Fraction FMAs, MX/NVFP4 operands, bad input."""

from __future__ import annotations

import warnings
from fractions import Fraction

import numpy as np
import pytest

from fpemu.quant import dequantize, quantize
from fpemu.quant.matmul import fma32, scaled_matmul
from reference.arith import fma as ref_fma
from reference.rounding import round_value
from reference.spec import FLOAT32

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    mmaemu = pytest.importorskip("mmaemu")


def fp8_operands(seed: int, M: int, K: int, N: int, adversarial: bool) -> tuple:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g) * 4
    b = torch.randn(N, K, generator=g) * 4
    if adversarial:  # one huge product per row, many small ones, subnormals, exact cancellation
        a[:, 0] = 448.0
        a[:, 1:64] = 2.0**-9 * torch.randint(1, 8, (M, 63), generator=g)
        b[:, 0] = 448.0
        a[: M // 2, 64] = -448.0
        b[:, 64] = 448.0
    return a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)


@pytest.mark.parametrize("adversarial", [False, True])
@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("profile,model", [("hopper", "h100"), ("ada", "ada")])
def test_mmaemu_scaled_mm(profile: str, model: str, fast: bool, adversarial: bool) -> None:
    torch.set_flush_denormal(False)
    for seed, (M, K, N) in enumerate([(16, 512, 16), (32, 320, 16)]):
        a, b = fp8_operands(seed, M, K, N, adversarial)
        sa, sb = torch.tensor(0.37), torch.tensor(1.9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = mmaemu.scaled_mm(a, b.T, sa, sb, out_dtype=torch.float32, use_fast_accum=fast,
                                    profile=profile, splitk=1).numpy()  # fmt: skip
        got = scaled_matmul(a.float().numpy().astype(np.float64),
                            b.float().numpy().astype(np.float64).T,
                            scale_a=float(sa), scale_b=float(sb),
                            accumulation="fast" if fast else "split", model=model)  # fmt: skip
        assert np.array_equal(got.astype(np.float32).view(np.uint32), want.view(np.uint32))


def test_blockwise_epilogue_is_te_reference_order() -> None:
    # DeepSeek-V3 1x128 activations x 128x128 weights: P_k from mmaemu's 128-wide chain, then
    # y = fma(RN32(P_k * sa_k), sb_k, y) with exact Fractions and one RN32 per FMA
    torch.set_flush_denormal(False)
    M, K, N = 16, 384, 16
    a, b = fp8_operands(3, M, K, N, False)
    rng = np.random.default_rng(0)
    sa = np.ldexp(1.0, rng.integers(-4, 4, (M, 3))) * rng.choice([1.0, 0.75], (M, 3))
    sb = np.repeat(np.ldexp(1.0, rng.integers(-4, 4, (3, 1))) * 1.3, N, axis=1)
    sa, sb = sa.astype(np.float32).astype(np.float64), sb.astype(np.float32).astype(np.float64)
    a64, b64 = a.float().numpy().astype(np.float64), b.float().numpy().astype(np.float64).T
    got = scaled_matmul(a64, b64, scale_a=sa, scale_b=sb)
    y = np.zeros((M, N))
    for k in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            p = mmaemu.accumulate(a[:, 128 * k : 128 * k + 128].contiguous(),
                                  b[:, 128 * k : 128 * k + 128].contiguous(),
                                  use_fast_accum=True, splitk=1).numpy()  # fmt: skip
        for i in range(M):
            for j in range(N):
                t = float(np.float32(float(p[i, j]) * sa[i, k]))
                y[i, j] = ref_fma(t, float(sb[k, j]), float(y[i, j]), FLOAT32)
    assert np.array_equal(got, y + 0.0)


def test_fma32_is_correctly_rounded() -> None:
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(3000).astype(np.float32) * np.float32(2.0) ** rng.integers(
        -20, 20, 3000).astype(np.float32) for _ in range(3))  # fmt: skip
    got = fma32(a, b, c)
    for x, y, z, g in zip(a[:600], b[:600], c[:600], got[:600], strict=False):
        assert Fraction(float(g)) == Fraction(ref_fma(float(x), float(y), float(z), FLOAT32))


def test_fma32_at_float32_midpoints() -> None:
    """``a*b`` about half an ulp of ``c``: the float64 sum lands on or next to a float32
    midpoint, where round-to-odd needs TwoSum's error term with the right sign (a swapped
    TwoSum gave 1+2**-22 for fma32(1+2**-23, 2**-24 (1-2**-23), 1+2**-23), not 1+2**-23)."""
    rng = np.random.default_rng(7)
    c = (1 + rng.integers(0, 2**23, 200) * 2.0**-23).astype(np.float32)
    c *= np.float32(2.0) ** rng.integers(-3, 4, 200).astype(np.float32)
    c = np.where(rng.random(200) < 0.5, -c, c).astype(np.float32)
    half = np.spacing(np.abs(c)).astype(np.float64) / 2
    tweak = rng.choice([-(2.0**-23), 0.0, 2.0**-23, -(2.0**-20), 2.0**-20], 200)
    a = (half * (1 + tweak)).astype(np.float32)
    b = rng.choice([1 - 2.0**-23, 1.0, 1 + 2.0**-23, -1.0], 200).astype(np.float32)
    got = fma32(a, b, c)
    for x, y, z, g in zip(a, b, c, got, strict=True):
        want = Fraction(ref_fma(float(x), float(y), float(z), FLOAT32))
        assert Fraction(float(g)) == want, (float(x), float(y), float(z))


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp4", "nvfp4"])
def test_block_scaled_operands_close_to_dequantized_product(name: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 128)).astype(np.float32)
    w = rng.standard_normal((128, 8)).astype(np.float32)
    qa, qb = quantize(x, name, axis=1), quantize(w, name, axis=0)
    got = scaled_matmul(qa, qb)
    exact = dequantize(qa) @ dequantize(qb)
    # fp4 blocks are exact sums; each block adds <= 3 float32 roundings (scale product,
    # FMA, alpha) and the tensor-core chain truncates to 13 fraction bits per 32-block (FP8)
    tol = 2.0**-11 if name == "mxfp8_e4m3" else 2.0**-20
    assert np.allclose(got, exact, rtol=0, atol=tol * np.abs(exact).max() * 8)


def test_bad_input() -> None:
    a = np.ones((2, 32))
    with pytest.raises(ValueError, match="do not match"):
        scaled_matmul(a, np.ones((16, 2)))
    with pytest.raises(ValueError, match="scale_a must hold finite non-negative scales"):
        scaled_matmul(a, a.T, scale_a=np.nan)
    with pytest.raises(ValueError, match="scale_b has shape"):
        scaled_matmul(a, a.T, scale_b=np.ones((3, 3)))
    with pytest.raises(ValueError, match="accumulation='slow'"):
        scaled_matmul(a, a.T, accumulation="slow")
    with pytest.raises(TypeError, match="must be float arrays"):
        scaled_matmul(np.ones((2, 32), int), a.T)
    with pytest.raises(ValueError, match="fmt='bfloat16' is not an FP8/FP6/FP4 element format"):
        scaled_matmul(a, a.T, fmt="bf16")
    q = quantize(np.ones((2, 32), np.float32), "mxfp8_e4m3")
    with pytest.raises(TypeError, match="both be Quantized"):
        scaled_matmul(q, a.T)
    with pytest.raises(ValueError, match="blocks along K"):
        scaled_matmul(q, q)


def test_nvfp4_gemm_follows_te_reference_order() -> None:
    # TE reference_nvfp4 qgemm (fp8-mx.md §3.8), written with Fractions: per 16-wide K block
    # y = RN32(y + RN32(RN32(sx * sw) * P)), P exact; then RN32(alpha * y)
    rng = np.random.default_rng(6)
    x = (rng.standard_normal((4, 64)) * np.exp(rng.standard_normal((4, 1)))).astype(np.float32)
    w = rng.standard_normal((64, 3)).astype(np.float32)
    qa, qb = quantize(x, "nvfp4", axis=1), quantize(w, "nvfp4", axis=0)
    got = scaled_matmul(qa, qb)

    def rn(v: Fraction) -> Fraction:
        r = round_value(v, FLOAT32, "rne")
        assert isinstance(r, Fraction)
        return r

    assert qa.tensor_scale is not None and qb.tensor_scale is not None
    alpha = rn(Fraction(qa.tensor_scale) * Fraction(qb.tensor_scale))
    for i in range(4):
        for j in range(3):
            y = Fraction(0)
            for k in range(4):
                p = sum(Fraction(qa.elements[i, 16 * k + t]) * Fraction(qb.elements[16 * k + t, j])
                        for t in range(16))  # fmt: skip
                wk = rn(Fraction(qa.scales[i, k]) * Fraction(qb.scales[k, j]))
                y = rn(y + rn(wk * rn(p)))
            assert Fraction(got[i, j]) == rn(alpha * y)
