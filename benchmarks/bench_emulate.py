"""Benchmark: one training step of a small GPT under ``fpemu.emulate`` against torch's own CPU
bf16 autocast step, measured in the same run (issue 23's target: at most 10x with
``model="fast"``; the h100 model's cost is reported beside it).

The model: 2 layers, d=128, T=64, batch 8, 4 heads, vocabulary 65, causal attention by
``scaled_dot_product_attention``, LayerNorm, GELU, tied head; AdamW. The step is the user's own
loop with ``torch.autocast("cpu", dtype=torch.bfloat16)``: run by torch (baseline), and under
``emulate(policy="torch_cuda_bf16", model=M)`` (CUDA's lists, every op in the table emulated,
GEMMs in fpemu's ordered models). Times are medians of ``--repeats`` steps after one warm-up;
ratios are against the baseline median. On a shared machine pin the threads:
``OMP_NUM_THREADS=1 python benchmarks/bench_emulate.py [--repeats N]``.
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


def make() -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    model = GPT(vocab=65, d=128, t=64, layers=2, heads=4, sdpa=True)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 65, (8, 65), generator=g)
    return model, opt, (idx[:, :-1], idx[:, 1:])


def step(model: Any, opt: Any, batch: Any) -> None:
    x, y = batch
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.view(-1, 65), y.reshape(-1))
    loss.backward()
    opt.step()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=["fast", "h100"])
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"capability {torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    model, opt, batch = make()
    base = median_time(lambda: step(model, opt, batch), args.repeats)
    print(f"{'run':32} {'step':>10} {'ratio':>7}")
    print(f"{'torch CPU bf16 autocast':32} {base * 1e3:8.1f}ms {1.0:6.1f}x")
    ems: list[Any] = []
    for m in args.models:

        def emulated(m: str = m) -> None:
            with fpemu.emulate(policy="torch_cuda_bf16", model=m) as em:
                step(model, opt, batch)
            ems.append(em)

        t = median_time(emulated, args.repeats if m == "fast" else 1)
        c = ems[-1].counts
        print(f"{'emulate torch_cuda_bf16 ' + m:32} {t * 1e3:8.1f}ms {t / base:6.1f}x  "
              f"ops emulated {c['emulated']}, not emulated {c['not_emulated']}")  # fmt: skip
    print(ems[-1].summary())


if __name__ == "__main__":
    main()
