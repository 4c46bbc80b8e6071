"""Activations and their backwards as torch 2.13's CPU kernels compute them (Activation.cpp,
UnaryOpsKernel.cpp, BinaryOpsKernel.cpp; the ``Vectorized<float>`` of ``vec256``/``vec512``).

The 16-bit formats compute in float32 and round once, like float32's own kernels. Selections
(``relu``, ``threshold_backward``, ``leaky_relu``, ``hardtanh``) are exact. The transcendental
ones are bounded from the kernel's own float32 formula:

* where the result is monotone in each transcendental and the kernel cannot fuse anything
  (``sigmoid``, ``silu``, ``tanh``, erf-``gelu``), the formula is evaluated at the lowest and
  highest value the transcendental may return (``_fp.candidates``: ``K_LIBM`` ulps) and at both
  ways of each ``a*b + c`` the compiler may contract: the hull is the claim;
* elsewhere (``gelu_backward``, ``silu_backward``) a running bound of the float32 evaluation
  (``_iv.IV``), valid for any contraction.

The erf of ``gelu(approximate='none')`` is not libm's: torch 2.13 computes it through oneDNN's
``eltwise_gelu_erf`` or ``Vectorized<float>::erf`` (Abramowitz-Stegun 7.1.26 in float32 around a
Sleef ``expf``, vec256_float.h) or ``std::erf`` (see :func:`_erf_iv`). In the tails the float32
evaluation cancels (``1 + erf`` near -1): the bound follows that evaluation, not the exact
function (E2/E6).

torch 2.13 CPU, measured (tests/test_ops_activations.py): float16 ``sigmoid_backward`` rounds to
float16 after every operation, ``(g * (1 - y)) * y`` (E1); bfloat16 and float32 round once;
erf-``gelu`` and its backward give NaN at +-inf and flush subnormal results to zero (oneDNN);
``hardtanh_backward`` gives 0 at a NaN input; ``threshold_backward`` compares 16-bit inputs with
the threshold as float32.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> relu(Call("aten.relu.default", (np.float32([-1.0, 2.0]),), {}, ("float32",)))[0].value.tolist()
[0.0, 2.0]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, exact
from fpemu.validate.ops._fp import candidates, fma32, hull_out, quiet
from fpemu.validate.ops._iv import IV, iv_out
from fpemu.validate.ops._num import LOW, to

__all__ = ["gelu", "gelu_backward", "relu", "sigmoid", "silu", "silu_backward"]

_F = np.float32
_HULL = "float32 formula at the extreme libm/Sleef values (K_LIBM ulps) and FMA contractions"
_ERF = "erf within A&S 7.1.26's 1.5e-7 plus its float32 evaluation bound (oneDNN/vector/libm)"
_IVR = "float32 formula's running error bound (each rounding, K_LIBM-ulp libm, any FMA)"


def _x(a: np.ndarray, name: str) -> np.ndarray:
    """A tensor widened to opmath; float64 transcendental kernels are not emulated."""
    if name == "float64":
        raise NotImplementedError("float64 transcendental activations are not emulated")
    return np.asarray(a).astype(_F)


def _fm(a: Any, b: Any, c: Any, fused: bool) -> np.ndarray:
    """``a*b + c`` in float32: one FMA or two roundings (the compiler's choice)."""
    if fused:
        return fma32(a, b, c)
    return np.asarray(np.asarray(a, _F) * np.asarray(b, _F) + np.asarray(c, _F), _F)


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


def _erf64(z: np.ndarray) -> np.ndarray:
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


def _exp_cands(z: np.ndarray) -> list[np.ndarray]:
    with np.errstate(over="ignore", under="ignore"):
        return candidates(np.exp(np.asarray(z, np.float64)))


_AS = (0.3275911, 0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _ends(cands: list[np.ndarray]) -> list[np.ndarray]:
    with np.errstate(invalid="ignore"):
        st = np.stack(cands)
        return [np.fmin.reduce(st, axis=0), np.fmax.reduce(st, axis=0)]


# -- selections (exact) -----------------------------------------------------------------------
@quiet("aten.relu.default", "aten.relu_.default")
def relu(call: Call) -> list[Out | None]:
    """``clamp_min(x, 0)``: x unless x < 0 (NaN and -0 stay)."""
    x = call.args[0]
    return [exact(np.where(x < 0, np.zeros_like(x), x))]


@quiet("aten.threshold_backward.default")
def threshold_backward(call: Call) -> list[Out | None]:
    """``self <= threshold ? 0 : grad``, compared in opmath (the threshold as float32 for the
    16-bit formats: measured)."""
    g, x, th = call.args[0], call.args[1], call.args[2]
    cdt = np.float64 if x.dtype == np.float64 else _F
    return [exact(np.where(x.astype(cdt) <= cdt(th), np.zeros_like(g), g))]


@quiet("aten.leaky_relu.default", "aten.leaky_relu_.default")
def leaky_relu(call: Call) -> list[Out | None]:
    """``x > 0 ? x : x * slope``, the product in opmath with the slope as float32."""
    x, name = call.args[0], call.out_dtypes[0]
    slope = call.arg(1, "negative_slope", 0.01)
    cdt = np.float64 if name == "float64" else _F
    xo = x.astype(cdt)
    return [exact(to(np.where(xo > 0, xo, xo * cdt(slope)), name))]


@quiet("aten.leaky_relu_backward.default")
def leaky_relu_backward(call: Call) -> list[Out | None]:
    """``self > 0 ? grad : grad * slope``."""
    g, x, slope, name = call.args[0], call.args[1], call.args[2], call.out_dtypes[0]
    cdt = np.float64 if name == "float64" else _F
    go = g.astype(cdt)
    return [exact(to(np.where(x.astype(cdt) > 0, go, go * cdt(slope)), name))]


@quiet("aten.hardtanh.default", "aten.hardtanh_.default")
def hardtanh(call: Call) -> list[Out | None]:
    """``clamp(x, min_val, max_val)`` with x kept where not outside (NaN stays)."""
    x = call.args[0]
    lo = np.asarray(float(call.arg(1, "min_val", -1.0))).astype(_F).astype(x.dtype)
    hi = np.asarray(float(call.arg(2, "max_val", 1.0))).astype(_F).astype(x.dtype)
    r = np.where(x < lo, lo, x)
    return [exact(np.where(r > hi, hi, r).astype(x.dtype))]


@quiet("aten.hardtanh_backward.default")
def hardtanh_backward(call: Call) -> list[Out | None]:
    """``(x > min && x < max) ? grad : 0`` (a NaN ``x`` gives 0: measured)."""
    g, x = call.args[0], call.args[1]
    lo = np.asarray(float(call.args[2])).astype(_F).astype(x.dtype)
    hi = np.asarray(float(call.args[3])).astype(_F).astype(x.dtype)
    return [exact(np.where((x > lo) & (x < hi), g, np.zeros_like(g)))]


# -- arithmetic backwards (exact) ---------------------------------------------------------------
@quiet("aten.sigmoid_backward.default")
def sigmoid_backward(call: Call) -> list[Out | None]:
    """``g * (1 - y) * y``: float32 opmath rounded once, float16 rounded after every step (E1)."""
    g, y, name = call.args[0], call.args[1], call.out_dtypes[0]
    cdt = np.float64 if name == "float64" else _F
    go, yo = g.astype(cdt), y.astype(cdt)
    one = cdt(1)
    if name == "float16":

        def r(v: np.ndarray) -> np.ndarray:  # float16 storage after every operation
            return to(v, name).astype(_F)

        return [exact(to(r(r(go * r(one - yo)) * yo), name))]
    return [exact(to((go * (one - yo)) * yo, name))]


@quiet("aten.tanh_backward.default")
def tanh_backward(call: Call) -> list[Out | None]:
    """``g * (1 - y*y)``. The 16-bit ``y*y`` is exact in float32, so a contraction of ``1 - y*y``
    changes nothing there; float32 on the SIMD builds: fused or not (the hull)."""
    g, y, name = call.args[0], call.args[1], call.out_dtypes[0]
    if name == "float64":
        return [exact(g * (1.0 - y * y))] if call.capability == "default" else _no64()
    go, yo = g.astype(_F), y.astype(_F)
    plain = to(go * (_F(1) - yo * yo), name)
    if name in LOW or call.capability == "default":
        return [exact(plain)]
    fused = go * fma32(-yo, yo, np.ones_like(yo))
    return [hull_out(plain, [plain, fused], name, "1 - y*y fused or not (GCC -mfma)")]


def _no64() -> list[Out | None]:
    raise NotImplementedError("float64 on the SIMD builds: NumPy has no float64 FMA")


# -- transcendentals (bounded) ------------------------------------------------------------------
@quiet("aten.sigmoid.default", "aten.sigmoid_.default")
def sigmoid(call: Call) -> list[Out | None]:
    """``1 / (1 + exp(-x))``: monotone in the exp value, nothing to contract."""
    name = call.out_dtypes[0]
    x = _x(call.args[0], name)
    c = _exp_cands(-x)
    with np.errstate(all="ignore"):
        ev = [_F(1) / (_F(1) + e) for e in _ends(c)]
        mid = _F(1) / (_F(1) + c[len(c) // 2])
    return [hull_out(mid, ev, name, _HULL)]


@quiet("aten.tanh.default", "aten.tanh_.default")
def tanh(call: Call) -> list[Out | None]:
    """Sleef ``tanhf_u10`` / MKL / libm: within ``K_LIBM`` ulps."""
    name = call.out_dtypes[0]
    x = _x(call.args[0], name)
    c = candidates(np.tanh(x.astype(np.float64)))
    return [hull_out(c[len(c) // 2], c, name, _HULL)]


@quiet("aten.silu.default", "aten.silu_.default")
def silu(call: Call) -> list[Out | None]:
    """``x / (1 + exp(-x))``: monotone in the exp value, nothing to contract."""
    name = call.out_dtypes[0]
    x = _x(call.args[0], name)
    c = _exp_cands(-x)
    with np.errstate(all="ignore"):
        ev = [x / (_F(1) + e) for e in _ends(c)]
        mid = x / (_F(1) + c[len(c) // 2])
    return [hull_out(mid, ev, name, _HULL)]


def _erf_iv(z: np.ndarray) -> IV:
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
    return IV(_erf64(zz), ev.e + 1.5e-7 + coef + ERF64_ERR)


def _gelu_erf(x: np.ndarray) -> tuple[np.ndarray, IV]:
    """``x*0.5*(1 + erf(x/sqrt2))`` with the erf interval of :func:`_erf_iv`."""
    z = (x * _F(math.sqrt(0.5))).astype(_F)
    X = IV.of(x)
    res = X * IV.const(0.5) * (IV.const(1.0) + _erf_iv(z))
    with np.errstate(all="ignore"):
        val = x * _F(0.5) * (_F(1) + _erf64(z).astype(_F))
    # torch 2.13 CPU, measured: gelu(+-inf) is NaN for float32 and the 16-bit formats
    # and x*(1 + erf) may overflow before the halving: |x| >= 2**127 is not judged
    inf = np.isinf(x)
    err = np.where(np.abs(x) >= 2.0**127, np.inf, res.e)
    return np.where(inf, _F(np.nan), val), IV(np.where(inf, np.nan, res.v), err)


_BETA = math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5
_KAPPA = 0.044715


def _gelu_tanh(x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    cube = (x * x) * x
    ev, mid = [], None
    with np.errstate(all="ignore"):
        for fused in (False, True):
            inner = _F(_BETA) * _fm(np.full_like(x, _F(_KAPPA)), cube, x, fused)
            c = candidates(np.tanh(inner.astype(np.float64)))
            ev += [_F(0.5) * x * (_F(1) + t) for t in _ends(c)]
            if mid is None:
                mid = _F(0.5) * x * (_F(1) + c[len(c) // 2])
    assert mid is not None
    return mid, ev


@quiet("aten.gelu.default", "aten.gelu_.default")
def gelu(call: Call) -> list[Out | None]:
    """``x*0.5*(1 + erf(x/sqrt2))`` or ``0.5*x*(1 + tanh(beta*(x + kappa*x^3)))`` (Gelu.h)."""
    name = call.out_dtypes[0]
    x = _x(call.args[0], name)
    approx = call.kwargs.get("approximate", call.args[1] if len(call.args) > 1 else "none")
    if approx == "tanh":
        mid, ev = _gelu_tanh(x)
        return [hull_out(mid, ev, name, _HULL)]
    val, res = _gelu_erf(x)
    return [iv_out(val, res, name, _ERF, ftz=True)]


@quiet("aten.gelu_backward.default")
def gelu_backward(call: Call) -> list[Out | None]:
    """erf: ``dy * (cdf + x*pdf)``, cdf = ``0.5*(1 + erf(x/sqrt2))``, pdf = ``beta*exp(-x*x/2)``,
    the running bound with the erf interval of :func:`_erf_iv`. tanh: the running bound of the
    Gelu.h formula (non-monotone in tanh, four contraction sites)."""
    name = call.out_dtypes[0]
    dy, x = _x(call.args[0], name), _x(call.args[1], name)
    approx = call.kwargs.get("approximate", call.args[2] if len(call.args) > 2 else "none")
    if approx == "tanh":
        return [_gelu_backward_tanh(dy, x, name)]
    z = (x * _F(math.sqrt(0.5))).astype(_F)
    X, DY = IV.of(x), IV.of(dy)
    cdf = IV.const(0.5) * (IV.const(1.0) + _erf_iv(z))
    xsq = X * X * IV.const(-0.5)

    def slope(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.asarray(np.exp(hi))

    kb = IV.const(2 / math.sqrt(math.pi) * math.sqrt(0.5) * 0.5)
    res = DY * (cdf + X * (kb * xsq.func(np.exp, slope)))
    with np.errstate(all="ignore"):
        cd = _F(0.5) * (_F(1) + _erf64(z).astype(_F))
        pdf = _F(kb.v) * np.exp(((x * x) * _F(-0.5)).astype(np.float64)).astype(_F)
        val = dy * (cd + x * pdf)
    return [iv_out(val, res, name, _ERF, ftz=True)]


def _gelu_backward_tanh(dy: np.ndarray, x: np.ndarray, name: str) -> Out:
    X, DY = IV.of(x), IV.of(dy)
    xsq = X * X
    inner = IV.const(_BETA) * (X + IV.const(_KAPPA) * (xsq * X))

    def slope(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        m = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
        return np.asarray(1 - np.tanh(m) ** 2)

    t = inner.func(np.tanh, slope)
    left = IV.const(0.5) * X
    right = IV.const(1.0) + t
    ld = IV.const(0.5) * right
    td = IV.const(1.0) - t * t
    idv = IV.const(_BETA) * (
        IV.const(1.0) + IV.const(float(np.float32(3) * np.float32(_KAPPA))) * xsq
    )
    res = DY * (ld + left * td * idv)
    with np.errstate(all="ignore"):
        xs, b, k = x * x, _F(_BETA), _F(_KAPPA)
        th = np.tanh((b * (x + k * (xs * x))).astype(np.float64)).astype(_F)
        val = dy * (_F(0.5) * (_F(1) + th) + (_F(0.5) * x) * (_F(1) - th * th)
                    * (b * (_F(1) + (_F(3) * k) * xs)))  # fmt: skip
    return iv_out(val, res, name, _IVR)


@quiet("aten.silu_backward.default")
def silu_backward(call: Call) -> list[Out | None]:
    """``s = 1/(1 + exp(-x)); dy * s * (1 + x*(1 - s))``: the running bound (not monotone in s)."""
    name = call.out_dtypes[0]
    dy, x = _x(call.args[0], name), _x(call.args[1], name)

    def slope(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.asarray(np.exp(hi))

    one = IV.const(1.0)
    s = one / (one + IV(-x.astype(np.float64), 0.0).func(np.exp, slope))
    res = IV.of(dy) * s * (one + IV.of(x) * (one - s))
    with np.errstate(all="ignore"):
        sv = _F(1) / (_F(1) + np.exp(-x.astype(np.float64)).astype(_F))
        val = dy * sv * (_F(1) + x * (_F(1) - sv))
    return [iv_out(val, res, name, _IVR)]
