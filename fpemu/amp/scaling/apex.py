"""NVIDIA Apex ``apex.amp`` ``LossScaler`` (apex/amp/scaler.py, removed from Apex in PR #1896).

The scale is a Python float (double), so it never rounds to float32 and can fall to about
1e-308 and then to 0, where apex's own ``1./scale`` raises ZeroDivisionError. Apex updates the
scale before ``optimizer.step()``; this class updates it in ``update()``, which gives the same
trace because the step does not read the scale.

>>> a = ApexDynamicScaler(init_scale=2.0**30)
>>> a.get_scale()                          # min(max_loss_scale, init_scale)
16777216.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.scaling.kernels import F32, F64, any_nonfinite, loss_array, quiet, to_f32
from fpemu.amp.scaling.protocol import (
    GradSlot,
    LossScaler,
    check_int,
    check_real,
    require_keys,
)


class ApexDynamicScaler(LossScaler):
    """apex.amp's loss scaler (``amp.initialize(..., loss_scale=...)``).

    Args:
        loss_scale: "dynamic", or a number for a fixed scale that never skips a step.
        init_scale: initial dynamic scale; the start is ``min(max_loss_scale, init_scale)``.
        scale_factor: accepted and ignored, as in apex (its update hardcodes /2 and *2).
        scale_window: finite updates per doubling (``_scale_seq_len``).
        min_loss_scale: optional floor for backoffs (a falsy value such as 0 means none,
            because apex tests ``if(self._min_loss_scale)``).
        max_loss_scale: cap for growth (default 2**24).

    Raises:
        ValueError: ``loss_scale`` is neither "dynamic" nor a number.
        TypeError: an argument of the wrong type.
    """

    name = "apex"

    def __init__(
        self,
        *,
        loss_scale: str | float = "dynamic",
        init_scale: float = 2.0**16,
        scale_factor: float = 2.0,
        scale_window: int = 2000,
        min_loss_scale: float | None = None,
        max_loss_scale: float = 2.0**24,
    ) -> None:
        super().__init__()
        if isinstance(loss_scale, str) and loss_scale != "dynamic":
            raise ValueError(f'loss_scale must be "dynamic" or a number, got {loss_scale!r}')
        self.dynamic = loss_scale == "dynamic"
        init = check_real("init_scale", init_scale)
        self.scale_factor = check_real("scale_factor", scale_factor)
        self._scale_seq_len = check_int("scale_window", scale_window)
        self._min_loss_scale = (
            None if min_loss_scale is None else check_real("min_loss_scale", min_loss_scale)
        )
        self._max_loss_scale = check_real("max_loss_scale", max_loss_scale)
        self._loss_scale = (
            min(self._max_loss_scale, init)
            if self.dynamic
            else check_real("loss_scale", loss_scale)
        )
        self._unskipped = 0
        self._skips_nonfinite = self.dynamic  # update_scale: skip only "if overflow and dynamic"

    def loss_scale(self) -> float:
        """apex's ``loss_scale()``: the current scale (a double)."""
        return self._loss_scale

    def _scale_value(self) -> float:
        return self._loss_scale

    def _tracker(self) -> int:
        return self._unskipped

    def _multiply(self, x: Any) -> Any:
        # handle.py scale_loss: loss.float() * loss_scale; torch rounds the Python scalar to the
        # float32 opmath of a float32 tensor, so the product is one float32 multiply.
        a = loss_array(x)
        with quiet():
            return np.asarray(a.astype(F32) * to_f32(self._loss_scale))

    def _validate_grads(self, slots: list[GradSlot]) -> None:
        # csrc/multi_tensor_scale_kernel.cu dispatches float, half and bfloat16 only.
        for slot in slots:
            if slot.array.dtype == F64:
                raise TypeError(
                    f"gradient {slot.label} is float64; apex's multi_tensor_scale accepts "
                    "float16, bfloat16 and float32"
                )

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        # scaler.py unscale: multi_tensor_scale(..., 1./scale): the double reciprocal becomes
        # the kernel's float argument; out = float(in) * scale into fp32 master grads, and the
        # overflow flag checks the INPUT values (finite = finite && isfinite(r_in[ii])).
        inv = to_f32(1.0 / self._loss_scale)  # ZeroDivisionError at scale 0, as in apex
        found = any_nonfinite(arrays)
        with quiet():
            return [np.asarray(g.astype(F32) * inv) for g in arrays], found

    def _apply_rule(self, found_inf: bool) -> None:
        # scaler.py update_scale, line for line (Python float arithmetic).
        if found_inf and self.dynamic:
            if self._min_loss_scale:
                self._loss_scale = max(self._min_loss_scale, self._loss_scale / 2.0)
            else:
                self._loss_scale = self._loss_scale / 2.0
            self._unskipped = 0
        else:
            self._unskipped += 1
        if self._unskipped == self._scale_seq_len and self.dynamic:
            self._loss_scale = min(self._max_loss_scale, self._loss_scale * 2.0)
            self._unskipped = 0

    def state_dict(self) -> dict[str, Any]:
        """apex ``amp.state_dict()``'s per-scaler entry: ``loss_scale`` and ``unskipped``."""
        return {"loss_scale": self._loss_scale, "unskipped": self._unskipped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` saved (apex ``amp.load_state_dict`` per scaler).

        Raises:
            ValueError: a key is missing or unexpected.
        """
        require_keys(state_dict, ["loss_scale", "unskipped"], "ApexDynamicScaler")
        self._loss_scale = check_real("loss_scale", state_dict["loss_scale"])
        self._unskipped = check_int("unskipped", state_dict["unskipped"])
