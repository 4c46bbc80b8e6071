"""fpemu.testing: assertions pass and fail when they should, and their messages show the fields."""

from __future__ import annotations

import functools
import math

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fpemu
from fpemu.testing import (
    assert_bitwise_equal,
    assert_representable,
    assert_ulp_close,
    ulp_distance,
)
from fpemu.testing import strategies as fst
from tests.oracle import oracle_values

sorted_values = functools.cache(oracle_values)  # the oracle decodes every code: do it once


# -- ulp_distance --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2fnuz", "e2m1"]
)
@settings(max_examples=50)
@given(data=st.data())
def test_ulp_distance_counts_the_values_in_between(name: str, data: st.DataObject) -> None:
    # Independent count: positions in the oracle's sorted table of finite values (one zero).
    table = sorted_values(name)
    a = data.draw(fst.values(name, allow_nan=False, allow_infinity=False))
    b = data.draw(fst.values(name, allow_nan=False, allow_infinity=False))
    expected = abs(int(np.searchsorted(table, a)) - int(np.searchsorted(table, b)))
    assert int(ulp_distance(a, b, name)) == expected


def test_ulp_distance_edges() -> None:
    assert int(ulp_distance(0.0, -0.0, "fp16")) == 0
    assert int(ulp_distance(65504.0, math.inf, "fp16")) == 1  # inf is one step past max
    assert int(ulp_distance(-math.inf, math.inf, "e5m2")) == 2 * (0x7C) == 248
    # 2**-24 is fp16's smallest subnormal: -tiny ... +tiny is two steps through zero.
    assert int(ulp_distance(-(2.0**-24), 2.0**-24, "fp16")) == 2
    # bf16: 1.0 = 0x3F80, 2.0 = 0x4000: 128 codes apart.
    assert int(ulp_distance(1.0, 2.0, "bf16")) == 0x4000 - 0x3F80 == 128
    assert ulp_distance([1.0, 2.0], 1.0, "bf16").tolist() == [0, 128]


