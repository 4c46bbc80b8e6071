"""Tests of the exact oracle in ``reference/``.

Two kinds of evidence, neither taken from fpemu:

- facts derived by hand from the format definitions (IEEE 754, OCP FP8, OCP MX), and
- agreement with independent implementations: CPython's correctly rounded float arithmetic
  and int/int division (binary64), numpy's float16/float32 conversions, ml_dtypes' 8/6/4-bit
  types, and gfloat's directed rounding modes.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import random
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from gfloat import RoundMode
from gfloat import round_float as g_round
from gfloat.formats import (
    format_info_binary16,
    format_info_ocp_e2m1,
    format_info_ocp_e4m3,
    format_info_ocp_e5m2,
)

from reference import (
    BFLOAT16,
    E2M1FN,
    E2M3FN,
    E3M2FN,
    E4M3,
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    E5M2FNUZ,
    FLOAT16,
    FLOAT32,
    FLOAT64,
    NAN,
    NEG_INF,
    NEG_ZERO,
    POS_INF,
    Spec,
    from_float,
    round_float,
    round_value,
    to_float,
)
from reference.arith import add, div, fma, mul, sqrt, sub
from reference.bits import decode, encode
from reference.dot import blocked_dot, exact_dot, pairwise_dot, pairwise_sum, sequential_dot
from reference.grid import next_down, next_up, ulp

INF = math.inf
SMALL_SPECS = [E4M3FN, E5M2, E4M3FNUZ, E5M2FNUZ, E4M3, E3M2FN, E2M3FN, E2M1FN]


def same(x: float, y: float) -> bool:
    """Bitwise float equality, NaN == NaN, -0 != +0."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


# -- Spec ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "mx", "tiny", "sub"),
    [
        (FLOAT16, 65504, 2**-14, 2**-24),
        (BFLOAT16, (2 - 2**-7) * 2**127, 2**-126, 2**-133),
        (FLOAT32, (2 - 2**-23) * 2**127, 2**-126, 2**-149),
        (E4M3FN, 448, 2**-6, 2**-9),
        (E5M2, 57344, 2**-14, 2**-16),
        (E4M3FNUZ, 240, 2**-7, 2**-10),
        (E5M2FNUZ, 57344, 2**-15, 2**-17),
        (E4M3, 240, 2**-6, 2**-9),
        (E3M2FN, 28, 2**-2, 2**-4),
        (E2M3FN, 7.5, 1, 2**-3),
        (E2M1FN, 6, 1, 0.5),
    ],
)
def test_spec_constants(spec: Spec, mx: float, tiny: float, sub: float) -> None:
    assert spec.max == Fraction(mx)
    assert spec.tiny == Fraction(tiny)
    assert spec.smallest_subnormal == Fraction(sub)


def test_spec_from_fields_and_validation() -> None:
    class Fmt:
        ebits, mbits, bias, specials, subnormals = 4, 3, 7, "fn", True

    assert Spec.from_fields(Fmt()) == E4M3FN
    with pytest.raises(TypeError, match="lacks"):
        Spec.from_fields(object())
    with pytest.raises(ValueError, match="specials"):
        Spec(4, 3, 7, "bogus")
    with pytest.raises(TypeError, match="ebits"):
        Spec(4.0, 3, 7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="ebits >= 2"):
        Spec(1, 3, 0, "ieee")
    assert Spec(5, 10, 15, subnormals=False).smallest_subnormal == Fraction(2**-14)


# -- values ----------------------------------------------------------------------------------
def test_value_conversions() -> None:
    assert from_float(-0.0) is NEG_ZERO
    assert from_float(0.0) == 0 and from_float(0.0) is not NEG_ZERO
    assert from_float(INF) is POS_INF and from_float(-INF) is NEG_INF
    assert from_float(math.nan) is NAN
    assert from_float(0.1) == Fraction(3602879701896397, 2**55)
    assert same(to_float(NEG_ZERO), -0.0)
    assert to_float(Fraction(5, 4)) == 1.25
    with pytest.raises(ValueError, match="not exactly representable"):
        to_float(Fraction(1, 3))
    with pytest.raises(ValueError, match="not exactly representable"):
        to_float(Fraction(2) ** 1024)
    with pytest.raises(TypeError, match="x must be a float"):
        from_float("1.0")  # type: ignore[arg-type]


# -- decode / encode -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "code", "value"),
    [
        (FLOAT16, 0x3C00, 1.0),
        (FLOAT16, 0x7BFF, 65504.0),
        (FLOAT16, 0x0001, 2.0**-24),
        (FLOAT16, 0x03FF, 2.0**-14 - 2.0**-24),
        (FLOAT16, 0x0400, 2.0**-14),
        (FLOAT16, 0xC000, -2.0),
        (FLOAT16, 0x3555, 1365 / 4096),
        (FLOAT16, 0x7C00, INF),
        (FLOAT16, 0xFC00, -INF),
        (FLOAT16, 0x8000, -0.0),
        (FLOAT16, 0x7E00, math.nan),
        (FLOAT16, 0xFC01, math.nan),
        (BFLOAT16, 0x3F80, 1.0),
        (BFLOAT16, 0x7F7F, (2 - 2**-7) * 2.0**127),
        (FLOAT32, 0x3F800000, 1.0),
        (FLOAT32, 0x00000001, 2.0**-149),
        (E4M3FN, 0x7E, 448.0),
        (E4M3FN, 0x7F, math.nan),
        (E4M3FN, 0xFF, math.nan),
        (E4M3FN, 0x78, 256.0),
        (E4M3FN, 0x01, 2.0**-9),
        (E4M3FN, 0x80, -0.0),
        (E4M3FNUZ, 0x80, math.nan),
        (E4M3FNUZ, 0x7F, 240.0),
        (E4M3FNUZ, 0x01, 2.0**-10),
        (E5M2, 0x7B, 57344.0),
        (E5M2, 0x7C, INF),
        (E5M2, 0x7D, math.nan),
        (E5M2FNUZ, 0x7F, 57344.0),
        (E5M2FNUZ, 0x80, math.nan),
        (E4M3, 0x77, 240.0),
        (E4M3, 0x78, INF),
        (E3M2FN, 0x1F, 28.0),
        (E3M2FN, 0x3F, -28.0),
        (E2M3FN, 0x1F, 7.5),
        (E2M3FN, 0x01, 0.125),
    ],
)
def test_decode_hand_facts(spec: Spec, code: int, value: float) -> None:
    assert same(decode(code, spec), value)


def test_decode_e2m1_all_codes() -> None:
    # OCP MX spec table for FP4 E2M1.
    table = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    got = [decode(c, E2M1FN) for c in range(16)]
    assert all(same(g, v) for g, v in zip(got, table + [-v for v in table], strict=True))


ML_DTYPES = [
    (E4M3FN, ml_dtypes.float8_e4m3fn),
    (E5M2, ml_dtypes.float8_e5m2),
    (E4M3FNUZ, ml_dtypes.float8_e4m3fnuz),
    (E5M2FNUZ, ml_dtypes.float8_e5m2fnuz),
    (E4M3, ml_dtypes.float8_e4m3),
    (E3M2FN, ml_dtypes.float6_e3m2fn),
    (E2M3FN, ml_dtypes.float6_e2m3fn),
    (E2M1FN, ml_dtypes.float4_e2m1fn),
]


@pytest.mark.parametrize(("spec", "dtype"), ML_DTYPES)
def test_decode_encode_every_code_vs_ml_dtypes(spec: Spec, dtype: type) -> None:
    codes = np.arange(2**spec.bits, dtype=np.uint8)
    theirs = codes.view(dtype).astype(np.float64)
    for code in range(2**spec.bits):
        ours = decode(code, spec)
        assert same(ours, float(theirs[code])), hex(code)
        if not math.isnan(ours):
            assert encode(ours, spec) == code


