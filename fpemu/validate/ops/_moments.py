"""torch's CPU ``RowwiseMoments`` (``moments_utils.h``), the mean and variance of
``native_layer_norm``, in its float32 operation order (see :mod:`fpemu.validate.ops.norms` for
the kernel's description and the tests that prove bit equality on every capability).

The fused (SIMD) build's multiply-adds are single roundings (:func:`fpemu.validate.ops._fma.fma32`
semantics); the Welford steps of every chunk and lane run as whole-array NumPy calls, with the
float32 rounding-boundary test of both sums of a step in one pass.

>>> import numpy as np
>>> m, v = row_moments(np.float32([[1, 2, 3, 4]]), low=False, capability="avx2")
>>> m.tolist(), v.tolist()
([2.5], [1.25])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.validate.ops._fma import boundary32, mad, repair32, sum32

__all__ = ["row_moments"]

_F = np.float32
_LANES = 8  # float32 lanes of the Vectorized accumulators (measured on avx512, avx2, default)
_CHUNK = 16  # kChunkSize in moments_utils.h


def _ceil_log2(m: int) -> int:
    return 1 if m <= 2 else (m - 1).bit_length()


def _add_vec(m0a: int, m1a: np.ndarray, m2a: np.ndarray, st: list[Any], fused: bool) -> None:
    """``AddMomentsVec``: merge (m0a, m1a, m2a) into the stack entry ``st`` in place."""
    n = st[0] + m0a
    c = _F(0) if n == 0 else _F(m0a) / _F(n)
    delta = (m1a - st[1]).astype(_F)
    m2_tmp = (st[2] + m2a).astype(_F)
    c_delta = (c * delta).astype(_F)
    m0_delta = (delta * _F(st[0])).astype(_F)
    st[1] = (st[1] + c_delta).astype(_F)
    # an empty entry (st[0] = 0) makes m0_delta a zero (or NaN): its product is exact, so the
    # unfused sum is the fused one, without fma32's float64 pass
    st[2] = mad(m0_delta, c_delta, m2_tmp, fused=fused and st[0] != 0)
    st[0] = n


def _lane_means(lanes: np.ndarray, m1: np.ndarray, cs: np.ndarray, deltas: np.ndarray,
                fused: bool) -> np.ndarray:  # fmt: skip
    """The mean recurrence of ``AddMoments`` over the 8 lanes: ``m1 = fma(c, lanes[:, l] - m1,
    m1)`` lane by lane (``deltas[:, l]`` receives each delta). Fused, each lane costs five
    NumPy calls: the product is exact in float64 and the float64 sum rounded to float32 is the
    fused result unless it lies on a float32 rounding boundary; the boundary test of all lanes
    runs once afterwards (TwoSum at the nonzero boundary sums), and from the first lane with an
    inexact boundary sum on, the lanes are redone by :func:`mad` (round to odd)."""
    if not fused:
        for lane in range(_LANES):
            deltas[:, lane] = lanes[:, lane] - m1
            m1 = mad(cs[lane], deltas[:, lane], m1, fused=False)
        return m1
    rows = len(m1)
    before = np.empty((_LANES, rows), _F)
    prods, sums = np.empty((_LANES, rows)), np.empty((_LANES, rows))
    for lane in range(_LANES):
        before[lane] = m1
        deltas[:, lane] = lanes[:, lane] - m1
        np.multiply(deltas[:, lane], np.float64(cs[lane]), out=prods[lane])  # delta * c: exact
        np.add(prods[lane], m1, out=sums[lane])
        m1 = sums[lane].astype(_F)
    risky = boundary32(sums)
    if not risky.any():
        return m1
    at = np.nonzero(risky & (sums != 0))  # a zero sum is exact
    ps, ss, cc = prods[at], sums[at], before[at].astype(np.float64)
    bb = ss - ps
    err = (ps - (ss - bb)) + (cc - bb)
    bad = at[0][(err != 0) & np.isfinite(err)]
    if not bad.size:
        return m1
    m1 = before[bad.min()]
    for lane in range(int(bad.min()), _LANES):
        deltas[:, lane] = lanes[:, lane] - m1
        m1 = mad(cs[lane], deltas[:, lane], m1, fused=True)
    return m1


def _chunk_welford(v: np.ndarray, counts: np.ndarray, fused: bool) -> tuple[Any, Any]:
    """Welford over the vectors of every chunk at once: ``v`` is (M, chunks, 16, 8)."""
    rows, chunks = v.shape[0], v.shape[1]
    m1 = np.zeros((rows, chunks, _LANES), _F)
    m2 = np.zeros((rows, chunks, _LANES), _F)
    xs = np.ascontiguousarray(v.transpose(2, 0, 1, 3))  # vector j of every chunk: contiguous
    buf = np.empty((2, 2, *m1.shape))  # both products and sums of a step (float64)
    full, longest = int(counts.min()), int(counts.max())  # steps every chunk / some chunk has
    for j in range(longest):
        x = xs[j]
        delta = x - m1
        # float32: fmadd(c, delta, m1); bf16/fp16: fmadd(delta, c, m1) (same value). Step 0
        # (m1 = m2 = 0, c = 1) multiplies exactly (delta * 1, and delta * (x - n1), a zero or
        # NaN), so its unfused sums are the fused ones
        if fused and j:
            n1, n2 = _welford_fused(x, delta, j, m1, m2, buf)
        else:
            c = _F(1) / _F(j + 1)
            n1 = mad(delta, c, m1, fused=False)
            n2 = mad(delta, x - n1, m2, fused=False)
        if j < full:  # every chunk still has a vector j (all but a short last chunk)
            m1, m2 = n1, n2
        else:
            act = (j < counts)[None, :, None]
            m1 = np.where(act, n1, m1)
            m2 = np.where(act, n2, m2)
    return m1, m2


def _welford_fused(x: np.ndarray, delta: np.ndarray, j: int, m1: np.ndarray, m2: np.ndarray,
                   buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Fused Welford step ``j``: ``n1 = fma(delta, c, m1)`` (c = float32(1/(j+1))), ``n2 =
    fma(delta, x - n1, m2)``, rounded as :func:`sum32` rounds them: the products are exact in
    float64, and a float64 sum rounded to float32 is the fused result unless it lies on a float32
    rounding boundary; where one shows up :func:`repair32` fixes the inexact ones (and ``n2`` is
    recomputed if a repaired ``n1`` changed). With ``c`` a power of two, ``delta * c`` is exact
    in float32 unless it underflows (checked: scaling back gives ``delta``), so ``n1`` is then
    the float32 sum ``m1 + delta * c``, correctly rounded (and exact sums on float32 midpoints,
    common there, need no test). ``buf``: (2, 2, *x.shape) float64 scratch (products, sums)."""
    c = _F(1) / _F(j + 1)
    d64 = delta.astype(np.float64)
    prods, sums = buf[0], buf[1]
    n1 = None
    if (j + 1) & j == 0:  # c = 2^-k
        q = delta * c
        if np.array_equal(q * _F(j + 1), delta):  # no bits lost (NaN deltas: general path)
            n1 = m1 + q
    if n1 is None:
        np.multiply(d64, np.float64(c), out=prods[0])
        np.add(prods[0], m1, out=sums[0])
        n1 = sums[0].astype(_F)
        test = sums
    else:
        test = sums[1]
    np.multiply(d64, x - n1, out=prods[1])
    np.add(prods[1], m2, out=sums[1])
    risky = boundary32(test)
    if risky.any():  # zero sums are exact (step 0's m2 sums all are): no repair to look at
        risky &= test != 0
    if not risky.any():
        return n1, sums[1].astype(_F)
    if test is sums:
        out = sums.astype(_F)
        repair32(out, prods, np.stack([m1, m2]), sums, risky)
        if not np.array_equal(out[0].view(np.uint32), n1.view(np.uint32)):
            return out[0], sum32(d64 * (x - out[0]), m2)
        return out[0], out[1]
    n2 = sums[1].astype(_F)
    repair32(n2, prods[1], m2, sums[1], risky)
    return n1, n2


