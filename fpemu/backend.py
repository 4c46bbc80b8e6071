"""Array namespaces: the one module that knows CuPy exists.

Array code asks :func:`xp` for the namespace of its inputs instead of importing NumPy, so
the same function runs on NumPy arrays on the CPU and on CuPy arrays on a GPU. CuPy is
imported lazily, only when a CuPy array is seen, so fpemu works without it.

>>> import numpy as np
>>> xp(np.zeros(3)) is np
True
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any

import numpy as np


def xp(*arrays: Any) -> ModuleType:
    """Return the array module (numpy or cupy) of the given arrays.

    Python scalars, lists and NumPy arrays give :mod:`numpy`. CuPy arrays give :mod:`cupy`.
    Mixing CuPy and NumPy arrays is refused rather than silently copied across devices.

    Raises:
        TypeError: CuPy and NumPy arrays were mixed.
    """
    cupy = sys.modules.get("cupy")  # never import it here: only an existing cupy array counts
    if cupy is None:
        return np
    kinds = {
        isinstance(a, cupy.ndarray) for a in arrays if isinstance(a, (np.ndarray, cupy.ndarray))
    }
    if kinds == {True, False}:
        raise TypeError("cannot mix cupy and numpy arrays in one call; move them to one device")
    return cupy if True in kinds else np


def to_numpy(a: Any) -> np.ndarray:
    """Return ``a`` as a NumPy array (copied from the GPU for a CuPy array)."""
    get = getattr(a, "get", None)
    if get is not None and type(a).__module__.startswith("cupy"):
        return np.asarray(get())
    return np.asarray(a)


def cupy_or_none() -> ModuleType | None:
    """Import and return CuPy if it is installed and a GPU is usable, else None."""
    try:
        import cupy  # noqa: PLC0415 - lazy on purpose

        cupy.cuda.runtime.getDeviceCount()
    except Exception:  # ImportError, or CUDA driver/runtime errors without a GPU
        return None
    mod: ModuleType = cupy
    return mod


_SCRATCH = threading.local()


def scratch(n: int, dtype: Any) -> np.ndarray:
    """A per-thread NumPy work buffer of ``n`` elements of ``dtype``, reused from call to call.

    A fresh large temporary costs an mmap and page faults on every call; hot loops borrow this
    instead. Its contents must never escape the caller, and a caller must not hold it across a
    call that may borrow the same dtype's buffer.
    """
    bufs: dict[Any, np.ndarray] | None = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = {}
    key = np.dtype(dtype)
    buf = bufs.get(key)
    if buf is None or buf.size < n:
        buf = bufs[key] = np.empty(n, key)
    return buf[:n]
