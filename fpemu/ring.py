"""The shared memory of :mod:`fpemu.offload`: a ring of snapshots of queued calls' arrays.

A queued call's arrays are copied, when it is queued, into a Linux memfd that the worker maps
(by its ``/proc`` path), each at its own strides (some emulations read the layout: NumPy's own
pickle would make a strided array C-contiguous); the pipe then carries only a small pickle
that names each array's place (:class:`Pickler`, :func:`_from_ring`). Blocks are taken and
freed first-in first-out (:class:`Ring`). An array that cannot travel (objects, elements far
apart, no room) raises :class:`StayError`: its call runs in the caller.

>>> import numpy as np, io, pickle
>>> ring = Ring(2**20)
>>> _VIEWS[ring.path] = ring.view
>>> f = io.BytesIO(); Pickler(f, ring, 0).dump(np.arange(4.0).reshape(2, 2).T)
>>> a = pickle.loads(f.getvalue()); a.tolist(), a.strides, a.flags.writeable
([[0.0, 2.0], [1.0, 3.0]], (8, 16), False)
>>> ring.free(0); del _VIEWS[ring.path]
"""

from __future__ import annotations

import math
import os
import pickle
from collections import deque
from typing import Any

from fpemu import procpool

__all__ = ["Pickler", "Ring", "StayError", "attach", "ring_of"]


class Ring:
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


class StayError(Exception):
    """The call cannot travel to the worker: it runs in the caller."""


#: the rings this process sees, by path: the caller's own mappings, or (in a worker) the
#: caller's memfd mapped by :func:`attach`
_VIEWS: dict[str, memoryview] = {}

#: an array whose elements lie this many times their size apart (a column of a large matrix)
#: is not copied into the ring: its call runs in the caller
_SPAN_SLACK = 4


class Pickler(pickle.Pickler):
    """Pickles each NumPy array as its place in the ring (:func:`_from_ring`), its elements
    copied there at the same strides: a channels-last or transposed tensor stays so (NumPy's
    own pickle makes a strided array C-contiguous, and some emulations read the layout)."""

    def __init__(self, f: Any, ring: Ring, ticket: int) -> None:
        super().__init__(f, protocol=5)
        self.ring, self.ticket = ring, ticket

    def reducer_override(self, obj: Any) -> Any:
        if type(obj).__name__ != "ndarray":
            return NotImplemented
        import numpy as np  # noqa: PLC0415

        if obj.dtype.hasobject:
            raise StayError
        # the bytes the array spans, and where its first element lies in them (a C-contiguous
        # array, most of them: its bytes, from its start)
        if obj.flags.c_contiguous:
            span, lead = obj.nbytes, 0
        else:
            span, lead = obj.dtype.itemsize, 0
            for n, st in zip(obj.shape, obj.strides, strict=True):
                if n > 1:
                    span += (n - 1) * abs(st)
                    lead += (n - 1) * -st if st < 0 else 0
            if obj.size == 0:
                span, lead = 0, 0
        if span > _SPAN_SLACK * max(obj.nbytes, 4096):
            raise StayError
        off = self.ring.alloc(self.ticket, max(64, -(-span // 64) * 64))
        if off is None:
            raise StayError
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


def ring_of(w: Any, size: int) -> Ring | None:
    """The worker's ring, made and announced to it on first use (None where the system has
    no memfd: then nothing is queued for a worker)."""
    ring: Ring | None = getattr(w, "fpemu_ring", None)
    if ring is None and hasattr(os, "memfd_create"):
        try:
            ring = Ring(size)
            msg: tuple[Any, ...] = ("init", attach, (ring.path, ring.size), {}, None)
            procpool._write(w.wfd, procpool._pickle(msg))
        except OSError:
            return None
        w.fpemu_ring = ring
        _VIEWS[ring.path] = ring.view
    return ring
