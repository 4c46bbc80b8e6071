"""Per-tensor / per-row / per-block FP8 scales (TE, torchao, DeepSeek-V3) and byte packing."""

from __future__ import annotations

import warnings
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu.quant import quantize
from fpemu.quant.pack import pack_fp4, pack_fp6, to_bytes, to_ml_dtypes, unpack_fp4, unpack_fp6
from fpemu.quant.tensor_scaling import (
    block_amax,
    deepseek_scale,
    quantize_fp8,
    te_delayed_update,
    te_scale,
    torchao_scale,
)
from reference.rounding import round_value
from reference.spec import FLOAT32, floor_log2
from reference.value import POS_INF

FLT_MAX = float(np.finfo(np.float32).max)


def rn32(q: Fraction) -> float:
    v = round_value(q, FLOAT32, "rne")
    return float("inf") if v is POS_INF else float(v)  # type: ignore[arg-type]


def te_scale_exact(amax: float, fp8_max: int, pow2: bool, margin: int = 0) -> float:
    """TE compute_scale_from_amax written with Fractions (fp8-mx.md §4.2)."""
    if amax == 0 or not np.isfinite(amax):
        return 1.0
    s = rn32(Fraction(fp8_max, 2**margin) / Fraction(amax))
    s = FLT_MAX if s == float("inf") else s
    if pow2:  # clear the mantissa: the largest power of two <= s
        s = 2.0 ** floor_log2(Fraction(s))
    return s


def amaxes(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.integers(1, 0x7F7FFFFF, size=n, dtype=np.uint32).view(np.float32)
    edges = np.float32([0.0, np.inf, np.nan, 448.0, 56.0, 14.0, 1e-30, 3.0])
    nxt = np.nextafter(edges[3:6], np.float32(np.inf))
    return np.concatenate([edges, nxt, a]).astype(np.float32)


@pytest.mark.parametrize("pow2", [False, True])
@pytest.mark.parametrize("fmt,fp8_max", [("e4m3", 448), ("e5m2", 57344)])
def test_te_scale_exact(fmt: str, fp8_max: int, pow2: bool) -> None:
    a = amaxes(1, 3000)
    got = te_scale(a, fmt, power_2=pow2)
    for x, g in zip(a, got, strict=False):
        want = te_scale_exact(float(x), fp8_max, pow2)
        assert float(g) == pytest.approx(want, rel=0) or (np.isnan(want) and np.isnan(g))
    assert float(te_scale(np.float32(3.0), "e4m3", margin=2)) == te_scale_exact(3.0, 448, False, 2)
    assert float(te_scale(np.float32(1e-30), "e4m3", epsilon=1e-3)) == rn32(
        Fraction(448) / Fraction(float(np.float32(1e-3))))  # fmt: skip


def test_te_delayed_scaling_update() -> None:
    h = np.zeros((4, 2), np.float32)
    h[0] = [3.0, 0.0]  # the second quantizer saw amax 0 this step
    h[2] = [8.0, 5.0]
    new_h, s = te_delayed_update(h, np.float32([7.0, 7.0]), "e4m3")
    assert new_h[:, 0].tolist() == [0.0, 8.0, 0.0, 3.0]  # rolled, slot 0 zeroed
    assert new_h[:, 1].tolist() == h[:, 1].tolist()  # fused kernel: a zero amax skips the roll
    assert s.tolist() == [56.0, 7.0]  # max over the window: 448/8; the other keeps its scale
    new_h, s = te_delayed_update(h, np.float32([7.0, 7.0]), "e4m3", fused=False)
    assert new_h[:, 1].tolist() == [0.0, 5.0, 0.0, 0.0]  # unfused: always rolls
    assert s.tolist()[1] == float(np.float32(448) / np.float32(5))
    _, s = te_delayed_update(h, np.float32([7.0, 7.0]), "e4m3", algo="most_recent", margin=1)
    assert s.tolist()[0] == float(np.float32(224.0) / np.float32(3.0))


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    f8u = pytest.importorskip("torchao.float8.float8_utils")
    from torchao.prototype.mx_formats.kernels import pack_uint4


@pytest.mark.parametrize("fmt,tdt", [("e4m3", "float8_e4m3fn"), ("e5m2", "float8_e5m2")])
def test_torchao_amax_to_scale(fmt: str, tdt: str) -> None:
    a = amaxes(2, 100_000)
    want = f8u.amax_to_scale(torch.from_numpy(a), getattr(torch, tdt)).numpy()
    got = torchao_scale(a, fmt)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    want2 = f8u.amax_to_scale(torch.from_numpy(a), getattr(torch, tdt), True).numpy()
    got2 = torchao_scale(a, fmt, power_of_2=True)
    # Finding (fp8-mx.md §4.3, §8.10): torchao's pow2 is exp2(floor(log2 s)) in float32 and
    # rounds s = 2**k - ulp up to 2**k; fpemu rounds down exactly (as TE's mask)
    d = (got2 != want2) & ~(np.isnan(got2) & np.isnan(want2))
    s = got.astype(np.float64)
    assert (want2[d] == 2 * got2[d]).all()
    assert (s[d] > want2[d] * (1 - 2.0**-20)).all()  # s sat just below the power of two


def test_finding_torchao_pow2_rounds_up_both_answers() -> None:
    a = np.nextafter(np.float32(56.0), np.float32(np.inf))
    ao = float(f8u.amax_to_scale(torch.tensor([a]), torch.float8_e4m3fn, True)[0])
    assert (ao, float(torchao_scale(np.float32([a]), "e4m3", power_of_2=True)[0])) == (8.0, 4.0)
    assert float(te_scale(np.float32(a), "e4m3", power_2=True)) == 4.0
    assert fpemu.round(float(a) * 8.0, "e4m3", overflow="saturate") == 448.0  # saturated


def test_torchao_cast_and_rowwise() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 96)) * np.exp(rng.standard_normal((64, 1)) * 3)
    x = x.astype(np.float32)
    amax = np.abs(x).max(axis=1, keepdims=True)  # rowwise (axiswise) scales
    s = torchao_scale(amax, "e4m3", power_of_2=True)
    got = quantize_fp8(x, s, "e4m3")
    want = f8u.to_fp8_saturated(torch.from_numpy(x) * torch.from_numpy(s), torch.float8_e4m3fn)
    assert np.array_equal(got, want.float().numpy().astype(np.float64))


