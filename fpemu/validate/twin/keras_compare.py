"""Train your Keras 3 model and its fpemu twin side by side (torch backend), and compare every
tensor bit for bit: ``compare_keras``, fpemu's own twin of a Keras model.

The Keras side is Keras's own training step on the torch backend (``TorchTrainer.train_step``:
forward, the ``Loss`` object, ``optimizer.scale_loss``, ``backward``, ``optimizer.apply``) run
one layer at a time so that every node of the fpemu twin (``from_keras``: a ``Dense`` is a
``matmul``, an ``add`` and its activation) has Keras's tensor and gradient beside it. Each layer
is run with Keras's own ops under the layer's ``AutocastScope`` (what ``Layer.__call__`` sets up
for a mixed policy) and its output is checked bit for bit against ``layer(x)`` itself, so the
recording cannot drift from Keras. Dropout is the identity (the inference pass).

The fpemu side runs ``KerasSGD`` (Keras 3's ``SGD`` as its torch backend runs it: fused
``add_`` with ``alpha=-lr``, a momentum buffer that starts at zero) and, under ``mixed_float16``,
fpemu's
``KerasLossScaleOptimizer`` (Keras 3 rules: initial scale 2**15, doubling after
``dynamic_growth_steps`` finite steps, halving and skipping on inf/NaN, gradients divided by
the scale). The checks and their causes are ``StepChecker``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, autocast, get_policy
from fpemu.amp.scaling import KerasLossScaleOptimizer, get_scaler
from fpemu.nn.graph import GraphModule
from fpemu.nn.optim import Optimizer
from fpemu.nn.tensor import Tensor
from fpemu.validate.frameworks.keras_checks import import_keras
from fpemu.validate.twin.checker import StepChecker, loss_value
from fpemu.validate.twin.from_keras import from_keras
from fpemu.validate.twin.keras_ops import KerasAdam, KerasSGD
from fpemu.validate.twin.model_report import ModelReport, native
from fpemu.validate.twin.torch_run import TorchStep, to_np
from fpemu.validate.twin.update_checks import apply_update

#: Keras's ``SparseCategoricalCrossentropy(from_logits=True)`` and ``MeanSquaredError()``
#: (fpemu's ``keras_mse``: Keras's float32 ops, not torch's ``mse_loss``)
LOSSES = ("cross_entropy", "mse")
#: Keras's ``SGD`` (momentum, no Nesterov), ``Adam`` and ``AdamW`` (``amsgrad=False``)
OPTIMIZERS = ("sgd", "adam", "adamw")
#: the checker's name of each loss (``fpemu.validate.twin.checker.loss_value``)
_LOSS_KEY = {"cross_entropy": "cross_entropy", "mse": "keras_mse"}
MIXED = ("mixed_bfloat16", "mixed_float16")


def _variables(model: Any) -> dict[str, Any]:
    """The twin's parameter names (``from_keras``) -> the Keras variables."""
    out: dict[str, Any] = {}
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "Dense":
            out[f"{layer.name}.kernel"] = layer.kernel
            if layer.use_bias:
                out[f"{layer.name}.bias"] = layer.bias
        elif kind == "LayerNormalization":
            out[f"{layer.name}.gamma"] = layer.gamma
            out[f"{layer.name}.beta"] = layer.beta
    return out


