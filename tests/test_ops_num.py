"""The op table's visible roundings (fpemu.validate.ops._num.to): float32 to bfloat16/float16 by
ml_dtypes'/NumPy's casts, checked against fpemu.round and the exact reference."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpemu.rounding import round as fround
from fpemu.validate.ops._num import to
from reference.rounding import round_float
from reference.spec import BFLOAT16, FLOAT16

_NP = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16}


def _ties_and_neighbours(name: str) -> np.ndarray:
    """Every 16-bit value, every midpoint between neighbours (a tie, exact in float32) and the
    float32 values one and two ulps either side of each, plus specials."""
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(_NP[name])
    v = codes.astype(np.float32)
    v = v[np.isfinite(v)]
    v = np.unique(v)
    mids = (v[:-1].astype(np.float64) / 2 + v[1:].astype(np.float64) / 2).astype(np.float32)
    base = np.concatenate([v, mids])
    out = [base]
    for k in (1, 2):
        up, down = base.copy(), base.copy()
        for _ in range(k):
            up = np.nextafter(up, np.float32(np.inf))
            down = np.nextafter(down, np.float32(-np.inf))
        out += [up, down]
    out.append(np.float32([np.inf, -np.inf, np.nan, 0.0, -0.0, 3.4e38, -3.4e38, 1e-45, 7e4, 6.6e4]))
    return np.concatenate(out)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_float32_to_16_bit_is_round_to_nearest_even(name: str) -> None:
    x = _ties_and_neighbours(name)
    with np.errstate(all="ignore"):
        got = to(x, name)
        want = np.asarray(fround(x.astype(np.float64), name)).astype(_NP[name])
    assert got.dtype == _NP[name]
    same = (got.view(np.uint16) == want.view(np.uint16)) | (
        np.isnan(got.astype(np.float32)) & np.isnan(want.astype(np.float32))
    )
    assert same.all(), x[~same][:5]
    # and against the exact scalar reference on a sample (no fpemu code)
    spec = {"bfloat16": BFLOAT16, "float16": FLOAT16}[name]
    rng = np.random.default_rng(0)
    finite = x[np.isfinite(x)]
    for v in rng.choice(finite, 3000, replace=False).tolist():
        r = float(np.asarray(to(np.float32([v]), name)).astype(np.float64)[0])
        assert r == round_float(v, spec, "rne"), v
