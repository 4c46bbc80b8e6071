"""Loss scalers with the exact semantics of PyTorch, Keras 3, tf.keras and Apex, in NumPy.

Every scaler follows one protocol (see :mod:`fpemu.amp.scaling.protocol`)::

    scaled = scaler.scale(loss)        # loss * scale with the framework's dtype rules
    scaler.unscale_(optimizer)         # optional; once per optimizer per iteration
    scaler.step(optimizer)             # unscales if needed, skips the step on inf/NaN
    record = scaler.update()           # the framework's scale rule -> StepRecord
    scaler.get_scale(); scaler.state_dict(); scaler.load_state_dict(sd)

``optimizer`` is duck-typed (:class:`OptimizerLike`: ``.params`` whose items have ``.grad``,
and ``.step()``); ``unscale_`` also takes a list or dict of gradient arrays. Scale arithmetic
is float32 where the framework's is (torch, Keras) and double where it is (apex), so traces
match bit for bit. Pick one by name with :func:`get_scaler`. The mistakes people write are
emulated too (:mod:`fpemu.amp.scaling.mistakes`): ``"tutorial"`` and ``"tutorial_skip"`` (the
halve/double scaler of tutorials), ``"fresh_gradscaler"`` (a GradScaler built every step).

>>> import numpy as np
>>> s = get_scaler("torch", init_scale=2.0**16, growth_interval=3)
>>> grads = [np.array([65536.0, np.inf], dtype=np.float32)]
>>> _ = s.scale(1.0)
>>> s.unscale_(grads)
True
>>> s.update().scale_after
32768.0
"""

from __future__ import annotations

from fpemu.amp.scaling.apex import ApexDynamicScaler
from fpemu.amp.scaling.baselines import NaiveDoublingScaler, NoScaler, StaticScaler
from fpemu.amp.scaling.keras import KerasLossScaleOptimizer, TfKerasLossScaleOptimizer
from fpemu.amp.scaling.mistakes import FreshGradScaler, TutorialScaler, TutorialSkippingScaler
from fpemu.amp.scaling.protocol import LossScaler, OptimizerLike, ParamLike, StepRecord
from fpemu.amp.scaling.pytorch import HysteresisScaler, ScalerArgumentError, TorchGradScaler
from fpemu.amp.scaling.registry import SCALER_ALIASES, SCALERS, get_scaler

__all__ = [
    "SCALERS",
    "SCALER_ALIASES",
    "ApexDynamicScaler",
    "FreshGradScaler",
    "HysteresisScaler",
    "KerasLossScaleOptimizer",
    "LossScaler",
    "NaiveDoublingScaler",
    "NoScaler",
    "OptimizerLike",
    "ParamLike",
    "ScalerArgumentError",
    "StaticScaler",
    "StepRecord",
    "TfKerasLossScaleOptimizer",
    "TorchGradScaler",
    "TutorialScaler",
    "TutorialSkippingScaler",
    "get_scaler",
]
