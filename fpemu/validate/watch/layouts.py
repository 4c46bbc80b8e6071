"""Views judged by their layout: a repeated view op is proved identical without NumPy.

A view op's emulation (:mod:`fpemu.validate.ops.views`) is NumPy's view of torch's input: where
the judge finds torch's output at the same address with the same strides as that view (the
same-memory proof, :func:`fpemu.validate.watch.verdict.judge_view`), the two are equal for *any*
values, because both read the same memory the same way. That proof depends only on the input's
layout (dtype, shape, strides), the op's other arguments and the emulation; so once made, a later
call with the same key whose outputs lie at the same place relative to its input, in the same
storage, with the same shapes and strides, is identical too. The watcher then skips converting
the tensors and rerunning the emulation (a training step repeats each of its ~160 views every
step). A call whose outputs lie anywhere else is judged in full, as the first one was; an
emulation replaced since (a planted fault, a user's own) is part of the key, so it judges anew.

>>> import torch
>>> from fpemu.validate.ops import lookup
>>> forget()  # no proof made yet
>>> x = torch.zeros(3, 4)
>>> k = key("aten.t.default", lookup("aten.t.default"), (x,), {})
>>> lay = of(x, [x.t()])
>>> seen(k, lay)
False
>>> remember(k, lay); seen(k, lay), seen(k, of(x, [x.t().contiguous()]))
(True, False)
"""

from __future__ import annotations

from typing import Any

__all__ = ["forget", "key", "of", "remember", "seen"]

#: proved (key, layout) pairs; cleared when it holds this many (a long run of ever new shapes)
CAP = 4096
_PROVED: dict[Any, Any] = {}
#: argument types a key may hold as they are (hashable, compared by value)
_PLAIN = (int, float, bool, str, type(None))


def _tensor_types() -> tuple[type, ...]:
    """The tensor types whose storage is their memory (a subclass with its own dispatch, a
    fake or distributed tensor, is judged in full)."""
    global _TENSORS
    if _TENSORS is None:
        import torch  # noqa: PLC0415

        _TENSORS = (torch.Tensor, torch.nn.Parameter)
    return _TENSORS


_TENSORS: tuple[type, ...] | None = None


def _hashable(x: Any) -> Any:
    """``x`` as a hashable value of the key, or raise TypeError (a tensor, an unknown type)."""
    if isinstance(x, _PLAIN):
        return (type(x).__name__, x)  # 1, 1.0 and True differ as arguments
    if isinstance(x, (list, tuple)):
        return tuple(_hashable(v) for v in x)
    import torch  # noqa: PLC0415 - only the watcher calls this

    if isinstance(x, (torch.dtype, torch.memory_format, torch.layout, torch.device)):
        return x
    raise TypeError(type(x).__name__)


def key(name: str, emulation: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The key of a view call: the op, its emulation, the input tensor's dtype, shape and strides
    and the other arguments; None where it has none (no single tensor input first, or another
    tensor among the arguments)."""
    if not args or type(args[0]) not in _tensor_types():
        return None
    base = args[0]
    try:
        rest = _hashable(args[1:]), _hashable(sorted(kwargs.items()))
    except TypeError:
        return None
    return name, emulation, base.dtype, tuple(base.shape), base.stride(), rest


def of(base: Any, outs: list[Any]) -> Any:
    """Where the outputs lie relative to ``base``: per output its dtype, shape, strides and
    storage offset minus ``base``'s; None if one is not in ``base``'s storage (or is not a
    plain tensor)."""
    ptr, off = base.untyped_storage().data_ptr(), base.storage_offset()
    where = []
    for t in outs:
        if type(t) not in _tensor_types() or t.untyped_storage().data_ptr() != ptr:
            return None
        where.append((t.dtype, tuple(t.shape), t.stride(), t.storage_offset() - off))
    return tuple(where)


def seen(k: Any, layout: Any) -> bool:
    """Whether a call with key ``k`` was proved identical with its outputs at ``layout``."""
    return k is not None and _PROVED.get(k) == layout


def remember(k: Any, layout: Any) -> None:
    """A call with key ``k`` was proved identical by the same-memory proof at ``layout``."""
    if len(_PROVED) >= CAP:
        _PROVED.clear()
    _PROVED[k] = layout


def forget() -> None:
    """Drop every proof (tests)."""
    _PROVED.clear()
