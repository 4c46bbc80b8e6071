"""Instruction models (fpemu.tensorcore.instructions / mma / specials): worked cases from exact
arithmetic, the zero-exponent rule, hardware NaN words, and bad input.

The case-by-case comparison with MMA-Sim is tests/test_mma_parity.py; here every expected value
is worked by hand from the algorithm in research note mma-parity.md (section cited).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from fpemu.linalg import matmul
from fpemu.tensorcore import tensor_core_matmul
from fpemu.tensorcore.amd import _fma64, fma_chain
from fpemu.tensorcore.instructions import INSTRUCTIONS, get_instruction
from fpemu.tensorcore.mma import dpa, mma
from fpemu.tensorcore.specials import encode, same_bits

U = 1 + 2.0**-7  # a bf16 value with a low bit


def _t_fdpa_exact(a: list[float], b: list[float], c: float, F: int, e_zero: int,
                  emins: tuple[int, int, int]) -> Fraction:  # fmt: skip
    """One T-FDPA block before the final rounding, in exact rationals (mma-parity.md 1.1)."""

    def label(x: float, emin: int) -> int:
        return max(math.frexp(x)[1] - 1, emin)

    terms = [(Fraction(x) * Fraction(y), label(x, emins[0]) + label(y, emins[1]))
             for x, y in zip(a, b, strict=True) if x * y != 0]  # fmt: skip
    if c != 0:
        terms.append((Fraction(c), label(c, emins[2])))
    emax = max([e_zero, *(e for _, e in terms)])
    q = Fraction(2) ** (emax - F)
    return sum((Fraction(int(v / q)) * q for v, _ in terms), Fraction(0))  # int(): toward 0


# -- the zero-exponent rule ------------------------------------------------------------------


def test_zero_rule_default_is_floor_bf16_zero_times_huge() -> None:
    """mma-parity.md 6: a = [0, u], b = [2**127, u * 2**-20] on A100 bf16 (F = 24, e_zero =
    -132). "floor": the zero product is left out, Emax = -20 and u*u*2**-20 = (1 + 2**-6 +
    2**-14) 2**-20 is exact on the 2**-44 grid. "emin": the zero operand has label -126, the
    zero product -126 + 127 = 1, the grid is 2**-23 and the product truncates to 2**-20."""
    a, b = np.array([[0.0, U]]), np.array([[2.0**127], [U * 2.0**-20]])
    exact = _t_fdpa_exact([0.0, U], [2.0**127, U * 2.0**-20], 0.0, 24, -132, (-126,) * 3)
    assert exact == Fraction(U) * Fraction(U) * Fraction(2) ** -20
    got = tensor_core_matmul(a, b, arch="a100", fmt="bf16").item()
    assert got == float(exact) == float.fromhex("0x1.0404p-20")
    assert tensor_core_matmul(a, b, arch="a100", fmt="bf16", zeros="emin").item() == 2.0**-20
    assert dpa(a, b.T, instruction="sm80.mma.bf16.f32").item() == got


def test_zero_rule_renamed_option_is_refused() -> None:
    with pytest.raises(ValueError, match="renamed zeros='emin'"):
        tensor_core_matmul(np.ones((1, 1)), np.ones((1, 1)), arch="a100", fmt="bf16",
                           zeros="mmasim")  # fmt: skip


def test_floor_on_f13_fp8_paths() -> None:
    """mma-parity.md 6: 32 e5m2 products (3 * 2**-16)**2 with FP16 accumulation on Ada (F = 13,
    e_zero -20). First 16-block: Emax = -20 (floor), 16 * 9 * 2**-32 = 0.5625 * 2**-24 is exact
    on the 2**-33 grid and rounds to 2**-24; second block: C = 2**-24 (label -14), each product
    truncates to 0 on the 2**-27 grid: 2**-24. The old derived floor (-9) gave 0."""
    x = 3 * 2.0**-16
    a, b = np.full((1, 32), x), np.full((32, 1), x)
    got = tensor_core_matmul(a, b, arch="ada", fmt="e5m2", acc="float16")
    assert got.item() == 2.0**-24
    assert dpa(a, b.T, instruction="sm89.mma.fp8.f16", a_fmt="e5m2").item() == 2.0**-24
    assert tensor_core_matmul(a, b, arch="ada", fmt="e5m2", acc="float16", zero_floor=-9
                              ).item() == 0.0  # fmt: skip


# -- findings beside the recordings ----------------------------------------------------------


def test_volta_fp16_c_label() -> None:
    """mma-parity.md 4: Volta m8n8k4.f32.f16.f16.f16, v = (1 + 2**-10) 2**-10, v*v + 2**-24.
    An FP16 C of 2**-24 is subnormal, label -14: Emax = -14, the F = 23 grid is 2**-37 and the
    product's 2**-40 bit is cut. The v100 arch model (C as an FP32 value, label -24) keeps it."""
    v = (1 + 2.0**-10) * 2.0**-10
    a, b, c = np.array([[v, 0, 0, 0]]), np.array([[v, 0, 0, 0]]), np.array([2.0**-24])
    exact16 = _t_fdpa_exact([v], [v], 2.0**-24, 23, -131, (-14, -14, -14))
    exact32 = _t_fdpa_exact([v], [v], 2.0**-24, 23, -131, (-14, -14, -126))
    assert float(exact16) == float.fromhex("0x1.108p-20")
    assert float(exact32) == float.fromhex("0x1.10801p-20")
    got = dpa(a, b, c, instruction="sm70.mma.f16.f32", c_fmt="float16").item()
    assert got == float(exact16)
    assert tensor_core_matmul(a, b.T, c[:, None], arch="v100", fmt="fp16").item() == float(exact32)


