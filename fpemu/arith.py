"""Correctly rounded elementwise arithmetic in any format: every result is rounded ONCE.

``add``, ``sub``, ``mul``, ``div``, ``sqrt`` and ``fma`` return the exact mathematical result of
the operation on the given values, rounded once to ``fmt`` with the options of
:func:`fpemu.round` (``mode``, ``subnormals``, ``overflow``, ``rng``). ``cast`` rounds values
given in one format to another.

Operands are taken as given: any float64 value, not rounded to ``fmt`` first (round them with
:func:`fpemu.round` if they should be). Subnormal operands are used as they are, also when
``subnormals=False`` (that option flushes results only). Infinite operands are accepted for
every format (the oracle refuses them for formats without infinity); an infinite result then
follows the format's overflow rule (NaN for fn/fnuz formats, +-max for finite ones), as ``x / 0``
does. A NaN result in a format without NaN is a ValueError (from :func:`fpemu.round`).

How one rounding is achieved (``z`` is the exact result, ``p`` the precision of ``fmt``):

1. The exact ``z`` is reduced to ``RO53(z)``: ``z`` rounded to float64 with *round-to-odd*
   (an inexact result takes the float64 neighbour whose last significand bit is 1).
   For ``p <= 51`` rounding ``RO53(z)`` to ``p`` bits in any mode gives the same result as
   rounding ``z`` itself (Boldo & Melquiond 2008): the two extra bits keep the midpoint and the
   sticky information, and ``RO53(z)`` is never itself a ``p``-bit number or midpoint unless
   ``z`` is. Overflow and flushing depend only on the rounded value, so they agree too.
   :func:`fpemu.round` then performs the single rounding to ``fmt``.
2. ``RO53(z)`` needs ``hi = RN53(z)`` and the sign of the error ``z - hi``:

   ==========  ==================================================================================
   op          exact error of the float64 result (fast path, see below)
   ==========  ==================================================================================
   add, sub    Knuth's TwoSum: ``hi + lo == x + y`` exactly (no overflow is possible).
   mul         the float64 product of two float32-representable values is exact (48 bits,
               exponent >= -298): ``lo = 0``.
   fma         ``x * y`` is exact (as for mul), then TwoSum(``x * y``, ``z``).
   div         ``q = RN53(x / y)``; ``r = x - q * y`` is exact via Dekker's TwoProduct
               (Veltkamp split, no underflow in this range) and Sterbenz; ``z - q`` has the
               sign of ``r / y``.
   sqrt        ``q = RN53(sqrt(x))``; ``r = x - q * q`` exactly (TwoProduct); sign of ``r``.
   ==========  ==================================================================================

   The fast path needs every finite operand to be float32-representable (so every format up to
   float32 and tf32). This holds for all values of fp32, tf32, fp16, bf16, fp8, fp6, fp4, so
   it covers every float32/tf32 operand and float32 output as well (24 <= 51). Elements with any
   other finite operand take an exact scalar path: Python ``Fraction``/integer arithmetic
   computes ``RO53(z)`` directly (slow, but exact for any float64 operand).
   Below 2**-1022 RO53's quantum stays 2**-1074, two bits finer than the format's only when
   ``emin - mbits >= -1072``. For formats reaching further down (to 2**-1073 or 2**-1074), a
   tiny exact result of the scalar path is rounded to the format directly, in the mode (the
   fast path never produces one: float32 operands give results above 2**-300).
3. ``fmt = float64`` (``p = 53``): only ``mode="rne"`` with default options is supported;
   the result is ``RN53(z)`` (``hi``; exact scalar path via correctly rounded ``int / int``).

Why not simply "compute in float64, then round to fmt"? Per case (operands in the named format):

=========================  ================================================================
case                       naive float64 evaluation
=========================  ================================================================
``*`` any format <= fp32   exact product (<= 48 bits): correct in every mode
``/ sqrt`` <= fp32         correct: an inexact quotient/root is >= ~2**-2p relatively away
                           from every p-bit number and midpoint, far more than 2**-53
``+ -`` <= fp32            correct under round-to-nearest, WRONG under directed modes: a
                           tiny term is lost by the float64 rounding (fp32, rup:
                           ``1 + 2**-100`` must give ``1 + 2**-23``)
fma bf16, tf32, fp32       WRONG even for rne: ``x*y`` a midpoint of fmt, ``z`` tiny
                           (bf16: ``3 * 87 + 2**-100`` is 262, naively 260)
fma fp16 (fp16 operands)   exact sum whenever the result is in range (span <= 41 bits), but
                           not for other operands or directed modes
float64 operands           any op can double-round
=========================  ================================================================

so the route above (exact error term, round-to-odd, one final rounding) is used for every
op and format; tests/test_arith.py holds a case for each WRONG entry and checks that the naive
evaluation indeed fails on it.

Zero signs follow IEEE 754: an exact zero sum of operands of opposite sign (or of ``+0 + -0``) is
``+0``, except under ``mode="rdown"`` where it is ``-0``; ``x + x`` keeps the sign of ``x``.
Stochastic rounding sees ``RO53(z)``, so its probabilities are exact to within ``2**(p - 53)``
(not so for results below 2**-1022 in formats with ``emin - mbits < -1072``).

>>> add(1.0, 2.0**-11, fmt="fp16")
np.float64(1.0)
>>> fma(1.0 + 2.0**-10, 1.0 - 2.0**-10, 2.0**-24, fmt="fp16", mode="rup")
np.float64(1.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.backend import to_numpy, xp
from fpemu.formats import Format, FormatLike, Overflow, get_format
from fpemu.inputs import as_float_array
from fpemu.inputs import result_dtype as _result_dtype
from fpemu.rounding import RoundMode, get_mode
from fpemu.rounding import round as fround

F64 = NDArray[np.float64]

#: Largest precision for which the round-to-odd float64 intermediate is innocuous.
MAX_RO_PRECISION = 51
_VELTKAMP = 134217729.0  # 2**27 + 1: splits a float64 into two 26-bit halves
_F64_MAX = float(np.finfo(np.float64).max)
#: RO53's quantum is 2**-1074 below 2**-1022: formats with a finer quantum than 2**-1072 there
#: (emin - mbits < -1072) have their tiny results rounded exactly (:func:`_round_tiny`).
_RO_SAFE_QUANTUM = -1072
_TINY_RO = Fraction(1, 2**1021)


# -- public operations --------------------------------------------------------------------------
def add(
    x: Any,
    y: Any,
    *,
    fmt: FormatLike,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """``x + y`` rounded once to ``fmt``.

    Args:
        x: first operand (array-like of real numbers, any float64 values).
        y: second operand, broadcast against ``x``.
        fmt: result format (name, alias or :class:`~fpemu.formats.Format`).
        mode: rounding mode (see :func:`fpemu.round`).
        subnormals: keep subnormal results (default: the format's flag); False flushes results.
        overflow: ``"inf"``, ``"nan"`` or ``"saturate"`` (default: the format's convention).
        rng: numpy Generator for ``mode="stochastic"``.

    Returns:
        The rounded results with numpy broadcasting; see :func:`result_dtype` for the dtype.

    >>> add(1.0, 2.0**-11 + 2.0**-30, fmt="fp16")
    np.float64(1.0009765625)
    """
    return _compute(_sum_parts, {"x": x, "y": y}, fmt, mode, subnormals, overflow, rng)


def sub(
    x: Any,
    y: Any,
    *,
    fmt: FormatLike,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """``x - y`` rounded once to ``fmt``; arguments as for :func:`add`.

    >>> sub(1.0, 1.0, fmt="bf16", mode="rdown")
    np.float64(-0.0)
    """
    return _compute(_diff_parts, {"x": x, "y": y}, fmt, mode, subnormals, overflow, rng)


def mul(
    x: Any,
    y: Any,
    *,
    fmt: FormatLike,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """``x * y`` rounded once to ``fmt``; arguments as for :func:`add`.

    >>> mul(3.0, 7.0, fmt="e4m3")
    np.float64(20.0)
    """
    return _compute(_prod_parts, {"x": x, "y": y}, fmt, mode, subnormals, overflow, rng)


def div(
    x: Any,
    y: Any,
    *,
    fmt: FormatLike,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """``x / y`` rounded once to ``fmt``; arguments as for :func:`add`.

    >>> div(1.0, 3.0, fmt="fp16"), div(1.0, 3.0, fmt="fp16", mode="rup")
    (np.float64(0.333251953125), np.float64(0.33349609375))
    """
    return _compute(_quot_parts, {"x": x, "y": y}, fmt, mode, subnormals, overflow, rng)


def sqrt(
    x: Any,
    *,
    fmt: FormatLike,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """Square root of ``x`` rounded once to ``fmt`` (NaN for ``x < 0``; ``sqrt(-0) = -0``).

    >>> sqrt(2.0, fmt="bf16")
    np.float64(1.4140625)
    """
    return _compute(_sqrt_parts, {"x": x}, fmt, mode, subnormals, overflow, rng)


def fma(
    x: Any,
    y: Any,
    z: Any,
    *,
    fmt: FormatLike,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """Fused multiply-add ``x * y + z`` with a single rounding to ``fmt``.

    >>> fma(1.0 + 2.0**-10, 1.0 - 2.0**-10, -1.0, fmt="fp16")
    np.float64(-9.5367431640625e-07)
    """
    return _compute(_fma_parts, {"x": x, "y": y, "z": z}, fmt, mode, subnormals, overflow, rng)


def cast(
    x: Any,
    fmt: FormatLike,
    *,
    from_fmt: FormatLike | None = None,
    mode: str | RoundMode = "rne",
    subnormals: bool | None = None,
    overflow: Overflow | None = None,
    rng: np.random.Generator | None = None,
) -> Any:
    """Convert values to ``fmt`` (one rounding); a cast between formats is a rounding.

    Args:
        x: values (array-like).
        fmt: target format.
        from_fmt: if given, ``x`` must hold values of this format (ValueError otherwise): use it
            to assert that the data really is, say, bfloat16 before narrowing it.
        mode, subnormals, overflow, rng: as for :func:`fpemu.round`.

    >>> cast([1.0 + 2.0**-7, 300.0], "e4m3", from_fmt="bf16").tolist()
    [1.0, 288.0]
    """
    f, m = _resolve(fmt, mode)
    (a,), _ = _operands(("x", x))
    if from_fmt is not None:
        src = get_format(from_fmt, arg="from_fmt")
        np_ = xp(a)
        nan = np_.isnan(a)
        if bool(nan.any()) and not src.has_nan:
            raise ValueError(f"x contains NaN, which from_fmt={src.name} cannot represent")
        ovf: Overflow | None = "saturate" if not src.has_inf else None
        same = (fround(np_.where(nan, 0.0, a), src, overflow=ovf) == a) | nan
        if not bool(same.all()):
            bad = float(a[~same].reshape(-1)[0])
            raise ValueError(f"x contains {bad!r}, which is not a value of from_fmt={src.name}")
    z = fround(a, f, mode=m, subnormals=subnormals, overflow=overflow, rng=rng)
    return _as_result(z, f, (x,))


def result_dtype(fmt: FormatLike, *inputs: Any) -> np.dtype[Any]:
    """The dtype of an arithmetic result: the inputs' float dtype, widened until ``fmt`` fits.

    float16/float32/float64 inputs keep their dtype when every value of ``fmt`` fits in it;
    other floats (ml_dtypes) count as float32; integers, bools and Python numbers as float64.
    The rule lives in :func:`fpemu.inputs.result_dtype` (:func:`fpemu.round` follows it too).

    >>> result_dtype("bf16", np.float16(1)), result_dtype("fp16", np.float16(1))
    (dtype('float32'), dtype('float16'))
    """
    return _result_dtype(fmt, *inputs)


# -- exact parts: (hi, direction) with hi = RN53(z) and sign(direction) = sign(z - hi) ---------
Parts = tuple[Any, Any]


def _two_sum(a: Any, b: Any) -> Parts:
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _split(a: Any) -> Parts:
    c = _VELTKAMP * a
    hi = c - (c - a)
    return hi, a - hi


def _two_prod(a: Any, b: Any) -> Parts:
    p = a * b
    ah, al = _split(a)
    bh, bl = _split(b)
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _sum_parts(a: Any, b: Any) -> Parts:
    return _two_sum(a, b)


def _diff_parts(a: Any, b: Any) -> Parts:
    return _two_sum(a, -b)


def _prod_parts(a: Any, b: Any) -> Parts:
    p = a * b  # exact on the fast path
    return p, p * 0.0


def _quot_parts(a: Any, b: Any) -> Parts:
    q = a / b
    ph, pl = _two_prod(q, b)
    r = (a - ph) - pl  # exact: a - ph by Sterbenz, and the remainder is representable
    return q, xp(r).sign(r) * xp(b).sign(b)


def _sqrt_parts(a: Any) -> Parts:
    np_ = xp(a)
    q = np_.sqrt(a)
    ph, pl = _two_prod(q, q)
    return q, np_.sign((a - ph) - pl)


def _fma_parts(a: Any, b: Any, c: Any) -> Parts:
    return _two_sum(a * b, c)  # a * b exact on the fast path


# -- the pipeline ---------------------------------------------------------------------------
def _resolve(fmt: FormatLike, mode: str | RoundMode) -> tuple[Format, RoundMode]:
    f = get_format(fmt)
    m = get_mode(mode)
    return f, m


def _operands(*named: tuple[str, Any]) -> tuple[list[Any], Any]:
    arrays = [as_float_array(v, arg=name) for name, v in named]  # exact float64 (fpemu.inputs)
    # Python and NumPy scalars follow the array operands' namespace, as in CuPy's operators
    scalar = [isinstance(v, (int, float, np.generic)) for _, v in named]
    np_ = xp(*[a for a, s in zip(arrays, scalar, strict=True) if not s])
    if np_ is not np:
        arrays = [np_.asarray(a) if s else a for a, s in zip(arrays, scalar, strict=True)]
    return list(np_.broadcast_arrays(*arrays)), np_


def _compute(
    parts: Callable[..., Parts],
    named: dict[str, Any],
    fmt: FormatLike,
    mode: str | RoundMode,
    subnormals: bool | None,
    overflow: Overflow | None,
    rng: np.random.Generator | None,
) -> Any:
    f, m = _resolve(fmt, mode)
    rn = f.precision > MAX_RO_PRECISION
    if rn:
        _check_float64(f, m, subnormals, overflow, rng)
    ops, np_ = _operands(*named.items())
    shape = ops[0].shape
    fine = not rn and f.emin - f.mbits < _RO_SAFE_QUANTUM and m is not RoundMode.STOCHASTIC
    z = _exact_ro(parts, tuple(a.reshape(-1) for a in ops), m, np_, rn, f if fine else None)
    z = z.reshape(shape)
    if not rn:
        z = fround(z, f, mode=m, subnormals=subnormals, overflow=overflow, rng=rng)
    return _as_result(z, f, named.values())


def _exact_ro(
    parts: Callable[..., Parts],
    ops: tuple[Any, ...],
    m: RoundMode,
    np_: Any,
    rn: bool,
    fine: Format | None = None,
) -> Any:
    """Per element: ``RO53`` of the exact result, or ``RN53`` of it when ``rn`` (float64 output).

    ``fine``: a format whose quantum below 2**-1072 is finer than RO53's 2**-1074 allows (see
    :func:`_round_tiny`); its tiny results are rounded to it here, in mode ``m``.
    """
    with np.errstate(all="ignore"):
        hi, d = parts(*ops)
        finite = np_.ones(hi.shape, dtype=bool)
        fast = np_.ones(hi.shape, dtype=bool)
        for a in ops:
            fa = np_.isfinite(a)
            finite &= fa
            fast &= ~fa | (a.astype(np_.float32).astype(np_.float64) == a)
        res = hi if rn else round_to_odd(hi, np_.where(finite, d, 0.0))
    res = np_.where(finite, res, hi)
    if parts is _fma_parts:  # finite x * y + (+-inf) is +-inf, even where x * y overflows float64
        a, b, c = ops
        res = np_.where(np_.isfinite(a) & np_.isfinite(b) & np_.isinf(c), c, res)
    zero = finite & (hi == 0)  # fast path: hi is RN53 of the exact value, so 0 iff exact 0
    slow = finite & ~fast
    if bool(slow.any()):
        res, zero = res.copy(), zero.copy()
        mask = to_numpy(slow)
        cols = [to_numpy(a)[mask] for a in ops]
        got = [
            _slow_one(parts, [float(c[i]) for c in cols], rn, fine, m) for i in range(cols[0].size)
        ]
        res[slow] = np_.asarray(np.array([g[0] for g in got], dtype=np.float64))
        zero[slow] = np_.asarray(np.array([g[1] for g in got], dtype=bool))
    return _fix_zero_sign(res, zero, parts, ops, m, np_)


def round_to_odd(hi: Any, lo: Any) -> Any:
    """``RO53(hi + lo)`` given ``hi = RN53(hi + lo)`` and ``lo`` (or any value of its sign).

    Round-to-odd is truncation with the last bit set when inexact. On the bit pattern ``u`` of
    a finite nonzero ``hi`` (sign-magnitude, so ``u - 1`` is the neighbour toward zero, also
    across a binade): truncating ``hi + lo`` gives ``u - 1`` when ``lo`` points toward zero,
    else ``u``; then ``| 1`` when ``lo != 0``. Non-finite ``hi`` is returned unchanged.

    >>> round_to_odd(np.float64(1.0), np.float64(2.0**-60)) == 1.0 + 2.0**-52
    np.True_
    >>> round_to_odd(np.float64(1.0), np.float64(-(2.0**-60))) == 1.0 - 2.0**-53
    np.True_
    """
    np_ = xp(hi)
    hi = np_.asarray(hi, dtype=np_.float64)
    inexact = (lo != 0) & np_.isfinite(hi)
    toward_zero = inexact & (np_.signbit(lo) != np_.signbit(hi))
    u = hi.view(np_.uint64)
    u = (u - toward_zero.astype(np_.uint64)) | inexact.astype(np_.uint64)
    return u.view(np_.float64)


def _fix_zero_sign(
    res: Any, zero: Any, parts: Callable[..., Parts], ops: tuple[Any, ...], m: RoundMode, np_: Any
) -> Any:
    """IEEE sign of an exact zero sum: +0 unless both terms are zeros of one sign; rdown: -0."""
    if parts not in (_sum_parts, _diff_parts, _fma_parts):
        return res
    if parts is _fma_parts:
        t1_neg = np_.signbit(ops[0]) ^ np_.signbit(ops[1])
        t1_zero = (ops[0] == 0) | (ops[1] == 0)
        t2 = ops[2]
    else:
        t1_neg, t1_zero = np_.signbit(ops[0]), ops[0] == 0
        t2 = ops[1] if parts is _sum_parts else -ops[1]
    t2_neg = np_.signbit(t2)
    same = t1_zero & (t2 == 0) & (t1_neg == t2_neg)
    neg = np_.where(same, t2_neg, m is RoundMode.RDOWN)
    return np_.where(zero, np_.where(neg, -0.0, 0.0), res)


def _as_result(z: Any, f: Format, inputs: Iterable[Any]) -> Any:
    res = xp(z).asarray(z).astype(result_dtype(f, *inputs))
    return res[()] if res.ndim == 0 else res


def _check_float64(
    f: Format, m: RoundMode, subnormals: bool | None, overflow: Overflow | None, rng: object
) -> None:
    if (f.ebits, f.mbits, f.bias, f.specials, f.subnormals) != (11, 52, 1023, "ieee", True):
        raise ValueError(
            f"fmt={f.name} has precision {f.precision}; exact arithmetic supports precision <= "
            f"{MAX_RO_PRECISION} or IEEE float64 itself"
        )
    if m is not RoundMode.RNE or subnormals is False or overflow not in (None, "inf") or rng:
        raise ValueError(
            f"fmt={f.name} supports only mode='rne' with default subnormals/overflow, got "
            f"mode={m.value!r}, subnormals={subnormals!r}, overflow={overflow!r}"
        )


# -- exact scalar path (any finite float64 operands) ----------------------------------------
def _slow_one(
    parts: Callable[..., Parts],
    v: list[float],
    rn: bool,
    fine: Format | None = None,
    m: RoundMode = RoundMode.RNE,
) -> tuple[float, bool]:
    """(RO53 or RN53 of the exact result, whether it is exactly zero) for finite operands.

    With ``fine`` (see :func:`_exact_ro`), a tiny result comes back already rounded to it.
    """
    fr = [Fraction(a) for a in v]
    if parts is _sqrt_parts:
        if v[0] <= 0:
            return (v[0] if v[0] == 0 else math.nan), False
        return _ro_sqrt(fr[0], rn), False
    if parts is _quot_parts and v[1] == 0:
        sign = math.copysign(1.0, v[0]) * math.copysign(1.0, v[1])
        return (math.nan if v[0] == 0 else sign * math.inf), False
    if parts is _sum_parts:
        z = fr[0] + fr[1]
    elif parts is _diff_parts:
        z = fr[0] - fr[1]
    elif parts is _prod_parts:
        z = fr[0] * fr[1]
    elif parts is _quot_parts:
        z = fr[0] / fr[1]
    else:
        z = fr[0] * fr[1] + fr[2]
    if z == 0:  # a product or quotient keeps the xor of the signs; sums are fixed by the caller
        return math.copysign(0.0, v[0]) * math.copysign(1.0, v[1]), True
    if fine is not None and abs(z) < _TINY_RO:
        return _round_tiny(z, fine, m), False
    return _ro(z.numerator, z.denominator, False, rn), False


def _round_tiny(z: Fraction, f: Format, m: RoundMode) -> float:
    """``z`` (nonzero, ``|z| < 2**-1021``) rounded once to ``f`` in a deterministic mode.

    RO53 is innocuous only while its quantum is at most a quarter of the format's (two extra
    bits: Boldo & Melquiond 2008). Below 2**-1022 RO53's quantum stays 2**-1074, so in a
    format whose quantum there is 2**-1073 or 2**-1074 an RO53 result can land on a midpoint
    or a grid point that ``z`` is not (``1.25 * 2**-1074`` -> RO53 ``2**-1074``, a tie of the
    2**-1073 grid: rne gives 0, not 2**-1073). Such results are rounded exactly here; the result
    is a value of ``f`` (a float64), which the final :func:`fpemu.round` keeps (flushing it when
    subnormals are off, as it would).
    """
    a = abs(z)
    n, d = a.numerator, a.denominator
    e = n.bit_length() - d.bit_length()
    if (n << max(-e, 0)) < (d << max(e, 0)):
        e -= 1  # e = floor(log2 |z|)
    q = max(e, f.emin) - f.mbits
    k, r = divmod(n << -q, d) if q < 0 else divmod(n, d << q)  # |z| / 2**q = k + r / d
    negative = z < 0
    if r == 0:
        up = False
    elif m is RoundMode.RTZ:
        up = False
    elif m is RoundMode.RUP:
        up = not negative
    elif m is RoundMode.RDOWN:
        up = negative
    elif m is RoundMode.RTO:
        up = k % 2 == 0
    elif m is RoundMode.RNA:
        up = 2 * r >= d
    else:  # rne
        up = 2 * r > d or (2 * r == d and k % 2 == 1)
    return math.copysign(math.ldexp(k + up, q), -1.0 if negative else 1.0)


def _ro(num: int, den: int, inexact: bool, rn: bool) -> float:
    """RO53 of ``num / den`` (``den > 0``), or RN53 of it when ``rn`` (via RO55, innocuous).

    ``inexact`` is an extra sticky bit. Below 2**-1022 the quantum is float64's 2**-1074 (RO55:
    2**-1076). Beyond the float64 range RO53 saturates to +-max float64, which every format of
    precision <= 51 rounds exactly as it rounds the true value (both overflow).
    """
    bits = 55 if rn else 53
    sign, n = (-1 if num < 0 else 1), abs(num)
    e = max(n.bit_length() - den.bit_length() - bits - 1, -1021 - bits)
    q, r = divmod(n << -e, den) if e < 0 else divmod(n, den << e)
    while q.bit_length() > bits:  # move the extra low bits into the sticky remainder
        r, q, e = r or (q & 1), q >> 1, e + 1
    if (r or inexact) and not q & 1:
        q |= 1
    if rn:
        try:
            return float(Fraction(sign * q) * Fraction(2) ** e)  # correctly rounded int / int
        except OverflowError:
            return sign * math.inf
    if e + q.bit_length() > 1024:
        return sign * _F64_MAX
    return sign * math.ldexp(q, e)


def _ro_sqrt(x: Fraction, rn: bool) -> float:
    n, d = x.numerator, x.denominator  # d is a power of two
    k = d.bit_length() - 1
    if k % 2:
        n, k = n * 2, k + 1
    s = max(0, (120 - n.bit_length()) // 2 + 1)  # n << 2s has >= 120 bits: isqrt has >= 60
    big = n << (2 * s)
    r = math.isqrt(big)
    return _ro(r, 1 << (k // 2 + s), r * r != big, rn)
