"""Modules for the autograd engine: Linear, LayerNorm and an MLP, built for one policy.

A module is built for a :class:`~fpemu.amp.policy.Policy`: its parameters are stored in the policy's
``param`` format (float32 under autocast presets, float16 under Apex O2/O3 and the naive
policy) and their gradients in ``grad``. Calling a module runs its ops under
``autocast(policy)``; an MLP also casts its input to ``model_input`` and its output to
``model_output`` when the policy says so (Apex O2/O3 patch ``forward`` that way, amp.md 4.1).

Parameters are initialised on the host (NumPy, from a seeded generator, so every namespace
starts from the same bits); :meth:`Module.to` moves them to another array namespace (CuPy), after
which forward and backward run there.

>>> import numpy as np
>>> m = MLP([4, 8, 3], policy="torch_cuda_fp16", seed=0)
>>> y = m(np.ones((2, 4), np.float32))
>>> y.shape, y.fmt.name, m.layers[0].weight.fmt.name
((2, 3), 'float16', 'float32')
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, autocast, get_policy
from fpemu.backend import xp
from fpemu.nn import functional as fn
from fpemu.nn.tensor import Array, Tensor, cast, round_to, to_namespace

#: Activation functions by name.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "relu": fn.relu, "gelu": fn.gelu, "tanh": fn.tanh, "sigmoid": fn.sigmoid,
}  # fmt: skip


class Module:
    """Base class: named parameters, gradients and exact state dicts."""

    policy: Policy

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        """``(name, parameter)`` pairs in a fixed order."""
        raise NotImplementedError

    def parameters(self) -> list[Tensor]:
        """The parameters in :meth:`named_parameters` order."""
        return [p for _, p in self.named_parameters()]

    def zero_grad(self) -> None:
        """Forget every parameter gradient."""
        for p in self.parameters():
            p.zero_grad()

    def to(self, module: ModuleType) -> Module:
        """Move the parameters (and gradients) to the array namespace ``module``; returns self.

        ``module`` is ``numpy`` or ``cupy`` (e.g. ``fpemu.backend.cupy_or_none()``); the values
        are copied bit for bit. Build optimizers after moving: their master weights and state
        live where the parameters were when they were made.

        >>> m = Linear(2, 1).to(np)
        >>> type(m.weight.data).__name__
        'ndarray'
        """
        for p in self.parameters():
            p.data = to_namespace(p.data, module)
            if p.grad is not None:
                p.grad = to_namespace(p.grad, module)
        return self

    def state_dict(self) -> dict[str, Array]:
        """Copies of the parameter arrays, by name (bit-exact round trip with load_state_dict)."""
        return {n: p.data.copy() for n, p in self.named_parameters()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Load parameter values saved by :meth:`state_dict`.

        Raises:
            ValueError: missing/extra names, wrong shapes, or values not exact in the param format.
        """
        params = dict(self.named_parameters())
        if set(state) != set(params):
            raise ValueError(f"state keys {sorted(state)} do not match parameters {sorted(params)}")
        for n, p in params.items():
            m = xp(p.data)
            v = to_namespace(state[n], m)  # into the parameter's namespace
            if v.shape != p.shape:
                raise ValueError(f"state[{n!r}] has shape {v.shape}, expected {p.shape}")
            r = round_to(v.astype(np.float64), p.fmt)
            if not m.array_equal(r, v, equal_nan=True):
                raise ValueError(f"state[{n!r}] holds values not representable in {p.fmt.name}")
            p.data = r.copy()


def _param(values: np.ndarray, policy: Policy, name: str) -> Tensor:
    t = Tensor(values, policy.param, requires_grad=True, name=name)
    t.grad_fmt = policy.grad_format
    return t


