"""``torch.amp.GradScaler`` (PyTorch 2.13) in NumPy, and the hysteresis variant built on it.

State mirrors torch: a float32 scale and an int32 growth tracker, created lazily by the first
``scale()``; every rule below cites the torch source it copies
(torch/amp/grad_scaler.py, aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp).

>>> s = TorchGradScaler(init_scale=3.0)
>>> s.get_scale()                         # before scale(): the init value as given
3.0
>>> float(s.scale(1.0))                   # a Python float loss is a float32 tensor in torch
3.0
>>> s.state_dict()["_growth_tracker"]
0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.scaling.kernels import (
    F16,
    any_nonfinite,
    reciprocal_f32,
    to_f32,
    to_f32_checked,
    torch_multiply,
    unscale_by_reciprocal,
)
from fpemu.amp.scaling.protocol import (
    GradSlot,
    LossScaler,
    check_int,
    check_real,
)

_FIX = (
    "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the "
    "iteration."
)
_NEW_SCALE_REASON = (
    "new_scale should be a float or a 1-element torch.cuda.FloatTensor or torch.FloatTensor "
    "with requires_grad=False."
)
_EMPTY_STATE = (
    "The source state dict is empty, possibly because it was saved from a disabled instance "
    "of GradScaler."
)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class ScalerArgumentError(ValueError, AssertionError):
    """A constructor argument torch rejects: torch raises AssertionError, fpemu's contract
    wants ValueError; this is both, and its message starts with torch's own."""


def _wrap_int32(v: int) -> int:
    """C++ ``int`` arithmetic: wrap to 32-bit two's complement (the tracker is an int32)."""
    return (v - _INT32_MIN) % 2**32 + _INT32_MIN


def _checked_int32(v: Any) -> int:
    """``torch.full((), v, dtype=int32)``: values outside int32 are refused."""
    iv = int(v)
    if not _INT32_MIN <= iv <= _INT32_MAX:
        raise RuntimeError("value cannot be converted to type int32_t without overflow")
    return iv


