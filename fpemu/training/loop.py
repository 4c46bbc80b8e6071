"""A mixed-precision training loop that reports what the numerics did, as plain data.

:func:`train` trains an :class:`~fpemu.nn.MLP` under a :class:`~fpemu.amp.policy.Policy` with an
optional loss scaler (from :mod:`fpemu.amp.scaling`) and returns a :class:`TrainResult`: per step
the loss, the scale and whether the step was skipped; per layer the fraction of gradient values that
are zero, subnormal or overflowed (inf/NaN) in the gradient format, after scaling (the gradients the
backward pass produced) and before scaling (those values divided by the scale and rounded to the
same format: what the gradients would be without loss scaling); the final accuracy.

The step follows PyTorch's recipe (amp.md 1.5, 1.8): forward under autocast, ``loss * scale``
outside autocast, backward, then master gradients, unscale (inf/NaN checked on the scaled
values), optional clipping, ``step`` unless an inf/NaN was found, ``update``. With ``micro_batches``
> 1 each micro-batch loss is divided by the count and gradients accumulate in the gradient
format before a single unscale/step/update.

Array code here takes its namespace from its data (:func:`fpemu.backend.xp`): the forward and
backward pass, the gradient statistics and :func:`accuracy` run on a model moved to CuPy with
:meth:`~fpemu.nn.modules.Module.to`. The loss scalers (:mod:`fpemu.amp.scaling`) and
:class:`GradView` (which hands them float16/bfloat16 storage arrays) are NumPy-only, so
:func:`train_step` and :func:`train` run on the host; datasets and reports are NumPy.

>>> r = train("moons", hidden=(8,), steps=3, batch_size=16, progress=False)
>>> len(r.steps), r.steps[0].skipped
(3, False)
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, get_policy
from fpemu.amp.recipes import Recipe, get_recipe
from fpemu.amp.scaling import LossScaler, get_scaler
from fpemu.backend import xp
from fpemu.formats import Format
from fpemu.nn import MLP
from fpemu.nn import functional as fn
from fpemu.nn.fp8 import FP8Linear, fp8_mlp
from fpemu.nn.optim import SGD, Adam, Optimizer, clip_grad_norm
from fpemu.nn.tensor import round_to
from fpemu.storage import to_storage
from fpemu.training.datasets import Dataset, get_dataset

KINDS = ("zero", "subnormal", "overflow")
Grads = list[np.ndarray | None]
#: layer -> {"after_scaling"|"before_scaling" -> {zero|subnormal|overflow -> fraction}}
LayerStats = dict[str, dict[str, dict[str, float]]]


ScalerLike = LossScaler | str | None


def make_scaler(spec: ScalerLike, policy: Policy) -> LossScaler:
    """Resolve ``scaler=`` of :func:`train`.

    ``"policy"``: the scaler the policy's framework pairs with it (with its options); None or
    ``"none"``: no scaling; another str: :func:`fpemu.amp.scaling.get_scaler` name with defaults; a
    :class:`~fpemu.amp.scaling.LossScaler` is used as is.

    >>> make_scaler("policy", get_policy("torch_cuda_fp16")).get_scale()
    65536.0
    """
    if isinstance(spec, LossScaler):
        return spec
    if spec == "policy":
        if policy.scaler is None:
            return get_scaler("none")
        return get_scaler(policy.scaler, **dict(policy.scaler_options))
    if spec is None:
        return get_scaler("none")
    if not isinstance(spec, str):
        raise TypeError(
            f"scaler must be 'policy', None, a scaler name or a LossScaler, got {spec!r}"
        )
    return get_scaler(spec)


class _Slot:
    """A gradient holder the scaler can check and unscale (``ParamLike``)."""

    def __init__(self, grad: np.ndarray | None) -> None:
        self.grad = grad


class GradView:
    """An ``OptimizerLike`` over an optimizer's master gradients for one step.

    The scaler checks and unscales these gradients (not the model's, as Apex unscales into the
    master gradients); ``step()`` applies them. Gradients in float16/bfloat16 are presented in
    their storage dtype (exact), so PyTorch's scaler refuses FP16 gradients as torch does
    (amp.md 1.4, "Attempting to unscale FP16 gradients.").
    """

    def __init__(self, opt: Optimizer) -> None:
        self.opt = opt
        self.formats = [opt.state_format(i) for i in range(len(opt.params))]
        self.params = [_Slot(None if g is None else self._compact(g, f))
                       for g, f in zip(opt.gradients(), self.formats, strict=True)]  # fmt: skip

    @staticmethod
    def _compact(g: np.ndarray, f: Format) -> np.ndarray:
        return np.asarray(to_storage(g.astype(np.float64), f)) if f.name in _COMPACT else g

    def grads(self) -> list[np.ndarray | None]:
        """The current gradients as float32/float64 arrays (the optimizer rounds them)."""
        out: list[np.ndarray | None] = []
        for p in self.params:
            g = None if p.grad is None else np.asarray(p.grad)
            if g is not None and g.dtype not in (np.float32, np.float64):
                g = g.astype(np.float32)  # float16/bfloat16 storage to float32: exact
            out.append(g)
        return out

    def step(self) -> None:
        """Apply the (unscaled) gradients."""
        self.opt.step(self.grads())


_COMPACT = ("float16", "bfloat16")


@dataclass
class TrainStep:
    """One optimizer step: the (unscaled) loss, the scale used, and what happened."""

    step: int
    loss: float
    scale: float
    skipped: bool
    nonfinite_grads: bool


@dataclass
class TrainResult:
    """Everything :func:`train` measured; :meth:`to_dict` / :meth:`to_json` give plain data."""

    config: dict[str, Any]
    steps: list[TrainStep] = field(default_factory=list)
    #: layer -> {"after_scaling"|"before_scaling" -> {zero|subnormal|overflow -> mean fraction}}
    grad_stats: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    final_accuracy: float = float("nan")
    train_accuracy: float = float("nan")
    final_loss: float = float("nan")
    #: the scaler's ``state_dict()`` after the last step
    scaler_state: dict[str, Any] = field(default_factory=dict)
    #: FP8 recipe runs: layer -> per-step {role -> amax, scale, saturated, flushed, subnormal}
    fp8_trace: dict[str, list[dict[str, dict[str, float]]]] = field(default_factory=dict)

    @property
    def skipped_steps(self) -> int:
        """How many optimizer steps the scaler skipped."""
        return sum(s.skipped for s in self.steps)

    def zero_fraction(self) -> float:
        """Mean over layers of the fraction of gradient values that were zero after scaling."""
        vals = [v["after_scaling"]["zero"] for v in self.grad_stats.values()]
        return float(np.mean(vals)) if vals else float("nan")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (NaN and inf become strings)."""
        d = asdict(self)
        d["skipped_steps"] = self.skipped_steps
        return jsonable(d)  # type: ignore[no-any-return]

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string."""
        return json.dumps(self.to_dict(), **kwargs)


def jsonable(v: Any) -> Any:
    """``v`` with tuples as lists and non-finite floats as strings (JSON has no inf/NaN).

    >>> jsonable({"loss": [1.5, float("inf")], "shape": (2, 3)})
    {'loss': [1.5, 'inf'], 'shape': [2, 3]}
    """
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def classify(g: np.ndarray, fmt: Format) -> dict[str, float]:
    """Fractions of ``g``'s values that are zero, subnormal, or overflowed (inf/NaN/>max).

    >>> classify(np.array([0.0, 1e-6, 1.0, np.inf]), get_policy("torch_cuda_fp16").compute)
    {'zero': 0.25, 'subnormal': 0.25, 'overflow': 0.25}
    """
    m = xp(g)
    a = m.abs(m.asarray(g, np.float64))
    n = max(a.size, 1)
    over = ~m.isfinite(a) | (a > fmt.max)
    with np.errstate(invalid="ignore"):
        return {
            "zero": float(m.count_nonzero(a == 0)) / n,
            "subnormal": float(m.count_nonzero((a > 0) & (a < fmt.tiny))) / n,
            "overflow": float(m.count_nonzero(over)) / n,
        }


def _layer_stats(model: MLP, fmt: Format, scale: float) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    groups: dict[str, list[np.ndarray]] = {}
    for name, p in model.named_parameters():
        if p.grad is not None:
            groups.setdefault(name.rsplit(".", 1)[0], []).append(p.grad.reshape(-1))
    for layer, gs in groups.items():
        g = xp(*gs).concatenate(gs).astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            before = round_to(g / scale, fmt) if scale != 1 else g
        out[layer] = {"after_scaling": classify(g, fmt), "before_scaling": classify(before, fmt)}
    return out


def accuracy(model: MLP, x: np.ndarray, y: np.ndarray) -> float:
    """Fraction of ``x`` classified correctly (forward pass under the model's policy).

    >>> d = get_dataset("moons")
    >>> 0 <= accuracy(MLP([2, 3, 2]), d.x_test, d.y_test) <= 1
    True
    """
    with np.errstate(all="ignore"):
        logits = model(x).data.astype(np.float64)
    m = xp(logits)  # host labels are compared on the model's device
    pred = m.where(m.isnan(logits).any(axis=1), -1, m.argmax(m.nan_to_num(logits), axis=1))
    return float(m.mean(pred == m.asarray(y)))


def make_optimizer(name: str, model: MLP, *, lr: float, momentum: float = 0.9) -> Optimizer:
    """``"sgd"`` (with ``momentum``) or ``"adam"`` over the model's parameters and master format."""
    master = model.policy.master
    if name == "sgd":
        return SGD(model.parameters(), lr=lr, momentum=momentum, master=master)
    if name == "adam":
        return Adam(model.parameters(), lr=lr, master=master)
    raise ValueError(f"optimizer={name!r}; choose 'sgd' or 'adam'")


def train_step(
    model: MLP,
    opt: Optimizer,
    scaler: LossScaler,
    x: np.ndarray,
    y: np.ndarray,
    *,
    micro_batches: int = 1,
    loss_weight: float = 1.0,
    clip: float | None = None,
    step: int = 0,
    stats: bool = True,
) -> tuple[TrainStep, dict[str, dict[str, dict[str, float]]]]:
    """One optimizer step on the batch ``(x, y)``; returns its record and per-layer grad stats.

    Forward and loss under the model's policy, ``scaler.scale(loss).backward()`` per
    micro-batch (outside autocast: an fp32 scale with native promotion, amp.md 1.3), then
    ``unscale_`` and clipping if asked, ``scaler.step`` (skipped on inf/NaN) and ``update``.
    ``stats=False`` skips the per-layer gradient statistics (returns an empty dict).
    """
    with np.errstate(all="ignore"):  # inf and NaN are data here: overflow is what we measure
        return _train_step(model, opt, scaler, x, y, micro_batches=micro_batches,
                           loss_weight=loss_weight, clip=clip, step=step, stats=stats)  # fmt: skip


def _train_step(model: MLP, opt: Optimizer, scaler: LossScaler, x: np.ndarray, y: np.ndarray, *,
                micro_batches: int, loss_weight: float, clip: float | None, step: int,
                stats: bool) -> tuple[TrainStep, LayerStats]:  # fmt: skip
    pol = model.policy
    scale = scaler.get_scale()
    opt.zero_grad()
    loss_total = 0.0
    parts = zip(xp(x).array_split(x, micro_batches), xp(y).array_split(y, micro_batches),
                strict=True)  # fmt: skip
    for xb, yb in parts:
        loss = fn.cross_entropy(model(xb), yb, policy=pol)
        if loss_weight != 1.0 or micro_batches > 1:
            loss = fn.mul(loss, loss_weight / micro_batches, policy=pol)
        loss_total += loss.item()
        scaler.scale(loss).backward()
    layer_stats = _layer_stats(model, pol.compute, scale) if stats else {}
    view = GradView(opt)
    nonfinite = any(g is not None and not xp(g).isfinite(g).all() for g in view.grads())
    if clip is not None:  # unscale_ -> clip -> step -> update (amp.md 1.8)
        scaler.unscale_(view)
        clipped, _ = clip_grad_norm(view.grads(), clip)
        for slot, g in zip(view.params, clipped, strict=True):
            slot.grad = g
    scaler.step(view)
    rec = scaler.update()
    skipped = bool(rec.skipped) if rec is not None else False
    return TrainStep(step, loss_total, scale, skipped, nonfinite), layer_stats


def train(
    dataset: str | Dataset,
    *,
    hidden: Sequence[int] = (64,),
    policy: Policy | str = "fp32",
    scaler: ScalerLike = "policy",
    steps: int = 200,
    lr: float = 0.05,
    optimizer: str = "sgd",
    momentum: float = 0.9,
    seed: int = 0,
    batch_size: int = 64,
    micro_batches: int = 1,
    clip: float | None = None,
    activation: str = "relu",
    loss_weight: float = 1.0,
    acc_model: str | None = None,
    progress: bool = True,
    recipe: Recipe | str | None = None,
) -> TrainResult:
    """Train an MLP classifier and record the numerics of every step.

    Args:
        dataset: a :mod:`fpemu.training.datasets` name or a
            :class:`~fpemu.training.datasets.Dataset`.
        hidden: hidden layer widths.
        policy: a :class:`~fpemu.amp.policy.Policy` or preset name.
        scaler: ``"policy"`` (the scaler the policy's framework pairs with it), None (no
            scaling), a :func:`fpemu.amp.scaling.get_scaler` name, or a scaler object.
        steps: optimizer steps.
        lr, optimizer, momentum: ``"sgd"`` (with momentum) or ``"adam"`` and its learning rate.
        seed: seeds the initialisation and the batch order.
        batch_size: examples per step (split evenly into ``micro_batches``).
        micro_batches: gradient accumulation: micro-batches per optimizer step.
        clip: clip the unscaled gradients' global norm to this value (None: no clipping).
        activation: hidden activation name.
        loss_weight: multiply the loss by this constant (e.g. a small auxiliary-loss weight);
            a small weight makes FP16 gradients underflow without loss scaling.
        acc_model: override the policy's accumulation model (e.g. ``"sequential"``).
        progress: show a progress bar (rich).
        recipe: an FP8 recipe (:mod:`fpemu.amp.recipes`): every Linear becomes an
            :class:`~fpemu.nn.fp8.FP8Linear` (the FP32 model's initial weights); needs the
            ``fp32`` policy (the ops between the FP8 GEMMs run in FP32).
    """
    for arg, v in (("steps", steps), ("batch_size", batch_size), ("micro_batches", micro_batches)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{arg} must be a positive int, got {v!r}")
    if batch_size % micro_batches:
        raise ValueError(
            f"batch_size={batch_size} is not a multiple of micro_batches={micro_batches}"
        )
    pol = get_policy(policy)
    if acc_model is not None:
        from dataclasses import replace  # noqa: PLC0415

        pol = replace(pol, acc_model=acc_model)
    data = get_dataset(dataset, seed=seed)
    sizes = [data.features, *hidden, data.classes]
    if recipe is not None:
        if pol.name != "fp32":
            raise ValueError(f"recipe={recipe!r} needs policy='fp32', got policy={pol.name!r}")
        model = fp8_mlp(sizes, recipe=recipe, activation=activation, seed=seed)
    else:
        model = MLP(sizes, activation=activation, policy=pol, seed=seed)
    opt = make_optimizer(optimizer, model, lr=lr, momentum=momentum)
    sc = make_scaler(scaler, pol)
    result = TrainResult(config={
        "dataset": data.name, "hidden": list(hidden), "policy": pol.name, "scaler": sc.name,
        "steps": steps, "lr": lr, "optimizer": optimizer, "seed": seed, "batch_size": batch_size,
        "micro_batches": micro_batches, "clip": clip, "activation": activation,
        "loss_weight": loss_weight, "acc_model": pol.acc_model,
        "recipe": None if recipe is None else get_recipe(recipe).name,
    })  # fmt: skip
    rng = np.random.default_rng(seed)
    order, pos = rng.permutation(len(data.x_train)), 0
    sums: dict[str, dict[str, dict[str, float]]] = {}
    bar = _Progress(steps, f"{pol.name}/{sc.name}", enabled=progress)
    with bar:
        for step in range(steps):
            if pos + batch_size > len(order):
                order, pos = rng.permutation(len(data.x_train)), 0
            idx, pos = order[pos : pos + batch_size], pos + batch_size
            rec, stats = train_step(model, opt, sc, data.x_train[idx], data.y_train[idx],
                                    micro_batches=micro_batches, loss_weight=loss_weight,
                                    clip=clip, step=step)  # fmt: skip
            for layer, st in stats.items():
                acc = sums.setdefault(layer, {k: dict.fromkeys(KINDS, 0.0) for k in st})
                for when, d in st.items():
                    for kind, frac in d.items():
                        acc[when][kind] += frac / steps
            result.steps.append(rec)
            loss_total, scale = rec.loss, rec.scale
            bar.advance(loss_total, scale)
    result.grad_stats = sums
    for lin in model.layers:
        if isinstance(lin, FP8Linear) and lin.state is not None:
            result.fp8_trace[lin.name] = list(lin.state.records)  # before eval forwards
    result.scaler_state = sc.state_dict()
    result.final_accuracy = accuracy(model, data.x_test, data.y_test)
    result.train_accuracy = accuracy(model, data.x_train, data.y_train)
    result.final_loss = result.steps[-1].loss
    return result


class _Progress:
    """A rich progress bar on stderr, only when stderr is a terminal (never into a pipe or file:
    rich's live display writes blank lines there), and off when ``enabled`` is False."""

    def __init__(self, total: int, label: str, *, enabled: bool) -> None:
        self.total, self.label = total, label
        self.bar: Any = None
        self.task: Any = None
        if enabled:
            try:
                from rich.console import Console  # noqa: PLC0415 - optional at run time
                from rich.progress import Progress  # noqa: PLC0415
            except ImportError:  # pragma: no cover
                return
            console = Console(stderr=True)
            if console.is_terminal:
                self.bar = Progress(console=console, transient=True)

    def __enter__(self) -> _Progress:
        if self.bar is not None:
            self.bar.__enter__()
            self.task = self.bar.add_task(self.label, total=self.total)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    def advance(self, loss: float, scale: float) -> None:
        if self.bar is not None and self.task is not None:
            self.bar.update(
                self.task, advance=1, description=f"{self.label} loss {loss:.4f} scale {scale:g}"
            )
