"""fpemu.offload.Queue: calls run by a worker process while the caller goes on.

Each test asks for a ready worker first (procpool.start with a wait); where workers are off
(FPEMU_PROCESSES=0, one core) the queue runs everything in the caller, and the same results
must come back: the assertions hold either way.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from fpemu import offload, procpool


def _boom(i: int) -> int:
    if i == 3:
        raise ArithmeticError(f"call {i} failed")
    return i


def _pid_sum(x: np.ndarray) -> tuple[int, float]:
    time.sleep(0.02)
    return os.getpid(), float(x.sum())


@pytest.fixture
def queue() -> offload.Queue:
    procpool.start(1, timeout=120)
    q = offload.Queue()
    q.ready()
    yield q
    q.close()


def test_results_in_ticket_order_and_bits(queue: offload.Queue) -> None:
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(1000).astype(np.float32).astype(ml_dtypes.bfloat16) for _ in range(9)]
    tickets = [queue.submit(np.multiply, x, np.float32(3)) for x in xs]
    assert tickets == list(range(9))
    got = queue.results()
    for x, g in zip(xs, got, strict=True):
        want = np.multiply(x, np.float32(3))
        assert g.dtype == want.dtype
        assert np.array_equal(g.view(np.uint16), want.view(np.uint16))


def test_arguments_are_copied_when_queued(queue: offload.Queue) -> None:
    """An in-place change after submit (an optimizer step) must not reach the queued call."""
    a = np.arange(100_000, dtype=np.float32)
    queue.submit(np.sum, a)
    a[:] = -1.0
    queue.submit(np.sum, a)
    first, second = queue.results()
    assert float(first) == float(np.arange(100_000, dtype=np.float32).sum())
    assert float(second) == -100_000.0


def test_worker_and_caller_share_the_calls() -> None:
    """More queued bytes than the pipe holds: the worker runs the oldest calls, the caller
    takes the unsent ones back from the end; every result comes back in ticket order."""
    if procpool.start(1, timeout=120) == 0:
        pytest.skip("no worker process here (FPEMU_PROCESSES=0 or one core): nothing to check")
    q = offload.Queue()
    assert q.ready()
    xs = [np.full(2**18, i, np.float32) for i in range(24)]  # 1 MiB each
    for x in xs:
        q.submit(_pid_sum, x)
    got = q.results()
    q.close()
    assert [s for _, s in got] == [float(i * 2**18) for i in range(24)]
    pids = [p for p, _ in got]
    assert pids[0] != os.getpid()  # the oldest call was the worker's
    assert pids[-1] == os.getpid()  # the newest, never sent, the caller's


def test_first_failure_reraises_in_ticket_order(queue: offload.Queue) -> None:
    for i in range(6):
        queue.submit(_boom, i)
    with pytest.raises(ArithmeticError, match="call 3 failed"):
        queue.results()


def test_calls_of_a_killed_worker_run_here() -> None:
    if procpool.start(1, timeout=120) == 0:
        pytest.skip("no worker process here: nothing to kill")
    q = offload.Queue()
    assert q.ready()
    os.kill(q._worker.proc.pid, signal.SIGKILL)
    for i in range(5):
        q.submit(_boom, i + 10)
    assert q.results() == [10, 11, 12, 13, 14]
    q.close()
    assert procpool.start(1, timeout=120) in (0, 1)  # a new worker starts for later calls


def test_a_call_larger_than_the_ring_runs_here() -> None:
    """The ring bounds what queued calls hold: a call whose arrays do not fit runs in the
    caller, at once; the others still go to the worker."""
    if procpool.start(1, timeout=120) == 0:
        pytest.skip("no worker process here: every call runs in the caller anyway")
    q = offload.Queue()
    assert q.ready()
    big = np.ones(offload.RING // 4 + 1024, np.float32)  # more bytes than the whole ring
    q.submit(_pid_sum, np.ones(8, np.float32))
    q.submit(_pid_sum, big)
    (p_small, s_small), (p_big, s_big) = q.results()
    q.close()
    assert (s_small, s_big) == (8.0, float(big.size))
    assert p_big == os.getpid() and p_small != os.getpid()


def test_no_worker_when_processes_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FPEMU_PROCESSES", "0")
    q = offload.Queue()
    assert not q.ready()
    q.submit(np.add, 1, 2)  # still runs: in the caller
    assert q.results() == [3]
    q.close()


def test_watch_rows_equal_with_and_without_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The verdicts do not depend on who judged: rows with the worker equal rows without."""
    pytest.importorskip("torch")
    procpool.start(1, timeout=120)

    with_worker, _ = _watched_mlp(16, 32, 64, 8)
    monkeypatch.setenv("FPEMU_PROCESSES", "0")
    assert _watched_mlp(16, 32, 64, 8) == (with_worker, 0)
    assert all(r[1] in ("identical", "bounded") for r in with_worker)


def _watched_mlp(batch: int, d_in: int, width: int, d_out: int) -> tuple[list[Any], int]:
    """The rows (op, verdict, cause, ndiff, ulps) of 2 watched bf16 AdamW steps of a
    Linear-GELU-LayerNorm-Linear net, and how many judgements the worker made."""
    import torch  # noqa: PLC0415 (the callers skip without it)

    import fpemu  # noqa: PLC0415

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(d_in, width), torch.nn.GELU(),
                              torch.nn.LayerNorm(width), torch.nn.Linear(width, d_out))  # fmt: skip
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randn(batch, d_in, generator=torch.Generator().manual_seed(1))
    with fpemu.watch() as w:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = net(x).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    r = w.report()
    rows = [(x["op"], x["verdict"], x["cause"], x["ndiff"], x["ulps"]) for x in r.rows]
    return rows, r.settings["worker_judgements"]


