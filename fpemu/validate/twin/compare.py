"""Train your PyTorch model and its fpemu twin side by side, and compare every tensor bit for bit.

``compare_torch`` converts the model with ``fpemu.validate.twin.from_torch``, then runs the
same steps in torch (CPU autocast and GradScaler as given) and in fpemu (the matching policy and
``fpemu.amp.scaling.TorchGradScaler``), from the same weights and batches. Every step it
compares, bit for bit: each node's forward activation, the loss, each node's output gradient
(the backward pass), each parameter gradient (after unscaling), the scaler state, and each
updated parameter. A tensor that differs gets a cause (``fpemu.validate.twin.model_report.CAUSES``):
fpemu recomputes the op from torch's own inputs (the forward op, the loss, the optimizer update
from torch's parameters and gradients, the gradient bound from torch's upstream gradient); if
that is bit-identical the difference was ``propagated``, else the op's own numerics are bounded
(``fpemu.validate.twin.causes``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, autocast, get_policy
from fpemu.amp.scaling import get_scaler
from fpemu.nn.graph import GraphModule
from fpemu.nn.optim import SGD, Adam, AdamW, Optimizer
from fpemu.nn.tensor import Tensor
from fpemu.validate.twin.audit import autocast_audit
from fpemu.validate.twin.checker import StepChecker, loss_value
from fpemu.validate.twin.from_torch import from_torch
from fpemu.validate.twin.lockstep import lockstep_step, sync_state
from fpemu.validate.twin.model_report import ModelReport, native
from fpemu.validate.twin.torch_run import TorchTrainer, to_np
from fpemu.validate.twin.update_checks import apply_update

LOSSES = ("cross_entropy", "mse")
OPTIMIZERS = ("sgd", "adam", "adamw")
MODES = ("independent", "lockstep")
SCALER_KEYS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")


def policy_for(autocast_arg: Any) -> str:
    """The fpemu preset matching ``autocast=`` of ``compare_torch``.

    >>> policy_for(None), policy_for(("cpu", "bfloat16"))
    ('fp32', 'torch_cpu_bf16')
    """
    if autocast_arg is None:
        return "fp32"
    if not isinstance(autocast_arg, (tuple, list)) or len(autocast_arg) != 2:
        raise ValueError(f"autocast={autocast_arg!r}: accepted None or ('cpu', torch.bfloat16 | "
                         "torch.float16)")  # fmt: skip
    device, dtype = autocast_arg
    name = str(dtype).removeprefix("torch.")
    low = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16"}.get(name)
    if device != "cpu" or low is None:
        raise ValueError(f"autocast={autocast_arg!r}: accepted None or ('cpu', torch.bfloat16 | "
                         "torch.float16) (fpemu compares against torch's CPU kernels)")  # fmt: skip
    return f"torch_cpu_{low}"


def loss_name(loss: Any) -> str:
    """``"cross_entropy"`` or ``"mse"`` for ``loss=``: the name, or torch's callable with its
    defaults (``nn.CrossEntropyLoss()``, ``nn.MSELoss()``, ``F.cross_entropy``, ``F.mse_loss``).

    >>> loss_name("mse")
    'mse'
    """
    if isinstance(loss, str) and loss in LOSSES:
        return loss
    accepted = ("accepted 'cross_entropy', 'mse', torch.nn.CrossEntropyLoss(), "
                "torch.nn.MSELoss() (default arguments), F.cross_entropy, F.mse_loss")  # fmt: skip
    if callable(loss) and not isinstance(loss, str):
        import torch  # noqa: PLC0415 - optional dependency

        f = torch.nn.functional
        if loss is f.cross_entropy:
            return "cross_entropy"
        if loss is f.mse_loss:
            return "mse"
        if type(loss) is torch.nn.CrossEntropyLoss and loss.weight is None and \
                loss.reduction == "mean" and loss.label_smoothing == 0 and \
                loss.ignore_index == -100:  # fmt: skip
            return "cross_entropy"
        if type(loss) is torch.nn.MSELoss and loss.reduction == "mean":
            return "mse"
    raise ValueError(f"loss={loss!r}: {accepted}")


def _optimizer(name: str, params: list[Tensor], hyper: Mapping[str, Any]) -> Optimizer:
    if name == "sgd":
        return SGD(params, lr=hyper["lr"], momentum=hyper["momentum"],
                   weight_decay=hyper["weight_decay"])  # fmt: skip
    cls = Adam if name == "adam" else AdamW
    return cls(params, lr=hyper["lr"], betas=hyper["betas"], eps=hyper["eps"],
               weight_decay=hyper["weight_decay"])  # fmt: skip


def _batches(v: Any, steps: int, arg: str) -> list[np.ndarray]:
    items = list(v) if isinstance(v, (list, tuple)) else [v]
    if not items:
        raise ValueError(f"{arg} is empty; accepted: one batch or a list of batches")
    return [to_np(items[i % len(items)]) for i in range(steps)]


def compare_torch(
    model: Any, inputs: Any, targets: Any, *, loss: str | Callable[..., Any] = "cross_entropy",
    optimizer: str = "sgd", lr: float = 0.01, momentum: float = 0.0, weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, autocast: Any = None,
    grad_scaler: Mapping[str, Any] | None = None, steps: int = 1,
    policy: Policy | str | None = None, audit: bool = True, mode: str = "independent",
) -> ModelReport:  # fmt: skip
    """Run ``steps`` training steps in torch and in fpemu; compare every tensor of every step.

    Args:
        model: a ``torch.nn.Module`` (left untouched: a deep copy is trained, in eval mode so
            Dropout is the identity).
        inputs, targets: one batch (torch tensors or NumPy arrays) used every step, or lists
            of batches (step ``i`` uses item ``i % len``).
        loss: ``"cross_entropy"`` (integer labels) or ``"mse"``, or torch's callable for one
            of them with default arguments (``loss_name``).
        optimizer: ``"sgd"``, ``"adam"`` or ``"adamw"`` with ``lr``, ``momentum`` (sgd),
            ``weight_decay``, ``betas`` and ``eps`` (adam, adamw); torch's single-tensor kernels.
        autocast: None, or ``("cpu", torch.bfloat16 | torch.float16)``.
        grad_scaler: None, or keyword arguments of ``torch.amp.GradScaler("cpu", ...)``.
        steps: training steps (>= 1).
        policy: the fpemu policy (default: the preset matching ``autocast``).
        audit: also record the dtype torch used for every ATen op of one forward and backward
            pass beside the policy's format (``fpemu.validate.twin.audit.autocast_audit``).
        mode: ``"independent"``: fpemu trains its own copy from the same initial weights, and
            a tensor that differs is recomputed from torch's inputs to find where the
            difference arose; ``"lockstep"``: every op of every step is computed by fpemu from
            torch's own inputs and state (``fpemu.validate.twin.lockstep``): each difference is
            local, at about the cost of one fpemu step, but the runs' drift is not shown.

    Returns:
        A ``fpemu.validate.twin.model_report.ModelReport``.

    Raises:
        ValueError: a bad argument (named, with what is accepted), or an unsupported model.
    """
    loss = loss_name(loss)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: accepted {', '.join(MODES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r}: accepted {', '.join(OPTIMIZERS)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r}: accepted an int >= 1")
    kw = dict(grad_scaler or {})
    bad = sorted(set(kw) - set(SCALER_KEYS))
    if bad:
        raise ValueError(f"grad_scaler={grad_scaler!r}: unknown keys {bad}; accepted "
                         f"{', '.join(SCALER_KEYS)}")  # fmt: skip
    pol = get_policy(policy if policy is not None else policy_for(autocast))
    hyper = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "betas": tuple(betas),
             "eps": eps}  # fmt: skip
    net = copy.deepcopy(model).eval()
    twin = from_torch(net, policy=pol)
    xs, ys = _batches(inputs, steps, "inputs"), _batches(targets, steps, "targets")
    trainer = TorchTrainer(net, loss=str(loss), optimizer=optimizer, hyper=hyper,
                           autocast=autocast,
                           grad_scaler=kw if grad_scaler is not None else None)  # fmt: skip
    opt = _optimizer(optimizer, twin.parameters(), hyper)
    shadow = _optimizer(optimizer, [Tensor(p.data.copy(), p.fmt, requires_grad=True)
                                    for p in twin.parameters()], hyper)  # fmt: skip
    scaler = get_scaler("torch", **kw) if grad_scaler is not None else get_scaler("none")
    report = ModelReport(settings={
        "model": type(model).__name__, "mode": mode, "policy": pol.name,
        "autocast": native(autocast),
        "grad_scaler": native(grad_scaler), "loss": loss, "optimizer": optimizer,
        "hyperparameters": native(hyper), "steps": steps,
        "torch": f"{trainer.torch.__version__} ({trainer.torch.backends.cpu.get_cpu_capability()}, "
                 f"{trainer.torch.get_num_threads()} threads)"})  # fmt: skip
    if audit:
        report.audit = autocast_audit(model, xs[0], ys[0], autocast=autocast, policy=pol,
                                      loss=str(loss))  # fmt: skip
    for s in range(steps):
        t = trainer.step(xs[s], ys[s])
        if mode == "lockstep":  # fpemu's step from torch's state, each op on torch's inputs
            sync_state(opt, scaler, twin, t, _scaler_state(scaler, t))
            ck = StepChecker(report, s, twin, pol, t, {}, t.params_before, shadow, str(loss))
            f = ck.f = lockstep_step(ck, opt, scaler, str(loss), pol)
        else:  # fpemu's parameters before its step: torch's at step 0, its own later
            before = {n: p.data.copy() for n, p in twin.named_parameters()}
            f = _fpemu_step(twin, opt, scaler, xs[s], ys[s], str(loss), pol)
            ck = StepChecker(report, s, twin, pol, t, f, before, shadow, str(loss))
        ck.run()
        report.trace.append({"step": s, "loss_torch": float(to_np(t.loss)),
                             "loss_fpemu": float(f["loss"].item()), "scale": t.scale,
                             "skipped_torch": t.skipped,
                             "skipped_fpemu": f["skipped"]})  # fmt: skip
    return report


def _scaler_state(scaler: Any, t: Any) -> dict[str, Any] | None:
    """torch's scaler state before step ``t``, in ``state_dict`` form (None: no scaler)."""
    st = dict(scaler.state_dict()) if scaler.is_enabled() else {}
    if "_growth_tracker" not in st:  # disabled, or no scaler at all
        return None
    st["scale"], st["_growth_tracker"] = t.scale, t.tracker_before
    return st


def _fpemu_step(twin: GraphModule, opt: Optimizer, scaler: Any, x: np.ndarray, y: np.ndarray,
                loss: str, pol: Policy, **state_keys: str) -> dict[str, Any]:  # fmt: skip
    """One fpemu training step of the twin; ``state_keys`` name the scaler's state fields for
    :func:`apply_update` (Keras's differ from torch's)."""
    with np.errstate(all="ignore"):
        opt.zero_grad()
        out = twin(x)
        with autocast(pol):
            lv = loss_value(loss, out, y)
        scale = scaler.get_scale()
        scaler.scale(lv).backward()
        done = apply_update(opt, scaler, **state_keys)
    return {"acts": dict(twin.outputs), "loss": lv, "scale": scale, **done}


__all__ = ["compare_torch", "loss_name", "policy_for"]
