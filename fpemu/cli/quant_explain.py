"""``fpemu quant``: one block under every scale rule: amax, scales, element codes and errors.

>>> run(configure(argparse.ArgumentParser()).parse_args(
...     ["480,9.5,-17,0", "--block-format", "mxfp8_e4m3"]))  # doctest: +ELLIPSIS
block of 4 values, mxfp8_e4m3 (float8_e4m3fn x 32, float8_e8m0fnu scales), amax 480
...
0
"""

from __future__ import annotations

import argparse
import math

from fpemu.cli.args import accepted, name_of
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


def configure(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``fpemu quant``."""
    names = list(BLOCK_FORMATS)
    parser.add_argument("values", type=_values, metavar="V1,V2,...",
                        help="the block's values (at most one block; zero-padded)")  # fmt: skip
    parser.add_argument("--block-format", default="mxfp8_e4m3",
                        type=name_of("block format", get_block_format, names),
                        help=f"block format: {accepted(names)}")  # fmt: skip
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
    print(explain_block(args.values, bf, rule=args.rule).render())
    return 0