def test_decode_float16_float32_vs_numpy() -> None:
    rng = random.Random(1)
    for code in [*range(0, 2**16, 7), 0x7C00, 0xFC00, 0x7BFF, 0x8001]:
        theirs = float(np.array([code], np.uint16).view(np.float16)[0])
        assert same(decode(code, FLOAT16), theirs), hex(code)
    for _ in range(2000):
        code = rng.getrandbits(32)
        theirs = float(np.array([code], np.uint32).view(np.float32)[0])
        assert same(decode(code, FLOAT32), theirs), hex(code)
        if not math.isnan(theirs):
            assert encode(theirs, FLOAT32) == code


def test_encode_nan_codes_and_errors() -> None:
    assert encode(math.nan, FLOAT16) == 0x7E00
    assert encode(math.nan, FLOAT32) == 0x7FC00000
    assert encode(math.nan, E4M3FN) == 0x7F
    assert encode(math.nan, E4M3FNUZ) == 0x80
    assert encode(math.nan, E5M2FNUZ) == 0x80
    assert encode(-0.0, E4M3FN) == 0x80
    assert encode(0.0, E4M3FNUZ) == 0x00
    with pytest.raises(ValueError, match="no NaN"):
        encode(math.nan, E2M1FN)
    with pytest.raises(ValueError, match="no -0"):
        encode(-0.0, E4M3FNUZ)
    with pytest.raises(ValueError, match="no infinity"):
        encode(INF, E4M3FN)
    for bad in (464.0, 480.0, 1 + 2**-4, 2**-10, 1e300):
        with pytest.raises(ValueError, match="not exactly representable"):
            encode(bad, E4M3FN)
    with pytest.raises(ValueError, match="out of range"):
        decode(256, E4M3FN)
    with pytest.raises(TypeError, match="code must be an int"):
        decode(1.0, E4M3FN)  # type: ignore[arg-type]


# -- rounding: hand-derived facts ------------------------------------------------------------
@pytest.mark.parametrize(
    ("x", "spec", "mode", "expected"),
    [
        # fp16: 1 + 2**-11 is the midpoint of 1 and 1 + 2**-10; 1 has the even significand.
        (1 + 2**-11, FLOAT16, "rne", 1.0),
        (1 + 3 * 2**-11, FLOAT16, "rne", 1 + 2**-9),
        (1 + 2**-11, FLOAT16, "rna", 1 + 2**-10),
        (-(1 + 2**-11), FLOAT16, "rna", -(1 + 2**-10)),
        (1 + 2**-11 + 2**-30, FLOAT16, "rne", 1 + 2**-10),
        (1 + 2**-11, FLOAT16, "rtz", 1.0),
        (1 + 2**-30, FLOAT16, "rup", 1 + 2**-10),
        (-(1 + 2**-30), FLOAT16, "rup", -1.0),
        (-(1 + 2**-30), FLOAT16, "rdown", -(1 + 2**-10)),
        (1 + 2**-30, FLOAT16, "rdown", 1.0),
        # overflow: fp16 max 65504, next grid point above is 65536 (quantum 32)
        (70000.0, FLOAT16, "rtz", 65504.0),
        (-70000.0, FLOAT16, "rup", -65504.0),
        (-70000.0, FLOAT16, "rdown", -INF),
        (70000.0, FLOAT16, "rup", INF),
        (70000.0, FLOAT16, "rdown", 65504.0),
        (70000.0, FLOAT16, "rto", 65504.0),
        (65519.99, FLOAT16, "rne", 65504.0),
        (65520.0, FLOAT16, "rne", INF),  # tie; 65504 has odd significand 2047
        (65520.0, FLOAT16, "rna", INF),
        (65535.0, FLOAT16, "rtz", 65504.0),
        (INF, FLOAT16, "rtz", INF),
        (-INF, FLOAT16, "rne", -INF),
        # subnormals: quantum 2**-24 below 2**-14
        (2.0**-25, FLOAT16, "rne", 0.0),
        (-(2.0**-25), FLOAT16, "rne", -0.0),
        (2.0**-25 + 2.0**-40, FLOAT16, "rne", 2.0**-24),
        (3 * 2.0**-25, FLOAT16, "rne", 2.0**-23),
        (3 * 2.0**-25, FLOAT16, "rtz", 2.0**-24),
        (1e-30, FLOAT16, "rup", 2.0**-24),
        (1e-30, FLOAT16, "rdown", 0.0),
        (-1e-30, FLOAT16, "rdown", -(2.0**-24)),
        (-1e-30, FLOAT16, "rup", -0.0),
        (-1e-30, FLOAT16, "rne", -0.0),
        (-0.0, FLOAT16, "rne", -0.0),
        (2.0**-14 - 2.0**-25, FLOAT16, "rne", 2.0**-14),  # rounds up into the normal range
        # round to odd: inexact results take the odd neighbour
        (1 + 2**-11, FLOAT16, "rto", 1 + 2**-10),
        (1 + 2**-10 + 2**-12, FLOAT16, "rto", 1 + 2**-10),
        (-(1 + 2**-11), FLOAT16, "rto", -(1 + 2**-10)),
        (1.5, FLOAT16, "rto", 1.5),
        (2 - 2**-12, FLOAT16, "rto", 2 - 2**-10),  # not up to 2.0 (even significand)
        (1e-30, FLOAT16, "rto", 2.0**-24),
        (-1e-30, FLOAT16, "rto", -(2.0**-24)),
        # bfloat16: 8 significand bits
        (1 + 2**-8 + 2**-40, BFLOAT16, "rne", 1.0078125),
        (1 + 2**-8, BFLOAT16, "rne", 1.0),
        # e4m3fn: max 448 = 1.75 * 2**8; grid in [256, 512) has quantum 32
        (464.0, E4M3FN, "rne", 448.0),  # tie between 448 (sig 14) and 480 (sig 15)
        (465.0, E4M3FN, "rne", math.nan),
        (480.0, E4M3FN, "rne", math.nan),
        (480.0, E4M3FN, "rtz", 448.0),
        (1000.0, E4M3FN, "rdown", 448.0),
        (-1000.0, E4M3FN, "rdown", math.nan),
        (-431.99999999999994, E4M3FN, "rne", -416.0),
        (-432.0, E4M3FN, "rne", -448.0),  # tie between 416 (sig 13) and 448 (sig 14)
        (INF, E4M3FN, "rne", math.nan),
        (math.nan, E4M3FN, "rtz", math.nan),
        (2.0**-10, E4M3FN, "rne", 0.0),  # tie between 0 and 2**-9
        (3 * 2.0**-11, E4M3FN, "rne", 2.0**-9),
        # fnuz: no -0; max 240 (e4m3fnuz), quantum 16 in [128, 256)
        (-1e-30, E4M3FNUZ, "rne", 0.0),
        (-0.0, E4M3FNUZ, "rne", 0.0),
        (-1e-30, E4M3FNUZ, "rup", 0.0),
        (248.0, E4M3FNUZ, "rne", math.nan),  # tie, 240 has odd significand 15
        (247.0, E4M3FNUZ, "rne", 240.0),
        (-1e9, E5M2FNUZ, "rtz", -57344.0),
        # finite formats saturate
        (100.0, E2M1FN, "rne", 6.0),
        (-100.0, E2M1FN, "rdown", -6.0),
        (INF, E2M1FN, "rne", 6.0),
        (-INF, E3M2FN, "rne", -28.0),
        (5.0, E2M1FN, "rne", 4.0),  # tie between 4 (sig 2) and 6 (sig 3)
        (5.0, E2M1FN, "rna", 6.0),
        (0.25, E2M1FN, "rne", 0.0),
        (0.75, E2M1FN, "rne", 1.0),
        (-0.25, E2M1FN, "rne", -0.0),
        (7.75, E2M3FN, "rne", 7.5),
        (29.0, E3M2FN, "rup", 28.0),
    ],
)
def test_round_hand_facts(x: float, spec: Spec, mode: str, expected: float) -> None:
    assert same(round_float(x, spec, mode), expected)


