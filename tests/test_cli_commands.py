"""What the ``fpemu`` commands print (issue 11, item 2): version, help, formats at 80 and 200
columns, explain with negative numbers, bit patterns and the side-by-side table, the experiment
without scikit-learn and into a pipe, and ``fpemu train``'s mixed-precision default.

Expected codes and values are derived by hand in the comments (IEEE field arithmetic).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import io
import re
import sys

import pytest
from rich.console import Console

import fpemu.cli.explain as explain_cli
from fpemu.amp.policy import preset_names
from fpemu.amp.scaling.registry import SCALERS
from fpemu.cli import COMMANDS, build_parser, main
from fpemu.cli.formats import COMPACT, render
from fpemu.formats import FORMATS
from fpemu.rounding import RoundMode
from fpemu.tensorcore import ARCHS
from fpemu.training.datasets import DATASETS, digits, unavailable
from fpemu.training.experiment import CONFIGS
from fpemu.training.loop import _Progress


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller's COLUMNS does not choose the layouts these tests expect (a pipe)."""
    monkeypatch.delenv("COLUMNS", raising=False)


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ----- version and help ------------------------------------------------------------------------
def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "--version")
    assert rc == 0 and out == f"fpemu {importlib.metadata.version('fpemu')}\n"


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_every_help_shows_every_default(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "2000")  # no line breaks inside a default
    p = _subparsers()[command]
    text = " ".join(p.format_help().split())
    for a in p._actions:
        if a.default is None or a.default is False or a.default == argparse.SUPPRESS:
            continue
        assert f"(default: {a.default})" in text, (command, a.dest, a.default)


def test_help_lists_the_fixed_sets_of_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "2000")
    helps = {name: " ".join(p.format_help().split()) for name, p in _subparsers().items()}
    expected = {
        "explain": [*FORMATS, *(m.value for m in RoundMode)],
        "formats": list(FORMATS),
        "tensorcore": [*ARCHS, "float16", "bfloat16", "tf32", "float32"],
        "train": [*preset_names(), *SCALERS, *DATASETS, "sgd", "adam", "sequential"],
        "experiment": ["digits", "underflow", "adam", "fast"],
        "crosscheck": [*ARCHS, "floor", "emin", "uniform"],
    }
    for command, names in expected.items():
        for name in names:
            assert re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", helps[command]), (
                command,
                name,
            )


# ----- formats ----------------------------------------------------------------------------------
def _formats(width: int, *names: str) -> str:
    con = Console(file=io.StringIO(), width=width)
    render(con, list(names) or None)
    return con.file.getvalue()  # type: ignore[attr-defined, no-any-return]


def test_formats_at_80_columns_is_compact_and_uncut() -> None:
    out = _formats(80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80 and "…" not in out
    header = next(line for line in lines if line.strip().startswith("name"))
    assert header.split() == list(COMPACT)
    # fp16: 16 bits, 5 exponent / 10 fraction bits, bias 15, max (2 - 2**-10) * 2**15 = 65504,
    # smallest normal 2**(1 - 15) = 2**-14, eps 2**-10.
    fp16 = next(line for line in lines if line.split()[:1] == ["float16"])
    assert fp16.split() == ["float16", "16", "5/10", "15", "ieee", "65504", "2^-14", "2^-10"]
    # e4m3fnuz: bias 8, max 1.875 * 2**7 = 240, tiny 2**(1 - 8) = 2**-7.
    fnuz = next(line for line in lines if line.split()[:1] == ["float8_e4m3fnuz"])
    assert fnuz.split() == ["float8_e4m3fnuz", "8", "4/3", "8", "fnuz", "240", "2^-7", "2^-3"]
    assert "--wide" in out


def test_formats_at_200_columns_is_complete() -> None:
    out = _formats(200)
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 200
    assert "smallest subnormal" in out and "subnormals" in out
    fp16 = next(line for line in out.splitlines() if line.split()[:1] == ["float16"])
    # smallest subnormal 2**-14 * 2**-10 = 2**-24 = 5.96046e-08
    assert re.search(r"65504\.0\s+6\.10352e-05 \(2\^-14\)\s+5\.96046e-08 \(2\^-24\)", fp16)


def test_formats_flags_force_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "formats", "--compact", "fp16", "e5m2")  # a pipe: else wide
    assert rc == 0 and "smallest subnormal" not in out and "e/m" in out
    rc, out, _ = run_cli(capsys, "formats", "--wide", "bf16")
    names = [line.split()[0] for line in out.splitlines() if line.strip().startswith("b")]
    assert rc == 0 and "smallest subnormal" in out and names == ["bfloat16"]