def test_turing_m8n8k4_runs_volta_settings() -> None:
    """mma-parity.md 1.2: Turing runs the m8n8k4 shape with Volta's L = 4, F = 23, e_zero."""
    rng = np.random.default_rng(7)
    a = np.asarray(np.float16(rng.standard_normal((200, 4)) * 4.0**rng.integers(-6, 6, (200, 4))),
                   np.float64)  # fmt: skip
    b = np.asarray(np.float16(rng.standard_normal((200, 4))), np.float64)
    c = np.asarray(np.float32(rng.standard_normal(200)), np.float64)
    t4 = dpa(a, b, c, instruction="sm75.mma.m8n8k4-f16.f32")
    v100 = dpa(a, b, c, instruction="sm70.mma.f16.f32")
    assert (t4.view(np.uint64) == v100.view(np.uint64)).all()


def test_turing_m8n8k4_differs_from_m16n8k8() -> None:
    """C = 1 + 2**-23 plus the product 1 * -2**-24, Emax = 0: F = 23 (m8n8k4) cuts the
    product to 0 -> 1 + 2**-23; F = 24 (m16n8k8, the t4 arch model) keeps it, 1 + 2**-24
    truncates to 1."""
    a, b = np.array([[1.0, 0, 0, 0]]), np.array([[-(2.0**-24), 0, 0, 0]])
    c = np.array([1 + 2.0**-23])
    assert dpa(a, b, c, instruction="sm75.mma.m8n8k4-f16.f32").item() == 1 + 2.0**-23
    assert dpa(a, b, c, instruction="sm75.mma.f16.f32", k=8).item() == 1.0
    assert tensor_core_matmul(a, b.T, c[:, None], arch="t4", fmt="fp16").item() == 1.0


