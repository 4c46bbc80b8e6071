"""The float32 fused multiply-add of the op emulations (``fpemu.validate.ops._fma``) and the
LayerNorm Welford step against an exact oracle (``reference.arith.fma``: Fractions, one IEEE
rounding, signed zeros and specials), bit for bit, on every path the fast code takes: the
plain float64 path with its boundary test, the TwoSum repair of inexact boundary sums (and
exact ones left alone), the power-of-two factor path (with underflow and overflow falling
back), the row-blocked path of large arrays, and the scalar path."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpemu.validate.ops import _fma
from fpemu.validate.ops._fma import boundary32, fma32, tree8
from reference.arith import fma as ref_fma
from reference.spec import FLOAT32

U = 2.0**-23


def oracle(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Elementwise exact fma rounded once to float32 (broadcasting the operands)."""
    a, b, c = np.broadcast_arrays(np.float32(a), np.float32(b), np.float32(c))
    out = np.empty(a.shape, np.float32)
    for i in np.ndindex(a.shape):
        out[i] = np.float32(ref_fma(float(a[i]), float(b[i]), float(c[i]), FLOAT32))
    return out


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape and got.dtype == np.float32
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)  # NaN payloads are not part of the contract
    bad = (got.view(np.uint32) != want.view(np.uint32)) & ~nan
    assert not bad.any(), list(zip(got[bad][:5], want[bad][:5], strict=False))


