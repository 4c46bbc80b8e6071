"""Scaled matmul of quantized operands: FP8 tensor-core accumulation, then the scale epilogue.

Accumulation (fp8-mx.md §6.3): ``"fast"`` runs one tensor-core chain over all of K from +0
(cuBLAS FAST_ACCUM); ``"split"`` runs an independent chain per ``chunk`` (128) elements of K,
each from +0, and adds the partials serially in K order in FP32 with round-to-nearest
(cuBLASLt's promotion, DeepSeek-V3's N_C = 128). The chain is the FP8 tensor-core model of
:mod:`fpemu.tensorcore` (``model="h100"`` or ``"ada"``).

Epilogue: tensor-wise or row-wise scales (dequantization factors, ``scale_inv``):
``y = RN32(acc * RN32(sa * sb) + 0)`` (``torch._scaled_mm``: one FFMA with +0, §6.4; an
exact zero gives +0, a nonzero product that underflows keeps its sign). Scales along K
(blockwise FP8 1x128/128x128, MX): per K block ``k`` of the scales,
``P_k`` = the block's chain from +0, then ``y = fma32(RN32(P_k * sa_k), sb_k, y)`` (TE's
blockwise GEMM reference order, §5.3; FP4/FP6 blocks: ``P_k`` is the exact block sum rounded
once). NVFP4 operands follow TE's NVFP4 reference (§3.8): ``y = RN32(y + RN32(RN32(sa_k *
sb_k) * P_k))`` per block, then ``RN32(alpha * y)`` with ``alpha = RN32(ta * tb)``. With
power-of-two (E8M0) scales the two orders give the same result. A NaN result is the
hardware's FP32 NaN, 0x7FFFFFFF once narrowed to float32.

>>> import numpy as np
>>> a = np.array([[256.0] + [2.0**-6] * 31]); b = np.ones((32, 1))
>>> float(scaled_matmul(a, b, accumulation="fast", model="h100")[0, 0])  # 31 * 2**-6 truncated
256.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import FormatLike, get_format
from fpemu.quant.quantize import Quantized
from fpemu.tensorcore import tensor_core_matmul

F32 = np.float32
_TC_FORMATS = ("float8_e4m3fn", "float8_e5m2")
_ELEMENT_FORMATS = (*_TC_FORMATS, "float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn")


def fma32(a: Any, b: Any, c: Any) -> Any:
    """Correctly rounded float32 ``a * b + c`` (float32 inputs; round-to-odd in float64).

    ``a * b`` is exact in float64; the sum is rounded to odd (TwoSum gives the error), then
    narrowed to float32: 53 >= 24 + 2 bits makes that a single rounding (fp8-mx.md §5.3).

    >>> float(fma32(np.float32(1 + 2**-23), np.float32(1 - 2**-23), np.float32(-1)))
    -1.4210854715202004e-14
    """
    np_ = xp(a, b, c)
    p = np_.asarray(a, np.float64) * np_.asarray(b, np.float64)
    c64 = np_.asarray(c, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + c64
        bp = s - c64
        e = (c64 - (s - bp)) + (p - bp)  # TwoSum: bp is the part of s that came from p
        even = (s.view(np_.int64) & 1) == 0
        fix = (e != 0) & even & np_.isfinite(s)
        s = np_.where(fix, np_.nextafter(s, np_.where(e > 0, np_.inf, -np_.inf)), s)
    return s.astype(np.float32)


def _chain(a: Any, b: Any, fmt: str, model: str) -> Any:
    """Tensor-core chain over all of a's K from +0 (FP8), or the exact sum (FP4/FP6) in FP32."""
    if fmt in _TC_FORMATS:
        return tensor_core_matmul(a, b, arch=model, fmt=fmt).astype(np.float32)
    return (a @ b).astype(np.float32)  # FP4/FP6 products and <= 32-term sums are exact


