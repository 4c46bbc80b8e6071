"""``fpemu.validate.ops._num.to`` from float64 to bfloat16/float16
(:func:`fpemu.validate.ops._num._low_from64`: bfloat16 by a double rounding through float32 with
its midpoints redone, float16 by NumPy's cast) against one correct rounding, bit for bit.

The hazard of rounding twice is a float64 value just off a 16-bit midpoint whose float32
rounding lands on the midpoint; the inputs below put values at, just off (by one float64 ulp and
by amounts below and above float32's resolution) and between every kind of midpoint: normal,
subnormal, binade edges, the overflow threshold, zeros, infinities and NaN. The oracles: the
exact scalar ``reference.rounding.round_value`` (Fractions) on a sample, and
:func:`fpemu.round` (itself tested against ``reference``) on everything.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpemu.rounding import round as fround
from fpemu.validate.ops._num import dtype, to
from reference.bits import encode_value
from reference.rounding import round_value
from reference.spec import BFLOAT16, FLOAT16

SPECS = {"bfloat16": BFLOAT16, "float16": FLOAT16}


def _codes(name: str) -> np.ndarray:
    """Every finite value of the 16-bit format, as float64."""
    v = np.arange(1 << 16, dtype=np.uint16).view(dtype(name))
    with np.errstate(invalid="ignore"):  # the NaN codes
        w = v.astype(np.float64)
    return w[np.isfinite(w)]


def _hazards(name: str) -> np.ndarray:
    """Midpoints between neighbouring codes, each nudged by one float64 ulp both ways and by
    offsets around float32's resolution there (where a float32 rounding may land on the
    midpoint), plus the codes, zeros, infinities, NaN and values past the largest code."""
    v = np.unique(_codes(name))
    mids = (v[:-1] + v[1:]) / 2  # exact in float64
    out = [v, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf)]
    for k in (2.0**-25, 2.0**-26, 2.0**-30, 2.0**-40):  # relative offsets near float32's ulp
        out += [mids * (1 + k), mids * (1 - k)]
    top = float(v[-1])
    out.append(np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e300, -1e300, top * 1.01,
                         np.finfo(np.float32).max * 1.0, 2.0**-200, -(2.0**-200)]))  # fmt: skip
    return np.concatenate(out)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    nan = np.isnan(a.astype(np.float32)) & np.isnan(b.astype(np.float32))
    return bool(np.array_equal(a.view(np.uint16)[~nan], b.view(np.uint16)[~nan]))


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_fast_path_equals_one_rounding_on_every_hazard(name: str) -> None:
    x = _hazards(name)
    got = to(x, name)
    want = np.asarray(fround(x, name)).astype(dtype(name))
    assert got.dtype == dtype(name) and got.shape == x.shape
    assert _same_bits(got, want)
    # the nudged midpoints do exercise the hazard: double rounding alone gets some wrong
    with np.errstate(over="ignore"):
        naive = x.astype(np.float32).astype(dtype(name))
    assert not _same_bits(naive, want)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_fast_path_against_the_exact_reference(name: str) -> None:
    """A sample of the hazards against Fractions: the code of the exactly rounded value."""
    x = _hazards(name)
    x = x[np.isfinite(x)]
    sample = x[np.random.default_rng(3).choice(x.size, 3000, replace=False)]
    got = to(sample, name).view(np.uint16)
    spec = SPECS[name]
    want = [encode_value(round_value(Fraction(float(v)), spec, "rne"), spec) for v in sample]
    assert got.tolist() == want


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=1,
                max_size=64))  # fmt: skip
def test_fast_path_on_arbitrary_doubles(values: list[float]) -> None:
    x = np.array(values, np.float64)
    for name in ("bfloat16", "float16"):
        want = np.asarray(fround(x, name)).astype(dtype(name))
        assert _same_bits(to(x, name), want)


def test_shapes_and_strides_are_kept() -> None:
    x = np.arange(24, dtype=np.float64).reshape(2, 3, 4).transpose(2, 0, 1) / 7
    out = to(x, "bfloat16")
    assert out.shape == x.shape
    want = np.asarray(fround(np.ascontiguousarray(x), "bfloat16")).astype(dtype("bfloat16"))
    assert _same_bits(np.ascontiguousarray(out), want)
    assert to(np.float64(1 / 3), "float16").shape == ()
