"""OCP byte layouts of element and scale codes, and the ml_dtypes storage dtypes.

- FP4 (E2M1): two codes per byte, element ``2i`` in the low nibble, ``2i+1`` in the high
  nibble (the layout of torch ``float4_e2m1fn_x2`` and torchao ``pack_uint4``).
- FP6: four 6-bit codes in three bytes, little-endian bit order: code ``j`` of a group
  occupies bits ``6j .. 6j+5`` of the 24-bit little-endian word.
- Storage dtypes: element codes as ml_dtypes ``float4_e2m1fn`` / ``float6_*`` /
  ``float8_*`` (one code per byte), E8M0 scale codes as ``float8_e8m0fnu``.

>>> import numpy as np
>>> pack_fp4(np.array([0x1, 0x2, 0xF, 0x7], np.uint8)).tolist()
[33, 127]
>>> unpack_fp4(np.array([33, 127], np.uint8)).tolist()
[1, 2, 15, 7]
>>> unpack_fp6(pack_fp6(np.arange(8, dtype=np.uint8) * 9)).tolist()
[0, 9, 18, 27, 36, 45, 54, 63]
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from fpemu.quant.quantize import Quantized


def _codes(codes: Any, bits: int, group: int) -> Any:
    c = np.asarray(codes)
    if c.dtype.kind not in "iu":
        raise TypeError(f"codes must be an integer array, got dtype {c.dtype}")
    if c.size and (int(c.min()) < 0 or int(c.max()) >= 2**bits):
        raise ValueError(f"codes must lie in [0, {2**bits}) for {bits}-bit elements")
    if c.shape[-1] % group:
        raise ValueError(f"the last axis ({c.shape[-1]}) must be a multiple of {group}")
    return c.astype(np.uint32)


def pack_fp4(codes: Any) -> Any:
    """Two 4-bit codes per byte along the last axis (low nibble first)."""
    c = _codes(codes, 4, 2)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def unpack_fp4(packed: Any) -> Any:
    """Inverse of :func:`pack_fp4`."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty((*p.shape[:-1], 2 * p.shape[-1]), np.uint8)
    out[..., 0::2], out[..., 1::2] = p & 0xF, p >> 4
    return out


def pack_fp6(codes: Any) -> Any:
    """Four 6-bit codes in three bytes along the last axis (little-endian bit order)."""
    c = _codes(codes, 6, 4)
    g = c.reshape(*c.shape[:-1], -1, 4)
    word = g[..., 0] | (g[..., 1] << 6) | (g[..., 2] << 12) | (g[..., 3] << 18)
    b = np.stack([word & 0xFF, (word >> 8) & 0xFF, word >> 16], axis=-1)
    return b.reshape(*c.shape[:-1], -1).astype(np.uint8)


def unpack_fp6(packed: Any) -> Any:
    """Inverse of :func:`pack_fp6`."""
    p = np.asarray(packed, dtype=np.uint8).astype(np.uint32)
    if p.shape[-1] % 3:
        raise ValueError(f"the last axis ({p.shape[-1]}) must be a multiple of 3")
    g = p.reshape(*p.shape[:-1], -1, 3)
    word = g[..., 0] | (g[..., 1] << 8) | (g[..., 2] << 16)
    c = np.stack([(word >> s) & 0x3F for s in (0, 6, 12, 18)], axis=-1)
    return c.reshape(*p.shape[:-1], -1).astype(np.uint8)


def to_bytes(q: Quantized) -> tuple[Any, Any]:
    """(element bytes in the OCP layout along the block axis, scale bytes) of a Quantized."""
    bits = q.block_format.element.bits
    e = np.moveaxis(q.element_codes, q.axis, -1)
    packed = pack_fp4(e) if bits == 4 else pack_fp6(e) if bits == 6 else e.astype(np.uint8)
    return np.moveaxis(packed, -1, q.axis), q.scale_codes.astype(np.uint8)


def to_ml_dtypes(q: Quantized) -> tuple[Any, Any]:
    """Element codes and scale codes viewed as their ml_dtypes storage dtypes.

    MXINT8 elements are int8; UE4M3 scales are stored as ``float8_e4m3fn`` bytes.
    """
    bf = q.block_format
    if bf.integer:
        el = q.element_codes.astype(np.uint8).view(np.int8)
    else:
        el = q.element_codes.astype(np.uint8).view(getattr(ml_dtypes, bf.element.name))
    sdt = ml_dtypes.float8_e8m0fnu if bf.scale.name == "float8_e8m0fnu" else ml_dtypes.float8_e4m3fn
    return el, q.scale_codes.astype(np.uint8).view(sdt)
