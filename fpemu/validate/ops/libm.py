"""Transcendentals and powers of torch 2.13's CPU kernels: ``exp``, ``log``, ``sqrt``, ``rsqrt``,
``pow``.

torch 2.13 CPU, measured (tests/test_ops_elementwise.py): ``exp``, ``log``, ``sqrt`` and ``pow``
with a general exponent are libm/Sleef/MKL values, bounded by
:data:`fpemu.validate.ops._fp.K_LIBM` ulps of float32 (``sqrt`` through MKL VML is not correctly
rounded); ``pow`` with exponent 2, 3, -1, -2 is multiplications/divisions (exact), 0.5 and -0.5
are ``sqrt`` and ``rsqrt``. Each computes in ``opmath`` and rounds once to the output dtype.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> out = sqrt(Call("aten.sqrt.default", (np.float32([4.0, 2.0]),), {}, ("float32",)))[0]
>>> out.value.tolist(), out.exact
([2.0, 1.4142135381698608], False)
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fpemu.validate.ops import Call, Out, exact, lazy
from fpemu.validate.ops._fp import K_LIBM, _hull, by_bits, candidates, hull_out, quiet
from fpemu.validate.ops._num import LOW, dtype, is_float, to
from fpemu.validate.ops.elementwise import _cdt, _stored, unary

__all__ = ["rsqrt", "sqrt", "unary_libm"]

_LIBM = f"float32 libm/Sleef/MKL value within {K_LIBM} ulps (vec headers: Sleef u10, VML_HA, glibc)"


@quiet("aten.rsqrt.default", "aten.rsqrt_.default")
def rsqrt(call: Call) -> list[Out | None]:
    """``1 / sqrt(x)`` with both steps correctly rounded (``_mm_sqrt_ps``, ``std::sqrt``).

    torch 2.13 CPU, measured: on ``default`` both 16-bit formats round ``sqrt`` to the format
    before the division (the generic ``Vectorized`` maps ``std::sqrt`` per element); on the SIMD
    builds the vector path rounds once and the scalar tail rounds twice, for float16 as for
    bfloat16 (measured: float16 tensors of 15 to 17 elements, all tail, match two roundings and
    not one; which elements are a tail depends on torch's chunking: the hull of both).
    """
    name = call.out_dtypes[0]
    x = call.args[0].astype(_cdt(name))
    one = x.dtype.type(1)
    with np.errstate(all="ignore"):
        once = to(one / np.sqrt(x), name)
        if name not in LOW:
            return [exact(once)]
        per = to(one / to(np.sqrt(x), name).astype(np.float32), name)
    if call.capability == "default":
        return [exact(per)]
    return [hull_out(once, [once, per], name, f"{name} rsqrt: vector (one rounding) or tail (two)")]


def unary_libm(call: Call, *f64: Callable[[np.ndarray], np.ndarray]) -> list[Out | None]:
    """A transcendental (``exp``, ``log``, ``sqrt``, ``pow``) of the opmath input: float32 within
    ``K_LIBM`` ulps of the float64 value (of any of ``f64``, where the vector and scalar paths
    compute different functions), rounded once to the output dtype."""
    name = call.out_dtypes[0]

    def one(a: np.ndarray) -> Out:
        x = a.astype(_cdt(name))
        if len(f64) == 1 and x.dtype == np.float32:
            # one function: the value everywhere, the hull (its candidates are ordered: the ends)
            # only where the watcher asks, where torch's result differs from the value
            flat = x.reshape(-1)
            f = f64[0]

            def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
                c = candidates(f(flat[idx].astype(np.float64)))
                lo, hi = c[0].astype(np.float64), c[-1].astype(np.float64)
                h = _hull(c[len(c) // 2], lo, hi, np.isnan(lo), np.asarray(False), name, _LIBM)
                assert h.center is not None and h.err is not None
                return h.center, np.broadcast_to(h.err, np.shape(h.center))

            return lazy(to(f(x.astype(np.float64)).astype(np.float32), name), bound, _LIBM)
        ends: list[np.ndarray] = []  # the lowest and highest candidate of each function
        mid = None
        for f in f64:
            ref = f(x.astype(np.float64))
            c = (
                candidates(ref, K_LIBM + 1, np.float64)
                if x.dtype == np.float64
                else candidates(ref)
            )
            ends += [c[0], c[-1]]
            mid = c[len(c) // 2] if mid is None else mid
        assert mid is not None
        return hull_out(mid, ends, name, _LIBM)

    return [by_bits(call.args[0], one)]


quiet("aten.exp.default", "aten.exp_.default")(lambda c: unary_libm(c, np.exp))
quiet("aten.log.default", "aten.log_.default")(lambda c: unary_libm(c, np.log))


@quiet("aten.sqrt.default", "aten.sqrt_.default")
def sqrt(call: Call) -> list[Out | None]:
    """16-bit: exact, ``sqrt`` in float32 rounded once to the output dtype (IEEE 754 square
    root is correctly rounded, and torch's vector, tail and ``default`` paths all are; measured
    on every bfloat16 and float16 code). float32/float64: bounded like the transcendentals,
    because large contiguous tensors go through MKL VML, which is not correctly rounded
    (torch 2.13 avx512, measured: 5,924 of 2,000,003 random float32 inputs one ulp from NumPy's
    correctly rounded ``sqrt``; 16-element tensors all equal)."""
    name = call.out_dtypes[0]
    x = call.args[0]
    if name == "float32" and isinstance(x, np.ndarray) and x.dtype == np.float32:
        return [_sqrt32(x)]
    if name not in LOW:
        return unary_libm(call, np.sqrt)
    return [exact(to(np.sqrt(x.astype(np.float32)), name))]


def _sqrt32(x: np.ndarray) -> Out:
    """:func:`unary_libm`'s Out for ``sqrt`` of a float32 tensor, the same bits, computed in
    float32: its value and the lazy bound's candidates start from ``RN32(sqrt(x))``, which
    ``unary_libm`` forms as ``float32(sqrt64(float64(x)))`` and NumPy's float32 ``sqrt``
    (``sqrtps``/``sqrtss``, IEEE 754: correctly rounded) gives in one pass: rounding the
    correctly rounded double square root to float32 is the correct rounding (double rounding is
    innocuous for sqrt when 53 >= 2*24 + 2, Figueroa 1995), and NaN, inf, -0 and the negatives
    come out alike (tests/test_ops_elementwise_fast.py compares every exponent, the subnormals
    and the specials). The bound is ``_hull`` of the ``K_LIBM`` float32 neighbours either side,
    as there: ``center = lo/2 + hi/2``, ``err = hi/2 - lo/2`` (exact: float32 ends in float64),
    NaN center where ``x`` gives NaN."""
    with np.errstate(invalid="ignore"):
        value = np.sqrt(x)

    def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(invalid="ignore", over="ignore"):
            rn = np.sqrt(x.reshape(-1)[idx])
            lo, hi = rn, rn
            for _ in range(K_LIBM):
                lo = np.nextafter(lo, np.float32(-np.inf))
                hi = np.nextafter(hi, np.float32(np.inf))
            lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
            same = lo64 == hi64
            center = np.where(same, lo64, lo64 / 2 + hi64 / 2)
            err = np.where(same, 0.0, hi64 / 2 - lo64 / 2)
        return np.where(np.isnan(lo64), np.nan, center), err

    return lazy(value, bound, _LIBM)


@quiet("aten.pow.Tensor_Scalar", "aten.pow_.Scalar")
def pow_scalar(call: Call) -> list[Out | None]:
    """``pow_tensor_scalar_optimized_kernel``: 2, 3, -1, -2 as products/quotients, 0.5 and -0.5 as
    ``sqrt``/``rsqrt``, 1 a copy, anything else ``std::pow``/Sleef ``powf_u10`` (bounded).

    torch 2.13 CPU, measured: bfloat16 rounds ``x*x`` to bfloat16 before the third factor or the
    reciprocal (``Vectorized<BFloat16>`` arithmetic); float16 computes in float32 and rounds once.
    """
    e = call.arg(1, "exponent")
    name = call.out_dtypes[0]
    if not is_float(name):
        return [exact(np.power(call.args[0], e).astype(dtype(name)))]

    def r(v: np.ndarray) -> np.ndarray:  # the bfloat16 kernel's intermediate rounding
        return to(v, name).astype(np.float32) if name == "bfloat16" else v

    one = np.float32(1) if name != "float64" else np.float64(1)
    table: dict[float, Callable[[np.ndarray], np.ndarray]] = {
        2.0: lambda x: x * x,
        3.0: lambda x: r(x * x) * x,
        -1.0: lambda x: np.asarray(one / x),
        -2.0: lambda x: np.asarray(one / r(x * x)),
        1.0: lambda x: x,
    }
    if float(e) in table and name != "float16":  # float16: std::pow(Half, Half) for every e
        return unary(call, table[float(e)])
    if float(e) == -0.5 and name != "float16":
        return list(rsqrt(call))
    if float(e) == 0.5 and name != "float16":
        return unary_libm(call, np.sqrt)
    if name == "float32":  # vector path: Sleef powf(x, float(e)); scalar tail: pow(x, double e)
        ef = float(np.float32(e))
        return unary_libm(call, lambda x: _cpow(x, ef), lambda x: _cpow(x, float(e)))
    es = float(np.asarray(_stored(e, name), np.float64))  # the exponent stored in the dtype
    return unary_libm(call, lambda x: _cpow(x, es))


def _cpow(x: np.ndarray, y: float) -> np.ndarray:
    """C's ``pow`` (NumPy's power special-cases ``-inf ** 0.5`` to NaN; C gives +inf)."""
    r = np.power(x, y)
    odd = float(y).is_integer() and int(y) % 2 == 1
    at_minf = (np.inf if y > 0 else 0.0) * (-1 if odd else 1)
    return np.asarray(np.where(x == -np.inf, at_minf, r) if y != 0 else r)


@quiet("aten.pow.Tensor_Tensor", "aten.pow_.Tensor")
def pow_tensor(call: Call) -> list[Out | None]:
    """``x ** y`` of two tensors (Keras's Adam computes ``beta ** step`` so): integers exactly;
    floats as ``std::pow``/Sleef ``powf_u10`` of the opmath operands, a libm value within
    ``K_LIBM`` ulps of the float64 power, rounded once to the output dtype (bounded)."""
    name = call.out_dtypes[0]
    if not is_float(name):
        return [exact(np.power(call.args[0], call.args[1]).astype(dtype(name)))]
    cdt = _cdt(name)
    x, y = np.asarray(call.args[0]).astype(cdt), np.asarray(call.args[1]).astype(cdt)
    ref = np.power(x.astype(np.float64), y.astype(np.float64))
    c = candidates(ref, K_LIBM + 1, np.float64) if cdt == np.float64 else candidates(ref)
    return [hull_out(c[len(c) // 2], [c[0], c[-1]], name, _LIBM)]
