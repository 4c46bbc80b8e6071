"""torch tensors to NumPy arrays and back, bit for bit, for the op emulations.

bfloat16 has no NumPy dtype of its own: its bits travel as int16 and are viewed as ml_dtypes'
bfloat16 (no rounding anywhere). Arguments are converted with torch's own pytree, so lists of
tensors (``_foreach_*``) become lists of arrays.

>>> import torch
>>> a = to_numpy(torch.tensor([1.0, 2.5], dtype=torch.bfloat16))
>>> a.dtype.name, a.astype(float).tolist()
('bfloat16', [1.0, 2.5])
>>> from_numpy(a).dtype
torch.bfloat16
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.validate.ops._num import dtype as np_dtype

__all__ = ["convert_args", "dtype_name", "from_numpy", "tensor_dtypes", "to_numpy", "tree_to_numpy"]

_VIEW = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


_NAMES: dict[Any, str] = {}


def dtype_name(dt: Any) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    name = _NAMES.get(dt)
    if name is None:
        name = _NAMES[dt] = str(dt).removeprefix("torch.")
    return name


def to_numpy(t: Any, *, copy: bool = False) -> np.ndarray:
    """A tensor's values as a NumPy array in its own dtype (bits unchanged): a view of a CPU
    tensor's memory (``numpy(force=True)`` detaches, and copies only a tensor on another
    device or with its conjugate or negative bit set, resolving it).

    ``copy=True`` for a tensor an in-place op is about to overwrite.
    """
    how = _HOW.get(t.dtype, _MISS)
    if how is _MISS:
        how = _HOW[t.dtype] = _how(t.dtype)
    if how is None:
        a = t.numpy(force=True)
    else:  # the bits viewed as ints: a negative or conjugate bit is resolved first
        if t.is_conj() or t.is_neg():
            t = t.resolve_conj().resolve_neg()
        a = t.view(how[0]).numpy(force=True).view(how[1])
    arr: np.ndarray = a.copy() if copy else a
    return arr


#: torch dtype -> None (NumPy has it) or (torch dtype to view the bits as, NumPy dtype)
_HOW: dict[Any, Any] = {}
_MISS = object()


def _how(dt: Any) -> Any:
    import torch  # noqa: PLC0415 - torch is optional; only the watcher calls this

    name = dtype_name(dt)
    return (getattr(torch, _VIEW[name]), np_dtype(name)) if name in _VIEW else None


def from_numpy(a: np.ndarray) -> Any:
    """A NumPy array (float32, float16, ml_dtypes bfloat16/fp8, ints, bools) as a torch tensor."""
    import torch  # noqa: PLC0415

    arr = np.ascontiguousarray(a)
    name = arr.dtype.name
    if name in _VIEW:
        return torch.from_numpy(arr.view(_VIEW[name])).view(getattr(torch, name))
    return torch.from_numpy(arr)


def tree_to_numpy(obj: Any, *, copy_ids: frozenset[int] = frozenset()) -> Any:
    """Every tensor inside ``obj`` (tuples, lists, dicts) as an array; dtypes as their names.

    Tensors whose ``id`` is in ``copy_ids`` are copied (an in-place op will overwrite them).
    """
    if not obj:
        return obj
    # one array per tensor: a tensor passed twice (addcmul_(s, g, g)) is one object, which a
    # worker's pickle then copies once
    return _nested(obj, {}, [], copy_ids, *_types())


def tensor_dtypes(obj: Any) -> list[str]:
    """The dtype names of every tensor inside ``obj`` (tuples, lists, dicts), in order."""
    out: list[str] = []
    if not obj:
        return out
    tensor = _types()[0]
    for x in obj.values() if isinstance(obj, dict) else obj:
        if isinstance(x, tensor):
            out.append(dtype_name(x.dtype))
        elif isinstance(x, (list, tuple, dict)):  # ATen nests tensor lists once; dicts walk on
            out += tensor_dtypes(x)
    return out


def convert_args(args: tuple[Any, ...], kwargs: dict[str, Any],
                 copy_ids: frozenset[int] = frozenset()) -> tuple[Any, Any, list[str]]:  # fmt: skip
    """``(tree_to_numpy(args, copy_ids=...), tree_to_numpy(kwargs, copy_ids=...),
    tensor_dtypes(args) + tensor_dtypes(kwargs))`` in one walk (the watcher's every op: a flat
    tuple of tensors and numbers, mostly). A tensor passed twice is one array, here across args
    and kwargs too.

    >>> import torch
    >>> x = torch.ones(2)
    >>> a, k, ins = convert_args((x, 2.0, [x]), {"out_dtype": torch.float16})
    >>> a[0] is a[2][0], k, ins
    (True, {'out_dtype': 'float16'}, ['float32', 'float32'])
    """
    tensor, dtype = _types()
    seen: dict[int, np.ndarray] = {}
    ins: list[str] = []
    out = []
    # the top level walked here, :func:`_nested` below it: a call per argument costs ~1 us an
    # op more (measured on 4 arguments), on every op the watcher sees
    for x in args:
        if isinstance(x, tensor):
            a = seen.get(id(x))
            if a is None:
                a = seen[id(x)] = to_numpy(x, copy=id(x) in copy_ids)
            ins.append(dtype_name(x.dtype))
            out.append(a)
        elif isinstance(x, (list, tuple, dict, dtype)):
            out.append(_nested(x, seen, ins, copy_ids, tensor, dtype))
        else:
            out.append(x)
    kw = {k: _nested(v, seen, ins, copy_ids, tensor, dtype) for k, v in kwargs.items()}
    return tuple(out), kw, ins


def _nested(x: Any, seen: dict[int, np.ndarray], ins: list[str], copy_ids: frozenset[int],
            tensor: Any, dtype: Any) -> Any:  # fmt: skip
    """:func:`convert_args` below the top level, and :func:`tree_to_numpy` (the walk,
    recursively: ATen arguments nest lists at most once)."""
    if isinstance(x, tensor):
        a = seen.get(id(x))
        if a is None:
            a = seen[id(x)] = to_numpy(x, copy=id(x) in copy_ids)
        ins.append(dtype_name(x.dtype))
        return a
    if isinstance(x, (list, tuple)):
        return type(x)(_nested(v, seen, ins, copy_ids, tensor, dtype) for v in x)
    if isinstance(x, dict):
        return {k: _nested(v, seen, ins, copy_ids, tensor, dtype) for k, v in x.items()}
    if isinstance(x, dtype):
        return dtype_name(x)
    return x


_TYPES: tuple[Any, Any] | None = None


def _types() -> tuple[Any, Any]:
    """``(torch.Tensor, torch.dtype)``, imported once (torch is optional: only the watcher
    calls these)."""
    global _TYPES
    if _TYPES is None:
        import torch  # noqa: PLC0415

        _TYPES = (torch.Tensor, torch.dtype)
    return _TYPES
