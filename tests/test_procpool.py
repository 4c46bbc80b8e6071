"""Large matmul tiles on worker processes: the same bits as one thread, errors, warnings and
NumPy's error state carried back, no nesting, no leaked process, threads where workers are off.

The reference of each comparison is the one-thread result (checked against the independent
oracles in the model test files); here the claim is that sending tiles to other processes
changes no bit. The process grain is lowered so that small odd shapes go to the workers, two
workers are allowed on any machine, and each test checks that the workers really ran.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import fpemu
from fpemu import parallel, procpool
from tests.tiles_util import same_bits, values


@pytest.fixture(autouse=True)
def workers(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Two workers, ready; small calls go to them; records whether each call used them."""
    monkeypatch.delenv(procpool.ENV, raising=False)
    monkeypatch.setattr(parallel, "GRAIN", 64.0)
    monkeypatch.setattr(procpool, "GRAIN", 64.0)
    monkeypatch.setattr(procpool, "MAX_WORKERS", 2)
    assert procpool.start(2, timeout=120) == 2
    used: list[bool] = []
    real = procpool.map_calls

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        used.append(out is not None)
        return out

    monkeypatch.setattr(procpool, "map_calls", spy)
    yield used


MODELS = [
    ("h100", "fp16", "fp32", {}),
    ("h100", "e5m2", "fp16", {}),  # FP8 via FP16 blocks
    ("sm90.wgmma.f16.f32", "fp16", "fp32", {}),  # an instruction model (t-fdpa)
    ("sequential", "fp16", "fp32", {}),  # a module-level function, sent by reference
    ("sequential", "bf16", "bf16", {"mode": "rtz"}),
]
#: (a shape, b shape): split along the batch axis, the rows, the columns (the longest), into
#: tiles of unequal sizes for 2 and 3 tiles.
SHAPES = [((7, 5, 36), (7, 36, 6)), ((23, 36), (36, 6)), ((5, 36), (36, 19))]


@pytest.mark.parametrize(("model", "fmt", "acc", "options"), MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=["batch", "rows", "columns"])
def test_matmul_same_bits_on_processes(
    model: str, fmt: str, acc: str, options: dict[str, Any], sa: Any, sb: Any, workers: list[bool]
) -> None:
    rng = np.random.default_rng(11)
    a, b = values(rng, sa, fmt), values(rng, sb, fmt)
    c = values(rng, (*sa[:-1], sb[-1]), "bf16")  # rounded to acc by matmul
    kw = dict(fmt=fmt, acc=acc, c=c, model=model, **options)
    with fpemu.threads(1):
        want = fpemu.matmul(a, b, **kw)
    assert workers == []  # one thread: no split at all
    for n in (2, 3):
        with fpemu.threads(n):
            assert same_bits(fpemu.matmul(a, b, **kw), want), n
    assert workers == [True, True]


def test_large_h100_matmul_same_bits_at_the_default_grain(
    monkeypatch: pytest.MonkeyPatch, workers: list[bool]
) -> None:
    """The real threshold: a 257 x 512 x 130 fp16 matmul splits its rows unevenly."""
    monkeypatch.setattr(parallel, "GRAIN", 2.0**20)
    monkeypatch.setattr(procpool, "GRAIN", 2.0**25)
    rng = np.random.default_rng(3)
    a = rng.standard_normal((257, 512)).astype(np.float16)
    b = rng.standard_normal((512, 130)).astype(np.float16)
    with fpemu.threads(1):
        want = fpemu.matmul(a, b, fmt="fp16", model="h100")
    with fpemu.threads(2):
        got = fpemu.matmul(a, b, fmt="fp16", model="h100")
    assert same_bits(got, want) and workers == [True]


def test_no_process_route_below_the_grain(
    monkeypatch: pytest.MonkeyPatch, workers: list[bool]
) -> None:
    monkeypatch.setattr(procpool, "GRAIN", 2.0**40)
    a = np.ones((40, 30))
    with fpemu.threads(2):
        fpemu.matmul(a, a.T, model="h100")
    assert workers == []  # too small: threads (parallel.GRAIN is lowered, so it did split)


def test_processes_off_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(procpool.ENV, "0")
    assert not procpool.enabled()
    with fpemu.threads(2):
        assert procpool.map_calls(np.add, [((1, 2), {}), ((3, 4), {})]) is None


@pytest.mark.parametrize("value", ["yes", "2", "-1", "off"])
def test_bad_processes_setting_is_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """FPEMU_PROCESSES takes 0 or 1: anything else is an error naming it, not silently "on"."""
    monkeypatch.setenv(procpool.ENV, value)
    with pytest.raises(ValueError, match=f"FPEMU_PROCESSES='{value}': expected 0"):
        procpool.enabled()
    monkeypatch.setenv(procpool.ENV, "1")
    procpool.enabled()  # accepted


