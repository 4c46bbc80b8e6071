"""A queue of calls that a worker process runs while the caller goes on (:class:`Queue`).

``fpemu.watch`` judges each op torch runs; the judging costs several times the op, and it
need not hold up the training step: the watcher puts each judgement on a :class:`Queue` and
reads the verdicts when it reports. One worker process (:mod:`fpemu.procpool`'s, started on
first use and kept) takes the calls from the front, in order; when the caller asks for the
results, it takes the calls no worker has started from the back and runs them itself, so both
cores finish together.

A call's arguments are copied when it is queued (the caller's arrays may change afterwards:
an optimizer updates its tensors in place), as one pickle whose array buffers travel out of
band. A call that raised re-raises in :meth:`Queue.results`; the calls of a worker that died
run in the caller. With no worker ready (:func:`fpemu.procpool.enabled` false, one core, or
the worker still starting) :meth:`Queue.ready` is False: callers then run their calls
themselves, at once, rather than pay for the copies.

>>> import numpy as np
>>> q = Queue()
>>> tickets = [q.submit(np.add, np.arange(3), i) for i in range(4)]
>>> [r.tolist() for r in q.results()]
[[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]]
>>> q.close()
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from fpemu import procpool

__all__ = ["Queue"]

#: Most bytes of queued arguments before :meth:`Queue.submit` runs queued calls itself (a
#: long watched run must not hold every step's tensors).
MAX_BYTES = 256 * 2**20
#: Seconds between two attempts to get a worker while none is ready.
_RETRY = 0.05


class Queue:
    """Calls run in order by one worker process, the rest by the caller in :meth:`results`.

    Not thread-safe for callers: one thread submits and collects (the feeding threads are
    the queue's own).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._msgs: dict[int, list[Any]] = {}  # ticket -> pickled call (until it is done)
        self._sizes: dict[int, int] = {}
        self._bytes = 0
        self._pending: deque[int] = deque()  # not started: the worker takes from the left
        self._sent: deque[int] = deque()  # written to the worker, reply not yet read
        self._results: dict[int, tuple[bool, Any]] = {}  # ticket -> (ok, value or exception)
        self._count = 0
        self._worker: Any = None
        self._dead = False
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._tried = -1.0

    # -- the caller's side ------------------------------------------------------------------
    def ready(self) -> bool:
        """Whether a worker is running this queue's calls (tries to get one, without waiting,
        at most every 50 ms)."""
        if self._worker is not None and not self._dead:
            return True
        now = time.monotonic()
        if self._dead or self._closed or now - self._tried < _RETRY:
            return False
        self._tried = now
        got = procpool._acquire(1)
        if not got:
            return False
        self._worker = got[0]
        for body in (self._write_loop, self._read_loop):
            t = threading.Thread(target=body, daemon=True, name="fpemu-offload")
            t.start()
            self._threads.append(t)
        return True

    def submit(self, fn: Any, *args: Any) -> int:
        """Queue ``fn(*args)`` (``fn`` a module-level function; its array arguments are
        copied now). Returns the call's ticket, its index in :meth:`results`."""
        import numpy as np  # noqa: PLC0415

        parts = procpool._pickle(("job", fn, args, {}, np.geterr()))
        # the snapshot: the pickle's head holds no array data; the buffers are the arrays'
        # own memory until copied here
        msg = [parts[0], parts[1], *(bytearray(p) for p in parts[2:])]
        size = sum(memoryview(p).nbytes for p in msg)
        with self._cond:
            ticket = self._count
            self._count += 1
            self._msgs[ticket] = msg
            self._sizes[ticket] = size
            self._bytes += size
            self._pending.append(ticket)
            self._cond.notify_all()
        while self._bytes > MAX_BYTES and self._run_one():
            pass
        return ticket

    def results(self) -> list[Any]:
        """Every submitted call's value, in ticket order (waits for the worker; runs the
        calls it has not started here). The first call that raised re-raises."""
        while self._run_one():
            pass
        with self._cond:
            while self._sent and not self._dead:
                self._cond.wait()
            stranded = list(self._sent)  # a worker that died: its calls run here
            self._sent.clear()
        for ticket in stranded:
            self._run_here(ticket)
        out = []
        for ticket in range(self._count):
            ok, value = self._results[ticket]
            if not ok:
                raise value
            out.append(value)
        return out

    def close(self) -> None:
        """Stop the feeding threads and give the worker back (after :meth:`results`)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        for t in self._threads:
            t.join()
        if self._worker is not None:
            if self._dead:
                procpool._drop(self._worker, kill=True)
            self._worker.busy.release()
            self._worker = None

    def _run_one(self) -> bool:
        """Run the newest call no worker has started, here; False when there is none."""
        with self._cond:
            if not self._pending:
                return False
            ticket = self._pending.pop()
        self._run_here(ticket)
        return True

    def _run_here(self, ticket: int) -> None:
        import pickle  # noqa: PLC0415

        import numpy as np  # noqa: PLC0415

        _, head, *bufs = self._msgs[ticket]
        _, fn, args, kwargs, err = pickle.loads(head, buffers=bufs)
        try:
            with np.errstate(**err):
                done: tuple[bool, Any] = (True, fn(*args, **kwargs))
        except Exception as exc:  # re-raised in ticket order by results()
            done = (False, exc)
        with self._cond:
            self._finish(ticket, done)

    def _finish(self, ticket: int, done: tuple[bool, Any]) -> None:
        """Record a result (with ``_cond`` held) and free its message."""
        self._results[ticket] = done
        self._msgs.pop(ticket, None)
        self._bytes -= self._sizes.pop(ticket, 0)
        self._cond.notify_all()

    # -- the feeding threads ----------------------------------------------------------------
    def _write_loop(self) -> None:
        """Write the oldest queued call to the worker, one ahead of the one it runs."""
        w = self._worker
        while True:
            with self._cond:
                while not self._closed and not self._dead and not (
                    self._pending and len(self._sent) < 2
                ):
                    self._cond.wait()
                if self._closed or self._dead:
                    return
                ticket = self._pending.popleft()
                self._sent.append(ticket)
                msg = self._msgs[ticket]
                self._cond.notify_all()  # the reader waits for a call in flight
            try:
                procpool._write(w.wfd, msg)
            except OSError:
                self._died()
                return

    def _read_loop(self) -> None:
        """Read the worker's replies, in the order the calls were written."""
        w = self._worker
        while True:
            with self._cond:
                while not self._closed and not self._dead and not self._sent:
                    self._cond.wait()
                if self._closed or self._dead:
                    return
            try:
                kind, value, _caught = procpool._recv(w.rfd)
            except (OSError, EOFError):
                self._died()
                return
            if kind != "ok":
                value.add_note("(raised in an fpemu worker process)")
            with self._cond:
                self._finish(self._sent.popleft(), (kind == "ok", value))

    def _died(self) -> None:
        with self._cond:
            self._dead = True
            self._cond.notify_all()
