"""A zoo of small PyTorch models for tests/test_validate_model*.py (import it after
``pytest.importorskip("torch")``).

Each entry builds ``(model, inputs, targets, compare_torch keyword arguments)`` from a seed.
Models are tiny (batch 16, widths <= 16, 2-3 steps) so the whole zoo runs in a few seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

Entry = tuple[Any, Any, Any, dict[str, Any]]


def _data(seed: int, d: int = 8, classes: int = 4, n: int = 16) -> tuple[Any, Any]:
    # the entries build their layers right after this call, from the global generator: seed it
    # here (a seed set after the layers are built, as _mlp does, only reaches the next entry,
    # and left the first entry built in a process with random weights)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g)


def _mlp(*layers: Any) -> Any:

    torch.manual_seed(0)
    return torch.nn.Sequential(*layers)


def plain_relu_bf16_sgd() -> Entry:

    x, y = _data(1)
    m = _mlp(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    return m, x, y, {"autocast": ("cpu", "bf16"), "optimizer": "sgd", "lr": 0.1,
                     "momentum": 0.9, "weight_decay": 1e-3, "steps": 3}


class Residual:
    """``x + fc2(relu(fc1(x)))`` then a head: a custom module traced through."""

    @staticmethod
    def make() -> Any:

        class Block(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

            def forward(self, x: Any) -> Any:
                return x + self.fc2(torch.relu(self.fc1(x)))

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.blocks = nn.ModuleList([Block(), Block()])
                self.head = nn.Linear(8, 4)

            def forward(self, x: Any) -> Any:
                for b in self.blocks:
                    x = b(x)
                return self.head(x)

        torch.manual_seed(0)
        return Net()


def residual_bf16_sgd() -> Entry:
    x, y = _data(2)
    return Residual.make(), x, y, {"autocast": ("cpu", "bf16"), "optimizer": "sgd", "lr": 0.05,
                                   "steps": 3}


def layernorm_bf16_adamw() -> Entry:

    x, y = _data(3)
    m = _mlp(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 4))
    return m, x, y, {"autocast": ("cpu", "bf16"), "optimizer": "adamw", "lr": 1e-2,
                     "weight_decay": 0.01, "steps": 2}


def gelu_erf_bf16_adam() -> Entry:

    x, y = _data(4)
    m = _mlp(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    return m, x, y, {"autocast": ("cpu", "bf16"), "optimizer": "adam", "lr": 1e-2, "steps": 2}


def gelu_tanh_fp16_scaler_sgd() -> Entry:

    x, y = _data(5)
    m = _mlp(nn.Linear(8, 16), nn.GELU(approximate="tanh"), nn.Linear(16, 4))
    return m, x, y, {"autocast": ("cpu", "fp16"), "optimizer": "sgd", "lr": 0.1,
                     "grad_scaler": {"init_scale": 1024.0, "growth_interval": 2}, "steps": 3}


def silu_fp16_scaler_adamw() -> Entry:

    x, y = _data(6)
    m = _mlp(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 4))
    return m, x, y, {"autocast": ("cpu", "fp16"), "optimizer": "adamw", "lr": 1e-2,
                     "grad_scaler": {"init_scale": 256.0}, "steps": 2}


def dropout_tanh_sigmoid_fp32() -> Entry:

    x, y = _data(7)
    m = _mlp(nn.Linear(8, 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, 16), nn.Sigmoid(),
             nn.Linear(16, 4))
    return m, x, y, {"autocast": None, "optimizer": "sgd", "lr": 0.1, "steps": 2}


def fp16_overflow_skips() -> Entry:
    """A 2**20 initial scale overflows float16 in the backward: the first two steps are skipped."""

    x, y = _data(8)
    m = _mlp(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return m, x, y, {"autocast": ("cpu", "fp16"), "optimizer": "sgd", "lr": 0.1,
                     "grad_scaler": {"init_scale": 2.0**20, "growth_interval": 2}, "steps": 4}


def log_softmax_head_bf16() -> Entry:

    x, y = _data(9)
    m = _mlp(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.LogSoftmax(dim=-1))
    return m, x, y, {"autocast": ("cpu", "bf16"), "optimizer": "sgd", "lr": 0.1, "steps": 2}


def functional_calls_bf16() -> Entry:
    """Flatten, Identity, torch.relu, F.gelu(tanh), a scalar multiply, a subtraction."""

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.flat, self.id = nn.Flatten(), nn.Identity()
            self.a, self.b = nn.Linear(8, 16), nn.Linear(16, 4)

        def forward(self, x: Any) -> Any:
            h = self.a(self.id(self.flat(x)))
            h = F.gelu(h, approximate="tanh") * 0.5 - torch.relu(h)
            return self.b(h)

    torch.manual_seed(0)
    x, y = _data(10)
    return Net(), x.reshape(16, 2, 4), y, {"autocast": ("cpu", "bf16"), "optimizer": "sgd",
                                           "lr": 0.1, "steps": 2}


def mse_regression_fp32_adam() -> Entry:

    x, _ = _data(11)
    t = torch.randn(16, 2, generator=torch.Generator().manual_seed(12))
    m = _mlp(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2))
    return m, x, t, {"loss": "mse", "autocast": None, "optimizer": "adam", "lr": 1e-2,
                     "steps": 2}


ZOO: dict[str, Callable[[], Entry]] = {
    f.__name__: f
    for f in (plain_relu_bf16_sgd, residual_bf16_sgd, layernorm_bf16_adamw, gelu_erf_bf16_adam,
              gelu_tanh_fp16_scaler_sgd, silu_fp16_scaler_adamw, dropout_tanh_sigmoid_fp32,
              fp16_overflow_skips, log_softmax_head_bf16, functional_calls_bf16,
              mse_regression_fp32_adam)
}

__all__ = ["ZOO", "np"]
