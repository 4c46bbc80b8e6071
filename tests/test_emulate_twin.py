"""fpemu.emulate against fpemu.nn's twin of the same MLP, bit for bit: the policy and model
path (Linear -> ReLU -> Linear under CUDA fp16/bf16 autocast, every GEMM forward and backward),
and the recipe path (FP8 / MXFP8 / NVFP4 Linears: outputs, gradients and the per-module
scaling state over several steps)."""

from __future__ import annotations

import dataclasses

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fpemu  # noqa: E402
from fpemu.amp.policy import get_policy  # noqa: E402
from fpemu.nn import functional as nnf  # noqa: E402
from fpemu.nn.fp8 import FP8State, fp8_linear  # noqa: E402
from fpemu.nn.tensor import Tensor  # noqa: E402

NP = {torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16, torch.float32: np.float32}


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def tnp(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _net(seed: int) -> torch.nn.Sequential:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(24, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))


@pytest.mark.parametrize(
    ("policy", "model"),
    [
        ("torch_cuda_fp16", "h100"),
        ("torch_cuda_bf16", "sm90.wgmma.bf16.f32"),
        ("torch_cuda_fp16", "sequential"),
    ],
)
def test_mlp_equals_the_fpemu_nn_twin(policy: str, model: str) -> None:
    net = _net(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 24, generator=g)
    p = get_policy(policy)
    low = torch.float16 if p.compute.name == "float16" else torch.bfloat16
    up = torch.randn(16, 5, generator=g).to(low)
    with fpemu.emulate(policy=policy, model=model):
        with torch.autocast("cuda"):
            y = net(x)
        y.backward(up)
    # the twin: the same weights as fpemu Tensors, the same policy with the model as its GEMMs'
    twin = dataclasses.replace(p, acc_model=model)
    w1, b1, w2, b2 = (Tensor(tnp(t), "float32", requires_grad=True) for t in
                      (net[0].weight, net[0].bias, net[2].weight, net[2].bias))  # fmt: skip
    h = nnf.relu(nnf.linear(Tensor(tnp(x), "float32"), w1, b1, policy=twin), policy=twin)
    yt = nnf.linear(h, w2, b2, policy=twin)
    yt.backward(tnp(up).astype(np.float32))
    assert y.dtype == low and yt.fmt.name == p.compute.name
    assert (bits(tnp(y)) == bits(np.asarray(yt.data).astype(NP[low]))).all()
    for t, tw in ((net[0].weight, w1), (net[2].weight, w2)):
        assert tw.grad is not None and t.grad is not None
        assert (bits(tnp(t.grad)) == bits(np.asarray(tw.grad, np.float32))).all()


@pytest.mark.parametrize("recipe", ["te_delayed", "te_current", "te_mxfp8", "torchao_rowwise"])
def test_recipe_linears_equal_fp8_linear_with_state(recipe: str) -> None:
    """Three steps (SGD) with the recipe on both Linears: outputs, weight gradients and each
    module's amax history, scales and records equal fpemu.nn.fp8's FP8 linear, step by step
    from the same weights (the SGD update is torch's kernel, not compared here)."""
    net = _net(2)
    opt = torch.optim.SGD(net.parameters(), lr=0.5)
    g = torch.Generator().manual_seed(3)
    xs = [torch.randn(32, 24, generator=g) for _ in range(3)]
    ups = [torch.randn(32, 5, generator=g) * 1e-2 for _ in range(3)]
    params = (net[0].weight, net[0].bias, net[2].weight, net[2].bias)
    seen = []
    with fpemu.emulate(policy="fp32", recipe=recipe) as em:
        for x, up in zip(xs, ups, strict=True):
            ws = [tnp(t).copy() for t in params]
            opt.zero_grad()
            y = net(x)
            y.backward(up)
            seen.append((ws, tnp(y).copy(), tnp(net[0].weight.grad).copy()))
            opt.step()
    st = [FP8State(recipe), FP8State(recipe)]
    for (ws, y, gw1), x, up in zip(seen, xs, ups, strict=True):
        w1, b1, w2, b2 = (Tensor(v, "float32", requires_grad=True) for v in ws)
        h = nnf.relu(fp8_linear(Tensor(tnp(x), "float32"), w1, b1, recipe=recipe, state=st[0]),
                     policy="fp32")  # fmt: skip
        yt = fp8_linear(h, w2, b2, recipe=recipe, state=st[1])
        yt.backward(tnp(up))
        assert (bits(y) == bits(np.asarray(yt.data, np.float32))).all()
        assert (bits(gw1) == bits(np.asarray(w1.grad, np.float32))).all()
    for name, mine in (("0", st[0]), ("2", st[1])):
        theirs = em.state[name]
        assert repr(theirs.records) == repr(mine.records) and len(mine.records) == 3  # NaN scales
        for role in ("input", "weight", "grad_output"):
            assert (theirs.history[role] == mine.history[role]).all()
            assert repr(theirs.scale[role]) == repr(mine.scale[role])


def test_recipe_state_moves_and_output_dtype() -> None:
    """te_delayed: the scale of step t comes from the amax history of steps < t (the first step
    quantizes with scale 1); inside an autocast region the output is the compute dtype."""
    net = _net(4)
    x = torch.randn(8, 24)
    with fpemu.emulate(policy="torch_cuda_bf16", recipe="te_delayed") as em:
        for _ in range(2):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = net(x)
            y.float().sum().backward()
    st = em.state["0"]
    assert y.dtype == torch.bfloat16
    assert st.trace("input", "scale")[0] == 1.0
    amax = float(np.abs(tnp(x)).max())
    assert st.trace("input", "amax") == [amax, amax]
    # TE's update (fp8-mx.md 4.1): scale = E4M3's max 448 / amax, in float32
    assert st.trace("input", "scale")[1] == float(np.float32(448.0) / np.float32(amax))
