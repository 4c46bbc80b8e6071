"""A model given as a graph of ops: what ``fpemu.validate.twin.from_torch`` builds from a traced
PyTorch module.

A ``GraphModule`` holds named parameters and a list of ``Node`` s in execution order.
Each node names an op of ``GRAPH_OPS`` (an op of ``fpemu.nn.functional``, or a
dtype-neutral one: ``identity``, ``flatten``), its arguments (earlier nodes, parameters or
constants) and its keyword options. Calling the module runs the nodes under the module's policy
(``autocast(policy)``) and keeps every node's output in :attr:`GraphModule.outputs`, so each
layer's activation can be compared with another framework's.

>>> import numpy as np
>>> g = GraphModule(
...     params={"fc.weight": np.ones((2, 3), np.float32), "fc.bias": np.zeros(2, np.float32)},
...     nodes=[Node("x", "input"), Node("fc", "linear", (Ref("x"), Param("fc.weight"),
...            Param("fc.bias"))), Node("act", "relu", (Ref("fc"),))],
...     policy="torch_cpu_bf16")
>>> y = g(np.full((1, 3), 0.5, np.float32))
>>> y.fmt.name, y.data.tolist(), sorted(g.outputs)
('bfloat16', [[1.5, 1.5]], ['act', 'fc', 'x'])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, autocast, get_policy
from fpemu.backend import xp
from fpemu.nn import functional as fn
from fpemu.nn.modules import Module
from fpemu.nn.tensor import Array, Tensor, to_namespace


@dataclass(frozen=True)
class Ref:
    """An argument: the output of the node called ``name``."""

    name: str


@dataclass(frozen=True)
class Param:
    """An argument: the parameter called ``name``."""

    name: str


Arg = Ref | Param | float | int | None


@dataclass(frozen=True)
class Node:
    """One op of a graph: ``name = op(*args, **options)``.

    Attributes:
        name: a unique label (e.g. the torch module path ``"layers.0"``).
        op: a key of ``GRAPH_OPS``, or ``"input"`` for the model input.
        args: arguments: ``Ref``, ``Param`` or a Python number.
        options: keyword options of the op as ``(name, value)`` pairs (e.g. ``("eps", 1e-5)``).
        source: what the node came from (e.g. ``"torch.nn.Linear"``), for reports.
    """

    name: str
    op: str
    args: tuple[Arg, ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    source: str = ""


def _identity(x: Tensor) -> Tensor:
    return x


def _flatten(x: Tensor, *, start_dim: int = 1, end_dim: int = -1) -> Tensor:
    """``torch.flatten``: a reshape, no rounding; its backward reshapes the gradient back."""
    nd = x.data.ndim
    s, e = start_dim % nd, end_dim % nd
    shape = (*x.shape[:s], int(np.prod(x.shape[s : e + 1])), *x.shape[e + 1 :])
    if shape == x.shape:
        return x
    out = Tensor.derived(x.data.reshape(shape), x.fmt, (x,), "flatten")

    def _backward() -> None:
        assert out.grad is not None
        x.accumulate(out.grad.reshape(x.shape), exact=x.grad_fmt == x.fmt)

    out._backward = _backward
    return out


def _softmax(x: Tensor, *, dim: int = -1) -> Tensor:
    _last_axis("softmax", x, dim)
    return fn.softmax(x)


def _log_softmax(x: Tensor, *, dim: int = -1) -> Tensor:
    _last_axis("log_softmax", x, dim)
    return fn.log_softmax(x)


def _last_axis(op: str, x: Tensor, dim: int) -> None:
    if dim % x.data.ndim != x.data.ndim - 1:
        raise ValueError(f"{op}: dim={dim} is not the last axis of shape {x.shape}; "
                         "accepted: the last axis (-1)")  # fmt: skip


def _sub(a: Tensor | float, b: Tensor | float) -> Tensor:
    """``a - b`` as ``a + (-1 * b)``: negation is exact, so this is one rounding, as torch's sub."""
    if isinstance(b, Tensor):
        return fn.add(a, fn.mul(b, -1.0))
    return fn.add(a, -b)


