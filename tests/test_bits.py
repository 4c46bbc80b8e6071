"""encode/decode/codes/ulp/next_up/next_down against the oracle, numpy and ml_dtypes."""

from __future__ import annotations

import numpy as np
import pytest

import fpemu
import reference
import reference.bits
from fpemu.formats import FORMATS
from fpemu.storage import storage_dtype
from tests.conftest import SMALL_FORMATS, spec_of
from tests.oracle import assert_same_bits, oracle_values


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_every_code_decodes_like_the_oracle_and_reencodes(fmt: str) -> None:
    spec, c = spec_of(fmt), fpemu.codes(fmt)
    v = fpemu.decode(c, fmt)
    stride = 1 if FORMATS[fmt].bits <= 8 else 13  # the oracle is slow; ml_dtypes checks all below
    want = [reference.bits.decode(int(k), spec) for k in c[::stride]]
    assert_same_bits(v[::stride], want)
    nan = np.isnan(v)
    assert np.array_equal(fpemu.encode(v[~nan], fmt), c[~nan])  # every non-NaN code round-trips
    if nan.any():
        assert np.all(fpemu.encode(v[nan], fmt) == fpemu.canonical_nan(fmt))
        assert fpemu.canonical_nan(fmt) == reference.bits.nan_code(spec)


@pytest.mark.parametrize("fmt", [n for n in SMALL_FORMATS if storage_dtype(n) is not None])
def test_decode_matches_ml_dtypes_bit_views(fmt: str) -> None:
    dt = storage_dtype(fmt)
    c = fpemu.codes(fmt)
    with np.errstate(invalid="ignore"):  # ml_dtypes warns when it widens NaN
        theirs = c.astype(np.dtype(f"u{dt.itemsize}")).view(dt).astype(np.float64)
    assert_same_bits(fpemu.decode(c, fmt), theirs)


def test_encode_refuses_unrepresentable_and_decode_checks_codes() -> None:
    with pytest.raises(ValueError, match=r"0\.1.*not representable in float16"):
        fpemu.encode([1.0, 0.1], "fp16")
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 2\*\*8\)"):
        fpemu.decode([256], "e4m3")
    with pytest.raises(TypeError, match="integer array"):
        fpemu.decode([1.5], "e4m3")
    with pytest.raises(ValueError, match="<= 16 bits"):
        fpemu.codes("fp32")


def test_float32_decode_by_arithmetic() -> None:
    c = np.random.default_rng(0).integers(0, 2**32, 100_000, dtype=np.uint64)
    with np.errstate(invalid="ignore"):
        want = c.astype(np.uint32).view(np.float32).astype(np.float64)
    assert_same_bits(fpemu.decode(c, "fp32"), want)
    ok = ~np.isnan(want)
    assert np.array_equal(fpemu.encode(want[ok], "fp32"), c[ok].astype(np.uint32))


@pytest.mark.parametrize("fmt", SMALL_FORMATS)
def test_all_values_and_neighbours_against_the_oracle_enumeration(fmt: str) -> None:
    v = oracle_values(fmt)
    ours = fpemu.all_values(fmt)
    assert np.array_equal(ours, v + 0.0)
    f = FORMATS[fmt]
    over = np.inf if f.has_inf else np.nan
    # + 0.0: the enumeration holds zero once, as +0; next_up(-tiniest) is -0 (tested below)
    assert_same_bits(fpemu.next_up(v[:-1], fmt) + 0.0, v[1:])
    assert_same_bits(fpemu.next_down(v[1:], fmt), v[:-1])
    assert_same_bits(fpemu.next_up(v[-1:], fmt), [over])
    mids = (v[:-1] + v[1:]) / 2
    assert_same_bits(fpemu.next_up(mids, fmt) + 0.0, v[1:])  # works for any float, not only values
    assert_same_bits(fpemu.next_down(mids, fmt), v[:-1])


def test_next_up_matches_numpy_float16_nextafter() -> None:
    v = fpemu.all_values("fp16").astype(np.float16)
    with np.errstate(over="ignore"):  # nextafter(65504) is inf
        theirs = np.nextafter(v, np.float16(np.inf)).astype(np.float64)
    ours = fpemu.next_up(v.astype(np.float64), "fp16")
    zero = v == 0  # numpy steps from +0 (ours too); -0 is not in all_values
    assert_same_bits(ours[~zero], theirs[~zero])
    assert float(fpemu.next_up(-0.0, "fp16")) == 2.0**-24
    assert str(fpemu.next_up(-(2.0**-24), "fp16")) == "-0.0"  # IEEE nextUp of -tiniest is -0


def test_ulp_matches_numpy_spacing_for_float16() -> None:
    v = fpemu.all_values("fp16")
    v = v[(v > 0) & (v < 65504)]
    theirs = np.spacing(v.astype(np.float16)).astype(np.float64)
    assert_same_bits(fpemu.ulp(v, "fp16"), theirs)
    assert float(fpemu.ulp(0.0, "fp16")) == 2.0**-24


def test_ulp_of_specials() -> None:
    got = fpemu.ulp(np.array([np.inf, -np.inf, np.nan, 1e-40]), "bf16")
    assert np.isinf(got[0]) and np.isinf(got[1]) and np.isnan(got[2])
    assert got[3] == FORMATS["bfloat16"].smallest_subnormal


def test_float64_round_trip_without_warnings() -> None:
    x = np.array([5e-324, -2.2250738585072014e-308, 1.0, -1.7976931348623157e308, 0.0])
    assert_same_bits(fpemu.decode(fpemu.encode(x, "fp64"), "fp64"), x)
    assert np.array_equal(fpemu.encode(x, "fp64"), x.view(np.uint64))
