"""``fpemu quant``: one block under every scale rule: amax, scales, element codes and errors.

It explains one 1-D block (:data:`BLOCK_NAMES`: every block format but the 2-D tile formats
such as ``nvfp4_2d``, one scale per 16x16 tile, which ``fpemu.quant.quantize`` takes on a
matrix). A tile format is refused in one line that says so.

>>> run(configure(argparse.ArgumentParser()).parse_args(
...     ["480,9.5,-17,0", "--block-format", "mxfp8_e4m3"]))  # doctest: +ELLIPSIS
block of 4 values, mxfp8_e4m3 (float8_e4m3fn x 32, float8_e8m0fnu scales), amax 480
...
0
"""

from __future__ import annotations

import argparse
import math
import textwrap

from fpemu.cli import output
from fpemu.cli.args import accepted
from fpemu.cli.errors import UsageError
from fpemu.quant import BLOCK_FORMATS, explain_block, get_block_format


def _values(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values:
        raise argparse.ArgumentTypeError(f"{text}: expected comma-separated numbers, e.g. 480,9.5")
    return values


#: The block formats explained here: one 1-D block each (tile formats excluded).
BLOCK_NAMES = [n for n in BLOCK_FORMATS if get_block_format(n).tile_rows == 1]


def block_format(text: str) -> str:
    """An argument type: a 1-D block format (aliases too).

    >>> block_format("nvfp4_2d")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: nvfp4_2d: a 2-D format (one scale per 16x16 tile), not one ...
    """
    try:
        bf = get_block_format(text)
    except (TypeError, ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"{text}: unknown block format; accepted: "
                                          f"{accepted(BLOCK_NAMES)}") from None  # fmt: skip
    if bf.tile_rows > 1:
        raise argparse.ArgumentTypeError(
            f"{text}: a 2-D format (one scale per {bf.tile_rows}x{bf.block_size} tile), not one "
            f"block; accepted: {accepted(BLOCK_NAMES)}")  # fmt: skip
    return text


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``fpemu quant``."""
    names = BLOCK_NAMES
    parser.add_argument("values", type=_values, metavar="V1,V2,...",
                        help="the block's values (at most one block; zero-padded)")  # fmt: skip
    parser.add_argument("--block-format", default="mxfp8_e4m3",
                        type=block_format,
                        help=f"block format: {accepted(names)} (the 2-D tile format "
                             "nvfp4_2d is not one block)")  # fmt: skip
    parser.add_argument(
        "--rule", default=None, help="the rule whose elements are listed (default: the format's)"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the explanation; returns the exit status.

    Raises:
        UsageError: too many values for one block, or a rule the format does not have.
    """
    bf = get_block_format(args.block_format)
    if len(args.values) > bf.block_size or bf.tile_rows > 1:
        raise UsageError(f"V1,V2,... ({len(args.values)} values): one 1-D block of at most "
                         f"{bf.block_size} values")  # fmt: skip
    if args.rule is not None and args.rule not in bf.rules:
        raise UsageError(f"--rule {args.rule}: accepted for {bf.name}: {accepted(bf.rules)}")
    if bf.two_level and any(math.isnan(v) for v in args.values):
        raise UsageError("V1,V2,...: NVFP4 blocks cannot contain NaN")
    text = explain_block(args.values, bf, rule=args.rule).render().splitlines()
    width = output.width() or 80
    head = textwrap.wrap(text[0], width=width, break_on_hyphens=False) if text else []
    print("\n".join([*head, *text[1:]]))
    return 0
