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
from fpemu.tensorcore.exact import powers

#: Products per row tile (float64 tiles of 256 KiB stay in L2 with their temporaries).
TILE = 131072


def plan(fa: Format, fb: Format, L: int, e_zero: int, *, shift: int = 0) -> tuple[int, int] | None:
    """``(W, off)`` of the label sum for these operand formats, or None if no W fits.

    Every label that can be the maximum lies in ``[e_zero, fa.emax + fb.emax + shift]``
    (``shift``: the largest block-scale exponent added to a product); each must give a normal
    float64 term ``2**(W * (l - off))`` with room for ``L`` of them below 2**1024.

    >>> from fpemu.formats import get_format
    >>> plan(get_format("bfloat16"), get_format("bfloat16"), 16, -133)
    (5, 51)
    """
    W = max(1, L.bit_length())  # L < 2**W
    if W > 6:
        return None
    top = fa.emax + fb.emax + shift
    off = top + 1 - 1023 // W
    off = max(off, 0)
    if W * (e_zero - off) < -1022 or W * (top - off + 1) > 1023:
        return None
    # An all-zero block (S = 0, exponent field 0) must read below e_zero.
    if -(1023 // W) - 1 + off >= e_zero:
        return None
    return W, off


def t_fdpa_rows(a: F64, b: F64, c: F64, *, fa: Format, fb: Format, fc: Format, L: int, F: int,
                e_zero: int, result: ResultFormat, shift: Any = None) -> F64:  # fmt: skip
    """T-FDPA of (B, K) dot products, blocks of ``L`` chained, as :func:`fused.t_fdpa`.

    ``shift``: (B, K) int exponents added to each product's value and label (block scales).

    Raises:
        ValueError: inputs not exact in their formats, or formats this route cannot label
            (:func:`plan` returns None: use :func:`fpemu.tensorcore.fused.t_fdpa`).
    """
    np_ = xp(a, b, c)
    p_ = plan(fa, fb, L, e_zero, shift=0 if shift is None else int(shift.max(initial=0)))
    if p_ is None:
        raise ValueError(f"no label plan for {fa.name} x {fb.name}, L={L}")
    W, off = p_
    B, K = a.shape
    nb = max(1, -(-K // L))
    if K != nb * L:  # zero products are neutral: pad the last block
        pad = ((0, 0), (0, nb * L - K))
        a, b = np_.pad(a, pad), np_.pad(b, pad)
        shift = None if shift is None else np_.pad(shift, pad)
    out: F64 = np_.empty(B)
    R = max(1, TILE // (nb * L))
    ones = np_.ones(L)
    for r0 in range(0, B, R):
        r1 = min(B, r0 + R)
        out[r0:r1] = _tile(a[r0:r1], b[r0:r1], np_.asarray(c[r0:r1], np_.float64), fa, fb, fc,
                           L, F, e_zero, result, W, off, ones,
                           None if shift is None else shift[r0:r1])  # fmt: skip
    return out


def _tile(a: F64, b: F64, c: F64, fa: Format, fb: Format, fc: Format, L: int, F: int,
          e_zero: int, result: ResultFormat, W: int, off: int, ones: F64,
          shift: Any) -> F64:  # fmt: skip
    np_ = xp(a)
    n, K = a.shape
    nb = K // L
    qa, fin_a, sa = powers(a, fa, "a")
    qb, fin_b, sb = powers(b, fb, "b")
    _, fin_c, _ = powers(c, fc, "c")
    finite = fin_a and fin_b
    a0, b0 = (a, b) if finite else (_zeroed(a), _zeroed(b))
    with np.errstate(all="ignore"):
        p = np_.multiply(a0, b0)
        # 2**(W * (e_a + e_b - off)) of each product, 0 for a zero factor (inf/NaN where an
        # operand is not finite: those rows are overwritten by specials).
        qa *= qb
        if shift is not None:  # block scales: powers of two on values and labels
            ps = np_.ldexp(1.0, shift)
            p *= ps
            qa *= ps
        if off:
            qa *= 2.0**-off
        s = _power(qa, W).reshape(n * nb, L) @ ones
    top = ((s.view(np.uint64) >> np.uint64(52)).astype(np.int32) - 1023) // W + off
    top = top.reshape(n, nb)
    if sa is not None or sb is not None:
        # A subnormal operand's label is its format's emin, above its exponent: raise the
        # maxima of the blocks holding one with the exact labels of those few products.
        flat = np_.concatenate([m for m in (sa, sb) if m is not None])  # repeats are harmless
        r, k = flat // K, flat % K
        lab = (labels(a0[r, k], fa, zeros="floor", check=False).astype(np.int32)
               + labels(b0[r, k], fb, zeros="floor", check=False))  # fmt: skip
        if shift is not None:
            lab += shift[r, k]
        np_.maximum.at(top, (r, k // L), lab)
    p3 = p.reshape(n, nb, L)
    d = c
    fmt_c = fc
    for j in range(nb):
        c0 = d if fin_c else _zeroed(d)
        lc = labels(c0, fmt_c, zeros="floor", check=False)
        emax = np_.maximum(np_.maximum(top[:, j], lc), e_zero)
        scale = np_.ldexp(1.0, F - emax)
        if nb == 1:  # one scale per row repeated along k: cheaper than a broadcast
            t = np_.multiply(p.reshape(-1), np_.repeat(scale, L)).reshape(n, L)
        else:
            t = np_.multiply(p3[:, j], scale[:, None])
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
    """``q ** W`` for powers of two, ``1 <= W <= 6`` (exact, or 0 on underflow), in at most
    three multiplications (``q`` may be overwritten)."""
    if W == 1:
        return q
    q2 = q * q
    if W in (3, 5, 6):
        if W == 5:
            q2 *= q2  # q**4
        q2 *= q  # q**3 or q**5
        if W == 6:
            q2 *= q2
    elif W == 4:
        q2 *= q2
    return q2


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


def dot_batch(a: F64, b: F64, c: F64, *, spec: BlockSpec, fmt: Format, b_fmt: Format,
              c_fmt: Format) -> F64 | None:  # fmt: skip
    """:func:`fpemu.tensorcore.block.chain_blocks` of a batch of single dot products, or None.

    :func:`fpemu.tensorcore.tensor_core_matmul` (every architecture model) tries it first.

    ``(..., 1, K) @ (..., K, 1)`` (+ ``c`` ``(..., 1, 1)``) is a batch of dot products: this
    module's row kernel computes the same blocks with one row per product instead of one tiny
    matrix each, several times faster (so ``fpemu.matmul(a[:, None, :], b[:, :, None],
    model="h100")`` runs at the speed of :func:`fpemu.tensorcore.mma.dpa`). It states the zero
    rule ``"floor"`` with the sign rule ``"positive"`` and needs a label :func:`plan`; None
    for other shapes and specs (the caller then runs ``chain_blocks``).

    >>> from fpemu.formats import get_format
    >>> from fpemu.tensorcore.block import FP32_TRUNC
    >>> h, spec = get_format("fp16"), BlockSpec(n=16, frac_bits=25, result=FP32_TRUNC)
    >>> a = np.array([[[1.0] + [2.0**-12] * 14 + [0.0]]])  # spec 2.7 case E10, batch of one
    >>> float(dot_batch(a, a.swapaxes(1, 2), np.zeros((1, 1, 1)), spec=spec, fmt=h, b_fmt=h,
    ...                 c_fmt=get_format("fp32"))[0, 0, 0]) - 1
    8.344650268554688e-07
    """
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    if (M, N) != (1, 1) or K == 0 or spec.zeros == "emin" or spec.tiny_sign != "positive":
        return None
    if xp(a, b, c) is not np or plan(fmt, b_fmt, spec.n, spec.floor) is None:
        return None
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    count = int(np.prod(batch, dtype=np.int64))
    a2 = np.broadcast_to(a, (*batch, 1, K)).reshape(count, K)
    b2 = np.broadcast_to(b, (*batch, K, 1)).reshape(count, K)
    c2 = np.broadcast_to(c, (*batch, 1, 1)).reshape(count)
    d = t_fdpa_rows(a2, b2, c2, fa=fmt, fb=b_fmt, fc=c_fmt, L=spec.n, F=spec.frac_bits,
                    e_zero=spec.floor, result=spec.result)  # fmt: skip
    out: F64 = d.reshape(*batch, 1, 1)
    return out
