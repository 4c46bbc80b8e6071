"""Softmax and log-softmax, forward and backward, as torch 2.13's CPU kernels compute them
(SoftmaxKernel.cpp): float32 opmath for every input format, one rounding to the output.

The kernels' vectorised reductions (``vec::reduce_all``: lane-wise partial sums, then a
horizontal sum) and their ``exp`` are not pinned: ``_log_softmax`` uses ``Vectorized::exp`` (Sleef
``expf_u10``) and ``std::exp`` (LogSoftmaxKernelImpl.h: ``K_LIBM`` ulps); ``_softmax`` and the
backwards live in SoftmaxKernel.cpp, not shipped with the wheel, and may use
``Vectorized<float>::exp_u20`` ("a faster version of exp with ULP=20" per vec256_float.h,
flushing below ``ln(FLT_MIN)``): 20 ulps. Every output is bounded by the running error bound of
the formula (``_iv.IV``):

* forward: ``m = max(x)`` (exact in any order), ``e_i = exp(x_i - m)``, ``s = sum e_i``,
  ``softmax = e_i * (1/s)``, ``log_softmax = (x_i - m) - log(s)`` (or ``x_i - (m + log s)``:
  the larger bound of the two orders);
* backward: ``softmax: y_i * (g_i - sum_j g_j y_j)``, ``log_softmax: g_i - exp(y_i) * sum_j g_j``;
* a sum of K terms in any order: ``|error| <= gamma_{K-1} * sum |terms|``,
  ``gamma_n = n u / (1 - n u)``, ``u = 2**-24``; each ``exp``: 20 (or ``K_LIBM``) ulps plus
  ``2**-126`` (the flush) plus its slope times its argument's bound; ``log``: ``K_LIBM`` ulps.

torch 2.13 CPU, measured (tests/test_ops_softmax.py), the 16-bit formats round intermediates:

* ``_log_softmax`` over the last dim stores the sum and its log in the tensor's format
  (``serial_vec_log_softmax_lastdim_range``'s ``scalar_t`` buffers, LogSoftmaxKernelImpl.h):
  ``out = R((x - m) - R(log(R(s))))``; over another dim all in float32 (one rounding);
* ``_softmax`` over a dim other than the last may store ``exp(x - m)`` in the output first:
  ``out = R(R(e_i) / s)`` (``s`` the float32 sum of the unrounded ``e``), seen on AVX512 with
  an inner size of 16 and not on AVX2/``default``: both are admitted; over the last dim one
  rounding.

There each rounded intermediate is taken at both ends of its float32 interval (rounding is
monotone; almost always both ends round to the same 16-bit value) and the final float32
operations are evaluated at those ends: the hull is the claim.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> out = softmax(Call("aten._softmax.default", (np.float32([[0.0, 0.0]]), -1, False), {},
...                    ("float32",)))[0]
>>> out.value.tolist(), out.exact
([[0.5, 0.5]], False)
"""

from __future__ import annotations

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, lazy
from fpemu.validate.ops._fp import K_LIBM, hull_out, quiet
from fpemu.validate.ops._iv import ETA, IV, U, iv_ends, iv_out
from fpemu.validate.ops._num import LOW, to
from fpemu.validate.ops.casts import convert

_F = np.float32

__all__ = ["log_softmax", "log_softmax_backward", "safe_softmax", "softmax", "softmax_backward"]

#: ulps of the kernels' exp (``exp_u20``'s documented ULP=20 covers Sleef's 1.0)
K_EXP = 20
_WHY16 = (
    "16-bit intermediates (measured): float32 interval ends rounded, "
    "exp_u20 (20 ulps), log (K_LIBM ulps), sum order (gamma_{K-1})"
)
_WHY = ("float32 running bound: vectorised sum order (gamma_{K-1}), exp_u20 (20 ulps), "
        "log (K_LIBM ulps)")  # fmt: skip


def _ulp32(mag: np.ndarray) -> np.ndarray:
    return np.asarray(np.ldexp(1.0, np.frexp(np.maximum(mag, 2.0**-126))[1] - 24))


def _exp(a: IV, k: int = K_EXP) -> IV:
    """``exp`` of an interval: ``k`` ulps, the flush below ``FLT_MIN``, the slope ``exp(hi)``."""
    v = np.exp(a.v)
    prop = np.where(a.e > 0, np.exp(a.v + a.e) * a.e, 0.0)
    return IV(v, prop + k * _ulp32(np.abs(v) + prop) + 2.0**-126)


