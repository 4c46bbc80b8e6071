"""The fused optimizer kernels: ``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_`` (float32;
Adam/AdamW on float16/bfloat16 tensors in _fused_low.py).

torch 2.13 CPU (aten/src/ATen/native/cpu/FusedAdamKernel.cpp, FusedSGDKernel.cpp): each tensor
is walked in SIMD vectors (16 floats on avx512, 8 on avx2 and default) and its last
``numel % 16`` (``% 8``) elements in a scalar loop, which GCC auto-vectorises 8 floats at a time
on avx512 (those 8 behave like the vector loop): only the last ``numel % 8`` elements take the
scalar formulas; threads split at multiples of 16 floats, so this holds for any thread count
and (measured) any alignment. The two loops write the same formulas, but GCC contracts
different multiply-adds into FMAs in each (measured bit for bit, tests in
tests/test_ops_optim_fused.py under ATEN_CPU_CAPABILITY default, avx2, avx512):

=====================  ==================================  ==================================
step                   vector loop (avx2/avx512)           scalar loop (avx2/avx512)
=====================  ==================================  ==================================
Adam weight decay      ``fma(param, wd, grad)``            ``fma(param, wd, grad)``
exp_avg (lerp)         ``fma(w, grad - m, m)``             ``fma(w, grad - m, m)``
exp_avg_sq             ``fma(c2*g, g, v*beta2)``           ``fma(v, beta2, (c2*g)*g)``
SGD momentum           ``fma(g, 1-damp, buf*mom)``         ``fma(buf, mom, g*(1-damp))``
SGD nesterov, update   ``fma(buf, mom, g)``, ``fma(g, -lr, p)``  (both loops)
=====================  ==================================  ==================================

Finding (torch 2.13 CPU): ``_fused_sgd_`` on float16/bfloat16 tensors with momentum, after the
first step, loads the low-format momentum buffer as float32 memory (``fVec::loadu`` on the
``scalar_t*``) in its vector loop: the buffer comes back wrong by up to ~4e21 on 64 bfloat16
elements, while the scalar loop (fewer than 32 elements) is correct (evidence:
tests/test_ops_optim_fused.py::test_fused_sgd_low_format_torch_bug); the same loop also skips
the parameter update (known: pytorch/pytorch#191763, fixed by pytorch/pytorch#192545 after
2.13). Reading past a buffer cannot be emulated: low-format ``_fused_sgd_`` raises TypeError.

The default build rounds every product and sum. Everything else is one float32 rounding per
operation (``sqrt`` is the correctly rounded instruction here, unlike ``aten.sqrt``'s MKL); the
bias corrections are double (``1 - pow(beta, step)``, ``step`` read as float), as in Python.
Outputs: params, grads (divided by ``grad_scale`` when given, else unchanged), then the
optimizer states; a ``found_inf`` of 1.0 skips the step (nothing changes).

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> p, g = np.float32([1.0, 2.0]), np.float32([0.5, -0.5])
>>> call = Call("aten._fused_sgd_.default", ([p], [g], []), dict(weight_decay=0.0,
...             momentum=0.0, lr=0.5, dampening=0.0, nesterov=False, maximize=False,
...             is_first_step=False), ("float32",) * 2)
>>> [o.value.tolist() for o in fused_sgd(call)]
[[0.75, 2.25], [0.5, -0.5]]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, exact, register
from fpemu.validate.ops._fused_low import adam_low
from fpemu.validate.ops._num import fmt
from fpemu.validate.ops.optim import F32, fma32, madd

__all__ = ["fused_adam", "fused_sgd"]


def _lists(call: Call, names: tuple[str, ...], low: tuple[str, ...] = ()) -> list[list[np.ndarray]]:
    """The tensor lists, each float32 (or, where ``low`` is given, all of the params' dtype:
    float32 or one of ``low``)."""
    out = []
    want = None
    for i, name in enumerate(names):
        x = call.arg(i, name)
        if not isinstance(x, (list, tuple)):
            raise TypeError(f"{name}: expected a list of tensors, got {type(x).__name__}")
        for j, t in enumerate(x):
            dt = fmt(t)
            ok = dt == "float32" if (name == "state_steps" or not low) else dt == (want or dt)
            if want is None and name != "state_steps" and low and dt in ("float32", *low):
                want, ok = dt, True
            if not ok:
                accepted = f"float32 or {'/'.join(low)}, one dtype for all" if low else "float32"
                raise TypeError(f"{name}[{j}]: {dt} tensors are not emulated; accepted: {accepted}")
        out.append([np.asarray(t) for t in x])
    return out


def _skip(call: Call) -> bool:
    """``found_inf == 1.0`` (exactly: the kernel compares with 1.0) skips the whole step."""
    found = call.kwargs.get("found_inf")
    return found is not None and float(np.asarray(found).reshape(())) == 1.0


def _lr(call: Call) -> float:
    """``lr`` as the kernel's double (the tensor_lr overloads read their tensor as double)."""
    return float(np.asarray(call.kwargs["lr"], np.float64).reshape(()))


