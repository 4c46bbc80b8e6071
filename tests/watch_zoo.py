"""A zoo of small torch models written the way people write them, and the training step each
runs under the three configurations of issue 22 (bf16 autocast + AdamW, fp16 autocast +
GradScaler + SGD with momentum, float32 + AdamW). Used by tests/test_watch_zoo.py and the
watch benchmark; torch is imported by the importer's ``importorskip``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name everyone uses
from torch import nn

CONFIGS = ("bf16_adamw", "fp16_scaler_sgd", "fp32_adamw")


# -- MLP variants -------------------------------------------------------------------------------
class MLPReLU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(inplace=True), nn.Linear(32, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MLPGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.fc1(x))
        x = F.gelu(self.fc2(x), approximate="tanh")
        return self.fc3(x)


class MLPLayerNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.ln, self.fc2 = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.ln(self.fc1(x))))


class MLPSiluDropout(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, 32), nn.SiLU(), nn.Dropout(0.1), nn.Linear(32, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class MLPSigmoidTanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 24), nn.Linear(24, 24), nn.Linear(24, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.tanh(self.b(torch.sigmoid(self.a(x)))))


class MLPLeakyFlatten(nn.Module):
    """Takes (B, 4, 4) inputs and flattens them with ``x.view(x.size(0), -1)``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(16, 32), nn.LeakyReLU(0.1), nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.size(0), -1)
        return self.fc2(self.act(self.fc1(x)))


class SharedWeights(nn.Module):
    """One Linear applied twice (its weight gets two gradient contributions)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp, self.shared, self.out = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.shared(torch.relu(self.inp(x))))
        return self.out(torch.relu(self.shared(h)) + h)


class ScaledReLU(torch.autograd.Function):
    """A correct custom Function: relu(x) * 2 with its hand-written backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(min=0) * 2

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * (x > 0).to(g.dtype) * 2


class CustomFunction(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(ScaledReLU.apply(self.fc1(x)))


class Hooked(nn.Module):
    """A forward hook that rescales an output and a tensor hook that halves a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 5)
        self.fc1.register_forward_hook(lambda m, i, o: o * 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if h.requires_grad:
            h.register_hook(lambda g: g * 0.5)
        return self.fc2(h)


class Functional(nn.Module):
    """Parameters by hand and the functional API (``F.linear``, ``F.layer_norm`` with weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = nn.Parameter(torch.randn(32, 16) / 4)
        self.b1 = nn.Parameter(torch.zeros(32))
        self.g = nn.Parameter(torch.ones(32))
        self.beta = nn.Parameter(torch.zeros(32))
        self.w2 = nn.Parameter(torch.randn(5, 32) / 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.linear(x, self.w1, self.b1)
        h = F.layer_norm(h, (32,), self.g, self.beta)
        return F.linear(F.relu(h), self.w2)


class RMSNormMLP(nn.Module):
    """A hand-written RMSNorm (as in LLaMA code) between two Linears."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 5)
        self.weight = nn.Parameter(torch.ones(32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
        return self.fc2(F.silu(h))


# -- CNNs ---------------------------------------------------------------------------------------
class CNN(nn.Module):
    """Conv-BatchNorm-ReLU-MaxPool twice, global average pooling, a Linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )  # fmt: skip
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class CNN1d(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 8, 5, stride=2)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(F.relu(self.conv(x)).mean(dim=-1))


# -- transformers -------------------------------------------------------------------------------
class Block(nn.Module):
    def __init__(self, d: int, heads: int, *, sdpa: bool) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.heads, self.sdpa = heads, sdpa

    def attn(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
            att = att.masked_fill(~mask, float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token and position embeddings, causal blocks, final LayerNorm, a head tied to the
    token embedding (``head.weight = tok.weight``)."""

    def __init__(self, *, vocab: int = 32, d: int = 32, t: int = 16, layers: int = 2,
                 heads: int = 2, sdpa: bool = False, dropout: float = 0.0) -> None:  # fmt: skip
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(d, heads, sdpa=sdpa) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.size(1)
        x = self.drop(self.tok(idx) + self.pos(torch.arange(t)))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


class MHAEncoder(nn.Module):
    """``nn.MultiheadAttention`` with a residual, LayerNorm and an MLP, regression loss."""

    def __init__(self) -> None:
        super().__init__()
        self.mha = nn.MultiheadAttention(16, 2, batch_first=True)
        self.ln = nn.LayerNorm(16)
        self.mlp = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, _ = self.mha(x, x, x, need_weights=False)
        x = self.ln(x + a)
        return x + self.mlp(x)


class TransformerLayer(nn.Module):
    """torch's own ``nn.TransformerEncoderLayer`` (its attention through ``_safe_softmax``, with
    dropout in train mode), mean-pooled into a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(x).mean(1))


# -- the zoo -----------------------------------------------------------------------------------
def _cls(n: int) -> Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]]:
    return lambda g: (torch.randn(n, 16, generator=g), torch.randint(0, 5, (n,), generator=g))