def _log(a: IV) -> IV:
    """``log`` of a positive interval: K_LIBM ulps, the slope ``1/lo``."""
    v = np.log(a.v)
    lo = a.v - a.e
    prop = np.where(a.e > 0, np.where(lo > 0, a.e / lo, np.inf), 0.0)
    return IV(v, prop + K_LIBM * _ulp32(np.abs(v) + prop) + ETA)


def _sum(a: IV) -> IV:
    """The sum over the last axis (kept) in any order: ``gamma_{K-1} * sum |terms|``."""
    k = a.v.shape[-1]
    g = (k - 1) * U / (1 - (k - 1) * U)
    absum = np.sum(np.abs(a.v) + a.e, axis=-1, keepdims=True)
    v = np.sum(a.v, axis=-1, keepdims=True)
    e = np.sum(a.e, axis=-1, keepdims=True) + g * absum + k * 2.0**-52 * absum + k * ETA
    return IV(v, e)


def _ends32(a: IV) -> list[np.ndarray]:
    """The float32 values at (or just outside) both ends of ``a``."""
    lo, hi = a.v - a.e, a.v + a.e
    lo32, hi32 = lo.astype(_F), hi.astype(_F)
    lo32 = np.where(lo32 > lo, np.nextafter(lo32, _F(-np.inf)), lo32).astype(_F)
    hi32 = np.where(hi32 < hi, np.nextafter(hi32, _F(np.inf)), hi32).astype(_F)
    return [lo32, hi32]


def _ends16(a: IV, name: str) -> list[np.ndarray]:
    """Both ends of ``a`` (a float32 intermediate) rounded to the 16-bit format, as float32."""
    return [to(v, name).astype(_F) for v in _ends32(a)]


def _last(a: np.ndarray, dim: int) -> np.ndarray:
    """``a`` widened to float32 (float64 stays) with ``dim`` moved last."""
    wide = a.astype(np.float64 if a.dtype == np.float64 else np.float32)
    return np.moveaxis(wide, dim, -1) if wide.ndim else wide.reshape(1)


