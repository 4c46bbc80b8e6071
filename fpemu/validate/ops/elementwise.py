"""Elementwise arithmetic, comparisons and selections of torch 2.13's CPU kernels.

Every kernel computes in ``opmath`` (float32 for float32, bfloat16 and float16; float64 for
float64) and rounds once to the output dtype. A Python scalar reaches the kernel as a double
converted once to float32 (``original_scalar_value<opmath_t>``); where it is first stored in the
tensor's dtype (comparisons, ``masked_fill``, ``fill_``'s bounds) it is converted
``double -> float -> dtype`` (two roundings), as measured by the tests.

torch 2.13 CPU, measured (tests/test_ops_elementwise.py): ``add``/``sub`` with ``alpha != 1``
fuse ``a + alpha*b`` into one FMA on the AVX2/AVX512 builds and round twice (``alpha*b`` then the
sum) on ``ATEN_CPU_CAPABILITY=default``. The transcendentals and powers (``exp``, ``log``,
``sqrt``, ``rsqrt``, ``pow``) are in :mod:`fpemu.validate.ops.libm`.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> out = mul(Call("aten.mul.Tensor", (np.float32([3.0]), 0.1), {}, ("float32",)))[0]
>>> out.value.tolist(), out.exact
([0.30000001192092896], True)
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact
from fpemu.validate.ops._fp import fma, hull_out, quiet, scalar
from fpemu.validate.ops._num import LOW, dtype, fmt, is_float, to, ulp

__all__ = ["add", "binary", "compare", "div", "mul"]


def _cdt(name: str) -> np.dtype[Any]:
    """The dtype the kernel computes an output of dtype ``name`` in (opmath)."""
    cdt = _CDT.get(name)
    if cdt is None:
        if name == "float64":
            cdt = np.dtype(np.float64)
        elif is_float(name):
            cdt = np.dtype(np.float32)
        else:
            cdt = dtype(name)
        _CDT[name] = cdt
    return cdt


#: output dtype name -> opmath dtype (:func:`_cdt`, asked on every call of every op here)
_CDT: dict[str, np.dtype[Any]] = {}


def _val(x: Any, cdt: np.dtype[Any]) -> Any:
    """An operand in the compute dtype: arrays widen exactly (a float32 0-d tensor beside a
    bfloat16 tensor is read in float32, ``original_scalar_value``), Python scalars via double."""
    if isinstance(x, np.ndarray):
        return x.astype(cdt, copy=False)  # read only
    if cdt.kind in "iub":
        return np.asarray(x).astype(cdt)[()]
    if type(x) in (bool, int, float):  # the optimizers' scalars, every step: remembered
        return _scalar_builtin(type(x).__name__, x, repr(x), cdt)
    return scalar(x, cdt)


@functools.lru_cache(maxsize=4096)
def _scalar_builtin(_kind: str, v: Any, _text: str, cdt: np.dtype[Any]) -> Any:
    """:func:`scalar` of a bool/int/float, keyed as :func:`_stored_builtin` (a NumPy scalar:
    immutable)."""
    return scalar(v, cdt)


def _stored(v: Any, name: str) -> Any:
    """A Python scalar stored in dtype ``name`` the way ``Scalar::to<scalar_t>`` does: a double
    converted to float first, then to a 16-bit format (two roundings)."""
    if isinstance(v, np.ndarray):
        return v.astype(np.float64).astype(np.float32) if is_float(name) else v
    if type(v) in (bool, int, float):
        # the optimizers pass the same few scalars (eps, 1 for a step count) every step; the
        # key tells -0.0 from 0.0 (equal, same hash) by its repr
        return _stored_builtin(type(v).__name__, v, repr(v), name)
    return _store(v, name)


@functools.lru_cache(maxsize=4096)
def _stored_builtin(_kind: str, v: Any, _text: str, name: str) -> Any:
    """:func:`_store` of a bool/int/float, remembered (a NumPy scalar: immutable)."""
    return _store(v, name)


def _store(v: Any, name: str) -> Any:
    if not is_float(name):
        return np.asarray(v).astype(dtype(name))[()]
    f = np.asarray([float(v)], np.float64)
    return to(f.astype(np.float32) if name != "float64" else f, name).reshape(())[()]


def _operand(x: Any, name: str, cdt: np.dtype[Any]) -> np.ndarray:
    """An operand of a ufunc kernel: a Python scalar or a 0-d tensor of another dtype is
    stored in the output dtype (``original_scalar_value<scalar_t>``, a copy: a double goes
    through float first, measured), then widened."""
    if isinstance(x, np.ndarray) and (x.ndim or x.dtype == dtype(name)):
        return x.astype(cdt, copy=False)  # read only: no copy where it is already opmath
    v = x.item() if isinstance(x, np.ndarray) else x
    if type(v) in (bool, int, float):  # the optimizers' scalars, every step: remembered
        return _widened_builtin(type(v).__name__, v, repr(v), name, cdt)
    return np.asarray(_stored(v, name)).astype(cdt)


@functools.lru_cache(maxsize=4096)
def _widened_builtin(kind: str, v: Any, text: str, name: str, cdt: np.dtype[Any]) -> np.ndarray:
    """``np.asarray(_stored(v, name)).astype(cdt)`` of a bool/int/float (keyed as
    :func:`_stored_builtin`), read-only: a 0-d array shared by every call that reads it."""
    out = np.asarray(_stored_builtin(kind, v, text, name)).astype(cdt)
    out.setflags(write=False)
    return out


def binary(call: Call, f: Callable[[Any, Any], Any]) -> list[Out | None]:
    """``f(a, b)`` in opmath, rounded once to the output dtype. ``b`` as a Python scalar or a 0-d
    tensor is read in opmath (``original_scalar_value<opmath_t>``); ``a`` as a 0-d tensor of
    another dtype is first stored in the output dtype (measured)."""
    name = call.out_dtypes[0]
    cdt = _cdt(name)
    a, b = _operand(call.args[0], name, cdt), _val(call.arg(1, "other"), cdt)
    with np.errstate(all="ignore"):
        r = np.asarray(f(a, b))
    return [exact(to(r.astype(cdt, copy=False), name))]


@quiet("aten.add.Tensor", "aten.add_.Tensor", "aten.add.Scalar", "aten.add_.Scalar",
          "aten.sub.Tensor", "aten.sub_.Tensor", "aten.sub.Scalar", "aten.sub_.Scalar",
          "aten.rsub.Scalar", "aten.rsub.Tensor")  # fmt: skip
def add(call: Call) -> list[Out | None]:
    """``a + alpha*b`` (``sub``: ``a - alpha*b``; ``rsub``: ``b - alpha*a``), the ufunc kernel.

    Python scalars and ``alpha`` are stored in the tensor dtype (``Scalar::to<scalar_t>``). With
    ``alpha == 1`` one rounding. Otherwise the vector path is one FMA (``vec::fmadd``) and the
    scalar path ``a + alpha*b`` in the dtype's own arithmetic (16-bit formats round the product
    too); ``default`` runs the scalar path everywhere. On the SIMD builds the elements of a
    loop's tail take the scalar path; which ones depends on torch's chunking, so 16-bit results
    are bounded by the two and float32 is exact (its scalar path fuses as well: measured).
    float64 on the SIMD builds: the FMA value is within ``ulp(c)/2 + ulp(alpha*b)/2`` of the
    twice-rounded ``c`` (NumPy has no float64 FMA).
    """
    name = call.out_dtypes[0]
    cdt = _cdt(name)
    a, b = call.args[0], call.arg(1, "other")
    if call.op.startswith("aten.rsub"):
        a, b = b, a
    a, b = _operand(a, name, cdt), _operand(b, name, cdt)
    alpha = call.kwargs.get("alpha", call.args[2] if len(call.args) > 2 else 1)
    neg = call.op.startswith(("aten.sub", "aten.rsub"))
    if cdt.kind != "f":
        with np.errstate(all="ignore"):
            r = a - b * alpha if neg else a + b * alpha
        return [exact(np.asarray(r).astype(dtype(name)))]
    al = _operand(-alpha if neg else alpha, name, cdt)  # stored in the dtype, then opmath
    one = float(al)  # exact (float32/float64); NaN compares unequal
    if one == 1.0 or one == -1.0:  # b * (+-1) is exact: one sum or difference, one rounding
        with np.errstate(all="ignore"):
            return [exact(to(np.asarray(a + b if one == 1.0 else a - b), name))]
    shape = np.broadcast_shapes(np.shape(a), np.shape(b))
    a, b = np.broadcast_to(a, shape), np.broadcast_to(b, shape)
    with np.errstate(all="ignore"):
        scalar_path = to(a + to(b * al, name).astype(cdt), name)
        if call.capability == "default":
            return [exact(scalar_path)]
        if name == "float64":
            c = a + b * al
            err = ulp(c, name) / 2 + ulp(b * al, name) / 2
            return [bounded(c, err, "float64 FMA, NumPy rounds twice: ulp(c)/2 + ulp(alpha*b)/2")]
        fused = to(fma(b, np.broadcast_to(al, shape).astype(cdt), a), name)
    if name == "float32":
        return [exact(fused)]
    return [hull_out(fused, [fused, scalar_path], name, "vector FMA or scalar tail (bf16 ops)")]


@quiet("aten.mul.Tensor", "aten.mul_.Tensor", "aten.mul.Scalar", "aten.mul_.Scalar")
def mul(call: Call) -> list[Out | None]:
    """``a * b`` in opmath, one rounding."""
    return binary(call, lambda a, b: a * b)


def _floor_div(a: np.ndarray, b: np.ndarray, r: Callable[[Any], np.ndarray]) -> np.ndarray:
    """``c10::div_floor_floating``: Python's floor division through ``fmod``, each step rounded
    by ``r`` (the 16-bit formats' vector kernel rounds every step to the format: measured)."""
    with np.errstate(all="ignore"):
        mod = r(np.fmod(a, b))
        d = r(r(a - mod) / b)
        d = np.where((mod != 0) & ((b < 0) != (mod < 0)), r(d - 1), d)
        fl = np.floor(d)
        fl = np.where(r(d - fl) > 0.5, r(fl + 1), fl)
        q = np.where(d != 0, fl, np.copysign(np.zeros_like(d), r(a / b)))
        return np.asarray(np.where(b == 0, r(a / b), q))


@quiet("aten.div.Tensor", "aten.div_.Tensor", "aten.div.Scalar", "aten.div_.Scalar",
          "aten.div.Tensor_mode", "aten.div_.Tensor_mode")  # fmt: skip
def div(call: Call) -> list[Out | None]:
    """True division in opmath (an integer pair divides in float32); ``rounding_mode`` 'trunc'
    truncates the quotient, 'floor' is ``div_floor_floating`` (floating outputs)."""
    name = call.out_dtypes[0]
    mode = call.kwargs.get("rounding_mode", call.args[2] if len(call.args) > 2 else None)
    if mode not in (None, "trunc", "floor"):
        raise ValueError(f"rounding_mode {mode!r}: accepted None, 'trunc', 'floor'")
    if mode is not None and not is_float(name):
        cdt = _cdt(name)
        a, b = _val(call.args[0], cdt), _val(call.args[1], cdt)
        with np.errstate(all="ignore"):
            q = np.floor_divide(a, b) if mode == "floor" else np.trunc(a / b).astype(cdt)
        return [exact(np.asarray(q).astype(dtype(name)))]
    if mode is None:
        return binary(call, lambda a, b: a / b)
    cdt = _cdt(name)
    a, b = _operand(call.args[0], name, cdt), _operand(call.args[1], name, cdt)
    a, b = np.broadcast_arrays(a, b)

    def rnd(v: Any) -> np.ndarray:  # float32/float64: no rounding between the steps
        return np.asarray(to(np.asarray(v, cdt), name).astype(cdt) if name in LOW else v, cdt)

    with np.errstate(all="ignore"):
        q = np.trunc(rnd(a / b)) if mode == "trunc" else _floor_div(a, b, rnd)
    return [exact(to(np.asarray(q, cdt), name))]


@quiet("aten.maximum.default", "aten.minimum.default")
def maxmin(call: Call) -> list[Out | None]:
    """NaN-propagating max/min. The sign of a zero from ``max(-0, +0)`` differs between the
    vectorised and scalar paths, so equal zeros are admitted either way (err 0 around 0)."""
    f = np.maximum if call.op == "aten.maximum.default" else np.minimum
    name = call.out_dtypes[0]
    cdt = _cdt(name)
    a, b = _val(call.args[0], cdt), _val(call.args[1], cdt)
    r = to(np.asarray(f(a, b)).astype(cdt), name)
    zeros = np.asarray((a == 0) & (b == 0))
    if cdt.kind == "f" and zeros.any():
        return [bounded(r, 0.0, "max/min of +0 and -0: either zero")]
    return [exact(r)]


def unary(call: Call, f: Callable[[np.ndarray], np.ndarray]) -> list[Out | None]:
    """``f(x)`` in opmath, one rounding to the output dtype."""
    name = call.out_dtypes[0]
    x = call.args[0].astype(_cdt(name))
    with np.errstate(all="ignore"):
        return [exact(to(np.asarray(f(x)), name))]


quiet("aten.neg.default", "aten.neg_.default")(lambda c: unary(c, np.negative))
quiet("aten.abs.default", "aten.abs_.default")(lambda c: unary(c, np.abs))
quiet("aten.reciprocal.default", "aten.reciprocal_.default")(
    lambda c: unary(c, lambda x: np.asarray(x.dtype.type(1) / x))
)


@quiet("aten.clamp.default", "aten.clamp_.default", "aten.clamp_min.default",
          "aten.clamp_min_.default", "aten.clamp_max.default",
          "aten.clamp_max_.default")  # fmt: skip
def clamp(call: Call) -> list[Out | None]:
    """``min(max(x, lo), hi)`` with NaN propagating; Scalar bounds stored in opmath."""
    name = call.out_dtypes[0]
    cdt = _cdt(name)
    x = call.args[0].astype(cdt)
    if call.op.startswith("aten.clamp_min"):
        lo, hi = call.arg(1, "min"), None
    elif call.op.startswith("aten.clamp_max"):
        lo, hi = None, call.arg(1, "max")
    else:
        lo, hi = call.arg(1, "min"), call.arg(2, "max")
    r = x
    # std::max(x, lo) keeps x unless x < lo (NaN and -0 vs +0 stay x); likewise for min
    if lo is not None:
        r = np.where(r < _val(lo, cdt), _val(lo, cdt), r)
    if hi is not None:
        r = np.where(r > _val(hi, cdt), _val(hi, cdt), r)
    return [exact(to(np.asarray(r).astype(cdt), name))]


@quiet("aten.where.self")
def where(call: Call) -> list[Out | None]:
    """``cond ? a : b`` with both operands cast to the output dtype (a double 0-d tensor rounds
    once to it)."""
    name = call.out_dtypes[0]
    cond, a, b = call.args[0], call.args[1], call.args[2]
    av, bv = _operand(np.asarray(a), name, _cdt(name)), _operand(np.asarray(b), name, _cdt(name))
    av, bv = to(av, name), to(bv, name)
    return [exact(np.where(cond, av, bv))]


@quiet("aten.masked_fill.Scalar", "aten.masked_fill_.Scalar", "aten.masked_fill.Tensor",
          "aten.masked_fill_.Tensor")  # fmt: skip
def masked_fill(call: Call) -> list[Out | None]:
    """``mask ? value : x``; the value stored in x's dtype (``Scalar::to<scalar_t>``)."""
    x, mask, v = call.args[0], call.args[1], call.arg(2, "value")
    name = call.out_dtypes[0]
    if isinstance(v, np.ndarray):
        v = v.item()
    return [exact(np.where(mask, np.asarray(_stored(v, name)).astype(x.dtype), x))]


@quiet("aten.fill_.Tensor")
def fill(call: Call) -> list[Out | None]:
    """Every element set to the value stored in the tensor's dtype."""
    x, v = call.args[0], call.arg(1, "value")
    if isinstance(v, np.ndarray):
        v = v.item()
    return [exact(np.full(x.shape, _stored(v, call.out_dtypes[0]), x.dtype))]


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
        "gt": np.greater, "ge": np.greater_equal}  # fmt: skip


