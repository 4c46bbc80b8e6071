"""Float32 arithmetic helpers for the normalisation/convolution emulations: a correctly
rounded float32 fused multiply-add, the kernels' ``a * b + c`` with or without fusion, and
the standard error-bound factors.

torch's SIMD builds (``avx2``, ``avx512``) evaluate ``Vectorized`` ``fmadd`` (and, where GCC
contracts them, some written ``a * b + c``) with one rounding; the ``default`` build rounds
twice. Which expressions fuse is measured per kernel (see the callers).

>>> import numpy as np
>>> a = np.float32(1 + 2**-12); c = np.float32(-(1 + 2**-11))
>>> float(fma32(a, a, c)) == 2.0**-24
True
>>> float(mad(a, a, c, fused=False))
0.0
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.arith import round_to_odd

__all__ = ["LANES", "U32", "boundary32", "fma32", "fma32_into", "gamma", "grow", "mad", "repair32",
           "row_dot", "sum32", "tree8"]  # fmt: skip

#: unit roundoff of float32
U32 = 2.0**-24
#: float32 lanes of torch's Vectorized accumulators in the kernels emulated here (the AVX2
#: kernels also serve avx512; ``default`` has the same width)
LANES = 8


def fma32(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` on float32 values with one rounding to float32 (RNE).

    The product of two float32 values is exact in float64, so ``s = RN64(a*b + c)`` carries
    one float64 rounding; rounding ``s`` to float32 is then the correct single rounding except
    where ``s`` lands exactly on a float32 rounding boundary (a midpoint, or anywhere in the
    float32 subnormal range, where the boundary bits differ): only there the float64 sum's error
    is recovered by TwoSum and folded in by round-to-odd (53 >= 24 + 2 bits). Large arrays run
    in row blocks of :data:`_BLOCK` elements; a scalar power-of-two factor makes the product
    exact in float32 (checked), so the float32 sum is then the answer.
    """
    a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)
    shape = np.broadcast(a, b, c).shape
    with np.errstate(invalid="ignore", over="ignore"):
        if not shape:
            return sum32(np.asarray(a, np.float64) * np.asarray(b, np.float64), c)
        if c.dtype == np.float32:
            fast = _by_power_of_two(a, b, c) if b.size == 1 else None
            if fast is None and a.size == 1:
                fast = _by_power_of_two(b, a, c)
            if fast is not None:
                return fast
        n = math.prod(shape)
        big, small = (a, b) if a.size >= b.size else (b, a)
        if n > _BLOCK and shape[0] > 1:
            return _blocks(big, small, c, shape, n)
        # one float64 buffer, products then sums in place; the products are formed again only
        # where repair32 looks
        s = np.empty(shape, np.float64)
        s[...] = big  # exact widening (a cast in the assignment: the fastest measured order)
        np.multiply(s, np.asarray(small, np.float64), out=s)
        np.add(s, c, out=s, dtype=np.float64)
        out = s.astype(np.float32)
        flag = np.empty(shape, np.bool_)
        if n and _boundary_into(s, out, flag, np.empty(shape, np.uint64), np.empty(shape, F32)):
            _repair_at(out, (a, b), c, np.flatnonzero(flag), None)
    return out


F32 = np.float32
_TINY32 = F32(2.0**-126)


def _boundary_into(s: np.ndarray, out: np.ndarray, flag: np.ndarray, low: np.ndarray,
                   mag: np.ndarray) -> bool:  # fmt: skip
    """:func:`boundary32` of the float64 sums ``s`` into ``flag`` (the caller's buffers of
    ``s``'s shape: ``low`` uint64, ``mag`` float32), given ``out``, their float32 rounding;
    whether any is flagged. The same flags in fewer passes: the midpoint test on the words
    into the buffers (no temporaries), and the subnormal-range test only where ``out`` holds
    a magnitude of at most 2**-126 (zeros included: ``fmin`` passes NaN over): rounding is
    monotone, so ``|s| < 2**-126`` gives ``|out| <= 2**-126``, and where no ``|out|`` is that
    small no ``s`` is in the range (AdamW's moments never are)."""
    _midpoints(s, low, flag)
    np.abs(out, out=mag)
    if np.fmin.reduce(mag, axis=None) <= _TINY32:
        flag |= np.abs(s) < 2.0**-126
    return bool(flag.any())