def _tokens(g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    idx = torch.randint(0, 32, (4, 17), generator=g)
    return idx[:, :-1], idx[:, 1:]


#: name -> (factory, data(generator) -> (input, target), loss kind)
ZOO: dict[str, tuple[Callable[[], nn.Module], Callable[..., Any], str]] = {
    "mlp_relu_inplace": (MLPReLU, _cls(8), "ce"),
    "mlp_gelu": (MLPGelu, _cls(8), "ce"),
    "mlp_layernorm": (MLPLayerNorm, _cls(8), "ce"),
    "mlp_silu_dropout": (MLPSiluDropout, _cls(8), "ce_smooth"),
    "mlp_sigmoid_tanh": (MLPSigmoidTanh, _cls(8), "ce"),
    "mlp_leaky_flatten": (MLPLeakyFlatten,
                          lambda g: (torch.randn(8, 4, 4, generator=g),
                                     torch.randint(0, 5, (8,), generator=g)), "ce"),
    "shared_weights": (SharedWeights, _cls(8), "ce"),
    "custom_function": (CustomFunction, _cls(8), "ce"),
    "hooks": (Hooked, _cls(8), "ce"),
    "functional": (Functional, _cls(8), "ce"),
    "rmsnorm_mlp": (RMSNormMLP, _cls(8), "ce"),
    "mlp_mse": (MLPGelu, lambda g: (torch.randn(8, 16, generator=g),
                                    torch.randn(8, 5, generator=g)), "mse"),
    "cnn_batchnorm": (CNN, lambda g: (torch.randn(4, 3, 8, 8, generator=g),
                                      torch.randint(0, 5, (4,), generator=g)), "ce"),
    "cnn1d": (CNN1d, lambda g: (torch.randn(4, 4, 21, generator=g),
                                torch.randint(0, 5, (4,), generator=g)), "ce"),
    "gpt_manual_attention": (lambda: GPT(sdpa=False), _tokens, "ce_tokens"),
    "gpt_sdpa": (lambda: GPT(sdpa=True), _tokens, "ce_tokens"),
    "gpt_dropout": (lambda: GPT(sdpa=True, dropout=0.1, layers=1), _tokens, "ce_tokens"),
    "transformer_layer": (TransformerLayer, lambda g: (torch.randn(3, 6, 16, generator=g),
                                                       torch.randint(0, 5, (3,), generator=g)),
                          "ce"),
    "mha_encoder": (MHAEncoder, lambda g: (torch.randn(2, 6, 16, generator=g),
                                           torch.randn(2, 6, 16, generator=g)), "mse"),
}  # fmt: skip


def loss_fn(kind: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if kind == "mse":
        return F.mse_loss(out, y)
    if kind == "ce_smooth":
        return F.cross_entropy(out, y, label_smoothing=0.1)
    if kind == "ce_tokens":
        return F.cross_entropy(out.view(-1, out.size(-1)), y.reshape(-1), ignore_index=0)
    return F.cross_entropy(out, y)


def setup(name: str, config: str, seed: int) -> tuple[nn.Module, Any, Any, list[Any]]:
    """The model, optimizer, scaler (or None) and the data of ``steps`` batches, all made
    outside any watched block (data loading is not part of the step)."""
    factory, data, _ = ZOO[name]
    torch.manual_seed(seed)
    model = factory()
    model.train()
    if config == "fp16_scaler_sgd":
        opt: Any = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        scaler = torch.amp.GradScaler("cpu")
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scaler = None
    g = torch.Generator().manual_seed(1000 + seed)
    batches = [data(g) for _ in range(3)]
    return model, opt, scaler, batches


def train_step(name: str, config: str, model: nn.Module, opt: Any, scaler: Any,
               batch: Any) -> torch.Tensor:  # fmt: skip
    """One training step exactly as a user writes it."""
    kind = ZOO[name][2]
    x, y = batch
    opt.zero_grad(set_to_none=True)
    if config == "fp32_adamw":
        loss = loss_fn(kind, model(x), y)
        loss.backward()
        opt.step()
        return loss
    dtype = torch.bfloat16 if config == "bf16_adamw" else torch.float16
    with torch.autocast("cpu", dtype=dtype):
        loss = loss_fn(kind, model(x), y)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss
