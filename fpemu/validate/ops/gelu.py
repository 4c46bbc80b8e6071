"""GELU and its backward as torch 2.13's CPU kernels compute them (Activation.cpp, oneDNN).

``gelu(approximate='none')`` of a contiguous tensor of two or more elements runs oneDNN's
minimax GELU (measured): emulated bit for bit (``_onednn``, AVX512 machines; elsewhere not
emulated). float32 ``gelu_backward(approximate='none')`` of a contiguous ``x`` of two or more
elements runs oneDNN's A&S GELU derivative (measured): emulated bit for bit (``_onednn_bwd``,
its FMA and SSE4.1/AVX kernels). With ``torch.backends.mkldnn.enabled`` off
(``call.options["mkldnn"]``), and otherwise (and in 16-bit ``gelu_backward``), ATen's kernel
runs: its erf is not libm's but ``Vectorized<float>::erf`` (Abramowitz-Stegun 7.1.26 in
float32 around a Sleef ``expf``, vec256_float.h) or ``std::erf`` (see ``_erf.erf_iv``), bounded
from the kernel's float32 formula: tanh-GELU by its hull at the extreme tanh values and both
ways of each contraction, the erf forms and the backwards by a running bound (``_iv.IV``). In
the tails the float32 evaluation cancels (``1 + erf`` near -1): the bound follows that
evaluation, not the exact function (E2/E6).

torch 2.13 CPU, measured (tests/test_ops_activations.py): oneDNN's erf-``gelu`` gives NaN at
+-inf (``0 * inf`` in its Horner step) and its bfloat16 conversion flushes subnormals;
``gelu_backward`` (erf) gives NaN at +-inf and may flush subnormal results (admitted: 0 is in
the bound). 16-bit inputs are judged from per-process tables of every code (``by_bits`` with a
key, :func:`._act.xpart`).

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> c = Call("aten.gelu.default", (np.float32([0.0, 1.0]),), {}, ("float32",))
>>> [float(v) for v in gelu(c)[0].value]
[0.0, 0.8413447141647339]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fpemu.validate.ops import Call, Out, exact
from fpemu.validate.ops import _onednn as onednn
from fpemu.validate.ops import _onednn_bwd as onednn_bwd
from fpemu.validate.ops._act import ERF, HULL, IVR, ends, fm, x32, xpart
from fpemu.validate.ops._erf import erf_center
from fpemu.validate.ops._erf import erf_iv as _erf_iv
from fpemu.validate.ops._fp import by_bits, candidates, hull_out, quiet
from fpemu.validate.ops._iv import IV, iv_lazy, iv_out
from fpemu.validate.ops._num import to

__all__ = ["gelu", "gelu_backward"]

_F = np.float32


def _onednn_gelu(x: np.ndarray, name: str) -> np.ndarray:
    """oneDNN's GELU in float32, then its conversion to the output format (bfloat16 through
    ``vcvtneps2bf16`` flushes subnormal float32 values to zero where the CPU has it)."""
    y = onednn.gelu_minimax(x)  # (in cache-sized blocks)
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
            inner = _F(_BETA) * fm(np.full_like(x, _F(_KAPPA)), cube, x, fused)
            c = candidates(np.tanh(inner.astype(np.float64)))
            ev += [_F(0.5) * x * (_F(1) + t) for t in ends(c)]
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
            return [by_bits(x0, lambda a: exact(_onednn_gelu(x32(a, name), name)),
                            key=("gelu-onednn", name, onednn.bf16_flushes()))]  # fmt: skip

    def one(a: np.ndarray) -> Out:
        x = x32(a, name)
        if approx == "tanh":
            mid, ev = _gelu_tanh(x)
            return hull_out(mid, ev, name, HULL)
        val, res = _gelu_erf(x)
        return iv_out(val, res, name, ERF, ftz=True)

    return [by_bits(call.args[0], one, key=("gelu", name, approx))]


@quiet("aten.gelu_backward.default")
def gelu_backward(call: Call) -> list[Out | None]:
    """erf: ``dy * (cdf + x*pdf)``, cdf = ``0.5*(1 + erf(x/sqrt2))``, pdf = ``beta*exp(-x*x/2)``;
    float32 on oneDNN's path (``_onednn_bwd.runs``): oneDNN's kernel, exact; otherwise the
    running bound with the erf interval of :func:`_erf_iv`. tanh: the running bound of the
    Gelu.h formula (non-monotone in tanh, four contraction sites). The bound is computed only
    where torch's result differs from the value (:func:`iv_lazy`)."""
    name = call.out_dtypes[0]
    dy = x32(call.args[0], name)
    approx = call.kwargs.get("approximate", call.args[2] if len(call.args) > 2 else "none")
    x0 = call.args[1]
    mkldnn = call.options.get("mkldnn", True)  # torch.backends.mkldnn.enabled (see gelu)
    if mkldnn and approx != "tanh" and name == "float32" and onednn_bwd.runs(x0, dy):
        fused = onednn_bwd.kernel_fused()
        if fused is not None:  # oneDNN's kernel, emulated bit for bit (module _onednn_bwd)
            with np.errstate(all="ignore"):
                return [exact(np.asarray(dy * onednn_bwd.gelu_erf_bwd(x0, fused=fused), _F))]
    if approx == "tanh":
        xval, xiv = xpart(call.args[1], name, _gelu_bw_tanh, _gelu_bw_tanh_value)
    else:
        xval, xiv = xpart(call.args[1], name, _gelu_bw_erf, _gelu_bw_erf_value, direct=_erf_once)
    with np.errstate(all="ignore"):
        val = dy * xval
    flat_dy = np.broadcast_to(dy, val.shape).reshape(-1)

    def iv_at(idx: np.ndarray) -> IV:
        return IV.of(flat_dy[idx]) * xiv(idx)

    if approx == "tanh":
        return [iv_lazy(val, iv_at, name, IVR)]
    return [iv_lazy(val, iv_at, name, ERF, ftz=True)]


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


def _erf_once(x: np.ndarray) -> tuple[np.ndarray, Callable[[np.ndarray], IV]]:
    """A float32 ``x``'s erf-form backward factor: erf's float64 center computed once, for the
    value and for the interval where asked."""
    flat = x.reshape(-1)
    center = erf_center((x * _F(math.sqrt(0.5))).astype(_F)).reshape(-1)
    value = _gelu_bw_erf_value(x, center.reshape(x.shape))
    return value, lambda idx: _gelu_bw_erf_iv(flat[idx], center[idx])
