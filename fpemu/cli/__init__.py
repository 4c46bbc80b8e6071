"""The ``fpemu`` command line: one subcommand per module of this package.

Each command module defines ``configure(parser)`` and ``run(args) -> int``. A bad argument is
one line on stderr, ``fpemu COMMAND: --arg VALUE: what is accepted``, and exit status 2;
``fpemu --debug COMMAND ...`` (``--debug`` anywhere) shows the Python traceback instead.
``fpemu`` alone prints the usage and the command list on stderr, status 2.

>>> main(["tour", "--width", "80"])  # doctest: +ELLIPSIS
─...fpemu tour...
0
>>> main(["tensorcore", "--k", "0"])
2
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence

from fpemu.cli.args import HelpFormatter, Parser, paragraph
from fpemu.cli.errors import UsageError, missing_extra
from fpemu.cli.output import RStripWriter

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
    "validate": (
        "fpemu.cli.validate",
        "run a framework (PyTorch, Keras) beside fpemu; validate your own model",
    ),
    "crosscheck": ("fpemu.cli.crosscheck", "Tensor Core models against this machine's GPU"),
    "quant": (
        "fpemu.cli.quant_explain",
        "one MX/NVFP4 block under every scale rule: amax, scales, codes, errors",
    ),
    "verify": ("fpemu.cli.verify", "run a verification campaign (fpemu verify --list)"),
    "emulate": ("fpemu.cli.emulate", "run your torch function under emulated GPU numerics"),
    "emulate-experiment": (
        "fpemu.cli.emulate_experiment",
        "a small GPT under emulated fp32 ... NVFP4: losses, underflow, scales",
    ),
}

__all__ = ["COMMANDS", "build_parser", "main", "version"]


def version() -> str:
    """The installed distribution's version (``fpemu.__version__`` for a source checkout).

    >>> version().count(".") >= 2
    True
    """
    try:
        return importlib.metadata.version("fpemu")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - not installed
        import fpemu  # noqa: PLC0415 - only when the metadata is missing

        return fpemu.__version__


def build_parser() -> Parser:
    """The argument parser with every subcommand.

    A command whose module needs a missing optional package (a ModuleNotFoundError of torch,
    cupy, scikit-learn, ... : :data:`fpemu.cli.errors.EXTRAS`) is listed as unavailable with the
    extra to install; any other import error is a bug and propagates.
    """
    parser = Parser(
        prog="fpemu",
        description="Bit-exact emulation of low-precision floating point.",
        epilog=paragraph(
            "A bad argument prints one line and exits with status 2; "
            "fpemu --debug COMMAND ... (or fpemu COMMAND ... --debug) shows the traceback. "
            "fpemu COMMAND --help describes a command."
        ),
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fpemu {version()}")
    parser.add_argument(
        "--debug", action="store_true", help="show Python tracebacks instead of one-line errors"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            extra = missing_extra(exc)
            if extra is None:
                raise
            why = f"needs {exc.name}: pip install 'fpemu[{extra}]'"
            sub.add_parser(name, help=f"{help_} (unavailable: {why})", add_help=False)
            parser.unavailable[name] = why
            continue
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=HelpFormatter)
        mod.configure(p)
        p.set_defaults(_run=mod.run)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    return next((a for a in argv if a in COMMANDS), None)


def _suggest(argv: Sequence[str]) -> str:
    """`` did you mean train?`` for the first argument that is not an option and is close to
    a command name, else ""."""
    word = next((a for a in argv if not a.startswith("-")), None)
    close = difflib.get_close_matches(word, list(COMMANDS), n=1) if word else []
    return f"; did you mean {close[0]}?" if close else ""


def _usage(parser: Parser) -> None:
    """``fpemu`` alone: the usage and the command list on stderr (a bad invocation)."""
    print(parser.format_help().rstrip(), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for a bad argument).

    ``--debug`` is accepted anywhere before a ``--`` (``fpemu train --debug`` too). When stdout
    is not a terminal its lines lose their trailing blanks
    (:class:`~fpemu.cli.output.RStripWriter`).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    end = argv.index("--") if "--" in argv else len(argv)
    debug = "--debug" in argv[:end]
    argv = [a for i, a in enumerate(argv) if a != "--debug" or i >= end]
    command = _command(argv)
    prog = f"fpemu {command}" if command else "fpemu"
    parser = build_parser()
    if not argv:
        _usage(parser)
        return 2
    if command in parser.unavailable:  # whatever its arguments
        print(f"{prog}: {parser.unavailable[command]}", file=sys.stderr)
        return 2
    try:
        args = parser.parse_args(argv)
    except UsageError as err:
        hint = _suggest(argv) if command is None and str(err).startswith("COMMAND ") else ""
        print(f"{prog}: {err}".replace(": invalid choice;", f": invalid choice{hint}", 1)
              if hint else f"{prog}: {err}", file=sys.stderr)  # fmt: skip
        return 2
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else 0
    stdout = sys.stdout
    piped = not _isatty(stdout)
    if piped:  # rich pads cells and titles with blanks: none before a line end in a pipe
        sys.stdout = RStripWriter(stdout)
    try:
        return _run(args, command, debug)
    finally:
        if piped:
            try:
                sys.stdout.flush()
            except (BrokenPipeError, ValueError):  # pragma: no cover - reader gone
                pass
            sys.stdout = stdout


def _isatty(stream: object) -> bool:
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):
        return False


def _run(args: argparse.Namespace, command: str | None, debug: bool) -> int:
    """Run the parsed command; one line on stderr for every anticipated failure."""
    prog = f"fpemu {command}" if command else "fpemu"
    try:
        return int(args._run(args))
    except UsageError as err:
        if debug:
            raise
        print(f"{prog}: {str(err).splitlines()[0]}", file=sys.stderr)
        return 2
    except (ValueError, TypeError) as err:  # a value the library refused, named in its message
        if debug:
            raise
        line = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"{prog}: {line} (fpemu --debug {command or 'COMMAND'} ... shows where)",
              file=sys.stderr)  # fmt: skip
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `fpemu formats | head`: stop quietly, as cat does
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # pragma: no cover - no real stdout
            pass
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