class TorchGradScaler(LossScaler):
    """``torch.amp.GradScaler``: grow after ``growth_interval`` finite updates, back off on inf.

    Args:
        device: accepted for signature parity and ignored (fpemu has no devices; torch would
            disable a "cuda" scaler on a machine without CUDA).
        init_scale: initial scale (rounded to float32 by the first ``scale()``; torch raises
            RuntimeError there if it overflows float32).
        growth_factor: must be > 1.0 when enabled.
        backoff_factor: must be < 1.0 when enabled.
        growth_interval: finite updates needed for one growth (not range-checked, like torch:
            0 or less means never grow).
        enabled: False gives torch's disabled scaler (identity scale, plain steps, no state).

    Raises:
        ScalerArgumentError: (ValueError and AssertionError) a bad growth/backoff factor.
        TypeError: an argument of the wrong type.
    """

    name = "torch"
    empty_is_finite = False  # torch: "No inf checks were recorded for this optimizer."

    def __init__(
        self,
        *,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(device, str):
            raise TypeError(f"device must be a str, got {device!r}")
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {enabled!r}")
        self._device = device
        self._enabled = enabled
        self._init_scale = check_real("init_scale", init_scale)
        self._growth_factor = check_real("growth_factor", growth_factor)
        self._backoff_factor = check_real("backoff_factor", backoff_factor)
        self._growth_interval = check_int("growth_interval", growth_interval)
        # grad_scaler.py __init__: explicit raises in 2.13 (NaN passes both comparisons).
        if enabled and self._growth_factor <= 1.0:
            raise ScalerArgumentError(
                f"The growth factor must be > 1.0. (growth_factor={growth_factor!r}; "
                "accepted: a float > 1.0)"
            )
        if enabled and self._backoff_factor >= 1.0:
            raise ScalerArgumentError(
                f"The backoff factor must be < 1.0. (backoff_factor={backoff_factor!r}; "
                "accepted: a float < 1.0)"
            )
        self._init_growth_tracker = 0
        # Lazily created by the first scale(), like torch's _scale/_growth_tracker tensors.
        self._scale: np.float32 | None = None
        self._growth_tracker: int | None = None

    # ---- torch's lazy state --------------------------------------------------------------
    def _before_scale(self) -> None:
        # grad_scaler.py _lazy_init_scale_growth_tracker: torch.full(..., dtype=float32/int32)
        if self._scale is None:
            self._scale = to_f32_checked(self._init_scale)
            self._growth_tracker = _checked_int32(self._init_growth_tracker)

    def _check_ready(self, funcname: str) -> None:
        # grad_scaler.py _check_scale_growth_tracker
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  " + _FIX)

    def _scale_value(self) -> float:
        return self._init_scale if self._scale is None else float(self._scale)

    def _scale32(self) -> np.float32:
        assert self._scale is not None
        return self._scale

    def _tracker(self) -> int:
        return self._init_growth_tracker if self._growth_tracker is None else self._growth_tracker

    # ---- arithmetic ------------------------------------------------------------------------
    def _multiply(self, x: Any) -> Any:
        # grad_scaler.py scale(): outputs * self._scale (0-d float32 tensor), torch promotion.
        return torch_multiply(x, self._scale32())

    def _validate_grads(self, slots: list[GradSlot]) -> None:
        # grad_scaler.py _unscale_grads_: checked for every param before any kernel runs.
        for slot in slots:
            if slot.array.dtype == F16:
                raise ValueError("Attempting to unscale FP16 gradients.")

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        # unscale_: inv = scale.double().reciprocal().float(); the kernel checks each SCALED
        # value for inf/NaN before multiplying, so 0 * inf = NaN at scale 0 is not flagged.
        found = any_nonfinite(arrays)
        return unscale_by_reciprocal(arrays, reciprocal_f32(self._scale32())), found

    def _apply_rule(self, found_inf: bool) -> None:
        # AmpGradScalerKernels.cpp _amp_update_scale_cpu_kernel (same rule as AmpKernels.cu):
        # scale (float) * factor (double) is a double product stored back as float.
        scale, tracker = self._scale32(), self._tracker()
        if found_inf:
            self._scale = to_f32(float(scale) * self._backoff_factor)
            self._growth_tracker = 0
            return
        successful = _wrap_int32(tracker + 1)
        if successful == self._growth_interval:
            grown = to_f32(float(scale) * self._growth_factor)
            if np.isfinite(grown):  # PR #98876: never grow past float32 to inf
                self._scale = grown
            self._growth_tracker = 0
        else:
            self._growth_tracker = successful

    def _set_scale(self, new_scale: Any) -> None:
        # grad_scaler.py update(new_scale): a float is fill_()ed (checked conversion); a tensor
        # must have one element and is copy_()ed (plain cast). The tracker is left alone.
        if isinstance(new_scale, float):
            self._scale = to_f32_checked(new_scale)
            return
        if not isinstance(new_scale, np.ndarray | np.generic):
            raise TypeError(
                "new_scale must be a float or a 0-d NumPy array, got "
                f"{type(new_scale).__name__} (torch 2.13 fails with AttributeError here)"
            )
        arr = np.asarray(new_scale)
        if arr.size != 1:
            raise AssertionError(_NEW_SCALE_REASON)
        if arr.ndim != 0:
            raise RuntimeError(
                f"output with shape [] doesn't match the broadcast shape {list(arr.shape)}"
            )
        self._scale = to_f32(float(arr))

    # ---- torch API ------------------------------------------------------------------------
    def is_enabled(self) -> bool:
        """Whether this scaler is enabled (``enabled=`` of the constructor)."""
        return self._enabled

    def get_scale(self) -> float:
        """The current scale; ``init_scale`` before the first ``scale()``; 1.0 when disabled."""
        return self._scale_value() if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        """The growth factor."""
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        """Set the growth factor (unchecked, as in torch)."""
        self._growth_factor = check_real("new_factor", new_factor)

    def get_backoff_factor(self) -> float:
        """The backoff factor."""
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        """Set the backoff factor (unchecked, as in torch)."""
        self._backoff_factor = check_real("new_factor", new_factor)

    def get_growth_interval(self) -> int:
        """The growth interval."""
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        """Set the growth interval (unchecked, as in torch)."""
        self._growth_interval = check_int("new_interval", new_interval)

    def state_dict(self) -> dict[str, Any]:
        """torch's 5 keys (``{}`` when disabled); call it after ``update()``."""
        if not self._enabled:
            return {}
        return {
            "scale": self.get_scale(),
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._tracker(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load torch's 5 keys (a no-op when disabled).

        Raises:
            RuntimeError: ``state_dict`` is empty (saved from a disabled scaler).
            KeyError: a key is missing.
        """
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(_EMPTY_STATE)
        self._init_scale = check_real("scale", state_dict["scale"])
        if self._scale is not None:
            self._scale = to_f32_checked(self._init_scale)
        self._growth_factor = check_real("growth_factor", state_dict["growth_factor"])
        self._backoff_factor = check_real("backoff_factor", state_dict["backoff_factor"])
        self._growth_interval = check_int("growth_interval", state_dict["growth_interval"])
        self._init_growth_tracker = check_int("_growth_tracker", state_dict["_growth_tracker"])
        if self._growth_tracker is not None:
            self._growth_tracker = _checked_int32(self._init_growth_tracker)


class HysteresisScaler(TorchGradScaler):
    """torch's scaler with hysteresis: ``hysteresis - 1`` consecutive infs are tolerated
    before a backoff (NVIDIA/apex csrc/update_scale_hysteresis.cu, used by Megatron/NeMo).

    Every inf step is still skipped; only the backoff waits. The hysteresis tracker starts at
    ``hysteresis``, drops by one per inf update (and keeps dropping below zero), and is reset to
    ``hysteresis`` by any finite update. The defaults other than ``hysteresis`` are torch's;
    ``hysteresis=2`` is fpemu's default (Megatron's), not a value amp.md records.

    >>> s = HysteresisScaler(hysteresis=2)
    >>> s.state_dict()["_hysteresis_tracker"]
    2
    """

    name = "hysteresis"

    def __init__(
        self,
        *,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        hysteresis: int = 2,
    ) -> None:
        super().__init__(
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
        )
        self._hysteresis_value = check_int("hysteresis", hysteresis)
        self._hysteresis_tracker = self._hysteresis_value

    def _hysteresis(self) -> int | None:
        return self._hysteresis_tracker

    def _apply_rule(self, found_inf: bool) -> None:
        # update_scale_hysteresis.cu: on inf, decrement; while still > 0 only reset the tracker.
        if found_inf:
            self._hysteresis_tracker = _wrap_int32(self._hysteresis_tracker - 1)
            if self._hysteresis_tracker > 0:
                self._growth_tracker = 0
                return
        super()._apply_rule(found_inf)
        if not found_inf:
            self._hysteresis_tracker = self._hysteresis_value

    def state_dict(self) -> dict[str, Any]:
        """torch's 5 keys plus ``hysteresis`` and ``_hysteresis_tracker``."""
        return {
            **super().state_dict(),
            "hysteresis": self._hysteresis_value,
            "_hysteresis_tracker": self._hysteresis_tracker,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` saved."""
        super().load_state_dict(state_dict)
        self._hysteresis_value = check_int("hysteresis", state_dict["hysteresis"])
        self._hysteresis_tracker = check_int(
            "_hysteresis_tracker", state_dict["_hysteresis_tracker"]
        )
