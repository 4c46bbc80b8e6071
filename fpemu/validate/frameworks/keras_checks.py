"""Keras 3: ``keras.optimizers.LossScaleOptimizer`` (torch backend) against fpemu's
:class:`~fpemu.amp.scaling.KerasLossScaleOptimizer`.

Both sides get the same scaled gradients (coefficients times the current scale, in float32,
with an inf or NaN injected on scripted steps) and apply them to a float32 variable through
SGD with learning rate 1. After every ``apply`` the scale (float32 bits), ``step_counter``,
``iterations`` and the variable (bits: the unscaled gradient's effect) must be identical.

Keras is imported lazily with ``KERAS_BACKEND=torch`` (unless a backend was already chosen).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fpemu.amp.scaling import KerasLossScaleOptimizer
from fpemu.validate.frameworks.report import CheckResult
from fpemu.validate.frameworks.torch_scaler import Script, _s, mismatches32

ScalerFactory = Callable[..., Any]

#: Scripted sequences for Keras (o = finite, i = inf, n = NaN).
KERAS_SCRIPTS: tuple[Script, ...] = (
    _s("growth every 3 steps, halve on inf and NaN", "ooiooonoooooi", dynamic_growth_steps=3),
    _s("no floor: 4 infs from 2.0", "iiiio", initial_scale=2.0, dynamic_growth_steps=2),
    _s("near float32 max: scaled grads overflow, scale oscillates", "oooo", initial_scale=2.0**126,
       dynamic_growth_steps=1),
    _s("dynamic_growth_steps=1", "oioo", initial_scale=4.0, dynamic_growth_steps=1),
    _s("defaults (2**15, 2000)", "oion"),
)  # fmt: skip


def import_keras() -> Any:
    """Import Keras 3 on the torch backend.

    Raises:
        ImportError: Keras is not installed.
        RuntimeError: Keras was already imported with another backend.
    """
    os.environ.setdefault("KERAS_BACKEND", "torch")
    import keras  # noqa: PLC0415 - optional dependency, heavy to import

    if keras.backend.backend() != "torch":
        raise RuntimeError(
            f"keras uses the {keras.backend.backend()!r} backend; set KERAS_BACKEND=torch "
            "before importing keras"
        )
    return keras


def _np(x: Any) -> np.ndarray:
    v = getattr(x, "value", x)
    if hasattr(v, "detach"):
        return np.asarray(v.detach().cpu().numpy())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return np.asarray(v)


def default_factory(**kw: Any) -> Any:
    """fpemu's Keras 3 scaler for Keras's keywords."""
    return KerasLossScaleOptimizer(**kw)


class _Var:
    """A float32 variable updated by SGD(lr=1) from its unscaled ``grad``."""

    def __init__(self, values: np.ndarray) -> None:
        self.w = values.astype(np.float32).copy()
        self.grad: np.ndarray | None = None


class _SGD1:
    def __init__(self, var: _Var) -> None:
        self.params = [var]

    def step(self, *args: Any, **kwargs: Any) -> None:
        var = self.params[0]
        assert var.grad is not None
        var.w = (var.w - var.grad.astype(np.float32) * np.float32(1.0)).astype(np.float32)


def _keras_trace(keras: Any, script: Script, coeffs: np.ndarray) -> list[dict[str, Any]]:
    v = keras.Variable(np.ones(coeffs.shape, np.float32))
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=1.0),
                                              **script.options)  # fmt: skip
    opt.build([v])
    trace = []
    for event in script.events:
        g = _scaled(coeffs, float(_np(opt.dynamic_scale)), event)
        opt.apply([keras.ops.convert_to_tensor(g)], [v])
        trace.append({"scale": float(_np(opt.dynamic_scale)),
                      "step_counter": int(_np(opt.step_counter)),
                      "iterations": int(_np(opt.iterations)),
                      "variable": _np(v).copy()})  # fmt: skip
    return trace


def _scaled(coeffs: np.ndarray, scale: float, event: str) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        g = (coeffs * np.float32(scale)).astype(np.float32)
    if event != "ok":
        g[0] = np.inf if event == "inf" else np.nan
    return g


def _fpemu_trace(make_scaler: ScalerFactory, script: Script, coeffs: np.ndarray
                 ) -> list[dict[str, Any]]:  # fmt: skip
    k = make_scaler(**script.options)
    var = _Var(np.ones(coeffs.shape, np.float32))
    opt = _SGD1(var)
    trace = []
    for event in script.events:
        var.grad = _scaled(coeffs, float(k.get_scale()), event)
        with np.errstate(over="ignore", invalid="ignore"):
            k.step(opt)
            k.update()
        sd = k.state_dict()
        trace.append({"scale": float(k.get_scale()), "step_counter": int(sd["step_counter"]),
                      "iterations": int(sd["iterations"]), "variable": var.w.copy()})  # fmt: skip
    return trace


def check_keras_scaler(
    scripts: Sequence[Script] = KERAS_SCRIPTS, *, make_scaler: ScalerFactory = default_factory
) -> list[CheckResult]:
    """Keras 3 LossScaleOptimizer traces vs fpemu's, plus defaults and the ``dynamic=False``
    error. Returns a single ``skipped`` result when Keras is unavailable."""
    try:
        keras = import_keras()
    except (ImportError, RuntimeError) as exc:
        return [CheckResult("keras", "Keras 3 LossScaleOptimizer", "skipped", notes=[str(exc)])]
    coeffs = np.array([1.5, -0.25, 3.0], dtype=np.float32)
    out = []
    for script in scripts:
        ta = _keras_trace(keras, script, coeffs)
        tb = _fpemu_trace(make_scaler, script, coeffs)
        res = CheckResult("keras", f"LossScaleOptimizer script: {script.name}", "agree",
                          compared=len(script.events),
                          data={"final_scale": ta[-1]["scale"]})  # fmt: skip
        for i, (a, b) in enumerate(zip(ta, tb, strict=True)):
            bad = _first_field(a, b)
            if bad is not None:
                res.status = "differ"
                res.witness = {"step": str(i), "event": script.events[i], "field": bad,
                               "keras": _show(a[bad]), "fpemu": _show(b[bad])}  # fmt: skip
                break
        out.append(res)
    out.append(_check_defaults(keras, make_scaler))
    out.append(_check_static_error(keras, make_scaler))
    return out


def _first_field(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    for key in ("scale", "step_counter", "iterations", "variable"):
        if key == "scale":
            same = not mismatches32(np.asarray(a[key]), np.asarray(b[key])).any()
        elif key == "variable":
            same = not mismatches32(a[key], b[key]).any()
        else:
            same = a[key] == b[key]
        if not same:
            return key
    return None


def _show(v: Any) -> str:
    if isinstance(v, np.ndarray):
        codes = v.astype(np.float32).view(np.uint32)
        return "[" + ", ".join(f"0x{int(u):08x}" for u in codes) + "]"
    if isinstance(v, float):
        with np.errstate(over="ignore"):
            return f"{v!r} (0x{int(np.float32(v).view(np.uint32)):08x})"
    return repr(v)


def _check_defaults(keras: Any, make_scaler: ScalerFactory) -> CheckResult:
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD())
    theirs = {"initial_scale": float(opt.initial_scale),
              "dynamic_growth_steps": int(opt.dynamic_growth_steps)}  # fmt: skip
    sd = make_scaler().state_dict()
    ours = {"initial_scale": float(sd["initial_scale"]),
            "dynamic_growth_steps": int(sd["dynamic_growth_steps"])}  # fmt: skip
    res = CheckResult("keras", "LossScaleOptimizer defaults", "agree", compared=2,
                      notes=[f"keras {theirs}"])  # fmt: skip
    if theirs != ours:
        res.status = "differ"
        res.witness = {"keras": repr(theirs), "fpemu": repr(ours)}
    return res


def _check_static_error(keras: Any, make_scaler: ScalerFactory) -> CheckResult:
    def outcome(fn: Callable[[], Any]) -> BaseException | None:
        try:
            fn()
        except Exception as exc:  # the exception is the datum
            return exc
        return None

    et = outcome(lambda: keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False))
    ef = outcome(lambda: make_scaler(dynamic=False))
    ok = (et is None and ef is None) or (
        et is not None and ef is not None and isinstance(ef, type(et))
        and str(ef).startswith(str(et)))  # fmt: skip
    res = CheckResult("keras", "misuse: LossScaleOptimizer(dynamic=False)",
                      "agree" if ok else "differ", compared=1)  # fmt: skip
    desc = [("keras", et), ("fpemu", ef)]
    if ok:
        res.notes.append("no error" if et is None else f"{type(et).__name__}: {et}")
    else:
        res.witness = {k: "no error" if e is None else f"{type(e).__name__}: {e}" for k, e in desc}
    return res