def test_round_overflow_option() -> None:
    assert round_float(465.0, E4M3FN, "rne", overflow="saturate") == 448.0
    assert round_float(-465.0, E4M3FN, "rne", overflow="saturate") == -448.0
    assert round_float(INF, FLOAT16, "rne", overflow="saturate") == 65504.0
    assert round_float(-INF, FLOAT16, "rne", overflow="saturate") == -65504.0
    assert math.isnan(round_float(INF, FLOAT16, "rne", overflow="nan"))
    assert math.isnan(round_float(70000.0, FLOAT16, "rne", overflow="nan"))
    assert round_float(70000.0, FLOAT16, "rtz", overflow="nan") == 65504.0
    with pytest.raises(ValueError, match="no infinity"):
        round_float(1.0, E4M3FN, "rne", overflow="inf")
    with pytest.raises(ValueError, match="no NaN"):
        round_float(1.0, E2M1FN, "rne", overflow="nan")
    with pytest.raises(ValueError, match="overflow="):
        round_float(1.0, FLOAT16, "rne", overflow="wrap")


def test_round_flush_after_rounding() -> None:
    # Round as if subnormals existed, then flush what lands below 2**-14.
    assert same(round_float(2.0**-20, FLOAT16, "rne", subnormals=False), 0.0)
    assert same(round_float(-(2.0**-20), FLOAT16, "rne", subnormals=False), -0.0)
    assert same(round_float(1e-30, FLOAT16, "rup", subnormals=False), 0.0)
    assert same(round_float(-(2.0**-20), E4M3FNUZ, "rne", subnormals=False), 0.0)
    # 2**-14 - 2**-25 rounds (rne) up to 2**-14, a normal number: kept.
    assert round_float(2.0**-14 - 2.0**-25, FLOAT16, "rne", subnormals=False) == 2.0**-14
    # 2**-14 - 2**-24 is a subnormal: flushed.
    assert same(round_float(2.0**-14 - 2.0**-24, FLOAT16, "rne", subnormals=False), 0.0)
    nosub = Spec(5, 10, 15, subnormals=False)
    assert same(round_float(2.0**-20, nosub, "rne"), 0.0)
    assert round_float(2.0**-20, nosub, "rne", subnormals=True) == 2.0**-20


def test_round_nan_and_bad_options() -> None:
    with pytest.raises(ValueError, match="no NaN"):
        round_float(math.nan, E2M1FN, "rne")
    with pytest.raises(ValueError, match="mode="):
        round_float(1.0, FLOAT16, "nearest")
    with pytest.raises(ValueError, match="needs u"):
        round_float(1.0, FLOAT16, "stochastic")
    with pytest.raises(ValueError, match="only used by"):
        round_float(1.0, FLOAT16, "rne", u=0.5)
    with pytest.raises(ValueError, match=r"not in \[0, 1\)"):
        round_float(1.0, FLOAT16, "stochastic", u=1)
    with pytest.raises(TypeError, match="subnormals"):
        round_float(1.0, FLOAT16, "rne", subnormals=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="spec"):
        round_float(1.0, "float16", "rne")  # type: ignore[arg-type]


def test_round_stochastic_threshold() -> None:
    # 1 + 2**-12 lies a quarter of the way from 1 to 1 + 2**-10: frac = 1/4 exactly.
    x = Fraction(1) + Fraction(1, 2**12)
    up, down = Fraction(1) + Fraction(1, 2**10), Fraction(1)
    assert round_value(x, FLOAT16, "stochastic", u=Fraction(0)) == up
    assert round_value(x, FLOAT16, "stochastic", u=Fraction(1, 4) - Fraction(1, 2**80)) == up
    assert round_value(x, FLOAT16, "stochastic", u=Fraction(1, 4)) == down
    assert round_value(x, FLOAT16, "stochastic", u=Fraction(99, 100)) == down
    assert round_value(-x, FLOAT16, "stochastic", u=Fraction(0)) == -up  # away from zero
    assert round_value(Fraction(1), FLOAT16, "stochastic", u=Fraction(0)) == 1  # exact stays
    # 70000 = 1093.75 quanta of 64: down (69952) is still above max -> saturates to max.
    assert round_float(70000.0, FLOAT16, "stochastic", u=0.9) == 65504.0
    assert round_float(70000.0, FLOAT16, "stochastic", u=0.5) == INF
    # frequency: over u = k/8, P(up) = frac = 1/4 exactly
    ups = sum(round_value(x, FLOAT16, "stochastic", u=Fraction(k, 8)) == up for k in range(8))
    assert ups == 2


def test_round_value_specials() -> None:
    assert round_value(NAN, FLOAT16, "rne") is NAN
    assert round_value(NEG_ZERO, FLOAT16, "rtz") is NEG_ZERO
    assert round_value(NEG_ZERO, E4M3FNUZ, "rtz") == 0
    assert round_value(POS_INF, FLOAT16, "rne") is POS_INF
    assert round_value(Fraction(-7, 3), E2M1FN, "rne") == -2


# -- rounding: agreement with independent implementations -----------------------------------
def _random_floats(rng: random.Random, n: int, lo: int, hi: int) -> list[float]:
    """Random finite floats with exponents in [lo, hi), both signs, some of them ties."""
    out = []
    for i in range(n):
        x = math.ldexp(rng.random() + 0.5, rng.randrange(lo, hi))
        if i % 4 == 0:  # a midpoint-ish value with few significant bits
            x = math.ldexp(rng.getrandbits(14) | 1, rng.randrange(lo, hi) - 13)
        out.append(-x if rng.random() < 0.5 else x)
    return out


def test_round_float64_vs_cpython_division() -> None:
    # CPython's int/int true division is correctly rounded to nearest-even, with subnormals
    # and OverflowError past the largest float.
    rng = random.Random(2)
    for _ in range(1500):
        num = rng.getrandbits(rng.randrange(1, 200)) * rng.choice((1, -1))
        den = rng.getrandbits(rng.randrange(1, 200)) or 1
        v = Fraction(num, den) * Fraction(2) ** rng.randrange(-1200, 1200)
        try:
            expected = v.numerator / v.denominator
        except OverflowError:
            expected = INF if v > 0 else -INF
        got = to_float(round_value(v, FLOAT64, "rne"))
        if v == 0:
            continue
        assert same(got, expected), v


def test_round_float16_float32_vs_numpy() -> None:
    rng = random.Random(3)
    xs = [*_random_floats(rng, 3000, -30, 18), 65520.0, -65520.0, 65519.99, 2.0**-25, INF, -0.0]
    with np.errstate(over="ignore"):
        theirs16 = np.array(xs, np.float64).astype(np.float16).astype(np.float64)
    for x, t in zip(xs, theirs16, strict=True):
        assert same(round_float(x, FLOAT16, "rne"), float(t)), x
    ys = _random_floats(rng, 2000, -155, 130)
    with np.errstate(over="ignore"):
        theirs32 = np.array(ys, np.float64).astype(np.float32).astype(np.float64)
    for y, t in zip(ys, theirs32, strict=True):
        assert same(round_float(y, FLOAT32, "rne"), float(t)), y
    assert same(round_float(math.nan, FLOAT32, "rne"), math.nan)


