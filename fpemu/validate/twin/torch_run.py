"""The torch half of ``fpemu.validate.compare_torch``: one training step of a traced model
that records every node's output and output gradient, the loss, the unscaled parameter gradients,
the GradScaler state and the parameters before and after the step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fpemu.formats import get_format
from fpemu.nn.tensor import Tensor

_FORMATS = {"torch.float32": "float32", "torch.bfloat16": "bfloat16",
            "torch.float16": "float16", "torch.float64": "float64"}  # fmt: skip


def fmt_of(t: Any) -> str:
    """The fpemu format name of a torch tensor's (or NumPy array's) dtype.

    >>> import numpy as np
    >>> fmt_of(np.zeros(1, np.float32))
    'float32'
    """
    d = str(t.dtype)
    if d in _FORMATS:
        return _FORMATS[d]
    if d in ("float32", "float64"):
        return d
    raise ValueError(f"dtype {d} is not a floating format fpemu compares "
                     f"(accepted: {', '.join(_FORMATS)})")  # fmt: skip


def to_np(t: Any) -> np.ndarray:
    """A torch tensor (any float dtype: bf16/fp16 widened exactly to float32) or array as NumPy."""
    if isinstance(t, np.ndarray):
        return t
    if hasattr(t, "detach"):
        import torch  # noqa: PLC0415 - optional dependency

        t = t.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            return np.asarray(t.float().numpy())  # a new tensor already: no copy needed
        return np.asarray(t.numpy()).copy()
    return np.asarray(t)


def exact_leaf(data: np.ndarray, fmt: str, *, requires_grad: bool = False) -> Tensor:
    """A leaf Tensor holding ``data``, whose values are already exact in ``fmt`` (torch's
    tensors, widened exactly): ``Tensor(data, fmt)`` without its rounding pass, which would be
    the identity (only a NaN payload could change, and NaN payloads are never compared).

    >>> exact_leaf(np.float32([1.5]), "bfloat16").fmt.name
    'bfloat16'
    """
    t = Tensor.derived(data, get_format(fmt), (), "leaf")
    t.requires_grad = requires_grad
    return t


@dataclass
class TorchStep:
    """What one torch step did (arrays in NumPy; activations kept as torch tensors)."""

    acts: dict[str, Any] = field(default_factory=dict)
    act_grads: dict[str, Any] = field(default_factory=dict)
    loss: Any = None
    target: Any = None
    grads: dict[str, np.ndarray] = field(default_factory=dict)
    params_before: dict[str, np.ndarray] = field(default_factory=dict)
    params_after: dict[str, np.ndarray] = field(default_factory=dict)
    scale: float = 1.0
    scale_after: float = 1.0
    tracker: int = 0
    #: the scaler's growth tracker before the step (``tracker`` is after it)
    tracker_before: int = 0
    skipped: bool = False
    #: ``grads`` are divided by ``scale`` (torch's ``unscale_`` always; Keras's
    #: LossScaleOptimizer only when every gradient is finite)
    unscaled: bool = True
    #: the optimizer's per-parameter state before the step (momentum_buffer, exp_avg, ...)
    opt_state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    opt_steps: int = 0


class TorchTrainer:
    """Trains ``net`` (eval mode) one step at a time with fx-recorded activations."""

    def __init__(self, net: Any, *, loss: str, optimizer: str, hyper: Mapping[str, Any],
                 autocast: Any, grad_scaler: Mapping[str, Any] | None) -> None:  # fmt: skip
        import torch  # noqa: PLC0415 - optional dependency
        import torch.fx  # noqa: PLC0415

        self.torch = torch
        self.net = net
        self.traced = torch.fx.symbolic_trace(net)
        self._recorder: _Recorder | None = None
        self.loss = loss
        self.autocast = autocast
        params = list(net.parameters())
        h = hyper
        self.opt: Any
        if optimizer == "sgd":
            self.opt = torch.optim.SGD(params, lr=h["lr"], momentum=h["momentum"],
                                       weight_decay=h["weight_decay"], foreach=False)  # fmt: skip
        else:
            cls = torch.optim.Adam if optimizer == "adam" else torch.optim.AdamW
            self.opt = cls(params, lr=h["lr"], betas=h["betas"], eps=h["eps"],
                           weight_decay=h["weight_decay"], foreach=False)  # fmt: skip
        self.stepped = 0
        self.opt.register_step_post_hook(lambda *_: self._count())
        #: the parameters after the last step: the next step's parameters before it (only this
        #: trainer changes them), so they are copied once per step, not twice
        self._last: dict[str, np.ndarray] | None = None
        self.scaler = (torch.amp.GradScaler("cpu", **grad_scaler)
                       if grad_scaler is not None else None)  # fmt: skip

    def _count(self) -> None:
        self.stepped += 1

    def _params(self) -> dict[str, np.ndarray]:
        out = {n: p.detach().numpy().copy() for n, p in self.net.named_parameters()}
        for a in out.values():
            a.setflags(write=False)  # shared by two steps' records: nothing may write them
        return out

    def step(self, x: np.ndarray, y: np.ndarray) -> TorchStep:
        """One step on the batch ``(x, y)``."""
        torch = self.torch
        rec = TorchStep(params_before=self._last if self._last is not None else self._params(),
                        target=y)  # fmt: skip
        for n, p in self.net.named_parameters():
            st = self.opt.state.get(p, {})
            rec.opt_state[n] = {k: v.detach().numpy().copy() for k, v in st.items()
                                if k != "step" and hasattr(v, "detach")}  # fmt: skip
            if "step" in st:
                rec.opt_steps = int(st["step"])
        self.opt.zero_grad(set_to_none=True)
        xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))
        yt = torch.from_numpy(np.ascontiguousarray(y))
        if self._recorder is None:  # one interpreter for every step (its set-up is not free)
            self._recorder = _Recorder(self.traced, rec.acts)
        interp = self._recorder
        interp.store = rec.acts
        ctx = (torch.autocast(self.autocast[0], dtype=_dtype(torch, self.autocast[1]))
               if self.autocast is not None else _Null())  # fmt: skip
        with ctx:
            out = interp.run(xt)
            rec.acts["output"] = out
            if self.loss == "cross_entropy":
                loss = torch.nn.functional.cross_entropy(out, yt)
            else:
                loss = torch.nn.functional.mse_loss(out, yt.to(torch.float32))
        rec.loss = loss.detach()
        before = self.stepped
        if self.scaler is not None:
            rec.scale = float(self.scaler.get_scale())
            st0 = self.scaler.state_dict()  # {} when the scaler is disabled
            rec.tracker_before = int(st0.get("_growth_tracker", 0))
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.opt)
            rec.grads = self._grads()
            self.scaler.step(self.opt)
            self.scaler.update()
            st = self.scaler.state_dict()
            rec.scale_after, rec.tracker = float(st["scale"]), int(st["_growth_tracker"])
        else:
            loss.backward()
            rec.grads = self._grads()
            self.opt.step()
        rec.skipped = self.stepped == before
        rec.act_grads = {k: v.grad for k, v in rec.acts.items()
                         if hasattr(v, "grad") and v.grad is not None}  # fmt: skip
        rec.acts = {k: v.detach() for k, v in rec.acts.items()}
        rec.params_after = self._last = self._params()
        return rec

    def _grads(self) -> dict[str, np.ndarray]:
        return {n: p.grad.detach().numpy().copy() for n, p in self.net.named_parameters()
                if p.grad is not None}  # fmt: skip


def _dtype(torch: Any, d: Any) -> Any:
    if isinstance(d, str):
        return {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
                "float16": torch.float16}[d]  # fmt: skip
    return d


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _recorder_base() -> Any:
    import torch.fx  # noqa: PLC0415 - optional dependency

    return torch.fx.Interpreter


class _Recorder:
    """Runs a ``torch.fx.GraphModule`` node by node, keeping each node's output (and asking
    autograd to keep its gradient)."""

    def __init__(self, traced: Any, store: dict[str, Any]) -> None:
        base = _recorder_base()
        outer = self

        class _Interp(base):  # type: ignore[misc, valid-type]
            def run_node(self, n: Any) -> Any:
                out = super().run_node(n)
                if n.op in ("call_module", "call_function", "call_method", "placeholder"):
                    if hasattr(out, "requires_grad") and out.requires_grad:
                        out.retain_grad()
                    outer.store[n.name] = out
                return out

        self.store = store
        self.interp = _Interp(traced)

    def run(self, x: Any) -> Any:
        return self.interp.run(x)
