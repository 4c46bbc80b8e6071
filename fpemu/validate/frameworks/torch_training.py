"""Training side by side: the same MLP, weights and batches in torch (CPU autocast + GradScaler)
and in fpemu (the matching preset + :class:`~fpemu.amp.scaling.TorchGradScaler`).

Per step the loss, the scale and whether the step was skipped are compared. The scale and skip
sequences must be identical. Losses may drift apart: fpemu's matmul accumulation model is not
torch's BLAS (the summation order differs, so a low-precision logit can round the other way;
torch's SGD rounds twice where its kernels lack FMA, the DEFAULT CPU build), and a one-ulp
difference in a weight grows over steps. The largest loss difference is reported in units of
the low format's ulp at the loss, and the step-0 logits (same weights, same batch: no drift yet)
are compared to show where the first difference comes from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, get_policy
from fpemu.bits import ulp
from fpemu.validate.frameworks.report import CheckResult, Status
from fpemu.validate.frameworks.torch_scaler import ScalerFactory, default_factory

#: (preset, whether a GradScaler is used) for each side-by-side run.
RUNS: tuple[tuple[str, bool], ...] = (("torch_cpu_bf16", False), ("torch_cpu_fp16", True))


def _torch_net(model: Any) -> Any:
    import torch  # noqa: PLC0415 - optional dependency

    layers: list[Any] = []
    for i, lin in enumerate(model.layers):
        t = torch.nn.Linear(lin.weight.shape[1], lin.weight.shape[0])
        with torch.no_grad():
            t.weight.copy_(torch.from_numpy(np.asarray(lin.weight.data, np.float32)))
            t.bias.copy_(torch.from_numpy(np.asarray(lin.bias.data, np.float32)))
        layers.append(t)
        if i < len(model.layers) - 1:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def _ulps(a: np.ndarray, b: np.ndarray, fmt: str) -> np.ndarray:
    u = np.asarray(ulp(np.abs(np.asarray(a, np.float64)), fmt), dtype=np.float64)
    return np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)) / u


def side_by_side(
    policy: Policy | str,
    *,
    scaled: bool,
    steps: int = 60,
    hidden: tuple[int, ...] = (32,),
    batch_size: int = 64,
    lr: float = 0.1,
    init_scale: float = 2.0**24,
    growth_interval: int = 5,
    seed: int = 0,
    make_scaler: ScalerFactory = default_factory,
) -> dict[str, Any]:
    """Train both sides; return per-step ``loss``/``scale``/``skipped`` lists and step-0 logits.

    Raises:
        ValueError: the policy's compute format is not bfloat16/float16.
    """
    import torch as torch_module  # noqa: PLC0415 - optional dependency

    torch: Any = torch_module  # used untyped: the check reads torch's results

    from fpemu.amp.scaling import get_scaler  # noqa: PLC0415
    from fpemu.nn import MLP  # noqa: PLC0415
    from fpemu.training.datasets import get_dataset  # noqa: PLC0415
    from fpemu.training.loop import make_optimizer, train_step  # noqa: PLC0415

    pol = get_policy(policy)
    low = pol.compute.name
    if low not in ("bfloat16", "float16"):
        raise ValueError(f"policy {pol.name!r} computes in {low}; need bfloat16 or float16")
    tlow = {"bfloat16": torch.bfloat16, "float16": torch.float16}[low]
    data = get_dataset("spirals", seed=seed)
    model = MLP([data.features, *hidden, data.classes], policy=pol, seed=seed)
    net = _torch_net(model)
    opt_f = make_optimizer("sgd", model, lr=lr, momentum=0.0)
    opt_t = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.0)
    stepped = [0]
    opt_t.register_step_post_hook(lambda *_: stepped.__setitem__(0, stepped[0] + 1))
    kw = {"init_scale": init_scale, "growth_interval": growth_interval}
    sc_f = make_scaler(**kw) if scaled else get_scaler("none")
    sc_t = torch.amp.GradScaler("cpu", **kw) if scaled else None

    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.x_train))
    batches = [order[(i * batch_size) % len(order) :][:batch_size] for i in range(steps)]
    batches = [b if len(b) == batch_size else order[:batch_size] for b in batches]
    x0 = data.x_train[batches[0]]
    with torch.autocast("cpu", dtype=tlow):
        logits_t = net(torch.from_numpy(x0)).float().detach().numpy()
    logits_f = np.asarray(model(x0).data, np.float32)

    out: dict[str, Any] = {"low": low, "torch": [], "fpemu": [], "logits_differ": [],
                           "logits0": (logits_t, logits_f)}  # fmt: skip
    for i, idx in enumerate(batches):
        x, y = data.x_train[idx], data.y_train[idx]
        logits_f = np.asarray(model(x).data, np.float32)  # before the step: same weights
        rec, _ = train_step(model, opt_f, sc_f, x, y, step=i)
        out["fpemu"].append((float(rec.loss), float(rec.scale), bool(rec.skipped)))
        opt_t.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=tlow):
            logits = net(torch.from_numpy(x))
            loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y))
        out["logits_differ"].append(int((logits.float().detach().numpy() != logits_f).sum()))
        before, scale = stepped[0], float(sc_t.get_scale()) if sc_t is not None else 1.0
        if sc_t is not None:
            sc_t.scale(loss).backward()
            sc_t.step(opt_t)
            sc_t.update()
        else:
            loss.backward()
            opt_t.step()
        out["torch"].append((float(loss.item()), scale, stepped[0] == before))
        w_diff = _weight_diff(model, net)
        if "weights1" not in out and stepped[0] > before:  # the first applied update
            out["weights1"] = w_diff
        if "first_weight_diff_step" not in out and w_diff[0]:
            out["first_weight_diff_step"] = i
    out.setdefault("weights1", (0, 0, 0.0))
    return out


def _weight_diff(model: Any, net: Any) -> tuple[int, int, float]:
    """(differing, total, max ulps in float32) between the two models' weights."""
    differ, total, worst = 0, 0, 0.0
    for (_, p), q in zip(model.named_parameters(), net.parameters(), strict=True):
        a = np.asarray(p.data, np.float32).reshape(-1)
        b = q.detach().numpy().reshape(-1)
        d = _ulps(b, a, "float32")
        differ, total = differ + int((d > 0).sum()), total + a.size
        worst = max(worst, float(d.max()))
    return differ, total, worst