@pytest.mark.parametrize(("spec", "dtype"), ML_DTYPES)
def test_round_small_formats_vs_ml_dtypes(spec: Spec, dtype: type) -> None:
    # ml_dtypes rounds float32 input to nearest-even; compare only within range (its overflow
    # conventions are not the contract's), i.e. below max + half a quantum.
    rng = random.Random(4)
    limit = float(spec.max) * (1 + 2.0 ** -(spec.mbits + 2))
    xs = [x for x in _random_floats(rng, 600, spec.emin - spec.mbits - 3, spec.emax + 1)]
    xs = [float(np.float32(x)) for x in xs if abs(x) < limit]
    theirs = np.array(xs, np.float32).astype(dtype).astype(np.float64)
    for x, t in zip(xs, theirs, strict=True):
        ours = round_float(x, spec, "rne")
        if ours == 0 and t == 0 and not spec.has_negative_zero:
            assert same(ours, 0.0)
            continue
        assert same(ours, float(t)), x


GFLOAT_FORMATS = [
    (FLOAT16, format_info_binary16),
    (E4M3FN, format_info_ocp_e4m3),
    (E5M2, format_info_ocp_e5m2),
    (E2M1FN, format_info_ocp_e2m1),
]


@pytest.mark.parametrize("mode", ["rne", "rna", "rtz", "rup", "rdown"])
def test_round_modes_vs_gfloat(mode: str) -> None:
    # gfloat implements the directed modes independently; compare within [-max, max].
    gmode = {
        "rne": RoundMode.TiesToEven,
        "rna": RoundMode.TiesToAway,
        "rtz": RoundMode.TowardZero,
        "rup": RoundMode.TowardPositive,
        "rdown": RoundMode.TowardNegative,
    }[mode]
    rng = random.Random(5)
    for spec, fi in GFLOAT_FORMATS:
        xs = _random_floats(rng, 300, spec.emin - spec.mbits - 2, spec.emax + 1)
        for x in xs:
            if abs(x) > spec.max:
                continue
            assert same(round_float(x, spec, mode), g_round(fi, x, gmode)), (spec, x)


# -- grid neighbours vs enumeration of every code --------------------------------------------
def _sorted_values(spec: Spec) -> list[float]:
    """Every finite value of ``spec`` once (+0 standing for both zeros), ascending."""
    vals = {decode(c, spec) for c in range(2**spec.bits)}
    finite = {v for v in vals if math.isfinite(v)}
    if not spec.subnormals:
        finite = {v for v in finite if v == 0 or abs(v) >= float(spec.tiny)}
    return sorted(finite)


@pytest.mark.parametrize("spec", [*SMALL_SPECS, Spec(4, 3, 7, "fn", subnormals=False)])
def test_next_up_down_vs_enumeration(spec: Spec) -> None:
    vals = _sorted_values(spec)
    top = INF if spec.has_inf else math.nan
    for i, v in enumerate(vals):
        up = vals[i + 1] if i + 1 < len(vals) else top
        down = vals[i - 1] if i > 0 else -top
        if up == 0:
            up = -0.0 if spec.has_negative_zero else 0.0  # nextUp(-smallest) is -0
        if spec.specials == "finite" and i + 1 == len(vals):
            with pytest.raises(ValueError, match="no value above max"):
                next_up(v, spec)
        else:
            assert same(next_up(v, spec), up), v
        if spec.specials == "finite" and i == 0:
            with pytest.raises(ValueError, match="no value above max"):
                next_down(v, spec)
        else:
            assert same(next_down(v, spec), down), v
        if v != 0:
            pos = [w for w in vals if w > abs(v)]
            if pos and math.floor(math.log2(abs(v))) == math.floor(math.log2(pos[0])):
                assert ulp(v, spec) == pos[0] - abs(v)


def test_next_up_down_facts() -> None:
    assert next_up(-0.0, FLOAT16) == 2.0**-24
    assert next_up(0.0, FLOAT16) == 2.0**-24
    assert same(next_up(-(2.0**-24), FLOAT16), -0.0)
    assert same(next_down(2.0**-24, FLOAT16), 0.0)
    assert next_up(65504.0, FLOAT16) == INF
    assert next_up(-INF, FLOAT16) == -65504.0
    assert next_up(INF, FLOAT16) == INF
    assert math.isnan(next_up(math.nan, FLOAT16))
    assert next_down(1.0, FLOAT16) == 1 - 2.0**-11
    assert next_up(2.0**-14 - 2.0**-24, FLOAT16) == 2.0**-14
    assert math.isnan(next_up(448.0, E4M3FN))
    assert math.isnan(next_down(-240.0, E4M3FNUZ))
    assert same(next_down(2.0**-10, E4M3FNUZ), 0.0)
    nosub = Spec(5, 10, 15, subnormals=False)
    assert next_up(0.0, nosub) == 2.0**-14
    assert same(next_down(2.0**-14, nosub), 0.0)
    assert ulp(1.0, FLOAT16) == 2.0**-10
    assert ulp(2.0**-20, FLOAT16) == 2.0**-24
    assert ulp(0.0, E4M3FN) == 2.0**-9
    assert ulp(1e6, FLOAT16) == 2.0**9  # exponent unbounded above max
    assert ulp(-INF, FLOAT16) == INF
    with pytest.raises(ValueError, match="not a value"):
        next_up(1 + 2**-11, FLOAT16)
    with pytest.raises(ValueError, match="subnormal"):
        next_up(2.0**-20, nosub)
    with pytest.raises(ValueError, match="not a value"):
        next_up(INF, E4M3FN)


# -- rounding properties -----------------------------------------------------------------------
def test_round_to_odd_then_nearest_even_is_innocuous() -> None:
    # Classic property: rounding to odd with 2 extra bits, then to nearest-even, equals a direct
    # nearest-even rounding (same exponent range, so subnormals included).
    wide, narrow = Spec(8, 12, 127), Spec(8, 10, 127)
    rng = random.Random(6)
    for x in _random_floats(rng, 2000, -140, 120):
        v = Fraction(x) * (1 + Fraction(rng.getrandbits(30), 2**40))
        twice = round_value(round_value(v, wide, "rto"), narrow, "rne")
        assert twice == round_value(v, narrow, "rne"), v


def test_round_stochastic_frequency_equals_fraction() -> None:
    # Over u = k/N, k = 0..N-1, "u < frac" holds for exactly ceil(frac * N) values of k.
    rng = random.Random(7)
    n = 64
    for x in _random_floats(rng, 40, -20, 10):
        v = Fraction(x) * (1 + Fraction(rng.getrandbits(20), 2**22))
        down = round_value(v, FLOAT16, "rtz")
        up = round_value(v, FLOAT16, "rup" if v > 0 else "rdown")
        got = [round_value(v, FLOAT16, "stochastic", u=Fraction(k, n)) for k in range(n)]
        assert set(got) <= {down, up}
        if up != down:
            assert isinstance(up, Fraction) and isinstance(down, Fraction)
            frac = (v - down) / (up - down)
            assert got.count(up) == math.ceil(frac * n)


# -- arithmetic ------------------------------------------------------------------------------
def _random_doubles(rng: random.Random, n: int) -> list[float]:
    """Random binary64 values: full-width significands, exponents across the whole range."""
    out = []
    for _ in range(n):
        e = rng.choice([rng.randrange(-1074, 1024), rng.randrange(-30, 30)])
        x = math.ldexp(1 + rng.getrandbits(52) / 2**52, e)  # subnormal/overflow range rounds
        out.append(-x if rng.random() < 0.5 else x)
    return out


