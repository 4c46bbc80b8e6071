"""Correctly rounded arithmetic: the exact result, then ONE :func:`~reference.rounding.round_value`.

``add, sub, mul, div, sqrt, fma`` take Python floats (any binary64 value; normally values of
``spec``) and return the rounded result as a float. Special cases follow IEEE 754:

- NaN operands give NaN; invalid operations give NaN: ``inf - inf``, ``0 * inf``, ``0 / 0``,
  ``inf / inf``, ``sqrt(x < 0)``, ``fma(0, inf, c)``.
- ``x / 0`` is +-inf (sign: xor of the operand signs, zeros included).
- An exactly zero sum of opposite-signed operands (or ``x*y + z`` in fma) is +0, except in mode
  ``"rdown"`` where it is -0; ``(-0) + (-0)`` is -0; ``sqrt(-0)`` is -0.
- A format without inf (fn, fnuz, finite) refuses inf operands (ValueError); an infinite result
  (``x / 0``) goes through the overflow rule (NaN for fn/fnuz, +-max for finite formats).
  A NaN operand or result in a format without NaN is a ValueError.

``sqrt`` is rounded exactly in every mode without a float square root: the integer square root
of a scaled value locates the result between two grid points and comparisons of squares decide
the rounding (midpoint, stochastic threshold).

>>> from reference.spec import FLOAT16, E4M3FN
>>> add(1.0, 2**-11, FLOAT16), add(1.0, 2**-11, FLOAT16, "rup")
(1.0, 1.0009765625)
>>> sqrt(2.0, FLOAT16), sqrt(2.0, FLOAT16, "rtz")
(1.4140625, 1.4140625)
>>> div(1.0, 0.0, E4M3FN), mul(-0.0, 3.0, FLOAT16)
(nan, -0.0)
"""

from __future__ import annotations

from fractions import Fraction
from math import isqrt

from reference.rounding import Options, quantum_exponent, resolve_options, round_parts, round_with
from reference.spec import Spec, floor_log2, pow2
from reference.value import (
    NAN,
    NEG_INF,
    NEG_ZERO,
    POS_INF,
    Value,
    from_float,
    is_inf,
    is_negative,
    is_zero,
    negate,
    signed_inf,
    signed_zero,
    to_float,
    to_fraction,
)


# -- exact operations on values (no rounding) ------------------------------------------------
def exact_add(x: Value, y: Value, mode: str = "rne") -> Value:
    """Exact ``x + y``; ``mode`` only decides the sign of an exact zero (-0 for ``"rdown"``).

    >>> exact_add(Fraction(1, 3), Fraction(-1, 3), "rdown")
    Special.NEG_ZERO
    """
    if x is NAN or y is NAN:
        return NAN
    if is_inf(x) and is_inf(y):
        return x if x is y else NAN
    if is_inf(x):
        return x
    if is_inf(y):
        return y
    s = to_fraction(x) + to_fraction(y)
    if s != 0:
        return s
    if is_zero(x) and is_zero(y) and is_negative(x) == is_negative(y):
        return x  # (+0) + (+0) = +0, (-0) + (-0) = -0 in every mode
    return signed_zero(mode == "rdown")


def exact_mul(x: Value, y: Value) -> Value:
    """Exact ``x * y`` (``0 * inf`` is NaN).

    >>> exact_mul(NEG_ZERO, Fraction(2))
    Special.NEG_ZERO
    """
    if x is NAN or y is NAN:
        return NAN
    negative = is_negative(x) != is_negative(y)
    if is_inf(x) or is_inf(y):
        return NAN if is_zero(x) or is_zero(y) else signed_inf(negative)
    p = to_fraction(x) * to_fraction(y)
    return signed_zero(negative) if p == 0 else p


def exact_div(x: Value, y: Value) -> Value:
    """Exact ``x / y`` (``0/0`` and ``inf/inf`` are NaN, ``x/0`` is +-inf).

    >>> exact_div(Fraction(1), NEG_ZERO)
    Special.NEG_INF
    """
    if x is NAN or y is NAN:
        return NAN
    negative = is_negative(x) != is_negative(y)
    if is_inf(x):
        return NAN if is_inf(y) else signed_inf(negative)
    if is_inf(y):
        return signed_zero(negative)
    if is_zero(y):
        return NAN if is_zero(x) else signed_inf(negative)
    q = to_fraction(x) / to_fraction(y)
    return signed_zero(negative) if q == 0 else q


def exact_fma(x: Value, y: Value, z: Value, mode: str = "rne") -> Value:
    """Exact ``x * y + z`` (the product is exact, so this is :func:`exact_add` of it and ``z``).

    >>> exact_fma(Fraction(2), Fraction(3), Fraction(-6), "rdown")
    Special.NEG_ZERO
    """
    return exact_add(exact_mul(x, y), z, mode)


# -- rounded operations ----------------------------------------------------------------------
def _operand(x: float, spec: Spec, arg: str) -> Value:
    v = from_float(x)
    if v is NAN and not spec.has_nan:
        raise ValueError(f"{arg}=nan but spec={spec} has no NaN")
    if (v is POS_INF or v is NEG_INF) and not spec.has_inf:
        raise ValueError(f"{arg}={x} but spec={spec} has no infinity")
    return v


def _finish(exact: Value, spec: Spec, opts: Options, op: str) -> float:
    if exact is NAN and not spec.has_nan:
        raise ValueError(f"{op} is invalid (NaN result) and spec={spec} has no NaN")
    return to_float(round_with(exact, spec, opts))


