"""Activations and their backwards as torch 2.13's CPU kernels compute them (Activation.cpp,
UnaryOpsKernel.cpp, BinaryOpsKernel.cpp; the ``Vectorized<float>`` of ``vec256``/``vec512``).

The 16-bit formats compute in float32 and round once, like float32's own kernels. Selections
(``relu``, ``threshold_backward``, ``leaky_relu``, ``hardtanh``) are exact. The transcendental
ones are bounded from the kernel's own float32 formula:

* where the result is monotone in each transcendental and the kernel cannot fuse anything
  (``sigmoid``, ``silu``, ``tanh``), the formula is evaluated at the lowest and
  highest value the transcendental may return (``_fp.candidates``: ``K_LIBM`` ulps) and at both
  ways of each ``a*b + c`` the compiler may contract: the hull is the claim;
* elsewhere (``silu_backward``) a running bound of the float32 evaluation
  (``_iv.IV``), valid for any contraction.

GELU (both forms, oneDNN's kernels) is in :mod:`.gelu`.

torch 2.13 CPU, measured (tests/test_ops_activations.py): float16 ``sigmoid_backward`` rounds to
float16 after every operation, ``(g * (1 - y)) * y`` (E1); bfloat16 and float32 round once;
``hardtanh_backward`` gives 0 at a NaN input; ``threshold_backward`` compares 16-bit inputs with
the threshold as float32.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> relu(Call("aten.relu.default", (np.float32([-1.0, 2.0]),), {}, ("float32",)))[0].value.tolist()
[0.0, 2.0]
"""

from __future__ import annotations

import numpy as np

from fpemu.validate.ops import Call, Out, exact
from fpemu.validate.ops._act import HULL, IVR, ends, exp_cands, x32, xpart
from fpemu.validate.ops._fp import by_bits, candidates, fma32, hull_out, quiet
from fpemu.validate.ops._iv import IV, iv_lazy
from fpemu.validate.ops._num import LOW, to

_F = np.float32

__all__ = ["relu", "sigmoid", "silu", "silu_backward"]


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
        x = x32(a, name)
        c = exp_cands(-x)
        ev = [_F(1) / (_F(1) + e) for e in ends(c)]
        return hull_out(_F(1) / (_F(1) + c[len(c) // 2]), ev, name, HULL)

    return [by_bits(call.args[0], one, key=("sigmoid", name))]


@quiet("aten.tanh.default", "aten.tanh_.default")
def tanh(call: Call) -> list[Out | None]:
    """Sleef ``tanhf_u10`` / MKL / libm: within ``K_LIBM`` ulps."""
    name = call.out_dtypes[0]

    def one(a: np.ndarray) -> Out:
        c = candidates(np.tanh(x32(a, name).astype(np.float64)))
        return hull_out(c[len(c) // 2], c, name, HULL)

    return [by_bits(call.args[0], one, key=("tanh", name))]


@quiet("aten.silu.default", "aten.silu_.default")
def silu(call: Call) -> list[Out | None]:
    """``x / (1 + exp(-x))``: monotone in the exp value, nothing to contract."""
    name = call.out_dtypes[0]

    def one(a: np.ndarray) -> Out:
        x = x32(a, name)
        c = exp_cands(-x)
        ev = [x / (_F(1) + e) for e in ends(c)]
        return hull_out(x / (_F(1) + c[len(c) // 2]), ev, name, HULL)

    return [by_bits(call.args[0], one, key=("silu", name))]


@quiet("aten.silu_backward.default")
def silu_backward(call: Call) -> list[Out | None]:
    """``s = 1/(1 + exp(-x)); dy * s * (1 + x*(1 - s))``: the running bound (not monotone in s)."""
    name = call.out_dtypes[0]
    dy = x32(call.args[0], name)
    sval, siv = xpart(call.args[1], name, _silu_s, _silu_s_value)
    qval, qiv = xpart(call.args[1], name, _silu_q, _silu_q_value)
    with np.errstate(all="ignore"):
        val = (dy * sval) * qval
    flat_dy = np.broadcast_to(dy, val.shape).reshape(-1)
    return [iv_lazy(val, lambda idx: IV.of(flat_dy[idx]) * siv(idx) * qiv(idx), name, IVR)]


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
