"""``fpemu explain``: bits, fields, neighbours and roundings of a value (see :mod:`fpemu.describe`).

>>> from fpemu.cli import main
>>> main(["explain", "0.1", "--format", "bf16", "--plain"])  # doctest: +ELLIPSIS
0.1 in bfloat16 (1 sign, 8 exponent, 7 fraction bits, bias 127)
...
0
>>> main(["explain", "-1e-5", "--plain"])  # doctest: +ELLIPSIS
-1e-5 in every common format (mode rne; fpemu rounds the float64 -1e-05, errors are ...)
format  stored value            error ...
...
0
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from fractions import Fraction

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fpemu.bits import decode
from fpemu.cli import output
from fpemu.cli.args import accepted, name_of, paragraph
from fpemu.cli.errors import UsageError
from fpemu.describe import (
    Explanation,
    _code,
    describe_code,
    exact_decimal,
    explain,
    fields,
    hex_code,
    parse_value,
)
from fpemu.formats import FORMATS, Format, get_format
from fpemu.rounding import RoundMode, get_mode

# ----- the command -----------------------------------------------------------------------------
#: The formats of the side-by-side table (``fpemu explain VALUE`` without ``--format``).
COMMON = ("float64", "float32", "tf32", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2",
          "float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn")  # fmt: skip
#: An integer literal in hex or binary: with ``--format``, a bit pattern of that format.
_CODE = re.compile(r"^(0x[0-9a-f_]+|0b[01_]+)$", re.IGNORECASE)
_INT = re.compile(r"^[+-]?(0x[0-9a-f_]+|0b[01_]+|0o[0-7_]+)$", re.IGNORECASE)
_MODES = [m.value for m in RoundMode]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``fpemu explain``'s arguments to ``parser``."""
    parser.epilog = paragraph(
        "VALUE may be negative (fpemu explain -1e-5 -f fp16). With --format, an integer written "
        "in hex or binary (0x3c00, 0b0_01111_0000000000) is a bit pattern of that format and its "
        "value is explained; --value reads it as a number, --code reads a decimal integer as a "
        "bit pattern. Without --format, VALUE is shown in every common format side by side."
    )
    parser.add_argument(
        "value", metavar="VALUE",
        help="0.1, -1e-5, 1/3, 0x1.8p-3, -inf, nan; or a bit pattern such as 0x3c00 (see below)",
    )  # fmt: skip
    parser.add_argument(
        "--format", "-f", dest="fmt", metavar="F", type=name_of("format", get_format, FORMATS),
        help="format name or alias, e.g. bf16, fp16, e4m3 (all: "
             f"{accepted(FORMATS)}); default: a table of {accepted(COMMON)}",
    )  # fmt: skip
    parser.add_argument(
        "--mode", "-m", default="rne", type=name_of("rounding mode", get_mode, _MODES),
        help=f"highlighted rounding mode: {accepted(_MODES)}",
    )  # fmt: skip
    how = parser.add_mutually_exclusive_group()
    how.add_argument(
        "--code",
        action="store_true",
        help="VALUE is a bit pattern of --format (also a decimal integer: 15360)",
    )
    how.add_argument(
        "--value",
        dest="as_number",
        action="store_true",
        help="VALUE is a number even when written like a bit pattern (0x3c00)",
    )
    parser.add_argument("--plain", action="store_true", help="plain text, no colour or boxes")
    parser.add_argument(
        "--block-format", "-b", metavar="B", default=None,
        help="explain VALUE as one block of comma-separated values in block format B "
             "(mxfp8_e4m3, mxfp4, nvfp4, ...; not the 2-D nvfp4_2d: amax, the scale under each "
             "rule, every element's code and error; the same as fpemu quant)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    """Print the explanation (or, without ``--format``, the side-by-side table); returns 0.

    Raises:
        UsageError: VALUE is not a number, is beyond float64's range, is NaN for a format
            without NaN, or is a bit pattern that does not fit the format.
    """
    if args.block_format is not None:
        return _explain_block(args)
    if args.fmt is None:
        if args.code:
            raise UsageError(f"--code: needs --format (a bit pattern of which format?); "
                             f"got VALUE {args.value}")  # fmt: skip
        text = _value_text(args.value)
        _check_range(args.value, text)
        render_table(args.value, text, mode=args.mode, plain=args.plain)
        return 0
    f = get_format(args.fmt)
    note = ""
    if args.code or (not args.as_number and _CODE.match(args.value.strip())):
        text = _code_value(args.value, f)
        note = (f"{args.value.strip()} is read as a bit pattern of {f.name}: "
                f"{describe_code(int(args.value, 0), f)}"
                + ("" if args.code else " (--value reads it as a number)"))  # fmt: skip
    else:
        text = _value_text(args.value)
        _check_range(args.value, text)
    x, _ = parse_value(text)
    if math.isnan(x) and not f.has_nan:
        raise UsageError(f"VALUE {args.value}: NaN, which {f.name} cannot represent "
                         "(it has no NaN encoding)")  # fmt: skip
    e = explain(text, f, mode=args.mode)
    if note and math.isnan(x) and e.code != int(args.value.strip(), 0):
        note += (f"\na NaN: fpemu has one NaN per format, {hex_code(e.code, f)} in {f.name} "
                 "(sign and payload of a NaN are not kept); it is explained below")  # fmt: skip
    if note:
        print(output.fill(note))
    _render(e, plain=args.plain)
    return 0


_ACCEPTED = ("accepted: a decimal (0.1, -1e-5), a fraction (1/3), a hex float (0x1.8p-3), "
             "inf, nan, or with --format a bit pattern (0x3c00)")  # fmt: skip


def _value_text(text: str) -> str:
    """VALUE as :func:`~fpemu.describe.parse_value` reads it (integer literals in decimal)."""
    t = text.strip().replace("_", "")
    if _INT.match(t):
        return str(int(t, 0))
    try:
        parse_value(t)
    except ValueError:
        raise UsageError(f"VALUE {text}: not a number; {_ACCEPTED}") from None
    return t


def _check_range(given: str, text: str) -> None:
    x, exact = parse_value(text)
    if math.isinf(x) and exact is not None:  # a finite number beyond float64
        raise UsageError(
            f"VALUE {given}: beyond float64's range (magnitude at most {sys.float_info.max!r}); "
            "fpemu rounds float64 values: write inf or -inf for an infinity"
        )


def _code_value(text: str, f: Format) -> str:
    try:
        code = int(text.strip(), 0)
    except ValueError:
        raise UsageError(
            f"VALUE {text}: --code needs an integer bit pattern such as 0x3c00 or 15360"
        ) from None
    if not 0 <= code < 2**f.bits:
        raise UsageError(
            f"VALUE {text}: a bit pattern of {f.name} lies in {hex_code(0, f)} to "
            f"{hex_code(2**f.bits - 1, f)} ({f.bits} bits; --value reads it as a number)"
        )
    return repr(float(decode(code, f)))


def common_rows(text: str, *, mode: str = "rne") -> list[tuple[str, ...]]:
    """Rows of the side-by-side table: VALUE rounded (under ``mode``) to each :data:`COMMON`
    format, with the error against the exact VALUE, in absolute terms and in ulps of the format
    at VALUE, and the bit pattern.

    >>> for row in common_rows("0.1")[3:5]:
    ...     print(row)
    ('bf16', '0.10009765625', '+9.76563e-05', '+0.2', '0x3dcd')
    ('fp16', '0.0999755859375', '-2.44141e-05', '-0.4', '0x2e66')
    """
    rows: list[tuple[str, ...]] = []
    for name in COMMON:
        f = get_format(name)
        try:
            e = explain(text, f, mode=mode)
        except ValueError:  # NaN for a format without NaN
            rows.append((short_name(f.name), "(no NaN)", "-", "-", "-"))
            continue
        err, ulps = "-", "-"
        if e.exact is not None and math.isfinite(e.value):
            d = Fraction(e.value) - e.exact
            err = "0" if d == 0 else f"{float(d):+.6g}"
            ulps = "0" if d == 0 else f"{float(d / Fraction(e.ulp)):+.6g}"
        elif e.exact is not None:
            err = "overflow"
        rows.append((short_name(f.name), repr(e.value), err, ulps, hex_code(e.code, f)))
    return rows


def short_name(name: str) -> str:
    """The short label of a format in the side-by-side table.

    >>> [short_name(n) for n in ("float64", "bfloat16", "tf32", "float8_e4m3fn")]
    ['fp64', 'bf16', 'tf32', 'e4m3fn']
    """
    if "_" in name:
        return name.split("_", 1)[1]
    return name.replace("bfloat", "bf").replace("float", "fp")


def render_table(
    given: str, text: str, *, mode: str, plain: bool, console: Console | None = None
) -> None:
    """Print VALUE in every :data:`COMMON` format (on ``console``, or stdout)."""
    x, exact = parse_value(text)
    title = f"{given} in every common format (mode {get_mode(mode).value}"
    if exact is not None and Fraction(x) != exact:
        title += f"; fpemu rounds the float64 {x!r}, errors are against the exact {given}"
    title += ")"
    header = ("format", "stored value", "error", "ulps", "bits (hex)")
    rows = common_rows(text, mode=mode)
    foot = ("error: stored value minus the exact VALUE; ulps: of that format at VALUE. "
            "fpemu explain VALUE -f FORMAT for the bits and every rounding mode.")  # fmt: skip
    if plain:
        print(output.fill(title))
        print(plain_table(header, rows))
        print(output.fill(foot))
        return
    if console is None:
        console = output.console(pipe_width=160)  # a pipe without COLUMNS: no wrapping
    table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False,
                  collapse_padding=True)  # fmt: skip
    for name in header:
        table.add_column(name, justify="left" if name == "format" else "right", no_wrap=True)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(foot)


def _num(v: float | None) -> str:
    return "-" if v is None else repr(v)


def _ulps(u: Fraction | None) -> str:
    return "-" if u is None else f"{float(u):+.6g}"


def _summary(e: Explanation) -> list[tuple[str, str]]:
    f = e.fmt
    s, ex, m = fields(e.code, f)
    rows = [("input", e.text)]
    if e.exact is not None:
        rows.append(("as float64", f"{exact_decimal(e.x)}  ({float.hex(e.x)})"))
        if Fraction(e.x) != e.exact:
            rows.append(("", "(the input is not a float64; fpemu rounds this float64 value)"))
    rows += [
        (f"{e.mode} result", f"{exact_decimal(e.value)}"),
        ("bits", f"{hex_code(e.code, f)} = {e.bits}"),
        ("fields", _field_text(s, ex, m, f, e.value)),
    ]
    if e.exact is not None and math.isfinite(e.value):
        err = Fraction(e.value) - e.exact
        rel = f", {float(err / e.exact):+.3e} relative" if e.exact else ""
        ulps = err / Fraction(e.ulp)
        rows.append(("error", f"{float(err):+.6e} absolute{rel}, {float(ulps):+.6g} ulp"))
    if math.isfinite(e.x):
        beyond = "beyond max" if math.isnan(e.above) or math.isnan(e.below) else ""
        rows += [
            ("ulp", f"{e.ulp!r} (2^{math.frexp(e.ulp)[1] - 1}, the spacing at x)"),
            ("brackets", beyond or f"{e.below!r} <= x <= {e.above!r}"),
        ]
    rows.append(("neighbours", f"below {_neighbour(e.prev, f)}, above {_neighbour(e.next, f)}"))
    return rows


def _neighbour(v: float, f: Format) -> str:
    if math.isnan(v) and not f.has_nan:
        return "none"
    return f"{v!r} ({hex_code(_code(v, f), f)})" if not math.isnan(v) else "none (NaN)"


def _field_text(s: int, e: int, m: int, f: Format, value: float) -> str:
    sign = f"sign {s} ({'-' if s else '+'})"
    if math.isnan(value) or math.isinf(value):
        return f"{sign}, exponent {e:0{f.ebits}b}, fraction {m:0{max(f.mbits, 1)}b}: {value!r}"
    frac = f"fraction {m:0{max(f.mbits, 1)}b}b = {m}"
    if e == 0:
        scale = f"2^{f.emin}"
        return f"{sign}, exponent 0 (subnormal: {scale}), {frac} -> {m}/{2**f.mbits} x {scale}"
    return (
        f"{sign}, exponent {e:0{f.ebits}b}b = {e} -> 2^({e} - {f.bias}) = 2^{e - f.bias}, "
        f"{frac} -> 1 + {m}/{2**f.mbits} = {1 + m / 2**f.mbits!r}"
    )


def _mode_rows(e: Explanation) -> list[tuple[str, str, str, str]]:
    rows = []
    for r in e.modes:
        code = "-" if r.code is None else hex_code(r.code, e.fmt)
        rows.append((r.mode, _num(r.value) if r.value is not None else r.note, code, _ulps(r.ulps)))
    if e.p_above is not None:
        lo, hi = (e.below, e.above) if e.x > 0 else (e.above, e.below)
        p = float(e.p_above)
        rows.append(("stochastic", f"{hi!r} with p={p:.6g}, {lo!r} with p={1 - p:.6g}", "", ""))
    return rows


def _render(e: Explanation, *, plain: bool) -> None:
    title = (
        f"{e.text} in {e.fmt.name} (1 sign, {e.fmt.ebits} exponent, {e.fmt.mbits} fraction bits, "
        f"bias {e.fmt.bias})"
    )
    summary, modes = _summary(e), _mode_rows(e)
    header = ("mode", "result", "bits", "error (ulp)")
    if plain:
        print(output.fill(title))
        width = max(len(k) for k, _ in summary)
        for k, v in summary:
            print(output.fill(f"  {k:<{width}}  {v}", indent=width + 4))
        print()
        # the stochastic row's two outcomes would widen the result column past 80: a line
        kept = [m for m in modes if m[0] != "stochastic"]
        print(plain_table(header, kept))
        for m in modes[len(kept) :]:
            print(output.fill(f"{m[0]}  {m[1]}", indent=len(m[0]) + 2))
        return
    console = output.console(pipe_width=160)  # a pipe without COLUMNS: no wrapping at 80
    console.print(Text(title, style="bold"))
    width = max(len(k) for k, _ in summary)
    for k, v in summary:
        console.print(Text.assemble("  ", (k.ljust(width), "bold cyan"), "  ", v))
    table = Table(*header, box=box.SIMPLE_HEAD)
    for row in modes:
        table.add_row(*row, style="bold" if row[0] == e.mode else None)
    console.print(table)


def plain_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns aligned with two spaces, no trailing blanks: for pipes and ``--plain``."""
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    )


def _explain_block(args: argparse.Namespace) -> int:
    """``fpemu explain V1,V2,... --block-format B``: the block explanation of ``fpemu quant``."""
    from fpemu.cli import quant_explain  # noqa: PLC0415 - only this option needs fpemu.quant

    if args.fmt is not None or args.code or args.as_number:
        raise UsageError("--block-format: cannot be combined with --format, --code or --value")
    try:
        quant_explain.block_format(args.block_format)
    except argparse.ArgumentTypeError as err:
        raise UsageError(f"--block-format {err}") from None
    try:
        values = quant_explain._values(args.value)
    except argparse.ArgumentTypeError as err:
        raise UsageError(f"VALUE {err}") from None
    ns = argparse.Namespace(values=values, block_format=args.block_format, rule=None)
    return quant_explain.run(ns)
