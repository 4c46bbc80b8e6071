"""MSE beside torch: ``fpemu.nn.functional.mse``'s gradient is torch's CPU kernel bit for bit
(``norm * (a - b) * grad``, norm = 2/N in the tensor's type: two roundings), and
``compare_torch(loss="mse")`` under bf16/fp16 autocast: torch runs mse_loss and its backward in
float32, as the watch's dtype audit shows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.nn import functional as fn  # noqa: E402
from fpemu.nn.tensor import Tensor  # noqa: E402
from fpemu.validate import compare_torch  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.mark.parametrize("shape", [(32, 3), (7, 5), (16, 4), (1, 1), (5,)])
@pytest.mark.parametrize("seed_grad", [1.0, 3.0, 2.0**15])
def test_mse_gradient_is_torchs_kernel(shape: tuple[int, ...], seed_grad: float) -> None:
    g = torch.Generator().manual_seed(len(shape) + shape[0])
    a = torch.randn(*shape, generator=g, requires_grad=True)
    t = torch.randn(*shape, generator=g)
    torch.nn.functional.mse_loss(a, t).backward(torch.tensor(seed_grad))
    x = Tensor(a.detach().numpy(), "float32", requires_grad=True)
    y = fn.mse(x, Tensor(t.numpy(), "float32"))
    y.backward(np.float32(seed_grad))
    assert x.grad is not None
    want = a.grad.numpy()
    assert np.array_equal(np.asarray(x.grad, np.float32).view(np.uint32), want.view(np.uint32))


def _regression(dtype: Any) -> Any:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(32, 8, generator=g), torch.randn(32, 3, generator=g)
    scaler = {} if dtype is torch.float16 else None
    return net, x, y, {"autocast": ("cpu", dtype), "grad_scaler": scaler}


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("mode", ["independent", "lockstep"])
def test_mse_under_autocast_runs_in_float32(dtype: str, mode: str) -> None:
    """torch's CPU autocast runs mse_loss in float32 (its fp32 list): the watch sees the
    forward and backward kernels on float32 operands, and finds nothing."""
    net, x, y, kw = _regression(getattr(torch, dtype))
    r = compare_torch(net, x, y, loss="mse", steps=2, mode=mode, **kw)
    assert r.ok, r.summary()
    mse = [a for a in r.audit if a["op"].startswith(("mse_loss", "mse_loss_backward"))]
    assert {a["op"] for a in mse} == {"mse_loss.default", "mse_loss_backward.default"}
    for a in mse:
        assert set(a["inputs"].split(",")) == {"float32"} and a["outputs"] == "float32", a
    assert len(r.trace) == 2 and (r.trace[0]["loss_twin"] is None) == (mode == "lockstep")
