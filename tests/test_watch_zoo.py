"""``fpemu.watch`` on a zoo of correct models written the usual way (tests/watch_zoo.py): 18
models x 3 configurations (bf16 autocast + AdamW, fp16 autocast + GradScaler + SGD momentum,
float32 + AdamW) x 3 steps. A correct model must give 0 rows ``differs``, ``policy`` or
``not_emulated`` and 0 procedure findings: a false alarm is a bug. Seed 0 runs by default;
seeds 1-4 with ``-m slow``.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")

import fpemu  # noqa: E402
from tests.watch_zoo import CONFIGS, ZOO, setup, train_step  # noqa: E402


@functools.cache  # the coverage test reads the seed-0 reports again
def _run(name: str, config: str, seed: int) -> fpemu.validate.watch.WatchReport:
    model, opt, scaler, batches = setup(name, config, seed)
    with fpemu.watch() as w:
        for batch in batches:
            train_step(name, config, model, opt, scaler, batch)
    return w.report()


def _check(name: str, config: str, seed: int) -> None:
    r = _run(name, config, seed)
    bad = [
        (row["step"], row["phase"], row["module"], row["op"], row["verdict"], row["cause"][:120])
        for row in r.rows
        if row["verdict"] in ("differs", "policy", "not_emulated")
    ]
    assert not bad, f"{name}/{config}/seed {seed}: {len(bad)} rows, first: {bad[:5]}"
    assert r.procedure == [], r.procedure
    assert r.settings["steps"] == 3
    assert {row["phase"] for row in r.rows} >= {"forward", "backward", "optimizer"}
    if config == "fp16_scaler_sgd":
        assert any(row["phase"] == "scaler" for row in r.rows)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_seed0(name: str, config: str) -> None:
    _check(name, config, 0)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_more_seeds(name: str, config: str, seed: int) -> None:
    _check(name, config, seed)


def test_zoo_covers_the_issue_ops() -> None:
    """The zoo runs every op family issue 22 names (so 0 not_emulated rows means coverage)."""
    seen: set[str] = set()
    for name in ZOO:
        for config in CONFIGS:
            seen |= {row["op"] for row in _run(name, config, 0).rows}
    for op in ("aten.addmm.default", "aten.mm.default", "aten.bmm.default",
               "aten.convolution.default", "aten.convolution_backward.default",
               "aten._to_copy.default", "aten.gelu.default", "aten.gelu_backward.default",
               "aten.silu.default", "aten.sigmoid.default", "aten.tanh.default",
               "aten.leaky_relu.default", "aten.threshold_backward.default",
               "aten._softmax.default", "aten._log_softmax.default",
               "aten.native_layer_norm.default", "aten.native_layer_norm_backward.default",
               "aten.native_batch_norm.default", "aten.bernoulli_.float",
               "aten.embedding.default", "aten.embedding_dense_backward.default",
               "aten.nll_loss_forward.default", "aten.mse_loss.default", "aten.masked_fill.Scalar",
               "aten._scaled_dot_product_flash_attention_for_cpu.default",
               "aten._amp_foreach_non_finite_check_and_unscale_.default",
               "aten._amp_update_scale_.default", "aten.rsqrt.default"):  # fmt: skip
        assert op in seen, op
