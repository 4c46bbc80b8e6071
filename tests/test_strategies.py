"""fpemu.testing.strategies: only representable values, options honoured, bad arguments refused, and
(the point of the module) planted bugs in rounding and arithmetic are found within Hypothesis'
default budget of 100 examples."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import fpemu
import reference
from fpemu.formats import FORMATS, Format, get_format
from fpemu.testing import strategies as fst
from tests.conftest import spec_of
from tests.oracle import oracle_values

NAMES = list(FORMATS)
FIND = settings(database=None, derandomize=True, max_examples=2000)  # deterministic find()


def is_representable(x: float, fmt: Format) -> bool:
    """Independent membership test from the format's defining fields only (Fractions, no fpemu)."""
    if math.isnan(x):
        return fmt.has_nan
    if math.isinf(x):
        return fmt.has_inf
    if x == 0:
        return fmt.has_negative_zero or math.copysign(1.0, x) > 0
    v = abs(Fraction(x))
    emin, emax = 1 - fmt.bias, (2**fmt.ebits - 1 - fmt.bias) - (fmt.specials == "ieee")
    e = v.numerator.bit_length() - v.denominator.bit_length()  # floor(log2 v), maybe one high
    e -= v < Fraction(2) ** e
    if e > emax or (e < emin and not fmt.subnormals):
        return False
    significand = v / Fraction(2) ** (max(e, emin) - fmt.mbits)  # must be an integer
    top = 2 ** (fmt.mbits + 1) - 1 - (fmt.specials == "fn" and e == emax)
    return significand.denominator == 1 and significand <= top


def assert_round_trips(x: float, fmt: Format) -> None:
    with np.errstate(over="ignore"):  # fpemu.encode warns (harmlessly) on float64: reported
        back = float(fpemu.decode(fpemu.encode(x, fmt), fmt))
    assert (math.isnan(x) and math.isnan(back)) or (
        back == x and math.copysign(1, back) == math.copysign(1, x)
    ), (x, back)


# -- values: every draw is a value of the format ------------------------------------------------
CUSTOM = [
    Format("e4m3_flush", ebits=4, mbits=3, bias=7, specials="fn", subnormals=False),
    Format("e9m5", ebits=9, mbits=5, bias=255),  # wider range than float32
    Format("e5m0", ebits=5, mbits=0, bias=15, specials="finite"),  # no fraction bits at all
]


@pytest.mark.parametrize("fmt", [*FORMATS.values(), *CUSTOM], ids=lambda f: f.name)
@settings(max_examples=60)
@given(data=st.data())
def test_values_are_representable(fmt: Format, data: st.DataObject) -> None:
    x = data.draw(fst.values(fmt))
    assert isinstance(x, float)
    assert is_representable(x, fmt), x
    assert_round_trips(x, fmt)


@pytest.mark.parametrize("name", [n for n in NAMES if FORMATS[n].bits <= 8])
@settings(max_examples=60)
@given(data=st.data())
def test_values_of_8bit_formats_are_in_the_oracles_table(name: str, data: st.DataObject) -> None:
    x = data.draw(fst.values(name, allow_nan=False, allow_infinity=False))
    assert x in set(oracle_values(name).tolist())


def signed_key(v: float) -> tuple[float, float]:
    """Orders -0.0 before +0.0, as Hypothesis' bounds do."""
    return (v, math.copysign(1, v))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_bounds_and_flags_are_honoured(data: st.DataObject) -> None:
    fmt = data.draw(fst.formats(), label="fmt")
    a = data.draw(fst.values(fmt, allow_nan=False), label="a")
    b = data.draw(fst.values(fmt, allow_nan=False), label="b")
    lo, hi = sorted((a, b), key=signed_key)
    sub = data.draw(st.booleans()) and fmt.subnormals
    negzero = data.draw(st.booleans()) and fmt.has_negative_zero

    def allowed(v: float) -> bool:
        return (sub or not 0 < abs(v) < fmt.tiny) and (negzero or math.copysign(1, v) > 0)

    try:
        strategy = fst.values(
            fmt, min_value=lo, max_value=hi, allow_subnormal=sub, allow_negative_zero=negzero
        )
        x = data.draw(strategy, label="x")
    except InvalidArgument:  # only when no allowed value lies in [lo, hi]
        candidates = [lo, hi, fmt.tiny, -fmt.tiny, 0.0, -0.0]
        inside = [c for c in candidates if signed_key(lo) <= signed_key(c) <= signed_key(hi)]
        assert not any(allowed(c) for c in inside)
        return
    assert lo <= x <= hi and is_representable(x, fmt)
    assert sub or not 0 < abs(x) < fmt.tiny
    assert negzero or not (x == 0 and math.copysign(1, x) < 0)