def test_worker_does_not_split_again() -> None:
    with fpemu.threads(3):
        got = procpool.map_calls(parallel.num_threads, [((), {})] * 3)
    assert got is not None and [int(x) for x in got] == [1, 1, 1]


def test_first_failing_call_raises_with_a_note(monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = np.eye(3), -np.eye(3)  # Cholesky of a negative definite matrix fails
    calls = [((good,), {}), ((bad,), {}), ((bad * 2,), {})]
    here = procpool._here

    def fine_here(fn: Any, call: Any) -> Any:
        time.sleep(0.2)  # slow here, and never failing: every error comes from a worker
        return good, None

    monkeypatch.setattr(procpool, "_here", fine_here)
    with fpemu.threads(3), pytest.raises(np.linalg.LinAlgError) as info:
        procpool.map_calls(np.linalg.cholesky, calls)
    assert "worker process" in "".join(getattr(info.value, "__notes__", []))
    monkeypatch.setattr(procpool, "_here", here)
    with fpemu.threads(3):  # the workers still answer in step
        got = procpool.map_calls(np.linalg.cholesky, [((good,), {})] * 3)
    assert got is not None and all(np.array_equal(g, good) for g in got)
    text = np.array([["a", "b"], ["c", "d"]])  # a TypeError
    mixed = [((good,), {}), ((text,), {}), ((bad,), {}), ((good,), {})]
    for order, first in ((mixed, TypeError), (mixed[::-1], np.linalg.LinAlgError)):
        with fpemu.threads(3), pytest.raises(first):  # the first in order, wherever it ran
            procpool.map_calls(np.linalg.cholesky, order)


def test_error_state_and_warnings_come_back() -> None:
    zero = np.zeros(3)
    calls = [((np.ones(3),), {}), ((zero,), {})]
    with fpemu.threads(2), np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        procpool.map_calls(np.log, calls)
    with fpemu.threads(2), np.errstate(divide="warn"), pytest.warns(RuntimeWarning):
        got = procpool.map_calls(np.log, calls)
    assert got is not None and bool(np.isneginf(got[1]).all())


def test_a_worker_dying_mid_call_is_replaced_and_its_call_runs_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    victim = procpool._WORKERS[0].proc
    here, dropped = procpool._here, []
    real_drop = procpool._drop

    def kill_then_run(fn: Any, call: Any) -> Any:
        if victim.poll() is None:
            time.sleep(0.2)  # the workers have taken their calls (each sleeps 1 s)
            victim.kill()
        return here(fn, call)

    def drop(w: Any, *, kill: bool) -> None:
        dropped.append(w.proc)
        real_drop(w, kill=kill)

    monkeypatch.setattr(procpool, "_here", kill_then_run)
    monkeypatch.setattr(procpool, "_drop", drop)
    with fpemu.threads(3):
        got = procpool.map_calls(time.sleep, [((1.0,), {})] * 3)
    assert got is not None and len(got) == 3 and dropped == [victim]
    monkeypatch.setattr(procpool, "_here", here)
    rng = np.random.default_rng(5)
    a, b = values(rng, (30, 40), "fp16"), values(rng, (40, 9), "fp16")
    with fpemu.threads(1):
        want = fpemu.matmul(a, b, fmt="fp16", model="h100")
    for _ in range(2):  # with one worker, then with a fresh one too
        with fpemu.threads(3):
            assert same_bits(fpemu.matmul(a, b, fmt="fp16", model="h100"), want)
        assert procpool.start(2, timeout=120) == 2
    assert all(w.proc is not victim for w in procpool._WORKERS)


def test_shutdown_leaves_no_process() -> None:
    pids = [w.proc.pid for w in procpool._WORKERS]
    assert len(pids) == 2
    procpool.shutdown()
    assert procpool._WORKERS == []
    for pid in pids:  # reaped: the ids are free, no zombie left
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def _child_enabled() -> bool:
    return procpool.enabled()


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # Python 3.12+ warns
def test_multiprocessing_children_use_threads() -> None:
    """A Dask worker (a multiprocessing child) is one of several processes already."""
    assert procpool.enabled()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply_async(_child_enabled).get(timeout=120) is False


def test_workers_that_cannot_start_are_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    procpool.shutdown()
    monkeypatch.setattr(procpool, "_FAILED", 0)
    monkeypatch.setattr(sys, "executable", shutil.which("false"))  # exits at once
    for _ in range(200):  # each start finds the one before exited (once it is reaped)
        if not procpool.enabled():
            break
        assert procpool.start(1, timeout=30) == 0
        time.sleep(0.02)
    assert procpool._FAILED == procpool._MAX_FAILED  # exited before they were ready
    assert not procpool.enabled()  # threads only from now on
    a = np.ones((40, 30))
    with fpemu.threads(2):
        got = fpemu.matmul(a, a.T, fmt="fp16", model="h100")
    assert bool((got == 30).all())
    procpool.shutdown()