def _scale(call: Call) -> np.float32 | None:
    s = call.kwargs.get("grad_scale")
    return None if s is None else F32(np.asarray(s).reshape(()))


def _where_tail(n: int, vs: int, vec: np.ndarray, sca: np.ndarray) -> np.ndarray:
    """The vector loop's values, the last ``n % vs`` from the scalar loop, except that on avx512
    GCC auto-vectorises the scalar loop 8 floats at a time (with the vector loop's FMAs): only
    the last ``n % 8`` elements take the scalar formulas (measured)."""
    k = n - n % 8 if vs == 16 else n - n % vs
    if k == n:
        return vec
    return np.concatenate([vec[:k], sca[k:]])


def _vs(call: Call) -> int:
    return 16 if call.capability == "avx512" else 8


def _adam_one(
    p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, vmax: np.ndarray | None,
    step: float, h: dict[str, Any], fused: bool, vs: int,
) -> list[np.ndarray]:  # fmt: skip
    lr, b1, b2, wd, eps = h["lr"], h["beta1"], h["beta2"], h["weight_decay"], h["eps"]
    bc1, bc2 = 1 - b1**step, 1 - b2**step
    step_size, bc2_sqrt = lr / bc1, math.sqrt(bc2)
    n = p.size
    p, g, m, v = (x.ravel() for x in (p, g, m, v))
    with np.errstate(all="ignore"):
        if h["scale"] is not None:
            g = g / h["scale"]
        g_out = g
        gg = -g if h["maximize"] else g
        if wd != 0:
            if h["adamw"]:
                p = p * F32(1 - lr * wd)
            else:
                gg = madd(p, F32(wd), gg, fused=fused)
        w = F32(1 - b1)
        d = gg - m
        if abs(w) < 0.5:
            m_vec = m_sca = madd(w, d, m, fused=fused)
        else:  # vector: fmadd(w - 1, d, grad); scalar: grad - d * (1 - w) (zero signs differ)
            m_vec = madd(w - F32(1), d, gg, fused=fused)
            m_sca = madd(-d, F32(1) - w, gg, fused=fused)
        m_new = _where_tail(n, vs, m_vec, m_sca)
        c2, vb = F32(1 - b2), v * F32(b2)
        cgg = (c2 * gg) * gg
        if fused:
            v_new = _where_tail(n, vs, fma32(c2 * gg, gg, vb), fma32(v, F32(b2), cgg))
        else:
            v_new = vb + cgg
        vx = v_new
        vmax_new = None
        if vmax is not None:
            vmax = vmax.ravel()
            # vector: NaN-propagating maximum; scalar: std::max (keeps the old value on NaN)
            vmax_new = _where_tail(
                n, vs, np.maximum(vmax, v_new), np.where(vmax < v_new, v_new, vmax)
            )
            vx = vmax_new
        denom = np.sqrt(vx) / F32(bc2_sqrt) + F32(eps)
        p_new = p + (F32(-step_size) * m_new) / denom
    outs = [p_new, g_out, m_new, v_new] + ([] if vmax_new is None else [vmax_new])
    return [np.asarray(x, F32) for x in outs]


