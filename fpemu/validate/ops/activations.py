"""Activations and their backwards as torch 2.13's CPU kernels compute them (Activation.cpp,
UnaryOpsKernel.cpp, BinaryOpsKernel.cpp; the ``Vectorized<float>`` of ``vec256``/``vec512``).

The 16-bit formats compute in float32 and round once, like float32's own kernels. Selections
(``relu``, ``threshold_backward``, ``leaky_relu``, ``hardtanh``) are exact. The transcendental
ones are bounded from the kernel's own float32 formula:

* where the result is monotone in each transcendental and the kernel cannot fuse anything
  (``sigmoid``, ``silu``, ``tanh``, tanh-``gelu``), the formula is evaluated at the lowest and
  highest value the transcendental may return (``_fp.candidates``: ``K_LIBM`` ulps) and at both
  ways of each ``a*b + c`` the compiler may contract: the hull is the claim;
* elsewhere (``gelu_backward``, ``silu_backward``) a running bound of the float32 evaluation
  (``_iv.IV``), valid for any contraction.

``gelu(approximate='none')`` of a contiguous tensor of two or more elements runs oneDNN's
minimax GELU (measured): emulated bit for bit (``_onednn``, AVX512 machines; elsewhere not
emulated). float32 ``gelu_backward(approximate='none')`` of a contiguous ``x`` of two or more
elements runs oneDNN's A&S GELU derivative (measured): emulated bit for bit (``_onednn_bwd``,
its FMA and SSE4.1/AVX kernels). Otherwise (and in 16-bit ``gelu_backward``) its erf is not
libm's: ATen computes it through
``Vectorized<float>::erf`` (Abramowitz-Stegun 7.1.26 in float32 around a Sleef ``expf``,
vec256_float.h) or ``std::erf`` (see ``_erf.erf_iv``). In the tails the float32 evaluation
cancels (``1 + erf`` near -1): the bound follows that evaluation, not the exact
function (E2/E6).

torch 2.13 CPU, measured (tests/test_ops_activations.py): float16 ``sigmoid_backward`` rounds to
float16 after every operation, ``(g * (1 - y)) * y`` (E1); bfloat16 and float32 round once;
oneDNN's erf-``gelu`` gives NaN at +-inf (``0 * inf`` in its Horner step) and its bfloat16
conversion flushes subnormals; ``gelu_backward`` (erf) gives NaN at +-inf and may flush
subnormal results (admitted: 0 is in the bound);
``hardtanh_backward`` gives 0 at a NaN input; ``threshold_backward`` compares 16-bit inputs with
the threshold as float32.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> relu(Call("aten.relu.default", (np.float32([-1.0, 2.0]),), {}, ("float32",)))[0].value.tolist()
[0.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, exact
from fpemu.validate.ops import _onednn as onednn
from fpemu.validate.ops import _onednn_bwd as onednn_bwd
from fpemu.validate.ops._erf import erf_center
from fpemu.validate.ops._erf import erf_iv as _erf_iv
from fpemu.validate.ops._fp import by_bits, candidates, fma32, hull_out, quiet
from fpemu.validate.ops._iv import IV, iv_lazy, iv_out
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


def _exp_cands(z: np.ndarray) -> list[np.ndarray]:
    with np.errstate(over="ignore", under="ignore"):
        return candidates(np.exp(np.asarray(z, np.float64)))


def _ends(cands: list[np.ndarray]) -> list[np.ndarray]:
    """The lowest and highest of ``candidates`` (ordered low to high; NaN stays NaN)."""
    return [cands[0], cands[-1]]


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

    def one(a: np.ndarray) -> Out:
        x = _x(a, name)
        c = _exp_cands(-x)
        ev = [_F(1) / (_F(1) + e) for e in _ends(c)]
        return hull_out(_F(1) / (_F(1) + c[len(c) // 2]), ev, name, _HULL)

    return [by_bits(call.args[0], one, key=("sigmoid", name))]


@quiet("aten.tanh.default", "aten.tanh_.default")
def tanh(call: Call) -> list[Out | None]:
    """Sleef ``tanhf_u10`` / MKL / libm: within ``K_LIBM`` ulps."""
    name = call.out_dtypes[0]

    def one(a: np.ndarray) -> Out:
        c = candidates(np.tanh(_x(a, name).astype(np.float64)))
        return hull_out(c[len(c) // 2], c, name, _HULL)

    return [by_bits(call.args[0], one, key=("tanh", name))]


@quiet("aten.silu.default", "aten.silu_.default")
def silu(call: Call) -> list[Out | None]:
    """``x / (1 + exp(-x))``: monotone in the exp value, nothing to contract."""
    name = call.out_dtypes[0]

    def one(a: np.ndarray) -> Out:
        x = _x(a, name)
        c = _exp_cands(-x)
        ev = [x / (_F(1) + e) for e in _ends(c)]
        return hull_out(x / (_F(1) + c[len(c) // 2]), ev, name, _HULL)

    return [by_bits(call.args[0], one, key=("silu", name))]


def _onednn_gelu(x: np.ndarray, name: str) -> np.ndarray:
    """oneDNN's GELU in float32, then its conversion to the output format (bfloat16 through
    ``vcvtneps2bf16`` flushes subnormal float32 values to zero where the CPU has it)."""
    y = onednn_bwd.blocked(onednn.gelu_minimax, x)  # cache-sized blocks: 2x faster, same bits
    if name == "bfloat16" and onednn.bf16_flushes():
        y = np.where(np.abs(y) < _F(2.0**-126), np.copysign(_F(0), y), y).astype(_F)
    return to(y, name)


def _gelu_erf(x: np.ndarray) -> tuple[np.ndarray, IV]:
    """``x*0.5*(1 + erf(x/sqrt2))`` with the erf interval of :func:`_erf_iv`."""
    z = (x * _F(math.sqrt(0.5))).astype(_F)
    X = IV.of(x)
    erf = _erf_iv(z)
    res = X * IV.const(0.5) * (IV.const(1.0) + erf)
    with np.errstate(all="ignore"):
        val = x * _F(0.5) * (_F(1) + erf.v.astype(_F))
    # x*(1 + erf) may overflow before the halving: finite |x| >= 2**127 is not judged
    big = (np.abs(x) >= 2.0**127) & np.isfinite(x)
    return val, IV(res.v, np.where(big, np.inf, res.e))


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
    approx = call.kwargs.get("approximate", call.args[1] if len(call.args) > 1 else "none")
    x0 = call.args[0]
    # (``options["mkldnn"]``: torch.backends.mkldnn.enabled as watch saw it; off, ATen's kernel)
    mkldnn = call.options.get("mkldnn", True)
    if mkldnn and approx != "tanh" and x0.size >= 2 and x0.flags.c_contiguous and name != "float64":
        # torch 2.13 CPU, measured: a contiguous erf-GELU of two or more elements runs oneDNN.
        # Its avx512_core kernel is emulated bit for bit; its pre-AVX512 kernels use oneDNN's
        # own exp, not pinned: there the erf-formula bound below applies (measured with
        # ONEDNN_MAX_CPU_ISA=AVX2: 800,000 float32, bfloat16 and float16 inputs, Gaussian,
        # uniform on [-12, 12] and tiny, all within it; tests/test_ops_gelu_isa.py).
        if onednn.available():
            return [by_bits(x0, lambda a: exact(_onednn_gelu(_x(a, name), name)),
                            key=("gelu-onednn", name, onednn.bf16_flushes()))]  # fmt: skip

    def one(a: np.ndarray) -> Out:
        x = _x(a, name)
        if approx == "tanh":
            mid, ev = _gelu_tanh(x)
            return hull_out(mid, ev, name, _HULL)
        val, res = _gelu_erf(x)
        return iv_out(val, res, name, _ERF, ftz=True)

    return [by_bits(call.args[0], one, key=("gelu", name, approx))]


@quiet("aten.gelu_backward.default")
def gelu_backward(call: Call) -> list[Out | None]:
    """erf: ``dy * (cdf + x*pdf)``, cdf = ``0.5*(1 + erf(x/sqrt2))``, pdf = ``beta*exp(-x*x/2)``;
    float32 on oneDNN's path (``_onednn_bwd.runs``): oneDNN's kernel, exact; otherwise the
    running bound with the erf interval of :func:`_erf_iv`. tanh: the running bound of the
    Gelu.h formula (non-monotone in tanh, four contraction sites). The bound is computed only
    where torch's result differs from the value (:func:`iv_lazy`)."""
    name = call.out_dtypes[0]
    dy = _x(call.args[0], name)
    approx = call.kwargs.get("approximate", call.args[2] if len(call.args) > 2 else "none")
    x0 = call.args[1]
    mkldnn = call.options.get("mkldnn", True)  # torch.backends.mkldnn.enabled (see gelu)
    if mkldnn and approx != "tanh" and name == "float32" and onednn_bwd.runs(x0, dy):
        fused = onednn_bwd.kernel_fused()
        if fused is not None:  # oneDNN's kernel, emulated bit for bit (module _onednn_bwd)
            with np.errstate(all="ignore"):
                return [exact(np.asarray(dy * onednn_bwd.gelu_erf_bwd(x0, fused=fused), _F))]
    xval, xiv = _xpart(call.args[1], name, _gelu_bw_tanh if approx == "tanh" else _gelu_bw_erf)
    with np.errstate(all="ignore"):
        val = dy * xval
    flat_dy = np.broadcast_to(dy, val.shape).reshape(-1)

    def iv_at(idx: np.ndarray) -> IV:
        return IV.of(flat_dy[idx]) * xiv(idx)

    if approx == "tanh":
        return [iv_lazy(val, iv_at, name, _IVR)]
    return [iv_lazy(val, iv_at, name, _ERF, ftz=True)]