def test_arith_float64_vs_python_floats() -> None:
    rng = random.Random(8)
    xs, ys = _random_doubles(rng, 400), _random_doubles(rng, 400)
    for x, y in zip(xs, ys, strict=True):
        assert same(add(x, y, FLOAT64), x + y), (x, y)
        assert same(sub(x, y, FLOAT64), x - y), (x, y)
        assert same(mul(x, y, FLOAT64), x * y), (x, y)
        if y != 0:
            assert same(div(x, y, FLOAT64), x / y), (x, y)
        assert same(sqrt(abs(x), FLOAT64), math.sqrt(abs(x))), x
    # near-cancellation and subnormal results
    for x in xs[:100]:
        y = -x * (1 + 2.0**-50)
        assert same(add(x, y, FLOAT64), x + y)
        assert same(mul(x, 2.0**-1060, FLOAT64), x * 2.0**-1060)


def test_fma_float64_vs_cpython_division_and_math_fma() -> None:
    # float(Fraction) is CPython's correctly rounded int/int division: an independent rounding
    # of the exact a*b + c. math.fma (Python >= 3.13) is checked too where it exists.
    rng = random.Random(9)
    xs = _random_doubles(rng, 900)
    for a, b, c in zip(xs[0::3], xs[1::3], xs[2::3], strict=True):
        c = rng.choice([c, -a * b, -(a * b) * (1 + 2.0**-52)])
        if not math.isfinite(c):
            continue
        exact = Fraction(a) * Fraction(b) + Fraction(c)
        try:
            expected = exact.numerator / exact.denominator
        except OverflowError:
            expected = INF if exact > 0 else -INF
        got = fma(a, b, c, FLOAT64)
        if exact != 0:
            assert same(got, expected), (a, b, c)
        if hasattr(math, "fma"):
            assert same(got, math.fma(a, b, c)), (a, b, c)


def _fp16_values(rng: random.Random, n: int) -> list[float]:
    codes = [rng.getrandbits(16) for _ in range(n)]
    vals = [decode(c, FLOAT16) for c in codes]
    return [v for v in vals if math.isfinite(v)]


def test_arith_float16_float32_vs_numpy() -> None:
    # numpy computes float16 arithmetic in float32 and rounds once more; float32 has more than
    # 2p + 2 bits for p = 11, so that double rounding is innocuous (correctly rounded).
    rng = random.Random(10)
    xs, ys = _fp16_values(rng, 1500), _fp16_values(rng, 1500)
    n = min(len(xs), len(ys))
    a, b = np.array(xs[:n], np.float16), np.array(ys[:n], np.float16)
    with np.errstate(all="ignore"):
        ops = {
            "add": (add, a + b),
            "sub": (sub, a - b),
            "mul": (mul, a * b),
            "div": (div, a / b),
        }
        roots = np.sqrt(np.abs(a))
    for name, (fn, theirs) in ops.items():
        for i in range(n):
            if name == "div" and ys[i] == 0:
                continue
            assert same(fn(xs[i], ys[i], FLOAT16), float(theirs[i])), (name, xs[i], ys[i])
    for i in range(n):
        assert same(sqrt(abs(xs[i]), FLOAT16), float(roots[i])), xs[i]
    f32 = [float(np.float32(v)) for v in _random_doubles(rng, 600) if abs(v) < 1e38]
    half = len(f32) // 2
    p, q = np.array(f32[:half], np.float32), np.array(f32[half : 2 * half], np.float32)
    with np.errstate(all="ignore"):
        s, m, d, r = p + q, p * q, p / q, np.sqrt(np.abs(p))
    for i in range(len(q)):
        x, y = float(p[i]), float(q[i])
        assert same(add(x, y, FLOAT32), float(s[i])), (x, y)
        assert same(mul(x, y, FLOAT32), float(m[i])), (x, y)
        assert same(div(x, y, FLOAT32), float(d[i])), (x, y)
        assert same(sqrt(abs(x), FLOAT32), float(r[i])), x


@pytest.mark.parametrize("mode", ["rne", "rna", "rtz", "rup", "rdown", "rto"])
def test_sqrt_brackets_the_exact_root(mode: str) -> None:
    # Whatever the mode, r is a grid value with r**2 on the side of x that the mode asks for.
    rng = random.Random(11)
    for x in [2.0, 3.0, 0.5, 2.0**-24, 3 * 2.0**-24, 65504.0, *_fp16_values(rng, 150)]:
        x = abs(x)
        if x == 0:
            continue
        r = Fraction(sqrt(x, FLOAT16, mode))
        lo = Fraction(next_down(float(r), FLOAT16))
        hi = Fraction(next_up(float(r), FLOAT16))
        fx = Fraction(x)
        if r * r == fx:
            continue
        if mode in ("rtz", "rdown"):
            assert r * r < fx < hi * hi
        elif mode == "rup":
            assert lo * lo < fx < r * r
        elif mode == "rto":
            assert encode(float(r), FLOAT16) % 2 == 1 and (lo * lo < fx < hi * hi)
        else:  # nearest: within half a grid step on the correct side
            assert ((lo + r) / 2) ** 2 <= fx <= ((r + hi) / 2) ** 2


def test_sqrt_hand_facts() -> None:
    # sqrt(2) = 1.41421356...: 1448.15 quanta of 2**-10 in fp16.
    assert sqrt(2.0, FLOAT16) == 1448 / 1024
    assert sqrt(2.0, FLOAT16, "rup") == 1449 / 1024
    assert sqrt(2.0, FLOAT16, "rto") == 1449 / 1024  # 1448 is even
    assert Fraction(1448, 1024) ** 2 < 2 < Fraction(1449, 1024) ** 2
    assert sqrt(4.0, FLOAT16, "rup") == 2.0  # exact stays exact in every mode
    assert sqrt(2.0**-24, FLOAT16) == 2.0**-12
    assert same(sqrt(-0.0, FLOAT16), -0.0)
    assert same(sqrt(-0.0, E4M3FNUZ), 0.0)
    assert sqrt(INF, FLOAT16) == INF
    assert math.isnan(sqrt(-1.0, FLOAT16))
    assert math.isnan(sqrt(-INF, FLOAT16))
    assert math.isnan(sqrt(math.nan, E4M3FN))
    # sqrt(1.1) = 1.0488...; stochastic: 1.0488/2**-3 = 8.39 quanta in e4m3fn -> frac 0.39
    assert sqrt(1.1, E4M3FN, "stochastic", u=0.38) == 1.125
    assert sqrt(1.1, E4M3FN, "stochastic", u=0.4) == 1.0
    with pytest.raises(ValueError, match="no NaN"):
        sqrt(-1.0, E2M1FN)


