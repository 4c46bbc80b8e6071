"""Fast T-FDPA on batches of dot products: row tiles in cache, BLAS for every sum over k.

:func:`fpemu.tensorcore.fused.t_fdpa` states the arithmetic; this module computes the same
bits faster for the large batches of single-instruction dot products a differential campaign
sends (mma-parity.md section 1.1). Three facts make it cheap:

1. Row tiles of about 32,768 products stay in the L2 cache, and every pass over a tile is a
   same-shape NumPy operation on contiguous memory (a sum or maximum over a short last axis,
   or a broadcast of one value per row, costs several times more in NumPy).
2. A sum over k is a matrix-vector product with a vector of ones: the summed values are
   integers (aligned terms) below ``2**53``, exact in any order the BLAS picks.
3. The largest product label of a block is read from one more BLAS sum,
   ``S = sum_k 2**(W * (la_k + lb_k - off))``, of at most ``n < 2**W`` positive powers of two:
   ``2**(W * (L - off)) <= S < 2**(W * (L - off + 1))`` for the largest label ``L``, so ``L``
   is the float64 exponent of ``S`` divided by ``W`` (in any summation order). ``2**l`` of an
   operand is its bits with the fraction cleared; products with a zero factor add 0.

Inputs are checked exact in their formats from their bits (low fraction bits zero, magnitude at
most the format's maximum, subnormals checked one by one). Operands that are subnormal in
their format take their format's ``emin`` as label, so the rows holding one are relabelled
exactly. Rows with a NaN or an infinity get their result from
:func:`fpemu.tensorcore.fused.specials`, as in the reference route.

>>> import numpy as np
>>> from fpemu.formats import get_format
>>> from fpemu.tensorcore.block import FP32_TRUNC
>>> h = get_format("float16")
>>> a = np.array([[1.0] + [2.0**-12] * 14 + [0.0]]); b = a.copy()  # spec 2.7 case E10
>>> float(t_fdpa_rows(a, b, np.zeros(1), fa=h, fb=h, fc=get_format("float32"), L=16, F=25,
...                   e_zero=-133, result=FP32_TRUNC)[0]) - 1
8.344650268554688e-07
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format
from fpemu.tensorcore.block import (
    F64,
    BlockSpec,
    ResultFormat,
    _round_and_label,
    labels,
    round_block,
)

#: Products per row tile (float64 tiles of 256 KiB stay in L2 with their temporaries).
TILE = 131072
_ABS = np.uint64(0x7FFF_FFFF_FFFF_FFFF)
_EXP = np.uint64(0x7FF0_0000_0000_0000)


def plan(fa: Format, fb: Format, L: int, e_zero: int) -> tuple[int, int] | None:
    """``(W, off)`` of the label sum for these operand formats, or None if no W fits.

    Every label that can be the maximum lies in ``[e_zero, fa.emax + fb.emax]``; each must give
    a normal float64 term ``2**(W * (l - off))`` with room for ``L`` of them below 2**1024.

    >>> from fpemu.formats import get_format
    >>> plan(get_format("bfloat16"), get_format("bfloat16"), 16, -133)
    (5, 51)
    """
    W = max(1, L.bit_length())  # L < 2**W
    top = fa.emax + fb.emax
    off = top + 1 - 1023 // W
    off = max(off, 0)
    if W * (e_zero - off) < -1022 or W * (top - off + 1) > 1023:
        return None
    # An all-zero block (S = 0, exponent field 0) must read below e_zero.
    if -(1023 // W) - 1 + off >= e_zero:
        return None
    return W, off


def powers(x: F64, fmt: Format, arg: str) -> tuple[F64, bool]:
    """``2**label`` of each value (0 for a zero), after checking ``x`` exact in ``fmt``.

    Returns the powers (float64, ``inf`` where ``x`` is not finite) and whether every value is
    finite. The label of a value subnormal in ``fmt`` is ``fmt.emin``.

    Raises:
        ValueError: a finite value not exact in ``fmt`` (naming ``arg``).

    >>> from fpemu.formats import get_format
    >>> q, finite = powers(np.array([3.0, 2.0**-15, 0.0, -0.5]), get_format("float16"), "a")
    >>> q.tolist(), finite
    ([2.0, 6.103515625e-05, 0.0, 0.5], True)
    >>> powers(np.array([1.0 + 2.0**-11]), get_format("float16"), "a")
    Traceback (most recent call last):
    ValueError: a holds values that are not exact in float16; round them first
    """
    np_ = xp(x)
    u = x.view(np.uint64)
    low = np.uint64((1 << (52 - fmt.mbits)) - 1)
    # max and min propagate NaN, so both comparisons fail for a NaN as for an infinity.
    finite = bool(x.max() <= fmt.max) and bool(x.min() >= -fmt.max)
    if not finite or bool(np_.bitwise_or.reduce(u, axis=None) & low):
        labels(x, fmt, zeros="floor", arg=arg)  # raises for a finite inexact value
        finite = bool(np_.isfinite(x).all())
    q = u & _EXP  # 2**exponent as float64 bits; 0 for a zero
    tiny = np.uint64(np.float64(2.0**fmt.emin).view(np.uint64))
    if bool(q.min() < tiny):  # zeros or values subnormal in fmt
        one = np.uint64(1)
        q -= one  # a zero wraps to the top and stays there: it comes back as 0 below
        sub = q < tiny - one
        if bool(sub.any()):
            t = x[sub] * 2.0 ** (fmt.mbits - fmt.emin)  # a multiple of 2**(emin - mbits)
            if bool((t != np_.trunc(t)).any()):
                raise ValueError(
                    f"{arg} holds values that are not exact in {fmt.name}; round them first"
                )
            np_.maximum(q, tiny - one, out=q)
        q += one
    out: F64 = q.view(np.float64)
    return out, finite


def t_fdpa_rows(a: F64, b: F64, c: F64, *, fa: Format, fb: Format, fc: Format, L: int, F: int,
                e_zero: int, result: ResultFormat) -> F64:  # fmt: skip
    """T-FDPA of (B, K) dot products, blocks of ``L`` chained, as :func:`fused.t_fdpa`.

    Raises:
        ValueError: inputs not exact in their formats, or formats this route cannot label
            (:func:`plan` returns None: use :func:`fpemu.tensorcore.fused.t_fdpa`).
    """
    np_ = xp(a, b, c)
    p_ = plan(fa, fb, L, e_zero)
    if p_ is None:
        raise ValueError(f"no label plan for {fa.name} x {fb.name}, L={L}")
    W, off = p_
    B, K = a.shape
    nb = max(1, -(-K // L))
    if K != nb * L:  # zero products are neutral: pad the last block
        pad = ((0, 0), (0, nb * L - K))
        a, b = np_.pad(a, pad), np_.pad(b, pad)
    out: F64 = np_.empty(B)
    R = max(1, TILE // (nb * L))
    ones = np_.ones(L)
    for r0 in range(0, B, R):
        r1 = min(B, r0 + R)
        out[r0:r1] = _tile(a[r0:r1], b[r0:r1], np_.asarray(c[r0:r1], np_.float64), fa, fb, fc,
                           L, F, e_zero, result, W, off, ones)  # fmt: skip
    return out


def _tile(a: F64, b: F64, c: F64, fa: Format, fb: Format, fc: Format, L: int, F: int,
          e_zero: int, result: ResultFormat, W: int, off: int, ones: F64) -> F64:  # fmt: skip
    np_ = xp(a)
    n, K = a.shape
    nb = K // L
    qa, fin_a = powers(a, fa, "a")
    qb, fin_b = powers(b, fb, "b")
    _, fin_c = powers(c, fc, "c")
    finite = fin_a and fin_b
    a0, b0 = (a, b) if finite else (_zeroed(a), _zeroed(b))
    with np.errstate(all="ignore"):
        p = np_.multiply(a0, b0)
        # 2**(W * (label - off)) of each product, 0 for a zero factor (inf/NaN where an
        # operand is not finite: those rows are overwritten by specials).
        qa *= qb
        if off:
            qa *= 2.0**-off
        s = _power(qa, W).reshape(n * nb, L) @ ones
    top = ((s.view(np.uint64) >> np.uint64(52)).astype(np.int32) - 1023) // W + off
    top = top.reshape(n, nb)
    p3 = p.reshape(n, nb, L)
    d = c
    fmt_c = fc
    for j in range(nb):
        c0 = d if fin_c else _zeroed(d)
        lc = labels(c0, fmt_c, zeros="floor", check=False)
        emax = np_.maximum(np_.maximum(top[:, j], lc), e_zero)
        scale = np_.ldexp(1.0, F - emax)
        t = np_.multiply(p3[:, j, :], scale[:, None])
        np_.trunc(t, out=t)
        total = t @ ones
        total += np_.trunc(c0 * scale)
        total /= scale
        if result.mode == "rtz" and result.fmt.ebits == 8:
            new, _, _ = _round_and_label(total, _spec(result))
        else:
            new = round_block(total, result)
        if not (finite and fin_c):
            new = specials(a[:, j * L : (j + 1) * L], b[:, j * L : (j + 1) * L], d, new)
            fin_c = bool(np_.isfinite(new).all())
        d = new
        fmt_c = result.fmt
    res: F64 = d
    return res


def _power(q: F64, W: int) -> F64:
    """``q ** W`` for powers of two by squaring (exact, or 0 on underflow; ``q`` is reused)."""
    acc = None
    while True:
        if W & 1:
            acc = q.copy() if acc is None else acc * q
        W >>= 1
        if not W:
            break
        q *= q
    assert acc is not None
    return acc


def specials(a: F64, b: F64, c: F64, finite: F64, extra_nan: Any = None) -> F64:
    """Overwrite rows of ``finite`` where a NaN or an infinity takes part (mma-parity.md 1.1).

    A NaN operand, 0 * inf, or infinities of both signs give NaN; otherwise an infinity gives
    itself. ``extra_nan``: (B,) rows forced to NaN (a NaN block scale).

    >>> specials(np.array([[np.inf, 1.0]]), np.array([[1.0, 1.0]]), np.zeros(1),
    ...          np.zeros(1)).tolist()
    [inf]
    """
    np_ = xp(finite)
    bad = ~(np_.isfinite(a).all(axis=-1) & np_.isfinite(b).all(axis=-1) & np_.isfinite(c))
    if extra_nan is not None:
        bad |= extra_nan
    if not bool(bad.any()):
        return finite
    with np.errstate(invalid="ignore", over="ignore"):
        p = a[bad] * b[bad]
        cb = c[bad]
        nan = np_.isnan(p).any(axis=-1) | np_.isnan(cb)
        pos = (p == np_.inf).any(axis=-1) | (cb == np_.inf)
        neg = (p == -np_.inf).any(axis=-1) | (cb == -np_.inf)
    if extra_nan is not None:
        nan |= extra_nan[bad]
    row = np_.where(pos, np_.inf, np_.where(neg, -np_.inf, finite[bad]))
    out = finite.copy()
    out[bad] = np_.where(nan | (pos & neg), np_.nan, row)
    return out


def _zeroed(x: F64) -> F64:
    np_ = xp(x)
    out: F64 = np_.where(np_.isfinite(x), x, 0.0)
    return out


_SPECS: dict[ResultFormat, Any] = {}


def _spec(result: ResultFormat) -> Any:
    if result not in _SPECS:
        _SPECS[result] = BlockSpec(n=1, frac_bits=0, result=result)
    return _SPECS[result]
