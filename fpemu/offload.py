"""A queue of calls that a worker process runs while the caller goes on (:class:`Queue`).

``fpemu.watch`` judges each op torch runs; the judging costs several times the op, and it
need not hold up the training step: the watcher puts each judgement on a :class:`Queue` and
reads the verdicts when it reports. One worker process (:mod:`fpemu.procpool`'s, started on
first use and kept) runs the calls from the front, in order; when the caller asks for the
results, it runs the calls not yet sent from the back itself, so both cores finish together.

No threads: the caller writes each queued call into the worker's pipe, a few calls ahead of
it (the rest wait here, for the caller to take back), without blocking, at every
:meth:`Queue.submit` and :meth:`Queue.pump`, and reads the replies as they come. Feeding threads
were tried first: on a virtual machine's cores, each chunk a thread writes must take Python's
lock back from a busy caller, and the worker starved.

A call's arrays are copied when it is queued (the caller's arrays may change afterwards: an
optimizer updates its tensors in place) into shared memory, a ring the worker maps (a Linux
memfd), at their own strides (some emulations read the layout: NumPy's pickle would make a
strided array C-contiguous); the pipe carries only a small pickle. A call that raised
re-raises in :meth:`Queue.results`; the calls of a worker that died run in the caller. A call
that cannot travel (no module-level function, an array whose elements lie far apart, a full
ring) runs in the caller at once. With no worker ready (:func:`fpemu.procpool.enabled` false,
one core, the worker still starting, no memfd) :meth:`Queue.ready` is False: callers then run
their calls themselves, at once.

>>> import numpy as np
>>> q = Queue()
>>> tickets = [q.submit(np.add, np.arange(3), i) for i in range(4)]
>>> [r.tolist() for r in q.results()]
[[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]]
>>> q.close()
"""

from __future__ import annotations

import math
import os
import pickle
import struct
import time
from collections import deque
from typing import Any

