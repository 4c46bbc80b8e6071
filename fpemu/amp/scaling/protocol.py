"""The protocol every loss scaler follows, the per-step record, and the gradient containers.

All scalers, whatever framework they mirror, are driven the same way (torch's shape)::

    scaled = scaler.scale(loss)          # loss * scale, in the framework's dtype rules
    ...backward on `scaled` fills p.grad...
    scaler.unscale_(optimizer)           # optional: check inf/NaN, unscale grads (once!)
    scaler.step(optimizer)               # unscale_ if not done, then step or skip
    record = scaler.update()             # framework's scale rule; returns a StepRecord

``optimizer`` is any object with ``.params`` (objects with a ``.grad`` NumPy array or None) and
``.step()`` (:class:`OptimizerLike`). ``unscale_`` also takes a list or a dict of gradient
arrays, which it updates in place. Ordering mistakes raise torch's errors and messages for
every scaler (torch is the only framework whose API splits these calls).

>>> import numpy as np
>>> from fpemu.amp.scaling import TorchGradScaler
>>> class P:
...     def __init__(self, g): self.grad = g
>>> class Opt:
...     def __init__(self, params): self.params, self.steps = params, 0
...     def step(self): self.steps += 1
>>> opt = Opt([P(np.array([131072.0], dtype=np.float32))])
>>> s = TorchGradScaler(growth_interval=1)
>>> float(s.scale(np.float32(1.5)))
98304.0
>>> s.step(opt); opt.params[0].grad.tolist()
[2.0]
>>> s.update().to_dict()["scale_after"]
131072.0
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from fpemu.amp.scaling.kernels import is_float_dtype

READY, UNSCALED, STEPPED = "ready", "unscaled", "stepped"

# torch/amp/grad_scaler.py messages, reused by every scaler for the shared protocol.
MSG_UNSCALE_TWICE = "unscale_() has already been called on this optimizer since the last update()."
MSG_UNSCALE_AFTER_STEP = "unscale_() is being called after step()."
MSG_STEP_TWICE = "step() has already been called since the last update()."
MSG_CLOSURE = "Closure use is not currently supported if GradScaler is enabled."
MSG_NO_CHECKS_OPT = "No inf checks were recorded for this optimizer."
MSG_NO_CHECKS_UPDATE = "No inf checks were recorded prior to update."
MSG_PICKLE = (
    "A GradScaler instance may only be pickled at the beginning of an iteration, or at the end "
    "after scaler.update()."
)


class ParamLike(Protocol):
    """A parameter: anything with a ``grad`` attribute holding a NumPy array or None."""

    grad: Any


class OptimizerLike(Protocol):
    """An optimizer: ``params`` (a sequence of :class:`ParamLike`) and ``step()``."""

    @property
    def params(self) -> Sequence[Any]: ...

    def step(self, *args: Any, **kwargs: Any) -> Any: ...


@dataclass(frozen=True)
class StepRecord:
    """What one ``update()`` did: the per-iteration trace the trainer logs.

    Attributes:
        scaler: registry name of the scaler ("torch", "keras", ...).
        step: index of this update (0 for the first).
        scale_before: scale used for this iteration's loss and unscaling.
        scale_after: scale the next iteration will use.
        found_inf: whether any checked gradient held inf or NaN.
        skipped: whether an optimizer step was skipped this iteration.
        growth_tracker: the framework's counter after the update (torch ``_growth_tracker``,
            Keras ``step_counter``, tf.keras ``good_steps``, apex ``_unskipped``).
        hysteresis_tracker: remaining tolerated infs (hysteresis scaler only).
    """

    scaler: str
    step: int
    scale_before: float
    scale_after: float
    found_inf: bool
    skipped: bool
    growth_tracker: int
    hysteresis_tracker: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as a plain dict (JSON-ready).

        >>> StepRecord("torch", 0, 2.0, 1.0, True, True, 0).to_dict()["skipped"]
        True
        """
        return dataclasses.asdict(self)


@dataclass
class GradSlot:
    """One non-None gradient and how to write a replacement back into its container."""

    label: str
    array: np.ndarray
    setter: Callable[[np.ndarray], None]

    def write(self, new: np.ndarray) -> None:
        """Store ``new``: in place when the dtype is unchanged (keeps identity, like torch)."""
        if new.dtype == self.array.dtype and self.array.flags.writeable:
            self.array[...] = new
        else:
            self.setter(new)


def is_optimizer(obj: Any) -> bool:
    """Whether ``obj`` looks like an :class:`OptimizerLike`."""
    return hasattr(obj, "params") and callable(getattr(obj, "step", None))


def _check_grad(label: str, g: Any) -> np.ndarray:
    if not isinstance(g, np.ndarray):
        raise TypeError(f"gradient {label} must be a NumPy array or None, got {type(g).__name__}")
    if not is_float_dtype(g.dtype):
        raise TypeError(
            f"gradient {label} has dtype {g.dtype}; accepted: float16, bfloat16, float32, float64"
        )
    return g