# ----- explain ----------------------------------------------------------------------------------
# -1e-5 in fp16: |x| / 2**-24 = 167.77 -> 168 (subnormal), code 0x8000 | 168 = 0x80a8,
# value -168 * 2**-24 = -1.0013580322265625e-05.
# -0x1p-3 = -2**-3: biased exponent -3 + 15 = 12 = 0b01100 -> 1 01100 0000000000 = 0xb000.
@pytest.mark.parametrize(
    ("value", "code"),
    [("-1e-5", "0x80a8"), ("-inf", "0xfc00"), ("-0", "0x8000"), ("-0x1p-3", "0xb000")],
)
def test_explain_negative_values(capsys: pytest.CaptureFixture[str], value: str, code: str) -> None:
    rc, out, err = run_cli(capsys, "explain", value, "--format", "fp16", "--plain")
    assert rc == 0 and err == ""
    assert re.search(rf"bits\s+{code} = 1 ", out), out
    rc, out2, _ = run_cli(capsys, "explain", "--plain", "-f", "fp16", value)  # VALUE last
    assert rc == 0 and out2 == out


def test_explain_negative_value_elsewhere(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "explain", "-1e-5", "-f", "fp16", "--plain")
    assert "-1.0013580322265625e-05" in out
    rc, out, _ = run_cli(capsys, "tensorcore", "--c", "-1e-5", "--k", "2")  # an option's value
    assert rc == 0 and out.startswith("h100 tensor core")


# 0x3c00 in fp16: sign 0, exponent 0b01111 = 15 -> 2**0, fraction 0: the value 1.
# As a number, 15360 = 1.875 * 2**13: exponent 28 = 0b11100, fraction 0.875 * 1024 = 896:
# code 0 11100 1110000000 = 0x7380.
def test_explain_bit_patterns(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "explain", "0x3c00", "--format", "fp16", "--plain")
    assert rc == 0 and "0x3c00 is read as a bit pattern of float16" in out
    assert re.search(r"rne result\s+1\n", out) and "--value" in out
    rc, out_b, _ = run_cli(capsys, "explain", "0b0011110000000000", "-f", "fp16", "--plain")
    assert rc == 0 and out_b.splitlines()[1:] == out.splitlines()[1:]
    rc, out, _ = run_cli(capsys, "explain", "0x3c00", "--value", "-f", "fp16", "--plain")
    assert rc == 0 and re.search(r"rne result\s+15360\n", out)
    assert re.search(r"bits\s+0x7380 = 0 11100 1110000000", out)
    rc, out, _ = run_cli(capsys, "explain", "15360", "--code", "-f", "fp16", "--plain")
    assert rc == 0 and re.search(r"rne result\s+1\n", out)  # 15360 == 0x3c00
    # 0x7e01: exponent all ones, fraction 0x201 != 0: a NaN with a payload; fp16's one NaN
    # in fpemu is 0x7e00 (quiet bit only), and the output says the payload is dropped.
    rc, out, _ = run_cli(capsys, "explain", "0x7e01", "-f", "fp16", "--plain")
    assert rc == 0 and "a NaN: fpemu has one NaN per format, 0x7e00 in float16" in out


# 0.1 in the common formats, by hand (round to nearest even from float64 0.1):
#   fp64 0x3fb999999999999a; fp32 0x3dcccccd (well known);
#   bf16 0x3dcd (see test_explain.py); fp16: 1.6 * 2**-4 -> exponent 11 = 0b01011, fraction
#   0.6 * 1024 = 614.4 -> 614 = 0x266: 0x2c00 | 0x266 = 0x2e66, value 1638 / 16384; error
#   -2.44140625e-05 = -0.4 ulp (ulp 2**-14);
#   e4m3fn: exponent -4 + 7 = 3, fraction 0.6 * 8 = 4.8 -> 5: 0 0011 101 = 0x1d = 0.1015625;
#   e2m1fn: smallest subnormal 0.5, 0.1 < 0.25 -> +0, code 0x0, error -0.1 = -0.2 ulp.
def test_explain_without_format_shows_every_common_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, err = run_cli(capsys, "explain", "0.1", "--plain")
    assert rc == 0 and err == ""
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:-1]}
    assert list(rows) == ["fp64", "fp32", "tf32", "bf16", "fp16", "e4m3fn", "e5m2", "e3m2fn",
                          "e2m3fn", "e2m1fn"]  # fmt: skip
    assert rows["fp64"][-1] == "0x3fb999999999999a" and rows["fp32"][-1] == "0x3dcccccd"
    assert rows["bf16"][-1] == "0x3dcd"
    assert rows["fp16"][1:] == ["0.0999755859375", "-2.44141e-05", "-0.4", "0x2e66"]
    assert rows["e4m3fn"][1:] == ["0.1015625", "+0.0015625", "+0.2", "0x1d"]
    assert rows["e2m1fn"][1:] == ["0.0", "-0.1", "-0.2", "0x0"]
    header = out.splitlines()[1].split()
    assert header == ["format", "stored", "value", "error", "ulps", "bits", "(hex)"]


def test_explain_table_fits_80_columns() -> None:
    con = Console(file=io.StringIO(), width=80)
    explain_cli.render_table("-1e-5", "-1e-5", mode="rne", plain=False, console=con)
    out = con.file.getvalue()  # type: ignore[attr-defined]
    assert "…" not in out and max(len(line) for line in out.splitlines()) <= 80
    assert "-1.00136e-05" not in out and "-1.0013580322265625e-05" in out  # fp16, not cut


