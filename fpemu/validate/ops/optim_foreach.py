"""The ``_foreach_*`` ops the multi-tensor optimizers and ``clip_grad_norm_`` dispatch.

On CPU every ``_foreach_`` op is torch's "slow" fallback: a loop calling the single-tensor op on
each list element, so each element is emulated like that op (optim.py's models for lerp,
addcmul, addcdiv; float32 ``opmath`` for float16/bfloat16, rounded once). torch 2.13 CPU,
measured (tests/test_ops_optim_foreach.py under ATEN_CPU_CAPABILITY default, avx2, avx512):

* ``add``/``sub`` with ``alpha != 1`` are ``self + alpha*other`` fused on avx2/avx512 when
  ``other`` is a tensor; with a scalar or 0-d ``other`` the SIMD builds fuse only in the vector
  body and GCC's auto-vectorised remainder rounds ``alpha*other`` first, at positions that depend
  on the data's alignment: bounded by that product's rounding, ``2^-24 |alpha*other|``;
* ``div`` by a scalar is a true float32 division (no reciprocal), ``maximum``/``minimum``
  propagate NaN; on a +0/-0 tie the scalar loop keeps ``self`` and the vector loop the other
  operand (the zero's sign is left unjudged where a list holds such a tie);
* float16/bfloat16 tensors: ``add``/``sub``, ``maximum``/``minimum`` and in-place ``mul_``
  round a Python scalar to the tensor's format first, ``mul`` and ``div`` keep it in float32;
  ``alpha`` is rounded to the format, and ``self + alpha*other`` is fused in the SIMD vector
  loop but rounded op by op in the low format on the default build and in the SIMD builds'
  scalar loop (positions not known): bounded by the span of the two;
* ``sqrt`` is oneMKL's vector sqrt, not correctly rounded: bounded, within 1 ulp (measured: max
  0.551 ulp of the float32 result from the exact root over 10^6 random and 2x10^5 adversarial
  float32 inputs, torch 2.13 CPU, all three capabilities; oneMKL VM documents its HA accuracy
  mode's maximum error as 1 ulp);
* ``norm`` (2-norm, 1-norm) sums in an unspecified order: bounded by the float32 recursive
  summation bound ``gamma_K = K u / (1 - K u)`` (u = 2^-24) on ``sum x^2`` (``sum |x|``),
  which moves ``sqrt`` by at most ``gamma_K sqrt(sum x^2)``; max/min-norms are exact.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> call = Call("aten._foreach_mul.Scalar", ([np.float32([1.5, 3.0])], 2.0), {}, ("float32",))
>>> [o.value.tolist() for o in foreach(call)]
[[3.0, 6.0]]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact, register
from fpemu.validate.ops._num import to
from fpemu.validate.ops.optim import (
    _VIA32,
    _ZERO_SIGN,
    F32,
    _f64,
    addcdiv32,
    addcmul32,
    arr,
    fma32,
    lerp32,
    madd,
    scalar32,
    simd,
)

__all__ = ["foreach"]

_U = 2.0**-24
_LOW = ("float16", "bfloat16")
_SQRT = (
    "oneMKL vector sqrt within 1 ulp (measured max 0.551 ulp on 10^6 random + 2x10^5 "
    "adversarial float32 inputs, torch 2.13 CPU; oneMKL VM documents HA accuracy as 1 ulp)"
)
_ZERO_TIE = "max/min of +0 and -0: the vector and scalar loops pick different zeros"
_S3 = ("Scalar", "List", "ScalarList")
_S4 = (*_S3, "Tensor")
_BINARY = {"add": _S4, "sub": _S3, "mul": _S4, "div": _S4, "maximum": _S3, "minimum": _S3}
_TERNARY = {"lerp": _S3, "addcmul": ("Scalar", "ScalarList", "Tensor"),
            "addcdiv": ("Scalar", "ScalarList", "Tensor")}  # fmt: skip
_UNARY = ("sqrt", "neg", "abs", "reciprocal", "sign", "zero")


def _tensors(x: Any, name: str) -> list[np.ndarray]:
    if not isinstance(x, (list, tuple)):
        raise TypeError(f"{name}: expected a list of tensors, got {type(x).__name__}")
    return [np.asarray(t) for t in x]


def _per(x: Any, n: int, overload: str, name: str) -> list[Any]:
    """The per-tensor second operand: a scalar repeated, a list (of scalars or tensors), or a
    Tensor overload's 0-d tensor (binary ops) / 1-D tensor of scalars (addcmul, addcdiv)."""
    if overload in ("List", "ScalarList"):
        items = list(x) if isinstance(x, (list, tuple)) else []
        if len(items) != n:
            raise ValueError(f"{name}: expected a list of {n} entries, got {x!r:.80}")
        return items
    return [x] * n


