"""Ops that move, select or create values without arithmetic: views, copies, joins, factories.

No rounding happens in any of them, so each emulation claims exactness: the value is NumPy's
reshape, transpose, slice, gather or fill of torch's own input. Factories of a Python number
(``full``, ``fill_``) convert it as torch does: a double goes to float32 first and then to a
low format (two roundings: ``torch.full((1,), 1 + 2**-8 + 2**-40, dtype=bfloat16)`` is 1.0).

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> call = Call("aten.t.default", (np.float32([[1, 2]]),), {}, ("float32",))
>>> out = lookup("aten.t.default")(call)
>>> out[0].value.tolist()
[[1.0], [2.0]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, exact, register
from fpemu.validate.ops._num import dtype, to

__all__ = ["scalar_to"]


def scalar_to(value: Any, name: str) -> np.ndarray:
    """A Python number as torch stores it in dtype ``name`` (a 0-d array).

    torch converts a double to float32 and then to a 16-bit format: two roundings.

    >>> float(scalar_to(1 + 2**-8 + 2**-40, "bfloat16"))
    1.0
    """
    dt = dtype(name)
    if dt.kind in "iub":
        return np.asarray(value).astype(dt)
    if name == "float64":
        return np.asarray(value, np.float64)
    return to(np.asarray(value, np.float32), name)


def _same(call: Call) -> Sequence[Out | None]:
    return [exact(np.array(call.args[0], copy=True))]


def _alias(call: Call) -> Sequence[Out | None]:
    # the input itself: torch's output is a view of the same memory (schema ``Tensor(a)``), so
    # the judge proves them equal without reading the values
    return [exact(np.asarray(call.args[0]))]


def _dim(d: int, ndim: int) -> int:
    return d + max(ndim, 1) if d < 0 else d


register("aten.detach.default", "aten.alias.default", "aten.lift_fresh.default")(_alias)
register("aten.clone.default", "aten.lift_fresh_copy.default")(_same)


@register(
    "aten.view.default",
    "aten._unsafe_view.default",
    "aten.reshape.default",
    "aten._reshape_alias.default",
)
def _view(call: Call) -> Sequence[Out | None]:
    return [exact(np.reshape(call.args[0], tuple(call.args[1])))]


@register("aten.t.default")
def _t(call: Call) -> Sequence[Out | None]:
    return [exact(np.asarray(call.args[0]).T)]


@register("aten.transpose.int")
def _transpose(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    return [
        exact(np.swapaxes(a, _dim(call.arg(1, "dim0"), a.ndim), _dim(call.arg(2, "dim1"), a.ndim)))
    ]


@register("aten.permute.default")
def _permute(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    return [exact(np.transpose(a, [_dim(d, a.ndim) for d in call.arg(1, "dims")]))]


@register("aten.expand.default")
def _expand(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    size = list(call.arg(1, "size"))
    lead = len(size) - a.ndim
    shape = [a.shape[i - lead] if s == -1 else s for i, s in enumerate(size)]
    return [exact(np.broadcast_to(a, shape))]


@register("aten.unsqueeze.default")
def _unsqueeze(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    return [exact(np.expand_dims(a, _dim(call.arg(1, "dim"), a.ndim + 1)))]


@register("aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default")
def _squeeze(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    dims = call.arg(1, "dim")
    if dims is None:
        return [exact(np.squeeze(a))]
    dims = [dims] if isinstance(dims, int) else list(dims)
    keep = tuple(d for d in (_dim(d, a.ndim) for d in dims) if a.ndim and a.shape[d] == 1)
    return [exact(np.squeeze(a, keep) if keep else a)]


@register("aten.slice.Tensor")
def _slice(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    d = _dim(call.arg(1, "dim", 0), a.ndim)
    start, end, step = call.arg(2, "start"), call.arg(3, "end"), call.arg(4, "step", 1)
    index = [slice(None)] * a.ndim
    index[d] = slice(start, end, step)
    return [exact(a[tuple(index)])]


@register("aten.select.int")
def _select(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    return [exact(np.take(a, call.arg(2, "index"), axis=_dim(call.arg(1, "dim"), a.ndim)))]


@register("aten.narrow.default")
def _narrow(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    d, start, length = _dim(call.args[1], a.ndim), call.args[2], call.args[3]
    index = [slice(None)] * a.ndim
    index[d] = slice(start, start + length)
    return [exact(a[tuple(index)])]


def _split_at(a: np.ndarray, sizes: Sequence[int], d: int) -> list[Out | None]:
    bounds = np.cumsum(sizes)[:-1]
    return [exact(p) for p in np.split(a, bounds, axis=d)]


@register("aten.split.Tensor")
def _split(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    d = _dim(call.arg(2, "dim", 0), a.ndim)
    size = call.arg(1, "split_size")
    n = a.shape[d]
    sizes = [min(size, n - i) for i in range(0, n, size)] if n else [0]
    return _split_at(a, sizes, d)


@register("aten.split_with_sizes.default")
def _split_sizes(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    return _split_at(a, list(call.arg(1, "split_sizes")), _dim(call.arg(2, "dim", 0), a.ndim))


@register("aten.unbind.int")
def _unbind(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    d = _dim(call.arg(1, "dim", 0), a.ndim)
    return [exact(np.take(a, i, axis=d)) for i in range(a.shape[d])]


def _joined(call: Call) -> list[np.ndarray]:
    name = call.out_dtypes[0]  # torch promotes the inputs to the result type: exact widenings
    return [
        to(np.asarray(t), name) if np.asarray(t).dtype != dtype(name) else np.asarray(t)
        for t in call.args[0]
    ]


@register("aten.cat.default")
def _cat(call: Call) -> Sequence[Out | None]:
    parts = [p for p in _joined(call) if not (p.ndim == 1 and p.size == 0)]  # legacy empty
    d = call.arg(1, "dim", 0)
    if not parts:
        return [exact(np.zeros((0,), dtype(call.out_dtypes[0])))]
    return [exact(np.concatenate(parts, axis=_dim(d, parts[0].ndim)))]


@register("aten.stack.default")
def _stack(call: Call) -> Sequence[Out | None]:
    parts = _joined(call)
    return [exact(np.stack(parts, axis=_dim(call.arg(1, "dim", 0), parts[0].ndim + 1)))]


@register("aten.index_select.default")
def _index_select(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    return [exact(np.take(a, np.asarray(call.args[2]), axis=_dim(call.args[1], a.ndim)))]


@register("aten.index.Tensor")
def _index(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    index = tuple(slice(None) if i is None else np.asarray(i) for i in call.args[1])
    return [exact(a[index])]


@register("aten.gather.default")
def _gather(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    return [exact(np.take_along_axis(a, np.asarray(call.args[2]), axis=_dim(call.args[1], a.ndim)))]


@register("aten.tril.default", "aten.triu.default")
def _tri(call: Call) -> Sequence[Out | None]:
    a = np.asarray(call.args[0])
    k = call.arg(1, "diagonal", 0)
    keep = np.tri(a.shape[-2], a.shape[-1], k, dtype=bool)
    if call.op.startswith("aten.triu"):
        keep = ~np.tri(a.shape[-2], a.shape[-1], k - 1, dtype=bool)
    return [exact(np.where(keep, a, np.zeros((), a.dtype)))]


# -- factories -------------------------------------------------------------------------------
def _filled(shape: Any, value: Any, name: str) -> Out:
    return exact(np.full(tuple(shape), scalar_to(value, name), dtype(name)))


@register("aten.zeros.default", "aten.new_zeros.default", "aten.zeros_like.default")
def _zeros(call: Call) -> Sequence[Out | None]:
    shape = np.shape(call.args[0]) if call.op.endswith("like.default") else call.args[-1]
    if call.op.startswith("aten.new_"):
        shape = call.args[1]
    return [_filled(shape, 0, call.out_dtypes[0])]


@register("aten.ones.default", "aten.new_ones.default", "aten.ones_like.default")
def _ones(call: Call) -> Sequence[Out | None]:
    shape = np.shape(call.args[0]) if call.op.endswith("like.default") else call.args[-1]
    if call.op.startswith("aten.new_"):
        shape = call.args[1]
    return [_filled(shape, 1, call.out_dtypes[0])]


@register("aten.full_like.default")
def _full_like(call: Call) -> Sequence[Out | None]:
    return [_filled(np.shape(call.args[0]), call.args[1], call.out_dtypes[0])]


@register("aten.new_full.default")
def _new_full(call: Call) -> Sequence[Out | None]:
    return [_filled(call.args[1], call.args[2], call.out_dtypes[0])]


@register("aten.scalar_tensor.default")
def _scalar_tensor(call: Call) -> Sequence[Out | None]:
    return [_filled((), call.args[0], call.out_dtypes[0])]


# ``empty`` buffers hold whatever memory held: nothing to judge, but the op is known.
register(
    "aten.empty.memory_format",
    "aten.empty_like.default",
    "aten.new_empty.default",
    "aten.empty_strided.default",
    "aten.new_empty_strided.default",
)(lambda call: [None])


@register("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def _arange(call: Call) -> Sequence[Out | None]:
    name = call.out_dtypes[0]
    if dtype(name).kind not in "iu":
        return [None]  # float arange: torch's own step arithmetic (not judged)
    if call.op == "aten.arange.default":
        start, end, step = 0, call.args[0], 1
    else:
        start, end = call.args[0], call.args[1]
        step = call.arg(2, "step", 1) if call.op == "aten.arange.start_step" else 1
    return [exact(np.arange(start, end, step, dtype=dtype(name)))]


# -- backwards of selections: the gradient placed into zeros ------------------------------------
@register("aten.select_backward.default")
def _select_backward(call: Call) -> Sequence[Out | None]:
    g = np.asarray(call.args[0])
    sizes, d, i = list(call.args[1]), call.args[2], call.args[3]
    out = np.zeros(sizes, g.dtype)
    index: list[Any] = [slice(None)] * len(sizes)
    index[_dim(d, len(sizes))] = i
    out[tuple(index)] = g
    return [exact(out)]


@register("aten.as_strided.default", "aten.as_strided_.default")
def _as_strided(call: Call) -> Sequence[Out | None]:
    """``as_strided(self, size, stride, storage_offset=None)``: a view of the tensor's whole
    storage (its offset is absolute, not relative to ``self``), so it needs
    ``call.options["storage"]``: ``(the storage's bytes as a uint8 array, self's storage offset
    before the op)``, which ``watch`` passes. NumPy checks that the view lies inside the
    storage. Without it (``emulate``, where torch's own kernel runs views) nothing is judged."""
    storage = call.options.get("storage")
    if storage is None:
        return [None]
    buf, self_offset = storage
    a = np.asarray(call.args[0])
    offset = call.arg(3, "storage_offset")
    item = a.dtype.itemsize
    start = (self_offset if offset is None else int(offset)) * item
    strides = tuple(int(st) * item for st in call.arg(2, "stride"))
    view = np.ndarray(tuple(call.arg(1, "size")), a.dtype, buffer=buf, offset=start,
                      strides=strides)  # fmt: skip
    return [exact(view)]


@register("aten.slice_backward.default")
def _slice_backward(call: Call) -> Sequence[Out | None]:
    g = np.asarray(call.args[0])
    sizes, d, start, end, step = list(call.args[1]), *call.args[2:6]
    out = np.zeros(sizes, g.dtype)
    index: list[Any] = [slice(None)] * len(sizes)
    index[_dim(d, len(sizes))] = slice(start, end, step)
    out[tuple(index)] = g
    return [exact(out)]


# -- random draws, judged given torch's own draw -----------------------------------------------
@register("aten.bernoulli_.float")
def _bernoulli(call: Call) -> Sequence[Out | None]:
    """CPU dropout's mask (``empty_like(x).bernoulli_(1 - p)``): which elements are kept is
    torch's random draw and cannot be recomputed; what can be judged is that the draw is a
    mask: every element exactly 0 or 1 (anything else is put to NaN so it differs)."""
    drawn = np.asarray(call.options["outputs"][0])
    ok = (drawn == 0) | (drawn == 1)
    nan = np.asarray(np.nan, np.float32).astype(drawn.dtype)
    return [exact(np.where(ok, drawn, nan))]


@register("aten.random_.default", "aten.random_.from", "aten.random_.to")
def _random(call: Call) -> Sequence[Out | None]:
    """Integer draws (Keras's seed generator): torch's own draw, judged to lie in the range the
    overload promises (``[from, to)``; ``default``: ``[0, 2**mantissa]`` for floats, the dtype's
    non-negative range for integers); an element outside it is put to the wrong side so it
    differs."""
    drawn = np.asarray(call.options["outputs"][0])
    lo = call.arg(1, "from", 0) if call.op != "aten.random_.default" else 0
    hi = call.arg(2, "to") if call.op == "aten.random_.from" else call.arg(1, "to")
    if call.op == "aten.random_.default":
        hi = None
    ok = drawn >= lo
    if hi is not None:
        ok &= drawn < hi
    return [exact(np.where(ok, drawn, np.asarray(lo - 1).astype(drawn.dtype)))]


@register("aten.fill_.Scalar", "aten.fill.Scalar")
def _fill(call: Call) -> Sequence[Out | None]:
    return [_filled(np.shape(call.args[0]), call.args[1], call.out_dtypes[0])]


@register("aten.zero_.default")
def _zero(call: Call) -> Sequence[Out | None]:
    return [_filled(np.shape(call.args[0]), 0, call.out_dtypes[0])]
