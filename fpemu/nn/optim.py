"""SGD and Adam over optional master weights, plus gradient-norm clipping.

With ``master=None`` the optimizer updates the parameters in their own format (PyTorch autocast
and Keras: fp32 parameters; Apex O3 and the naive policy: fp16 parameters, where small updates
vanish). With a ``master`` format (Apex O2: float32) the optimizer keeps master copies, steps
them with master-format gradients (the parameter gradients converted, exactly for an upcast) and
copies the result back into the model's parameters, rounding to their format. Optimizer state
(momentum, Adam moments) lives in the master format, else in the parameter's format. Every
stored result is rounded with :func:`~fpemu.nn.tensor.round_to`; the arithmetic between roundings
runs in float32 (formats that fit) or float64, following PyTorch's single-tensor update order.
Parameters, gradients and state may be NumPy or CuPy arrays: array functions come from
:func:`fpemu.backend.xp` of the data, and scalars stay Python/NumPy scalars.

>>> import numpy as np
>>> from fpemu.nn.tensor import Tensor
>>> p = Tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
>>> p.grad = np.array([0.5, -0.5], np.float32)
>>> SGD([p], lr=0.1).step()
>>> p.data
array([0.95, 2.05], dtype=float32)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fpemu.backend import scratch, xp
from fpemu.formats import Format, FormatLike, get_format
from fpemu.nn.tensor import Array, Tensor, round_to, to_namespace, work_dtype

Grads = Sequence[Array | None]


def _positive(arg: str, v: float, *, zero_ok: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise TypeError(f"{arg} must be a finite number, got {v!r}")
    if v < 0 or (v == 0 and not zero_ok):
        raise ValueError(f"{arg}={v} must be {'>= 0' if zero_ok else '> 0'}")
    return float(v)


class Optimizer:
    """Common machinery: master weights, per-parameter state, exact state dicts."""

    hyper: tuple[str, ...] = ("lr",)

    def __init__(self, params: Sequence[Tensor], *, lr: float,
                 master: FormatLike | None = None) -> None:  # fmt: skip
        self.params = list(params)
        if not self.params or not all(isinstance(p, Tensor) for p in self.params):
            raise TypeError(f"params must be a non-empty sequence of Tensors, got {params!r}")
        self.lr = _positive("lr", lr)
        self.master_fmt: Format | None = (
            None if master is None else get_format(master, arg="master")
        )
        self.master: list[Array] | None = None
        if self.master_fmt is not None:
            mf = self.master_fmt
            self.master = [round_to(p.data.astype(np.float64), mf) for p in self.params]
        self.steps = 0
        self.state: list[dict[str, Array]] = [{} for _ in self.params]

    def state_format(self, i: int) -> Format:
        """Format of parameter ``i``'s master copy and optimizer state."""
        return self.master_fmt if self.master_fmt is not None else self.params[i].fmt

    def gradients(self) -> list[Array | None]:
        """Parameter gradients converted to the state format (master grads), or None if unset."""
        return [None if p.grad is None else round_to(p.grad, self.state_format(i))
                for i, p in enumerate(self.params)]  # fmt: skip

    def zero_grad(self) -> None:
        """Forget every parameter gradient."""
        for p in self.params:
            p.zero_grad()

    def step(self, grads: Grads | None = None) -> None:
        """Apply one update with ``grads`` (default: :meth:`gradients`); None entries skip."""
        gs = self.gradients() if grads is None else list(grads)
        if len(gs) != len(self.params):
            raise ValueError(f"grads has {len(gs)} entries, expected {len(self.params)}")
        self.steps += 1
        with np.errstate(all="ignore"):  # inf/NaN are data (e.g. fp16 Adam's 0/0)
            self._step_all(gs)

    def _step_all(self, gs: Grads) -> None:
        for i, (p, g) in enumerate(zip(self.params, gs, strict=True)):
            if g is None:
                continue
            f = self.state_format(i)
            w = self.master[i] if self.master is not None else p.data
            wd = work_dtype(f)  # _update makes new arrays: no defensive copies of w and g
            gw = round_to(g, f).astype(wd, copy=False)
            new = self._update(i, w.astype(wd, copy=False), gw, f)
            if self.master is not None:
                self.master[i] = new
                p.data = round_to(new, p.fmt)  # copy the master back into the model (O2)
            else:
                p.data = new

    def _update(self, i: int, w: Array, g: Array, f: Format) -> Array:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Hyper-parameters, step count, per-parameter state and master weights (copies)."""
        return {
            "hyper": {k: getattr(self, k) for k in self.hyper}, "steps": self.steps,
            "state": [{k: v.copy() for k, v in s.items()} for s in self.state],
            "master": None if self.master is None else [m.copy() for m in self.master],
        }  # fmt: skip

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (bit-exact).

        Raises:
            ValueError: the state does not fit these parameters.
        """
        if set(sd) != {"hyper", "steps", "state", "master"}:
            raise ValueError(f"optimizer state keys {sorted(sd)} are not hyper/steps/state/master")
        if len(sd["state"]) != len(self.params):
            raise ValueError(f"state has {len(sd['state'])} entries for {len(self.params)} params")
        if (sd["master"] is None) != (self.master is None):
            raise ValueError("master weights present in one of state and optimizer but not both")
        for k, v in sd["hyper"].items():
            setattr(self, k, v)
        self.steps = int(sd["steps"])
        ns = [xp(p.data) for p in self.params]  # state is copied into each parameter's namespace
        self.state = [{k: to_namespace(v, m, copy=True) for k, v in s.items()}
                      for s, m in zip(sd["state"], ns, strict=True)]  # fmt: skip
        if sd["master"] is not None:
            self.master = [to_namespace(a, m, copy=True)
                           for a, m in zip(sd["master"], ns, strict=True)]  # fmt: skip


