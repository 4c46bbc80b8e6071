"""The ops and modules compare_torch needs: GELU (erf form), SiLU, the graph module, AdamW, and
LayerNorm's mixed-precision weight gradients, against float64 differences and against torch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from fpemu.amp.policy import autocast
from fpemu.bits import ulp
from fpemu.nn import functional as fn
from fpemu.nn.graph import GraphModule, Node, Param, Ref
from fpemu.nn.optim import AdamW
from fpemu.nn.tensor import Tensor, gradcheck, round_to
from fpemu.validate.twin.causes import math_bound

X = np.random.default_rng(0).normal(size=(3, 5)) * 2


@pytest.mark.parametrize("op", [fn.gelu_erf, fn.silu, fn.gelu])
@pytest.mark.parametrize("policy", ["fp32", "float64"])
def test_new_activations_gradcheck(op: Any, policy: str) -> None:
    assert gradcheck(lambda x: op(x), [X], policy=policy).ok


def test_gelu_erf_and_silu_values() -> None:
    # GELU(1) = Phi(1) = 0.84134474606854293..., SiLU(1) = 1 / (1 + e^-1) = 0.73105857863000490...
    # (float64 evaluations: within 2 ulps of the exact values)
    assert abs(float(fn.gelu_erf(Tensor([1.0])).data[0]) - 0.8413447460685429) <= 2 * 2.0**-53
    assert float(fn.silu(Tensor([1.0])).data[0]) == 0.7310585786300049
    y = fn.silu(Tensor(np.float32([0.5]), "bf16"))
    assert y.fmt.name == "bfloat16"


def test_graph_module_checks_its_nodes() -> None:
    params = {"w": np.ones((2, 2), np.float32)}
    inp = Node("x", "input")
    with pytest.raises(ValueError, match="start with an 'input' node"):
        GraphModule(params, [Node("a", "relu", (Ref("x"),))])
    with pytest.raises(ValueError, match="unknown op 'conv'"):
        GraphModule(params, [inp, Node("a", "conv", (Ref("x"),))])
    with pytest.raises(ValueError, match="uses 'b' before it is computed"):
        GraphModule(params, [inp, Node("a", "relu", (Ref("b"),))])
    with pytest.raises(ValueError, match="unknown parameter 'v'"):
        GraphModule(params, [inp, Node("a", "linear", (Ref("x"), Param("v")))])
    with pytest.raises(ValueError, match="two nodes are called 'x'"):
        GraphModule(params, [inp, Node("x", "relu", (Ref("x"),))])


def test_graph_flatten_sub_and_softmax_gradients() -> None:
    nodes = [Node("x", "input"), Node("f", "flatten", (Ref("x"),)),
             Node("h", "linear", (Ref("f"), Param("w"), None)),
             Node("d", "sub", (Ref("h"), Ref("f"))), Node("s", "log_softmax", (Ref("d"),),
                                                         (("dim", 1),))]  # fmt: skip
    w = np.random.default_rng(1).normal(size=(4, 4))
    g = GraphModule({"w": w}, nodes, policy="float64")
    x = np.random.default_rng(2).normal(size=(3, 2, 2))
    y = g(Tensor(x, "float64"))
    assert y.shape == (3, 4) and g.outputs["f"].shape == (3, 4)

    def f(wt: Tensor) -> Tensor:  # the same graph by hand
        xf = Tensor(x.reshape(3, 4), "float64")
        return fn.log_softmax(fn.linear(xf, wt) - xf)

    assert np.array_equal(y.data, f(Tensor(w, "float64")).data)
    fn.sum(y).backward()
    assert gradcheck(lambda wt: fn.sum(f(wt)), [w], policy="float64").ok
    with pytest.raises(ValueError, match="dim=0 is not the last axis"):
        GraphModule({"w": w}, [*nodes[:4], Node("s", "softmax", (Ref("d"),), (("dim", 0),))],
                    policy="float64")(Tensor(x, "float64"))  # fmt: skip


def test_adamw_decay_is_one_float32_rounding() -> None:
    w = np.float32([1.0, 0.3, -2.5, 1e-3])
    p = Tensor(w, "float32", requires_grad=True)
    AdamW([p], lr=0.1, weight_decay=0.3).step([np.zeros(4, np.float32)])
    # with zero gradients the Adam step adds exactly 0: only w * float32(1 - 0.03) remains
    want = (w * np.float32(1 - 0.1 * 0.3)).astype(np.float32)
    assert np.array_equal(p.data.view(np.uint32), want.view(np.uint32))
    with pytest.raises(ValueError, match="betas"):
        AdamW([p], betas=(1.0, 0.9))


def test_layer_norm_threads_argument() -> None:
    with pytest.raises(ValueError, match="threads=0: accepted an int >= 1"):
        fn.layer_norm(Tensor(X), Tensor(np.ones(5)), Tensor(np.zeros(5)), threads=0)


# -- against torch ----------------------------------------------------------------------------
torch = pytest.importorskip("torch")


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_layer_norm_mixed_weight_grads_match_torch_bit_for_bit(threads: int, low: str) -> None:
    # torch's CPU kernel sums a low-precision input's gamma/beta gradients in buffers of the
    # input dtype, one per thread, rounding after every row (LayerNormBackwardKernelImplInternal)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for seed in range(4):
            torch.manual_seed(seed)
            dt = getattr(torch, low)
            x = torch.randn(16, 16).to(dt).requires_grad_()
            w, b = torch.nn.Parameter(torch.randn(16)), torch.nn.Parameter(torch.randn(16))
            g = torch.randn(16, 16).to(dt)
            torch.nn.functional.layer_norm(x, (16,), w, b).backward(g)
            xt = Tensor(x.detach().float().numpy(), low, requires_grad=True)
            wt = Tensor(w.detach().numpy(), "float32", requires_grad=True)
            bt = Tensor(b.detach().numpy(), "float32", requires_grad=True)
            with autocast("torch_cpu_bf16" if low == "bfloat16" else "torch_cpu_fp16"):
                y = fn.layer_norm(xt, wt, bt, threads=threads)
            y.backward(g.float().numpy())
            for ours, theirs in ((wt.grad, w.grad), (bt.grad, b.grad)):
                assert np.array_equal(ours.view(np.uint32), theirs.numpy().view(np.uint32))
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize(("ours", "name"), [(fn.gelu_erf, "erf"), (fn.gelu, "tanh"),
                                             (fn.silu, "silu")])  # fmt: skip
@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_low_precision_activations_differ_only_by_double_rounding(ours: Any, name: str,
                                                                   low: str) -> None:  # fmt: skip
    # torch computes half ops in float32 opmath and rounds once more; fpemu rounds a float64
    # value once: where they differ, torch's float32 error (the bound the report uses) explains it
    x32 = np.random.default_rng(3).normal(size=20000).astype(np.float32) * 3
    xt = torch.from_numpy(x32).to(getattr(torch, low))
    tf = torch.nn.functional
    f = {"erf": tf.gelu, "tanh": lambda t: tf.gelu(t, approximate="tanh"), "silu": tf.silu}[name]
    theirs = f(xt).float().numpy()
    mine = np.asarray(ours(Tensor(xt.float().numpy(), low)).data, np.float32)
    bad = theirs != mine
    xv = xt.float().numpy().astype(np.float64)[bad]
    exact = {"erf": fn._gelu_erf, "silu": fn._silu,
             "tanh": lambda v: fn._gelu(v.astype(np.float64))}[name](xv)  # fmt: skip
    # mine is exact rounded once; torch's is its float32 opmath value (within its error
    # bound of the exact value: terms of size |x|, cancellation included) rounded once more
    t = theirs[bad].astype(np.float64)
    assert np.all(round_to(t, low) == t)
    op = {"erf": "gelu_erf", "tanh": "gelu", "silu": "silu"}[name]
    half_ulp = np.asarray(ulp(np.maximum(np.abs(t), np.abs(exact)), low), np.float64) / 2
    assert np.all(np.abs(t - exact) <= math_bound(op, xv, None, out=low) / 2 + half_ulp)