def _out_list(call: Call, n: int) -> list[str]:
    if len(call.out_dtypes) != n:
        raise ValueError(f"{call.op}: {len(call.out_dtypes)} output dtypes for {n} tensors")
    return list(call.out_dtypes)


def _calc(out: str, fn: Any, *xs: Any) -> Out:
    """Evaluate ``fn`` in float32 (float64 for a float64 output) and round once to ``out``."""
    wide = np.float64 if out == "float64" else F32
    if out not in (*_VIA32, "float64"):
        raise TypeError(f"output dtype {out!r} is not float32/float16/bfloat16/float64")
    with np.errstate(all="ignore"):
        args = [x.astype(wide) if isinstance(x, np.ndarray) else wide(x) for x in xs]
        return exact(to(np.asarray(fn(*args), wide), out))


def _operand(b: Any, out: str) -> Any:
    """A Python scalar as the kernel holds it: float32 (one rounding) or double for float64."""
    if isinstance(b, np.ndarray):
        return arr(b, "other")
    return float(b) if out == "float64" else scalar32(b, "scalar")


def _scalar_like(b: Any) -> bool:
    """A Python scalar or a 0-d tensor: add casts it to the tensor's (low) dtype first."""
    return not isinstance(b, np.ndarray) or b.ndim == 0


def _add(a: np.ndarray, b: Any, alpha: Any, out: str, fused: bool, sign: float) -> Out:
    al = sign * float(alpha)
    if al == 1.0 or al == -1.0:  # alpha*other is exact: one rounding either way
        y = _operand(b, out)
        if out in _LOW and _scalar_like(b):
            y = to(y, out)  # add reads its scalar after the cast to the tensor's dtype
        return _calc(out, (lambda x, z: x + z) if al == 1.0 else (lambda x, z: x - z), a, y)
    if out == "float64":
        return _f64("addcmul", arr(a, "self").astype(np.float64), np.float64(al),
                    np.asarray(_operand(b, out), np.float64), 1.0, fused)  # fmt: skip
    x, y, a32 = arr(a, "self"), np.asarray(_operand(b, out), F32), scalar32(al, "alpha")
    if out in _LOW:
        return _add_low(x, to(y, out).astype(F32) if _scalar_like(b) else y,
                        to(a32, out).astype(F32), out, fused)  # fmt: skip
    one = madd(y, a32, x, fused=fused)
    if not fused or (isinstance(b, np.ndarray) and b.ndim > 0 and b.shape == a.shape):
        return exact(to(one, out))
    two = madd(y, a32, x, fused=False)  # the remainder loop: alpha*other rounded first
    if np.array_equal(to(one, out).view(np.uint8), to(two, out).view(np.uint8)):
        return exact(to(one, out))
    with np.errstate(all="ignore"):
        p = np.float64(a32) * y.astype(np.float64)
        center = x.astype(np.float64) + p
        err = (
            _U * np.abs(p)
            + 2.0**-52 * np.abs(center)
            + (0 if out == "float32" else _U * np.abs(center))
        )
    return bounded(to(one, out), err, "alpha*other fused in the vector loop, rounded first in "
                   "the alignment-dependent remainder loop (bound 2^-24 |alpha*other|)",
                   center=center)  # fmt: skip


def _add_low(x: np.ndarray, y: np.ndarray, al: np.ndarray, out: str, fused: bool) -> Out:
    """float16/bfloat16 ``self + alpha*other``, ``alpha`` rounded to the low format: the SIMD
    vector loop fuses it in float32, the default build (and the SIMD builds' scalar loop, at
    positions not known) rounds ``alpha*other`` to the low format first. Where the two differ
    the kernel's float32 value is one of the two: bounded by their span."""
    with np.errstate(all="ignore"):
        per_op = np.asarray(x + to(al * y, out).astype(F32), F32)
        if not fused:
            return exact(to(per_op, out))
        one = fma32(y, al, x)
        if np.array_equal(to(one, out).view(np.uint8), to(per_op, out).view(np.uint8)):
            return exact(to(one, out))
        lo = np.minimum(one, per_op).astype(np.float64)
        hi = np.maximum(one, per_op).astype(np.float64)
        same = hi == lo  # (also equal infinities: no span)
        err, center = np.where(same, 0.0, (hi - lo) / 2), np.where(same, lo, (lo + hi) / 2)
    why = "alpha*other fused in the vector loop, rounded to the low format in the scalar loop"
    return bounded(to(one, out), err, why, center=center)


