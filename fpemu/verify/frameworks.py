"""Framework operators as campaign functions: PyTorch's CPU fp16/bf16 arithmetic vs fpemu.

Torch is imported when a campaign runs, never at import time (it is an optional extra).

>>> TorchOp("add", "fp16").fmt
'float16'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.formats import get_format

F64 = NDArray[np.float64]
_OPS = ("add", "sub", "mul", "div")


@dataclass(frozen=True)
class TorchOp:
    """``torch.<op>`` on CPU tensors of dtype ``fmt`` (float16 or bfloat16); picklable."""

    op: str
    fmt: str

    def __post_init__(self) -> None:
        if self.op not in _OPS:
            raise ValueError(f"op={self.op!r}: expected one of {_OPS}")
        name = get_format(self.fmt).name
        if name not in ("float16", "bfloat16"):
            raise ValueError(f"fmt={self.fmt!r}: expected float16 or bfloat16")
        object.__setattr__(self, "fmt", name)

    def __call__(self, x: Any, y: Any) -> F64:
        import torch  # noqa: PLC0415 - optional dependency

        dt = torch.float16 if self.fmt == "float16" else torch.bfloat16
        with np.errstate(invalid="ignore"):  # NaN operands; other values narrow exactly
            xa, ya = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)
        a, b = torch.from_numpy(xa).to(dt), torch.from_numpy(ya).to(dt)
        out = getattr(torch, self.op)(a, b)
        return np.asarray(out.to(torch.float32).numpy(), dtype=np.float64)
