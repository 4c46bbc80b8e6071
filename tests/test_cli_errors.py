"""Every bad argument of every ``fpemu`` command: one line naming the argument, the value and
what is accepted, exit status 2, no traceback (issue 11, item 2).

Each case lists substrings the one stderr line must contain: the argument, the value and a piece
of the accepted set, so a message that drops any of the three fails.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import fpemu.cli as cli
import fpemu.cli.tensorcore as tc
from fpemu.cli import COMMANDS, main
from fpemu.cli.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent

#: (argv, substrings of the single stderr line)
BAD: list[tuple[list[str], list[str]]] = [
    # the command itself
    (["bogus"], ["fpemu: COMMAND bogus", "choose from tour, formats"]),
    (["trian"], ["fpemu: COMMAND trian: invalid choice; did you mean train?", "tour, formats"]),
    (["verfy", "--list"], ["COMMAND verfy", "did you mean verify?"]),
    # tour
    (["tour", "--width", "5"], ["fpemu tour: --width 5", "integer >= 40"]),
    (["tour", "--width", "wide"], ["--width wide", "integer >= 40"]),
    # formats
    (["formats", "fp17"], ["fpemu formats: FORMAT fp17", "unknown format", "float16"]),
    (["formats", "--wide", "--compact"], ["--compact", "--wide"]),
    # explain
    (["explain", "1e400", "--format", "fp16"], ["VALUE 1e400", "beyond float64", "inf"]),
    (["explain", "1e400"], ["VALUE 1e400", "beyond float64"]),
    (["explain", "abc", "-f", "bf16"], ["VALUE abc", "not a number", "hex float"]),
    (["explain", "1", "-f", "bf17"], ["--format bf17", "unknown format", "bfloat16"]),
    (["explain", "1", "-m", "up-ish"], ["--mode up-ish", "rne, rna, rtz"]),
    (["explain", "nan", "-f", "e2m1"], ["VALUE nan", "float4_e2m1fn"]),
    (["explain", "0x10000", "-f", "fp16"], ["VALUE 0x10000", "0x0000 to 0xffff"]),
    (["explain", "1.5", "--code", "-f", "fp16"], ["VALUE 1.5", "bit pattern", "0x3c00"]),
    (["explain", "0x3c00", "--code"], ["--code", "--format"]),
    (["explain"], ["required: VALUE"]),
    (["explain", "1", "-f"], ["--format", "expected a value"]),
    # tensorcore
    (["tensorcore", "--arch", "rtx9000"], ["--arch rtx9000", "unknown architecture", "h100"]),
    (["tensorcore", "--k", "0"], ["--k 0", "integer from 1 to"]),
    (["tensorcore", "--k", "-3"], ["--k -3", "integer from 1 to"]),
    (["tensorcore", "--fmt", "fp64"], ["--fmt fp64", "float16, bfloat16"]),
    (["tensorcore", "--fmt", "nope"], ["--fmt nope", "unknown input format"]),
    (["tensorcore", "--acc", "bf16"], ["--acc bf16", "float32, float16"]),
    (["tensorcore", "--arch", "v100", "--fmt", "bf16"], ["--fmt bf16", "v100", "float16"]),
    (["tensorcore", "--a", "1,2"], ["--a", "--b"]),
    (["tensorcore", "--a", "1,x", "--b", "1,2"], ["--a 1,x", "comma-separated"]),
    (["tensorcore", "--a", "1,2", "--b", "1"], ["--b", "length 1", "--a"]),
    (["tensorcore", "--c", "abc"], ["--c abc", "number"]),
    (["tensorcore", "--list", "--a", "1,2"], ["--a", "not with --list"]),
    # train
    (["train", "spirals", "--scaler", "foo"], ["--scaler foo", "unknown scaler", "torch"]),
    (["train", "spirals", "--policy", "fp8"], ["--policy fp8", "torch_cuda_fp16"]),
    (["train", "spirals", "--steps", "0"], ["--steps 0", "integer >= 1"]),
    (["train", "mnist"], ["DATASET mnist", "spirals, moons, digits"]),
    (["train", "--lr", "-1"], ["--lr -1", "positive number"]),
    (["train", "--lr", "nan"], ["--lr nan", "positive number"]),
    (["train", "--optimizer", "rmsprop"], ["--optimizer rmsprop", "sgd, adam"]),
    (["train", "--hidden", "0"], ["--hidden 0", "integer >= 1"]),
    (["train", "--micro-batches", "3"], ["--micro-batches 3", "--batch-size 64"]),
    (["train", "--batch-size", "100000"], ["--batch-size 100000", "at most"]),
    (["train", "--acc-model", "bogus"], ["--acc-model bogus", "sequential"]),
    (["train", "--seed", "-1"], ["--seed -1", "integer >= 0"]),
    # issue 25: a policy or a loss scaler with an FP8 recipe (both were dropped silently)
    (["train", "--recipe", "te_delayed", "--policy", "torch_cuda_fp16"],
     ["--policy torch_cuda_fp16", "not with --recipe te_delayed", "fp32"]),
    (["train", "--recipe", "te_mxfp8", "--policy", "torch_bf16"],
     ["--policy torch_bf16", "--recipe"]),
    (["train", "--recipe", "te_delayed", "--scaler", "torch"],
     ["--scaler torch", "not with --recipe te_delayed", "no loss scaler"]),
    # experiment
    (["experiment", "--config", "foo"], ["--config foo", "digits"]),
    (["experiment", "--steps", "x"], ["--steps x", "integer >= 1"]),
    (["experiment", "--acc-model", "x"], ["--acc-model x", "fast"]),
    (["experiment", "--write", "/no/such/folder/r.md"], ["--write /no/such/folder/r.md"]),
    (["experiment", "--write", "/"], ["--write /", "is a folder"]),
    (["experiment", "--json", "--markdown"], ["--markdown", "--json"]),
    # crosscheck (checked before looking for a GPU: the same answer on every machine)
    (["crosscheck", "--cases", "0"], ["--cases 0", "integer >= 1"]),
    (["crosscheck", "--instructions", "bogus"], ["--instructions", "bogus", "fp16"]),
    (["crosscheck", "--generators", "uniform,nope"], ["--generators", "nope", "uniform"]),
    (["crosscheck", "--model", "rtx"], ["--model rtx", "h100"]),
    (["crosscheck", "--zeros", "x"], ["--zeros x", "floor, emin, drop"]),
    (["crosscheck", "--save", "/no/such/folder/m.npz"], ["--save /no/such/folder/m.npz"]),
    # verify (registered by the fixture below until fpemu/cli/__init__.py lists it)
    (["quant", "1,2,3", "--block-format", "foo"], ["--block-format foo", "mxfp8_e4m3"]),
    (["quant", "1,2,x"], ["1,2,x", "comma-separated numbers"]),
    (["quant", "1,2,3", "--rule", "bogus"], ["--rule bogus", "floor, ceil, even, rceil"]),
    # issue 25: the 2-D tile format is not one block (it was listed, then refused oddly)
    (["quant", "1,2,3", "--block-format", "nvfp4_2d"],
     ["--block-format nvfp4_2d", "2-D", "16x16 tile", "nvfp4"]),
    (["explain", "1,2", "-b", "nvfp4_2d"], ["--block-format nvfp4_2d", "2-D", "mxfp4"]),
    (["explain", "1,2", "--block-format", "foo"], ["--block-format foo", "mxfp4"]),
    (["explain", "1,x", "--block-format", "mxfp4"], ["1,x", "comma-separated numbers"]),
    (["explain", "1,2", "-b", "mxfp4", "-f", "fp16"], ["--block-format", "--format"]),
    (["verify", "nope"], ["CAMPAIGN nope", "--list"]),
    (["verify", "sqrt-e4m3fn-rna", "--chunks", "0"], ["--chunks 0", "expected 1 to"]),
    (["verify", "sqrt-e4m3fn-rna", "--scheduler", "foo"], ["--scheduler foo", "sync"]),
    (["verify", "--chunks", "x"], ["--chunks x", "integer"]),
    # issue 25: --list takes no NAME (--filter GLOB selects), run flags are not list flags,
    # the results folder and the scheduler are checked before anything runs
    (["verify", "--list", "add-fp16-rne"], ["CAMPAIGN add-fp16-rne", "not with --list",
                                            "--filter 'add-fp16-rne*'"]),
    (["verify", "--list", "--json"], ["--json", "not with --list", "--filter"]),
    (["verify", "--list", "--filter", "nomatch*"], ["--filter nomatch*", "no campaign"]),
    (["verify", "sqrt-e4m3fn-rna", "--filter", "sqrt*"], ["--filter sqrt*", "only with --list"]),
    (["verify", "sqrt-e4m3fn-rna", "--results", "/dev/null/r"],
     ["--results /dev/null/r", "cannot create the folder"]),
    (["verify", "sqrt-e4m3fn-rna", "--scheduler", "tcp://127.0.0.1:1"],
     ["--scheduler tcp://127.0.0.1:1", "no scheduler answers there", "threads"]),
    (["verify", "sqrt-e4m3fn-rna", "--scheduler", "tcp://nohost"],
     ["--scheduler tcp://nohost", "expected an address"]),
    # emulate (settings are refused before the file is loaded or torch imported)
    (["emulate", "x.py:f", "--policy", "nope"], ["--policy nope", "torch_cuda_fp16"]),
    (["emulate-experiment", "--steps", "0"], ["--steps 0", "integer"]),
    (["emulate-experiment", "--configs", "fp12"], ["--configs fp12", "fp16+scaler"]),
    # validate (its arguments; running it needs torch)
    (["validate", "foo"], ["framework foo", "torch"]),
    (["validate", "torch", "--only", "bogus"], ["--only bogus", "casts"]),
    (["validate"], ["required: framework"]),
    # issue 25: two reports on stdout, outputs checked before the run, the other subcommand's
    # flags, and the user's factory failing (syntax, an exception at import or when called)
    (["validate", "torch", "--json", "--markdown"], ["--json --markdown", "one report on"]),
    (["validate", "torch", "--json", "/no/such/r.json"], ["--json /no/such/r.json", "folder"]),
    (["validate", "model", "{tmp}/ok.py:make", "--markdown", "/no/such/r.md"],
     ["--markdown /no/such/r.md", "does not exist"]),
    (["validate", "model", "{tmp}/ok.py:make", "--quick"],
     ["--quick", "only for 'fpemu validate torch'"]),
    (["validate", "torch", "--steps", "3"], ["--steps 3", "only for 'fpemu validate model'"]),
    (["validate", "torch", "--lockstep"], ["--lockstep", "only for 'fpemu validate model'"]),
    (["validate", "torch", "--autocast", "fp16"], ["--autocast fp16", "validate model"]),
    (["validate", "model", "{tmp}/ok.py:make", "--only", "casts"], ["--only casts", "torch"]),
    (["validate", "model", "{tmp}/syntax.py:make"],
     ["FILE.py:FACTORY", "syntax.py line 1", "invalid syntax"]),
    (["validate", "model", "{tmp}/raises.py:make"],
     ["raises.py:make", "the function raised RuntimeError: no data"]),
    (["validate", "model", "{tmp}/badimport.py:make"],
     ["badimport.py", "raised ModuleNotFoundError", "no_such_module_beside"]),
]

#: Files the validate cases above name as {tmp}/FILE.py (written by the fixture below).
FACTORIES = {
    "ok.py": "def make():\n    raise AssertionError('a refused invocation must not run this')\n",
    "syntax.py": "def make(:\n    pass\n",
    "raises.py": "def make():\n    raise RuntimeError('no data')\n",
    "badimport.py": "import no_such_module_beside\n\ndef make():\n    pass\n",
}


@pytest.fixture(autouse=True)
def _verify_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fpemu verify`` (issue 17) is written; the lead registers it in COMMANDS."""
    if "verify" not in COMMANDS:
        monkeypatch.setitem(COMMANDS, "verify", ("fpemu.cli.verify", "run a campaign"))


