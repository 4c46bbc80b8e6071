"""A step's update, after its gradients: applying it (``apply_update``, the scaler and the
optimizer, for the fpemu side of ``compare_keras``), loading the
framework's state into an optimizer (``load_framework_state``), and the checks of the loss
scaler's state and each updated parameter (``StepChecker.scaler_check`` and
``StepChecker.params`` delegate here).

A parameter that differs is explained by the same update computed by fpemu from torch's own
parameters, optimizer state and gradients (the shadow optimizer): bit-identical means the
difference came from the gradients or an earlier step (``propagated``); otherwise the update's
own roundings are bounded (``optimizer``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.nn.optim import Optimizer
from fpemu.training.loop import GradView
from fpemu.validate.twin import causes
from fpemu.validate.twin.model_report import compare_arrays

#: ``ck`` below is the step's ``fpemu.validate.twin.checker.StepChecker`` (not imported: it imports
#: this module)
StepChecker = Any

#: An update ``w + d`` computed from the same inputs with a few roundings placed differently
#: (fused or separate multiply-adds, a sqrt within one ulp) differs by a few ulps of ``d``
#: (u = 2**-24 each) plus the final rounding of ``w + d``: ``k u |d| + ulp(w)``, with ``k``
#: counting the float32 operations between the inputs and ``d`` (Adam: lerp, mul, addcmul,
#: sqrt, div, add, mul, div: 8).
OPTIMIZER_UPDATE_ROUNDINGS = 8.0


def apply_update(opt: Optimizer, scaler: Any, *, scale_key: str = "scale",
                 tracker_key: str = "_growth_tracker") -> dict[str, Any]:  # fmt: skip
    """After the backward pass: ``scaler`` unscales ``opt``'s gradients, decides the skip,
    steps ``opt`` and updates itself. Returns the unscaled gradients, the skip flag and the
    scaler's state after the step (``scale_key``, ``tracker_key``: its ``state_dict`` names,
    torch's by default). Floating-point warnings are the caller's to silence."""
    view = GradView(opt)
    scaler.unscale_(view)
    grads = view.grads()
    scaler.step(view)
    rec = scaler.update()
    st = scaler.state_dict() if scaler.is_enabled() else {}
    return {"grads": grads, "skipped": bool(rec.skipped) if rec is not None else False,
            "scale_after": float(st.get(scale_key, 1.0)),
            "tracker": int(st.get(tracker_key, 0))}  # fmt: skip


def load_framework_state(opt: Optimizer, names: list[str], t: Any) -> None:
    """``opt`` starts from the framework's parameters, optimizer state and step count before
    step ``t`` (a ``TorchStep``); the parameters are the record's read-only arrays: fpemu's
    optimizers replace a parameter's array, never write into it."""
    for i, (p, n) in enumerate(zip(opt.params, names, strict=True)):
        p.data = t.params_before[n]
        p.grad = None
        opt.state[i] = {k: v.copy() for k, v in t.opt_state.get(n, {}).items()}
    opt.steps = t.opt_steps


def scaler_check(ck: StepChecker) -> None:
    """Scale, growth tracker and skip flag after the step, torch beside fpemu."""
    t, f = ck.t, ck.f
    tv = np.array([t.scale_after, t.tracker, float(t.skipped)], np.float64)
    fv = np.array([f["scale_after"], f["tracker"], float(f["skipped"])], np.float64)
    c = ck.add("scaler", "scale, growth tracker, skipped", tv, "float64", fv, "float64")
    if c.exact:
        return
    # The scaler's rule is exact arithmetic on (scale, tracker, found_inf): it can only
    # differ legitimately when the two sides found different gradients non-finite.
    grads_differ = any(not g.exact for g in ck.r.select(step=ck.s, kind="grad"))
    if t.skipped != f["skipped"] and grads_differ:
        c.cause, c.explained = "propagated", True
        c.note = "the gradients differ and only one side found an inf/NaN"
    else:
        c.cause, c.explained = "unexplained", False
        c.note = (
            f"the same skip decision gave torch (scale, tracker, skipped) = "
            f"{tv.tolist()} and fpemu {fv.tolist()}"
        )
    ck.mark(c)


def shadow_step(ck: StepChecker) -> None:
    """The same update from torch's own parameters, optimizer state and gradients, in
    ``ck.shadow`` (run once, when a parameter first differs)."""
    if ck._shadow_done:
        return
    ck._shadow_done = True
    sh = ck.shadow
    names = [n for n, _ in ck.twin.named_parameters()]
    load_framework_state(sh, names, ck.t)  # torch's parameters and optimizer state
    if not ck.t.skipped:
        with np.errstate(all="ignore"):
            sh.step([ck.t.grads.get(n) for n in names])


def params_check(ck: StepChecker) -> None:
    """Each updated parameter, torch beside fpemu, with its cause."""
    for (name, p), q in zip(ck.twin.named_parameters(), ck.shadow.params, strict=True):
        tv = ck.t.params_after[name]
        c = ck.add("param", name, tv, "float32", np.asarray(p.data), p.fmt.name)
        if c.exact:
            continue
        shadow_step(ck)
        lc = compare_arrays(tv, np.asarray(q.data), "float32", "float32")
        c.local_ulps = lc["max_ulps"]
        if lc["identical"] == lc["compared"]:
            c.cause, c.explained = "propagated", True
            c.note = (
                "fpemu's update of torch's parameters, state and gradients is "
                "bit-identical: the difference comes from "
                f"{ck.upstream or 'earlier steps'}"
            )
            continue
        c.cause = "optimizer"
        step = np.abs(tv.astype(np.float64) - ck.t.params_before[name].astype(np.float64))
        bound = OPTIMIZER_UPDATE_ROUNDINGS * causes.U32 * step + causes._ulp(tv, "float32")
        c.explained, c.bound_ulps = causes.within(tv, np.asarray(q.data), bound, "float32")
        c.note = (
            f"the same update from torch's parameters, optimizer state and gradients "
            f"differs by {c.local_ulps:g} ulp, within {OPTIMIZER_UPDATE_ROUNDINGS:g} "
            "roundings of the update: torch's CPU kernels fuse multiply-adds (lerp_, "
            "addcmul_, add_ with alpha) on AVX2/AVX512 builds and not on the default "
            "one, and its float32 sqrt is not correctly rounded"
        )
