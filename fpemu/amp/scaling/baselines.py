"""Baseline scalers: a fixed scale, no scaling, and an "always double" strawman.

All three use torch's float32 arithmetic (float32 scale, loss times a 0-d float32 scale,
float64-reciprocal-rounded-to-float32 unscale) so they differ from the torch scaler only in
their update rule.

>>> StaticScaler(scale=1024.0).get_scale()
1024.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.scaling.kernels import (
    any_nonfinite,
    reciprocal_f32,
    to_f32,
    torch_multiply,
    unscale_by_reciprocal,
)
from fpemu.amp.scaling.protocol import LossScaler, check_real, require_keys


def _positive_finite(name: str, value: Any) -> np.float32:
    v = check_real(name, value)
    s = to_f32(v)
    if not (np.isfinite(s) and s > 0):
        raise ValueError(f"{name} must be a positive finite float32 value, got {value!r}")
    return s


class _Float32Scaler(LossScaler):
    """Shared torch-style arithmetic around a float32 scale."""

    def __init__(self, scale: np.float32) -> None:
        super().__init__()
        self._scale = scale

    def _scale_value(self) -> float:
        return float(self._scale)

    def _multiply(self, x: Any) -> Any:
        return torch_multiply(x, self._scale)

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        found = any_nonfinite(arrays)
        return unscale_by_reciprocal(arrays, reciprocal_f32(self._scale)), found


class StaticScaler(_Float32Scaler):
    """A fixed loss scale (static loss scaling, as apex and tf.keras do with a number).

    Args:
        scale: the scale, a positive finite float32 value (default 2**15, tf.keras's initial
            scale).
        skip_nonfinite: skip the optimizer step when a grad is inf/NaN. Default False, like
            apex's and tf.keras's fixed scales, which apply every step.

    Raises:
        ValueError: ``scale`` is not positive and finite in float32.
    """

    name = "static"

    def __init__(self, scale: float = 2.0**15, *, skip_nonfinite: bool = False) -> None:
        super().__init__(_positive_finite("scale", scale))
        if not isinstance(skip_nonfinite, bool):
            raise TypeError(f"skip_nonfinite must be a bool, got {skip_nonfinite!r}")
        self._skips_nonfinite = skip_nonfinite

    def _apply_rule(self, found_inf: bool) -> None:
        """The scale never changes."""

    def state_dict(self) -> dict[str, Any]:
        """``{"scale": float}``."""
        return {"scale": float(self._scale)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load ``{"scale": float}``."""
        require_keys(state_dict, ["scale"], "StaticScaler")
        self._scale = _positive_finite("scale", state_dict["scale"])


class NaiveDoublingScaler(_Float32Scaler):
    """A strawman: double the scale after every update, never back off, never skip.

    Not the mistake people make (that is the tutorial scaler of
    :mod:`fpemu.amp.scaling.mistakes`, which does halve on overflow); kept as the smallest
    scaler that has no overflow handling at all.

    Why it is wrong: loss scaling only works because an overflow is detected and answered by
    skipping the step and shrinking the scale. This scaler does neither. Once the scale passes
    the gradients' headroom (every step it doubles, so it always does), each step overflows and
    the inf/NaN gradients are applied to the weights. In float32 the scale itself becomes inf
    after 112 doublings from 2**16 (2**128 overflows), after which every scaled loss is inf.

    >>> s = NaiveDoublingScaler(init_scale=2.0**126)
    >>> _ = s.scale(1.0); _ = s.unscale_([]); s.update().scale_after
    1.7014118346046923e+38
    """

    name = "naive"

    def __init__(self, *, init_scale: float = 2.0**16) -> None:
        super().__init__(_positive_finite("init_scale", init_scale))
        self._skips_nonfinite = False
        self._doublings = 0

    def _tracker(self) -> int:
        return self._doublings

    def _apply_rule(self, found_inf: bool) -> None:
        self._scale = to_f32(float(self._scale) * 2.0)  # found_inf deliberately ignored
        self._doublings += 1

    def state_dict(self) -> dict[str, Any]:
        """``{"scale": float, "doublings": int}``."""
        return {"scale": float(self._scale), "doublings": self._doublings}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` saved."""
        require_keys(state_dict, ["scale", "doublings"], "NaiveDoublingScaler")
        self._scale = to_f32(check_real("scale", state_dict["scale"]))
        self._doublings = int(state_dict["doublings"])


class NoScaler(LossScaler):
    """No loss scaling: the loss and grads are untouched, every step runs.

    Grads are still checked, so its records say when inf/NaN reached the optimizer.

    >>> NoScaler().scale(3.5)
    3.5
    """

    name = "none"

    def __init__(self) -> None:
        super().__init__()
        self._skips_nonfinite = False

    def _scale_value(self) -> float:
        return 1.0

    def scale(self, outputs: Any) -> Any:
        """Return ``outputs`` unchanged."""
        return outputs

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        return None, any_nonfinite(arrays)

    def _apply_rule(self, found_inf: bool) -> None:
        """Nothing to update."""

    def state_dict(self) -> dict[str, Any]:
        """An empty dict."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Accept only an empty dict."""
        require_keys(state_dict, [], "NoScaler")
