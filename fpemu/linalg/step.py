"""The exact accumulation step ``s = round_acc(s + p)`` (``p`` an exact product) and its options.

Every step is the exact sum rounded once: TwoSum makes ``s + p`` exact, it is reduced to float64
round-to-odd and rounded once to the accumulator format (see :mod:`fpemu.arith`).

>>> import numpy as np
>>> from fpemu.formats import get_format
>>> r = _rounding(get_format("bf16"), arg="acc", mode="rne", subnormals=None, overflow=None,
...               rng=None)
>>> float(r.add(np.array(1.0), np.array(2.0**-8 + 2.0**-60)))  # just above a tie: rounds up
1.0078125
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.arith import MAX_RO_PRECISION, round_to_odd
from fpemu.backend import xp
from fpemu.formats import Format, Overflow, get_format
from fpemu.rounding import RoundMode, get_mode
from fpemu.rounding import round as fround

#: Largest input precision whose products are exact in float64 (2 * 26 <= 53).
MAX_EXACT_INPUT_PRECISION = 26
_F16 = get_format("float16")
_F32 = get_format("float32")
_F64 = get_format("float64")


def _fits_float32(f: Format) -> bool:
    return f.precision <= 24 and f.max <= _F32.max and f.emin - f.mbits >= -149


# -- the exact step: s = round_acc(s + p), p exact ------------------------------------------------
@dataclass(frozen=True)
class _Rounding:
    """One accumulator rounding: format and options, validated once per call."""

    fmt: Format
    mode: RoundMode
    subnormals: bool | None
    overflow: Overflow | None
    rng: np.random.Generator | None

    @property
    def ieee_rne(self) -> bool:
        """Round-to-nearest-even with IEEE gradual underflow and overflow to infinity."""
        return (
            self.mode is RoundMode.RNE
            and self.subnormals in (None, True)
            and self.overflow in (None, "inf")
            and self.fmt.has_inf
            and self.fmt.subnormals
        )

    @property
    def ieee32_rne(self) -> bool:
        """Whether this is exactly what float32 hardware addition does."""
        return self.ieee_rne and _same_format(self.fmt, _F32)

    @property
    def native_dtype(self) -> Any:
        """float16/float32 when NumPy's correctly rounded cast from float64 is this rounding."""
        if self.ieee_rne and _same_format(self.fmt, _F32):
            return np.float32
        if self.ieee_rne and _same_format(self.fmt, _F16):
            return np.float16
        return None

    def round(self, x: Any) -> Any:
        if self.fmt.precision > MAX_RO_PRECISION:
            return x  # float64 accumulator under rne: x is already RN53 (checked in _rounding)
        native = self.native_dtype
        if native is not None:  # same result as fround (tests check the casts), much faster
            with np.errstate(over="ignore"):
                return x.astype(native).astype(xp(x).float64)
        return fround(
            x,
            self.fmt,
            mode=self.mode,
            subnormals=self.subnormals,
            overflow=self.overflow,
            rng=self.rng,
        )

    def add(self, s: Any, p: Any) -> Any:
        """``round(s + p)`` for float64 ``s``, ``p`` whose exact sum TwoSum captures."""
        np_ = xp(s)
        with np.errstate(all="ignore"):
            hi = s + p
            bb = hi - s
            lo = (s - (hi - bb)) + (p - bb)
            if self.fmt.precision > MAX_RO_PRECISION:
                z = hi
            else:
                z = round_to_odd(hi, np_.where(np_.isfinite(hi), lo, 0.0))
        if self.mode is RoundMode.RDOWN:  # an exact zero sum is -0 unless both terms are +0
            both_pos0 = (s == 0) & (p == 0) & ~np_.signbit(s) & ~np_.signbit(p)
            z = np_.where((hi == 0) & ~both_pos0, -0.0, z)
        return self.round(z)


def _same_format(f: Format, g: Format) -> bool:
    return (f.ebits, f.mbits, f.bias, f.specials, f.subnormals) == (
        g.ebits,
        g.mbits,
        g.bias,
        g.specials,
        g.subnormals,
    )


def _rounding(
    fmt: Format,
    *,
    arg: str,
    mode: str | RoundMode,
    subnormals: bool | None,
    overflow: Overflow | None,
    rng: np.random.Generator | None,
) -> _Rounding:
    m = get_mode(mode)
    if fmt.precision > MAX_RO_PRECISION:
        r = _Rounding(fmt, m, subnormals, overflow, rng)
        ok = _same_format(fmt, _F64) and m is RoundMode.RNE and subnormals in (None, True)
        if not ok or overflow not in (None, "inf"):
            raise ValueError(
                f"{arg}={fmt.name}: a float64 accumulator supports only mode='rne' with default "
                f"subnormals/overflow (and formats of precision <= {MAX_RO_PRECISION} any mode)"
            )
        return r
    if (subnormals, overflow, rng) != (None, None, None) or m is RoundMode.STOCHASTIC:
        fround(np.zeros(0), fmt, mode=m, subnormals=subnormals, overflow=overflow, rng=rng)
    return _Rounding(fmt, m, subnormals, overflow, rng)


def _check_exact_inputs(fmt: Format, model: str) -> None:
    if fmt.precision > MAX_EXACT_INPUT_PRECISION or fmt.emin - fmt.mbits < -400:
        raise ValueError(
            f"model={model!r} needs products exact in float64: fmt={fmt.name} has precision "
            f"{fmt.precision} > {MAX_EXACT_INPUT_PRECISION}; use an input format up to float32"
        )


def _products_fit_float32(a: Any, b: Any, fmt: Format) -> bool:
    """Whether every product of an ``a`` and a ``b`` value is an exact float32 number."""
    if 2 * fmt.precision > 24:
        return False
    if 2 * (fmt.emin - fmt.mbits) >= -149 and fmt.max * fmt.max <= _F32.max:
        return True  # fp16, fp8: true for every pair of values of the format
    np_ = xp(a)
    with np.errstate(all="ignore"):
        amax, bmax = float(np_.abs(a).max(initial=0.0)), float(np_.abs(b).max(initial=0.0))
        amin = float(np_.where(a != 0, np_.abs(a), np_.inf).min(initial=np_.inf))
        bmin = float(np_.where(b != 0, np_.abs(b), np_.inf).min(initial=np_.inf))
        finite = bool(np_.isfinite(a).all()) and bool(np_.isfinite(b).all())
    return finite and amax * bmax <= _F32.max and amin * bmin >= _F32.tiny


# -- built-in models ---------------------------------------------------------------------------
def _step_options(
    acc: Format, options: dict[str, Any], model: str
) -> tuple[_Rounding, dict[str, Any]]:
    known = {"mode", "subnormals", "overflow", "rng"}
    opts = {k: options.pop(k) for k in list(options) if k in known}
    return _rounding(
        acc,
        arg="acc",
        mode=opts.get("mode", "rne"),
        subnormals=opts.get("subnormals"),
        overflow=opts.get("overflow"),
        rng=opts.get("rng"),
    ), options


def _reject_unknown(options: dict[str, Any], model: str) -> None:
    if options:
        names = ", ".join(sorted(options))
        raise TypeError(f"model={model!r} got unknown option(s) {names}")
