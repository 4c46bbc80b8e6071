"""The two runs of ``compare_torch``: torch's training steps on a deep copy of the model (under
``fpemu.watch``) and the twin's (under ``fpemu.emulate.as_torch.as_torch_cpu``), with a
snapshot of every parameter, gradient and buffer after each step.

Both runs call the same step function with their own model, optimizer and GradScaler, on the
same batches, and seed torch's generator with ``seed + step`` before each step, inside
``torch.random.fork_rng`` (the caller's generator state is left as it was): random ops
(Dropout's mask, ``torch.randn`` in a forward) draw the same numbers in both runs, since the
twin's ops run torch's own kernel for their shapes and draws before the emulated value
replaces the result (a mask is the draw itself).

Snapshots are taken with the dispatch modes off (``_disable_current_modes``): the copies are
not the program's ops, so the watch neither judges them nor counts a step from them.

>>> import torch
>>> net = torch.nn.Linear(3, 2)
>>> opt = make_optimizer("sgd", net, {"lr": 0.1, "momentum": 0.0, "weight_decay": 0.0})
>>> type(opt).__name__, opt.defaults["lr"]
('SGD', 0.1)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["Step", "default_step", "make_optimizer", "snapshot", "train"]

#: the step: ``step(model, optimizer, scaler, inputs, targets) -> loss`` (scaler may be None)
Step = Callable[[Any, Any, Any, Any, Any], Any]


def make_optimizer(spec: Any, model: Any, hyper: Mapping[str, Any]) -> Any:
    """torch's optimizer for ``model``'s parameters: ``"sgd"`` (``lr``, ``momentum``,
    ``weight_decay``), ``"adam"`` or ``"adamw"`` (``lr``, ``betas``, ``eps``,
    ``weight_decay``), torch's defaults otherwise; or ``spec(parameters)`` for a callable."""
    import torch  # noqa: PLC0415 - optional dependency

    params = list(model.parameters())
    if callable(spec):
        return spec(params)
    if spec == "sgd":
        return torch.optim.SGD(
            params, lr=hyper["lr"], momentum=hyper["momentum"], weight_decay=hyper["weight_decay"]
        )
    cls = torch.optim.Adam if spec == "adam" else torch.optim.AdamW
    return cls(
        params,
        lr=hyper["lr"],
        betas=tuple(hyper["betas"]),
        eps=hyper["eps"],
        weight_decay=hyper["weight_decay"],
    )


def default_step(loss_fn: Callable[[Any, Any], Any], dtype: Any) -> Step:
    """The step a user writes: zero the gradients, forward and loss under
    ``torch.autocast("cpu", dtype)`` (no region for ``dtype=None``), backward (scaled by the
    GradScaler when there is one), the optimizer step (through the scaler, then its update)."""
    import torch  # noqa: PLC0415 - optional dependency

    def step(model: Any, opt: Any, scaler: Any, x: Any, y: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = loss_fn(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    return step


def _np(t: Any) -> np.ndarray:
    from fpemu.validate.watch.convert import to_numpy  # noqa: PLC0415 - imports torch

    return to_numpy(t.detach(), copy=True)


def snapshot(model: Any, loss: Any, scaler: Any) -> dict[str, Any]:
    """The loss, every parameter, gradient (None where there is none) and floating buffer,
    and the scaler's scale, as NumPy arrays in their own dtypes, read with no mode active."""
    import torch  # noqa: PLC0415 - optional dependency
    from torch.utils._python_dispatch import _disable_current_modes  # noqa: PLC0415

    with _disable_current_modes(), torch.no_grad():
        lv = _np(loss) if isinstance(loss, torch.Tensor) else None
        return {
            "loss": lv,
            "param": {n: _np(p) for n, p in model.named_parameters()},
            "grad": {
                n: None if p.grad is None else _np(p.grad) for n, p in model.named_parameters()
            },
            "buffer": {n: _np(b) for n, b in model.named_buffers() if b.is_floating_point()},
            "scale": None
            if scaler is None or not scaler.is_enabled()
            else float(scaler.get_scale()),
        }


def train(
    model: Any, opt: Any, scaler: Any, step: Step, batches: Sequence[tuple[Any, Any]], seed: int
) -> list[dict[str, Any]]:
    """Run ``step`` on each batch, torch's generator seeded with ``seed + i`` before step
    ``i``; the snapshot after each step. The caller enters the watch or the emulation."""
    import torch  # noqa: PLC0415 - optional dependency

    out = []
    with torch.random.fork_rng(devices=[]):
        for i, (x, y) in enumerate(batches):
            torch.manual_seed(seed + i)
            loss = step(model, opt, scaler, x, y)
            out.append(snapshot(model, loss, scaler))
    return out
