"""``--html FILE`` of ``fpemu validate model|torch``, ``fpemu verify`` and ``fpemu experiment``:
the page is written beside the usual output, and a path that cannot be written is refused
before anything runs (one line, exit status 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import fpemu.training.experiment as experiment_mod
import fpemu.verify as verify_mod
from fpemu.cli import main
from tests.page_parser import external_references, parse
from tests.test_pages import check_page, table_with

FACTORY = """
import torch

def make():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    g = torch.Generator().manual_seed(1)
    return net, torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
"""


def test_verify_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "v.html"
    rc = main(["verify", "sqrt-e4m3fn-rna", "--scheduler", "sync", "--json", "--html", str(out)])
    assert rc == 0 and '"cases": 256' in capsys.readouterr().out
    p = check_page(out.read_text(encoding="utf-8"))
    (t,) = table_with(p, "campaign", "cases", "chunks", "mismatches")
    assert [r[:4] for r in t.rows] == [["sqrt-e4m3fn-rna", "256", "1/1", "0"]]


def test_experiment_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sklearn")  # the digits data set
    out = tmp_path / "e.html"
    rc = main(["experiment", "--config", "digits", "--steps", "2", "--no-progress", "--html",
               str(out)])  # fmt: skip
    assert rc == 0 and "### `digits`" in capsys.readouterr().out
    (t,) = table_with(check_page(out.read_text(encoding="utf-8")), "run", "policy", "scaler")
    assert [r[0] for r in t.rows] == list(experiment_mod.RUNS)


def test_validate_writes_pages(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    f = tmp_path / "net.py"
    f.write_text(FACTORY)
    out = tmp_path / "m.html"
    rc = main(["validate", "model", f"{f}:make", "--steps", "2", "--autocast", "off", "--json",
               "--html", str(out)])  # fmt: skip
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["ok"] is True
    p = check_page(out.read_text(encoding="utf-8"))
    (verdicts,) = table_with(p, "verdict", "ops")
    assert {r[0]: int(r[1]) for r in verdicts.rows} == d["counts"]
    # float32 GEMMs in another order: the twin drifts, each drifting tensor is one row
    moved = [(str(x["step"]), x["kind"], x["name"]) for x in d["drift"] if x["ndiff"]]
    (drift,) = table_with(p, "step", "kind", "tensor", "format", "differing")
    assert moved and [tuple(r[:3]) for r in drift.rows] == moved
    out = tmp_path / "t.html"
    rc = main(["validate", "torch", "--quick", "--only", "autocast", "--json", "-", "--html",
               str(out)])  # fmt: skip
    capsys.readouterr()
    groups = table_with(check_page(out.read_text(encoding="utf-8")), "check", "status")
    assert rc == 0 and len(groups) == 1 and len(groups[0].rows) == 2  # autocast's two checks


@pytest.mark.parametrize(
    "argv",
    [["verify", "sqrt-e4m3fn-rna"], ["experiment", "--config", "digits", "--steps", "2"],
     ["validate", "torch", "--quick"], ["validate", "model", "net.py:make"]],
)  # fmt: skip
@pytest.mark.parametrize("where", ["missing/page.html", "."])
def test_unwritable_path_is_refused_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    argv: list[str], where: str,
) -> None:  # fmt: skip
    def never(*a: object, **k: object) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(experiment_mod, "run_experiment", never)
    monkeypatch.setattr("fpemu.cli.experiment.run_experiment", never)
    monkeypatch.setattr(verify_mod, "run_campaign", never)
    monkeypatch.setattr("fpemu.cli.verify.run_campaign", never)
    monkeypatch.setattr("fpemu.validate.frameworks.suite.validate_torch", never)
    monkeypatch.setattr("fpemu.validate.compare_torch", never)
    path = tmp_path / where
    rc = main([*argv, "--html", str(path)])
    out, err = capsys.readouterr()
    expected = (f"--html {path}: is a folder; accepted a file path" if where == "." else
                f"--html {path}: folder {path.parent} does not exist; accepted a file in an "
                "existing folder")  # fmt: skip
    assert rc == 2 and out == "" and err == f"fpemu {argv[0]}: {expected}\n"
    assert not (tmp_path / "missing").exists()


def test_page_parser_sees_a_broken_page() -> None:
    # the checks above rely on the parser: it must see misnesting and an external script
    assert parse("<html><body><p><b>x</p></b></body></html>").errors
    assert parse("<html><body><table><tr><td>x</table></body></html>").errors
    for bad in ('<script src="https://cdn.example/x.js"></script>',
                '<link rel="stylesheet" href="s.css">', '<img src="//x/y.png">',
                '<style>@import "x.css";</style>', '<a href="http://x">x</a>',
                '<svg><image xlink:href="pic.png"/></svg>'):  # fmt: skip
        page = f"<html><head></head><body>{bad}</body></html>"
        assert external_references(parse(page), page), bad
    ok = '<svg><use xlink:href="#g1"/><image href="data:image/png;base64,AAAA"/></svg>'
    assert not external_references(parse(ok), ok)