def adversarial() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Triples on every boundary the fast path must see: inexact float64 sums on float32
    midpoints (both signs, odd and even last bits), exact sums on midpoints (few-bit values),
    float32-subnormal results and sums that round into/out of the subnormals, the overflow
    threshold, signed zeros, infinities and NaN."""
    rows: list[tuple[float, float, float]] = []
    k = np.arange(1, 60, dtype=np.float64)
    for kk in k:  # a*b = half an ulp of c minus a sliver: float64 rounds onto the midpoint
        s = -1.0 if kk % 3 == 0 else 1.0
        rows.append((s * (1 + U), 2.0**-24 * (1 - U), s * (1 + kk * U)))
        rows.append((s * (1 + U), -(2.0**-24) * (1 - U), s * (1 + kk * U)))
    for i in range(1, 40):  # exact midpoint sums: c + a/2 with few bits
        rows.append((float(2 * i + 1) * 2.0**-24, 0.5, 1.0 + i * U))
        rows.append((3.0, float(i), -0.5 * i))
    rows += [
        (2.0**-70, 1.5 * 2.0**-70, 2.0**-148),  # subnormal results
        (-(2.0**-75), 2.0**-70, 2.0**-147),
        (3.0, 2.0**-130, 2.0**-149),
        (2.0**-63, 2.0**-63 * (1 + U), -(2.0**-126)),  # cancels into the subnormals
        (1.5 * 2.0**-75, 2.0**-75, 2.0**-150 * 3),  # a float32-subnormal midpoint pattern
        (2.0**127, 1.99999988079071, 2.0**103),  # at the overflow threshold
        (2.0**127, 1.99999988079071, 2.0**103 - 2.0**80),
        (2.0**127, 2.0, 1.0),
        (-0.0, 1.0, 0.0),
        (-0.0, 1.0, -0.0),
        (0.0, -1.0, -0.0),
        (1.0, -1.0, 1.0),  # exact cancellation: +0
        (np.inf, 0.0, 1.0),
        (np.inf, 1.0, -np.inf),
        (np.inf, 2.0, 1.0),
        (np.nan, 1.0, 1.0),
        (1.0, 1.0, np.nan),
    ]
    a, b, c = (np.float32([r[i] for r in rows]) for i in range(3))
    return a, b, c


def test_fma32_adversarial_against_the_exact_oracle() -> None:
    a, b, c = adversarial()
    want = oracle(a, b, c)
    with np.errstate(all="ignore"):
        same_bits(fma32(a, b, c), want)
        # every path: each triple alone (the scalar path), as 0-d arrays
        for i in range(a.size):
            same_bits(fma32(a[i], b[i], c[i]), want[i])


def test_boundary32_flags_midpoints_and_the_subnormal_range_only() -> None:
    s = np.float64([1 + 2.0**-24, 1 + 2.0**-24 + 2.0**-52, 1.0, -(1 + 3 * 2.0**-24),
                    2.0**-127, -(2.0**-140), 0.0, 2.0**-126, np.inf, np.nan,
                    2.0**127 * (2 - 2.0**-24)])  # fmt: skip
    assert boundary32(s).tolist() == [True, False, False, True, True, True, True, False, False,
                                      False, True]  # fmt: skip


def test_fma32_random_and_blocked_paths_match_the_oracle() -> None:
    """Random triples plus the adversarial ones, tiled into an array large enough for the
    row-blocked path (boundary cases land in several blocks); the small-array result, the
    blocked one and the oracle agree bit for bit."""
    g = np.random.default_rng(3)
    a = g.standard_normal(300).astype(np.float32)
    b = g.standard_normal(300).astype(np.float32)
    c = (-(a.astype(np.float64) * b) * (1 + 1e-7 * g.standard_normal(300))).astype(np.float32)
    aa, bb, cc = adversarial()
    a, b, c = np.concatenate([a, aa]), np.concatenate([b, bb]), np.concatenate([c, cc])
    with np.errstate(all="ignore"):
        small = fma32(a, b, c)
        same_bits(small, oracle(a, b, c))
        reps = 2 * _fma._BLOCK // a.size + 3
        big = fma32(np.tile(a, (reps, 1)), np.tile(b, (reps, 1)), np.tile(c, (reps, 1)))
        assert big.size > 2 * _fma._BLOCK
        same_bits(big, np.tile(small, (reps, 1)))
        # broadcast operands on the blocked path: a per-row factor, a per-column addend
        mat, col, row = np.tile(a, (reps, 1)), b[:reps, None], c[None, :]
        same_bits(fma32(col, mat, row), oracle(col, mat, row))


@pytest.mark.parametrize("k", [1.0, 0.5, 2.0**-20, -0.25, 16.0, 2.0**100, 2.0**-149, 2.0**127])
def test_fma32_power_of_two_factor_path(k: float) -> None:
    """A scalar power-of-two factor takes the float32 path unless the product loses bits
    (below the subnormals) or overflows: both must give the exact fma's bits, on either side."""
    g = np.random.default_rng(5)
    a = np.concatenate([g.standard_normal(50), [2.0**-126, 2.0**-140 * 3, -(2.0**-149),
                        3.0 * 2.0**-130, 2.0**100, -(2.0**120), 0.0, -0.0, np.inf, np.nan],
                        np.arange(1, 20) * 2.0**-24]).astype(np.float32)  # fmt: skip
    c = np.concatenate([g.standard_normal(50), [2.0**-149, 0.0, -0.0, 1.0, 2.0**120, -(2.0**127),
                        -0.0, 0.0, 1.0, 1.0], np.full(19, 1.0)]).astype(np.float32)  # fmt: skip
    # targeted: a*k = 2^-150 exactly (float32 would tie it to 0) plus the smallest subnormal
    # is a tie the exact sum rounds up; a*k = 2^128 (overflows in float32) minus 2^127
    extra = [(2.0**-150 / k, 2.0**-149), (-(2.0**-150) / k, -(2.0**-149))]
    if abs(k) >= 2:
        extra.append((2.0**128 / k, -(2.0**127)))
    extra = [(x, y) for x, y in extra if np.float32(x) == x and np.isfinite(np.float32(x))]
    a = np.append(a, np.float32([x for x, _ in extra]))
    c = np.append(c, np.float32([y for _, y in extra]))
    kk = np.float32(k)
    want = oracle(a, kk, c)
    with np.errstate(all="ignore"):
        same_bits(fma32(a, kk, c), want)
        same_bits(fma32(kk, a, c), want)
        same_bits(fma32(a, np.float32([k]), c), want)


