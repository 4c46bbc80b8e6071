"""Storage dtypes: moving values between fpemu formats and NumPy / ml_dtypes arrays.

fpemu computes on float64 (or float32) arrays that hold exactly representable values. To hand
them to other code in a compact dtype, use :func:`to_storage`; to read such an array, use
:func:`from_storage`.

>>> import numpy as np
>>> s = to_storage(np.array([0.1, 3.0]), "bf16")
>>> s.dtype.name, from_storage(s).tolist()
('bfloat16', [0.10009765625, 3.0])
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

from fpemu.bits import encode
from fpemu.formats import FORMATS, SCALE_FORMATS, Format, FormatLike, get_format
from fpemu.rounding import RoundMode
from fpemu.rounding import round as fround

_DTYPES: dict[str, np.dtype[Any]] = {
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    **{
        name: np.dtype(getattr(ml_dtypes, name))
        for name in FORMATS
        if name not in ("float64", "float32", "float16", "tf32")
    },
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),  # a scale format (no fpemu.round)
}
_KNOWN = {**FORMATS, **SCALE_FORMATS}


def storage_dtype(fmt: FormatLike) -> np.dtype[Any] | None:
    """The NumPy/ml_dtypes dtype that stores ``fmt`` exactly, or None (e.g. tf32, custom)."""
    f = get_format(fmt)
    dt = _DTYPES.get(f.name)
    return dt if dt is not None and _KNOWN.get(f.name) == f else None


def format_of(dtype: Any) -> Format:
    """The fpemu format of a storage dtype.

    Raises:
        ValueError: the dtype is not one fpemu knows (the message lists the known ones).
    """
    dt = np.dtype(dtype)
    for name, known in _DTYPES.items():
        if known == dt:
            return _KNOWN[name]
    raise ValueError(f"dtype={dt} has no fpemu format; known: {', '.join(_DTYPES)}")


def to_storage(x: Any, fmt: FormatLike, *, mode: str | RoundMode = "rne") -> Any:
    """Round ``x`` to ``fmt`` with fpemu (directly from float64) and store it in the format's dtype.

    Raises:
        ValueError: the format has no storage dtype.
    """
    f = get_format(fmt)
    dt = storage_dtype(f)
    if dt is None:
        have = ", ".join(n for n in _KNOWN if storage_dtype(n) is not None)
        raise ValueError(f"format {f.name} has no storage dtype; formats with one: {have}")
    if not f.signed:  # scale format: values must already be exact; store their codes
        return np.asarray(encode(x, f)).view(dt)
    return fround(x, f, mode=mode).astype(dt)  # exact: the values are already representable


def from_storage(a: Any) -> Any:
    """The values of a storage-dtype array as float64 (exact)."""
    arr = np.asarray(a)
    format_of(arr.dtype)  # validates the dtype
    return arr.astype(np.float64)
