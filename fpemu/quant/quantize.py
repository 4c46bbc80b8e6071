"""Block quantization: ``quantize`` to an MX or NVFP4 block format, ``dequantize`` back.

>>> import numpy as np
>>> x = np.zeros(32, dtype=np.float32); x[:3] = [480.0, 9.5, -17.0]
>>> q = quantize(x, "mxfp8_e4m3")                      # OCP FLOOR: 480 saturates to 448
>>> q.scale_codes.tolist(), q.elements[:3].tolist(), hex(int(q.element_codes[0]))
([127], [448.0, 10.0, -16.0], '0x7e')
>>> quantize(x, "mxfp8_e4m3", scale_rule="rceil").elements[:3].tolist()
[240.0, 5.0, -8.0]
>>> dequantize(quantize(x, "mxfp8_e4m3", scale_rule="rceil"))[:3].tolist()
[480.0, 10.0, -16.0]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu import parallel
from fpemu.backend import xp
from fpemu.bits import canonical_nan, decode, encode
from fpemu.daskarray import dequantize_dask, is_dask, quantize_dask
from fpemu.formats import Format
from fpemu.inputs import _ml_float
from fpemu.quant.block import BlockFormat, BlockFormatLike, get_block_format
from fpemu.quant.nvfp4 import round_e2m1, torchao_nan_codes, two_level_scales
from fpemu.quant.scales import E8M0_BIAS, E8M0_NAN, e8m0_codes
from fpemu.rounding import get_mode
from fpemu.rounding import round as fround


@dataclass(frozen=True)
class Quantized:
    """A block-quantized array: element values and codes, scale values and codes.

    Attributes:
        elements: element values ``P_i`` (float64), shaped like the (padded) input.
        scales: block scale values (float64; NaN for an E8M0 NaN scale), the block axis
            shortened to the number of blocks.
        element_codes: element bit patterns (uint8; MXINT8: two's-complement bytes).
        scale_codes: scale bit patterns (uint8: E8M0 byte, or the UE4M3 byte).
        block_format: the :class:`BlockFormat`.
        scale_rule: the rule that made the scales.
        axis: the block axis (non-negative).
        length: the input's length along ``axis`` before padding.
        tensor_scale: NVFP4's FP32 per-tensor decode scale (None for MX formats).
    """

    elements: Any
    scales: Any
    element_codes: Any
    scale_codes: Any
    block_format: BlockFormat
    scale_rule: str
    axis: int
    length: int
    tensor_scale: float | None = None


def quantize(
    x: Any,
    block_format: BlockFormatLike,
    *,
    axis: int | None = None,
    scale_rule: str | None = None,
    mode: str = "rne",
    rng: Any = None,
    pad: bool = False,
) -> Quantized:
    """Quantize ``x`` to ``block_format``: one scale per ``block_size`` elements along ``axis``.

    Args:
        x: float array (float16/32/64, or an ml_dtypes float such as bfloat16, converted
            exactly to float32). NVFP4 and the ``rceil`` amax work in float32, as their
            kernels do (wider input is first rounded to float32). A Dask array gives a
            :class:`Quantized` of lazy Dask arrays (:mod:`fpemu.daskarray`).
        block_format: a name (``"mxfp8_e4m3"``, ``"mxfp4"``, ``"nvfp4"``, ...) or BlockFormat.
        axis: block axis (default: the format's, -1 for every preset).
        scale_rule: MX: ``"floor"``, ``"ceil"``, ``"even"``, ``"rceil"``; NVFP4: ``"te"``,
            ``"torchao"``. Default: the format's rule.
        mode: element rounding: ``"rne"`` (default); ``"stochastic"`` (NVFP4: TE's 8-bit SR;
            MX: :func:`fpemu.round`'s); MX formats accept every :func:`fpemu.round` mode.
        rng: for stochastic rounding: a ``numpy.random.Generator`` or (NVFP4) a uint8 array
            of random bytes shaped like the padded input.
        pad: zero-pad the block axis to a multiple of the block size (else it must divide).

    Raises:
        TypeError: ``x`` is not a floating-point array.
        ValueError: unknown block format or rule, a rule the format does not have, a block
            size that does not divide the axis, a bad axis, NaN input to NVFP4.
    """
    if is_dask(x):  # lazily, chunk by chunk (fpemu.daskarray)
        lazy: Quantized = quantize_dask(_quantize, Quantized, x, get_block_format(block_format),
                                        axis=axis, scale_rule=scale_rule, mode=mode, rng=rng,
                                        pad=pad)  # fmt: skip
        return lazy
    return _quantize(x, block_format, axis=axis, scale_rule=scale_rule, mode=mode, rng=rng,
                     pad=pad)  # fmt: skip


def _quantize(x: Any, block_format: BlockFormatLike, *, axis: int | None = None,
              scale_rule: str | None = None, mode: str = "rne", rng: Any = None,
              pad: bool = False, tensor_amax: Any = None) -> Quantized:  # fmt: skip
    """:func:`quantize`; ``tensor_amax``: NVFP4's tensor maximum when ``x`` is a chunk of the
    tensor (None: ``x``'s own)."""
    bf = get_block_format(block_format)
    rule = bf.scale_rule if scale_rule is None else scale_rule
    if rule not in bf.rules:
        raise ValueError(
            f"scale_rule={rule!r} is not a rule of block format {bf.name!r}; "
            f"accepted: {', '.join(bf.rules)}"
        )
    np_ = xp(x)
    a = np_.asarray(x)
    if _ml_float(a.dtype):  # bfloat16, float8, ...: every value is a float32, exactly
        a = a.astype(np_.float32)
    if a.dtype.kind != "f" or a.dtype.itemsize not in (2, 4, 8):
        raise TypeError(f"x must be a float16/32/64 array, got dtype {a.dtype}; accepted: "
                        f"float16/32/64 and ml_dtypes floats (bfloat16, float8, ...)")  # fmt: skip
    ax = bf.axis if axis is None else axis
    if isinstance(ax, bool) or not isinstance(ax, int) or not -a.ndim <= ax < max(a.ndim, 1):
        raise ValueError(f"axis={ax!r} is out of range for an array of {a.ndim} dimensions")
    ax %= max(a.ndim, 1)
    xm = np_.moveaxis(np_.atleast_1d(a), ax, -1)
    length = xm.shape[-1]
    xm = _pad(xm, -1, bf.block_size, pad, "axis")
    if bf.tile_rows > 1:
        if xm.ndim < 2:
            raise ValueError(f"{bf.name} has 2-D tiles; x must have at least 2 dimensions")
        xm = _pad(xm, -2, bf.tile_rows, pad, "rows")
    blocks = xm.reshape(*xm.shape[:-1], xm.shape[-1] // bf.block_size, bf.block_size)
    if bf.two_level:
        out = _quantize_nvfp4(blocks, bf, rule, mode, rng, tensor_amax)
    else:
        out = _quantize_mx_tiles(blocks, bf, rule, mode, rng)
    elems, ecodes, scales, scodes, tensor = out
    shape = xm.shape

    def back(v: Any) -> Any:
        return np_.moveaxis(v, -1, ax) if a.ndim else v

    return Quantized(
        back(elems.reshape(shape)), back(scales), back(ecodes.reshape(shape)), back(scodes),
        bf, rule, ax, length, tensor,
    )  # fmt: skip


def dequantize(q: Quantized) -> Any:
    """The values ``element * scale`` (NVFP4: ``* tensor_scale``) as float64, exact.

    Padding added by ``quantize(..., pad=True)`` is removed.

    Raises:
        TypeError: ``q`` is not a :class:`Quantized`.

    >>> q = quantize(np.array([6.0, 0.75, 7.0, 1.0]), "mxfp4", pad=True)
    >>> dequantize(q).tolist()
    [6.0, 1.0, 6.0, 1.0]
    """
    if not isinstance(q, Quantized):
        raise TypeError(f"q must be a fpemu.quant.Quantized, got {type(q).__name__}")
    if is_dask(q.elements):
        return dequantize_dask(dequantize, q)
    np_ = xp(q.elements)
    bs = q.block_format.block_size
    e = np_.moveaxis(q.elements, q.axis, -1)
    s = np_.moveaxis(q.scales, q.axis, -1)
    v = (e.reshape(*e.shape[:-1], -1, bs) * s[..., None]).reshape(e.shape)
    if q.tensor_scale is not None:
        v = v * np.float64(q.tensor_scale)  # exact: <= 6 + 24 significant bits
    v = v[..., : q.length]
    return np_.moveaxis(v, -1, q.axis)


def _pad(xm: Any, dim: int, size: int, pad: bool, what: str) -> Any:
    n = xm.shape[dim]
    if n % size == 0:
        return xm
    if not pad:
        raise ValueError(
            f"block size {size} does not divide the {what} length {n}; pass pad=True to "
            f"zero-pad, or choose an axis whose length is a multiple of {size}"
        )
    np_ = xp(xm)
    widths = [(0, 0)] * xm.ndim
    widths[dim] = (0, -n % size)
    return np_.pad(xm, widths)


def _amax(blocks: Any, tile_rows: int) -> Any:
    """Block maxima (NaN propagates); 2-D tiles: the tile's maximum repeated on its rows."""
    np_ = xp(blocks)
    m = np_.max(np_.abs(blocks), axis=-1)  # (..., R, nb)
    if tile_rows > 1:
        r = m.shape[-2]
        t = m.reshape(*m.shape[:-2], r // tile_rows, tile_rows, m.shape[-1]).max(axis=-2)
        m = np_.repeat(t, tile_rows, axis=-2)
    return m


def _quantize_mx(blocks: Any, bf: BlockFormat, rule: str, mode: str, rng: Any) -> Any:
    np_ = xp(blocks)
    if rule == "rceil" and blocks.dtype == np_.float64:
        blocks = blocks.astype(np_.float32)  # TE's kernels read float32 (fp8-mx.md §2.1)
    amax = _amax(blocks, bf.tile_rows)
    codes = e8m0_codes(amax, bf.element, rule)
    shift = E8M0_BIAS - np_.minimum(codes, 254).astype(np_.int64)
    # x / 2**e is exact in the input's precision for float32/float64 input, except results
    # below float32's normal range, which are far below every element's rounding points
    work = np_.float32 if blocks.dtype == np_.float32 else np_.float64
    mult = np_.ldexp(np_.ones((), work), shift.astype(np_.int32))
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        y = blocks.astype(work, copy=False) * mult[..., None]
    el = bf.element
    nan_scale = codes == E8M0_NAN
    if bool(nan_scale.any()):
        # a NaN scale makes the whole block NaN; store NaN (if the element has it) where x was
        keep = np_.where(np_.isnan(y) & el.has_nan, np_.nan, 0.0)
        y = np_.where(np_.isnan(y) | nan_scale[..., None], keep, y).astype(work)
    elems = fround(y, el, mode=get_mode(mode), overflow="saturate", rng=rng)
    if bf.integer:
        ecodes = (np_.rint(elems * 64).astype(np_.int64) & 0xFF).astype(np_.uint8)
    else:
        ecodes = _small_codes(elems.astype(np_.float32, copy=False), el)
    scales = np_.where(nan_scale, np_.nan, np_.ldexp(1.0, -shift))
    return elems.astype(np_.float64), ecodes, scales, codes, None


def _quantize_mx_tiles(blocks: Any, bf: BlockFormat, rule: str, mode: str, rng: Any) -> Any:
    """:func:`_quantize_mx` on tiles of whole blocks (2-D tiles: of whole tiles) on threads.

    MX blocks are scaled and rounded independently, so the split changes no bit; NVFP4's
    tensor scale is global (not split here), stochastic draws are made in order (one tile).
    """
    np_ = xp(blocks)
    # axis 0 of blocks (..., nb, bs), or the block-count axis: never inside a block or a tile
    axes = {blocks.ndim - 2: blocks.shape[-2]}
    if blocks.ndim >= 3:
        axes[0] = blocks.shape[0]
    axis = max(axes, key=lambda k: (axes[k], -k))
    align = bf.tile_rows if axis == blocks.ndim - 3 else 1  # axis 0 is the row axis
    parts = [slice(0, axes[axis])]
    if rng is None and np_ is np:
        parts = parallel.tiles(axes[axis], cost=12.0 * blocks.size / axes[axis], align=align)
    if len(parts) == 1:
        return _quantize_mx(blocks, bf, rule, mode, rng)
    index = (slice(None),) * axis
    outs = parallel.map_tiles(
        lambda t: _quantize_mx(blocks[(*index, t)], bf, rule, mode, rng), parts
    )
    return (*(np_.concatenate([o[i] for o in outs], axis=axis) for i in range(4)), None)


def _small_codes(v: Any, el: Format) -> Any:
    """Codes of float32 values exact in an element format of <= 8 bits.

    Such a value is fixed by its float32 sign, exponent and top ``mbits`` fraction bits, so
    those bits index a table of codes (built by decoding every code of the format).
    """
    np_ = xp(v)
    table = _code_table(el)
    idx = v.view(np_.uint32) >> np_.uint32(23 - el.mbits)
    return (table if np_ is np else np_.asarray(table)).take(idx)


@functools.lru_cache(maxsize=16)
def _code_table(el: Format) -> Any:
    size = 1 << (9 + el.mbits)
    table = np.zeros(size, np.uint8)
    if el.has_nan:  # exponent 255: NaN (infinities never reach the table: saturated before)
        top = np.arange(size) >> el.mbits & 0xFF
        table[top == 0xFF] = canonical_nan(el)
    codes = np.arange(1 << el.bits, dtype=np.uint32)
    vals = decode(codes, el, dtype=np.float32)
    ok = ~np.isnan(vals)
    table[vals[ok].view(np.uint32) >> (23 - el.mbits)] = codes[ok]
    return table


def _quantize_nvfp4(
    blocks: Any, bf: BlockFormat, rule: str, mode: str, rng: Any, tensor_amax: Any = None
) -> Any:
    np_ = xp(blocks)
    b32 = blocks.astype(np_.float32, copy=False)
    amax = _amax(b32, bf.tile_rows)  # NaN propagates into the block maxima
    if bool(np_.isnan(amax).any()):
        raise ValueError("x contains NaN; NVFP4 scale rules are defined for non-NaN tensors")
    g = np_.max(amax) if amax.size else np.float32(0)
    if tensor_amax is not None:  # a chunk of a larger tensor (fpemu.daskarray)
        g = np.float32(tensor_amax)
    s_b, inv, tensor = two_level_scales(amax, g, rule)
    with np.errstate(over="ignore", invalid="ignore"):
        y = b32 * inv[..., None]  # one float32 rounding, as the kernel's mul.f32
    nan_y = np_.isnan(y)  # only under torchao's rule: a zero, tiny or infinite tensor
    y_nan = y
    if bool(nan_y.any()):
        y = np_.where(nan_y, np.float32(0.0), y)
    m = get_mode(mode).value
    if m not in ("rne", "stochastic"):
        raise ValueError(f"mode={mode!r}: NVFP4 rounds with 'rne' or 'stochastic'")
    rbits = None
    if m == "stochastic":
        rbits = _random_bytes(rng, y.shape)
    elif rng is not None:
        raise ValueError("rng is only for mode='stochastic'")
    elems = round_e2m1(y, m, rbits)
    ecodes = _small_codes(elems, bf.element)
    scodes = encode(s_b.astype(np_.float64), bf.scale).astype(np_.uint8)
    if y is not y_nan:  # torchao's codes for NaN elements, and its signed NaN scale byte
        ecodes = np_.where(nan_y, torchao_nan_codes(y_nan), ecodes)
        elems = np_.where(nan_y, decode(ecodes, bf.element, dtype=np.float32), elems)
        nan_s = np_.isnan(s_b)
        scodes = np_.where(nan_s, np_.where(np_.signbit(s_b), 0xFF, 0x7F), scodes)
        scodes = scodes.astype(np_.uint8)
    return elems.astype(np_.float64), ecodes, s_b.astype(np_.float64), scodes, float(tensor)


def _random_bytes(rng: Any, shape: tuple[int, ...]) -> Any:
    if isinstance(rng, np.random.Generator):
        return rng.integers(0, 256, size=shape, dtype=np.uint8)
    r = np.asarray(rng) if rng is not None else None
    if r is None or r.dtype != np.uint8 or r.size != int(np.prod(shape)):
        raise ValueError(
            "mode='stochastic' needs rng=numpy.random.Generator or a uint8 array with one "
            f"random byte per element ({int(np.prod(shape))} values)"
        )
    return r.reshape(shape)
