"""``fpemu emulate-experiment``: the transformer experiment of docs/emulate-a-torch-program.md.

A char-level GPT learns eight of Shakespeare's sonnets in its own torch loop under
``fpemu.emulate``, once per configuration (fp32, fp16 without loss scaling, fp16 with a
GradScaler, bf16, TE delayed FP8, MXFP8, NVFP4), each on a named hardware model
(``fpemu.emulate.experiment``). Prints a Markdown table (losses, the per-layer share of
underflowed output-gradient elements), each run's op counts and time, and with ``--plot`` writes
the figure of loss curves, scales and amax traces (needs matplotlib).

>>> import argparse
>>> p = argparse.ArgumentParser(prog="fpemu emulate-experiment")
>>> configure(p)
>>> a = p.parse_args(["--steps", "5", "--configs", "fp16", "bf16"])
>>> a.steps, a.configs, a.plot
(5, ['fp16', 'bf16'], None)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from fpemu.cli.args import int_at_least
from fpemu.cli.errors import UsageError

__all__ = ["configure", "run"]

#: the configurations (kept here too so that --help and the choices need no torch import)
CONFIGS = ("fp32", "fp16", "fp16+scaler", "bf16", "fp8-delayed", "mxfp8", "nvfp4")


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``emulate-experiment`` arguments to ``parser``."""
    parser.add_argument("--steps", type=int_at_least(1), default=40,
                        help="training steps per configuration")  # fmt: skip
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(CONFIGS),
                        metavar="CONFIG",
                        help=f"configurations to run: {', '.join(CONFIGS)}")  # fmt: skip
    parser.add_argument("--plot", type=Path, default=None, metavar="PNG",
                        help="write the figure to this file")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Run the configurations; print the table, op counts and times. 0, or 2 (bad arguments)."""
    if args.plot is not None and not args.plot.parent.is_dir():
        raise UsageError(f"--plot {args.plot}: folder {args.plot.parent} does not exist")
    try:
        import torch  # noqa: F401, PLC0415

        from fpemu.emulate.experiment import plot, table, train_config  # noqa: PLC0415
    except ModuleNotFoundError as exc:
        raise UsageError(f"--configs: the experiment needs {exc.name}: pip install "
                         "'fpemu[torch]'") from None  # fmt: skip
    results, seconds = {}, {}
    for c in args.configs:
        t0 = time.perf_counter()
        results[c] = train_config(c, steps=args.steps)
        seconds[c] = time.perf_counter() - t0
    print(table(results))
    for c, r in results.items():
        counts = r["counts"]
        print(f"{c}: ops emulated {counts['emulated']}, not emulated {counts['not_emulated']}, "
              f"{seconds[c]:.0f} s")  # fmt: skip
    if args.plot is not None:
        print(f"figure: {plot(results, args.plot)}")
    return 0