def _axpy(y: Array, alpha: float, x: Array, f: Format, *, own_y: bool = False) -> Array:
    """``y + alpha*x`` as PyTorch's CPU ``add_(x, alpha=...)`` computes it.

    The scalar is first converted to the tensor's format (for float16, lr=0.1 becomes
    0.0999755859375), the multiply-add is fused (one rounding) in the opmath type (float32 for
    formats that fit it), and the result is rounded to ``f``. Checked against
    ``torch.optim.SGD(foreach=False)`` (tests/test_training.py): bit for bit on float32; on
    float16/bfloat16 about 0.05% of values differ by one ulp per step (a torch kernel detail
    not modelled). ``own_y``: ``y`` is a temporary of the caller's, which may be overwritten.
    """
    a = _scalar_in(alpha, f)
    m = xp(y, x)
    if work_dtype(f) is np.float32 and a == 1.0 and y.dtype == x.dtype == np.float32:
        # y + x rounded to float64 and then to float32 is the float32 sum: the double
        # rounding is innocuous for a sum when 53 >= 2*24 + 2 (Figueroa 1995)
        s = m.add(y, x, out=y) if own_y else m.add(y, x)
    else:
        narrow = work_dtype(f) is np.float32
        # a float32 result needs the float64 sum only briefly: a reused work buffer then
        out = scratch(x.size, np.float64).reshape(x.shape) if narrow and m is np else None
        s = m.multiply(x, a, dtype=np.float64, out=out)  # a*x exact (24+24 bits) for float32
        m.add(s, y, out=s)  # one float64 rounding of y + a*x, as a fused multiply-add would
        if narrow:
            with np.errstate(over="ignore"):
                s = s.astype(np.float32)  # NumPy's cast is the IEEE (RNE) one: round_to float32
    return s if f.name in ("float32", "float64") else round_to(s, f)


@functools.lru_cache(maxsize=256)
def _scalar_in(alpha: float, f: Format) -> np.float64:
    """``alpha`` rounded to ``f`` (RNE) as a float64 scalar (cached: a per-step constant)."""
    return np.float64(round_to(np.float64(alpha), f))


class SGD(Optimizer):
    """SGD with momentum and L2 weight decay, in PyTorch's order (dampening 0).

    ``g += wd*w; buf = g (first step) else momentum*buf + g; w -= lr*buf``.
    """

    hyper = ("lr", "momentum", "weight_decay")

    def __init__(self, params: Sequence[Tensor], *, lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0, master: FormatLike | None = None) -> None:  # fmt: skip
        super().__init__(params, lr=lr, master=master)
        self.momentum = _positive("momentum", momentum, zero_ok=True)
        self.weight_decay = _positive("weight_decay", weight_decay, zero_ok=True)

    def _update(self, i: int, w: Array, g: Array, f: Format) -> Array:
        dt = w.dtype.type
        if self.weight_decay:
            g = _axpy(g, self.weight_decay, w, f)  # grad.add(param, alpha=weight_decay)
        if self.momentum:
            buf = self.state[i].get("momentum_buffer")
            if buf is None:
                buf = g.copy()
            else:  # buf.mul_(momentum).add_(grad): two in-place ops, two roundings
                mb = round_to(dt(self.momentum) * buf, f)  # a new array: add g into it
                buf = _axpy(mb, 1.0, g, f, own_y=True)
            self.state[i]["momentum_buffer"] = buf
            g = buf
        return _axpy(w, -self.lr, g, f)  # param.add_(grad, alpha=-lr)