from fpemu import procpool

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
        self._msgs: dict[int, list[Any]] = {}  # ticket -> pickled call, until it is done
        self._pending: deque[int] = deque()  # not sent: the worker's from the left
        self._sent: deque[int] = deque()  # written (the first maybe in part), no reply yet
        self._writing: list[memoryview] = []  # what is left of the message being written
        self._results: dict[int, tuple[bool, Any]] = {}  # ticket -> (ok, value or exception)
        self._count = 0
        #: calls the worker ran (the others ran in the caller)
        self.worker_calls = 0
        self._worker: Any = None
        self._ring: _Ring | None = None
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
        self._ring = _ring_of(w)
        if self._ring is None:  # no shared memory: the calls stay here
            w.busy.release()
            self._dead = True
            return False
        self._worker = w
        os.set_blocking(w.wfd, False)
        return True

    def submit(self, fn: Any, *args: Any) -> int:
        """Queue ``fn(*args)`` (``fn`` a module-level function; its array arguments are
        copied now). Returns the call's ticket, its index in :meth:`results`. A call that
        cannot travel (a local function, no room in the ring) runs here, now."""
        import numpy as np  # noqa: PLC0415

        ticket = self._count
        self._count += 1
        try:
            msg = self._encode(ticket, ("job", fn, args, {}, np.geterr()))
        except _StayError:
            try:
                self._results[ticket] = (True, fn(*args))
            except Exception as exc:  # re-raised in ticket order by results()
                self._results[ticket] = (False, exc)
            return ticket
        self._msgs[ticket] = msg
        self._pending.append(ticket)
        self.pump()
        return ticket

    def _encode(self, ticket: int, obj: Any) -> list[Any]:
        """The message of a call: a pickle in which each array is its place in the ring (its
        elements copied there, strides and all: an emulation may read the layout), or raise
        :class:`_StayError`."""
        import io  # noqa: PLC0415

        ring = self._ring
        if ring is None or self._dead:
            raise _StayError
        f = io.BytesIO()
        try:
            _RingPickler(f, ring, ticket).dump(obj)
        except (pickle.PicklingError, TypeError, AttributeError) as exc:
            ring.free(ticket)
            raise _StayError from exc
        except _StayError:
            ring.free(ticket)
            raise
        head = f.getbuffer()
        return [struct.pack("<2Q", 1, head.nbytes), head]

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
    def pump(self) -> None:
        """Move calls along: read the replies that have come, then write the next calls (the
        caller calls this between its own work, so the worker is never left without)."""
        import select  # noqa: PLC0415

        w = self._worker
        if w is None or self._dead:
            return
        try:
            while self._sent and select.select([w.rfd], [], [], 0)[0]:
                self._reply()
            while True:
                if not self._writing:
                    # a few calls ahead of the worker: the rest stay here, for the caller to
                    # take back from the end when it wants the results
                    if not self._pending or len(self._sent) >= AHEAD:
                        return
                    ticket = self._pending.popleft()
                    self._sent.append(ticket)
                    self._writing = [memoryview(p).cast("B") for p in self._msgs[ticket]]
                head = self._writing[0]
                n = os.write(w.wfd, head)  # not blocking: a full pipe raises
                if n < head.nbytes:
                    self._writing[0] = head[n:]
                    return
                self._writing.pop(0)
        except BlockingIOError:
            return
        except (OSError, EOFError):
            self._died()

    def _reply(self) -> None:
        kind, value, _caught = procpool._recv(self._worker.rfd)
        self.worker_calls += 1
        if kind != "ok":
            value.add_note("(raised in an fpemu worker process)")
        self._finish(self._sent.popleft(), (kind == "ok", value))

    def _drain(self) -> None:
        """Finish writing the call in progress and read every outstanding reply."""
        w = self._worker
        if w is not None and not self._dead:
            try:
                os.set_blocking(w.wfd, True)
                for part in self._writing:
                    procpool._write(w.wfd, [part])
                self._writing = []
                while self._sent:
                    self._reply()
            except (OSError, EOFError):
                self._died()
        for ticket in list(self._sent):  # a worker that died: its calls run here
            self._run_here(ticket)
        self._sent.clear()

    def _died(self) -> None:
        self._dead = True
        self._writing = []

    def _run_one(self) -> bool:
        """Run the newest call not sent to the worker, here; False when there is none."""
        if not self._pending:
            return False
        self._run_here(self._pending.pop())
        return True

    def _run_here(self, ticket: int) -> None:
        import numpy as np  # noqa: PLC0415

        _, head = self._msgs[ticket]
        _, fn, args, kwargs, err = pickle.loads(head)  # arrays: read-only views of the ring
        try:
            with np.errstate(**err):
                done: tuple[bool, Any] = (True, fn(*args, **kwargs))
        except Exception as exc:  # re-raised in ticket order by results()
            done = (False, exc)
        self._finish(ticket, done)

    def _finish(self, ticket: int, done: tuple[bool, Any]) -> None:
        """Record a result and free its message."""
        self._results[ticket] = done
        self._msgs.pop(ticket, None)
        if self._ring is not None:
            self._ring.free(ticket)


class _Ring:
    """Shared memory (a Linux memfd the worker maps by its ``/proc`` path) cut into blocks in
    first-in first-out order: a queued call's array buffers are copied into one block (its
    snapshot: one copy, no pipe), freed when its reply comes or it runs here."""

    def __init__(self, size: int) -> None:
        import mmap  # noqa: PLC0415

        self.fd = os.memfd_create("fpemu-offload")
        os.ftruncate(self.fd, size)
        self.view = memoryview(mmap.mmap(self.fd, size))
        # touch every page once now (~10 ms): a first write to a page later costs a fault,
        # 3x the copy it interrupts
        zeros = bytes(2**20)
        for off in range(0, size, len(zeros)):
            n = min(len(zeros), size - off)
            self.view[off : off + n] = zeros[:n]
        self.size = size
        self.path = f"/proc/{os.getpid()}/fd/{self.fd}"
        self._blocks: deque[list[int]] = deque()  # [ticket, offset, size, live]
        self._by_ticket: dict[int, list[list[int]]] = {}

    def alloc(self, ticket: int, n: int) -> int | None:
        """The offset of a free block of ``n`` bytes for ``ticket``, or None (full)."""
        if not self._blocks:
            off: int | None = 0 if n <= self.size else None
        else:
            first, last = self._blocks[0], self._blocks[-1]
            end = last[1] + last[2]
            if last[1] < first[1]:  # wrapped: free space lies between the two
                off = end if end + n <= first[1] else None
            else:
                off = end if end + n <= self.size else (0 if n <= first[1] else None)
        if off is not None:
            block = [ticket, off, n, 1]
            self._blocks.append(block)
            self._by_ticket.setdefault(ticket, []).append(block)
        return off

    def free(self, ticket: int) -> None:
        for block in self._by_ticket.pop(ticket, ()):
            block[3] = 0
        while self._blocks and not self._blocks[0][3]:
            self._blocks.popleft()
        while self._blocks and not self._blocks[-1][3]:
            self._blocks.pop()


