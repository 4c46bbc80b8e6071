"""NVFP4 two-level scaling: E2M1 elements, UE4M3 block scales, one FP32 tensor scale.

Two operation orders, each bit for bit in float32 (fp8-mx.md §3.2, §3.3):

- ``"te"``: Transformer Engine's kernel/reference: ``S_enc = RN32(2688/G)``,
  ``S_dec = RN32(1/S_enc)``, block scale ``E4M3(RN32(amax_b * RN32(S_enc * RN32(1/6))))``
  (E4M3 subnormals and 0 allowed), element multiplier ``min(RN32(1/RN32(s_b * S_dec)),
  FLT_MAX)``.
- ``"torchao"``: ``pts = RN32(G/2688)``, block scale ``E4M3(clamp(RN32(RN32(amax_b/6)/pts),
  2**-6, 448))``, multiplier ``RN32(RN32(1/pts)/s_b)``. A zero, tiny (``G/2688`` rounds to 0,
  or ``1/pts`` overflows) or infinite tensor sends that arithmetic through NaN (0/0, inf/inf,
  0 * inf); torchao's answer is reproduced: a NaN block scale (code 0xFF) and the codes its
  E2M1 conversion gives NaN elements (:func:`torchao_nan_codes`).

Stochastic rounding follows TE's software fallback (fp8-mx.md §3.6): 8 random bits ``r`` per
element, ``t = RN32(|y| + (r/256) * step)``, then truncation to the E2M1 grid of ``t``'s binade.

>>> import numpy as np
>>> x = np.array([[6.0, 0.25, 0.75, 2.5, 5.0] + [0.0] * 11], dtype=np.float32)
>>> s, inv, tensor = two_level_scales(np.abs(x).max(-1, keepdims=True), 6.0, "te")
>>> float(s[0, 0]), float(tensor), round_e2m1(x * inv, "rne").tolist()[0][:5]
(448.0, 0.0022321429569274187, [6.0, 0.0, 1.0, 2.0, 4.0])
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import get_format
from fpemu.rounding import round as fround

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
_E4M3 = get_format("float8_e4m3fn")
_E2M1 = get_format("float4_e2m1fn")
#: 448 * 6: E4M3 max times E2M1 max (exact in float32).
_GLOBAL = F32(2688.0)
E4M3_EPS = F32(2.0**-6)  # torchao's lower clamp of block scales (finfo(e4m3fn).tiny)


def _e4m3(v: Any) -> Any:
    """RNE to E4M3 with saturation of a non-negative float32 array (``cvt.rn.satfinite``)."""
    return fround(v.astype(np.float64), _E4M3, overflow="saturate").astype(np.float32)


def two_level_scales(block_amax: Any, tensor_amax: Any, order: str) -> tuple[Any, Any, Any]:
    """Block scales (E4M3 values), element multipliers and the tensor decode scale.

    Args:
        block_amax: float32 array of block maxima.
        tensor_amax: the tensor's amax ``G`` (float32 scalar).
        order: ``"te"`` or ``"torchao"``.

    Returns:
        ``(s_b, inv_b, tensor_scale)``: float32 arrays shaped like ``block_amax`` and a float32
        scalar; an element is encoded as ``E2M1(RN32(x * inv_b))`` and decodes to
        ``q * s_b * tensor_scale``.

    Raises:
        ValueError: unknown order.
    """
    np_ = xp(block_amax)
    b = np_.asarray(block_amax, dtype=np.float32)
    g = F32(tensor_amax)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        if order == "te":
            s_enc = min(_GLOBAL / g, FLT_MAX) if g != 0 else F32(1.0)
            s_enc = F32(1.0) if s_enc == 0 else F32(s_enc)
            s_dec = F32(1.0) / s_enc
            m = s_enc * (F32(1.0) / F32(6.0))
            s_b = _e4m3(np_.minimum(b * m, FLT_MAX))
            inv = np_.minimum(F32(1.0) / (s_b * s_dec), FLT_MAX)
            return s_b, inv.astype(np.float32), F32(s_dec)
        if order == "torchao":
            pts = F32(g / _GLOBAL)
            q = np_.clip((b / F32(6.0)) / pts, E4M3_EPS, F32(448.0))  # NaN passes, as torch's
            s_b = _e4m3(q)
            nan = np_.isnan(q)  # 0/0 (G = 0, or G/2688 -> 0) or inf/inf (G = inf)
            if bool(nan.any()):
                # torch's float8_e4m3fn NaN keeps the sign (0x7F | sign) and widens back to
                # float32 as sign | 0x7FF00000 (all exponent and mantissa bits set): torchao
                # divides by that NaN, whose bits decide its element codes (torchao_nan_codes)
                word = np_.where(np_.signbit(q), np.uint32(0xFFF00000), np.uint32(0x7FF00000))
                s_b = np_.where(nan, word.view(np.float32), s_b)
            inv = (F32(1.0) / pts) / s_b
            return s_b, inv.astype(np.float32), pts
    raise ValueError(f"scale_rule={order!r} is not an NVFP4 order; accepted: te, torchao")


def torchao_nan_codes(y: Any) -> Any:
    """The E2M1 codes torchao's ``f32_to_f4_unpacked`` gives NaN float32 values ``y``.

    torchao's bit-level conversion has no NaN case: a NaN takes its normal-range branch (the
    exponent rebiased by 1 - 127, a round-half-even bias added, the bits above the kept
    mantissa bit shifted down and wrapped to a byte) and its sign bit becomes bit 3. So the
    code depends on the NaN's bits: 0x7FC00000 gives 0x3, 0xFFC00000 (x86's default NaN, as
    from 0 * inf) 0xB, 0xFFF00000 (an E4M3 NaN scale widened) 0xC.

    >>> w = np.array([0x7FC00000, 0xFFC00000, 0xFFF00000, 0x7FFFFFFF], np.uint32)
    >>> torchao_nan_codes(w.view(np.float32)).tolist()
    [3, 11, 12, 4]
    """
    np_ = xp(y)
    bits = np_.asarray(y, dtype=np.float32).view(np.uint32).astype(np.int64)
    mag = bits & 0x7FFFFFFF
    x = mag + ((1 - 127) << 23) + ((1 << 21) - 1) + ((mag >> 22) & 1)
    return (((x >> 22) & 0xFF) | ((bits >> 31) << 3)).astype(np.uint8)


def round_e2m1(y: Any, mode: str, rbits: Any = None) -> Any:
    """E2M1 values of float32 ``y``: RNE with saturation, or TE's 8-bit stochastic rounding.

    Returns float32 values of E2M1.

    Args:
        y: float32 array (already multiplied by the block multiplier), without NaN.
        mode: ``"rne"`` or ``"stochastic"``.
        rbits: uint8 array shaped like ``y`` (one random byte per element) for stochastic.

    >>> round_e2m1(np.array([2.3], np.float32), "stochastic", np.array([179], np.uint8)).item()
    2.0
    >>> round_e2m1(np.array([2.3], np.float32), "stochastic", np.array([180], np.uint8)).item()
    3.0
    """
    np_ = xp(y)
    if mode == "rne":
        return fround(y, _E2M1, overflow="saturate")  # y is never NaN (no NaN input)
    a = np_.abs(y)
    step = np_.where(a >= 4, F32(2.0), np_.where(a >= 2, F32(1.0), F32(0.5)))
    u = rbits.astype(np.float32) / F32(256.0)
    with np.errstate(over="ignore", invalid="ignore"):
        t = (a.astype(np.float64) + u.astype(np.float64) * step).astype(np.float32)  # one fmaf
        st = np_.where(t >= 4, F32(2.0), np_.where(t >= 2, F32(1.0), F32(0.5)))
        q = np_.minimum(np_.floor(t / st) * st, F32(6.0))
    q = np_.where(np_.isnan(y), F32(6.0), q)
    out = np_.where(np_.signbit(y) & ~np_.isnan(y), -q, q)
    return out.astype(np.float32)
