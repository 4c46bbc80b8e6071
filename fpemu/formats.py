"""Floating-point formats as data: one frozen dataclass, one registry, one resolver.

A :class:`Format` holds only the fields that define a binary floating-point format.
Everything else (largest value, smallest normal, epsilon, ...) is derived.

>>> from fpemu.formats import get_format
>>> f = get_format("fp16")
>>> f.name, f.bits, f.max, f.tiny, f.smallest_subnormal
('float16', 16, 65504.0, 6.103515625e-05, 5.960464477539063e-08)
>>> get_format("e4m3").max
448.0
>>> e8m0 = get_format("e8m0")  # the MX scale format: 2**-127 .. 2**127, no sign, no zero
>>> e8m0.bits, e8m0.tiny == 2.0**-127, e8m0.max == 2.0**127
(8, True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Union

#: How a format spends its top binade and its sign on special values.
#:
#: - ``"ieee"``: exponent all ones is reserved: infinity (mantissa 0) and NaN (otherwise).
#: - ``"fn"``: no infinity; only the all-ones pattern (exponent and mantissa) is NaN (OCP e4m3fn).
#: - ``"fnuz"``: no infinity, no negative zero; the pattern ``1 000...0`` is the only NaN.
#: - ``"finite"``: every pattern is a finite number (OCP MX fp6/fp4): no NaN, no infinity.
Specials = Literal["ieee", "fn", "fnuz", "finite"]
SPECIALS: tuple[str, ...] = ("ieee", "fn", "fnuz", "finite")

#: What a result too large for the format becomes.
Overflow = Literal["inf", "nan", "saturate"]
OVERFLOWS: tuple[str, ...] = ("inf", "nan", "saturate")


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: sign bit, ``ebits`` exponent bits, ``mbits`` fraction bits.

    Only the defining fields are stored; every other constant is a derived property.

    >>> Format("my_e3m4", ebits=3, mbits=4, bias=3, specials="fn").max
    30.0
    """

    #: Canonical name (ml_dtypes spelling where ml_dtypes has the format).
    name: str
    #: Number of exponent bits.
    ebits: int
    #: Number of stored fraction (mantissa) bits, excluding the implicit leading bit.
    mbits: int
    #: Exponent bias: a normal number is ``2**(E - bias) * 1.f`` for biased exponent ``E``.
    bias: int
    #: Special-value convention, one of :data:`SPECIALS`.
    specials: Specials = "ieee"
    #: Whether the format has subnormal numbers; if not, tiny results flush to zero.
    subnormals: bool = True
    #: Whether the format has a sign bit. Unsigned formats (the MX/NVFP4 scale formats E8M0
    #: and UE4M3, fp8-mx.md §1.2, §3.1) hold only non-negative values and NaN.
    signed: bool = True
    #: Whether exponent field 0 holds zero (and subnormals). ``False``: field 0 is an ordinary
    #: binade ``2**-bias`` and the format has no zero, as in E8M0 (code 0 is 2**-127).
    zero: bool = True

    def __post_init__(self) -> None:
        _check_int("ebits", self.ebits, 1, 11)
        _check_int("mbits", self.mbits, 0, 52)
        _check_int("bias", self.bias, -(2**20), 2**20)
        if self.specials not in SPECIALS:
            raise ValueError(f"specials={self.specials!r} is not one of {SPECIALS}")
        for arg in ("subnormals", "signed", "zero"):
            if not isinstance(getattr(self, arg), bool):
                raise TypeError(f"{arg} must be a bool, got {getattr(self, arg)!r}")
        if not self.zero and self.subnormals:
            raise ValueError("zero=False (field 0 is a normal binade) needs subnormals=False")
        if self.specials == "ieee" and (self.ebits < 2 or self.mbits < 1):
            raise ValueError(
                "specials='ieee' needs ebits >= 2 (one binade is reserved) and mbits >= 1 "
                "(NaN needs a nonzero fraction); use specials='fn' or 'finite'"
            )
        if self.specials == "fn" and self.ebits + self.mbits < 2:
            raise ValueError("specials='fn' needs ebits + mbits >= 2")
        # fpemu computes with float64: every value of the format must be a float64 number.
        if self.emax > 1023 or self.emin - self.mbits < -1074:
            raise ValueError(
                f"format {self.name!r} (ebits={self.ebits}, mbits={self.mbits}, "
                f"bias={self.bias}) has values outside float64's range; "
                "fpemu supports formats with emax <= 1023 and emin - mbits >= -1074"
            )

    # -- derived constants ------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width in bits (sign, if any, + exponent + fraction)."""
        return int(self.signed) + self.ebits + self.mbits

    @property
    def precision(self) -> int:
        """Significand precision p in bits, the implicit bit included."""
        return self.mbits + 1

    @property
    def has_inf(self) -> bool:
        """Whether the format encodes infinities."""
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        """Whether the format encodes NaN."""
        return self.specials != "finite"

    @property
    def has_negative_zero(self) -> bool:
        """Whether -0 is distinct from +0 (not so for fnuz, unsigned or zero-free formats)."""
        return self.specials != "fnuz" and self.signed and self.zero

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (field 0 is normal when ``zero`` is False)."""
        return 1 - self.bias if self.zero else -self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number."""
        top = (1 << self.ebits) - 1 - self.bias
        # ieee reserves the top binade; so does fn when it has no fraction bits (all ones = NaN)
        reserved = self.specials == "ieee" or (self.specials == "fn" and self.mbits == 0)
        return top - 1 if reserved else top

    @property
    def max_significand(self) -> int:
        """Integer significand (``precision`` bits) of the largest finite number."""
        full = (1 << self.precision) - 1
        return full - 1 if self.specials == "fn" and self.mbits > 0 else full

    @property
    def max(self) -> float:
        """Largest finite value."""
        return math.ldexp(self.max_significand, self.emax - self.mbits)

    @property
    def tiny(self) -> float:
        """Smallest positive normal value (numpy's ``smallest_normal``)."""
        return math.ldexp(1.0, self.emin)

    @property
    def smallest_subnormal(self) -> float:
        """Smallest positive value; equals :attr:`tiny` when the format has no subnormals."""
        return math.ldexp(1.0, self.emin - self.mbits) if self.subnormals else self.tiny

    @property
    def eps(self) -> float:
        """Distance from 1 to the next larger value, ``2**-mbits``."""
        return math.ldexp(1.0, -self.mbits)

    @property
    def default_overflow(self) -> Overflow:
        """Overflow behaviour by the format's convention: inf, else NaN, else saturate."""
        if self.has_inf:
            return "inf"
        return "nan" if self.has_nan else "saturate"

    def __str__(self) -> str:
        return self.name


