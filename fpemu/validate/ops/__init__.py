"""Emulations of the ATen ops torch dispatches, one table shared by ``watch`` and ``emulate``.

Each entry takes an :class:`Call` (the op's arguments with every tensor replaced by a NumPy
array in its own dtype: ``float32``, ``float16``, ml_dtypes ``bfloat16``, ints, bools) and
returns one :class:`Out` per tensor output of the op, or None for an output it does not judge.

An :class:`Out` carries

* ``value``: fpemu's result in the output's dtype, every rounding a visible call. ``emulate``
  hands this value back to torch; ``watch`` compares torch's bits with it.
* ``exact``: the claim that torch's CPU kernel computes exactly ``value`` (for this op, dtype
  and ``ATEN_CPU_CAPABILITY``); a test proves each such claim against torch.
* where not exact, ``center`` and ``err``: the kernel's value before its final rounding lies
  within ``err`` of ``center`` (float64, elementwise), and ``reason`` says why (reduction
  order, libm, a float32 evaluation's cancellation). torch's result is then admissible when it
  is the output format's rounding of some value in ``[center - err, center + err]``.

The table is data: :data:`TABLE` maps the ATen overload name (``"aten.addmm.default"``, as
``str(func)`` prints it) to its emulation; modules of this package register theirs on import.

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> call = Call("aten._to_copy.default", (np.float32([0.1, 2.0]),), {}, ("bfloat16",))
>>> out = lookup("aten._to_copy.default")(call)[0]
>>> out.value.astype(float).tolist(), out.exact
([0.10009765625, 2.0], True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["TABLE", "Call", "Emulation", "Out", "bounded", "builtin", "exact", "gather", "lazy",
           "lookup", "names", "register"]  # fmt: skip


@dataclass(frozen=True)
class Call:
    """One dispatched op as the emulations see it.

    Attributes:
        op: the ATen overload name, ``str(func)`` (``"aten.addmm.default"``).
        args, kwargs: the op's arguments; tensors are NumPy arrays in their own dtype
            (bfloat16 as ml_dtypes.bfloat16), lists of tensors are lists of arrays; a torch
            dtype argument is its format name (``"bfloat16"``); other values as torch gave them.
        out_dtypes: the format name of each tensor output torch produced (``"float32"``,
            ``"bfloat16"``, ``"int64"``, ``"bool"``), in output order (flattened lists).
        capability: torch's ``ATEN_CPU_CAPABILITY`` in force (``"default"``, ``"avx2"``,
            ``"avx512"``): some kernels fuse a multiply-add only on the SIMD builds.
        model: the accumulation model matmul-class ops use in ``emulate`` (None in ``watch``:
            torch's CPU GEMM order is not specified, so its value is bounded).
        options: anything else an emulation needs from its caller. ``watch`` passes
            ``"outputs"``: torch's own outputs (NumPy, schema order), for the few ops whose
            result is not a function of their inputs (a random mask is judged given torch's
            own draw), and ``"num_threads"``: torch's intra-op thread count (per-thread partial
            sums of LayerNorm/BatchNorm parameter gradients depend on it), and ``"mkldnn"``:
            ``torch.backends.mkldnn.enabled`` (off, torch runs ATen's GELU kernels instead of
            oneDNN's); ``emulate`` passes its policy.
    """

    op: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    out_dtypes: tuple[str, ...]
    capability: str = "avx512"
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def arg(self, i: int, name: str, default: Any = None) -> Any:
        """Argument ``i`` positionally, else keyword ``name``, else ``default``.

        >>> Call("aten.x", (1,), {"b": 2}, ()).arg(1, "b")
        2
        """
        if i < len(self.args):
            return self.args[i]
        return self.kwargs.get(name, default)


@dataclass(frozen=True)
class Out:
    """fpemu's result for one tensor output, and how closely torch's kernel is claimed to match.

    Attributes:
        value: the result in the output's dtype (an array of the same shape as torch's).
        exact: torch's kernel computes exactly ``value`` (proved per op, dtype and capability).
        center: where not exact, an estimate of the kernel's value before its final rounding
            (any float dtype: its values are what count); defaults to ``value``.
        err: where not exact, a bound (scalar or elementwise) on ``|kernel's value - center|``
            before the final rounding to the output format.
        reason: why the result is bounded rather than exact, with the bound's derivation.
        bound: instead of ``center``/``err``, a function giving both (float64 arrays) at flat
            indices of the output: the watcher needs them only where torch's result differs
            from ``value``, a small part of a large output, so an emulation whose bound costs
            more than its value computes it there only (:func:`lazy`).
        quick: optionally, with ``bound``, a cheaper function of the same indices whose range
            at each element (``[RN(center - err), RN(center + err)]``) lies inside ``bound``'s
            (a smaller error that often already admits torch's value): the judge asks ``bound``
            only where ``quick``'s range does not admit it, so the verdicts are ``bound``'s.
    """

    value: np.ndarray
    exact: bool = True
    center: np.ndarray | None = None
    err: np.ndarray | float | None = None
    reason: str = ""
    bound: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    quick: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None

    def bounds_at(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """``(center, err)`` as float64 at the flat indices ``idx`` (None: no bound).

        >>> o = bounded(np.float32([1.0, 2.0]), 0.5, "r")
        >>> [a.tolist() for a in o.bounds_at(np.array([1]))]
        [[2.0], [0.5]]
        """
        shape = np.shape(self.value)
        if self.bound is not None:
            c, e = self.bound(idx)
            return np.asarray(c, np.float64), np.asarray(e, np.float64)
        if self.err is None:
            return None

        def at(a: Any) -> np.ndarray:
            return np.asarray(gather(a, shape, idx), np.float64)

        return at(self.center if self.center is not None else self.value), at(self.err)


def gather(a: Any, shape: tuple[int, ...], idx: np.ndarray) -> np.ndarray:
    """``a`` broadcast to ``shape``, at the flat (C order) indices ``idx``: the elements of
    ``np.broadcast_to(a, shape).reshape(-1)[idx]``, without making that whole array (which
    reshaping a broadcast view does: a scalar err would cost an array of the output's size
    at every judged output). Raises where ``broadcast_to`` raises.

    >>> gather(np.float32([1.0, 2.0, 3.0]), (2, 3), np.array([1, 5])).tolist()
    [2.0, 3.0]
    """
    arr = np.asarray(a)
    if arr.shape == shape and arr.flags.c_contiguous:
        return np.asarray(arr.reshape(-1)[idx])  # a view: the same flat order
    view = np.broadcast_to(arr, shape)  # (``shape`` is not () here: that raised, or was met)
    if arr.ndim == 0:
        return np.full(np.shape(idx), arr, arr.dtype)  # every element is the scalar
    # the same elements: unravel_index inverts the C-order flattening of ``shape``
    return np.asarray(view[np.unravel_index(idx, shape)])


#: one emulation: the call -> one Out (or None: not judged) per tensor output
Emulation = Callable[[Call], Sequence[Out | None]]

#: ATen overload name -> emulation; filled by the modules of this package on import
TABLE: dict[str, Emulation] = {}

#: the modules that register emulations (imported on first lookup)
_MODULES = (
    "views", "casts", "matmul", "elementwise", "libm", "activations", "gelu", "softmax", "norms",
    "losses",
    "reductions", "embedding", "conv", "attention", "dropout", "optim", "optim_foreach",
    "optim_fused", "scaler",
)  # fmt: skip
_loaded: list[bool] = []


def register(*ops: str) -> Callable[[Emulation], Emulation]:
    """Decorator: register an emulation under one or more ATen overload names.

    >>> @register("aten.example_identity.default")
    ... def _ident(call): return [exact(call.args[0])]
    >>> "aten.example_identity.default" in TABLE
    True
    >>> del TABLE["aten.example_identity.default"]
    """

    def deco(fn: Emulation) -> Emulation:
        for op in ops:
            if op in TABLE and TABLE[op] is not fn:
                raise ValueError(f"op {op!r} is registered twice")
            TABLE[op] = fn
        return fn

    return deco


#: the table as fpemu's own modules fill it (what a fresh process has)
_BUILTIN: dict[str, Emulation] = {}


def _load() -> None:
    if _loaded:
        return
    _loaded.append(True)
    for mod in _MODULES:
        try:
            importlib.import_module(f"fpemu.validate.ops.{mod}")
        except ModuleNotFoundError as exc:  # a family not written yet is simply absent
            if exc.name != f"fpemu.validate.ops.{mod}":
                raise
    _BUILTIN.update(TABLE)


def builtin(op: str) -> bool:
    """Whether ``op``'s emulation is fpemu's own, as a fresh process would look it up (not one
    registered or replaced since): only those may be computed in a worker process.

    >>> builtin("aten.mm.default"), builtin("aten.no_such_op.default")
    (True, False)
    """
    _load()
    fn = TABLE.get(op)
    return fn is not None and _BUILTIN.get(op) is fn


def lookup(op: str) -> Emulation | None:
    """The emulation registered for ATen overload ``op``, or None (the op is not emulated)."""
    _load()
    return TABLE.get(op)


def names() -> list[str]:
    """Every ATen overload name with an emulation, sorted.

    >>> "aten.mm.default" in names()
    True
    """
    _load()
    return sorted(TABLE)


def exact(value: Any) -> Out:
    """An :class:`Out` claiming torch computes exactly ``value`` (an array in the output dtype).

    >>> exact(np.float32([1.5])).exact
    True
    """
    return Out(np.asarray(value))


def lazy(
    value: Any,
    bound: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    reason: str,
    *,
    quick: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
) -> Out:
    """A bounded :class:`Out` whose ``(center, err)`` are computed by ``bound(flat_indices)``
    only where they are needed (``quick``: see :class:`Out`).

    >>> o = lazy(np.float32([1.0, 2.0]), lambda i: (i * 1.0 + 1, i * 0.0 + 0.25), "r")
    >>> [a.tolist() for a in o.bounds_at(np.array([0, 1]))]
    [[1.0, 2.0], [0.25, 0.25]]
    """
    return Out(np.asarray(value), exact=False, reason=reason, bound=bound, quick=quick)


def bounded(value: Any, err: Any, reason: str, *, center: Any = None) -> Out:
    """An :class:`Out` whose kernel value lies within ``err`` of ``center`` (default ``value``).

    >>> bounded(np.float32([1.0]), 1e-7, "float32 sum order").exact
    False
    """
    v = np.asarray(value)
    # not widened here: the judge widens only the elements that differ
    c = v if center is None else np.asarray(center)
    return Out(v, exact=False, center=c, err=err, reason=reason)
