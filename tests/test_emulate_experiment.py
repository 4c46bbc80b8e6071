"""The transformer experiment: the small GPT trains in its own torch loop under every
configuration, and fp16 without loss scaling shows the underflow the docs explain."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from fpemu.emulate.experiment import CONFIGS
from fpemu.emulate.experiment import train_config as run


@pytest.mark.parametrize("config", list(CONFIGS))
def test_every_configuration_trains(config: str) -> None:
    r = run(config, steps=3, lr=1e-2, model="fast")  # the named models: test_emulate_matmul
    assert len(r["loss"]) == 3 and all(np.isfinite(r["loss"]))
    assert r["loss"][-1] < r["loss"][0]  # AdamW at lr 1e-2 moves the loss in 3 steps
    assert r["counts"]["emulated"] > 0 and r["counts"]["failed"] == 0
    if CONFIGS[config]["recipe"] is not None:
        st = r["state"]["blocks.0.fc"]["grad_output"]
        assert len(st["amax"]) == 3 and all(a > 0 for a in st["amax"])


def test_fp16_without_scaling_underflows_and_the_scaler_fixes_it() -> None:
    """After a few AdamW steps the softmax sharpens: the attention's q/k gradients (qkv's
    output gradient) fall below fp16's smallest subnormal and flush to zero; the GradScaler's
    2**16 keeps them. Structural zeros (float32 has them too): the first position's query
    gradient, 1/32 of the query third of qkv's output gradient, 1/96."""
    runs = {c: run(c, steps=4, lr=1e-2, model="fast") for c in ("fp16", "fp16+scaler")}
    share = {c: r["zeros"]["blocks.1.qkv"][-1] for c, r in runs.items()}
    assert share["fp16"] > 0.2
    assert abs(share["fp16+scaler"] - 1 / 96) < 0.002
    assert runs["fp16+scaler"]["scale"][0] == 2.0**16
