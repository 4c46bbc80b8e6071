"""Fast CDNA3 TR-FDPA and GTR-FDPA on batches of dot products (row tiles, BLAS sums).

The arithmetic is :func:`fpemu.tensorcore.amd.tr_fdpa` and :func:`~fpemu.tensorcore.amd.gtr_fdpa`
(mma-parity.md 3.4 and 3.5); this route computes the same bits with the method of
:mod:`fpemu.tensorcore.rows`. Stage 1 of each block (products cut to 24 fraction bits below
the largest product label, summed exactly) does not depend on C, so every block of a tile is
computed at once: block maxima from one BLAS sum of powers of two, aligned terms summed by one
more BLAS product (a matrix of ones, or for GTR a (L, 2) matrix that sums even and odd k
apart). Stage 2 (C and the sum floored, added, rounded to FP32) runs block after block on one
value per row. Tiles holding a NaN, an infinity or a product at or above ``2**128`` take the
reference route.

>>> import numpy as np
>>> from fpemu.formats import get_format
>>> h = get_format("float16")
>>> a = np.array([[1.0, 0.0]]); b = np.array([[1.0, 0.0]]); c = np.array([-(2.0**-30)])
>>> float(tr_fdpa_rows(a, b, c, L=8, fa=h, fb=h, split=False)[0])  # C floored: 1 - 2**-24
0.9999999403953552
"""

from __future__ import annotations

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format, get_format
from fpemu.tensorcore import amd
from fpemu.tensorcore.block import (
    F64,
    FP32_TRUNC,
    BlockSpec,
    _label_powers,
    _max_product_labels,
    _narrow_products,
    labels,
)
from fpemu.tensorcore.exact import powers
from fpemu.tensorcore.rows import _power, plan

#: Products per row tile.
TILE = 131072


