"""GradScaler's CPU kernels: ``_amp_foreach_non_finite_check_and_unscale_``, ``_amp_update_scale_``,
and ``full`` (how GradScaler makes its scale, growth tracker and ``found_inf`` tensors).

torch 2.13 CPU (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp), checked bit for bit in
tests/test_ops_scaler.py:

* unscale: every gradient element times ``inv_scale`` in float32 (float16/bfloat16 gradients
  widened to float32 and rounded back once), left untouched when ``inv_scale == 1``;
  ``found_inf`` becomes 1.0 when any element of any gradient is inf or NaN, else keeps its value;
* update: ``found_inf != 0`` (NaN counts as nonzero): ``scale * backoff`` (float32 times double,
  rounded to float32 once), tracker 0; else the tracker counts up and on reaching
  ``growth_interval`` the scale becomes ``float32(scale * growth)`` unless that is inf, tracker 0.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> call = Call("aten._amp_update_scale_.default",
...             (np.float32(65536.0), np.int32(1999), np.float32(0.0), 2.0, 0.5, 2000), {},
...             ("float32", "int32"))
>>> [o.value.item() for o in update_scale(call)]
[131072.0, 0]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, exact, register
from fpemu.validate.ops._num import dtype, fmt, is_float, to

__all__ = ["full", "unscale", "update_scale"]

_LOW = ("float16", "bfloat16")


def _one(x: Any, name: str, kind: str) -> np.ndarray:
    a = np.asarray(x)
    if a.size != 1 or fmt(a) != kind:
        raise TypeError(
            f"{name}: expected a one-element {kind} tensor, got {a.dtype}{list(a.shape)}"
        )
    return a


@register("aten._amp_foreach_non_finite_check_and_unscale_.default")
def unscale(call: Call) -> list[Out | None]:
    """Each gradient times ``inv_scale`` (float32), then ``found_inf`` (1.0 if any non-finite)."""
    grads = call.arg(0, "self")
    if not isinstance(grads, (list, tuple)):
        raise TypeError(f"self: expected a list of gradient tensors, got {type(grads).__name__}")
    found = _one(call.arg(1, "found_inf"), "found_inf", "float32")
    inv = _one(call.arg(2, "inv_scale"), "inv_scale", "float32").reshape(()).item()
    outs: list[Out | None] = []
    bad = False
    for i, g in enumerate(grads):
        name = fmt(g)
        if name not in ("float32", "float64", *_LOW):
            raise TypeError(f"self[{i}]: expected a floating gradient, got {g.dtype}")
        bad = bad or not bool(np.isfinite(g.astype(np.float64)).all())
        if inv == 1.0:  # the kernel returns the value itself, without multiplying
            outs.append(exact(np.array(g, copy=True)))
            continue
        with np.errstate(over="ignore", invalid="ignore"):
            if name == "float64":  # the double kernel: double times float(inv_scale)
                outs.append(exact(g * np.float64(np.float32(inv))))
            else:
                outs.append(exact(to(g.astype(np.float32) * np.float32(inv), name)))
    outs.append(exact(np.full_like(found, 1.0) if bad else np.array(found, copy=True)))
    return outs


@register("aten._amp_update_scale_.default")
def update_scale(call: Call) -> list[Out | None]:
    """The new ``scale`` and ``growth_tracker`` (the two tensors the op writes)."""
    scale = _one(call.arg(0, "self"), "self", "float32")
    tracker = _one(call.arg(1, "growth_tracker"), "growth_tracker", "int32")
    found = _one(call.arg(2, "found_inf"), "found_inf", "float32").reshape(()).item()
    growth = float(call.arg(3, "scale_growth_factor"))
    backoff = float(call.arg(4, "scale_backoff_factor"))
    interval = int(call.arg(5, "growth_interval"))
    s = float(scale.reshape(()).item())
    new_scale, new_tracker = s, int(tracker.reshape(()).item())
    with np.errstate(over="ignore"):
        if found != 0.0:  # C's ``if (*found_inf_ptr)``: NaN is true
            new_scale, new_tracker = float(np.float32(s * backoff)), 0
        else:
            new_tracker += 1
            if new_tracker == interval:
                grown = np.float32(s * growth)  # float32 times double, rounded once
                if np.isfinite(grown):
                    new_scale = float(grown)
                new_tracker = 0
    return [exact(np.full_like(scale, new_scale)), exact(np.full_like(tracker, new_tracker))]


@register("aten.full.default")
def full(call: Call) -> list[Out | None]:
    """A tensor of ``fill_value``: a double rounded to float32 first, then to a low format
    (``Scalar::to<Half>`` goes through float), an integer or bool converted exactly."""
    size = tuple(int(n) for n in call.arg(0, "size"))
    value = call.arg(1, "fill_value")
    out = call.out_dtypes[0]
    if not isinstance(value, (bool, int, float)):
        raise TypeError(f"fill_value: expected a Python number, got {type(value).__name__}")
    if is_float(out):
        v = np.float64(value)
        v32 = v if out == "float64" else np.float32(v)
        if out in ("float64", "float32"):
            return [exact(np.full(size, v32, dtype(out)))]
        return [exact(np.full(size, to(np.float32(v32), out), dtype(out)))]
    return [exact(np.full(size, value, dtype(out)))]