EDGES = {
    # name: values that must come up (a positive entry: either sign will do). 2**-24 and
    # 2**-14 are fp16's smallest subnormal and normal; 2**-9 and 2**-6 those of e4m3fn.
    "float16": [65504.0, -65504.0, 2.0**-24, 2.0**-14, math.inf, -math.inf, -0.0, math.nan],
    "float8_e4m3fn": [448.0, -448.0, 2.0**-9, 2.0**-6, math.nan],
    "bfloat16": [2.0**-133, 2.0**-126, math.inf],
}


@pytest.mark.parametrize("name", list(EDGES))
def test_values_reach_the_edges_within_1000_examples(name: str) -> None:
    seen: list[float] = []

    @settings(database=None, derandomize=True, max_examples=1000)
    @given(fst.values(name))
    def collect(x: float) -> None:
        seen.append(x)

    collect()

    def came_up(v: float) -> bool:
        if math.isnan(v):
            return any(math.isnan(x) for x in seen)
        if math.copysign(1.0, v) < 0:
            return any(x == v and math.copysign(1.0, x) < 0 for x in seen)
        return any(abs(x) == v for x in seen)

    assert all(came_up(v) for v in EDGES[name]), [v for v in EDGES[name] if not came_up(v)]


def test_values_shrink_to_simple_numbers() -> None:
    assert find(fst.values("bf16"), lambda x: x > 1, settings=FIND) == 1.5
    assert find(fst.values("fp16"), lambda x: 0 < x < 1e-5, settings=FIND) == (2.0**-24)


# -- ties, cancellation, underflow ---------------------------------------------------------------
def _tie_offset(t: float, fmt: Format) -> Fraction:
    """(t - lower neighbour) / spacing on the format's grid extended with subnormals."""
    v = abs(Fraction(t))
    e = max(math.frexp(abs(t))[1] - 1, 1 - fmt.bias)
    q = Fraction(2) ** (e - fmt.mbits)
    return v / q - (v // q)


@pytest.mark.parametrize(
    "fmt", [f for f in [*FORMATS.values(), *CUSTOM] if f.name != "float64"], ids=lambda f: f.name
)
@settings(max_examples=60)
@given(data=st.data())
def test_ties_are_midpoints_or_just_beside_them(fmt: Format, data: st.DataObject) -> None:
    exact = data.draw(fst.ties(fmt, nudge=False))
    assert _tie_offset(exact, fmt) == Fraction(1, 2)
    near = data.draw(fst.ties(fmt))
    offset = _tie_offset(near, fmt)
    assert offset == Fraction(1, 2) or abs(offset - Fraction(1, 2)) < Fraction(1, 2**20)


def test_ties_include_the_overflow_boundary_and_the_smallest_subnormal_half() -> None:
    top = 65504.0 + 16.0  # half of fp16's spacing (32) above max
    assert find(fst.ties("fp16", nudge=False), lambda t: t == top, settings=FIND) == top
    assert find(fst.ties("fp16", nudge=False), lambda t: t == 2.0**-25, settings=FIND) == 2.0**-25


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "float4_e2m1fn"])
@settings(max_examples=60)
@given(data=st.data())
def test_near_cancellation_pairs(name: str, data: st.DataObject) -> None:
    fmt = FORMATS[name]
    a, b = data.draw(fst.near_cancellation_pairs(fmt, max_ulps=3))
    assert is_representable(a, fmt) and is_representable(b, fmt) and a != 0 and b != 0
    assert (a > 0) == (b > 0)
    codes = [int(fpemu.encode(abs(v), fmt)) for v in (a, b)]  # ordered like the magnitudes
    assert abs(codes[0] - codes[1]) <= 3
    if b / 2 <= a <= 2 * b or 2 * b <= a <= b / 2:  # Sterbenz: the difference is exact
        assert float(fpemu.round(a - b, fmt)) == a - b


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float8_e4m3fn", "float4_e2m1fn", "tf32"])
@settings(max_examples=60)
@given(data=st.data())
def test_underflowing_products(name: str, data: st.DataObject) -> None:
    fmt = FORMATS[name]
    a, b = data.draw(fst.underflowing_products(fmt))
    assert is_representable(a, fmt) and is_representable(b, fmt)
    assert 0 < abs(Fraction(a) * Fraction(b)) < Fraction(fmt.tiny)


