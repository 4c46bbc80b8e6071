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

import functools
from dataclasses import dataclass
from typing import Any

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


@functools.cache
def plan(func: Any) -> Plan:
    """The :class:`Plan` of an ATen overload (cached per overload)."""
    schema = func._schema
    written = [i for i, a in enumerate(schema.arguments) if a.alias_info and a.alias_info.is_write]
    written += [i for i in UNDECLARED_WRITES.get(str(func), ()) if i not in written]
    fresh = sum(1 for r in schema.returns if not (r.alias_info and r.alias_info.is_write))
    return Plan(tuple(written), fresh)


def _arg(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], i: int) -> Any:
    if i < len(args):
        return args[i]
    return kwargs.get(func._schema.arguments[i].name)


def _flat(x: Any) -> list[Any]:
    import torch  # noqa: PLC0415

    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for item in x for t in _flat(item)]
    return []


def written_ids(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> frozenset[int]:
    """``id`` of every tensor argument the op will overwrite."""
    return frozenset(id(t) for i in plan(func).written for t in _flat(_arg(func, args, kwargs, i)))


def outputs(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> list[Any]:
    """The op's output tensors in the order the emulations return them (see the module doc)."""
    p = plan(func)
    fresh: list[Any] = []
    if p.returns:
        rets = result if isinstance(result, tuple) else (result,)
        schema_rets = func._schema.returns
        for r, value in zip(schema_rets, rets, strict=False):
            if not (r.alias_info and r.alias_info.is_write):
                fresh += _flat(value)
    for i in p.written:
        fresh += _flat(_arg(func, args, kwargs, i))
    return fresh