def test_deepseek_blockwise() -> None:
    # DeepGEMM ceil_to_ue8m0 of max(amax, 1e-4)/448 (fp8-mx.md §2.1; exp/e11 values)
    a = np.float32([0.0, 1e-30, 448.0, 449.0, np.inf, np.nan])
    assert deepseek_scale(a, "e4m3").tolist() == [2.0**-22, 2.0**-22, 1.0, 2.0, 2.0**127,
                                                 2.0**127]  # fmt: skip
    rng = np.random.default_rng(4)
    x = rng.standard_normal((256, 384)).astype(np.float32)
    t = block_amax(x, (128, 128))
    assert t.shape == (2, 3) and t[1, 2] == np.abs(x[128:, 256:]).max()
    r = block_amax(x, (1, 128))
    assert r.shape == (256, 3)
    sf = deepseek_scale(r, "e4m3")
    q = quantize_fp8(x, np.repeat(np.float32(1.0) / sf, 128, axis=1), "e4m3")
    assert (np.abs(q) <= 448).all() and (np.repeat(sf, 128, axis=1) * q.max() > 0).all()
    with pytest.raises(ValueError, match="x must be 2-D"):
        block_amax(x[0], (1, 128))


def test_bad_scaling_input() -> None:
    with pytest.raises(ValueError, match="fmt='float16' is not an FP8 format"):
        te_scale(np.float32(1.0), "fp16")
    with pytest.raises(TypeError, match="amax must be a float array"):
        te_scale(np.int32(3), "e4m3")
    with pytest.raises(ValueError, match="scale contains NaN"):
        quantize_fp8(np.ones(3, np.float32), np.float32(np.nan), "e4m3")
    with pytest.raises(ValueError, match="algo='mean'"):
        te_delayed_update(np.zeros((2, 1), np.float32), np.ones(1, np.float32), "e4m3", algo="mean")


def test_packing_and_storage() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    q4 = quantize(x, "mxfp4", scale_rule="rceil")
    want = pack_uint4(torch.from_numpy(q4.element_codes.copy())).numpy()
    data, _scales = to_bytes(q4)
    assert np.array_equal(data, want) and data.shape == (4, 32)  # torch float4_e2m1fn_x2 layout
    assert np.array_equal(unpack_fp4(data), q4.element_codes)
    el, sc = to_ml_dtypes(q4)
    assert np.array_equal(el.astype(np.float64), q4.elements)
    assert np.array_equal(sc.astype(np.float64), q4.scales)
    assert sc.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    q6 = quantize(x, "mxfp6_e2m3")
    d6, _ = to_bytes(q6)
    assert d6.shape == (4, 48) and np.array_equal(unpack_fp6(d6), q6.element_codes)
    assert np.array_equal(to_ml_dtypes(q6)[0].astype(np.float64), q6.elements)
    codes = np.arange(64, dtype=np.uint8)
    assert pack_fp6(codes)[:3].tolist() == [0b01000000, 0b00100000, 0b00001100]
    assert to_ml_dtypes(quantize(x, "mxint8"))[0].dtype == np.int8
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 16\)"):
        pack_fp4(np.array([16, 0], np.uint8))
    with pytest.raises(ValueError, match="multiple of 2"):
        pack_fp4(np.array([1], np.uint8))
