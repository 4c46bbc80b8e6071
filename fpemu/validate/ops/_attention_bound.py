"""The error-bound arrays of the flash-attention emulations (:mod:`.attention`), computed in
float32 to save memory traffic; the centers stay float64.

Every bound array here (e_s, rho, the GEMM weights, e_ds, ...) is a sum of products of
non-negative quantities and positive constants. Computing it in float32 with round to nearest
gives a value c that, per operation on non-negative operands, loses at most a relative
u = 2^-24 (c >= exact / (1 + u)), plus, for a product or a cast that lands below 2^-126, an
absolute ETA = 2^-150 (a sum of float32 values in the subnormal range is exact). So, for a
path of at most n roundings from exact data to a bound, ``exact <= (1 + u)^n c + (what the
underflows lost)``:

- roundings: the elementwise chains take at most 48 roundings (a float64 -> float32 cast, the
  constants' casts and each multiply/add counted once) and a float32 GEMM of inner dimension
  m at most m + 1 in any summation order, FMA or not; GEMMs run in float32 only for m <= 64
  (else in float64 on the float32 operands, whose error is within ``attention._SLACK``), and
  a path crosses at most two GEMMs (the scores' |q||k| enter rho through exp, then the
  output GEMM), so n <= 48 + 2 * 65 = 178. exp is not linear: an argument y known within a
  factor lam (its own <= 81 roundings: the |q||k| GEMM, e_s, reach) gives expm1 within
  lam e^((lam - 1) y), which for y <= 2^-6 is at most 6 more roundings' worth (above 2^-6 the
  argument is widened by (1 + u)^81 before a float64 expm1): every bound is widened by
  W32 = (1 + u)^184 <= 1 + 2^-16.4 (:data:`W32`). Against the same formula in exact
  arithmetic the bound is looser by at most W32 (1 + u)^184 ~ 1 + 2^-15.4 in the worst
  rounding case, ~W32 in practice (measured 1.1e-5 on the bench GPT).
- exp: expm1 is not taken from numpy's float32 (its error is not documented); for
  0 <= y <= Y = 2^-6 the Taylor bound expm1(y) <= y (1 + y (1/2 + y e^Y / 6)) is used
  (:func:`expm1_up`; looser than expm1(y) by < y^2 Y / 6 relative, < 2^-20.5), with y e^Y / 6
  taken at max y when max y <= 2^-9 (< 2^-20 more), above Y float64 expm1 of the widened
  argument (looser by ~81 u y relative: only where the scores' own error, or u |s - shift|,
  exceeds ~2^-6, the kernel's exp then being off by several percent anyway).
- rho's argument takes the scores' error of its row max, or the array's max where that moves
  rho by < 2^-20 relative; rho >= 1 is set where W32 reach may cross ln(FLT_MIN) - 1 (only
  elements within 0.1% of that threshold can be affected beyond the float64 rule).
- underflow: each multiplication or cast on a path loses at most ETA times the largest value
  of the factors applied after it (bounded with the float32 arrays' maxima: R = max rho, P =
  max p, max |dP - D|, ...), so one GEMM weight loses at most ETA L with a per-call constant
  L; the GEMM's output then loses at most ETA L times the column sum of its right operand
  (|v|, |dO|, |k|, |q|) plus ETA per term. These floors are added in float64 (for the bench
  GPT ~1.5e-43 at most, in 64-term sums; they dominate only outputs whose float64 bound is
  below ~1e-40; infinite if a maximum overflows).
- overflow: inf is a valid (useless) bound; inf * 0 (a flushed p times an overflowed rho,
  reachable only when the scores' own error exceeds ~88) gives NaN, which the callers turn
  into an infinite bound.
- the scores' error e_s enters only through exp arguments, where its float32 underflow (below
  2^-140 absolute) changes rho by less than 2^-120 relative (rho >= 2^-23): covered by W32.

>>> import numpy as np
>>> y = np.float32([1e-12, 1e-3, 0.05, 3.0])
>>> bool((expm1_up(y) * np.float64(W32) >= np.expm1(np.float64(y))).all())
True
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from fpemu.backend import scratch
from fpemu.validate.ops._fma import U32, gamma, grow

__all__ = [
    "ETA",
    "F32",
    "W32",
    "add_unmasked",
    "causal_keys",
    "colsum",
    "const",
    "expm1_up",
    "f32abs",
    "f64",
    "finish",
    "gamma_f",
    "mag_mm",
    "nan_to_inf",
    "on_keys",
    "probs",
    "unmasked",
    "widen",
]

ETA = 2.0**-150
_LN_FLT_MIN = 87.33  # exp_u20 returns 0 below ln(FLT_MIN) = -87.3365
#: widening of every float32-computed bound: 184 roundings (see the module docstring)
W32 = float(grow(184))
_ARG = float(grow(81))  # the roundings of exp's argument, widened before a float64 expm1
_MM32_MAX = 64  # float32 GEMM only up to this inner dimension (65 roundings)
_Y_POLY = 2.0**-6
_C3 = math.exp(_Y_POLY) / 6 * (1 + 2.0**-20)  # rounded up when cast to float32 below
F32 = np.float32


def const(c: float) -> np.float32:
    """A positive constant as float32 rounded up (so it never undercuts the float64 one);
    cached per value (most are per-shape constants; zero and NaN, whose keys would mix signs
    or never match, are computed each time)."""
    if c != 0 and c == c:
        return _const(c)
    return _const.__wrapped__(c)


@functools.lru_cache(maxsize=256)
def _const(c: float) -> np.float32:
    r = np.float32(c)
    return r if float(r) >= c else np.nextafter(r, np.float32(np.inf))


@functools.lru_cache(maxsize=16)
def causal_keys(lq: int, lk: int) -> np.ndarray:
    """The causal mask's masked keys (above the diagonal), read-only, cached per shape."""
    t = np.triu(np.ones((lq, lk), bool), 1)
    t.flags.writeable = False
    return t


