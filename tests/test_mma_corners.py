"""Corner cases of the instruction models against MMA-Sim 2.1.1, each found by an outside check.

- CDNA2 f16/bf16 chains flush C at every instruction (a -0 does not cross an instruction).
- A K that is not a multiple of the instruction's k is zero-padded, as a kernel pads A and B.
- FMA chains (all f32/f64 MFMA, NVIDIA f64 mma) propagate NaN operands as the IEEE fma does:
  the first NaN of (a, b, c), quieted (bits compared, not only NaN-ness).
"""

from __future__ import annotations

import importlib.metadata
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

pytest.importorskip("mmasim")
torch = pytest.importorskip("torch")
assert importlib.metadata.version("mmasim") == "2.1.1", "these tests need mmasim==2.1.1"

from mmasim.amd import MFMA  # noqa: E402
from mmasim.nv_ptx import MMA  # noqa: E402

from fpemu.tensorcore.instructions import INSTRUCTIONS  # noqa: E402
from fpemu.tensorcore.mma import dpa, mma  # noqa: E402
from fpemu.tensorcore.specials import encode  # noqa: E402
from tests import mma_oracle as mo  # noqa: E402

CASES = mo.all_cases()


def _bf16(codes: list[int]) -> np.ndarray:
    return mo.to_values(np.array([codes], np.uint64), "bfloat16")


def _f32_word(x: float) -> int:
    return int(np.array([x], np.float32).view(np.uint32)[0])


# -- 1. CDNA2: C is flushed by every instruction of a chain ---------------------------------


def test_cdna2_chain_flushes_c_at_every_instruction() -> None:
    """A = [2**-63, 0, -2**-100, -2**-100], B = [2**-63, 0, 2**-100, 2**-100] (bf16 0x2000,
    0x0000, 0x8d80 / 0x0d80), C = -1.5 * 2**-126 (0x80c00000), K = 4 as two k=2 instructions.

    Exact arithmetic: instruction 1 gives -1.5 * 2**-126 + 2**-126 = -2**-127, an FP32
    subnormal, flushed keeping its sign: -0. Instruction 2's products are -2**-200 (FP32: -0),
    their sum -0; its C (-0) is flushed to +0 as every instruction flushes C
    (``flush_subnormal(c, keep_sign=False)``, mma-parity.md 3.3), so D = +0 + -0 = +0.
    """
    assert Fraction(-3, 2) * Fraction(2) ** -126 + Fraction(2) ** -126 == -(Fraction(2) ** -127)
    c = np.array([np.uint32(0x80C00000).view(np.float32)], np.float64)
    for model, suffix, k in (("cdna2.mfma.bf16.f32", "f32_32x32x2bf16", 2),
                             ("cdna2.mfma.bf16_1k.f32", "f32_32x32x4bf16_1k", 4)):  # fmt: skip
        # instruction 1: [0x2000, 0, ...]; instruction 2: k products -2**-100 * 2**-100
        ca = np.array([[0x2000] + [0] * (k - 1) + [0x8D80] * k], np.uint64)
        cb = np.array([[0x2000] + [0] * (k - 1) + [0x0D80] * k], np.uint64)
        a, b = _bf16(ca[0].tolist()), _bf16(cb[0].tolist())
        assert a[0, 0] == 2.0**-63 and a[0, -1] == -(2.0**-100) and b[0, -1] == 2.0**-100
        chain = dpa(a, b, c, instruction=model, k=k)
        by_hand = dpa(a[:, :k], b[:, :k], c, instruction=model, k=k)
        assert _f32_word(by_hand[0]) == 0x80000000  # -2**-127 flushed, sign kept
        by_hand = dpa(a[:, k:], b[:, k:], by_hand, instruction=model, k=k)
        op = MFMA("CDNA2", suffix)
        d = torch.tensor([c[0]], dtype=torch.float32)
        for sl in (slice(0, k), slice(k, 2 * k)):
            d = op.dpa(mo.to_torch(ca[:, sl], "bfloat16"), mo.to_torch(cb[:, sl], "bfloat16"), d)
        want = int(d.view(torch.int32).numpy().view(np.uint32)[0])
        assert want == 0x00000000
        assert _f32_word(by_hand[0]) == want
        assert _f32_word(chain[0]) == want, model  # was 0x80000000: -0 carried across


