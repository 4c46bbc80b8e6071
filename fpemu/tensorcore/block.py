"""The fused block dot-add (FBDA): one tensor-core adder step, chained along K over a matmul.

A tensor core adds ``n`` exact products and an accumulator ``c`` in one multi-operand adder
(research note ``tensorcore.md`` sections 2.1-2.6):

1. every operand gets an exponent *label*: its exponent, or the format's ``emin`` for a
   subnormal; zero terms leave the maximum, which is clamped below at the block's zero floor
   (``zeros="floor"``, the default), or a zero operand gets ``FP32_EMIN_LABEL`` (``"emin"``);
2. products are exact; a product's label is the sum of its operands' labels, NOT renormalised;
3. every term is aligned to the largest label ``Emax`` keeping ``F = frac_bits`` fractional
   bits: ``trunc(term * 2**(F - Emax))``, i.e. bits below ``2**(Emax - F)`` are cut per term
   toward zero (sign-magnitude), with no guard or sticky bit;
4. the aligned integers are added exactly and the sum is rounded once into the block's
   result format (truncation for FP32 results, round-to-nearest-even for FP16 results), which
   is the ``c`` of the next block.

The aligned terms are integers below ``2**(F + 2)`` and a block sums at most ``n + 1`` of them,
so :class:`BlockSpec` keeps the block sum below ``2**53``: the integer arithmetic is carried
out exactly in float64 (products of two inputs and scalings by powers of two are exact in
float64, and ``numpy.trunc`` cuts to an integer), which lets NumPy run it as a few passes over
cache-sized row tiles of the output, one k at a time. For fp16 and fp8 inputs the products
take a float32 -> int32 route (exact there too, see ``_narrow_products``), twice as fast, and
each block's largest label comes from one BLAS product of powers of two
(``_label_powers``) instead of a maximum over k.

>>> import numpy as np
>>> spec = BlockSpec(n=8, frac_bits=24, result=FP32_TRUNC)
>>> a = np.array([[1.0, -2.0**-24]]); b = np.array([[1.0], [1.0]])
>>> c = np.array([[-1.0 + 2.0**-24]])
>>> float(chain_blocks(a, b, c, spec=spec, fmt=get_format("fp16"))[0, 0])  # spec 2.7 E3
0.0
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from fpemu.backend import xp
from fpemu.formats import Format, get_format
from fpemu.rounding import round as fround
from fpemu.tensorcore.exact import check_exact

F64 = NDArray[np.float64]
Labels = NDArray[np.int16]

#: How zero terms take part in the choice of the common exponent (spec section 8.1;
#: mma-parity.md section 5.3 and 6). ``"floor"``: a zero product or zero ``c`` is left out of the
#: maximum, which is clamped below at the block's zero floor (MMA-Sim 2.1.1's ``e_zero``, the
#: values Khattak & Mikaitis publish). ``"emin"``: a zero operand has label -126 and its
#: products take part (an older MMA-Sim snapshot). ``"drop"`` is the old name of ``"floor"``.
ZeroRule = Literal["floor", "emin", "drop"]
ZERO_RULES: tuple[str, ...] = ("floor", "emin", "drop")
#: Names no longer accepted, with the message that says what to use instead.
_RENAMED = {
    "mmasim": "zeros='mmasim' was renamed zeros='emin' (a zero operand has label -126); "
    "MMA-Sim 2.1.1's rule is zeros='floor' (the default)"
}

#: Sign of a nonzero block sum that rounds to zero (spec section 8.2).
TinySign = Literal["positive", "keep"]
TINY_SIGNS: tuple[str, ...] = ("positive", "keep")

#: Label of a zero operand under ``zeros="emin"``, whatever its format (spec section 2.3).
FP32_EMIN_LABEL = -126
#: Label of a zero under ``zeros="floor"``: two of them still fit int16, far below any floor.
_ABSENT = -16000
#: Output elements per row tile: a float64 tile and its temporaries stay in L2.
TILE = 32768


@dataclass(frozen=True)
class ResultFormat:
    """Format a block result is rounded to (also the format of the next block's ``c``).

    Attributes:
        fmt: the accumulator format (FP32, the 13-fraction-bit e8m13 of FP8 paths, or FP16).
        mode: ``"rtz"`` truncation (FP32 accumulation) or ``"rne"`` nearest-even (FP16).
    """

    fmt: Format
    mode: Literal["rtz", "rne"]


#: The FP8 accumulator of Ada and Hopper: FP32 range, 13 fraction bits (spec section 1).
E8M13 = Format("e8m13", ebits=8, mbits=13, bias=127)
#: FP32 accumulator, truncated (all FP16/BF16/TF32 paths).
FP32_TRUNC = ResultFormat(get_format("float32"), "rtz")
#: The 13-fraction-bit "e8m13" accumulator of Ada/Hopper FP8, truncated.
E8M13_TRUNC = ResultFormat(E8M13, "rtz")
#: FP16 accumulator / output mode, rounded to nearest even (spec section 1, FP16-output mode).
FP16_RNE = ResultFormat(get_format("float16"), "rne")


@dataclass(frozen=True)
class BlockSpec:
    """Parameters of one fused block dot-add.

    Attributes:
        n: products fused into one adder step (one rounding per ``n`` products).
        frac_bits: fractional bits ``F`` kept after alignment to the largest label
            (23 + the architecture's extra alignment bits).
        result: format and rounding of the block result.
        zeros: ``"floor"`` (default): zero products and a zero ``c`` are left out and the
            maximum is clamped below at ``zero_floor`` (MMA-Sim 2.1.1, Khattak & Mikaitis);
            ``"emin"``: a zero operand has label -126 and zero terms stay in the maximum
            (spec 2.3, an older MMA-Sim). ``"drop"`` is accepted for ``"floor"``.
        zero_floor: lower clamp of the maximum label under ``zeros="floor"``; None derives
            ``result.emin - (frac_bits - 23) - 5`` (-131/-132/-133 V100/A100/H100 for FP32,
            -19/-20/-21 for FP16 results), right for F >= 23 only: the F = 13 FP8 paths pass
            the architecture's value (:meth:`fpemu.tensorcore.arch.Arch.zero_floor`).
        tiny_sign: sign of a nonzero sum that rounds to zero: ``"positive"`` (+0, MMA-Sim,
            default) or ``"keep"`` (its own sign, Khattak's MATLAB model).
    """

    n: int
    frac_bits: int
    result: ResultFormat
    zeros: ZeroRule = "floor"
    zero_floor: int | None = None
    tiny_sign: TinySign = "positive"

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"block size n={self.n} must be >= 1")
        # The exact block sum, below (n + 1) * 2**(F + 2), must convert to float64 exactly.
        if self.frac_bits < 0 or (self.n + 1) << (self.frac_bits + 2) > 1 << 53:
            raise ValueError(
                f"frac_bits={self.frac_bits} is out of range for n={self.n}; expected "
                f"0 <= frac_bits <= {51 - self.n.bit_length()}"
            )
        if self.zeros in _RENAMED:
            raise ValueError(_RENAMED[self.zeros])
        if self.zeros not in ZERO_RULES:
            raise ValueError(f"zeros={self.zeros!r} is not one of {ZERO_RULES}")
        if self.tiny_sign not in TINY_SIGNS:
            raise ValueError(f"tiny_sign={self.tiny_sign!r} is not one of {TINY_SIGNS}")

    @property
    def floor(self) -> int:
        """The ``zeros="floor"`` lower clamp of the common exponent."""
        if self.zero_floor is not None:
            return self.zero_floor
        return self.result.fmt.emin - (self.frac_bits - 23) - 5


def labels(x: F64, fmt: Format, *, zeros: ZeroRule, check: bool = True, arg: str = "x") -> Labels:
    """Exponent labels of finite values exact in ``fmt`` (non-finite entries count as zeros).

    A label is the exponent of a normal number, ``fmt.emin`` for a subnormal, and for a zero
    ``FP32_EMIN_LABEL`` (``zeros="emin"``) or a label below every floor (``"floor"``).

    Args:
        x: values exactly representable in ``fmt``.
        fmt: their format.
        zeros: the zero rule.
        check: verify that the values are exact in ``fmt``.
        arg: name of ``x`` in error messages.

    Raises:
        ValueError: ``check`` and a finite value is not in ``fmt`` (too many bits, or out of
            its range).

    >>> labels(np.array([1.5, -2.0**-24, 0.0]), get_format("fp16"), zeros="emin").tolist()
    [0, -14, -126]
    """
    np_ = xp(x)
    x = np_.asarray(x, dtype=np_.float64)
    # The float64 exponent field: labels without frexp (about 3x faster, the hot spot of the
    # instruction models); zeros and non-finite entries get the zero label.
    e = (x.view(np.uint64) >> np.uint64(52)).astype(np.int16)
    e &= 0x7FF
    lab = e - np.int16(1023)
    np_.maximum(lab, np.int16(fmt.emin), out=lab)
    lab[(x == 0) | (e == 0x7FF)] = FP32_EMIN_LABEL if zeros == "emin" else _ABSENT
    if check:
        with np.errstate(over="ignore", invalid="ignore"):
            if fmt.signed:
                bad = np_.asarray(fround(x, fmt)) != x  # out of range or too many bits
            else:  # scale formats (ue8m0, ue4m3), which fpemu.round refuses
                sig = np_.ldexp(x, (fmt.mbits - lab).astype(np.int32))
                bad = (sig != np_.trunc(sig)) | (x < 0) | (x > fmt.max)
        if bool(bad.any()) and bool((bad & np_.isfinite(x)).any()):
            raise ValueError(
                f"{arg} holds values that are not exact in {fmt.name}; round them first"
            )
    out: Labels = lab
    return out


def round_block(value: F64, result: ResultFormat, *, tiny_sign: TinySign = "positive") -> F64:
    """Round exact float64 block sums into the block result format.

    Truncation or nearest-even with gradual underflow; unlike IEEE truncation, a result at or
    above ``2**(emax + 1)`` becomes +-inf (spec 2.4 and 8.6 [C]). A zero sum is +0 (2.4 [C]).

    >>> round_block(np.array([1.0 + 2.0**-30, -(2.0**128)]), FP32_TRUNC).tolist()
    [1.0, -inf]
    """
    np_ = xp(value)
    f = result.fmt
    out = fround(value, f, mode=result.mode, overflow="inf")
    out = np_.where(np_.abs(value) >= 2.0 ** (f.emax + 1), np_.copysign(np_.inf, value), out)
    if tiny_sign == "positive":
        out = out + 0.0  # -0.0 + 0.0 == +0.0: every zero result is +0
    else:
        out = np_.where(value == 0, 0.0, out)
    rounded: F64 = np_.asarray(out, dtype=np_.float64)
    return rounded


def block_dot_add(
    a: F64,
    b: F64,
    c: F64,
    *,
    spec: BlockSpec,
    fmt: Format,
    c_fmt: Format | None = None,
    b_fmt: Format | None = None,
) -> F64:
    """One fused block dot-add ``d = round(sum_k a[..., :, k] * b[..., k, :] + c)``.

    Args:
        a: (..., M, k) values exact in ``fmt``, k <= ``spec.n``.
        b: (..., k, N) values exact in ``fmt``.
        c: (..., M, N) accumulator values, exact in ``c_fmt``.
        spec: block parameters.
        fmt: the input format (of ``a``, and of ``b`` unless ``b_fmt`` is given).
        c_fmt: the format of ``c`` (default: see :func:`chain_blocks`).
        b_fmt: the format of ``b`` when it differs (mixed e4m3 x e5m2, FP6/FP4 inputs).

    Returns:
        (..., M, N) float64 block results, exact in ``spec.result.fmt``.

    Raises:
        ValueError: more than ``spec.n`` products, or inexact inputs.

    >>> spec = BlockSpec(n=4, frac_bits=23, result=FP32_TRUNC)
    >>> a = np.array([[1.0, 1.0, 1.0, 1.0]]); b = np.full((4, 1), 2.0**-24)
    >>> c = np.array([[1.0 - 2.0**-24]])
    >>> block_dot_add(a, b, c, spec=spec, fmt=get_format("fp16")).item()  # spec 2.7 E2
    1.0000001192092896
    """
    if a.shape[-1] > spec.n:
        raise ValueError(f"a block has {a.shape[-1]} products; spec.n={spec.n}")
    return chain_blocks(a, b, c, spec=spec, fmt=fmt, c_fmt=c_fmt, b_fmt=b_fmt)


def chain_blocks(
    a: F64,
    b: F64,
    c: F64,
    *,
    spec: BlockSpec,
    fmt: Format,
    c_fmt: Format | None = None,
    b_fmt: Format | None = None,
) -> F64:
    """Fused blocks of ``spec.n`` consecutive k, chained along K in increasing k (spec 2.6).

    Each block's rounded result is the next block's ``c``; K = 0 rounds ``c`` into the
    result format (an empty block).

    Args:
        a: (..., M, K) values exact in ``fmt``.
        b: (..., K, N) values exact in ``fmt``; batch dimensions broadcast.
        c: (..., M, N) accumulator input (broadcast to the result shape).
        spec: block parameters.
        fmt: the input format (of ``a``, and of ``b`` unless ``b_fmt`` is given).
        c_fmt: the format ``c`` is exact in; default FP32 for FP32-range accumulators (FP32,
            e8m13) and the accumulator format itself otherwise (FP16).
        b_fmt: the format of ``b`` when it differs from ``fmt`` (subnormal labels are per
            operand format: mma-parity.md section 1.1).

    Returns:
        (..., M, N) float64 results, exact in ``spec.result.fmt``.

    Raises:
        ValueError: inexact inputs.
    """
    np_ = xp(a, b, c)
    res = spec.result.fmt
    c_fmt = (get_format("float32") if res.ebits == 8 else res) if c_fmt is None else c_fmt
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    shape = (*batch, a.shape[-2], b.shape[-1])
    b_fmt = fmt if b_fmt is None else b_fmt
    for x, f, arg in ((a, fmt, "a"), (b, b_fmt, "b"), (c, c_fmt, "c")):
        check_exact(x, f, arg)  # from the bits: cheaper than rounding every operand
    la = labels(a, fmt, zeros=spec.zeros, check=False)
    lb = labels(b, b_fmt, zeros=spec.zeros, check=False)
    M, K, N = shape[-2], a.shape[-1], shape[-1]

    if 0 in shape:  # nothing to compute (K = 0 with rows and columns still rounds c)
        empty: F64 = np_.empty(shape)
        return empty
    count = int(np.prod(batch, dtype=np.int64))

    def flat(x: Any, rows: int, cols: int) -> Any:
        return np_.broadcast_to(x, (*batch, rows, cols)).reshape(count, rows, cols)

    aT, laT = flat(a, M, K).swapaxes(1, 2).copy(), flat(la, M, K).swapaxes(1, 2).copy()
    b3, lb3, c3 = flat(b, K, N), flat(lb, K, N), flat(c, M, N)
    out = np_.empty(c3.shape)
    ebits = max(fmt.ebits, b_fmt.ebits)
    narrow = ebits <= 5 and spec.n << (spec.frac_bits + 2) <= 2**31
    pw = _label_powers(flat(la, M, K), lb3, ebits, spec, c_fmt)
    # Tiles of (batch elements, rows) small enough for the cache, one k at a time inside.
    rows = max(1, min(M, TILE // max(N, 1)))
    per = max(1, TILE // max(M * N, 1)) if rows == M else 1
    for i0 in range(0, c3.shape[0], per):
        i1 = i0 + per
        for r0 in range(0, M, rows):
            r1 = min(M, r0 + rows)
            tile_pw = None if pw is None else (pw[0][i0:i1, r0:r1], pw[1][i0:i1])
            out[i0:i1, r0:r1] = _chain_tile(
                aT[i0:i1, :, r0:r1], laT[i0:i1, :, r0:r1], b3[i0:i1], lb3[i0:i1],
                c3[i0:i1, r0:r1], spec, c_fmt, narrow, tile_pw,
            )  # fmt: skip
    result: F64 = out.reshape(shape)
    return result


#: Weight of a label in :func:`_label_powers`: ``2**(W * label)`` (a power of two makes the
#: maximum label a shift of the exponent field).
_W = 8


def _label_powers(la: Labels, lb: Labels, ebits: int, spec: BlockSpec, c_fmt: Format) -> Any:
    """``(2**(W*la + 1), 2**(W*lb))`` as float64 (``la`` (B, M, K), ``lb`` (B, K, N)), or None.

    For every (m, n) the matrix product of one block's slices is
    ``S = 2 * sum_k 2**(W * (la[m, k] + lb[k, n]))``: positive terms, at most ``n < 2**W`` of
    them, so whatever order and fused steps the BLAS uses, ``2**(W*L + 1) <= S <
    2**(W*(L + 1) + 1)`` for the largest product label ``L``, whose value is then
    ``(biased exponent of S >> log2(W)) - 1024 / W``: one BLAS call replaces a maximum over
    k. Used when every relevant ``2**(W*L + 1)`` is a normal float64: inputs with at most 5
    exponent bits (nonzero labels in [-56, 31]; a zero has label -126 under ``zeros="emin"``
    or a label so low that its weight is 0 under ``"floor"``). A product label below -127
    gives a subnormal or zero term and may read as -128 (so does an all-zero block), which
    changes nothing because it is below every nonzero ``c`` label (>= -126) and every block
    whose terms are all zero sums to zero.
    """
    np_ = xp(la)
    if not (ebits <= 5 and spec.n < 2**_W and c_fmt.emin >= -126):
        return None
    pa = np_.ldexp(1.0, la.astype(np.int32) * _W + 1)
    pb = np_.ldexp(1.0, lb.astype(np.int32) * _W)
    return pa, pb


def _max_product_labels(pa: F64, pb: F64) -> Labels:
    """The largest ``la[m, k] + lb[k, n]`` of a block from its :func:`_label_powers`."""
    np_ = xp(pa)
    # A column slice of pa is strided: NumPy hands only contiguous operands to the BLAS.
    s = np_.matmul(np_.ascontiguousarray(pa), pb)
    top = (_high_halves(s) >> np.uint16(4 + _W.bit_length() - 1)).view(np.int16)
    top -= 1024 // _W
    out: Labels = top
    return out


def _chain_tile(
    aT: F64,
    laT: Labels,
    b: F64,
    lb: Labels,
    c: F64,
    spec: BlockSpec,
    c_fmt: Format,
    narrow: bool,
    pw: Any = None,
) -> F64:
    """The block chain for one tile: ``aT`` (B, K, R), ``b`` (B, K, N), ``c`` (B, R, N).

    ``pw``: the tile's :func:`_label_powers` (``(B, R, K)``, ``(B, K, N)``) or None."""
    np_ = xp(aT)
    K = aT.shape[1]
    d = np_.array(c, dtype=np.float64)
    lc = labels(d, c_fmt, zeros=spec.zeros, check=False)
    finite_ab = bool(np_.isfinite(aT).all() and np_.isfinite(b).all())
    finite_c = bool(np_.isfinite(d).all())
    for k0 in range(0, max(K, 1), spec.n):
        k1 = min(K, k0 + spec.n)
        blk = slice(k0, k1)
        finite = finite_ab or bool(np_.isfinite(aT[:, blk]).all() and np_.isfinite(b[:, blk]).all())
        top = None if pw is None else _max_product_labels(pw[0][..., blk], pw[1][:, blk])
        d, lc, odd = _block(aT[:, blk], laT[:, blk], b[:, blk], lb[:, blk], d, lc, spec,
                            finite=finite and finite_c, narrow=narrow, top=top)  # fmt: skip
        if odd:  # only the slow route (overflow, specials) can make a result non-finite
            finite_c = bool(np_.isfinite(d).all())
    result: F64 = d
    return result


def _block(
    aT: F64,
    laT: Labels,
    b: F64,
    lb: Labels,
    c: F64,
    lc: Labels,
    spec: BlockSpec,
    *,
    finite: bool,
    narrow: bool,
    top: Labels | None = None,
) -> tuple[F64, Labels, bool]:
    """One block for a tile: ``aT`` (B, k, R), ``b`` (B, k, N), ``c`` and its labels (B, R, N).

    Returns the block result, its labels, and whether any result took the slow rounding
    route (subnormal, zero, overflow or special: the only ways to become non-finite).
    ``narrow`` selects the float32/int32 product path (see :func:`_narrow_products`); ``top``
    is the largest product label of each output (:func:`_max_product_labels`) or None.
    """
    np_ = xp(aT)
    a0, b0, c0 = (x if finite else np_.where(np_.isfinite(x), x, 0.0) for x in (aT, b, c))
    if top is not None:
        emax = np_.maximum(lc, top)
    else:
        emax = lc.copy()
        lab = np_.empty_like(lc)
        for k in range(aT.shape[1]):
            np_.add(laT[:, k, :, None], lb[:, k, None, :], out=lab)
            np_.maximum(emax, lab, out=emax)
    if spec.zeros != "emin":
        np_.maximum(emax, spec.floor, out=emax)
    # scale = 2**(F - Emax): every term times scale, truncated, is its aligned integer.
    shift = spec.frac_bits - emax.astype(np.int32)
    scale = np_.ldexp(1.0, shift)
    total = np_.trunc(c0 * scale)
    if narrow:
        total += _narrow_products(a0, b0, shift)
    else:
        term = np_.empty_like(total)
        for k in range(aT.shape[1]):
            np_.multiply(scale, a0[:, k, :, None], out=term)
            np_.multiply(term, b0[:, k, None, :], out=term)
            np_.trunc(term, out=term)
            np_.add(total, term, out=total)
    np_.divide(total, scale, out=total)  # exact: scale is a power of two
    d, lab, odd = _round_and_label(total, spec)
    if not finite:
        d = _with_specials(d, aT.swapaxes(1, 2), b, c)
        odd = True
    return d, lab, odd


def _narrow_products(aT: F64, b: F64, shift: NDArray[np.int32]) -> NDArray[np.int32]:
    """Sum of the aligned products for inputs with at most 5 exponent bits (fp16, fp8).

    Their products (at most 22 bits) and scalings by ``2**shift`` are exact in float32, and
    the float32 -> int32 conversion truncates toward zero, so each aligned term is
    ``int32(float32(a) * float32(b) * 2**shift)``; the caller guarantees
    ``n * 2**(F + 2) <= 2**31``. A scale clamped to ``[2**-126, 2**100]`` changes nothing: an
    Emax below F - 100 means every product is zero, and one above F + 126 (a large ``c``)
    that every scaled product (labels <= 30) is below 1 either way.
    """
    np_ = xp(aT)
    biased = np_.clip(shift, -126, 100)  # 2**shift built in the float32 exponent field
    biased += 127
    biased <<= 23
    scale = biased.view(np.float32)
    a32, b32 = aT.astype(np.float32), b.astype(np.float32)
    term = np_.empty_like(scale)
    aligned = np_.empty(scale.shape, dtype=np.int32)
    total = np_.zeros(scale.shape, dtype=np.int32)
    for k in range(a32.shape[1]):
        # einsum's outer product (0 + a*b: the sign of a zero is lost, harmlessly here) and a
        # same-shape multiply are faster than two broadcasting multiplies.
        np_.einsum("br,bn->brn", a32[:, k], b32[:, k], out=term, optimize=False)
        np_.multiply(term, scale, out=term)
        np_.copyto(aligned, term, casting="unsafe")  # truncates toward zero
        np_.add(total, aligned, out=total)
    result: NDArray[np.int32] = total
    return result


def _round_and_label(value: F64, spec: BlockSpec) -> tuple[F64, Labels, bool]:
    """:func:`round_block` and :func:`labels` of the result, fused for FP32-range results.

    For truncation to a format with FP32's exponent range, a result in the normal range keeps
    the float64 exponent (truncation is clearing fraction bits), so the label is read from the
    exponent field; the other results (zero, subnormal, overflow) take the general route.
    """
    res, zeros = spec.result, spec.zeros
    f = res.fmt
    if not (res.mode == "rtz" and f.ebits == 8):
        d = round_block(value, res, tiny_sign=spec.tiny_sign)
        return d, labels(d, f, zeros=zeros, check=False), True
    bits = value.view(np.uint64)
    lab = (bits >> np.uint64(52)).astype(np.int16)  # sign and biased exponent
    lab &= 0x7FF
    lab -= 1023
    d = (bits & np.uint64(_fraction_mask(f))).view(np.float64)
    # One unsigned comparison finds labels outside [emin, emax] (wrapping below emin).
    odd = (lab - np.int16(f.emin)).view(np.uint16) > f.emax - f.emin
    if not bool(odd.any()):
        return d, lab, False
    d[odd] = round_block(value[odd], res, tiny_sign=spec.tiny_sign)
    lab[odd] = labels(d[odd], f, zeros=zeros, check=False)
    return d, lab, True


def _high_halves(x: F64) -> NDArray[np.uint16]:
    """The top 16 bits (sign, biased exponent, 4 fraction bits) of each float64 of ``x``.

    A strided view: reading them is cheaper than shifting the whole 64-bit words.
    """
    half: NDArray[np.uint16] = x.view(np.uint16)[..., 3 if sys.byteorder == "little" else 0 :: 4]
    return half


def _fraction_mask(f: Format) -> int:
    """Mask keeping the sign, exponent and top ``f.mbits`` fraction bits of a float64."""
    return ((1 << 64) - 1) ^ ((1 << (52 - f.mbits)) - 1)


def _with_specials(finite: F64, a: F64, b: F64, c: Any) -> F64:
    """Overwrite ``finite`` where a NaN or an infinity takes part in a block (spec 2.5 [C])."""
    np_ = xp(finite)
    with np.errstate(invalid="ignore"):
        prods = a[..., :, None, :] * np_.swapaxes(b, -1, -2)[..., None, :, :]  # 0 * inf: NaN
        nan = np_.isnan(prods).any(axis=-1) | np_.isnan(c)
        pos = (prods == np_.inf).any(axis=-1) | (c == np_.inf)
        neg = (prods == -np_.inf).any(axis=-1) | (c == -np_.inf)
    out = np_.where(pos, np_.inf, np_.where(neg, -np_.inf, finite))
    result: F64 = np_.where(nan | (pos & neg), np_.nan, out)
    return result
