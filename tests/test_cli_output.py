"""What the ``fpemu`` commands print (issue 25, "Command line and reports"): every command fits
80 columns under ``COLUMNS=80`` with no trailing blank in a pipe; stdout holds one format (JSON
that ``json.load`` reads); the factory's folder is importable; ``verify --list`` is grouped,
sorted, filtered and sized; ``tensorcore --list``; the experiment report's text.

Commands run in this process through :func:`fpemu.cli.main` (capsys: stdout is not a
terminal, so the trailing-blank filter is the one a pipe gets) and are kept small (2-3 steps).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import fpemu.validate.frameworks.suite as suite
from fpemu.cli import COMMANDS, main
from fpemu.cli.output import RStripWriter
from fpemu.cli.quant_explain import BLOCK_NAMES
from fpemu.quant import BLOCK_FORMATS, get_block_format
from fpemu.tensorcore import INSTRUCTIONS
from fpemu.training import experiment as exp
from fpemu.validate.frameworks.report import CheckResult, Report
from fpemu.verify import campaigns

ROOT = Path(__file__).resolve().parent.parent

FACTORY = """
import torch
from {helper} import build

def make():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    return build(), torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
"""
HELPER = """
import torch

def build():
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
"""


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch) -> None:
    """No COLUMNS from the caller; sys.path restored after each test (the factory's folder is
    put on sys.path, as ``python FILE.py`` does)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))


@pytest.fixture
def factory(tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """``FILE.py:make`` in its own folder, importing a module beside it (a unique name, so
    that no earlier import can satisfy it)."""
    helper = "helper_" + re.sub(r"\W", "_", request.node.name)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / f"{helper}.py").write_text(HELPER)
    (folder / "net.py").write_text(FACTORY.format(helper=helper))
    return f"{folder / 'net.py'}:make"


def _small_report() -> Report:
    """A validate-torch report with a long note and a long witness (the shapes of the real
    ones), standing in for the minutes-long suite."""
    r = Report(title="fpemu vs PyTorch (CPU) and Keras 3")
    r.add(CheckResult("casts", "float32 -> bfloat16", "agree", compared=65536))
    note = ("torch rounds float64 -> bfloat16 through float32 (double rounding): equal to "
            "fpemu.round(fpemu.round(x, 'float32'), 'bfloat16') on every input")  # fmt: skip
    witness = {"input": "0x3ff0100000001000 (1.0039062500009095)", "torch": "0x3f80 (1.0)"}
    r.add(CheckResult("casts", "float64 -> bfloat16", "finding", 212243, witness, [note]))
    r.add(CheckResult("casts", "float64 -> float16", "finding", 206867, witness, [note]))
    r.add(CheckResult("scaler", "GradScaler.update(growth_interval=2)", "agree", compared=40))
    return r


@pytest.fixture
def fake_suite(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    calls: list[dict[str, Any]] = []

    def validate_torch(**kw: Any) -> Report:
        calls.append(kw)
        return _small_report()

    monkeypatch.setattr(suite, "validate_torch", validate_torch)
    return calls


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# ----- 80 columns, no trailing blanks ------------------------------------------------------------
NARROW = [
    ["tour"],
    ["formats"],
    ["formats", "--plain"],
    ["explain", "0.1"],
    ["explain", "0.1", "--plain"],
    ["explain", "0.1", "-f", "bf16"],
    ["explain", "0.1", "-f", "bf16", "--plain"],
    ["explain", "0x7e01", "-f", "fp16"],
    ["explain", "480,9.5,-17,0", "-b", "mxfp6_e3m2"],
    ["quant", "480,9.5,-17,0,1e-3,3.25,7,-0.001"],
    ["tensorcore"],
    ["tensorcore", "--list"],
    ["train", "--steps", "3", "--loss-weight", "1000", "--trace"],
    ["train", "moons", "--steps", "2", "--hidden", "8", "--recipe", "te_mxfp8"],
    ["experiment", "--steps", "2", "--config", "adam", "--no-progress"],
    ["verify", "--list"],
    ["verify", "sqrt-e4m3fn-rna", "--scheduler", "sync"],
    ["validate", "torch"],
    ["validate", "model", "FACTORY", "--steps", "3", "--autocast", "fp16", "--optimizer", "adam"],
    *([name, "--help"] for name in COMMANDS),
    ["--help"],
    [],
]


@pytest.mark.parametrize("argv", NARROW, ids=[" ".join(a) or "(none)" for a in NARROW])
def test_every_command_fits_80_columns_without_trailing_blanks(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str],
    fake_suite: list[dict[str, Any]], factory: str,
) -> None:  # fmt: skip
    if argv[:1] == ["validate"] and "--help" not in argv:
        pytest.importorskip("torch")
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, err = _run(capsys, *[factory if a == "FACTORY" else a for a in argv])
    assert rc in (0, 1, 2 if not argv else 0), (rc, err)
    assert out.strip() or err.strip()
    for stream in (out, err):
        lines = stream.splitlines()
        too_long = [line for line in lines if len(line) > 80]
        assert not too_long, too_long
        assert not [line for line in lines if line.endswith(" ")]


