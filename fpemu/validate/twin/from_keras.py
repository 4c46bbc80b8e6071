"""Bring a Keras 3 ``Sequential`` model into fpemu (forward pass), for the torch backend.

A Keras ``Dense`` layer is ``matmul(x, kernel)`` then ``+ bias`` as two ops, each rounded to
the compute dtype under a ``mixed_*`` policy (the kernel and bias are autocast to it, amp.md
3.1), unlike torch's fused ``linear``; so a Dense becomes a ``matmul`` node and an ``add``
node, then its activation. ``LayerNormalization`` computes in float32 and casts its output to
the compute dtype (the ``fp32_out_lower`` entry of the ``keras_mixed_*`` presets).

Supported: ``Dense`` (activations of ``ACTIVATIONS``), ``Activation``,
``LayerNormalization`` over the last axis with center and scale, ``Dropout`` (identity: the
forward pass of inference). Training side by side: ``fpemu.validate.compare_keras``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.amp.policy import Policy
from fpemu.nn.graph import GraphModule, Node, Param, Ref

#: Keras activation name -> fpemu op ("linear" adds no node). Keras 3's gelu is the erf form.
ACTIVATIONS: dict[str, str] = {
    "relu": "relu", "gelu": "gelu_erf", "tanh": "tanh", "sigmoid": "sigmoid", "silu": "silu",
    "swish": "silu", "softmax": "softmax", "linear": "",
}  # fmt: skip
LAYERS = ("Dense", "Activation", "LayerNormalization", "Dropout")
POLICIES = {"mixed_bfloat16": "keras_mixed_bfloat16", "mixed_float16": "keras_mixed_float16",
            "float32": "fp32"}  # fmt: skip


def _array(v: Any) -> np.ndarray:
    import torch  # noqa: PLC0415 - the torch backend's variables hold torch tensors

    return np.asarray(torch.as_tensor(v).detach().float().cpu().numpy()).copy()


def from_keras(model: Any, *, policy: Policy | str | None = None) -> GraphModule:
    """The forward pass of a Keras 3 ``Sequential`` model as an fpemu model.

    Args:
        model: a built ``keras.Sequential`` on the torch backend.
        policy: the fpemu policy; default: the preset matching the model's dtype policy
            (``mixed_bfloat16``, ``mixed_float16`` or ``float32``).

    Raises:
        ValueError: a layer or activation outside what is supported (named, with the list),
            or a dtype policy with no preset.
    """
    name = getattr(getattr(model, "dtype_policy", None), "name", "float32")
    if policy is None:
        if name not in POLICIES:
            raise ValueError(f"from_keras: dtype policy {name!r} has no fpemu preset; accepted "
                             f"{', '.join(POLICIES)}, or pass policy=")  # fmt: skip
        policy = POLICIES[name]
    params: dict[str, np.ndarray] = {}
    nodes = [Node("input", "input", source="input")]
    prev = "input"

    def add(node: Node) -> None:
        nonlocal prev
        nodes.append(node)
        prev = node.name

    for layer in model.layers:
        kind, lname = type(layer).__name__, layer.name
        src = f"{lname} (keras.layers.{kind})"
        lpol = getattr(getattr(layer, "dtype_policy", None), "name", name)
        if lpol != name:  # one policy for the twin: a layer built under another is refused
            raise ValueError(f"from_keras: layer {src} has dtype policy {lpol!r}, the model "
                             f"{name!r}; accepted: every layer under the model's policy "
                             "(build the layers after keras.config.set_dtype_policy)")  # fmt: skip
        if kind == "Dense":
            params[f"{lname}.kernel"] = _array(layer.kernel.value)
            add(Node(f"{lname}.matmul", "matmul", (Ref(prev), Param(f"{lname}.kernel")),
                     source=src))  # fmt: skip
            if layer.use_bias:
                params[f"{lname}.bias"] = _array(layer.bias.value)
                add(Node(f"{lname}.bias_add", "add", (Ref(prev), Param(f"{lname}.bias")),
                         source=src))  # fmt: skip
            _activation(layer, lname, src, prev, add)
        elif kind == "Activation":
            _activation(layer, lname, src, prev, add)
        elif kind == "LayerNormalization":
            axis = layer.axis if isinstance(layer.axis, int) else list(layer.axis)
            if axis not in (-1, [-1]) or not (layer.center and layer.scale):
                raise ValueError(f"from_keras: layer {lname!r} (LayerNormalization needs "
                                 "axis=-1, center=True and scale=True)")  # fmt: skip
            params[f"{lname}.gamma"] = _array(layer.gamma.value)
            params[f"{lname}.beta"] = _array(layer.beta.value)
            add(Node(lname, "layer_norm", (Ref(prev), Param(f"{lname}.gamma"),
                                           Param(f"{lname}.beta")),
                     (("eps", float(layer.epsilon)),), source=src))  # fmt: skip
        elif kind == "Dropout":
            add(Node(lname, "identity", (Ref(prev),), source=src))
        else:
            raise ValueError(f"from_keras: unsupported layer {lname!r} ({kind}); supported "
                             f"layers: {', '.join(LAYERS)}; activations: "
                             f"{', '.join(ACTIVATIONS)}")  # fmt: skip
    nodes.append(Node("output", "identity", (Ref(prev),), source="output"))
    return GraphModule(params, nodes, policy=policy)


def _activation(layer: Any, lname: str, src: str, prev: str, add: Any) -> None:
    act = getattr(layer.activation, "__name__", str(layer.activation))
    if act not in ACTIVATIONS:
        raise ValueError(f"from_keras: layer {lname!r} uses activation {act!r}; supported "
                         f"activations: {', '.join(ACTIVATIONS)}")  # fmt: skip
    op = ACTIVATIONS[act]
    if op:
        add(Node(f"{lname}.{act}", op, (Ref(prev),), source=src))