def scaled_matmul(
    a: Any,
    b: Any,
    *,
    scale_a: Any = 1.0,
    scale_b: Any = 1.0,
    fmt: FormatLike | None = None,
    accumulation: str = "split",
    model: str = "h100",
    chunk: int = 128,
) -> Any:
    """``(a * scale_a) @ (b * scale_b)`` as an FP8/MX/NVFP4 GEMM computes it, in FP32.

    Args:
        a: (M, K) element values exact in ``fmt``, or a :class:`Quantized` along K (axis 1).
        b: (K, N) element values, or a :class:`Quantized` along K (axis 0).
        scale_a: dequantization scale(s) of ``a``: a scalar, (M, 1) per row, or (M, K/bk)
            per K block of ``bk`` elements (blockwise FP8: bk = 128).
        scale_b: a scalar, (1, N) per column, or (K/bk, N) (128x128 weight blocks: repeat
            each block's scale over its 128 columns).
        fmt: element format (default: the Quantized operands', else e4m3). Tensor-core
            models take float8_e4m3fn or float8_e5m2 (both operands in one format).
        accumulation: ``"split"`` (promote to FP32 every ``chunk`` K) or ``"fast"``.
        model: FP8 tensor-core model: ``"h100"`` (Hopper) or ``"ada"``, or an alias.
        chunk: K elements per promotion in split accumulation (default 128).

    Returns:
        (M, N) float64 array of float32 values.

    Raises:
        ValueError: bad shapes, scales that are NaN, infinite, negative or of a wrong shape, a K
            block size that does not divide ``chunk``, unknown accumulation.
        TypeError: integer operands.
    """
    alpha, order = F32(1.0), "fma"
    if isinstance(a, Quantized) or isinstance(b, Quantized):
        if not (isinstance(a, Quantized) and isinstance(b, Quantized)):
            raise TypeError("a and b must both be Quantized or both be arrays")
        two_level = a.block_format.two_level
        a, scale_a, ta, fa = _from_quantized(a, 1, "a")
        b, scale_b, tb, fb = _from_quantized(b, 0, "b")
        if fa != fb:
            raise ValueError(f"a and b have different element formats: {fa}, {fb}")
        fmt = fa if fmt is None else fmt
        alpha = F32(F32(ta) * F32(tb))
        order = "outer" if two_level else "fma"
    f = get_format("e4m3" if fmt is None else fmt, arg="fmt").name
    if f not in _ELEMENT_FORMATS:
        raise ValueError(f"fmt={f!r} is not an FP8/FP6/FP4 element format; accepted: "
                         f"{', '.join(_ELEMENT_FORMATS)}")  # fmt: skip
    if accumulation not in ("split", "fast"):
        raise ValueError(f"accumulation={accumulation!r}; accepted: split, fast")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"chunk={chunk!r} must be a positive int")
    np_ = xp(a, b)
    A, B = np_.asarray(a), np_.asarray(b)
    if A.dtype.kind != "f" or B.dtype.kind != "f":
        raise TypeError(f"a and b must be float arrays, got {A.dtype} and {B.dtype}")
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"a (M, K) and b (K, N) do not match: {A.shape}, {B.shape}")
    M, K = A.shape
    N = B.shape[1]
    sa, sb = _scale(scale_a, "scale_a", M, 0), _scale(scale_b, "scale_b", N, 1)
    nka = sa.shape[1] if sa.ndim == 2 and sa.shape[1] > 1 else 1
    nkb = sb.shape[0] if sb.ndim == 2 and sb.shape[0] > 1 else 1
    if max(nka, nkb) > 1:
        return _blockwise(A, B, sa, sb, max(nka, nkb), f, model, alpha, order)
    if accumulation == "fast" or f not in _TC_FORMATS:
        acc = _chain(A, B, f, model)
    else:
        acc = np_.zeros((M, N), np.float32)
        for k0 in range(0, K, chunk):  # serial FP32 sum of the per-chunk chains, from +0
            acc = (acc + _chain(A[:, k0 : k0 + chunk], B[k0 : k0 + chunk], f, model)).astype(F32)
    scale = ((sa.astype(F32) * sb.astype(F32)).astype(F32) * alpha).astype(F32)
    # One FFMA(acc, scale, +0): the float64 product of two float32 values is exact, adding +0
    # turns only an exact -0 into +0, and the one rounding to float32 keeps the sign of a
    # nonzero product that underflows (mmaemu's epilogue, measured on hardware).
    with np.errstate(invalid="ignore", over="ignore"):
        y = (acc.astype(np.float64) * scale.astype(np.float64) + 0.0).astype(F32)
    return _hardware_nan(y)


