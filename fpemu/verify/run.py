"""Running a campaign: in one process, on Dask's threaded scheduler, or on a Dask cluster.

Chunks are independent tasks; whoever runs one returns its :class:`ChunkResult` to this
process, which alone records it in the results folder (so a worker that dies mid-chunk loses
nothing: Dask runs that task again elsewhere, and a chunk is recorded once).

``scheduler``: ``None`` (Dask's local threaded scheduler when Dask is installed, else one
process), ``"sync"`` (one process, no Dask), ``"threads"``, a ``dask.distributed`` scheduler
address (``"tcp://host:8786"``) or a ``distributed.Client``.

>>> r = run_campaign("add-e4m3fn-rtz", chunks=4, scheduler="sync")
>>> r.ok, r.cases
(True, 65536)
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from itertools import islice
from typing import Any, TextIO

from fpemu.verify.campaign import Campaign, evaluate_chunk, get_campaign
from fpemu.verify.report import ChunkResult, Report
from fpemu.verify.store import ResultStore

#: Tasks kept in flight per worker thread on a dask.distributed cluster.
IN_FLIGHT_PER_THREAD = 4
#: Default number of cases per chunk (about a second of work per chunk on one core).
CHUNK_CASES = 1 << 22


def default_chunks(size: int) -> int:
    """Number of chunks of about :data:`CHUNK_CASES` cases."""
    return max(1, math.ceil(size / CHUNK_CASES))


class Progress:
    """A one-line progress display (chunks, cases, cases/s, ETA) on a terminal's stderr."""

    def __init__(
        self,
        name: str,
        total_cases: int,
        done_cases: int,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.name, self.total, self.done = name, total_cases, done_cases
        self.start_done, self.t0, self.last = done_cases, time.monotonic(), 0.0

    def update(self, cases: int, force: bool = False) -> None:
        """Count ``cases`` more finished cases; redraw at most every half second."""
        self.done += cases
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.5 and not force):
            return
        self.last = now
        rate = (self.done - self.start_done) / max(now - self.t0, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 else math.inf
        eta_s = "--:--" if not math.isfinite(eta) else f"{int(eta) // 60:d}:{int(eta) % 60:02d}"
        pct = 100.0 * self.done / max(self.total, 1)
        self.stream.write(
            f"\r{self.name}: {pct:5.1f}% {self.done}/{self.total} cases, "
            f"{rate:,.0f} cases/s, ETA {eta_s} "
        )
        self.stream.flush()

    def close(self) -> None:
        """End the line."""
        if self.enabled:
            self.update(0, force=True)
            self.stream.write("\n")


def _have_dask() -> bool:
    try:
        import dask  # noqa: F401, PLC0415 - optional dependency
    except ImportError:
        return False
    return True


def _check_scheduler(scheduler: Any) -> str:
    if scheduler is None:
        return "threads" if _have_dask() else "sync"
    if scheduler in ("sync", "threads"):
        if scheduler == "threads" and not _have_dask():
            raise ValueError("scheduler='threads' needs Dask: pip install 'fpemu[scale]'")
        return str(scheduler)
    if isinstance(scheduler, str) and ("://" in scheduler or ":" in scheduler):
        return "distributed"
    if type(scheduler).__name__ == "Client" and hasattr(scheduler, "submit"):
        return "distributed"
    raise ValueError(
        f"scheduler={scheduler!r}: expected None, 'sync', 'threads', a scheduler "
        "address such as 'tcp://host:8786', or a distributed.Client"
    )


def run_campaign(
    campaign: str | Campaign,
    *,
    results: str | os.PathLike[str] | None = None,
    chunks: int | None = None,
    scheduler: Any = None,
    workers: int | None = None,
    progress: bool | None = None,
    on_chunk: Callable[[ChunkResult], None] | None = None,
) -> Report:
    """Run every chunk not yet in ``results`` and return the campaign's report.

    Args:
        campaign: a registered name or a :class:`Campaign`.
        results: folder recording finished chunks (created if missing); a rerun with the same
            folder skips them. ``None``: keep results in memory only.
        chunks: number of chunks (default: :func:`default_chunks`); fixed per results folder.
        scheduler: see the module notes.
        workers: threads for the threaded scheduler (default: Dask's, one per core).
        progress: show a progress line (default: when stderr is a terminal).
        on_chunk: called in this process with each chunk result as it is recorded.
    """
    c = get_campaign(campaign)
    n = default_chunks(c.size) if chunks is None else chunks
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= c.size:
        raise ValueError(f"chunks={chunks!r}: expected an int in [1, {c.size}] for {c.name}")
    kind = _check_scheduler(scheduler)
    if workers is not None and (
        isinstance(workers, bool) or not isinstance(workers, int) or workers < 1
    ):
        raise ValueError(f"workers={workers!r}: expected an int >= 1")
    store = ResultStore(results, campaign=c.name, chunks=n, size=c.size) if results else None
    done: dict[int, ChunkResult] = store.done() if store else {}
    pending = [i for i in range(n) if i not in done]
    bar = Progress(c.name, c.size, sum(r.cases for r in done.values()), enabled=progress)
    t0, cpu0, cases0 = time.monotonic(), time.process_time(), bar.done

    def record(r: ChunkResult) -> None:
        if r.index in done:  # a chunk is counted once, whatever the scheduler did
            return
        if store:
            store.record(r)
        done[r.index] = r
        bar.update(r.cases)
        if on_chunk:
            on_chunk(r)

    if store:
        store.__enter__()
    try:
        if kind == "sync":
            for i in pending:
                record(evaluate_chunk(c, i, n))
        elif kind == "threads":
            _run_threads(c, pending, n, record, workers)
        else:
            _run_distributed(c, pending, n, record, scheduler)
    finally:
        bar.close()
        if store:
            store.__exit__(None, None, None)
    rep = Report.from_chunks(c.name, c.description, n, done.values())
    wall, cases = time.monotonic() - t0, bar.done - cases0
    run: dict[str, Any] = {"scheduler": kind, "cases_run": cases, "wall_seconds": round(wall, 3)}
    if kind != "distributed":  # the work ran in this process: its CPU time is the cost
        cpu = time.process_time() - cpu0
        rate = round(cases / cpu) if cases and cpu > 0 else None
        run.update(cpu_seconds=round(cpu, 3), cases_per_cpu_second=rate)
        if rate is None:  # a rerun whose chunks were all in the results folder: no rate
            run["rate_note"] = "no case ran in this invocation (every chunk was recorded)"
    rep.extra.update(run)
    return rep


def _run_threads(
    c: Campaign,
    pending: list[int],
    n: int,
    record: Callable[[ChunkResult], None],
    workers: int | None,
) -> None:
    import dask  # noqa: PLC0415 - optional dependency
    from dask.callbacks import Callback  # noqa: PLC0415

    class _Record(Callback):  # type: ignore[misc,unused-ignore]
        # the local scheduler calls _posttask in this (the scheduling) thread, once per task
        def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, wid: Any) -> None:
            if isinstance(result, ChunkResult):
                record(result)

    delayed: Any = dask.delayed  # type: ignore[attr-defined]
    compute: Any = dask.compute  # type: ignore[attr-defined]
    tasks = [delayed(evaluate_chunk, pure=False)(c, i, n) for i in pending]
    with _Record():  # type: ignore[no-untyped-call,unused-ignore]
        compute(*tasks, scheduler="threads", num_workers=workers)


def _run_distributed(
    c: Campaign, pending: list[int], n: int, record: Callable[[ChunkResult], None], scheduler: Any
) -> None:
    from distributed import Client, as_completed  # noqa: PLC0415 - optional dependency

    client: Any = scheduler if isinstance(scheduler, Client) else Client(scheduler)  # type: ignore[no-untyped-call,unused-ignore]
    try:
        # a bounded window of tasks in flight: a campaign of millions of chunks must not
        # put millions of tasks on the scheduler at once
        threads = sum(client.nthreads().values()) or 1
        window = max(IN_FLIGHT_PER_THREAD * threads, 8)
        todo = iter(pending)
        first = [client.submit(evaluate_chunk, c, i, n, pure=False) for i in islice(todo, window)]
        running: Any = as_completed(first)  # type: ignore[no-untyped-call,unused-ignore]
        for fut in running:
            record(fut.result())
            fut.release()  # drop the result from the cluster's memory
            nxt = next(todo, None)
            if nxt is not None:
                running.add(client.submit(evaluate_chunk, c, nxt, n, pure=False))
    finally:
        if client is not scheduler:
            client.close()