def check_training(
    runs: tuple[tuple[str, bool], ...] = RUNS,
    *,
    steps: int = 60,
    max_ulps: float | None = None,
    make_scaler: ScalerFactory = default_factory,
    seed: int = 0,
) -> list[CheckResult]:
    """One result per run. ``differ`` when the scale or skip sequences differ (they are exact:
    the same finite/non-finite gradients give the same decisions); ``agree`` when every loss is
    bit-identical; otherwise ``finding`` with the largest loss difference and its explanation.

    The losses themselves are reported, not judged by default: once one low-precision logit
    rounds the other way (matmul accumulation order) the two trainings drift apart, and no bound
    on that drift follows from the numerics. ``max_ulps`` (ulps of the low format) makes a
    larger loss difference ``differ`` for a caller who wants a threshold of their own.
    """
    out = []
    for preset, scaled in runs:
        r = side_by_side(preset, scaled=scaled, steps=steps, make_scaler=make_scaler, seed=seed)
        low = r["low"]
        lt = np.array([s[0] for s in r["torch"]], np.float64)
        lf = np.array([s[0] for s in r["fpemu"]], np.float64)
        d = _ulps(lt, lf, low)
        d32 = _ulps(lt, lf, "float32")
        w_differ, w_total, w_ulps = r["weights1"]
        lg_t, lg_f = r["logits0"]
        ld = _ulps(lg_t, lg_f, low)
        name = f"training side by side: {preset}" + (" + GradScaler" if scaled else "")
        res = CheckResult("training", name, "agree", compared=steps)
        res.data = {"max_loss_diff_ulps": float(d.max()), "worst_step": int(d.argmax()),
                    "first_loss_diff_step": int(np.flatnonzero(d)[0]) if d.any() else None,
                    "skipped": sum(s[2] for s in r["torch"]),
                    "final_scale": r["torch"][-1][1],
                    "logits0_differ": int((ld > 0).sum()), "logits0_total": int(ld.size),
                    "logits0_max_ulps": float(ld.max()),
                    "max_loss_diff_ulps_float32": float(d32.max()),
                    "weights_after_step0_differ": w_differ, "weights_total": w_total,
                    "weights_after_step0_max_ulps_float32": w_ulps}  # fmt: skip
        ldiff = np.array(r["logits_differ"]) > 0
        res.data["first_logits_diff_step"] = int(np.flatnonzero(ldiff)[0]) if ldiff.any() else None
        res.data["loss_differs_with_identical_logits"] = int(((d > 0) & ~ldiff).sum())
        res.data["first_weight_diff_step"] = r.get("first_weight_diff_step")
        same_w = (
            len(ldiff)
            if r.get("first_weight_diff_step") is None
            else (r["first_weight_diff_step"] + 1)
        )  # logits of steps 0..k use identical weights
        res.data["logits_differ_same_weights"] = int(sum(r["logits_differ"][:same_w]))
        res.data["logits_same_weights_total"] = int(same_w * lg_t.size)
        pol = get_policy(preset)
        res.data["fpemu_accumulation"] = f"{pol.acc_model} (acc {pol.acc.name})"
        for i, (a, b) in enumerate(zip(r["torch"], r["fpemu"], strict=True)):
            for j, field in ((1, "scale"), (2, "skipped")):
                if a[j] != b[j]:
                    res.status = "differ"
                    res.witness = {"step": str(i), "field": field, "torch": repr(a[j]),
                                   "fpemu": repr(b[j])}  # fmt: skip
                    break
            if res.status == "differ":
                break
        dd = res.data
        summary = (
            f"largest loss difference {dd['max_loss_diff_ulps']:.3g} ulp({low}) "
            f"({dd['max_loss_diff_ulps_float32']:.3g} ulp(float32)) at step "
            f"{dd['worst_step']}; first loss difference at step "
            f"{dd['first_loss_diff_step']}; {dd['skipped']} skipped steps; step-0 logits: "
            f"{dd['logits0_differ']} of {dd['logits0_total']} differ, by at most "
            f"{dd['logits0_max_ulps']:.3g} ulp({low}); weights after the first update: "
            f"{w_differ} of {w_total} differ, by at most {w_ulps:.3g} ulp(float32); logits "
            f"(each side with its own weights) first differ at step "
            f"{dd['first_logits_diff_step']}; weights first differ after the update of step "
            f"{dd['first_weight_diff_step']}; on {dd['loss_differs_with_identical_logits']} "
            "steps the losses differ although the logits are bit-identical"
        )
        res.notes.append(summary)
        if res.status != "differ":
            if max_ulps is not None and dd["max_loss_diff_ulps"] > max_ulps:
                res.status = "differ"
                i = dd["worst_step"]
                res.witness = {"step": str(i), "torch loss": repr(lt[i]), "fpemu loss": repr(lf[i])}
            elif d.any():
                res.status = "finding"
                res.notes.append(_explain(dd, max_ulps, low))
        out.append(res)
    return out