def add(
    a: float,
    b: float,
    spec: Spec,
    mode: str = "rne",
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> float:
    """``a + b`` rounded once to ``spec`` (options as :func:`~reference.rounding.round_value`).

    >>> from reference.spec import FLOAT16
    >>> add(1.0, -1.0, FLOAT16), add(1.0, -1.0, FLOAT16, "rdown")
    (0.0, -0.0)
    """
    opts = resolve_options(spec, mode, overflow=overflow, subnormals=subnormals, u=u)
    x, y = _operand(a, spec, "a"), _operand(b, spec, "b")
    return _finish(exact_add(x, y, opts.mode), spec, opts, f"add({a}, {b})")


def sub(
    a: float,
    b: float,
    spec: Spec,
    mode: str = "rne",
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> float:
    """``a - b`` rounded once to ``spec``: exactly ``a + (-b)``.

    >>> from reference.spec import FLOAT16
    >>> sub(-0.0, 0.0, FLOAT16), sub(65504.0, -32.0, FLOAT16, "rtz")
    (-0.0, 65504.0)
    """
    opts = resolve_options(spec, mode, overflow=overflow, subnormals=subnormals, u=u)
    x, y = _operand(a, spec, "a"), _operand(b, spec, "b")
    return _finish(exact_add(x, negate(y), opts.mode), spec, opts, f"sub({a}, {b})")


def mul(
    a: float,
    b: float,
    spec: Spec,
    mode: str = "rne",
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> float:
    """``a * b`` rounded once to ``spec``.

    >>> from reference.spec import E4M3FN
    >>> mul(1.125, 1.125, E4M3FN), mul(1.125, 1.125, E4M3FN, "rup")
    (1.25, 1.375)
    """
    opts = resolve_options(spec, mode, overflow=overflow, subnormals=subnormals, u=u)
    x, y = _operand(a, spec, "a"), _operand(b, spec, "b")
    return _finish(exact_mul(x, y), spec, opts, f"mul({a}, {b})")


def div(
    a: float,
    b: float,
    spec: Spec,
    mode: str = "rne",
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> float:
    """``a / b`` rounded once to ``spec``.

    >>> from reference.spec import FLOAT16
    >>> div(1.0, 3.0, FLOAT16), div(-1.0, 0.0, FLOAT16)
    (0.333251953125, -inf)
    """
    opts = resolve_options(spec, mode, overflow=overflow, subnormals=subnormals, u=u)
    x, y = _operand(a, spec, "a"), _operand(b, spec, "b")
    return _finish(exact_div(x, y), spec, opts, f"div({a}, {b})")


def fma(
    a: float,
    b: float,
    c: float,
    spec: Spec,
    mode: str = "rne",
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> float:
    """``a * b + c`` computed exactly, rounded once to ``spec``.

    >>> from reference.spec import FLOAT16
    >>> fma(1 + 2**-10, 1 - 2**-10, -1.0, FLOAT16) == -(2**-20)
    True
    """
    opts = resolve_options(spec, mode, overflow=overflow, subnormals=subnormals, u=u)
    x, y, z = _operand(a, spec, "a"), _operand(b, spec, "b"), _operand(c, spec, "c")
    return _finish(exact_fma(x, y, z, opts.mode), spec, opts, f"fma({a}, {b}, {c})")


def sqrt_value(x: Value, spec: Spec, opts: Options) -> Value:
    """Correctly rounded square root of an exact value; NaN for x < 0 (NaN returned unrounded).

    Locates ``sqrt(x) / 2**q`` between the integers ``m`` and ``m + 1`` with :func:`math.isqrt`
    and compares squares for the fractional part, so every mode rounds exactly.

    >>> from reference.rounding import resolve_options
    >>> from reference.spec import FLOAT16
    >>> sqrt_value(Fraction(2), FLOAT16, resolve_options(FLOAT16, "rup"))
    Fraction(1449, 1024)
    """
    if x is NAN or x is NEG_INF or (isinstance(x, Fraction) and x < 0):
        return NAN
    if x is NEG_ZERO or x is POS_INF or x == 0:
        return round_with(x, spec, opts)  # sqrt(+-0) = +-0, sqrt(inf) = inf
    assert isinstance(x, Fraction)
    q = quantum_exponent(floor_log2(x) // 2, spec)  # floor(log2 sqrt x) = floor(floor(log2 x)/2)
    y = x / pow2(2 * q)  # sqrt(x) / 2**q == sqrt(y)
    m = isqrt(y.numerator // y.denominator)  # floor(sqrt(y)) == isqrt(floor(y))

    def cmp(t: Fraction) -> int:  # sign(sqrt(y) - (m + t)) for t >= 0: compare the squares
        d = y - (m + t) ** 2
        return (d > 0) - (d < 0)

    return round_parts(False, m, cmp, q, spec, opts)


def sqrt(
    a: float,
    spec: Spec,
    mode: str = "rne",
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> float:
    """Square root of ``a`` rounded once to ``spec`` (``sqrt(-0) = -0``, ``sqrt(x<0)`` NaN).

    >>> from reference.spec import FLOAT16
    >>> sqrt(2.0, FLOAT16, "rup"), sqrt(-0.0, FLOAT16), sqrt(-1.0, FLOAT16)
    (1.4150390625, -0.0, nan)
    """
    opts = resolve_options(spec, mode, overflow=overflow, subnormals=subnormals, u=u)
    x = _operand(a, spec, "a")
    r = sqrt_value(x, spec, opts)
    if r is NAN and not spec.has_nan:
        raise ValueError(f"sqrt({a}) is invalid (NaN result) and spec={spec} has no NaN")
    return to_float(r)
