"""Keras's ``LossScaleOptimizer``: Keras 3 rules and the older tf.keras (Keras 2) rules.

Both keep a float32 scale and an integer counter, and decide the update inside one
``apply``. Here they follow the shared protocol (``unscale_`` / ``step`` / ``update``), which
reproduces the same traces; ``apply(optimizer)`` runs the three in Keras's order.

Differences (keras/src/optimizers/loss_scale_optimizer.py vs tf.keras v2.15
keras/mixed_precision/loss_scale_optimizer.py):

- Keras 3 divides grads by the scale; tf.keras multiplies by ``1/scale`` cast to the grad dtype.
- Keras 3 has no floor and no inf guard (2**127 * 2 becomes inf); tf.keras floors at 1 and
  refuses a growth to inf.
- Keras 3 grows when ``step_counter == dynamic_growth_steps - 1``; tf.keras when
  ``counter + 1 >= growth_steps``.
- Skipped steps do not advance Keras 3's ``iterations``; tf.keras advances them anyway.

>>> k = KerasLossScaleOptimizer(dynamic_growth_steps=3)
>>> k.dynamic_scale, k.step_counter
(32768.0, 0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.scaling.kernels import (
    F32,
    F64,
    any_nonfinite,
    loss_array,
    quiet,
    to_f32,
    torch_multiply,
    torch_scalar_op,
)
from fpemu.amp.scaling.protocol import (
    LossScaler,
    OptimizerLike,
    StepRecord,
    check_int,
    check_real,
    require_keys,
)

_KERAS3_NO_STATIC = (
    "LossScaleOptimizer no longer supports `dynamic=False`. Instead, simply set "
    "`loss_scale_factor` directly on the `inner_optimizer`."
)


def _apply(scaler: LossScaler, optimizer: OptimizerLike) -> StepRecord:
    """Keras's single ``apply``: check/unscale, step or skip, update the scale."""
    scaler.step(optimizer)
    record = scaler.update()
    assert record is not None
    return record


