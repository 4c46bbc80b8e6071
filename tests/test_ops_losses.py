"""fpemu.validate.ops.losses against torch 2.13's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import (  # noqa: E402
    Call,
    names,
)
from fpemu.validate.ops.losses import nll_loss  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.ops_nn_util import check, rerun  # noqa: E402
from tests.watch_ops_util import emulate  # noqa: E402

aten = torch.ops.aten
DT = ("float32", "bfloat16", "float16", "float64")


def logp(n: int, c: int, name: str, seed: int) -> object:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=g, dtype=torch.float64) * 3
    return torch.log_softmax(x, 1).to(getattr(torch, name))


def targets(n: int, c: int, seed: int, ignore: int = -100) -> object:
    g = torch.Generator().manual_seed(seed)
    t = torch.randint(0, c, (n,), generator=g)
    t[torch.rand(n, generator=g) < 0.2] = ignore
    return t


@pytest.mark.parametrize("name", DT)
@pytest.mark.parametrize("n", [1, 7, 333, 1500])
def test_nll_loss_forward_backward(name: str, n: int) -> None:
    x, t = logp(n, 11, name, n), targets(n, 11, n)
    for reduction in (0, 1, 2):
        for ignore in (-100, 3):
            tt = torch.where(t == -100, torch.tensor(ignore), t)
            out, tw = aten.nll_loss_forward.default(x, tt, None, reduction, ignore)
            claim = "exact" if reduction == 0 else "bounded"  # sums: order not pinned
            check(aten.nll_loss_forward.default, x, tt, None, reduction, ignore, claim=claim)
            g = torch.randn(out.shape, dtype=torch.float64).to(x.dtype)
            check(aten.nll_loss_backward.default, g, x, tt, None, reduction, ignore, tw)


def test_nll_loss_1d_and_all_ignored() -> None:
    x = logp(1, 5, "float32", 0)[0]
    for reduction in (0, 1, 2):
        for target in (2, -100):  # total_weight: 1 kept, 0 ignored
            check(aten.nll_loss_forward.default, x, torch.tensor(target), None, reduction, -100,
                  claim="bounded")  # fmt: skip
    x2, t = logp(6, 5, "float32", 1), torch.full((6,), -100)
    for reduction in (1, 2):  # mean: 0/0 = NaN
        check(aten.nll_loss_forward.default, x2, t, None, reduction, -100, claim="bounded")


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_nll_loss2d(name: str) -> None:
    g = torch.Generator().manual_seed(5)
    x = torch.log_softmax(torch.randn(2, 5, 9, 7, generator=g), 1).to(getattr(torch, name))
    t = torch.randint(0, 5, (2, 9, 7), generator=g)
    t[0, 0, :3] = -100
    for reduction in (0, 1, 2):
        out, tw = aten.nll_loss2d_forward.default(x, t, None, reduction, -100)
        claim = "exact" if reduction == 0 else "bounded"
        check(aten.nll_loss2d_forward.default, x, t, None, reduction, -100, claim=claim)
        gr = torch.randn(out.shape).to(x.dtype)
        check(aten.nll_loss2d_backward.default, gr, x, t, None, reduction, -100, tw)


@pytest.mark.parametrize("name", DT)
@pytest.mark.parametrize("shape", [(5,), (16, 33), (3, 4, 129)])
def test_mse_loss(name: str, shape: tuple[int, ...]) -> None:
    gen = torch.Generator().manual_seed(len(shape))
    a = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(getattr(torch, name))
    b = torch.randn(shape, generator=gen, dtype=torch.float64).to(getattr(torch, name))
    check(aten.mse_loss.default, a, b, 0)
    check(aten.mse_loss.default, a, b, 1, claim="bounded")
    check(aten.mse_loss.default, a, b, 2, claim="bounded")
    for reduction in (1, 2):
        g = torch.tensor(0.37, dtype=torch.float64).to(a.dtype)
        check(aten.mse_loss_backward.default, g, a, b, reduction)
    check(aten.mse_loss_backward.default, torch.randn(shape).to(a.dtype), a, b, 0)


def test_mse_mean_bound_is_tight() -> None:
    """float32 mean of 2048 squares: the bound is far below the sum itself, and a value
    1e-4 away (relative) is 'differs'."""

    a, b = torch.randn(2048), torch.randn(2048)
    outs, em = emulate(aten.mse_loss.default, a, b, 1)
    t = to_numpy(outs[0])
    assert float(em[0].err) < 2e-4 * float(t)
    assert judge(np.float32(t * (1 + 1e-3)), em[0]).verdict == "differs"


def test_weight_not_emulated() -> None:

    with pytest.raises(NotImplementedError, match="weight"):
        nll_loss(Call("aten.nll_loss_forward.default",
                      (np.zeros((2, 3), np.float32), np.int64([0, 1]), np.ones(3, np.float32), 1,
                       -100), {}, ("float32", "float32")))  # fmt: skip


def test_registered() -> None:
    have = set(names())
    for op in ("aten.nll_loss_forward.default", "aten.nll_loss_backward.default",
               "aten.nll_loss2d_forward.default", "aten.nll_loss2d_backward.default",
               "aten.mse_loss.default", "aten.mse_loss_backward.default"):  # fmt: skip
        assert op in have, op


def test_capabilities() -> None:
    """The same claims hold under ATEN_CPU_CAPABILITY=default and avx2 (subprocesses)."""
    rerun(__file__)