class Linear(Module):
    """``y = x @ W.T + b`` with PyTorch's default init, U(-1/sqrt(in), 1/sqrt(in)).

    >>> Linear(3, 2, policy="fp32", rng=np.random.default_rng(0)).weight.shape
    (2, 3)
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True,
                 policy: Policy | str = "fp32", rng: np.random.Generator | None = None,
                 name: str = "linear") -> None:  # fmt: skip
        for arg, v in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{arg} must be a positive int, got {v!r}")
        self.policy = get_policy(policy)
        rng = np.random.default_rng(0) if rng is None else rng
        bound = 1.0 / np.sqrt(in_features)
        w = rng.uniform(-bound, bound, (out_features, in_features))
        self.weight = _param(w, self.policy, f"{name}.weight")
        self.bias = (
            _param(rng.uniform(-bound, bound, out_features), self.policy, f"{name}.bias")
            if bias else None
        )  # fmt: skip
        self.name = name

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        """Weight then bias."""
        out = [(self.weight.name, self.weight)]
        return out + ([(self.bias.name, self.bias)] if self.bias is not None else [])

    def __call__(self, x: Tensor) -> Tensor:
        with autocast(self.policy):
            return fn.linear(x, self.weight, self.bias)


class LayerNorm(Module):
    """Layer normalization with weight 1 and bias 0 initially.

    >>> LayerNorm(4).weight.data
    array([1., 1., 1., 1.], dtype=float32)
    """

    def __init__(self, features: int, *, eps: float = 1e-5, policy: Policy | str = "fp32",
                 name: str = "norm") -> None:  # fmt: skip
        self.policy = get_policy(policy)
        self.weight = _param(np.ones(features), self.policy, f"{name}.weight")
        self.bias = _param(np.zeros(features), self.policy, f"{name}.bias")
        self.eps = eps

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        """Weight then bias."""
        return [(self.weight.name, self.weight), (self.bias.name, self.bias)]

    def __call__(self, x: Tensor) -> Tensor:
        with autocast(self.policy):
            return fn.layer_norm(x, self.weight, self.bias, eps=self.eps)


class MLP(Module):
    """Linear layers of ``sizes`` with ``activation`` (and optional LayerNorm) between them.

    Args:
        sizes: layer widths, input first, e.g. ``[64, 256, 256, 10]``.
        activation: one of :data:`ACTIVATIONS`.
        norm: put a LayerNorm after each hidden Linear (before the activation).
        policy: the policy whose formats the parameters use and whose rules forward follows.
        seed: seed of the initialisation.
    """

    def __init__(self, sizes: Sequence[int], *, activation: str = "relu", norm: bool = False,
                 policy: Policy | str = "fp32", seed: int = 0) -> None:  # fmt: skip
        if len(sizes) < 2:
            raise ValueError(f"sizes needs at least 2 widths (input, output), got {sizes!r}")
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation={activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        self.policy = get_policy(policy)
        rng = np.random.default_rng(seed)
        self.layers = [
            Linear(a, b, policy=self.policy, rng=rng, name=f"layers.{i}")
            for i, (a, b) in enumerate(itertools.pairwise(sizes))
        ]
        self.norms = [
            LayerNorm(b, policy=self.policy, name=f"norms.{i}") for i, b in enumerate(sizes[1:-1])
        ] if norm else []  # fmt: skip
        self.activation = activation
        self.sizes = tuple(sizes)

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        """Every layer's parameters, layer by layer."""
        out: list[tuple[str, Tensor]] = []
        for i, layer in enumerate(self.layers):
            out += layer.named_parameters()
            if i < len(self.norms):
                out += self.norms[i].named_parameters()
        return out

    def __call__(self, x: Tensor | Array) -> Tensor:
        if not isinstance(x, Tensor):  # data arrives as float32 (float64 for a float64 policy)
            wide = self.policy.param.name == "float64"
            m = xp(self.layers[0].weight.data)  # host data goes to the parameters' namespace
            x = Tensor(m.asarray(to_namespace(x, m), np.float64 if wide else np.float32))
        t = x
        act = ACTIVATIONS[self.activation]
        with autocast(self.policy):
            if self.policy.model_input is not None:
                t = cast(t, self.policy.model_input)
            for i, layer in enumerate(self.layers):
                t = layer(t)
                if i < len(self.layers) - 1:
                    t = act(self.norms[i](t) if self.norms else t)
            if self.policy.model_output is not None:
                t = cast(t, self.policy.model_output)
        return t
