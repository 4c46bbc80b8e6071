"""erf for the GELU emulations: a vectorised float64 erf (the centers) and the interval of the
erf value torch's kernels use (oneDNN / ``Vectorized<float>::erf`` / libm).

>>> import numpy as np
>>> round(float(erf64(np.float64([0.5]))[0]), 12)
0.520499877813
>>> bool(erf_iv(np.float32([0.5])).e[0] < 2e-6)
True
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from fpemu.validate.ops._fp import K_LIBM
from fpemu.validate.ops._iv import ETA, IV, U
from fpemu.validate.ops._num import BLOCK, blocked

__all__ = ["ERF64_ERR", "erf64", "erf_center", "erf_iv"]

# W. J. Cody's rational approximations of erf / erfc (CALERF, Math. Comp. 23, 1969)
_CA = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
       3.20937758913846947e03, 1.85777706184603153e-1)  # fmt: skip
_CB = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
       2.84423683343917062e03)  # fmt: skip
_CC = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
       2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
       2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)  # fmt: skip
_CD = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
       1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
       3.43936767414372164e03, 1.23033935480374942e03)  # fmt: skip
#: a bound on |_erf64 - erf|: measured 1.25e-12 at |z| = 4.0001 (the four-term tail series),
#: below 1e-15 elsewhere; tests/test_ops_activations.py checks it against math.erf
ERF64_ERR = 2e-12


def _ratio(t: np.ndarray, lead: float, a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    """Cody's numerator and denominator by Horner in ``t``, in place: the same operations as
    ``num, den = lead * t, t``, then ``num, den = (num + a_i) * t, (den + b_i) * t`` for all but
    the last coefficients, then ``num + a_last, den + b_last``."""
    num, den = lead * t, t.copy()
    for ai, bi in zip(a[:-1], b[:-1], strict=True):
        num += ai
        num *= t
        den += bi
        den *= t
    num += a[-1]
    den += b[-1]
    return num, den


def _small(y: np.ndarray) -> np.ndarray:
    num, den = _ratio(y * y, _CA[4], _CA[:4], _CB)
    num *= y
    num /= den
    return np.asarray(num)


def _mid(y: np.ndarray) -> np.ndarray:
    num, den = _ratio(y, _CC[8], _CC[:8], _CD)
    e = y * y
    np.negative(e, out=e)
    np.exp(e, out=e)
    e *= num
    e /= den
    np.subtract(1.0, e, out=e)
    return np.asarray(e)


def _tail(y: np.ndarray) -> np.ndarray:
    inv = 1.0 / (y * y)
    series = 1 - inv / 2 + 0.75 * inv**2 - 1.875 * inv**3
    return np.asarray(1.0 - np.exp(-y * y) / (y * math.sqrt(math.pi)) * series)


def erf64(z: np.ndarray) -> np.ndarray:
    """erf in float64, vectorised: Cody's rationals for |z| <= 4, the asymptotic series of
    erfc beyond (four terms: relative error < 105/(16 z**8) of erfc(4) ~ 1.5e-8); each
    branch evaluated on its own elements only; large arrays block by block."""
    if np.size(z) > BLOCK:  # the temporaries in cache
        return blocked(erf64, z, np.float64)
    x = np.asarray(z, np.float64)
    y = np.abs(x).ravel()
    r = np.empty_like(y)
    with np.errstate(all="ignore"):
        lo, hi = y <= 0.46875, y > 4.0
        mid = ~(lo | hi)
        r[lo], r[mid], r[hi] = _small(y[lo]), _mid(y[mid]), _tail(y[hi])
    out = r.reshape(x.shape)
    return np.asarray(np.where(np.isnan(x), np.nan, np.copysign(out, x)))


_AS = (0.3275911, 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


class _Bin:
    """A float32 evaluation over a bin of inputs: ``v`` the exact value at the bin's middle,
    ``s`` how far the exact value moves across the bin, ``e`` a bound on the float32
    evaluation's error at every input of the bin (each operation's rounding on the largest
    magnitude the bin allows; a fused pair only removes a rounding)."""

    def __init__(self, v: Any, s: Any, e: Any) -> None:
        self.v, self.s, self.e = (np.asarray(w, np.float64) for w in (v, s, e))

    @staticmethod
    def const(c: float) -> _Bin:
        return _Bin(float(np.float32(c)), 0.0, 0.0)

    def _rnd(self, v: np.ndarray, s: np.ndarray, e: np.ndarray) -> _Bin:
        return _Bin(v, s, e + U * (np.abs(v) + s + e) + ETA)

    def __add__(self, o: _Bin) -> _Bin:
        return self._rnd(self.v + o.v, self.s + o.s, self.e + o.e)

    def __mul__(self, o: _Bin) -> _Bin:
        ma, mb = np.abs(self.v) + self.s, np.abs(o.v) + o.s
        s = np.abs(self.v) * o.s + np.abs(o.v) * self.s + self.s * o.s
        return self._rnd(self.v * o.v, s, ma * o.e + mb * self.e + self.e * o.e)

    def __truediv__(self, o: _Bin) -> _Bin:
        v = self.v / o.v
        den = np.abs(o.v) - o.s
        s = (self.s + np.abs(v) * o.s) / den
        e = (self.e + (np.abs(v) + s) * o.e) / (den - o.e)
        return self._rnd(v, s, e)

    def exp_neg(self) -> _Bin:
        """``exp(-self)`` for ``self >= 0``: slope at most ``exp(-(v - s - e))``, K_LIBM ulps."""
        v = np.exp(-self.v)
        slope = np.exp(-np.maximum(self.v - self.s - self.e, 0.0))
        s, prop = slope * self.s, slope * self.e
        mag = v + s + prop
        ulp = np.ldexp(1.0, np.frexp(np.maximum(mag, 2.0**-126))[1] - 24)
        return _Bin(v, s, prop + K_LIBM * ulp + ETA)


_STEP = 2.0**-12  # bin width of |z| below _TOP
_TOP = 6.0  # beyond: t*r*exp(-z*z) < 1e-16, its float32 error below 3e-16 (1e-15 used)


@functools.cache
def _eval_table() -> np.ndarray:
    """The A&S formula's float32 evaluation-error bound for each bin of |z| in [0, _TOP)."""
    lo = np.arange(int(_TOP / _STEP)) * _STEP
    a = _Bin(lo + _STEP / 2, _STEP / 2, 0.0)
    p, p1, p2, p3, p4, p5 = (_Bin.const(c) for c in _AS)
    one = _Bin.const(1.0)
    t = one / (p * a + one)
    r = (((p5 * t + p4) * t + p3) * t + p2) * t + p1
    return np.asarray((t * r * (a * a).exp_neg()).e)


