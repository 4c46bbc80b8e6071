"""AMD CDNA matrix-core arithmetic (and the FMA chain NVIDIA's FP64 ``mma`` shares).

Batches of dot products, one per row: ``a``, ``b`` (B, K) and ``c`` (B,) float64 values exact
in their formats; results (B,) float64 (research note ``mma-parity.md`` section 3):

- :func:`fma_chain`: ``c = fma(a_k, b_k, c)`` for k ascending, one IEEE rounding each (FP32:
  two-sum in float64 plus round-to-odd, then one rounding to FP32; FP64: exact rationals).
- :func:`e_fdpa` (CDNA1 f16/bf16): each block of products and C summed exactly, rounded once to
  FP32, round-to-nearest-even.
- :func:`ftz_mul_add` (CDNA2 f16/bf16): FP32 products, pairwise FP32 sums, subnormals flushed.
- :func:`tr_fdpa` (CDNA3 f16/bf16/xf32) and :func:`gtr_fdpa` (CDNA3 fp8/bf8): a truncated
  product sum (F = 24), then C and that sum floored to 24 and 32 fraction bits, their sum floored
  to 31 fraction bits and rounded to FP32 to nearest even.

>>> import numpy as np
>>> a = np.array([[1.0, 0.0]]); b = np.array([[1.0, 0.0]])
>>> from fpemu.formats import get_format
>>> h = get_format("float16")
>>> c = np.array([-(2.0**-30)])  # section 3.4: CDNA3 floors C, CDNA1 rounds the exact sum
>>> float(tr_fdpa(a, b, c, L=8, fa=h, fb=h)[0]), float(e_fdpa(a, b, c, L=4)[0])
(0.9999999403953552, 1.0)
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format
from fpemu.tensorcore.block import F64, labels


def _f32(x: F64) -> F64:
    """Round float64 to FP32 (nearest even, overflow to inf) and back."""
    with np.errstate(over="ignore"):
        out: F64 = x.astype(np.float32).astype(np.float64)
    return out


def _round_to_odd(s: F64, err: F64) -> F64:
    """``s + err`` (``s`` its float64 rounding) rounded to odd: exact where err is 0."""
    np_ = xp(s)
    even = (s.view(np.int64) & 1) == 0
    fix = (err != 0) & even & np_.isfinite(s)
    if bool(fix.any()):
        s = s.copy()
        s[fix] = np_.nextafter(s[fix], np_.copysign(np_.inf, err[fix]))
    return s


def _two_sum(x: F64, y: F64) -> tuple[F64, F64]:
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def nan_operand(x: F64, y: F64, z: F64, d: F64) -> F64:
    """``d`` (results of ``fma(x, y, z)``) with the IEEE 754 NaN of a NaN operand.

    Where an operand is NaN the fma returns one of the NaN operands, quieted (IEEE 754 6.2.3),
    even when ``x * y`` is the invalid ``inf * 0``; x86's ``vfmadd`` (MMA-Sim's ``std::fma``)
    takes the first of ``x, y, z``. The float64 quiet bit is bit 51; an FP32 NaN held in a
    float64 keeps its payload in the top 23 fraction bits, so the quieting carries over. An
    invalid operation without NaN operands keeps the host's default NaN (x86: 0xFFF8...).
    """
    np_ = xp(d)
    nan = np_.isnan(d)
    if not bool(nan.any()):
        return d
    first = np_.where(np_.isnan(x), x, np_.where(np_.isnan(y), y, z))
    quiet = (first.view(np.int64) | np.int64(1 << 51)).view(np.float64)
    out: F64 = np_.where(nan & np_.isnan(first), quiet, d)
    return out


def fma_chain(a: F64, b: F64, c: F64, *, double: bool = False) -> F64:
    """``c = fma(a_k, b_k, c)`` for k = 0 .. K-1 (FP32, or FP64 with ``double``).

    FP32: a product of two FP32 values is exact in float64 and the two-sum error is exact, so
    rounding the float64 sum to odd and then to FP32 rounds the exact ``a*b + c`` once (53 >=
    24 + 2 bits). FP64: Boldo and Melquiond's emulation (Dekker's exact product, a two-sum with
    C, the two low parts added rounded to odd, one final rounding) where no step can overflow
    or underflow, exact rationals elsewhere.

    >>> float(fma_chain(np.array([[1.0 + 2.0**-23]]), np.array([[1.0 - 2.0**-23]]),
    ...                 np.array([-1.0]))[0]) == -(2.0**-46)
    True
    """
    np_ = xp(a, b, c)
    d = np_.array(c, dtype=np_.float64)
    for k in range(a.shape[-1]):
        if double:
            d = nan_operand(a[:, k], b[:, k], d, _fma64_vec(a[:, k], b[:, k], d))
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            p = a[:, k] * b[:, k]
            s, err = _two_sum(p, d)
            s = nan_operand(a[:, k], b[:, k], d, s)
            d = _f32(_round_to_odd(s, np_.where(np_.isfinite(err), err, 0.0)))
    out: F64 = d
    return out


def _split(x: F64) -> tuple[F64, F64]:
    """Veltkamp's split: x = hi + lo exactly, each with at most 26 significant bits."""
    t = x * 134217729.0  # 2**27 + 1
    hi = t - (t - x)
    return hi, x - hi


