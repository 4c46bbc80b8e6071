"""Building blocks of the strategies: argument checks, values drawn as sign/exponent/significand.

See :mod:`fpemu.testing.strategies` for the public strategies.

>>> from fpemu.formats import get_format
>>> _magnitude(get_format("e4m3"), 8)   # index 8 of e4m3 is its smallest normal
0.015625
"""

from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import Union

import numpy as np
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from fpemu.formats import Format, get_format
from fpemu.rounding import RoundMode

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
