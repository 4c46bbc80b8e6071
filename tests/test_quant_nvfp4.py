"""NVFP4: both operation orders against the exact reference, torchao's ``nvfp4_quantize``
bit for bit, the TE/torchao disagreement shown, 2-D tiles, stochastic rounding vs gfloat."""

from __future__ import annotations

import warnings
from fractions import Fraction

import gfloat
import numpy as np
import pytest
from gfloat.formats import format_info_ocp_e2m1

import fpemu
from fpemu.quant import dequantize, quantize
from fpemu.quant.nvfp4 import round_e2m1
from reference import quant as ref


def wide_range(seed: int, rows: int, cols: int = 64) -> np.ndarray:
    """Rows with very different magnitudes (wide dynamic range), plus zero and tiny blocks."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * np.exp(rng.standard_normal((rows, 1)) * 3)
    x = x.astype(np.float32)
    x[0, :16] = 0.0
    x[1, :16] *= np.float32(1e-6)
    x[2, 16:32] = np.float32(448.0 * 6.0)
    return x


def _ref(x: np.ndarray, order: str, tile_rows: int = 1) -> tuple[list[float], list[float], float]:
    rows, cols = x.shape
    g = float(np.abs(x).max())
    amax = np.abs(x).reshape(rows, cols // 16, 16).max(-1)
    if tile_rows > 1:
        t = amax.reshape(rows // tile_rows, tile_rows, -1).max(1)
        amax = np.repeat(t, tile_rows, axis=0)
    scales, elems, tensor = [], [], 0.0
    for i in range(rows):
        for j in range(cols // 16):
            s_b, inv, ts = ref.nvfp4_scales(float(amax[i, j]), g, order)
            scales.append(float(s_b))
            tensor = float(ts)
            elems += [ref.e2m1_of_scaled(float(v), inv) for v in x[i, 16 * j: 16 * j + 16]]
    return scales, elems, tensor


@pytest.mark.parametrize("order", ["te", "torchao"])
def test_nvfp4_matches_reference(order: str) -> None:
    x = wide_range(1, 24)
    q = quantize(x, "nvfp4", scale_rule=order)
    scales, elems, tensor = _ref(x, order)
    assert q.scales.reshape(-1).tolist() == scales
    assert np.array_equal(q.elements.reshape(-1).view(np.uint64),
                          np.array(elems).view(np.uint64))  # fmt: skip
    assert q.tensor_scale == tensor
    assert np.array_equal(fpemu.bits.decode(q.scale_codes, "ue4m3"), q.scales)


def test_nvfp4_2d_tiles_match_reference() -> None:
    x = wide_range(2, 32)
    q = quantize(x, "nvfp4_2d")
    scales, elems, _ = _ref(x, "te", tile_rows=16)
    assert q.scales.reshape(-1).tolist() == scales
    assert q.elements.reshape(-1).tolist() == elems
    # a 16x16 tile has one scale: the column-wise quantization of the transpose is the same
    qt = quantize(np.ascontiguousarray(x.T), "nvfp4_2d", axis=0)
    assert np.array_equal(qt.scale_codes.T.reshape(2, 16, 4)[:, 0], q.scale_codes[::16])


def test_nvfp4_special_blocks_te() -> None:
    x = np.zeros((1, 48), np.float32)
    x[0, 16] = 1000.0
    x[0, 32:] = 1e-3
    q = quantize(x, "nvfp4")
    assert q.scales[0].tolist()[0] == 0.0  # an all-zero block: scale 0, data 0
    assert (q.elements[0, :16] == 0).all()
    # TE: a tiny block whose scale underflows E4M3 gets scale 0 and data +-6 (decodes to 0)
    assert q.scales[0, 2] == 0.0 and (q.elements[0, 32:] == 6.0).all()
    assert (dequantize(q)[0, 32:] == 0).all()


with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    torch = pytest.importorskip("torch")
    nvt = pytest.importorskip("torchao.prototype.mx_formats.nvfp4_tensor")
    from torchao.prototype.mx_formats.kernels import unpack_uint4


def torchao_nvfp4(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    t = torch.from_numpy(x)
    pts = nvt.per_tensor_amax_to_scale(t.abs().max())
    s, d = nvt.nvfp4_quantize(t.contiguous(), 16, pts)
    codes = unpack_uint4(d.view(torch.uint8)).numpy().reshape(x.shape)
    return s.view(torch.uint8).numpy().reshape(x.shape[0], -1), codes, float(pts)


@pytest.mark.parametrize("seed", range(2))
def test_torchao_nvfp4_bit_exact(seed: int) -> None:
    x = wide_range(10 + seed, 256, 256)
    s, codes, pts = torchao_nvfp4(x)
    q = quantize(x, "nvfp4", scale_rule="torchao")
    assert np.array_equal(q.scale_codes, s)
    assert np.array_equal(q.element_codes, codes)
    assert q.tensor_scale == pts


def test_finding_te_and_torchao_orders_differ() -> None:
    # fp8-mx.md §3.3: the 2**-6 floor of torchao's block scale and the global scale
    # amax/2688 (torchao) vs 1/(2688/amax) (TE)
    x = wide_range(20, 256, 256)
    te = quantize(x, "nvfp4", scale_rule="te")
    ao = quantize(x, "nvfp4", scale_rule="torchao")
    small = te.scales < 2.0**-6
    assert small.any() and (ao.scales[small] == 2.0**-6).all()
    assert not np.array_equal(te.scale_codes, ao.scale_codes)
    g = np.float32(np.abs(x).max())
    assert ao.tensor_scale == float(g / np.float32(2688))
    assert te.tensor_scale == float(np.float32(1) / (np.float32(2688) / g))
    # with the zero/tiny rows removed and a plain N(0,1) tensor, the orders agree
    y = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
    assert np.array_equal(quantize(y, "nvfp4").element_codes,
                          quantize(y, "nvfp4", scale_rule="torchao").element_codes)  # fmt: skip


def test_stochastic_rounding_rule_and_reproducibility() -> None:
    x = wide_range(3, 16)
    q1 = quantize(x, "nvfp4", mode="stochastic", rng=np.random.default_rng(7))
    q2 = quantize(x, "nvfp4", mode="stochastic", rng=np.random.default_rng(7))
    assert np.array_equal(q1.element_codes, q2.element_codes)
    rbits = np.random.default_rng(8).integers(0, 256, size=x.size, dtype=np.uint8)
    q = quantize(x, "nvfp4", mode="stochastic", rng=rbits)
    g = float(np.abs(x).max())
    amax = np.abs(x).reshape(16, -1, 16).max(-1)
    k = 0
    for i in range(16):
        for j in range(4):
            _, inv, _ = ref.nvfp4_scales(float(amax[i, j]), g, "te")
            for c in range(16 * j, 16 * j + 16):
                want = ref.e2m1_of_scaled(float(x[i, c]), inv, int(rbits[k]))
                assert q.elements[i, c] == want
                k += 1
    # unbiased on average: blocks [6, 2.3, ..., 2.3] keep the scale at 1; SR(2.3) is 2 or 3
    y = np.full((4096, 16), 2.3, np.float32)
    y[:, 0] = 6.0
    d = dequantize(quantize(y, "nvfp4", mode="stochastic", rng=np.random.default_rng(1)))
    # mean of 61440 draws of 2 or 3 with P(3) = 77/256 (8-bit SR: frac 0.3*256 = 76.8 -> the
    # threshold byte 180): expect 2 + 76/256 = 2.296875, std/sqrt(n) = 0.0019; 5 sigma
    assert abs(d[:, 1:].mean() - 2.296875) < 0.01


def test_stochastic_rounding_matches_gfloat() -> None:
    rng = np.random.default_rng(4)
    y = (rng.random(3000) * 12 - 6).astype(np.float32)
    r = rng.integers(0, 256, size=y.size, dtype=np.uint8)
    got = round_e2m1(y, "stochastic", r)
    mode = gfloat.RoundMode.StochasticFastest
    for v, b, g in zip(y, r, got, strict=True):
        assert g == gfloat.round_float(format_info_ocp_e2m1, float(v), mode, True, int(b), 8)


def test_bad_stochastic_input() -> None:
    x = np.ones(16, np.float32)
    with pytest.raises(ValueError, match=r"needs rng=numpy\.random\.Generator or a uint8 array"):
        quantize(x, "nvfp4", mode="stochastic")
    with pytest.raises(ValueError, match="NVFP4 rounds with 'rne' or 'stochastic'"):
        quantize(x, "nvfp4", mode="rtz")
    assert Fraction(ref.FLT_MAX) == Fraction(float(np.finfo(np.float32).max))
