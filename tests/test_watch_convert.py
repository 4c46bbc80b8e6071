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
from fpemu.validate.watch.convert import (  # noqa: E402
    convert_args,
    tensor_dtypes,
    to_numpy,
    tree_to_numpy,
)


def test_a_tensor_passed_twice_is_one_array() -> None:
    t, u = torch.arange(6.0), torch.ones(3, dtype=torch.bfloat16)
    args = tree_to_numpy((t, t, [t, u], u))
    assert args[0] is args[1] is args[2][0] and args[2][1] is args[3]
    assert args[0].base is not None  # a view of torch's memory, not a copy
    copied = tree_to_numpy((t, t), copy_ids=frozenset({id(t)}))
    assert copied[0] is copied[1] and copied[0].base is None  # one copy, serving both
    t += 1  # the copy is a snapshot
    assert copied[0].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def _same(a: Any, b: Any) -> bool:
    """Equal structures whose arrays have the same dtype and bits."""
    if isinstance(a, np.ndarray):
        return (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
                and a.tobytes() == b.tobytes())  # fmt: skip
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b) and type(a) is type(b)


def test_convert_args_is_the_two_walks() -> None:
    """The watcher's one walk (:func:`convert_args`) gives what converting args and kwargs
    and listing their tensors' dtypes gave separately: nested lists and tuples, dicts, dtypes,
    numbers, None, a tensor in both args and kwargs (one array), a written one (a copy)."""
    t, u = torch.arange(6.0), torch.ones(3, dtype=torch.bfloat16)
    h = torch.full((2,), 3.0, dtype=torch.float16, requires_grad=True)
    args = (t, 2, [u, (t, h)], None, torch.float16, {"k": u}, 1.5)
    kwargs = {"out": t, "dtype": torch.bfloat16, "xs": [h, 3], "flag": True}
    ids = frozenset({id(t)})
    a, k, ins = convert_args(args, kwargs, ids)
    assert _same(a, tree_to_numpy(args, copy_ids=ids))
    assert _same(k, tree_to_numpy(kwargs, copy_ids=ids))
    assert ins == tensor_dtypes(args) + tensor_dtypes(kwargs)
    assert ins == ["float32", "bfloat16", "float32", "float16", "bfloat16", "float32", "float16"]
    assert a[0] is k["out"] and a[0].base is None  # one snapshot of the written tensor
    assert a[2][0].base is not None  # the others: views of torch's memory
    assert convert_args((), {}) == ((), {}, [])


@pytest.mark.parametrize("dt", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_to_numpy_resolves_negative_and_conjugate_bits(dt: torch.dtype) -> None:
    """A negative view (``_neg_view``: the negative bit set, the memory unchanged) converts to
    its values, whatever the dtype's route (NumPy's own, or the bits viewed as ints); a tensor
    that needs a gradient converts without a copy; a plain one is a view of its memory."""
    x = torch.tensor([1.5, -2.0, 0.0, 3.25], dtype=dt)
    neg = torch._neg_view(x)
    assert neg.is_neg()
    want = to_numpy(-x)
    assert to_numpy(neg).tobytes() == want.tobytes()
    w = x.clone().requires_grad_(True)
    got = to_numpy(w)
    assert got.tobytes() == to_numpy(x).tobytes()
    with torch.no_grad():
        w += 1  # a view: it sees the change
    assert got.tobytes() == to_numpy(x + 1).tobytes()
    z = torch.tensor([1 + 2j, -3j], dtype=torch.complex64)
    assert to_numpy(z.conj()).tolist() == [1 - 2j, 3j]


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