@pytest.mark.parametrize(
    ("fn", "args", "mode", "expected"),
    [
        (add, (INF, -INF), "rne", math.nan),
        (add, (INF, 1.0), "rne", INF),
        (add, (-INF, -INF), "rne", -INF),
        (sub, (INF, INF), "rne", math.nan),
        (mul, (0.0, INF), "rne", math.nan),
        (mul, (-0.0, 2.0), "rne", -0.0),
        (mul, (-INF, -2.0), "rne", INF),
        (mul, (-(2.0**-20), 2.0**-20), "rne", -0.0),  # underflow keeps the sign
        (div, (1.0, 0.0), "rne", INF),
        (div, (-1.0, 0.0), "rne", -INF),
        (div, (1.0, -0.0), "rne", -INF),
        (div, (0.0, 0.0), "rne", math.nan),
        (div, (INF, INF), "rne", math.nan),
        (div, (-1.0, INF), "rne", -0.0),
        (div, (1.0, 0.0), "rtz", INF),  # an exact infinity: no rounding toward zero
        (add, (1.0, -1.0), "rne", 0.0),
        (add, (1.0, -1.0), "rtz", 0.0),
        (add, (1.0, -1.0), "rup", 0.0),
        (add, (1.0, -1.0), "rdown", -0.0),
        (sub, (1.5, 1.5), "rdown", -0.0),
        (add, (-0.0, -0.0), "rne", -0.0),
        (add, (-0.0, 0.0), "rne", 0.0),
        (add, (-0.0, 0.0), "rdown", -0.0),
        (add, (0.0, 0.0), "rdown", 0.0),
        (sub, (-0.0, 0.0), "rne", -0.0),
        (sub, (0.0, 0.0), "rne", 0.0),
        (add, (-(2.0**-24), 2.0**-25), "rne", -0.0),  # nonzero exact sum rounds to -0
        (add, (1.0, 2.0**-11), "rne", 1.0),
        (add, (1.0, 2.0**-11), "rto", 1 + 2.0**-10),
        (add, (1.0, 2.0**-20), "rup", 1 + 2.0**-10),
        (add, (-1.0, -(2.0**-20)), "rdown", -(1 + 2.0**-10)),
        (add, (65504.0, 16.0), "rne", INF),  # 65520: tie, odd significand -> up, overflow
        (add, (65504.0, 15.0), "rne", 65504.0),
        (mul, (256.0, 256.0), "rup", INF),
        (mul, (256.0, 256.0), "rne", INF),
        (mul, (256.0, -256.0), "rup", -65504.0),
        (div, (1.0, 3.0), "rne", 1365 / 4096),
        (div, (1.0, 3.0), "rup", 1366 / 4096),
        (div, (2.0, 3.0), "rne", 1365 / 2048),  # 2/3 = 1365.33 quanta of 2**-11
        (fma, (0.0, INF, 1.0), "rne", math.nan),
        (fma, (INF, 1.0, -INF), "rne", math.nan),
        (fma, (0.0, 5.0, -0.0), "rne", 0.0),
        (fma, (-0.0, 5.0, -0.0), "rne", -0.0),
        (fma, (-0.0, 5.0, 0.0), "rdown", -0.0),
        (fma, (2.0, 3.0, -6.0), "rne", 0.0),
        (fma, (2.0, 3.0, -6.0), "rdown", -0.0),
        (fma, (1 + 2.0**-10, 1 + 2.0**-10, -1.0), "rne", 2.0**-9),  # tie (quantum 2**-19)
        (fma, (1 + 2.0**-10, 1 + 2.0**-10, -1.0), "rup", 2.0**-9 + 2.0**-19),
        (fma, (1 + 2.0**-10, 1 + 2.0**-9, -1.0), "rne", 3 * 2.0**-10 + 2.0**-19),
        (fma, (1 + 2.0**-10, 1 + 2.0**-10, 0.0), "rne", 1 + 2.0**-9),  # separate mul+add loses
        (fma, (1 + 2.0**-10, 1 - 2.0**-10, -1.0), "rne", -(2.0**-20)),
    ],
)
def test_arith_special_cases_fp16(
    fn: object, args: tuple[float, ...], mode: str, expected: float
) -> None:
    assert callable(fn)
    assert same(fn(*args, FLOAT16, mode), expected)


def test_arith_formats_without_inf_or_nan() -> None:
    assert math.isnan(div(1.0, 0.0, E4M3FN))
    assert math.isnan(div(1.0, 0.0, E4M3FNUZ))
    assert div(1.0, 0.0, E2M1FN) == 6.0
    assert div(-1.0, 0.0, E2M1FN) == -6.0
    assert div(1.0, 0.0, E4M3FN, overflow="saturate") == 448.0
    assert math.isnan(mul(256.0, 2.0, E4M3FN))
    assert mul(256.0, 2.0, E4M3FN, "rtz") == 448.0
    assert mul(4.0, 4.0, E2M1FN) == 6.0
    assert same(mul(-0.0, 1.0, E4M3FNUZ), 0.0)
    assert same(add(1.0, -1.0, E4M3FNUZ, "rdown"), 0.0)
    assert same(mul(-(2.0**-9), 2.0**-9, E4M3FN), -0.0)
    with pytest.raises(ValueError, match="has no infinity"):
        add(INF, 1.0, E4M3FN)
    with pytest.raises(ValueError, match="has no NaN"):
        add(math.nan, 1.0, E2M1FN)
    with pytest.raises(ValueError, match="no NaN"):
        div(0.0, 0.0, E2M1FN)
    assert math.isnan(add(math.nan, 1.0, E4M3FN))
    # sub-normals off: the exact product rounds as if subnormals existed, then flushes
    assert mul(2.0**-4, 2.0**-4, E4M3FN) == 2.0**-8  # a subnormal of e4m3fn
    assert same(mul(2.0**-4, 2.0**-4, E4M3FN, subnormals=False), 0.0)
    assert same(mul(-(2.0**-4), 2.0**-4, E4M3FN, subnormals=False), -0.0)
    assert mul(2.0**-3, 2.0**-3, E4M3FN, subnormals=False) == 2.0**-6  # tiny itself stays
    # 0.9375 * 2**-6 = 7.5 quanta of 2**-9: up to 2**-6 (normal, kept) or down to 7 (flushed)
    assert mul(0.9375, 2.0**-6, E4M3FN, "rup", subnormals=False) == 2.0**-6
    assert same(mul(0.9375, 2.0**-6, E4M3FN, "rtz", subnormals=False), 0.0)


# -- dot products ----------------------------------------------------------------------------
def test_dot_hand_facts() -> None:
    h = 2.0**-11  # half an ulp of 1 in fp16
    assert exact_dot([1.0, h, h], [1.0, 1.0, 1.0]) == 1 + Fraction(2, 2**11)
    assert exact_dot([0.1], [3.0], 1.0) == Fraction(0.1) * 3 + 1
    assert exact_dot([], []) == 0
    # sequential: each 1 + 2**-11 ties back to 1
    assert sequential_dot([1.0, h, h], [1.0] * 3, 0.0, FLOAT16, FLOAT32) == 1.0
    assert sequential_dot([h, h, 1.0], [1.0] * 3, 0.0, FLOAT16, FLOAT32) == 1 + 2 * h
    assert sequential_dot([h, h], [1.0] * 2, 1.0, FLOAT16, FLOAT32) == 1.0
    assert sequential_dot([h, h], [1.0] * 2, 1.0, FLOAT16, FLOAT32, "rup") == 1 + 4 * h
    # pairwise splits at h = n // 2: [h] | [h, 1] -> h + round(h + 1) = h + 1 -> 1
    assert pairwise_dot([h, h, 1.0], [1.0] * 3, 0.0, FLOAT16, FLOAT32) == 1.0
    assert pairwise_dot([1.0, h, h], [1.0] * 3, 0.0, FLOAT16, FLOAT32) == 1 + 2 * h
    # ... and adds c after the tree: round(1 + round(h + h))
    assert pairwise_dot([h, h], [1.0] * 2, 1.0, FLOAT16, FLOAT32) == 1 + 2 * h
    # products are rounded to acc first: (1 + 2**-10)**2 = 1 + 2**-9 + 2**-20 -> 1 + 2**-9
    assert pairwise_dot([1 + 2 * h], [1 + 2 * h], 0.0, FLOAT16, FLOAT32) == 1 + 4 * h
    assert sequential_dot([1 + 2 * h], [1 + 2 * h], 0.0, FLOAT16, FLOAT32) == 1 + 4 * h
    # sequential is an FMA: (1 + 2**-12)**2 - 1 = 2**-11 + 2**-24 exactly in float32, while
    # pairwise first rounds the product to 1 + 2**-11 (2**-24 is a tie at 1 in float32)
    x = 1 + 2.0**-12
    assert sequential_dot([x], [x], -1.0, FLOAT32, FLOAT32) == 2.0**-11 + 2.0**-24
    assert pairwise_dot([x], [x], -1.0, FLOAT32, FLOAT32) == 2.0**-11
    assert blocked_dot([x], [x], -1.0, 1, FLOAT32, FLOAT32) == 2.0**-11
    assert pairwise_sum([1.0, h, h, h], FLOAT16) == 1 + 2 * h
    assert pairwise_sum([1 + h], FLOAT16) == 1.0  # terms are rounded to acc first
    assert pairwise_sum([], FLOAT16) == 0.0
    # blocked: chunks from +0, chunk sums added in order into c
    assert blocked_dot([h, h], [1.0] * 2, 1.0, 2, FLOAT16, FLOAT32) == 1 + 2 * h
    assert blocked_dot([h, h], [1.0] * 2, 1.0, 1, FLOAT16, FLOAT32) == 1.0
    a = [1.0, 1.0, 2 * h, 2 * h]
    assert blocked_dot(a, [1.0] * 4, 0.0, 2, FLOAT16, FLOAT32) == 2 + 4 * h
    assert blocked_dot(a, [1.0] * 4, 0.0, 3, FLOAT16, FLOAT32) == 2.0
    # the final rounding to out
    assert sequential_dot([1.0, h], [1.0, 1.0], 0.0, FLOAT32, FLOAT16) == 1.0
    assert sequential_dot([1.0, h], [1.0, 1.0], 0.0, FLOAT32, FLOAT16, "rup") == 1 + 2 * h
    # K == 0 gives round_out(c)
    for model in (sequential_dot, pairwise_dot):
        assert model([], [], 3.3, FLOAT16, E4M3FN) == 3.25
        assert same(model([], [], -0.0, FLOAT16, FLOAT16), -0.0)
    assert blocked_dot([], [], 3.3, 4, FLOAT16, E4M3FN) == 3.25


