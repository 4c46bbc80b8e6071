"""Hypothesis strategies for property-testing code that works in low-precision formats.

Every strategy here generates Python floats (or arrays of float64/float32) that are *exactly*
representable in a given :class:`~fpemu.formats.Format`, or inputs built from such values to
stress one thing: ties between neighbours, cancellation, underflow. Arguments are checked
when the strategy is built, not when it is drawn, and bad ones raise
:class:`hypothesis.errors.InvalidArgument` (a :class:`TypeError`) naming the argument, the
value and what is accepted.

Values are drawn as sign, exponent and significand rather than as raw bit patterns, so
failing examples shrink towards simple numbers: ``1.0``, then values with small exponents
and few significant bits (``1.5`` before ``1.125``), then zero, then subnormals.

This module imports Hypothesis; import it explicitly (``import fpemu.strategies``).

>>> import fpemu
>>> from hypothesis import given
>>> from fpemu import strategies as fst
>>> @given(fst.values("e4m3", allow_nan=False), fst.rounding_modes())
... def test_rounding_a_value_changes_nothing(x, mode):
...     assert fpemu.round(x, "e4m3", mode=mode) == x
>>> test_rounding_a_value_changes_nothing()
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from fractions import Fraction
from functools import lru_cache
from typing import Any, Union

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.extra import numpy as nps

from fpemu.formats import FORMATS, SPECIALS, Format, FormatLike, get_format
from fpemu.rounding import RoundMode

__all__ = [
    "arrays",
    "formats",
    "near_cancellation_pairs",
    "rounding_modes",
    "ties",
    "underflowing_products",
    "values",
]

#: Rounding modes that need no random generator, in the order they shrink to.
_DETERMINISTIC_MODES = tuple(m.value for m in RoundMode if m is not RoundMode.STOCHASTIC)


# ----- argument checking ----------------------------------------------------------------------
def _resolve(fmt: object, arg: str = "fmt") -> Format:
    try:
        return get_format(fmt, arg=arg)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise InvalidArgument(str(err)) from err


def _check_flag(name: str, value: object) -> None:
    if value is not None and not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be None, True or False; got {name}={value!r}")


def _check_bound(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise InvalidArgument(f"{name} must be None or a real number; got {name}={value!r}")
    bound = float(value)
    if math.isnan(bound):
        raise InvalidArgument(f"{name} must not be NaN; got {name}={value!r}")
    return bound


def _default_flag(name: str, value: bool | None, supported: bool, why: str) -> bool:
    _check_flag(name, value)
    if value and not supported:
        raise InvalidArgument(f"{name}=True, but {why}")
    return supported if value is None else value


# ----- the grid of a format: magnitudes by ordered index --------------------------------------
# A finite magnitude's index is its bit pattern with the sign cleared, except that formats
# without subnormals skip the codes 1 .. 2**mbits - 1, so indices stay consecutive.


def _gap(fmt: Format) -> int:
    return 0 if fmt.subnormals else (1 << fmt.mbits) - 1


def _max_index(fmt: Format) -> int:
    top_code = ((fmt.emax + fmt.bias) << fmt.mbits) | (fmt.max_significand - (1 << fmt.mbits))
    return top_code - _gap(fmt)


def _magnitude(fmt: Format, index: int) -> float:
    code = index + _gap(fmt) if index > 0 else 0
    biased, frac = code >> fmt.mbits, code & ((1 << fmt.mbits) - 1)
    if biased == 0:
        return math.ldexp(frac, fmt.emin - fmt.mbits)
    return math.ldexp((1 << fmt.mbits) | frac, biased - fmt.bias - fmt.mbits)


def _ceil_index(fmt: Format, x: float) -> int:
    """Smallest index whose magnitude is >= x (x >= 0); one past the end if none."""
    lo, hi = 0, _max_index(fmt) + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _magnitude(fmt, mid) >= x:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _floor_index(fmt: Format, x: float) -> int:
    """Largest index whose magnitude is <= x (x >= 0)."""
    up = _ceil_index(fmt, x)
    return up if up <= _max_index(fmt) and _magnitude(fmt, up) == x else up - 1


def _signed_index_bounds(fmt: Format, lo: float, hi: float) -> tuple[int, int]:
    """Signed indices (negative for negative values) of the finite values in [lo, hi]."""
    s_lo = -_floor_index(fmt, -lo) if lo <= 0 else _ceil_index(fmt, lo)
    s_hi = _floor_index(fmt, hi) if hi >= 0 else -_ceil_index(fmt, -hi)
    return s_lo, s_hi


# ----- structured draws (shrink to simple values) ---------------------------------------------
# Every draw has the same shape (kind, exponent rank, fraction, round, sign, zero sign) whatever it
# turns out to be, so Hypothesis' shortlex shrinking orders examples by kind first (normal <
# zero < subnormal), then by exponent rank and fraction. Exponents are ranked by simplicity
# (0, 1, -1, 2, -2, ...), then the extremes again and the special values, so the largest
# values, infinity and NaN come up often and still shrink to small exponents: a separate kind
# for them would strand the shrinker there (nothing left to lower but the kind).

_Parts = tuple[int, int, int, int, bool, bool]
_Rank = Union[int, str]


def _reverse_bits(k: int, width: int) -> int:
    # Small k -> high fraction bits: 1.5 is "simpler" than 1 + 2**-mbits.
    return int(format(k, f"0{width}b")[::-1], 2) if width else 0


def _kinds(*, zero: bool, subnormal: bool) -> tuple[str, ...]:
    # Repeats weight the draw: mostly normal numbers, some subnormals. Normal comes first
    # because Hypothesis draws the first choice far more often than its share.
    return ("normal",) + ("zero",) * zero + ("normal",) * 5 + ("subnormal",) * 2 * subnormal


@lru_cache(maxsize=256)
def _exponent_order(emin: int, emax: int, specials: tuple[str, ...] = ()) -> tuple[_Rank, ...]:
    order = sorted(range(emin, emax + 1), key=lambda e: (abs(e), e < 0))
    ends = (emax, emin) * max(2, len(order) // 8)  # about a fifth of draws at the extremes
    return (*order, *ends, *specials)


def _build(fmt: Format, kinds: tuple[str, ...], order: tuple[_Rank, ...], p: _Parts) -> float:
    kind_i, rank, k, round_, negative, zero_negative = p
    kind, e = kinds[kind_i], order[rank]
    k = 0 if round_ >= 5 else k  # often: a power of two, the max, the smallest subnormal
    if kind == "zero":
        return -0.0 if zero_negative else 0.0
    if kind == "subnormal":  # k = 0 is the smallest subnormal
        mag = math.ldexp(min(k + 1, (1 << fmt.mbits) - 1), fmt.emin - fmt.mbits)
    elif e == "max":
        mag = fmt.max
    elif isinstance(e, str):
        return _special(e)
    elif e == fmt.emax:  # count down from the largest value; "fn" formats lose all-ones (NaN)
        mag = math.ldexp(max(fmt.max_significand - k, 1 << fmt.mbits), e - fmt.mbits)
    else:
        mag = math.ldexp((1 << fmt.mbits) | _reverse_bits(k, fmt.mbits), e - fmt.mbits)
    return -mag if negative else mag


def _structured(
    fmt: Format,
    kinds: tuple[str, ...],
    *,
    signs: tuple[bool, ...],
    zero_signs: tuple[bool, ...] = (False,),
    specials: tuple[str, ...] = (),
) -> st.SearchStrategy[float]:
    order = _exponent_order(fmt.emin, fmt.emax, specials)
    parts = st.tuples(
        st.integers(0, len(kinds) - 1),
        st.integers(0, len(order) - 1),
        st.integers(0, (1 << fmt.mbits) - 1),
        st.integers(0, 7),
        st.sampled_from(signs),
        st.sampled_from(zero_signs or (False,)),
    )
    return parts.map(lambda p: _build(fmt, kinds, order, p))


# ----- public strategies ----------------------------------------------------------------------
def values(
    fmt: FormatLike,
    *,
    allow_nan: bool | None = None,
    allow_infinity: bool | None = None,
    allow_subnormal: bool | None = None,
    allow_negative_zero: bool | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
) -> st.SearchStrategy[float]:
    """Returns a strategy which generates floats exactly representable in ``fmt``.

    Every value drawn is a Python float equal to some encoding of the format (a float64 holds
    every value of every format fpemu knows), so ``fpemu.round(x, fmt)`` must give ``x`` back.

    - ``fmt``: a format name, alias or :class:`~fpemu.formats.Format`.
    - ``allow_nan``: whether NaN may be drawn. Defaults to True when the format has NaN and no
      bound is given; True for a format without NaN, or together with a bound, is an error.
    - ``allow_infinity``: whether ``+-inf`` may be drawn. Defaults to True when the format has
      infinities; with bounds, only the unbounded side's infinity is drawn.
    - ``allow_subnormal``: whether subnormal numbers may be drawn. Defaults to the format's
      own ``subnormals`` flag; True for a format without subnormals is an error.
    - ``allow_negative_zero``: whether ``-0.0`` may be drawn. Defaults to True for formats
      with a negative zero (not fnuz ones).
    - ``min_value`` / ``max_value``: inclusive bounds. As in :func:`hypothesis.strategies.floats`,
      ``min_value=0.0`` excludes ``-0.0`` and ``max_value=-0.0`` excludes ``+0.0``.

    Without bounds (or with bounds that only fix the sign) failing examples shrink towards
    ``1.0``, small exponents and few significant bits, then ``0.0``, then subnormals. The
    largest values, the smallest normal, the smallest subnormal, infinities and NaN are drawn
    on purpose (a few percent each), and shrink to ordinary values when those fail too. With
    other bounds, values are drawn uniformly by position in the format's ordered set of values
    and shrink towards the one of least magnitude.

    Raises:
        InvalidArgument: an argument is malformed or asks for something the format lacks.

    >>> from hypothesis import find
    >>> find(values("bf16"), lambda x: x > 1.0)
    1.5
    >>> find(values("fp16", min_value=0.1, max_value=0.2), lambda x: True)
    0.10003662109375
    """
    f = _resolve(fmt)
    lo, hi = _check_bound("min_value", min_value), _check_bound("max_value", max_value)
    bounded = lo is not None or hi is not None
    nan = _default_flag(
        "allow_nan",
        allow_nan,
        f.has_nan and not bounded,
        f"{f.name} has no NaN" if not f.has_nan else "NaN is not within bounds",
    )
    sub = _default_flag(
        "allow_subnormal", allow_subnormal, f.subnormals, f"{f.name} has no subnormal numbers"
    )
    negzero = _default_flag(
        "allow_negative_zero",
        allow_negative_zero,
        f.has_negative_zero,
        f"{f.name} has no negative zero",
    )
    lo = -math.inf if lo is None else lo
    hi = math.inf if hi is None else hi
    if lo > hi:
        raise InvalidArgument(f"min_value={min_value!r} is greater than max_value={max_value!r}")
    inf_sides = {s for s, open_ in (("+", hi == math.inf), ("-", lo == -math.inf)) if open_}
    _check_flag("allow_infinity", allow_infinity)
    if allow_infinity and not f.has_inf:
        raise InvalidArgument(f"allow_infinity=True, but {f.name} has no infinities")
    if allow_infinity and not inf_sides:
        raise InvalidArgument(f"allow_infinity=True, but [{lo}, {hi}] holds no infinity")
    infinity = f.has_inf if allow_infinity is None else allow_infinity
    extra = tuple(sorted(inf_sides)) if infinity else ()
    extra = tuple(f"{side}inf" for side in extra) + (("nan",) if nan else ())
    strategy = _finite_values(f, lo, hi, subnormal=sub, negative_zero=negzero, extra=extra)
    if strategy is None:
        raise InvalidArgument(f"no value of {f.name} lies in [{min_value!r}, {max_value!r}]")
    return strategy


def _zero_signs(lo: float, hi: float, negative_zero: bool) -> tuple[bool, ...]:
    """The signs (True = negative) a zero drawn from [lo, hi] may take."""
    if not lo <= 0 <= hi:
        return ()
    signs: tuple[bool, ...] = () if hi == 0 and math.copysign(1.0, hi) < 0 else (False,)
    if negative_zero and not (lo == 0 and math.copysign(1.0, lo) > 0):
        signs += (True,)
    return signs


def _finite_values(
    f: Format, lo: float, hi: float, *, subnormal: bool, negative_zero: bool, extra: tuple[str, ...]
) -> st.SearchStrategy[float] | None:
    """Values of ``f`` in [lo, hi] plus the ``extra`` specials; None if there are none."""
    zero_signs = _zero_signs(lo, hi, negative_zero)
    grid = f if subnormal or not f.subnormals else dataclasses.replace(f, subnormals=False)
    neg, pos = lo <= -f.max, hi >= f.max
    if (neg or lo == 0) and (pos or hi == 0) and (neg or pos):
        # Only the sign is restricted: keep the structured draw that shrinks well.
        kinds = _kinds(zero=bool(zero_signs), subnormal=subnormal and f.mbits > 0)
        signs = (False, True) if neg and pos else (neg,)
        # Specials twice: a few percent each, about as often as Hypothesis draws them.
        return _structured(grid, kinds, signs=signs, zero_signs=zero_signs, specials=extra * 2)
    s_lo, s_hi = _signed_index_bounds(grid, lo, hi)
    s_lo += not zero_signs and s_lo == 0
    s_hi -= not zero_signs and s_hi == 0
    if s_lo > s_hi:
        return st.sampled_from(extra).map(_special) if extra else None
    # Indices past s_hi stand for the specials, so they shrink to finite values.
    parts = st.tuples(st.integers(s_lo, s_hi + len(extra)), st.sampled_from(zero_signs or (False,)))
    return parts.map(lambda p: _indexed(grid, p[0], p[1], s_hi, extra))


def _special(name: str) -> float:
    return {"+inf": math.inf, "-inf": -math.inf, "nan": math.nan}[name]


def _indexed(fmt: Format, s: int, zero_negative: bool, s_hi: int, extra: tuple[str, ...]) -> float:
    if s > s_hi:
        return _special(extra[s - s_hi - 1])
    mag = _magnitude(fmt, abs(s))
    if mag == 0:
        return -0.0 if zero_negative else 0.0
    return -mag if s < 0 else mag


def _check_int(name: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise InvalidArgument(f"{name} must be an integer >= {lo}; got {name}={value!r}")
    return int(value)


def _ulp_at(fmt: Format, mag: float) -> float:
    """Gap above a non-negative magnitude on the format's grid (subnormal spacing below tiny)."""
    e = math.frexp(mag)[1] - 1 if mag else fmt.emin
    return math.ldexp(1.0, max(e, fmt.emin) - fmt.mbits)