def _adam(call: Call, adamw: bool) -> list[Out | None]:
    names = ("self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps")
    params, grads, ms, vs_, vmaxs, steps = _lists(call, names, low=("float16", "bfloat16"))
    amsgrad = bool(call.kwargs.get("amsgrad", False))
    if _skip(call):
        return [
            exact(np.array(t, copy=True)) for lst in (params, grads, ms, vs_, vmaxs) for t in lst
        ]
    h = {k: float(call.kwargs[k]) for k in ("beta1", "beta2", "weight_decay", "eps")}
    h2: dict[str, Any] = {**h, "lr": _lr(call), "scale": _scale(call), "adamw": adamw,
                          "maximize": bool(call.kwargs.get("maximize", False))}  # fmt: skip
    if params and fmt(params[0]) != "float32":
        lows = []
        for i, p in enumerate(params):
            step = float(np.asarray(steps[i], np.float32).reshape(()))
            lows.append(adam_low(p, grads[i], ms[i], vs_[i], vmaxs[i] if amsgrad else None, step,
                                 h2, call.capability != "default", fmt(p),
                                 32 if call.capability == "avx512" else 16))  # fmt: skip
        return [r[k] for k in range(5 if amsgrad else 4) for r in lows]
    per: list[list[np.ndarray]] = []
    for i, p in enumerate(params):
        step = float(np.asarray(steps[i], np.float32).reshape(()))  # item<float>() as double
        vmax = vmaxs[i] if amsgrad else None
        res = _adam_one(p, grads[i], ms[i], vs_[i], vmax, step, h2, call.capability != "default",
                        _vs(call))  # fmt: skip
        per.append([r.reshape(p.shape) for r in res])
    order = [[r[k] for r in per] for k in range(5 if amsgrad else 4)]
    return [exact(x) for lst in order for x in lst]


@register("aten._fused_adam_.default", "aten._fused_adam_.tensor_lr")
def fused_adam(call: Call) -> list[Out | None]:
    """``torch.optim.Adam(fused=True)``'s kernel on float32 tensors."""
    return _adam(call, adamw=False)


@register("aten._fused_adamw_.default", "aten._fused_adamw_.tensor_lr")
def fused_adamw(call: Call) -> list[Out | None]:
    """``torch.optim.AdamW(fused=True)``'s kernel on float32 tensors."""
    return _adam(call, adamw=True)


def _sgd_one(p: np.ndarray, g: np.ndarray, buf: np.ndarray | None, h: dict[str, Any],
             fused: bool, vs: int) -> list[np.ndarray]:  # fmt: skip
    n = p.size
    p, g = p.ravel(), g.ravel()
    wd, mom, damp = h["weight_decay"], h["momentum"], h["dampening"]
    with np.errstate(all="ignore"):
        if h["scale"] is not None:
            g = g / h["scale"]
        g_out = g
        gg = -g if h["maximize"] else g
        if wd != 0:
            gg = madd(p, F32(wd), gg, fused=fused)
        buf_new = None
        if mom != 0:
            assert buf is not None
            b = buf.ravel()
            if h["is_first_step"]:
                buf_new = gg
            elif fused:
                vec = fma32(gg, F32(1 - damp), b * F32(mom))
                sca = fma32(b, F32(mom), gg * F32(1 - damp))
                buf_new = _where_tail(n, vs, vec, sca)
            else:
                buf_new = b * F32(mom) + gg * F32(1 - damp)
            gg = madd(buf_new, F32(mom), gg, fused=fused) if h["nesterov"] else buf_new
        p_new = madd(gg, F32(-h["lr"]), p, fused=fused)
    outs = [p_new, g_out] + ([] if buf_new is None else [buf_new])
    return [np.asarray(x, F32) for x in outs]


@register("aten._fused_sgd_.default", "aten._fused_sgd_.tensor_lr")
def fused_sgd(call: Call) -> list[Out | None]:
    """``torch.optim.SGD(fused=True)``'s kernel on float32 tensors."""
    params, grads, bufs = _lists(call, ("self", "grads", "momentum_buffer_list"))
    if _skip(call):
        return [exact(np.array(t, copy=True)) for lst in (params, grads, bufs) for t in lst]
    h: dict[str, Any] = {k: float(call.kwargs[k]) for k in ("weight_decay", "momentum",
                                                           "dampening")}  # fmt: skip
    h.update(lr=_lr(call), scale=_scale(call), nesterov=bool(call.kwargs.get("nesterov")),
             maximize=bool(call.kwargs.get("maximize")),
             is_first_step=bool(call.kwargs.get("is_first_step")))  # fmt: skip
    if h["momentum"] != 0 and len(bufs) != len(params):
        raise ValueError(f"momentum_buffer_list: {len(bufs)} buffers for {len(params)} params")
    per = []
    for i, p in enumerate(params):
        buf = bufs[i] if h["momentum"] != 0 else None
        res = _sgd_one(p, grads[i], buf, h, call.capability != "default", _vs(call))
        per.append([r.reshape(p.shape) for r in res])
    k = 3 if h["momentum"] != 0 else 2
    outs = [exact(r[j]) for j in range(k) for r in per]
    if h["momentum"] == 0:  # buffers given but unused: written back unchanged
        outs += [exact(np.array(b, copy=True)) for b in bufs]
    return list(outs)