class Adam(Optimizer):
    """Adam in PyTorch's single-tensor order (``lerp`` first moment, bias corrections, eps).

    ``m += (1-b1)(g-m); v = b2 v + (1-b2) g^2; w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``
    """

    hyper = ("lr", "beta1", "beta2", "eps", "weight_decay")

    def __init__(self, params: Sequence[Tensor], *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, master: FormatLike | None = None) -> None:  # fmt: skip
        super().__init__(params, lr=lr, master=master)
        self.beta1, self.beta2 = (_positive("betas", b, zero_ok=True) for b in betas)
        if not (self.beta1 < 1 and self.beta2 < 1):
            raise ValueError(f"betas={betas!r} must lie in [0, 1)")
        self.eps = _positive("eps", eps, zero_ok=True)
        self.weight_decay = _positive("weight_decay", weight_decay, zero_ok=True)

    def _update(self, i: int, w: Array, g: Array, f: Format) -> Array:
        dt, st, t = w.dtype.type, self.state[i], self.steps
        if self.weight_decay:
            g = round_to(g + dt(self.weight_decay) * w, f)
        ns = xp(w)
        m = st.get("exp_avg", ns.zeros_like(w))
        v = st.get("exp_avg_sq", ns.zeros_like(w))
        # one rounding per in-place op of torch's _single_tensor_adam (state in format f)
        m = round_to(m + dt(1 - self.beta1) * (g - m), f)  # exp_avg.lerp_(grad, 1 - beta1)
        v = round_to(round_to(dt(self.beta2) * v, f) + dt(1 - self.beta2) * g * g, f)
        st["exp_avg"], st["exp_avg_sq"] = m, v
        step_size = self.lr / (1 - self.beta1**t)
        denom = round_to(ns.sqrt(v), f)
        denom = round_to(denom / dt(math.sqrt(1 - self.beta2**t)), f)
        denom = round_to(denom + dt(self.eps), f)  # eps=1e-8 is 0 in fp16: pure-fp16 Adam NaNs
        return round_to(w - dt(step_size) * (m / denom), f)  # param.addcdiv_(m, denom, -step)


class AdamW(Adam):
    """AdamW: decoupled weight decay ``w *= 1 - lr*weight_decay`` (one rounding, as torch's
    ``param.mul_``), then the Adam step without L2 decay (torch's single-tensor order).

    >>> p = Tensor(np.array([1.0], np.float32), requires_grad=True)
    >>> AdamW([p], lr=0.1, weight_decay=0.5).step([np.array([0.0], np.float32)])
    >>> p.data
    array([0.95], dtype=float32)
    """

    def __init__(self, params: Sequence[Tensor], *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, master: FormatLike | None = None) -> None:  # fmt: skip
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         master=master)  # fmt: skip

    def _update(self, i: int, w: Array, g: Array, f: Format) -> Array:
        decay, self.weight_decay = self.weight_decay, 0.0
        try:
            if decay:
                w = round_to(w * w.dtype.type(1 - self.lr * decay), f)  # param.mul_(1 - lr*wd)
            return super()._update(i, w, g, f)
        finally:
            self.weight_decay = decay


def clip_grad_norm(grads: Grads, max_norm: float) -> tuple[list[Array | None], float]:
    """Scale ``grads`` so their global L2 norm is at most ``max_norm`` (``clip_grad_norm_``).

    As PyTorch: ``coef = min(max_norm / (norm + 1e-6), 1)`` multiplies every gradient (an inf
    norm turns the gradients into NaN/0, amp.md 1.8). The norm is computed in float64; each
    product is rounded back to the gradient's dtype. Returns the new gradients and the norm.

    >>> g, n = clip_grad_norm([np.array([3.0, 4.0])], 1.0)
    >>> n, g[0].round(6).tolist()
    (5.0, [0.6, 0.8])
    """
    mx = _positive("max_norm", max_norm)
    sq = [float(xp(g).sum(xp(g).square(g.astype(np.float64)))) for g in grads if g is not None]
    total = math.sqrt(math.fsum(sq)) if sq else 0.0
    coef = min(mx / (total + 1e-6), 1.0) if math.isfinite(total) else mx / total
    with np.errstate(invalid="ignore"):
        out = [None if g is None else (g * g.dtype.type(coef)).astype(g.dtype) for g in grads]
    return out, total