def test_a_three_row_validate_report_stays_short(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    fake_suite: list[dict[str, Any]],
) -> None:  # fmt: skip
    """The notes leave the table at 80 columns: one table line per check, the shared note
    once, no word cut (the report showed "identica/l" and 75 lines for 3 rows)."""
    pytest.importorskip("torch")
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _ = _run(capsys, "validate", "torch")
    assert rc == 0
    rows = [line for line in out.splitlines() if line.lstrip().startswith(("casts", "scaler"))]
    assert len(rows) == 4  # one line per check
    assert [r.split()[-1] for r in rows[1:3]] == ["1", "1"]  # the same note, one number
    assert out.count("double rounding") == 1 and len(out.splitlines()) <= 16
    words = set(re.findall(r"[\w']+", out))
    assert {"GradScaler", "update", "growth_interval", "0x3ff0100000001000"} <= words


def test_the_tour_wraps_no_line_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every line that is not part of a table or rule is the same at 80 and 200 columns."""
    text = {}
    for width in ("80", "200"):
        monkeypatch.setenv("COLUMNS", width)
        assert main(["tour"]) == 0
        text[width] = [line for line in capsys.readouterr().out.splitlines()
                       if not set(line) & set("━─│┃┏┗┡└┌")]  # fmt: skip
    assert text["80"] == text["200"]


def test_a_pipe_gets_no_trailing_blanks_in_a_real_process() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}
    r = subprocess.run([sys.executable, "-m", "fpemu", "formats"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)  # fmt: skip
    lines = r.stdout.splitlines()
    assert r.returncode == 0 and lines and max(map(len, lines)) <= 80
    assert not [line for line in lines if line.endswith(" ")]
    env.pop("COLUMNS")  # a pipe without COLUMNS: every column, still no trailing blank
    r = subprocess.run([sys.executable, "-m", "fpemu", "formats"], capture_output=True,
                       text=True, timeout=120, env=env, cwd=ROOT)  # fmt: skip
    assert "smallest subnormal" in r.stdout and max(map(len, r.stdout.splitlines())) > 80
    assert not [line for line in r.stdout.splitlines() if line.endswith(" ")]


def test_rstrip_writer_keeps_blanks_inside_lines() -> None:
    import io  # noqa: PLC0415

    buf = io.StringIO()
    w = RStripWriter(buf)
    w.write("a  b   ")
    w.write("  \n  c \n\n")
    w.write("tail")
    w.flush()
    assert buf.getvalue() == "a  b\n  c\n\ntail"


# ----- stdout holds one format -------------------------------------------------------------------
def test_validate_torch_json_alone_is_json(
    capsys: pytest.CaptureFixture[str], fake_suite: list[dict[str, Any]]
) -> None:
    pytest.importorskip("torch")
    rc, out, _ = _run(capsys, "validate", "torch", "--json")
    assert rc == 0 and json.loads(out)["counts"]["finding"] == 2  # no table before it
    rc, out, _ = _run(capsys, "validate", "torch", "--markdown")
    assert rc == 0 and out.startswith("## fpemu vs PyTorch") and "┃" not in out


def test_validate_torch_files_keep_the_table_on_stdout(
    capsys: pytest.CaptureFixture[str], fake_suite: list[dict[str, Any]], tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    j, m = tmp_path / "r.json", tmp_path / "r.md"
    rc, out, err = _run(capsys, "validate", "torch", "--quick", "--json", str(j),
                        "--markdown", str(m))  # fmt: skip
    assert rc == 0 and "float64 -> bfloat16" in out and "agree: 2, finding: 2" in out
    assert err.splitlines() == [f"fpemu validate: wrote the JSON report to {j}",
                                f"fpemu validate: wrote the markdown report to {m}"]  # fmt: skip
    assert json.loads(j.read_text())["ok"] is True and m.read_text().startswith("## ")
    assert fake_suite[-1]["n_random"] == 2**16  # --quick reached the suite
    # one report on stdout, the other into a file
    rc, out, err = _run(capsys, "validate", "torch", "--json", "--markdown", str(m))
    assert rc == 0 and json.loads(out)["title"] and err.count("\n") == 1


def test_validate_model_json_is_json_with_native_settings(
    capsys: pytest.CaptureFixture[str], factory: str, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    rc, out, _ = _run(capsys, "validate", "model", factory, "--steps", "2", "--autocast", "fp16",
                      "--scaler", "init_scale=1024,growth_interval=1", "--json")  # fmt: skip
    d = json.loads(out)
    assert rc == 0 and d["ok"] is True
    assert d["settings"]["autocast"] == ["cpu", "float16"]
    assert d["settings"]["grad_scaler"] == {"init_scale": 1024.0, "growth_interval": 1}
    assert d["settings"]["hyperparameters"]["betas"] == [0.9, 0.999]
    # into a file: the table and summary on stdout, one confirmation line on stderr
    f = tmp_path / "r.json"
    rc, out, err = _run(capsys, "validate", "model", factory, "--steps", "1", "--autocast",
                        "off", "--json", str(f))  # fmt: skip
    assert rc == 0 and "compare_torch (independent)" in out and out.rstrip().endswith("OK")
    assert err == f"fpemu validate: wrote the JSON report to {f}\n"
    assert json.loads(f.read_text())["settings"]["autocast"] is None


def test_the_factory_imports_a_module_beside_it_from_another_folder(
    capsys: pytest.CaptureFixture[str], factory: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    pytest.importorskip("torch")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    rc, out, err = _run(capsys, "validate", "model", factory, "--steps", "1")
    assert rc == 0 and err == "" and out.rstrip().endswith("OK")


@pytest.mark.parametrize(
    "argv",
    [["verify", "sqrt-e5m2-rtz", "--scheduler", "sync", "--json"],
     ["train", "moons", "--steps", "2", "--hidden", "4", "--json"],
     ["experiment", "--steps", "2", "--config", "digits", "--json", "--no-progress"]],
)  # fmt: skip
def test_json_on_stdout_loads(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    rc, out, _ = _run(capsys, *argv)
    assert rc == 0 and isinstance(json.loads(out), dict)


# ----- verify ------------------------------------------------------------------------------------
def test_verify_list_is_grouped_sorted_and_sized(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "verify", "--list")
    assert rc == 0
    heads = re.findall(r"^(\w+) \((\d+) campaigns?\)$", out, re.MULTILINE)
    names = re.findall(r"^  (\S+) ", out, re.MULTILINE)
    assert sorted(names) == sorted(campaigns())  # each exactly once
    assert [h for h, _ in heads] == sorted({n.split("-")[0] for n in campaigns()})
    families = [n.split("-")[0] for n in names]
    assert families == sorted(families) and names == sorted(names)  # grouped, then sorted
    assert sum(int(k) for _, k in heads) == len(campaigns())
    # 2**32 = 4294967296 = 4.29e9; 2**16 = 65536; 256 stays as it is; 144**3 = 2985984
    lines = re.findall(r"^  \S+ .*$", out, re.MULTILINE)
    line = dict(zip(names, lines, strict=True))
    assert "2^32 (4.3 G)" in line["add-fp16-rne"] and "pair of codes" in line["add-fp16-rne"]
    assert "2^16 (65.5 k)" in line["mul-e4m3fn-rne"]
    assert re.search(r"\s256\s", line["sqrt-e4m3fn-rne"])
    assert "2985984 (3.0 M)" in line["fma-bf16-rne-boundary"]
    assert "4294967296 cases" not in out


def test_verify_list_filter(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "verify", "--list", "--filter", "fma-e5m2-r[nt]*")
    names = re.findall(r"^  (\S+) ", out, re.MULTILINE)
    expected = sorted(n for n in campaigns() if re.fullmatch(r"fma-e5m2-r[nt].*", n))
    assert rc == 0 and names == expected and len(names) == 8  # rna rne rto rtz, + boundary
    assert out.startswith("fma (8 campaigns)\n")


def test_verify_without_a_mismatch_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "verify", "sqrt-e4m3fn-rna", "--scheduler", "sync")
    assert rc == 0
    assert out.startswith("sqrt-e4m3fn-rna: 0 mismatches in 256 cases\n")
    assert not set(out) & set("━─│┃")  # no (empty) table


def test_verify_resumed_reports_no_rate_of_zero(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["verify", "sqrt-e5m2-rtz", "--scheduler", "sync", "--results", str(tmp_path / "r"),
            "--json"]  # fmt: skip
    rc, out, _ = _run(capsys, *argv)
    first = json.loads(out)
    assert rc == 0 and first["cases_run"] == 256 and first["cases_per_cpu_second"] > 0
    rc, out, _ = _run(capsys, *argv)
    again = json.loads(out)
    assert rc == 0 and again["cases_run"] == 0 and again["cases"] == 256
    assert again["cases_per_cpu_second"] is None and "no case ran" in again["rate_note"]


# ----- tensorcore --list, quant, train -----------------------------------------------------------
def test_tensorcore_list_names_every_instruction_once(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, "tensorcore", "--list")
    names = re.findall(r"^  (\S+)  ", out, re.MULTILINE)
    assert rc == 0 and sorted(names) == sorted(INSTRUCTIONS)
    wgmma = next(line for line in out.splitlines() if line.startswith("  sm90.wgmma.fp8.f16 "))
    assert "t-fdpa" in wgmma and "d float16" in wgmma  # mma-inventory.md: F=13, rne-fp16
    archs = re.findall(r"^(nvidia|amd) (\S+):$", out, re.MULTILINE)
    assert len(archs) == len({(i.vendor, i.arch) for i in INSTRUCTIONS.values()})


def test_quant_lists_only_one_dimensional_block_formats(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(BLOCK_NAMES) == {n for n in BLOCK_FORMATS if get_block_format(n).tile_rows == 1}
    assert "nvfp4_2d" in BLOCK_FORMATS and "nvfp4_2d" not in BLOCK_NAMES
    for name in BLOCK_NAMES:  # every listed format explains a block
        rc, out, err = _run(capsys, "quant", "1,2,3", "--block-format", name)
        assert rc == 0 and err == "" and f", {name} (" in out


def _fp8_rows(out: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("layer     role"))
    return [line.split() for line in lines[start + 1 :] if line.startswith("layers.")]


def test_train_block_scaled_recipes_print_a_dash_not_nan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    rc, out, _ = _run(capsys, "train", "moons", "--steps", "2", "--hidden", "8", "--recipe",
                      "te_mxfp8")  # fmt: skip
    rows = _fp8_rows(out)
    assert rc == 0 and rows and all(r[-1] == "-" for r in rows) and "nan" not in out
    # a tensor-scaled recipe prints its last scale: the JSON trace's value, %g
    argv = ["train", "moons", "--steps", "2", "--hidden", "8", "--recipe", "te_current"]
    rc, out, _ = _run(capsys, *argv)
    _, out_j, _ = _run(capsys, *argv, "--json")
    trace = json.loads(out_j)["fp8_trace"]
    expected = [f"{recs[-1][role]['scale']:g}" for recs in trace.values() for role in recs[-1]]
    assert [r[-1] for r in _fp8_rows(out)] == expected and "-" not in expected


def test_train_help_says_what_the_data_sets_need(monkeypatch: pytest.MonkeyPatch) -> None:
    from fpemu.cli import build_parser  # noqa: PLC0415
    from fpemu.training import datasets  # noqa: PLC0415

    def train_help() -> str:
        monkeypatch.setenv("COLUMNS", "2000")
        sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices
                   and "train" in a.choices)  # fmt: skip
        return " ".join(sub.choices["train"].format_help().split())  # type: ignore[index]

    assert datasets.NEEDS == {} and "fpemu[data]" not in train_help()  # digits ships
    monkeypatch.setitem(datasets.NEEDS, "digits", ("sklearn", "data", "scikit-learn"))
    assert "digits needs pip install 'fpemu[data]'" in train_help()


# ----- the experiment report ---------------------------------------------------------------------
def test_experiment_report_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    doc = tmp_path / "exp.md"
    rc, out, err = _run(capsys, "experiment", "--steps", "2", "--config", "adam", "--markdown",
                        "--no-progress", "--write", str(doc))  # fmt: skip
    assert rc == 0 and err == "" and out.startswith("### `adam`")
    assert not re.search(r"^\(\d+ s\)$", out, re.MULTILINE)  # no timing line on stdout
    text = doc.read_text()
    assert f"fpemu experiment --config adam --steps 2 --write {doc}\n" in text
    assert "``" not in text.replace("```", "") and ":func:" not in text  # Markdown, not reST
    # the counts in the text are the tables' own: 3 configurations, 8 runs
    assert "Three configurations, each trained in the eight runs" in text
    assert (len(exp.CONFIGS), len(exp.RUNS)) == (3, 8)


def test_experiment_reproduce_command() -> None:
    row = exp.Row("digits", "FP32", "fp32", "none", 1.0, 0, 0.0, 0.0, 0.0, 0.0)
    all_rows = [exp.Row(c, "FP32", "fp32", "none", 1.0, 0, 0.0, 0.0, 0.0, 0.0)
                for c in exp.CONFIGS]  # fmt: skip
    assert exp.command(exp.ExperimentResult(300, 0, "fast", all_rows)) == exp.COMMAND
    assert exp.command(exp.ExperimentResult(300, 7, "sequential", [row]), "x.md") == (
        "fpemu experiment --config digits --seed 7 --acc-model sequential --write x.md")


# ----- README and docs ---------------------------------------------------------------------------
def test_readme_lists_every_command_and_installs_cpu_torch_first() -> None:
    readme = (ROOT / "README.md").read_text()
    for command in ("validate model", "validate torch", "quant", "verify", "tensorcore --list",
                    *COMMANDS):  # fmt: skip
        assert f"`fpemu {command}" in readme, command
    cpu = readme.index("--index-url https://download.pytorch.org/whl/cpu")
    assert cpu < readme.index('pip install -e ".[test,torch]"')
    assert readme.index("## Quick start") < cpu < readme.index("## A taste")


def test_docs_link_validate_your_model_and_pin_the_frameworks() -> None:
    for page in ("index.md", "getting-started.md"):
        assert "(validate-your-model.md)" in (ROOT / "docs" / page).read_text(), page
    text = (ROOT / "docs" / "validating-a-framework.md").read_text()
    installs = [line.split("#")[0] for line in text.splitlines() if "pip install" in line]
    assert installs and all("torch==2.13.0" in line for line in installs)
    for line in installs:  # every framework named is pinned
        assert re.findall(r"\b(?:torch|keras)\b(?!==)", line.replace("fpemu[test]", "")) == []
    assert any("keras==3.15.1" in line for line in installs)


def test_train_recipe_accepts_what_it_runs_under(capsys: pytest.CaptureFixture[str]) -> None:
    """--recipe runs under policy fp32 without a loss scaler: saying so is not refused."""
    rc, out, err = _run(capsys, "train", "moons", "--steps", "1", "--hidden", "4", "--recipe",
                        "te_delayed", "--policy", "fp32", "--scaler", "none")  # fmt: skip
    text = " ".join(out.split())
    assert rc == 0 and err == "" and "policy fp32 " in text and "scaler none," in text