def test_explain_table_with_nan_and_rich(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "explain", "nan")
    assert rc == 0 and "(no NaN)" in out and "0x7e00" in out  # fp16's quiet NaN 0 11111 1000...


# ----- experiment and train ---------------------------------------------------------------------
def test_experiment_and_train_digits_without_scikit_learn(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The digits ship with fpemu: the main install (no scikit-learn) runs every configuration."""
    monkeypatch.setitem(sys.modules, "sklearn", None)
    assert unavailable("digits") is None
    assert digits().features == 64
    rc, out, err = run_cli(capsys, "experiment", "--steps", "2", "--no-progress",
                           "--config", "digits")  # fmt: skip
    assert rc == 0 and err == "" and out.startswith("### `digits`")
    rc, out, err = run_cli(capsys, "train", "digits", "--steps", "2")
    assert rc == 0 and out.startswith("digits: ")


def test_a_data_set_that_needs_a_missing_extra_is_skipped_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # No shipped data set needs an extra today; the mechanism is kept for one that will.
    from fpemu.training import datasets  # noqa: PLC0415

    monkeypatch.setitem(datasets.NEEDS, "digits", ("sklearn", "data", "scikit-learn"))
    monkeypatch.setitem(sys.modules, "sklearn", None)
    assert unavailable("digits") == (
        "the digits data set needs scikit-learn: pip install 'fpemu[data]'"
    )
    needs = [c for c, kw in CONFIGS.items() if kw["dataset"] == "digits"]
    argv = ["experiment", "--steps", "2", "--no-progress", *(f"--config={c}" for c in needs)]
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 3 and out == ""
    assert err == (f"fpemu experiment: skipped {', '.join(needs)}: the digits data set needs "
                   "scikit-learn: pip install 'fpemu[data]'\n")  # fmt: skip


def test_experiment_into_a_pipe_starts_with_the_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("sklearn")  # in the test extra
    rc, out, err = run_cli(capsys, "experiment", "--config", "digits", "--steps", "2")
    assert rc == 0 and err == ""
    assert out.startswith("### `digits`\n\n| run | policy |")


def test_train_default_is_mixed_precision_with_a_scaler(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run_cli(capsys, "train", "--steps", "3")  # progress: not on a pipe
    assert rc == 0 and err == ""
    lines = out.splitlines()
    text = " ".join(out.split())  # the prose is wrapped at 80 columns
    assert lines[0].startswith("spirals: ") and "policy torch_cuda_fp16" in lines[0]
    assert "compute float16, parameters float32" in text and "scaler torch," in text
    # torch's GradScaler starts at 2**16 and grows only after 2000 clean steps.
    assert "loss scale: 65536 at the first step, 65536 at the last; 0 skipped steps, " \
           "0 growths, 0 backoffs" in text  # fmt: skip
    start = next(i for i, line in enumerate(lines) if line.startswith("layer "))
    assert lines[start - 1].split() == ["after", "before"]  # over the two groups of three
    header = lines[start].split()
    assert header == ["layer", "zero", "subnormal", "overflow", "zero", "subnormal", "overflow"]
    assert lines[start - 1].index("after") == lines[start].index("zero")
    assert lines[start - 1].index("before") == lines[start].rindex("zero")
    rows = [line.split() for line in lines[start + 1 :] if line.strip()]
    assert rows and all(len(r) == 7 for r in rows)  # a value under each of the 7 headers


# Loss weight 1000: the scaled loss 1000 * ~1.1 * 65536 = 7e7 exceeds FP16's max 65504, so the
# FP16 backward pass overflows, torch's scaler skips the step and halves the scale.
def test_train_prints_the_scale_trace(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, "train", "--steps", "3", "--loss-weight", "1000", "--trace")
    assert rc == 0
    assert "loss scale: 65536 at the first step, 16384 at the last; 3 skipped steps, " \
           "0 growths, 2 backoffs" in " ".join(out.split())  # fmt: skip
    lines = out.splitlines()
    start = lines.index(next(line for line in lines if line.startswith("step ")))
    assert lines[start].split() == ["step", "loss", "scale", "used", "event"]
    assert re.match(r"0\s+\S+\s+65536\s+skipped", lines[start + 1])
    assert re.match(r"1\s+\S+\s+32768\s+backoff: 65536 -> 32768; skipped", lines[start + 2])


def test_progress_bar_only_on_a_terminal_and_on_stderr(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for var in ("FORCE_TERMINAL", "FORCE_COLOR", "TTY_COMPATIBLE"):
        monkeypatch.delenv(var, raising=False)
    assert _Progress(3, "x", enabled=True).bar is None  # stderr is a capture, not a terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # now stderr is "a terminal"
    bar = _Progress(3, "x", enabled=True)
    assert bar.bar is not None and bar.bar.console.stderr
    with bar:
        bar.advance(1.0, 2.0)
    assert capsys.readouterr().out == ""  # drawn on stderr, never into stdout
    assert _Progress(3, "x", enabled=False).bar is None
