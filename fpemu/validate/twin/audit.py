"""Autocast audit: the dtype torch really used for every op of a model's forward and backward
pass under CPU autocast, beside the format the fpemu policy assigns to that op.

The ops are recorded with a ``TorchDispatchMode`` (below autocast and autograd, so what it sees
are the ATen ops that ran, with the dtypes autocast gave them). Each ATen op is mapped to the
fpemu op of ``ATEN_TO_FPEMU``; an op with no fpemu counterpart is listed as "not in the
policy" (views, casts and bookkeeping ops that do no arithmetic are listed too: nothing is
silently dropped).

>>> ATEN_TO_FPEMU["addmm"], ATEN_TO_FPEMU["threshold_backward"]
('linear', 'relu')
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from fpemu.amp.policy import Policy, get_policy

#: ATen op (overload stripped) -> the fpemu op whose policy entry decides its format.
ATEN_TO_FPEMU: dict[str, str] = {
    "addmm": "linear", "mm": "linear", "linear": "linear", "matmul": "matmul", "bmm": "matmul",
    "relu": "relu", "threshold_backward": "relu", "gelu": "gelu", "gelu_backward": "gelu",
    "silu": "silu", "silu_backward": "silu", "tanh": "tanh", "tanh_backward": "tanh",
    "sigmoid": "sigmoid", "sigmoid_backward": "sigmoid", "_softmax": "softmax",
    "_softmax_backward_data": "softmax", "_log_softmax": "log_softmax",
    "_log_softmax_backward_data": "log_softmax", "native_layer_norm": "layer_norm",
    "native_layer_norm_backward": "layer_norm", "add": "add", "sub": "add", "mul": "mul",
    "sum": "sum", "mean": "mean", "nll_loss_forward": "cross_entropy",
    "nll_loss_backward": "cross_entropy", "mse_loss": "mse", "mse_loss_backward": "mse",
}  # fmt: skip
_NAMES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16",
          "torch.float64": "float64"}  # fmt: skip


def _dtypes(values: Any) -> list[str]:
    out = []
    for v in values if isinstance(values, (list, tuple)) else [values]:
        if isinstance(v, (list, tuple)):
            out += _dtypes(v)
        elif hasattr(v, "dtype") and str(v.dtype) in _NAMES:
            out.append(_NAMES[str(v.dtype)])
    return out


def autocast_audit(
    model: Any,
    inputs: Any,
    targets: Any,
    *,
    autocast: Any,
    policy: Policy | str,
    loss: str = "cross_entropy",
) -> list[dict[str, str]]:
    """One row per distinct (phase, ATen op, input dtypes): torch's output dtype, the fpemu op
    and the format the policy gives it, and whether they agree.

    ``model`` is deep-copied (its parameters and gradients are left alone); one forward and
    backward pass runs on ``inputs``/``targets`` (one batch) under ``autocast``
    (``("cpu", dtype)`` or None).
    """
    import torch as torch_module  # noqa: PLC0415 - optional dependency
    from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

    torch: Any = torch_module  # used untyped: the audit reads what torch ran
    base: Any = TorchDispatchMode

    pol = get_policy(policy)
    net = copy.deepcopy(model).eval()
    rows: dict[tuple[str, str, str], dict[str, str]] = {}
    phase = ["forward"]

    class _Record(base):  # type: ignore[misc]
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:  # fmt: skip
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            ins = _dtypes(list(args) + list((kwargs or {}).values()))
            key = (phase[0], name, ",".join(ins))
            if key not in rows:
                rows[key] = _row(phase[0], name, ins, _dtypes(out), pol)
            return out

    x = torch.as_tensor(np.asarray(inputs), dtype=torch.float32)
    y = torch.as_tensor(np.asarray(targets))
    ctx = (torch.autocast(autocast[0], dtype=_torch_dtype(torch, autocast[1]))
           if autocast is not None else torch.autocast("cpu", enabled=False))  # fmt: skip
    with _Record():
        with ctx:
            out = net(x)
            if loss == "cross_entropy":
                lv = torch.nn.functional.cross_entropy(out, y)
            else:
                lv = torch.nn.functional.mse_loss(out, y.to(torch.float32))
        phase[0] = "backward"
        lv.backward()
    return list(rows.values())


def _torch_dtype(torch: Any, d: Any) -> Any:
    if isinstance(d, str):
        return torch.bfloat16 if d in ("bf16", "bfloat16") else torch.float16
    return d


def _row(phase: str, name: str, ins: list[str], outs: list[str], pol: Policy) -> dict[str, str]:
    op = ATEN_TO_FPEMU.get(name)
    torch_out = outs[0] if outs else "-"
    row = {"phase": phase, "aten op": name, "torch inputs": ",".join(ins) or "-",
           "torch output": torch_out, "fpemu op": op or "-", "fpemu output": "-",
           "verdict": "not in the policy"}  # fmt: skip
    if op is not None and ins:
        floating = [f for f in ins if f != "float64"] or ins
        fmt = pol.op_formats(op, floating)[1].name
        if name.endswith("_backward") or name.endswith("_backward_data"):
            fmt = ins[0]  # a backward op returns its upstream gradient's format
        row["fpemu output"] = fmt
        row["verdict"] = "agree" if fmt == torch_out else "differ"
    return row
