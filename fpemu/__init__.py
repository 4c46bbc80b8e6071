"""fpemu: a pure-NumPy reference emulator of mixed-precision floating-point numerics.

>>> import fpemu
>>> float(fpemu.round(1 + 0.0001, "fp16"))   # swamped: 1 + 1e-4 is 1 in FP16
1.0
>>> float(fpemu.round(1e-4 * 1e-4, "fp16"))  # underflow: below FP16's smallest subnormal
0.0
"""

from fpemu.bits import (
    all_values,
    canonical_nan,
    code_dtype,
    codes,
    decode,
    encode,
    next_down,
    next_up,
    ulp,
)
from fpemu.formats import ALIASES, FORMATS, Format, get_format
from fpemu.limits import FInfo, finfo
from fpemu.rounding import RoundMode, get_mode, round
from fpemu.storage import format_of, from_storage, storage_dtype, to_storage

__version__ = "0.1.0"

__all__ = [
    "ALIASES",
    "FORMATS",
    "FInfo",
    "Format",
    "RoundMode",
    "all_values",
    "canonical_nan",
    "code_dtype",
    "codes",
    "decode",
    "encode",
    "finfo",
    "format_of",
    "from_storage",
    "get_format",
    "get_mode",
    "next_down",
    "next_up",
    "round",
    "storage_dtype",
    "to_storage",
    "ulp",
]
