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


# -- as_strided: a view placed by an absolute storage offset ------------------------------------


def test_as_strided_views_are_judged() -> None:
    """``as_strided`` on a tensor that starts inside its storage (a slice), with and without an
    explicit offset, and ``as_strided_``: the emulation places its view in the whole storage."""
    base = torch.arange(24.0)
    x = base[5:]  # storage offset 5
    with fpemu.watch() as w:
        a = x.as_strided((3, 4), (1, 3))  # from x's own offset
        b = x.as_strided((2, 2), (4, 1), 2)  # an absolute offset before x's start
        y = base[1:].clone()[2:]
        y.as_strided_((2, 3), (3, 1), 4)
    assert a[1, 0].item() == 6.0 and b[0, 0].item() == 2.0 and y[0, 0].item() == 5.0
    rows = [r for r in w.report().rows if r["op"].startswith("aten.as_strided")]
    assert [r["op"] for r in rows] == ["aten.as_strided.default"] * 2 + ["aten.as_strided_.default"]
    assert [(r["verdict"], r["n"]) for r in rows] == [("identical", 12), ("identical", 4),
                                                     ("identical", 6)]  # fmt: skip


def test_channels_last_global_pooling_is_emulated() -> None:
    """A channels-last CNN with global average pooling: torch's backward of the pooling runs
    ``as_strided``/``as_strided_``; nothing is left not emulated."""
    torch.manual_seed(0)
    nn = torch.nn
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))  # fmt: skip
    net = net.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 4, (6,), generator=torch.Generator().manual_seed(2))
    with fpemu.watch() as w:
        for _ in range(2):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
    r = w.report()
    assert any(row["op"].startswith("aten.as_strided") for row in r.rows)
    assert r.counts["not_emulated"] == r.counts["differs"] == r.counts["policy"] == 0


def test_an_as_strided_kernel_one_element_off_differs() -> None:
    lib = torch.library.Library("aten", "IMPL")

    def shifted(t: Any, size: Any, stride: Any, offset: Any = None) -> Any:
        start = t.storage_offset() if offset is None else offset  # one element further
        return torch.empty(0, dtype=t.dtype).set_(t.untyped_storage(), start + 1, size, stride)

    with warnings.catch_warnings():  # torch warns that it overrides its own kernel: intended
        warnings.simplefilter("ignore", UserWarning)
        lib.impl("as_strided", shifted, "CPU")
    try:
        with fpemu.watch() as w:
            torch.arange(10.0).as_strided((2, 2), (2, 1))
    finally:
        del lib
    rows = [r for r in w.report().rows if r["op"] == "aten.as_strided.default"]
    assert [r["verdict"] for r in rows] == ["differs"]


def test_as_strided_without_the_storage_is_not_judged() -> None:
    """Called without ``options["storage"]`` (``emulate`` runs torch's own view kernels) the
    emulation judges nothing rather than guess where the storage starts."""
    call = ops.Call("aten.as_strided.default", (np.zeros(4, np.float32), [2], [1]), {},
                    ("float32",))  # fmt: skip
    emulation = ops.lookup("aten.as_strided.default")
    assert emulation is not None and list(emulation(call)) == [None]
