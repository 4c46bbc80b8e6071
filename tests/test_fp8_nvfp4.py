"""te_nvfp4 layer (issue 15): 2-D 16x16 weight tiles, stochastic rounding of gradients only,
random Hadamard transform of the wgrad operands.

The 16x16 weight quantization is compared with a per-tile transcription of TE's float32 order
(fp8-mx.md §3.2, §3.4) in ``fractions.Fraction`` with ml_dtypes' E4M3/E2M1 casts; the SR test
checks unbiasedness with a bound derived from the rounding rule (§3.6).
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpemu.amp.recipes import get_recipe
from fpemu.nn import Tensor
from fpemu.nn.fp8 import FP8State, fp8_linear
from fpemu.nn.fp8_block import hadamard16, rht
from fpemu.quant import dequantize, quantize

FLT_MAX = float(np.finfo(np.float32).max)


def rn32(v: float | Fraction) -> float:
    f = float(v)
    try:
        return float(struct.unpack("f", struct.pack("f", f))[0])
    except OverflowError:
        return math.copysign(math.inf, f)


def e4m3(v: float) -> float:
    return float(np.float32(min(v, 448.0)).astype(ml_dtypes.float8_e4m3fn).astype(np.float64))


def e2m1(v: np.ndarray) -> np.ndarray:  # RNE, saturating at +-6 (ml_dtypes' cast saturates)
    return np.asarray(v, np.float32).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)


def te_nvfp4_2d(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """fp8-mx.md §3.2 (TE order) with 16x16 tiles (§3.4): (E2M1 values, scale per tile)."""
    w = np.asarray(w, np.float32)
    G = float(np.max(np.abs(w)))
    s_enc = rn32(Fraction(2688) / Fraction(G))
    s_dec = rn32(Fraction(1) / Fraction(s_enc))
    m = rn32(Fraction(s_enc) * Fraction(rn32(1 / 6)))
    R, C = w.shape
    q = np.zeros((R, C))
    scales = np.zeros((-(-R // 16), -(-C // 16)))
    for i in range(scales.shape[0]):
        for j in range(scales.shape[1]):
            t = w[16 * i : 16 * i + 16, 16 * j : 16 * j + 16]
            sb = e4m3(min(rn32(Fraction(float(np.max(np.abs(t)))) * Fraction(m)), FLT_MAX))
            inv = (
                FLT_MAX
                if sb == 0
                else min(rn32(1 / Fraction(rn32(Fraction(sb) * Fraction(s_dec)))), FLT_MAX)
            )
            scales[i, j] = sb
            q[16 * i : 16 * i + 16, 16 * j : 16 * j + 16] = e2m1(t * np.float32(inv))
    return q, scales


def _step(x: np.ndarray, w: np.ndarray, g: np.ndarray, *, seed: int = 0, wgrad: bool = True,
          recipe: object = "te_nvfp4") -> FP8State:  # fmt: skip
    st = FP8State(recipe, seed=seed)  # type: ignore[arg-type]
    xt, wt = Tensor(x, requires_grad=True), Tensor(w, requires_grad=wgrad)
    fp8_linear(xt, wt, None, recipe=recipe, state=st).backward(g)  # type: ignore[arg-type]
    return st


def test_weight_16x16_tiles_match_transcription_and_are_shared() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 40)).astype(np.float32)
    w = (rng.normal(size=(36, 40)) * np.logspace(-3, 0, 40)).astype(np.float32)  # wide range
    st = _step(x, w, rng.normal(size=(8, 36)).astype(np.float32))
    q, scales = te_nvfp4_2d(w)
    fprop, dgrad = st.last["weight"][0], st.last["weight_t"][0]  # along K=in and K=out
    assert np.array_equal(fprop.elements[:40, :36].T, q) and np.array_equal(
        dgrad.elements[:36, :40], q
    )
    # fprop's scales (K/16, N): row block k of output column n is tile (n // 16, k)
    assert np.array_equal(fprop.scales[:, :36], np.repeat(scales, 16, axis=0)[:36].T)
    assert np.array_equal(dgrad.scales[:, :40], np.repeat(scales.T, 16, axis=0)[:40].T)


def test_stochastic_rounding_of_gradients_is_unbiased() -> None:
    """4096 identical gradient rows: same tensor and block scales, an independent SR draw per
    row. SR rounds up iff f + r/256 >= 1 for 8 random bits r (§3.6; 2.3 -> 3 iff r >= 180),
    i.e. with probability p = floor(256 f)/256 in (f - 1/256, f] for the fraction f of the gap
    d between the two neighbours, so the mean is within d/256 (bias) +
    6 standard deviations d * sqrt(p(1-p)/n) <= 6 d / (2 sqrt(4096)) of the exact value; RNE
    would be off by min(f, 1-f) d >= 0.3 d for the values chosen (fractions 0.3 .. 0.7)."""
    n = 4096
    v = np.array([6, 1.3, -2.7, 4.6, 0.4, -0.55, 3.4, 5.0, 1.0, 2.5, -1.45, 0.7, 3, -4.8, 1.65,
                  0.15], np.float32) * np.float32(1e-3)  # fmt: skip
    g = np.tile(v, (n, 1))
    x = np.ones((n, 16), np.float32)
    st = _step(x, np.eye(16, dtype=np.float32), g, wgrad=False)
    dq = np.asarray(dequantize(st.last["grad_output"][0]))
    checked = 0
    for j in range(16):
        vals = np.unique(dq[:, j])
        if vals.size == 1:  # x * inv_b landed on the E2M1 grid: SR has nothing to round
            continue
        assert vals.size == 2
        d = vals[1] - vals[0]
        assert abs(dq[:, j].mean() - float(v[j])) <= d / 256 + 6 * d / (2 * math.sqrt(n))
        checked += 1
    assert checked >= 12


def test_sr_only_on_gradients_and_seeded() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(32, 32)).astype(np.float32)
    w = rng.normal(size=(16, 32)).astype(np.float32)
    g = rng.normal(size=(32, 16)).astype(np.float32)
    a, a2, b = _step(x, w, g, seed=1), _step(x, w, g, seed=1), _step(x, w, g, seed=2)
    for key in ("input", "weight", "weight_t", "input_t"):  # round to nearest: seed-free
        assert np.array_equal(a.last[key][0].elements, b.last[key][0].elements), key
    for key in ("grad_output", "grad_output_t"):
        assert np.array_equal(a.last[key][0].elements, a2.last[key][0].elements), key
        assert not np.array_equal(a.last[key][0].elements, b.last[key][0].elements), key
    # input is RNE: equals the nearest-rounding quantize of x
    rne = quantize(x, "nvfp4", axis=1, pad=True)
    assert np.array_equal(a.last["input"][0].elements, rne.elements)
    with pytest.raises(ValueError, match="seed=-1"):
        FP8State("te_nvfp4", seed=-1)


def test_hadamard_matches_spec_and_rht_transcription() -> None:
    signs = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]  # fp8-mx.md §3.5
    h16 = [[(-1) ** bin(i & j).count("1") for j in range(16)] for i in range(16)]  # Sylvester
    want = np.array([[Fraction(signs[i] * h16[i][j], 4) for j in range(16)] for i in range(16)])
    assert np.array_equal(hadamard16(), want.astype(np.float64))
    assert np.array_equal(hadamard16() @ hadamard16().T, np.eye(16))
    rng = np.random.default_rng(2)
    a = rng.normal(size=(3, 20)).astype(np.float32)
    got = rht(a)
    ap = np.pad(a, ((0, 0), (0, 12)))
    for r in range(3):
        for c in range(32):
            t, j = divmod(c, 16)
            exact = sum(Fraction(float(ap[r, 16 * t + i])) * want[i, j] for i in range(16))
            assert got[r, c] == np.float32(rn32(exact))


def test_wgrad_operands_are_rotated() -> None:
    """te_nvfp4 quantizes rht(dy.T) and rht(x.T) for wgrad; without wgrad_rht the plain ones."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(24, 32)).astype(np.float32)
    w = rng.normal(size=(16, 32)).astype(np.float32)
    g = rng.normal(size=(24, 16)).astype(np.float32)
    st = _step(x, w, g)
    want = quantize(rht(x.T).T, "nvfp4", axis=0, pad=True)
    assert np.array_equal(st.last["input_t"][0].elements, want.elements)
    plain = get_recipe("te_nvfp4", wgrad_rht=False)
    st2 = _step(x, w, g, recipe=plain)
    assert np.array_equal(st2.last["input_t"][0].elements,
                          quantize(x, "nvfp4", axis=0, pad=True).elements)  # fmt: skip
    with pytest.raises(ValueError, match="wgrad_rht=True; accepted only with nvfp4"):
        get_recipe("te_mxfp8", wgrad_rht=True)
    with pytest.raises(TypeError, match="wgrad_rht=1; accepted: True, False"):
        get_recipe("te_nvfp4", wgrad_rht=1)


def test_rht_wgrad_estimates_the_exact_gradient() -> None:
    """H is orthogonal, so the rotated wgrad estimates dy.T @ x; its error is NVFP4's: each
    operand element within half a gap of E2M1 (relative 1/4 of the block scale's top value,
    times the E4M3 scale's 2**-4) - bounded here by 0.5 of the |terms| sum per output."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(64, 32)).astype(np.float32)
    w = rng.normal(size=(16, 32)).astype(np.float32)
    g = rng.normal(size=(64, 16)).astype(np.float32)
    wt = Tensor(w, requires_grad=True)
    fp8_linear(Tensor(x), wt, None, recipe="te_nvfp4").backward(g)
    exact = g.T.astype(np.float64) @ x
    terms = np.abs(rht(g.T)).astype(np.float64) @ np.abs(rht(x.T)).T
    err = np.abs(np.asarray(wt.grad, np.float64) - exact)
    assert np.all(err <= 0.5 * terms)
    assert np.median(err / terms) < 0.1  # typical error well inside the worst case
