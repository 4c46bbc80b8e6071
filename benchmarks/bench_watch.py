"""Benchmark: ``fpemu.watch`` on a small GPT training step against the same step without it,
measured in the same run (issue 22's target: at most 5x).

The model: 2 layers, d=128, T=64, batch 8, 4 heads, vocabulary 65, causal attention by
``scaled_dot_product_attention``, LayerNorm, GELU, tied head; CPU bf16 autocast + AdamW
(torch's CPU default: one tensor at a time). Rows per config: the step alone (baseline),
then the step under ``watch`` (every ATen op judged) as it runs by default, with a worker
process judging while the step goes on (:mod:`fpemu.offload`: it uses a core torch leaves
idle), and with ``FPEMU_PROCESSES=0`` (everything in the step's own thread). Columns: the
watch's own time in this process (conversion, queueing, the judgements it made itself) from
its counter (median over rounds), and how many judgements the worker made (last round).
Ratio: the median over rounds of the watched step's time / the bare step's in the same round.
torch runs on one thread (``--threads 1``, the default: the worker uses the core torch leaves
idle, and a shared machine's other core does not distort the baseline); ``--threads 0`` keeps
torch's default (then torch's OpenMP threads spin between ops on the worker's core: see
docs/validate-your-model.md). ``python benchmarks/bench_watch.py [--repeats N] [--configs bf16
fp32 fp16]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import fpemu
from fpemu import procpool
from fpemu.validate.twin.torch_twin import default_step
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
    """The user's step: ``compare_torch``'s default one (zero the gradients, forward and loss
    under CPU autocast, backward, the optimizer step, through the GradScaler in fp16)."""
    x, y = batch
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(config)
    default_step(_loss, dtype)(model, opt, scaler, x, y)


def _loss(logits: Any, y: Any) -> Any:
    return torch.nn.functional.cross_entropy(logits.view(-1, 65), y.reshape(-1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--configs", nargs="+", default=["bf16", "fp32", "fp16"])
    ap.add_argument("--threads", type=int, default=1,
                    help="torch's intra-op threads (1; 0: torch's default)")  # fmt: skip
    args = ap.parse_args()
    if args.threads < 0:
        ap.error(f"--threads must be 0 (torch's default) or more, got {args.threads}")
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, "
          f"capability {torch.backends.cpu.get_cpu_capability()}")  # fmt: skip
    ready = procpool.start(1, timeout=120)
    print(f"worker processes ready: {ready}; rounds of (step, watched with the worker, watched "
          "without): medians; ratio = median over rounds of watched / step in the same round")
    print(f"{'config':8} {'judged by':10} {'torch step':>10} {'watched':>9} {'ratio':>6} "
          f"{'watch own':>9} {'worker':>6} ops")  # fmt: skip
    for config in args.configs:
        model, opt, scaler, batch = make(config)
        times: dict[str, list[float]] = {"step": [], "worker": [], "this only": []}
        reports: dict[str, Any] = {}
        owns: dict[str, list[float]] = {"worker": [], "this only": []}
        for i in range(args.repeats + 1):  # round 0 warms up
            t0 = time.perf_counter()
            step(model, opt, scaler, batch, config)
            t = {"step": time.perf_counter() - t0}
            for who in ("worker", "this only"):
                if who == "this only":
                    os.environ[procpool.ENV] = "0"
                try:
                    t0 = time.perf_counter()
                    with fpemu.watch() as w:
                        step(model, opt, scaler, batch, config)
                    reports[who] = w.report()
                    t[who] = time.perf_counter() - t0
                    if i:
                        owns[who].append(reports[who].settings["watch_seconds"])
                finally:
                    os.environ.pop(procpool.ENV, None)
            for k, v in t.items():
                if i:
                    times[k].append(v)
        base = statistics.median(times["step"])
        for who in ("worker", "this only"):
            r = reports[who]
            ratio = statistics.median(a / b for a, b in zip(times[who], times["step"], strict=True))
            own, by = statistics.median(owns[who]), r.settings["worker_judgements"]
            mid = statistics.median(times[who])
            print(f"{config:8} {who:10} {base * 1e3:8.1f}ms {mid * 1e3:7.1f}ms {ratio:5.1f}x "
                  f"{own * 1e3:7.1f}ms {by:6d} {len(r.rows)}  {r.summary()}")  # fmt: skip


if __name__ == "__main__":
    main()
