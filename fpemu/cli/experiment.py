"""``fpemu experiment``: the FP32 / FP16 / BF16 mixed-precision experiment.

The runs and the report are :mod:`fpemu.training.experiment`; this module is the command.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from fpemu.training.experiment import CONFIGS, report, run_experiment


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpemu experiment``."""
    parser.add_argument("--steps", type=int, default=300, help="optimizer steps per run")
    parser.add_argument("--seed", type=int, default=0, help="seed of init, split and batches")
    parser.add_argument("--acc-model", default="fast",
                        help="matmul accumulation model (fast, sequential, ...)")  # fmt: skip
    parser.add_argument("--config", action="append", choices=list(CONFIGS),
                        help="configuration(s) to run (default: all)")  # fmt: skip
    parser.add_argument("--write", metavar="PATH", help="write the Markdown report to PATH")
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")


def run(args: argparse.Namespace) -> int:
    """Run ``fpemu experiment``; returns the exit status."""
    t0 = time.perf_counter()
    res = run_experiment(configs=args.config or tuple(CONFIGS), steps=args.steps, seed=args.seed,
                         acc_model=args.acc_model, progress=not args.no_progress)  # fmt: skip
    elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        print(res.to_markdown())
        print(f"({elapsed:.0f} s)")
    if args.write:
        Path(args.write).write_text(report(res, elapsed), encoding="utf-8")
    return 0
