"""Optimizer pointwise kernels: ``lerp``, ``addcmul``, ``addcdiv`` (the single-tensor Adam/AdamW
path), and the float32 arithmetic models the ``_foreach_*`` and fused optimizer emulations share.

torch 2.13 CPU, measured (tests/test_ops_optim.py, run under ``ATEN_CPU_CAPABILITY`` default,
avx2 and avx512): float32, float16 and bfloat16 tensors are computed in float32 (the low formats
rounded once at the end) and

* ``lerp(self, end, w)``: ``|w| < 0.5 ? self + w*(end-self) : end + (w-1)*(end-self)``; the SIMD
  builds (avx2, avx512) fuse the multiply-add (one rounding after ``end - self``), the default
  build rounds the product and the sum (torch-trace.md C2: two roundings of the net update);
* ``addcmul(self, t1, t2, value)``: ``self + (value*t1)*t2``, the last multiply-add fused on the
  SIMD builds, three roundings on the default build;
* ``addcdiv(self, t1, t2, value)``: ``self + (value*t1)/t2`` on every build (a division cannot
  fuse). ``value`` and a scalar ``w`` are rounded from double to float32 first.

>>> import numpy as np
>>> s, e = np.float32([1.0, 3.0]), np.float32([2.0, -1.0])
>>> lerp32(s, e, np.float32(0.25), fused=True)[0].tolist()
[1.25, 2.0]
>>> float(fma32(np.float32(1 + 2**-23), np.float32(1 - 2**-23), np.float32(-1)))
-1.4210854715202004e-14
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact, register
from fpemu.validate.ops._fma import fma32
from fpemu.validate.ops._num import fmt, to

__all__ = ["F32", "addcdiv32", "addcmul32", "arr", "fma32", "lerp32", "madd", "scalar32", "simd"]

F32 = np.float32
#: float32 and the low formats compute in float32 (``opmath``) and round once to their format
_VIA32 = ("float32", "float16", "bfloat16")
_U64 = 2.0**-53
_ZERO_SIGN = ("lerp's vector and scalar loops round a zero result to different signs "
              "(w = 1, end = -0); which elements take which loop is not known: value exact, "
              "sign of zero not judged")  # fmt: skip


def simd(call: Call) -> bool:
    """Whether torch's kernels fuse multiply-adds under ``call.capability`` (avx2, avx512)."""
    return call.capability != "default"


def madd(a: Any, b: Any, c: Any, *, fused: bool) -> np.ndarray:
    """float32 ``a * b + c``: one rounding where the kernel fuses it, else two."""
    if fused:
        return fma32(a, b, c)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.asarray(F32(a) * F32(b) + F32(c), F32)


def scalar32(x: Any, name: str = "value") -> np.float32:
    """A Python scalar as the kernel holds it in float32 (``Scalar::to<float>``: one RNE rounding
    from double); a 0-d/1-element array is read as it is."""
    if isinstance(x, np.ndarray):
        if x.size != 1:
            raise ValueError(
                f"{name}: expected a scalar or one-element tensor, got shape {x.shape}"
            )
        return F32(x.reshape(()).astype(np.float64))
    if isinstance(x, (bool, int, float, np.floating, np.integer)):
        return F32(float(x))
    raise TypeError(f"{name}: expected a real scalar, got {type(x).__name__} {x!r}")


def arr(x: Any, name: str) -> np.ndarray:
    """A floating tensor argument widened exactly to float32 (float64 stays float64)."""
    a = np.asarray(x)
    if fmt(a) not in (*_VIA32, "float64"):
        raise TypeError(
            f"{name}: expected a float32/float16/bfloat16/float64 tensor, got {a.dtype}"
        )
    # no copy where it is float32 already: the kernels here only read their operands
    return a if a.dtype == np.float64 else a.astype(F32, copy=False)


def lerp32(s: Any, e: Any, w: Any, *, fused: bool) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``lerp`` as torch's CPU kernel computes it (see the module docstring), as its
    vector loop and as its scalar loop: ``(vector, scalar)``.

    ``w - 1`` and ``end - self`` are rounded; the branch on ``|w| < 0.5`` keeps the result
    exact at both ends (``w = 0`` gives ``self``, ``w = 1`` gives ``end``). The two loops differ
    only in the sign of a zero: the vector loop adds ``(w-1)*(end-self)`` to ``end``, the scalar
    loop subtracts ``(end-self)*(1-w)`` (``w = 1``, ``end = -0``: -0 there, +0 here). Which
    elements take the scalar loop depends on the length, threads and the data's alignment.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        d = F32(e) - F32(s)
        w = np.asarray(w, F32)
        small = np.abs(w) < F32(0.5)  # NaN weights take the ``end`` branch, as in torch
        if w.ndim == 0 and small:  # a scalar weight below 0.5 (Adam's): no select, one loop
            vector = madd(w, d, np.asarray(s, np.result_type(s, e)), fused=fused)
            return vector, vector
        coeff = np.where(small, w, w - F32(1))
        base = np.where(small, s, e)
        vector = madd(coeff, d, base, fused=fused)
        if not (~small).any():
            return vector, vector
        scalar = madd(-d, F32(1) - w, e, fused=fused)
    return vector, np.where(small, vector, scalar)


def addcmul32(s: Any, t1: Any, t2: Any, v: np.float32, *, fused: bool) -> np.ndarray:
    """float32 ``self + (value*t1)*t2``, the last multiply-add fused on the SIMD builds."""
    with np.errstate(invalid="ignore", over="ignore"):
        p = np.asarray(v * F32(t1), F32)
    return madd(p, t2, s, fused=fused)


