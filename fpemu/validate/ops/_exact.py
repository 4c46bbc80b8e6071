"""The exact dot product rounded once to float32 (``emulate``'s ``model="fast"``): a float64 BLAS
GEMM where it is provably exact (:func:`exact32`'s grid test) or a derived bound proves its
float32 rounding, a vectorised exact summation elsewhere.

The exact path splits each dot product's terms as Rump, Ogita and Oishi's ``ExtractVector``
does ("Accurate floating-point summation part I", SIAM J. Sci. Comput. 31(1), 2008, Alg. 3.2):
for a row of ``n`` float64 terms ``p`` with ``max |p| < 2**e`` and ``sigma = 2**(e + M)``,
``2**M > n``, ``q = fl(fl(sigma + p) - sigma)`` and ``r = fl(p - q)``. Then (proof below, no
underflow or overflow in our range)

* ``fl(sigma + p)`` lies in ``[sigma/2, 3 sigma/2]`` (``|p| <= sigma/2``), where float64's
  spacing is ``eps sigma`` or ``2 eps sigma`` (``eps = 2**-53``); so ``q`` is that value minus
  ``sigma``, exactly (Sterbenz), a multiple of ``eps sigma``, and ``|q - p| <= eps sigma``;
* ``r = p - q`` exactly: it is the rounding error of ``fl(sigma + p)``, always representable;
* every partial sum of the ``q`` (any order, NumPy's pairwise one included) is a multiple of
  ``eps sigma`` of magnitude at most ``n (2**-M + eps) sigma <= sigma``, so it is exact: the
  row's ``tau = sum q`` is exact, and ``sum p = tau + sum r`` with ``|r| <= eps sigma``
  (``n eps <= 2**-M`` needs ``M <= 26``: longer rows are taken in chunks of ``2**20``).

A row stops as soon as its float32 rounding is decided (:func:`_rounds`). Repeating on ``r``
shrinks its magnitude by ``2**(52 - M)`` a round; the terms are multiples of a fixed power of
two (``2**-298`` for products of float32 values), so the remainders reach zero after a few
rounds, and the row's exact sum is the sum of its few ``tau``. :func:`math.fsum` of those is
RN64 of the exact sum; a float32 tie of that float64 value is broken by the sign of the exact
residual (double rounding can differ only there: float32's midpoints are float64 values, and
RN64 keeps the exact sum on its side of one).

>>> x = np.float32([[2.0**24, 1.0, 1.0]]); y = np.float32([[1.0], [1.0], [1.0]])
>>> float(exact32(x, y)[0, 0]) == 2.0**24 + 2  # a float32 chain would give 2**24
True
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

__all__ = ["exact32", "exact_sums32"]

U64 = 2.0**-53
#: the most terms one extraction takes (2**M > n with M <= 26 keeps n eps <= 2**-M)
_CHUNK = 1 << 20


def _gamma(n: int, u: float) -> float:
    return n * u / (1.0 - n * u)


def exact32(a: Any, b: Any, c: Any = None) -> np.ndarray:
    """``RN32(c + sum_k a[..., i, k] b[..., k, j])``: the exact sum rounded once to float32.

    ``a``, ``b`` and ``c`` (broadcast to the result) hold float32 values (float16, bfloat16,
    float32 data; a format's precision is read from the dtype, 24 bits otherwise), so each
    product is exact in float64 (at most 48 significant bits, exponents within float64's
    range). ``s`` is a float64 BLAS GEMM of them (a bias ``c``, constant along the rows of a 2-D
    product, is folded in: a column of ones in ``a``, ``c`` as a row of ``b``). Each element is
    then decided by the first of three tests that applies:

    1. **grid**: every product of row ``i`` and column ``j`` is a multiple of
       ``2**(qa_i + qb_j)`` (:func:`_grid`); every partial sum, in any order, is a multiple of
       it of magnitude at most ``m = sum |terms|``: ``s`` is exact when
       ``m <= 2**(53 + qa_i + qb_j)``, and ``RN32(s)`` is the result (ties included);
    2. **bound**: ``s`` lies within ``gamma_(K+1) m`` of the exact sum in any order (Higham
       3.5, the products being exact); where ``RN32`` of both ends of that interval agree (the
       round-to-nearest map is monotone), that is the result whatever order BLAS took;
    3. **exact**: the rest is recomputed exactly (:func:`exact_sums32`).

    ``m`` is bounded from above by ``min(rowsum |a| colmax |b|, rowmax |a| colsum |b|)`` (no
    second GEMM; a looser bound only sends more elements to a later test, never changes a
    value). A sum that is exactly zero is +0 (an accumulator from +0) unless ``c`` is -0 and
    every product is -0 (decided exactly). Non-finite results (inf/NaN inputs) come from
    NumPy's einsum without BLAS: IEEE sums of infinities and NaNs do not depend on the order
    (no finite float64 sum of these products overflows); NaN is float32's default NaN.

    >>> x = np.float32([[1.0, 2.0**-24, 2.0**-80]]); y = np.float32([[1.0], [1.0], [1.0]])
    >>> float(exact32(x, y)[0, 0]) == 1 + 2.0**-23  # float64 gives the tie 1 + 2**-24
    True
    """
    a, b = np.asarray(a), np.asarray(b)
    pa, pb = _PREC.get(a.dtype, 24), _PREC.get(b.dtype, 24)
    # contiguous operands: NumPy's matmul takes its BLAS path (strided batches do not)
    a32, b32 = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    signed_zero = c is not None
    if c is not None and a.ndim == 2 and b.ndim == 2 and np.ndim(c) <= 1 and np.size(c) > 0:
        # a bias: one more term per dot product (1 * c_j); a coarser format's values lie on
        # a finer format's grid, so the column takes the finer precision of b and c
        n = b32.shape[-1]
        a32 = np.concatenate([a32, np.ones((a32.shape[0], 1), np.float32)], axis=1)
        cb = np.broadcast_to(np.asarray(c, np.float32).reshape(1, -1), (1, n))
        b32 = np.concatenate([b32, cb], axis=0)
        pb = max(pb, _PREC.get(np.asarray(c).dtype, 24))  # 1 is on every grid
        c = None
    a64, b64 = a32.astype(np.float64), b32.astype(np.float64)  # float32 values: exact
    k = a64.shape[-1]
    c64 = None if c is None else np.asarray(c, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.matmul(a64, b64)
        if c64 is not None:
            c64 = np.broadcast_to(c64, s.shape)
            s += c64
        out = s.astype(np.float32)
    finite_in = all(np.isfinite(x).all() for x in (a32, b32, 0.0 if c64 is None else c64))
    # finite inputs: every product and partial sum is finite in float64 (at most K 2**256)
    finite = None if finite_in else np.isfinite(s)

    # 1. grid. ``m <= min(A_i B_j, A'_i B'_j) 2**(qa_i + qb_j)`` with A = rowsum |a| 2**-qa,
    # B = colmax |b| 2**-qb, A' = rowmax |a| 2**-qa, B' = colsum |b| 2**-qb (the powers of two
    # exact; ``up`` covers the float64 sums of K non-negative terms, at least (1 - gamma_K)
    # times the exact ones, and the products' roundings); the test is then made in float32
    # on values rounded up (``_up32``, relative 2**-20 to spare): a false "exact" is impossible,
    # a product that overflows float32 fails, one that underflows is far below 2**53
    aa, bb = np.abs(a32), np.abs(b32)
    qa, qb = _grid(_min_nonzero(a32, -1), pa), _grid(_min_nonzero(b32, -2), pb)
    ra, rb = np.ldexp(1.0, -qa), np.ldexp(1.0, -qb)  # an all-zero row: 0
    up = 1.0 / ((1.0 - _gamma(k, U64)) * (1.0 - 2 * U64))
    with np.errstate(over="ignore", invalid="ignore"):
        rs = np.asarray(np.sum(aa, axis=-1, keepdims=True, dtype=np.float64))
        cs = np.asarray(np.sum(bb, axis=-2, keepdims=True, dtype=np.float64))
        rm = np.asarray(np.max(aa, axis=-1, keepdims=True, initial=0))
        cm = np.asarray(np.max(bb, axis=-2, keepdims=True, initial=0))
        fa, fb = _up32(rs * up * ra), _up32(cm * rb)  # A, B
        ga, gb = _up32(rm * up * ra), _up32(cs * rb)  # A', B'
        if c64 is not None:  # a general c: the exact path's tests only
            undecided = np.ones(s.shape, bool)
        elif (np.max(fa) * np.max(fb) <= _LIM32) or (np.max(ga) * np.max(gb) <= _LIM32):
            undecided = np.zeros(s.shape, bool)
        else:
            undecided = _grid_open(fa, fb, ga, gb, s.shape)
    zero = out == 0  # zero results: their signs, exactly (a grid-exact +-0 sum without c: +0)
    if c64 is None and not signed_zero:
        out[zero & (s == 0) & ~undecided] = np.float32(0.0)
        zero &= undecided
    if finite is not None:
        undecided &= finite
        zero &= finite
    redo = zero

    # 2. bound, on the rest: e = m (gamma_(K+1) + 2**-52): |s| <= m (1 + gamma), so m 2**-52
    # covers the rounding of s +- e (u |s +- e|); the 8 u this constant's and m e's roundings
    todo = undecided & ~zero
    n_todo = int(np.count_nonzero(todo))
    g_e = _gamma(k + 1, U64) * (1.0 + 8 * U64) + 2.0**-52
    if 2 * n_todo > todo.size:  # most elements: the same test on whole arrays, no gathers
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.minimum(rs * cm, rm * cs)
            m *= up
            if c64 is not None:
                m += np.abs(c64)
                m *= 1.0 + 2 * U64  # the addition's rounding
            e = m * g_e
            open_ = (s - e).astype(np.float32)
            e += s
            open_ = open_ != e.astype(np.float32)
        redo |= todo & open_
    elif n_todo:
        idx = np.nonzero(todo)
        ri, cj = idx[:-1], (*idx[:-2], idx[-1])
        rows, cols = s.shape[:-1], (*s.shape[:-2], s.shape[-1])
        rsi, rmi = (np.broadcast_to(x[..., 0], rows)[ri] for x in (rs, rm))
        csj, cmj = (np.broadcast_to(x[..., 0, :], cols)[cj] for x in (cs, cm))
        with np.errstate(over="ignore", invalid="ignore"):
            m = np.minimum(rsi * cmj, rmi * csj) * up
            if c64 is not None:
                m = (m + np.abs(c64[idx])) * (1.0 + 2 * U64)  # the addition's rounding
            e = m * g_e
            si = s[idx]
            sel = (si - e).astype(np.float32) != (si + e).astype(np.float32)
        redo[tuple(v[sel] for v in idx)] = True

    if finite is not None and not finite.all():
        with np.errstate(over="ignore", invalid="ignore"):
            s_ieee = np.einsum("...mk,...kn->...mn", a64, b64, optimize=False)
            if c64 is not None:
                s_ieee = s_ieee + c64
        bad = ~finite
        out[bad] = np.where(np.isnan(s_ieee[bad]), np.float32(np.nan), s_ieee[bad])
    # 3. exact
    if redo.any():
        out[redo] = exact_sums32(_terms(a32, b32, c64, redo), signed_zero=signed_zero)
    return np.asarray(out, np.float32)


#: significand bits (with the hidden one) of the formats whose values a float32 array holds
_PREC = {np.dtype(np.float16): 11, np.dtype(ml_dtypes.bfloat16): 8}
_BIG = 1 << 20  # the grid exponent of an all-zero row: no constraint


_LIM32 = np.float32(2.0**53 * (1 - 2.0**-20))


def _grid_open(
    fa: np.ndarray, fb: np.ndarray, ga: np.ndarray, gb: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    """Where the grid test fails: ``A_i B_j`` and ``A'_i B'_j`` both above the limit. A row
    whose factor passes against every column's largest passes whole, likewise a column; on a
    2-D product the elementwise test runs only on the block of failing rows and columns."""
    rows = (fa * np.max(fb, axis=-1, keepdims=True) > _LIM32) & (
        ga * np.max(gb, axis=-1, keepdims=True) > _LIM32)  # fmt: skip
    cols = (np.max(fa, axis=-2, keepdims=True) * fb > _LIM32) & (
        np.max(ga, axis=-2, keepdims=True) * gb > _LIM32)  # fmt: skip
    if len(shape) != 2:
        return np.asarray(rows & cols & (fa * fb > _LIM32) & (ga * gb > _LIM32))
    out = np.zeros(shape, bool)
    r, c = np.flatnonzero(rows[:, 0]), np.flatnonzero(cols[0, :])
    if r.size and c.size:
        block = (fa[r] * fb[:, c] > _LIM32) & (ga[r] * gb[:, c] > _LIM32)
        out[np.ix_(r, c)] = block
    return out


def _up32(x: np.ndarray) -> np.ndarray:
    """float64 -> float32, never below ``x`` (non-negative finite ``x``; beyond: inf)."""
    with np.errstate(over="ignore"):
        return np.asarray((x * (1 + 2.0**-20)).astype(np.float32))


def _min_nonzero(x: np.ndarray, axis: int) -> np.ndarray:
    """The smallest nonzero magnitude along ``axis`` (keepdims; 0 where all are zero), from the
    float32 bits: magnitudes order as their unsigned bits, and ``bits - 1`` wraps a zero to the
    largest unsigned value."""
    u = x.view(np.uint32) & np.uint32(0x7FFFFFFF)
    u -= np.uint32(1)
    m = np.min(u, axis=axis, keepdims=True, initial=np.uint32(0xFFFFFFFF))
    return np.asarray((m + np.uint32(1)).view(np.float32))


def _grid(x: np.ndarray, prec: int) -> np.ndarray:
    """``E - prec`` (``x = f 2**E``, ``0.5 <= f < 1``) where ``x`` is finite and nonzero, else
    ``_BIG``: a value of a ``prec``-bit format is a multiple of ``2**(E - prec)``, and so is
    every value of the format of at least that magnitude (the row's smallest nonzero one sets
    the row's grid). Subnormals too (their ``E`` is at most the format's ``emin``)."""
    fin = np.isfinite(x) & (x != 0)
    _, e = np.frexp(np.where(fin, x, 1.0))
    return np.where(fin, e - prec, _BIG).astype(np.int64)


def _terms(a32: np.ndarray, b32: np.ndarray, c64: Any, redo: np.ndarray) -> np.ndarray:
    """The exact products (and ``c``) of the ``redo`` elements, one row each, in their order:
    float32 rows and columns gathered, multiplied in float64 (exact)."""
    idx = np.nonzero(redo)
    bt, i, j = idx[:-2], idx[-2], idx[-1]
    ab = np.broadcast_to(a32, (*redo.shape[:-1], a32.shape[-1]))
    # b's columns as contiguous rows: the gather below then reads memory in order
    bt_ = np.ascontiguousarray(np.swapaxes(b32, -1, -2))
    bb = np.broadcast_to(bt_, (*redo.shape[:-2], redo.shape[-1], b32.shape[-2]))
    terms = np.multiply(ab[(*bt, i)], bb[(*bt, j)], dtype=np.float64)  # (n, K) exact
    if c64 is not None:
        terms = np.concatenate([terms, np.asarray(c64)[idx][:, None]], axis=1)
    return np.asarray(terms)


def exact_sums32(terms: np.ndarray, *, signed_zero: bool = False) -> np.ndarray:
    """RN32 of each row's exact sum; ``terms`` (n, K) finite float64 values whose every partial
    sum stays finite (products of float32 values, float32 values). An exactly zero sum is +0,
    or -0 when ``signed_zero`` and every term of the row is -0 (a sum with an addend ``c``).

    >>> exact_sums32(np.array([[2.0**100, 1.0, -(2.0**100)], [1.0, 2.0**-24, 2.0**-90]]))
    array([1.       , 1.0000001], dtype=float32)
    """
    t = np.asarray(terms, np.float64)
    n = t.shape[0]
    negz = np.all((t == 0) & np.signbit(t), axis=1) if signed_zero else np.zeros(n, bool)
    if t.shape[1] > _CHUNK:  # 2**M > K needs M <= 26: each chunk to a few exact values first
        t = np.concatenate(
            [_rounds(t[:, j : j + _CHUNK], decide=False)[2] for j in range(0, t.shape[1], _CHUNK)],
            axis=1,
        )
    done, v, tt = _rounds(t, decide=True)
    rest = np.flatnonzero(~done)  # their remainders are zero: the exact sum is sum(tt)
    if rest.size:
        v[rest] = _rn32_of_exact(tt[rest], negz[rest])
    return v


def _rounds(t: np.ndarray, *, decide: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``ExtractVector`` rounds (module docstring) on each row of ``t``: (done, value, taus).

    A row is done (``value`` its RN32) once its float32 rounding is decided: with ``tau_1..j``
    taken and ``r`` left, the exact sum is ``sum tau + sum r``; ``approx = fl(sum tau)`` errs
    by at most ``gamma_j sum |tau|`` (bounded by ``j 2**-50`` times the computed sum), and
    ``|sum r| <= sum |r|`` (its float64 sum of K <= 2**20 non-negative terms is at least
    ``1 - 2**-30`` times the exact one); ``2**-51 |approx|`` and the factor ``1 + 2**-30``
    cover the roundings of this radius and of ``approx +- rad``. Where RN32 of both ends agree
    and are nonzero (a zero's sign is decided from the exact sum), that is the result. Other
    rows go on until their remainder is zero; ``taus`` (n, J) then sums exactly to theirs.
    """
    n, k = t.shape
    mbits = max(k, 1).bit_length()  # 2**M > k
    r = t
    rows = np.arange(n)
    cols: list[np.ndarray] = []
    done, v = np.zeros(n, bool), np.zeros(n, np.float32)
    ar = np.abs(r)
    while rows.size:
        mu = np.max(ar, axis=1, initial=0.0)
        live = mu > 0
        if not live.all():
            r, rows, mu = r[live], rows[live], mu[live]
            if not rows.size:
                break
            ar = ar[live]
        _, e = np.frexp(mu)  # mu < 2**e
        sigma = np.ldexp(1.0, e + mbits)[:, None]
        q = r + sigma
        q -= sigma
        r = r - q  # exact: the rounding error of sigma + p (a new array: t is the caller's)
        ar = np.abs(r)
        rsum = ar.sum(axis=1)
        tau = np.zeros(n)
        tau[rows] = q.sum(axis=1)  # exact: multiples of eps sigma, at most sigma
        cols.append(tau)
        if decide:
            tt = np.stack(cols, axis=1)[rows]
            approx = tt.sum(axis=1)
            rad = len(cols) * 2.0**-50 * np.abs(tt).sum(axis=1)
            rad += rsum * (1 + 2.0**-30) + 2.0**-51 * np.abs(approx)
            rad *= 1 + 2.0**-30
            with np.errstate(over="ignore"):
                lo, hi = (approx - rad).astype(np.float32), (approx + rad).astype(np.float32)
            ok = (lo == hi) & (lo != 0)
            if len(cols) == 1:  # a near tie: the side of the midpoint decides
                side = _side(tt[:, 0], r, rsum, lo, hi, k)
                lo = np.where(side > 0, hi, lo)
                ok |= side != 0
            if ok.any():
                v[rows[ok]], done[rows[ok]] = lo[ok], True
                r, rows, ar = r[~ok], rows[~ok], ar[~ok]
    return done, v, np.stack(cols, axis=1) if cols else np.zeros((n, 1))


def _side(
    tau: np.ndarray, r: np.ndarray, rsum: np.ndarray, lo: np.ndarray, hi: np.ndarray, k: int
) -> np.ndarray:
    """After one round, where ``lo``, ``hi`` (RN32 of the interval's ends) are adjacent
    nonzero finite floats of one sign, the exact sum ``tau + sum r`` is on one side of their
    midpoint ``mu`` or on it. ``d = tau - mu`` is exact (Sterbenz: the interval is far
    narrower than ``mu``); ``D~ = fl(d + fl(sum r))`` errs by at most ``gamma_(K-1) sum |r|``
    (at most ``K 2**-53 (1 + 2**-29)`` times its computed value) plus ``u |D~|``, so where
    ``|D~| > K 2**-52 sum |r| + 2**-52 |D~|`` the sign of ``D~`` is the side: RN32 is ``hi``
    above, ``lo`` below. Returns +1 (above), -1 (below) or 0 (not decided) per row."""
    lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        adj = (lo != hi) & (lo != 0) & (hi != 0) & np.isfinite(hi64) & np.isfinite(lo64)
        adj &= (np.signbit(lo) == np.signbit(hi)) & (np.nextafter(lo, hi) == hi)
    mu = np.where(adj, (lo64 + hi64) * 0.5, 0.0)  # exact: a float32 midpoint in float64
    d = tau - mu
    d += r.sum(axis=1)
    err = k * 2.0**-52 * rsum + 2.0**-52 * np.abs(d)  # rsum: the computed sum |r|
    return np.where(adj & (np.abs(d) > err), np.sign(d), 0.0)


def _rn32_of_exact(tt: np.ndarray, negz: np.ndarray) -> np.ndarray:
    """RN32 of each row's exact sum of the few float64 values ``tt`` (n, J); an exact zero is
    -0 where ``negz``, else +0."""
    f = tt.sum(axis=1)  # exact where at most one is nonzero
    many = np.flatnonzero(np.count_nonzero(tt, axis=1) > 1)
    rows: dict[int, list[float]] = dict(zip(many.tolist(), tt[many].tolist(), strict=True))
    for i, r in rows.items():
        f[i] = math.fsum(r)  # RN64 of the exact sum
    with np.errstate(over="ignore"):  # beyond float32: RN gives inf
        v = f.astype(np.float32)
    v64 = v.astype(np.float64)
    down = np.where(v64 <= f, v, np.nextafter(v, np.float32(-np.inf)))
    up = np.where(v64 >= f, v, np.nextafter(v, np.float32(np.inf)))
    # float32's overflow threshold is the midpoint of its largest value and 2**128
    d64, u64 = (
        np.where(np.isinf(x), np.copysign(2.0**128, x), x)
        for x in (down.astype(np.float64), up.astype(np.float64))
    )
    tie = (down != up) & (f - d64 == u64 - f)
    for i in np.flatnonzero(tie).tolist():  # f is a float32 tie: the exact residual decides
        res = math.fsum([*rows.get(i, [float(f[i])]), -float(f[i])])
        if res != 0.0:
            v[i] = up[i] if res > 0 else down[i]
    zero = f == 0.0  # exact zero (a nonzero exact sum of these terms is a normal float64)
    v[zero] = np.where(negz[zero], np.float32(-0.0), np.float32(0.0))
    return np.asarray(v, np.float32)