def _ids(case: tuple[list[str], list[str]]) -> str:
    return " ".join(case[0]) or "(none)"


@pytest.fixture
def factories(tmp_path: Path) -> Path:
    for name, text in FACTORIES.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("case", BAD, ids=[_ids(c) for c in BAD])
def test_bad_argument_is_one_line_and_status_2(
    capsys: pytest.CaptureFixture[str], case: tuple[list[str], list[str]], factories: Path
) -> None:
    argv = [a.replace("{tmp}", str(factories)) for a in case[0]]
    parts = [p.replace("{tmp}", str(factories)) for p in case[1]]
    rc = main(argv)
    out, err = capsys.readouterr()
    assert rc == 2, (rc, out, err)
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err  # exactly one line
    assert "Traceback" not in err
    command = argv[0] if argv and argv[0] in COMMANDS else ""
    assert err.startswith(f"fpemu {command}:".replace(" :", ":")), err
    for part in parts:
        assert part in err, (part, err)


def test_the_table_covers_every_command() -> None:
    assert len(BAD) >= 25
    assert set(COMMANDS) <= {argv[0] for argv, _ in BAD if argv}


def _subprocess(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    return subprocess.run(
        [sys.executable, "-m", "fpemu.cli", *argv],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip


# The measured tracebacks of issue 11, as a real process: status 2, one line, no traceback.
@pytest.mark.parametrize(
    "argv",
    [
        ["tensorcore", "--arch", "rtx9000"],
        ["train", "spirals", "--scaler", "foo"],
        ["explain", "1e400", "--format", "fp16"],
        ["train", "spirals", "--steps", "0"],
    ],
)
def test_bad_argument_in_a_real_process(argv: list[str]) -> None:
    r = _subprocess(*argv)
    assert r.returncode == 2, r
    assert r.stdout == ""
    assert len(r.stderr.splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"fpemu {argv[0]}: ")


def test_debug_shows_the_traceback() -> None:
    r = _subprocess("--debug", "explain", "1e400", "-f", "fp16")
    assert r.returncode != 0 and "Traceback" in r.stderr and "UsageError" in r.stderr


def test_library_errors_without_a_usage_message_are_still_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ValueError the command did not anticipate: one line, with the --debug hint."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise ValueError("c='x' is not a number\nsecond line")

    monkeypatch.setattr(tc, "compare", refuse)
    assert main(["tensorcore", "--k", "2"]) == 2
    err = capsys.readouterr().err
    assert err == "fpemu tensorcore: c='x' is not a number (fpemu --debug tensorcore ... shows " \
                  "where)\n"  # fmt: skip


def test_a_real_import_error_is_not_reported_as_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only a missing optional package marks a command unavailable; a broken module raises."""
    monkeypatch.setitem(cli.COMMANDS, "broken", ("fpemu.cli._no_such_module", "x"))
    with pytest.raises(ModuleNotFoundError, match="_no_such_module"):
        cli.build_parser()


def test_a_missing_optional_package_names_the_extra(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    mod = tmp_path / "fpemu_cli_needs_cupy.py"
    mod.write_text("import cupy\n\ndef configure(p): pass\n\ndef run(a): return 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy -> ModuleNotFoundError
    monkeypatch.setitem(cli.COMMANDS, "gpuonly", ("fpemu_cli_needs_cupy", "needs cupy"))
    assert main(["gpuonly", "--anything"]) == 2
    err = capsys.readouterr().err
    assert err == "fpemu gpuonly: needs cupy: pip install 'fpemu[cupy]'\n"


# ----- issue 25: the command itself -------------------------------------------------------------
def test_no_arguments_prints_the_usage_and_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``fpemu`` alone was one line, "the following arguments are required": now the usage and
    the command list, on stderr (stdout stays empty for a bad invocation), status 2."""
    rc = main([])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith("usage: fpemu ") and "Traceback" not in err
    for name, (_, help_) in COMMANDS.items():
        assert re.search(rf"^\s+{name}\b", err, re.MULTILINE), name
        assert help_.split()[0] in err


def test_debug_after_the_command_shows_the_traceback() -> None:
    r = _subprocess("explain", "1e400", "-f", "fp16", "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr and "UsageError" in r.stderr


def test_debug_shows_the_factory_s_own_traceback(factories: Path) -> None:
    """--debug re-raises; the user's exception is the cause, so its traceback is shown."""
    with pytest.raises(UsageError) as info:
        main(["validate", "model", f"{factories}/raises.py:make", "--debug"])
    assert isinstance(info.value.__cause__, RuntimeError)
    assert str(info.value.__cause__) == "no data"


def test_python_dash_m_fpemu() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "fpemu", "--version"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0 and r.stdout.startswith("fpemu ")
    r = subprocess.run([sys.executable, "-m", "fpemu", "trian"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)  # fmt: skip
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [r.stderr.rstrip("\n")] and "did you mean train?" in r.stderr


WRONG_SHAPE = """
import torch

def make():
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    return net, torch.zeros(8, 5), torch.zeros(8, dtype=torch.long)
"""


def test_inputs_of_the_wrong_shape_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """torch's own error from inside the run (the first forward), as one line."""
    pytest.importorskip("torch")
    (tmp_path / "net.py").write_text(WRONG_SHAPE)
    rc = main(["validate", "model", f"{tmp_path}/net.py:make", "--steps", "1"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("fpemu validate: FILE.py:FACTORY ")
    assert "RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x5 and 4x8)" in err
