"""``fpemu explain``: bits, fields, neighbours and roundings of a value (see :mod:`fpemu.describe`).

>>> from fpemu.cli import main
>>> main(["explain", "0.1", "--format", "bf16", "--plain"])  # doctest: +ELLIPSIS
0.1 in bfloat16 (1 sign, 8 exponent, 7 fraction bits, bias 127)
...
0
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from fractions import Fraction

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fpemu.bits import decode
from fpemu.describe import Explanation, _code, exact_decimal, explain, fields, hex_code
from fpemu.formats import FORMATS, Format, get_format


# ----- the command -----------------------------------------------------------------------------
def configure(parser: argparse.ArgumentParser) -> None:
    """Add ``fpemu explain``'s arguments to ``parser``."""
    parser.add_argument(
        "value", metavar="VALUE",
        help="0.1, 1e-5, 1/3, 0x1.8p-3, inf, nan (write -- before a VALUE like -1e-5)",
    )  # fmt: skip
    parser.add_argument(
        "--format", "-f", dest="fmt", required=True, metavar="F",
        help=f"format name or alias, e.g. bf16, fp16, e4m3 (all: {', '.join(FORMATS)})",
    )  # fmt: skip
    parser.add_argument("--mode", "-m", default="rne", help="highlighted rounding mode")
    parser.add_argument(
        "--code", action="store_true", help="VALUE is a bit pattern (e.g. 0x3dcd), not a number"
    )
    parser.add_argument("--plain", action="store_true", help="plain text, no colour or boxes")


def run(args: argparse.Namespace) -> int:
    """Print the explanation; returns 0, or 2 for a bad VALUE/format/mode (message on stderr)."""
    try:
        f = get_format(args.fmt, arg="--format")
        text = args.value
        if args.code:
            text = _code_value(text, f)
        e = explain(text, f, mode=args.mode)
    except ValueError as err:
        print(f"fpemu explain: {err}", file=sys.stderr)
        return 2
    _render(e, plain=args.plain)
    return 0


def _code_value(text: str, f: Format) -> str:
    try:
        code = int(text, 0)
    except ValueError:
        raise ValueError(f"--code needs an integer bit pattern like 0x3dcd; got {text!r}") from None
    if not 0 <= code < 2**f.bits:
        raise ValueError(f"bit pattern {text} does not fit in {f.name}'s {f.bits} bits")
    return repr(float(decode(code, f)))


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
        print(title)
        width = max(len(k) for k, _ in summary)
        for k, v in summary:
            print(f"  {k:<{width}}  {v}")
        print()
        print(plain_table(header, modes))
        return
    console = Console(highlight=False)
    if not console.is_terminal:  # a pipe: no colour, and no wrapping at 80 columns
        console = Console(highlight=False, width=160)
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