def test_dot_specials_and_overflow() -> None:
    assert sequential_dot([INF, 1.0], [1.0, 1.0], 0.0, FLOAT32, FLOAT32) == INF
    assert math.isnan(sequential_dot([INF, -INF], [1.0, 1.0], 0.0, FLOAT32, FLOAT32))
    assert math.isnan(pairwise_dot([0.0, 1.0], [INF, 1.0], 0.0, FLOAT32, FLOAT32))
    assert math.isnan(sequential_dot([256.0, 256.0], [1.0, 1.0], 0.0, E4M3FN, E4M3FN))
    assert sequential_dot([256.0, 256.0], [1.0, 1.0], 0.0, E4M3FN, E4M3FN, "rtz") == 448.0
    assert sequential_dot([256.0, 256.0], [1.0, 1.0], 0.0, FLOAT32, E4M3FN, "rtz") == 448.0
    assert sequential_dot([256.0, 256.0], [1.0, 1.0], 0.0, FLOAT32, E2M1FN) == 6.0
    assert sequential_dot([4.0, 4.0], [-1.0, 1.0], 0.0, FLOAT16, FLOAT16, "rdown") == 0.0
    assert same(sequential_dot([4.0, 4.0], [-1.0, 1.0], 0.0, FLOAT16, FLOAT16, "rdown"), -0.0)
    assert same(sequential_dot([-0.0], [1.0], -0.0, FLOAT16, FLOAT16), -0.0)
    assert same(sequential_dot([-0.0], [1.0], None, FLOAT16, FLOAT16), 0.0)  # None is +0
    with pytest.raises(ValueError, match="same length"):
        sequential_dot([1.0], [], 0.0, FLOAT16, FLOAT16)
    with pytest.raises(ValueError, match="block=0"):
        blocked_dot([1.0], [1.0], 0.0, 0, FLOAT16, FLOAT16)
    with pytest.raises(TypeError, match="block must be an int"):
        blocked_dot([1.0], [1.0], 0.0, 1.5, FLOAT16, FLOAT16)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="stochastic"):
        pairwise_dot([1.0], [1.0], 0.0, FLOAT16, FLOAT16, "stochastic")
    with pytest.raises(ValueError, match="not finite"):
        exact_dot([INF], [1.0])


def _fp16_pair(rng: random.Random, k: int) -> tuple[list[float], list[float]]:
    def one() -> float:
        return float(np.float16(rng.gauss(0, 1) * 2.0 ** rng.randrange(-6, 6)))

    return [one() for _ in range(k)], [one() for _ in range(k)]


def _py_tree(t: list[float], add2: object) -> float:
    assert callable(add2)
    if len(t) == 1:
        return t[0]
    h = len(t) // 2
    return float(add2(_py_tree(t[:h], add2), _py_tree(t[h:], add2)))


def test_dots_vs_float_loops() -> None:
    # fp16 inputs: every product is exact in float32 and float64, so one float add per step is
    # exactly "one rounding per step" in Python floats (acc float64) and numpy float32.
    rng = random.Random(12)
    for k in (1, 2, 3, 7, 16, 33):
        a, b = _fp16_pair(rng, k)
        c = float(np.float16(rng.gauss(0, 4)))
        prods = [x * y for x, y in zip(a, b, strict=True)]
        # sequential
        s64 = c
        s32 = np.float32(c)
        for p in prods:
            s64 = s64 + p
            s32 = np.float32(s32 + np.float32(p))
        assert same(sequential_dot(a, b, c, FLOAT64, FLOAT64), s64)
        assert same(sequential_dot(a, b, c, FLOAT32, FLOAT32), float(s32))
        assert same(sequential_dot(a, b, c, FLOAT32, FLOAT16), float(np.float16(s32)))
        # pairwise
        t64 = _py_tree(prods, lambda x, y: x + y)
        assert same(pairwise_dot(a, b, c, FLOAT64, FLOAT64), c + t64)
        t32 = _py_tree([float(np.float32(p)) for p in prods], lambda x, y: np.float32(x) + y)
        assert same(pairwise_dot(a, b, c, FLOAT32, FLOAT32), float(np.float32(c) + t32))
        # blocked
        for block in (1, 4, 5, 64):
            s = c
            for j in range(0, k, block):
                part = 0.0
                for p in prods[j : j + block]:
                    part = part + p
                s = s + part
            assert same(blocked_dot(a, b, c, block, FLOAT64, FLOAT64), s)
        # float16 accumulator: each exact step sum is a float64 here (checked), so np.float16
        # of it is the one rounding; pairwise adds two float16 values (numpy rounds correctly)
        s16 = c
        for p in prods:
            assert Fraction(s16 + p) == Fraction(s16) + Fraction(p)
            s16 = float(np.float16(s16 + p))
        assert same(sequential_dot(a, b, c, FLOAT16, FLOAT32), s16)
        t16 = _py_tree([float(np.float16(p)) for p in prods], lambda x, y: np.float16(x) + y)
        assert same(pairwise_dot(a, b, c, FLOAT16, FLOAT32), float(np.float16(c) + t16))
        # exact
        assert exact_dot(a, b, c) == sum((Fraction(p) for p in prods), Fraction(c))
        assert math.fsum([*prods, c]) == float(exact_dot(a, b, c))


# -- arithmetic on whole small formats vs numpy float32 + ml_dtypes -------------------------
# The exact sum/product of two values of these formats is a float32; float32 division and
# sqrt are correctly rounded with 24 >= 2p + 2 bits, so rounding them once more (ml_dtypes,
# nearest-even from float32) is an independent correctly rounded result.
def _pairs_check(spec: Spec, dtype: type, pairs: list[tuple[int, int]]) -> None:
    vals = [decode(c, spec) for c in range(2**spec.bits)]
    xs = np.array([vals[i] for i, _ in pairs], np.float32)
    ys = np.array([vals[j] for _, j in pairs], np.float32)
    with np.errstate(all="ignore"):
        theirs = {
            add: (xs + ys).astype(dtype).astype(np.float64),
            sub: (xs - ys).astype(dtype).astype(np.float64),
            mul: (xs * ys).astype(dtype).astype(np.float64),
            div: (xs / ys).astype(dtype).astype(np.float64),
        }
    for fn, expected in theirs.items():
        for n, (i, j) in enumerate(pairs):
            x, y = vals[i], vals[j]
            if not spec.has_nan and fn is div and x == 0 and y == 0:
                with pytest.raises(ValueError, match="no NaN"):
                    fn(x, y, spec)
                continue
            assert same(fn(x, y, spec), float(expected[n])), (fn.__name__, x, y)
    with np.errstate(all="ignore"):
        roots = np.sqrt(np.array(vals, np.float32)).astype(dtype).astype(np.float64)
    for v, r in zip(vals, roots, strict=True):
        if v < 0 and not spec.has_nan:
            with pytest.raises(ValueError, match="no NaN"):
                sqrt(v, spec)
        else:
            assert same(sqrt(v, spec), float(r)), v


