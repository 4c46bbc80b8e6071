"""Benchmark: ``fpemu.watch`` on a small GPT training step against the same step without it,
measured in the same run (issue 22's target: at most 5x).

The model: 2 layers, d=128, T=64, batch 8, 4 heads, vocabulary 65, causal attention by
``scaled_dot_product_attention``, LayerNorm, GELU, tied head; CPU bf16 autocast + AdamW
(foreach, torch's CPU default). Rows: the step alone (baseline), the step under ``watch``
(every ATen op judged), and the watch's own time (conversion and emulation) from its counter.
Ratios are median time / baseline median. On a shared machine pin the threads so the baseline
is not distorted: ``OMP_NUM_THREADS=1 python benchmarks/bench_watch.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import torch
from timing import median_time  # benchmarks/timing.py (this folder is on sys.path)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fpemu
from tests.watch_zoo import GPT


def make(config: str) -> tuple[Any, Any, Any, Any]:
    torch.manual_seed(0)
    model = GPT(vocab=65, d=128, t=64, layers=2, heads=4, sdpa=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 65, (8, 65), generator=g)
    scaler = torch.amp.GradScaler("cpu") if config == "fp16" else None
    return model, opt, scaler, (idx[:, :-1], idx[:, 1:])


def step(model: Any, opt: Any, scaler: Any, batch: Any, config: str) -> None:
    x, y = batch
    opt.zero_grad(set_to_none=True)
    dtype = torch.float16 if config == "fp16" else torch.bfloat16
    with torch.autocast("cpu", dtype=dtype, enabled=config != "fp32"):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 65), y.reshape(-1))
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp32", "fp16"])
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"capability {torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    print(f"{'config':8} {'torch step':>12} {'under watch':>12} {'ratio':>7} {'watch own':>10} ops")
    for config in args.configs:
        model, opt, scaler, batch = make(config)
        base = median_time(lambda: step(model, opt, scaler, batch, config), args.repeats)  # noqa: B023
        reports: list[Any] = []

        def watched() -> None:
            with fpemu.watch() as w:
                step(model, opt, scaler, batch, config)  # noqa: B023
            reports.append(w.report())  # noqa: B023

        t = median_time(watched, args.repeats)
        r = reports[-1]
        own = r.settings["watch_seconds"]
        print(f"{config:8} {base * 1e3:10.1f}ms {t * 1e3:10.1f}ms {t / base:6.1f}x "
              f"{own * 1e3:8.1f}ms {len(r.rows)}  {r.summary()}")  # fmt: skip


if __name__ == "__main__":
    main()