@settings(max_examples=30)
@given(fst.arrays("e4m3", (3, 4), dtype=np.float32, allow_nan=False))
def test_arrays(a: np.ndarray) -> None:
    assert a.shape == (3, 4) and a.dtype == np.float32
    fmt = get_format("e4m3")
    assert all(is_representable(float(x), fmt) for x in a.ravel())


@given(fst.formats(max_bits=8), fst.rounding_modes(stochastic=True))
def test_formats_and_modes(fmt: Format, mode: str) -> None:
    assert fmt.bits <= 8 and fmt.name in FORMATS
    assert fpemu.get_mode(mode).value == mode


# -- eager argument validation -------------------------------------------------------------------
BAD_CALLS: list[tuple[Callable[..., Any], dict[str, Any], str]] = [
    (fst.values, {"fmt": "fp17"}, "fp17"),
    (fst.values, {"fmt": 16}, "16"),
    (fst.values, {"fmt": "e4m3", "allow_infinity": True}, "allow_infinity"),
    (fst.values, {"fmt": "e2m1", "allow_nan": True}, "allow_nan"),
    (fst.values, {"fmt": "e4m3fnuz", "allow_negative_zero": True}, "allow_negative_zero"),
    (fst.values, {"fmt": "fp16", "allow_nan": "yes"}, "allow_nan='yes'"),
    (fst.values, {"fmt": "fp16", "min_value": 2.0, "max_value": 1.0}, "min_value=2.0"),
    (fst.values, {"fmt": "fp16", "min_value": math.nan}, "min_value"),
    (fst.values, {"fmt": "fp16", "max_value": "1"}, "max_value='1'"),
    (fst.values, {"fmt": "fp16", "min_value": 1.0001, "max_value": 1.0009}, "no value"),
    (fst.values, {"fmt": "fp16", "min_value": 0, "max_value": 1, "allow_infinity": True}, "inf"),
    (fst.values, {"fmt": "fp16", "min_value": 0, "allow_nan": True}, "allow_nan"),
    (
        fst.values,
        {"fmt": fpemu.Format("x", 4, 3, 7, "fn", False), "allow_subnormal": True},
        "allow_subnormal",
    ),
    (fst.ties, {"fmt": "float64"}, "float64"),
    (fst.ties, {"fmt": "fp16", "nudge": 1}, "nudge=1"),
    (fst.near_cancellation_pairs, {"fmt": "fp16", "max_ulps": -1}, "max_ulps=-1"),
    (fst.near_cancellation_pairs, {"fmt": "fp16", "max_ulps": 1.5}, "max_ulps=1.5"),
    (fst.underflowing_products, {"fmt": "fp16", "allow_negative": None}, "allow_negative"),
    (fst.arrays, {"fmt": "fp16", "shape": 3, "dtype": np.int32}, "dtype"),
    (fst.arrays, {"fmt": "float64", "shape": 3, "dtype": np.float32}, "float32"),
    (fst.arrays, {"fmt": "fp16", "shape": -1}, "shape"),
    (fst.arrays, {"fmt": "fp16", "shape": 3, "unique": True, "allow_nan": True}, "unique"),
    (fst.formats, {"names": ["fp16", "nope"]}, "nope"),
    (fst.formats, {"max_bits": 0}, "max_bits=0"),
    (fst.formats, {"max_bits": 3}, "max_bits=3"),
    (fst.formats, {"specials": ["ieee", "ibm"]}, "ibm"),
    (fst.rounding_modes, {"stochastic": "no"}, "stochastic='no'"),
]


