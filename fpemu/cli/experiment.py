"""``fpemu experiment``: the FP32 / FP16 / BF16 mixed-precision experiment.

The runs and the report are :mod:`fpemu.training.experiment`; this module is the command. A
configuration whose data set needs a missing extra (digits: scikit-learn, ``pip install
'fpemu[data]'``) is skipped with one line on stderr; when every configuration is skipped,
nothing is run and the exit status is 3.

>>> import argparse
>>> p = argparse.ArgumentParser(); configure(p)
>>> p.parse_args(["--config", "digits", "--steps", "5"]).config
['digits']
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from fpemu.cli.args import accepted, int_at_least, model_names, name_of, paragraph
from fpemu.cli.errors import UsageError
from fpemu.cli.html_out import add_html_option, check_html_path, write_html
from fpemu.linalg import get_model
from fpemu.training.datasets import unavailable
from fpemu.training.experiment import CONFIGS, report, run_experiment

#: Exit status when every configuration needs a missing extra.
NOTHING_RUN = 3


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``fpemu experiment``."""
    parser.epilog = paragraph(f"Exit status {NOTHING_RUN} when every configuration needs a "
                              "missing extra (nothing was run).")  # fmt: skip
    parser.add_argument("--steps", type=int_at_least(1), default=300,
                        help="optimizer steps per run")  # fmt: skip
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="seed of init, split and batches")  # fmt: skip
    parser.add_argument("--acc-model", default="fast", metavar="MODEL",
                        type=name_of("accumulation model", get_model,
                                     [*model_names(), "sm90.mma.f16.f32, ..."]),
                        help=f"matmul accumulation model: {accepted(model_names())} or an "
                             "instruction model (sm90.mma.f16.f32, ...)")  # fmt: skip
    parser.add_argument("--config", action="append", choices=list(CONFIGS), metavar="CONFIG",
                        help=f"configuration to run, repeatable: {accepted(CONFIGS)} "
                             "(default: all)")  # fmt: skip
    parser.add_argument("--write", metavar="PATH", type=Path,
                        help="also write the Markdown report to PATH")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    add_html_option(parser)
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="hide the progress bars (shown only on a terminal, on stderr)",
    )


def run(args: argparse.Namespace) -> int:
    """Run ``fpemu experiment``; returns the exit status (see the module docstring).

    Raises:
        UsageError: the folder of ``--write`` does not exist.
    """
    if args.write is not None and not args.write.parent.is_dir():
        raise UsageError(f"--write {args.write}: folder {args.write.parent} does not exist")
    check_html_path(args.html)
    wanted = list(dict.fromkeys(args.config or CONFIGS))
    skipped: dict[str, list[str]] = {}
    for c in wanted:
        why = unavailable(CONFIGS[c]["dataset"])
        if why:
            skipped.setdefault(why, []).append(c)
    configs = [c for c in wanted if not any(c in v for v in skipped.values())]
    for why, names in skipped.items():
        print(f"fpemu experiment: skipped {', '.join(names)}: {why}", file=sys.stderr)
    if not configs:
        return NOTHING_RUN
    t0 = time.perf_counter()
    res = run_experiment(configs=configs, steps=args.steps, seed=args.seed,
                         acc_model=args.acc_model, progress=not args.no_progress)  # fmt: skip
    elapsed = time.perf_counter() - t0
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
    else:
        print(res.to_markdown())
        print(f"({elapsed:.0f} s)")
    if args.write:
        args.write.write_text(report(res, elapsed), encoding="utf-8")
    write_html(args.html, res)
    return 0