finite32 = st.floats(width=32, allow_nan=False, allow_infinity=False)
any32 = st.floats(width=32)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(any32, any32, any32), min_size=1, max_size=24), finite32)
def test_fma32_hypothesis(triples: list[tuple[float, float, float]], k: float) -> None:
    a, b, c = (np.float32([t[i] for t in triples]) for i in range(3))
    with np.errstate(all="ignore"):
        same_bits(fma32(a, b, c), oracle(a, b, c))
        kk = np.float32(k)
        same_bits(fma32(a, kk, c), oracle(a, kk, c))


def test_tree8_lane_zero_equals_the_shuffle_tree() -> None:
    """The SIMD ``vec_reduce_all`` computed for lane 0 only equals the full shuffle tree
    (halves, pairs, neighbours: each lane the sum of all, in its own order)."""
    g = np.random.default_rng(9)
    v = (g.standard_normal((500, 8)) * np.exp2(g.integers(-30, 30, (500, 8)))).astype(np.float32)
    w = v
    for perm in ([4, 5, 6, 7, 0, 1, 2, 3], [2, 3, 0, 1, 6, 7, 4, 5], [1, 0, 3, 2, 5, 4, 7, 6]):
        w = (w + w[:, perm]).astype(np.float32)
    assert np.array_equal(tree8(v, True).view(np.uint32), w[:, 0].view(np.uint32))


def test_welford_step_against_the_exact_oracle() -> None:
    """The fused Welford step (``n1 = fma(delta, c, m1)``, ``n2 = fma(delta, x - n1, m2)``) for
    every step j of a chunk, on few-bit data (exact sums on float32 midpoints), float32-subnormal
    data (``delta * c`` loses bits below the subnormals: ties the float32 path would round
    differently), ordinary data, zeros, inf and NaN."""
    from fpemu.validate.ops._moments import _F, _welford_fused  # noqa: PLC0415

    g = np.random.default_rng(13)
    shape = (16, 6, 1, 8)  # a vector per step
    kinds = [
        g.integers(-8, 9, shape).astype(np.float32) * np.float32(0.5),
        (g.standard_normal(shape) * 2.0**-140).astype(np.float32),
        (g.standard_normal(shape) * 2.0**-120).astype(np.float32),
        g.standard_normal(shape).astype(np.float32),
    ]
    special = g.standard_normal(shape).astype(np.float32)
    special[3, 0, 0, :4] = [np.inf, -np.inf, np.nan, -0.0]
    kinds.append(special)
    with np.errstate(all="ignore"):
        for xs in kinds:
            m1 = np.zeros(shape[1:], np.float32)
            m2 = np.zeros(shape[1:], np.float32)
            for j in range(16):
                x = xs[j]
                delta = x - m1
                c = _F(1) / _F(j + 1)
                n1, n2 = _welford_fused(x, delta, j, m1, m2, np.empty((2, 2, *shape[1:])))
                w1 = oracle(delta, c, m1)
                w2 = oracle(delta, x - w1, m2)
                same_bits(n1, w1)
                same_bits(n2, w2)
                m1, m2 = w1, w2


