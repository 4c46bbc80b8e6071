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

This module imports Hypothesis; import it explicitly (``import fpemu.testing.strategies``).

>>> import fpemu
>>> from hypothesis import given
>>> from fpemu.testing import strategies as fst
>>> @given(fst.values("e4m3", allow_nan=False), fst.rounding_modes())
... def test_rounding_a_value_changes_nothing(x, mode):
...     assert fpemu.round(x, "e4m3", mode=mode) == x
>>> test_rounding_a_value_changes_nothing()
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

try:
    from hypothesis import strategies as st
except ImportError as err:  # the strategies are an extra: say which
    raise ImportError(
        "fpemu.testing.strategies needs Hypothesis: pip install 'fpemu[strategies]'"
    ) from err
from hypothesis.errors import InvalidArgument
from hypothesis.extra import numpy as nps

from fpemu.formats import FORMATS, SPECIALS, Format, FormatLike
from fpemu.rounding import RoundMode
from fpemu.testing._draw import (
    _DETERMINISTIC_MODES,
    _check_bound,
    _check_flag,
    _check_int,
    _default_flag,
    _finite_values,
    _resolve,
)
from fpemu.testing.stress import near_cancellation_pairs, ties, underflowing_products

__all__ = [
    "arrays",
    "formats",
    "near_cancellation_pairs",
    "rounding_modes",
    "ties",
    "underflowing_products",
    "values",
]


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