@pytest.mark.parametrize("model", ["cdna2.mfma.bf16.f32", "cdna2.mfma.bf16_1k.f32",
                                   "cdna2.mfma.f16.f32"])  # fmt: skip
def test_cdna2_chains_match_mmasim(model: str) -> None:
    """Chains of 2 and 3 instructions, every k of the model, bits compared (zero signs too)."""
    for case in (c for c in CASES if c.model == model):
        for instructions in (2, 3):
            bad, ex = mo.run(case, 400, 1000 * case.k + instructions, instructions=instructions)
            assert bad.size == 0, (case.key, instructions, ex)


# -- 2. K not a multiple of k: zero-padded ----------------------------------------------------

PAD_MODELS = ["sm80.mma.f64.f64", "sm90.mma.f64.f64", "cdna2.mfma.f64.f64", "cdna1.mfma.f32.f32",
              "cdna2.mfma.f32.f32", "cdna3.mfma.f32.f32", "cdna1.mfma.f16.f32",
              "cdna1.mfma.bf16.f32", "cdna2.mfma.f16.f32", "cdna2.mfma.bf16_1k.f32",
              "cdna3.mfma.xf32.f32", "cdna3.mfma.f16.f32",
              "sm80.mma.f16.f32", "sm90.mma.tf32.f32", "sm70.mma.f16.f16"]  # fmt: skip


def test_fp64_chain_k_remainder_is_zero_padded() -> None:
    """K = 3 for a k = 4 FP64 mma: products -1 * 0 = -0, C = -0. Three FMAs give -0 + -0 = -0;
    the hardware runs the fourth, padded fma(+0, +0, -0) = +0 + -0 = +0 (IEEE: an exact zero
    sum of opposite signs is +0 under round-to-nearest)."""
    a, b, c = np.array([[-1.0, -1.0, -1.0]]), np.array([[0.0, 0.0, 0.0]]), np.array([-0.0])
    got = dpa(a, b, c, instruction="sm80.mma.f64.f64")
    op = MMA("Ampere", "m8n8k4.f64.f64.f64.f64")
    pad = torch.tensor([[-1.0, -1.0, -1.0, 0.0]], dtype=torch.float64)
    want = op.dpa(pad, torch.zeros(1, 4, dtype=torch.float64), torch.tensor([-0.0],
                  dtype=torch.float64)).item()  # fmt: skip
    assert want == 0 and math.copysign(1.0, want) == 1.0
    assert got[0] == 0 and not np.signbit(got[0])  # was -0


@pytest.mark.parametrize("model", [*PAD_MODELS, "cdna3.mfma.fp8.f32"])
def test_k_remainder_sign_of_zero_matches_padded_mmasim(model: str) -> None:
    """Two patterns whose zero sign the padding decides, for every K < k:

    - products -1 * +0 = -0 and C = -0: the unpadded FMA chain (and CDNA1 for K = 1) ends at
      -0; a padded fma(+0, +0, -0) or a block with a +0 product gives -0 + +0 = +0 (IEEE
      round-to-nearest: an exact zero sum of opposite signs is +0);
    - one product 2**-80 * -2**-80 = -2**-160 and C = +0 (8-bit exponents only): CDNA3 TR-FDPA
      rounds it to -0, and where the padding adds a whole block of +0 products (xf32: K <= 4
      of k = 8) that block's sum turns it into +0.

    NVIDIA's fused paths give +0 either way (their zero results are +0)."""
    for case, K in ((c, K) for c in CASES if c.model == model for K in range(1, c.k)):
        op = case.op()
        patterns = [(-np.ones((1, K)), np.zeros((1, K)), np.array([-0.0]))]
        if min(mo.CODE[f][1] for f in (case.a, case.b)) >= 8:
            tiny = np.zeros((1, K))
            tiny[0, 0] = 2.0**-80
            patterns.append((tiny, -tiny, np.array([0.0])))
        for a, b, c in patterns:
            _check_padded(op, case, model, a, b, c)