def row_moments(x: np.ndarray, *, low: bool, capability: str, tail_fused: bool | None = None,
                ddof: int = 0) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """torch's ``RowwiseMoments`` of every row of ``x`` (float32 (M, N)): (mean, variance).

    ``low``: the input was bfloat16/float16 (16-element vectors split into two float halves).
    ``tail_fused``: whether the scalar tail loop fuses ``m2 += delta * (x - m1)`` (default:
    never; layer norm's float16 instantiation does on the SIMD builds).

    >>> m, v = row_moments(np.float32([[1, 2, 3, 4, 5, 6, 7, 8, 9]]), low=False,
    ...                    capability="avx2")
    >>> m.tolist(), v.tolist()  # the variance is one ulp above float32(20/3): Welford's roundings
    ([5.0], [6.6666669845581055])
    """
    with np.errstate(all="ignore"):  # inf/NaN rows propagate as in the kernel
        return _row_moments(x, low, capability != "default", bool(tail_fused), ddof)


def _row_moments(x: np.ndarray, low: bool, fused: bool, tail_fused: bool,
                 ddof: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    tfused = fused and tail_fused
    rows, cols = x.shape
    vec = 2 * _LANES if low else _LANES
    n = cols // vec
    m = -(-n // _CHUNK)
    depth = _ceil_log2(m)
    zero = np.zeros((rows, _LANES), _F)
    stk: list[list[Any]] = [[0, zero, zero] for _ in range(max(depth, 1))]
    if n:
        if m * _CHUNK * vec == cols:  # whole chunks: a view (the Welford step copies per j)
            body = np.asarray(x, _F)
        else:
            body = np.zeros((rows, m * _CHUNK * vec), _F)
            body[:, : n * vec] = x[:, : n * vec]
        body4 = body.reshape(rows, m, _CHUNK, vec)
        counts = np.minimum(_CHUNK, n - _CHUNK * np.arange(m))
        if low:  # both halves of each 16-element vector in one pass (rows stacked)
            both = np.concatenate([body4[..., :_LANES], body4[..., _LANES:]], axis=0)
            m1b, m2b = _chunk_welford(both, counts, fused)
            parts = [(m1b[:rows], m2b[:rows]), (m1b[rows:], m2b[rows:])]
        else:
            parts = [_chunk_welford(body4, counts, fused)]
        for i in range(m):
            for m1c, m2c in parts:
                _add_vec(int(counts[i]), m1c[:, i], m2c[:, i], stk[0], fused)
            mask, j = i + 1, 1
            while j < depth and (mask & 1) == 0:
                _add_vec(stk[j - 1][0], stk[j - 1][1], stk[j - 1][2], stk[j], fused)
                stk[j - 1] = [0, zero, zero]
                mask >>= 1
                j += 1
        for i in range(1, depth):
            _add_vec(stk[i][0], stk[i][1], stk[i][2], stk[0], fused)
    c0 = 0
    m1 = np.zeros(rows, _F)
    m2 = np.zeros(rows, _F)
    for i in range(n * vec, cols):
        xi = x[:, i]
        delta = (xi - m1).astype(_F)
        c0 += 1
        m1 = (m1 + (delta / _F(c0)).astype(_F)).astype(_F)
        m2 = mad(delta, (xi - m1).astype(_F), m2, fused=tfused)
    # AddMoments of each lane in turn: the mean recurrence runs lane by lane; the variance
    # terms fma(delta^2 c, c0, m2a) depend only on it, so they are formed for all lanes at once
    # and summed into m2 in lane order (accumulate: sequential float32 additions)
    m0_add = n * vec // _LANES
    deltas = np.empty((rows, _LANES), _F)
    cs, c0s = np.zeros(_LANES, _F), np.zeros(_LANES, _F)
    for lane in range(_LANES):
        tot = c0 + m0_add
        cs[lane] = _F(0) if tot == 0 else _F(m0_add) / _F(tot)
        c0s[lane] = c0
        c0 = tot
    m1 = _lane_means(stk[0][1], np.asarray(m1, _F), cs, deltas, fused)
    t = (deltas * deltas) * cs  # float32: two roundings, as per lane
    q = mad(t, c0s, stk[0][2], fused=fused)
    m2 = np.add.accumulate(np.concatenate([np.asarray(m2, _F)[:, None], q], axis=1), axis=1)
    return m1, (m2[:, -1] / _F(cols - ddof)).astype(_F)