def _explain(dd: dict[str, Any], max_ulps: float | None, low: str) -> str:
    """Why the losses differ, from the measured facts."""
    why = []
    if dd["loss_differs_with_identical_logits"]:
        why.append(
            "the float32 cross-entropy itself (torch's log_softmax + nll_loss reduction order vs "
            "fpemu's fused cross_entropy) rounds differently on identical logits"
        )
    if dd["logits_differ_same_weights"]:
        why.append(
            f"with bit-identical weights and inputs, {dd['logits_differ_same_weights']} of "
            f"{dd['logits_same_weights_total']} {low} logits still differ: near-ties of the "
            "low-precision linear layers round the other way because torch's CPU GEMM "
            "accumulates in float32 in its own order while fpemu's accumulation model "
            f"{dd['fpemu_accumulation']} sums differently (the expected BLAS "
            "accumulation-order divergence)"
        )
    if dd["weights_after_step0_differ"]:
        why.append(
            "the first applied update already differs in a few weights (compare the SGD update "
            "check)"
        )
    elif dd["first_weight_diff_step"] is not None:
        why.append(
            f"the weights first differ after the update of step {dd['first_weight_diff_step']}: "
            "that step's gradients differed (they follow the logits and the float32 loss "
            "backward; the SGD update rule itself is compared in its own check)"
        )
    if dd["first_weight_diff_step"] is not None:
        why.append("from then on, weights and logits drift further apart")
    reasons = "; ".join(why) if why else "no cause identified"
    within = "" if max_ulps is None else f" (within the threshold of {max_ulps:g} ulp({low}))"
    return f"scale and skipped steps identical; losses differ{within}: {reasons}"


