"""Truncated fused sums on batches of dot products: T-FDPA, ST-FDPA and GST-FDPA.

Every function here takes one dot product per row: ``a`` and ``b`` of shape (B, K) holding
values exact in their formats, ``c`` of shape (B,), and returns the (B,) block results as
float64 (research note ``mma-parity.md`` sections 1.1 and 2). A term is a value ``v`` with an
exponent *label* ``e`` (its exponent, or the format's ``emin`` for a subnormal; a product's
label is the sum of its factors' labels, not renormalised); zero terms are left out and the
common exponent is at least ``e_zero``. Each term is cut toward zero at ``2**(Emax - F)`` and
the cut terms are added exactly: they are integers below ``2**(F + 2)`` (``2**(F + 11)`` for
GST groups), so with ``F <= 35`` and at most 33 terms the sum is exact in float64.

>>> import numpy as np
>>> from fpemu.formats import get_format
>>> from fpemu.tensorcore.block import FP32_TRUNC
>>> h = get_format("float16")
>>> a = np.array([[1.0] + [2.0**-12] * 14 + [0.0]]); b = a.copy()  # spec 2.7 case E10
>>> float(t_fdpa(a, b, np.zeros(1), fa=h, fb=h, fc=get_format("float32"), L=16, F=25,
...              e_zero=-133, result=FP32_TRUNC)[0]) - 1
8.344650268554688e-07
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format
from fpemu.tensorcore.block import F64, ResultFormat, labels, round_block
from fpemu.tensorcore.rows import plan, specials, t_fdpa_rows

I32 = np.typing.NDArray[np.int32]


def _labels(x: F64, fmt: Format, arg: str) -> I32:
    """Labels of ``x`` (zeros and non-finite: a label far below every e_zero), checked exact."""
    return labels(x, fmt, zeros="floor", arg=arg).astype(np.int32)


def fused_sum(v: F64, lab: I32, F: int, e_zero: int, result: ResultFormat) -> F64:
    """Round ``sum(v)`` (B, T) of terms labelled ``lab`` as one truncated fused sum.

    Zero terms (``v == 0``) take no part in the maximum label, which is at least ``e_zero``.
    ``v`` must be finite.

    >>> from fpemu.tensorcore.block import FP32_TRUNC
    >>> fused_sum(np.array([[1.0, 2.0**-30]]), np.array([[0, -30]]), 24, -132, FP32_TRUNC)
    array([1.])
    """
    np_ = xp(v)
    lab = np_.where(v == 0, e_zero, lab)
    emax = np_.maximum(lab.max(axis=-1), e_zero)
    scale = np_.ldexp(1.0, F - emax)
    total = np_.trunc(v * scale[:, None]).sum(axis=-1)
    out: F64 = round_block(total / scale, result)
    return out


def _finite(x: F64) -> F64:
    np_ = xp(x)
    return x if bool(np_.isfinite(x).all()) else np_.where(np_.isfinite(x), x, 0.0)


def t_fdpa(a: F64, b: F64, c: F64, *, fa: Format, fb: Format, fc: Format, L: int, F: int,
           e_zero: int, result: ResultFormat, shift: Any = None) -> F64:  # fmt: skip
    """Blocks of ``L`` products chained in increasing k, C inside the first block.

    Args:
        a, b: (B, K) values exact in ``fa`` / ``fb``.
        c: (B,) values exact in ``fc``.
        L: products per block; F: fraction bits; e_zero: floor of the common exponent.
        result: the block result format (also the next block's C format).
        shift: (B, K) int exponents added to each product's value and label (block scales),
            or None.
    """
    top = 0 if shift is None else int(xp(shift).asarray(shift).max(initial=0))
    if plan(fa, fb, L, e_zero, shift=top) is not None:
        return t_fdpa_rows(a, b, c, fa=fa, fb=fb, fc=fc, L=L, F=F, e_zero=e_zero, result=result,
                           shift=shift)  # fmt: skip
    return _t_fdpa_blocks(a, b, c, fa=fa, fb=fb, fc=fc, L=L, F=F, e_zero=e_zero, result=result,
                          shift=shift)  # fmt: skip


def _t_fdpa_blocks(a: F64, b: F64, c: F64, *, fa: Format, fb: Format, fc: Format, L: int,
                   F: int, e_zero: int, result: ResultFormat,
                   shift: Any = None) -> F64:  # fmt: skip
    """:func:`t_fdpa` one block at a time over the whole batch (block scales, and the
    reference for :func:`fpemu.tensorcore.rows.t_fdpa_rows`)."""
    np_ = xp(a, b, c)
    # Zero operands get label -16000 (labels(zeros="floor")), so a product with a zero factor
    # has a label below -16000 + 127 and never reaches the maximum: no mask needed. int16 sums
    # stay in range (>= -32000).
    la = labels(a, fa, zeros="floor", arg="a")
    lb = labels(b, fb, zeros="floor", arg="b")
    finite = bool(np_.isfinite(a).all() and np_.isfinite(b).all())
    a0, b0 = (a, b) if finite else (_finite(a), _finite(b))
    d = np_.asarray(c, dtype=np_.float64)
    labels(d, fc, zeros="floor", arg="c")
    fmt_c = fc
    K = a.shape[-1]
    for k0 in range(0, max(K, 1), L):
        blk = slice(k0, min(K, k0 + L))
        p = a0[:, blk] * b0[:, blk]
        lp = la[:, blk] + lb[:, blk]
        if shift is not None:
            p = np_.ldexp(p, shift[:, blk])
            lp = lp.astype(np.int32) + shift[:, blk]
        c0 = _finite(d)
        lc = labels(c0, fmt_c, zeros="floor", check=False)
        emax = np_.maximum(np_.maximum(lp.max(axis=-1), lc), e_zero).astype(np.int32)
        scale = np_.ldexp(1.0, F - emax)
        p *= scale[:, None]
        total = np_.trunc(p, out=p).sum(axis=-1) + np_.trunc(c0 * scale)
        out: F64 = round_block(total / scale, result)
        if not finite or not bool(np_.isfinite(d).all()):
            out = specials(a[:, blk], b[:, blk], d, out)
        d = out
        fmt_c = result.fmt  # later blocks take the previous block's rounded result as C
    res: F64 = d
    return res


def st_fdpa(a: F64, b: F64, c: F64, sa: F64, sb: F64, *, fa: Format, fb: Format, fs: Format,
            L: int, F: int, e_zero: int, result: ResultFormat) -> F64:  # fmt: skip
    """Scaled T-FDPA (mxf8f6f4, mma-parity.md section 2): ue8m0 scales fold into the labels.

    Each product ``a_k * b_k`` is multiplied by ``sa[k // block] * sb[k // block]`` (powers of
    two) and its label raised by their exponents; C is not scaled. A NaN scale gives NaN.

    Args:
        sa, sb: (B, K / block) ue8m0 scale values (powers of two, or NaN).
    """
    np_ = xp(a, b, c)
    per = a.shape[-1] // sa.shape[-1]
    _, ea, na = scale_exponents(sa, fs, "scale_a")
    _, eb, nb = scale_exponents(sb, fs, "scale_b")
    shift = np_.repeat(ea + eb, per, axis=-1)
    d = t_fdpa(a, b, c, fa=fa, fb=fb, fc=result.fmt, L=L, F=F, e_zero=e_zero, result=result,
               shift=shift)  # fmt: skip
    nan = na.any(axis=-1) | nb.any(axis=-1)
    out: F64 = np_.where(nan, np_.nan, d)
    return out


def scale_exponents(s: F64, fmt: Format, arg: str) -> tuple[F64, I32, Any]:
    """(significand, label, NaN mask) of block scales: ue8m0 significand 1, ue4m3 as a value.

    >>> from fpemu.formats import get_format
    >>> sig, lab, nan = scale_exponents(np.array([2.0**-127, np.nan]), get_format("ue8m0"), "s")
    >>> sig.tolist(), lab.tolist(), nan.tolist()
    ([1.0, 0.0], [-127, 0], [False, True])
    """
    np_ = xp(s)
    nan = np_.isnan(s)
    s0 = np_.where(nan, 1.0, s)
    if bool((s0 < 0).any()) or not bool(np_.isfinite(s0).all()):
        raise ValueError(f"{arg}: block scales must be non-negative finite {fmt.name} values")
    lab = labels(s0, fmt, zeros="floor", arg=arg).astype(np.int32)
    sig = np_.where(s0 == 0, 0.0, np_.ldexp(s0, -lab))
    return np_.where(nan, 0.0, sig), np_.where(s0 == 0, 0, lab), nan


def gst_fdpa(a: F64, b: F64, c: F64, sa: F64, sb: F64, *, fs: Format, G: int, L: int, F: int,
             e_zero: int, result: ResultFormat) -> F64:  # fmt: skip
    """Group-scaled fused sum (mxf4, mxf4nvf4; mma-parity.md section 2).

    Per block of ``L`` products: each group of ``G`` consecutive products is summed exactly
    (FP4 products are multiples of 1/4 below 36, so a group sum is exact in float64), scaled
    by its scales' significands and labelled by their exponents only; a group whose products
    are all zero or whose scale product is zero is a zero term (a group that cancels to 0 keeps
    its label). The groups and C form one truncated fused sum with ``F`` fraction bits.

    Args:
        a, b: (B, K) FP4 values; c: (B,) FP32 values.
        sa, sb: (B, K / block) scale values (NaN allowed: a NaN result).
        fs: the scale format (ue8m0 or ue4m3).
    """
    np_ = xp(a, b, c)
    B, K = a.shape
    R = max(1, 131072 // max(K, 1))  # row tiles: every value below stays in cache
    if B > R:
        out: F64 = np_.empty(B)
        for r0 in range(0, B, R):
            t = slice(r0, r0 + R)
            out[t] = gst_fdpa(a[t], b[t], c[t], sa[t], sb[t], fs=fs, G=G, L=L, F=F,
                              e_zero=e_zero, result=result)  # fmt: skip
        return out
    per = K // sa.shape[-1]  # k per scale
    ga, la_s, na = scale_exponents(sa, fs, "scale_a")
    gb, lb_s, nb = scale_exponents(sb, fs, "scale_b")
    rep = per // G
    sig = np_.repeat(ga * gb, rep, axis=-1)  # (B, K / G)
    lab = np_.repeat(la_s + lb_s, rep, axis=-1)
    # Group sums and "all products zero" as BLAS products with ones (FP4 products are multiples
    # of 1/4 below 36: every partial sum is exact, in any order); non-finite rows are
    # overwritten by specials.
    with np.errstate(invalid="ignore", over="ignore"):
        p = (a * b).reshape(B * (K // G), G)
        ones = np_.ones(G)
        allzero = ((np_.abs(p) @ ones) == 0).reshape(B, K // G)
        psum = (p @ ones).reshape(B, K // G)
    zero = allzero | (sig == 0)
    v = np_.where(zero, 0.0, np_.ldexp(np_.where(zero, 0.0, psum) * sig, np_.where(zero, 0, lab)))
    lab = np_.where(zero, np.int32(-(2**20)), lab)
    nan = na.any(axis=-1) | nb.any(axis=-1)
    d = np_.asarray(c, dtype=np_.float64)
    gpb = L // G
    for g0 in range(0, K // G, gpb):
        blk = slice(g0, g0 + gpb)
        c0 = _finite(d)
        lc = _labels(c0, result.fmt, "c")
        vv = np_.concatenate([v[:, blk], c0[:, None]], axis=1)
        # A cancelled group keeps its label: mark it nonzero for the maximum with a tiny value
        # that truncates to 0 (its label is at most Emax, so 2**-1074 * 2**(F - Emax) < 1).
        keep = np_.concatenate([~allzero[:, blk] & (sig[:, blk] != 0), c0[:, None] != 0], axis=1)
        vv = np_.where(keep & (vv == 0), 5e-324, vv)
        ll = np_.concatenate([lab[:, blk], lc[:, None]], axis=1)
        out = fused_sum(vv, ll, F, e_zero, result)
        d = specials(np_.zeros((B, 1)), np_.zeros((B, 1)), d, out, extra_nan=nan)
    res: F64 = d
    return res
