"""Train your PyTorch model under ``fpemu.watch`` and, beside it, its emulated twin.

``compare_torch`` is built on the ATen op table that ``fpemu.watch`` judges with and
``fpemu.emulate`` computes with (:mod:`fpemu.validate.ops`), so it takes every model torch
can train on the CPU (convolutions, BatchNorm, attention by hand or by
``scaled_dot_product_attention``, embeddings, tied weights, custom autograd Functions, hooks,
Dropout in train mode) with the user's own autocast and GradScaler.

* ``mode="lockstep"``: torch trains a deep copy of the model and every ATen op of every step
  (forward, backward, optimizer, scaler) is judged against the table's emulation computed from
  torch's own inputs: this *is* ``fpemu.watch`` around the steps, and each finding is local.
* ``mode="independent"`` (the trajectory): the same, and a second deep copy, the twin, trains
  the same steps on the same batches inside ``fpemu.emulate.as_torch.as_torch_cpu``, where
  every op's value comes from the table (torch's own bits where the table claims exactness; the
  bounded ops' value, e.g. a float32 GEMM in another order, elsewhere). The report shows the
  drift per step: the two losses, and per parameter, gradient and floating buffer the elements
  that differ and their largest distance in ulps of the tensor's own format.

Drift is information, never a finding: a bounded op's value (a GEMM or a sum in fpemu's order,
a correctly rounded ``sqrt`` where torch's vector kernel is not) legitimately differs from
torch's kernel by a rounding, and training carries such differences forward and grows them
step by step (through the weights, the next forward, AdamW's normalisation). Whether torch
computed each op correctly is what the watch decides, op by op from torch's own inputs; so the
report's ``ok`` depends only on the watch: no row ``differs``, ``policy`` or ``not_emulated``
and no procedure finding. Where every op of a run is bit-identical to the table's value (the
watch says ``identical`` for each), the twin reproduces torch's run bit for bit: zero drift.

Randomness: both runs seed torch's generator with ``seed + i`` before step ``i`` (inside
``torch.random.fork_rng``: the caller's generator is left as it was), so Dropout draws the same
mask in both (:mod:`fpemu.validate.twin.torch_twin`).

>>> import torch
>>> torch.manual_seed(0)  # doctest: +ELLIPSIS
<torch._C.Generator object at ...>
>>> net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
>>> r = compare_torch(net, torch.randn(6, 4), torch.randint(0, 3, (6,)), steps=2,
...                   autocast=("cpu", torch.bfloat16), optimizer="adamw", lr=1e-3)
>>> r.ok, r.counts["differs"], len(r.trace), r.settings["mode"]
(True, 0, 2, 'independent')
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from typing import Any

from fpemu.validate.twin.model_report import native
from fpemu.validate.twin.torch_twin import default_step, make_optimizer, train
from fpemu.validate.twin.twin_report import TwinReport, audit_rows, tensor_drift

__all__ = ["compare_torch"]

LOSSES = ("cross_entropy", "mse")
OPTIMIZERS = ("sgd", "adam", "adamw")
MODES = ("independent", "lockstep")
SCALER_KEYS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "enabled")
_AUTOCAST = "accepted None or ('cpu', torch.bfloat16 | torch.float16)"


def _low_dtype(autocast: Any) -> Any:
    """The autocast dtype of ``autocast=`` (None: no autocast region)."""
    import torch  # noqa: PLC0415 - optional dependency

    if autocast is None:
        return None
    if not isinstance(autocast, (tuple, list)) or len(autocast) != 2 or autocast[0] != "cpu":
        raise ValueError(f"autocast={autocast!r}: {_AUTOCAST}")
    name = str(autocast[1]).removeprefix("torch.")
    low = {
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
    }.get(name)
    if low is None:
        raise ValueError(f"autocast={autocast!r}: {_AUTOCAST}")
    return low


def _loss_fn(loss: Any) -> Callable[[Any, Any], Any]:
    import torch  # noqa: PLC0415 - optional dependency

    if loss == "cross_entropy":
        return torch.nn.functional.cross_entropy
    if loss == "mse":
        return torch.nn.functional.mse_loss
    if callable(loss) and not isinstance(loss, str):
        return loss  # type: ignore[no-any-return]
    raise ValueError(
        f"loss={loss!r}: accepted 'cross_entropy', 'mse', or a callable "
        "loss(outputs, targets) such as torch.nn.CrossEntropyLoss()"
    )


def _number(name: str, v: Any, lo: float, hi: float, *, open_lo: bool = False) -> float:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if ok and (v > lo if open_lo else v >= lo) and v < hi:
        return float(v)
    rng = f"{'(' if open_lo else '['}{lo:g}, {hi:g})"
    raise ValueError(f"{name}={v!r}: accepted a number in {rng}")


def _hyper(lr: Any, momentum: Any, weight_decay: Any, betas: Any, eps: Any) -> dict[str, Any]:
    if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
        raise ValueError(f"betas={betas!r}: accepted two numbers in [0, 1)")
    return {
        "lr": _number("lr", lr, 0.0, math.inf, open_lo=True),
        "momentum": _number("momentum", momentum, 0.0, 1.0),
        "weight_decay": _number("weight_decay", weight_decay, 0.0, math.inf),
        "betas": [_number("betas", b, 0.0, 1.0) for b in betas],
        "eps": _number("eps", eps, 0.0, math.inf, open_lo=True),
    }


def _batches(v: Any, steps: int, arg: str) -> list[Any]:
    """One batch for every step: ``v`` itself, or item ``i % len`` of a list/tuple of batches;
    NumPy arrays become torch tensors (sharing their memory)."""
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415 - optional dependency

    items = list(v) if isinstance(v, (list, tuple)) else [v]
    if not items:
        raise ValueError(f"{arg} is empty; accepted: one batch or a list of batches")
    for x in items:
        if not isinstance(x, (torch.Tensor, np.ndarray)):
            raise TypeError(
                f"{arg}: a batch is {type(x).__name__}; accepted torch tensors or "
                "NumPy arrays (one batch or a list of batches)"
            )
    return [torch.as_tensor(items[i % len(items)]) for i in range(steps)]


def _check(
    model: Any,
    steps: Any,
    grad_scaler: Any,
    mode: Any,
    optimizer: Any,
    audit: Any,
    seed: Any,
    step: Any,
    autocast: Any,
) -> None:
    import torch  # noqa: PLC0415 - optional dependency

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model: accepted a torch.nn.Module, got {type(model).__name__}")
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: accepted {', '.join(MODES)}")
    if not (optimizer in OPTIMIZERS or (callable(optimizer) and not isinstance(optimizer, str))):
        raise ValueError(
            f"optimizer={optimizer!r}: accepted {', '.join(OPTIMIZERS)} or a "
            "callable taking the parameters (torch.optim.SGD, a lambda, ...)"
        )
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r}: accepted an int >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed={seed!r}: accepted an int")
    if not isinstance(audit, bool):
        raise TypeError(f"audit={audit!r}: accepted True or False")
    if step is not None and not callable(step):
        raise TypeError(
            f"step={step!r}: accepted None or a callable "
            "step(model, optimizer, scaler, inputs, targets) -> loss"
        )
    if step is not None and autocast is not None:
        raise ValueError(
            f"autocast={autocast!r}: not with step= (your step opens its own "
            "autocast regions); accepted None"
        )
    if grad_scaler is not None:
        if not isinstance(grad_scaler, Mapping):
            raise TypeError(
                f"grad_scaler={grad_scaler!r}: accepted None or a dict of "
                f"torch.amp.GradScaler keyword arguments ({', '.join(SCALER_KEYS)})"
            )
        bad = sorted(set(grad_scaler) - set(SCALER_KEYS))
        if bad:
            raise ValueError(
                f"grad_scaler={dict(grad_scaler)!r}: unknown keys {bad}; "
                f"accepted {', '.join(SCALER_KEYS)}"
            )


def compare_torch(
    model: Any,
    inputs: Any,
    targets: Any,
    *,
    loss: Any = "cross_entropy",
    optimizer: Any = "sgd",
    lr: float = 0.01,
    momentum: float = 0.0,
    weight_decay: float = 0.0,
    betas: tuple[float, float] = (0.9, 0.999),
    eps: float = 1e-8,
    autocast: Any = None,
    grad_scaler: Mapping[str, Any] | None = None,
    steps: int = 1,
    policy: Any = None,
    audit: bool = True,
    mode: str = "independent",
    step: Any = None,
    seed: int = 0,
) -> TwinReport:
    """Train ``steps`` steps in torch under ``fpemu.watch`` (and, in the independent mode,
    the emulated twin beside it); see the module docstring.

    Args:
        model: a ``torch.nn.Module``, left untouched: deep copies train, in the model's own
            mode (``train()``: Dropout and BatchNorm as in training; call ``eval()`` first for
            the inference behaviour).
        inputs, targets: one batch (torch tensors or NumPy arrays) used every step, or lists
            of batches (step ``i`` uses item ``i % len``).
        loss: ``"cross_entropy"``, ``"mse"``, or any callable ``loss(outputs, targets)``
            (``nn.CrossEntropyLoss(label_smoothing=0.1)``, ...).
        optimizer: ``"sgd"`` (``lr``, ``momentum``, ``weight_decay``), ``"adam"`` or
            ``"adamw"`` (``lr``, ``betas``, ``eps``, ``weight_decay``): torch's optimizers
            with their CPU defaults; or a callable taking the parameters and returning a
            torch optimizer (the hyperparameter arguments are then not used).
        autocast: None, or ``("cpu", torch.bfloat16 | torch.float16)``: the forward and loss
            run in that ``torch.autocast`` region.
        grad_scaler: None, or keyword arguments of ``torch.amp.GradScaler("cpu", ...)``.
        steps: training steps (>= 1).
        policy: the watch's policy (``fpemu.watch(policy=...)``): None takes it from the
            program's autocast regions.
        audit: list the dtypes every ATen op of step 0 ran in (``TwinReport.audit``).
        mode: ``"independent"`` (torch and the twin, with the drift) or ``"lockstep"`` (torch
            only, every op judged from torch's inputs; no drift).
        step: None (the step above, from ``loss``, ``autocast``, ``grad_scaler``), or your
            own ``step(model, optimizer, scaler, inputs, targets) -> loss`` (``scaler`` is
            None without ``grad_scaler``), called with each run's own objects.
        seed: torch's generator is seeded with ``seed + i`` before step ``i`` in both runs.

    Returns:
        A :class:`~fpemu.validate.twin.twin_report.TwinReport`.

    Raises:
        ValueError, TypeError: a bad argument (named, with what is accepted).
        RuntimeError: torch refused the model or its data (from torch).
    """
    import torch  # noqa: PLC0415 - optional dependency

    from fpemu.emulate.as_torch import as_torch_cpu  # noqa: PLC0415 - imports torch
    from fpemu.validate.watch import watch  # noqa: PLC0415 - imports torch

    _check(model, steps, grad_scaler, mode, optimizer, audit, seed, step, autocast)
    low = _low_dtype(autocast)
    loss_fn = _loss_fn(loss)
    hyper = _hyper(lr, momentum, weight_decay, betas, eps)
    xs, ys = _batches(inputs, steps, "inputs"), _batches(targets, steps, "targets")
    run_step = step if step is not None else default_step(loss_fn, low)
    batches = list(zip(xs, ys, strict=True))

    def objects() -> tuple[Any, Any, Any]:
        net = copy.deepcopy(model)
        scaler = torch.amp.GradScaler("cpu", **grad_scaler) if grad_scaler is not None else None
        return net, make_optimizer(optimizer, net, hyper), scaler

    net, opt, scaler = objects()
    with watch(policy=policy) as w:
        ours = train(net, opt, scaler, run_step, batches, seed)
    settings = {
        "model": type(model).__name__,
        "mode": mode,
        "steps": steps,
        "seed": seed,
        "loss": loss if isinstance(loss, str) else repr(loss),
        "optimizer": optimizer if isinstance(optimizer, str) else repr(optimizer),
        "hyperparameters": hyper,
        "autocast": native(autocast),
        "grad_scaler": native(grad_scaler),
        "step": "default" if step is None else repr(step),
        "policy": w.settings["policy"],
        "torch": f"{torch.__version__} ({torch.backends.cpu.get_cpu_capability()}, "
        f"{torch.get_num_threads()} threads)",
    }
    report = TwinReport(settings=settings, watch=w.report())
    if audit:
        report.audit = audit_rows(report.rows)
    theirs: list[dict[str, Any]] = []
    if mode == "independent":
        tnet, topt, tscaler = objects()
        with as_torch_cpu() as em:
            theirs = train(tnet, topt, tscaler, run_step, batches, seed)
        report.emulation = {
            "emulated": sum(em.emulated.values()),
            "not_emulated": dict(em.not_emulated),
            "failed": dict(em.failed),
        }
    _fill(report, ours, theirs)
    return report


def _fill(report: TwinReport, ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> None:
    """The per-step trace (losses, scales) and, with a twin, the drift of every tensor."""
    for i, t in enumerate(ours):
        f = theirs[i] if theirs else None
        lt = t["loss"]
        lf: Any = f["loss"] if f is not None else None
        same = lt is not None and lf is not None and lt.shape == lf.shape and lt.dtype == lf.dtype
        report.trace.append(
            {
                "step": i,
                "loss_torch": _scalar(lt),
                "loss_twin": _scalar(lf),
                "loss_ulps": tensor_drift(lt, lf)["max_ulps"] if same else None,
                "scale_torch": t["scale"],
                "scale_twin": f["scale"] if f is not None else None,
            }
        )
        if f is None:
            continue
        for kind in ("param", "grad", "buffer"):
            for name, a in t[kind].items():
                b = f[kind].get(name)
                if a is None or b is None:
                    continue
                report.drift.append({"step": i, "kind": kind, "name": name, **tensor_drift(a, b)})


def _scalar(a: Any) -> float | None:
    if a is None:
        return None
    return float(a.astype("float64").reshape(-1)[0]) if a.size == 1 else float("nan")