def fpemu_sgd_update(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    """One :class:`fpemu.nn.optim.SGD` step (momentum 0) on float32 weights ``w``."""
    from fpemu.nn.optim import SGD  # noqa: PLC0415
    from fpemu.nn.tensor import Tensor  # noqa: PLC0415

    p = Tensor(w.copy(), "float32", requires_grad=True)
    SGD([p], lr=lr).step([g.copy()])
    return np.asarray(p.data, np.float32)


def check_sgd_update(
    *, n: int = 4096, lr: float = 0.1, seed: int = 0,
    update: Callable[[np.ndarray, np.ndarray, float], np.ndarray] = fpemu_sgd_update,
) -> CheckResult:  # fmt: skip
    """torch's SGD update (``torch.optim.SGD``, momentum 0, CPU) vs fpemu's (``update``,
    default :func:`fpemu_sgd_update`) on the same float32 weights and gradients, bit for bit.

    torch's step is ``param.add_(grad, alpha=-lr)``, which the CPU kernel computes as one fused
    multiply-add in its AVX2/AVX512 builds and with two roundings in its DEFAULT build
    (``ATEN_CPU_CAPABILITY``). The check reports which rounding torch uses: ``agree`` when fpemu
    matches it, ``finding`` when torch rounds twice and fpemu equals the fused model bit for bit,
    ``differ`` otherwise.
    """
    import torch  # noqa: PLC0415 - optional dependency

    rng = np.random.default_rng(seed)
    w = rng.standard_normal(n).astype(np.float32)
    g = (rng.standard_normal(n) * 0.01).astype(np.float32)
    pt = torch.nn.Parameter(torch.from_numpy(w.copy()))
    pt.grad = torch.from_numpy(g.copy())
    torch.optim.SGD([pt], lr=lr, momentum=0.0).step()
    theirs = pt.detach().numpy()
    ours = np.asarray(update(w.copy(), g.copy(), lr), np.float32)
    lr32 = np.float32(lr)
    fused = (w.astype(np.float64) - np.float64(lr32) * g.astype(np.float64)).astype(np.float32)
    two = (w - lr32 * g).astype(np.float32)
    models = {"fused (one rounding)": fused, "two roundings": two}
    torch_model = next((k for k, v in models.items() if np.array_equal(v, theirs)), "neither")
    bad = theirs.view(np.uint32) != ours.view(np.uint32)
    ours_fused = bool(np.array_equal(ours.view(np.uint32), fused.view(np.uint32)))
    # torch's add_ kernel is Vectorized fmadd: one FMA instruction where ATen's kernels are built
    # for AVX2/AVX512 (ATEN_CPU_CAPABILITY), a*b+c with two roundings in the DEFAULT build.
    # fpemu models the fused kernel; a two-rounding torch is a known, bit-exactly explained
    # difference (a finding), not a defect, when fpemu equals the fused model bit for bit.
    explained = bool(bad.any()) and torch_model == "two roundings" and ours_fused
    status: Status = "finding" if explained else ("differ" if bad.any() else "agree")
    capability = _cpu_capability()
    res = CheckResult(
        "training",
        "SGD update w - lr*g (float32, CPU)",
        status,
        compared=n,
        data={
            "torch_rounding": torch_model,
            "mismatches": int(bad.sum()),
            "torch_cpu_capability": capability,
        },
    )
    res.notes.append(f"torch's update rounds: {torch_model} (CPU capability {capability})")
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        res.witness = {"w": f"0x{int(w[i:i+1].view(np.uint32)[0]):08x}",
                       "g": f"0x{int(g[i:i+1].view(np.uint32)[0]):08x}", "lr": repr(lr),
                       "torch": f"0x{int(theirs[i:i+1].view(np.uint32)[0]):08x}",
                       "fpemu": f"0x{int(ours[i:i+1].view(np.uint32)[0]):08x}"}  # fmt: skip
        res.notes.append(f"{int(bad.sum())} of {n} updates differ by one float32 rounding")
    if explained:
        res.notes.append(
            "fpemu's SGD models torch's fused multiply-add kernel (AVX2/AVX512 builds); this "
            "torch runs the kernel without FMA, and every torch result equals the two-rounding "
            "model bit for bit while every fpemu result equals the fused one"
        )
    return res


def _cpu_capability() -> str:
    """torch's ATen CPU kernel build in use (DEFAULT, AVX2, AVX512, ...)."""
    import torch  # noqa: PLC0415 - optional dependency

    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except AttributeError:  # pragma: no cover - torch before 2.1
        return "unknown"
