"""The op table's visible roundings (fpemu.validate.ops._num.to): float32 to bfloat16/float16 by
ml_dtypes'/NumPy's casts, and float64 to bfloat16/float16 by to's fast path (bfloat16 through
float32 with its midpoints redone, float16 by NumPy's cast), checked against fpemu.round and
the exact reference."""

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


def _float64_traps(name: str) -> np.ndarray:
    """float64 values where a double rounding through float32 goes wrong or nearly: every
    midpoint of the 16-bit format (subnormal ones and the overflow threshold included) and its
    float64 neighbours one and two ulps away (which round to the midpoint in float32), every
    value of the format, the float32 neighbours of both, beyond float32's range and below its
    smallest subnormal, and the specials."""
    words = np.arange(1 << 16, dtype=np.uint32)
    exp = 0x7F80 if name == "bfloat16" else 0x7C00
    words = words[(words & exp) != exp].astype(np.uint16)  # finite values only
    v = np.unique(words.view(_NP[name]).astype(np.float64))
    top = float(v[-1])
    half_ulp = 2.0**119 if name == "bfloat16" else 16.0
    mids = np.concatenate([(v[:-1] + v[1:]) / 2, [top + half_ulp, -(top + half_ulp)]])
    base = np.concatenate([v, mids])
    out = [base]
    for k in (1, 2):
        for side in (np.inf, -np.inf):
            x = base.copy()
            for _ in range(k):
                x = np.nextafter(x, side)
            out.append(x)
    for side in (np.inf, -np.inf):  # float32 neighbours
        out.append(np.nextafter(base.astype(np.float32), np.float32(side)).astype(np.float64))
    tiny = 2.0**-150  # half the smallest float32 subnormal
    out.append(np.float64([np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 3.5e38, -1e300, 1e300,
                           tiny, -tiny, np.nextafter(tiny, 1.0), np.nextafter(tiny, 0.0), 1e-46,
                           2.0**-149 * 1.5, 3.4028235e38, 3.4028236e38]))  # fmt: skip
    return np.concatenate(out)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_to_from_float64_equals_round_on_ties_and_neighbours(name: str) -> None:
    """to from float64 (bfloat16: double rounding through float32 with its midpoints redone;
    float16: NumPy's float64 cast) gives, bit for bit, fpemu.round's direct rounding of the
    float64 value, and the exact reference on a sample (and on every element where the double
    rounding through float32 would be wrong)."""
    x = _float64_traps(name)
    with np.errstate(all="ignore"):
        got = to(x, name)
        want = np.asarray(fround(x, name)).astype(_NP[name])
        naive = x.astype(np.float32).astype(_NP[name])
    assert got.dtype == _NP[name] and got.shape == x.shape
    assert (got.view(np.uint16) == want.view(np.uint16)).all()  # NaN bits too
    wrong = np.flatnonzero(naive.view(np.uint16) != want.view(np.uint16))
    assert wrong.size > 1000  # the traps do trap the naive double rounding
    spec = {"bfloat16": BFLOAT16, "float16": FLOAT16}[name]
    rng = np.random.default_rng(1)
    finite = np.flatnonzero(np.isfinite(x))
    for i in np.concatenate([wrong[::3], rng.choice(finite, 3000, replace=False)]).tolist():
        r = float(np.asarray(got[i]).astype(np.float64))
        assert r == round_float(float(x[i]), spec, "rne") or (r == 0 == x[i]), x[i]


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_to_from_float64_shapes_and_nan(name: str) -> None:
    """Any shape (0-d, strided views) and NaN: fpemu.round's bits; float32 input and float32
    output keep their own paths."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 6, 5)) * 2.0 ** rng.integers(-140, 130, (4, 6, 5))
    x[1, 2, 3] = 1 + 2**-8 + 2**-40  # rounds to the midpoint 1 + 2^-8 in float32
    x[1, 2, 4] = 1 + 2**-11 + 2**-40  # float16's
    x[2, 0, 0], x[3, 1, 1] = np.nan, -np.nan
    for a in (x, x[:, ::2].swapaxes(0, 2), x[1, 2, 3], x[2, 0, 0], np.float64(0.1)):
        with np.errstate(all="ignore"):
            got = to(a, name)
            want = np.asarray(fround(np.asarray(a, np.float64), name)).astype(_NP[name])
        assert got.shape == np.shape(a) and got.dtype == want.dtype
        assert (np.asarray(got).view(np.uint16) == np.asarray(want).view(np.uint16)).all()
    with np.errstate(all="ignore"):
        got, want = to(x, "float32"), x.astype(np.float32)
    assert (got.view(np.uint32) == want.view(np.uint32)).all() and got.dtype == want.dtype
    assert to(x.astype(np.float32), name).dtype == _NP[name]


@pytest.mark.parametrize("name", ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn"])
def test_ulp_is_the_spacing_of_the_binade(name: str) -> None:
    """ulp(v) = 2**(floor(log2 |v|) - mbits), at least the subnormal spacing, checked against
    frexp/ldexp (the definition) on random magnitudes, powers of two and their neighbours,
    zeros, the format's tiny and subnormal values, infinities and NaN."""
    from fpemu.validate.ops._num import _EMIN, _MBITS, ulp  # noqa: PLC0415

    rng = np.random.default_rng(4)
    v = rng.standard_normal(5000) * 2.0 ** rng.integers(-1074, 1023, 5000).astype(np.float64)
    twos = 2.0 ** np.arange(-1074, 1024, dtype=np.float64)
    v = np.concatenate([v, twos, np.nextafter(twos, 0), np.nextafter(twos, np.inf), -twos,
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324]])  # fmt: skip
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.ldexp(1.0, np.frexp(np.maximum(np.abs(v), 2.0 ** _EMIN[name]))[1] - 1
                        - _MBITS[name])  # fmt: skip
        got = ulp(v, name)
    assert got.dtype == np.float64 and got.shape == v.shape
    assert (got.view(np.uint64) == want.view(np.uint64)).all()
    assert float(ulp(np.float64(1.0), name)) == 2.0 ** -_MBITS[name]