#: op name -> function of the node's arguments (Tensors, numbers) and options.
GRAPH_OPS: dict[str, Callable[..., Tensor]] = {
    "linear": fn.linear, "matmul": fn.matmul, "relu": fn.relu, "gelu": fn.gelu,
    "gelu_erf": fn.gelu_erf, "silu": fn.silu, "tanh": fn.tanh, "sigmoid": fn.sigmoid,
    "softmax": _softmax, "log_softmax": _log_softmax, "layer_norm": fn.layer_norm,
    "add": fn.add, "sub": _sub, "mul": fn.mul, "identity": _identity, "flatten": _flatten,
}  # fmt: skip


class GraphModule(Module):
    """A model that runs a list of ``Node`` s over named parameters.

    Args:
        params: parameter name -> array (rounded to the policy's ``param`` format).
        nodes: the graph in execution order: one ``"input"`` node first; the last node's
            output is the model's output.
        policy: the policy the parameters are stored in and the ops run under.

    Raises:
        ValueError: no input node, an unknown op, or an argument naming an unknown node or
            parameter.
    """

    def __init__(self, params: Mapping[str, Any], nodes: Sequence[Node], *,
                 policy: Policy | str = "fp32") -> None:  # fmt: skip
        self.policy = get_policy(policy)
        self._params: dict[str, Tensor] = {}
        for name, value in params.items():
            t = Tensor(np.asarray(value), self.policy.param, requires_grad=True, name=name)
            t.grad_fmt = self.policy.grad_format
            self._params[name] = t
        self.nodes = tuple(nodes)
        self.outputs: dict[str, Tensor] = {}
        _check_graph(self.nodes, self._params)

    def named_parameters(self) -> list[tuple[str, Tensor]]:
        """Parameters in the order given (torch's ``named_parameters`` order)."""
        return list(self._params.items())

    def __call__(self, x: Tensor | Array) -> Tensor:
        if not isinstance(x, Tensor):
            m = xp(next(iter(self._params.values())).data) if self._params else np
            x = Tensor(m.asarray(to_namespace(x, m), np.float32))
        env: dict[str, Tensor] = {}
        with autocast(self.policy):
            for node in self.nodes:
                if node.op == "input":
                    env[node.name] = x
                    continue
                args = [self._arg(a, env) for a in node.args]
                env[node.name] = GRAPH_OPS[node.op](*args, **dict(node.options))
        self.outputs = env
        return env[self.nodes[-1].name]

    def _arg(self, a: Arg, env: Mapping[str, Tensor]) -> Any:
        if isinstance(a, Ref):
            return env[a.name]
        if isinstance(a, Param):
            return self._params[a.name]
        return a


def _check_graph(nodes: Sequence[Node], params: Mapping[str, Tensor]) -> None:
    seen: set[str] = set()
    if not nodes or nodes[0].op != "input":
        raise ValueError("nodes must start with an 'input' node")
    for node in nodes:
        if node.op != "input" and node.op not in GRAPH_OPS:
            raise ValueError(f"node {node.name!r}: unknown op {node.op!r}; "
                             f"accepted: {', '.join(GRAPH_OPS)}")  # fmt: skip
        for a in node.args:
            if isinstance(a, Ref) and a.name not in seen:
                raise ValueError(f"node {node.name!r} uses {a.name!r} before it is computed")
            if isinstance(a, Param) and a.name not in params:
                raise ValueError(f"node {node.name!r} uses unknown parameter {a.name!r}")
        if node.name in seen:
            raise ValueError(f"two nodes are called {node.name!r}")
        seen.add(node.name)


__all__ = ["GRAPH_OPS", "GraphModule", "Node", "Param", "Ref"]