def ties(
    fmt: FormatLike,
    *,
    nudge: bool = True,
    allow_negative: bool = True,
    allow_subnormal: bool = True,
    allow_overflow: bool = True,
) -> st.SearchStrategy[float]:
    """Returns a strategy which generates float64 values halfway between neighbours of ``fmt``.

    Each value is the exact midpoint ``a + ulp(a)/2`` of a finite value ``a`` and the next one
    up (mirrored for negative values), the inputs on which round-to-nearest-even and
    round-to-nearest-away disagree and which round-to-odd must not leave. The grid includes
    subnormal spacing even for formats that flush, because fpemu rounds those "as if
    subnormals existed" before flushing.

    - ``nudge``: also generate the float64 neighbours just below and just above each midpoint
      (a third each), which must round down and up respectively in every nearest mode.
    - ``allow_negative``: whether negative midpoints may be drawn.
    - ``allow_subnormal``: whether midpoints below the smallest normal (between subnormals, and
      ``smallest_subnormal / 2``) may be drawn.
    - ``allow_overflow``: whether the midpoint between the largest finite value and the next
      value an unbounded exponent would give (``max + ulp(max)/2``) may be drawn: the point
      at which round-to-nearest overflows.

    Failing examples shrink towards the exact midpoint above ``0.0`` or ``1.0``.

    Raises:
        InvalidArgument: the midpoints of ``fmt`` are not float64 values (float64 itself), or an
            option is not a bool.

    >>> import fpemu
    >>> from hypothesis import given
    >>> @given(ties("bf16", nudge=False))
    ... def test_nearest_modes_split_on_ties(t):
    ...     assert fpemu.round(t, "bf16", mode="rna") != fpemu.round(t, "bf16", mode="rtz")
    >>> test_nearest_modes_split_on_ties()
    """
    f = _resolve(fmt)
    for name, flag in (
        ("nudge", nudge),
        ("allow_negative", allow_negative),
        ("allow_subnormal", allow_subnormal),
        ("allow_overflow", allow_overflow),
    ):
        if not isinstance(flag, bool):
            raise InvalidArgument(f"{name} must be True or False; got {name}={flag!r}")
    if f.precision + 1 > 53 or f.emin - f.mbits - 2 < -1074 or f.emax >= 1023:
        raise InvalidArgument(
            f"the midpoints of {f.name} are not all float64 values; "
            "ties() needs a format narrower than float64"
        )
    grid = f if f.subnormals else dataclasses.replace(f, subnormals=True)
    kinds = _kinds(zero=allow_subnormal, subnormal=allow_subnormal and f.mbits > 0)
    # The overflow tie (above max) is the one most often got wrong: draw it often.
    tops = ("max",) * max(3, (f.emax - f.emin) // 3) if allow_overflow else ()
    lower = _structured(grid, kinds, signs=(False,), specials=tops)
    if not allow_overflow:
        lower = lower.filter(lambda a: a < f.max)
    offsets = st.sampled_from((0, -1, 1) if nudge else (0,))
    signs = st.sampled_from((False, True) if allow_negative else (False,))
    return st.tuples(lower, offsets, signs).map(lambda t: _tie(grid, *t))


def _tie(fmt: Format, lower: float, offset: int, negative: bool) -> float:
    mid = lower + _ulp_at(fmt, lower) / 2  # exact: needs one more bit than the format has
    if offset:
        mid = math.nextafter(mid, math.inf if offset > 0 else 0.0)
    return -mid if negative else mid


def near_cancellation_pairs(
    fmt: FormatLike, *, max_ulps: int = 4, allow_subnormal: bool | None = None
) -> st.SearchStrategy[tuple[float, float]]:
    """Returns a strategy which generates pairs ``(a, b)`` of close values of ``fmt``.

    ``a`` is a finite non-zero value and ``b`` lies at most ``max_ulps`` steps of the format
    away from it, with the same sign (possibly across a binade boundary), so ``a - b`` (or
    ``a + (-b)``) cancels all but a few of the leading bits. When ``b/2 <= a <= 2b`` (always,
    unless the format has fewer than ``max_ulps`` values per binade) the difference is a value
    of the format by Sterbenz' lemma, so a correct subtraction returns it exactly; a kernel
    that drops the guard bit or mishandles the renormalisation shift does not.

    - ``max_ulps``: the largest distance between ``a`` and ``b`` in steps; 0 gives ``a == b``.
    - ``allow_subnormal``: whether ``a`` and ``b`` may be subnormal; defaults to the format's
      own flag.

    Failing examples shrink towards ``a = 1.0`` and ``b`` the value just below ``a``.

    Raises:
        InvalidArgument: ``max_ulps`` is not a non-negative integer, or ``allow_subnormal=True``
            for a format without subnormals.

    >>> from hypothesis import given
    >>> @given(near_cancellation_pairs("fp16"))
    ... def test_difference_is_small(pair):
    ...     a, b = pair
    ...     assert abs(a - b) <= 4 * max(abs(a), 2**-14) * 2**-10  # 4 ulps, subnormals too
    >>> test_difference_is_small()
    """
    f = _resolve(fmt)
    steps = _check_int("max_ulps", max_ulps, 0)
    sub = _default_flag(
        "allow_subnormal", allow_subnormal, f.subnormals, f"{f.name} has no subnormal numbers"
    )
    grid = f if sub or not f.subnormals else dataclasses.replace(f, subnormals=False)
    mags = _structured(grid, _kinds(zero=False, subnormal=sub and f.mbits > 0), signs=(False,))
    last = _max_index(grid)

    def pair(t: tuple[float, int, bool]) -> tuple[float, float]:
        a, step, negative = t
        i = _floor_index(grid, a)
        b = _magnitude(grid, min(max(i + step, 1), last))
        return (-a, -b) if negative else (a, b)

    # Shrinks to b = the value just below a; a == b (exact zero) comes last.
    offsets = [d for i in range(1, steps + 1) for d in (-i, i)] + [0]
    return st.tuples(mags, st.sampled_from(offsets), st.booleans()).map(pair)


def underflowing_products(
    fmt: FormatLike, *, allow_negative: bool = True
) -> st.SearchStrategy[tuple[float, float]]:
    """Returns a strategy which generates pairs of ``fmt`` values whose product underflows.

    Both factors are finite, non-zero values of the format (normal or subnormal) and the exact
    product ``a * b`` is non-zero but smaller in magnitude than the smallest normal number: it
    lands among the subnormals, on the rounding boundary ``smallest_subnormal / 2``, or below
    it, where it must round to zero (or, rounding away from zero, to the smallest subnormal).
    For formats of at most 26 bits of precision the float64 product ``a * b`` is exact.

    - ``allow_negative``: whether the factors may be negative.

    Raises:
        InvalidArgument: no two values of the format have such a product, or
            ``allow_negative`` is not a bool.

    >>> from hypothesis import given
    >>> @given(underflowing_products("e4m3"))
    ... def test_product_is_below_the_smallest_normal(pair):
    ...     a, b = pair
    ...     assert 0 < abs(a * b) < 2.0**-6
    >>> test_product_is_below_the_smallest_normal()
    """
    f = _resolve(fmt)
    if not isinstance(allow_negative, bool):
        raise InvalidArgument(f"allow_negative must be True or False; got {allow_negative=!r}")
    e_lo = f.emin - f.mbits if f.subnormals else f.emin  # leading-bit exponents of the factors
    targets = range(max(f.emin - f.mbits - 2, 2 * e_lo), min(f.emin - 1, 2 * f.emax) + 1)
    if not targets:
        raise InvalidArgument(f"no product of two {f.name} values lies below {f.tiny}")
    signs = st.booleans() if allow_negative else st.just(False)
    bits = st.integers(0, (1 << f.mbits) - 1)
    parts = st.tuples(st.sampled_from(targets), st.integers(0, 2**31), bits, bits, signs, signs)
    tiny = Fraction(f.tiny)
    return parts.map(lambda p: _product_pair(f, e_lo, *p)).filter(
        lambda ab: 0 < abs(Fraction(ab[0]) * Fraction(ab[1])) < tiny
    )


def _product_pair(
    f: Format, e_lo: int, t: int, pick: int, ka: int, kb: int, neg_a: bool, neg_b: bool
) -> tuple[float, float]:
    # Leading-bit exponents ea + eb = t put the product in [2**t, 2**(t + 2)).
    ea_lo, ea_hi = max(e_lo, t - f.emax), min(f.emax, t - e_lo)
    ea = ea_hi - pick % (ea_hi - ea_lo + 1)
    a, b = _with_exponent(f, ea, ka), _with_exponent(f, t - ea, kb)
    return (-a if neg_a else a, -b if neg_b else b)


def _with_exponent(f: Format, e: int, k: int) -> float:
    """A value of ``f`` whose leading bit has weight ``2**e``; ``k`` picks its lower bits.

    The bits are reversed, so small ``k`` give short significands: their products land on the
    rounding boundaries of the subnormal grid far more often than random bits would.
    """
    if e >= f.emin:
        frac = _reverse_bits(k % (1 << f.mbits), f.mbits)
        if e == f.emax:
            frac = min(frac, f.max_significand - (1 << f.mbits))
        return math.ldexp((1 << f.mbits) | frac, e - f.mbits)
    width = e - (f.emin - f.mbits)  # bits below the leading one in this subnormal
    return math.ldexp((1 << width) | _reverse_bits(k % (1 << width), width), e - width)


def arrays(
    fmt: FormatLike,
    shape: int | tuple[int, ...] | st.SearchStrategy[tuple[int, ...]],
    *,
    dtype: Any = np.float64,
    unique: bool = False,
    **kwargs: Any,
) -> st.SearchStrategy[np.ndarray]:
    """Returns a strategy which generates NumPy arrays whose elements are values of ``fmt``.

    - ``shape``: an int, a tuple of ints, or a strategy for shapes such as
      :func:`hypothesis.extra.numpy.array_shapes`.
    - ``dtype``: ``float64`` (default) or ``float32``; float32 is accepted only when every value
      of ``fmt`` is a float32 value.
    - ``unique``: whether the elements must be distinct (NaN excluded then).
    - Other keyword arguments (``allow_nan``, ``min_value``, ...) are passed to :func:`values`.

    Raises:
        InvalidArgument: ``dtype`` cannot hold the format's values, or an argument of
            :func:`values` or :func:`hypothesis.extra.numpy.arrays` is invalid.

    >>> from hypothesis import given
    >>> @given(arrays("e5m2", (2, 3), allow_nan=False, allow_infinity=False))
    ... def test_shape(a):
    ...     assert a.shape == (2, 3) and a.dtype == np.float64
    >>> test_shape()
    """
    f = _resolve(fmt)
    _check_shape(shape)
    kind = np.dtype(dtype) if isinstance(dtype, (str, type, np.dtype)) else None
    if kind not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise InvalidArgument(f"dtype must be float64 or float32; got {dtype=!r}")
    if kind == np.float32 and not _fits_float32(f):
        raise InvalidArgument(f"dtype=float32 cannot hold every value of {f.name}; use float64")
    if unique and kwargs.get("allow_nan"):
        raise InvalidArgument("unique=True cannot be combined with allow_nan=True")
    if unique:
        kwargs["allow_nan"] = False
    strategy = nps.arrays(kind, shape, elements=values(f, **kwargs), unique=unique)
    strategy.validate()
    return strategy


def _check_shape(shape: object) -> None:
    if isinstance(shape, st.SearchStrategy):
        return
    dims = (shape,) if isinstance(shape, (int, np.integer)) else shape
    ok = isinstance(dims, tuple) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    )
    if not ok:
        raise InvalidArgument(
            f"shape must be a non-negative int, a tuple of them or a strategy; got {shape=!r}"
        )


