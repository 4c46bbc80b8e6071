"""Test helpers for the op emulations: run one ATen op in torch, emulate it from the same inputs,
judge every output (the watcher's own path, without the dispatch mode).

``judged(torch.ops.aten.gelu.default, x)`` -> list of Judged (one per judged output).
``planted(op, *args)`` perturbs torch's first floating output by one ulp at one element and
returns the verdicts, to show a one-ulp fault is caught where the claim allows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from fpemu.validate.ops import Call, Out, lookup
from fpemu.validate.watch.convert import dtype_name, to_numpy, tree_to_numpy
from fpemu.validate.watch.schema import outputs, written_ids
from fpemu.validate.watch.verdict import Judged, judge


def capability() -> str:
    return str(torch.backends.cpu.get_cpu_capability()).lower()


def emulate(func: Any, *args: Any, **kwargs: Any) -> tuple[list[Any], list[Out | None]]:
    """torch's outputs of ``func(*args, **kwargs)`` and fpemu's emulations of them."""
    emulation = lookup(str(func))
    assert emulation is not None, f"{func} has no emulation"
    ids = written_ids(func, args, kwargs)
    np_args = tree_to_numpy(args, copy_ids=ids)
    np_kwargs = tree_to_numpy(kwargs, copy_ids=ids)
    result = func(*args, **kwargs)
    outs = outputs(func, args, kwargs, result)
    call = Call(str(func), tuple(np_args), dict(np_kwargs),
                tuple(dtype_name(t.dtype) for t in outs), capability=capability(),
                options={"outputs": [to_numpy(t) for t in outs],
                         "num_threads": torch.get_num_threads()})
    emulated = list(emulation(call))
    assert len(emulated) == len(outs), (len(emulated), len(outs))
    return outs, emulated


def judged(func: Any, *args: Any, **kwargs: Any) -> list[Judged]:
    """The verdict on each output fpemu judges."""
    outs, emulated = emulate(func, *args, **kwargs)
    return [judge(to_numpy(t), e) for t, e in zip(outs, emulated, strict=True) if e is not None]


def verdicts(func: Any, *args: Any, **kwargs: Any) -> list[str]:
    return [j.verdict for j in judged(func, *args, **kwargs)]


def one_ulp_off(a: np.ndarray, index: int = 0) -> np.ndarray:
    """A copy of ``a`` with element ``index`` moved one ulp away from zero (bits + 1)."""
    b = np.array(a, copy=True, order="C")  # a view of a transposed copy would drop the edit
    bits = b.reshape(-1).view(f"u{b.dtype.itemsize}")
    bits[index] += 1
    return b
