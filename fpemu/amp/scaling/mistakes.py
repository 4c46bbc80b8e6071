"""The loss-scaling mistakes people actually write, emulated exactly (dtypes included).

**The tutorial scaler** circulates in blog posts and course notebooks. Literally::

    class LossScaler:
        def __init__(self, init_scale=2.0**16):
            self.scale = init_scale                  # a Python float (double)
        def scale_loss(self, loss):
            return loss * self.scale                 # the scalar takes the loss's dtype
        def unscale_gradients(self, model):
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.div_(self.scale)          # in place, in the gradient's dtype
        def update_scale(self, overflow):
            self.scale = self.scale / 2 if overflow else self.scale * 2

    def check_overflow(model):
        return any(not torch.isfinite(p.grad).all() for p in model.parameters()
                   if p.grad is not None)

    scaler.scale_loss(loss).backward()
    scaler.unscale_gradients(model)
    optimizer.step()                                 # never skipped ...
    scaler.update_scale(check_overflow(model))       # ... and checked after the update

Two faults: the overflow is detected only after ``optimizer.step()`` already applied the inf/NaN
gradients (so the weights are inf/NaN from its first overflow on), and the scale doubles after
*every* clean step. :class:`TutorialScaler` is that code; :class:`TutorialSkippingScaler` is the
usual repair (``if not check_overflow(model): optimizer.step()`` before ``update_scale``),
which saves the weights but still grows every clean step, so once the scale reaches the
gradients' headroom every other step overflows and is skipped.

**The fresh GradScaler**: a step function that builds ``torch.cuda.amp.GradScaler()`` on every
call. Each call scales by the initial 2**16, skips an overflowing step and halves (or counts)
in a scaler that is then thrown away: the scale never adapts. :class:`FreshGradScaler` is
``torch.amp.GradScaler`` whose state is reset after every ``update()``.

>>> import numpy as np
>>> s = TutorialScaler()
>>> float(s.scale(np.float32(1.5)))
98304.0
>>> grads = [np.array([65536.0, 131072.0], dtype=np.float32)]
>>> s.unscale_(grads); grads[0].tolist()
False
[1.0, 2.0]
>>> s.update().scale_after                     # no overflow: double, every time
131072.0
>>> f = FreshGradScaler()
>>> _ = f.scale(np.float32(1.0)); _ = f.unscale_([np.array([np.inf], np.float32)])
>>> r = f.update(); (r.found_inf, r.scale_before, r.scale_after)
(True, 65536.0, 65536.0)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.amp.scaling.kernels import (
    F32,
    F64,
    any_nonfinite,
    loss_array,
    quiet,
    to_f32,
)
from fpemu.amp.scaling.protocol import (
    LossScaler,
    OptimizerLike,
    check_real,
    collect_grads,
    require_keys,
)
from fpemu.amp.scaling.pytorch import TorchGradScaler


def _python_scalar_op(x: Any, scale: float, divide: bool = False) -> np.ndarray:
    """``x * scale`` (or ``x / scale``) with a Python float ``scale``, as torch computes it.

    A Python number is a "wrapped number" in torch: it never changes the tensor's dtype.
    float32 tensors use ``float32(scale)``; float64 tensors the double itself; float16 and
    bfloat16 tensors compute in float32 ("opmath") with ``float32(scale)`` and round once to
    their dtype (aten/src/ATen/native/cpu/BinaryOpsKernel.cpp, ``div_true_kernel`` reads the
    scalar as opmath). A Python float loss is a float32 tensor; integers promote to float32.
    """
    a = loss_array(x)
    if a.dtype.kind in "biu":
        a = a.astype(F32)
    op = np.divide if divide else np.multiply
    with quiet():
        if a.dtype == F64:
            return np.asarray(op(a, np.float64(scale)))
        return np.asarray(op(a.astype(F32), to_f32(scale)).astype(a.dtype))


class TutorialScaler(LossScaler):
    """The tutorial scaler: divide grads in place, step always, check afterwards, halve/double.

    The scale is a Python float (double): halving and doubling are exact and it never reaches
    inf in any realistic run, but each use converts it to the tensor's dtype (float32 for a
    float32 loss or gradient, where a scale beyond 2**128 becomes inf).

    Driven through fpemu's scaler protocol: ``scale`` is ``scale_loss``, ``unscale_`` is
    ``unscale_gradients`` (no check: it returns False), ``step`` calls ``optimizer.step()`` and
    then ``check_overflow`` on the (already applied) gradients, ``update`` is
    ``update_scale(overflow)``. The :class:`~fpemu.amp.scaling.protocol.StepRecord` says
    ``skipped=False`` on every step and ``found_inf`` is the post-step check.

    Args:
        init_scale: the initial scale (default 2**16), a positive finite number.

    Raises:
        ValueError: ``init_scale`` is not positive and finite.
    """

    name = "tutorial"
    #: Whether the step is skipped when the (pre-step) check finds inf/NaN.
    skip_on_overflow = False

    def __init__(self, *, init_scale: float = 2.0**16) -> None:
        super().__init__()
        v = check_real("init_scale", init_scale)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"init_scale must be a positive finite number, got {init_scale!r}")
        self._scale = v
        self._skips_nonfinite = self.skip_on_overflow
        self._doublings = 0  # clean updates in a row (the tutorial keeps no counter: a trace aid)

    def _scale_value(self) -> float:
        return self._scale

    def scale(self, outputs: Any) -> Any:
        """``loss * self.scale`` with a Python float: the loss keeps its dtype.

        A tensor-like loss (fpemu's autograd Tensor) is multiplied by the Python float, which
        takes the tensor's format as in torch (exact for a float32 loss; a float16 loss Tensor
        rounds the constant to float16 first, where torch multiplies in float32).
        """
        if isinstance(outputs, np.ndarray | np.generic | int | float):
            return _python_scalar_op(outputs, self._scale)
        if isinstance(outputs, list | tuple):
            return type(outputs)(self.scale(v) for v in outputs)
        return outputs * self._scale

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        # p.grad.div_(self.scale): a true division in the gradient's dtype, no check here.
        new = [_python_scalar_op(a, self._scale, divide=True) for a in arrays]
        found = any_nonfinite(new) if self.skip_on_overflow else False
        return new, found

    def step(self, optimizer: OptimizerLike, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless done), ``optimizer.step()``, then ``check_overflow`` the gradients.

        :class:`TutorialScaler` steps unconditionally; the skipping variant checks before the
        step and skips it on inf/NaN.
        """
        ret = super().step(optimizer, *args, **kwargs)
        if not self.skip_on_overflow:
            # check_overflow(model) after optimizer.step(): the grads were already applied
            st = self._state(optimizer)
            st.found_inf = any_nonfinite([s.array for s in collect_grads(optimizer)])
        return ret

    def _apply_rule(self, found_inf: bool) -> None:
        # update_scale(overflow): halve on overflow, double otherwise (Python float arithmetic)
        if found_inf:
            self._scale = self._scale / 2
            self._doublings = 0
        else:
            self._scale = self._scale * 2
            self._doublings += 1

    def _tracker(self) -> int:
        return self._doublings

    def state_dict(self) -> dict[str, Any]:
        """``{"scale": float, "doublings": int}``."""
        return {"scale": self._scale, "doublings": self._doublings}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what :meth:`state_dict` saved."""
        require_keys(state_dict, ["scale", "doublings"], type(self).__name__)
        self._scale = check_real("scale", state_dict["scale"])
        self._doublings = int(state_dict["doublings"])


class TutorialSkippingScaler(TutorialScaler):
    """The tutorial scaler with skipping added: ``if not check_overflow(model): step()``.

    The weights stay finite, but the scale still doubles after every clean step: once it
    reaches the gradients' headroom, every other step overflows (double, overflow, halve,
    double, ...), and half of the steps are lost.

    >>> s = TutorialSkippingScaler(init_scale=4.0)
    >>> _ = s.scale(1.0); s.unscale_([np.array([np.inf], np.float32)])
    True
    >>> s.update().scale_after
    2.0
    """

    name = "tutorial_skip"
    skip_on_overflow = True


class FreshGradScaler(TorchGradScaler):
    """``torch.cuda.amp.GradScaler()`` built anew inside the step function, every step.

    Within one step it is torch's scaler (float32 scale, inf check on the scaled gradients,
    skip on inf/NaN); its update is then lost with the object, so every step starts again
    from ``init_scale`` with growth tracker 0. The record's ``scale_after`` is the scale the
    next step uses (always ``init_scale``) and ``growth_tracker`` the carried tracker (always 0).

    On a machine without CUDA the literal ``torch.cuda.amp.GradScaler()`` disables itself
    (no scaling at all); this emulates the CUDA machine the code was written for.
    """

    name = "fresh_gradscaler"

    def __init__(self, *, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000) -> None:  # fmt: skip
        super().__init__(
            init_scale=init_scale,
            growth_factor=growth_factor,
            backoff_factor=backoff_factor,
            growth_interval=growth_interval,
        )
        self._fresh = (init_scale, growth_factor, backoff_factor, growth_interval)

    def _apply_rule(self, found_inf: bool) -> None:
        super()._apply_rule(found_inf)  # what this step's scaler does before it is discarded
        # ... and the next call builds a new one: lazily created state, tracker 0
        self._scale, self._growth_tracker = None, None
        init, growth, backoff, interval = self._fresh
        self._init_scale, self._init_growth_tracker = float(init), 0
        self._growth_factor, self._backoff_factor = float(growth), float(backoff)
        self._growth_interval = int(interval)
