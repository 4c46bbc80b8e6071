"""Worker processes for the large tiles of a matmul: no shared lock between them.

fpemu's kernels are long runs of NumPy calls on cache-sized tiles (tens of microseconds each);
NumPy releases Python's lock inside each call, but on threads every call must take the lock
back, and where handing it over costs as much as a call (a virtual machine's cross-core
wake-ups) two threads are no faster than one (docs/scaling.md). Worker *processes* have their
own interpreter each: :func:`fpemu.linalg.tiles.run_model` sends the tiles of a large call
(:data:`GRAIN`) to them, computes tiles itself too, and puts the pieces back where they
belong. Each tile is the same model call on the same slices, so the bits are the threads'.

The workers are plain ``python -c`` subprocesses running :func:`_serve` (not
``multiprocessing``: a forked child of a threaded process may deadlock, and spawned
``multiprocessing`` children re-run the user's main script), started on first use, one fewer
than the cores, kept for later calls, and stopped at exit (a worker also stops when its input
pipe closes, so none outlives its parent). Messages are pickles with their array buffers sent
out of band. A call uses the workers that are ready and idle (none ready: threads); the tile
of a worker that died runs in this process; calls from a worker or from a ``multiprocessing``
child (a Dask worker) use threads. ``FPEMU_PROCESSES=0`` turns workers off (threads only), and
so do three workers that exited before they were ready (no interpreter to run them).

>>> import numpy as np, fpemu
>>> from fpemu import procpool
>>> procpool.start(1, timeout=120) <= 1  # 0 where workers are off (or one core)
True
>>> with fpemu.threads(2):  # np.add(3, 4) on a worker; None where none is ready
...     out = procpool.map_calls(np.add, [((1, 2), {}), ((3, 4), {})])
>>> out is None or [int(x) for x in out] == [3, 7]
True
"""

from __future__ import annotations

import os
import pickle
import struct
import sys
import threading
from collections.abc import Sequence
from typing import Any

#: Environment variable: ``0`` keeps every tile on threads.
ENV = "FPEMU_PROCESSES"
#: Least work per process tile, in the units of :data:`fpemu.parallel.GRAIN` (about 15 ms:
#: sending the operands and the result costs about a millisecond per few MB).
GRAIN = 2.0**25
#: Most workers (None: one fewer than the cores this process may run on).
MAX_WORKERS: int | None = None
#: Seconds a stopping worker gets to exit before it is killed.
_STOP_WAIT = 2.0

#: Workers that exited before they were ready, after which no more are started.
_MAX_FAILED = 3

_LOCK = threading.Lock()
_WORKERS: list[_Worker] = []
_IN_WORKER = False
_FAILED = 0


