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

__all__ = ["dtype_name", "from_numpy", "to_numpy", "tree_to_numpy"]

_VIEW = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def dtype_name(dt: Any) -> str:
    """``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dt).removeprefix("torch.")


def to_numpy(t: Any, *, copy: bool = False) -> np.ndarray:
    """A tensor's values as a NumPy array in its own dtype (bits unchanged).

    ``copy=True`` for a tensor an in-place op is about to overwrite.
    """
    import torch  # noqa: PLC0415 - torch is optional; only the watcher calls this

    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    name = dtype_name(t.dtype)
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if name in _VIEW:
        a = t.view(getattr(torch, _VIEW[name])).numpy().view(np_dtype(name))
    else:
        a = t.numpy()
    arr: np.ndarray = a.copy() if copy else a
    return arr


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
    import torch  # noqa: PLC0415
    from torch.utils._pytree import tree_map  # noqa: PLC0415

    def one(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return to_numpy(x, copy=id(x) in copy_ids)
        if isinstance(x, torch.dtype):
            return dtype_name(x)
        return x

    return tree_map(one, obj)
