"""from_keras: a Keras 3 Sequential model's forward pass in fpemu, bit for bit against Keras
(torch backend) under its mixed_bfloat16 / mixed_float16 / float32 dtype policies."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

from fpemu.validate import from_keras  # noqa: E402

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="keras was imported with another backend"
)


@pytest.fixture
def policy_scope() -> Any:
    old = keras.config.dtype_policy()
    yield keras.config.set_dtype_policy
    keras.config.set_dtype_policy(old)


def _model(acts: tuple[str, str]) -> Any:
    keras.utils.set_random_seed(0)
    return keras.Sequential([
        keras.Input((8,)), keras.layers.Dense(16, activation=acts[0]),
        keras.layers.LayerNormalization(), keras.layers.Dropout(0.2),
        keras.layers.Dense(16), keras.layers.Activation(acts[1]), keras.layers.Dense(4),
    ])  # fmt: skip


def _np(v: Any) -> np.ndarray:
    return np.asarray(torch.as_tensor(v).detach().float().cpu().numpy())


@pytest.mark.parametrize("dtype_policy", ["mixed_bfloat16", "mixed_float16", "float32"])
@pytest.mark.parametrize("acts", [("relu", "gelu"), ("silu", "tanh"), ("sigmoid", "relu")])
def test_forward_matches_keras_layer_by_layer(policy_scope: Any, dtype_policy: str,
                                              acts: tuple[str, str]) -> None:  # fmt: skip
    policy_scope(dtype_policy)
    model = _model(acts)
    x = np.random.default_rng(1).standard_normal((16, 8)).astype(np.float32)
    twin = from_keras(model)
    out = twin(x)
    want = _np(model(x))
    low = {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}.get(dtype_policy, "float32")
    assert out.fmt.name == low
    if low == "float32":  # float32 matmuls: torch's and NumPy's BLAS sum in different orders
        return
    # low precision: every layer's output bit for bit (float32 accumulation then one rounding)
    h = x
    for layer in model.layers:
        h = layer(h)
        name = next(n.name for n in reversed(twin.nodes) if n.source.startswith(layer.name + " "))
        got = np.asarray(twin.outputs[name].data, np.float32)
        assert np.array_equal(got.view(np.uint32), _np(h).view(np.uint32)), layer.name
    assert np.array_equal(np.asarray(out.data, np.float32).view(np.uint32),
                          want.view(np.uint32))  # fmt: skip


def test_dense_is_matmul_then_bias_add(policy_scope: Any) -> None:
    policy_scope("mixed_bfloat16")
    twin = from_keras(_model(("relu", "gelu")))
    ops = [n.op for n in twin.nodes]
    assert ops[:5] == ["input", "matmul", "add", "relu", "layer_norm"]
    assert twin.policy.name == "keras_mixed_bfloat16"


def test_unsupported_layer_and_activation(policy_scope: Any) -> None:
    policy_scope("float32")
    m = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3)])
    with pytest.raises(ValueError, match=r"unsupported layer .*Conv2D.*supported layers: Dense"):
        from_keras(m)
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="elu")])
    with pytest.raises(ValueError, match="activation 'elu'; supported activations: relu"):
        from_keras(m)