def collect_grads(target: Any) -> list[GradSlot]:
    """The non-None gradients of an optimizer, a list of arrays, or a dict of arrays.

    Raises:
        TypeError: ``target`` is none of those, or a gradient is not a float NumPy array.
    """
    slots: list[GradSlot] = []
    if is_optimizer(target):
        for i, p in enumerate(target.params):
            if p.grad is not None:
                setter = functools.partial(setattr, p, "grad")
                slots.append(
                    GradSlot(f"params[{i}].grad", _check_grad(f"params[{i}]", p.grad), setter)
                )
    elif isinstance(target, list):
        for i, g in enumerate(target):
            if g is not None:
                setter = functools.partial(target.__setitem__, i)
                slots.append(GradSlot(f"[{i}]", _check_grad(f"[{i}]", g), setter))
    elif isinstance(target, dict):
        for k, g in target.items():
            if g is not None:
                setter = functools.partial(target.__setitem__, k)
                slots.append(GradSlot(f"[{k!r}]", _check_grad(f"[{k!r}]", g), setter))
    else:
        raise TypeError(
            "target must be an optimizer (with .params and .step()), a list of arrays or a dict "
            f"of arrays, got {type(target).__name__}"
        )
    return slots


def apply_to_outputs(outputs: Any, multiply: Callable[[Any], Any], scale_array: np.ndarray) -> Any:
    """torch's ``GradScaler.scale`` recursion: numbers/arrays are multiplied, lists and tuples
    keep their type, other iterables are mapped lazily, and tensor-like objects (an autograd
    Tensor) are multiplied by a 0-d array holding the scale so they record their own graph node.

    Raises:
        ValueError: ``outputs`` is none of those (torch's message).
    """
    if isinstance(outputs, np.ndarray | np.generic | int | float):
        return multiply(outputs)
    if isinstance(outputs, list | tuple):
        return type(outputs)(apply_to_outputs(v, multiply, scale_array) for v in outputs)
    if not isinstance(outputs, str | bytes | dict) and hasattr(outputs, "__mul__"):
        return outputs * scale_array
    if isinstance(outputs, Iterable) and not isinstance(outputs, str | bytes | dict):
        return map(lambda v: apply_to_outputs(v, multiply, scale_array), outputs)
    raise ValueError("outputs must be a Tensor or an iterable of Tensors")


@dataclass
class _OptState:
    target: Any  # held so that id(target) cannot be reused while the state lives
    stage: str = READY
    found_inf: bool | None = None  # None: no inf check recorded (no grads)
    skipped: bool = False