def test_welford_step_repairs_inexact_midpoints() -> None:
    """Welford steps whose variance sum ``delta * (x - n1) + m2`` is inexact in float64 and
    lands on a float32 midpoint (found by search from the fma family above: plain float64 then
    float32 gives the wrong neighbour for every one of them) equal the exact oracle."""
    from fpemu.validate.ops._moments import _F, _welford_fused  # noqa: PLC0415

    j, c = 2, _F(1) / _F(3)
    cases = []
    for sign in (1.0, -1.0):
        delta = np.float32(sign * (1 + U))
        for m1 in (np.float32(0.0), -np.float32(np.float64(delta) * np.float64(c))):
            n1 = np.float32(ref_fma(float(delta), float(c), float(m1), FLOAT32))
            x = np.float32(float(n1) + 2.0**-24 * (1 - U))
            for _ in range(6):
                t = np.float32(x - n1)
                for k in range(1, 60):
                    for s in (1.0, -1.0):
                        m2 = np.float32(s * (1 + k * U))
                        naive = np.float32(np.float64(delta) * np.float64(t) + np.float64(m2))
                        exact = np.float32(ref_fma(float(delta), float(t), float(m2), FLOAT32))
                        if naive != exact:
                            cases.append((delta, m1, x, m2))
                x = np.nextafter(x, np.float32(np.inf))
    assert len(cases) >= 20
    delta, m1, x, m2 = (np.float32([cc[i] for cc in cases]).reshape(-1, 1, 1) for i in range(4))
    n1, n2 = _welford_fused(x, delta, j, m1, m2, np.empty((2, 2, *x.shape)))
    w1 = oracle(delta, c, m1)
    same_bits(n1, w1)
    same_bits(n2, oracle(delta, x - w1, m2))


def _midpoint_heavy(shape: tuple[int, ...], seed: int) -> tuple[np.ndarray, ...]:
    """bfloat16-valued factors (8-bit significands, like the bench GPT's gradients) and addends:
    many float64 sums are exact and lie on float32 midpoints (flagged, left alone), and a few
    addends are made tiny so that the sums are inexact on a boundary (flagged, repaired); some
    sums round into the float32 subnormals, some are exact zeros (flagged, skipped)."""
    g = np.random.default_rng(seed)

    def bf(x: np.ndarray) -> np.ndarray:  # round to 8 significant bits (bfloat16 values)
        m, e = np.frexp(x)
        return np.ldexp(np.round(m * 256) / 256, e).astype(np.float32)

    a = bf(g.standard_normal(shape))
    b = bf(g.standard_normal(shape))
    c = g.standard_normal(shape).astype(np.float32)
    pick = g.random(shape)
    c[pick < 0.3] = 0.0
    # a (24 bits, odd last bit) * 1.5: a 25-bit product, a float32 midpoint; c a sliver below
    # half a float64 ulp of it, either sign: inexact float64 sums on midpoints
    sliver = pick > 0.9
    odd = (g.integers(2**23, 2**24, sliver.sum()) | 1).astype(np.float64) * 2.0**-23
    a[sliver] = odd.astype(np.float32)
    b[sliver] = np.float32(1.5)
    c[sliver] = (odd * 1.5 * 2.0**-60 * np.where(g.random(sliver.sum()) < 0.5, 1, -1)).astype(
        np.float32
    )
    tiny = (pick > 0.85) & (pick <= 0.9)
    a[tiny] *= np.float32(2.0**-70)
    b[tiny] *= np.float32(2.0**-60)
    zero = (pick > 0.3) & (pick < 0.32)
    c[zero] = -(a[zero] * b[zero])  # exact float32 products (8 x 8 bits): exact zero sums
    return a, b, c


