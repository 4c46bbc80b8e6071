"""fpemu's own threads: one pool, the thread count, and BLAS kept out of their way.

NumPy releases the GIL inside its ufuncs, einsum and copies, so independent tiles of a large
call run in parallel on threads: :func:`fpemu.round` splits its array, :func:`fpemu.matmul`
(every exact, tensor-core and instruction model), :func:`fpemu.tensorcore.mma.dpa`,
:func:`fpemu.quantize` and the autograd matmuls split their outputs. A tile is computed by
exactly the code and in exactly the order that computes it alone (every output element of those
models depends on its own row, column and addend only), so results are bit-identical for every
thread count. Calls that draw random numbers (stochastic rounding with ``rng``) stay on one
thread: the draws are made in a fixed order. The tiles of a large matmul (each worth
:data:`fpemu.procpool.GRAIN`) go to worker processes instead of threads where that is
allowed (:mod:`fpemu.procpool`): the kernels are many short NumPy calls, and on threads each
call must take the GIL back; the count set here bounds them too, and the bits are the same.

The thread count is, in order: the innermost :func:`threads` block, the ``FPEMU_NUM_THREADS``
environment variable, the cores this process may run on (``os.sched_getaffinity``). Work
inside a tile never splits again (no nested pools), and while fpemu's tiles run, BLAS libraries
are held to one thread each with threadpoolctl, so fpemu's threads and BLAS's do not
oversubscribe the cores (BLAS sums in these kernels are exact in any order: its thread count
does not change a bit).

>>> import numpy as np, fpemu
>>> x = np.linspace(-3, 3, 5_000_000)
>>> with fpemu.threads(1):
...     one = fpemu.round(x, "bf16")
>>> with fpemu.threads(2):
...     two = fpemu.round(x, "bf16")
>>> bool((one.view(np.uint64) == two.view(np.uint64)).all())
True
"""

from __future__ import annotations

import contextvars
import functools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

#: Environment variable giving the default thread count.
ENV = "FPEMU_NUM_THREADS"
#: Largest thread count accepted (a pool far beyond the cores only adds switching).
MAX_THREADS = 256
#: Least work per tile, in units of about one NumPy element operation (about half a
#: millisecond: handing a tile to the pool costs tens of microseconds). Tests lower it to split
#: small calls.
GRAIN = 2.0**20

_SETTING: contextvars.ContextVar[int | None] = contextvars.ContextVar("fpemu_threads", default=None)
_IN_TILE: contextvars.ContextVar[bool] = contextvars.ContextVar("fpemu_in_tile", default=False)


def _check(n: object, arg: str) -> int:
    if isinstance(n, bool) or not isinstance(n, int):
        # numpy integers are ints too for the user; strings and floats are refused
        if type(n).__module__ == "numpy" and hasattr(n, "__index__"):
            n = int(n)  # type: ignore[call-overload]
        else:
            raise TypeError(f"{arg}={n!r}: expected an int from 1 to {MAX_THREADS}")
    assert isinstance(n, int)
    if not 1 <= n <= MAX_THREADS:
        raise ValueError(f"{arg}={n!r}: expected an int from 1 to {MAX_THREADS}")
    return n


def default_threads() -> int:
    """The thread count outside any :func:`threads` block.

    ``FPEMU_NUM_THREADS`` if set (an int from 1 to 256), else the number of cores this process
    may run on.

    Raises:
        ValueError: ``FPEMU_NUM_THREADS`` is set to something else.

    >>> default_threads() >= 1
    True
    """
    env = os.environ.get(ENV)
    if env is not None and env.strip():
        return _from_env(env)
    return _cores()