@pytest.mark.parametrize(("spec", "dtype"), ML_DTYPES[5:])
def test_arith_all_pairs_fp6_fp4_vs_ml_dtypes(spec: Spec, dtype: type) -> None:
    n = 2**spec.bits
    _pairs_check(spec, dtype, [(i, j) for i in range(n) for j in range(n)])


@pytest.mark.parametrize(("spec", "dtype"), ML_DTYPES[:5])
def test_arith_sampled_pairs_fp8_vs_ml_dtypes(spec: Spec, dtype: type) -> None:
    rng = random.Random(13)
    _pairs_check(spec, dtype, [(rng.randrange(256), rng.randrange(256)) for _ in range(800)])


@pytest.mark.slow
@pytest.mark.parametrize(("spec", "dtype"), ML_DTYPES[:5])
def test_arith_all_pairs_fp8_vs_ml_dtypes(spec: Spec, dtype: type) -> None:
    _pairs_check(spec, dtype, [(i, j) for i in range(256) for j in range(256)])


def test_spec_matches_fpemu_format_fields() -> None:
    # Spec is built from a Format's fields only; its derived constants are the oracle's own.
    from fpemu.formats import FORMATS  # noqa: PLC0415 (only this test depends on fpemu)

    named = {
        "float64": FLOAT64,
        "float32": FLOAT32,
        "float16": FLOAT16,
        "bfloat16": BFLOAT16,
        "float8_e4m3fn": E4M3FN,
        "float8_e5m2": E5M2,
        "float8_e4m3fnuz": E4M3FNUZ,
        "float8_e5m2fnuz": E5M2FNUZ,
        "float8_e4m3": E4M3,
        "float6_e3m2fn": E3M2FN,
        "float6_e2m3fn": E2M3FN,
        "float4_e2m1fn": E2M1FN,
    }
    for name, spec in named.items():
        fmt = FORMATS[name]
        assert Spec.from_fields(fmt) == spec, name
        assert float(spec.max) == fmt.max and float(spec.tiny) == fmt.tiny, name


@pytest.mark.parametrize(
    "spec",
    [
        *SMALL_SPECS,
        Spec(4, 0, 7, "fn"),
        Spec(3, 0, 3, "ieee"),
        Spec(2, 2, 0, "fnuz"),
        Spec(3, 3, -2, "finite"),
        Spec(1, 3, 0, "fn"),
        Spec(5, 2, 20, "ieee", subnormals=False),
    ],
)
def test_spec_max_tiny_vs_enumerated_codes(spec: Spec) -> None:
    finite = [decode(c, spec) for c in range(2**spec.bits)]
    finite = [v for v in finite if math.isfinite(v)]
    assert max(finite) == spec.max
    assert min(v for v in finite if v > 0) == 2.0 ** (spec.emin - spec.mbits)
    assert round_float(float(spec.max), spec, "rne") == spec.max
    assert next_down(float(spec.max), spec) < spec.max


# -- rounding vs a brute-force search over every value of a small format ---------------------
@functools.cache
def _positive_grid(spec: Spec) -> tuple[list[Fraction], dict[Fraction, int]]:
    """Nonnegative finite values plus the point above max, and each one's code parity."""
    codes = {decode(c, spec): c for c in range(2 ** (spec.bits - 1))}  # sign bit clear
    vals = sorted(v for v in codes if math.isfinite(v))
    maxv, top = vals[-1], 2 * vals[-1] - vals[-2]
    parity = {Fraction(v): codes[v] % 2 for v in vals} | {Fraction(top): (codes[maxv] + 1) % 2}
    return sorted(parity), parity


def _brute_round(
    x: Fraction, spec: Spec, mode: str, overflow: str, u: Fraction, flush: bool
) -> float:
    """Round by enumeration: nearest codes found by search, "even" read off the code's last bit.

    The grid point above max (where an unbounded exponent would continue) is max plus the last
    gap; its parity is that of (code of max) + 1.
    """
    grid, parity = _positive_grid(spec)
    maxv, top = grid[-2], grid[-1]
    neg, a = x < 0, abs(x)
    if a >= top:
        lo = hi = top
    else:
        i = bisect.bisect_left(grid, a)
        hi = grid[i]
        lo = hi if hi == a else grid[i - 1]
    if lo == hi:
        up = False
    elif mode in ("rne", "rna"):
        d = (a - lo) - (hi - a)
        up = d > 0 or (d == 0 and (mode == "rna" or parity[lo] == 1))
    elif mode == "rto":
        up = parity[lo] == 0
    elif mode == "stochastic":
        up = u < (a - lo) / (hi - lo)
    else:
        up = {"rtz": False, "rup": not neg, "rdown": neg}[mode]
    r = hi if up else lo
    if r > maxv:
        away = {"rne": True, "rna": True, "rtz": False, "rto": False, "stochastic": up}
        away |= {"rup": not neg, "rdown": neg}
        if not away[mode] or overflow == "saturate":
            return float(-maxv if neg else maxv)
        return (-INF if neg else INF) if overflow == "inf" else math.nan
    if flush and 0 < r < Fraction(2) ** spec.emin:
        r = Fraction(0)
    zero_sign = -1.0 if neg and spec.has_negative_zero else 1.0
    return float(-r if neg else r) if r else 0.0 * zero_sign


@pytest.mark.parametrize("spec", SMALL_SPECS)
def test_round_vs_brute_force(spec: Spec) -> None:
    rng = random.Random(14)
    vals = sorted(v for v in (decode(c, spec) for c in range(2**spec.bits)) if math.isfinite(v))
    mids = [(Fraction(p) + Fraction(q)) / 2 for p, q in itertools.pairwise(vals)]
    top = 2 * Fraction(vals[-1]) - Fraction(vals[-2])
    xs: list[Fraction] = [Fraction(v) for v in vals] + mids
    xs += [top, top + 1, (Fraction(vals[-1]) + top) / 2, 3 * top]
    for _ in range(300):
        lo, hi = Fraction(rng.choice(vals)), Fraction(rng.choice(vals))
        xs.append(lo + (hi - lo) * Fraction(rng.getrandbits(12), 4096))
        xs.append(Fraction(rng.getrandbits(20), 2**20) * Fraction(2) ** spec.emin)
    overflows = [o for o in ("inf", "nan", "saturate") if o != "inf" or spec.has_inf]
    overflows = [o for o in overflows if o != "nan" or spec.has_nan]
    for x in xs:
        for mode in ("rne", "rna", "rtz", "rup", "rdown", "rto", "stochastic"):
            if mode == "stochastic" and abs(x) >= top:
                continue
            u = Fraction(rng.getrandbits(8), 256)
            kw = {"u": u} if mode == "stochastic" else {}
            ov = rng.choice(overflows)
            flush = rng.random() < 0.3
            got = to_float(round_value(x, spec, mode, overflow=ov, subnormals=not flush, **kw))
            assert same(got, _brute_round(x, spec, mode, ov, u, flush)), (x, mode, ov, flush)