def _blockwise(
    A: Any, B: Any, sa: Any, sb: Any, nk: int, f: str, model: str, alpha: Any, order: str
) -> Any:
    np_ = xp(A, B)
    K = A.shape[1]
    if K % nk:
        raise ValueError(f"K={K} is not a multiple of the {nk} scale blocks along K")
    bk = K // nk
    sa = np_.broadcast_to(sa, (A.shape[0], nk)).astype(F32)
    sb = np_.broadcast_to(sb, (nk, B.shape[1])).astype(F32)
    y = np_.zeros((A.shape[0], B.shape[1]), np.float32)
    for k in range(nk):
        p = _chain(A[:, k * bk : (k + 1) * bk], B[k * bk : (k + 1) * bk], f, model)
        if order == "outer":  # TE NVFP4 reference: outer product of the scales, times P, add
            w = (sa[:, k : k + 1] * sb[k : k + 1, :]).astype(F32)
            y = (y + (w * p).astype(F32)).astype(F32)
        else:
            y = fma32((p * sa[:, k : k + 1]).astype(F32), sb[k : k + 1, :], y)
    if alpha != 1:
        y = (alpha * y).astype(F32)
    return _hardware_nan(y)  # no "+ 0.0": the fma's -0 of an underflowing product stays


def _hardware_nan(y: Any) -> Any:
    """float32 ``y`` as float64, each NaN the one whose float32 word is 0x7FFFFFFF.

    The GEMM writes that NaN (mmaemu, fpemu.tensorcore.specials); float64 0x7FFFFFFFE0000000
    narrows to it, where NumPy's own NaN would narrow to 0x7FC00000.
    """
    np_ = xp(y)
    nan = np_.isnan(y)
    if bool(nan.any()):
        y = np_.where(nan, np_.asarray(0x7FFFFFFF, np_.uint32).view(F32), y)
    return y.astype(np.float64)


def _scale(s: Any, arg: str, n: int, along: int) -> Any:
    np_ = xp(s)
    arr = np_.asarray(s, dtype=np.float64)
    if bool(np_.isnan(arr).any()) or bool((arr < 0).any()) or not bool(np_.isfinite(arr).all()):
        raise ValueError(f"{arg} must hold finite non-negative scales; got NaN, Inf or < 0")
    if arr.ndim == 0:
        return arr.reshape(1, 1)
    if arr.ndim != 2 or arr.shape[along] not in (1, n):
        want = "(M, 1) or (M, K/bk)" if along == 0 else "(1, N) or (K/bk, N)"
        raise ValueError(f"{arg} has shape {arr.shape}; accepted: a scalar, {want}")
    return arr


def _from_quantized(q: Quantized, k_axis: int, arg: str) -> tuple[Any, Any, float, str]:
    if q.elements.ndim != 2 or q.axis != k_axis:
        raise ValueError(f"{arg} must be a 2-D Quantized with blocks along K (axis={k_axis})")
    if q.block_format.integer:
        raise ValueError(f"{arg}: MXINT8 operands are not supported by scaled_matmul")
    if bool(np.isnan(q.scales).any()):
        raise ValueError(f"{arg} has NaN scales (a block contained NaN)")
    t = 1.0 if q.tensor_scale is None else q.tensor_scale
    return q.elements, q.scales, t, q.block_format.element.name
