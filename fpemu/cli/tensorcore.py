"""``fpemu tensorcore``: a tensor-core result beside sequential FP32 and the exact result, in ulps.

>>> main_compare(["--arch", "a100", "--fmt", "fp16", "--a", "1,1", "--b", "1,-5.96e-8",
...               "--c", "-0.99999994"])  # doctest: +ELLIPSIS
a100 tensor core, float16 inputs, float32 accumulation
...
0
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from fpemu.tensorcore import ARCHS
from fpemu.tensorcore.compare import compare


def main_compare(argv: Sequence[str] | None = None) -> int:
    """Command-line front end of :func:`compare`; prints the table, returns the exit status.

    Vectors are comma-separated numbers; without ``--a``/``--b`` a random problem is drawn.
    """
    args = configure(argparse.ArgumentParser(prog="fpemu tensorcore")).parse_args(argv)
    return run(args)


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the compare options to ``parser`` (for the ``fpemu`` CLI)."""
    parser.add_argument("--arch", default="h100", help=f"one of {', '.join(ARCHS)} or an alias")
    parser.add_argument("--fmt", default="float16", help="input format (fp16, bf16, tf32, ...)")
    parser.add_argument("--acc", default="float32", help="accumulator: float32 or float16")
    parser.add_argument("--a", help="comma-separated row vector a (length K)")
    parser.add_argument("--b", help="comma-separated column vector b (length K)")
    parser.add_argument("--c", type=float, default=0.0, help="accumulator input C")
    parser.add_argument("--k", type=int, default=64, help="K of a random problem")
    parser.add_argument("--seed", type=int, default=0, help="seed of a random problem")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run a parsed compare command; returns the exit status."""
    if (args.a is None) != (args.b is None):
        raise ValueError("give both --a and --b, or neither (random problem)")
    if args.a is None:
        rng = np.random.default_rng(args.seed)
        a = rng.standard_normal((1, args.k))
        b = rng.standard_normal((args.k, 1))
    else:
        a = np.array([[float(x) for x in args.a.split(",")]])
        b = np.array([[float(x)] for x in args.b.split(",")])
    print(compare(a, b, fmt=args.fmt, arch=args.arch, c=[[args.c]], acc=args.acc))
    return 0