def test_wgmma_fp8_fp16_accumulation_is_not_mma_sync() -> None:
    """Hopper: wgmma FP8 -> f16 is one 32-block with C inside (F = 13, RNE-FP16); the h100
    arch model's FP8 mma.sync with FP16 accumulation runs via FP16 blocks, C added after."""
    a = np.zeros((1, 32))
    a[0, :2] = [1.0, 2.0**-11]
    b, c = np.ones((32, 1)), np.array([[2.0**-11]])
    # wgmma: Emax = 0, 1 + 2**-11 + 2**-11 = 1 + 2**-10 exact: RNE-FP16 keeps it.
    wg = mma(a, b, c, instruction="sm90.wgmma.fp8.f16", a_fmt="e5m2").item()
    assert wg == 1 + 2.0**-10
    # mma.sync via FP16: 1 + 2**-11 ties to 1 in the first block, then 1 + 2**-11 ties to 1.
    sync = tensor_core_matmul(a, b, c, arch="h100", fmt="e5m2", acc="float16").item()
    assert sync == 1.0


# -- block scales, AMD, NaN words ------------------------------------------------------------


def test_mxf4nvf4_examples() -> None:
    """mma-parity.md 7.1: (a) a cancelled group keeps its scale label 16 and cuts C = 2**-30;
    (b) an all-zero group does not; (c) F = 35 keeps 36 * 2**-18 beside 2**16 - 2**16."""
    ins = "sm120.mma.block_scale.mxf4nvf4.f32"
    z = np.zeros((1, 64))
    kw: dict[str, Any] = dict(instruction=ins, a_fmt="e2m1", scale_fmt="ue4m3")
    s = np.array([[256.0, 1, 1, 1]])
    a = z.copy()
    a[0, :2] = [1.0, -1.0]
    b = z.copy()
    b[0, :2] = [1.0, 1.0]
    assert dpa(a, b, [2.0**-30], scale_a=s, scale_b=s, **kw).item() == 0.0
    assert dpa(z, z, [2.0**-30], scale_a=s, scale_b=s, **kw).item() == 2.0**-30
    a = z.copy()
    a[0, [0, 16]] = [1.0, 6.0]
    s2 = np.array([[256.0, 2.0**-9, 1, 1]])
    assert dpa(a, a, [-65536.0], scale_a=s2, scale_b=s2, **kw).item() == 36 * 2.0**-18


def test_mxf8f6f4_scale_shifts_products_not_c() -> None:
    """ST-FDPA (mma-parity.md 2): e2m3 [1, 0.125] x e3m2 [1, 1], scales 1: 1.125; scales
    2**-100 * 2**-40 on 1 * 1 give the FP32 subnormal 2**-140 (0x00000200)."""
    ins = "sm100.tcgen05.block_scale.mxf8f6f4.f32"
    a = np.zeros((1, 32))
    a[0, :2] = [1.0, 0.125]
    b = np.zeros((1, 32))
    b[0, :2] = [1.0, 1.0]
    one = np.ones((1, 1))
    got = dpa(a, b, instruction=ins, a_fmt="e2m3", b_fmt="e3m2", scale_a=one, scale_b=one)
    assert got.item() == 1.125
    got = dpa(a[:, :1].repeat(32, 1) * 0 + np.eye(1, 32), np.eye(1, 32), instruction=ins,
              a_fmt="e4m3", scale_a=one * 2.0**-100, scale_b=one * 2.0**-40)  # fmt: skip
    assert encode(got, ins).tolist() == [0x00000200]
    nan = dpa(a, b, instruction=ins, a_fmt="e2m3", b_fmt="e3m2", scale_a=one * np.nan,
              scale_b=one)  # fmt: skip
    assert encode(nan, ins).tolist() == [0x7FFFFFFF]


def test_cdna3_floors_negative_c() -> None:
    """mma-parity.md 3.4: 1 * 1 + C on CDNA3 floors C = -2**-30 to a whole 2**-24 step
    (0x3f7fffff); CDNA1 (exact sum, RNE) and CDNA2 (FP32 adds) give 1.0."""
    a = np.zeros((1, 8))
    a[0, 0] = 1.0
    c = np.array([-(2.0**-30)])
    assert encode(dpa(a, a, c, instruction="cdna3.mfma.f16.f32"), "cdna3.mfma.f16.f32"
                  ).tolist() == [0x3F7FFFFF]  # fmt: skip
    assert dpa(a, a, c, instruction="cdna1.mfma.f16.f32").item() == 1.0
    assert dpa(a, a, c, instruction="cdna2.mfma.f16.f32").item() == 1.0