@pytest.mark.parametrize(
    ("fn", "kwargs", "named"),
    BAD_CALLS,
    ids=[
        f"{fn.__name__}({', '.join(f'{k}={v!r}' for k, v in kw.items())})"
        for fn, kw, _ in BAD_CALLS
    ],
)
def test_bad_arguments_raise_when_the_strategy_is_built(
    fn: Callable[..., Any], kwargs: dict[str, Any], named: str
) -> None:
    kw = dict(kwargs)
    args = [kw.pop("fmt")] if "fmt" in kw else []
    if "shape" in kw:
        args.append(kw.pop("shape"))
    with pytest.raises(InvalidArgument) as info:
        fn(*args, **kw)  # built, never drawn from: errors must be eager
    assert isinstance(info.value, TypeError)  # callers may catch the builtin
    assert named in str(info.value)


# -- the point: planted bugs are found within the default budget ---------------------------------
# Each bug is a plausible mistake in a hand-written kernel. A property compares the buggy code
# with the exact oracle over one of the strategies, with Hypothesis' default budget (100
# examples), under three seeds; shrinking is skipped since only finding counts here. The same
# property passes for the correct code (fpemu itself), so what fails is the bug, not the harness.
BUDGET = settings(
    max_examples=100, database=None, deadline=None, derandomize=False, phases=[Phase.generate]
)


def _quantum(x: float, fmt: Format) -> float:
    return math.ldexp(1.0, max(math.frexp(x)[1] - 1, fmt.emin) - fmt.mbits) if x else 0.0


def round_half_up(x: float, fmt: Format) -> float:
    """BUG: the textbook floor(x/q + 0.5): ties go away from zero instead of to even."""
    q = _quantum(abs(x), fmt)
    r = math.floor(abs(x) / q + 0.5) * q if q else 0.0
    return math.copysign(math.inf if r > fmt.max else r, x)


def round_flushing(x: float, fmt: Format) -> float:
    """BUG: a kernel compiled with flush-to-zero: subnormal inputs and results become zero."""
    return 0.0 if abs(x) < fmt.tiny else float(fpemu.round(x, fmt))


def round_saturating(x: float, fmt: Format) -> float:
    """BUG: clamps to +-max where round-to-nearest must overflow (x >= max + ulp(max)/2)."""
    return float(fpemu.round(x, fmt, overflow="saturate"))


def sub_without_guard_digit(a: float, b: float, fmt: Format) -> float:
    """BUG: aligns the smaller operand to the larger one's quantum, dropping a guard bit."""
    q = _quantum(max(abs(a), abs(b)), fmt)
    small, big = sorted((a, b), key=abs)
    small = math.trunc(small / q) * q
    return float(fpemu.round(big - small if big is a else small - big, fmt))


def mul_flushing(a: float, b: float, fmt: Format) -> float:
    """BUG: flush-to-zero on the output, as kernels built with fast-math do."""
    p = float(fpemu.round(a * b, fmt))
    return math.copysign(0.0, p) if abs(p) < fmt.tiny else p


def mul_rounding_twice(a: float, b: float, fmt: Format) -> float:
    """BUG: rounds the significand first and denormalises after: double rounding."""
    wide = fpemu.Format("wide", ebits=11, mbits=fmt.mbits, bias=1023)
    return float(fpemu.round(fpemu.round(a * b, wide), fmt))


def oracle_round(x: float, fmt: Format) -> float:
    return reference.round_float(x, spec_of(fmt), "rne")


def _same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or (
        x == y and math.copysign(1, x) == math.copysign(1, y)
    )


def _fails(strategy: st.SearchStrategy[Any], check: Callable[[Any], None], seed_: int) -> bool:
    @seed(seed_)
    @BUDGET
    @given(strategy)
    def prop(x: Any) -> None:
        check(x)

    try:
        prop()
    except AssertionError:
        return True
    return False