@functools.lru_cache(maxsize=16)
def on_keys(lq: int, lk: int, c: float) -> np.ndarray:
    """float32 ``c`` at the causal pattern's unmasked keys and 0 at its masked ones, cached."""
    t = np.where(causal_keys(lq, lk), F32(0.0), const(c)).astype(F32)
    t.flags.writeable = False
    return t


@functools.lru_cache(maxsize=16)
def _causal_kept(lq: int, lk: int) -> np.ndarray:
    t = ~causal_keys(lq, lk)
    t.flags.writeable = False
    return t


def unmasked(masked: np.ndarray) -> np.ndarray:
    """``~masked``; for the causal pattern alone (``masked`` is :func:`causal_keys`'s array) a
    cached array."""
    if masked.ndim == 2 and masked is causal_keys(*masked.shape):
        return _causal_kept(*masked.shape)
    return ~masked


def add_unmasked(a: np.ndarray, c: float, masked: np.ndarray) -> None:
    """``a += const(c)`` at the unmasked keys, in place (a >= 0 or NaN: where masked, adding 0
    is the identity). The causal pattern alone (``masked`` is :func:`causal_keys`'s array) adds a
    cached array: a plain broadcast add instead of a masked loop (about half the time)."""
    if masked.ndim == 2 and masked is causal_keys(*masked.shape):
        a += on_keys(*masked.shape, c)
    else:
        np.add(a, const(c), out=a, where=~masked)