def test_cdna2_flushes_subnormals() -> None:
    """CDNA2 FTZ (mma-parity.md 3.3): an FP16 subnormal input is +0; CDNA3 keeps it."""
    a = np.zeros((1, 4))
    a[0, 0] = 2.0**-24
    b = np.zeros((1, 4))
    b[0, 0] = 2.0**10
    assert dpa(a, b, instruction="cdna2.mfma.f16.f32").item() == 0.0
    assert dpa(a, b, instruction="cdna3.mfma.f16.f32", k=4).item() == 2.0**-14


def test_fma_chain_rounds_once() -> None:
    """f32 FMA: (1 + 2**-23)(1 - 2**-23) - 1 = -2**-46 exactly (a plain product rounds to 1)."""
    a, b = np.array([[1 + 2.0**-23]]), np.array([[1 - 2.0**-23]])
    assert dpa(a, b, [-1.0], instruction="cdna3.mfma.f32.f32", k=1).item() == -(2.0**-46)
    big = np.array([[2.0**600]])
    got = dpa(big, big, [-(2.0**1023)], instruction="sm90.mma.f64.f64", k=4).item()
    assert got == math.inf  # 2**1200 - 2**1023 overflows; an fma has no intermediate overflow


def test_hardware_nan_words() -> None:
    """NVIDIA and CDNA3 fused paths write 0x7FFFFFFF / 0x7FFF for NaN (mma-parity.md 1.1)."""
    d = tensor_core_matmul([[0.0]], [[np.inf]], arch="h100", fmt="fp16")
    assert encode(d, "sm90.mma.f16.f32").tolist() == [[0x7FFFFFFF]]
    d16 = dpa([[np.inf, -np.inf]], [[1.0, 1.0]], [0.0], instruction="sm90.mma.f16.f16", k=8)
    assert encode(d16, "sm90.mma.f16.f16").tolist() == [0x7FFF]
    inf = dpa([[np.inf]], [[1.0]], [0.0], instruction="sm80.mma.bf16.f32", k=8)
    assert encode(inf, "sm80.mma.bf16.f32").tolist() == [0x7F800000]
    assert same_bits(np.array([0x7FC00000], np.uint32), np.array([0x7FFFFFFF], np.uint32),
                     "sm90.mma.f16.f32").tolist() == [False]  # fmt: skip


# -- API -------------------------------------------------------------------------------------


def test_mma_equals_dpa_on_rows() -> None:
    """The matrix route (chain_blocks for T-FDPA, tiles of dpa otherwise) equals dpa."""
    rng = np.random.default_rng(3)
    a = np.asarray(np.float16(rng.standard_normal((5, 32))), np.float64)
    b = np.asarray(np.float16(rng.standard_normal((32, 4))), np.float64)
    c = np.asarray(np.float32(rng.standard_normal((5, 4))), np.float64)
    for name in ("sm90.mma.f16.f32", "sm70.mma.f16.f32", "cdna3.mfma.f16.f32",
                 "cdna1.mfma.f16.f32", "cdna2.mfma.f16.f32"):  # fmt: skip
        got = mma(a, b, c, instruction=name)
        rows = dpa(np.repeat(a, 4, 0), np.tile(b.T, (5, 1)), c.reshape(-1), instruction=name)
        assert (got.reshape(-1).view(np.uint64) == rows.view(np.uint64)).all(), name


