"""Keras 3's optimizers and mean squared error as its torch backend computes them, each rounding
a visible call: ``KerasSGD``, ``KerasAdam`` (``Adam`` and ``AdamW``), ``keras_mse``.

Read from keras 3.15.1: ``backend/torch/optimizers/torch_sgd.py``, ``torch_adam.py`` (AdamW is
the same update, ``torch_adamw.py``), ``torch_optimizer.py`` (weight decay before the update),
``losses/losses.py`` ``mean_squared_error`` and ``losses/loss.py`` ``reduce_values``. Every
tensor op there is a float32 op with one rounding, except ``add_(x, alpha=a)``, which torch's
CPU kernels fuse into one multiply-add on AVX2/AVX512 builds (``fpemu.nn.optim._axpy``; two
roundings on the default build, which ``compare_keras`` reports as ``optimizer``), and
``pow`` of two 0-d float32 tensors, which torch evaluates with the C library's ``powf``: glibc's
is not correctly rounded (about one result in ten of ``beta**t`` is one ulp from the exact
value's rounding, measured with exact rationals), so ``KerasAdam`` calls the same ``powf``.

>>> p = Tensor(np.array([1.0], np.float32), requires_grad=True)
>>> opt = KerasAdam([p], lr=0.5)
>>> opt.step([np.array([2.0], np.float32)])  # first step: about lr * sign(g)
>>> p.data.tolist()  # not 0.5: 1 - float32(0.999) is 0.00099998713, and epsilon = 1e-7
[0.5000041127204895]
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format
from fpemu.nn.optim import Optimizer, _axpy
from fpemu.nn.tensor import Array, Tensor, cast, round_to

F32 = np.float32


@functools.lru_cache(maxsize=1)
def _libm_powf() -> Any:
    name = ctypes.util.find_library("m")
    if name is None:  # pragma: no cover - every Linux and macOS has one
        raise RuntimeError("KerasAdam needs the C library's powf (torch's CPU pow calls it): "
                           "no libm found")  # fmt: skip
    f = ctypes.CDLL(name).powf
    f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
    return f


def powf(x: np.float32, y: np.float32) -> np.float32:
    """The C library's ``powf(x, y)``: what torch's CPU ``pow`` gives for 0-d float32 tensors.

    >>> float(powf(np.float32(0.5), np.float32(3.0)))
    0.125
    """
    return F32(_libm_powf()(float(x), float(y)))


class KerasSGD(Optimizer):
    """Keras 3's ``SGD`` (``nesterov=False``, no weight decay) as its torch backend runs it
    (keras/src/backend/torch/optimizers/torch_sgd.py, ``torch._foreach_*`` ops).

    ``w.add_(g, alpha=-lr)`` (one fused rounding, fpemu's ``_axpy``); with momentum the buffer
    starts at zero (a variable built by ``build``) and ``m.mul_(momentum);
    m.add_(g, alpha=-lr); w.add_(m)``. ``lr`` is Keras's float32 learning-rate variable.

    >>> p = Tensor(np.array([1.0], np.float32), requires_grad=True)
    >>> KerasSGD([p], lr=0.5, momentum=0.5).step([np.array([1.0], np.float32)])
    >>> p.data.tolist()
    [0.5]
    """

    hyper = ("lr", "momentum")

    def __init__(self, params: list[Tensor], *, lr: float, momentum: float = 0.0) -> None:
        super().__init__(params, lr=lr)
        if not (isinstance(momentum, (int, float)) and 0.0 <= momentum <= 1.0):
            raise ValueError(f"momentum={momentum!r}: accepted a number in [0, 1]")
        self.momentum = float(momentum)

    def _update(self, i: int, w: Array, g: Array, f: Format) -> Array:
        lr = float(F32(self.lr))  # the float32 variable, passed to torch as alpha
        if not self.momentum:
            return _axpy(w, -lr, g, f)
        m = self.state[i].get("momentum", xp(w).zeros_like(w))
        m = round_to(m * w.dtype.type(self.momentum), f)  # _foreach_mul_(bufs, momentum)
        m = _axpy(m, -lr, g, f, own_y=True)  # _foreach_add_(bufs, grads, alpha=-lr)
        self.state[i]["momentum"] = m
        return _axpy(w, 1.0, m, f)  # _foreach_add_(variables, bufs)


class KerasAdam(Optimizer):
    """Keras 3's ``Adam`` (``amsgrad=False``), and ``AdamW`` with ``weight_decay``, as the torch
    backend runs them on float32 variables (keras/src/backend/torch/optimizers/torch_adam.py).

    Per step ``t`` (``iterations + 1``), in float32 0-d tensor ops:
    ``alpha = lr * sqrt(1 - powf(b2, t)) / (1 - powf(b1, t))``; with weight decay first
    ``w *= 1 - wd * lr`` (torch_optimizer.py ``_apply_weight_decay``); then
    ``m *= b1; m.add_(g, alpha=1-b1); v *= b2; v.add_(g*g, alpha=1-b2);
    w.add_(m * alpha / (sqrt(v) + eps), alpha=-1)``. The state is Keras's ``momentum`` and
    ``velocity`` variables, zero before the first step.
    """

    hyper = ("lr", "beta_1", "beta_2", "epsilon", "weight_decay")

    def __init__(self, params: Sequence[Tensor], *, lr: float = 1e-3, beta_1: float = 0.9,
                 beta_2: float = 0.999, epsilon: float = 1e-7,
                 weight_decay: float | None = None) -> None:  # fmt: skip
        super().__init__(params, lr=lr)
        for name, v in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not (isinstance(v, (int, float)) and 0.0 <= v < 1.0):
                raise ValueError(f"{name}={v!r}: accepted a number in [0, 1)")
        if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon >= 0):
            raise ValueError(f"epsilon={epsilon!r}: accepted a finite number >= 0")
        if weight_decay is not None and not (
            isinstance(weight_decay, (int, float)) and math.isfinite(weight_decay)
        ):
            raise ValueError(f"weight_decay={weight_decay!r}: accepted None or a finite number")
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)
        self.weight_decay = weight_decay

    def _alpha(self) -> np.float32:
        lr, t = F32(self.lr), F32(self.steps)  # local_step = iterations + 1 (steps counts it)
        b1p, b2p = powf(F32(self.beta_1), t), powf(F32(self.beta_2), t)
        return F32(F32(lr * F32(np.sqrt(F32(F32(1) - b2p)))) / F32(F32(1) - b1p))

    def _update(self, i: int, w: Array, g: Array, f: Format) -> Array:
        if f.name != "float32":
            raise ValueError(f"KerasAdam models float32 variables, got {f.name}")
        st, ns = self.state[i], xp(w)
        if self.weight_decay is not None:  # w *= (1 - wd * lr), a float32 0-d factor
            w = w * F32(F32(1) - F32(F32(self.weight_decay) * F32(self.lr)))
        m = st.get("momentum", ns.zeros_like(w)) * F32(self.beta_1)  # _foreach_mul_
        m = _axpy(m, 1 - self.beta_1, g, f, own_y=True)  # _foreach_add_(m, g, alpha=1-b1)
        v = st.get("velocity", ns.zeros_like(w)) * F32(self.beta_2)
        v = _axpy(v, 1 - self.beta_2, g * g, f, own_y=True)  # alpha=1-b2, of g*g (rounded)
        st["momentum"], st["velocity"] = m, v
        upd = (m * self._alpha()) / (ns.sqrt(v) + F32(self.epsilon))  # three float32 roundings
        return _axpy(w, -1.0, upd, f)  # w.add_(upd, alpha=-1): one rounding


def keras_mse(pred: Tensor, target: Any) -> Tensor:
    """``keras.losses.MeanSquaredError()`` (torch backend, the loss's float32 dtype):
    ``sum(mean(square(y_true - y_pred), axis=-1)) / rows``, each a float32 op.

    The forward sums follow NumPy's float32 order, not torch's (``reduction order`` where they
    differ); the gradient is torch's autograd of those ops, bit for bit: the seed divided by
    the row count, then by the last axis's length, times ``2 (y_true - y_pred)`` (one rounding),
    negated, then rounded to the prediction's format by the cast's backward.

    >>> y = keras_mse(Tensor(np.float32([[1.0, 3.0]])), np.float32([[0.0, 1.0]]))
    >>> float(y.data)
    2.5
    """
    pc = cast(pred, "float32")  # convert_to_tensor(y_pred, dtype=float32)
    t = np.asarray(target, np.float32)
    if t.shape != pc.shape:
        raise ValueError(f"keras_mse target shape {t.shape} != prediction shape {pc.shape}")
    d = t - np.asarray(pc.data, np.float32)  # y_true - y_pred
    rows = (d * d).mean(axis=-1, dtype=F32)
    n_rows, n_last = F32(max(rows.size, 1)), F32(d.shape[-1] if d.ndim else 1)
    y = Tensor.derived(np.asarray(F32(rows.sum(dtype=F32)) / n_rows, F32),
                       pc.fmt, (pc,), "keras_mse")  # fmt: skip

    def _backward() -> None:
        assert y.grad is not None
        g = F32(F32(np.asarray(y.grad, F32)) / n_rows) / n_last  # divide, then mean's backward
        pc.accumulate(-(g * (2 * d)), exact=True)  # square's backward, then the subtraction's

    y._backward = _backward
    return y


__all__ = ["KerasAdam", "KerasSGD", "keras_mse", "powf"]
