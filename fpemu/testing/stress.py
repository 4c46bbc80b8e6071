"""Strategies that stress one thing: ties between neighbours, cancellation, underflowing products.

Re-exported by :mod:`fpemu.testing.strategies` (import them from there).

>>> from hypothesis import given
>>> from fpemu.testing.strategies import ties
>>> import fpemu
>>> @given(ties("fp16", nudge=False, allow_overflow=False))
... def test_a_tie_rounds_to_even(x):
...     assert fpemu.encode(fpemu.round(x, "fp16"), "fp16") % 2 == 0
>>> test_a_tie_rounds_to_even()
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from fpemu.formats import Format, FormatLike
from fpemu.testing._draw import (
    _check_int,
    _default_flag,
    _floor_index,
    _kinds,
    _magnitude,
    _max_index,
    _resolve,
    _reverse_bits,
    _structured,
    _ulp_at,
)


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
