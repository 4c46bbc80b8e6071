"""``fpemu tensorcore``: a tensor-core result beside sequential FP32 and the exact result, in ulps.

>>> main_compare(["--arch", "a100", "--fmt", "fp16", "--a", "1,1", "--b", "1,-5.96e-8",
...               "--c", "-0.99999994"])  # doctest: +ELLIPSIS
a100 tensor core, float16 inputs, float32 accumulation
...
0
"""

from __future__ import annotations

import argparse
import math
import textwrap
from collections.abc import Sequence

import numpy as np

from fpemu.cli import output
from fpemu.cli.args import Parser, accepted, int_at_least, name_of, number
from fpemu.cli.errors import UsageError
from fpemu.formats import get_format
from fpemu.tensorcore import ARCHS
from fpemu.tensorcore.arch import ARCH_ALIASES, get_arch
from fpemu.tensorcore.compare import MAX_EXACT_PRODUCTS, Comparison, compare

#: Input formats some modelled architecture takes (which one takes which: see ``--help``).
INPUTS = ("float16", "bfloat16", "tf32", "float8_e4m3fn", "float8_e5m2")
#: Accumulator formats.
ACCS = ("float32", "float16")


def main_compare(argv: Sequence[str] | None = None) -> int:
    """Command-line front end of :func:`compare`; prints the table, returns the exit status.

    Vectors are comma-separated numbers; without ``--a``/``--b`` a random problem is drawn.
    """
    return run(configure(Parser(prog="fpemu tensorcore")).parse_args(argv))