#: (backward factor, output format, 16-bit dtype) -> its value and interval on every code
_XTABLES: dict[Any, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _xpart(
    a: np.ndarray, name: str, fn: Callable[[np.ndarray], tuple[np.ndarray, IV]]
) -> tuple[np.ndarray, Callable[[np.ndarray], IV]]:
    """The factor of a backward that depends on ``x`` only: its float32 value (every element)
    and its interval at given flat indices: for a large 16-bit ``a`` both evaluated once per
    process on every code of its dtype (as ``by_bits`` with a key: ``fn`` depends on ``x``
    alone) and indexed by the tensor's bits, otherwise the value everywhere and the interval
    only at the indices asked for."""
    if a.dtype.itemsize == 2 and a.size >= 8192:
        tk = (fn, name, a.dtype)
        table = _XTABLES.get(tk)
        if table is None:
            every = np.arange(1 << 16, dtype=np.uint16).view(a.dtype)
            val, iv = fn(_x(every, name))
            table = _XTABLES[tk] = (val, iv.v, np.broadcast_to(iv.e, np.shape(iv.v)))
        tv, ivv, ive = table
        bits = np.ascontiguousarray(a).view(np.uint16).ravel()  # a code is its own index
        return tv[bits].reshape(a.shape), lambda idx: IV(ivv[bits[idx]], ive[bits[idx]])
    x = _x(a, name)
    flat = x.reshape(-1)
    if fn is _gelu_bw_erf:  # erf's float64 center once: the value's, and the bound's where asked
        center = erf_center((x * _F(math.sqrt(0.5))).astype(_F)).reshape(-1)
        value = _gelu_bw_erf_value(x, center.reshape(x.shape))
        return value, lambda idx: _gelu_bw_erf_iv(flat[idx], center[idx])
    return _VALUE[fn](x), lambda idx: fn(flat[idx])[1]


def _gelu_bw_erf(x: np.ndarray, center: np.ndarray | None = None) -> tuple[np.ndarray, IV]:
    """``cdf + x*pdf`` of the erf form (``center``: erf's float64 center, if known): its
    float32 value and its interval."""
    if center is None:
        center = erf_center((x * _F(math.sqrt(0.5))).astype(_F))
    return _gelu_bw_erf_value(x, center), _gelu_bw_erf_iv(x, center)


def _gelu_bw_erf_iv(x: np.ndarray, center: np.ndarray) -> IV:
    """The interval of :func:`_gelu_bw_erf` alone (the lazy bound needs no value)."""
    z = (x * _F(math.sqrt(0.5))).astype(_F)
    X = IV.of(x)
    erf = _erf_iv(z, center)
    cdf = IV.const(0.5) * (IV.const(1.0) + erf)
    xsq = X * X * IV.const(-0.5)

    def slope(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.asarray(np.exp(hi))

    kb = IV.const(_KB)
    return cdf + X * (kb * xsq.func(np.exp, slope))


_KB = 2 / math.sqrt(math.pi) * math.sqrt(0.5) * 0.5


def _gelu_bw_erf_value(x: np.ndarray, erf: np.ndarray | None = None) -> np.ndarray:
    """The float32 value of :func:`_gelu_bw_erf` (erf correctly rounded) without its bound."""
    if erf is None:
        erf = erf_center((x * _F(math.sqrt(0.5))).astype(_F))
    with np.errstate(all="ignore"):
        cd = _F(0.5) * (_F(1) + erf.astype(_F))
        pdf = _F(np.float32(_KB)) * np.exp(((x * x) * _F(-0.5)).astype(np.float64)).astype(_F)
        return np.asarray(cd + x * pdf)


def _gelu_bw_tanh(x: np.ndarray) -> tuple[np.ndarray, IV]:
    """``0.5*(1 + t) + (0.5*x)*(1 - t*t)*(beta*(1 + 3*kappa*x*x))`` of the tanh form."""
    X = IV.of(x)
    xsq = X * X
    inner = IV.const(_BETA) * (X + IV.const(_KAPPA) * (xsq * X))

    def slope(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        m = np.where((lo <= 0) & (hi >= 0), 0.0, np.minimum(np.abs(lo), np.abs(hi)))
        return np.asarray(1 - np.tanh(m) ** 2)

    t = inner.func(np.tanh, slope)
    left = IV.const(0.5) * X
    ld = IV.const(0.5) * (IV.const(1.0) + t)
    td = IV.const(1.0) - t * t
    k3 = IV.const(float(np.float32(3) * np.float32(_KAPPA)))
    idv = IV.const(_BETA) * (IV.const(1.0) + k3 * xsq)
    res = ld + left * td * idv
    return _gelu_bw_tanh_value(x), res


def _gelu_bw_tanh_value(x: np.ndarray) -> np.ndarray:
    """The float32 value of :func:`_gelu_bw_tanh` (tanh correctly rounded) without its bound."""
    with np.errstate(all="ignore"):
        xs, b, k = x * x, _F(_BETA), _F(_KAPPA)
        th = np.tanh((b * (x + k * (xs * x))).astype(np.float64)).astype(_F)
        val = _F(0.5) * (_F(1) + th) + (_F(0.5) * x) * (_F(1) - th * th) * (
            b * (_F(1) + (_F(3) * k) * xs)
        )
    return np.asarray(val)


@quiet("aten.silu_backward.default")
def silu_backward(call: Call) -> list[Out | None]:
    """``s = 1/(1 + exp(-x)); dy * s * (1 + x*(1 - s))``: the running bound (not monotone in s)."""
    name = call.out_dtypes[0]
    dy = _x(call.args[0], name)
    sval, siv = _xpart(call.args[1], name, _silu_s)
    qval, qiv = _xpart(call.args[1], name, _silu_q)
    with np.errstate(all="ignore"):
        val = (dy * sval) * qval
    flat_dy = np.broadcast_to(dy, val.shape).reshape(-1)
    return [iv_lazy(val, lambda idx: IV.of(flat_dy[idx]) * siv(idx) * qiv(idx), name, _IVR)]


def _silu_s(x: np.ndarray) -> tuple[np.ndarray, IV]:
    """``s = 1 / (1 + exp(-x))``."""

    def slope(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return np.asarray(np.exp(hi))

    one = IV.const(1.0)
    s = one / (one + IV(-x.astype(np.float64), 0.0).func(np.exp, slope))
    return _silu_s_value(x), s


def _silu_s_value(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(_F(1) / (_F(1) + np.exp(-x.astype(np.float64)).astype(_F)))


def _silu_q(x: np.ndarray) -> tuple[np.ndarray, IV]:
    """``1 + x*(1 - s)``."""
    _, s = _silu_s(x)
    one = IV.const(1.0)
    return _silu_q_value(x), one + IV.of(x) * (one - s)


def _silu_q_value(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(_F(1) + x * (_F(1) - _silu_s_value(x)))


#: each x-part's value-only function (the same float32 value, without the bound's cost)
_VALUE: dict[Any, Callable[[np.ndarray], np.ndarray]] = {
    _gelu_bw_erf: _gelu_bw_erf_value, _gelu_bw_tanh: _gelu_bw_tanh_value,
    _silu_s: _silu_s_value, _silu_q: _silu_q_value,
}  # fmt: skip