ROUNDING_BUGS = [
    ("float16", round_half_up, fst.ties("fp16")),
    ("bfloat16", round_half_up, fst.ties("bf16")),
    ("float16", round_flushing, fst.values("fp16")),
    ("float8_e4m3fn", round_flushing, fst.values("e4m3", allow_nan=False)),
    ("float16", round_saturating, fst.ties("fp16")),
    ("bfloat16", round_saturating, fst.ties("bf16")),
]


@pytest.mark.parametrize("seed_", [0, 1, 2])
@pytest.mark.parametrize(
    ("name", "buggy", "strategy"),
    ROUNDING_BUGS,
    ids=[f"{b.__name__}-{n}" for n, b, _ in ROUNDING_BUGS],
)
def test_planted_rounding_bug_is_found(
    name: str, buggy: Callable[[float, Format], float], strategy: Any, seed_: int
) -> None:
    fmt = FORMATS[name]

    def check_with(impl: Callable[[float, Format], float]) -> Callable[[float], None]:
        def check(x: float) -> None:
            assert _same(impl(x, fmt), oracle_round(x, fmt)), x

        return check

    assert _fails(strategy, check_with(buggy), seed_)
    if seed_ == 0:
        assert not _fails(strategy, check_with(lambda x, f: float(fpemu.round(x, f))), seed_)


ARITH_BUGS = [
    ("float16", sub_without_guard_digit, reference.sub, fst.near_cancellation_pairs("fp16")),
    ("bfloat16", sub_without_guard_digit, reference.sub, fst.near_cancellation_pairs("bf16")),
    ("float16", mul_flushing, reference.mul, fst.underflowing_products("fp16")),
    ("bfloat16", mul_flushing, reference.mul, fst.underflowing_products("bf16")),
    ("float8_e4m3fn", mul_rounding_twice, reference.mul, fst.underflowing_products("e4m3")),
]


@pytest.mark.parametrize("seed_", [0, 1, 2])
@pytest.mark.parametrize(
    ("name", "buggy", "exact", "strategy"),
    ARITH_BUGS,
    ids=[f"{b.__name__}-{n}" for n, b, _, _ in ARITH_BUGS],
)
def test_planted_arithmetic_bug_is_found(
    name: str, buggy: Callable[..., float], exact: Callable[..., float], strategy: Any, seed_: int
) -> None:
    fmt = FORMATS[name]
    spec = spec_of(fmt)

    def check_with(impl: Callable[[float, float], float]) -> Callable[[tuple[float, float]], None]:
        def check(pair: tuple[float, float]) -> None:
            assert _same(impl(*pair), exact(*pair, spec)), pair

        return check

    assert _fails(strategy, check_with(lambda a, b: buggy(a, b, fmt)), seed_)
    # Correct: one rounding of the exact float64 result (exact for these inputs).
    if seed_ == 0:

        def correct(a: float, b: float) -> float:
            return float(fpemu.round(a - b if exact is reference.sub else a * b, fmt))

        assert not _fails(strategy, check_with(correct), seed_)


def test_planted_bugs_shrink_to_the_simplest_witness() -> None:
    fp16, e4m3 = FORMATS["float16"], FORMATS["float8_e4m3fn"]
    tie = find(
        fst.ties(fp16), lambda t: round_half_up(t, fp16) != oracle_round(t, fp16), settings=FIND
    )
    assert tie == 1 + 2**-11  # halfway between 1 and its successor: RNE keeps 1.0
    flushed = find(fst.values(e4m3), lambda x: round_flushing(x, e4m3) != x, settings=FIND)
    assert flushed == 2.0**-9  # e4m3's smallest subnormal
    a, b = find(
        fst.near_cancellation_pairs(fp16),
        lambda p: (
            sub_without_guard_digit(p[0], p[1], fp16) != reference.sub(p[0], p[1], spec_of(fp16))
        ),
        settings=FIND,
    )
    assert (a, b) == (1.0, 1 - 2**-11)  # 1 and the value just below: the guard bit matters