@pytest.mark.parametrize("shape", [(5, 7000), (3, 5, 2300), (40001,), (9000, 2)])
def test_fma32_blocked_path_flags_and_repairs_across_blocks(shape: tuple[int, ...]) -> None:
    """The row-blocked path of large arrays (its buffers serve every block, the flagged elements
    of all blocks are repaired together) against the exact oracle, on data where many sums lie on
    float32 midpoints (exact and inexact), in the subnormals and at zero, in every block and in
    a short last block; also with a scalar (non power of two) factor and with strided
    (non-contiguous) operands."""
    a, b, c = _midpoint_heavy(shape, 21)
    n = a.size
    assert n > _fma._BLOCK
    with np.errstate(all="ignore"):
        s = np.float64(a) * b + c
        assert boundary32(s).sum() > 50  # the case this test is about
        got = fma32(a, b, c)
        # the oracle on a sample (the Fractions are slow) that includes every flagged element
        flagged = np.flatnonzero(boundary32(s))
        g = np.random.default_rng(1)
        idx = np.union1d(flagged, g.choice(n, 2000, replace=False))
        fa, fb, fc = (v.reshape(-1)[idx] for v in (a, b, c))
        want = oracle(fa, fb, fc)
        same_bits(got.reshape(-1)[idx], want)
        # the repair matters here: the plain float64 sum rounded to float32 is wrong somewhere
        assert (s.astype(np.float32).reshape(-1)[idx].view(np.uint32) != want.view(np.uint32)).any()
        # the small path on the same elements agrees too (every element, not a sample)
        flat = fma32(a.reshape(-1)[:_fma._BLOCK], b.reshape(-1)[:_fma._BLOCK],
                     c.reshape(-1)[:_fma._BLOCK])  # fmt: skip
        same_bits(got.reshape(-1)[: _fma._BLOCK], flat)
        # a scalar factor (not a power of two): the product path with one widened scalar
        k = np.float32(0.1)
        got_k = fma32(k, b, c)
        same_bits(got_k.reshape(-1)[idx], oracle(k, fb, fc))
        # strided views: the same values read through other strides
        wide = np.zeros((*shape[:-1], 2 * shape[-1]), np.float32)
        views = []
        for v in (a, b, c):
            w = wide.copy()
            w[..., ::2] = v
            views.append(w[..., ::2])
        assert not views[0].flags.c_contiguous
        same_bits(fma32(*views), got)


def test_fma32_blocked_path_broadcast_transposed_and_empty() -> None:
    """Broadcast operands (a row, a column, a 0-d addend) and a transposed (Fortran-order)
    operand on the blocked path give the oracle's bits; empty arrays give empty float32."""
    a, b, c = _midpoint_heavy((300, 120), 5)
    with np.errstate(all="ignore"):
        col, row = b[:, :1], c[:1, :]
        got = fma32(a, col, row)
        assert a.size > _fma._BLOCK
        idx = np.random.default_rng(2).choice(a.size, 1500, replace=False)
        A, C, R = np.broadcast_arrays(a, col, row)
        same_bits(got.reshape(-1)[idx], oracle(A.reshape(-1)[idx], C.reshape(-1)[idx],
                                              R.reshape(-1)[idx]))  # fmt: skip
        t = np.asfortranarray(a)
        same_bits(fma32(t, b, c), fma32(a, b, c))
        same_bits(fma32(a, b, np.float32(0.5))[:2], oracle(a[:2], b[:2], np.float32(0.5)))
        for shape in [(0, 3), (3, 0), (0,)]:
            e = np.zeros(shape, np.float32)
            r = fma32(e, e, e)
            assert r.shape == shape and r.dtype == np.float32


def test_repair32_fixes_inexact_boundary_sums_and_skips_zeros() -> None:
    """repair32 (used by the Welford and LayerNorm paths) with an exact float64 product ``p``:
    zeros and exact sums among the flagged elements stay, inexact ones get the single rounding."""
    from fpemu.validate.ops._fma import repair32  # noqa: PLC0415

    # (1+U) * 2^-24 (1-U) = 2^-24 - 2^-70: below the midpoint 1+5U + 2^-24, which float64
    # rounds onto and float32 would tie up to the even 1+6U; exact sums; a zero; the subnormals
    a = np.float32([1 + U, -(1 + U), 3.0, 0.0, 1.0, 2.0**-70, 1 + U])
    b = np.float32([2.0**-24 * (1 - U), 2.0**-24 * (1 - U), 1.0, 5.0, -1.0, 2.0**-70, 1.5])
    c = np.float32([1 + 5 * U, -(1 + 5 * U), -0.5, 0.0, 1.0, 2.0**-149, -(2.0**-100)])
    p = np.float64(a) * b
    want = oracle(a, b, c)
    with np.errstate(all="ignore"):
        s = p + c
        out = s.astype(np.float32)
        wrong = out.view(np.uint32) != want.view(np.uint32)
        assert wrong.sum() == 3  # the two inexact midpoints, and 1.5 (1+U) - 2^-100
        repair32(out, p, c, s, np.ones(s.shape, bool))
    same_bits(out, want)


