"""Benchmark: one training step of a 64-256-256-10 MLP, batch 256, emulated vs plain NumPy.

Rows: the fpemu step (forward, cross-entropy, backward, dynamic loss scaling, SGD) under the
PyTorch-CUDA-fp16 autocast preset with the ``fast`` and the ``sequential`` accumulation models,
and under the plain ``fp32`` policy; the baseline is the same step written directly in float32
NumPy (no emulation), measured in the same run. Ratios are median time / baseline median time.

The fpemu rows skip the per-layer gradient statistics (``train_step(stats=False)``). On a shared
machine pin BLAS to one thread so the baseline is not distorted by thread contention:
``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_training.py [--repeats N]``.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable
from dataclasses import replace

import numpy as np
from timing import median_time  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.amp.policy import get_policy
from fpemu.nn import MLP
from fpemu.training.loop import make_optimizer, make_scaler, train_step

SIZES = (64, 256, 256, 10)
BATCH = 256


def numpy_fp32_step(rng: np.random.Generator) -> Callable[[], None]:
    """The baseline: the same MLP step hand-written in float32 NumPy."""
    ws = [rng.uniform(-(a**-0.5), a**-0.5, (b, a)).astype(np.float32)
          for a, b in itertools.pairwise(SIZES)]  # fmt: skip
    bs = [np.zeros(b, np.float32) for b in SIZES[1:]]
    x = rng.normal(size=(BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)

    def step() -> None:
        hs, h = [x], x
        for i, (w, b) in enumerate(zip(ws, bs, strict=True)):
            h = h @ w.T + b
            if i < len(ws) - 1:
                h = np.maximum(h, np.float32(0))
            hs.append(h)
        z = h - h.max(axis=1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
        g = p
        g[np.arange(BATCH), y] -= 1
        g /= np.float32(BATCH)
        for i in reversed(range(len(ws))):
            gw, gb = g.T @ hs[i], g.sum(axis=0)
            if i:
                g = (g @ ws[i]) * (hs[i] > 0)
            ws[i] -= np.float32(0.01) * gw
            bs[i] -= np.float32(0.01) * gb

    return step


def fpemu_step(policy: str, acc_model: str, rng: np.random.Generator) -> Callable[[], None]:
    """One fpemu training step (forward, loss, scaled backward, unscale, SGD, update)."""
    pol = replace(get_policy(policy), acc_model=acc_model)
    model = MLP(list(SIZES), policy=pol, seed=0)
    opt = make_optimizer("sgd", model, lr=0.01)
    scaler = make_scaler("policy", pol)
    x = rng.normal(size=(BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    return lambda: train_step(model, opt, scaler, x, y, stats=False) and None



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seq-repeats", type=int, default=2, help="repeats of the sequential row")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    base = median_time(numpy_fp32_step(rng), args.repeats)
    rows = [
        ("plain float32 NumPy (baseline)", base),
        ("fpemu fp32 policy, fast", median_time(fpemu_step("fp32", "fast", rng), args.repeats)),
        (
            "fpemu torch_cuda_fp16, fast",
            median_time(fpemu_step("torch_cuda_fp16", "fast", rng), args.repeats),
        ),
        (
            "fpemu torch_cuda_fp16, sequential",
            median_time(fpemu_step("torch_cuda_fp16", "sequential", rng), args.seq_repeats),
        ),
    ]
    print(f"one training step, MLP {'-'.join(map(str, SIZES))}, batch {BATCH}")
    print(f"| {'step':36s} | {'median ms':>10s} | {'ratio':>7s} |")
    print(f"|{'-' * 38}|{'-' * 12}|{'-' * 9}|")
    for name, t in rows:
        print(f"| {name:36s} | {1e3 * t:10.2f} | {t / base:6.1f}x |")


if __name__ == "__main__":
    main()
