"""Benchmark: one training step of the 64-256-256-10 MLP (batch 256) under FP8 recipes.

Baseline: the same step under the ``torch_cuda_fp16`` AMP policy (its default ``fast``
accumulation model and torch's dynamic loss scaler), measured in the same run. Rows: the FP8
recipes ``te_delayed`` (the target: <= 3x the baseline), ``te_current`` and
``torchao_tensorwise``: three quantized GEMMs per layer on the FP8 tensor-core model (fprop
fast, dgrad/wgrad split every 128 K), FP32 between layers, no loss scaler. Ratios are median
time / baseline median time. The per-layer gradient statistics are skipped
(``train_step(stats=False)``) in every row; the FP8 per-role records are kept (part of a step).

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_fp8_training.py [--repeats N]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from timing import median_time  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.amp.policy import get_policy
from fpemu.nn import MLP
from fpemu.nn.fp8 import fp8_mlp
from fpemu.training.loop import make_optimizer, make_scaler, train_step

SIZES = (64, 256, 256, 10)
BATCH = 256


def step_fn(recipe: str | None, rng: np.random.Generator) -> Callable[[], None]:
    """One optimizer step of the MLP under ``recipe`` (None: the torch_cuda_fp16 policy)."""
    x = rng.normal(size=(BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH)
    if recipe is None:
        pol = get_policy("torch_cuda_fp16")
        model = MLP(SIZES, policy=pol, seed=0)
        scaler = make_scaler("policy", pol)
    else:
        model = fp8_mlp(SIZES, recipe=recipe, seed=0)
        scaler = make_scaler(None, model.policy)
    opt = make_optimizer("sgd", model, lr=0.01, momentum=0.9)
    return lambda: train_step(model, opt, scaler, x, y, stats=False) and None



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    base = median_time(step_fn(None, rng), args.repeats)
    print(f"baseline torch_cuda_fp16 step: {1e3 * base:.1f} ms (median of {args.repeats})")
    print(f"{'recipe':<22}{'ms':>9}{'x baseline':>12}")
    for name in ("te_delayed", "te_current", "torchao_tensorwise"):
        t = median_time(step_fn(name, rng), args.repeats)
        print(f"{name:<22}{1e3 * t:>9.1f}{t / base:>12.2f}")


if __name__ == "__main__":
    main()
