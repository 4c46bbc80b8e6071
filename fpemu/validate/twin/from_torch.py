"""Bring a PyTorch model into fpemu: trace its real graph with ``torch.fx`` and rebuild it as an
``fpemu.nn.graph.GraphModule`` with bit-identical parameters.

Supported: the modules of ``MODULES`` (Linear, activations, LayerNorm over the last axis,
Dropout in eval mode or with p=0, Flatten, Identity; Sequential, ModuleList and custom modules
are traced through), the functions of ``FUNCTIONS`` (``+``, ``-``, ``*``, ``@``,
``torch.relu``, ``F.gelu``, ...) and a few tensor methods (``METHODS``). Anything else
raises a ValueError naming the module or op and listing what is supported.

>>> import torch
>>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.GELU(), torch.nn.Linear(4, 2))
>>> model = from_torch(net, policy="torch_cpu_bf16")
>>> [n.op for n in model.nodes]
['input', 'linear', 'gelu_erf', 'linear', 'identity']
>>> [name for name, _ in model.named_parameters()]
['0.weight', '0.bias', '2.weight', '2.bias']
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy
from fpemu.nn.graph import Arg, GraphModule, Node, Param, Ref

#: torch.nn module class name -> fpemu op (the class is looked up in torch.nn by name).
MODULES: dict[str, str] = {
    "Linear": "linear", "ReLU": "relu", "GELU": "gelu_erf", "Tanh": "tanh",
    "Sigmoid": "sigmoid", "SiLU": "silu", "Softmax": "softmax", "LogSoftmax": "log_softmax",
    "LayerNorm": "layer_norm", "Dropout": "identity", "Flatten": "flatten",
    "Identity": "identity",
}  # fmt: skip
#: Functions the traced ``forward`` may call, by their usual spelling.
FUNCTIONS: tuple[str, ...] = (
    "+",
    "-",
    "*",
    "@",
    "torch.add",
    "torch.sub",
    "torch.mul",
    "torch.matmul",
    "torch.relu",
    "torch.tanh",
    "torch.sigmoid",
    "torch.flatten",
    "torch.softmax",
    "torch.log_softmax",
    "F.relu",
    "F.gelu",
    "F.silu",
    "F.tanh",
    "F.sigmoid",
    "F.softmax",
    "F.log_softmax",
    "F.linear",
    "F.layer_norm",
    "F.dropout (eval)",
)
#: Tensor methods the traced ``forward`` may call.
METHODS: tuple[str, ...] = ("relu", "tanh", "sigmoid", "flatten", "softmax", "log_softmax",
                            "add", "sub", "mul", "matmul")  # fmt: skip


def _function_table() -> dict[Any, str]:
    import torch  # noqa: PLC0415 - optional dependency
    import torch.nn.functional as F  # noqa: N812, PLC0415

    return {
        operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.matmul: "matmul",
        torch.add: "add", torch.sub: "sub", torch.mul: "mul", torch.matmul: "matmul",
        torch.relu: "relu", F.relu: "relu", torch.tanh: "tanh", F.tanh: "tanh",
        torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", F.silu: "silu", F.gelu: "gelu_erf",
        torch.flatten: "flatten", torch.softmax: "softmax", F.softmax: "softmax",
        torch.log_softmax: "log_softmax", F.log_softmax: "log_softmax", F.linear: "linear",
        F.layer_norm: "layer_norm", F.dropout: "identity",
    }  # fmt: skip


def _supported() -> str:
    return (f"supported modules: {', '.join(MODULES)} (and Sequential/ModuleList/custom modules "
            f"composing them); functions: {', '.join(FUNCTIONS)}; tensor methods: "
            f"{', '.join(METHODS)}")  # fmt: skip


def _unsupported(what: str) -> ValueError:
    return ValueError(f"from_torch: unsupported {what}; {_supported()}")


def from_torch(module: Any, *, policy: Policy | str = "fp32") -> GraphModule:
    """An fpemu model that computes what ``module`` computes, with bit-identical parameters.

    Args:
        module: a ``torch.nn.Module`` (float32 parameters) whose ``forward`` takes one tensor.
        policy: the fpemu policy the model runs under (a preset such as
            ``"torch_cpu_bf16"`` matches torch's CPU autocast).

    Raises:
        TypeError: ``module`` is not a torch.nn.Module, or a parameter is not float32.
        ValueError: a module, function or method outside what is supported (the message names
            it and lists what is supported), Dropout with p > 0 in training mode, or a graph
            ``torch.fx`` cannot trace.
    """
    import torch  # noqa: PLC0415 - optional dependency
    import torch.fx  # noqa: PLC0415

    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    params: dict[str, np.ndarray] = {}
    for name, p in module.named_parameters():
        if p.dtype != torch.float32:
            raise TypeError(f"parameter {name!r} is {p.dtype}; from_torch needs float32 "
                            "parameters (autocast keeps parameters in float32)")  # fmt: skip
        params[name] = p.detach().cpu().numpy().copy()
    try:
        traced = torch.fx.symbolic_trace(module)
    except Exception as exc:  # fx raises many types (TraceError, TypeError, ...)
        raise ValueError(f"from_torch: torch.fx cannot trace {type(module).__name__} "
                         f"({type(exc).__name__}: {exc}); {_supported()}") from exc  # fmt: skip
    return GraphModule(params, convert_graph(traced, module), policy=policy)


def convert_graph(traced: Any, root: Any) -> list[Node]:
    """The ``fpemu.nn.graph.Node`` list of a ``torch.fx.GraphModule`` traced from ``root``.

    Node names are the fx node names, so activations recorded by running ``traced`` (see
    ``fpemu.validate.twin.compare``) pair up with the fpemu model's by name.
    """
    funcs = _function_table()
    pnames = {n for n, _ in root.named_parameters()}
    nodes: list[Node] = []
    inputs = 0
    for n in traced.graph.nodes:
        if n.op == "placeholder":
            inputs += 1
            if inputs > 1:
                raise ValueError(f"from_torch: forward takes more than one input ({n.name!r}); "
                                 "accepted: forward(x) with one tensor")  # fmt: skip
            nodes.append(Node(n.name, "input", source="input"))
        elif n.op == "get_attr":
            if n.target not in pnames:
                raise _unsupported(f"attribute {n.target!r} (a buffer or constant tensor)")
            continue  # used through Param() by the node that reads it
        elif n.op == "call_module":
            nodes.append(_module_node(n, traced.get_submodule(n.target)))
        elif n.op == "call_function":
            op = funcs.get(n.target)
            if op is None:
                raise _unsupported(f"function {getattr(n.target, '__name__', n.target)!r} "
                                   f"(node {n.name!r})")  # fmt: skip
            nodes.append(_function_node(n, op))
        elif n.op == "call_method":
            if n.target not in METHODS:
                raise _unsupported(f"tensor method {n.target!r} (node {n.name!r})")
            nodes.append(_function_node(n, n.target))
        elif n.op == "output":
            out = n.args[0]
            if not hasattr(out, "name"):
                raise ValueError("from_torch: forward must return one tensor; "
                                 f"got {type(out).__name__}")  # fmt: skip
            nodes.append(Node("output", "identity", (Ref(out.name),), source="output"))
    return nodes


def _arg(a: Any) -> Arg:
    if a is None or (isinstance(a, (int, float)) and not isinstance(a, bool)):
        return a
    if getattr(a, "op", None) == "get_attr":
        return Param(str(a.target))
    if hasattr(a, "name"):
        return Ref(a.name)
    raise _unsupported(f"argument {a!r}")


def _module_node(n: Any, mod: Any) -> Node:
    import torch  # noqa: PLC0415 - optional dependency

    kind = type(mod).__name__
    src = f"{n.target} (torch.nn.{kind})"
    if kind not in MODULES or type(mod) is not getattr(torch.nn, kind):
        raise _unsupported(f"module {n.target!r} ({type(mod).__module__}.{kind})")
    x = Ref(n.args[0].name)
    op = MODULES[kind]
    if kind == "Linear":
        b = Param(f"{n.target}.bias") if mod.bias is not None else None
        return Node(n.name, op, (x, Param(f"{n.target}.weight"), b), source=src)
    if kind == "LayerNorm":
        if len(mod.normalized_shape) != 1 or not mod.elementwise_affine or mod.bias is None:
            raise _unsupported(f"module {n.target!r} (LayerNorm needs one normalized axis with "
                               "elementwise_affine=True and bias=True)")  # fmt: skip
        args = (x, Param(f"{n.target}.weight"), Param(f"{n.target}.bias"))
        ln_opts = (("eps", float(mod.eps)), ("threads", torch.get_num_threads()))
        return Node(n.name, op, args, ln_opts, source=src)
    if kind == "GELU" and mod.approximate == "tanh":
        op = "gelu"
    if kind == "Dropout" and mod.training and mod.p > 0:
        raise ValueError(
            f"from_torch: module {n.target!r} is Dropout(p={mod.p}) in training "
            "mode (random); accepted: eval mode (call model.eval()) or p=0"
        )
    opts: tuple[tuple[str, Any], ...] = ()
    if kind in ("Softmax", "LogSoftmax"):
        opts = (("dim", -1 if mod.dim is None else int(mod.dim)),)
    if kind == "Flatten":
        opts = (("start_dim", int(mod.start_dim)), ("end_dim", int(mod.end_dim)))
    return Node(n.name, op, (x,), opts, source=src)


def _function_node(n: Any, op: str) -> Node:
    name = getattr(n.target, "__name__", str(n.target))
    src = f"{name} ({n.op})"
    kw = dict(n.kwargs)
    args = list(n.args)
    kw.pop("inplace", None) if not kw.get("inplace") else None
    if op == "gelu_erf" and kw.pop("approximate", "none") == "tanh":
        op = "gelu"
    if op in ("softmax", "log_softmax"):
        dim = kw.pop("dim", args.pop(1) if len(args) > 1 else -1)
        kw.pop("_stacklevel", None)
        if kw.get("dtype", None) is None:
            kw.pop("dtype", None)
        return _node(n, op, args, kw, (("dim", int(dim)),), src)
    if op == "flatten":
        start = kw.pop("start_dim", args.pop(1) if len(args) > 1 else 0)
        end = kw.pop("end_dim", args.pop(1) if len(args) > 1 else -1)
        return _node(n, op, args, kw, (("start_dim", int(start)), ("end_dim", int(end))), src)
    if op == "layer_norm":
        shape = kw.pop("normalized_shape", args.pop(1) if len(args) > 1 else None)
        eps = kw.pop("eps", args.pop(3) if len(args) > 3 else 1e-5)
        if shape is None or len(shape) != 1 or len(args) < 3 or args[1] is None:
            raise _unsupported(f"F.layer_norm call {n.name!r} (needs one axis, weight and bias)")
        import torch  # noqa: PLC0415 - optional dependency

        opts = (("eps", float(eps)), ("threads", torch.get_num_threads()))
        return _node(n, op, args[:3], kw, opts, src)
    if op == "identity":  # F.dropout: only as a no-op
        p = kw.pop("p", args[1] if len(args) > 1 else 0.5)
        if kw.pop("training", args[2] if len(args) > 2 else True) and p > 0:
            raise ValueError(f"from_torch: F.dropout call {n.name!r} with p={p} in training "
                             "mode (random); accepted: training=False or p=0")  # fmt: skip
        return Node(n.name, op, (_arg(args[0]),), source=src)
    if op in ("add", "sub") and kw.get("alpha", 1) != 1:
        raise _unsupported(f"{op} with alpha={kw['alpha']} (node {n.name!r})")
    kw.pop("alpha", None)
    return _node(n, op, args, kw, (), src)


def _node(n: Any, op: str, args: list[Any], kw: dict[str, Any],
          opts: tuple[tuple[str, Any], ...], src: str) -> Node:  # fmt: skip
    if kw:
        raise _unsupported(f"keyword arguments {sorted(kw)} of {op} (node {n.name!r})")
    return Node(n.name, op, tuple(_arg(a) for a in args), opts, source=src)
