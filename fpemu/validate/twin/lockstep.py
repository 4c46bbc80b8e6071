"""``compare_torch(mode="lockstep")``: every op of every step recomputed by fpemu from torch's
own inputs, so each difference is found where it arises.

In the default ``mode="independent"`` fpemu trains its own copy of the model: once one
bfloat16 output rounds the other way (two float32 summation orders), every later tensor
differs, and each is recomputed from torch's inputs to tell ``propagated`` from a new
difference. In lockstep fpemu's side of each check *is* that recomputation:

* each forward op runs on torch's input activations and parameters; the loss on torch's
  output, scaled by torch's scale;
* each backward op runs from torch's upstream gradient; an activation's gradient sums its
  consumers', a parameter's gradient likewise, in the policy's gradient format;
* the step starts from torch's parameters, optimizer state and scaler state (scale and growth
  tracker before the step); fpemu's own scaler unscales fpemu's gradients, decides the skip and
  updates the scale, and fpemu's optimizer applies the update.

The checks and their causes are ``StepChecker``'s: a differing tensor is bounded by the op's own
numerics (there is no ``propagated`` in the forward and backward passes: every input is
torch's). A parameter that differs after the update is ``propagated`` when the same update from
torch's gradients is bit-identical (its gradient differed), else bounded as ``optimizer``.

Lockstep answers "is every op of torch's step what fpemu computes from the same inputs?" at
about the cost of one fpemu step; it does not show how far two independent runs drift apart
(``mode="independent"`` does, at the cost of recomputing every tensor after they part).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, autocast
from fpemu.formats import Format
from fpemu.nn.graph import GraphModule, Param, Ref
from fpemu.nn.optim import Optimizer
from fpemu.validate.twin.checker import StepChecker, loss_value
from fpemu.validate.twin.torch_run import TorchStep, exact_leaf
from fpemu.validate.twin.update_checks import apply_update, load_framework_state


@dataclass
class LocalTensor:
    """fpemu's side of one node in lockstep: the op's output on torch's inputs, and the
    gradient of that output summed over its consumers' backward ops (None if none)."""

    data: np.ndarray
    fmt: Format
    grad: np.ndarray | None
    grad_fmt: Format


def sync_state(opt: Optimizer, scaler: Any, twin: GraphModule, t: TorchStep,
               scaler_state: dict[str, Any] | None) -> None:  # fmt: skip
    """Start fpemu's step from torch's: parameters, optimizer state, scaler state."""
    load_framework_state(opt, [n for n, _ in twin.named_parameters()], t)
    if scaler_state is not None and scaler.is_enabled():
        scaler.load_state_dict(scaler_state)


def lockstep_step(ck: StepChecker, opt: Optimizer, scaler: Any, loss: str,
                  pol: Policy) -> dict[str, Any]:  # fmt: skip
    """fpemu's side of one step, every op on torch's inputs (the checker's recomputations,
    cached in ``ck`` so that its explanations reuse them); the same keys as the independent
    step's record."""
    t, twin = ck.t, ck.twin
    acts: dict[str, LocalTensor] = {}
    nodes = [n for n in twin.nodes if n.op != "input" and n.name != "output"]
    for node in nodes:
        _, out = ck._local_graph(node)
        acts[node.name] = LocalTensor(np.asarray(out.data), out.fmt, None, out.fmt)
    for node in nodes:
        if t.act_grads.get(node.name) is None:
            continue
        leaf = exact_leaf(*ck.arr("acts", node.name), requires_grad=True)
        got = ck._local_grad(Ref(node.name), leaf)
        if got is not None:
            acts[node.name].grad, acts[node.name].grad_fmt = np.asarray(got[0]), leaf.grad_fmt
    lv = ck.local_loss  # computed with the output's gradient (the loss's own backward)
    if lv is None:  # no gradient reached the output: compute the loss alone
        with np.errstate(all="ignore"), autocast(pol):
            lv = loss_value(loss, exact_leaf(*ck.arr("acts", "output")), t.target)
    names = [n for n, _ in twin.named_parameters()]
    with np.errstate(all="ignore"):
        for p, n in zip(opt.params, names, strict=True):
            leaf = exact_leaf(t.params_before[n], "float32", requires_grad=True)
            leaf.grad_fmt = pol.grad_format
            got = ck._local_grad(Param(n), leaf)
            # a copy: the scaler unscales p.grad in place, and got[0] may be the checker's
            # cached gradient, which the explanations read later (it was unscaled twice)
            p.grad = None if got is None else np.array(got[0], copy=True)
        scale = scaler.get_scale()
        scaler.scale(lv)  # initialises the scale on the first step, as in a real step
        done = apply_update(opt, scaler)
    return {"acts": acts, "loss": lv, "scale": scale, **done}


__all__ = ["LocalTensor", "lockstep_step", "sync_state"]
