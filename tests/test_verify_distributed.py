"""A campaign on a real dask.distributed LocalCluster survives a killed worker.

Two worker processes; one is killed (SIGKILL) in the middle of the run. The scheduler runs the
lost tasks again on the other (or the restarted) worker; the driver records each chunk once, so
the final report equals the single-process run and the results file holds every chunk once.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from fpemu.verify import AllPairs, Campaign, Checker, FpemuOp, run_campaign
from fpemu.verify.store import CHUNKS

distributed = pytest.importorskip("distributed")

FMT = "float8_e5m2"


@dataclass(frozen=True)
class SlowTieBug:
    """fpemu's add with ties to even (a planted bug for mode rna), slowed to keep chunks busy."""

    delay: float = 0.15

    def __call__(self, *xs: Any) -> Any:
        time.sleep(self.delay)
        return FpemuOp("add", FMT, "rne")(*xs)


def _campaign() -> Campaign:
    chk = Checker("add", FMT, "rna")
    return Campaign("slow-tie-bug", AllPairs(FMT), SlowTieBug(), chk, FMT, chk.parts)


def test_killed_worker_loses_no_chunk(tmp_path: Path) -> None:
    chunks = 24
    c = _campaign()
    alone = run_campaign(c, chunks=chunks, scheduler="sync")
    assert alone.mismatches > 0  # the report has content to compare
    with (
        distributed.LocalCluster(
            n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        pids = client.run(os.getpid)  # worker address -> process id
        victim = sorted(pids.values())[0]
        killed: list[int] = []

        def kill_once(r: Any) -> None:
            if not killed and r is not None:
                os.kill(victim, signal.SIGKILL)  # mid-run: other chunks are still running
                killed.append(victim)

        rep = run_campaign(c, results=tmp_path, chunks=chunks, scheduler=client, on_chunk=kill_once)
        assert killed
        assert victim not in client.run(os.getpid).values()  # really gone (nanny restarted it)
    assert rep.results() == alone.results()
    lines = (tmp_path / CHUNKS).read_text(encoding="utf-8").splitlines()
    assert sorted(json.loads(s)["chunk"] for s in lines) == list(range(chunks))