def compare(call: Call) -> list[Out | None]:
    """A comparison in the operands' common dtype: a Python scalar beside a tensor is stored in
    the tensor's dtype first (``double -> float -> dtype``), a tensor pair widens exactly."""
    f = _CMP[call.op.split(".")[1].rstrip("_")]
    a, b = call.args[0], call.arg(1, "other")
    if not isinstance(b, np.ndarray):
        b = _stored(b, fmt(a))
    elif a.dtype != b.dtype and (a.ndim == 0) != (b.ndim == 0):
        # a 0-d tensor beside a tensor takes the tensor's dtype (double -> float -> dtype)
        small, big = (a, b) if a.ndim == 0 else (b, a)
        conv = np.asarray(_stored(small.item(), fmt(big)) if is_float(fmt(big)) else small)
        a, b = (conv, big) if a.ndim == 0 else (big, conv)
    with np.errstate(invalid="ignore"):
        r = np.asarray(f(np.asarray(a), np.asarray(b)))
    return [exact(r.astype(dtype(call.out_dtypes[0])))]


for _k in _CMP:
    quiet(f"aten.{_k}.Scalar", f"aten.{_k}.Tensor", f"aten.{_k}_.Scalar", f"aten.{_k}_.Tensor")(
        compare
    )


@quiet("aten.bitwise_not.default", "aten.logical_not.default")
def bitwise_not(call: Call) -> list[Out | None]:
    """``~x`` for bools and integers; ``logical_not``: ``x == 0`` (exact)."""
    x = np.asarray(call.args[0])
    if call.op == "aten.logical_not.default":
        return [exact(np.asarray(x == 0).astype(dtype(call.out_dtypes[0])))]
    return [exact(np.invert(x))]
