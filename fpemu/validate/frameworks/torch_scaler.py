"""GradScaler: ``torch.amp.GradScaler("cpu")`` against fpemu's :class:`TorchGradScaler`.

Three kinds of comparison, all driven identically on both sides through a small adapter:

* scripted gradient sequences (each iteration's gradient finite, or with an inf or NaN
  injected into one parameter's grad): after every ``update()`` the scale (float32 bits), the
  growth tracker, found-inf, whether the optimizer stepped, the unscaled gradients (bits) and
  the state_dict must be identical;
* misuse: each wrong call sequence must raise the same exception type with the same message
  (fpemu may append the accepted values to a message; that is noted);
* a real short fp16 training run in torch (CPU autocast), whose per-step gradients are replayed
  through fpemu's scaler.

The fpemu scaler is built by a factory (``make_scaler``), so tests can inject a wrong one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.amp.scaling import TorchGradScaler
from fpemu.validate.frameworks.report import CheckResult

#: Builds the fpemu scaler from torch's constructor keywords.
ScalerFactory = Callable[..., Any]

#: One iteration of a script: "ok", "inf" or "nan" (injected into params[0].grad[0]).
Event = str


@dataclass(frozen=True)
class Script:
    """A named gradient sequence and the scaler's constructor keywords."""

    name: str
    events: tuple[Event, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()

    @property
    def options(self) -> dict[str, Any]:
        """The constructor keywords as a dict."""
        return dict(self.kwargs)


def _s(name: str, events: str, **kw: Any) -> Script:
    table = {"o": "ok", "i": "inf", "n": "nan"}
    return Script(name, tuple(table[c] for c in events), tuple(kw.items()))


#: The scripted sequences (o = finite, i = inf, n = NaN).
SCRIPTS: tuple[Script, ...] = (
    _s("growth every 3, backoff on inf and NaN", "oooooioooonoooooooiio", growth_interval=3),
    _s("growth_interval=1", "ooooiooo", growth_interval=1, init_scale=4.0),
    _s("odd factors (3.0, 0.3) round in float32", "oooiioooioo", growth_interval=2,
       growth_factor=3.0, backoff_factor=0.3, init_scale=1000.0),
    _s("growth refused at float32 overflow", "oooooo", growth_interval=1, init_scale=2.0**125),
    _s("160 infs: scale through float32 subnormals to 0", "i" * 160 + "oo",
       init_scale=2.0**-1, growth_interval=2),
    _s("growth_interval=0 never grows", "oooioo", growth_interval=0),
    _s("defaults (2**16, 2000)", "oioo"),
)  # fmt: skip


# -- adapters: the same calls on torch objects and on fpemu objects ------------------------------
class _TorchSide:
    def __init__(self) -> None:
        import torch  # noqa: PLC0415 - optional dependency

        self.torch = torch

    def scaler(self, **kw: Any) -> Any:
        return self.torch.amp.GradScaler("cpu", **kw)

    def optimizer(self, dtype: str = "float32", *, n: int = 2, grads: bool = True) -> Any:
        t = self.torch
        dt = getattr(t, dtype)
        params = [t.nn.Parameter(t.ones(3, dtype=dt)) for _ in range(n)]
        opt = t.optim.SGD(params, lr=0.0)
        opt.fpemu_steps = 0

        def hook(o: Any, *_: Any) -> None:
            o.fpemu_steps += 1

        opt.register_step_post_hook(hook)
        opt.fpemu_has_grads = grads
        return opt

    def backward(self, scaler: Any, opt: Any, coeffs: np.ndarray) -> None:
        t = self.torch
        opt.zero_grad(set_to_none=True)
        if not opt.fpemu_has_grads:
            scaler.scale(t.tensor(1.0))
            return
        params = opt.param_groups[0]["params"]
        c = t.from_numpy(coeffs).to(params[0].dtype)
        loss = sum((p * c).sum() for p in params)
        scaler.scale(loss).backward()

    def inject(self, opt: Any, event: Event) -> None:
        if event != "ok":
            g = opt.param_groups[0]["params"][0].grad
            g[0] = float("inf") if event == "inf" else float("nan")

    def grads(self, opt: Any) -> list[np.ndarray]:
        return [p.grad.detach().float().numpy().copy() for p in opt.param_groups[0]["params"]]

    def steps(self, opt: Any) -> int:
        return int(opt.fpemu_steps)

    def found_inf(self, scaler: Any, opt: Any) -> bool:
        found = scaler._found_inf_per_device(opt)  # private, but the only way to read it
        return bool(sum(float(v.item()) for v in found.values()))

    def scale_value(self, scaler: Any) -> float:
        return float(scaler.get_scale())


class _FpemuParam:
    def __init__(self, grad: np.ndarray | None) -> None:
        self.grad = grad


class _FpemuOpt:
    def __init__(self, params: list[_FpemuParam], has_grads: bool, dtype: str) -> None:
        self.params, self.has_grads, self.dtype, self.n_steps = params, has_grads, dtype, 0

    def step(self, *args: Any, **kwargs: Any) -> None:
        self.n_steps += 1


class _FpemuSide:
    def __init__(self, make_scaler: ScalerFactory) -> None:
        self.make_scaler = make_scaler

    def scaler(self, **kw: Any) -> Any:
        return self.make_scaler(**kw)

    def optimizer(self, dtype: str = "float32", *, n: int = 2, grads: bool = True) -> Any:
        return _FpemuOpt([_FpemuParam(None) for _ in range(n)], grads, dtype)

    def backward(self, scaler: Any, opt: Any, coeffs: np.ndarray) -> None:
        for p in opt.params:
            p.grad = None
        loss_scaled = np.asarray(scaler.scale(np.float32(1.0)))
        if not opt.has_grads:
            return
        dt = np.float16 if opt.dtype == "float16" else np.float32
        s = np.float32(loss_scaled)  # d(loss * s)/dp = s * c, one float32 product, as torch
        with np.errstate(over="ignore", invalid="ignore"):
            for p in opt.params:
                p.grad = (coeffs.astype(np.float32) * s).astype(dt)

    def inject(self, opt: Any, event: Event) -> None:
        if event != "ok":
            opt.params[0].grad[0] = np.inf if event == "inf" else np.nan

    def grads(self, opt: Any) -> list[np.ndarray]:
        return [np.asarray(p.grad, dtype=np.float32).copy() for p in opt.params]

    def steps(self, opt: Any) -> int:
        return int(opt.n_steps)

    def found_inf(self, scaler: Any, opt: Any) -> bool:
        st = scaler._states.get(id(opt))
        return bool(st is not None and st.found_inf)

    def scale_value(self, scaler: Any) -> float:
        return float(scaler.get_scale())


def default_factory(**kw: Any) -> Any:
    """fpemu's scaler for torch's keywords: ``TorchGradScaler(device="cpu", **kw)``."""
    return TorchGradScaler(device="cpu", **kw)


# -- scripted sequences ---------------------------------------------------------------------
def _f32hex(v: float) -> str:
    with np.errstate(over="ignore"):
        return f"{v!r} (0x{int(np.float32(v).view(np.uint32)):08x})"


def _run_script(side: Any, script: Script, coeffs: np.ndarray) -> list[dict[str, Any]]:
    scaler = side.scaler(**script.options)
    opt = side.optimizer()
    trace = []
    for event in script.events:
        side.backward(scaler, opt, coeffs)
        side.inject(opt, event)
        before = side.steps(opt)
        scaler.step(opt)
        found = side.found_inf(scaler, opt)
        grads = side.grads(opt)
        scaler.update()
        trace.append({
            "scale": side.scale_value(scaler),
            "growth_tracker": int(scaler.state_dict()["_growth_tracker"]),
            "found_inf": found,
            "stepped": side.steps(opt) > before,
            "grads": np.concatenate([g.reshape(-1) for g in grads]).view(np.uint32).tolist(),
            "state_dict": dict(scaler.state_dict()),
        })  # fmt: skip
    return trace


def _first_trace_difference(ta: list[dict[str, Any]], tb: list[dict[str, Any]]
                            ) -> tuple[int, str, Any, Any] | None:  # fmt: skip
    for i, (a, b) in enumerate(zip(ta, tb, strict=True)):
        for key in ("scale", "growth_tracker", "found_inf", "stepped", "grads", "state_dict"):
            va, vb = a[key], b[key]
            if key == "scale":
                same = np.float32(va).view(np.uint32) == np.float32(vb).view(np.uint32)
            elif key == "state_dict":
                same = _same_state(va, vb)
            else:
                same = va == vb
            if not same:
                return i, key, va, vb
    return None


def _same_state(a: dict[str, Any], b: dict[str, Any]) -> bool:
    if set(a) != set(b):
        return False
    for k, va in a.items():
        vb = b[k]
        if type(va) is not type(vb) and not (isinstance(va, float) and isinstance(vb, float)):
            return False
        if va != vb and not (va != va and vb != vb):  # NaN == NaN for this purpose
            return False
    return True


def check_scripts(
    scripts: Sequence[Script] = SCRIPTS, *, make_scaler: ScalerFactory = default_factory
) -> list[CheckResult]:
    """One result per script: the per-update traces of torch and fpemu must be identical."""
    coeffs = np.array([1.5, -0.25, 3.0], dtype=np.float32)
    torch_side, ours = _TorchSide(), _FpemuSide(make_scaler)
    out = []
    for script in scripts:
        ta = _run_script(torch_side, script, coeffs)
        tb = _run_script(ours, script, coeffs)
        diff = _first_trace_difference(ta, tb)
        name = f"GradScaler script: {script.name}"
        res = CheckResult("scaler", name, "agree" if diff is None else "differ",
                          compared=len(script.events),
                          data={"final_scale": ta[-1]["scale"],
                                "skipped": sum(not t["stepped"] for t in ta)})  # fmt: skip
        if diff is not None:
            i, key, va, vb = diff
            fmt = _f32hex if key == "scale" else repr
            res.witness = {"update": str(i), "event": script.events[i], "field": key,
                           "torch": fmt(va), "fpemu": fmt(vb)}  # fmt: skip
        out.append(res)
    return out


# -- misuse -----------------------------------------------------------------------------------
def _m_unscale_twice(side: Any) -> None:
    s, o = side.scaler(), side.optimizer()
    side.backward(s, o, np.ones(3, np.float32))
    s.unscale_(o)
    s.unscale_(o)


def _m_unscale_after_step(side: Any) -> None:
    s, o = side.scaler(), side.optimizer()
    side.backward(s, o, np.ones(3, np.float32))
    s.step(o)
    s.unscale_(o)


def _m_step_twice(side: Any) -> None:
    s, o = side.scaler(), side.optimizer()
    side.backward(s, o, np.ones(3, np.float32))
    s.step(o)
    s.step(o)


def _m_step_before_scale(side: Any) -> None:
    s, o = side.scaler(), side.optimizer()
    s.step(o)


def _m_unscale_before_scale(side: Any) -> None:
    s, o = side.scaler(), side.optimizer()
    s.unscale_(o)


def _m_update_before_scale(side: Any) -> None:
    side.scaler().update()


def _m_update_without_step(side: Any) -> None:
    s, o = side.scaler(), side.optimizer()
    side.backward(s, o, np.ones(3, np.float32))
    s.update()


def _m_closure(side: Any) -> None:
    s, o = side.scaler(), side.optimizer()
    side.backward(s, o, np.ones(3, np.float32))
    s.step(o, closure=lambda: None)


def _m_fp16_grads(side: Any) -> None:
    s, o = side.scaler(), side.optimizer("float16")
    side.backward(s, o, np.ones(3, np.float32))
    s.unscale_(o)


def _m_no_grads(side: Any) -> None:
    s, o = side.scaler(), side.optimizer(grads=False)
    side.backward(s, o, np.ones(3, np.float32))
    s.step(o)


def _m_growth_factor(side: Any) -> None:
    side.scaler(growth_factor=0.9)


def _m_backoff_factor(side: Any) -> None:
    side.scaler(backoff_factor=1.0)


def _m_load_empty(side: Any) -> None:
    side.scaler().load_state_dict({})


def _m_init_scale_overflow(side: Any) -> None:
    s, o = side.scaler(init_scale=1e39), side.optimizer()
    side.backward(s, o, np.ones(3, np.float32))


#: Misuse scenarios: (name, function run with each side's adapter).
MISUSES: tuple[tuple[str, Callable[[Any], None]], ...] = (
    ("unscale_ twice before update", _m_unscale_twice),
    ("unscale_ after step", _m_unscale_after_step),
    ("step twice before update", _m_step_twice),
    ("step before any scale()", _m_step_before_scale),
    ("unscale_ before any scale()", _m_unscale_before_scale),
    ("update before any scale()", _m_update_before_scale),
    ("update without step or unscale_", _m_update_without_step),
    ("step(closure=...)", _m_closure),
    ("unscale_ of float16 grads", _m_fp16_grads),
    ("step with every grad None", _m_no_grads),
    ("growth_factor=0.9", _m_growth_factor),
    ("backoff_factor=1.0", _m_backoff_factor),
    ("load_state_dict({})", _m_load_empty),
    ("init_scale=1e39 (float32 overflow)", _m_init_scale_overflow),
)


def _outcome(fn: Callable[[Any], None], side: Any) -> BaseException | None:
    try:
        fn(side)
    except Exception as exc:  # the exception is the datum
        return exc
    return None


def check_misuse(*, make_scaler: ScalerFactory = default_factory) -> list[CheckResult]:
    """One result per misuse: the same exception type (fpemu's may be a subclass) and message.

    A fpemu message that starts with torch's and appends more (the accepted values) agrees, with
    a note.
    """
    import warnings  # noqa: PLC0415

    torch_side, ours = _TorchSide(), _FpemuSide(make_scaler)
    out = []
    for name, fn in MISUSES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch may warn along the way; errors matter here
            et = _outcome(fn, torch_side)
            ef = _outcome(fn, ours)
        tt = "no error" if et is None else f"{type(et).__name__}: {et}"
        tf = "no error" if ef is None else f"{type(ef).__name__}: {ef}"
        same_type = (et is None and ef is None) or (
            et is not None and ef is not None and isinstance(ef, type(et)))  # fmt: skip
        same_msg = et is None or (ef is not None and str(ef).startswith(str(et)))
        ok = same_type and same_msg
        res = CheckResult("scaler", f"misuse: {name}", "agree" if ok else "differ", compared=1)
        if not ok:
            res.witness = {"torch": tt, "fpemu": tf}
        elif et is not None:
            res.notes.append(tt)
            if ef is not None and str(ef) != str(et):
                res.notes.append(f"fpemu appends: {str(ef)[len(str(et)) :].strip()}")
            if type(ef) is not type(et):
                res.notes.append(f"fpemu raises {type(ef).__name__}, a subclass")
        else:
            res.notes.append("no error on either side")
        out.append(res)
    return out


# -- a real training run, replayed ---------------------------------------------------------------
def torch_training_trace(
    *, steps: int = 40, init_scale: float = 2.0**24, growth_interval: int = 5, seed: int = 0
) -> tuple[list[list[np.ndarray]], list[dict[str, Any]]]:
    """Train a small MLP in torch (CPU autocast float16 + GradScaler); return each step's scaled
    fp32 parameter gradients (as left by backward) and torch's trace after each update."""
    import torch as torch_module  # noqa: PLC0415 - optional dependency

    torch: Any = torch_module  # used untyped: the check reads torch's results

    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=init_scale, growth_interval=growth_interval)
    gen = torch.Generator().manual_seed(seed + 1)
    grads_per_step, trace = [], []
    for _ in range(steps):
        x = torch.randn(32, 16, generator=gen)
        y = torch.randint(0, 4, (32,), generator=gen)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        grads_per_step.append([p.grad.detach().numpy().copy() for p in model.parameters()])
        scaler.step(opt)
        found = bool(sum(float(v.item()) for v in scaler._found_inf_per_device(opt).values()))
        unscaled = [p.grad.detach().numpy().copy() for p in model.parameters()]
        scaler.update()
        trace.append({"scale": float(scaler.get_scale()), "found_inf": found,
                      "growth_tracker": int(scaler.state_dict()["_growth_tracker"]),
                      "unscaled": unscaled})  # fmt: skip
    return grads_per_step, trace