def _check_padded(op: Any, case: mo.Case, model: str, a: np.ndarray, b: np.ndarray,
                  c: np.ndarray) -> None:  # fmt: skip
    """fpemu on (a, b, c) against mmasim on a and b zero-padded to one instruction of k."""
    dt = {f: mo.CODE[f][3] for f in (case.a, case.b, case.c)}
    pad = ((0, 0), (0, case.k - a.shape[1]))
    at = torch.from_numpy(np.pad(a, pad)).to(dt[case.a])
    bt = torch.from_numpy(np.pad(b, pad)).to(dt[case.b])
    d = op.dpa(at, bt, torch.from_numpy(c).to(dt[case.c]))
    size = d.element_size() * 8
    want = d.view(mo._INT[size]).numpy().view(f"uint{size}")
    got = encode(dpa(a, b, c, instruction=model, a_fmt=case.a, b_fmt=case.b, c_fmt=case.c,
                     k=case.k), model)  # fmt: skip
    assert int(got[0]) == int(want[0]), (case.key, a.shape[1], hex(int(got[0])), hex(int(want[0])))


@pytest.mark.parametrize("model", PAD_MODELS)
def test_k_remainder_matches_zero_padded_mmasim(model: str) -> None:
    """fpemu on K = j * k - r columns equals mmasim on the same operands zero-padded to j * k
    (the padded products are +0: they change at most the sign of a zero result). CDNA3 fp8 is
    left to :func:`test_mma_k_remainder_equals_padded_matrix`: mmasim's finding F1 (a
    dropped NaN C, test_mma_parity.py) would need its filter here."""
    for case in (c for c in CASES if c.model == model):
        for instructions, trim in ((1, 1), (2, case.k // 2), (2, case.k - 1)):
            if trim < 1 or trim >= case.k * instructions:
                continue
            bad, ex = mo.run(case, 300, 77 * case.k + trim, instructions=instructions, trim=trim)
            assert bad.size == 0, (case.key, instructions, trim, ex)


@pytest.mark.parametrize("model", ["sm90.wgmma.f16.f32", "cdna3.mfma.xf32.f32",
                                   "cdna3.mfma.fp8.f32", "cdna1.mfma.f16.f32"])  # fmt: skip
def test_mma_k_remainder_equals_padded_matrix(model: str) -> None:
    """The matrix routes (blocks, CDNA3 matrix route) pad K as :func:`dpa` does."""
    ins = INSTRUCTIONS[model]
    rng = np.random.default_rng(5)
    K = ins.k + 3
    fa = ins.inputs[0]
    a = mo.to_values(mo.codes(rng, ins.inputs[0], (6, K), np.full(6, 4)), ins.inputs[0])
    b = mo.to_values(mo.codes(rng, ins.inputs[0], (5, K), np.full(5, 4)), ins.inputs[0]).T
    a[:, :] = np.where(rng.random(a.shape) < 0.5, -0.0 * a, a)  # many signed zeros
    c = np.full((6, 5), -0.0)
    pad = -K % ins.k
    ap, bp = np.pad(a, ((0, 0), (0, pad))), np.pad(b, ((0, pad), (0, 0)))
    got = mma(a, b, c, instruction=model, a_fmt=fa)
    want = mma(ap, bp, c, instruction=model, a_fmt=fa)
    assert np.array_equal(encode(got, model), encode(want, model))
    rows = dpa(np.repeat(ap, 5, axis=0), np.tile(bp.T, (6, 1)), c.reshape(-1),
               instruction=model, a_fmt=fa).reshape(6, 5)  # fmt: skip
    assert np.array_equal(encode(got, model), encode(rows, model))


def test_block_scaled_k_remainder_is_refused() -> None:
    """Block-scaled instructions need whole scale blocks: a ValueError naming k."""
    a = np.ones((1, 40))
    with pytest.raises(ValueError, match="multiple of k=32"):
        dpa(a, a, instruction="sm100.tcgen05.block_scale.mxf8f6f4.f32", a_fmt="e4m3",
            scale_a=np.ones((1, 1)), scale_b=np.ones((1, 1)))  # fmt: skip


# -- 3. NaN operands of FMA chains -------------------------------------------------------------


def test_fp64_fma_quiets_signalling_nan_c() -> None:
    """C = sNaN 0x7FF0000000000001: IEEE 754 fma returns it quieted, 0x7FF8000000000001."""
    c = np.array([0x7FF0000000000001], np.uint64).view(np.float64)
    a = np.ones((1, 4))
    got = encode(dpa(a, a, c, instruction="sm80.mma.f64.f64"), "sm80.mma.f64.f64")
    op = MMA("Ampere", "m8n8k4.f64.f64.f64.f64")
    t = torch.from_numpy(a)
    d = op.dpa(t, t, torch.from_numpy(c.copy()))
    want = int(d.view(torch.int64).numpy().view(np.uint64)[0])
    assert want == 0x7FF8000000000001
    assert int(got[0]) == want  # was 0x7FF0000000000001


def test_cdna2_f32_invalid_product_with_nan_c_returns_c() -> None:
    """fma(inf, 0, qNaN C): a NaN operand wins over the invalid product (IEEE 754 7.2); the
    result is C, 0x7FC00000, not the host's default NaN 0xFFC00000."""
    a, b, c = np.array([[np.inf]]), np.array([[0.0]]), np.array([np.nan])
    assert _f32_word(np.nan) == 0x7FC00000
    got = encode(dpa(a, b, c, instruction="cdna2.mfma.f32.f32", k=1), "cdna2.mfma.f32.f32")
    op = MFMA("CDNA2", "f32_32x32x1f32")
    d = op.dpa(torch.tensor([[np.inf]], dtype=torch.float32),
               torch.tensor([[0.0]], dtype=torch.float32),
               torch.tensor([np.nan], dtype=torch.float32))  # fmt: skip
    want = int(d.view(torch.int32).numpy().view(np.uint32)[0])
    assert want == 0x7FC00000
    assert int(got[0]) == want


def _nan_heavy(rng: np.random.Generator, fmt: str, shape: tuple[int, int]) -> np.ndarray:
    """Codes with NaNs of random payload and sign (quiet and signalling), infinities, zeros."""
    bits, eb, mb, _ = mo.CODE[fmt]
    x = mo.codes(rng, fmt, shape, rng.integers(0, 6, shape[0]))
    top = np.uint64(((1 << eb) - 1) << mb)
    sign = rng.integers(0, 2, shape, dtype=np.uint64) << np.uint64(bits - 1)
    pay = rng.integers(1, 1 << mb, shape, dtype=np.uint64)
    u = rng.random(shape)
    x = np.where(u < 0.15, sign | top | pay, x)  # NaN
    x = np.where((u >= 0.15) & (u < 0.25), sign | top, x)  # inf
    return np.where((u >= 0.25) & (u < 0.35), sign, x)  # zeros


@pytest.mark.parametrize("model", ["sm80.mma.f64.f64", "cdna2.mfma.f64.f64", "cdna1.mfma.f32.f32",
                                   "cdna2.mfma.f32.f32", "cdna3.mfma.f32.f32"])  # fmt: skip
def test_fma_chain_nan_words_match_mmasim(model: str) -> None:
    """NaN words compared bit for bit (the parity suite compares NaN-ness only here): the
    first NaN operand of each fma, quieted; an invalid operation alone gives the host's
    default NaN (x86: sign set), as mmasim's ``std::fma``."""
    for case in (c for c in CASES if c.model == model):
        rng = np.random.default_rng(case.k)
        n, K = 1500, case.k * 2
        a, b = _nan_heavy(rng, case.a, (n, K)), _nan_heavy(rng, case.b, (n, K))
        c = _nan_heavy(rng, case.c, (n, 1))[:, 0]
        op = case.op()
        d = mo.to_torch(c, case.c)
        for i in range(2):
            sl = slice(i * case.k, (i + 1) * case.k)
            d = op.dpa(mo.to_torch(a[:, sl], case.a), mo.to_torch(b[:, sl], case.b), d)
        size = d.element_size() * 8
        want = d.view(mo._INT[size]).numpy().view(f"uint{size}")
        got = encode(dpa(mo.to_values(a, case.a), mo.to_values(b, case.b),
                         mo.to_values(c, case.c), instruction=model, k=case.k), model)  # fmt: skip
        assert np.isnan(want.view(f"float{size}")).mean() > 0.3
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, (case.key, [(hex(int(got[i])), hex(int(want[i]))) for i in bad[:3]])