def _fma64_vec(a: F64, b: F64, c: F64) -> F64:
    """float64 ``fma(a, b, c)`` element-wise, exactly rounded (see :func:`fma_chain`)."""
    np_ = xp(a, b, c)
    with np.errstate(all="ignore"):
        aa, ab = np_.abs(a), np_.abs(b)
        _, ea = np_.frexp(a)
        _, eb = np_.frexp(b)
        # Every partial product and sum stays normal and finite: Dekker's product is exact and
        # the lowest bit of a*b (>= 2**(ea + eb - 108)) is above 2**-1022.
        safe = ((aa >= 2.0**-969) & (aa < 2.0**995) & (ab >= 2.0**-969) & (ab < 2.0**995)
                & (ea + eb > -900) & (ea + eb < 1000) & (np_.abs(c) < 2.0**1000))  # fmt: skip
        uh = a * b
        ah, al = _split(a)
        bh, bl = _split(b)
        ul = ((ah * bh - uh) + ah * bl + al * bh) + al * bl
        th, tl = _two_sum(c, uh)
        v, ve = _two_sum(tl, ul)
        out = th + _round_to_odd(v, ve)
        # A zero factor or a zero C: the fma is one IEEE operation (signs of zeros included).
        zero_p, zero_c = (a == 0) | (b == 0), c == 0
        out = np_.where(zero_p, uh + c, np_.where(zero_c & ~zero_p, uh, out))
    slow = ~(safe | zero_p | (zero_c & np_.isfinite(uh)))
    if bool(slow.any()):
        idx = np_.flatnonzero(slow)
        rows = zip(a[idx].tolist(), b[idx].tolist(), c[idx].tolist(), strict=True)
        out[idx] = [_fma64(x, y, z) for x, y, z in rows]
    result: F64 = out
    return result