class _StayError(Exception):
    """The call cannot travel to the worker: it runs in the caller."""


#: the rings this process sees, by path: the caller's own mappings, or (in a worker) the
#: caller's memfd mapped by :func:`attach`
_VIEWS: dict[str, memoryview] = {}

#: an array whose elements lie this many times their size apart (a column of a large matrix)
#: is not copied into the ring: its call runs in the caller
_SPAN_SLACK = 4


class _RingPickler(pickle.Pickler):
    """Pickles each NumPy array as its place in the ring (:func:`_from_ring`), its elements
    copied there at the same strides: a channels-last or transposed tensor stays so (NumPy's
    own pickle makes a strided array C-contiguous, and some emulations read the layout)."""

    def __init__(self, f: Any, ring: _Ring, ticket: int) -> None:
        super().__init__(f, protocol=5)
        self.ring, self.ticket = ring, ticket

    def reducer_override(self, obj: Any) -> Any:
        if type(obj).__name__ != "ndarray":
            return NotImplemented
        import numpy as np  # noqa: PLC0415

        if obj.dtype.hasobject:
            raise _StayError
        # the bytes the array spans, and where its first element lies in them
        span, lead = obj.dtype.itemsize, 0
        for n, st in zip(obj.shape, obj.strides, strict=True):
            if n > 1:
                span += (n - 1) * abs(st)
                lead += (n - 1) * -st if st < 0 else 0
        if obj.size == 0:
            span, lead = 0, 0
        if span > _SPAN_SLACK * max(obj.nbytes, 4096):
            raise _StayError
        off = self.ring.alloc(self.ticket, max(64, -(-span // 64) * 64))
        if off is None:
            raise _StayError
        if obj.size:
            dst: Any = np.ndarray(obj.shape, obj.dtype, buffer=self.ring.view,
                                  offset=off + lead, strides=obj.strides)  # fmt: skip
            np.copyto(dst, obj)
        name = obj.dtype.name if obj.dtype.type.__module__ == "ml_dtypes" else obj.dtype.str
        return _from_ring, (self.ring.path, name, obj.shape, obj.strides, off + lead)


def _from_ring(ring: str, dtype: str, shape: Any, strides: Any, offset: int) -> Any:
    """An array in the ring (read-only: the caller's snapshot of a queued call)."""
    import numpy as np  # noqa: PLC0415

    dt = np.dtype(dtype) if dtype[:1] in "<>|=" else np.dtype(_ml(dtype))
    if not math.prod(shape):  # (np.prod of a tuple costs ~7 us: most of this function)
        return np.empty(shape, dt)
    a = np.ndarray(shape, dt, buffer=_VIEWS[ring], offset=offset, strides=strides)
    a.flags.writeable = False
    return a


def _ml(name: str) -> Any:
    import ml_dtypes  # noqa: PLC0415

    return getattr(ml_dtypes, name)


def attach(path: str, size: int) -> None:
    """Map the caller's ring (a worker, on the first message of a queue)."""
    import mmap  # noqa: PLC0415

    with open(path, "r+b") as f:
        _VIEWS[path] = memoryview(mmap.mmap(f.fileno(), size))


def _ring_of(w: Any) -> _Ring | None:
    """The worker's ring, made and announced to it on first use (None where the system has
    no memfd: then nothing is queued for a worker)."""
    ring: _Ring | None = getattr(w, "fpemu_ring", None)
    if ring is None and hasattr(os, "memfd_create"):
        try:
            ring = _Ring(RING)
            msg: tuple[Any, ...] = ("init", attach, (ring.path, ring.size), {}, None)
            procpool._write(w.wfd, procpool._pickle(msg))
        except OSError:
            return None
        w.fpemu_ring = ring
        _VIEWS[ring.path] = ring.view
    return ring
