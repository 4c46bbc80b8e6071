"""Values <-> the raw words an MMA register holds (fp16, bf16, tf32, fp32 bit patterns).

The hardware harness passes bit patterns, never floats, so that nothing on the way rounds or
flushes. These conversions are exact for values already representable in the format:
fp16 through NumPy's float16, bf16 as the top half of the FP32 word, tf32 as an FP32 word whose
low 13 fraction bits are zero (the bits the tensor core ignores).

>>> import numpy as np
>>> to_words(np.array([1.0, -2.0]), "bfloat16")
array([16256, 49152], dtype=uint16)
>>> from_words(np.array([0x3C00], dtype=np.uint16), "float16")
array([1.])
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.formats import FormatLike, get_format
from fpemu.rounding import round as fround

#: Formats a tensor-core operand or accumulator word can hold, with the word's dtype.
WORD_DTYPES: dict[str, type[np.unsignedinteger[Any]]] = {
    "float16": np.uint16,
    "bfloat16": np.uint16,
    "tf32": np.uint32,
    "float32": np.uint32,
}


def _name(fmt: FormatLike) -> str:
    f = get_format(fmt)
    if f.name not in WORD_DTYPES:
        raise ValueError(f"fmt={f.name!r} has no MMA word; accepted: {', '.join(WORD_DTYPES)}")
    return f.name


def to_words(x: NDArray[np.float64], fmt: FormatLike) -> NDArray[Any]:
    """Raw words of float64 values exactly representable in ``fmt``.

    NaN becomes the format's default quiet NaN (fp16 0x7E00, bf16 0x7FC0, fp32/tf32 0x7FC00000).

    Raises:
        ValueError: a value is not exact in ``fmt``, or ``fmt`` has no MMA word.
    """
    name = _name(fmt)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        exact = (fround(x, name) == x) | np.isnan(x)
    if not bool(exact.all()):
        bad = x[~exact].reshape(-1)[0]
        raise ValueError(f"x contains {float(bad)!r}, not exact in {name}; round it first")
    if name == "float16":
        with np.errstate(over="ignore"):
            return np.asarray(x.astype(np.float16).view(np.uint16))
    w32 = x.astype(np.float32).view(np.uint32)  # exact: bf16/tf32/fp32 values fit FP32
    if name == "bfloat16":
        return np.asarray((w32 >> np.uint32(16)).astype(np.uint16))
    return np.asarray(w32)


def from_words(w: NDArray[Any], fmt: FormatLike) -> NDArray[np.float64]:
    """Float64 values of raw words (tf32: the low 13 fraction bits are ignored, as in hardware).

    Raises:
        ValueError: ``fmt`` has no MMA word. TypeError: ``w`` has the wrong dtype.
    """
    name = _name(fmt)
    w = np.asarray(w)
    if w.dtype != WORD_DTYPES[name]:
        raise TypeError(f"w must be {np.dtype(WORD_DTYPES[name])} words for {name}, got {w.dtype}")
    if name == "float16":
        return np.asarray(w.view(np.float16).astype(np.float64))
    if name == "bfloat16":
        w = w.astype(np.uint32) << np.uint32(16)
    elif name == "tf32":
        w = w & np.uint32(0xFFFFE000)
    with np.errstate(invalid="ignore"):  # signalling NaNs quietly become NaN
        return np.asarray(w.view(np.float32).astype(np.float64))


def same_words(x: NDArray[Any], y: NDArray[Any], fmt: FormatLike) -> NDArray[np.bool_]:
    """Elementwise bit equality of two word arrays, where any NaN equals any NaN.

    >>> same_words(np.array([0x7E00, 0x0000], np.uint16), np.array([0x7FFF, 0x8000], np.uint16),
    ...            "float16").tolist()
    [True, False]
    """
    name = _name(fmt)
    nan_x, nan_y = np.isnan(from_words(x, name)), np.isnan(from_words(y, name))
    return np.asarray((x == y) | (nan_x & nan_y))