def mag_mm(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` of non-negative arrays for a bound: float32 for an inner dimension up to 64,
    float64 beyond (the rounding count of the module docstring holds either way); into the
    float32 ``out`` if given."""
    if a.shape[-1] <= _MM32_MAX:
        a32, b32 = a.astype(F32, copy=False), b.astype(F32, copy=False)
        return np.asarray(np.matmul(a32, b32, out=out))
    r = np.asarray(np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)))
    if out is None:
        return r
    np.copyto(out, r, casting="same_kind")  # one more rounding, counted in the 48
    return out


def expm1_up(y: np.ndarray, err: float = 0.0, out: np.ndarray | None = None) -> np.ndarray:
    """An upper bound on expm1(y) (1 + err) + err for y >= 0, float32: the Taylor bound
    expm1(y) <= y (1 + y (1/2 + y e^Y / 6)) for max y <= Y = 2^-6, with y e^Y / 6 taken at
    max y when that is <= 2^-9 (looser by < 2^-20 relative, two passes fewer), else float64
    expm1 rounded up to float32. ``out``: a float32 array for the result (not ``y``)."""
    ymax = float(y.max()) if y.size else 0.0
    if not ymax <= _Y_POLY:  # NaN included
        r = (np.expm1(np.asarray(y, np.float64) * _ARG) * (1 + err) + err).astype(F32)
        return np.asarray(r * const(1 + 2.0**-23), F32)
    if ymax <= 2.0**-9:
        t = np.multiply(y, const((0.5 + ymax * _C3) * (1 + err)), out=out)
    else:
        t = np.multiply(y, const(_C3), out=out)
        t += F32(0.5)
        t *= y
        t *= const(1 + err)
    t += const(1 + err)
    t *= y
    t += const(err)
    return np.asarray(t)


def rowmax(a: np.ndarray) -> np.ndarray:
    """``a.max(axis=-1, keepdims=True)`` (the same values: max is exact, NaN propagates) by
    halving the last axis: numpy reduces a short last axis row by row, ~10x slower.

    >>> rowmax(np.float32([[1, 5, 2], [7, 0, 3]])).tolist()
    [[5.0], [7.0]]
    """
    while a.shape[-1] > 1:
        n, h = a.shape[-1], a.shape[-1] // 2
        b = np.maximum(a[..., :h], a[..., h : 2 * h])
        if n % 2:
            np.maximum(b[..., :1], a[..., -1:], out=b[..., :1])
        a = b
    return a if a.shape[-1] == 1 else np.max(a, axis=-1, keepdims=True)


def nan_to_inf(e: np.ndarray) -> np.ndarray:
    """A bound with NaN (inf * 0 in float32) made infinite (in place)."""
    np.copyto(e, np.inf, where=np.isnan(e))
    return e


def finish(c: np.ndarray, factor: float, add: float) -> np.ndarray:
    """A float32-computed GEMM of bound weights as the float64 bound ``c factor + add``
    (``factor`` includes W32), NaN made infinite; float64 roundings of the constants here
    (2^-53 relative each) are far inside the callers' 2^-20 widening."""
    e = np.array(c, np.float64)
    e *= factor  # (the float64 product of the exact cast, as multiply(c, factor) in float64)
    e += add
    # c, add >= 0 (or NaN, inf): with 0 < factor < inf an element of e is NaN only where c or
    # add is (a NaN c found by its max: max propagates NaN); else the sum of e tells
    if 0 < factor < math.inf:
        nan = bool(np.isnan(c.max(initial=0.0))) or bool(np.isnan(add).any())
    else:
        nan = bool(np.isnan(e.sum()))  # non-negative: the sum is NaN only if an element is
    if nan:
        nan_to_inf(e)
    return e


def colsum(a: np.ndarray) -> np.ndarray:
    """Sums over the second-to-last axis in float64 (the GEMM's summed axis of its right
    operand): what multiplies one weight's absolute loss, per output column."""
    return np.asarray(a.sum(axis=-2, keepdims=True, dtype=np.float64))


def f64(x: Any, slot: str = "") -> np.ndarray:
    """``x`` as a contiguous float64 array (exact), so that GEMMs copy nothing; with ``slot``
    (the watch path: an input, never returned) in a scratch array, fresh pages being dearer
    than the copy inside a watched step (``benchmarks/bench_attention_step.py``)."""
    x = np.asarray(x)
    if not slot:
        return np.ascontiguousarray(x, np.float64)
    buf = scratch(x.shape, np.float64, key="att.in_" + slot)
    np.copyto(buf, x, casting="same_kind")
    return buf


def f32abs(x: np.ndarray, slot: str) -> np.ndarray:
    """|x| as float32 (x's values are float32 or narrower: exact), contiguous, in the scratch
    array ``slot``."""
    a = scratch(x.shape, F32, key="att." + slot)
    np.copyto(a, x, casting="same_kind")
    np.abs(a, out=a)
    return a


@functools.lru_cache(maxsize=64)
def gamma_f(k: int, u: float = U32) -> float:
    """:func:`._fma.gamma` as a float, cached (its value for each count is fixed)."""
    return float(gamma(k, u))


def widen(c: Any) -> np.ndarray:
    """A float32-computed bound as float64, widened by W32."""
    return np.asarray(c, np.float64) * W32


def probs(s: np.ndarray, shift: np.ndarray, e_s: np.ndarray, masked: np.ndarray,
           exp_err: float, arg_roundings: int = 1, buf: np.ndarray | None = None,
           e_max: float | None = None) -> tuple[Any, ...]:  # fmt: skip
    """p = exp(s - shift) (float64) and rho (float32), the relative error of the kernel's p
    against it: the error of s (e_s, its row max for the shift), the rounding of s - shift
    (u |s - shift|), the exp's own error: rho = expm1((1 + r) u reach + e_s)(1 + err) + err
    with reach = |s - shift| + e_s + max e_s; rho >= 1 where the argument can fall below
    ln(FLT_MIN) (flushed to 0, or subnormal). ``arg_roundings`` (r): how many float32 roundings
    of the argument (relative u each) the exp itself adds (fexp_u20: 3). Masked keys get p = 0
    (their rho is finite, and every use of rho is multiplied by p); ``s`` holds -inf there, or,
    with a finite ``shift``, anything. ``s`` is consumed (its buffer becomes p: fewer fresh
    pages); ``buf``: a float32 scratch of s's shape, or None; ``e_max``: ``e_s.max()`` where
    the caller has it (else found here)."""
    # With a finite shift, masked keys get the argument 0 and then p = 0 (exp(-inf) = +0
    # exactly): numpy's float64 exp (SVML) takes a slow per-lane path for arguments below
    # ~-708 (3x the whole pass here), and its other lanes' results do not depend on them (the
    # per-lane rare path; tested bit for bit with -inf/underflowing neighbours at every
    # alignment). s need not hold -inf at masked keys then. Else (a non-finite shift: -inf or
    # NaN minus it is NaN, not -inf) the plain order, -inf at masked keys in s.
    zero = bool(np.isfinite(shift).all())
    with np.errstate(invalid="ignore", over="ignore"):
        t = np.subtract(s, shift, out=s)
        if zero:
            np.copyto(t, 0.0, where=masked)
        reach = scratch(t.shape, F32, key="att.reach") if buf is None else buf
        np.copyto(reach, t, casting="same_kind")
        if zero:
            # exp on the unmasked keys only: the masked ones keep their +0 as p (what exp(-inf)
            # gives); half the work on the causal pattern, and no pass to zero p. numpy's exp
            # gives a lane the same bits in a run of any length at any alignment (tested)
            p = np.exp(t, out=t, where=unmasked(masked))
        else:
            p = np.exp(t, out=t)  # exp(-inf) = 0 for masked keys
    np.abs(reach, out=reach)
    if not zero:
        np.copyto(reach, F32(0.0), where=masked)
    reach += e_s
    # max e_s of the row; the whole array's instead where that moves rho by < 2^-20 relative
    # (rho >= err): one pass fewer
    c = (1 + arg_roundings) * U32
    e_g = e_max if e_max is not None else float(e_s.max()) if e_s.size else 0.0
    reach += const(e_g) if c * e_g <= 2.0**-20 * exp_err else rowmax(e_s)
    # the true reach is at most W32 reach (plus < 2^-140): compare with the threshold lowered
    thr = F32((_LN_FLT_MIN - 1.0) / W32 * 0.999)
    hi = reach > thr if reach.size and not reach.max() <= thr else None  # NaN: compare
    y = np.multiply(reach, const(c), out=reach)
    y += e_s
    rho = expm1_up(y, exp_err, scratch(y.shape, F32, key="att.rho"))
    if hi is not None:  # else no element can reach the threshold
        np.maximum(rho, F32(1.0), out=rho, where=hi)
    return p, rho
