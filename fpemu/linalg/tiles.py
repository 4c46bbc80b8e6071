"""Accumulation models on threads: output tiles of one matmul computed in parallel.

Every output element of the built-in exact models (``sequential``, ``pairwise``,
``blocked``), of every tensor-core architecture and of every instruction model is a function
of its own row of ``a``, column of ``b`` and element of ``c`` only (the models' fast routes
are chosen per call, but each route gives the same bits: the test of threads checks every
family on odd shapes). So a matmul splits into tiles along its leading batch axis, its rows or
its columns, each tile is the same model call on slices, and the pieces are put back where
they belong: the same bits for every thread count (:mod:`fpemu.parallel`).

Models opt in with :func:`tileable`; a user model is never split (its contract does not
promise independent outputs), nor is a call with ``rng`` (stochastic draws in a fixed order)
or on CuPy arrays.

>>> import numpy as np
>>> from fpemu import parallel
>>> from fpemu.linalg import get_model
>>> from fpemu.formats import get_format
>>> seq, h = get_model("sequential"), get_format("fp16")
>>> a, b = np.ones((300, 64)), np.ones((64, 300))
>>> with parallel.threads(2):
...     d = run_model(seq, a, b, None, fmt=h, acc=h, out=h)
>>> d.shape, float(d[0, 0])
((300, 300), 64.0)
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from fpemu import parallel
from fpemu.backend import xp
from fpemu.linalg.registry import Model, get_model

_TILEABLE: weakref.WeakSet[Any] = weakref.WeakSet()
#: The registry name that gives a tileable model in a fresh ``import fpemu`` (worker processes
#: look models up by it), and the model each such name gave when it was registered.
_NAMES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_BY_NAME: dict[str, Any] = {}
#: Work units per product (a multiply-add and its share of a model's passes): the tensor-core
#: models cost tens of NumPy operations per product, the einsum chains about one.
_COST_PER_PRODUCT = 4.0
#: Options holding arrays shaped by rows and columns: such calls split their batch axis only.
_SHAPED_OPTIONS = ("scale_a", "scale_b")
#: Most tiles per process on worker processes (:func:`_on_processes`).
_PER_PROCESS = 2


def tileable(fn: Model, name: str | None = None) -> Model:
    """Mark ``fn`` as a model whose output elements are independent (it may be split).

    ``name``: the name ``fn`` is registered under when fpemu is imported (worker processes
    find it by that name); a module-level function needs none (it is sent by reference).

    >>> tileable(len) is len
    True
    """
    _TILEABLE.add(fn)
    if name is not None:
        _NAMES[fn] = name
        _BY_NAME[name] = fn
    return fn


def is_tileable(fn: Model) -> bool:
    """Whether :func:`run_model` may split calls of ``fn``.

    >>> from fpemu.linalg import get_model
    >>> is_tileable(get_model("sequential")), is_tileable(get_model("fast"))
    (True, False)
    """
    try:
        return fn in _TILEABLE
    except TypeError:  # not weak-referenceable: never marked
        return False


def run_model(fn: Model, a: Any, b: Any, c: Any, **kwargs: Any) -> Any:
    """``fn(a, b, c, **kwargs)``, split into output tiles on threads where that is allowed.

    ``a`` is ``(..., M, K)`` and ``b`` ``(..., K, N)`` with equal batch shapes, ``c`` None or
    ``(..., M, N)`` (the model contract of :mod:`fpemu.linalg.ops`).
    """
    if not is_tileable(fn) or kwargs.get("rng") is not None or xp(a, b) is not np:
        return fn(a, b, c, **kwargs)
    M, K, N = a.shape[-2], a.shape[-1], b.shape[-1]
    count = a.shape[0] if a.ndim > 2 else 1
    total = float(np.prod(a.shape[:-2], dtype=np.float64)) * M * N * max(K, 1)
    sizes = {0: count, 1: M, 2: N}
    if any(kwargs.get(k) is not None for k in _SHAPED_OPTIONS):
        sizes = {0: count}
    axis = max(sizes, key=lambda k: (sizes[k], -k))  # the longest; ties: batch, rows, columns
    size = sizes[axis]
    per_item = _COST_PER_PRODUCT * total / max(size, 1)
    parts = parallel.tiles(size, cost=per_item)
    if len(parts) == 1:
        return fn(a, b, c, **kwargs)

    def one(s: slice) -> Any:
        if axis == 0:
            return fn(a[s], b[s], None if c is None else c[s], **kwargs)
        if axis == 1:
            return fn(a[..., s, :], b, None if c is None else c[..., s, :], **kwargs)
        return fn(a, b[..., s], None if c is None else c[..., s], **kwargs)

    pieces = _on_processes(fn, a, b, c, kwargs, axis, size, per_item)
    if pieces is None:
        pieces = [np.asarray(p) for p in parallel.map_tiles(one, parts)]
    where = 0 if axis == 0 else axis - 3  # batch axis 0, rows -2, columns -1
    return np.concatenate(pieces, axis=where)


def _registered(name: str) -> Model:
    """The model registered as ``name`` when fpemu is imported (in a worker process, which
    imported the whole package before it runs anything).

    >>> _registered("h100") is get_model("h100")
    True
    """
    return get_model(name)


def _on_processes(fn: Model, a: Any, b: Any, c: Any, kwargs: dict[str, Any], axis: int,
                  size: int, per_item: float) -> list[Any] | None:  # fmt: skip
    """The output tiles computed on worker processes (:mod:`fpemu.procpool`), or None.

    Used when each of ``min(threads, cores)`` tiles is worth :data:`fpemu.procpool.GRAIN` and
    the model can be named in a fresh process; the tiles are the same slices as on threads.
    """
    from fpemu import procpool  # noqa: PLC0415 - only for large calls

    count = min(parallel.num_threads(), procpool.capacity() + 1)
    if count < 2 or size * per_item < count * procpool.GRAIN or not procpool.enabled():
        return None
    name = _NAMES.get(fn)
    if name is not None and _BY_NAME.get(name) is not fn:
        return None  # another model took the name later: a fresh process would not find fn
    if name is None and getattr(fn, "__qualname__", "<").count("<"):
        return None  # a closure or lambda: it cannot be sent
    # Up to 2 tiles per process, taken by whoever is free: a core slowed by other work
    # takes fewer (each tile is still worth GRAIN: sending it costs about a millisecond).
    parts = parallel.tiles(size, cost=per_item, count=_PER_PROCESS * count, grain=procpool.GRAIN)
    if len(parts) == 1:
        return None

    def call(s: slice) -> tuple[tuple[Any, ...], dict[str, Any]]:
        if axis == 0:
            return (a[s], b[s], None if c is None else c[s]), kwargs
        if axis == 1:
            return (a[..., s, :], b, None if c is None else c[..., s, :]), kwargs
        return (a, b[..., s], None if c is None else c[..., s]), kwargs

    recipe = None if name is None else (_registered, name)
    pieces = procpool.map_calls(fn, [call(s) for s in parts], recipe=recipe)
    return None if pieces is None else [np.asarray(p) for p in pieces]
