"""FP8 scales from amax: per tensor, per row, per block (1x128, 128x128), as the recipes do.

- Transformer Engine (``te_scale``): ``compute_scale_from_amax`` (fp8-mx.md §4.2): amax below
  ``epsilon`` is raised to it; amax 0, Inf or NaN gives 1; ``RN32(fp8_max * 2**-margin /
  amax)``, +Inf -> ``value_for_inf`` (FLT_MAX); power-of-two option: clear the mantissa bits.
  Delayed scaling (``te_delayed_update``, §4.1) takes the amax from a history window.
- torchao float8 (``torchao_scale``, §4.3): ``RN32(fp8_max / max(amax, 1e-12))`` (float64
  division, narrowed: one rounding); power of two: ``exp2(floor(log2 s))`` done exactly here
  (torchao's float32 log2 can round up: a documented finding, see the docs).
- DeepSeek-V3 / DeepGEMM (``deepseek_scale``, §2.1, §5.1): amax clamped to >= 1e-4,
  ``sf = RN32(amax / fp8_max)`` rounded up to a power of two (E8M0, codes 1..254).

``scale`` multiplies: ``q = E4M3_satfinite(RN32(x * scale))`` (:func:`quantize_fp8`), and the
GEMM uses ``scale_inv = RN32(1/scale)``.

>>> import numpy as np
>>> float(te_scale(np.float32(3.0), "e4m3")), float(te_scale(np.float32(3.0), "e4m3", power_2=True))
(149.3333282470703, 128.0)
>>> float(te_scale(np.float32(0.0), "e4m3")), float(torchao_scale(np.float32(0.0), "e4m3"))
(1.0, 447999985582080.0)
>>> float(deepseek_scale(np.float32(449.0), "e4m3"))  # the dequantization factor sf
2.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import FormatLike, get_format
from fpemu.rounding import round as fround

F32 = np.float32
FLT_MAX = F32(np.finfo(np.float32).max)
_FP8 = ("float8_e4m3fn", "float8_e5m2")


def _fp8_max(fmt: FormatLike) -> Any:
    f = get_format(fmt)
    if f.name not in _FP8:
        raise ValueError(f"fmt={f.name!r} is not an FP8 format; accepted: {', '.join(_FP8)}")
    return F32(f.max)


def _f32(a: Any, arg: str) -> Any:
    arr = xp(a).asarray(a)
    if arr.dtype.kind != "f":
        raise TypeError(f"{arg} must be a float array, got dtype {arr.dtype}")
    return arr.astype(np.float32)


def te_scale(
    amax: Any,
    fmt: FormatLike,
    *,
    margin: int = 0,
    power_2: bool = False,
    epsilon: float = 0.0,
    value_for_inf: float = float(FLT_MAX),
) -> Any:
    """Transformer Engine's scale from amax (current scaling, blockwise tiles, delayed).

    ``margin`` divides the FP8 max by ``2**margin`` first (exact: a power of two).
    """
    np_ = xp(amax)
    a = _f32(amax, "amax")
    a = np_.where(a < F32(epsilon), F32(epsilon), a)  # NaN compares false: unchanged
    bad = np_.isinf(a) | (a == 0) | np_.isnan(a)
    top = F32(np.ldexp(_fp8_max(fmt), -margin))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        s = np_.where(bad, F32(1.0), top / np_.where(bad, F32(1.0), a))
    s = np_.where(np_.isposinf(s), F32(value_for_inf), s).astype(np.float32)
    if power_2:
        s = (s.view(np_.uint32) & np_.uint32(0xFF800000)).view(np_.float32)
    return s


def te_delayed_update(
    history: Any, scale: Any, fmt: FormatLike, *, margin: int = 0, algo: str = "max",
    fused: bool = True,
) -> tuple[Any, Any]:  # fmt: skip
    """One DelayedScaling update: ``(new_history, new_scale)`` from ``history[0]`` = current amax.

    ``history`` is (length, n) float32 with row 0 the amax just measured. ``fused=True`` is
    TE's bulk kernel (a zero current amax skips the roll, fp8-mx.md §4.1; scale
    ``RN32(fp8_max * 2**-margin / amax)``); ``False`` the unfused Python path (always rolls;
    scale ``RN32(RN32(fp8_max / amax) / 2**margin)``, which overflows to ``FLT_MAX`` for an
    amax the fused order still scales, and differs again where the quotient is subnormal).
    The scale keeps its old value where amax is 0 or not finite. A NaN amax rolls into the
    history like any non-zero value; the fused ``max`` reduction skips it (``fmaxf``), the
    unfused one returns NaN (old scale kept).

    >>> h = np.array([[4.0], [0.0], [8.0]], np.float32)
    >>> new_h, s = te_delayed_update(h, np.float32([1.0]), "e4m3")
    >>> new_h[:, 0].tolist(), s.tolist()
    ([0.0, 8.0, 4.0], [56.0])
    """
    np_ = xp(history)
    h = _f32(history, "history")
    if algo not in ("max", "most_recent"):
        raise ValueError(f"algo={algo!r}; accepted: max, most_recent")
    last = h[0]
    win = np_.concatenate([h[1:], last[None]])
    # NaN amax: the fused kernel reduces the window with fmaxf, which drops NaN operands (TE
    # common/recipe/delayed_scaling.cu kernel_bulk; fp8-mx.md §4.1 is silent on NaN), so the
    # other entries still give a scale; the unfused path's torch.max propagates it (scale kept)
    window = np_.fmax.reduce(win, axis=0) if fused else np_.max(win, axis=0)
    # [:len]: a length-1 history rolls to [0] (torch.roll then hist[0] = 0), not [0, last]
    rolled = np_.concatenate([np_.zeros_like(h[:1]), h[2:], last[None]])[: h.shape[0]]
    roll = (last != 0) if fused else np_.ones_like(last, dtype=bool)
    new_h = np_.where(roll[None], rolled, h)
    amax = window if algo == "max" else last
    amax = np_.where(roll, amax, F32(0.0))
    ok = np_.isfinite(amax) & (amax > 0)
    safe = np_.where(ok, amax, F32(1.0))
    with np.errstate(divide="ignore", over="ignore", invalid="ignore", under="ignore"):
        if fused:  # the kernel: RN32(scaled_max / amax), scaled_max = fp8_max * 2**-margin
            s = F32(np.ldexp(_fp8_max(fmt), -margin)) / safe
        else:  # _default_sf_compute: RN32(RN32(fp8_max / amax) / 2**margin); the first
            # quotient can overflow to inf (then FLT_MAX below) where the fused one does not
            s = (F32(_fp8_max(fmt)) / safe) / F32(np.ldexp(1.0, margin))
    s = np_.where(ok, s, _f32(scale, "scale"))
    s = np_.where(np_.isposinf(s), FLT_MAX, s)
    return new_h, s.astype(np.float32)


def torchao_scale(amax: Any, fmt: FormatLike, *, power_of_2: bool = False) -> Any:
    """torchao float8 ``amax_to_scale``: ``RN32(fp8_max / max(amax, 1e-12))``.

    amax 0 gives 4.48e14 (e4m3), Inf gives 0, NaN gives NaN (as torchao, fp8-mx.md §4.3).
    ``power_of_2`` rounds down to a power of two exactly.
    """
    np_ = xp(amax)
    a = _f32(amax, "amax").astype(np.float64)
    with np.errstate(divide="ignore", over="ignore"):
        s = (float(_fp8_max(fmt)) / np_.maximum(a, 1e-12)).astype(np.float32)
    if power_of_2:
        s = (s.view(np_.uint32) & np_.uint32(0xFF800000)).view(np_.float32)
    return np_.where(np_.isnan(a), F32(np.nan), s)


def deepseek_scale(amax: Any, fmt: FormatLike) -> Any:
    """DeepGEMM's dequantization factor ``sf``: ``ceil_to_ue8m0(RN32(max(amax, 1e-4)/max))``.

    The quantized data is ``E4M3(RN32(x * RN32(1/sf)))``; Inf and NaN amax give 2**127.
    """
    np_ = xp(amax)
    a = np_.maximum(_f32(amax, "amax"), F32(1e-4))
    a = np_.where(np_.isnan(amax), F32(np.nan), a)
    sf = (a / _fp8_max(fmt)).astype(np.float32)
    bits = sf.view(np_.uint32)
    e = ((bits >> 23) & 0xFF).astype(np_.int64) + ((bits & 0x7FFFFF) != 0)
    e = np_.clip(e, 1, 254)
    return (e.astype(np_.uint32) << 23).view(np_.float32)


def quantize_fp8(x: Any, scale: Any, fmt: FormatLike) -> Any:
    """``E4M3/E5M2 satfinite RNE of RN32(x * scale)`` (TE and torchao casts), as float64 values."""
    f = get_format(fmt)
    _fp8_max(f)
    np_ = xp(x)
    with np.errstate(over="ignore", invalid="ignore"):
        y = _f32(x, "x") * _f32(scale, "scale")
    if bool(np_.isnan(_f32(scale, "scale")).any()):
        raise ValueError("scale contains NaN; a scale must be a finite positive float")
    return fround(y.astype(np.float64), f, overflow="saturate")


def block_amax(x: Any, block: tuple[int, int]) -> Any:
    """amax of each (rows x cols) tile of a 2-D array, zero-padded to whole tiles.

    ``(1, 128)``: per token and 128 channels; ``(128, 128)``: DeepSeek-V3 weight blocks.

    >>> block_amax(np.arange(8.0).reshape(2, 4), (1, 2)).tolist()
    [[1.0, 3.0], [5.0, 7.0]]
    """
    np_ = xp(x)
    a = np_.asarray(x)
    if a.ndim != 2:
        raise ValueError(f"x must be 2-D for block scaling, got shape {a.shape}")
    r, c = block
    pr, pc = -a.shape[0] % r, -a.shape[1] % c
    p = np_.pad(np_.abs(a), ((0, pr), (0, pc)))
    t = p.reshape(p.shape[0] // r, r, p.shape[1] // c, c)
    return t.max(axis=(1, 3))
