"""erf for the GELU emulations: a vectorised float64 erf (the centers) and the interval of the
erf value torch's kernels use (oneDNN / ``Vectorized<float>::erf`` / libm).

>>> import numpy as np
>>> round(float(erf64(np.float64([0.5]))[0]), 12)
0.520499877813
>>> bool(erf_iv(np.float32([0.5])).e[0] < 2e-6)
True
"""

from __future__ import annotations

import math

import numpy as np

from fpemu.validate.ops._iv import IV

__all__ = ["ERF64_ERR", "erf64", "erf_iv"]

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


def erf64(z: np.ndarray) -> np.ndarray:
    """erf in float64, vectorised: Cody's rationals for |z| <= 4, the asymptotic series of
    erfc beyond (four terms: relative error < 105/(16 z**8) of erfc(4) ~ 1.5e-8)."""
    x = np.asarray(z, np.float64)
    y = np.abs(x)
    with np.errstate(all="ignore"):
        z2 = y * y
        num, den = _CA[4] * z2, z2
        for i in range(3):
            num, den = (num + _CA[i]) * z2, (den + _CB[i]) * z2
        small = y * (num + _CA[3]) / (den + _CB[3])
        num, den = _CC[8] * y, y
        for i in range(7):
            num, den = (num + _CC[i]) * y, (den + _CD[i]) * y
        mid = 1.0 - np.exp(-z2) * (num + _CC[7]) / (den + _CD[7])
        inv = 1.0 / z2
        tail = (
            np.exp(-z2) / (y * math.sqrt(math.pi)) * (1 - inv / 2 + 0.75 * inv**2 - 1.875 * inv**3)
        )
        r = np.where(y <= 0.46875, small, np.where(y <= 4.0, mid, 1.0 - tail))
    return np.asarray(np.where(np.isnan(x), np.nan, np.copysign(r, x)))


_AS = (0.3275911, 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def erf_iv(z: np.ndarray) -> IV:
    """The erf value the kernel uses for float32 ``z``, as an interval around ``erf(z)``.

    torch 2.13 computes float32/bfloat16 ``gelu`` with ``approximate='none'`` through oneDNN's
    ``eltwise_gelu_erf`` (``use_mkldnn``), elsewhere through ``Vectorized<float>::erf`` or
    ``std::erf``: measured, neither alone matches every element. Both vector forms are
    Abramowitz-Stegun 7.1.26, ``1 - t*r(t)*exp(-z*z)``, ``t = 1/(1 + p|z|)``, documented within
    1.5e-7 of erf; its float32 coefficients move it by at most ``sum|a_k| * 2**-24``; its float32
    evaluation error is the running bound of that formula (any FMA); libm's erff is within
    K_LIBM ulps (below the rest)."""
    a = IV.of(np.abs(z))
    p, p1, p2, p3, p4, p5 = (IV.const(c) for c in _AS)
    one = IV.const(1.0)
    t = one / (p * a + one)
    r = (((p5 * t + p4) * t + p3) * t + p2) * t + p1
    zz = np.asarray(z, np.float64)

    def slope(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.asarray(np.exp(hi))

    e = (a * a).func(lambda v: np.exp(-v), lambda lo, hi: slope(-hi, -lo))
    ev = t * r * e
    coef = sum(abs(c) for c in _AS[1:]) * 2.0**-24
    return IV(erf64(zz), ev.e + 1.5e-7 + coef + ERF64_ERR)