class KerasTrainer:
    """Keras's training step, one layer at a time, every node's output and gradient kept."""

    def __init__(self, model: Any, *, loss: str, optimizer: str, hyper: Mapping[str, Any],
                 scaler: Mapping[str, Any] | None) -> None:  # fmt: skip
        import torch  # noqa: PLC0415 - optional dependency

        self.keras, self.torch, self.model = import_keras(), torch, model
        k, h = self.keras, hyper
        self.mse = loss == "mse"
        self.loss_fn = (k.losses.MeanSquaredError() if self.mse else
                        k.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
        if optimizer == "sgd":
            self.inner = k.optimizers.SGD(learning_rate=h["lr"], momentum=h["momentum"])
        else:
            adam = {"learning_rate": h["lr"], "beta_1": h["beta_1"], "beta_2": h["beta_2"],
                    "epsilon": h["epsilon"]}  # fmt: skip
            self.inner = (k.optimizers.Adam(**adam) if optimizer == "adam" else
                          k.optimizers.AdamW(weight_decay=h["weight_decay"], **adam))  # fmt: skip
        self.opt = (k.optimizers.LossScaleOptimizer(self.inner, **scaler)
                    if scaler is not None else self.inner)  # fmt: skip
        self.vars = _variables(model)
        self.opt.build(list(self.vars.values()))

    def _np(self, v: Any) -> np.ndarray:
        return to_np(getattr(v, "value", v))

    def _run_layers(self, x: Any, acts: dict[str, Any]) -> Any:
        from keras import ops  # noqa: PLC0415
        from keras.src import backend as kb  # noqa: PLC0415 - AutocastScope is not public

        acts["input"] = h = x
        for layer in self.model.layers:
            kind, name = type(layer).__name__, layer.name
            with kb.AutocastScope(layer.compute_dtype):
                hin = ops.cast(h, layer.compute_dtype) if kind != "Dropout" else h
                if kind == "Dense":
                    out = acts[f"{name}.matmul"] = ops.matmul(hin, layer.kernel)
                    if layer.use_bias:
                        out = acts[f"{name}.bias_add"] = ops.add(out, layer.bias)
                    act = getattr(layer.activation, "__name__", "linear")
                    if act != "linear":
                        out = acts[f"{name}.{act}"] = layer.activation(out)
                elif kind == "Activation":
                    act = getattr(layer.activation, "__name__", "linear")
                    out = acts[f"{name}.{act}"] = layer.activation(hin)
                elif kind == "Dropout":
                    out = acts[name] = self.torch.clone(h)  # the identity, a node of its own
                else:
                    out = acts[name] = layer.call(hin)
            with self.torch.no_grad():
                want = layer(h, training=False)
            if not self.torch.equal(want.float(), out.detach().float()):
                raise RuntimeError(f"compare_keras: the recorded ops of layer {name!r} differ "
                                   "from the layer's own output")  # fmt: skip
            h = out
        for t in acts.values():
            if t.requires_grad:
                t.retain_grad()
        return h

    def step(self, x: np.ndarray, y: np.ndarray) -> TorchStep:
        """One step on the batch ``(x, y)``."""
        torch = self.torch
        rec = TorchStep(target=y)
        rec.params_before = {n: self._np(v) for n, v in self.vars.items()}
        # the optimizer's state before the step, under fpemu's names (KerasSGD, KerasAdam)
        slots = {"momentum": getattr(self.inner, "momentums", None) or
                 getattr(self.inner, "_momentums", None) or [],
                 "velocity": getattr(self.inner, "_velocities", None) or []}  # fmt: skip
        for n, v in self.vars.items():
            i = self.inner._get_variable_index(v)
            rec.opt_state[n] = {k: self._np(vs[i]) for k, vs in slots.items() if vs}
        rec.opt_steps = int(self._np(self.inner.iterations))
        for v in self.vars.values():
            v.value.grad = None
        out = self._run_layers(torch.from_numpy(np.ascontiguousarray(x, np.float32)), rec.acts)
        rec.acts["output"] = out
        yt = torch.from_numpy(np.ascontiguousarray(y, np.float32) if self.mse else
                              np.ascontiguousarray(y))  # fmt: skip
        loss = self.loss_fn(yt, out)
        scaled = self.opt.scale_loss(loss)
        scaled.backward()
        grads = [v.value.grad for v in self.vars.values()]
        is_lso = self.opt is not self.inner
        scale = float(self._np(self.opt.dynamic_scale)) if is_lso else 1.0
        rec.scale = scale
        # Keras's unscaling (LossScaleOptimizer: ops.divide(g, scale), float32), done only
        # when every gradient is finite (a non-finite step is skipped with its grads as they are)
        finite = all(bool(torch.isfinite(g).all()) for g in grads)
        div = torch.tensor(scale, dtype=torch.float32)
        rec.grads = {n: to_np(g / div if is_lso and finite else g)
                     for n, g in zip(self.vars, grads, strict=True)}  # fmt: skip
        rec.unscaled = finite
        before = rec.opt_steps
        with torch.no_grad():
            self.opt.apply(grads, list(self.vars.values()))
        rec.skipped = int(self._np(self.inner.iterations)) == before
        if is_lso:
            rec.scale_after = float(self._np(self.opt.dynamic_scale))
            rec.tracker = int(self._np(self.opt.step_counter))
        rec.loss = loss.detach()
        rec.act_grads = {k: v.grad for k, v in rec.acts.items()
                         if getattr(v, "grad", None) is not None}  # fmt: skip
        rec.acts = {k: v.detach() for k, v in rec.acts.items()}
        rec.params_after = {n: self._np(v) for n, v in self.vars.items()}
        return rec


def compare_keras(
    model: Any, inputs: Any, targets: Any, *, loss: str = "cross_entropy",
    optimizer: str = "sgd", lr: float = 0.01, momentum: float = 0.0, beta_1: float = 0.9,
    beta_2: float = 0.999, epsilon: float = 1e-7, weight_decay: float = 0.004,
    loss_scale: Mapping[str, Any] | None = None, steps: int = 1,
    policy: Policy | str | None = None,
) -> ModelReport:  # fmt: skip
    """Run ``steps`` Keras 3 training steps (torch backend) and the same in fpemu; compare every
    tensor of every step.

    Args:
        model: a built ``keras.Sequential`` of the layers ``from_keras`` supports, under a
            ``mixed_bfloat16`` or ``mixed_float16`` dtype policy. It is trained in place
            (pass a copy to keep it).
        inputs, targets: one batch (arrays) used every step, or lists of batches.
        loss: ``"cross_entropy"``: ``SparseCategoricalCrossentropy(from_logits=True)`` on
            integer labels; ``"mse"``: ``MeanSquaredError()`` on float targets (fpemu's
            ``keras_mse``).
        optimizer: ``"sgd"`` (Keras ``SGD``, ``nesterov=False``: ``lr``, ``momentum``;
            ``KerasSGD``), ``"adam"`` or ``"adamw"`` (``lr``, ``beta_1``, ``beta_2``,
            ``epsilon`` with Keras's defaults, and ``weight_decay`` for AdamW; ``KerasAdam``).
            torch's CPU float32 ``sqrt`` is not correctly rounded, so Adam's updates may differ
            by an ulp (``optimizer``, within its bound).
        loss_scale: None (the default for ``mixed_float16`` is ``{}``), or keyword arguments of
            ``keras.optimizers.LossScaleOptimizer`` (``initial_scale``,
            ``dynamic_growth_steps``); the twin uses fpemu's ``KerasLossScaleOptimizer``.
        steps: training steps (>= 1).
        policy: the fpemu policy (default: the preset of the model's dtype policy).

    Returns:
        A ``fpemu.validate.twin.model_report.ModelReport`` (no autocast audit).

    Raises:
        ValueError: a bad argument (named, with what is accepted), or an unsupported model.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss={loss!r}: accepted {', '.join(LOSSES)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r}: accepted {', '.join(OPTIMIZERS)}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r}: accepted an int >= 1")
    if not (isinstance(lr, (int, float)) and math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr={lr!r}: accepted a finite number > 0")
    if not (isinstance(momentum, (int, float)) and 0.0 <= momentum <= 1.0):
        raise ValueError(f"momentum={momentum!r}: accepted a number in [0, 1]")
    dtype_policy = getattr(getattr(model, "dtype_policy", None), "name", "float32")
    if dtype_policy not in MIXED:
        raise ValueError(f"compare_keras: the model's dtype policy is {dtype_policy!r}; "
                         f"accepted {', '.join(MIXED)} (float32 runs differ from fpemu in "
                         "summation order everywhere: no bit-exact claim to check)")  # fmt: skip
    twin = from_keras(model, policy=policy)
    pol = twin.policy
    if loss_scale is None and dtype_policy == "mixed_float16":
        loss_scale = {}
    bad = sorted(set(loss_scale or {}) - {"initial_scale", "dynamic_growth_steps"})
    if bad:
        raise ValueError(f"loss_scale={loss_scale!r}: unknown keys {bad}; accepted "
                         "initial_scale, dynamic_growth_steps")  # fmt: skip
    hyper = ({"lr": lr, "momentum": momentum} if optimizer == "sgd" else
             {"lr": lr, "beta_1": beta_1, "beta_2": beta_2, "epsilon": epsilon,
              **({"weight_decay": weight_decay} if optimizer == "adamw" else {})})  # fmt: skip
    opt = _optimizer(optimizer, twin.parameters(), hyper)  # checks the hyperparameters
    shadow = _optimizer(optimizer, [Tensor(p.data.copy(), p.fmt, requires_grad=True)
                                    for p in twin.parameters()], hyper)  # fmt: skip
    xs, ys = _batches(inputs, steps, "inputs"), _batches(targets, steps, "targets")
    out_shape = tuple(getattr(model, "output_shape", (None,))[1:])
    for xb, yb in zip(xs, ys, strict=True):
        if loss == "mse" and yb.shape != (len(xb), *out_shape):
            raise ValueError(
                f"targets: shape {yb.shape} for loss='mse'; accepted float "
                f"targets shaped like the model's output, {(len(xb), *out_shape)}"
            )
    trainer = KerasTrainer(model, loss=loss, optimizer=optimizer, hyper=hyper,
                           scaler=loss_scale)  # fmt: skip
    scaler = (KerasLossScaleOptimizer(**loss_scale) if loss_scale is not None
              else get_scaler("none"))  # fmt: skip
    report = ModelReport(title="compare_keras", settings={
        "model": type(model).__name__, "policy": pol.name, "dtype_policy": dtype_policy,
        "loss_scale": native(loss_scale), "loss": loss, "optimizer": f"keras {optimizer}",
        "hyperparameters": native(hyper), "steps": steps,
        "keras": f"{trainer.keras.__version__} (torch {trainer.torch.__version__})"})  # fmt: skip
    for s in range(steps):
        before = {n: p.data.copy() for n, p in twin.named_parameters()}
        t = trainer.step(xs[s], ys[s])
        f = _fpemu_step(twin, opt, scaler, xs[s], ys[s], _LOSS_KEY[loss], get_policy(pol),
                        scale_key="dynamic_scale", tracker_key="step_counter")  # fmt: skip
        StepChecker(report, s, twin, pol, t, f, before, shadow, _LOSS_KEY[loss]).run()
        report.trace.append({"step": s, "loss_keras": float(to_np(t.loss)),
                             "loss_fpemu": float(f["loss"].item()), "scale": t.scale,
                             "skipped_keras": t.skipped,
                             "skipped_fpemu": f["skipped"]})  # fmt: skip
    return report


def _batches(v: Any, steps: int, arg: str) -> list[np.ndarray]:
    items = list(v) if isinstance(v, (list, tuple)) else [v]
    if not items:
        raise ValueError(f"{arg} is empty; accepted: one batch or a list of batches")
    return [to_np(items[i % len(items)]) for i in range(steps)]


def _fpemu_step(twin: GraphModule, opt: Optimizer, scaler: Any, x: np.ndarray, y: np.ndarray,
                loss: str, pol: Policy, **state_keys: str) -> dict[str, Any]:  # fmt: skip
    """One fpemu training step of the twin; ``state_keys`` name the scaler's state fields for
    :func:`apply_update` (Keras's: ``dynamic_scale``, ``step_counter``)."""
    with np.errstate(all="ignore"):
        opt.zero_grad()
        out = twin(x)
        with autocast(pol):
            lv = loss_value(loss, out, y)
        scale = scaler.get_scale()
        scaler.scale(lv).backward()
        done = apply_update(opt, scaler, **state_keys)
    return {"acts": dict(twin.outputs), "loss": lv, "scale": scale, **done}


def _optimizer(name: str, params: list[Tensor], hyper: Mapping[str, Any]) -> Optimizer:
    if name == "sgd":
        return KerasSGD(params, lr=hyper["lr"], momentum=hyper["momentum"])
    return KerasAdam(params, lr=hyper["lr"], beta_1=hyper["beta_1"], beta_2=hyper["beta_2"],
                     epsilon=hyper["epsilon"], weight_decay=hyper.get("weight_decay"))  # fmt: skip


__all__ = ["KerasAdam", "KerasSGD", "KerasTrainer", "compare_keras"]
