"""Test helpers: vectorised calls of the scalar oracle, and bitwise comparison."""

from __future__ import annotations

from typing import Any

import numpy as np

import reference
import reference.bits
from tests.conftest import spec_of


def oracle_round(points: Any, fmt: Any, mode: str, **kw: Any) -> np.ndarray:
    """reference.round_float applied to every element (float64 result)."""
    spec = spec_of(fmt, subnormals=kw.pop("subnormals", None))
    pts = np.asarray(points, dtype=np.float64).reshape(-1)
    return np.array([reference.round_float(float(p), spec, mode, **kw) for p in pts])


def oracle_values(fmt: Any) -> np.ndarray:
    """Every finite value of a small format, increasing, decoded by the oracle (not by fpemu)."""
    spec = spec_of(fmt)
    vals = {reference.bits.decode(c, spec) for c in range(2 ** (1 + spec.ebits + spec.mbits))}
    return np.array(sorted(v for v in vals if np.isfinite(v)))


def probe_points(fmt: Any, *, stride: int = 1) -> np.ndarray:
    """Values, midpoints between neighbours, their float64 neighbours, and points past max."""
    v = oracle_values(fmt)[::stride]
    mids = (v[:-1] + v[1:]) / 2  # exact in float64 for formats of <= 16 bits
    top = v[-1]
    gap = top - v[-2] if stride == 1 else top - oracle_values(fmt)[-2]
    extra = np.array([top + gap / 2, top + gap, 2 * top, 1e300, np.inf, np.nan])
    base = np.concatenate([v, mids, extra, -extra])
    return np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf)])


def same_bits(a: Any, b: Any) -> np.ndarray:
    """Elementwise: identical float64 bit patterns, or both NaN."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a64.view(np.uint64) == b64.view(np.uint64)) | (np.isnan(a64) & np.isnan(b64))


def assert_same_bits(actual: Any, desired: Any, inputs: Any = None) -> None:
    """Fail with the first few differing elements shown in value and hex."""
    ok = same_bits(actual, desired)
    if ok.all():
        return
    idx = np.flatnonzero(~ok.reshape(-1))[:5]
    a, d = np.asarray(actual, np.float64).reshape(-1), np.asarray(desired, np.float64).reshape(-1)
    x = None if inputs is None else np.asarray(inputs, np.float64).reshape(-1)
    rows = [
        ("" if x is None else f"  [{i}] input={x[i]!r} ") + f"got {a[i]!r} ({a[i].hex()}) "
        f"want {d[i]!r} ({d[i].hex()})"
        for i in idx
    ]
    raise AssertionError(f"{(~ok).sum()} of {ok.size} differ:\n" + "\n".join(rows))
