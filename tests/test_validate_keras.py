"""fpemu's Keras 3 scaler against keras.optimizers.LossScaleOptimizer on the torch backend."""

from __future__ import annotations

import os
from typing import Any

import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
pytest.importorskip("torch")
keras = pytest.importorskip("keras")

from fpemu.amp.scaling import KerasLossScaleOptimizer  # noqa: E402
from fpemu.validate.frameworks.keras_checks import KERAS_SCRIPTS, check_keras_scaler  # noqa: E402

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="keras was imported with another backend"
)


def test_keras_scaler_traces_agree() -> None:
    results = check_keras_scaler()
    assert len(results) == len(KERAS_SCRIPTS) + 2
    assert all(r.status == "agree" for r in results), [r.detail() for r in results if not r.ok]


class _LateGrowth(KerasLossScaleOptimizer):
    """Wrong on purpose: doubles one finite step late."""

    def __init__(self, **kw: Any) -> None:
        kw["dynamic_growth_steps"] = kw.get("dynamic_growth_steps", 2000) + 1
        super().__init__(**kw)


class _Floored(KerasLossScaleOptimizer):
    """Wrong on purpose: tf.keras's floor at 1 in a Keras 3 scaler."""

    def _apply_rule(self, found_inf: bool) -> None:
        super()._apply_rule(found_inf)
        self._dynamic_scale = max(self._dynamic_scale, type(self._dynamic_scale)(1.0))


@pytest.mark.parametrize(("wrong", "script"), [(_LateGrowth, 0), (_Floored, 1)])
def test_keras_check_catches_a_wrong_scaler(wrong: Any, script: int) -> None:
    (res,) = check_keras_scaler([KERAS_SCRIPTS[script]], make_scaler=wrong)[:1]
    assert res.status == "differ" and res.witness is not None
    assert res.witness["field"] == "scale"