def _binary(
    kind: str, a: np.ndarray, b: Any, alpha: Any, out: str, fused: bool, inplace: bool
) -> Out:
    if kind in ("add", "sub"):
        return _add(a, b, alpha, out, fused, -1.0 if kind == "sub" else 1.0)
    y = _operand(b, out)
    if (
        out in _LOW
        and not isinstance(b, np.ndarray)
        and (kind != "mul" or inplace)
        and kind != "div"
    ):
        # measured: maximum/minimum and in-place mul_ round a Python scalar to the low format
        # first; mul and div keep it in float32
        y = to(y, out)
    if kind == "mul":
        return _calc(out, lambda x, z: x * z, a, y)
    if kind == "div":
        return _calc(out, lambda x, z: x / z, a, y)
    nan = np.isnan
    if kind == "maximum":
        r = _calc(out, lambda x, z: np.where(nan(x) | nan(z), np.nan, np.where(z > x, z, x)), a, y)
    else:
        r = _calc(out, lambda x, z: np.where(nan(x) | nan(z), np.nan, np.where(z < x, z, x)), a, y)
    if not isinstance(b, np.ndarray):
        return r  # a Scalar other is clamp_min/clamp_max: every loop keeps ``self`` on a tie
    # on a tie of +0 and -0 the scalar loop keeps ``self``, the vector loop (max_ps/min_ps)
    # the other operand: which elements take which loop is not known
    zeros = (a == 0) & (np.asarray(y) == 0) & (np.signbit(a) != np.signbit(y))
    return bounded(r.value, 0.0, _ZERO_TIE) if zeros.any() else r


def _ternary(kind: str, s: np.ndarray, t1: np.ndarray, third: Any, out: str, fused: bool) -> Out:
    if kind == "lerp":
        w: Any = third
        if out == "float64":
            w64 = np.asarray(w if isinstance(w, np.ndarray) else float(w), np.float64)
            return _f64("lerp", s.astype(np.float64), t1.astype(np.float64), w64, None, fused)
        wv = arr(w, "weights") if isinstance(w, np.ndarray) else scalar32(w, "weight")
        r, r_scalar = (
            to(x, out) for x in lerp32(arr(s, "self"), arr(t1, "tensors1"), wv, fused=fused)
        )
        same = np.array_equal(r.view(np.uint8), r_scalar.view(np.uint8))
        return exact(r) if same else bounded(r, 0.0, _ZERO_SIGN)
    t2, value = third
    if out == "float64":
        return _f64(kind, s.astype(np.float64), t1.astype(np.float64), t2.astype(np.float64),
                    float(value), fused)  # fmt: skip
    if out not in _VIA32:
        raise TypeError(f"output dtype {out!r} is not float32/float16/bfloat16/float64")
    x, y, z, v = arr(s, "self"), arr(t1, "tensor1"), arr(t2, "tensor2"), scalar32(value)
    r = addcmul32(x, y, z, v, fused=fused) if kind == "addcmul" else addcdiv32(x, y, z, v)
    return exact(to(r, out))


def _unary(kind: str, a: np.ndarray, out: str) -> Out:
    if kind == "zero":
        return exact(np.zeros_like(a))
    if kind == "neg":
        return exact(-a)
    if kind == "abs":
        return exact(np.abs(a))
    if kind == "sign":  # NaN and -0 give +0
        with np.errstate(invalid="ignore"):
            return exact(np.where(a > 0, 1, np.where(a < 0, -1, 0)).astype(a.dtype))
    if kind == "reciprocal":
        return _calc(out, lambda x: 1 / x, a)
    if out not in (*_VIA32, "float64"):
        raise TypeError(f"sqrt: output dtype {out!r} is not floating")
    with np.errstate(invalid="ignore"):
        center = np.sqrt(a.astype(np.float64))
        value = to(np.sqrt(a.astype(np.float64 if out == "float64" else F32)), out)
    # 1 ulp of the kernel's own float32 (float64) result, ulp(x) <= 2^-23 |x| (2^-52 |x|),
    # plus the float64 center's own rounding
    rel = 2.0**-52 + 2.0**-53 if out == "float64" else 2.0**-23 + 2.0**-52
    return bounded(value, rel * np.abs(np.nan_to_num(center, nan=0.0)), _SQRT, center=center)