def addcdiv32(s: Any, t1: Any, t2: Any, v: np.float32) -> np.ndarray:
    """float32 ``self + (value*t1)/t2`` (every build: nothing to fuse)."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return np.asarray(F32(s) + (v * F32(t1)) / F32(t2), F32)


def _f64(kind: str, s: Any, a: Any, b: Any, v: Any, fused: bool) -> Out:
    """The float64 kernels: NumPy's float64 arithmetic is the default build's exactly; on the
    SIMD builds the one multiply-add is fused, which float64 NumPy cannot round once, so the
    value is bounded by the product's and the sum's roundings: ``2^-53 (|p| + |r|)``."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if kind == "addcdiv":
            return exact(s + (v * a) / b)
        if kind == "lerp":
            w = np.asarray(b, np.float64)
            small = np.abs(w) < 0.5
            p = np.where(small, w, w - 1.0) * (a - s)
            r = np.where(small, s, a) + p
        else:
            p = (v * a) * b
            r = s + p
        ambiguous = False
        if kind == "lerp":  # the scalar loop's ``end - (end-self)*(1-w)``: another zero sign
            r2 = np.where(small, r, a - (a - s) * (1.0 - w))
            ambiguous = not np.array_equal(r.view(np.uint64), np.asarray(r2).view(np.uint64))
        if not fused:
            return bounded(r, 0.0, _ZERO_SIGN) if ambiguous else exact(r)
        err = _U64 * (np.abs(p) + np.abs(r))
    return bounded(r, err, "float64 multiply-add fused on this build: NumPy rounds the product "
                   "once more (bound 2^-53 (|product| + |result|))")  # fmt: skip


def _pointwise(call: Call, kind: str) -> list[Out | None]:
    out = call.out_dtypes[0]
    s = arr(call.arg(0, "self"), "self")
    a = arr(call.arg(1, "end" if kind == "lerp" else "tensor1"), "end/tensor1")
    inplace = call.op.split(".")[1].endswith("_")
    if kind == "lerp":
        w = call.arg(2, "weight")
        b: Any = arr(w, "weight") if isinstance(w, np.ndarray) else scalar32(w, "weight")
        v: Any = None
    else:
        b = arr(call.arg(2, "tensor2"), "tensor2")
        v = call.arg(3, "value", 1)
    if out == "float64":  # a scalar weight/value stays double in the float64 kernel
        if kind == "lerp" and not isinstance(w, np.ndarray):
            b64 = np.asarray(float(w), np.float64)
        else:
            b64 = np.asarray(b, np.float64)
        vv = None if v is None else float(v)
        res = _f64(kind, s.astype(np.float64), a.astype(np.float64), b64, vv, simd(call))
        return [_shaped(res, s.shape if inplace else None)]
    if out not in _VIA32:
        raise TypeError(f"{call.op}: output dtype {out!r} is not float32/float16/bfloat16/float64")
    if kind == "lerp":
        vector, scalar = lerp32(s, a, b, fused=simd(call))
        r = to(vector, out)
        r_scalar = r if scalar is vector else to(scalar, out)  # one loop: nothing to compare
        if r_scalar is not r and not np.array_equal(
            r.view(f"u{r.itemsize}"), r_scalar.view(f"u{r.itemsize}")
        ):
            return [_shaped(bounded(r, 0.0, _ZERO_SIGN), s.shape if inplace else None)]
        return [_shaped(exact(r), s.shape if inplace else None)]
    elif kind == "addcmul":
        r = addcmul32(s, a, b, scalar32(v), fused=simd(call))
    else:
        r = addcdiv32(s, a, b, scalar32(v))
    return [_shaped(exact(to(r, out)), s.shape if inplace else None)]


def _shaped(o: Out, shape: tuple[int, ...] | None) -> Out:
    """An in-place op's result has ``self``'s shape (the other operands broadcast to it)."""
    if shape is None or o.value.shape == shape:
        return o
    center = None if o.center is None else np.broadcast_to(o.center, shape)
    err = o.err if o.err is None or np.ndim(o.err) == 0 else np.broadcast_to(o.err, shape)
    bound, inner = None, o.bound
    if inner is not None:  # a lazy bound: map the broadcast output's flat indices back
        src = np.broadcast_to(np.arange(o.value.size).reshape(o.value.shape), shape).reshape(-1)

        def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            assert inner is not None
            return inner(src[idx])

    return Out(np.array(np.broadcast_to(o.value, shape)), o.exact, center, err, o.reason, bound)


@register("aten.lerp.Scalar", "aten.lerp_.Scalar", "aten.lerp.Tensor", "aten.lerp_.Tensor")
def lerp(call: Call) -> list[Out | None]:
    """``self + weight * (end - self)``: one rounding of the fused multiply-add on avx2/avx512."""
    return _pointwise(call, "lerp")


@register("aten.addcmul.default", "aten.addcmul_.default")
def addcmul(call: Call) -> list[Out | None]:
    """``self + value * tensor1 * tensor2``: the last multiply-add fused on avx2/avx512."""
    return _pointwise(call, "addcmul")


@register("aten.addcdiv.default", "aten.addcdiv_.default")
def addcdiv(call: Call) -> list[Out | None]:
    """``self + value * tensor1 / tensor2``: three float32 roundings on every build."""
    return _pointwise(call, "addcdiv")
