"""The transformer experiment: a small char-level GPT trained in its own torch loop under
:func:`fpemu.emulate`, once per configuration (fp32, fp16 without loss scaling, fp16 with a
GradScaler, bf16, TE delayed FP8, MXFP8, NVFP4), each on a named hardware model.

One command reproduces the docs page's tables and figure::

    fpemu emulate-experiment --steps 40 --plot docs/img/emulate-gpt.png

The text is eight of Shakespeare's sonnets shipped with fpemu (``fpemu/training/data``); the
model: token and position embeddings, 2 blocks of causal self-attention (explicit ``q @ k^T``,
masked softmax, ``@ v``) and a GELU MLP with pre-LayerNorm, a final LayerNorm and a head tied
to the token embedding. Parameters and batches come from NumPy's generator (torch's normal
draws differ between CPU capabilities); the loop is plain torch: ``torch.autocast("cuda")``,
``GradScaler``, AdamW. Per step it records the loss, the loss scale, and per Linear layer the
share of its output gradient's elements (``dY``, what its dgrad and wgrad GEMMs consume) that
are zero: underflowed, since float32 gives none (a full backward hook, the loop's own code).

>>> CONFIGS["fp16"]["policy"], CONFIGS["nvfp4"]["recipe"]
('torch_cuda_fp16', 'te_nvfp4')
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["CONFIGS", "plot", "table", "train_config"]

#: name -> emulate settings and the loop's options (dtype of the autocast region, GradScaler)
CONFIGS: dict[str, dict[str, Any]] = {
    "fp32": {"policy": "fp32", "model": "h100", "recipe": None, "dtype": None, "scaler": False},
    "fp16": {"policy": "torch_cuda_fp16", "model": "h100", "recipe": None, "dtype": "float16",
             "scaler": False},
    "fp16+scaler": {"policy": "torch_cuda_fp16", "model": "h100", "recipe": None,
                    "dtype": "float16", "scaler": True},
    "bf16": {"policy": "torch_cuda_bf16", "model": "h100", "recipe": None, "dtype": "bfloat16",
             "scaler": False},
    "fp8-delayed": {"policy": "torch_cuda_bf16", "model": "h100", "recipe": "te_delayed",
                    "dtype": "bfloat16", "scaler": False},
    "mxfp8": {"policy": "torch_cuda_bf16", "model": "b200", "recipe": "te_mxfp8",
              "dtype": "bfloat16", "scaler": False},
    "nvfp4": {"policy": "torch_cuda_bf16", "model": "b200", "recipe": "te_nvfp4",
              "dtype": "bfloat16", "scaler": False},
}  # fmt: skip

SIZES = {"d": 32, "heads": 2, "layers": 2, "t": 32, "batch": 16}


def _text() -> str:
    return (Path(__file__).resolve().parent.parent / "training/data/sonnets.txt").read_text()


def _gpt(vocab: int) -> Any:
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    from torch.nn import functional as F  # noqa: N812, PLC0415

    d, heads, t = SIZES["d"], SIZES["heads"], SIZES["t"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, n, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, n, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            att = (q @ k.transpose(-2, -1)) / math.sqrt(d // heads)
            mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
            y = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1) @ v
            x = x + self.proj(y.transpose(1, 2).contiguous().view(b, n, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
            self.blocks = nn.ModuleList(Block() for _ in range(SIZES["layers"]))
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight

        def forward(self, idx: Any) -> Any:
            x = self.tok(idx) + self.pos(torch.arange(idx.size(1)))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    model = GPT()
    rng = np.random.default_rng(0)
    with torch.no_grad():  # GPT-2's initialisation, from NumPy's generator
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln"):
                p.fill_(1.0)
            else:
                p.copy_(torch.from_numpy(rng.normal(0.0, 0.02, p.shape).astype(np.float32)))
    return model


def train_config(
    config: str, *, steps: int = 40, lr: float = 3e-3, model: str | None = None
) -> dict[str, Any]:
    """Train under ``CONFIGS[config]`` for ``steps`` steps; the loss, scale and underflow
    traces, the recipe state's amax/scale traces and the op counts. ``model`` replaces the
    configuration's hardware model (the tests use ``"fast"``)."""
    import torch  # noqa: PLC0415

    import fpemu.emulate as emulate_module  # noqa: PLC0415

    if config not in CONFIGS:
        raise ValueError(f"config={config!r}; accepted: {', '.join(CONFIGS)}")
    cfg = CONFIGS[config]
    text = _text()
    chars = sorted(set(text))
    data = np.array([chars.index(ch) for ch in text], np.int64)
    net = _gpt(len(chars))
    opt = torch.optim.AdamW(net.parameters(), lr=lr, foreach=False)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16) if cfg["scaler"] else None
    linears = {n: m for n, m in net.named_modules() if isinstance(m, torch.nn.Linear)}
    rng = np.random.default_rng(1)
    t, bsz = SIZES["t"], SIZES["batch"]
    out: dict[str, Any] = {"loss": [], "scale": [], "zeros": {n: [] for n in linears}}

    def hook(name: str) -> Any:
        def record(mod: Any, grad_in: Any, grad_out: Any) -> None:
            g = grad_out[0]
            out["zeros"][name].append(float((g == 0).sum()) / max(g.numel(), 1))

        return record

    for n, m in linears.items():
        m.register_full_backward_hook(hook(n))
    with emulate_module.emulate(policy=cfg["policy"], model=model or cfg["model"],
                                recipe=cfg["recipe"]) as em:  # fmt: skip
        for _ in range(steps):
            starts = rng.integers(0, data.size - t - 1, bsz)
            xb = torch.from_numpy(np.stack([data[s : s + t] for s in starts]))
            yb = torch.from_numpy(np.stack([data[s + 1 : s + t + 1] for s in starts]))
            opt.zero_grad(set_to_none=True)
            dtype = getattr(torch, cfg["dtype"] or "float32")
            with torch.autocast("cuda", dtype=dtype, enabled=cfg["dtype"] is not None):
                logits = net(xb)
                loss = torch.nn.functional.cross_entropy(logits.view(-1, len(chars)),
                                                         yb.reshape(-1))  # fmt: skip
            if scaler is None:
                loss.backward()  # type: ignore[no-untyped-call]
            else:
                scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
            if scaler is None:
                opt.step()
            else:
                out["scale"].append(float(scaler.get_scale()))
                scaler.step(opt)
                scaler.update()
            out["loss"].append(float(loss.detach()))
    out["state"] = {n: {r: {"amax": st.trace(r, "amax"), "scale": st.trace(r, "scale")}
                        for r in ("input", "weight", "grad_output")}
                    for n, st in em.state.items()}  # fmt: skip
    out["counts"] = em.counts
    out["not_emulated"] = em.not_emulated
    return out


