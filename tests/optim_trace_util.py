"""A dispatch mode for the optimizer/scaler tests: run real torch code (an optimizer step, a
GradScaler step, clip_grad_norm_) and judge every dispatched op in a chosen set against its
emulation, from the op's own inputs (in-place arguments copied before the op runs)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

from fpemu.validate.ops import Call, lookup
from fpemu.validate.watch.convert import dtype_name, to_numpy, tree_to_numpy
from fpemu.validate.watch.schema import outputs, written_ids
from fpemu.validate.watch.verdict import judge
from tests.watch_ops_util import capability


class _Judge(TorchDispatchMode):
    def __init__(self, ops: Callable[[str], bool]) -> None:
        super().__init__()
        self.ops = ops
        self.seen: dict[str, list[str]] = {}
        self.all: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        name = str(func)
        self.all.append(name)
        if not self.ops(name):
            return func(*args, **kwargs)
        ids = written_ids(func, args, kwargs)
        np_args = tree_to_numpy(args, copy_ids=ids)
        np_kwargs = tree_to_numpy(kwargs, copy_ids=ids)
        result = func(*args, **kwargs)
        outs = outputs(func, args, kwargs, result)
        dts = tuple(dtype_name(t.dtype) for t in outs)
        call = Call(name, tuple(np_args), dict(np_kwargs), dts, capability=capability())
        emulation = lookup(name)
        assert emulation is not None, name
        for t, e in zip(outs, emulation(call), strict=True):
            if e is not None:
                self.seen.setdefault(name, []).append(judge(to_numpy(t), e).verdict)
        return result


def trace_judged(fn: Callable[[], Any], ops: Iterable[str] | Callable[[str], bool]) -> _Judge:
    """Run ``fn`` judging each dispatched op named in ``ops`` (or for which ``ops(name)``)."""
    pick = ops if callable(ops) else set(ops).__contains__
    mode = _Judge(pick)
    with mode:
        fn()
    return mode
