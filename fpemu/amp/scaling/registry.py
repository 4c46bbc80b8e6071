"""Scalers by name: ``get_scaler("torch", growth_interval=3)``.

>>> type(get_scaler("tf.keras")).__name__
'TfKerasLossScaleOptimizer'
>>> get_scaler("nope")
Traceback (most recent call last):
...
ValueError: unknown scaler 'nope'; accepted: apex, fresh_gradscaler, hysteresis, keras, ...
"""

from __future__ import annotations

from typing import Any

from fpemu.amp.scaling.apex import ApexDynamicScaler
from fpemu.amp.scaling.baselines import NaiveDoublingScaler, NoScaler, StaticScaler
from fpemu.amp.scaling.keras import KerasLossScaleOptimizer, TfKerasLossScaleOptimizer
from fpemu.amp.scaling.mistakes import FreshGradScaler, TutorialScaler, TutorialSkippingScaler
from fpemu.amp.scaling.protocol import LossScaler
from fpemu.amp.scaling.pytorch import HysteresisScaler, TorchGradScaler

#: Canonical scaler names and their classes.
SCALERS: dict[str, type[LossScaler]] = {
    cls.name: cls
    for cls in (
        TorchGradScaler,
        HysteresisScaler,
        KerasLossScaleOptimizer,
        TfKerasLossScaleOptimizer,
        ApexDynamicScaler,
        StaticScaler,
        NaiveDoublingScaler,
        TutorialScaler,
        TutorialSkippingScaler,
        FreshGradScaler,
        NoScaler,
    )
}

#: Other spellings accepted by :func:`get_scaler`.
SCALER_ALIASES: dict[str, str] = {
    "pytorch": "torch",
    "gradscaler": "torch",
    "keras3": "keras",
    "tf.keras": "tf_keras",
    "tfkeras": "tf_keras",
    "keras2": "tf_keras",
    "megatron": "hysteresis",
    "fixed": "static",
    "naive_doubling": "naive",
    "off": "none",
    "tutorial_skipping": "tutorial_skip",
    "fresh": "fresh_gradscaler",
}


def get_scaler(name: str, **kwargs: Any) -> LossScaler:
    """Build the scaler registered as ``name`` (case-insensitive) with ``kwargs``.

    >>> get_scaler("apex", scale_window=100).get_scale()
    65536.0
    >>> get_scaler("Keras").name
    'keras'

    Raises:
        ValueError: ``name`` is not a registered name or alias (the message lists them), or
            the constructor rejects a value.
        TypeError: ``name`` is not a str, or a keyword the scaler does not take.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {name!r}")
    key = name.strip().lower()
    key = SCALER_ALIASES.get(key, key)
    if key not in SCALERS:
        raise ValueError(
            f"unknown scaler {name!r}; accepted: {', '.join(sorted(SCALERS))} "
            f"(aliases: {', '.join(sorted(SCALER_ALIASES))})"
        )
    return SCALERS[key](**kwargs)
