"""Below autograd: a ``TorchDispatchMode`` that replaces every ATen op's result by fpemu's
emulation of that op (:mod:`fpemu.validate.ops`, the table ``fpemu.watch`` judges with).

For each op the mode converts torch's inputs to NumPy (copying the arguments an in-place op
overwrites), runs torch's kernel (for the outputs' shapes, dtypes, strides and aliasing; for the
matmul family and flash attention, whose values are all replaced, torch's meta kernel instead:
the CPU kernel's work would be thrown away), asks the op's emulation for its value from those
inputs, and writes the value into each output
(``out.copy_(from_numpy(value))``; inside ``__torch_dispatch__`` the modes are off, so the copy
is torch's plain kernel). Outputs that alias an input (views) share its memory, which already
holds the emulated value: they are not written. An in-place op's outputs are its written
arguments.

An op with no emulation runs as torch's own kernel and is counted (``not_emulated``); an
emulation that raises or returns a value of another shape or dtype is counted (``failed``,
with the reason) and torch's value kept, unless ``strict`` (then it raises).

Determinism: the emulations see a fixed ``capability`` (``"avx2"``: a fused multiply-add where
a SIMD kernel fuses), not this machine's, and matmul-class ops run fpemu's ordered models, so
the returned values do not depend on the CPU or the thread count.

>>> import torch
>>> mode = EmulateMode(model="h100", options={})
>>> with mode:
...     y = torch.ones(2, 3, dtype=torch.float16) @ torch.ones(3, 2, dtype=torch.float16)
>>> y.tolist(), mode.emulated["aten.mm.default"], CAPABILITY
([[3.0, 3.0], [3.0, 3.0]], 1, 'avx2')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch.utils._python_dispatch import TorchDispatchMode

from fpemu.validate.ops import Call, Emulation, lookup
from fpemu.validate.ops._num import dtype as np_dtype
from fpemu.validate.watch.convert import dtype_name, from_numpy, to_numpy, tree_to_numpy
from fpemu.validate.watch.schema import outputs as op_outputs
from fpemu.validate.watch.schema import written_ids

__all__ = ["CAPABILITY", "EmulateMode"]

#: the CPU capability the emulations are asked for (fixed: results must not depend on the host)
CAPABILITY = "avx2"
#: ops that compute nothing (reads of a value or a size; profiler ranges): run, not counted
_PASS = frozenset(
    {
        "aten._local_scalar_dense.default",
        "aten.sym_size.int",
        "aten.sym_numel.default",
        "aten.sym_stride.int",
        "aten.sym_storage_offset.default",
        "aten.is_nonzero.default",
        "aten.item.default",
    }
)


#: expensive ops whose emulation needs only their inputs: torch's meta kernel gives the outputs'
#: shapes, dtypes and strides, and torch's CPU kernel is not run (it would be thrown away)
_META = frozenset(
    {
        "aten.mm.default",
        "aten.addmm.default",
        "aten.bmm.default",
        "aten.baddbmm.default",
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    }
)


@dataclass(frozen=True)
class _Op:
    """What the mode needs to know of one ATen overload (computed once per overload)."""

    name: str
    emulation: Emulation | None
    passed: bool  # computes nothing: run, not counted
    alias: bool  # every return aliases an argument and nothing is written (a view)
    writes: bool  # the op writes an argument (its inputs are copied before it runs)
    meta: bool  # outputs from torch's meta kernel, torch's CPU kernel not run (``_META``)
    #: per schema return: True a new tensor (written), False an alias of an argument (not
    #: written), None an alias of a written argument (counted with the written arguments)
    fresh: tuple[bool | None, ...]


_OPS: dict[Any, _Op] = {}


def _op(func: Any) -> _Op:
    op = _OPS.get(func)
    if op is None:
        from fpemu.validate.watch.schema import plan  # noqa: PLC0415

        name = str(func)
        rets = func._schema.returns
        p = plan(func)
        alias = bool(rets) and all(r.alias_info and not r.alias_info.is_write for r in rets)
        op = _OPS[func] = _Op(
            name=name,
            emulation=None if name in _PASS else lookup(name),
            passed=name in _PASS or name.startswith("profiler."),
            alias=alias and not p.written,
            writes=bool(p.written),
            meta=name in _META and not p.written and all(r.alias_info is None for r in rets),
            fresh=tuple(
                None if r.alias_info and r.alias_info.is_write else r.alias_info is None
                for r in rets
            ),
        )
    return op


class _Outputs(Sequence[np.ndarray]):
    """torch's outputs as NumPy arrays, converted when an emulation reads them (the few whose
    result is torch's own random draw do)."""

    def __init__(self, tensors: list[Any]) -> None:
        self._t = tensors
        self._a: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._t)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        j = range(len(self))[i]
        if j not in self._a:
            self._a[j] = to_numpy(self._t[j])
        return self._a[j]

    def __iter__(self) -> Iterator[np.ndarray]:
        return (self[j] for j in range(len(self)))


