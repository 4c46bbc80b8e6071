"""What one framework training step did, as ``compare_keras``'s checker reads it
(``TorchStep``: every node's output and output gradient, the loss, the unscaled parameter
gradients, the scaler state, the parameters before and after), and the conversions it uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fpemu.formats import get_format
from fpemu.nn.tensor import Tensor

_FORMATS = {"torch.float32": "float32", "torch.bfloat16": "bfloat16",
            "torch.float16": "float16", "torch.float64": "float64"}  # fmt: skip


def fmt_of(t: Any) -> str:
    """The fpemu format name of a torch tensor's (or NumPy array's) dtype.

    >>> import numpy as np
    >>> fmt_of(np.zeros(1, np.float32))
    'float32'
    """
    d = str(t.dtype)
    if d in _FORMATS:
        return _FORMATS[d]
    if d in ("float32", "float64"):
        return d
    raise ValueError(f"dtype {d} is not a floating format fpemu compares "
                     f"(accepted: {', '.join(_FORMATS)})")  # fmt: skip


def to_np(t: Any) -> np.ndarray:
    """A torch tensor (any float dtype: bf16/fp16 widened exactly to float32) or array as NumPy."""
    if isinstance(t, np.ndarray):
        return t
    if hasattr(t, "detach"):
        import torch  # noqa: PLC0415 - optional dependency

        t = t.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            return np.asarray(t.float().numpy())  # a new tensor already: no copy needed
        return np.asarray(t.numpy()).copy()
    return np.asarray(t)


def exact_leaf(data: np.ndarray, fmt: str, *, requires_grad: bool = False) -> Tensor:
    """A leaf Tensor holding ``data``, whose values are already exact in ``fmt`` (torch's
    tensors, widened exactly): ``Tensor(data, fmt)`` without its rounding pass, which would be
    the identity (only a NaN payload could change, and NaN payloads are never compared).

    >>> exact_leaf(np.float32([1.5]), "bfloat16").fmt.name
    'bfloat16'
    """
    t = Tensor.derived(data, get_format(fmt), (), "leaf")
    t.requires_grad = requires_grad
    return t


@dataclass
class TorchStep:
    """What one torch step did (arrays in NumPy; activations kept as torch tensors)."""

    acts: dict[str, Any] = field(default_factory=dict)
    act_grads: dict[str, Any] = field(default_factory=dict)
    loss: Any = None
    target: Any = None
    grads: dict[str, np.ndarray] = field(default_factory=dict)
    params_before: dict[str, np.ndarray] = field(default_factory=dict)
    params_after: dict[str, np.ndarray] = field(default_factory=dict)
    scale: float = 1.0
    scale_after: float = 1.0
    tracker: int = 0
    skipped: bool = False
    #: ``grads`` are divided by ``scale`` (torch's ``unscale_`` always; Keras's
    #: LossScaleOptimizer only when every gradient is finite)
    unscaled: bool = True
    #: the optimizer's per-parameter state before the step (momentum_buffer, exp_avg, ...)
    opt_state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    opt_steps: int = 0
