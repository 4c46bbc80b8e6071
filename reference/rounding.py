"""One correct rounding of an exact value to a :class:`~reference.spec.Spec`.

The rule, in order:

1. NaN gives NaN (ValueError if the format has no NaN). +-inf gives the overflow value
   (``"inf"``: +-inf, ``"nan"``: NaN, ``"saturate"``: +-max). Zeros keep their sign (fnuz: +0).
2. A finite nonzero ``x`` with ``e = floor(log2|x|)`` is rounded to the grid of quantum
   ``2**(max(e, emin) - mbits)`` (subnormals included, exponent unbounded above) by ``mode``:

   - ``"rne"``/``"rna"``: nearest, ties to even significand / away from zero;
   - ``"rtz"``, ``"rup"`` (toward +inf), ``"rdown"`` (toward -inf);
   - ``"rto"``: round to odd: exact stays, otherwise the neighbour with odd integer
     significand (the last bit of its code is 1);
   - ``"stochastic"``: with ``frac = (|x| - down) / (up - down)`` exactly, where ``down``/``up``
     are the grid neighbours of ``|x|`` toward/away from zero, take ``up`` iff ``u < frac``
     (``u`` in ``[0, 1)`` given as an exact number). ``u`` uniform gives ``P(up) = frac``.

3. Overflow: if the rounded magnitude exceeds ``max``, the result is the overflow value if the
   rounding went away from zero for that sign (always for rne/rna, rup for +, rdown for -,
   stochastic only when it took ``up``), else +-max (rtz, rto, rup for -, rdown for +,
   stochastic that took ``down``). ``overflow=None`` picks ieee->"inf", fn/fnuz->"nan",
   finite->"saturate".
4. ``subnormals=False`` (or the spec's flag when None): a nonzero result below ``2**emin``
   after step 2 becomes a zero of the same sign (flush after rounding).
5. A zero result has the sign of ``x``, except in fnuz formats (no -0) where it is +0.

>>> from reference.spec import FLOAT16, E4M3FN
>>> round_float(1 + 2**-11, FLOAT16, "rne"), round_float(1 + 2**-11, FLOAT16, "rna")
(1.0, 1.0009765625)
>>> round_float(464.0, E4M3FN, "rne"), round_float(465.0, E4M3FN, "rne")
(448.0, nan)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from reference.spec import Spec, floor_log2, pow2
from reference.value import (
    NAN,
    NEG_INF,
    POS_INF,
    Special,
    Value,
    as_value,
    from_float,
    signed_inf,
    signed_zero,
    to_float,
)

#: Rounding modes, see the module docstring.
MODES: tuple[str, ...] = ("rne", "rna", "rtz", "rup", "rdown", "rto", "stochastic")
#: Overflow values.
OVERFLOWS: tuple[str, ...] = ("inf", "nan", "saturate")

#: ``cmp(t)`` is the sign (-1, 0, 1) of ``frac - t``, where ``frac`` in ``[0, 1)`` is the exact
#: fractional part of the magnitude measured in quanta. Lets irrational results (sqrt) be rounded.
FracCompare = Callable[[Fraction], int]


@dataclass(frozen=True)
class Options:
    """Validated rounding options (build with :func:`resolve_options`)."""

    mode: str
    overflow: str
    subnormals: bool
    u: Fraction | None


def resolve_options(
    spec: Spec,
    mode: str,
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> Options:
    """Check the rounding options against ``spec`` and fill in the defaults.

    Raises:
        ValueError: unknown mode/overflow, an overflow value the format lacks, ``u`` missing
            for (or given to a mode other than) ``"stochastic"``, or ``u`` outside ``[0, 1)``.
        TypeError: ``spec``, ``subnormals`` or ``u`` has the wrong type.

    >>> from reference.spec import E4M3FN
    >>> resolve_options(E4M3FN, "rtz").overflow
    'nan'
    """
    if not isinstance(spec, Spec):
        raise TypeError(f"spec must be a reference.Spec, got {spec!r}")
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not one of {MODES}")
    overflow = spec.default_overflow if overflow is None else overflow
    if overflow not in OVERFLOWS:
        raise ValueError(f"overflow={overflow!r} is not one of {OVERFLOWS}")
    if overflow == "inf" and not spec.has_inf:
        raise ValueError(f"overflow='inf' but spec={spec} has no infinity")
    if overflow == "nan" and not spec.has_nan:
        raise ValueError(f"overflow='nan' but spec={spec} has no NaN")
    subnormals = spec.subnormals if subnormals is None else subnormals
    if not isinstance(subnormals, bool):
        raise TypeError(f"subnormals must be a bool or None, got {subnormals!r}")
    return Options(mode, overflow, subnormals, _check_u(mode, u))


def _check_u(mode: str, u: object) -> Fraction | None:
    if mode != "stochastic":
        if u is not None:
            raise ValueError(f"u={u!r} is only used by mode='stochastic', not mode={mode!r}")
        return None
    if u is None:
        raise ValueError("mode='stochastic' needs u, a number in [0, 1)")
    if isinstance(u, bool) or not isinstance(u, (Fraction, int, float)):
        raise TypeError(f"u must be a Fraction, int or float in [0, 1), got {u!r}")
    if isinstance(u, float) and not math.isfinite(u):
        raise ValueError(f"u={u!r} is not in [0, 1)")
    fu = Fraction(u)
    if not 0 <= fu < 1:
        raise ValueError(f"u={u!r} is not in [0, 1)")
    return fu


def quantum_exponent(e: int, spec: Spec) -> int:
    """Exponent ``q`` of the grid spacing ``2**q`` for magnitudes in ``[2**e, 2**(e+1))``.

    >>> from reference.spec import FLOAT16
    >>> quantum_exponent(0, FLOAT16), quantum_exponent(-20, FLOAT16)
    (-10, -24)
    """
    return max(e, spec.emin) - spec.mbits


def _takes_up(m: int, cmp: FracCompare, negative: bool, opts: Options) -> bool:
    """Whether the magnitude rounds to ``m + 1`` quanta (away from zero) rather than ``m``."""
    if cmp(Fraction(0)) == 0:
        return False  # exact
    mode = opts.mode
    if mode == "rtz":
        return False
    if mode == "rup":
        return not negative
    if mode == "rdown":
        return negative
    if mode == "rto":
        return m % 2 == 0  # m and m + 1: exactly one is odd
    if mode == "stochastic":
        assert opts.u is not None
        return cmp(opts.u) > 0  # u < frac
    half = cmp(Fraction(1, 2))
    if mode == "rna":
        return half >= 0
    return half > 0 or (half == 0 and m % 2 == 1)  # rne


def _overflow_goes_special(negative: bool, went_up: bool, mode: str) -> bool:
    if mode in ("rne", "rna"):
        return True
    if mode == "stochastic":
        return went_up
    if mode == "rup":
        return not negative
    if mode == "rdown":
        return negative
    return False  # rtz, rto


def _overflow_value(negative: bool, spec: Spec, overflow: str) -> Value:
    if overflow == "inf":
        return signed_inf(negative)
    if overflow == "nan":
        return NAN
    return -spec.max if negative else spec.max


def _zero(negative: bool, spec: Spec) -> Value:
    return signed_zero(negative and spec.has_negative_zero)


def round_parts(
    negative: bool, m: int, cmp: FracCompare, q: int, spec: Spec, opts: Options
) -> Value:
    """Round the magnitude ``(m + frac) * 2**q`` (frac known through ``cmp``) with its sign.

    ``q`` must be :func:`quantum_exponent` of the magnitude's binade. This is steps 2-5 of the
    module rule; :func:`round_value` and the exact sqrt both end here.

    >>> from reference.spec import FLOAT16
    >>> opts = resolve_options(FLOAT16, "rne")
    >>> round_parts(True, 1024, lambda t: 1 if t < Fraction(1, 2) else -1, -10, FLOAT16, opts)
    Fraction(-1, 1)
    """
    went_up = _takes_up(m, cmp, negative, opts)
    r = (m + went_up) * pow2(q)
    if r > spec.max:
        if _overflow_goes_special(negative, went_up, opts.mode):
            return _overflow_value(negative, spec, opts.overflow)
        return -spec.max if negative else spec.max
    if r != 0 and not opts.subnormals and r < spec.tiny:
        r = Fraction(0)  # flush after rounding
    if r == 0:
        return _zero(negative, spec)
    return -r if negative else r


def _sign(x: Fraction) -> int:
    return (x > 0) - (x < 0)


def round_with(v: Value, spec: Spec, opts: Options) -> Value:
    """:func:`round_value` with already validated options (see :func:`resolve_options`).

    >>> from reference.spec import E4M3FN
    >>> round_with(Fraction(465), E4M3FN, resolve_options(E4M3FN, "rtz"))
    Fraction(448, 1)
    """
    if isinstance(v, Special):
        if v is NAN:
            if not spec.has_nan:
                raise ValueError(f"NaN input but spec={spec} has no NaN")
            return NAN
        if v is POS_INF or v is NEG_INF:
            return _overflow_value(v is NEG_INF, spec, opts.overflow)
        return _zero(True, spec)  # -0
    if v == 0:
        return Fraction(0)
    negative = v < 0
    a = -v if negative else v
    q = quantum_exponent(floor_log2(a), spec)
    scaled = a / pow2(q)
    m = scaled.numerator // scaled.denominator
    frac = scaled - m
    return round_parts(negative, m, lambda t: _sign(frac - t), q, spec, opts)


def round_value(
    v: Value | float,
    spec: Spec,
    mode: str,
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> Value:
    """Round an exact value once to ``spec`` (rule in the module docstring).

    Args:
        v: a Fraction, a :class:`~reference.value.Special`, or a float/int (taken exactly).
        spec: the target format.
        mode: one of :data:`MODES`.
        overflow: ``"inf"``, ``"nan"``, ``"saturate"`` or None for the format's default.
        subnormals: None for ``spec.subnormals``; False flushes tiny results after rounding.
        u: for ``mode="stochastic"`` only: a number in ``[0, 1)``; rounds away from zero iff
            ``u < frac`` (exact comparison).

    Returns:
        The rounded value: a Fraction or a Special.

    Raises:
        ValueError: bad options (see :func:`resolve_options`) or NaN for a format without NaN.

    >>> from reference.spec import FLOAT16
    >>> round_value(Fraction(1, 3), FLOAT16, "rtz")
    Fraction(1365, 4096)
    >>> round_value(Fraction(1, 3), FLOAT16, "stochastic", u=Fraction(1, 3))
    Fraction(1365, 4096)
    >>> round_value(Fraction(1, 3), FLOAT16, "stochastic", u=Fraction(1, 3) - Fraction(1, 10**9))
    Fraction(683, 2048)
    """
    opts = resolve_options(spec, mode, overflow=overflow, subnormals=subnormals, u=u)
    return round_with(as_value(v, arg="v"), spec, opts)


#: The name used by the shared design contract.
round_fraction = round_value


def round_float(
    x: float,
    spec: Spec,
    mode: str = "rne",
    *,
    overflow: str | None = None,
    subnormals: bool | None = None,
    u: object = None,
) -> float:
    """Round a Python float exactly once to ``spec`` and return the result as a float.

    The result is exact as a float whenever the format's values fit binary64 (all named specs).

    >>> from reference.spec import BFLOAT16
    >>> round_float(1 + 2**-8 + 2**-40, BFLOAT16, "rne")
    1.0078125
    """
    v = from_float(x)
    return to_float(round_value(v, spec, mode, overflow=overflow, subnormals=subnormals, u=u))
