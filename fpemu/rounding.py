"""Correct rounding of float64/float32 arrays to any :class:`~fpemu.formats.Format`.

The value of each input is rounded once, directly (float32 input is widened exactly to
float64 first; float64 input is never narrowed through float32, the double rounding that
torch's CPU casts from float64 do, and ml_dtypes' casts did before its 0.7 release).

How it stays fast and exact, in pure NumPy:

* Round-to-nearest-even uses the float64 adder itself. For an input in binade ``e`` the
  format's quantum is ``q = 2**(max(e, emin) - mbits)``; adding ``K = 1.5 * 2**52 * q`` puts
  the sum in a binade whose float64 ulp is exactly ``q``, so the hardware's round-to-nearest-even
  addition rounds to the format's grid, and ``(x + K) - K`` is exact. ``K`` comes from a
  4096-entry table indexed by the top 12 bits of ``x``.
* Overflow to infinity: multiplying by ``2**(1023 - emax)`` sends exactly the values at or
  above ``2**(emax + 1)`` to ``inf`` in float64; multiplying back restores the rest exactly.
* Formats outside the table's reach (K must stay finite: ``emax - mbits <= 970``; and
  ``emin >= -1022``, so float64 subnormals are below the format's normal range) and every
  other mode: scale ``x`` by ``1/q`` (exact, a power of two; where that underflows to 0
  a stand-in keeps the sticky bit), round to an integer with the mode's rule, scale back.

Work proceeds in cache-sized blocks to keep temporaries in L2.

>>> round([0.1, 1 + 2**-11, 70000.0], "fp16")
array([0.09997559, 1.        ,        inf])
>>> round(70000.0, "fp16", mode="rtz")
np.float64(65504.0)
>>> round(464.0, "e4m3"), round(465.0, "e4m3"), round(465.0, "e4m3", overflow="saturate")
(np.float64(448.0), np.float64(nan), np.float64(448.0))
"""

from __future__ import annotations

import builtins
import functools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from fpemu import parallel
from fpemu.backend import scratch, xp
from fpemu.daskarray import is_dask, round_dask
from fpemu.formats import OVERFLOWS, Format, FormatLike, Overflow, get_format
from fpemu.inputs import as_array, as_float_array, result_dtype

BLOCK = 32768  # float64 elements per block (256 KiB): measured best (call overhead vs. cache)


class RoundMode(str, Enum):
    """Rounding modes. Strings (values or aliases) are accepted wherever a mode is."""

    #: Round to nearest, ties to even (IEEE 754 default).
    RNE = "rne"
    #: Round to nearest, ties away from zero.
    RNA = "rna"
    #: Round toward zero (truncate).
    RTZ = "rtz"
    #: Round toward +infinity.
    RUP = "rup"
    #: Round toward -infinity.
    RDOWN = "rdown"
    #: Round to odd: inexact results take the neighbour with an odd significand.
    RTO = "rto"
    #: Stochastic: away from zero with probability equal to the fractional distance.
    STOCHASTIC = "stochastic"


_MODE_ALIASES = {
    "nearest_even": "rne", "nearest": "rne", "rn": "rne", "even": "rne",
    "nearest_away": "rna", "away": "rna",
    "toward_zero": "rtz", "rz": "rtz", "trunc": "rtz", "truncate": "rtz",
    "up": "rup", "ru": "rup", "ceil": "rup", "toward_positive": "rup",
    "down": "rdown", "rd": "rdown", "floor": "rdown", "toward_negative": "rdown",
    "odd": "rto", "to_odd": "rto",
    "sr": "stochastic",
}  # fmt: skip


def get_mode(mode: str | RoundMode) -> RoundMode:
    """Resolve a rounding-mode name or alias to a :class:`RoundMode`.

    Raises:
        ValueError: unknown mode (the message lists the accepted names).

    >>> get_mode("nearest_even")
    <RoundMode.RNE: 'rne'>
    """
    if isinstance(mode, RoundMode):
        return mode
    if isinstance(mode, str):
        key = _MODE_ALIASES.get(mode.strip().lower(), mode.strip().lower())
        if key in RoundMode._value2member_map_:
            return RoundMode(key)
    names = [m.value for m in RoundMode] + list(_MODE_ALIASES)
    raise ValueError(f"unknown rounding mode={mode!r}; accepted: {', '.join(names)}")