def table(results: dict[str, dict[str, Any]]) -> str:
    """A Markdown table: per config the first and last losses and the mean zero-gradient share
    of each Linear layer (%)."""
    names = list(next(iter(results.values()))["zeros"])
    head = ["config", "policy / model / recipe", "loss 0", "loss end", *names]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for c, r in results.items():
        cfg = CONFIGS[c]
        what = f"{cfg['policy']} / {cfg['model']} / {cfg['recipe'] or '-'}"
        tail = np.mean(r["loss"][-5:])
        zeros = [f"{100 * np.mean(r['zeros'][n]):.1f}" for n in names]
        rows.append(f"| {c} | {what} | {r['loss'][0]:.3f} | {tail:.3f} | " + " | ".join(zeros)
                    + " |")  # fmt: skip
    return "\n".join(rows)


def plot(results: dict[str, dict[str, Any]], path: Path) -> Path:
    """Loss curves, the GradScaler's scale and the recipes' input amax/scale traces."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: PLC0415
    from matplotlib.figure import Figure  # noqa: PLC0415

    fig = Figure(figsize=(11, 3.4))
    FigureCanvasAgg(fig)
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for c, r in results.items():
        ax1.plot(r["loss"], label=c, lw=1.2)
        if r["scale"]:
            ax2.plot(r["scale"], label=f"{c}: loss scale", lw=1.2)
        for n, st in r["state"].items():
            if n == "blocks.0.fc":
                ax3.plot(st["grad_output"]["amax"], label=f"{c}: fc grad amax", lw=1.0)
                if not math.isnan(st["grad_output"]["scale"][-1]):
                    ax2.plot(st["grad_output"]["scale"], label=f"{c}: fc grad scale", lw=1.0)
    ax1.set(title="loss", xlabel="step")
    ax2.set(title="scales", xlabel="step", yscale="log")
    ax3.set(title="amax (blocks.0.fc grad_output)", xlabel="step", yscale="log")
    for ax in (ax1, ax2, ax3):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