def erf_iv(z: np.ndarray, center: np.ndarray | None = None) -> IV:
    """The erf value the kernel uses for float32 ``z``, as an interval around ``erf(z)``.

    torch 2.13 computes the 16-bit ``gelu`` and every ``gelu_backward`` with
    ``approximate='none'`` through ``Vectorized<float>::erf`` (the vector path) or ``std::erf``
    (scalar tails, ``default``): measured, neither alone matches every element. The vector form
    is Abramowitz-Stegun 7.1.26, ``1 - t*r(t)*exp(-z*z)``, ``t = 1/(1 + p|z|)``, documented within
    1.5e-7 of erf; its float32 coefficients move it by at most ``sum|a_k| * 2**-24``; its float32
    evaluation error is bounded per bin of ``|z|`` (width 2**-12, :class:`_Bin`: every input of
    the bin, any FMA); libm's erff is within K_LIBM ulps (below the rest). ``center``: its
    :func:`erf_center` where the caller has it already."""
    a = np.abs(np.asarray(z, np.float64))
    idx = np.minimum(np.nan_to_num(a / _STEP, nan=0.0), _TOP / _STEP).astype(np.intp)
    table = np.append(_eval_table(), 1e-15)
    coef = sum(abs(c) for c in _AS[1:]) * 2.0**-24
    c = erf_center(z) if center is None else np.asarray(center, np.float64)
    return IV(c, table[idx] + 1.5e-7 + coef + ERF64_ERR)


def erf_center(z: np.ndarray) -> np.ndarray:
    """``erf(z)`` in float64 for float32 ``z`` (within ``ERF64_ERR``): :func:`erf_iv`'s center,
    and the erf of the emulations' values."""
    if np.size(z) > BLOCK:
        return blocked(erf_center, z, np.float64)
    return erf64(np.abs(np.asarray(z, np.float64))) * np.where(np.signbit(z), -1.0, 1.0)