@pytest.mark.parametrize("name", ["float64", "float32", "float16", "bfloat16", "float8_e4m3fn"])
def test_max_ulps_is_the_largest_distance_in_ulps_of_the_smaller(name: str) -> None:
    """``max_ulps(a, b)`` equals ``max(|a - b| / ulp(min(|a|, |b|)))`` by frexp/ldexp (inf where
    a term is NaN), on pairs of the format's values: neighbours, values binades apart, signs
    crossing zero, subnormals, zeros and infinities, and with a NaN among them."""
    from fpemu.validate.ops._num import _EMIN, _MBITS, max_ulps  # noqa: PLC0415

    rng = np.random.default_rng(5)
    dt = {"bfloat16": ml_dtypes.bfloat16, "float8_e4m3fn": ml_dtypes.float8_e4m3fn}.get(
        name, np.dtype(name)
    )
    top = {"float64": 1020, "float32": 126, "float16": 14, "bfloat16": 126}.get(name, 7)
    a = (rng.standard_normal(4000) * 2.0 ** rng.integers(-top - 10, top, 4000)).astype(dt)
    near = a.astype(np.float64) * (1 + rng.integers(-3, 4, 4000) * 2.0 ** -_MBITS[name])
    far = (rng.standard_normal(4000) * 2.0 ** rng.integers(-top - 10, top, 4000))
    specials = [0.0, -0.0, np.inf, -np.inf, 2.0 ** _EMIN[name], -(2.0 ** _EMIN[name])]
    a64 = np.concatenate([a.astype(np.float64), specials])
    for other in (near, far):
        b64 = np.concatenate([other.astype(dt).astype(np.float64), specials[::-1]])
        keep = ~(np.isinf(a64) & np.isinf(b64) & (a64 == b64))  # the judge drops equal bits
        x, y = a64[keep], b64[keep]
        with np.errstate(all="ignore"):
            m = np.maximum(np.minimum(np.abs(x), np.abs(y)), 2.0 ** _EMIN[name])
            u = np.ldexp(1.0, np.frexp(m)[1] - 1 - _MBITS[name])
            u = np.where(np.isfinite(m), u, 2.0 ** (-1 - _MBITS[name]))
            terms = np.abs(x - y) / u
        want = float("inf") if np.isnan(terms).any() else float(terms.max())
        assert max_ulps(x, y, name) == want
        with_nan = np.append(x, np.nan), np.append(y, 1.0)
        assert max_ulps(*with_nan, name) == float("inf")
    assert max_ulps(np.array([]), np.array([]), name) == 0.0
