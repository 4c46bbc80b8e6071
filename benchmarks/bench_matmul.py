"""Speed of the accumulation models relative to numpy.matmul on float32, same run.

Times ``fpemu.linalg.matmul(a, b, fmt="fp16", acc="fp32", model=...)`` on random
n x n x n problems for every built-in model and prints the best of ``--repeat`` runs and the
ratio to the baseline ``a32 @ b32`` (NumPy float32 matmul, the inputs already float32), timed in
the same run. The emulator's operands are given as float64 and, separately, as float32
(``--dtypes``; the ``in`` column): the float32 case is like for like with the baseline, the
float64 case also pays for reading float64. Both include rounding the inputs to fp16.
Targets: sequential within 30x of the baseline at 512^3, fast within 3x.
The emulation runs on one core (``fpemu.round`` may use a second for arrays of 2**18
elements or more); for a like-for-like baseline pin BLAS to one thread too
(``OPENBLAS_NUM_THREADS=1``), and mind that timings on a shared machine are noisy.

    python benchmarks/bench_matmul.py [--sizes 256 512] [--repeat 3] [--acc fp32]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from functools import partial

import numpy as np
from timing import best_time  # benchmarks/timing.py (this folder is on sys.path)

from fpemu.linalg import matmul

MODELS = ("sequential", "pairwise", "blocked", "fast")



def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark and print the table."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[256, 512])
    p.add_argument("--models", nargs="+", default=list(MODELS))
    p.add_argument("--acc", default="fp32")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"fp16 inputs, acc={args.acc}; baseline: numpy.matmul on float32")
    print(f"{'n^3':>6} {'model':>12} {'in':>8} {'seconds':>9} {'vs numpy f32':>13}")
    for n in args.sizes:
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        a32, b32 = a.astype(np.float32), b.astype(np.float32)
        base = best_time(partial(np.matmul, a32, b32), max(args.repeat, 10))
        print(f"{n:>6} {'numpy f32':>12} {'float32':>8} {base:>9.4f} {1.0:>12.1f}x")
        for model in args.models:
            if model == "fast" and args.acc not in ("fp32", "float32"):
                continue
            for dt in args.dtypes:
                x, y = a.astype(dt), b.astype(dt)
                run = partial(matmul, x, y, fmt="fp16", acc=args.acc, model=model)
                t = best_time(run, args.repeat)
                print(f"{n:>6} {model:>12} {dt:>8} {t:>9.4f} {t / base:>12.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
