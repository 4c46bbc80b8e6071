"""``fpemu validate torch``: run the framework checks on this machine's install and report.

Exit status: 0 when no check differs, 1 when one does, 2 when torch is not installed.

>>> import argparse
>>> p = argparse.ArgumentParser(prog="fpemu validate")
>>> configure(p)
>>> a = p.parse_args(["torch", "--quick", "--only", "casts"])
>>> a.framework, a.quick, a.only
('torch', True, ['casts'])
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fpemu.validate.suite import SECTIONS


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``validate`` arguments to ``parser``."""
    parser.add_argument("framework", choices=["torch"],
                        help="framework to validate against (torch: PyTorch CPU, plus Keras 3 "
                             "on the torch backend when installed)")  # fmt: skip
    parser.add_argument("--json", metavar="FILE", type=Path, help="write the report as JSON")
    parser.add_argument("--markdown", metavar="FILE", type=Path,
                        help="write the report as markdown")  # fmt: skip
    parser.add_argument(
        "--exhaustive",
        action="store_true",
        help="also cast all 2**32 float32 patterns to bf16 and fp16 (minutes)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smaller samples (2**16 random patterns, 20 training steps)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        metavar="SECTION",
        help=f"run only these sections: {', '.join(SECTIONS)}",
    )


def run(args: argparse.Namespace) -> int:
    """Run the checks; print the table; write the files asked for; return the exit status."""
    from fpemu.validate.suite import validate_torch  # noqa: PLC0415

    try:
        import torch  # noqa: F401, PLC0415
    except ImportError:
        print("fpemu validate torch needs PyTorch: pip install torch", file=sys.stderr)
        return 2
    report = validate_torch(
        sections=args.only or SECTIONS,
        n_random=2**16 if args.quick else 2**20,
        exhaustive=args.exhaustive,
        progress=True,
        training_steps=20 if args.quick else 60,
    )
    report.render()
    if args.json:
        args.json.write_text(report.to_json() + "\n")
    if args.markdown:
        args.markdown.write_text(report.to_markdown() + "\n")
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m fpemu.cli.validate torch``."""
    parser = argparse.ArgumentParser(prog="fpemu validate", description=__doc__)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