def check_training_replay(
    *, steps: int = 40, make_scaler: ScalerFactory = default_factory, seed: int = 0
) -> CheckResult:
    """Replay a real torch fp16 training run's gradients through fpemu's scaler."""
    init, interval = 2.0**24, 5
    grads, trace = torch_training_trace(steps=steps, init_scale=init, growth_interval=interval,
                                        seed=seed)  # fmt: skip
    s = make_scaler(init_scale=init, growth_interval=interval)
    res = CheckResult("scaler", "GradScaler on a real fp16 training run (CPU autocast)", "agree",
                      compared=steps)  # fmt: skip
    for i, (g, t) in enumerate(zip(grads, trace, strict=True)):
        s.scale(np.float32(1.0))
        work = [a.copy() for a in g]
        found = s.unscale_(work)
        s.update()
        ours = {"scale": float(s.get_scale()), "found_inf": bool(found),
                "growth_tracker": int(s.state_dict()["_growth_tracker"])}  # fmt: skip
        for key, theirs in (("scale", t["scale"]), ("found_inf", t["found_inf"]),
                            ("growth_tracker", t["growth_tracker"])):  # fmt: skip
            if ours[key] != theirs:
                res.status = "differ"
                res.witness = {"step": str(i), "field": key, "torch": repr(theirs),
                               "fpemu": repr(ours[key])}  # fmt: skip
                return res
        for j, (a, b) in enumerate(zip(t["unscaled"], work, strict=True)):
            if mismatches32(a, b).any():
                k = int(np.flatnonzero(mismatches32(a, b))[0])
                res.status = "differ"
                res.witness = {
                    "step": str(i),
                    "field": f"unscaled grad of param {j}",
                    "torch": f"0x{int(a.reshape(-1)[k : k + 1].view(np.uint32)[0]):08x}",
                    "fpemu": f"0x{int(b.reshape(-1)[k : k + 1].view(np.uint32)[0]):08x}",
                }
                return res  # fmt: skip
    res.data = {"skipped": sum(t["found_inf"] for t in trace), "final_scale": trace[-1]["scale"]}
    res.notes.append(f"{res.data['skipped']} of {steps} steps skipped; scale "
                     f"{init:g} -> {trace[-1]['scale']:g}")  # fmt: skip
    return res


def mismatches32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bit-pattern mismatch mask of two float32 arrays (NaN == NaN)."""
    a32, b32 = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    return np.asarray(
        (a32.view(np.uint32) != b32.view(np.uint32)) & ~(np.isnan(a32) & np.isnan(b32))
    )


def check_grad_scaler(*, make_scaler: ScalerFactory = default_factory) -> list[CheckResult]:
    """Every GradScaler check: scripts, misuse, and the replayed training run."""
    return [*check_scripts(make_scaler=make_scaler), *check_misuse(make_scaler=make_scaler),
            check_training_replay(make_scaler=make_scaler)]  # fmt: skip
