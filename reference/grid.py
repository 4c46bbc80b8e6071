"""Neighbours on a format's grid: :func:`ulp`, :func:`next_up`, :func:`next_down`.

Plain arithmetic on the grid (spacing ``2**(max(e, emin) - mbits)`` in the binade of ``2**e``);
the tests check it against enumerating every code with :func:`reference.bits.decode`.

The value set is that of the codes, without subnormals when ``spec.subnormals`` is False.

>>> from reference.spec import FLOAT16, E4M3FN
>>> next_up(1.0, FLOAT16) == 1 + 2**-10, next_down(1.0, FLOAT16) == 1 - 2**-11
(True, True)
>>> next_up(-0.0, FLOAT16) == 2**-24, next_up(448.0, E4M3FN)
(True, nan)
"""

from __future__ import annotations

import math
from fractions import Fraction

from reference.bits import encode_value
from reference.spec import Spec, floor_log2, pow2
from reference.value import (
    NAN,
    NEG_INF,
    NEG_ZERO,
    POS_INF,
    Special,
    Value,
    from_float,
    signed_zero,
    to_float,
)


def _spacing(a: Fraction, spec: Spec) -> Fraction:
    """Grid spacing in the binade of ``a > 0`` (exponent unbounded above)."""
    return pow2(max(floor_log2(a), spec.emin) - spec.mbits)


def ulp(x: float, spec: Spec) -> float:
    """Unit in the last place of ``x``: the grid spacing ``2**(max(e, emin) - mbits)``.

    ``e = floor(log2|x|)``; zero gives the subnormal spacing ``2**(emin - mbits)``; +-inf
    gives inf and NaN gives NaN. Always positive. ``x`` need not be a value of ``spec``.

    >>> from reference.spec import FLOAT16
    >>> ulp(1.0, FLOAT16), ulp(-1.5, FLOAT16), ulp(0.0, FLOAT16) == 2**-24
    (0.0009765625, 0.0009765625, True)
    """
    v = from_float(x)
    if v is NAN:
        return math.nan
    if v is POS_INF or v is NEG_INF:
        return math.inf
    a = abs(v) if isinstance(v, Fraction) else Fraction(0)
    return to_float(pow2(spec.emin - spec.mbits) if a == 0 else _spacing(a, spec))


def _member(x: float, spec: Spec) -> Value:
    """``x`` as a Value, checked to be a value of ``spec`` (-0 counts as 0 in fnuz formats)."""
    v = from_float(x)
    if v is NEG_ZERO and not spec.has_negative_zero:
        return Fraction(0)
    try:
        encode_value(v, spec)
    except ValueError:
        raise ValueError(f"x={x!r} is not a value of spec={spec}") from None
    if isinstance(v, Fraction) and not spec.subnormals and 0 < abs(v) < spec.tiny:
        raise ValueError(f"x={x!r} is subnormal but spec={spec} has no subnormals")
    return v


def _above_positive(a: Fraction, spec: Spec) -> Value:
    """Smallest value of ``spec`` above ``a >= 0``, or the overflow special."""
    if a == 0:
        nxt = spec.smallest_subnormal
    else:
        nxt = a + _spacing(a, spec)
    if nxt > spec.max:
        if spec.has_inf:
            return POS_INF
        if spec.has_nan:
            return NAN
        raise ValueError(f"there is no value above max={spec.max} in spec={spec}")
    return nxt


def _below_positive(a: Fraction, spec: Spec) -> Fraction:
    """Largest value of ``spec`` below ``a > 0`` (may be 0)."""
    e = floor_log2(a)
    below = e - 1 if a == pow2(e) and e > spec.emin else e  # a power of two: previous binade
    nxt = a - pow2(max(below, spec.emin) - spec.mbits)
    if not spec.subnormals and nxt < spec.tiny:
        return Fraction(0)
    return nxt


def _up(v: Value, spec: Spec) -> Value:
    if v is NAN or v is POS_INF:
        return v
    if v is NEG_INF:
        return -spec.max
    if v is NEG_ZERO:
        v = Fraction(0)
    assert isinstance(v, Fraction)
    if v >= 0:
        return _above_positive(v, spec)
    nxt = _below_positive(-v, spec)
    return -nxt if nxt != 0 else signed_zero(spec.has_negative_zero)


def _negate(v: Value) -> Value:
    if isinstance(v, Special):
        flipped: dict[Special, Value] = {
            POS_INF: NEG_INF,
            NEG_INF: POS_INF,
            NAN: NAN,
            NEG_ZERO: Fraction(0),
        }
        return flipped[v]
    return -v


def next_up(x: float, spec: Spec) -> float:
    """Smallest value of ``spec`` greater than ``x`` (IEEE nextUp).

    ``next_up(max)`` is +inf (ieee) or NaN (fn/fnuz); ``next_up(+-0)`` is the smallest positive
    value; ``next_up(-tiny)`` is -0 (+0 in fnuz); +inf and NaN map to themselves.

    Raises:
        ValueError: ``x`` is not a value of ``spec``, or ``x`` is max of a format with neither
            inf nor NaN.

    >>> from reference.spec import E2M1FN
    >>> next_up(4.0, E2M1FN), next_up(-0.5, E2M1FN)
    (6.0, -0.0)
    """
    v = _member(x, spec)
    return to_float(_up(v, spec))


def next_down(x: float, spec: Spec) -> float:
    """Largest value of ``spec`` less than ``x`` (IEEE nextDown): ``-next_up(-x)``.

    For fnuz formats, ``next_down(smallest positive)`` is +0 (there is no -0).

    Raises:
        ValueError: as :func:`next_up`.

    >>> from reference.spec import FLOAT16
    >>> next_down(0.0, FLOAT16) == -(2**-24), next_down(-65504.0, FLOAT16)
    (True, -inf)
    """
    v = _member(x, spec)
    if v is NEG_ZERO:
        v = Fraction(0)  # -0 and +0 have the same neighbours
    r = _negate(_up(_negate(v), spec))
    if r is NEG_ZERO and not spec.has_negative_zero:
        r = Fraction(0)
    return to_float(r)
