"""``fpemu crosscheck``: run the real tensor-core instructions and compare with fpemu's models.

Needs CuPy and an NVIDIA GPU; without them (or on a GPU none of the instructions runs on) it
says so and exits with status 3. Exit status 1 means some case differed from the model (the
cases are saved to an ``.npz``), 2 a bad option or a GPU without a model, 0 that every case
matched bit for bit.

>>> import argparse
>>> p = argparse.ArgumentParser(); configure(p)
>>> p.parse_args(["--cases", "1000", "--generators", "uniform,zeros"]).generators
'uniform,zeros'
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from fpemu.backend import cupy_or_none
from fpemu.cli.args import accepted, int_at_least, name_of
from fpemu.tensorcore.arch import ARCH_ALIASES, ARCHS, get_arch
from fpemu.tensorcore.hardware.crosscheck import Device, Result, crosscheck, save_mismatches
from fpemu.tensorcore.hardware.generators import GENERATORS
from fpemu.tensorcore.hardware.mma import (
    INSTRUCTIONS,
    device_capability,
    device_name,
    model_for_capability,
    run_mma,
    supported,
)

#: Exit status when there is no usable GPU.
NO_GPU = 3


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the crosscheck options to ``parser``."""
    parser.add_argument(
        "--cases",
        type=int_at_least(1),
        default=1_000_000,
        help="output elements per instruction and generator",
    )
    parser.add_argument(
        "--instructions",
        default="all",
        help=f"comma-separated subset of {','.join(INSTRUCTIONS)} (default: all the GPU supports)",
    )
    parser.add_argument(
        "--generators", default="all", help=f"comma-separated subset of {','.join(GENERATORS)}"
    )
    archs = [*ARCHS, *ARCH_ALIASES]
    parser.add_argument(
        "--model",
        default=None,
        type=name_of("tensor-core model", get_arch, archs),
        help=f"fpemu tensor-core model to compare with: {accepted(archs)} "
        "(default: from the GPU's compute capability)",
    )
    parser.add_argument(
        "--ksteps",
        type=int_at_least(1),
        default=1,
        help="instructions chained per problem, K = ksteps * k",
    )
    parser.add_argument(
        "--zeros",
        choices=("floor", "emin", "drop"),
        default=None,
        help="model option: zero terms in the exponent maximum",
    )
    parser.add_argument(
        "--tiny-sign",
        choices=("positive", "keep"),
        default=None,
        help="model option: sign of a nonzero sum truncated to zero",
    )
    parser.add_argument("--seed", type=int_at_least(0), default=0, help="random seed")
    parser.add_argument(
        "--save",
        default="crosscheck-mismatches.npz",
        type=Path,
        help="where mismatching cases go",
    )
    parser.add_argument(
        "--max-saved",
        type=int_at_least(0),
        default=10_000,
        help="mismatching cases kept per instruction and generator",
    )


def check(args: argparse.Namespace) -> None:
    """Check the arguments before looking for a GPU (a bad name is status 2 everywhere).

    Raises:
        ValueError: an unknown instruction or generator, or a ``--save`` folder that does not
            exist (the message names the argument, the value and what is accepted).
    """
    _names(args.instructions, list(INSTRUCTIONS), "--instructions")
    _names(args.generators, list(GENERATORS), "--generators")
    save = Path(args.save)
    if not save.parent.is_dir():
        raise ValueError(f"--save {save}: folder {save.parent} does not exist")


def run(args: argparse.Namespace) -> int:
    """Detect the GPU and run the cross-check; see the module docstring for the exit status."""
    try:
        check(args)
    except ValueError as exc:
        print(f"fpemu crosscheck: {exc}", file=sys.stderr)
        return 2
    cupy = cupy_or_none()
    if cupy is None:
        print(
            "fpemu crosscheck needs an NVIDIA GPU and CuPy (pip install 'fpemu[cupy]'); "
            "none is usable here, so nothing was checked.",
            file=sys.stderr,
        )
        return NO_GPU
    major, minor = device_capability(cupy)
    label = f"{device_name(cupy)} (compute capability {major}.{minor})"
    try:
        return execute(args, device=run_mma, sm=10 * major + minor, label=label, console=Console())
    except ValueError as exc:  # unknown names, or a GPU without a model: say which
        print(f"fpemu crosscheck: {exc}", file=sys.stderr)
        return 2


def _names(value: str, known: Sequence[str], arg: str) -> list[str]:
    if value == "all":
        return list(known)
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in names if v not in known]
    if bad or not names:
        raise ValueError(f"{arg}={value!r}: unknown {bad}; accepted: all, {', '.join(known)}")
    return names


def execute(
    args: argparse.Namespace, *, device: Device, sm: int, label: str, console: Console
) -> int:
    """The cross-check proper, with the device injected (tests pass a CPU stand-in).

    Args:
        args: parsed options (see :func:`configure`).
        device: function running an instruction on raw words.
        sm: compute capability as major * 10 + minor, e.g. 90.
        label: device description for the report.
        console: where the table goes.
    """
    model = get_arch(args.model).name if args.model else model_for_capability(sm // 10, sm % 10)
    instrs = _names(args.instructions, list(INSTRUCTIONS), "--instructions")
    gens = _names(args.generators, list(GENERATORS), "--generators")
    options: dict[str, Any] = {
        k: v for k, v in (("zeros", args.zeros), ("tiny_sign", args.tiny_sign)) if v
    }
    console.print(f"device: {label}; model: {model}; {args.cases} cases per row")
    table = Table(title=f"tensor-core cross-check vs fpemu model {model!r}")
    for col in ("instruction", "generator", "cases", "mismatches", "rate", "seconds"):
        table.add_column(col, justify="left" if col in ("instruction", "generator") else "right")
    results: list[Result] = []
    rng = np.random.default_rng(args.seed)
    for name in instrs:
        instr = INSTRUCTIONS[name]
        if not supported(instr, sm):
            table.add_row(name, "-", "-", "-", f"needs sm_{instr.min_sm}", "-")
            continue
        for gen in gens:
            t0 = time.perf_counter()
            r = crosscheck(
                instr,
                model,
                gen,
                cases=args.cases,
                device=device,
                rng=rng,
                ksteps=args.ksteps,
                max_saved=args.max_saved,
                options=options,
            )
            results.append(r)
            rate = r.mismatches / r.cases
            style = "red" if r.mismatches else "green"
            table.add_row(
                name,
                gen,
                str(r.cases),
                f"[{style}]{r.mismatches}[/{style}]",
                f"{rate:.2e}",
                f"{time.perf_counter() - t0:.1f}",
            )
    console.print(table)
    if not results:
        console.print(f"[red]no instruction of this harness runs on sm_{sm}: nothing was "
                      "checked[/red]")  # fmt: skip
        return NO_GPU
    bad = sum(r.mismatches for r in results)
    if any(r.generator == "integers" and r.mismatches for r in results):
        console.print(
            "[red]the 'integers' cases differ: exact in every model, so the fragment "
            "layout or the kernel is wrong; the other rows mean nothing[/red]"
        )
    if bad:
        n = save_mismatches(results, args.save)
        console.print(f"{bad} mismatching cases; {n} saved to {args.save}")
        return 1
    console.print(f"all {sum(r.cases for r in results)} cases match model {model!r} bit for bit")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m fpemu.cli.crosscheck``."""
    from fpemu.cli import main as fpemu_main  # noqa: PLC0415 - the one-line error handling

    return fpemu_main(["crosscheck", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
