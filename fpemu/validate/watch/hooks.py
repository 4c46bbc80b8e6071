"""Where an op runs: the optimizer and GradScaler hooks the watcher installs for its block.

* ``optimizer``: torch's global optimizer step hooks (``register_optimizer_step_pre_hook`` and
  its post hook) bracket every ``optimizer.step()``; ``Optimizer.zero_grad`` and
  ``torch.nn.utils.clip_grad_norm_``/``clip_grad_value_`` are wrapped for the block.
* ``scaler``: ``GradScaler.scale``, ``unscale_``, ``step`` and ``update`` are wrapped for the
  block (``step`` calls the optimizer inside: those ops are ``optimizer``); each call is also an
  event for the procedure checks (scale value, found-inf, skipped steps, a new scaler).

Keras 3 on the torch backend: ``Optimizer.apply`` is ``optimizer`` (and ends a step),
``LossScaleOptimizer.apply``/``scale_loss`` are ``scaler``, and ``Layer.__call__`` names the
module (the layer names from the model down, dotted).

Everything is restored when the block ends, also on an exception.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator
from typing import Any

from fpemu.validate.watch.policy import autocast_state

__all__ = ["phase_hooks"]


def _wrap(
    owner: Any, attr: str, make: Callable[[Any], Any], undo: list[Callable[[], None]]
) -> None:
    original = owner.__dict__[attr] if attr in owner.__dict__ else getattr(owner, attr)
    setattr(owner, attr, make(original))
    undo.append(lambda: setattr(owner, attr, original))


@contextlib.contextmanager
def phase_hooks(w: Any) -> Iterator[None]:
    """Install the phase hooks of watcher ``w`` for the duration of the block."""
    import torch  # noqa: PLC0415
    from torch.amp.grad_scaler import GradScaler  # noqa: PLC0415
    from torch.optim.optimizer import (  # noqa: PLC0415
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    undo: list[Callable[[], None]] = []
    stack: list[Any] = []

    def pre(opt: Any, args: Any, kwargs: Any) -> None:
        w.procedure.optimizer_step(opt, w)
        cm = w.in_phase("optimizer")
        cm.__enter__()
        stack.append(cm)

    def post(opt: Any, args: Any, kwargs: Any) -> None:
        if stack:
            stack.pop().__exit__(None, None, None)
        w.end_step()

    handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]
    undo.extend(h.remove for h in handles)

    def in_phase(name: str, event: str | None = None) -> Callable[[Any], Any]:
        def make(fn: Any) -> Any:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                with w.in_phase(name):
                    result = fn(*args, **kwargs)
                if event is not None:
                    w.procedure.event(event, args, kwargs, result, w)
                return result

            return wrapper

        return make

    _wrap(torch.optim.Optimizer, "zero_grad", in_phase("optimizer"), undo)

    def noting_autocast(fn: Any) -> Any:  # the policy check reads autocast's state from here:
        @functools.wraps(fn)  # inside autocast's own redispatch the state reads as disabled
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = fn(*args, **kwargs)
            w.policy.autocast = autocast_state()
            return result

        return wrapper

    for attr in ("__enter__", "__exit__"):
        _wrap(torch.amp.autocast_mode.autocast, attr, noting_autocast, undo)
    w.policy.autocast = autocast_state()
    for attr in ("scale", "unscale_", "step", "update"):
        _wrap(GradScaler, attr, in_phase("scaler", f"scaler.{attr}"), undo)
    _wrap(GradScaler, "__init__", in_phase("scaler", "scaler.init"), undo)
    import torch.nn.utils as nn_utils  # noqa: PLC0415
    import torch.nn.utils.clip_grad as clip_mod  # noqa: PLC0415

    for mod in (nn_utils, clip_mod):
        for attr in ("clip_grad_norm_", "clip_grad_value_"):
            if hasattr(mod, attr):
                _wrap(mod, attr, in_phase("optimizer", f"clip.{attr}"), undo)
    if _keras_on_torch():
        _keras_hooks(w, in_phase, undo)
    try:
        yield
    finally:
        for fn in reversed(undo):
            fn()


def _keras_on_torch() -> bool:
    """Keras 3 is imported and runs on the torch backend (its ops are then ATen ops)."""
    keras = sys.modules.get("keras")
    return keras is not None and keras.config.backend() == "torch"


def _keras_hooks(w: Any, in_phase: Callable[..., Any], undo: list[Callable[[], None]]) -> None:
    """Keras's optimizer and LossScaleOptimizer calls are phases; layers name the module."""
    import keras  # noqa: PLC0415
    from keras.src.optimizers.base_optimizer import BaseOptimizer  # noqa: PLC0415
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer  # noqa: PLC0415

    def stepping(fn: Any) -> Any:
        inner = in_phase("optimizer")(fn)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            result = inner(*args, **kwargs)
            w.end_step()
            return result

        return wrapper

    _wrap(BaseOptimizer, "apply", stepping, undo)
    for attr in ("apply", "scale_loss"):
        _wrap(LossScaleOptimizer, attr, in_phase("scaler", f"keras.{attr}"), undo)

    def layer_call(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(layer: Any, *args: Any, **kwargs: Any) -> Any:
            w.keras_path.append(layer.name)
            try:
                return fn(layer, *args, **kwargs)
            finally:
                w.keras_path.pop()

        return wrapper

    _wrap(keras.Layer, "__call__", layer_call, undo)
