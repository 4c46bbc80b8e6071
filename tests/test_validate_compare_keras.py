"""compare_keras: Keras 3 (torch backend) training steps beside fpemu's, every tensor compared.

Three models (mixed_bfloat16 with SGD momentum; mixed_float16 with Keras's LossScaleOptimizer,
growing and skipping; LayerNormalization under mixed_bfloat16): every bit-exactness claim is
asserted, and every tensor that is not bit-identical has its cause stated and checked. Faults
injected on the fpemu side (a wrong policy entry, a wrong loss-scale growth rule) are pinned
to the right layer and step.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

import fpemu.validate.twin.keras_compare as ck  # noqa: E402
from fpemu.amp.policy import get_policy  # noqa: E402
from fpemu.amp.scaling import KerasLossScaleOptimizer  # noqa: E402
from fpemu.validate import compare_keras  # noqa: E402
from fpemu.validate.twin.model_report import ModelReport  # noqa: E402

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="keras was imported with another backend"
)
L = keras.layers
#: Keras's torch SGD updates with ``add_(g, alpha=-lr)``: one fused rounding on the
#: vectorised (AVX2/AVX512) builds, two on the default one, where the update differs from
#: KerasSGD's within the optimizer bound and the report says "optimizer" (then "propagated").
FUSED = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@pytest.fixture(autouse=True)
def _setup() -> Any:
    old, threads = keras.config.dtype_policy(), torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    keras.config.set_dtype_policy(old)
    torch.set_num_threads(threads)


def _data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((16, 8)).astype(np.float32), rng.integers(0, 4, 16)


def _model(policy: str, layers: Callable[[], list[Any]]) -> Any:
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((8,)), *layers()])


def _plain() -> list[Any]:
    return [L.Dense(16, activation="relu", name="dense"), L.Dense(16, name="dense_1"),
            L.Activation("tanh", name="act"), L.Dense(4, name="head")]  # fmt: skip


def _nonexact(r: ModelReport) -> list[Any]:
    """The checks that are not bit-identical and not the default build's optimizer rounding
    (stated as "optimizer", and everything after it as "propagated", both explained)."""
    out = [c for c in r.checks if c.cause != "exact"]
    if FUSED:
        return out
    assert all(c.explained for c in out)
    return [c for c in out if c.cause not in ("optimizer", "propagated")]


def _exact_or_optimizer(c: Any) -> bool:
    return c.exact or (not FUSED and c.cause in ("optimizer", "propagated") and c.explained)


def test_bf16_sgd_momentum_is_bit_exact_but_the_loss() -> None:
    x, y = _data(1)
    r = compare_keras(_model("mixed_bfloat16", _plain), x, y, lr=0.1, momentum=0.9, steps=4)
    assert r.ok and r.settings["policy"] == "keras_mixed_bfloat16"
    kinds = {c.kind for c in r.checks}
    assert kinds == {"activation", "loss", "backward", "grad", "scaler", "param"}
    # every activation, gradient, scaler state and updated parameter of every step: identical
    for c in r.checks:
        if c.kind != "loss":
            assert _exact_or_optimizer(c), (c.step, c.kind, c.name)
    # the loss alone may differ: Keras's cross_entropy (torch's kernel, then sum / N) against
    # fpemu's, from the same logits: a reduction order, explained
    for c in _nonexact(r):
        assert (c.kind, c.cause, c.explained) == ("loss", "reduction order", True)
        assert c.local_ulps is not None and c.local_ulps <= 1
    assert [t["skipped_keras"] for t in r.trace] == [False] * 4


def test_fp16_loss_scale_optimizer_grows_and_skips_like_keras() -> None:
    x, y = _data(2)
    model = _model("mixed_float16", lambda: [L.Dense(16, activation="tanh"), L.Dense(4)])
    r = compare_keras(model, x, y, lr=0.1, steps=8,
                      loss_scale={"initial_scale": 2.0**21, "dynamic_growth_steps": 2})  # fmt: skip
    assert r.ok
    scales = [t["scale"] for t in r.trace]
    skipped = [t["skipped_keras"] for t in r.trace]
    assert skipped == [t["skipped_fpemu"] for t in r.trace]
    assert any(skipped) and not all(skipped)  # the scaled float16 gradients overflow at first
    # Keras 3's rule, step by step: halve and skip on inf/NaN, double after 2 finite steps
    want, counter = [2.0**21], 0
    for s in skipped[:-1]:
        if s:
            want.append(want[-1] / 2)
            counter = 0
        elif counter == 1:
            want.append(want[-1] * 2)
            counter = 0
        else:
            want.append(want[-1])
            counter += 1
    assert scales == want
    for c in r.select(kind="scaler"):
        assert c.exact, c.step
    for c in r.checks:  # everything but the loss is bit-identical, skipped steps included
        assert _exact_or_optimizer(c) or (c.kind, c.cause, c.explained) == (
            "loss", "reduction order", True)  # fmt: skip


def test_layer_norm_bf16_differences_are_its_reductions() -> None:
    x, y = _data(3)
    model = _model("mixed_bfloat16", lambda: [L.Dense(16, activation="relu", name="dense"),
                                              L.LayerNormalization(name="layer_normalization"),
                                              L.Dropout(0.3), L.Dense(4)])  # fmt: skip
    r = compare_keras(model, x, y, lr=0.1, steps=3)
    assert r.ok
    ln = "layer_normalization"
    for c in r.select(kind="activation") + r.select(kind="scaler"):
        assert _exact_or_optimizer(c), (c.step, c.kind, c.name)  # Dropout: the identity
    for c in r.select(kind="param"):  # gamma follows its gradient (a reduction order)
        assert _exact_or_optimizer(c) or (c.name, c.cause) == (f"{ln}.gamma", "propagated")
    for c in [c for c in r.checks if c.cause != "exact"]:
        assert c.explained, (c.step, c.kind, c.name)
        if c.cause in ("propagated", "optimizer"):  # see _nonexact
            assert c.cause == "propagated" or not FUSED
            continue
        assert c.cause == "reduction order"
        # torch's float32 LayerNorm backward kernel against fpemu's formula: the gamma
        # gradient (a sum over the batch) and the input gradient (a sum over the row)
        assert (c.kind, c.name) in {("grad", f"{ln}.gamma"), ("backward", "dense.relu"),
                                    ("loss", "cross_entropy")}, (c.kind, c.name)  # fmt: skip
    assert any(c.name == f"{ln}.gamma" and not c.exact for c in r.checks)


def test_wrong_policy_entry_is_pinned_to_its_layer() -> None:
    good = get_policy("keras_mixed_bfloat16")
    bad = dataclasses.replace(good, name="wrong", lower=good.lower - {"relu"},
                              fp32=good.fp32 | {"relu"})  # fmt: skip
    x, y = _data(1)
    r = compare_keras(_model("mixed_bfloat16", _plain), x, y, lr=0.1, steps=2, policy=bad)
    first = r.first_unexplained()
    assert first is not None and (first.step, first.kind, first.name) == (0, "activation",
                                                                          "dense.relu")  # fmt: skip
    assert first.cause == "format" and (first.torch_format, first.fpemu_format) == (
        "bfloat16", "float32")  # fmt: skip
    assert not r.ok


def test_wrong_loss_scale_growth_is_pinned_to_its_step(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(**kw: Any) -> KerasLossScaleOptimizer:  # grows after 2 finite steps, not 3
        return KerasLossScaleOptimizer(**{**kw, "dynamic_growth_steps": 2})

    monkeypatch.setattr(ck, "KerasLossScaleOptimizer", wrong)
    x, y = _data(2)
    model = _model("mixed_float16", lambda: [L.Dense(16, activation="relu"), L.Dense(4)])
    r = compare_keras(model, x, y, lr=0.1, steps=4, loss_scale={"dynamic_growth_steps": 3})
    first = r.first_unexplained()
    assert first is not None and (first.step, first.kind) == (1, "scaler")
    assert first.cause == "unexplained"
    assert [c.exact for c in r.select(kind="scaler")][:2] == [True, False]


def test_bad_arguments() -> None:
    x, y = _data(1)
    m = _model("mixed_bfloat16", _plain)
    for kw, match in (({"loss": "hinge"}, r"loss='hinge': accepted cross_entropy, mse"),
                      ({"loss": "mse"}, r"targets: shape \(16,\) for loss='mse'; accepted"),
                      ({"optimizer": "rmsprop"}, r"optimizer='rmsprop': accepted sgd, adam"),
                      ({"optimizer": "adam", "beta_1": 1.0},
                       r"beta_1=1.0: accepted a number in \[0, 1\)"),
                      ({"optimizer": "adamw", "epsilon": -1.0},
                       r"epsilon=-1.0: accepted a finite number >= 0"),
                      ({"steps": 0}, r"steps=0: accepted an int >= 1"),
                      ({"lr": -1.0}, r"lr=-1.0: accepted a finite number > 0"),
                      ({"momentum": 2.0}, r"momentum=2.0: accepted a number in \[0, 1\]"),
                      ({"loss_scale": {"scale": 1}}, r"unknown keys \['scale'\]")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            compare_keras(m, x, y, **kw)
    with pytest.raises(ValueError, match=r"dtype policy is 'float32'; accepted mixed_bfloat16"):
        compare_keras(_model("float32", _plain), x, y)
    with pytest.raises(ValueError, match=r"unsupported layer .*BatchNormalization.*supported"):
        compare_keras(_model("mixed_bfloat16", lambda: [L.BatchNormalization(), L.Dense(4)]),
                      x, y)  # fmt: skip