def _back(a: np.ndarray, dim: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.moveaxis(a, -1, dim).reshape(shape) if shape else a.reshape(())


def _float64(name: str) -> None:
    if name == "float64":
        raise NotImplementedError("float64 softmax: the bound is for float32 opmath only")


def _out(val: np.ndarray, iv: IV, dim: int, shape: tuple[int, ...], name: str) -> Out:
    return iv_out(_back(val, dim, shape), IV(_back(iv.v, dim, shape), _back(iv.e, dim, shape)),
                  name, _WHY)  # fmt: skip


@quiet("aten._softmax.default")
def softmax(call: Call) -> list[Out | None]:
    """``_softmax(x, dim, half_to_float)``."""
    x, dim, name = call.args[0], int(call.args[1]), call.out_dtypes[0]
    _float64(name)
    xl = _last(x, dim)
    m = np.max(xl, axis=-1, keepdims=True) if xl.size else xl
    d = IV.of(xl) - IV.of(m)
    e = _exp(d)
    s = _sum(e)
    if name in LOW and x.ndim > 1 and dim % x.ndim != x.ndim - 1:
        e16 = _ends16(e, name) + _ends32(e)  # rounded to 16 bits or not (path-dependent)
        s32 = _ends32(s)
        ev = [a / b for a in e16 for b in s32] + [a * (_F(1) / b) for a in e16 for b in s32]
        mid = e16[0] / s32[0]
        return [hull_out(_back(mid, dim, x.shape), [_back(v, dim, x.shape) for v in ev],
                         name, _WHY16)]  # fmt: skip
    res = e * (IV.const(1.0) / s)
    with np.errstate(all="ignore"):
        ev = np.exp((xl - m).astype(np.float64)).astype(np.float32)
        val = ev / np.sum(ev, axis=-1, keepdims=True, dtype=np.float32)
    return [_out(val, res, dim, x.shape, name)]


@quiet("aten._safe_softmax.default")
def safe_softmax(call: Call) -> list[Out | None]:
    """``_safe_softmax(x, dim, dtype=None)`` (``nn.MultiheadAttention``'s): torch's
    ``where(all(x == -inf, dim), 0, softmax(x, dim, dtype))``, ``softmax`` converting ``x`` to
    ``dtype`` first where one is given. :func:`softmax`'s Out, with 0 (exact) in the rows that
    are -inf throughout, where ``_softmax`` gives NaN."""
    x, dim = np.asarray(call.args[0]), int(call.args[1])
    dtype = call.arg(2, "dtype")
    if dtype is not None:
        x = convert(x, dtype)
    inner = Call("aten._softmax.default", (x, dim, False), {}, call.out_dtypes,
                 capability=call.capability)  # fmt: skip
    out = softmax(inner)[0]
    assert out is not None and out.bound is None  # (softmax's Outs are eager)
    with np.errstate(invalid="ignore"):
        empty = np.all(x == -np.inf, axis=dim, keepdims=True) if x.ndim else x == -np.inf
    if not empty.any():
        return [out]
    empty = np.broadcast_to(empty, np.shape(out.value))
    zero = np.zeros((), np.asarray(out.value).dtype)
    center = out.value if out.center is None else out.center
    err = np.broadcast_to(np.asarray(out.err, np.float64), empty.shape)
    return [bounded(np.where(empty, zero, out.value), np.where(empty, 0.0, err), out.reason,
                    center=np.where(empty, 0.0, center))]  # fmt: skip


@quiet("aten._log_softmax.default")
def log_softmax(call: Call) -> list[Out | None]:
    """``_log_softmax(x, dim, half_to_float)``."""
    x, dim, name = call.args[0], int(call.args[1]), call.out_dtypes[0]
    _float64(name)
    xl = _last(x, dim)
    m = np.max(xl, axis=-1, keepdims=True) if xl.size else xl
    if name in LOW and (x.ndim <= 1 or dim % x.ndim == x.ndim - 1):
        d = IV.of(xl) - IV.of(m)
        s16 = _ends16(_sum(_exp(d, K_LIBM)), name)
        logs = [_log(IV(np.asarray(v, np.float64), 0.0)) for v in s16]
        l16 = [_ends16(logs[0], name)[0], _ends16(logs[1], name)[1]]
        dv = (xl - m).astype(_F)
        ev = [dv - v for v in l16]
        return [hull_out(_back(ev[0], dim, x.shape), [_back(v, dim, x.shape) for v in ev],
                         name, _WHY16)]  # fmt: skip
    with np.errstate(all="ignore"):
        dv = (xl - m).astype(np.float32)
        s = np.sum(np.exp(dv.astype(np.float64)).astype(np.float32), axis=-1, keepdims=True)
        val = dv - np.log(s.astype(np.float64)).astype(np.float32)
    if _rows(x, xl, dim):
        return [_lazy_rows(val, xl, m, name)]
    X, M = IV.of(xl), IV.of(m)
    return [_out(val, _log_softmax_iv(X, M, X - M), dim, x.shape, name)]


def _log_softmax_iv(X: IV, M: IV, d: IV) -> IV:
    """The running bound of ``log_softmax`` at the elements of ``X`` (rows of ``M``; ``d =
    X - M``): ``ls = log(sum(exp(x - m)))`` of whole rows, then ``(x - m) - ls`` with the larger
    error of its two orders. ``ls`` may be given instead of the rows (see :func:`_lazy_rows`)."""
    ls = _log(_sum(_exp(d, K_LIBM)))
    return _log_softmax_at(X, M, d, ls)


def _log_softmax_at(X: IV, M: IV, d: IV, ls: IV) -> IV:
    one = d - ls  # (x - m) - log s
    two = X - (M + ls)  # x - (m + log s)
    return IV(one.v, np.maximum(one.e, two.e))


def _rows(x: np.ndarray, xl: np.ndarray, dim: int) -> bool:
    """Whether the lazy, per-element bound applies: a non-empty tensor reduced over its last
    dimension, whose float32 (or float64) copy ``xl`` is C-contiguous, so that every array the
    bound derives from it is C-contiguous too and the row sums see the same layout (NumPy's
    sum order) as :func:`_out`'s whole-array path."""
    return bool(x.ndim >= 1 and xl.size and dim % x.ndim == x.ndim - 1
                and xl.flags.c_contiguous)  # fmt: skip


def _lazy_rows(val: np.ndarray, xl: np.ndarray, m: np.ndarray, name: str) -> Out:
    """:func:`_log_softmax_iv`'s bound only where the watcher asks (``lazy``: in the bench GPT
    torch's loss differs from the value at a few elements of a few rows, in some steps): the
    row terms (``log s``, a sum of exponentials over the row) of the asked elements' rows only,
    gathered into a C-contiguous array (NumPy sums each contiguous row alone, so a row's sum
    is the same in any such array), then the elementwise rest at the asked elements (IV
    arithmetic and :func:`iv_ends` act element by element: a gathered element gets the whole
    array's bits)."""
    cols = xl.shape[-1]
    x2, m1 = xl.reshape(-1, cols), m.reshape(-1)

    def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(all="ignore"):
            rows, at = np.unique(idx // cols, return_inverse=True)
            xr, mr = x2[rows], m1[rows, None]
            ls = _log(_sum(_exp(IV.of(xr) - IV.of(mr), K_LIBM)))
            xi, mi = IV.of(x2.reshape(-1)[idx]), IV.of(m1[rows][at])
            li = IV(ls.v[at, 0], ls.e[at, 0])
            return iv_ends(_log_softmax_at(xi, mi, xi - mi, li), name)

    return lazy(to(val, name), bound, _WHY)


@quiet("aten._softmax_backward_data.default")
def softmax_backward(call: Call) -> list[Out | None]:
    """``_softmax_backward_data(grad, output, dim, input_dtype)``: ``y * (g - sum(g*y))``."""
    g, y, dim, name = call.args[0], call.args[1], int(call.args[2]), call.out_dtypes[0]
    _float64(name)
    gl, yl = _last(g, dim), _last(y, dim)
    G, Y = IV.of(gl), IV.of(yl)
    dot = _sum(G * Y)
    res = Y * (G - dot)
    with np.errstate(all="ignore"):
        dv = np.sum(gl * yl, axis=-1, keepdims=True, dtype=np.float32)
        val = yl * (gl - dv)
    return [_out(val, res, dim, g.shape, name)]


@quiet("aten._log_softmax_backward_data.default")
def log_softmax_backward(call: Call) -> list[Out | None]:
    """``_log_softmax_backward_data(grad, output, dim, input_dtype)``: ``g - exp(y)*sum(g)``."""
    g, y, dim, name = call.args[0], call.args[1], int(call.args[2]), call.out_dtypes[0]
    _float64(name)
    gl, yl = _last(g, dim), _last(y, dim)
    with np.errstate(all="ignore"):
        ey = np.exp(yl.astype(np.float64))
        sv = np.asarray(np.sum(gl, axis=-1, keepdims=True, dtype=np.float32))
        val = _minus_product(gl, ey.astype(np.float32), sv)
    if _rows(g, gl, dim) and yl.flags.c_contiguous:
        # the bound where the watcher asks: sum(g) of whole rows (as the eager path sums them:
        # the same C-contiguous layout), the rest element by element, by the eager path's own
        # operations (elementwise: a gathered element gets the whole array's bits)
        cols = gl.shape[-1]
        sums: list[IV] = []

        def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            with np.errstate(all="ignore"):
                if not sums:
                    sums.append(_sum(IV.of(gl)))
                S, r = sums[0], idx // cols
                gi = IV.of(gl.reshape(-1)[idx])
                si = IV(S.v.reshape(-1)[r], S.e.reshape(-1)[r])
                return iv_ends(gi - _exp(IV.of(yl.reshape(-1)[idx])) * si, name)

        return [lazy(to(val, name), bound, _WHY)]
    G = IV.of(gl)
    res = G - _exp(IV.of(yl)) * _sum(G)
    return [_out(val, res, dim, g.shape, name)]


def _minus_product(g: np.ndarray, e: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``g - e * s`` in float32 (float32 ``g``, ``e`` and ``s``, broadcast), through float64: the
    product of two float32 values is exact in float64 and the cast rounds it once, as the
    float32 multiply does; the float64 difference of two float32 values rounded to float32 is
    the float32 difference (Figueroa: 53 >= 2*24 + 2; where the result is a float32 subnormal,
    both are multiples of 2**-149 and their difference is exact in float64). Same bits, without
    float32 subnormal arithmetic (a quarter of exp(y) in the bench GPT's loss: NumPy's float32
    multiply and subtract then take 5x longer, in microcode assists). A NaN anywhere (whose
    payload could follow another operand order): the float32 expression itself."""
    prod = (e.astype(np.float64) * s.astype(np.float64)).astype(np.float32)
    out = (g.astype(np.float64) - prod.astype(np.float64)).astype(np.float32)
    if np.isnan(out).any():
        return np.asarray(g - e * s)
    return out