def _vector(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(
            f"{text}: expected comma-separated finite numbers, e.g. 1,-0.5,3e-4"
        )
    return values


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the compare options to ``parser`` (for the ``fpemu`` CLI)."""
    archs = [*ARCHS, *ARCH_ALIASES]
    parser.add_argument("--arch", default="h100", type=name_of("architecture", get_arch, archs),
                        help=f"tensor-core architecture: {accepted(archs)}")  # fmt: skip
    parser.add_argument("--fmt", default="float16",
                        type=name_of("input format", get_format, INPUTS),
                        help=f"input format: {accepted(INPUTS)} or an alias (fp16, bf16, e4m3, "
                             "...), as the architecture supports")  # fmt: skip
    parser.add_argument("--acc", default="float32", type=name_of("accumulator", get_format, ACCS),
                        help=f"accumulator format: {accepted(ACCS)}")  # fmt: skip
    parser.add_argument("--a", type=_vector, metavar="A1,A2,...",
                        help="comma-separated row vector a (length K)")  # fmt: skip
    parser.add_argument("--b", type=_vector, metavar="B1,B2,...",
                        help="comma-separated column vector b (length K)")  # fmt: skip
    parser.add_argument("--c", type=number(), default=0.0, help="accumulator input C")
    parser.add_argument("--k", type=int_at_least(1, MAX_EXACT_PRODUCTS), default=64,
                        help="K of a random problem (without --a and --b)")  # fmt: skip
    parser.add_argument("--seed", type=int_at_least(0), default=0,
                        help="seed of a random problem")  # fmt: skip
    parser.add_argument("--list", action="store_true",
                        help="list every instruction model (sm90.mma.f16.f32, ...) with its "
                             "parameters, by architecture, and exit")  # fmt: skip
    return parser


def listing(width: int = 80) -> str:
    """Every instruction model of :data:`fpemu.tensorcore.INSTRUCTIONS`, one per line under its
    architecture, with its inputs and parameters wrapped at ``width``.

    >>> text = listing()
    >>> "sm90.wgmma.fp8.f16" in text and max(map(len, text.splitlines())) <= 80
    True
    """
    from fpemu.tensorcore import INSTRUCTIONS  # noqa: PLC0415 - only --list needs them

    by_arch: dict[str, list[str]] = {}
    for ins in INSTRUCTIONS.values():
        by_arch.setdefault(f"{ins.vendor} {ins.arch}", []).append(ins.name)
    lines = textwrap.wrap(f"{len(INSTRUCTIONS)} instruction models, each an accumulation model "
                          "of fpemu.linalg.matmul (model=NAME); see docs/mma-inventory.md",
                          width=width)  # fmt: skip
    for arch, names in by_arch.items():
        lines += ["", f"{arch}:"]
        pad = max(len(n) for n in names)
        for name in names:
            ins = INSTRUCTIONS[name]
            params = ins.summary.split(": ", 1)[1]
            text = f"in {'/'.join(ins.inputs)}, d {ins.d}; {params}"
            lines += textwrap.wrap(text, width=width, initial_indent=f"  {name:<{pad}}  ",
                                   subsequent_indent=" " * (pad + 6),
                                   break_on_hyphens=False)  # fmt: skip
    return "\n".join(lines)


def _table(r: Comparison) -> str:
    """The comparison, one block of lines per output element (at most 80 columns)."""
    out = [f"{r.arch} tensor core, {r.fmt.name} inputs, {r.acc.name} accumulation"]
    for idx in np.ndindex(r.exact.shape):
        if r.exact.size > 1:
            out.append(f"element {','.join(map(str, idx))}")
        out += [f"  exact        {float(r.exact[idx])!r}",
                f"  tensor core  {float(r.tensor_core[idx])!r:<24}  "
                f"{r.tensor_core_ulps[idx]:+.3g} ulps",
                f"  sequential   {float(r.sequential[idx])!r:<24}  "
                f"{r.sequential_ulps[idx]:+.3g} ulps"]  # fmt: skip
    return "\n".join(out)


def run(args: argparse.Namespace) -> int:
    """Run a parsed compare command; returns the exit status.

    Raises:
        UsageError: only one of ``--a``/``--b``, vectors of different lengths, or a format
            the architecture has no instruction for.
    """
    if args.list:
        vectors = [f for f, v in (("--a", args.a), ("--b", args.b)) if v is not None]
        if vectors:
            raise UsageError(f"{vectors[0]}: not with --list (--list prints the instruction "
                             "models and exits)")  # fmt: skip
        print(listing(output.width() or 80))
        return 0
    if (args.a is None) != (args.b is None):
        given = "--a" if args.a is not None else "--b"
        raise UsageError(f"{given}: give both --a and --b, or neither (a random problem)")
    arch, fmt, acc = get_arch(args.arch), get_format(args.fmt), get_format(args.acc)
    if fmt.name not in INPUTS:
        raise UsageError(f"--fmt {args.fmt}: not a tensor-core input; accepted: "
                         f"{accepted(INPUTS)}")  # fmt: skip
    if acc.name not in ACCS:
        raise UsageError(f"--acc {args.acc}: not a tensor-core accumulator; accepted: "
                         f"{accepted(ACCS)}")  # fmt: skip
    try:
        arch.block_spec(fmt, acc)
    except ValueError as exc:
        raise UsageError(f"--fmt {args.fmt} --acc {args.acc}: no {arch.name} instruction: "
                         f"{exc}") from None  # fmt: skip
    if args.a is None:
        rng = np.random.default_rng(args.seed)
        a = rng.standard_normal((1, args.k))
        b = rng.standard_normal((args.k, 1))
    else:
        if len(args.a) != len(args.b):
            raise UsageError(f"--b {','.join(map(repr, args.b))}: length {len(args.b)}; "
                             f"expected the length of --a, {len(args.a)}")  # fmt: skip
        if len(args.a) > MAX_EXACT_PRODUCTS:
            raise UsageError(f"--a: length {len(args.a)}; at most {MAX_EXACT_PRODUCTS}")
        a = np.array([args.a])
        b = np.array(args.b)[:, None]
    print(_table(compare(a, b, fmt=fmt, arch=arch.name, c=[[args.c]], acc=acc)))
    return 0