def _check_int(arg: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{arg} must be an int, got {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{arg}={value} is out of range; expected {lo} <= {arg} <= {hi}")


def _fmt(name: str, e: int, m: int, bias: int | None = None, specials: Specials = "ieee") -> Format:
    return Format(name, e, m, 2 ** (e - 1) - 1 if bias is None else bias, specials)


#: Every named format, by canonical name.
FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        _fmt("float64", 11, 52),
        _fmt("float32", 8, 23),
        _fmt("tf32", 8, 10),
        _fmt("float16", 5, 10),
        _fmt("bfloat16", 8, 7),
        _fmt("float8_e4m3fn", 4, 3, specials="fn"),
        _fmt("float8_e5m2", 5, 2),
        _fmt("float8_e4m3fnuz", 4, 3, bias=8, specials="fnuz"),
        _fmt("float8_e5m2fnuz", 5, 2, bias=16, specials="fnuz"),
        _fmt("float8_e4m3", 4, 3),
        _fmt("float6_e3m2fn", 3, 2, specials="finite"),
        _fmt("float6_e2m3fn", 2, 3, specials="finite"),
        _fmt("float4_e2m1fn", 2, 1, specials="finite"),
    )
}

#: Short names accepted wherever a format is.
ALIASES: dict[str, str] = {
    "fp64": "float64", "f64": "float64", "double": "float64",
    "fp32": "float32", "f32": "float32", "single": "float32",
    "fp16": "float16", "f16": "float16", "half": "float16", "binary16": "float16",
    "bf16": "bfloat16",
    "e4m3": "float8_e4m3fn", "e4m3fn": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn",
    "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2",
    "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz",
    "e4m3_ieee": "float8_e4m3",
    "e3m2": "float6_e3m2fn", "fp6_e3m2": "float6_e3m2fn",
    "e2m3": "float6_e2m3fn", "fp6_e2m3": "float6_e2m3fn",
    "e2m1": "float4_e2m1fn", "fp4": "float4_e2m1fn", "fp4_e2m1": "float4_e2m1fn",
}  # fmt: skip

#: Scale formats of the block formats (fp8-mx.md §1.2, §3.1): unsigned, so they live outside
#: :data:`FORMATS` (which holds the formats :func:`fpemu.round` computes in); :func:`get_format`
#: resolves them too. Scale codes are computed by the rules of :mod:`fpemu.quant`.
SCALE_FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        # E8M0: 2**(code - 127) for codes 0..254, 0xFF NaN; no sign, no zero, no infinity
        Format("float8_e8m0fnu", 8, 0, 127, "fn", subnormals=False, signed=False, zero=False),
        # UE4M3: the non-negative half of e4m3fn (NVFP4 block scales), 0x7F NaN
        Format("ue4m3", 4, 3, 7, "fn", signed=False),
    )
}

#: Short names of the scale formats.
SCALE_ALIASES: dict[str, str] = {
    "e8m0": "float8_e8m0fnu", "ue8m0": "float8_e8m0fnu", "e8m0fnu": "float8_e8m0fnu",
}  # fmt: skip

FormatLike = Union[str, Format]


def get_format(fmt: FormatLike, *, arg: str = "fmt") -> Format:
    """Resolve a format name, alias or :class:`Format` to a :class:`Format`.

    Args:
        fmt: a canonical name (``"float16"``), an alias (``"fp16"``, case-insensitive) or a Format.
        arg: the caller's argument name, used in error messages.

    Raises:
        ValueError: the name is unknown (the message lists the known names).
        TypeError: ``fmt`` is neither a str nor a Format.

    >>> get_format("BF16").name
    'bfloat16'
    """
    if isinstance(fmt, Format):
        return fmt
    if not isinstance(fmt, str):
        raise TypeError(f"{arg} must be a format name or a fpemu.Format, got {fmt!r}")
    key = fmt.strip().lower()
    key = ALIASES.get(key, SCALE_ALIASES.get(key, key))
    if key in SCALE_FORMATS:
        return SCALE_FORMATS[key]
    if key not in FORMATS:
        raise ValueError(
            f"unknown format {arg}={fmt!r}; known formats: {', '.join(FORMATS)}; "
            f"scale formats: {', '.join(SCALE_FORMATS)}; aliases: {', '.join(ALIASES)}"
        )
    return FORMATS[key]
