"""Reductions as torch 2.13's CPU kernels compute them: ``sum`` and ``mean`` (bounded: the
vectorised multi-level cascade's order is not pinned here), ``amax``/``amin``/``max``/``min``
(exact: a maximum does not depend on the order), integer and bool sums (exact).

Float sums accumulate in float32 opmath for float32, bfloat16 and float16 inputs (float64 for
float64) and round once to the output dtype: the kernel's value lies within the recursive
summation bound ``gamma_{K-1} * sum|x_i|`` (``gamma_n = n u / (1 - n u)``, ``u = 2**-24``) of
the exact sum, for any order or tree of K terms. ``mean`` is that sum divided by K (or times
``1/K``): two more roundings at most. The interval's ends are rounded to the output format
(``_iv.iv_out``), so where the bound is below half an ulp a result one ulp off is caught.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> out = sum_(Call("aten.sum.dim_IntList", (np.float32([[1, 2], [3, 4]]), [1]), {},
...                 ("float32",)))[0]
>>> out.value.tolist(), out.exact
([3.0, 7.0], False)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact, lazy
from fpemu.validate.ops._fp import quiet
from fpemu.validate.ops._iv import IV, iv_ends, iv_out
from fpemu.validate.ops._num import dtype, is_float, to

__all__ = ["amax", "maxmin_dim", "mean", "sum_", "vector_norm"]

_WHY = "float32 sum in an order not pinned: gamma_{K-1} * sum|x|"


def _axes(x: np.ndarray, dim: Any) -> tuple[int, ...]:
    """The reduced axes: all for None or an empty list (torch's convention), else ``dim``."""
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return tuple(range(x.ndim))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return tuple(sorted(d % x.ndim if x.ndim else 0 for d in dims))


def _sum_center(x: np.ndarray, axes: tuple[int, ...], keep: bool,
                u: float) -> tuple[np.ndarray, np.ndarray, int, float]:  # fmt: skip
    """``x`` widened to float64, its float64 sum (the center), K the number of terms per output
    and gamma_(K-1) of unit ``u``."""
    v = np.asarray(x, np.float64)
    k = math.prod(x.shape[a] for a in axes) if x.ndim else 1
    total = np.sum(v, axis=axes, keepdims=keep) if x.ndim else v
    return v, total, k, (k - 1) * u / (1 - (k - 1) * u) if k > 1 else 0.0


def _sum_err(x: np.ndarray, v: np.ndarray, axes: tuple[int, ...], keep: bool, k: int,
             g: float) -> np.ndarray:  # fmt: skip
    """The bound on the kernel's sum around :func:`_sum_center`'s center: ``gamma_(K-1)
    sum|x|``, plus NumPy's float64 pairwise sum of the center (within ``k * 2**-53 * sum|x|``).
    The magnitudes go in ``v``'s own buffer where ``v`` is a copy (a widened 16-bit/float32
    input; the center is taken): a second array of x's size costs more than its pass
    (measured)."""
    mag = np.abs(v, out=v if v is not x and x.ndim else None)
    absum = np.sum(mag, axis=axes, keepdims=keep) if x.ndim else mag
    return np.asarray(g * absum + k * 2.0**-52 * absum)


def _sum_iv(x: np.ndarray, axes: tuple[int, ...], keep: bool, u: float) -> tuple[IV, int]:
    """The exact sum (float64) and its bound; K the number of terms per output."""
    v, total, k, g = _sum_center(x, axes, keep, u)
    return IV(total, _sum_err(x, v, axes, keep, k, g)), k


def _name_dt(call: Call, x: np.ndarray) -> tuple[str, float]:
    name = call.out_dtypes[0]
    u = 2.0**-53 if name == "float64" or x.dtype == np.float64 else 2.0**-24
    return name, u


@quiet("aten.sum.default", "aten.sum.dim_IntList")
def sum_(call: Call) -> list[Out | None]:
    """``sum(self, dim=None, keepdim=False, *, dtype=None)``."""
    x = call.args[0]
    dim = call.arg(1, "dim") if call.op.endswith("dim_IntList") else None
    keep = bool(call.arg(2, "keepdim", False)) if call.op.endswith("dim_IntList") else False
    name, u = _name_dt(call, x)
    axes = _axes(x, dim)
    if not is_float(name):  # integer/bool sums: exact in int64
        r = np.sum(x.astype(dtype(name)), axis=axes, keepdims=keep) if x.ndim else x
        return [exact(np.asarray(r).astype(dtype(name)))]
    # the value now, the bound only where the watcher asks (where torch's result differs, in
    # few calls): its sum of magnitudes is as costly as the sum itself. The same numbers as
    # ``iv_out(*_sum_iv(...))``: the same helpers, and iv_ends is elementwise, so its ends at
    # some elements are its ends of the whole at those elements.
    v, total, k, g = _sum_center(x, axes, keep, u)
    value = to(total, name)
    errs: list[np.ndarray] = []  # the whole err, formed on the first call

    def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not errs:
            with np.errstate(invalid="ignore", over="ignore"):
                errs.append(np.ravel(_sum_err(x, v, axes, keep, k, g)))
        return iv_ends(IV(np.ravel(total)[idx], errs[0][idx]), name)

    return [lazy(value, bound, _WHY)]


@quiet("aten.mean.default", "aten.mean.dim")
def mean(call: Call) -> list[Out | None]:
    """``mean(self, dim=None, keepdim=False, *, dtype=None)``: the sum over K, two roundings."""
    x = call.args[0]
    dim = call.arg(1, "dim") if call.op.endswith(".dim") else None
    keep = bool(call.arg(2, "keepdim", False)) if call.op.endswith(".dim") else False
    name, u = _name_dt(call, x)
    iv, k = _sum_iv(x, _axes(x, dim), keep, u)
    m = iv.v / k
    e = iv.e / k
    e = e + 2 * u * (np.abs(m) + e)  # sum/K or sum*(1/K): the division's (or 1/K's) roundings
    return [iv_out(m, IV(m, e), name, _WHY + "; /K")]


def _reduce(x: np.ndarray, axes: tuple[int, ...], keep: bool, f: Any) -> np.ndarray:
    if x.ndim == 0:
        return x
    return np.asarray(f(x, axis=axes, keepdims=keep))


@quiet("aten.amax.default", "aten.amin.default", "aten.max.default", "aten.min.default")
def amax(call: Call) -> list[Out | None]:
    """The largest (smallest) element, NaN if any is NaN: exact."""
    x = call.args[0]
    big = ".amax." in call.op or ".max." in call.op
    f = np.max if big else np.min
    if call.op.startswith(("aten.amax", "aten.amin")):
        axes, keep = _axes(x, call.arg(1, "dim", [])), bool(call.arg(2, "keepdim", False))
    else:
        axes, keep = tuple(range(x.ndim)), False
    return [exact(_reduce(x, axes, keep, f).astype(x.dtype))]


@quiet("aten.max.dim", "aten.min.dim")
def maxmin_dim(call: Call) -> list[Out | None]:
    """``(values, indices)`` along ``dim``: the first index of the extreme (of the first NaN)."""
    x, d = call.args[0], int(call.args[1])
    keep = bool(call.arg(2, "keepdim", False))
    big = call.op == "aten.max.dim"
    if x.ndim == 0:
        return [exact(x), exact(np.asarray(0, np.int64))]
    arg = np.argmax if big else np.argmin
    idx = arg(x, axis=d, keepdims=keep)
    nan = np.isnan(x.astype(np.float64))
    if nan.any():  # NaN is the extreme: the first NaN's index
        first = np.argmax(nan, axis=d, keepdims=keep)
        idx = np.where(nan.any(axis=d, keepdims=keep), first, idx)
    vals = np.take_along_axis(x, np.expand_dims(idx, d) if not keep else idx, axis=d)
    vals = vals if keep else np.squeeze(vals, axis=d)
    return [exact(np.asarray(vals).astype(x.dtype)), exact(np.asarray(idx, np.int64))]


@quiet("aten.prod.default", "aten.prod.dim_int")
def prod(call: Call) -> list[Out | None]:
    """The product of the elements: exact for integers and bools (Keras multiplies shapes so,
    wrapping as C integers do); for floats bounded by the product's ``(n-1)`` roundings in the
    compute dtype, ``gamma_(n-1) |p|`` (Higham, eq. 3.5), then one rounding to the output."""
    x = np.asarray(call.args[0])
    name = call.out_dtypes[0]
    dim = call.arg(1, "dim") if call.op.endswith("dim_int") else None
    keep = bool(call.arg(2, "keepdim", False)) if dim is not None else False
    axes = None if dim is None else (dim % max(x.ndim, 1),)
    if not is_float(name):
        with np.errstate(over="ignore"):
            return [exact(np.prod(x, axis=axes, keepdims=keep).astype(dtype(name)))]
    p = np.prod(x.astype(np.float64), axis=axes, keepdims=keep)
    n = x.size if axes is None else (x.shape[axes[0]] if x.ndim else 1)
    u = 2.0**-53 if name == "float64" else 2.0**-24
    err = np.abs(p) * ((n - 1) * u / (1 - (n - 1) * u) + n * 2.0**-53)
    return [bounded(to(p, name), err, f"float product of {n} factors in any order", center=p)]


@quiet("aten.all.default", "aten.all.dim", "aten.all.dims", "aten.any.default", "aten.any.dim",
       "aten.any.dims")  # fmt: skip
def all_any(call: Call) -> list[Out | None]:
    """``all``/``any`` over all or some dimensions (exact)."""
    x = np.asarray(call.args[0]) != 0
    dim = call.arg(1, "dim")
    keep = bool(call.arg(2, "keepdim", False))
    axes = None if dim is None else tuple(d % max(x.ndim, 1) for d in
                                          ([dim] if isinstance(dim, int) else dim))  # fmt: skip
    f = np.all if call.op.startswith("aten.all") else np.any
    return [exact(np.asarray(f(x, axis=axes, keepdims=keep)))]


@quiet("aten.linalg_vector_norm.default")
def vector_norm(call: Call) -> list[Out | None]:
    """``linalg_vector_norm(x, ord, dim, keepdim, dtype)`` (``clip_grad_norm_``'s total norm,
    ``torch.norm``): ord +-inf exact (a maximum/minimum of magnitudes), ord 0 exact (a count),
    ord 1 and 2 bounded. The kernel sums |x| or x*x in float32 opmath (float64 for float64) in
    an order not pinned: each square rounds once and K terms add with K - 1 roundings, all
    terms non-negative, so the sum is within gamma_K of the exact one relatively; the square
    root halves that relative error and its own rounding to float32 is one more ulp before
    the rounding to the output dtype (2**-23 relative). Other orders are not emulated
    (ValueError: the watcher lists the op as not emulated).

    >>> import numpy as np
    >>> o = vector_norm(Call("aten.linalg_vector_norm.default", (np.float32([3, 4]),), {},
    ...                      ("float32",)))[0]
    >>> float(o.value), o.exact
    (5.0, False)
    """
    x = call.args[0]
    ord_ = float(call.arg(1, "ord", 2))
    axes = _axes(x, call.arg(2, "dim", None))
    keep = bool(call.arg(3, "keepdim", False))
    name = call.out_dtypes[0]
    a = np.abs(np.asarray(x, np.float64))
    if ord_ in (np.inf, -np.inf):
        r = _reduce(a, axes, keep, np.max if ord_ > 0 else np.min)
        return [exact(to(np.asarray(r, np.float64), name))]
    if ord_ == 0:
        return [exact(to(_reduce((a != 0).astype(np.float64), axes, keep, np.sum), name))]
    if ord_ not in (1.0, 2.0):
        raise ValueError(f"ord={ord_!r}: not emulated; accepted 0, 1, 2, inf, -inf")
    u = 2.0**-53 if x.dtype == np.float64 else 2.0**-24
    k = math.prod(x.shape[i] for i in axes) if x.ndim else 1
    gamma = k * u / (1 - k * u) if k * u < 0.5 else np.inf
    s = _reduce(a * a if ord_ == 2.0 else a, axes, keep, np.sum)
    center = np.sqrt(s) if ord_ == 2.0 else s
    # the float64 center's own pairwise-sum error (k 2**-52) and the float32 result's rounding
    rel = gamma + k * 2.0**-52 + (2 * u if ord_ == 2.0 and name != "float64" else 0.0)
    what = "sum of squares then sqrt" if ord_ == 2 else "sum of magnitudes"
    why = (f"{what} of {k} terms in float32 in an order not pinned: relative error <= gamma_K "
           "(+ the sqrt's ulp)")  # fmt: skip
    return [bounded(to(np.asarray(center, np.float64), name), rel * np.asarray(center), why,
                    center=np.asarray(center, np.float64))]  # fmt: skip
