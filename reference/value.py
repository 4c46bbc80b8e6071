"""Exact values: a :class:`~fractions.Fraction`, or one of four special sentinels.

A :data:`Value` is either a ``Fraction`` (any finite number; ``Fraction(0)`` is +0) or a
:class:`Special` member: :data:`POS_INF`, :data:`NEG_INF`, :data:`NAN`, :data:`NEG_ZERO`.
Conversion from and to Python floats (IEEE binary64) is exact in both directions.

>>> from_float(-0.0) is NEG_ZERO, from_float(0.75)
(True, Fraction(3, 4))
>>> to_float(Fraction(3, 4)), to_float(NEG_ZERO)
(0.75, -0.0)
"""

from __future__ import annotations

import enum
import math
from fractions import Fraction


class Special(enum.Enum):
    """The values a Fraction cannot stand for."""

    POS_INF = "+inf"
    NEG_INF = "-inf"
    NAN = "nan"
    NEG_ZERO = "-0"

    def __repr__(self) -> str:
        return f"Special.{self.name}"


POS_INF = Special.POS_INF
NEG_INF = Special.NEG_INF
NAN = Special.NAN
NEG_ZERO = Special.NEG_ZERO

#: An exact value: a Fraction (``Fraction(0)`` is +0) or a :class:`Special`.
Value = Fraction | Special


def from_float(x: float) -> Value:
    """Convert a Python float (or int) to a :data:`Value`, exactly.

    Raises:
        TypeError: ``x`` is not a float or int.

    >>> from_float(float("inf")) is POS_INF, from_float(0.1) == Fraction(0.1)
    (True, True)
    """
    if isinstance(x, bool) or not isinstance(x, (float, int)):
        raise TypeError(f"x must be a float, got {x!r} of type {type(x).__name__}")
    if isinstance(x, int):
        return Fraction(x)
    if math.isnan(x):
        return NAN
    if math.isinf(x):
        return POS_INF if x > 0 else NEG_INF
    if x == 0.0:
        return NEG_ZERO if math.copysign(1.0, x) < 0 else Fraction(0)
    return Fraction(x)  # exact: Fraction(float) uses the float's binary expansion


def to_float(v: Value) -> float:
    """Convert a :data:`Value` to a Python float, refusing any inexact conversion.

    Raises:
        ValueError: ``v`` is finite but not exactly a binary64 number.

    >>> to_float(Fraction(1, 3))
    Traceback (most recent call last):
    ...
    ValueError: v=Fraction(1, 3) is not exactly representable as a Python float
    """
    if isinstance(v, Special):
        return {POS_INF: math.inf, NEG_INF: -math.inf, NAN: math.nan, NEG_ZERO: -0.0}[v]
    try:
        f = v.numerator / v.denominator  # int/int true division is correctly rounded
    except OverflowError:
        f = math.inf
    if math.isinf(f) or Fraction(f) != v:
        raise ValueError(f"v={v!r} is not exactly representable as a Python float")
    return f


def is_nan(v: Value) -> bool:
    """Whether ``v`` is NaN.

    >>> is_nan(NAN), is_nan(Fraction(0))
    (True, False)
    """
    return v is NAN


def is_inf(v: Value) -> bool:
    """Whether ``v`` is +inf or -inf.

    >>> is_inf(NEG_INF), is_inf(NAN)
    (True, False)
    """
    return v is POS_INF or v is NEG_INF


def is_zero(v: Value) -> bool:
    """Whether ``v`` is +0 or -0.

    >>> is_zero(NEG_ZERO), is_zero(Fraction(0)), is_zero(Fraction(1, 9))
    (True, True, False)
    """
    return v is NEG_ZERO or (isinstance(v, Fraction) and v == 0)


def is_negative(v: Value) -> bool:
    """Whether the sign bit of ``v`` is set (NaN counts as positive).

    >>> is_negative(NEG_ZERO), is_negative(Fraction(0)), is_negative(NEG_INF)
    (True, False, True)
    """
    if isinstance(v, Special):
        return v is NEG_INF or v is NEG_ZERO
    return v < 0


def signed_zero(negative: bool) -> Value:
    """Return -0 if ``negative`` else +0.

    >>> signed_zero(True), signed_zero(False)
    (Special.NEG_ZERO, Fraction(0, 1))
    """
    return NEG_ZERO if negative else Fraction(0)


def signed_inf(negative: bool) -> Value:
    """Return -inf if ``negative`` else +inf.

    >>> signed_inf(True)
    Special.NEG_INF
    """
    return NEG_INF if negative else POS_INF


def negate(v: Value) -> Value:
    """Return ``-v`` exactly (sign flip; NaN stays NaN).

    >>> negate(Fraction(0)) is NEG_ZERO, negate(NEG_ZERO)
    (True, Fraction(0, 1))
    """
    if isinstance(v, Fraction):
        return NEG_ZERO if v == 0 else -v
    flipped: dict[Special, Value] = {
        POS_INF: NEG_INF,
        NEG_INF: POS_INF,
        NAN: NAN,
        NEG_ZERO: Fraction(0),
    }
    return flipped[v]


def to_fraction(v: Value) -> Fraction:
    """Return a finite value as a Fraction (-0 gives 0).

    Raises:
        ValueError: ``v`` is an infinity or NaN.

    >>> to_fraction(NEG_ZERO), to_fraction(Fraction(-3, 2))
    (Fraction(0, 1), Fraction(-3, 2))
    """
    if v is NEG_ZERO:
        return Fraction(0)
    if v is POS_INF or v is NEG_INF or v is NAN:
        raise ValueError(f"v={v!r} is not finite; expected a finite value")
    assert isinstance(v, Fraction)
    return v


def as_value(x: object, *, arg: str = "x") -> Value:
    """Accept a :data:`Value`, float or int and return a :data:`Value`.

    Raises:
        TypeError: ``x`` is none of these.

    >>> as_value(2), as_value(-0.0), as_value(Fraction(1, 3))
    (Fraction(2, 1), Special.NEG_ZERO, Fraction(1, 3))
    """
    if isinstance(x, (Fraction, Special)):
        return x
    if isinstance(x, (float, int)) and not isinstance(x, bool):
        return from_float(x)
    raise TypeError(f"{arg} must be a Fraction, Special, float or int, got {x!r}")
