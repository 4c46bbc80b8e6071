"""What a number becomes in a format: bits, fields, exact value, error, neighbours, every mode.

The ``fpemu explain VALUE --format F`` command (:mod:`fpemu.cli.explain`) prints :func:`explain`'s
answer. The pieces are also used by :mod:`fpemu.testing` to show the bits of mismatched elements.

>>> e = explain("0.1", "bf16")
>>> hex(e.code), e.value, e.bits
('0x3dcd', 0.10009765625, '0 01111011 1001101')
>>> [(r.mode, r.value) for r in e.modes][:3]
[('rne', 0.10009765625), ('rna', 0.10009765625), ('rtz', 0.099609375)]
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction

import numpy as np

from fpemu.bits import decode, encode, next_down, next_up
from fpemu.formats import Format, FormatLike, get_format
from fpemu.rounding import RoundMode, get_mode
from fpemu.rounding import round as fround

#: Significant digits shown of an exact decimal expansion before it is cut with "...".
MAX_DIGITS = 60


# ----- fields and text of one encoding --------------------------------------------------------
def fields(code: int, fmt: FormatLike) -> tuple[int, int, int]:
    """Split a bit pattern into its (sign, biased exponent, fraction) fields.

    >>> fields(0x3DCD, "bf16")
    (0, 123, 77)
    """
    f = get_format(fmt)
    code = int(code)
    return (
        code >> (f.bits - 1),
        (code >> f.mbits) & ((1 << f.ebits) - 1),
        code & ((1 << f.mbits) - 1),
    )


def bit_string(code: int, fmt: FormatLike) -> str:
    """The bits of ``code`` as ``"sign exponent fraction"`` binary groups.

    >>> bit_string(0x3C00, "fp16")
    '0 01111 0000000000'
    """
    f = get_format(fmt)
    s, e, m = fields(code, f)
    frac = format(m, f"0{f.mbits}b") if f.mbits else ""
    return f"{s} {e:0{f.ebits}b} {frac}".rstrip()


def hex_code(code: int, fmt: FormatLike) -> str:
    """``code`` in hex, zero-padded to the format's width (``0x3dcd``)."""
    return f"0x{int(code):0{(get_format(fmt).bits + 3) // 4}x}"


def describe_code(code: int, fmt: FormatLike) -> str:
    """One-line field breakdown: hex, then sign, biased exponent (unbiased) and fraction.

    >>> describe_code(0x3DCD, "bf16")
    '0x3dcd [s=0 e=123(2^-4) m=0x4d]'
    >>> describe_code(0x0001, "fp16")
    '0x0001 [s=0 e=0(subnormal) m=0x001]'
    """
    f = get_format(fmt)
    s, e, m = fields(code, f)
    value = float(decode(int(code), f))
    if math.isnan(value) or math.isinf(value):
        what = "nan" if math.isnan(value) else "inf"
    elif e == 0:
        what = "zero" if m == 0 else "subnormal"
    else:
        what = f"2^{e - f.bias}"
    return f"{hex_code(code, f)} [s={s} e={e}({what}) m=0x{m:0{max(1, (f.mbits + 3) // 4)}x}]"


def exact_decimal(x: float, digits: int = MAX_DIGITS) -> str:
    """The exact decimal expansion of a float, cut after ``digits`` significant digits.

    >>> exact_decimal(0.1)
    '0.1000000000000000055511151231257827021181583404541015625'
    >>> exact_decimal(2.0**-133)
    '9.18354961579912115600575419704879435795832466228193376178712...e-41'
    """
    if not math.isfinite(x):
        return repr(x)
    d = Decimal(x)  # exact: every float is a finite decimal
    sign, digit_tuple, exponent = d.as_tuple()
    assert isinstance(exponent, int)
    if len(digit_tuple) <= digits and -30 < len(digit_tuple) + exponent < 40:
        return format(d, "f")
    mant = "".join(map(str, digit_tuple))
    cut = "..." if len(mant) > digits else ""
    head = f"{mant[0]}.{mant[1:digits]}".rstrip(".")
    return f"{'-' if sign else ''}{head}{cut}e{len(mant) - 1 + exponent:+03d}"


# ----- parsing ---------------------------------------------------------------------------------
_HEX_FLOAT = re.compile(r"^[+-]?0x[0-9a-f]*\.?[0-9a-f]*p[+-]?\d+$", re.IGNORECASE)


