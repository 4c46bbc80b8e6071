"""``fpemu experiment``: the FP32 / FP16 / BF16 mixed-precision experiment.

The runs and the report are :mod:`fpemu.training.experiment`; this module is the command. A
configuration whose data set needs a missing extra (digits: scikit-learn, ``pip install
'fpemu[data]'``) is skipped with one line on stderr; when every configuration is skipped,
nothing is run and the exit status is 3.

Stdout holds one format: text tables fitted to the width where it is known (a terminal, or
``COLUMNS``), Markdown in a pipe without ``COLUMNS`` or with ``--markdown``, JSON with
``--json``. ``--write PATH`` writes the Markdown document (its folder is checked first).

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

from rich import box
from rich.console import Console
from rich.table import Table

from fpemu.cli import output
from fpemu.cli.args import accepted, int_at_least, model_names, name_of, paragraph
from fpemu.cli.html_out import add_html_option, check_html_path, write_html
from fpemu.linalg import get_model
from fpemu.training.datasets import unavailable
from fpemu.training.experiment import CONFIGS, ExperimentResult, report, run_experiment

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
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON instead of tables")
    fmt.add_argument("--markdown", action="store_true",
                     help="print Markdown tables (default in a pipe without COLUMNS)")  # fmt: skip
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
    output.writable("--write", args.write)
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
    width = output.width()
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
    elif args.markdown or width is None:
        print(res.to_markdown())
    else:
        render(res, output.console())
    if args.write:
        args.write.write_text(report(res, elapsed, str(args.write)), encoding="utf-8")
    write_html(args.html, res)
    return 0


def render(res: ExperimentResult, console: Console) -> None:
    """One rich table per configuration, fitted to the console: the policy and scaler columns
    (the run's label names both) only from 120 columns up.

    >>> import io
    >>> from fpemu.training.experiment import Row
    >>> con = Console(file=io.StringIO(), width=80)
    >>> render(ExperimentResult(2, 0, "fast", [Row("digits", "FP16 + GradScaler built every "
    ...     "step", "torch_cuda_fp16", "fresh_gradscaler", 0.9, 0, 1.5, 2.5, 0.3, 0.1)]), con)
    >>> max(map(len, con.file.getvalue().splitlines())) <= 80
    True
    """
    wide = console.width >= 120
    for cfg in dict.fromkeys(r.config for r in res.rows):
        rows = [r for r in res.rows if r.config == cfg]
        base = next((r for r in rows if r.run == "FP32"), None)
        table = Table(title=f"{cfg}: {res.steps} steps, seed {res.seed}, {res.acc_model}",
                      box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                      title_justify="left")  # fmt: skip
        cols = ["run", *(["policy", "scaler"] if wide else []), "acc", "vs FP32",
                "skipped", "zero %", "unscaled", "loss"]  # fmt: skip
        for c in cols:
            table.add_column(c, justify="left" if c in ("run", "policy", "scaler") else "right",
                             no_wrap=c not in ("run",))  # fmt: skip
        for r in rows:
            delta = "" if base is None else f"{100 * (r.accuracy - base.accuracy):+.1f}"
            cells = [r.run, *([r.policy, r.scaler] if wide else []), f"{100 * r.accuracy:.1f}%",
                     delta, str(r.skipped), f"{r.zero_pct:.1f}", f"{r.zero_pct_unscaled:.1f}",
                     f"{r.final_loss:.4g}"]  # fmt: skip
            table.add_row(*cells)
        console.print(table)
    console.print("acc: test accuracy; zero %: parameter-gradient values that are zero in "
                  "the gradient format (mean over steps and layers); unscaled: the same "
                  "without the loss scale; loss: final, unweighted. fpemu experiment "
                  "--markdown for the Markdown tables.")  # fmt: skip
