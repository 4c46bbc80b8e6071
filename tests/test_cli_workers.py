"""``fpemu verify --workers N``: a local Dask cluster started and stopped for the run."""

from __future__ import annotations

import json
import multiprocessing

import pytest

from fpemu.cli import main

pytest.importorskip("distributed")


@pytest.mark.parametrize(
    ("argv", "want"),
    [
        (["--workers", "0"], "--workers 0: expected an integer >= 1"),
        (["--workers", "-1"], "--workers -1: expected an integer >= 1"),
        (["--workers", "x"], "--workers x: expected an integer >= 1"),
        (["--workers", "2", "--scheduler", "sync"], "--workers 2: starts its own local cluster"),
    ],
)
def test_bad_workers(capsys: pytest.CaptureFixture[str], argv: list[str], want: str) -> None:
    assert main(["verify", "sqrt-e4m3fn-rna", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err.startswith(f"fpemu verify: {want}"), err


def test_workers_run_on_a_local_cluster_and_stop_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", "sqrt-e4m3fn-rna", "--workers", "2", "--chunks", "4", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mismatches"] == 0 and report["complete"] and report["cases_run"] == 256
    assert report["scheduler"] == "distributed"
    assert multiprocessing.active_children() == []  # the worker processes were stopped