def test_watch_uses_an_emulation_replaced_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process has fpemu's own emulations only: one replaced here (a planted fault,
    a user's own) must be the one that judges, with or without a ready worker."""
    torch = pytest.importorskip("torch")
    import fpemu  # noqa: PLC0415
    from fpemu.validate import ops  # noqa: PLC0415

    procpool.start(1, timeout=120)
    real = ops.lookup("aten.gelu.default")
    assert real is not None and ops.builtin("aten.gelu.default")

    def one_ulp_up(call: object) -> list[object]:
        (out,) = real(call)
        v = np.asarray(out.value).copy()
        v[v > 0] = np.nextafter(v[v > 0], np.float32(np.inf), dtype=v.dtype)
        return [ops.exact(v)]

    monkeypatch.setitem(ops.TABLE, "aten.gelu.default", one_ulp_up)
    assert not ops.builtin("aten.gelu.default")
    x = torch.randn(64, 64, generator=torch.Generator().manual_seed(0))
    for _ in range(3):  # the worker may become ready between blocks
        with fpemu.watch() as w:
            torch.nn.functional.gelu(x)
        rows = [r for r in w.report().rows if r["op"] == "aten.gelu.default"]
        assert [r["verdict"] for r in rows] == ["differs"]


def test_a_call_that_cannot_travel_runs_here(queue: offload.Queue) -> None:
    """A local function (no module-level name) cannot be pickled: it runs in the caller."""
    queue.submit(np.add, 1, 2)
    queue.submit(lambda a, b: a * b, 3, 4)
    queue.submit(np.add, 5, 6)
    assert queue.results() == [3, 12, 11]


def _layout(*arrays: np.ndarray) -> list[tuple[object, ...]]:
    return [(a.shape, a.strides, a.flags.c_contiguous, a.flags.f_contiguous, a.tobytes())
            for a in arrays]  # fmt: skip


def test_arrays_keep_their_layout(queue: offload.Queue) -> None:
    """Emulations read the layout (oneDNN's GELU runs on contiguous tensors only, BatchNorm's
    exact kernel on C-contiguous ones): a channels-last, transposed, sliced or broadcast
    array reaches the worker with the same strides, and the same elements."""
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    b16 = np.arange(60, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(6, 10)
    arrays = (channels_last, x.T, x[:, 1:, ::2], np.broadcast_to(np.float32(2), (3, 4)),
              b16[:, 2:7], np.zeros((0, 3), np.int64), np.array(True))  # fmt: skip
    queue.submit(_layout, *arrays)
    assert queue.results() == [_layout(*arrays)]


def test_rows_are_judged_when_the_watched_program_raises() -> None:
    """The queued judgements are made when the block ends by an exception too: a row never
    keeps the placeholder verdict of a judgement that was not made."""
    torch = pytest.importorskip("torch")
    import fpemu  # noqa: PLC0415
    from fpemu.validate import ops  # noqa: PLC0415

    procpool.start(1, timeout=120)
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
    real = ops.TABLE["aten.mm.default"]
    for _ in range(2):  # the worker may become ready between blocks
        with pytest.raises(RuntimeError, match="the program failed"):
            with fpemu.watch() as w:
                x @ x
                raise RuntimeError("the program failed")
        rows = [r for r in w.report().rows if r["op"] == "aten.mm.default"]
        assert rows and all(r["n"] == 256 * 256 for r in rows)  # judged: the count is set
    assert ops.TABLE["aten.mm.default"] is real


def _sleep_pid(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def test_backlog_and_sending_ahead_by_cost() -> None:
    """``backlog`` is the sum of the estimates of the calls not answered; ``pump(ahead=)``
    sends the worker more than :data:`AHEAD` calls while their estimates sum to less; every
    call's seconds are recorded where it ran."""
    if procpool.start(1, timeout=120) == 0:
        pytest.skip("no worker process here (FPEMU_PROCESSES=0 or one core): nothing to check")
    q = offload.Queue()
    assert q.ready()
    for _ in range(6):
        q.submit(_sleep_pid, 0.3, cost=1.0)
    # (the first reply cannot have come: each call sleeps 0.3 s)
    assert q.backlog() == 6.0
    assert len(q._sent) == offload.AHEAD
    q.pump(ahead=4.5)  # a caller about to be busy for 4.5 s sends 5 calls ahead
    assert len(q._sent) == 5
    pids = q.results()
    q.close()
    assert q.backlog() == 0.0
    assert pids[:5] == [pids[0]] * 5 and pids[0] != os.getpid()
    assert pids[5] == os.getpid()  # the one never sent: run here
    assert sorted(q.seconds) == list(range(6))
    # the seconds each took, where it ran (it slept 0.3 s)
    assert all(0.29 <= s < 30.0 for s in q.seconds.values())


@pytest.mark.parametrize("margin", [0.0, 1e9])
def test_watch_rows_equal_whoever_judges(monkeypatch: pytest.MonkeyPatch, margin: float) -> None:
    """Judging a call here or queueing it (the backlog rule's two extremes: judge here whenever
    the worker has anything queued, never judge here) gives the rows judged all in one process;
    the calls are large enough to be queued."""
    pytest.importorskip("torch")
    from fpemu.validate.watch import schedule  # noqa: PLC0415

    procpool.start(1, timeout=120)

    monkeypatch.setattr(schedule, "MARGIN", margin)
    with_worker, by_worker = _watched_mlp(64, 128, 256, 64)
    if procpool.capacity() and margin:
        assert by_worker > 0 and schedule.COSTS  # queued, and the judgements were timed
    monkeypatch.setenv("FPEMU_PROCESSES", "0")
    assert _watched_mlp(64, 128, 256, 64) == (with_worker, 0)
    assert all(r[1] in ("identical", "bounded") for r in with_worker)
