"""The oracle's own description of a binary floating-point format.

:class:`Spec` stores the defining fields (exponent bits, fraction bits, bias, special-value
convention, subnormal flag) and derives every other constant exactly, as ``int`` or
:class:`fractions.Fraction`. It is written independently of ``fpemu.formats``; it shares only
the meaning of the fields.

>>> FLOAT16.max, FLOAT16.tiny, FLOAT16.smallest_subnormal
(Fraction(65504, 1), Fraction(1, 16384), Fraction(1, 16777216))
>>> E4M3FN.max
Fraction(448, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

#: Accepted values of :attr:`Spec.specials`.
SPECIALS: tuple[str, ...] = ("ieee", "fn", "fnuz", "finite")


@dataclass(frozen=True)
class Spec:
    """A binary floating-point format: 1 sign bit, ``ebits`` exponent bits, ``mbits`` fraction bits.

    A normal number with biased exponent ``E`` (``0 < E``) and fraction ``f`` is
    ``(-1)**s * 2**(E - bias) * (1 + f / 2**mbits)``; ``E == 0`` encodes subnormals
    ``(-1)**s * 2**(1 - bias) * (f / 2**mbits)``. ``specials`` says which codes are not numbers:

    - ``"ieee"``: exponent all ones is infinity (fraction 0) or NaN (fraction nonzero).
    - ``"fn"``: no infinity; exponent and fraction all ones (either sign) is NaN.
    - ``"fnuz"``: no infinity, no -0; the code ``1 0...0`` (sign bit alone) is the only NaN.
    - ``"finite"``: every code is a finite number.

    ``subnormals=False`` means tiny results are flushed to zero after rounding.

    >>> Spec(5, 10, 15).emax, Spec(4, 3, 7, "fn").emax, Spec(4, 3, 8, "fnuz").emin
    (15, 8, -7)
    """

    ebits: int
    mbits: int
    bias: int
    specials: str = "ieee"
    subnormals: bool = True

    def __post_init__(self) -> None:
        for arg, lo in (("ebits", 1), ("mbits", 0)):
            value = getattr(self, arg)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{arg} must be an int, got {value!r}")
            if value < lo:
                raise ValueError(f"{arg}={value} is out of range; expected {arg} >= {lo}")
        if isinstance(self.bias, bool) or not isinstance(self.bias, int):
            raise TypeError(f"bias must be an int, got {self.bias!r}")
        if self.specials not in SPECIALS:
            raise ValueError(f"specials={self.specials!r} is not one of {SPECIALS}")
        if not isinstance(self.subnormals, bool):
            raise TypeError(f"subnormals must be a bool, got {self.subnormals!r}")
        if self.specials == "ieee" and self.ebits < 2:
            raise ValueError("specials='ieee' needs ebits >= 2: the top binade is reserved")
        if self.specials == "fn" and self.ebits + self.mbits < 2:
            raise ValueError("specials='fn' needs ebits + mbits >= 2")

    @classmethod
    def from_fields(cls, obj: object) -> Spec:
        """Build a Spec from any object with ``ebits, mbits, bias, specials, subnormals``.

        Duck typing lets tests pass an ``fpemu.Format`` without the oracle importing fpemu.

        >>> class F:
        ...     ebits, mbits, bias, specials, subnormals = 5, 10, 15, "ieee", True
        >>> Spec.from_fields(F()) == FLOAT16
        True
        """
        fields = ("ebits", "mbits", "bias", "specials", "subnormals")
        missing = [f for f in fields if not hasattr(obj, f)]
        if missing:
            raise TypeError(f"obj={obj!r} lacks the attributes {missing}; expected all of {fields}")
        return cls(*(getattr(obj, f) for f in fields))

    # -- derived constants ------------------------------------------------------------------
    @property
    def bits(self) -> int:
        """Total width in bits."""
        return 1 + self.ebits + self.mbits

    @property
    def precision(self) -> int:
        """Significand bits, the implicit leading bit included."""
        return self.mbits + 1

    @property
    def has_inf(self) -> bool:
        """Whether infinities exist."""
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        """Whether NaN exists."""
        return self.specials != "finite"

    @property
    def has_negative_zero(self) -> bool:
        """Whether -0 is a value of its own."""
        return self.specials != "fnuz"

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal number (biased exponent 1)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite number (the top binade, less one for ieee)."""
        top = (1 << self.ebits) - 1 - self.bias
        # ieee reserves the top binade; fn without fraction bits loses it to its NaN code
        reserved = self.specials == "ieee" or (self.specials == "fn" and self.mbits == 0)
        return top - 1 if reserved else top

    @property
    def max_significand(self) -> int:
        """Integer significand of the largest finite number (all ones; less one for fn)."""
        full = (1 << (self.mbits + 1)) - 1
        return full - 1 if self.specials == "fn" and self.mbits > 0 else full

    @property
    def max(self) -> Fraction:
        """Largest finite value."""
        return self.max_significand * pow2(self.emax - self.mbits)

    @property
    def tiny(self) -> Fraction:
        """Smallest positive normal value ``2**emin``."""
        return pow2(self.emin)

    @property
    def smallest_subnormal(self) -> Fraction:
        """Smallest positive value; :attr:`tiny` when subnormals are off."""
        return pow2(self.emin - self.mbits) if self.subnormals else self.tiny

    @property
    def default_overflow(self) -> str:
        """What overflow gives by convention: ``"inf"``, else ``"nan"``, else ``"saturate"``."""
        if self.has_inf:
            return "inf"
        return "nan" if self.has_nan else "saturate"


def pow2(e: int) -> Fraction:
    """Return ``2**e`` exactly for any integer ``e``.

    >>> pow2(-3), pow2(4)
    (Fraction(1, 8), Fraction(16, 1))
    """
    return Fraction(1 << e) if e >= 0 else Fraction(1, 1 << -e)


def floor_log2(a: Fraction) -> int:
    """Return ``floor(log2(a))`` for ``a > 0``, exactly.

    >>> floor_log2(Fraction(1)), floor_log2(Fraction(3, 4)), floor_log2(Fraction(1024))
    (0, -1, 10)
    """
    n, d = a.numerator, a.denominator
    e = n.bit_length() - d.bit_length()  # floor(log2 a) is e or e - 1
    if (n << max(-e, 0)) < (d << max(e, 0)):
        e -= 1
    return e


# Named specs, from the published format definitions (IEEE 754, OCP 8-bit FP, OCP MX).
FLOAT64 = Spec(11, 52, 1023)
FLOAT32 = Spec(8, 23, 127)
TF32 = Spec(8, 10, 127)
FLOAT16 = Spec(5, 10, 15)
BFLOAT16 = Spec(8, 7, 127)
E4M3FN = Spec(4, 3, 7, "fn")
E5M2 = Spec(5, 2, 15)
E4M3FNUZ = Spec(4, 3, 8, "fnuz")
E5M2FNUZ = Spec(5, 2, 16, "fnuz")
E4M3 = Spec(4, 3, 7)
E3M2FN = Spec(3, 2, 3, "finite")
E2M3FN = Spec(2, 3, 1, "finite")
E2M1FN = Spec(2, 1, 1, "finite")
