"""fpemu.round against the exact oracle: exhaustive on small formats, Hypothesis elsewhere."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fpemu
import reference
from fpemu.formats import FORMATS
from fpemu.rounding import BLOCK
from tests.conftest import DET_MODES, SMALL_FORMATS, TINY_FORMATS, spec_of
from tests.oracle import assert_same_bits, oracle_round, probe_points

ALL_MODES = [*DET_MODES, "stochastic"]
WIDE = fpemu.Format("e9m5", ebits=9, mbits=5, bias=255)  # range beyond float32
NAMES = list(FORMATS)


def _valid_input(x: np.ndarray, fmt: str) -> np.ndarray:
    return x if FORMATS[fmt].has_nan else x[~np.isnan(x)]


# -- exhaustive: every value, midpoint and their float64 neighbours -------------------------------
@pytest.mark.parametrize("mode", DET_MODES)
@pytest.mark.parametrize("fmt", TINY_FORMATS)
def test_every_value_and_midpoint_of_8bit_formats(fmt: str, mode: str) -> None:
    x = _valid_input(probe_points(fmt), fmt)
    assert_same_bits(fpemu.round(x, fmt, mode=mode), oracle_round(x, fmt, mode), x)


def _encodable_overflows() -> list[tuple[str, str]]:
    return [
        (fmt, ovf)
        for fmt in TINY_FORMATS
        for ovf in ("inf", "nan", "saturate")
        if (ovf != "inf" or FORMATS[fmt].has_inf) and (ovf != "nan" or FORMATS[fmt].has_nan)
    ]


@pytest.mark.parametrize(("fmt", "overflow"), _encodable_overflows())
def test_overflow_options_and_flush(fmt: str, overflow: str) -> None:
    x = _valid_input(probe_points(fmt), fmt)
    for mode in ("rne", "rup", "rtz"):
        kw = {"overflow": overflow, "subnormals": False}
        assert_same_bits(fpemu.round(x, fmt, mode=mode, **kw), oracle_round(x, fmt, mode, **kw), x)


@pytest.mark.parametrize("mode", DET_MODES)
@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_strided_values_and_midpoints_of_16bit_formats(fmt: str, mode: str) -> None:
    x = probe_points(fmt, stride=97)  # the full sweep is test_exhaustive_16bit (slow)
    assert_same_bits(fpemu.round(x, fmt, mode=mode), oracle_round(x, fmt, mode), x)


@pytest.mark.slow
@pytest.mark.parametrize("mode", DET_MODES)
@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_exhaustive_16bit(fmt: str, mode: str) -> None:
    x = probe_points(fmt)
    assert_same_bits(fpemu.round(x, fmt, mode=mode), oracle_round(x, fmt, mode), x)


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_float32_input_every_midpoint(fmt: str) -> None:
    x = _valid_input(probe_points(fmt, stride=7 if FORMATS[fmt].bits > 8 else 1), fmt)
    with np.errstate(over="ignore"):
        x32 = x.astype(
            np.float32
        )  # midpoints of <= 16-bit formats are float32-exact, neighbours not
    got = fpemu.round(x32, fmt)
    assert got.dtype == np.float32
    assert_same_bits(got.astype(np.float64), oracle_round(x32.astype(np.float64), fmt, "rne"), x32)


# -- Hypothesis over float64 and float32 inputs of every magnitude ---------------------------------
def _in_range(fmt: str) -> st.SearchStrategy[float]:
    f = FORMATS[fmt]
    lo, hi = max(f.emin - f.mbits - 4, -1074), min(f.emax + 3, 1023)
    return st.builds(
        lambda e, m, s: s * float(np.ldexp(1.0 + m / 2.0**52, e)),
        st.integers(lo, hi), st.integers(0, 2**52 - 1), st.sampled_from([1.0, -1.0]),
    )  # fmt: skip


@st.composite
def _case(draw: st.DrawFn, width: int = 64) -> tuple[str, str, float]:
    fmt = draw(st.sampled_from([n for n in NAMES if width == 64 or n not in ("float64",)]))
    mode = draw(st.sampled_from(DET_MODES))
    x = draw(st.one_of(_in_range(fmt), st.floats(width=64, allow_nan=FORMATS[fmt].has_nan)))
    if width == 32:
        with np.errstate(over="ignore"):
            x = float(np.float32(x))
    return fmt, mode, x


@given(_case())
def test_hypothesis_float64_inputs(case: tuple[str, str, float]) -> None:
    fmt, mode, x = case
    assert_same_bits(fpemu.round(np.array([x]), fmt, mode=mode), oracle_round([x], fmt, mode), [x])


@given(_case(width=32))
def test_hypothesis_float32_inputs(case: tuple[str, str, float]) -> None:
    fmt, mode, x = case
    x32 = np.array([x], dtype=np.float32)
    got = fpemu.round(x32, fmt, mode=mode).astype(np.float64)
    assert_same_bits(got, oracle_round(x32.astype(np.float64), fmt, mode), x32)


# -- properties ---------------------------------------------------------------------------------
@given(
    st.sampled_from(NAMES), st.sampled_from(ALL_MODES), st.lists(st.floats(-1e6, 1e6), min_size=2)
)
def test_properties(fmt: str, mode: str, xs: list[float]) -> None:
    x = np.sort(np.array(xs))
    kw = {"rng": np.random.default_rng(0)} if mode == "stochastic" else {}
    ovf = "saturate"  # keep results finite so that order comparisons are meaningful
    r = fpemu.round(x, fmt, mode=mode, overflow=ovf, **kw)
    again = fpemu.round(
        r, fmt, mode=mode, overflow=ovf, **({"rng": np.random.default_rng(1)} if kw else {})
    )
    assert_same_bits(again, r)  # idempotent
    down = fpemu.round(x, fmt, mode="rdown", overflow=ovf)
    up = fpemu.round(x, fmt, mode="rup", overflow=ovf)
    inside = np.abs(x) <= FORMATS[fmt].max
    assert np.all((down <= x)[inside]) and np.all((x <= up)[inside])  # brackets the input
    assert np.all((r == down) | (r == up))  # one of the two neighbours
    if mode != "stochastic":
        assert np.all(np.diff(r) >= 0)  # monotone
    if mode in ("rne", "rna", "rtz", "rto"):
        assert np.array_equal(fpemu.round(-x, fmt, mode=mode, overflow=ovf), -r)  # sign-symmetric
    assert np.array_equal(fpemu.round(-x, fmt, mode="rup", overflow=ovf), -down)


# -- stochastic rounding --------------------------------------------------------------------------
def test_stochastic_matches_oracle_draw_for_draw_across_blocks() -> None:
    rng = np.random.default_rng(7)
    x = rng.uniform(-4, 4, BLOCK + 1000)
    got = fpemu.round(x, "bf16", mode="stochastic", rng=np.random.default_rng(42))
    u = np.random.default_rng(42).random(x.size)  # documented: one double per element, C order
    spec = spec_of("bf16")
    want = [reference.round_float(float(a), spec, "stochastic", u=Fraction(float(b)))
            for a, b in zip(x, u, strict=True)]  # fmt: skip
    assert_same_bits(got, want, x)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_stochastic_is_unbiased(fmt: str) -> None:
    f = FORMATS[fmt]
    n = 200_000
    for frac in (0.1, 0.3, 0.5, 0.77):
        x = 1.0 + frac * f.eps
        r = fpemu.round(np.full(n, x), fmt, mode="stochastic", rng=np.random.default_rng(3))
        assert set(np.unique(r)) <= {1.0, 1.0 + f.eps}
        sigma = f.eps * np.sqrt(frac * (1 - frac) / n)
        assert abs(r.mean() - x) < 5 * sigma, (frac, r.mean() - x, sigma)


def test_stochastic_is_reproducible() -> None:
    x = np.linspace(-3, 3, 1001)
    a = fpemu.round(x, "e4m3", mode="stochastic", rng=np.random.default_rng(5))
    b = fpemu.round(x, "e4m3", mode="stochastic", rng=np.random.default_rng(5))
    assert_same_bits(a, b)


# -- named edge cases (expected values worked out by hand) -----------------------------------------
@pytest.mark.parametrize(
    ("x", "fmt", "mode", "want"),
    [
        (1 + 2**-11, "fp16", "rne", 1.0),  # tie, 1.0 is even
        (1 + 3 * 2**-11, "fp16", "rne", 1 + 2**-9),  # tie, rounds up to even
        (1 + 2**-11, "fp16", "rna", 1 + 2**-10),
        (65519.99, "fp16", "rne", 65504.0),
        (65520.0, "fp16", "rne", np.inf),  # half an ulp above max: overflow
        (70000.0, "fp16", "rtz", 65504.0),
        (-70000.0, "fp16", "rup", -65504.0),
        (-70000.0, "fp16", "rdown", -np.inf),
        (2**-25, "fp16", "rne", 0.0),  # half the smallest subnormal: tie to zero
        (-(2**-25), "fp16", "rne", -0.0),
        (3 * 2**-26, "fp16", "rne", 2**-24),
        (1 + 2**-8 + 2**-40, "bf16", "rne", 1.0078125),  # ml_dtypes double-rounds this to 1.0
        (-431.99999999999994, "e4m3", "rne", -416.0),  # ml_dtypes gives -448
        (464.0, "e4m3", "rne", 448.0),
        (480.0, "e4m3", "rne", np.nan),
        (1e9, "e4m3", "rtz", 448.0),
        (-(2**-12), "e4m3fnuz", "rne", 0.0),  # no negative zero in fnuz
        (100.0, "fp4", "rne", 6.0),  # finite formats saturate
        (1.25, "fp4", "rto", 1.5),  # between 1.0 and 1.5: odd significand 11
        (0.1, "tf32", "rne", 0.0999755859375),
    ],
)
def test_hand_worked_cases(x: float, fmt: str, mode: str, want: float) -> None:
    got = fpemu.round(np.array([x]), fmt, mode=mode)
    assert_same_bits(got, [want], [x])
    assert_same_bits(oracle_round([x], fmt, mode), [want], [x])  # the oracle agrees by hand too


def test_dtype_shape_and_scalars() -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
    r = fpemu.round(x, "bf16")
    assert r.dtype == np.float32 and r.shape == (3, 4)
    assert isinstance(fpemu.round(0.1, "fp16"), np.float64)
    assert fpemu.round(np.asfortranarray(x.T), "bf16").shape == (4, 3)
    assert fpemu.round(np.zeros((0, 3)), "fp16").shape == (0, 3)


# -- bad input ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("call", "exc", "match"),
    [
        # integers, bools and float16 are accepted now: tests/test_inputs.py
        (lambda: fpemu.round(np.ones(2, complex), "fp16"), TypeError, "dtype complex128"),
        (lambda: fpemu.round(1.0, "fp7"), ValueError, "unknown format fmt='fp7'"),
        (
            lambda: fpemu.round(1.0, "fp16", mode="nearest_odd"),
            ValueError,
            "mode='nearest_odd'.*rne",
        ),
        (lambda: fpemu.round(1.0, "e4m3", overflow="inf"), ValueError, "has no infinity"),
        (lambda: fpemu.round(1.0, "fp4", overflow="nan"), ValueError, "has no NaN"),
        (lambda: fpemu.round(1.0, "fp16", overflow="wrap"), ValueError, "overflow='wrap'"),
        (lambda: fpemu.round(np.nan, "fp4"), ValueError, "NaN.*float4_e2m1fn"),
        (lambda: fpemu.round(1.0, "fp16", mode="stochastic"), ValueError, "needs rng="),
        (lambda: fpemu.round(1.0, "fp16", rng=np.random.default_rng()), ValueError, "only used"),
        (lambda: fpemu.round(np.ones(1, np.float32), WIDE), ValueError, "pass x as float64"),
        (lambda: fpemu.round(1.0, "fp16", subnormals=1), TypeError, "subnormals must be a bool"),
    ],
)
def test_bad_input_is_refused(call, exc: type, match: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(exc, match=match):
        call()


def test_stochastic_overflow_matches_oracle_draw_for_draw() -> None:
    x = np.repeat([65519.0, 65600.0, 70000.0, -70000.0, 131072.0, 1e6], 50)
    got = fpemu.round(x, "fp16", mode="stochastic", rng=np.random.default_rng(9))
    u = np.random.default_rng(9).random(x.size)
    spec = spec_of("fp16")
    want = [reference.round_float(float(a), spec, "stochastic", u=Fraction(float(b)))
            for a, b in zip(x, u, strict=True)]  # fmt: skip
    assert_same_bits(got, want, x)
    assert np.isinf(got).any() and (np.abs(got) == 65504).any()  # both outcomes occur


@st.composite
def _custom_format(draw: st.DrawFn) -> fpemu.Format:
    specials = draw(st.sampled_from(["ieee", "fn", "fnuz", "finite"]))
    ebits = draw(st.integers(2, 8))
    mbits = draw(st.integers(1 if specials == "ieee" else 0, 12))  # ieee NaN needs a fraction
    bias = draw(st.integers(-3, 2 ** (ebits - 1) + 3))
    return fpemu.Format("custom", ebits, mbits, bias, specials, draw(st.booleans()))


@given(_custom_format(), st.sampled_from(DET_MODES), st.floats(allow_nan=False), st.booleans())
def test_hypothesis_custom_formats(f: fpemu.Format, mode: str, x: float, scaled: bool) -> None:
    if scaled:  # bring x near the format's range
        x = float(
            np.ldexp(np.frexp(x)[0], int(np.clip(np.frexp(x)[1], f.emin - f.mbits - 2, f.emax + 2)))
        )
    got = fpemu.round(np.array([x]), f, mode=mode)
    assert_same_bits(got, oracle_round([x], f, mode), [x])


def test_overflow_to_nan_in_a_format_with_a_tiny_max() -> None:
    # max = 2**-2 * 1.0: the mask-free NaN factor would exceed float64, so the masked path runs
    f = fpemu.Format("tiny_fn", ebits=2, mbits=0, bias=3, specials="fn")
    x = np.array([0.0, 0.1, f.max, 1.0, -1.0])
    assert_same_bits(fpemu.round(x, f), oracle_round(x, f, "rne"), x)
