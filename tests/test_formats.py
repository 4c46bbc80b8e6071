"""Formats: derived constants against numpy/ml_dtypes finfo, identities, registry, errors."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu.formats import ALIASES, FORMATS, Format, get_format
from fpemu.storage import storage_dtype

NUMERIC = ["bits", "eps", "max", "smallest_normal", "smallest_subnormal", "minexp", "maxexp",
           "nmant", "nexp", "machep", "epsneg", "negep"]  # fmt: skip


def _their_finfo(dt: np.dtype) -> object:
    return np.finfo(dt) if dt in (np.float16, np.float32, np.float64) else ml_dtypes.finfo(dt)


@pytest.mark.parametrize("name", [n for n in FORMATS if storage_dtype(n) is not None])
def test_finfo_matches_numpy_and_ml_dtypes(name: str) -> None:
    theirs, ours = _their_finfo(storage_dtype(name)), fpemu.finfo(name)
    for field in NUMERIC:
        assert float(getattr(ours, field)) == float(getattr(theirs, field)), field
    assert ours.tiny == float(theirs.tiny)
    if ours.bits > 8:  # ml_dtypes hand-types precision=1 for fp8; numpy's rule gives 0
        assert ours.precision == theirs.precision


def test_named_constants_from_the_specs() -> None:
    # Values from the OCP FP8/MX specs and IEEE 754, typed here, not derived by fpemu.
    expect = {"float8_e4m3fn": 448, "float8_e5m2": 57344, "float8_e4m3fnuz": 240,
              "float8_e5m2fnuz": 57344, "float8_e4m3": 240, "float6_e3m2fn": 28,
              "float6_e2m3fn": 7.5, "float4_e2m1fn": 6, "float16": 65504,
              "tf32": (2 - 2**-10) * 2**127, "bfloat16": (2 - 2**-7) * 2**127}  # fmt: skip
    for name, mx in expect.items():
        assert get_format(name).max == mx, name
    assert get_format("tf32").bits == 19 and get_format("tf32").eps == 2**-10


def test_identities_hold_for_every_format(any_format: Format) -> None:
    f = any_format
    assert f.eps == 2.0**-f.mbits
    assert f.tiny == 2.0**f.emin
    assert f.smallest_subnormal == 2.0 ** (f.emin - f.mbits)
    assert float(fpemu.round(f.max, f)) == f.max
    assert float(fpemu.round(f.smallest_subnormal / 2, f)) == 0.0  # tie to even: zero
    beyond = float(fpemu.next_up(f.max, f))
    assert math.isinf(beyond) if f.has_inf else math.isnan(beyond)
    assert f.bits == 1 + f.ebits + f.mbits


def test_aliases_resolve_and_are_case_insensitive() -> None:
    for alias, name in ALIASES.items():
        assert get_format(alias) is FORMATS[name]
        assert get_format(alias.upper()) is FORMATS[name]
    assert get_format(FORMATS["float16"]) is FORMATS["float16"]


def test_unknown_format_lists_known_names() -> None:
    with pytest.raises(ValueError, match=r"unknown format fmt='fp7'.*float16.*bfloat16"):
        get_format("fp7")
    with pytest.raises(TypeError, match="fmt must be a format name"):
        get_format(16)  # type: ignore[arg-type]


def test_custom_format_is_data() -> None:
    e3m4 = Format("e3m4", ebits=3, mbits=4, bias=3, specials="fn")
    assert e3m4.max == 1.875 * 16  # significand 1.1110 (all ones is NaN), exponent 7 - 3
    assert float(fpemu.round(3.14159, e3m4)) == 3.125
    with pytest.raises(AttributeError):
        e3m4.mbits = 5  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ebits": 0, "mbits": 3, "bias": 1}, "ebits=0 is out of range"),
        ({"ebits": 4, "mbits": 60, "bias": 7}, "mbits=60 is out of range"),
        ({"ebits": 4, "mbits": 3, "bias": 7, "specials": "odd"}, "specials='odd'"),
        ({"ebits": 11, "mbits": 10, "bias": 0}, "outside float64's range"),
        ({"ebits": 1, "mbits": 3, "bias": 0, "specials": "ieee"}, "needs ebits >= 2"),
        ({"ebits": 4, "mbits": 0, "bias": 7, "specials": "ieee"}, "mbits >= 1"),
    ],
)
def test_bad_custom_formats_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Format("bad", **kwargs)


def test_bad_field_types_are_refused() -> None:
    with pytest.raises(TypeError, match="ebits must be an int"):
        Format("bad", ebits=4.0, mbits=3, bias=7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="subnormals must be a bool"):
        Format("bad", ebits=4, mbits=3, bias=7, subnormals=1)  # type: ignore[arg-type]
