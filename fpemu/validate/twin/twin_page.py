"""``TwinReport.to_html()``: one self-contained page (:mod:`fpemu.pages`): the settings, the
losses of torch and of the twin, the drift of every tensor per step, then what ``fpemu.watch``
found in torch's run (verdicts, procedure findings, ops without an emulation, the op groups
that are not identical).
"""

from __future__ import annotations

from typing import Any

from fpemu.pages import figures
from fpemu.pages.page import Page
from fpemu.validate.watch.report_html import _COLUMNS, _TONE
from fpemu.validate.watch.report_html import _rows as watch_rows

__all__ = ["twin_page"]

_DRIFT = ("step", "kind", "tensor", "format", "differing", "max ulps")


def twin_page(report: Any) -> str:
    """The page of a :class:`~fpemu.validate.twin.twin_report.TwinReport`."""
    page = Page(report.title, summary=report.summary(), tone="good" if report.ok else "bad")
    page.section("Settings").facts(report.settings)
    steps = page.section("Losses")
    series = {"torch": [t["loss_torch"] for t in report.trace]}
    if any(t["loss_twin"] is not None for t in report.trace):
        series["twin"] = [t["loss_twin"] for t in report.trace]
    steps.figure(
        figures.line_chart(series, ylabel="loss", log=False),
        "The loss of each step, torch's run and the emulated twin's",
    )
    if report.drift:
        _drift(page, report)
    w = report.watch
    top = page.section("fpemu.watch of torch's run")
    top.table(
        ["verdict", "ops"],
        [[v, n] for v, n in w.counts.items()],
        tones=[[_TONE[v], ""] for v in w.counts],
        sortable=False,
    )
    if w.procedure:
        top.group("Procedure findings", collapsed=False).table(
            ["step", "finding", "phase", "module", "detail"],
            [
                [p["step"], p["finding"], p["phase"], p["module"] or "-", p["detail"]]
                for p in w.procedure
            ],
        )
    missing = w.not_emulated()
    if missing:
        top.group("Ops without an emulation", collapsed=False).table(
            ["op", "times"], [[k, v] for k, v in sorted(missing.items(), key=lambda kv: -kv[1])]
        )
    groups = [g for g in w.grouped() if g["verdict"] != "identical"]
    if groups:
        top.group(f"Ops that are not identical ({len(groups)} groups)").table(
            _COLUMNS,
            watch_rows(groups),
            tones=[
                [_TONE[g["verdict"]] if c == "verdict" else "" for c in _COLUMNS] for g in groups
            ],
        )
    else:
        top.text("Every op is bit-identical to fpemu's emulation.", tone="good")
    if report.audit:
        keys = list(report.audit[0])
        page.section("Dtypes of step 0's ops").table(
            keys, [[r[k] for k in keys] for r in report.audit]
        )
    return page.render()


def _drift(page: Page, report: Any) -> None:
    sec = page.section("Drift between torch and the twin (information, not a finding)")
    n_steps = len(report.trace)
    worst = {
        k: [
            max(
                (d["max_ulps"] for d in report.drift if d["step"] == s and d["kind"] == k),
                default=0.0,
            )
            for s in range(n_steps)
        ]
        for k in ("param", "grad")
    }
    sec.figure(
        figures.line_chart(
            {f"max ulps, {k}s": v for k, v in worst.items()}, ylabel="ulps", log=False
        ),
        "Largest distance in ulps of any parameter and any gradient, per step",
    )
    rows = [
        [d["step"], d["kind"], d["name"], d["format"], d["ndiff"], d["max_ulps"]]
        for d in report.drift
        if d["ndiff"]
    ]
    if rows:
        sec.table(
            _DRIFT,
            rows,
            caption="Tensors with differing elements (count of "
            "elements, largest distance in ulps of the tensor's format).",
        )
    else:
        sec.text(
            "Every parameter, gradient and buffer is bit-identical at every step.", tone="good"
        )
