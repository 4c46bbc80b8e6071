"""Shared test configuration: Hypothesis profiles, format parameters, oracle specs."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import reference
from fpemu.formats import FORMATS, Format, get_format

settings.register_profile(
    "ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

#: Every named format of 16 bits or fewer: the ones tests can enumerate exhaustively.
SMALL_FORMATS = [name for name, f in FORMATS.items() if f.bits <= 16]
#: Named formats of at most 8 bits.
TINY_FORMATS = [name for name, f in FORMATS.items() if f.bits <= 8]
#: Deterministic rounding modes.
DET_MODES = ["rne", "rna", "rtz", "rup", "rdown", "rto"]


def spec_of(fmt: str | Format, *, subnormals: bool | None = None) -> reference.Spec:
    """The oracle's description of an fpemu format, built from its defining fields only."""
    f = get_format(fmt)
    return reference.Spec(
        f.ebits, f.mbits, f.bias, f.specials, f.subnormals if subnormals is None else subnormals
    )


@pytest.fixture(params=list(FORMATS), ids=list(FORMATS))
def any_format(request: pytest.FixtureRequest) -> Format:
    return FORMATS[request.param]