def test_registry_names_distinguish_families() -> None:
    fams = {(i.vendor, i.family) for i in INSTRUCTIONS.values()}
    assert {("nvidia", "mma"), ("nvidia", "wgmma"), ("nvidia", "tcgen05"), ("amd", "mfma"),
            ("nvidia", "mma.block_scale"), ("nvidia", "tcgen05.block_scale")} == fams  # fmt: skip
    assert get_instruction("h100.wgmma.fp8.f32").rho == "rz-e8m13"
    assert get_instruction("b200.tcgen05.f8f6f4.f32").frac_bits == 25


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"instruction": "sm90.nope"}, ValueError, "unknown instruction='sm90.nope'"),
        ({"instruction": 3}, TypeError, "instruction must be"),
        ({"instruction": "sm90.mma.f16.f32", "a_fmt": "bf16"}, ValueError, "a_fmt='bfloat16'"),
        ({"instruction": "sm90.mma.f16.f32", "k": 32}, ValueError, "k=32 is not a shape"),
        ({"instruction": "sm90.mma.f16.f32", "c_fmt": "fp16"}, ValueError, "c_fmt='float16'"),
        ({"instruction": "sm90.mma.f16.f32", "scale_a": [[1.0]], "scale_b": [[1.0]]},
         ValueError, "not block-scaled"),
        ({"instruction": "sm120.mma.block_scale.mxf4.f32", "a_fmt": "e2m1"}, ValueError,
         "needs scale_a and scale_b"),
    ],
)  # fmt: skip
def test_bad_arguments(kwargs: dict[str, Any], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        dpa(np.ones((1, 64)), np.ones((1, 64)), **kwargs)


def test_inexact_values_are_refused() -> None:
    with pytest.raises(ValueError, match="not exact in float16"):
        dpa([[1 + 2.0**-12]], [[1.0]], instruction="sm90.mma.f16.f32", k=8)
    with pytest.raises(ValueError, match="not exact in float4_e2m1fn"):
        dpa(np.full((1, 32), 5.0), np.ones((1, 32)), instruction="sm120.mma.f8f6f4.f32",
            a_fmt="e2m1", b_fmt="e4m3")  # fmt: skip
    with pytest.raises(ValueError, match="scale_a and scale_b must have shape"):
        dpa(np.ones((1, 64)), np.ones((1, 64)), instruction="sm120.mma.block_scale.mxf4.f32",
            a_fmt="e2m1", scale_a=np.ones((1, 3)), scale_b=np.ones((1, 3)))  # fmt: skip


def test_public_matmul_reaches_instruction_models() -> None:
    """Registered as accumulation models: fpemu.linalg.matmul(model=name, ...)."""
    a = np.zeros((1, 32))
    a[0, :2] = [1.0, 2.0**-11]
    got = matmul(a, np.ones((32, 1)), fmt="e5m2", acc="float16", out="float16",
                 c=np.array([[2.0**-11]]), model="sm90.wgmma.fp8.f16", b_fmt="e4m3")  # fmt: skip
    assert float(np.asarray(got).item()) == 1 + 2.0**-10


def test_fma64_vectorised_matches_exact_rationals() -> None:
    """The vectorised float64 fma (error-free transformations, round-to-odd) against one exact
    rational rounding per element, on near-cancelling and wide-range operands."""
    rng = np.random.default_rng(1)
    n = 3000
    a = rng.standard_normal((n, 1)) * 2.0 ** rng.integers(-600, 600, (n, 1))
    b = rng.standard_normal((n, 1)) * 2.0 ** rng.integers(-600, 600, (n, 1))
    with np.errstate(over="ignore", under="ignore"):  # products beyond float64 are wanted
        c = -(a[:, 0] * b[:, 0]) * (1 + rng.standard_normal(n) * 2.0 ** -rng.integers(20, 60, n))
        c[::7] = rng.standard_normal(n)[::7] * 2.0 ** rng.integers(-1074, 1000, n)[::7]
    c[~np.isfinite(c)] = 1.0
    got = fma_chain(a, b, c, double=True)
    want = np.array([_fma64(x, y, z) for x, y, z in zip(a[:, 0], b[:, 0], c, strict=True)])
    assert (got.view(np.uint64) == want.view(np.uint64)).all()
