"""Benchmark: ``compare_torch`` on a 3-layer 256-wide MLP, batch 256, 20 steps, against the same
20 torch steps alone (the baseline), measured in the same run.

Rows: the baseline (torch CPU autocast bf16 + SGD, 20 steps: forward, cross-entropy, backward,
step); ``compare_torch`` with the same settings in both modes (``lockstep``: torch's steps under
``fpemu.watch``, every ATen op judged from torch's inputs; ``independent``: and the emulated
twin's steps under ``fpemu.emulate.as_torch.as_torch_cpu``, with the drift of every tensor);
the twin's steps alone; and the same under fp16 autocast with a GradScaler. Ratios are median
time / baseline median time. On a shared machine pin the threads so the baseline is not distorted:
``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python benchmarks/bench_validate.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import torch
from timing import median_time  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.emulate.as_torch import as_torch_cpu
from fpemu.validate import compare_torch

WIDTH, BATCH, STEPS, FEATURES, CLASSES = 256, 256, 20, 256, 10


def make() -> tuple[Any, Any, Any]:
    """The model (3 Linear layers of width 256 with ReLU) and one batch."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
        torch.nn.ReLU(), torch.nn.Linear(WIDTH, CLASSES))  # fmt: skip
    g = torch.Generator().manual_seed(1)
    return net, torch.randn(BATCH, FEATURES, generator=g), torch.randint(0, CLASSES, (BATCH,),
                                                                        generator=g)  # fmt: skip


def torch_alone(dtype: Any, scaled: bool) -> Callable[[], None]:
    """The baseline: the same 20 steps in plain torch."""

    def run() -> None:
        net, x, y = make()
        opt = torch.optim.SGD(net.parameters(), lr=0.01, foreach=False)
        scaler = torch.amp.GradScaler("cpu") if scaled else None
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=dtype):
                loss = torch.nn.functional.cross_entropy(net(x), y)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()

    return run


def compared(dtype: Any, scaled: bool, mode: str = "independent") -> Callable[[], None]:
    """compare_torch with the same settings (lockstep: torch's steps under fpemu.watch;
    independent: and the emulated twin's steps)."""

    def run() -> None:
        net, x, y = make()
        r = compare_torch(net, x, y, autocast=("cpu", dtype), steps=STEPS, lr=0.01,
                          grad_scaler={} if scaled else None, mode=mode, audit=False)  # fmt: skip
        assert r.ok, r.summary()

    return run


def twin_alone(dtype: Any, scaled: bool) -> Callable[[], None]:
    """Part of the cost, alone: the twin's steps under as_torch_cpu (no watch)."""

    def run() -> None:
        with as_torch_cpu():
            torch_alone(dtype, scaled)()

    return run


def main() -> None:
    """Print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}, "
          f"{torch.get_num_threads()} threads; MLP {FEATURES}-{WIDTH}-{WIDTH}-{CLASSES}, "
          f"batch {BATCH}, {STEPS} steps, median of {args.repeats}")  # fmt: skip
    print(f"{'row':44s} {'seconds':>8s} {'ratio':>6s}")
    for name, dtype, scaled in (("bf16", torch.bfloat16, False),
                                ("fp16 + GradScaler", torch.float16, True)):  # fmt: skip
        base = median_time(torch_alone(dtype, scaled), args.repeats)
        print(f"{'torch alone, ' + name + ' (baseline)':44s} {base:8.3f} {1.0:6.2f}")
        for mode in ("independent", "lockstep"):
            cmp = median_time(compared(dtype, scaled, mode), args.repeats)
            print(f"{'compare_torch, ' + name + ', ' + mode:44s} {cmp:8.3f} {cmp / base:6.2f}")
        t = median_time(twin_alone(dtype, scaled), args.repeats)  # where the time goes
        print(f"{'  part: the twin alone, ' + name:44s} {t:8.3f} {t / base:6.2f}")


if __name__ == "__main__":
    main()
