"""The watcher's argument conversion: a tensor passed twice to one op is one array (a worker's
pickle then copies it once), and the snapshot of a tensor the op overwrites is taken before
the op, for every argument that is that tensor."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fpemu  # noqa: E402
from fpemu import procpool  # noqa: E402
from fpemu.validate.watch.convert import tree_to_numpy  # noqa: E402


def test_a_tensor_passed_twice_is_one_array() -> None:
    t, u = torch.arange(6.0), torch.ones(3, dtype=torch.bfloat16)
    args = tree_to_numpy((t, t, [t, u], u))
    assert args[0] is args[1] is args[2][0] and args[2][1] is args[3]
    assert args[0].base is not None  # a view of torch's memory, not a copy
    copied = tree_to_numpy((t, t), copy_ids=frozenset({id(t)}))
    assert copied[0] is copied[1] and copied[0].base is None  # one copy, serving both
    t += 1  # the copy is a snapshot
    assert copied[0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _rows(fn: Any, workers: int = 0) -> list[dict[str, Any]]:
    with fpemu.watch() as w:
        fn()
    report = w.report()
    if workers:  # the addcmuls were queued (large enough, not plain arithmetic)
        assert report.settings["worker_judgements"] >= 1
    return [r for r in report.rows if r["op"].startswith(("aten.addcmul", "aten.add_"))]


@pytest.mark.parametrize("workers", [0, 1])
def test_repeated_and_self_aliasing_arguments_are_judged_right(
    workers: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``addcmul(s, g, g)`` and ``addcmul_(s, g, g)`` (the square of a gradient, as Adam takes
    it) on tensors large enough to be queued, and ``x.add_(x)`` (self is also the other
    operand: both are the value before the op), with and without a worker: identical; and a
    kernel planted one ulp off through ``torch.library`` still differs."""
    if workers:
        if procpool.start(1, timeout=120) == 0:
            pytest.skip("no worker process here (FPEMU_PROCESSES=0 or one core)")
    else:
        monkeypatch.setenv(procpool.ENV, "0")
    g = torch.Generator().manual_seed(3)
    s, grad = torch.randn(128, 96, generator=g), torch.randn(128, 96, generator=g)
    x = torch.randn(128, 96, generator=g)

    def step() -> None:
        torch.addcmul(s, grad, grad, value=0.25)
        s.addcmul_(grad, grad, value=0.5)
        x.add_(x)

    rows = _rows(step, workers)
    assert [r["op"] for r in rows] == ["aten.addcmul.default", "aten.addcmul_.default",
                                      "aten.add_.Tensor"]  # fmt: skip
    assert [r["verdict"] for r in rows] == ["identical"] * 3

    lib = torch.library.Library("aten", "IMPL")
    try:

        def off(self: Any, t1: Any, t2: Any, *, value: Any = 1) -> Any:
            # torch's own kernel through its out= overload (not replaced), then one ulp up
            buf = torch.empty_like(self)
            exact = torch.ops.aten.addcmul.out(self, t1, t2, value=value, out=buf)
            return torch.nextafter(exact, torch.full_like(exact, float("inf")))

        with warnings.catch_warnings():  # torch warns that it overrides its own kernel: intended
            warnings.simplefilter("ignore", UserWarning)
            lib.impl("addcmul", off, "CPU")
        bad = _rows(lambda: torch.addcmul(s, grad, grad, value=0.25))
    finally:
        lib._destroy()
    assert [r["verdict"] for r in bad] == ["differs"]
    assert bad[0]["ndiff"] == s.numel() and np.isfinite(bad[0]["ulps"])