def _norm(a: np.ndarray, ord_: Any, out: str) -> Out:
    x = np.abs(a.astype(np.float64)).ravel()
    o = float(ord_)
    if o in (np.inf, -np.inf):
        if x.size == 0:
            return exact(to(np.float64(0.0), out).reshape(()))
        return exact(to(np.float64(x.max() if o > 0 else x.min()), out).reshape(()))
    if o not in (1.0, 2.0):
        raise ValueError(f"ord: {ord_!r} is not emulated; accepted: 1, 2, inf, -inf")
    k = max(x.size, 1)
    gamma = k * _U / (1 - k * _U) if k * _U < 0.5 else np.inf
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.sum(x * x) if o == 2.0 else np.sum(x)  # float64: error 2^-53 K sum, folded below
        center = np.sqrt(s) if o == 2.0 else s
        err = (gamma + k * 2.0**-52) * center + (0 if out == "float32" else _U * center)
    value = to(np.float64(center), out).reshape(())
    why = (f"float32 sum of {x.size} terms in an unspecified order: "
           "|error| <= gamma_K * norm, gamma_K = K u/(1 - K u), u = 2^-24")  # fmt: skip
    return bounded(value, err, why, center=center)


def _copy(a: np.ndarray, src: np.ndarray, out: str) -> Out:
    if out in _LOW and src.dtype == np.float64:
        src = to(src, "float32")
    return exact(np.array(np.broadcast_to(to(src, out), a.shape)))


def foreach(call: Call) -> list[Out | None]:
    """Every ``_foreach_`` op this module registers: one Out per tensor of the list."""
    base, overload = call.op.split(".")[1:3]
    kind = base.removeprefix("_foreach_").removesuffix("_")
    fused = simd(call)
    selfs = _tensors(call.arg(0, "self"), "self")
    outs = _out_list(call, len(selfs))
    if kind == "norm":
        return [_norm(a, call.arg(1, "ord", 2), o) for a, o in zip(selfs, outs, strict=True)]
    if kind == "copy":  # src converted to self's dtype (through float32 for the low formats)
        srcs = _tensors(call.arg(1, "src"), "src")
        return [_copy(a, src, o) for a, src, o in zip(selfs, srcs, outs, strict=True)]
    if kind in _UNARY:
        return [_unary(kind, a, o) for a, o in zip(selfs, outs, strict=True)]
    if kind in _BINARY:
        other = call.arg(1, "other" if overload in ("List", "Tensor") else "scalar")
        if overload == "ScalarList":
            other = call.arg(1, "scalars")
        bs = _per(other, len(selfs), overload, "other")
        alpha = call.kwargs.get("alpha", 1)
        inplace = base.endswith("_")
        return [_binary(kind, a, b, alpha, o, fused, inplace)
                for a, b, o in zip(selfs, bs, outs, strict=True)]  # fmt: skip
    t1 = _tensors(call.arg(1, "tensors1" if kind == "lerp" else "tensor1"), "tensors1")
    if kind == "lerp":
        third = _per(call.arg(2, "weight"), len(selfs), overload, "weight")
    else:
        t2 = _tensors(call.arg(2, "tensor2"), "tensor2")
        raw = call.arg(3, "value" if overload == "Scalar" else "scalars", 1)
        if overload == "Tensor":  # a 1-D tensor of one value per list element, read as double
            raw = [float(v) for v in np.asarray(raw, np.float64).ravel()]
        vals = _per(raw, len(selfs), "List" if overload == "Tensor" else overload, "scalars")
        third = list(zip(t2, vals, strict=True))
    return [
        _ternary(kind, s, t, th, o, fused)
        for s, t, th, o in zip(selfs, t1, third, outs, strict=True)
    ]


def _names() -> list[str]:
    ops = [f"{k}.{o}" for k, os in (*_BINARY.items(), *_TERNARY.items()) for o in os]
    ops += [f"{k}.default" for k in _UNARY if k != "zero"]
    got = [f"aten._foreach_{n}" for n in ops] + [
        f"aten._foreach_{n.replace('.', '_.', 1)}" for n in ops
    ]
    return [*got, "aten._foreach_zero_.default", "aten._foreach_norm.Scalar",
            "aten._foreach_copy_.default"]  # fmt: skip


register(*_names())(foreach)
