"""Every op of the norm/embedding/conv/attention families that a small GPT and a small CNN
dispatch in a training step (float32, and under bfloat16/float16 CPU autocast) is judged
identical or within its bound by the emulations, from the real tensors of the step."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as fn  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from fpemu.validate.ops import Call, lookup  # noqa: E402
from fpemu.validate.watch.convert import dtype_name, to_numpy, tree_to_numpy  # noqa: E402
from fpemu.validate.watch.schema import outputs, written_ids  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import capability  # noqa: E402

MINE = ("layer_norm", "batch_norm", "embedding", "convolution", "pool", "flash_attention")


class _Judge(TorchDispatchMode):
    """Judges the ops of these families as they run (other ops just run)."""

    def __init__(self) -> None:
        super().__init__()
        self.verdicts: list[tuple[str, str, str]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = str(func)
        if not any(m in name for m in MINE):
            return func(*args, **kwargs)
        emulation = lookup(name)
        assert emulation is not None, name
        ids = written_ids(func, args, kwargs)
        np_args, np_kwargs = tree_to_numpy(args, copy_ids=ids), tree_to_numpy(kwargs, copy_ids=ids)
        result = func(*args, **kwargs)
        outs = outputs(func, args, kwargs, result)
        call = Call(name, tuple(np_args), dict(np_kwargs),
                    tuple(dtype_name(t.dtype) for t in outs), capability=capability())  # fmt: skip
        for t, e in zip(outs, emulation(call), strict=True):
            if e is not None:
                j = judge(to_numpy(t), e)
                self.verdicts.append((name, j.verdict, j.cause))
        return result


class _GPT(nn.Module):
    def __init__(self, sdpa: bool, vocab: int = 50, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(16, d)
        self.ln1, self.ln2, self.lnf = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.sdpa = heads, sdpa

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        x = self.emb(idx) + self.pos(torch.arange(t))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = fn.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            a = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
            a = a.masked_fill(~torch.tril(torch.ones(t, t, dtype=torch.bool)), float("-inf"))
            y = fn.softmax(a, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, -1))
        x = x + self.fc2(fn.gelu(self.fc(self.ln2(x))))
        return fn.linear(self.lnf(x), self.emb.weight)


class _CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2)
        self.head = nn.Linear(8 * 2 * 2, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = fn.max_pool2d(fn.relu(self.bn(self.c1(x))), 2)
        h = fn.adaptive_avg_pool2d(fn.avg_pool2d(self.c2(h), 1), (2, 2))
        return self.head(h.flatten(1))


def _step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, amp: Any) -> list[tuple]:
    mode = _Judge()
    ctx = torch.autocast("cpu", dtype=amp) if amp else torch.autocast("cpu", enabled=False)
    with mode:
        with ctx:
            out = model(x)
            loss = fn.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
    return mode.verdicts


@pytest.mark.parametrize("amp", [None, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("sdpa", [True, False])
def test_small_gpt_step(amp: Any, sdpa: bool) -> None:
    torch.manual_seed(0)
    idx = torch.randint(0, 50, (2, 16))
    v = _step(_GPT(sdpa), idx, idx, amp)
    names = {n for n, _, _ in v}
    assert "aten.native_layer_norm_backward.default" in names
    assert "aten.embedding_dense_backward.default" in names
    if sdpa:
        assert "aten._scaled_dot_product_flash_attention_for_cpu_backward.default" in names
    bad = [x for x in v if x[1] not in ("identical", "bounded")]
    assert not bad, bad
    exact_ops = ("aten.native_layer_norm.default", "aten.embedding.default",
                 "aten.embedding_dense_backward.default")  # fmt: skip
    assert all(verdict == "identical" for n, verdict, _ in v if n in exact_ops)


@pytest.mark.parametrize("amp", [None, torch.bfloat16, torch.float16], ids=str)
def test_small_cnn_step(amp: Any) -> None:
    torch.manual_seed(1)
    model = _CNN().train()
    v = _step(model, torch.randn(4, 3, 12, 12), torch.randint(0, 10, (4,)), amp)
    names = {n for n, _, _ in v}
    for op in ("aten.convolution_backward.default", "aten.native_batch_norm_backward.default",
               "aten.max_pool2d_with_indices_backward.default",
               "aten._adaptive_avg_pool2d_backward.default"):  # fmt: skip
        assert op in names
    bad = [x for x in v if x[1] not in ("identical", "bounded")]
    assert not bad, bad
    exact_ops = ("aten.native_batch_norm.default", "aten.max_pool2d_with_indices.default",
                 "aten.max_pool2d_with_indices_backward.default")  # fmt: skip
    assert all(verdict == "identical" for n, verdict, _ in v if n in exact_ops)