def test_ulp_distance_skips_missing_subnormals() -> None:
    flush = fpemu.Format("e4m3_nosub", ebits=4, mbits=3, bias=7, specials="fn", subnormals=False)
    assert int(ulp_distance(0.0, flush.tiny, flush)) == 1  # no values between 0 and tiny


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [([1.0, math.nan], 1.0, r"a\[1\] = nan"), (1.0, [0.5, 0.1], r"b\[1\] = 0\.1 .*bfloat16")],
)
def test_ulp_distance_refuses_nan_and_non_values(a: object, b: object, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ulp_distance(a, b, "bf16")


# -- assert_bitwise_equal ------------------------------------------------------------------------
def test_bitwise_equal_passes_on_identical_bits_and_nans() -> None:
    x = np.array([0.1, -0.0, np.inf, np.nan, 2.0**-24])
    r = fpemu.round(x, "fp16")
    assert_bitwise_equal(r, r.copy(), "fp16")
    assert_bitwise_equal(r.astype(np.float16), r)  # inferred format: float16 holds both
    assert_bitwise_equal(x, x)  # float64, NaN == NaN by default


def test_bitwise_equal_message_shows_index_values_bits_fields_and_count() -> None:
    # bf16: 0.10009765625 = 0x3DCD (s=0, e=123 -> 2^-4, m=77=0x4d); 0.099609375 = 0x3DCC.
    actual = np.array([[1.0, 0.10009765625], [3.0, -0.0]])
    desired = np.array([[1.0, 0.099609375], [3.0, 0.0]])
    with pytest.raises(AssertionError) as info:
        assert_bitwise_equal(actual, desired, "bf16", err_msg="after step 7")
    msg = str(info.value)
    assert msg.splitlines()[:3] == [
        "after step 7",
        "Arrays are not bitwise equal in bfloat16",
        "Mismatched elements: 2 / 4 (50%)",
    ]
    assert "Max ulp distance: 1 at index [0, 1]" in msg
    assert "index [0, 1]: ulp distance 1" in msg
    assert "actual : 0.10009765625 = 0x3dcd [s=0 e=123(2^-4) m=0x4d]" in msg
    assert "desired: 0.099609375 = 0x3dcc [s=0 e=123(2^-4) m=0x4c]" in msg
    # -0 vs +0: equal as numbers, different bits (sign), 0 ulps apart.
    assert "index [1, 1]: ulp distance 0" in msg
    assert "-0.0 = 0x8000 [s=1 e=0(zero) m=0x00]" in msg


def test_bitwise_equal_catches_double_rounding_in_a_float64_to_bf16_cast() -> None:
    # 1 + 2**-8 + 2**-30 lies just above the bf16 midpoint 1 + 2**-8, so it rounds up to
    # 1 + 2**-7; via float32 the 2**-30 is lost first and the tie goes to even (1.0).
    x = np.array([1 + 2**-8 + 2**-30, 0.5])
    via_float32 = x.astype(np.float32).astype(ml_dtypes.bfloat16)
    with pytest.raises(AssertionError, match=r"(?s)1 / 2.*ulp distance 1\b.*0x3f81.*0x3f80"):
        assert_bitwise_equal(fpemu.round(x, "bf16"), via_float32, "bf16")


def test_bitwise_equal_nan_option_and_non_values() -> None:
    with pytest.raises(AssertionError, match="1 / 1"):
        assert_bitwise_equal(np.nan, np.nan, "fp16", equal_nan=False)
    with pytest.raises(AssertionError, match=r"0\.1 \(not a value of float16\)"):
        assert_bitwise_equal(0.1, 0.1, "fp16")  # 0.1 is no fp16 value: never "equal"
    with pytest.raises(AssertionError, match="shapes differ"):
        assert_bitwise_equal(np.zeros(3), np.zeros(2))


def test_bitwise_equal_lists_at_most_max_report() -> None:
    with pytest.raises(AssertionError) as info:
        assert_bitwise_equal(np.arange(10.0), np.arange(10.0) + 1, "fp16", max_report=3)
    msg = str(info.value)
    assert "Mismatched elements: 10 / 10 (100%)" in msg and "First 3 mismatches:" in msg
    assert msg.count("actual :") == 3


def test_bitwise_equal_infers_a_common_format() -> None:
    bf16 = np.array([1.0], dtype=ml_dtypes.bfloat16)
    with pytest.raises(AssertionError, match="in float32"):
        assert_bitwise_equal(bf16, np.array([1.5], dtype=np.float16))  # neither holds the other
    with pytest.raises(AssertionError, match="in float64"):
        assert_bitwise_equal([1.0], [2.0])


# -- assert_ulp_close ----------------------------------------------------------------------------
def test_ulp_close_passes_and_fails_at_the_bound() -> None:
    one_up = 1 + 2**-10  # fp16 successor of 1
    assert_ulp_close([1.0, 0.0], [one_up, -0.0], "fp16", 1)
    assert_ulp_close([np.nan, np.inf], [np.nan, np.inf], "fp16", 0)
    with pytest.raises(AssertionError, match=r"(?s)not within 0 ulp.*ulp distance 1"):
        assert_ulp_close(1.0, one_up, "fp16", 0)
    with pytest.raises(AssertionError, match="ulp distance 2"):
        assert_ulp_close(1.0, 1 + 2**-9, "fp16", max_ulp=1)


def test_ulp_close_is_strict_about_infinity_and_nan() -> None:
    with pytest.raises(AssertionError, match=r"ulp distance 1"):
        assert_ulp_close(65504.0, np.inf, "fp16", max_ulp=5)  # overflow is not "close"
    with pytest.raises(AssertionError, match=r"ulp distance -"):
        assert_ulp_close(np.nan, 1.0, "fp16", max_ulp=5)
    with pytest.raises(AssertionError):
        assert_ulp_close(np.nan, np.nan, "fp16", equal_nan=False)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1"])
def test_ulp_close_rejects_bad_max_ulp(bad: object) -> None:
    with pytest.raises(ValueError, match="max_ulp"):
        assert_ulp_close(1.0, 1.0, "fp16", bad)  # type: ignore[arg-type]


# -- assert_representable ------------------------------------------------------------------------
def test_representable() -> None:
    assert_representable(fpemu.all_values("e4m3"), "e4m3")
    assert_representable([np.nan, -0.0], "e4m3fnuz")  # -0 equals the value 0
    with pytest.raises(AssertionError) as info:
        assert_representable([0.5, 0.1, 500.0, np.inf], "e4m3")
    msg = str(info.value)
    assert msg.startswith("3 / 4 elements are not values of float8_e4m3fn")
    # e4m3 around 0.1: 0.1015625 = 13/128 and 0.09375 = 12/128 (spacing 2**-7 in [2**-4, 2**-3)).
    assert "index [1]: 0.1 lies between 0.09375 and 0.1015625" in msg
    assert "index [2]: 500.0 is beyond +-448.0" in msg
    assert "index [3]: inf (float8_e4m3fn has no inf)" in msg