class EmulateMode(TorchDispatchMode):  # type: ignore[misc,no-untyped-call]
    """Replaces each dispatched op's outputs by its emulation (see the module docstring)."""

    def __init__(
        self,
        *,
        model: str | None,
        options: dict[str, Any],
        strict: bool = False,
        capability: str = CAPABILITY,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.model = model
        self.capability = capability  # fpemu.emulate.as_torch: this machine's, not CAPABILITY
        self.options = options
        self.strict = strict
        self.emulated: Counter[str] = Counter()
        self.not_emulated: Counter[str] = Counter()
        self.failed: dict[str, str] = {}
        self.failed_count: Counter[str] = Counter()
        self.hook: Any = None  # recipes: called with (name, np_args, np_kwargs) before an op

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        op = _OPS.get(func) or _op(func)
        if op.passed:
            return func(*args, **kwargs)
        name, emulation = op.name, op.emulation
        if emulation is None:
            self.not_emulated[name] += 1
            return func(*args, **kwargs)
        if op.alias:  # a view: its output is its input's memory, which holds the emulated
            self.emulated[name] += 1  # value already; there is nothing to compute
            return func(*args, **kwargs)
        if op.meta:
            return self._from_meta(op, func, args, kwargs)
        ids = written_ids(func, tuple(args), kwargs) if op.writes else frozenset()
        np_args = tree_to_numpy(tuple(args), copy_ids=ids)
        np_kwargs = tree_to_numpy(kwargs, copy_ids=ids)
        result = func(*args, **kwargs)
        outs = op_outputs(func, tuple(args), kwargs, result)
        call = Call(
            name,
            tuple(np_args),
            dict(np_kwargs),
            tuple(dtype_name(t.dtype) for t in outs),
            capability=self.capability,
            model=self.model,
            options={**self.options, "outputs": _Outputs(outs), "mkldnn": _mkldnn()},
        )
        try:
            values = list(emulation(call))
            if len(values) != len(outs):
                raise ValueError(f"the emulation gave {len(values)} outputs, torch {len(outs)}")
            writes = self._writes(op, result, outs)
            pending = []
            for i, (t, out) in enumerate(zip(outs, values, strict=True)):
                if out is None or not writes[i]:
                    continue
                v = np.asarray(out.value)
                want = np_dtype(call.out_dtypes[i])
                if v.shape != tuple(t.shape) or v.dtype != want:
                    shape = f"{tuple(t.shape)} {call.out_dtypes[i]}"
                    raise ValueError(f"the emulation gave {v.shape} {v.dtype}, torch {shape}")
                pending.append((t, v))
        except Exception as exc:
            if self.strict:
                raise
            self.failed_count[name] += 1
            self.failed.setdefault(name, f"{type(exc).__name__}: {exc}")
            return result
        for t, v in pending:
            # from_numpy's ascontiguousarray makes a 0-d array 1-d: reshape back
            t.copy_(from_numpy(v).reshape(t.shape))
        self.emulated[name] += 1
        return result

    def _from_meta(self, op: _Op, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        """An op of ``_META``: its outputs allocated as torch's meta kernel lays them out and
        filled with the emulation's values; torch's CPU kernel runs only if the emulation
        fails (its value is then kept, as for any op)."""
        import torch  # noqa: PLC0415
        from torch.utils._pytree import tree_map  # noqa: PLC0415

        def meta(x: Any) -> Any:
            return x.to("meta") if isinstance(x, torch.Tensor) else x

        res = func(*tree_map(meta, tuple(args)), **tree_map(meta, kwargs))
        metas = list(res) if isinstance(res, tuple) else [res]
        call = Call(
            op.name,
            tuple(tree_to_numpy(tuple(args))),
            dict(tree_to_numpy(kwargs)),
            tuple(dtype_name(m.dtype) for m in metas),
            capability=CAPABILITY,
            model=self.model,
            options={**self.options, "outputs": (), "mkldnn": _mkldnn()},
        )
        try:
            values = list(op.emulation(call)) if op.emulation is not None else []
            if len(values) != len(metas):
                raise ValueError(f"the emulation gave {len(values)} outputs, torch {len(metas)}")
            arrays = []
            for m, out, name in zip(metas, values, call.out_dtypes, strict=True):
                v = None if out is None else np.asarray(out.value)
                if v is None or v.shape != tuple(m.shape) or v.dtype != np_dtype(name):
                    got = "no value" if v is None else f"{v.shape} {v.dtype}"
                    raise ValueError(f"the emulation gave {got}, torch {tuple(m.shape)} {name}")
                arrays.append(v)
        except Exception as exc:
            if self.strict:
                raise
            self.failed_count[op.name] += 1
            self.failed.setdefault(op.name, f"{type(exc).__name__}: {exc}")
            return func(*args, **kwargs)
        outs = []
        for m, v in zip(metas, arrays, strict=True):
            t = torch.empty_strided(m.shape, m.stride(), dtype=m.dtype)
            t.copy_(from_numpy(v).reshape(t.shape))
            outs.append(t)
        self.emulated[op.name] += 1
        return tuple(outs) if isinstance(res, tuple) else outs[0]

    @staticmethod
    def _writes(op: _Op, result: Any, outs: list[Any]) -> list[bool]:
        """Which outputs to write: not the returns that alias an argument (views); the
        written arguments of an in-place op, always."""
        from fpemu.validate.watch.schema import _flat  # noqa: PLC0415

        flags: list[bool] = []
        rets = result if isinstance(result, tuple) else (result,)
        for fresh, value in zip(op.fresh, rets, strict=False):
            if fresh is not None:
                flags += [fresh] * len(_flat(value))
        return flags + [True] * (len(outs) - len(flags))


def _mkldnn() -> bool:
    """``torch.backends.mkldnn.enabled`` now (off, torch runs ATen's GELU kernels, not
    oneDNN's: the emulations follow)."""
    import torch  # noqa: PLC0415

    return bool(torch._C._get_mkldnn_enabled())
