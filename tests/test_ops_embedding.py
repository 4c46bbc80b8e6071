"""Embedding lookup and dense gradient emulations against torch's CPU kernels, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import names  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import emulate, verdicts  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
EMB = torch.ops.aten.embedding.default
EMBB = torch.ops.aten.embedding_dense_backward.default


def _grads(rng: np.random.Generator, shape: tuple[int, ...], dt: torch.dtype) -> torch.Tensor:
    """Gradients whose sums round (mixed magnitudes, cancellation, ties in the low formats)."""
    g = rng.standard_normal(shape) * rng.choice([1.0, 1e-4, 300.0], size=shape)
    g.reshape(-1)[::7] = 1.0 + 2.0**-8  # bf16 midpoints once summed with 1.0
    g.reshape(-1)[3::11] = -1.0
    g.reshape(-1)[5::13] = -0.0
    return torch.from_numpy(g.astype(np.float32)).to(dt)


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_embedding_forward_exact(dt: torch.dtype) -> None:
    w = torch.randn(11, 6).to(dt)
    idx = torch.randint(0, 11, (3, 5))
    assert verdicts(EMB, w, idx) == ["identical"]
    assert verdicts(EMB, w, idx, 2) == ["identical"]


@pytest.mark.parametrize("pad", [-1, 0, 3])
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_embedding_backward_exact(dt: torch.dtype, pad: int) -> None:
    """Many repeats of few indices: the per-row summation order decides the bits."""
    rng = np.random.default_rng(pad + 5)
    idx = torch.from_numpy(rng.integers(0, 6, size=(4, 50)))
    g = _grads(rng, (4, 50, 17), dt)
    assert verdicts(EMBB, g, idx, 9, pad, False) == ["identical"]


def test_embedding_backward_scale_grad_by_freq_exact() -> None:
    rng = np.random.default_rng(3)
    idx = torch.from_numpy(rng.integers(0, 7, size=(60,)))
    g = _grads(rng, (60, 9), torch.float32)
    assert verdicts(EMBB, g, idx, 7, -1, True) == ["identical"]


@pytest.mark.parametrize("dt", DTYPES[1:], ids=str)
def test_embedding_backward_scale_grad_by_freq_low_bounded(dt: torch.dtype) -> None:
    rng = np.random.default_rng(3)
    idx = torch.from_numpy(rng.integers(0, 7, size=(60,)))
    g = _grads(rng, (60, 9), dt)
    assert verdicts(EMBB, g, idx, 7, -1, True)[0] in ("identical", "bounded")


def test_embedding_backward_order_matters_and_is_caught() -> None:
    """Summing the same rows in another order (or once in float32) gives other bf16 bits: the
    emulation's order is the one that matches torch, and a one-ulp change differs."""
    rng = np.random.default_rng(0)
    idx = torch.zeros(200, dtype=torch.int64)
    g = _grads(rng, (200, 8), torch.bfloat16)
    outs, emulated = emulate(EMBB, g, idx, 1, -1, False)
    t = to_numpy(outs[0])
    once = g.float().sum(0).to(torch.bfloat16)
    assert not torch.equal(once, outs[0][0])  # one rounding of the exact sum is not the kernel
    assert judge(t, emulated[0]).verdict == "identical"
    bad = t.copy()
    bad.view(np.uint16)[0, 0] += 1
    assert judge(bad, emulated[0]).verdict == "differs"


def test_registered() -> None:
    have = set(names())
    for op in ("aten.embedding.default", "aten.embedding_dense_backward.default"):
        assert op in have
