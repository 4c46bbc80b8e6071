"""What an ATen op reads and writes, from its schema: which arguments an in-place op
overwrites (copied before it runs) and which tensors are its outputs (judged after it runs).

The outputs of an op, in order: the tensors it returns that are not aliases of an argument it
writes (flattened: lists of tensors count element by element), then every tensor argument it
writes, in argument order (``add_`` -> ``[self]``; ``_foreach_mul_`` -> ``self``'s tensors;
``_amp_update_scale_`` -> ``[scale, growth_tracker]``). ``native_batch_norm`` updates its running
statistics without saying so in its schema; :data:`UNDECLARED_WRITES` adds them.

>>> import torch
>>> plan(torch.ops.aten.add_.Tensor)
Plan(written=(0,), returns=0)
>>> plan(torch.ops.aten.native_layer_norm.default)
Plan(written=(), returns=3)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fpemu.validate.watch.convert import _types

__all__ = ["UNDECLARED_WRITES", "Plan", "outputs", "plan", "written_ids"]

#: ops that overwrite arguments their schema does not mark as written (argument positions)
UNDECLARED_WRITES: dict[str, tuple[int, ...]] = {
    "aten.native_batch_norm.default": (3, 4),
}


@dataclass(frozen=True)
class Plan:
    """Argument positions an op writes, and how many of its returns are new tensors."""

    written: tuple[int, ...]
    returns: int
    #: per schema return: whether it is a new tensor (not an alias of an argument it writes)
    fresh: tuple[bool, ...] = field(default=(), repr=False)
    #: the schema's argument names (for an argument passed by keyword)
    names: tuple[str, ...] = field(default=(), repr=False)


#: id of an ATen overload -> (the overload, its Plan): the watcher asks for every op it sees,
#: and an overload's own ``__hash__`` is a Python function (a dict by ``id`` is one lookup;
#: overloads live as long as torch, and the stored one guards against a reused id)
_PLANS: dict[int, tuple[Any, Plan]] = {}


def plan(func: Any) -> Plan:
    """The :class:`Plan` of an ATen overload (cached per overload)."""
    hit = _PLANS.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    schema = func._schema
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info and a.alias_info.is_write]
    written += [i for i in UNDECLARED_WRITES.get(str(func), ()) if i not in written]
    fresh = tuple(not (r.alias_info and r.alias_info.is_write) for r in schema.returns)
    names = tuple(a.name for a in schema.arguments)
    p = Plan(tuple(written), sum(fresh), fresh, names)
    _PLANS[id(func)] = (func, p)
    return p


def _arg(p: Plan, args: tuple[Any, ...], kwargs: dict[str, Any], i: int) -> Any:
    if i < len(args):
        return args[i]
    return kwargs.get(p.names[i])


def _flat(x: Any) -> list[Any]:
    if isinstance(x, _types()[0]):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _flat(item)]
    return []


_NONE: frozenset[int] = frozenset()


def written_ids(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> frozenset[int]:
    """``id`` of every tensor argument the op will overwrite."""
    p = plan(func)
    if not p.written:
        return _NONE
    return frozenset(id(t) for i in p.written for t in _flat(_arg(p, args, kwargs, i)))


def outputs(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> list[Any]:
    """The op's output tensors in the order the emulations return them (see the module doc)."""
    p = plan(func)
    fresh: list[Any] = []
    if p.returns:
        rets = result if isinstance(result, tuple) else (result,)
        for is_fresh, value in zip(p.fresh, rets, strict=False):
            if is_fresh:
                fresh += _flat(value)
    for i in p.written:
        fresh += _flat(_arg(p, args, kwargs, i))
    return fresh
