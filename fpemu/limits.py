"""Machine limits (``finfo``) of a format, in the spirit of :class:`numpy.finfo`.

>>> fi = finfo("bf16")
>>> fi.bits, fi.nmant, fi.nexp, fi.eps, fi.max
(16, 7, 8, 0.0078125, 3.3895313892515355e+38)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fpemu.formats import Format, FormatLike, get_format


@dataclass(frozen=True)
class FInfo:
    """Limits of a format. Field names and meanings follow :class:`numpy.finfo`."""

    #: The format described.
    format: Format
    #: Total width in bits.
    bits: int
    #: Exponent bits (numpy's ``nexp`` and ``iexp``).
    nexp: int
    #: Stored fraction bits.
    nmant: int
    #: Difference between 1 and the next larger value.
    eps: float
    #: Difference between 1 and the next smaller value.
    epsneg: float
    #: Largest finite value.
    max: float
    #: Most negative finite value.
    min: float
    #: Smallest positive normal value (also ``tiny``).
    smallest_normal: float
    #: Smallest positive value (subnormal where the format has subnormals).
    smallest_subnormal: float
    #: Exponent of the smallest normal (numpy's ``minexp``).
    minexp: int
    #: Smallest power of two that overflows (numpy's ``maxexp``).
    maxexp: int
    #: Exponent of eps (numpy's ``machep``).
    machep: int
    #: Exponent of epsneg (numpy's ``negep``).
    negep: int
    #: Approximate number of exact decimal digits.
    precision: int
    #: ``10 ** -precision``.
    resolution: float

    @property
    def tiny(self) -> float:
        """Alias of :attr:`smallest_normal` (numpy's name)."""
        return self.smallest_normal

    @property
    def iexp(self) -> int:
        """Exponent bits (numpy's name)."""
        return self.nexp


def finfo(fmt: FormatLike) -> FInfo:
    """Machine limits of ``fmt``; every field is derived from the format's definition."""
    f = get_format(fmt)
    precision = int(-math.log10(f.eps))  # numpy's rule (ml_dtypes hand-types 1 for fp8)
    below_one = max(-1, f.emin) - f.mbits  # spacing just below 1: subnormal when emin == 0
    return FInfo(
        format=f, bits=f.bits, nexp=f.ebits, nmant=f.mbits, eps=f.eps,
        epsneg=math.ldexp(1.0, below_one), max=f.max, min=-f.max,
        smallest_normal=f.tiny, smallest_subnormal=f.smallest_subnormal,
        minexp=f.emin, maxexp=f.emax + 1, machep=-f.mbits, negep=below_one,
        precision=precision, resolution=10.0**-precision,
    )  # fmt: skip