def parse_value(text: str) -> tuple[float, Fraction | None]:
    """Parse a decimal, fraction (``1/3``), hex float (``0x1.8p-3``), ``inf`` or ``nan``.

    Returns the float64 nearest the value and the exact value (None for inf and NaN).

    Raises:
        ValueError: ``text`` is none of these (the message names the accepted forms).

    >>> parse_value("1/3")[1]
    Fraction(1, 3)
    """
    t = text.strip().replace("_", "")
    low = t.lower().lstrip("+-")
    if low in ("inf", "infinity", "nan"):
        return float(t), None
    try:
        exact = Fraction(float.fromhex(t)) if _HEX_FLOAT.match(t) else Fraction(t)
    except (ValueError, ZeroDivisionError):
        raise ValueError(
            f"VALUE={text!r} is not a number; use a decimal (0.1, 1e-5), a fraction (1/3), "
            "a hex float (0x1.8p-3), inf or nan"
        ) from None
    try:
        x = float(exact)
    except OverflowError:
        x = math.inf
    return math.copysign(x, -1.0 if t.startswith("-") else 1.0), exact


# ----- the explanation -------------------------------------------------------------------------
@dataclass(frozen=True)
class ModeResult:
    """The result of rounding the input under one mode."""

    #: The mode's name (``"rne"``, ...).
    mode: str
    #: The rounded value (float64), or None when the mode cannot round this input.
    value: float | None
    #: Its bit pattern, or None.
    code: int | None
    #: Error in units of the input's ulp (None for inf/NaN).
    ulps: Fraction | None
    #: Why there is no value, if there is none.
    note: str = ""


@dataclass(frozen=True)
class Explanation:
    """Everything ``fpemu explain`` shows about one value in one format."""

    #: The format.
    fmt: Format
    #: The input text.
    text: str
    #: Exact input (None for inf/NaN).
    exact: Fraction | None
    #: The float64 nearest the input: what fpemu rounds.
    x: float
    #: The highlighted mode.
    mode: str
    #: ``x`` rounded under ``mode``.
    value: float
    #: Its bit pattern.
    code: int
    #: Its ``"s e m"`` binary groups.
    bits: str
    #: The format's spacing in the binade of the input (or of the result for inf/NaN).
    ulp: float
    #: The largest format value <= x and the smallest >= x (rdown/rup without overflow).
    below: float
    above: float
    #: The neighbours of the rounded value.
    prev: float
    next: float
    #: Every deterministic mode's result.
    modes: tuple[ModeResult, ...]
    #: Probability that stochastic rounding picks ``above`` (None when x is a value or special).
    p_above: Fraction | None


def _ulp(x: float, f: Format) -> float:
    e = max(math.frexp(x)[1] - 1, f.emin) if x and math.isfinite(x) else f.emin
    return math.ldexp(1.0, e - f.mbits)


def explain(value: str | float, fmt: FormatLike, *, mode: str | RoundMode = "rne") -> Explanation:
    """Explain what ``value`` becomes in ``fmt``.

    Args:
        value: a number, or text as accepted by :func:`parse_value` (exact decimals).
        fmt: format name, alias or :class:`~fpemu.formats.Format`.
        mode: the rounding mode whose result is highlighted (all modes are listed).

    Raises:
        ValueError: ``value`` is not a number, or NaN for a format without NaN.

    >>> explain(1e6, "fp16").value
    inf
    """
    f = get_format(fmt)
    m = get_mode(mode)
    text = value if isinstance(value, str) else repr(float(value))
    x, exact = parse_value(text)
    if math.isnan(x) and not f.has_nan:
        raise ValueError(f"VALUE is NaN, which {f.name} cannot represent")
    results = tuple(_mode_result(x, exact, f, md) for md in RoundMode if md is not m.STOCHASTIC)
    main = float(fround(x, f, mode=m, rng=np.random.default_rng(0) if m is m.STOCHASTIC else None))
    code = _code(main, f)
    with np.errstate(over="ignore", invalid="ignore"):
        below, above = (float(fround(x, f, mode=md)) for md in ("rdown", "rup"))
        prev, nxt = float(next_down(main, f)), float(next_up(main, f))
    p_above = None
    if math.isfinite(x) and below != above and math.isfinite(below) and math.isfinite(above):
        p_above = (Fraction(abs(x)) - Fraction(min(abs(below), abs(above)))) / abs(
            Fraction(above) - Fraction(below)
        )
        p_above = p_above if x > 0 else 1 - p_above  # stochastic rounding is sign-symmetric
    return Explanation(
        f, text, exact, x, m.value, main, code, bit_string(code, f),
        _ulp(abs(x), f) if math.isfinite(x) else _ulp(abs(main), f),
        below, above, prev, nxt, results, p_above,
    )  # fmt: skip


def _code(v: float, f: Format) -> int:
    with np.errstate(over="ignore", invalid="ignore"):  # encode's float64 path warns harmlessly
        return int(encode(v, f))


def _mode_result(x: float, exact: Fraction | None, f: Format, m: RoundMode) -> ModeResult:
    try:
        v = float(fround(x, f, mode=m))
    except ValueError as err:
        return ModeResult(m.value, None, None, None, str(err))
    ulps = None
    if exact is not None and math.isfinite(v):
        ulps = (Fraction(v) - exact) / Fraction(_ulp(abs(x), f))
    return ModeResult(m.value, v, _code(v, f), ulps)
