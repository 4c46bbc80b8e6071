"""Policies: every op's result format under every preset, against tables written from amp.md.

The expected tables below are transcribed from the research note (amp.md sections cited), not
generated from fpemu.amp.policy: "f32" is float32, "lp" the preset's low format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from fpemu.amp.policy import (
    NATIVE,
    OPS,
    Policy,
    autocast,
    current_policy,
    describe,
    get_policy,
    preset_names,
    presets_markdown,
)
from fpemu.nn import MLP
from fpemu.nn import functional as fn
from fpemu.nn.optim import SGD
from fpemu.nn.tensor import Tensor, cast, round_to
from fpemu.testing import assert_ulp_close

# op -> (result format with x = f32, result format with x = lp); weights/bias/LN params are f32.
# amp.md 2.4 table, CUDA column "x=f32 / x=f16 (source)"; 2.2 lists (bf16 uses the same lists).
TORCH_CUDA = {
    "linear": ("lp", "lp"), "matmul": ("lp", "lp"), "relu": ("f32", "lp"),
    "gelu": ("f32", "lp"), "tanh": ("f32", "lp"), "sigmoid": ("f32", "lp"), "silu": ("f32", "lp"),
    "softmax": ("f32", "f32"), "log_softmax": ("f32", "f32"), "cross_entropy": ("f32", "f32"),
    "mse_x_f32": ("f32", "f32"), "mse_x_x": ("f32", "f32"), "sum": ("f32", "f32"),
    "mean": ("f32", "lp"), "layer_norm": ("f32", "f32"), "add_x_f32": ("f32", "f32"),
    "add_x_x": ("f32", "lp"), "mul_x_f32": ("f32", "f32"), "mul_x_x": ("f32", "lp"),
}  # fmt: skip
# amp.md 2.4 table, CPU columns (observed in torch 2.13 for bf16 and f16).
TORCH_CPU = {
    **TORCH_CUDA, "softmax": ("f32", "lp"), "log_softmax": ("f32", "lp"), "sum": ("f32", "lp"),
    "layer_norm": ("f32", "lp"),
}  # fmt: skip
# amp.md 3.1: inside a layer every floating input is cast to the compute dtype (Dense,
# activations, Softmax layer observed fp16); LayerNormalization returns the compute dtype;
# losses convert to floatx = float32.
KERAS = {
    **{k: ("lp", "lp") for k in TORCH_CUDA}, "cross_entropy": ("f32", "f32"),
    "mse_x_f32": ("f32", "f32"), "mse_x_x": ("f32", "f32"),
}  # fmt: skip
# amp.md 4.3: O1 FP16 list (linear, matmul), FP32 list (sum, softmax, log_softmax, gelu,
# layer_norm, losses), CASTS (add, mul: widest input); relu, tanh, sigmoid, mean unlisted.
APEX_O1 = {
    **TORCH_CUDA, "gelu": ("f32", "f32"), "add_x_x": ("f32", "lp"), "mul_x_x": ("f32", "lp"),
}  # fmt: skip
# No autocast (amp.md 2.4 first column): everything in the input dtype, f32 for f32 inputs.
PLAIN = {k: ("f32", None) for k in TORCH_CUDA}

TABLES: dict[str, tuple[dict[str, tuple[str, str | None]], str]] = {
    "torch_cuda_fp16": (TORCH_CUDA, "float16"), "torch_cuda_bf16": (TORCH_CUDA, "bfloat16"),
    "torch_cpu_bf16": (TORCH_CPU, "bfloat16"), "torch_cpu_fp16": (TORCH_CPU, "float16"),
    "keras_mixed_float16": (KERAS, "float16"), "keras_mixed_bfloat16": (KERAS, "bfloat16"),
    "apex_O1": (APEX_O1, "float16"), "apex_O0": (PLAIN, "float32"), "fp32": (PLAIN, "float32"),
}  # fmt: skip

RNG = np.random.default_rng(7)
W = RNG.normal(size=(3, 4)).astype(np.float32)
F32_OTHER = RNG.normal(size=(2, 4)).astype(np.float32)


def _run(case: str, x: Tensor, pfmt: str = "float32") -> Tensor:
    w = Tensor(W, pfmt)
    other = Tensor(F32_OTHER, pfmt)
    ops: dict[str, Callable[[], Tensor]] = {
        "linear": lambda: fn.linear(x, w, Tensor(np.ones(3, np.float32), pfmt)),
        "matmul": lambda: fn.matmul(x, Tensor(W.T.copy(), pfmt)),
        "relu": lambda: fn.relu(x), "gelu": lambda: fn.gelu(x), "tanh": lambda: fn.tanh(x),
        "sigmoid": lambda: fn.sigmoid(x), "silu": lambda: fn.silu(x),
        "softmax": lambda: fn.softmax(x),
        "log_softmax": lambda: fn.log_softmax(x),
        "cross_entropy": lambda: fn.cross_entropy(x, np.array([0, 3])),
        "mse_x_f32": lambda: fn.mse(x, other), "mse_x_x": lambda: fn.mse(x, x),
        "sum": lambda: fn.sum(x), "mean": lambda: fn.mean(x),
        "layer_norm": lambda: fn.layer_norm(x, Tensor(np.full(4, 1.1, np.float32), pfmt),
                                            Tensor(np.full(4, 0.1, np.float32), pfmt)),
        "add_x_f32": lambda: x + other, "add_x_x": lambda: x + x,
        "mul_x_f32": lambda: x * other, "mul_x_x": lambda: x * x,
    }  # fmt: skip
    return ops[case]()


CASES = [(p, c, k) for p in TABLES for c in TORCH_CUDA for k in (0, 1)]


@pytest.mark.parametrize(("preset", "case", "kind"), CASES)
def test_result_format_matches_framework_table(preset: str, case: str, kind: int) -> None:
    table, low = TABLES[preset]
    expected = table[case][kind]
    if expected is None:  # plain policies: x=lp means "input dtype" in the no-autocast column
        expected = "lp"
    x_fmt = "float32" if kind == 0 else low
    x = Tensor(RNG.normal(size=(2, 4)), x_fmt)
    with autocast(preset):
        y = _run(case, x)
    want = {"f32": "float32", "lp": low}[expected]
    assert y.fmt.name == want, (preset, case, x_fmt)
    # the values really are in that format (rounded, not merely labelled)
    np.testing.assert_array_equal(round_to(y.data.astype(np.float64), want), y.data)


@pytest.mark.parametrize("preset", ["apex_O2", "apex_O3", "naive_fp16"])
@pytest.mark.parametrize("case", list(TORCH_CUDA))
def test_half_model_presets_run_everything_in_fp16(preset: str, case: str) -> None:
    # amp.md 4.1: O2/O3 call .half() on the model and patch no torch function, so with fp16
    # inputs and fp16 parameters every op runs (and returns) fp16.
    x = Tensor(RNG.normal(size=(2, 4)), "float16")
    with autocast(preset):
        y = _run(case, x, "float16")
    assert y.fmt.name == "float16"


def test_fp16_with_bf16_promotes_to_fp32() -> None:
    # torch.promote_types(float16, bfloat16) is float32: neither format contains the other.
    y = Tensor(np.ones(2), "fp16") + Tensor(np.ones(2), "bf16")
    assert y.fmt.name == "float32"
    assert (Tensor(np.ones(2), "fp16") + Tensor(np.ones(2), "fp16")).fmt.name == "float16"


def test_table_covers_every_op() -> None:
    covered = {c.split("_x_")[0] for c in TORCH_CUDA}
    assert covered == set(OPS)


def test_lower_op_really_rounds_its_inputs() -> None:
    # fp32 weights cast to fp16 before the matmul (autocast lower_precision_fp, amp.md 2.1):
    # 1 + 2**-12 is 1 in fp16, so the product is exactly 3.
    x = Tensor(np.array([[1.0, 1.0, 1.0]], np.float32))
    w = Tensor(np.array([[1 + 2**-12] * 3], np.float32))
    with autocast("torch_cuda_fp16"):
        assert fn.linear(x, w).data.tolist() == [[3.0]]
    assert fn.linear(x, w).data.tolist() == [[np.float32(3 * (1 + 2**-12))]]


def test_keras_layer_norm_computes_wide_and_returns_low() -> None:
    x = Tensor(RNG.normal(size=(2, 4)), "float16")
    w = Tensor(np.full(4, 1 + 2**-13, np.float32))  # not an fp16 value: used unrounded
    b = Tensor(np.zeros(4, np.float32))
    with autocast("keras_mixed_float16"):
        y = fn.layer_norm(x, w, b)
    with autocast("fp32"):
        ref = fn.layer_norm(Tensor(x.data, "float32"), w, b)
    assert y.fmt.name == "float16"
    np.testing.assert_array_equal(y.data, round_to(ref.data.astype(np.float64), "fp16"))


# amp.md 4.1 table: cast_model_type / master_weights / loss_scale per opt level.
APEX_TABLE = {
    "apex_O0": ("float32", None, "static"), "apex_O1": ("float32", None, "apex"),
    "apex_O2": ("float16", "float32", "apex"), "apex_O3": ("float16", None, "static"),
}  # fmt: skip


@pytest.mark.parametrize("preset", list(APEX_TABLE))
def test_apex_opt_levels(preset: str) -> None:
    param, master, scaler = APEX_TABLE[preset]
    p = get_policy(preset)
    assert (p.param.name, None if p.master is None else p.master.name, p.scaler) == (
        param, master, scaler)  # fmt: skip
    if preset in ("apex_O2", "apex_O3"):  # forward casts inputs to fp16, outputs to fp32
        assert (p.model_input, p.model_output) == (p.compute, get_policy("fp32").param)


@pytest.mark.parametrize(
    ("preset", "scaler"),
    [("torch_cuda_fp16", "torch"), ("torch_cuda_bf16", None), ("torch_cpu_fp16", "torch"),
     ("torch_cpu_bf16", None), ("keras_mixed_float16", "keras"),
     ("keras_mixed_bfloat16", None), ("naive_fp16", None)],
)  # fmt: skip
def test_loss_scaling_pairing(preset: str, scaler: str | None) -> None:
    # amp.md 3.1: compile() wraps LossScaleOptimizer for mixed_float16 only; 5 #10: bf16 needs none.
    assert get_policy(preset).scaler == scaler


def test_apex_o2_mlp_intermediates_and_master_weights() -> None:
    m = MLP([4, 8, 3], policy="apex_O2", seed=1)
    assert {p.fmt.name for p in m.parameters()} == {"float16"}
    seen: list[str] = []
    x = Tensor(RNG.normal(size=(5, 4)).astype(np.float32))
    with autocast("apex_O2"):
        h = m.layers[0](cast(x, "fp16"))
        seen.append(h.fmt.name)
    y = m(x.data)
    assert seen == ["float16"] and y.fmt.name == "float32" and y.op == "cast"
    assert y._prev[0].fmt.name == "float16"
    opt = SGD(m.parameters(), lr=0.1, master=get_policy("apex_O2").master)
    assert opt.master is not None and all(a.dtype == np.float32 for a in opt.master)


def test_naive_policy_keeps_loss_in_fp16() -> None:
    m = MLP([4, 8, 3], policy="naive_fp16", seed=1)
    logits = m(RNG.normal(size=(5, 4)).astype(np.float32))
    loss = fn.cross_entropy(logits, np.array([0, 1, 2, 0, 1]), policy="naive_fp16")
    assert logits.fmt.name == "float16" and loss.fmt.name == "float16"


def test_autocast_nesting_and_disable() -> None:
    assert current_policy() is NATIVE
    with autocast("torch_cuda_fp16") as outer:
        with autocast(enabled=False):
            assert current_policy() is NATIVE
        with autocast("apex_O1"):
            assert current_policy().name == "apex_O1"
        assert current_policy() is outer
    assert current_policy() is NATIVE


def test_explicit_policy_argument_overrides_context() -> None:
    x = Tensor(np.ones((1, 2), np.float32))
    with autocast("torch_cuda_fp16"):
        y = fn.linear(x, Tensor(np.ones((1, 2), np.float32)), policy="fp32")
    assert y.fmt.name == "float32"


def test_user_defined_policy() -> None:
    mine = Policy("fp8ish", compute="float8_e4m3fn", lower={"linear"})  # type: ignore[arg-type]
    x = Tensor(np.array([[1.0, 0.3]], np.float32))
    with autocast(mine):
        y = fn.linear(x, Tensor(np.ones((1, 2), np.float32)))
    assert y.fmt.name == "float8_e4m3fn" and y.data.tolist() == [[1.25]]
    assert dataclasses.replace(mine, acc_model="sequential").acc_model == "sequential"


def test_policy_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        get_policy("fp32").name = "x"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"lower": {"convolution"}}, ValueError, "unknown op 'convolution'"),
        ({"lower": {"linear"}, "fp32": {"linear"}}, ValueError, "both"),
        ({"lower": "linear"}, TypeError, "collection of op names"),
        ({"compute": "float7"}, ValueError, "unknown format"),
        ({"acc_model": ""}, TypeError, "acc_model"),
    ],
)
def test_bad_policy_fields(kwargs: dict[str, object], exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        Policy("bad", **kwargs)  # type: ignore[arg-type]


def test_get_policy_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown policy='nope'.*presets: fp32"):
        get_policy("nope")
    with pytest.raises(TypeError, match="policy must be"):
        get_policy(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown op"):
        get_policy("fp32").category("conv")


def test_docs_presets_table_is_current() -> None:
    doc = (Path(__file__).parent.parent / "docs" / "amp-policies.md").read_text(encoding="utf-8")
    assert presets_markdown() in doc


def test_every_preset_resolves_and_describes() -> None:
    names = preset_names()
    for required in ("torch_cuda_fp16", "torch_cuda_bf16", "torch_cpu_bf16", "torch_cpu_fp16",
                     "keras_mixed_float16", "keras_mixed_bfloat16", "apex_O0", "apex_O1",
                     "apex_O2", "apex_O3", "fp32", "naive_fp16"):  # fmt: skip
        assert required in names
    for n in names:
        d = describe(n)
        assert set(d["ops"]) == set(OPS) and d["name"] == n
    assert get_policy("O2") is get_policy("apex_O2")
    assert get_policy("mixed_float16") is get_policy("keras_mixed_float16")


@pytest.mark.parametrize(("preset", "dtype"), [("torch_cpu_bf16", "bfloat16"),
                                               ("torch_cpu_fp16", "float16")])  # fmt: skip
def test_mlp_step_matches_torch_cpu_autocast(preset: str, dtype: str) -> None:
    # Third-party check: the same MLP under torch.autocast("cpu") gives the same result formats,
    # bit-identical logits and bit-identical fp32 parameter gradients (small integer inputs
    # keep the K=16/32 float32 sums insensitive to BLAS summation order).
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    m = MLP([16, 32, 4], policy=preset, seed=0)
    x = rng.integers(-2, 3, size=(8, 16)).astype(np.float32)
    y = rng.integers(0, 4, 8)
    lins = [torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)]
    with torch.no_grad():
        for lin, layer in zip(lins, m.layers, strict=True):
            lin.weight.copy_(torch.from_numpy(layer.weight.data))
            assert layer.bias is not None
            lin.bias.copy_(torch.from_numpy(layer.bias.data))
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        z = lins[1](torch.relu(lins[0](torch.from_numpy(x))))
        loss = torch.nn.functional.cross_entropy(z, torch.from_numpy(y))
    loss.backward()
    logits = m(x)
    ours = fn.cross_entropy(logits, y, policy=m.policy)
    ours.backward()
    assert (str(z.dtype), str(loss.dtype)) == (f"torch.{dtype}", "torch.float32")
    assert (logits.fmt.name, ours.fmt.name) == (dtype, "float32")
    np.testing.assert_array_equal(logits.data, z.detach().float().numpy())
    # The float32 cross-entropy is not bit-identical (torch: log_softmax + nll_loss with SLEEF
    # exp/log; fpemu: NumPy exp/log in its own order), so its difference is bounded: each side
    # is within E of the exact value. With u = 2**-24, exp and log within 4 ulps (NumPy's
    # float32 SIMD exp/log: 2.52 and 3.83 ulps, NumPy 1.17 notes; SLEEF u10: 1 ulp), C = 4
    # classes, B = 8 rows and R the largest logit range of a row: sum(exp(v - max)) lies in
    # [1, C] with relative error <= 8u (exp) + 3u (3 additions) + 3 * 0.37u (the rounding of
    # v - max, at most u * |x| * e**-x <= 0.37u per term), so log of it is off by at most
    # 12u + 8u * log(C) < 23u; two subtractions add 2u * (R + log C); the sum of B terms adds
    # (B - 1)u * (R + log C) per term (partial sums below B * (R + log C); / B is exact).
    # Hence E <= u * (23 + (B + 1) * (R + log C)) and the two losses differ by at most 2E.
    zf = z.detach().float().numpy().astype(np.float64)
    r = float((zf.max(axis=1) - zf.min(axis=1)).max())
    bound = 2 * 2.0**-24 * (23 + 9 * (r + np.log(4)))
    ulps = int(np.ceil(bound / np.spacing(np.float32(loss.item()))))
    assert_ulp_close(np.float32(ours.item()), np.float32(loss.item()), "float32", max_ulp=ulps)
    for lin, layer in zip(lins, m.layers, strict=True):
        assert layer.weight.grad is not None and layer.bias is not None
        assert layer.weight.grad.dtype == np.float32
        np.testing.assert_array_equal(layer.weight.grad, lin.weight.grad.numpy())
        np.testing.assert_array_equal(layer.bias.grad, lin.bias.grad.numpy())
