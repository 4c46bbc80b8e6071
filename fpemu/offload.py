"""A queue of calls that a worker process runs while the caller goes on (:class:`Queue`).

``fpemu.watch`` judges each op torch runs; the judging costs several times the op, and it
need not hold up the training step: the watcher puts each judgement on a :class:`Queue` and
reads the verdicts when it reports. One worker process (:mod:`fpemu.procpool`'s, started on
first use and kept) runs the calls from the front, in order; when the caller asks for the
results, it runs the calls not yet sent from the back itself, so both cores finish together.

No threads: the caller writes each queued call into the worker's pipe, a few calls ahead of
it (more before the caller gets busy for a while: :meth:`Queue.pump`'s ``ahead``; the rest wait
here, for the caller to take back), without blocking, at every :meth:`Queue.submit` and
:meth:`Queue.pump`, and reads the replies as they come. Feeding threads were tried first: on a
virtual machine's cores, each chunk a thread writes must take Python's lock back from a busy
caller, and the worker starved. Each call carries the caller's estimate of its cost
(:meth:`Queue.backlog` sums those not answered) and comes back with the seconds it took
(:attr:`Queue.seconds`), so a caller can learn what to queue and what to do itself.

A call's arrays are copied when it is queued (the caller's arrays may change afterwards: an
optimizer updates its tensors in place) into shared memory the worker maps
(:mod:`fpemu.ring`); the pipe carries only a small pickle. A call that raised re-raises in
:meth:`Queue.results`; the calls of a worker that died run in the caller. A call that cannot
travel (no module-level function, an array whose elements lie far apart, a full ring) runs in
the caller at once. With no worker ready (:func:`fpemu.procpool.enabled` false, one core, the
worker still starting, no memfd) :meth:`Queue.ready` is False: callers then run their calls
themselves, at once.

>>> import numpy as np
>>> q = Queue()
>>> tickets = [q.submit(np.add, np.arange(3), i) for i in range(4)]
>>> [r.tolist() for r in q.results()]
[[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]]
>>> q.close()
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from collections import deque
from typing import Any

from fpemu import procpool
from fpemu.ring import Pickler, Ring, StayError, ring_of

__all__ = ["Queue"]

#: Bytes of shared memory between the caller and its worker: the arrays of the calls queued
#: and not yet done (a call that does not fit runs in the caller; a long watched run does
#: not hold every step's tensors).
RING = 64 * 2**20
#: Calls written to the worker and not answered yet, at most (its next ones, so it never waits
#: for the caller; the others stay queued, for the caller to take back).
AHEAD = 3
#: Seconds between two attempts to get a worker while none is ready.
_RETRY = 0.05


class Queue:
    """Calls run in order by one worker process, the rest by the caller in :meth:`results`.

    One thread submits and collects (the queue has no threads of its own).
    """

    def __init__(self) -> None:
        self._msgs: dict[int, bytes] = {}  # ticket -> the framed pickle of a call, until done
        self._pending: deque[int] = deque()  # not sent: the worker's from the left
        self._sent: deque[int] = deque()  # written (the first maybe in part), no reply yet
        self._writing = memoryview(b"")  # what is left of the messages being written
        self._results: dict[int, tuple[bool, Any]] = {}  # ticket -> (ok, value or exception)
        self._cost: dict[int, float] = {}  # ticket -> the caller's estimate, until it is done
        self._backlog = 0.0  # the sum of those estimates
        self._in_flight = 0.0  # the sum of those of the calls written to the worker
        #: ticket -> the seconds its call took (wall clock, where it ran)
        self.seconds: dict[int, float] = {}
        self._count = 0
        #: calls the worker ran (the others ran in the caller)
        self.worker_calls = 0
        self._worker: Any = None
        self._ring: Ring | None = None
        self._dead = False
        self._tried = -1.0

    def ready(self) -> bool:
        """Whether a worker is running this queue's calls (tries to get one, without waiting,
        at most every 50 ms)."""
        if self._worker is not None:
            return not self._dead
        now = time.monotonic()
        if self._dead or now - self._tried < _RETRY:
            return False
        self._tried = now
        got = procpool._acquire(1)
        if not got:
            return False
        w = got[0]
        self._ring = ring_of(w, RING)
        if self._ring is None:  # no shared memory: the calls stay here
            w.busy.release()
            self._dead = True
            return False
        self._worker = w
        os.set_blocking(w.wfd, False)
        return True

    def submit(self, fn: Any, *args: Any, cost: float = 0.0) -> int:
        """Queue ``fn(*args)`` (``fn`` a module-level function; its array arguments are
        copied now). Returns the call's ticket, its index in :meth:`results`. A call that
        cannot travel (a local function, no room in the ring) runs here, now. ``cost``: the
        caller's estimate of the call's seconds, counted in :meth:`backlog` until it is done."""
        import numpy as np  # noqa: PLC0415

        ticket = self._count
        self._count += 1
        try:
            msg = self._encode(ticket, ("job", _timed, (fn, *args), {}, np.geterr()))
        except StayError:
            self._finish(ticket, _timed(fn, *args))
            return ticket
        self._msgs[ticket] = msg
        self._cost[ticket] = cost
        self._backlog += cost
        self._pending.append(ticket)
        self.pump()
        return ticket

    def _encode(self, ticket: int, obj: Any) -> bytes:
        """The message of a call: a pickle in which each array is its place in the ring (its
        elements copied there, strides and all: an emulation may read the layout), or raise
        :class:`StayError`."""
        import io  # noqa: PLC0415

        ring = self._ring
        if ring is None or self._dead:
            raise StayError
        f = io.BytesIO()
        try:
            Pickler(f, ring, ticket).dump(obj)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            ring.free(ticket)
            raise StayError from exc
        except StayError:
            ring.free(ticket)
            raise
        head = f.getbuffer()
        # one buffer: the worker's frame (one part, its size), then the pickle
        return struct.pack("<2Q", 1, head.nbytes) + head

    def backlog(self) -> float:
        """Seconds of work queued and not answered yet, by the callers' estimates (a caller
        that has more to do than this may do it itself: the worker stays busy meanwhile).

        >>> q = Queue()  # no worker asked for (:meth:`ready`): calls run at once, here
        >>> t = q.submit(abs, -1, cost=0.5)
        >>> q.backlog(), q.results()
        (0.0, [1])
        >>> q.close()
        """
        return self._backlog

    def results(self) -> list[Any]:
        """Every submitted call's value, in ticket order (waits for the worker; runs the
        calls not sent to it here). The first call that raised re-raises."""
        while True:
            self.pump()
            if not self._run_one():
                break
        self._drain()
        out = []
        for ticket in range(self._count):
            ok, value = self._results[ticket]
            if not ok:
                raise value
            out.append(value)
        return out

    def close(self) -> None:
        """Give the worker back (after :meth:`results`); a worker that died is reaped."""
        if self._worker is not None and (self._sent or self._writing):
            self._drain()  # the next user of the worker must not read this queue's replies
        w, self._worker = self._worker, None
        if w is None:
            return
        if self._ring is not None:
            for ticket in list(self._ring._by_ticket):  # calls never run: nothing reads them
                self._ring.free(ticket)
        if self._dead:
            procpool._drop(w, kill=True)
        else:
            os.set_blocking(w.wfd, True)
        w.busy.release()

    # -- moving calls -----------------------------------------------------------------------
    def pump(self, ahead: float = 0.0) -> None:
        """Move calls along: read the replies that have come, then write the next calls (the
        caller calls this between its own work, so the worker is never left without): at
        least :data:`AHEAD` calls ahead of the worker, and more while the estimated cost of the
        calls written and not answered is below ``ahead`` seconds (a caller about to be busy
        for that long sends the worker that much)."""
        w = self._worker
        if w is None or self._dead:
            return
        try:
            while self._sent and select.select([w.rfd], [], [], 0)[0]:
                self._reply()
            while True:
                if not self._writing:
                    # a few calls ahead of the worker: the rest stay here, for the caller to
                    # take back from the end when it wants the results; those sent now go in
                    # one write (each write wakes the worker: on a loaded machine a wake-up
                    # may cost this thread its core for a while)
                    batch = []
                    while self._pending and (len(self._sent) < AHEAD
                                             or self._in_flight < ahead):  # fmt: skip
                        ticket = self._pending.popleft()
                        self._sent.append(ticket)
                        self._in_flight += self._cost.get(ticket, 0.0)
                        batch.append(self._msgs[ticket])
                    if not batch:
                        return
                    self._writing = memoryview(b"".join(batch))
                n = os.write(w.wfd, self._writing)  # not blocking: a full pipe raises
                self._writing = self._writing[n:]
                if self._writing:
                    return
        except BlockingIOError:
            return
        except (OSError, EOFError):
            self._died()

    def _reply(self) -> None:
        kind, value, _caught = procpool._recv(self._worker.rfd)
        self.worker_calls += 1
        if kind != "ok":  # (_timed returns what its call raised: an error of the transport)
            value = (False, value, 0.0)
        if not value[0]:
            value[1].add_note("(raised in an fpemu worker process)")
        ticket = self._sent.popleft()
        self._in_flight -= self._cost.get(ticket, 0.0)
        if not self._sent:
            self._in_flight = 0.0
        self._finish(ticket, value)

    def _drain(self) -> None:
        """Finish writing the call in progress and read every outstanding reply."""
        w = self._worker
        if w is not None and not self._dead:
            try:
                os.set_blocking(w.wfd, True)
                procpool._write(w.wfd, [self._writing])
                self._writing = memoryview(b"")
                while self._sent:
                    self._reply()
            except (OSError, EOFError):
                self._died()
        for ticket in list(self._sent):  # a worker that died: its calls run here
            self._run_here(ticket)
        self._sent.clear()

    def _died(self) -> None:
        self._dead = True
        self._writing = memoryview(b"")

    def _run_one(self) -> bool:
        """Run the newest call not sent to the worker, here; False when there is none."""
        if not self._pending:
            return False
        self._run_here(self._pending.pop())
        return True

    def _run_here(self, ticket: int) -> None:
        import numpy as np  # noqa: PLC0415

        head = memoryview(self._msgs[ticket])[16:]  # (the frame's 16 bytes first)
        _, _, (fn, *args), _, err = pickle.loads(head)  # arrays: read-only views of the ring
        with np.errstate(**err):
            self._finish(ticket, _timed(fn, *args))

    def _finish(self, ticket: int, done: tuple[bool, Any, float]) -> None:
        """Record a result (``(ok, value or exception, seconds)``) and free its message."""
        ok, value, self.seconds[ticket] = done
        self._results[ticket] = (ok, value)
        self._backlog -= self._cost.pop(ticket, 0.0)
        if not self._cost:
            self._backlog = 0.0  # (no rounding drift left behind)
        self._msgs.pop(ticket, None)
        if self._ring is not None:
            self._ring.free(ticket)


def _timed(fn: Any, *args: Any) -> tuple[bool, Any, float]:
    """``fn(*args)`` as ``(ok, value or the exception, seconds)``: what a queued call
    sends back (the worker runs this; the caller learns what each kind of call costs)."""
    t0 = time.perf_counter()
    try:
        value = fn(*args)
    except Exception as exc:  # re-raised in ticket order by results()
        return False, exc, time.perf_counter() - t0
    return True, value, time.perf_counter() - t0
