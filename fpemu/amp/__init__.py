"""Automatic mixed precision as data: AMP policies with autocast, and the frameworks' loss scalers.

>>> from fpemu.amp import get_policy, get_scaler
>>> get_policy("torch_cuda_fp16").compute.name, type(get_scaler("torch")).__name__
('float16', 'TorchGradScaler')
"""

from fpemu.amp.policy import (
    Policy,
    autocast,
    current_policy,
    describe,
    get_policy,
    preset_names,
    presets_markdown,
)
from fpemu.amp.recipes import RECIPES, Recipe, RoleSpec, get_recipe
from fpemu.amp.scaling import (
    SCALER_ALIASES,
    SCALERS,
    LossScaler,
    StepRecord,
    TorchGradScaler,
    get_scaler,
)

__all__ = [
    "RECIPES",
    "SCALERS",
    "SCALER_ALIASES",
    "LossScaler",
    "Policy",
    "Recipe",
    "RoleSpec",
    "StepRecord",
    "TorchGradScaler",
    "autocast",
    "current_policy",
    "describe",
    "get_policy",
    "get_recipe",
    "get_scaler",
    "preset_names",
    "presets_markdown",
]