@functools.lru_cache(maxsize=8)
def _from_env(env: str) -> int:
    try:
        value = int(env.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_THREADS:
        raise ValueError(f"{ENV}={env!r}: expected an int from 1 to {MAX_THREADS}")
    return value


@functools.lru_cache(maxsize=1)
def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux: every core
        return os.cpu_count() or 1


def num_threads() -> int:
    """Threads fpemu uses for a call made here: 1 inside a tile (no nested splitting).

    >>> with threads(3):
    ...     num_threads()
    3
    """
    if _IN_TILE.get():
        return 1
    n = _SETTING.get()
    return default_threads() if n is None else n


@contextmanager
def threads(n: int) -> Iterator[int]:
    """Run fpemu calls made in this block (in this thread or task) on ``n`` threads.

    Blocks nest; the innermost wins. ``n`` bounds the tiles computed at once (the tiles of a
    large matmul: by this process and up to ``n - 1`` worker processes, at most one per core,
    :mod:`fpemu.procpool`); results do not depend on it.

    Raises:
        TypeError: ``n`` is not an int. ValueError: ``n`` is not in 1..256.

    >>> import fpemu
    >>> with fpemu.threads(2) as n:
    ...     n
    2
    >>> fpemu.threads(0).__enter__()
    Traceback (most recent call last):
    ValueError: n=0: expected an int from 1 to 256
    """
    value = _check(n, "n")
    token = _SETTING.set(value)
    try:
        yield value
    finally:
        _SETTING.reset(token)


def tiles(
    size: int, *, cost: float, grain: float | None = None, align: int = 1, count: int | None = None
) -> list[slice]:
    """Split ``range(size)`` into one slice per thread when the work is worth it.

    ``cost``: work per item (about one unit per NumPy element operation); a tile gets at least
    ``grain`` units (default :data:`GRAIN`), and slice bounds are multiples of ``align``. One
    slice when the call is small or runs inside a tile. ``count``: at most this many slices
    (default: :func:`num_threads`).

    >>> with threads(2):
    ...     tiles(10, cost=2.0**20)
    [slice(0, 5, None), slice(5, 10, None)]
    >>> tiles(10, cost=1.0)
    [slice(0, 10, None)]
    """
    grain = GRAIN if grain is None else grain
    if size * cost < 2 * grain or size <= align:  # checked first: small calls are the hot path
        return [slice(0, size)]
    n = num_threads() if count is None or _IN_TILE.get() else count
    parts = int(min(n, size * cost // grain, -(-size // align)))
    if parts <= 1:
        return [slice(0, size)]
    per = -(-size // parts)
    per = -(-per // align) * align
    return [slice(lo, min(lo + per, size)) for lo in range(0, size, per)]


def map_tiles(fn: Callable[[T], Any], items: Sequence[T]) -> list[Any]:
    """``[fn(item) for item in items]``, on up to :func:`num_threads` threads.

    The calling thread computes tiles too; each tile runs in a copy of the caller's context
    (NumPy's error state included) and with fpemu's splitting off. While more than one tile
    runs, BLAS is held to one thread. The first tile (in order) that raised re-raises here.

    >>> with threads(2):
    ...     map_tiles(lambda x: x * x, [1, 2, 3])
    [1, 4, 9]
    """
    n = min(num_threads(), len(items))
    if n <= 1:
        return [fn(x) for x in items]
    results: list[Any] = [None] * len(items)
    errors: dict[int, BaseException] = {}
    lock = threading.Lock()
    todo = iter(range(len(items)))
    ctx = contextvars.copy_context()

    def worker() -> None:
        _IN_TILE.set(True)  # this runs in a copy of ctx: the flag stays in it
        while True:
            with lock:
                i = next(todo, None)
                if i is None or errors:
                    return
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # re-raised in the caller, in tile order
                with lock:
                    errors[i] = exc

    with blas_threads(1):
        futures = [_pool().submit(ctx.copy().run, worker) for _ in range(n - 1)]
        ctx.copy().run(worker)
        for f in futures:
            f.result()
    if errors:
        raise errors[min(errors)]
    return results


@functools.lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    # One pool for the package; threads are started on demand, so its size is only a cap
    # (each call submits num_threads() - 1 workers that take tiles from a shared queue).
    return ThreadPoolExecutor(max_workers=MAX_THREADS, thread_name_prefix="fpemu")


_BLAS_LOCK = threading.Lock()
_BLAS_DEPTH = 0
_BLAS_RESTORE: Any = None


def _after_fork() -> None:
    """A forked child has none of the parent's pool threads: start afresh."""
    global _BLAS_LOCK, _BLAS_DEPTH, _BLAS_RESTORE
    _pool.cache_clear()
    _BLAS_LOCK, _BLAS_DEPTH, _BLAS_RESTORE = threading.Lock(), 0, None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


@functools.lru_cache(maxsize=1)
def _controller() -> Any:
    from threadpoolctl import ThreadpoolController  # noqa: PLC0415 - only when tiles run

    return ThreadpoolController()


@contextmanager
def numpy_blas_threads(limit: int) -> Iterator[None]:
    """Hold the BLAS NumPy's own wheel bundles (``libscipy_openblas``: no other library loads
    it) to ``limit`` threads in this block, and nothing else: a BLAS that torch may share (MKL
    in some distributions) keeps its threads, so torch computes as it would.

    ``fpemu.watch`` runs its many small NumPy GEMMs under ``numpy_blas_threads(1)``: measured
    on a 2-core VM with torch on both cores, OpenBLAS's own threads made the watched step 2x
    slower.

    >>> with numpy_blas_threads(1):
    ...     pass
    """
    restore = _controller().select(prefix="libscipy_openblas").limit(limits=limit)
    try:
        yield
    finally:
        restore.restore_original_limits()


@contextmanager
def blas_threads(limit: int) -> Iterator[None]:
    """Hold every loaded BLAS to ``limit`` threads in this block (process-wide, nesting and
    concurrent blocks share one limit: the first sets it, the last restores it).

    >>> with blas_threads(1):
    ...     pass
    """
    global _BLAS_DEPTH, _BLAS_RESTORE
    with _BLAS_LOCK:
        if _BLAS_DEPTH == 0:
            _BLAS_RESTORE = _controller().limit(limits=limit, user_api="blas")
        _BLAS_DEPTH += 1
    try:
        yield
    finally:
        with _BLAS_LOCK:
            _BLAS_DEPTH -= 1
            if _BLAS_DEPTH == 0:
                _BLAS_RESTORE.restore_original_limits()
                _BLAS_RESTORE = None