def _boundary_cases() -> np.ndarray:
    """float64 sums at and next to every kind of float32 boundary: midpoints (exact and one
    float64 ulp off), the subnormal range (zeros, both ends, a value rounding up to 2**-126),
    normal values, inf, NaN."""
    mids = np.float64([1 + 2.0**-24, -(1 + 3 * 2.0**-24), 2.0**127 * (2 - 2.0**-24),
                       2.0**-126 * (1 + 2.0**-24)])  # fmt: skip
    tiny = np.float64([2.0**-127, -(2.0**-140), 2.0**-149, 2.0**-150, 2.0**-126 * (1 - 2.0**-30),
                       -(2.0**-126) * (1 - 2.0**-25), 0.0, -0.0])  # fmt: skip
    plain = np.float64([1.0, 2.0**-126, -(2.0**-125), 3.5, 1e30, np.inf, -np.inf, np.nan])
    return np.concatenate([mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), tiny,
                           plain])  # fmt: skip


def test_boundary_into_equals_boundary32() -> None:
    """The buffered test of fma32's paths flags what boundary32 flags, wherever the elements
    sit: the subnormal-range test runs when any float32 rounding is at most 2**-126, also
    beside NaN (which ``min`` would propagate); without such a rounding there is nothing in
    the range. Each case alone among normal numbers, all together, and NaN with each tiny one."""
    cases = _boundary_cases()
    filler = np.full(37, 1.5)

    def check(s: np.ndarray) -> None:
        with np.errstate(all="ignore"):
            out = s.astype(np.float32)
        flag = np.empty(s.shape, bool)
        got = _fma._boundary_into(s, out, flag, np.empty(s.shape, np.uint64),
                                  np.empty(s.shape, np.float32))  # fmt: skip
        want = boundary32(s)
        assert np.array_equal(flag, want), (s[flag != want], flag[flag != want])
        assert got == bool(want.any())

    check(cases)
    check(cases.reshape(-1, 2).T.copy())
    for x in cases:
        check(np.concatenate([filler, [x]]))
        check(np.concatenate([[np.nan], filler, [x]]))  # NaN first: min would be NaN
    check(filler)


def test_fma32_flags_tiny_sums_beside_nan() -> None:
    """A NaN element and a sum in the float32 subnormal range that needs the repair, on the
    small and the blocked path: the repair still happens (the oracle's bits)."""
    # (1+U) 2^-75 * (1-U) 2^-75 = 2^-150 - 2^-196; plus 513 * 2^-149: below the subnormal
    # midpoint 513.5 * 2^-149, where the float64 sum lands (its ulp there is 2^-192) and
    # float32 would tie to the even 514 * 2^-149
    a = np.float32([np.nan, (1 + U) * 2.0**-75, 2.0, 1.0])
    b = np.float32([1.0, (1 - U) * 2.0**-75, 3.0, 1.0])
    c = np.float32([1.0, 513 * 2.0**-149, 0.5, 0.25])
    with np.errstate(all="ignore"):
        want = oracle(a, b, c)
        assert float(want[1]) == 513 * 2.0**-149
        assert float(np.float32(np.float64(a[1]) * b[1] + c[1])) == 514 * 2.0**-149
        same_bits(fma32(a, b, c), want)
        big = [np.tile(v, 5000).reshape(50, 400) for v in (a, b, c)]
        same_bits(fma32(*big), np.tile(want, 5000).reshape(50, 400))