def _fits_float32(f: Format) -> bool:
    return f.precision <= 24 and f.emax <= 127 and f.emin - (f.mbits if f.subnormals else 0) >= -149


def formats(
    *,
    names: Iterable[FormatLike] | None = None,
    max_bits: int | None = None,
    specials: Iterable[str] | None = None,
) -> st.SearchStrategy[Format]:
    """Returns a strategy which generates :class:`~fpemu.formats.Format` objects.

    - ``names``: the formats to choose from (names, aliases or Formats); defaults to every
      format in :data:`fpemu.formats.FORMATS`, in registry order.
    - ``max_bits``: keep only formats at most this wide (8 for the float8/6/4 formats).
    - ``specials``: keep only formats with one of these special-value conventions
      (``"ieee"``, ``"fn"``, ``"fnuz"``, ``"finite"``).

    Shrinks towards the first format listed (``float64`` by default).

    Raises:
        InvalidArgument: a name is unknown, an option is malformed, or no format is left.

    >>> from hypothesis import given
    >>> @given(formats(max_bits=8))
    ... def test_small(fmt):
    ...     assert fmt.bits <= 8
    >>> test_small()
    """
    if isinstance(names, (str, Format)):
        names = [names]
    pool = [_resolve(n, "names") for n in names] if names is not None else list(FORMATS.values())
    if max_bits is not None:
        pool = [f for f in pool if f.bits <= _check_int("max_bits", max_bits, 1)]
    if specials is not None:
        wanted = (specials,) if isinstance(specials, str) else tuple(specials)
        bad = [s for s in wanted if s not in SPECIALS]
        if bad:
            raise InvalidArgument(f"specials={bad!r} are not among {SPECIALS}")
        pool = [f for f in pool if f.specials in wanted]
    if not pool:
        raise InvalidArgument(f"no format satisfies {names=!r}, {max_bits=!r}, {specials=!r}")
    return st.sampled_from(pool)


def rounding_modes(*, stochastic: bool = False) -> st.SearchStrategy[str]:
    """Returns a strategy which generates rounding-mode names accepted by ``fpemu.round``.

    - ``stochastic``: also generate ``"stochastic"``, which needs an ``rng`` argument.

    Shrinks towards ``"rne"`` (round to nearest, ties to even).

    Raises:
        InvalidArgument: ``stochastic`` is not a bool.

    >>> from hypothesis import given
    >>> @given(rounding_modes())
    ... def test_deterministic(mode):
    ...     assert mode != "stochastic"
    >>> test_deterministic()
    """
    if not isinstance(stochastic, bool):
        raise InvalidArgument(f"stochastic must be True or False; got {stochastic=!r}")
    stochastic_modes = (RoundMode.STOCHASTIC.value,) if stochastic else ()
    return st.sampled_from(_DETERMINISTIC_MODES + stochastic_modes)
