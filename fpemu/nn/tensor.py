"""A tiny array-valued reverse-mode autograd engine whose every rounding is explicit.

A :class:`Tensor` is an array plus the :class:`~fpemu.formats.Format` its values are exactly
representable in. Values are stored in float32 when the format fits in float32 (float16,
bfloat16, float8, ...), else in float64. Ops (in :mod:`fpemu.nn.functional`) pick their formats from
a :class:`~fpemu.amp.policy.Policy`, compute in float32/float64 "opmath" and round each result
with an explicit :func:`fpemu.rounding.round` call; matmuls go through
:func:`fpemu.linalg.matmul`. Each op keeps its forward and its ``_backward`` closure side by
side; the backward pass is a topological sort of the graph.
 The array is a NumPy or a CuPy array: every op takes its namespace from its data with
:func:`fpemu.backend.xp`, so a graph built on device arrays stays on the device
(:meth:`fpemu.nn.modules.Module.to` moves a model's parameters there). Roundings and accumulation
models
give the same bits on both; opmath functions (exp, tanh, reductions) are the namespace's own.

Gradients are rounded to the format of the tensor they belong to (``grad_fmt``, by default the
tensor's own format), as PyTorch stores a tensor's ``.grad`` in the tensor's dtype. The backward
of a cast rounds the gradient back to the source format, so an fp32 weight used by an fp16 op
gets an fp32 gradient holding fp16 values (amp.md 2.1, observed in torch 2.13).

>>> import numpy as np
>>> from fpemu.nn import functional as fn
>>> x = Tensor(np.array([[1.0, -2.0]]), "float32", requires_grad=True)
>>> y = fn.sum(fn.relu(x))
>>> y.backward()
>>> x.grad
array([[1., 0.]], dtype=float32)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from fpemu import rounding
from fpemu.amp.policy import Policy, autocast, get_policy
from fpemu.backend import to_numpy, xp
from fpemu.formats import Format, FormatLike, get_format
from fpemu.inputs import as_array, as_float_array
from fpemu.storage import format_of

__all__ = [
    "Array", "GradCheck", "Tensor", "autocast", "cast", "gradcheck", "round_to", "to_namespace",
    "work_dtype",
]  # fmt: skip

#: A NumPy or CuPy array (its namespace comes from :func:`fpemu.backend.xp`).
Array = Any

_F32 = np.finfo(np.float32)
_FLOAT32 = get_format("float32")
_FLOAT64 = get_format("float64")
_BFLOAT16 = get_format("bfloat16")
#: above this size rounding.round splits the work over threads (fpemu.parallel.tiles)
_BF16_KERNEL_MAX = 32 * rounding.BLOCK


def work_dtype(fmt: FormatLike) -> type[np.floating[Any]]:
    """The NumPy dtype ops compute in and hold ``fmt`` values in: float32 if it fits, else float64.

    >>> work_dtype("bf16").__name__, work_dtype("float64").__name__
    ('float32', 'float64')
    """
    f = fmt if type(fmt) is Format else get_format(fmt)
    hit = _WORK_DTYPES.get(id(f))  # by identity: hashing a Format hashes all its fields
    if hit is not None and hit[0] is f:
        return hit[1]
    fits = f.mbits <= 23 and f.smallest_subnormal >= 2.0**-149 and f.max <= float(_F32.max)
    dt = np.float32 if fits else np.float64
    if len(_WORK_DTYPES) >= 256:
        _WORK_DTYPES.clear()
    _WORK_DTYPES[id(f)] = (f, dt)  # holds f, so its id is not reused while cached
    return dt


_WORK_DTYPES: dict[int, tuple[Format, type[np.floating[Any]]]] = {}


def round_to(x: Any, fmt: FormatLike) -> Array:
    """Round ``x`` to ``fmt`` (RNE, the format's own subnormal/overflow rules) in its storage dtype.

    A float32 array rounded to float32 (or float64 to float64) is returned as is: that rounding
    is the identity, so the call to :func:`fpemu.rounding.round` is skipped.

    >>> round_to(np.array([0.1]), "bf16")
    array([0.10009766], dtype=float32)
    """
    f = fmt if type(fmt) is Format else get_format(fmt)
    m = np if type(x) is np.ndarray else xp(x)
    arr = m.asarray(x)
    if arr.dtype not in (np.float32, np.float64):
        arr = arr.astype(np.float64)
    if (f.name == "float32" and arr.dtype == np.float32) or (
        f.name == "float64" and arr.dtype == np.float64
    ):
        return arr
    if f is _BFLOAT16 and arr.dtype == np.float32 and m is np and arr.size < _BF16_KERNEL_MAX:
        # the bfloat16 kernel gives rounding.round's bits without its per-call dispatch (the
        # hot path of bf16 autocast: every op result and gradient); round() threads the rest
        return rounding.rne_bfloat16(arr)
    dt = work_dtype(f)
    if f == _FLOAT32 and arr.dtype == np.float64:
        # NumPy's float64 -> float32 conversion is the IEEE one: round-to-nearest-even with
        # subnormals and overflow to inf, the same values as rounding.round(arr, "float32")
        # (tests/test_autograd.py checks it), at memory speed.
        with np.errstate(over="ignore"):
            return arr.astype(np.float32)
    if arr.dtype == np.float32 and dt == np.float64:
        arr = arr.astype(np.float64)
    out = m.asarray(rounding.round(arr, f))
    return out.astype(dt, copy=False)


def to_namespace(a: Any, module: ModuleType, *, copy: bool = False) -> Array:
    """``a`` as an array of ``module`` (numpy or cupy): an explicit host/device transfer.

    Device arrays reach NumPy through :func:`fpemu.backend.to_numpy` (CuPy refuses implicit
    conversion); anything else goes through ``module.asarray``. ``copy=True`` always copies.

    >>> a = np.ones(2)
    >>> to_namespace(a, np) is a, to_namespace(a, np, copy=True) is a
    (True, False)
    """
    if module is np:
        return np.array(to_numpy(a)) if copy else to_numpy(a)
    return module.array(a) if copy else module.asarray(a)


def _default_format(dt: np.dtype[Any]) -> Format:
    """The format of float data's dtype (float16, ml_dtypes bfloat16, ...), else float64."""
    try:
        f = format_of(dt) if dt.kind in "fV" else _FLOAT64
    except ValueError:  # a dtype without an fpemu format (float128, ml_dtypes int4)
        return _FLOAT64
    return f if f.signed and f.zero else _FLOAT64  # scale formats (E8M0) hold no tensors


class Tensor:
    """An array whose values are exactly representable in ``fmt``, with an optional gradient.

    Args:
        data: values, as :mod:`fpemu.inputs` accepts them (arrays of any real dtype, lists,
            Python numbers, CPU torch tensors, CuPy arrays); rounded to ``fmt`` (RNE).
        fmt: the format (default: the format of float data's own dtype: float32, float16,
            bfloat16, float8_e4m3fn, ...; float64 for float64, integer, bool and Python data).
        requires_grad: whether backward should compute ``grad`` for this leaf.
        name: a label (used in statistics and state dicts).

    >>> t = Tensor([0.1, 3.0], "fp16")
    >>> t.fmt.name, t.data.dtype.name, float(t.data[0])
    ('float16', 'float32', 0.0999755859375)
    """

    __slots__ = (
        "_backward",
        "_prev",
        "data",
        "fmt",
        "grad",
        "grad_fmt",
        "name",
        "op",
        "requires_grad",
    )  # fmt: skip

    def __init__(
        self,
        data: Any,
        fmt: FormatLike | None = None,
        *,
        requires_grad: bool = False,
        name: str = "",
    ) -> None:
        src = as_array(data, arg="data")  # what fpemu.inputs accepts, torch tensors included
        if fmt is None:
            fmt = _default_format(src.dtype)
        arr = as_float_array(src, arg="data", keep32=True)
        if not isinstance(requires_grad, bool):
            raise TypeError(f"requires_grad must be a bool, got {requires_grad!r}")
        self.fmt: Format = get_format(fmt)
        self.data: Array = round_to(arr, self.fmt)
        self.grad_fmt: Format = self.fmt
        self.grad: Array | None = None
        self.requires_grad = requires_grad
        self.name = name
        self.op = "leaf"
        self._prev: tuple[Tensor, ...] = ()
        self._backward: Callable[[], None] | None = None

    @classmethod
    def derived(cls, data: Array, fmt: Format, parents: Sequence[Tensor], op: str) -> Tensor:
        """Make an op result: ``data`` must already be exact in ``fmt`` (no rounding here).

        Set ``result._backward`` to a closure that reads ``result.grad`` and calls
        :meth:`accumulate` on the parents; this is how custom ops are written.
        """
        t = cls.__new__(cls)
        t.data, t.fmt, t.grad_fmt, t.grad = data, fmt, fmt, None
        t.requires_grad = any(p.requires_grad for p in parents)
        t.name, t.op, t._prev, t._backward = "", op, tuple(parents), None
        return t

    # -- gradients ---------------------------------------------------------------------------
    def accumulate(self, g: Array, *, exact: bool = False) -> None:
        """Add ``g`` to ``grad``, rounding to ``grad_fmt`` (the sum is rounded again).

        ``exact=True`` promises that ``g`` already holds ``grad_fmt`` values in the storage dtype
        (skips the first rounding, which would be the identity).
        """
        if not self.requires_grad:
            return
        if exact:
            g = xp(g).asarray(g, work_dtype(self.grad_fmt))
        else:
            g = round_to(g, self.grad_fmt)
        g = g if g.flags.c_contiguous else g.copy()
        if g.shape != self.data.shape:
            raise ValueError(f"gradient shape {g.shape} != tensor shape {self.data.shape}")
        self.grad = g if self.grad is None else round_to(self.grad + g, self.grad_fmt)

    def zero_grad(self) -> None:
        """Forget the gradient."""
        self.grad = None

    def backward(self, grad: Any = None, *, exact: bool = False) -> None:
        """Reverse-mode sweep from this tensor; ``grad`` defaults to 1 for a one-element tensor.
        ``exact=True`` promises that ``grad`` already holds values of ``grad_fmt`` (its first
        rounding, the identity, is skipped: ``accumulate``).

        Raises:
            ValueError: no ``grad`` for a tensor with more than one element, or a shape mismatch.
        """
        if grad is None:
            if self.data.size != 1:
                raise ValueError(f"grad is needed for a non-scalar tensor of shape {self.shape}")
            grad = xp(self.data).ones_like(self.data)
        order: list[Tensor] = []
        seen: set[int] = set()
        stack: list[tuple[Tensor, bool]] = [(self, False)]
        while stack:  # iterative DFS post-order: deep graphs do not hit the recursion limit
            node, done = stack.pop()
            if done:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            stack.extend((p, False) for p in node._prev if p.requires_grad)
        was = self.requires_grad
        self.requires_grad = True
        m = xp(self.data)  # a NumPy ``grad`` for device data is copied over explicitly
        self.accumulate(m.broadcast_to(m.asarray(grad, dtype=self.data.dtype), self.shape),
                        exact=exact)  # fmt: skip
        self.requires_grad = was
        for node in reversed(order):
            if node._backward is not None and node.grad is not None:
                node._backward()

    # -- conveniences ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of ``data``."""
        return tuple(self.data.shape)

    def numpy(self) -> np.ndarray:
        """The values as a NumPy array (no copy for NumPy data, a host copy for device data)."""
        return to_numpy(self.data)

    def item(self) -> float:
        """The value of a one-element tensor as a Python float.

        Raises:
            ValueError: the tensor has more than one element.
        """
        if self.data.size != 1:
            raise ValueError(f"item() needs a one-element tensor, got shape {self.shape}")
        return float(self.data.reshape(-1)[0])

    def __repr__(self) -> str:
        return f"Tensor({self.data!r}, fmt={self.fmt.name}, op={self.op})"

    def __add__(self, other: Tensor | float) -> Tensor:
        return _OPERATORS["add"](self, other)

    __radd__ = __add__

    def __mul__(self, other: Tensor | float) -> Tensor:
        return _OPERATORS["mul"](self, other)

    __rmul__ = __mul__

    def __neg__(self) -> Tensor:
        return self * -1.0

    def __sub__(self, other: Tensor | float) -> Tensor:
        return self + (-other)

    def __rsub__(self, other: float) -> Tensor:
        return (-self) + other

    def __matmul__(self, other: Tensor) -> Tensor:
        return _OPERATORS["matmul"](self, other)


#: The differentiable ops behind Tensor's ``+``, ``*`` and ``@``. They live in
#: :mod:`fpemu.nn.functional` (forward and backward side by side), which depends on this module
#: and fills this table when imported (importing :mod:`fpemu.nn` always does), so the
#: dependency points one way: functional -> tensor.
_OPERATORS: dict[str, Callable[[Any, Any], Tensor]] = {}


def bind_operators(**ops: Callable[[Any, Any], Tensor]) -> None:
    """Set the functions behind Tensor's operators (``add``, ``mul``, ``matmul``).

    >>> sorted(_OPERATORS)   # functional has bound them
    ['add', 'matmul', 'mul']
    """
    unknown = set(ops) - {"add", "mul", "matmul"}
    if unknown:
        raise ValueError(
            f"bind_operators: unknown operator(s) {sorted(unknown)}; accepted: add, mul, matmul"
        )
    _OPERATORS.update(ops)


def cast(x: Tensor, fmt: FormatLike) -> Tensor:
    """Differentiable cast: round ``x`` to ``fmt``; its backward rounds the gradient back.

    >>> cast(Tensor([1.0 + 2**-9], "float32"), "bf16").data
    array([1.], dtype=float32)
    """
    f = get_format(fmt)
    if f == x.fmt:
        return x
    out = Tensor.derived(round_to(x.data, f), f, (x,), "cast")

    def _backward() -> None:
        assert out.grad is not None
        x.accumulate(out.grad)  # rounds to x's format: exact for an upcast

    out._backward = _backward
    return out


@dataclass(frozen=True)
class GradCheck:
    """Result of :func:`gradcheck`.

    ``worst`` is the largest ``|analytic - numeric| / (atol + rtol*|numeric|)``; ok means <= 1.
    """

    ok: bool
    worst: float
    per_input: tuple[float, ...]


def gradcheck(
    fn: Callable[..., Tensor],
    inputs: Sequence[np.ndarray],
    *,
    policy: Policy | str = "fp32",
    ref_policy: Policy | str = "float64",
    eps: float = 1e-6,
    rtol: float = 1e-4,
    atol: float = 1e-6,
    seed: int = 0,
) -> GradCheck:
    """Compare ``fn``'s analytic gradients under ``policy`` with float64 central differences.

    ``fn`` takes Tensors and returns a Tensor; a non-scalar result is contracted with a fixed
    random array first. The numeric derivative evaluates ``fn`` on float64 inputs under
    ``ref_policy`` (float64 arithmetic throughout). Inputs are rounded to the policy's ``param``
    format first so both sides see the same point. A host tool: ``inputs`` are NumPy arrays
    and ``fn`` runs on NumPy.

    >>> from fpemu.nn import functional as fn
    >>> gradcheck(lambda x: fn.tanh(x), [np.array([0.3, -1.2])]).ok
    True
    """
    pol, ref = get_policy(policy), get_policy(ref_policy)
    xs = [np.asarray(round_to(np.asarray(a, np.float64), pol.param), np.float64) for a in inputs]
    with autocast(pol):
        ts = [Tensor(a, pol.param, requires_grad=True) for a in xs]
        out = fn(*ts)
    weights = np.random.default_rng(seed).uniform(0.5, 1.5, out.shape)
    out.backward(weights.astype(out.data.dtype))

    def f64(vals: list[np.ndarray]) -> float:
        with autocast(ref):
            y = fn(*[Tensor(v, ref.param) for v in vals])
        return float(np.sum(np.asarray(y.data, np.float64) * weights))

    worst: list[float] = []
    for i, (t, a) in enumerate(zip(ts, xs, strict=True)):
        analytic = np.zeros_like(a) if t.grad is None else np.asarray(t.grad, np.float64)
        numeric = np.zeros_like(a)
        for j in range(a.size):
            hi, lo = [v.copy() for v in xs], [v.copy() for v in xs]
            hi[i].flat[j] += eps
            lo[i].flat[j] -= eps
            numeric.flat[j] = (f64(hi) - f64(lo)) / (2 * eps)
        err = np.abs(analytic - numeric) / (atol + rtol * np.abs(numeric))
        worst.append(float(err.max()) if err.size else 0.0)
    w = max(worst, default=0.0)
    return GradCheck(ok=w <= 1.0, worst=w, per_input=tuple(worst))
