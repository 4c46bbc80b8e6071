"""Views judged by their layout (:mod:`fpemu.validate.watch.layouts`): the same rows as the full
judgement, and no fault it would have caught is missed.

A repeated view op whose outputs lie where a proved call's did is identical without NumPy; the
tests check that this shortcut gives the rows the full path gives on a model with many views,
that an output elsewhere (a transpose kernel replaced through ``torch.library`` by one that
returns the wrong strides, after correct calls warmed the proofs) is still ``differs``, and that
an emulation replaced since (a planted one) judges anew.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fpemu  # noqa: E402
from fpemu.validate import ops  # noqa: E402
from fpemu.validate.watch import layouts  # noqa: E402


class Heads(torch.nn.Module):  # type: ignore[misc]
    """Hand-written attention: view, transpose, split, t, detach, expand, unsqueeze."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = torch.nn.Linear(16, 48)
        self.out = torch.nn.Linear(16, 16)

    def forward(self, x: Any) -> Any:
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split(16, dim=-1)
        q, k, v = (z.view(b, t, 2, 8).transpose(1, 2) for z in (q, k, v))
        w = (q @ k.transpose(-2, -1)) / 8**0.5
        y = (w.softmax(-1) @ v).transpose(1, 2).reshape(b, t, 16)
        return self.out(y + x.detach().unsqueeze(0).squeeze(0))


def _rows(steps: int = 3) -> list[dict[str, Any]]:
    torch.manual_seed(0)
    net = Heads()
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1))
    with fpemu.watch() as w:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = net(x).float().square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
    return w.report().rows


def test_rows_equal_with_and_without_the_layout_proofs(monkeypatch: pytest.MonkeyPatch) -> None:
    layouts.forget()
    used = []
    real_seen = layouts.seen

    def counting(k: Any, layout: Any) -> bool:
        hit = real_seen(k, layout)
        used.append(hit)
        return hit

    monkeypatch.setattr(layouts, "seen", counting)
    fast = _rows()
    assert sum(used) > 30  # the shortcut did judge most of the repeated views
    monkeypatch.setattr(layouts, "seen", lambda k, layout: False)
    full = _rows()
    assert fast == full
    assert {r["verdict"] for r in full} <= {"identical", "bounded"}


def test_a_view_kernel_with_wrong_strides_still_differs() -> None:
    layouts.forget()
    x = torch.arange(12.0).reshape(3, 4)
    with fpemu.watch() as w:  # correct transposes prove the layout first
        x.transpose(0, 1)
        x.transpose(0, 1)
    assert [r["verdict"] for r in w.report().rows] == ["identical", "identical"]

    lib = torch.library.Library("aten", "IMPL")

    def wrong(t: Any, d0: int, d1: int) -> Any:  # the right shape, read row by row
        shape = list(t.shape)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        return t.as_strided(shape, (shape[1], 1), t.storage_offset())

    with warnings.catch_warnings():  # torch warns that it overrides its own kernel: intended
        warnings.simplefilter("ignore", UserWarning)
        lib.impl("transpose.int", wrong, "CPU")
    try:
        with fpemu.watch() as w:
            y = x.transpose(0, 1)
    finally:
        del lib
    assert y.shape == (4, 3) and y.stride() == (3, 1)  # the planted kernel ran
    rows = [r for r in w.report().rows if r["op"] == "aten.transpose.int"]
    assert [r["verdict"] for r in rows] == ["differs"]


def test_an_emulation_replaced_since_judges_anew(monkeypatch: pytest.MonkeyPatch) -> None:
    layouts.forget()
    x = torch.arange(12.0).reshape(3, 4)
    with fpemu.watch():
        x.t()  # proves the layout under fpemu's own emulation
    real = ops.lookup("aten.t.default")
    assert real is not None

    def planted(call: Any) -> list[Any]:  # one element one ulp up: a copy, not a view
        v = np.array(np.asarray(call.args[0]).T)
        v[0, 0] = np.nextafter(v[0, 0], np.float32(np.inf))
        return [ops.exact(v)]

    monkeypatch.setitem(ops.TABLE, "aten.t.default", planted)
    with fpemu.watch() as w:
        x.t()
    assert [r["verdict"] for r in w.report().rows] == ["differs"]
