"""``fpemu explain`` and ``fpemu formats``: the numbers they print, derived by hand below."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest

from fpemu.cli import main
from fpemu.describe import exact_decimal, explain, parse_value
from fpemu.formats import Format

ANSI = re.compile(r"\x1b\[")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# 0.1 in bfloat16 (8 exponent bits, bias 127, 7 fraction bits), by hand:
#   0.1 = 1.6 * 2**-4 -> biased exponent -4 + 127 = 123 = 0b01111011
#   fraction 0.6 * 2**7 = 76.8 -> 77 = 0b1001101 = 0x4d (nearest; 76 below, 77 above)
#   bits 0 01111011 1001101 = 0x3DCD; value (128 + 77) / 128 * 2**-4 = 205/2048 = 0.10009765625
#   neighbours 204/2048 = 0.099609375 (0x3DCC) and 206/2048 = 0.1005859375 (0x3DCE)
#   ulp 2**-4 * 2**-7 = 2**-11 = 0.00048828125; error 205/2048 - 1/10 = 1/10240 = +0.2 ulp
#   toward zero / down: 0x3DCC, error -0.8 ulp; stochastic: up with p = 0.8
@pytest.mark.parametrize("plain", [False, True])
def test_explain_0_1_in_bf16(capsys: pytest.CaptureFixture[str], plain: bool) -> None:
    rc, out, err = run_cli(capsys, "explain", "0.1", "--format", "bf16", *(["--plain"] * plain))
    assert rc == 0 and err == ""
    assert not ANSI.search(out)  # readable in a pipe
    assert "0.1 in bfloat16" in out
    assert re.search(r"bits\s+0x3dcd = 0 01111011 1001101", out)
    assert "123 -> 2^(123 - 127) = 2^-4" in out and "1 + 77/128 = 1.6015625" in out
    assert re.search(r"rne result\s+0\.10009765625\b", out)
    assert "0.1000000000000000055511151231257827021181583404541015625" in out  # float64 0.1
    assert "below 0.099609375 (0x3dcc), above 0.1005859375 (0x3dce)" in out
    assert re.search(r"ulp\s+0\.00048828125 \(2\^-11", out)
    assert "+0.2 ulp" in out
    assert re.search(r"rtz\s+0\.099609375\s+0x3dcc\s+-0\.8", out)
    assert re.search(r"rdown\s+0\.099609375\s+0x3dcc\s+-0\.8", out)
    for mode in ("rne", "rna", "rup", "rto"):  # rto: truncation 76 is even, so it takes 77
        assert re.search(rf"{mode}\s+0\.10009765625\s+0x3dcd\s+\+0\.2", out)
    assert "0.10009765625 with p=0.8, 0.099609375 with p=0.2" in out


# 1/3 in float16 (bias 15, 10 fraction bits): 1/3 = 1.333... * 2**-2 -> exponent 13,
# fraction 0.333... * 1024 = 341.33 -> 341 = 0x155: code 13 << 10 | 341 = 0x3555, value
# 1365/4096 = 0.333251953125; error -1/12288 = -1/3 ulp (ulp 2**-12); up: 0x3556 = 0.33349609375.
def test_explain_one_third_is_exact_input(capsys: pytest.CaptureFixture[str]) -> None:
    e = explain("1/3", "fp16")
    assert e.exact == Fraction(1, 3) and e.code == 0x3555 and e.value == 0.333251953125
    rne, rup = e.modes[0], e.modes[3]
    assert rne.ulps == Fraction(-1, 3) and (rup.mode, rup.code) == ("rup", 0x3556)
    rc, out, _ = run_cli(capsys, "explain", "1/3", "-f", "fp16", "--plain")
    assert rc == 0 and "-0.333333 ulp" in out and "0.33349609375" in out


# Overflow: fp16 max is 65504 = 0x7BFF, +inf is 0x7C00. e4m3fn max 448 = 0x7E, NaN 0x7F.
@pytest.mark.parametrize(
    ("value", "fmt", "rne", "rtz"),
    [
        ("1e6", "fp16", r"inf\s+0x7c00", r"65504\.0\s+0x7bff"),
        ("500", "e4m3", r"nan\s+0x7f", r"448\.0\s+0x7e"),
    ],
)
def test_explain_overflow(
    capsys: pytest.CaptureFixture[str], value: str, fmt: str, rne: str, rtz: str
) -> None:
    rc, out, _ = run_cli(capsys, "explain", value, "-f", fmt, "--plain")
    assert rc == 0
    assert re.search(rf"\nrne\s+{rne}", out) and re.search(rf"\nrtz\s+{rtz}", out)


# bf16's smallest subnormal is 2**-133 = 2**(1 - 127) * 2**-7: bits 0x0001.
def test_explain_subnormal_and_codes(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "explain", "0x1p-133", "-f", "bf16", "--plain")
    assert rc == 0 and "0x0001 = 0 00000000 0000001" in out and "subnormal" in out
    rc, out, _ = run_cli(capsys, "explain", "0x3c00", "--code", "-f", "fp16", "--plain")
    assert rc == 0 and re.search(r"rne result\s+1\b", out)  # 0x3C00 is fp16's 1.0
    rc, out, _ = run_cli(capsys, "explain", "--plain", "-f", "e4m3fnuz", "--", "-0.0")
    assert rc == 0 and "0x00 = 0 0000 000" in out  # fnuz has no -0: the code of +0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "abc", "-f", "bf16"], "explain: VALUE abc: not a number; accepted: "),
        (["explain", "1", "-f", "bf17"], "--format bf17: unknown format; accepted: float64"),
        (["explain", "nan", "-f", "e2m1"], "NaN, which float4_e2m1fn cannot represent"),
        (["explain", "1", "-f", "fp16", "--mode", "up-ish"], "--mode up-ish: unknown rounding"),
        (["explain", "0x10000", "--code", "-f", "fp16"], "float16 lies in 0x0000 to 0xffff"),
        (["formats", "fp17"], "FORMAT fp17: unknown format"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 2 and out == "" and message in err and err.count("\n") == 1


def test_parse_value_and_exact_decimal() -> None:
    assert parse_value("0x1.8p-3") == (0.1875, Fraction(3, 16))
    assert parse_value("-inf")[0] == float("-inf") and parse_value("-inf")[1] is None
    assert exact_decimal(2.0**-10) == "0.0009765625"
    assert exact_decimal(65504.0) == "65504"


# fp16: bits 16, 5 exponent bits, 10 fraction bits, bias 15, max 65504, tiny 2**-14,
# smallest subnormal 2**-24, eps 2**-10. e4m3fn: max 448 = 1.75 * 2**8, no inf.
@pytest.mark.parametrize("plain", [False, True])
def test_formats_table(capsys: pytest.CaptureFixture[str], plain: bool) -> None:
    rc, out, _ = run_cli(capsys, "formats", *(["--plain"] * plain))
    assert rc == 0 and not ANSI.search(out)
    fp16 = next(line for line in out.splitlines() if re.match(r"\s*float16\s", line))
    assert re.search(
        r"float16\s+16\s+5\s+10\s+15\s+ieee\s+yes\s+yes\s+yes\s+yes\s+65504\.0\s+"
        r"6\.10352e-05 \(2\^-14\)\s+5\.96046e-08 \(2\^-24\)\s+0\.0009765625 \(2\^-10\)",
        fp16,
    )
    e4m3 = next(line for line in out.splitlines() if re.match(r"\s*float8_e4m3fn\s", line))
    assert re.search(r"\bfn\s+no\s+yes\s+yes\s+yes\s+448\.0\b", e4m3)
    assert "bf16=bfloat16" in out
    for name in ("float64", "tf32", "float8_e5m2fnuz", "float4_e2m1fn"):
        assert name in out


def test_explain_float64_and_a_custom_format() -> None:
    # float64 0.1 is the well-known 0x3FB999999999999A (fraction 0x999999999999A rounded up).
    e = explain("0.1", "float64")
    assert e.code == 0x3FB999999999999A and e.value == 0.1
    # fpemu rounds the float64 nearest the input, which is a float64 value: every mode keeps it,
    # and the error shown is against the exact 1/10: +0.4 ulp (5.55e-18 / 2**-56).
    assert {r.code for r in e.modes} == {0x3FB999999999999A}
    assert e.modes[0].ulps == Fraction(2, 5)
    e3m4 = Format("e3m4", ebits=3, mbits=4, bias=3, specials="fn")  # max 1.875 * 2**4 = 30
    assert explain("31", e3m4).modes[2].value == 30.0