def round(  # noqa: A001 - the natural name; numpy has np.round too
    x: Any,
    fmt: FormatLike,
    *,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """Round every element of ``x`` to the nearest value of ``fmt`` under ``mode``.

    Args:
        x: values: any input :mod:`fpemu.inputs` accepts (float16/32/64 arrays in either byte
            order, ml_dtypes arrays, integers, bools, Python numbers and lists, CPU torch
            tensors, CuPy arrays; a Dask array gives a lazy Dask array with its chunks, see
            :mod:`fpemu.daskarray`). The result has the shape of ``x`` and the dtype of
            :func:`fpemu.inputs.result_dtype`: float64 for float64, integer, bool and Python
            input; float32 for float32 input; float16 data give float16 where ``fmt`` fits it
            and ml_dtypes data float32, both widened as far as ``fmt`` needs. A scalar gives a
            NumPy scalar.
        fmt: format name, alias or :class:`~fpemu.formats.Format`.
        mode: a :class:`RoundMode` or its name: ``"rne"`` (default), ``"rna"``, ``"rtz"``,
            ``"rup"``, ``"rdown"``, ``"rto"``, ``"stochastic"``.
        subnormals: keep subnormal results (default: the format's own flag). ``False`` flushes:
            the value is rounded as if subnormals existed, then a nonzero result below the
            smallest normal becomes a zero of the same sign (GPU ``.ftz`` behaviour).
        overflow: what a too-large result becomes: ``"inf"``, ``"nan"`` or ``"saturate"``
            (default: the format's convention, see :attr:`Format.default_overflow`). Following
            IEEE 754, a mode that rounds toward zero for the sign at hand (rtz, rto, rup for
            negatives, rdown for positives, and a stochastic draw that rounded toward zero)
            gives the largest finite value instead. Saturation
            also maps infinite inputs to the largest finite value.
        rng: a :class:`numpy.random.Generator`, required by (and only by) ``"stochastic"``. One
            uniform double ``u`` is drawn per element in C order; the magnitude rounds up iff
            ``u < f``, ``f`` being the exact fractional distance to the lower neighbour, so it
            rounds up with probability ``ceil(f * 2**53) / 2**53``: unbiased to within 2**-53.

    Returns:
        Rounded values, exactly representable in ``fmt``. NaN stays NaN; the sign of zero is
        kept, except in formats without -0 (fnuz), where zero results are +0.

    Raises:
        TypeError: ``x`` does not hold real numbers (complex, strings, objects).
        ValueError: unknown format or mode; an overflow choice the format cannot encode; NaN
            input to a format without NaN; a format wider than float32 for float32 input; an
            integer in ``x`` that is not exactly a float64; ``rng``
            missing for stochastic rounding or given for another mode.
    """
    if type(x) is not np.ndarray and is_dask(x):  # lazily, chunk by chunk (fpemu.daskarray)
        return round_dask(round, x, fmt, mode=mode, subnormals=subnormals, overflow=overflow,
                          rng=rng)  # fmt: skip
    f = get_format(fmt)
    if not (f.signed and f.zero):  # E8M0/UE4M3: their rounding is a scale rule (fpemu.quant)
        raise ValueError(f"fmt={f.name!r} is a scale format; compute scales with fpemu.quant")
    m = get_mode(mode)
    ovf = _check_overflow(f, overflow)
    sub = f.subnormals if subnormals is None else subnormals
    if not isinstance(sub, bool):
        raise TypeError(f"subnormals must be a bool or None, got {subnormals!r}")
    _check_rng(m, rng)
    arr, want = _as_float_array(x, f)
    np_ = xp(arr)
    if not f.has_nan and bool(np_.isnan(arr).any()):
        raise ValueError(f"x contains NaN, which format {f.name} cannot represent")
    out = np_.empty_like(arr)
    src, dst = arr.reshape(-1), out.reshape(-1)

    plan = _fast_plan(f, m, sub, ovf, arr.dtype, np_)
    native = plan is not None and arr.dtype == np_.float32  # a float32 plan: no widening
    if plan is None and arr.dtype == np_.float32:  # no float32 plan: work in float64
        plan = _fast_plan(f, m, sub, ovf, np_.dtype(np_.float64), np_)
    step = 2 * BLOCK if native else BLOCK  # blocks of the same size in bytes

    def work(lo: int, hi: int) -> None:
        with np.errstate(over="ignore", invalid="ignore"):  # errstate is per thread
            for i in builtins.range(lo, hi, step):
                j = min(i + step, hi)
                blk = src[i:j] if native else src[i:j].astype(np_.float64, copy=False)
                into = dst[i:j] if blk.dtype == dst.dtype else None  # write in place when we can
                if plan is not None:
                    res = plan(blk, into)
                else:
                    res = _round_block(blk, f, m, sub, ovf, rng)
                if res is not into:
                    dst[i:j] = res

    # Threads (fpemu.parallel) take block-aligned ranges: each element is rounded alone, so the
    # split changes no bit. Stochastic rounding stays on one thread: its draws are in C order.
    if rng is None and np_ is np:
        parts = parallel.tiles(src.size, cost=_COST, align=BLOCK)
    else:
        parts = [slice(0, src.size)]
    if len(parts) == 1:
        work(0, src.size)
    else:
        parallel.map_tiles(lambda t: work(t.start, t.stop), parts)
    if out.dtype != want:
        out = out.astype(want)  # float16 data: exact, every value of f is a float16
    return out[()] if out.ndim == 0 else out


#: Work units per element for :func:`fpemu.parallel.tiles` (measured: below about a million
#: elements one thread is faster).
_COST = 2.0


def _round_block(
    x: Any,
    f: Format,
    m: RoundMode,
    sub: bool,
    ovf: Overflow,
    rng: np.random.Generator | None,
) -> Any:
    """The general path (any mode): scale to an integer, round it, scale back."""
    t = _round_general(x, f, m, rng)
    t = _overflow_general(t, x, f, m, ovf)
    return _finish(t, f, sub)


def _finish(t: Any, f: Format, sub: bool) -> Any:
    if not sub:
        t = _flush(t, f)
    if not f.has_negative_zero:
        t += 0.0  # fnuz: -0 does not exist, so zero results are +0
    return t


@dataclass(frozen=True)
class _FastPlan:
    """Round-to-nearest-even of one dtype to one format, every constant resolved up front.

    Built once per :func:`round` call so that the per-block loop runs NumPy operations only.
    """

    f: Format
    sub: bool
    ovf: Overflow
    np_: Any
    bits32: bool  # float32 input, float32-exponent format: integer bias trick
    uint: Any
    exp_mask: Any  # K's bits come from x's exponent field: see _fast_plan
    k_lo: Any
    k_hi: Any
    k_off: Any
    sign: Any
    scale_up: Any  # power-of-two overflow trick, or None
    scale_down: Any
    nan_scale: Any  # mask-free overflow-to-NaN factor, or None

    def __call__(self, x: Any, into: Any) -> Any:
        np_ = self.np_
        if self.bits32:
            t = _rne_bits32(x, self.f)
        else:
            xb = x.view(self.uint)
            kb = scratch(x.size, self.uint).reshape(x.shape) if np_ is np else None
            kb = np_.bitwise_and(xb, self.exp_mask, out=kb)
            np_.clip(kb, self.k_lo, self.k_hi, out=kb)
            kb += self.k_off
            k = kb.view(x.dtype)
            t = np_.add(x, k, out=into)
            t -= k  # exact: t is now x rounded (ties to even) to the format's quantum
            if self.f.has_negative_zero:  # (x + K) - K turns -tiny into +0: restore x's sign
                tb = t.view(self.uint)
                np_.bitwise_or(tb, np_.bitwise_and(xb, self.sign, out=kb), out=tb)  # K is spent
        if self.ovf == "saturate":
            np_.clip(t, -self.f.max, self.f.max, out=t)
        elif self.scale_up is not None:
            # |t| > max  <=>  |t| >= 2**(emax+1)  <=>  |t * 2**(top-emax)| overflows to inf
            t *= self.scale_up
            t *= self.scale_down
        elif self.nan_scale is not None:
            # |t| > max  <=>  t * nan_scale overflows; (t * nan_scale) * 0 is then NaN, else a
            # zero of t's sign, so adding it changes nothing else (signed zeros included)
            r = t * self.nan_scale
            r *= 0.0
            t += r
        elif not (self.bits32 and self.ovf == "inf"):  # bits32 overflows into inf by itself
            big = np_.abs(t) > self.f.max
            special = np_.nan if self.ovf == "nan" else np_.copysign(np_.inf, t)
            np_.copyto(t, special, where=big)
        return _finish(t, self.f, self.sub)


@functools.lru_cache(maxsize=256)
def _fast_plan(f: Format, m: RoundMode, sub: bool, ovf: Overflow, dtype: Any, np_: Any) -> Any:
    """The fast round-to-nearest-even plan for this call, or None if it does not apply."""
    wide = dtype == np_.float64
    if m is not RoundMode.RNE or not (_rne64_ok(f) if wide else _rne32_ok(f)):
        return None
    uint, frac, top = (np_.uint64, 52, 1023) if wide else (np_.uint32, 23, 127)
    bits32 = not wide and _float32_exponent(f)
    # K = 1.5 * 2**(frac + max(e, emin) - mbits), built on x's own exponent field: clip the
    # field to [emin, hi], add (frac - mbits) to it and set the 0.5 fraction bit. hi keeps K
    # finite (K's biased exponent <= 2*top - 1), so K is right only for e <= hi - top: the
    # format's top binade must lie below that (_rne64_ok, _rne32_ok); above emax any finite K
    # will do (t stays above max). lo >= 1 needs emin >= 1 - top: a float64 (float32)
    # subnormal x then lies below the format's normal range, where the quantum is constant.
    lo, hi = f.emin + top, 2 * top - 1 - frac + f.mbits
    pow2 = ovf == "inf" and f.specials != "fn" and f.emax >= 0 and not bits32
    ftype = np_.float64 if wide else np_.float32
    return _FastPlan(
        f=f, sub=sub, ovf=ovf, np_=np_, bits32=bits32, uint=uint,
        exp_mask=uint(((1 << (63 - frac if wide else 31 - frac)) - 1) << frac),
        k_lo=uint(lo << frac), k_hi=uint(hi << frac),
        k_off=uint(((frac - f.mbits) << frac) | (1 << (frac - 1))),
        sign=uint(1 << (63 if wide else 31)),
        scale_up=ftype(2.0 ** (top - f.emax)) if pow2 else None,
        scale_down=ftype(2.0 ** (f.emax - top)) if pow2 else None,
        nan_scale=_nan_scale(f, np.dtype(ftype)) if ovf == "nan" else None,
    )  # fmt: skip


def _rne64_ok(f: Format) -> bool:
    """Whether the K trick rounds float64 input to ``f`` (see :func:`_fast_plan`).

    K's ulp must be the quantum: K = 1.5 * 2**(52 + e - mbits) must be a finite float64 for
    every binade e <= emax (K's exponent <= 1022), and emin >= -1022 keeps the clip range's
    lower end a normal exponent field. Other formats (emax near 1023 with few fraction bits,
    emin below float64's normal range) take the general path.
    """
    return f.mbits <= 50 and f.emin >= -1022 and f.emax - f.mbits <= 970


def _rne32_ok(f: Format) -> bool:
    """Whether float32 input can be rounded to ``f`` without widening to float64."""
    return _float32_exponent(f) or (  # as _rne64_ok, for float32's exponent range
        f.mbits <= 21 and f.emin >= -126 and f.emax - f.mbits <= 103
    )


def _float32_exponent(f: Format) -> bool:
    """Formats that are float32 with a shorter fraction (bfloat16, tf32)."""
    return f.ebits == 8 and f.bias == 127 and f.specials == "ieee" and f.mbits <= 22


def _rne_bits32(x: Any, f: Format) -> Any:
    """Round float32 to a float32-exponent format by integer arithmetic on the bit pattern."""
    np_ = xp(x)
    s = np_.uint32(23 - f.mbits)
    b = x.view(np_.uint32)
    r = b + np_.uint32((1 << (23 - f.mbits - 1)) - 1) + ((b >> s) & np_.uint32(1))
    r &= np_.uint32(~((1 << (23 - f.mbits)) - 1) & 0xFFFFFFFF)  # carries overflow into inf
    t = r.view(np_.float32)
    np_.copyto(t, np_.float32(np_.nan), where=np_.isnan(x))  # a payload must not round into inf
    return t


def rne_bfloat16(x: np.ndarray) -> np.ndarray:
    """``round(x, "bfloat16")`` for a float32 NumPy array ``x``: a new float32 array.

    The hot path of emulated bfloat16 training (every op result, every bfloat16 gradient). The
    same integer rule as the float32 fast plan, without :func:`round`'s per-call dispatch and
    in place in one scratch array: add ``0x7FFF`` plus the lowest kept bit (ties to even), clear
    the 16 dropped bits (a carry runs into the exponent, up to infinity: overflow to inf, and
    subnormals are kept, bfloat16's own rules). NaN inputs (found by a NaN-propagating ``min``
    first, so NaN-free arrays pay one reduction) become the quiet NaN ``round`` returns.
    tests/test_validate_fastpaths.py checks it bit for bit against :func:`round` over every bfloat16
    code with every class of dropped bits, and by Hypothesis.

    >>> rne_bfloat16(np.float32([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38])).tolist()
    [1.0, 1.015625, inf]
    """
    b = x.view(np.uint32)
    r = np.empty_like(b)
    np.right_shift(b, np.uint32(16), out=r)
    r &= np.uint32(1)
    r += np.uint32(0x7FFF)
    r += b
    r &= np.uint32(0xFFFF0000)
    t = r.view(np.float32)
    if t.size and np.isnan(x.min()):  # a NaN payload must not round into inf or a number
        np.copyto(t, np.float32(np.nan), where=np.isnan(x))
    return t


@functools.lru_cache(maxsize=64)
def _nan_scale(f: Format, dtype: np.dtype[Any]) -> Any:
    """A factor that overflows exactly the values above ``f.max`` (None if unrepresentable).

    The threshold sits halfway between max and the next grid point above it: a relative margin
    of about 2**-(mbits+2) that must exceed the factor's and the product's own roundings (half
    an ulp each, 2**-(frac+1)): so mbits <= frac - 2 (50 for float64, 21 for float32; at
    mbits = 22 a float32 factor rounds up by 2**-24 and max * s overflows).
    """
    top_ulp = math.ldexp(1.0, f.emax - f.mbits)
    width, frac = (1024, 52) if dtype == np.float64 else (128, 23)
    if f.mbits > frac - 2:
        return None
    try:
        with np.errstate(over="ignore"):
            s = dtype.type(math.ldexp(1.0 / (f.max + top_ulp / 2), width))
    except OverflowError:  # a format whose max is tiny: the masked path handles it
        return None
    return s if np.isfinite(s) else None


def _round_general(x: Any, f: Format, m: RoundMode, rng: np.random.Generator | None) -> Any:
    np_ = xp(x)
    if f.emin < -1022:  # float64 subnormals can lie in the format's normal range: exact exponent
        e = np_.frexp(x)[1].astype(np_.int64) - 1  # 0, inf, NaN: -1 or anything, harmless
    else:  # the exponent field: every float64 subnormal lies below emin
        e = ((x.view(np_.uint64) >> np_.uint64(52)) & np_.uint64(0x7FF)).astype(np_.int64) - 1023
    qe = np_.maximum(e, f.emin) - f.mbits  # the unbounded grid above
    y = np_.ldexp(x, -qe)  # exact: scaling by a power of two; |y| < 2**(mbits+1) in range
    if f.emin - f.mbits > 0:
        # scaling down can underflow: x below 2**(qe - 1075) gives y = 0 and loses the sticky
        # bit that directed modes, rto and stochastic need. Any y in (0, 2**-53) rounds alike
        # in every mode (u < y only for u = 0), so 2**-1074 stands in for the lost value.
        y = np_.where((y == 0) & (x != 0), np_.copysign(5e-324, x), y)
    r = _round_integer(y, m, rng)
    return np_.copysign(np_.ldexp(r, qe), x)


def _round_integer(y: Any, m: RoundMode, rng: np.random.Generator | None) -> Any:
    np_ = xp(y)
    if m is RoundMode.RNE:
        return np_.rint(y)
    if m is RoundMode.RUP:
        return np_.ceil(y)
    if m is RoundMode.RDOWN:
        return np_.floor(y)
    r = np_.trunc(y)
    if m is RoundMode.RTZ:
        return r
    frac = np_.abs(y - r)  # exact: y and trunc(y) share the binade's ulp
    if m is RoundMode.RNA:
        away = frac >= 0.5
    elif m is RoundMode.RTO:
        away = (frac != 0) & (np_.fmod(r, 2) == 0)
    else:
        assert rng is not None
        u = np_.asarray(rng.random(y.shape))  # drawn on the host: the same on every namespace
        away = u < frac
    return r + np_.where(away, np_.sign(y), 0.0)


def _overflow_general(t: Any, x: Any, f: Format, m: RoundMode, ovf: Overflow) -> Any:
    np_ = xp(t)
    if ovf == "saturate":
        return np_.clip(t, -f.max, f.max, out=t)
    special = np_.inf if ovf == "inf" else np_.nan
    big = (np_.abs(t) > f.max) & np_.isfinite(x)
    if m in (RoundMode.RNE, RoundMode.RNA):
        away = big
    elif m is RoundMode.STOCHASTIC:
        away = big & (np_.abs(t) > np_.abs(x))  # drew "away"; a draw toward zero saturates
    elif m is RoundMode.RUP:
        away = big & (t > 0)
    elif m is RoundMode.RDOWN:
        away = big & (t < 0)
    else:
        away = np_.zeros_like(big)
    np_.copyto(t, np_.copysign(f.max, t), where=big & ~away)
    np_.copyto(t, np_.copysign(special, t), where=away | np_.isinf(x))
    return t


def _flush(t: Any, f: Format) -> Any:
    np_ = xp(t)
    tiny = np_.abs(t) < f.tiny
    np_.copyto(t, t * 0.0, where=tiny)  # t * 0 keeps the sign of zero
    return t


def _check_overflow(f: Format, overflow: str | None) -> Overflow:
    if overflow is None:
        return f.default_overflow
    if overflow not in OVERFLOWS:
        raise ValueError(f"overflow={overflow!r} is not one of {OVERFLOWS}")
    if overflow == "inf" and not f.has_inf:
        raise ValueError(
            f"overflow='inf' but format {f.name} has no infinity; use 'nan' or 'saturate'"
        )
    if overflow == "nan" and not f.has_nan:
        raise ValueError(f"overflow='nan' but format {f.name} has no NaN; use 'saturate'")
    return overflow  # type: ignore[return-value]


def _check_rng(m: RoundMode, rng: object) -> None:
    if m is RoundMode.STOCHASTIC:
        if not isinstance(rng, np.random.Generator):
            raise ValueError(
                f"mode='stochastic' needs rng=numpy.random.default_rng(seed), got rng={rng!r}"
            )
    elif rng is not None:
        raise ValueError(f"rng is only used by mode='stochastic', not mode={m.value!r}")


_F32 = get_format("float32")


_DT64, _DT32 = np.dtype(np.float64), np.dtype(np.float32)


def _as_float_array(x: Any, f: Format) -> tuple[Any, np.dtype[Any]]:
    """``x`` as the C-contiguous float64 or float32 array to round, and the result's dtype.

    Inputs are converted by :mod:`fpemu.inputs`; the result dtype is its ``result_dtype``
    (float64 and float32 data keep their dtype, a float16 result is computed in float32).
    """
    dt = x.dtype if type(x) is np.ndarray else None
    if dt is _DT64 or (dt is _DT32 and _fits_float32(f)):  # the hot path: no conversion
        arr, want = x, dt
    else:
        src = as_array(x, arg="x")
        want = src.dtype if src.dtype in (_DT64, _DT32) else result_dtype(f, src)
        arr = as_float_array(src, arg="x", keep32=want != _DT64)
        if arr.dtype == _DT32 and not _fits_float32(f):  # float32 data: same dtype out
            raise ValueError(
                f"format {f.name} has values that float32 cannot hold; pass x as float64"
            )
    return (arr if arr.flags.c_contiguous else arr.copy(order="C")), want


def _fits_float32(f: Format) -> bool:
    # every value of f (and so every result: overflow gives inf, NaN or max) must be a float32;
    # a wider format is refused even when it holds every float32 (float32 itself is inside)
    return f.mbits <= 23 and f.emin - f.mbits >= -149 and f.max <= _F32.max
