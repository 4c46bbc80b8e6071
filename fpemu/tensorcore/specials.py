"""The bits an instruction writes: its D format's encoding with the hardware's NaN.

NVIDIA tensor cores write one NaN for every NaN result, 0x7FFFFFFF for FP32 D and 0x7FFF for
FP16 D, and AMD CDNA3's fused paths write 0x7FFFFFFF (research note ``mma-parity.md`` sections
1.1 and 3.4; MMA-Sim compares these bits with the GPUs). Where an instruction has no canonical
NaN (FMA chains, CDNA1/CDNA2), :func:`encode` writes the NaN of the result value and
:func:`same_bits` compares NaN-ness only. For FMA chains that NaN is IEEE 754 fma's: the first
NaN operand, quieted (bit-compared against MMA-Sim in ``tests/test_mma_corners.py``).
Infinities and every finite value are the plain encoding of the D format (an e8m13 result is
an FP32 word with its low 10 bits zero).

>>> import numpy as np
>>> hex(int(encode(np.array([np.nan]), "sm90.mma.f16.f32")[0]))
'0x7fffffff'
>>> hex(int(encode(np.array([np.nan, -np.inf]), "sm90.mma.f16.f16")[1]))
'0xfc00'
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.backend import xp
from fpemu.tensorcore.instructions import Instruction, get_instruction

_DTYPES: dict[str, tuple[Any, Any]] = {
    "float16": (np.float16, np.uint16),
    "float32": (np.float32, np.uint32),
    "float64": (np.float64, np.uint64),
}


def encode(d: Any, instruction: str | Instruction) -> NDArray[Any]:
    """The D words ``instruction`` writes for result values ``d`` (exact in its D format).

    Returns:
        uint16, uint32 or uint64 codes.

    >>> encode(np.array([1.0, -0.0]), "cdna3.mfma.f16.f32").tolist()
    [1065353216, 2147483648]
    """
    ins = get_instruction(instruction)
    np_ = xp(d)
    vt, ct = _DTYPES[ins.d]
    with np.errstate(over="ignore"):
        codes = np_.asarray(d, dtype=np_.float64).astype(vt).view(ct)
    nan = np_.isnan(codes.view(vt))
    if ins.nan is not None:
        codes = np_.where(nan, ct(ins.nan), codes)
    out: NDArray[Any] = codes
    return out


def same_bits(got: Any, want: Any, instruction: str | Instruction) -> NDArray[np.bool_]:
    """Element-wise: the D words are equal (or both NaN where the NaN is not canonical).

    >>> same_bits(np.array([0x7FC00000], np.uint32), np.array([0xFFC00001], np.uint32),
    ...           "cdna2.mfma.f32.f32").tolist()
    [True]
    """
    ins = get_instruction(instruction)
    np_ = xp(got)
    vt, ct = _DTYPES[ins.d]
    g, w = np_.asarray(got).astype(ct), np_.asarray(want).astype(ct)
    eq = g == w
    if ins.nan is None:
        eq |= np_.isnan(g.view(vt)) & np_.isnan(w.view(vt))
    out: NDArray[np.bool_] = eq
    return out
