"""Autograd engine: gradients vs float64 finite differences, casts, rounding of gradients."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fpemu import rounding
from fpemu.amp.policy import autocast
from fpemu.nn import functional as fn
from fpemu.nn.tensor import Tensor, cast, gradcheck, round_to

RNG = np.random.default_rng(1234)
X = RNG.normal(size=(3, 4))
W = RNG.normal(size=(5, 4))
B = RNG.normal(size=5)
LN_W = RNG.uniform(0.5, 1.5, 4)
LN_B = RNG.normal(size=4)
LABELS = np.array([0, 3, 1])
TARGET = RNG.normal(size=(3, 4))

#: op name -> (function of Tensors, inputs). Every op of fpemu.amp.policy.OPS appears once at least.
CASES: dict[str, tuple[Callable[..., Tensor], list[np.ndarray]]] = {
    "linear": (lambda x, w, b: fn.linear(x, w, b), [X, W, B]),
    "linear_nobias": (lambda x, w: fn.linear(x, w), [X, W]),
    "matmul": (lambda a, b: fn.matmul(a, b), [X, W.T]),
    "add": (lambda a, b: fn.add(a, b), [X, X[:1] * 0.5]),  # broadcasting
    "add_scalar": (lambda a: a + 2.0, [X]),
    "mul": (lambda a, b: fn.mul(a, b), [X, TARGET]),
    "mul_broadcast": (lambda a, b: a * b, [X, LN_W]),
    "sub_neg": (lambda a, b: a - b, [X, TARGET]),
    "rsub": (lambda a: 1.0 - a, [X]),
    "relu": (lambda a: fn.relu(a), [X + 0.05]),  # keep away from the kink at 0
    "gelu": (lambda a: fn.gelu(a), [X]),
    "tanh": (lambda a: fn.tanh(a), [X]),
    "sigmoid": (lambda a: fn.sigmoid(a), [X]),
    "softmax": (lambda a: fn.softmax(a), [X]),
    "log_softmax": (lambda a: fn.log_softmax(a), [X]),
    "cross_entropy": (lambda a: fn.cross_entropy(a, LABELS), [X]),
    "mse": (lambda a, t: fn.mse(a, t), [X, TARGET]),
    "mse_const": (lambda a: fn.mse(a, TARGET), [X]),
    "sum": (lambda a: fn.sum(a), [X]),
    "mean": (lambda a: fn.mean(a), [X]),
    "layer_norm": (lambda a, w, b: fn.layer_norm(a, w, b), [X, LN_W, LN_B]),
    "reused": (lambda a: fn.mul(fn.tanh(a), a), [X]),  # a tensor used twice: grads add up
}


def _chain(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    h = fn.gelu(fn.linear(x, w, b))  # (3, 5)
    h = fn.layer_norm(h, Tensor(np.ones(5)), Tensor(np.zeros(5)))
    return fn.cross_entropy(fn.matmul(h, fn.tanh(Tensor(np.ones((5, 4)) * 0.3))), LABELS)


CASES["chain"] = (_chain, [X, W, B])


@pytest.mark.parametrize("name", list(CASES))
def test_float64_gradients_match_finite_differences(name: str) -> None:
    func, inputs = CASES[name]
    res = gradcheck(func, inputs, policy="float64", eps=1e-6, rtol=1e-6, atol=1e-9)
    assert res.ok, (name, res)


@pytest.mark.parametrize("name", list(CASES))
def test_fp32_gradients_match_float64_finite_differences(name: str) -> None:
    func, inputs = CASES[name]
    res = gradcheck(func, inputs, policy="fp32", eps=1e-6, rtol=2e-4, atol=1e-5)
    assert res.ok, (name, res)


def _scaled_grad(x: Tensor, factor: float) -> Tensor:
    """Identity forward whose backward multiplies the gradient by ``factor`` (a planted bug)."""
    y = Tensor.derived(x.data.copy(), x.fmt, (x,), "buggy")

    def _backward() -> None:
        assert y.grad is not None
        x.accumulate(y.grad * factor)

    y._backward = _backward
    return y


@pytest.mark.parametrize("policy", ["float64", "fp32"])
def test_checker_catches_a_backward_off_by_0_1_percent(policy: str) -> None:
    tol = {"float64": (1e-6, 1e-9), "fp32": (2e-4, 1e-5)}[policy]
    good = gradcheck(lambda a: fn.tanh(_scaled_grad(a, 1.0)), [X], policy=policy,
                     rtol=tol[0], atol=tol[1])  # fmt: skip
    bad = gradcheck(lambda a: fn.tanh(_scaled_grad(a, 1.001)), [X], policy=policy,
                    rtol=tol[0], atol=tol[1])  # fmt: skip
    assert good.ok and not bad.ok, (good, bad)


def test_round_to_float32_shortcut_equals_fpemu_round() -> None:
    rng = np.random.default_rng(5)
    tiny = 2.0**-149
    x = np.concatenate([
        rng.normal(size=2000) * 10.0 ** rng.integers(-45, 39, 2000),
        [tiny * 0.5, tiny * 1.5, tiny * 2.5, -tiny * 0.5, 2.0**-126 * (1 - 2**-24)],  # ties
        [3.4028235677973366e38, 3.4028235677973367e38, 3.5e38, -3.5e38, np.inf, -0.0],
        (1 + np.arange(1, 50) * 2.0**-24),  # halfway cases between float32 neighbours
    ])  # fmt: skip
    got = round_to(x, "float32")
    want = np.asarray(rounding.round(x, "float32"), np.float64)
    assert got.dtype == np.float32
    assert got.astype(np.float64).tobytes() == want.tobytes()


def test_leaf_values_are_rounded_to_their_format() -> None:
    t = Tensor([0.1, 1 + 2**-12, 70000.0], "fp16")
    assert t.data.dtype == np.float32
    assert t.data.tolist() == [0.0999755859375, 1.0, float("inf")]


def test_cast_backward_rounds_gradient_to_source_format() -> None:
    x = Tensor(np.array([1.0, 2.0]), "float64", requires_grad=True)
    y = cast(x, "fp16")
    y.backward(np.array([0.1, 1 / 3]))
    # the gradient reaching y is rounded to y's format (fp16), then widened exactly
    assert x.grad is not None and x.grad.dtype == np.float64
    assert x.grad.tolist() == [0.0999755859375, 0.333251953125]


def test_fp32_weight_under_fp16_op_gets_fp32_grad_holding_fp16_values() -> None:
    # amp.md 2.1: param grads are fp32 tensors whose values equal their fp16 round trip.
    x = Tensor(RNG.normal(size=(8, 16)).astype(np.float32))
    w = Tensor(RNG.normal(size=(4, 16)).astype(np.float32), requires_grad=True)
    with autocast("torch_cuda_fp16"):
        loss = fn.cross_entropy(fn.linear(x, w), np.arange(8) % 4)
    loss.backward()
    assert w.grad is not None and w.grad.dtype == np.float32 and w.fmt.name == "float32"
    np.testing.assert_array_equal(round_to(w.grad.astype(np.float64), "fp16"), w.grad)
    assert not np.array_equal(round_to(w.data.astype(np.float64), "fp16"), w.data)


def test_backward_outside_autocast_uses_forward_formats() -> None:
    x = Tensor(np.array([[3.0, 1.0]], np.float32), requires_grad=True)
    w = Tensor(np.array([[1 + 2**-9, 1.0]], np.float32), requires_grad=True)
    with autocast("torch_cuda_bf16"):
        y = fn.linear(x, w)
    assert y.fmt.name == "bfloat16"
    y.backward(np.array([[1.0 + 2**-10]], np.float32))  # rounds to 1.0 in bf16
    assert w.grad is not None and w.grad.tolist() == [[3.0, 1.0]]


def test_gradients_accumulate_over_backward_calls() -> None:
    x = Tensor(np.array([1.0, -1.0]), requires_grad=True)
    fn.sum(x * 3.0).backward()
    fn.sum(x * 3.0).backward()
    assert x.grad is not None and x.grad.tolist() == [6.0, 6.0]


def test_backward_needs_grad_for_non_scalar() -> None:
    with pytest.raises(ValueError, match="grad is needed"):
        (Tensor(np.ones(3)) * 2.0).backward()


def test_deep_graph_does_not_hit_recursion_limit() -> None:
    x = Tensor(np.array([1.0]), requires_grad=True)
    y = x
    for _ in range(3000):
        y = y + 0.0
    fn.sum(y).backward()
    assert x.grad is not None and x.grad.tolist() == [1.0]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: fn.linear(Tensor(np.ones((2, 3))), Tensor(np.ones((4, 2)))), "linear needs"),
        (
            lambda: fn.linear(Tensor(np.ones((2, 3))), Tensor(np.ones((4, 3))), Tensor(np.ones(3))),
            "bias",
        ),
        (lambda: fn.matmul(Tensor(np.ones((2, 3))), Tensor(np.ones((2, 3)))), "matmul needs"),
        (lambda: fn.cross_entropy(Tensor(np.ones((2, 3))), np.array([0, 3])), r"\[0, 3\)"),
        (lambda: fn.cross_entropy(Tensor(np.ones((2, 3))), np.array([0.0, 1.0])), "integer"),
        (lambda: fn.mse(Tensor(np.ones(3)), np.ones(2)), "mse target shape"),
        (
            lambda: fn.layer_norm(Tensor(np.ones((2, 3))), Tensor(np.ones(2)), Tensor(np.ones(2))),
            "layer_norm weight",
        ),
        (lambda: fn.relu(Tensor(np.ones(2)), policy="no_such_policy"), "unknown policy"),
    ],
)
def test_bad_arguments_raise_value_error(call: Callable[[], object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        call()


def test_numpy_constant_keeps_its_dtype_python_number_is_weak() -> None:
    loss = Tensor(np.array(2.5), "fp16")
    assert (loss * np.asarray(65536.0, np.float32)).fmt.name == "float32"  # amp.md 1.3
    assert (loss * 65536.0).fmt.name == "float16"
    with pytest.raises(ValueError, match="one-element"):
        Tensor(np.ones(2)).item()


def test_bad_types_raise_type_error() -> None:
    with pytest.raises(TypeError, match="data must be a real numeric array"):
        Tensor(np.array(["a"]))
    with pytest.raises(TypeError, match="requires_grad"):
        Tensor(np.ones(2), requires_grad=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="at least one Tensor"):
        fn.add(1.0, 2.0)