class _Worker:
    """One worker subprocess and its two pipes; ``busy`` is held while a call uses it."""

    def __init__(self) -> None:
        import json  # noqa: PLC0415 - only when a worker starts
        import subprocess  # noqa: PLC0415

        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        # One thread each (the parallelism is the processes), BLAS included.
        env.update({"FPEMU_NUM_THREADS": "1", ENV: "0", "OMP_NUM_THREADS": "1",
                    "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})  # fmt: skip
        code = "import sys, json; sys.path[:] = json.loads(sys.argv[1]); " + (
            "from fpemu.procpool import _serve; _serve()"
        )
        path = json.dumps([root, *(p for p in sys.path if isinstance(p, str))])
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0, env=env, close_fds=True,
        )  # fmt: skip
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.wfd, self.rfd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        self.ready = False
        self.busy = threading.Lock()
        self._polling = threading.Lock()  # one reader of the "ready" message

    def poll_ready(self, timeout: float) -> bool:
        """Whether the worker has said it is ready (waiting up to ``timeout`` seconds)."""
        import select  # noqa: PLC0415

        if not self.ready and self.proc.poll() is None and self._polling.acquire(timeout=timeout):
            try:
                if not self.ready and select.select([self.rfd], [], [], timeout)[0]:
                    self.ready = _recv(self.rfd) == "ready"
            except (OSError, EOFError):
                self.ready = False
            finally:
                self._polling.release()
        return self.ready and self.proc.poll() is None

    def stop(self, *, kill: bool = False) -> None:
        """Close its input (it exits), or kill it; then reap it."""
        try:
            if kill:
                self.proc.kill()
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.close()
            self.proc.wait(_STOP_WAIT)
        except Exception:  # stopping must not fail; kill as the last word
            self.proc.kill()
            self.proc.wait()
        finally:
            self.proc.stdout.close()  # type: ignore[union-attr]


def enabled() -> bool:
    """Whether calls from here may use worker processes.

    Not inside a worker, not where ``FPEMU_PROCESSES=0``, not in a ``multiprocessing`` child
    (a Dask worker process: it is one of several already), only on POSIX systems.

    Raises:
        ValueError: ``FPEMU_PROCESSES`` is set to something other than 0 or 1.

    >>> enabled() in (True, False)
    True
    """
    if _IN_WORKER or _FAILED >= _MAX_FAILED or os.name != "posix" or not sys.executable:
        return False
    setting = os.environ.get(ENV, "").strip()
    if setting not in ("", "0", "1"):
        raise ValueError(f"{ENV}={setting!r}: expected 0 (threads only) or 1 (worker processes)")
    if setting == "0":
        return False
    mp = sys.modules.get("multiprocessing")  # a multiprocessing child has imported it
    return mp is None or mp.parent_process() is None


def capacity() -> int:
    """How many workers a call may use: one fewer than the cores (or :data:`MAX_WORKERS`).

    >>> capacity() >= 0
    True
    """
    from fpemu.parallel import _cores  # noqa: PLC0415 - parallel imports nothing from here

    return max(0, _cores() - 1) if MAX_WORKERS is None else MAX_WORKERS


def start(n: int | None = None, *, timeout: float = 0.0) -> int:
    """Start workers up to ``n`` (default :func:`capacity`); wait up to ``timeout`` seconds
    for them to be ready. Returns how many are ready (0 where workers are off).

    Calls start workers themselves, without waiting: benchmarks and tests call this first so
    that the calls they time or check find the workers ready.
    """
    if not enabled():
        return 0
    want = min(capacity() if n is None else n, capacity())
    with _LOCK:
        _reap()
        while len(_WORKERS) < want:
            if not _WORKERS:
                import atexit  # noqa: PLC0415

                atexit.register(shutdown)  # registering twice is harmless
            try:
                _WORKERS.append(_Worker())
            except OSError:  # no interpreter to run: threads only
                return sum(w.ready for w in _WORKERS)
        workers = list(_WORKERS[:want])
    return sum(w.poll_ready(timeout) for w in workers)


def _reap() -> None:
    """Forget workers that exited (called with ``_LOCK`` held); count those that never
    became ready (a worker that cannot import fpemu must not be restarted for every call)."""
    global _FAILED
    for w in [w for w in _WORKERS if w.proc.poll() is not None]:
        _WORKERS.remove(w)
        _FAILED += not w.ready
        w.stop()


def _acquire(count: int) -> list[_Worker]:
    """Up to ``count`` ready, idle workers, each with its ``busy`` lock held; starts missing
    workers in the background (they serve later calls)."""
    if not enabled():
        return []
    start(count)
    got: list[_Worker] = []
    with _LOCK:
        for w in _WORKERS:
            if len(got) == count:
                break
            if w.busy.acquire(blocking=False):
                if w.poll_ready(0.0):
                    got.append(w)
                else:
                    w.busy.release()
    return got


def _drop(w: _Worker, *, kill: bool) -> None:
    with _LOCK:
        if w in _WORKERS:
            _WORKERS.remove(w)
    w.stop(kill=kill)


def map_calls(fn: Any, calls: Sequence[tuple[tuple[Any, ...], dict[str, Any]]], *,
              recipe: tuple[Any, ...] | None = None) -> list[Any] | None:  # fmt: skip
    """``[fn(*args, **kwargs) for args, kwargs in calls]`` on this process and the workers.

    ``fn`` is sent to the workers by reference (a module-level function), or ``recipe``:
    ``(factory, *args)``, a module-level ``factory`` whose ``factory(*args)`` is ``fn`` in a
    fresh process (a registered model looked up by name). Returns None when no worker is
    ready (the caller uses threads). The calls are taken in order by whoever is free (this
    process, and one feeding thread per worker here), so a core that other work slows down
    takes fewer. NumPy's error state goes with each call; warnings a worker's call raised are
    raised again here; the first call (in order) that raised re-raises here, and no call is
    started after one raised. The calls of a worker that died run here.
    """
    import pickle  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    from fpemu import parallel  # noqa: PLC0415

    workers = _acquire(len(calls) - 1)
    if not workers:
        return None
    ref, err = (fn if recipe is None else recipe), np.geterr()
    results: list[Any] = [None] * len(calls)
    errors: dict[int, BaseException] = {}
    caught: dict[int, list[tuple[Any, str]]] = {}
    lock, todo, stop = threading.Lock(), iter(range(len(calls))), threading.Event()

    def take() -> int | None:
        with lock:
            return None if stop.is_set() or errors else next(todo, None)

    def here(i: int) -> None:
        results[i], exc = _here(fn, calls[i])
        if exc is not None:
            with lock:
                errors[i] = exc

    def feed(w: _Worker) -> None:
        try:
            while (i := take()) is not None:
                try:
                    msg = _pickle(("call", ref, *calls[i], err))
                except (pickle.PicklingError, TypeError, AttributeError):
                    here(i)  # cannot be sent: computed here
                    continue
                try:
                    _write(w.wfd, msg)
                    kind, value, caught[i] = _recv(w.rfd)
                except (OSError, EOFError):  # the worker died: its call runs here
                    _drop(w, kill=True)
                    here(i)
                    return
                if kind == "ok":
                    results[i] = value
                else:
                    value.add_note("(raised in an fpemu worker process)")
                    with lock:
                        errors[i] = value
        finally:
            w.busy.release()

    feeders = [parallel._pool().submit(feed, w) for w in workers]
    try:
        with parallel.blas_threads(1):
            while (i := take()) is not None:
                here(i)
    except BaseException:
        stop.set()  # the feeders finish the calls their workers have, then stop
        raise
    for f in feeders:
        f.result()
    for i in sorted(caught):
        for category, message in caught[i]:
            warnings.warn(message, category, stacklevel=2)
    if errors:
        raise errors[min(errors)]
    return results


def _here(fn: Any, call: tuple[tuple[Any, ...], dict[str, Any]]) -> tuple[Any, Exception | None]:
    """One call in this process, as a tile (no nested splitting)."""
    from fpemu import parallel  # noqa: PLC0415

    token = parallel._IN_TILE.set(True)
    try:
        return fn(*call[0], **call[1]), None
    except Exception as exc:  # re-raised in call order by map_calls
        return None, exc
    finally:
        parallel._IN_TILE.reset(token)


# -- messages: a pickle with its array buffers out of band --------------------------------------
def _pickle(obj: Any) -> list[Any]:
    import io  # noqa: PLC0415

    bufs: list[Any] = []
    f = io.BytesIO()
    _Pickler(f, protocol=5, buffer_callback=bufs.append).dump(obj)
    parts = [f.getbuffer(), *(b.raw() for b in bufs)]
    sizes = struct.pack(f"<{len(parts) + 1}Q", len(parts), *(p.nbytes for p in parts))
    return [memoryview(sizes), *parts]


class _Pickler(pickle.Pickler):
    """NumPy pickles arrays of ml_dtypes' formats (bfloat16, float8) in band, a slow copy
    (~0.4 ms per MB); their bits as unsigned ints travel out of band like any array."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj).__name__ == "ndarray" and obj.dtype.type.__module__ == "ml_dtypes":
            return _from_bits, (obj.view(f"u{obj.dtype.itemsize}"), obj.dtype.name)
        return NotImplemented


def _from_bits(bits: Any, name: str) -> Any:
    """An ml_dtypes array from its bits (what :class:`_Pickler` sends)."""
    import ml_dtypes  # noqa: PLC0415

    return bits.view(getattr(ml_dtypes, name))


def _write(fd: int, parts: list[Any]) -> None:
    views = [memoryview(p).cast("B") for p in parts]
    if len(views) > 1 and sum(v.nbytes for v in views) <= 2**16:
        views = [memoryview(b"".join(views))]  # a small message in one system call
    for view in views:
        while view.nbytes:
            view = view[os.write(fd, view) :]


def _read(fd: int, n: int) -> bytearray:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = os.readv(fd, [view[got:]])
        if k == 0:
            raise EOFError("fpemu worker pipe closed")
        got += k
    return buf


def _recv(fd: int) -> Any:
    (count,) = struct.unpack("<Q", _read(fd, 8))
    sizes = struct.unpack(f"<{count}Q", _read(fd, 8 * count))
    head, *bufs = (_read(fd, n) for n in sizes)
    return pickle.loads(head, buffers=bufs)


def _serve() -> None:
    """A worker's loop: read a call, run it, write the reply, until the input closes.

    Importing this module imported the package first (``fpemu/__init__.py``), so every
    built-in model is registered before the first call arrives."""
    global _IN_WORKER
    _IN_WORKER = True
    out = os.dup(1)
    os.dup2(2, 1)  # stray prints go to stderr, not into the replies
    import warnings  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    _write(out, _pickle("ready"))
    while True:
        try:
            tag, ref, args, kwargs, err = _recv(0)
        except EOFError:
            return
        if tag == "init":  # (tag, fn, args, ...): set this worker up (fpemu.offload); no reply
            ref(*args)
            continue
        try:
            fn = ref[0](*ref[1:]) if isinstance(ref, tuple) else ref
            with np.errstate(**err), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = fn(*args, **kwargs)
                # a tile ("call") comes back as an array; a queued job (fpemu.offload) as it is
                value = np.asarray(value) if tag == "call" else value
            reply: Any = ("ok", value, [(w.category, str(w.message)) for w in caught])
        except Exception as exc:  # sent back and raised by the caller
            reply = ("err", exc, [])
        try:
            msg = _pickle(reply)
        except Exception as exc:  # an exception or warning that cannot pickle
            msg = _pickle(("err", RuntimeError(f"{type(exc).__name__}: {exc}"), []))
        _write(out, msg)


def shutdown() -> None:
    """Stop every worker (at exit, and for tests).

    >>> shutdown()
    """
    with _LOCK:
        workers = list(_WORKERS)
        _WORKERS.clear()
    for w in workers:
        w.stop()


def _after_fork() -> None:
    """A forked child shares the parent's pipes: close its copies and start afresh."""
    global _LOCK
    _LOCK = threading.Lock()
    for w in _WORKERS:
        for f in (w.proc.stdin, w.proc.stdout):
            if f is not None:
                f.close()
        w.proc.returncode = 0  # the parent's to reap: no "still running" warning here
    _WORKERS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