class KerasLossScaleOptimizer(LossScaler):
    """Keras 3 ``keras.optimizers.LossScaleOptimizer`` (dynamic only).

    Args:
        initial_scale: initial scale, stored as a float32 variable (default 2**15).
        dynamic_growth_steps: finite steps per doubling (default 2000; not range-checked, as
            in Keras: with 0 the counter never equals -1, so the scale never grows).
        dynamic: must be True; Keras raises ValueError for False.

    Raises:
        ValueError: ``dynamic=False`` (Keras's message).
        TypeError: an argument of the wrong type.
    """

    name = "keras"

    def __init__(
        self,
        *,
        initial_scale: float = 2.0**15,
        dynamic_growth_steps: int = 2000,
        dynamic: bool = True,
    ) -> None:
        super().__init__()
        if not dynamic:
            raise ValueError(_KERAS3_NO_STATIC + f" (got dynamic={dynamic!r})")
        self.initial_scale = check_real("initial_scale", initial_scale)
        self.dynamic_growth_steps = check_int("dynamic_growth_steps", dynamic_growth_steps)
        # build(): dynamic_scale is a float32 variable, step_counter an int variable. fpemu is
        # always "built" (fit() builds the optimizer before the first step).
        self._dynamic_scale = to_f32(self.initial_scale)
        self._step_counter = 0
        self._iterations = 0

    @property
    def dynamic_scale(self) -> float:
        """The current scale (Keras's ``dynamic_scale`` variable)."""
        return float(self._dynamic_scale)

    @property
    def step_counter(self) -> int:
        """Finite steps since the last change of scale (Keras's ``step_counter``)."""
        return self._step_counter

    @property
    def iterations(self) -> int:
        """The inner optimizer's step count: skipped steps do not count."""
        return self._iterations

    def _scale_value(self) -> float:
        return float(self._dynamic_scale)

    def _tracker(self) -> int:
        return self._step_counter

    def _multiply(self, x: Any) -> Any:
        # scale_loss: loss * dynamic_scale (a float32 variable). On the torch backend (where
        # amp.md's Keras runs were observed) this is torch's promotion against a 0-d float32
        # tensor: a 0-d float16 loss gives float32, an n-d one stays float16.
        return torch_multiply(x, self._dynamic_scale)

    def scale_loss(self, loss: Any) -> Any:
        """Keras's name for :meth:`scale`."""
        return self.scale(loss)

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        # check_finite on the scaled grads; only finite grads are divided (ops.divide(g, scale):
        # on the torch backend a true division with torch's promotion, so an n-d float16 grad
        # stays float16); non-finite grads are never unscaled.
        if any_nonfinite(arrays):
            return None, True
        return [torch_scalar_op(g, self._dynamic_scale, np.divide) for g in arrays], False

    def _apply_rule(self, found_inf: bool) -> None:
        # _stateful_handle_(non_)finite_grads: float32 variable arithmetic, no floor, no guard.
        with quiet():
            if found_inf:
                self._step_counter = 0
                self._dynamic_scale = np.float32(self._dynamic_scale / np.float32(2.0))
            elif self._step_counter == self.dynamic_growth_steps - 1:
                self._step_counter = 0
                self._dynamic_scale = np.float32(self._dynamic_scale * np.float32(2.0))
            else:
                self._step_counter += 1

    def _after_step(self, stepped: bool) -> None:
        if stepped:  # the inner optimizer's iterations only move when it applies grads
            self._iterations += 1

    def apply(self, optimizer: OptimizerLike) -> StepRecord:
        """Keras's ``apply``: check, unscale and step (or skip), then update the scale."""
        return _apply(self, optimizer)

    def state_dict(self) -> dict[str, Any]:
        """``initial_scale``, ``dynamic_growth_steps`` (config) and the variables
        ``step_counter``, ``dynamic_scale``, plus the inner ``iterations``."""
        return {
            "initial_scale": self.initial_scale,
            "dynamic_growth_steps": self.dynamic_growth_steps,
            "step_counter": self._step_counter,
            "dynamic_scale": float(self._dynamic_scale),
            "iterations": self._iterations,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` saved.

        Raises:
            ValueError: a key is missing or unexpected.
        """
        require_keys(state_dict, list(self.state_dict()), "KerasLossScaleOptimizer")
        self.initial_scale = check_real("initial_scale", state_dict["initial_scale"])
        self.dynamic_growth_steps = check_int(
            "dynamic_growth_steps", state_dict["dynamic_growth_steps"]
        )
        self._step_counter = check_int("step_counter", state_dict["step_counter"])
        self._dynamic_scale = to_f32(check_real("dynamic_scale", state_dict["dynamic_scale"]))
        self._iterations = check_int("iterations", state_dict["iterations"])


class TfKerasLossScaleOptimizer(LossScaler):
    """tf.keras (Keras 2, tag v2.15) ``tf.keras.mixed_precision.LossScaleOptimizer``.

    Args:
        dynamic: True for the dynamic scale; False for a fixed ``initial_scale`` that never
            changes and never skips a step, even on inf/NaN grads.
        initial_scale: default 2**15 when dynamic; required when not.
        dynamic_growth_steps: default 2000 when dynamic; must be None when not.

    Raises:
        TypeError: ``dynamic`` is not a bool (tf.keras's message), or a wrong argument type.
        ValueError: the static-mode argument rules above (tf.keras's messages).
    """

    name = "tf_keras"

    def __init__(
        self,
        *,
        dynamic: bool = True,
        initial_scale: float | None = None,
        dynamic_growth_steps: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(dynamic, bool):
            raise TypeError(
                '"dynamic" argument to LossScaleOptimizer.__init__ must be a bool, but got: '
                f"{dynamic!r}"
            )
        self.dynamic = dynamic
        if dynamic:
            self.initial_scale = check_real(
                "initial_scale", 2**15 if initial_scale is None else initial_scale
            )
            self.dynamic_growth_steps: int | None = check_int(
                "dynamic_growth_steps",
                2000 if dynamic_growth_steps is None else dynamic_growth_steps,
            )
        else:
            if initial_scale is None:
                raise ValueError('"initial_scale" must be specified if "dynamic" is False')
            if dynamic_growth_steps is not None:
                raise ValueError(
                    '"dynamic_growth_steps" must be None if "dynamic" is False, but got: '
                    f"{dynamic_growth_steps}"
                )
            self.initial_scale = check_real("initial_scale", initial_scale)
            self.dynamic_growth_steps = None
            self._skips_nonfinite = False  # should_apply_grads = True for a fixed scale
        # _DynamicLossScaleState: current_loss_scale is a float32 variable, good_steps int64.
        self._current = to_f32(self.initial_scale)
        self._good_steps = 0
        self._iterations = 0

    @property
    def loss_scale(self) -> float:
        """The current scale (tf.keras's ``loss_scale``)."""
        return float(self._current)

    @property
    def dynamic_counter(self) -> int | None:
        """tf.keras's ``dynamic_counter`` (``good_steps``); None when not dynamic."""
        return self._good_steps if self.dynamic else None

    @property
    def iterations(self) -> int:
        """Steps applied or skipped: tf.keras increments ``iterations`` on skipped steps too."""
        return self._iterations

    def _scale_value(self) -> float:
        return float(self._current)

    def _tracker(self) -> int:
        return self._good_steps

    def _multiply(self, x: Any) -> Any:
        # get_scaled_loss: loss * tf.cast(loss_scale, loss.dtype): the float32 scale is rounded
        # to the loss dtype first (2**16 becomes inf in float16), then one product in that dtype.
        a = loss_array(x)
        if a.dtype.kind in "biu":
            a = a.astype(F32)
        with quiet():
            s = self._current.astype(a.dtype)
            if a.dtype in (F32, F64):
                return np.asarray(a * s)
            return np.asarray((a.astype(F32) * s.astype(F32)).astype(a.dtype))

    def get_scaled_loss(self, loss: Any) -> Any:
        """tf.keras's name for :meth:`scale`."""
        return self.scale(loss)

    def get_unscaled_gradients(self, grads: list[np.ndarray | None]) -> list[np.ndarray | None]:
        """A new list of each grad times ``1/scale`` (None kept); no state changes.

        >>> TfKerasLossScaleOptimizer(initial_scale=4.0).get_unscaled_gradients(
        ...     [np.array([2.0], dtype=np.float32), None])[0].tolist()
        [0.5]
        """
        present = [g for g in grads if g is not None]
        unscaled = iter(self._unscale_values(present))
        return [None if g is None else next(unscaled) for g in grads]

    def _unscale_values(self, arrays: list[np.ndarray]) -> list[np.ndarray]:
        # 1.0 / loss_scale in float32, then _multiply_gradient: g * tf.cast(r, g.dtype).
        with quiet():
            r = np.float32(np.float32(1.0) / self._current)
            out = []
            for g in arrays:
                rg = r.astype(g.dtype)
                if g.dtype in (F32, F64):
                    out.append(np.asarray(g * rg))
                else:  # the exact 16-bit product fits float32: one rounding to g's dtype
                    out.append((g.astype(F32) * rg.astype(F32)).astype(g.dtype))
        return out

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        # _DynamicLossScaleState.update checks the UNSCALED grads it is given.
        out = self._unscale_values(arrays)
        return out, any_nonfinite(out)

    def _apply_rule(self, found_inf: bool) -> None:
        if not self.dynamic:
            return
        assert self.dynamic_growth_steps is not None
        with quiet():
            if found_inf:  # update_if_not_finite_grads: max(scale / 2, 1)
                self._good_steps = 0
                self._current = np.maximum(self._current / np.float32(2.0), np.float32(1.0))
            elif self._good_steps + 1 >= self.dynamic_growth_steps:  # incr_loss_scale
                grown = np.float32(self._current * np.float32(2.0))
                if np.isfinite(grown):  # _assign_if_finite
                    self._current = grown
                self._good_steps = 0
            else:
                self._good_steps += 1

    def _after_step(self, stepped: bool) -> None:
        self._iterations += 1  # do_not_apply_fn increments iterations on a skipped step

    def apply_gradients(self, optimizer: OptimizerLike) -> StepRecord:
        """tf.keras's ``apply_gradients`` on already-unscaled grads: one full iteration."""
        return _apply(self, optimizer)

    def state_dict(self) -> dict[str, Any]:
        """Config (``dynamic``, ``initial_scale``, ``dynamic_growth_steps``), the variables
        ``current_loss_scale`` and ``good_steps`` (tf.keras's names), and ``iterations``."""
        return {
            "dynamic": self.dynamic,
            "initial_scale": self.initial_scale,
            "dynamic_growth_steps": self.dynamic_growth_steps,
            "current_loss_scale": float(self._current),
            "good_steps": self._good_steps,
            "iterations": self._iterations,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` saved.

        Raises:
            ValueError: a key is missing or unexpected, or the mode differs.
        """
        require_keys(state_dict, list(self.state_dict()), "TfKerasLossScaleOptimizer")
        if state_dict["dynamic"] != self.dynamic:
            raise ValueError(
                f"state_dict has dynamic={state_dict['dynamic']!r}, this optimizer "
                f"dynamic={self.dynamic!r}"
            )
        self.initial_scale = check_real("initial_scale", state_dict["initial_scale"])
        steps = state_dict["dynamic_growth_steps"]
        self.dynamic_growth_steps = (
            None if steps is None else check_int("dynamic_growth_steps", steps)
        )
        self._current = to_f32(check_real("current_loss_scale", state_dict["current_loss_scale"]))
        self._good_steps = check_int("good_steps", state_dict["good_steps"])
        self._iterations = check_int("iterations", state_dict["iterations"])