#: elements per block of a large :func:`fma32` (its float64 temporaries then stay in cache:
#: measured about 2x faster on 512 x 128 than one pass over the whole array)
_BLOCK = 16384


def _blocks(big: np.ndarray, small: np.ndarray, c: np.ndarray, shape: tuple[int, ...],
            n: int) -> np.ndarray:  # fmt: skip
    """:func:`fma32` of a large array in row blocks of about :data:`_BLOCK` elements: one
    float64 buffer is allocated once and serves every block; a ``small`` or ``c`` of at most a
    quarter of the elements (the norms' row and column vectors) is widened once and broadcast
    in the operations (measured 5-10% faster than widening it into a second buffer per block),
    a larger one is cast in them; the few flagged elements of all blocks are repaired
    together."""
    out = np.empty(shape, np.float32)
    rows = shape[0]
    step = max(1, rows * _BLOCK // n)

    def wide(v: np.ndarray) -> np.ndarray:
        w = np.asarray(v, np.float64) if 4 * v.size <= n else v
        return w if w.shape == shape else np.broadcast_to(w, shape)

    bb = big if big.shape == shape else np.broadcast_to(big, shape)
    sb, cb = wide(small), wide(c)
    bshape = (min(step, rows), *shape[1:])
    buf, flag = np.empty(bshape, np.float64), np.empty(bshape, np.bool_)
    low, mag = np.empty(bshape, np.uint64), np.empty(bshape, F32)
    flagged: list[np.ndarray] = []
    for i in range(0, rows, step):
        k = min(step, rows - i)
        s, o = buf[:k], out[i : i + step]
        s[...] = bb[i : i + step]
        np.multiply(s, sb[i : i + step], out=s, dtype=np.float64)  # exact: float32 factors
        np.add(s, cb[i : i + step], out=s, dtype=np.float64)
        o[...] = s  # the cast rounds to nearest even, as astype does
        if _boundary_into(s, o, flag[:k], low[:k], mag[:k]):
            flagged.append(np.flatnonzero(flag[:k]) + i * (n // rows))
    if flagged:
        _repair_at(out, (big, small), c, np.concatenate(flagged), None)
    return out


#: a float64 sum on a float32 midpoint: bits 28..0 of its significand are 1 then zeros
_MID_MASK, _MID = np.array(0x1FFFFFFF, np.uint64), np.array(0x10000000, np.uint64)


def _midpoints(s: np.ndarray, low: np.ndarray, flag: np.ndarray) -> None:
    """``flag`` = where float64 ``s`` lies on a float32 midpoint (:func:`boundary32`'s first
    test), through the caller's buffers (``low`` uint64, ``flag`` bool, ``s``'s shape)."""
    np.bitwise_and(s.view(np.uint64), _MID_MASK, out=low)
    np.equal(low, _MID, out=flag)


def fma32_into(out: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray, *,
               s: np.ndarray, low: np.ndarray, flag: np.ndarray) -> None:  # fmt: skip
    """``out = RN32(a*b + c)`` for float64 arrays (or 0-d arrays) holding float32 values whose
    exact sums are 0 or normal in float32 (the caller proves it), in the caller's buffers of
    ``out``'s size (``s`` float64, ``low`` uint64, ``flag`` bool): the oneDNN emulations' hot
    step. The float64 product is exact and the float64 sum ``s`` carries one rounding, so ``s``
    rounds to float32 as the exact sum does except where it lies on a float32 midpoint; only
    there :func:`repair32` redoes it. No subnormal test (:func:`boundary32`'s second): no
    exact sum lands there. The operands in the kernel's order (a NaN's payload follows the
    first).

    >>> out = np.empty(1, np.float32); a = np.array([1 + 2.0**-12]); c = np.array(-(1 + 2.0**-11))
    >>> fma32_into(out, a, a, c, s=np.empty(1), low=np.empty(1, np.uint64), flag=np.empty(1, bool))
    >>> float(out[0]) == 2.0**-24
    True
    """
    np.multiply(a, b, s)
    np.add(s, c, s)
    out[...] = s  # float64 to float32: round to nearest even
    _midpoints(s, low, flag)
    if np.count_nonzero(flag):
        repair32(out, (a, b), c, s, flag)


def _by_power_of_two(a: np.ndarray, k: np.ndarray, c: np.ndarray) -> np.ndarray | None:
    """``fma32(a, k, c)`` for float32 ``a``, ``c`` and one factor ``k`` a power of two (else
    None): ``a * k`` is then exact in float32 unless it overflows or loses bits below the
    subnormals, both seen by scaling back (NaN too: the general path takes it), so the fused
    result is the float32 sum ``a * k + c``, one correct rounding."""
    kf = float(k.reshape(()))
    if (
        a.dtype != np.float32
        or abs(math.frexp(kf)[0]) != 0.5
        or not 2.0**-149 <= abs(kf) <= 2.0**127
    ):
        return None  # not a float32 power of two (zero, inf, NaN included)
    k32 = np.float32(kf)
    q = a * k32
    if not np.array_equal(q / k32, a):
        return None
    return np.asarray(np.broadcast_to(q, np.broadcast_shapes(q.shape, k.shape)) + c, np.float32)


def sum32(p: Any, c: Any) -> np.ndarray:
    """``p + c`` rounded once to float32, for a float64 ``p`` that is an exact product of two
    float32 values and a float32 ``c`` (:func:`fma32` with the product already formed).

    The float64 sum rounded to float32 is the answer except on a float32 rounding boundary
    (:func:`boundary32`: a few NumPy calls find them); only there :func:`repair32` looks at the
    float64 sum's error."""
    c64 = np.asarray(c, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = np.asarray(p + c64)
        if s.ndim == 0:  # scalars: the same rule on a one-element array
            return sum32(np.reshape(p, 1), np.reshape(c64, 1)).reshape(())
        out = s.astype(np.float32)
        risky = boundary32(s)
        if risky.any():
            repair32(out, p, c64, s, risky)
    return out


def repair32(out: np.ndarray, p: Any, c: Any, s: np.ndarray, risky: np.ndarray) -> None:
    """Make ``out = float32(s)`` the single rounding of ``p + c`` (``p``: the exact product, or a
    tuple of its two float32 factors, recomputed only where needed) where ``risky`` (a superset of
    the boundary sums, :func:`boundary32`) says it may not be: at those elements the TwoSum
    error ``e`` of ``s = RN64(p + c)`` is taken; where ``e != 0`` (an inexact sum: a nonzero
    ``p + c`` cannot round to zero in float64, so zeros are skipped first) ``s`` is made
    round-to-odd with it and rounded again (53 >= 24 + 2 bits: one correct rounding). Exact
    sums, common among boundary cases (few-bit values), are left as they are."""
    idx = np.flatnonzero(risky)
    _repair_at(out, p, c, idx, s.reshape(-1)[idx], s.shape)


def _repair_at(out: np.ndarray, p: Any, c: Any, idx: np.ndarray, ss: np.ndarray | None,
               shape: tuple[int, ...] | None = None) -> None:  # fmt: skip
    """:func:`repair32` given the flagged elements: their C-order positions ``idx`` in ``shape``
    (default ``out``'s) and their float64 sums ``ss`` (None: formed here from ``p`` and ``c``,
    ``p`` being exact in float64, as the caller formed them)."""
    shape = out.shape if shape is None else shape
    with np.errstate(invalid="ignore", over="ignore"):
        if isinstance(p, tuple):  # the product's float32 factors
            ps = np.asarray(_at(p[0], shape, idx), np.float64) * _at(p[1], shape, idx)
        else:
            ps = np.asarray(_at(p, shape, idx), np.float64)
        cs = np.asarray(_at(c, shape, idx), np.float64)
        if ss is None:  # the float64 sums again: the exact product plus c, rounded once
            ss = ps + cs
        nz = ss != 0  # a nonzero p + c cannot round to zero in float64: zeros are exact
        if not nz.all():
            idx, ss, ps, cs = idx[nz], ss[nz], ps[nz], cs[nz]
        if not idx.size:
            return
        bb = ss - ps
        e = (ps - (ss - bb)) + (cs - bb)
        bad = np.isfinite(e) & (e != 0)
        if bad.any():
            fixed = np.asarray(round_to_odd(ss[bad], e[bad]), np.float64).astype(np.float32)
            out[np.unravel_index(idx[bad], shape)] = fixed


def _at(a: Any, shape: tuple[int, ...], flat: np.ndarray) -> np.ndarray:
    """The elements at C-order positions ``flat`` of ``a`` broadcast to ``shape``."""
    a = np.asarray(a)
    if a.shape == shape:
        return np.asarray(a.reshape(-1)[flat])
    return np.asarray(np.broadcast_to(a, shape)[np.unravel_index(flat, shape)])


def boundary32(s: np.ndarray) -> np.ndarray:
    """Where a float64 ``s`` (an array) lies on a float32 rounding boundary: a float32 midpoint
    (bits 28..0 of the float64 are 1 followed by zeros, whatever the exponent, up to the
    overflow threshold), or ``|s| < 2^-126``, the float32 subnormal range (zeros included),
    where the midpoints lie at other bits. Elsewhere a float64 value within half a float64 ulp
    of the exact sum rounds to float32 as the exact sum does (53 >= 24 + 2 bits); non-finite
    ``s`` is never flagged (it is exact or NaN either way)."""
    bits = s.view(np.uint64)
    return np.asarray(((bits << 35) == 2**63) | (np.abs(s) < 2.0**-126))


def mad(a: Any, b: Any, c: Any, *, fused: bool) -> np.ndarray:
    """The kernel's ``a * b + c`` in float32: one rounding when ``fused``, else two."""
    if fused:
        return fma32(a, b, c)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(np.float32(1) * np.asarray(a, np.float32) * np.asarray(b, np.float32)
                          + np.asarray(c, np.float32), np.float32)  # fmt: skip


def gamma(k: Any, u: float = U32) -> np.ndarray:
    """``(1 + u)**k - 1``: the relative error bound of ``k`` chained roundings of unit ``u``
    (Higham's gamma_k without its ``k u < 1`` condition, valid for every ``k``)."""
    return np.asarray(np.expm1(np.asarray(k, np.float64) * np.log1p(u)), np.float64)


def grow(k: Any, u: float = U32) -> np.ndarray:
    """``(1 + u)**k``: how much ``k`` roundings can grow a magnitude."""
    return 1.0 + gamma(k, u)


def tree8(acc: np.ndarray, simd: bool, n: int = LANES) -> np.ndarray:
    """``vec_reduce_all`` of 8 float32 lanes: the AVX2 shuffle tree (halves, pairs, neighbours)
    on the SIMD builds, lane 0 plus each further lane in turn on ``default`` (and for a partial
    vector of ``n`` lanes)."""
    if simd and n == LANES and acc.dtype == np.float32:
        # lane 0 of the tree (float32 addition commutes): v0+v4, v1+v5, ...; then pairs;
        # then neighbours (the other lanes hold the same sums, swapped)
        w = acc[:, :4] + acc[:, 4:]
        u = w[:, :2] + w[:, 2:]
        return np.asarray(u[:, 0] + u[:, 1])
    if simd and n == LANES:
        v = acc
        for perm in ([4, 5, 6, 7, 0, 1, 2, 3], [2, 3, 0, 1, 6, 7, 4, 5], [1, 0, 3, 2, 5, 4, 7, 6]):
            v = (v + v[:, perm]).astype(np.float32)
        return np.asarray(v[:, 0])
    r = acc[:, 0].copy()
    for i in range(1, n):
        r = (r + acc[:, i]).astype(np.float32)
    return r


def row_dot(p: np.ndarray, q: np.ndarray, fused: bool, *,
            prod: np.ndarray | None = None) -> np.ndarray:  # fmt: skip
    """``map*_reduce_all`` of the products ``p * q`` (p already rounded where the kernel
    rounds it): 8 lanes, full vectors added, the partial last vector fused on the SIMD builds
    (measured), then :func:`tree8`. ``prod``: the float32 products ``p * q`` already formed by
    the caller (then ``p`` and ``q`` are read only in the partial last vector).

    >>> row_dot(np.float32([[1, 2, 3]]), np.float32([[4, 5, 6]]), True).tolist()
    [32.0]
    """
    cols = p.shape[1]
    t = np.asarray(p * q if prod is None else prod, np.float32)
    if cols < LANES:
        return tree8(t, False, cols)
    acc = t[:, :LANES].copy()
    full = cols - cols % LANES
    for d in range(LANES, full, LANES):
        np.add(acc, t[:, d : d + LANES], out=acc)  # float32 + float32: one rounding each
    if cols > full:
        r = cols - full
        acc[:, :r] = mad(p[:, full:], q[:, full:], acc[:, :r], fused=fused)
    return tree8(acc, fused)
