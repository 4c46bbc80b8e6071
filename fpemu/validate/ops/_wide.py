"""Exact conversions between float32 and the 16-bit formats by integer passes, the same bits as
NumPy's and ml_dtypes' casts, and the subnormal tests read from the bits.

The watch path converts every bfloat16/float16 GEMM operand and cast to float32 and back;
the library casts are per-element C loops (ml_dtypes: ~0.4 ns/element from bfloat16, NumPy
~1 ns from float16 and ~2 ns to it), a few whole-array integer passes are not:

* bfloat16 -> float32 is the 16-bit word shifted into the high half of the 32-bit word
  (bfloat16 is float32's top half, every pattern: zeros, subnormals, inf, NaN payloads).
* float16 -> float32: the word sign-extended to 32 bits and shifted left by 13 puts the
  fraction in float32's fraction field and the exponent field in bits 23..27, with copies of
  the sign in bits 28..31; clearing bits 28..30 leaves a float32 word whose value is the
  float16 value times ``2**-112`` (exponent ``e - 127`` for the field ``e`` of ``e - 15``;
  a subnormal float16 ``m 2**-24`` reads as the float32 subnormal ``m 2**13 2**-149``; zeros
  stay zeros), and the multiplication by ``2**112`` is exact. Inf and NaN (field 31) would read
  as finite values: an array holding one takes NumPy's cast.
* float32 -> bfloat16/float16 (:func:`narrow16`): round to nearest even on the words, block by
  block (the temporaries stay in cache); float16's zeros and subnormal results by one float32
  addition, the rest outside the integer rule's range (NaN; float16's overflow) by the cast.

>>> import ml_dtypes
>>> widen32(np.float32([1.5, -0.0, 3e-39]).astype(ml_dtypes.bfloat16)).tolist()
[1.5, -0.0, 3.03057137321371e-39]
>>> widen32(np.float16([65504.0, -6e-8])).tolist()
[65504.0, -5.960464477539063e-08]
"""

from __future__ import annotations

from typing import Any, Literal

import ml_dtypes
import numpy as np

__all__ = ["has_subnormal", "narrow16", "widen32", "widen32_sub"]

_BF16 = np.dtype(ml_dtypes.bfloat16)
_F16 = np.dtype(np.float16)
_F32 = np.dtype(np.float32)
#: float16 -> float32: bits 28..30 of the shifted word (copies of the sign) cleared
_KEEP = np.int32(-0x70000001)  # 0x8FFFFFFF
_SCALE = np.float32(2.0**112)

#: dtype -> (unsigned view, the largest subnormal's bits, magnitude mask): its subnormals are
#: the magnitudes from 1 to the largest subnormal's word
_FIELDS: dict[np.dtype[Any], tuple[str, int, int]] = {
    _BF16: ("u2", 0x007F, 0x7FFF),
    _F16: ("u2", 0x03FF, 0x7FFF),
    _F32: ("u4", 0x007FFFFF, 0x7FFFFFFF),
}


def widen32(x: np.ndarray) -> np.ndarray:
    """``x`` (bfloat16, float16 or float32) as float32, exactly: ``x.astype(np.float32)``'s
    bits (NaN payloads, signed zeros, subnormals) and memory layout (the casts keep ``x``'s
    axis order, as ``astype`` does), a new array; float32 comes back as it is.

    >>> widen32(np.float16([1.0, np.inf])).tolist()
    [1.0, inf]
    """
    dt = x.dtype
    if dt == _BF16:
        w = x.view(np.uint16).astype(np.uint32)  # zero-extended, astype's layout
        w <<= np.uint32(16)
        return w.view(np.float32)
    if dt == _F16:
        u = x.view(np.uint16)
        # inf and NaN (exponent field 31) are not finite words below, and a thread that treats
        # subnormal inputs as zero (DAZ, torch.set_flush_denormal) would zero the subnormal
        # words in the multiplication: NumPy's cast takes both
        if (u.size and np.bitwise_and(u, np.uint16(0x7FFF)).max() >= 0x7C00) or _daz():
            return x.astype(np.float32)
        return _f16_words(x)
    if dt == _F32:
        return x
    raise TypeError(f"widen32: expected a bfloat16, float16 or float32 array, got {dt}")