def _fma64(a: float, b: float, c: float) -> float:
    """One exactly rounded float64 fused multiply-add (Python rationals)."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return a * b + c  # an infinite or NaN product: IEEE rules, as fma's
    if not math.isfinite(c):
        return c  # a finite exact product (even one beyond float64) leaves inf / NaN as is
    exact = Fraction(a) * Fraction(b) + Fraction(c)
    if exact == 0:
        return a * b + c  # the IEEE sign of an exact zero sum (+0 unless both are -0)
    try:
        return float(exact)  # int / int true division: correctly rounded to nearest even
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


def e_fdpa(a: F64, b: F64, c: F64, *, L: int) -> F64:
    """CDNA1: blocks of ``L`` exact products and C, summed exactly, rounded once to FP32.

    The exact sum's float64 rounding and the sign of its remainder (both from ``math.fsum``,
    which is exact) give the sum rounded to odd, which then rounds to FP32 correctly; a sum that
    overflows (or a NaN, an infinity) is the FP32 rounding of the float64 sum.
    """
    np_ = xp(a, b, c)
    d = np_.array(c, dtype=np_.float64)
    K = a.shape[-1]
    for k0 in range(0, max(K, 1), L):
        with np.errstate(invalid="ignore", over="ignore"):
            terms = np_.concatenate([a[:, k0 : k0 + L] * b[:, k0 : k0 + L], d[:, None]], axis=1)
            naive = _f32(terms.sum(axis=1))
        out = np_.empty_like(d)
        for i, row in enumerate(terms.tolist()):
            if not math.isfinite(naive[i]):
                out[i] = naive[i]
                continue
            s = math.fsum(row)
            r = math.fsum([*row, -s])
            if r != 0 and (np.float64(s).view(np.int64) & 1) == 0:
                s = math.nextafter(s, math.copysign(math.inf, r))
            out[i] = s
        d = _f32(out)
    result: F64 = d
    return result


def _ftz(x: Any, emin: int, *, keep_sign: bool) -> Any:
    np_ = xp(x)
    zero = x * x.dtype.type(0) if keep_sign else np_.zeros_like(x)
    return np_.where(np_.abs(x) < x.dtype.type(2.0**emin), zero, x)


def ftz_mul_add(a: F64, b: F64, c: F64, *, P: int, emin: int, k: int | None = None) -> F64:
    """CDNA2: FP32 products and sums, flushing subnormals (mma-parity.md 3.3).

    Inputs below ``2**emin`` (their format's) and C below 2**-126 become +0; each product and
    sum is rounded to FP32 and flushed keeping its sign; per group of ``P`` products their
    pairwise sum is added to the accumulator. A chain of instructions of ``k`` products
    (default: one instruction over all of K) flushes C at each, so a -0 becomes +0 there.
    NumPy's float32 multiply and add round to nearest even, with subnormals, as one IEEE
    operation each.
    """
    np_ = xp(a, b, c)
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        a32 = _ftz(a.astype(np.float32), emin, keep_sign=False)
        b32 = _ftz(b.astype(np.float32), emin, keep_sign=False)
        p = _ftz(a32 * b32, -126, keep_sign=True)
        d = _ftz(np_.asarray(c).astype(np.float32), -126, keep_sign=False)

        def add(x: Any, y: Any) -> Any:
            return _ftz(x + y, -126, keep_sign=True)

        step = a.shape[-1] if k is None else k
        for j in range(0, a.shape[-1], P):
            if j and j % step == 0:  # the next instruction flushes its C (-0 included)
                d = _ftz(d, -126, keep_sign=False)
            s = add(p[:, j], p[:, j + 1])
            if P == 4:
                s = add(s, add(p[:, j + 2], p[:, j + 3]))
            d = add(d, s)
    out: F64 = d.astype(np.float64)
    return out


def _label(x: F64, emin: int = -126) -> Any:
    """Exponent labels: the exponent, or ``emin`` for subnormals and zeros."""
    np_ = xp(x)
    # The float64 exponent field: zeros and float64 subnormals (field 0) fall below emin,
    # NaN and infinities (field 2047) are treated as zeros.
    e = (np_.asarray(x, dtype=np_.float64).view(np.uint64) >> np.uint64(52)) & np.uint64(0x7FF)
    e = e.astype(np.int32) - 1023
    return np_.where(e == 1024, np.int32(emin), np_.maximum(e, np.int32(emin)))


def _trunc_sum(p: F64, lab: Any, F: int) -> tuple[F64, Any]:
    """Stage 1: products cut to F fraction bits below their largest label, summed exactly.

    Returns (sum in units of 2**e, e) per row; all-zero rows give (0, about -32000)."""
    np_ = xp(p)
    # zero products have labels near -16000: never the maximum (an empty group: -32000)
    e = lab.max(axis=-1, initial=-32000)
    s = np_.trunc(np_.ldexp(p, (F - e)[:, None])).sum(axis=-1)
    return np_.ldexp(s, -F), e


def _stage2(s_dot: F64, e_dot: Any, c: F64, *, drop_far_c: bool) -> F64:
    """C and the product sum floored (24 and 32 fraction bits), summed, floored to 31, RNE."""
    np_ = xp(s_dot)
    e_c = _label(c)
    s_c = np_.ldexp(c, -e_c)
    e = np_.maximum(e_dot, e_c)
    dot = np_.ldexp(np_.floor(np_.ldexp(s_dot, e_dot - e + 32)), -32)
    cc = np_.ldexp(np_.floor(np_.ldexp(s_c, e_c - e + 24)), -24)
    if drop_far_c:
        cc = np_.where(e_c < e - 25, 0.0, cc)
    v = np_.ldexp(dot + cc, e)
    e_v = _label(v)
    v = np_.ldexp(np_.floor(np_.ldexp(v, 31 - e_v)), e_v - 31)
    return _f32(v)


def _specials_tr(raw: F64, c: F64, d: F64, overflow: Any) -> F64:
    np_ = xp(d)
    with np.errstate(invalid="ignore"):
        p = np_.where(overflow, np_.copysign(np_.inf, raw), raw)
        nan = np_.isnan(p).any(axis=-1) | np_.isnan(c)
        pos = (p == np_.inf).any(axis=-1) | (c == np_.inf)
        neg = (p == -np_.inf).any(axis=-1) | (c == -np_.inf)
    out: F64 = np_.where(nan | (pos & neg), np_.nan,
                         np_.where(pos, np_.inf, np_.where(neg, -np_.inf, d)))  # fmt: skip
    return out


def _prepared(a: F64, b: F64, fa: Format, fb: Format) -> tuple[F64, F64, Any, bool]:
    """Operands with non-finite entries zeroed, product labels (zero factors: about -16000,
    below every other label) and whether everything was finite."""
    np_ = xp(a, b)
    lab = labels(a, fa, zeros="floor", check=False) + labels(b, fb, zeros="floor", check=False)
    finite = bool(np_.isfinite(a).all() and np_.isfinite(b).all())
    if not finite:
        a, b = np_.where(np_.isfinite(a), a, 0.0), np_.where(np_.isfinite(b), b, 0.0)
    return a, b, lab.astype(np.int32), finite


def tr_fdpa(a: F64, b: F64, c: F64, *, L: int, fa: Format, fb: Format) -> F64:
    """CDNA3 f16/bf16/xf32 (mma-parity.md 3.4); a product at or above 2**128 is an infinity."""
    np_ = xp(a, b, c)
    a0, b0, lab, finite = _prepared(a, b, fa, fb)
    d = np_.array(c, dtype=np_.float64)
    for k0 in range(0, max(a.shape[-1], 1), L):
        blk = slice(k0, k0 + L)
        p, lb = a0[:, blk] * b0[:, blk], lab[:, blk]
        over = None
        if fa.emax + fb.emax >= 126:  # only 8-bit exponents reach 2**128 (significand >= 2)
            over = (np_.abs(p) >= np_.ldexp(2.0, lb)) + lb >= 128
            p = np_.where(over, 0.0, p)
        s_dot, e_dot = _trunc_sum(p, lb, 24)
        fin_c = bool(np_.isfinite(d).all())
        out = _stage2(s_dot, e_dot, d if fin_c else np_.where(np_.isfinite(d), d, 0.0),
                      drop_far_c=False)  # fmt: skip
        if not (finite and fin_c and (over is None or not bool(over.any()))):
            with np.errstate(invalid="ignore", over="ignore"):
                raw = a[:, blk] * b[:, blk]
            out = _specials_tr(raw, d, out, np_.zeros(p.shape, bool) if over is None else over)
        d = out
    result: F64 = d
    return result


def gtr_fdpa(a: F64, b: F64, c: F64, *, L: int, fa: Format, fb: Format) -> F64:
    """CDNA3 fp8/bf8 FNUZ (mma-parity.md 3.5): even and odd k summed apart, far C dropped."""
    np_ = xp(a, b, c)
    a0, b0, lab, finite = _prepared(a, b, fa, fb)
    d = np_.array(c, dtype=np_.float64)
    for k0 in range(0, max(a.shape[-1], 1), L):
        blk = slice(k0, k0 + L)
        p, lb = a0[:, blk] * b0[:, blk], lab[:, blk]
        se, ee = _trunc_sum(p[:, 0::2], lb[:, 0::2], 24)
        so, eo = _trunc_sum(p[:, 1::2], lb[:, 1::2], 24)
        e_dot = np_.maximum(ee, eo)
        s_dot = (np_.floor(np_.ldexp(se, ee - e_dot + 24))
                 + np_.floor(np_.ldexp(so, eo - e_dot + 24))) * 2.0**-24  # fmt: skip
        fin_c = bool(np_.isfinite(d).all())
        out = _stage2(s_dot, e_dot, d if fin_c else np_.where(np_.isfinite(d), d, 0.0),
                      drop_far_c=True)  # fmt: skip
        if not (finite and fin_c):
            with np.errstate(invalid="ignore", over="ignore"):
                raw = a[:, blk] * b[:, blk]
            out = _specials_tr(raw, d, out, np_.zeros(p.shape, dtype=bool))
        d = out
    result: F64 = d
    return result
