"""``fpemu.watch`` around Keras 3 training steps on the torch backend (issue 22, point 4):
``model.fit`` and ``train_on_batch`` under ``float32``, ``mixed_bfloat16`` and
``mixed_float16`` (Keras wraps the optimizer in a LossScaleOptimizer), the policy taken from
Keras's global dtype policy. A correct model gives no ``differs``/``policy``/``not_emulated``
row and no procedure finding; the Keras optimizer is the ``optimizer`` phase, the loss scaling
the ``scaler`` phase, and layers name the module.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
pytest.importorskip("torch")
if keras.config.backend() != "torch":  # pragma: no cover - another backend chosen first
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

import fpemu  # noqa: E402


@pytest.fixture
def policy(request: pytest.FixtureRequest) -> str:
    old = keras.config.dtype_policy()
    keras.config.set_dtype_policy(request.param)
    yield request.param
    keras.config.set_dtype_policy(old)


def _model(optimizer: str) -> keras.Model:
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((12,)), keras.layers.Dense(24, activation="relu"),
        keras.layers.LayerNormalization(), keras.layers.Dense(24, activation="gelu"),
        keras.layers.Dense(4),
    ])  # fmt: skip
    opt = (
        keras.optimizers.AdamW(1e-3)
        if optimizer == "adamw"
        else keras.optimizers.SGD(0.05, momentum=0.9)
    )
    model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16", "mixed_float16"], indirect=True)
def test_keras_steps_are_clean(policy: str, optimizer: str) -> None:
    model = _model(optimizer)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 12)).astype("float32")
    y = rng.integers(0, 4, 16)
    model.train_on_batch(x[:8], y[:8])  # builds the optimizer's variables outside the block
    with fpemu.watch() as w:
        model.train_on_batch(x[:8], y[:8])
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    r = w.report()
    keys = ("step", "phase", "module", "op", "verdict")
    failing = ("differs", "policy", "not_emulated")
    bad = [
        (*(row[k] for k in keys), row["cause"][:100]) for row in r.rows if row["verdict"] in failing
    ]
    assert not bad, bad[:5]
    assert r.procedure == []
    phases = {row["phase"] for row in r.rows}
    assert {"forward", "backward", "optimizer"} <= phases
    assert ("scaler" in phases) == (policy == "mixed_float16")
    assert r.settings["steps"] == 3
    modules = {row["module"] for row in r.rows}  # Keras numbers layer names per process
    assert sum(m.startswith("dense") for m in modules) == 3
    assert sum(m.startswith("layer_normalization") for m in modules) == 1
    if policy != "float32":
        assert "Keras dtype policy" in r.settings["policy"]