def widen32_sub(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(widen32(x), has_subnormal(x))``, float16's in one pass less (the magnitudes serve
    both the inf/NaN test and the subnormal one).

    >>> w, sub = widen32_sub(np.float16([1.0, 1e-6])); w.tolist(), sub
    ([1.0, 1.0132789611816406e-06], True)
    """
    if x.dtype != _F16 or not x.size:
        return widen32(x), has_subnormal(x)
    m = np.bitwise_and(x.view(np.uint16), np.uint16(0x7FFF))  # the magnitudes' words
    w = x.astype(np.float32) if m.max() >= 0x7C00 or _daz() else _f16_words(x)  # as widen32
    m -= 1  # as has_subnormal: a zero wraps around to the largest word
    return w, bool(m.min() < 0x03FF)


def _f16_words(x: np.ndarray) -> np.ndarray:
    """Finite float16 ``x`` as float32 by the integer passes of the module's docstring."""
    s = x.view(np.int16).astype(np.int32)  # sign-extended, astype's layout
    s <<= np.int32(13)
    s &= _KEEP
    f = s.view(np.float32)
    f *= _SCALE  # exact: the float16 value (a subnormal word times 2**112 included)
    return f


def _daz() -> bool:
    """Whether this thread's float arithmetic reads subnormal inputs as zero (x86 DAZ)."""
    return bool(_SUB * _ONE == 0)


_SUB, _ONE = np.float32(2.0**-149), np.float32(1.0)


def has_subnormal(x: np.ndarray) -> bool:
    """Whether ``x`` (bfloat16, float16 or float32) holds a subnormal of its own format, read
    from the bits: a zero exponent field under a nonzero fraction (three integer passes, no
    boolean array).

    >>> has_subnormal(np.float16([0.0, -0.0, 1.0])), has_subnormal(np.float16([1e-6]))
    (False, True)
    """
    view, top, mag = _FIELDS[x.dtype]
    if not x.size:
        return False
    m = np.bitwise_and(x.view(view), mag)  # the magnitude's bits
    m -= 1  # wraps a zero around to the largest word: subnormal <=> m - 1 < the top
    return bool(m.min() < top)  # a reduction: no boolean array


#: elements per block of :func:`narrow16` (its uint32 temporaries, 256 KB each, stay in cache;
#: measured on 65536 and 262144 random normals: 16384 pays more in per-call overhead than it
#: saves, 131072 no better)
_BLOCK = 65536
#: arrays below this size take the library cast: a dozen NumPy calls per block cost more
#: (measured: at 32768 elements both take ~27 us to bfloat16, at 65536 the casts ~55 us
#: to bfloat16 and ~110 us to float16, narrow16 ~43 and ~95 us)
_SMALL = 32768
_U = np.uint32


def narrow16(x: np.ndarray, name: str) -> np.ndarray:
    """float32 ``x`` rounded to nearest even to ``name`` (``"bfloat16"``/``"float16"``):
    ``x.astype(dtype)``'s bits (ml_dtypes' cast for bfloat16, NumPy's for float16) and layout,
    a new array.

    The rule on the words ``u`` (magnitude ``a = u & 0x7FFFFFFF``): add half the dropped
    field's weight less one, plus the lowest kept bit (ties to even: a tie on an odd kept
    field carries, on an even one it does not), and drop the field; a carry runs into the
    exponent as rounding up into the next binade does, up to infinity.

    * bfloat16 keeps the top 16 bits: ``(u + 0x7FFF + bit16) >> 16``, for every word but NaN
      (ml_dtypes' rule for the others, subnormals and overflow included; ml_dtypes makes NaN the
      quiet NaN of its sign: an array holding one takes the cast).
    * float16 keeps 10 fraction bits and rebiases the exponent by 112:
      ``(a - (112 << 23) + 0xFFF + bit13) >> 13`` or'ed with the sign, for the magnitudes
      ``2**-14 <= |x| < 2**16`` (NumPy's "regular case"; from 65520 the carry gives infinity,
      as NumPy does). Below ``2**-14`` (zeros and subnormal results, which NumPy's cast
      converts ~50x slower: it raises the underflow flag by a float operation per element)
      the float32 sum ``g = |x| + 0.5`` is the answer: it lies in ``[0.5, 1)``, where float32's
      spacing is ``2**-24``, float16's subnormal spacing, so ``g = 0.5 + k 2**-24`` with
      ``k`` the float16 subnormal's word, rounded to nearest even by the addition (an even
      ``k`` is an even float32 significand); ``k = 1024`` is the smallest normal's word, and a
      float32 subnormal ``x`` gives ``k = 0`` as NumPy's signed zero, also where the thread
      reads subnormal inputs as zero. Overflow, inf and NaN take NumPy's cast.

    >>> narrow16(np.float32([1 + 2**-11, 1 + 3 * 2**-11, 7e4]), "float16").tolist()
    [1.0, 1.001953125, inf]
    """
    dt = _BF16 if name == "bfloat16" else _F16
    if name not in ("bfloat16", "float16") or x.dtype != _F32:
        raise TypeError(f"narrow16: float32 to bfloat16/float16, got {x.dtype} to {name}")
    flags = x.flags
    order: Literal["C", "F"] = "C" if flags.c_contiguous else "F"
    if (
        x.size < max(_SMALL, 1)
        or not (flags.c_contiguous or flags.f_contiguous)
        or (dt == _BF16 and np.isnan(x.min()))
    ):
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(dt)
    out = np.empty(x.shape, np.uint16, order=order)  # astype's layout for these two
    # the words in memory order (a view), and the output's
    u, o = x.reshape(-1, order=order).view(_U), out.reshape(-1, order=order)
    (_bf16_blocks if dt == _BF16 else _f16_blocks)(u, o, x.reshape(-1, order=order))
    return np.asarray(out.view(dt))


