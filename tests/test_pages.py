"""HTML report pages (fpemu.pages and each report's to_html): well-formed, self-contained,
escaped, and holding the rows of the report they show.

Expected rows are written here from the hand-made inputs (not read back from the builder);
pages from real runs are checked against the run's own records (counts, names).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import pytest

from fpemu.pages import NO_PLOTS, Page, line_chart, stacked_bars, ulp_heatmap
from fpemu.pages.figures import available
from fpemu.validate.frameworks.report import CheckResult, Report
from fpemu.validate.twin.model_report import ModelReport, TensorCheck
from fpemu.verify.report import ChunkResult
from fpemu.verify.report import Report as CampaignReport
from fpemu.verify.report_html import campaigns_page
from tests.page_parser import Parsed, external_references, parse

HOSTILE = "<script>alert('x')</script><img src=x onerror=alert(1)>&amp;"
plots = pytest.mark.skipif(not available(), reason="matplotlib (the plot extra) not installed")


def check_page(page: str) -> Parsed:
    """Parse ``page`` and assert what every page must be: one well-formed document that
    fetches nothing and runs only its own inline script."""
    p = parse(page)
    assert page.startswith("<!DOCTYPE html>")
    assert not p.errors, p.errors[:5]
    assert not external_references(p, page), external_references(p, page)
    assert p.tags["html"] == p.tags["head"] == p.tags["body"] == p.tags["title"] == 1
    assert p.tags["script"] == 1 and not any(t == "script" for t, _, _ in p.attrs)
    assert not any(name.startswith("on") for _, name, _ in p.attrs)  # no inline handlers
    assert len(p.ids) == len(set(p.ids)), "duplicate ids (figures must not share them)"
    return p


def table_with(p: Parsed, *header: str) -> Any:
    found = [t for t in p.tables if t.header[: len(header)] == list(header)]
    assert found, f"no table starting {header}: {[t.header for t in p.tables]}"
    return found


# -- the page builder ---------------------------------------------------------------------------
def test_page_escapes_everything_and_keeps_numbers_sortable() -> None:
    page = Page(HOSTILE, summary=HOSTILE, tone="bad")
    s = page.section(HOSTILE)
    s.text(HOSTILE)
    s.facts({HOSTILE: HOSTILE})
    s.table(["name", "ulps", "n"], [[HOSTILE, 1.5, 3], ["b", math.inf, 10], ["c", None, -1]],
            caption=HOSTILE)  # fmt: skip
    s.group(HOSTILE).text("inside")
    p = check_page(page.render())
    assert p.tags["img"] == 0  # the hostile <img> is text, not an element
    text = "".join(p.text)
    assert text.count(HOSTILE) >= 6  # title, h1, summary, h2, paragraph, dt, dd, cell, caption
    t = p.tables[0]
    assert t.header == ["name", "ulps", "n"] and t.caption == HOSTILE and "sortable" in t.classes
    assert t.rows == [[HOSTILE, "1.5", "3"], ["b", "inf", "10"], ["c", "", "-1"]]
    assert [k[1:] for k in t.sort_keys] == [["1.5", "3"], ["inf", "10"], [None, "-1"]]


def test_table_refuses_a_row_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match=r"rows\[1\] has 1 cells; columns has 2"):
        Page("t").section("s").table(["a", "b"], [[1, 2], [3]])


@plots
def test_figures_are_inline_svg_with_ids_of_their_own() -> None:
    page = Page("figures")
    s = page.section("s")
    s.figure(line_chart({"a": [1.0, 2.0, 4.0], "b": [1.0, 2.0, 3.0]}, marks=[1]), "lines")
    s.figure(line_chart({"a": [1.0, 2.0, 4.0], "b": [1.0, 2.0, 3.0]}, marks=[1]), "same again")
    s.figure(stacked_bars(["x", "y"], {"p": [1, 2], "q": [0, 3]}), "bars")
    s.figure(ulp_heatmap(["r0", "r1"], ["0", "1"], [[0, 3], [math.inf, math.nan]]), "grid")
    p = check_page(page.render())  # asserts the ids are unique though two figures are equal
    assert p.tags["svg"] == 4 and p.tags["figure"] == 4 and NO_PLOTS not in page.render()


def test_without_matplotlib_a_page_keeps_its_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises
    assert line_chart({"a": [1.0]}) is None and stacked_bars(["x"], {"p": [1]}) is None
    assert ulp_heatmap(["r"], ["0"], [[0.0]]) is None
    page = _hand_made_model_report().to_html()
    p = check_page(page)
    assert p.tags["svg"] == 0 and "".join(p.text).count(NO_PLOTS) == 2  # ulps, loss
    assert table_with(p, "kind", "tensor", "op", "format", "step 0", "step 1")


# -- validate model -----------------------------------------------------------------------------
def _check(step: int, kind: str, name: str, ulps: float, **kw: Any) -> TensorCheck:
    same = 8 if ulps == 0 else 6
    return TensorCheck(step=step, kind=kind, name=name, compared=8, identical=same,
                       max_ulps=ulps, **kw)  # fmt: skip


def _hand_made_model_report() -> ModelReport:
    first = {"index": "(0,)", "torch": "1.0", "fpemu": "1.0078125", "torch_bits": "0x3f80",
             "fpemu_bits": "0x3f81"}  # fmt: skip
    checks = [
        _check(0, "activation", "_0", 0.0, op="linear"),
        _check(0, "grad", "0.weight", 0.0),
        _check(1, "activation", "_0", 3.0, op="linear", cause="reduction order",
               torch_format="bfloat16", fpemu_format="bfloat16", first=first),
        _check(1, "grad", "0.weight", math.inf, cause="format", explained=False,
               torch_format="float32", fpemu_format="bfloat16"),
    ]  # fmt: skip
    trace = [{"step": s, "loss_torch": 2.0 - s, "loss_fpemu": 2.0 - s, "scale": 1.0,
              "skipped_torch": False, "skipped_fpemu": False} for s in (0, 1)]  # fmt: skip
    return ModelReport(
        title=f"model {HOSTILE}",
        checks=checks,
        trace=trace,
        settings={"model": HOSTILE, "grad_scaler": "None"},
        audit=[{"phase": "forward", "aten op": "addmm", "verdict": "agree"}],
    )


def test_model_page_groups_rows_by_layer_and_by_step() -> None:
    p = check_page(_hand_made_model_report().to_html())
    text = "".join(p.text)
    assert f"model {HOSTILE}" in text and p.tags["img"] == 0
    assert "2 of 4 tensors bit-identical" in text  # the summary line
    (layers,) = table_with(p, "kind", "tensor", "op", "format", "step 0", "step 1")
    assert [r[:2] + r[4:6] for r in layers.rows] == [
        ["activation", "_0", "0", "3"],
        ["grad", "0.weight", "0", "inf"],
    ]
    assert (
        layers.rows[1][3] == "float32, float32/bfloat16" and layers.rows[1][-1] == "exact, format"
    )
    (diffs,) = table_with(p, "step", "kind", "tensor", "op")
    steps = table_with(p, "kind", "tensor", "op", "format", "identical")
    assert [r[:3] for r in diffs.rows] == [["1", "activation", "_0"], ["1", "grad", "0.weight"]]
    assert diffs.rows[1][4] == "float32/bfloat16" and diffs.rows[1][8] == "format"
    assert "0x3f80" in diffs.rows[0][9] and "0x3f81" in diffs.rows[0][9]
    assert [[r[1] for r in t.rows] for t in steps] == [["_0", "0.weight"], ["_0", "0.weight"]]
    assert "step 0: 2 of 2 tensors bit-identical" in text
    assert "step 1: 0 of 2 tensors bit-identical" in text
    (loss,) = table_with(p, "step", "loss torch", "loss fpemu")
    assert [r[:3] for r in loss.rows] == [["0", "2", "2"], ["1", "1", "1"]]
    assert table_with(p, "phase", "aten op", "verdict")[0].rows == [["forward", "addmm", "agree"]]
    assert "Loss scale" not in text  # no scaler ran


def test_twin_page_of_a_real_run_has_the_drift_and_the_verdicts() -> None:
    torch = pytest.importorskip("torch")
    from fpemu.validate import compare_torch  # noqa: PLC0415

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)
    r = compare_torch(net, x, y, steps=2)  # float32: GEMMs in fpemu's order, the twin drifts
    p = check_page(r.to_html())
    (verdicts,) = table_with(p, "verdict", "ops")
    assert {row[0]: int(row[1]) for row in verdicts.rows} == r.counts
    (drift,) = table_with(p, "step", "kind", "tensor", "format", "differing", "max ulps")
    moved = r.drifted()
    assert moved and [row[2] for row in drift.rows] == [d["name"] for d in moved]
    assert [row[4] for row in drift.rows] == [str(d["ndiff"]) for d in moved]
    (audit,) = table_with(p, "phase", "op", "inputs", "outputs", "count")
    assert len(audit.rows) == len(r.audit)
    if available():  # the losses and the drift per step
        assert p.tags["svg"] == 2


# -- validate torch -----------------------------------------------------------------------------
def test_checks_page_has_one_table_per_group_with_status_tones() -> None:
    r = Report(title=HOSTILE, environment={"torch": HOSTILE})
    r.add(CheckResult("casts", "f32 -> bf16", "agree", compared=3))
    r.add(CheckResult("casts", "f32 -> f16", "differ", compared=3, witness={"input": "0x1"}))
    r.add(
        CheckResult(
            "scaler",
            "growth",
            "skipped",
            notes=["no keras"],
            data={"rows": [{"step": 0, "scale": 2.0}, {"step": 1, "scale": 4.0}]},
        )
    )
    page = r.to_html()
    p = check_page(page)
    groups = table_with(p, "check", "status", "compared")
    assert [t.rows for t in groups] == [
        [["f32 -> bf16", "agree", "3", ""], ["f32 -> f16", "differ", "3", "input=0x1"]],
        [["growth", "skipped", "0", "no keras"]],
    ]
    assert '<td class="bad">differ</td>' in page and '<td class="good">agree</td>' in page
    assert table_with(p, "step", "scale")[0].rows == [["0", "2"], ["1", "4"]]
    text = "".join(p.text)
    assert "3 checks: agree 1, finding 0, differ 1, skipped 1" in text and HOSTILE in text


# -- verify -------------------------------------------------------------------------------------
def test_campaign_page_counts_per_campaign_and_class() -> None:
    from fpemu.verify import run_campaign  # noqa: PLC0415

    clean = run_campaign("sqrt-e4m3fn-rna", scheduler="sync")
    ex = {"case": 7, "class": "tie", "operands": ["0x01", "0x02"], "got": "0x03",
          "expected": "0x04"}  # fmt: skip
    bad = CampaignReport.from_chunks(
        HOSTILE, "planted", 2, [ChunkResult(0, 0, 40, {"tie": 3, "nan": 1}, (ex,))]
    )
    p = check_page(campaigns_page([clean, bad]))
    (table,) = table_with(p, "campaign", "cases", "chunks", "mismatches", "nan", "tie")
    assert [r[:6] for r in table.rows] == [
        ["sqrt-e4m3fn-rna", "256", "1/1", "0", "0", "0"],
        [HOSTILE, "40", "1/2", "4", "1", "3"],
    ]
    assert table_with(p, "case", "operands")[0].rows == [["7", "0x01 0x02", "0x03", "0x04", "tie"]]
    assert "2 campaigns: 4 mismatches in 296 cases (1 incomplete)" in "".join(p.text)
    one = check_page(clean.to_html())
    assert "sqrt-e4m3fn-rna: 0 mismatches in 256 cases" in "".join(one.text)
    if available():
        assert one.tags["svg"] == 1
    with pytest.raises(ValueError, match="reports: empty"):
        campaigns_page([])


# -- experiment ---------------------------------------------------------------------------------
def test_experiment_page_has_curves_of_every_run_and_its_table() -> None:
    pytest.importorskip("sklearn")  # the digits data set
    from fpemu.training.experiment import run_experiment  # noqa: PLC0415

    runs = ("FP32", "FP16 + dynamic scaling")
    res = run_experiment(configs=("digits",), runs=runs, steps=3, progress=False)
    assert [len(r.losses) for r in res.rows] == [3, 3]
    assert res.rows[1].scales == [65536.0] * 3  # torch's GradScaler: 2**16, grows after 2000
    assert "losses" not in res.to_dict()["rows"][0]  # the JSON stays the table
    p = check_page(res.to_html())
    (table,) = table_with(p, "run", "policy", "scaler", "test accuracy %")
    assert [r[:3] for r in table.rows] == [
        ["FP32", "fp32", "none"],
        ["FP16 + dynamic scaling", "torch_cuda_fp16", "torch"],
    ]
    assert table.rows[0][4] == "0"  # FP32 against itself
    if available():  # loss curves, and the loss scale of the scaled run
        assert p.tags["svg"] == 2


def test_model_page_of_a_keras_run_names_keras_and_draws_its_scale() -> None:
    # compare_keras records loss_keras/skipped_keras and its LossScaleOptimizer as loss_scale
    trace = [{"step": s, "loss_keras": 1.5, "loss_fpemu": 1.5, "scale": 2.0**15 * 2**s,
              "skipped_keras": s == 1, "skipped_fpemu": s == 1} for s in (0, 1, 2)]  # fmt: skip
    r = ModelReport(title="compare_keras", trace=trace,
                    settings={"loss_scale": "{'initial_scale': 32768.0}"},
                    checks=[_check(s, "loss", "ce", 0.0) for s in (0, 1, 2)])  # fmt: skip
    p = check_page(r.to_html())
    (loss,) = table_with(p, "step", "loss keras", "loss fpemu", "loss difference", "scale")
    assert [row[4:] for row in loss.rows] == [["32768", "no", "no"], ["65536", "yes", "yes"],
                                              ["131072", "no", "no"]]  # fmt: skip
    text = "".join(p.text)
    assert "Loss scale" in text and "Training loss of keras and of fpemu" in text
    if available():  # loss, scale, ulp grid
        assert p.tags["svg"] == 3