def tr_fdpa_rows(a: F64, b: F64, c: F64, *, L: int, fa: Format, fb: Format,
                 split: bool) -> F64:  # fmt: skip
    """:func:`amd.tr_fdpa` (``split=False``) or :func:`amd.gtr_fdpa` (``split=True``).

    Inputs are checked exact in ``fa`` / ``fb`` (and C in FP32) by the caller.
    """
    np_ = xp(a, b, c)
    B, K = a.shape
    group = L // 2 if split else L
    p_ = plan(fa, fb, group, fa.emin + fb.emin)
    ref = amd.gtr_fdpa if split else amd.tr_fdpa
    if p_ is None or K % L or not K or (split and L % 2):
        return ref(a, b, c, L=L, fa=fa, fb=fb)
    out: F64 = np_.empty(B)
    R = max(1, TILE // K)
    for r0 in range(0, B, R):
        r1 = min(B, r0 + R)
        got = _tile(a[r0:r1], b[r0:r1], c[r0:r1], L, fa, fb, split, p_)
        out[r0:r1] = ref(a[r0:r1], b[r0:r1], c[r0:r1], L=L, fa=fa, fb=fb) if got is None else got
    return out


def _tile(a: F64, b: F64, c: F64, L: int, fa: Format, fb: Format, split: bool,
          p_: tuple[int, int]) -> F64 | None:  # fmt: skip
    np_ = xp(a)
    n, K = a.shape
    nb = K // L
    W, off = p_
    qa, fin_a, sa = powers(a, fa, "a")
    qb, fin_b, sb = powers(b, fb, "b")
    if not (fin_a and fin_b and bool(np_.isfinite(c).all())):
        return None
    p = a * b
    if fa.emax + fb.emax >= 126 and bool(np_.abs(p).max() >= 2.0**128):
        return None  # a product that overflows FP32 is an infinity: the reference route
    cols = 2 if split else 1
    # sel sums the products of a block (or its even and its odd k) in one BLAS product.
    sel = np_.zeros((L, cols))
    sel[np_.arange(L), np_.arange(L) % cols] = 1.0
    with np.errstate(under="ignore", over="ignore"):
        qa *= qb
        if off:
            qa *= 2.0**-off
        s = _power(qa, W).reshape(n * nb, L) @ sel
    top = ((s.view(np.uint64) >> np.uint64(52)).astype(np.int32) - 1023) // W + off
    if sa is not None or sb is not None:  # subnormal operands: exact labels where they are
        flat = np_.concatenate([m for m in (sa, sb) if m is not None])  # repeats are harmless
        r, k = flat // K, flat % K
        lab = (labels(a[r, k], fa, zeros="floor", check=False).astype(np.int32)
               + labels(b[r, k], fb, zeros="floor", check=False))  # fmt: skip
        np_.maximum.at(top, (r * nb + k // L, k % cols), lab)
    # Stage 1: trunc(p * 2**(24 - e)) summed; the scale of group (row, block, parity) is
    # repeated over its k (pairs repeated as one complex128 keep even/odd interleaved).
    scale = np_.ldexp(1.0, 24 - top)  # (n * nb, cols)
    rep = np_.repeat(scale.view(np.complex128)[:, 0], L // 2) if split else \
        np_.repeat(scale[:, 0], L)  # fmt: skip
    t = np_.multiply(p.reshape(-1), rep.view(np.float64))
    np_.trunc(t, out=t)
    sums = (t.reshape(n * nb, L) @ sel) * 2.0**-24  # in units of 2**top
    sums, top = sums.reshape(n, nb, cols), top.reshape(n, nb, cols)
    d = np_.asarray(c, dtype=np_.float64)
    for j in range(nb):
        if split:
            se, so, ee, eo = sums[:, j, 0], sums[:, j, 1], top[:, j, 0], top[:, j, 1]
            e_dot = np_.maximum(ee, eo)
            s_dot = (np_.floor(np_.ldexp(se, ee - e_dot + 24))
                     + np_.floor(np_.ldexp(so, eo - e_dot + 24))) * 2.0**-24  # fmt: skip
        else:
            s_dot, e_dot = sums[:, j, 0], top[:, j, 0]
        d = amd._stage2(s_dot, e_dot, d, drop_far_c=split)
    res: F64 = d
    return res


def e_fdpa_rows(a: F64, b: F64, c: F64, *, L: int) -> F64:
    """:func:`amd.e_fdpa` (CDNA1): each block's exact sum rounded once to FP32, vectorised.

    Most rows need no exact sum: the float64 sum ``s`` of the ``m`` terms is within
    ``m * 2**-53 * sum|t|`` of the exact sum (recursive summation, no underflow at these
    magnitudes), so where ``s`` minus and plus twice that bound round to the same FP32 value,
    that value is the exact sum's rounding. The other rows (cancellation, ties, zero sums)
    take :func:`_exact_rn32`. Rows with a NaN or an infinity take the float64 sum rounded to
    FP32, as the reference does.
    """
    np_ = xp(a, b, c)
    B, K = a.shape
    R = 32768  # rows per tile: the per-block values stay in cache
    if B > R:
        tiles: F64 = np_.empty(B)
        for r0 in range(0, B, R):
            tiles[r0 : r0 + R] = e_fdpa_rows(a[r0 : r0 + R], b[r0 : r0 + R], c[r0 : r0 + R], L=L)
        return tiles
    d = np_.array(c, dtype=np_.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        p = (a * b).T.copy()  # one contiguous row per k
        for k0 in range(0, max(K, 1), L):
            terms = [p[k] for k in range(k0, min(K, k0 + L))] + [d]
            s = sum(terms[1:], terms[0])
            bound = sum((np_.abs(t) for t in terms[1:]), np_.abs(terms[0]))
            bound *= len(terms) * 2.0**-52
            lo = (s - bound).astype(np.float32)
            hi = (s + bound).astype(np.float32)
            ok = (lo.view(np.uint32) == hi.view(np.uint32)) & (s != 0)  # -0 and +0 differ
            out = lo.astype(np.float64)
            bad = ~ok & np_.isfinite(s)
            if bool(bad.any()):
                out[bad] = _exact_rn32([t[bad] for t in terms])
            nonfinite = ~np_.isfinite(s)
            out[nonfinite] = s[nonfinite].astype(np.float32)
            d = out
    res: F64 = d
    return res


def _exact_rn32(terms: list[F64]) -> F64:
    """The exact sum of ``terms`` (finite float64 rows) rounded once to FP32.

    The terms are added into a Shewchuk expansion (two-sums, exact): nonoverlapping
    components, so the largest nonzero one ``h`` is within an ulp of the exact sum and the
    sign of the rest is the sign of the next nonzero component. ``h`` rounded to odd with that
    sign, then to FP32, is the exact sum rounded to FP32 (53 >= 24 + 2 bits), as in
    :func:`amd.fma_chain`. An exact zero sum is the IEEE sum of the terms' zeros.
    """
    np_ = xp(terms[0])
    expansion = [terms[0]]
    for t in terms[1:]:
        q, grown = t, []
        for e in expansion:
            s = q + e
            bb = s - q
            grown.append((q - (s - bb)) + (e - bb))
            q = s
        expansion = [*grown, q]
    h = np_.zeros_like(terms[0])
    rest = np_.zeros_like(h)
    for e in reversed(expansion):  # the largest nonzero component, then the next
        rest = np_.where((h != 0) & (rest == 0), e, rest)
        h = np_.where(h == 0, e, h)
    odd = (rest != 0) & ((h.view(np.int64) & 1) == 0)
    h = np_.where(odd, np_.nextafter(h, np_.copysign(np_.inf, rest)), h)
    h = np_.where(h == 0, expansion[-1], h)  # every component zero: the sum's own zero
    out: F64 = h.astype(np.float32).astype(np.float64)
    return out


def tr_fdpa_matrix(a: F64, b: F64, c: F64, *, L: int, fa: Format, fb: Format,
                   split: bool) -> F64 | None:  # fmt: skip
    """``D = A @ B + C`` under CDNA3 TR/GTR-FDPA for inputs with at most 5 exponent bits.

    Stage 1 per block and (m, n), as in :func:`fpemu.tensorcore.block.chain_blocks`: the
    largest product label from one BLAS product of powers of two
    (``block._label_powers``), then the products cut at ``2**(e - 24)``
    and summed in int32 (``block._narrow_products``: exact, below
    ``2**30``). Stage 2 is :func:`amd._stage2` on every (m, n). Returns None where this route
    does not apply (wider exponents, a K that is not a multiple of ``L``, NaN or infinity):
    the caller then takes the dot-product route.
    """
    np_ = xp(a, b, c)
    (M, K), N = a.shape, b.shape[1]
    ebits = max(fa.ebits, fb.ebits)
    if ebits > 5 or K % L or not all(bool(np_.isfinite(x).all()) for x in (a, b, c)):
        return None
    powers(a, fa, "a")
    powers(b, fb, "b")
    powers(np_.ascontiguousarray(c), get_format("float32"), "c")
    spec = BlockSpec(n=L, frac_bits=24, result=FP32_TRUNC)
    la = labels(a, fa, zeros="floor", check=False)[None]
    lb = labels(b, fb, zeros="floor", check=False)[None]
    aT = a.T[None]
    out: F64 = np_.empty((M, N))
    rows = max(1, min(M, TILE // 4 // max(N, 1)))
    groups = [(0, 2), (1, 2)] if split else [(0, 1)]
    for r0 in range(0, M, rows):
        r1 = min(M, r0 + rows)
        d = np_.array(c[r0:r1], dtype=np_.float64).reshape(-1)
        for k0 in range(0, K, L):
            parts = []
            for first, step in groups:
                ks = slice(k0 + first, k0 + L, step)
                pw = _label_powers(la[:, r0:r1, ks], lb[:, ks], ebits, spec, get_format("float32"))
                top = _max_product_labels(*pw)[0].astype(np.int32)
                total = _narrow_products(aT[:, ks, r0:r1], b[None, ks], 24 - top[None])[0]
                parts.append((total.reshape(-1) * 2.0**-24, top.reshape(-1)))
            if split:
                (se, ee), (so, eo) = parts
                e_dot = np_.maximum(ee, eo)
                s_dot = (np_.floor(np_.ldexp(se, ee - e_dot + 24))
                         + np_.floor(np_.ldexp(so, eo - e_dot + 24))) * 2.0**-24  # fmt: skip
            else:
                s_dot, e_dot = parts[0]
            d = amd._stage2(s_dot, e_dot, d, drop_far_c=split)
        out[r0:r1] = d.reshape(r1 - r0, N)
    return out


def fma32_chain_rows(a: F64, b: F64, c: F64) -> F64:
    """:func:`amd.fma_chain` for FP32: ``c = fma(a_k, b_k, c)``, k ascending, vectorised.

    A product of two FP32 values is exact in float64, so ``s = a_k * b_k + c`` rounded to
    float64 and then to FP32 differs from one rounding of the exact sum only where ``s`` lands
    exactly on an FP32 rounding boundary (a midpoint of the FP32 grid, or the overflow
    threshold) without being exact (double rounding needs the first result on the second
    grid's boundary; rounding is monotonic elsewhere). Those rows (rare) are nudged one
    float64 ulp toward the exact sum (the sign of the two-sum error) before the FP32 rounding.
    In the FP32 normal range a boundary has 29 low float64 fraction bits ``1000...0``; below
    ``2**-126`` it is an odd multiple of ``2**-150``.
    """
    np_ = xp(a, b, c)
    d = np_.array(c, dtype=np_.float64)
    mask, half = np.int64(0x1FFF_FFFF), np.int64(0x1000_0000)
    with np.errstate(invalid="ignore", over="ignore"):
        for k in range(a.shape[-1]):
            p = a[:, k] * b[:, k]
            s = p + d
            mid = (s.view(np.int64) & mask) == half
            tiny = np_.abs(s) < 2.0**-126
            if bool(tiny.any()):
                t = np_.ldexp(s, 150)
                mid |= tiny & (t == np_.trunc(t)) & (np_.fmod(t, 2.0) != 0)
            if bool(mid.any()):
                i = np_.flatnonzero(mid)
                pi, di, si = p[i], d[i], s[i]
                bb = si - pi
                err = (pi - (si - bb)) + (di - bb)  # exact: s + err == p + d
                nudge = np_.nextafter(si, np_.copysign(np_.inf, err))
                s[i] = np_.where(err != 0, nudge, si)
            if bool((s != s).any()):  # a NaN operand is the result, quieted (IEEE 754 fma)
                s = amd.nan_operand(a[:, k], b[:, k], d, s)
            d = s.astype(np.float32).astype(np.float64)
    res: F64 = d
    return res


def ftz_mul_add_rows(a: F64, b: F64, c: F64, *, P: int, fa: Format, fb: Format,
                     k: int | None = None) -> F64:  # fmt: skip
    """:func:`amd.ftz_mul_add` (CDNA2) with the flushes that cannot act left out.

    ``k``: products per instruction (default: all of K, one instruction); each instruction
    flushes its C to +0 (a -0 from the previous one included).

    Every product of two flushed inputs and every sum of two such products is a multiple of
    ``g = 2**(fa.emin - fa.mbits + fb.emin - fb.mbits)``; where ``g >= 2**-126`` (fp16 inputs)
    none of them can be an FP32 subnormal, so only the inputs and the accumulator are flushed.
    The products' pairwise sums run on strided views of the whole batch instead of one column
    at a time.
    """
    np_ = xp(a, b, c)
    B, K = a.shape
    R = max(1, 4 * TILE // max(K, 1))  # rows per tile (float32 values)
    if B > R:
        tiles: F64 = np_.empty(B)
        for r0 in range(0, B, R):
            t = slice(r0, r0 + R)
            tiles[t] = ftz_mul_add_rows(a[t], b[t], c[t], P=P, fa=fa, fb=fb, k=k)
        return tiles
    exact_sums = fa.emin - fa.mbits + fb.emin - fb.mbits >= -126
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        for x, f in ((a32, fa), (b32, fb)):  # inputs below 2**emin (and -0) become +0
            np_.copyto(x, np.float32(0.0), where=np_.abs(x) < np.float32(2.0**f.emin))
        p = a32 * b32
        if not exact_sums:
            p = amd._ftz(p, -126, keep_sign=True)
        d = amd._ftz(np_.asarray(c).astype(np.float32), -126, keep_sign=False)
        s = p[:, 0::P] + p[:, 1::P]
        if not exact_sums:
            s = amd._ftz(s, -126, keep_sign=True)
        if P == 4:
            s2 = p[:, 2::P] + p[:, 3::P]
            if not exact_sums:
                s2 = amd._ftz(s2, -126, keep_sign=True)
            s = s + s2
            if not exact_sums:
                s = amd._ftz(s, -126, keep_sign=True)
        s = np_.ascontiguousarray(s.T)
        per = max(1, (K if k is None else k) // P)  # groups per instruction
        for g in range(s.shape[0]):
            if g and g % per == 0:  # a new instruction flushes its C: -0 becomes +0
                d = amd._ftz(d, -126, keep_sign=False)
            d = amd._ftz(d + s[g], -126, keep_sign=True)
    out: F64 = d.astype(np.float64)
    return out