def _bf16_blocks(u: np.ndarray, o: np.ndarray, _x: np.ndarray) -> None:
    t = np.empty(min(_BLOCK, u.size), _U)
    for i in range(0, u.size, _BLOCK):
        ub, tb = u[i : i + _BLOCK], t[: min(_BLOCK, u.size - i)]
        np.right_shift(ub, _U(16), out=tb)
        tb &= _U(1)  # the lowest kept bit
        tb += _U(0x7FFF)
        tb += ub  # no wrap but for NaN words, which do not come here
        tb >>= _U(16)
        o[i : i + _BLOCK] = tb


def _f16_blocks(u: np.ndarray, o: np.ndarray, x: np.ndarray) -> None:
    n = min(_BLOCK, u.size)
    a_, r_ = np.empty(n, _U), np.empty(n, _U)
    out_of_range: list[np.ndarray] = []
    for i in range(0, u.size, _BLOCK):
        ub, a, r = u[i : i + _BLOCK], a_[: min(n, u.size - i)], r_[: min(n, u.size - i)]
        np.bitwise_and(ub, _U(0x7FFFFFFF), out=a)
        a -= _U(0x38800000)  # |x| - 2**-14 on the words: 0 <= a < 2**16 - 2**-14 <=> a <= top
        if a.max() > 0x0EFFFFFF:
            out_of_range.append(np.flatnonzero(a > 0x0EFFFFFF) + i)
        np.right_shift(ub, _U(13), out=r)
        r &= _U(1)  # the lowest kept bit
        r += a
        r += _U(0x00800FFF)  # a + 2**23 is the magnitude rebiased by 112; 0xFFF: half less one
        r >>= _U(13)
        np.right_shift(ub, _U(16), out=a)
        a &= _U(0x8000)  # the sign
        r |= a
        o[i : i + _BLOCK] = r
    if out_of_range:
        idx = np.concatenate(out_of_range)
        o[idx] = _f16_outside(x[idx])


def _f16_outside(x: np.ndarray) -> np.ndarray:
    """The float16 words of float32 values outside :func:`_f16_blocks`' range (see
    :func:`narrow16`): below it by the addition of 0.5, above it (overflow, inf, NaN) by
    NumPy's cast."""
    u = x.view(_U)
    a = u & _U(0x7FFFFFFF)
    big = a >= _U(0x47800000)  # |x| >= 2**16: overflow, inf, NaN
    if big.any():
        a[big] = 0  # their words come from the cast below (and a NaN would raise "invalid")
    g = a.view(np.float32) + np.float32(0.5)  # RN to a multiple of 2**-24 below 2**-14
    h = g.view(_U) - _U(0x3F000000)
    h |= (u >> _U(16)) & _U(0x8000)
    out = h.astype(np.uint16)
    if big.any():
        with np.errstate(over="ignore", invalid="ignore"):
            out[big] = x[big].astype(_F16).view(np.uint16)
    return out
