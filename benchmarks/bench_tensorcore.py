"""Speed of the tensor-core models relative to the sequential FP32 model, same run.

Times ``fpemu.linalg.matmul(a, b, fmt="fp16", acc="fp32", model=...)`` on random n x n x n
problems for ``model="sequential"`` (the baseline) and the a100 and h100 tensor-core models.
The models are timed in turn within each repeat (so a change in machine load hits them all)
and the best time of each is reported with its ratio to the baseline.

    PYTHONPATH=. python benchmarks/bench_tensorcore.py [--sizes 256 512] [--repeat 7]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from functools import partial

import numpy as np

import fpemu.tensorcore  # noqa: F401 - registers the tensor-core models
from fpemu.linalg import matmul

BASELINE = "sequential"


def best_times(a: np.ndarray, b: np.ndarray, models: list[str], repeat: int) -> dict[str, float]:
    """Best wall-clock seconds of each model over ``repeat`` interleaved rounds."""
    best = dict.fromkeys(models, float("inf"))
    for _ in range(repeat):
        for m in models:
            run = partial(matmul, a, b, fmt="fp16", acc="fp32", model=m)
            t0 = time.perf_counter()
            run()
            best[m] = min(best[m], time.perf_counter() - t0)
    return best


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    p.add_argument("--archs", nargs="+", default=["a100", "h100"])
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'n^3':>6} {'model':>12} {'seconds':>9} {'vs ' + BASELINE:>15}")
    for n in args.sizes:
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        best = best_times(a, b, [BASELINE, *args.archs], args.repeat)
        for m, t in best.items():
            print(f"{n:>6} {m:>12} {t:>9.3f} {t / best[BASELINE]:>14.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