class LossScaler:
    """Base class: torch's per-optimizer state machine around framework-specific arithmetic.

    Subclasses provide ``_scale_value`` (the current scale as a Python float), ``_multiply``
    (loss times scale), ``_unscale`` (check and unscale a list of grads), ``_apply_rule`` (the
    update), ``_tracker`` and ``state_dict``/``load_state_dict``.
    """

    #: Registry name, also written into every :class:`StepRecord`.
    name: ClassVar[str] = "base"
    #: Whether a step whose grads are all None counts as finite (else torch's AssertionError).
    empty_is_finite: ClassVar[bool] = True

    def __init__(self) -> None:
        self._states: dict[int, _OptState] = {}
        self._updates = 0
        self._skips_nonfinite = True
        #: The record of the latest ``update()``, or None before the first.
        self.last_record: StepRecord | None = None

    # ---- hooks -------------------------------------------------------------------------
    def _scale_value(self) -> float:
        raise NotImplementedError

    def _multiply(self, x: Any) -> Any:
        raise NotImplementedError

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        """Return (replacement grads or None to leave them, found_inf)."""
        raise NotImplementedError

    def _apply_rule(self, found_inf: bool) -> None:
        raise NotImplementedError

    def _tracker(self) -> int:
        return 0

    def _hysteresis(self) -> int | None:
        return None

    def _check_ready(self, funcname: str) -> None:
        """Raise if the scaler cannot run ``funcname`` yet (torch: before the first scale())."""

    def _before_scale(self) -> None:
        """Prepare state on the first ``scale()`` (torch's lazy init)."""

    def _validate_grads(self, slots: list[GradSlot]) -> None:
        """Refuse gradient dtypes the framework refuses (torch: float16)."""

    def _after_step(self, stepped: bool) -> None:
        """Count iterations (Keras)."""

    def _set_scale(self, new_scale: Any) -> None:
        raise TypeError(f"{type(self).__name__}.update() takes no new_scale (got {new_scale!r})")

    # ---- protocol ----------------------------------------------------------------------
    def is_enabled(self) -> bool:
        """Whether scaling is on (only torch's scaler can be disabled)."""
        return True

    def get_scale(self) -> float:
        """The current scale as a Python float."""
        return self._scale_value()

    def scale_array(self) -> np.ndarray:
        """The current scale as a 0-d float32 array (what tensor-like losses are multiplied by)."""
        return np.asarray(self._scale_value(), dtype=np.float32)

    def scale(self, outputs: Any) -> Any:
        """Multiply a loss (number, array, list/tuple of them, or tensor-like) by the scale."""
        if not self.is_enabled():
            return outputs
        self._before_scale()
        return apply_to_outputs(outputs, self._multiply, self.scale_array())

    def _state(self, target: Any) -> _OptState:
        st = self._states.get(id(target))
        if st is None:
            st = self._states[id(target)] = _OptState(target)
        return st

    def unscale_(self, target: Any) -> bool:
        """Check ``target``'s grads for inf/NaN and unscale them in place; return found_inf.

        Raises:
            RuntimeError: called twice before ``update()``, or after ``step()``.
        """
        if not self.is_enabled():
            return False
        self._check_ready("unscale_")
        st = self._state(target)
        if st.stage == UNSCALED:
            raise RuntimeError(MSG_UNSCALE_TWICE)
        if st.stage == STEPPED:
            raise RuntimeError(MSG_UNSCALE_AFTER_STEP)
        slots = collect_grads(target)
        self._validate_grads(slots)
        if slots:
            new, found = self._unscale([s.array for s in slots])
            if new is not None:
                for slot, arr in zip(slots, new, strict=True):
                    slot.write(arr)
            st.found_inf = found
        else:
            st.found_inf = False if self.empty_is_finite else None
        st.stage = UNSCALED
        return bool(st.found_inf)

    def step(self, optimizer: OptimizerLike, *args: Any, **kwargs: Any) -> Any:
        """Unscale (unless done), then call ``optimizer.step()`` unless inf/NaN was found.

        Returns the optimizer's return value, or None when the step was skipped.

        Raises:
            RuntimeError: a ``closure`` keyword, or a second ``step()`` before ``update()``.
            AssertionError: the optimizer has no gradients at all (torch-style scalers).
        """
        if not self.is_enabled():
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError(MSG_CLOSURE)
        self._check_ready("step")
        if not is_optimizer(optimizer):
            raise TypeError(
                f"optimizer must have .params and .step(), got {type(optimizer).__name__}"
            )
        st = self._state(optimizer)
        if st.stage == STEPPED:
            raise RuntimeError(MSG_STEP_TWICE)
        if st.stage == READY:
            self.unscale_(optimizer)
        if st.found_inf is None:
            raise AssertionError(MSG_NO_CHECKS_OPT)
        skip = st.found_inf and self._skips_nonfinite
        ret = None if skip else optimizer.step(*args, **kwargs)
        st.skipped, st.stage = skip, STEPPED
        self._after_step(stepped=not skip)
        return ret

    def update(self, new_scale: Any = None) -> StepRecord | None:
        """Apply the framework's scale rule to this iteration's findings; return its record.

        Raises:
            AssertionError: no ``unscale_``/``step`` recorded an inf check since the last update.
        """
        if not self.is_enabled():
            return None
        self._check_ready("update")
        before = self._scale_value()
        checks = [st.found_inf for st in self._states.values() if st.found_inf is not None]
        if new_scale is not None:
            self._set_scale(new_scale)
        else:
            if not checks:
                raise AssertionError(MSG_NO_CHECKS_UPDATE)
            self._apply_rule(any(checks))
        record = StepRecord(
            scaler=self.name,
            step=self._updates,
            scale_before=before,
            scale_after=self._scale_value(),
            found_inf=any(checks),
            skipped=any(st.skipped for st in self._states.values()),
            growth_tracker=self._tracker(),
            hysteresis_tracker=self._hysteresis(),
        )
        self._states = {}
        self._updates += 1
        self.last_record = record
        return record

    def __getstate__(self) -> dict[str, Any]:
        """Pickle support; refused mid-iteration, like torch's ``GradScaler.__getstate__``."""
        if self._states:
            raise AssertionError(MSG_PICKLE)
        return self.__dict__.copy()

    def state_dict(self) -> dict[str, Any]:
        """The scaler's state as plain Python values."""
        raise NotImplementedError

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore a state saved by :meth:`state_dict`."""
        raise NotImplementedError


def require_keys(state_dict: dict[str, Any], keys: Sequence[str], owner: str) -> None:
    """Raise ValueError naming missing or unexpected keys of a state dict."""
    missing = [k for k in keys if k not in state_dict]
    extra = [k for k in state_dict if k not in keys]
    if missing or extra:
        raise ValueError(
            f"{owner} state_dict must have keys {list(keys)}; missing {missing}, unexpected {extra}"
        )


def check_real(name: str, value: Any) -> float:
    """``value`` as a float, or TypeError naming the argument (bools and strings refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    return float(value)


def check_int(name: str, value: Any) -> int:
    """``value`` as an int, or TypeError naming the argument (bools and floats refused)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {value!r}")
    return int(value)
