"""Array namespaces: the one module that knows CuPy exists.

Array code asks :func:`xp` for the namespace of its inputs instead of importing NumPy, so
the same function runs on NumPy arrays on the CPU and on CuPy arrays on a GPU. CuPy is
imported lazily, only when a CuPy array is seen, so fpemu works without it.

>>> import numpy as np
>>> xp(np.zeros(3)) is np
True
"""

from __future__ import annotations

import math
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
#: bytes of work arrays one thread keeps, at most: past it, the kept ones are let go (the
#: arrays callers still hold stay valid) and a larger one is not kept
_SCRATCH_MAX = 256 << 20


def scratch(shape: int | tuple[int, ...], dtype: Any, *, key: str = "") -> np.ndarray:
    """A per-thread NumPy work array of ``shape`` (a length or a shape) and ``dtype``, reused
    from call to call.

    A fresh large temporary costs an mmap and page faults on every call (glibc hands freed
    megabytes back to the system; ~0.5 ms per megabyte array measured inside a watched step);
    hot loops borrow this instead. Its contents are undefined and must never escape the
    caller. Arrays of one ``key`` and dtype share memory: a caller must not hold one across a
    call that may borrow the same key, and a caller holding several at once names each.

    >>> a = scratch((2, 3), np.float64, key="doc")
    >>> b = scratch(4, np.float64, key="doc")
    >>> a.shape, b.shape, bool(np.shares_memory(a, b))
    ((2, 3), (4,), True)
    """
    n = shape if isinstance(shape, int) else math.prod(shape)
    dt = np.dtype(dtype)
    bufs: dict[Any, np.ndarray] | None = getattr(_SCRATCH, "bufs", None)
    if bufs is None:
        bufs = _SCRATCH.bufs = {}
    buf = bufs.get((key, dt))
    if buf is None or buf.size < n:
        if buf is not None:
            del bufs[(key, dt)]
        buf = np.empty(n, dt)
        if sum(b.nbytes for b in bufs.values()) + buf.nbytes > _SCRATCH_MAX:
            bufs.clear()
        if buf.nbytes <= _SCRATCH_MAX:
            bufs[(key, dt)] = buf
    out = buf[:n]
    return out if isinstance(shape, int) else out.reshape(shape)
