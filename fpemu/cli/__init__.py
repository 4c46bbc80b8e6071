"""The ``fpemu`` command line: one subcommand per module of this package, imported only when used.

Each command module defines ``configure(parser)`` and ``run(args) -> int``.

>>> main(["tour", "--width", "80"])  # doctest: +ELLIPSIS
─...fpemu tour...
0
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "tour": ("fpemu.cli.tour", "a guided terminal tour of what fpemu shows (no GPU, < 1 minute)"),
    "formats": ("fpemu.cli.formats", "table of every format's parameters"),
    "explain": ("fpemu.cli.explain", "bits, fields, neighbours and roundings of a value"),
    "tensorcore": (
        "fpemu.cli.tensorcore",
        "tensor-core result beside sequential FP32 and the exact result, in ulps",
    ),
    "train": ("fpemu.cli.train", "train a small MLP under an AMP policy and loss scaler"),
    "experiment": ("fpemu.cli.experiment", "the FP32 / FP16 / BF16 mixed-precision experiment"),
    "validate": ("fpemu.cli.validate", "run a framework (PyTorch, Keras) beside fpemu"),
    "crosscheck": ("fpemu.cli.crosscheck", "Tensor Core models against this machine's GPU"),
}

__all__ = ["COMMANDS", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available subcommand."""
    parser = argparse.ArgumentParser(
        prog="fpemu", description="Bit-exact emulation of low-precision floating point."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # an optional extra is missing: say so only when asked
            p = sub.add_parser(name, help=f"{help_} (unavailable: {exc})")
            p.set_defaults(_unavailable=f"fpemu {name} needs a missing package: {exc}")
            continue
        p = sub.add_parser(name, help=help_, description=help_)
        mod.configure(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    if getattr(args, "_unavailable", None):
        print(args._unavailable, file=sys.stderr)
        return 2
    return int(args._run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
