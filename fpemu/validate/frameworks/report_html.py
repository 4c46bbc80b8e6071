"""The HTML pages of ``fpemu validate``: :meth:`Report.to_html` (``validate torch``) and
:meth:`ModelReport.to_html` (``validate model``), built with :mod:`fpemu.pages`.

The functions take the reports by their attributes (they do not import the report modules,
which import them), so the page code stays out of the report classes.

>>> from fpemu.validate.frameworks.report import CheckResult, Report
>>> r = Report(title="demo", results=[CheckResult("casts", "f32 -> bf16", "agree", compared=3)])
>>> page = checks_page(r)
>>> "<h1>demo</h1>" in page and "f32 -&gt; bf16" in page
True
"""

from __future__ import annotations

import math
from typing import Any

from fpemu.pages import Page, line_chart, stacked_bars, ulp_heatmap
from fpemu.pages.figures import STATUS_COLOURS
from fpemu.pages.page import Tone

_STATUS_TONE = {"agree": "good", "finding": "warn", "differ": "bad", "skipped": "muted"}


def checks_page(report: Any) -> str:
    """The page of a :class:`fpemu.validate.frameworks.report.Report`: status counts per group (a
    picture), the environment, then one sortable table per group of checks."""
    statuses = tuple(STATUS_COLOURS)
    counts = report.counts()
    tone: Tone = "bad" if counts["differ"] else "good"
    page = Page(report.title, tone=tone, summary=f"{len(report)} checks: "
                + ", ".join(f"{s} {counts[s]}" for s in statuses))  # fmt: skip
    if report.environment:
        page.section("Environment").facts(report.environment)
    groups = list(dict.fromkeys(r.group for r in report.results))
    pic = page.section("Status of every check")
    per = {s: [sum(r.status == s for r in report.results if r.group == g) for g in groups]
           for s in statuses}  # fmt: skip
    pic.figure(stacked_bars(groups, per, colours=STATUS_COLOURS, xlabel="checks"),
               "Checks per group, coloured by status (green agree, amber finding, red differ, "
               "grey skipped).")  # fmt: skip
    sec = page.section("Checks by group")
    for g in groups:
        rs = [r for r in report.results if r.group == g]
        bad = sum(r.status == "differ" for r in rs)
        sub = sec.group(f"{g}: {len(rs)} checks" + (f", {bad} differ" if bad else ""),
                        collapsed=False)  # fmt: skip
        sub.table(["check", "status", "compared", "first difference / notes"],
                  [[r.name, r.status, r.compared, r.detail()] for r in rs],
                  tones=[["", _STATUS_TONE[r.status], "", ""] for r in rs])  # fmt: skip
    extra = [r for r in report.results if _data_rows(r)]
    if extra:
        more = page.section("Details")
        for r in extra:
            rows = _data_rows(r)
            keys = list(rows[0])
            more.group(r.name).table(keys, [[_cell(row.get(k)) for k in keys] for row in rows])
    return page.render()


def _data_rows(r: Any) -> list[dict[str, Any]]:
    rows = r.data.get("rows")
    if isinstance(rows, list) and rows and all(isinstance(x, dict) for x in rows):
        return rows
    return []


def _cell(v: Any) -> str | int | float | None:
    return v if isinstance(v, str | int | float) or v is None else str(v)


def _tone(c: Any) -> Tone:
    return "good" if c.exact else ("warn" if c.explained else "bad")


def model_page(report: Any) -> str:
    """The page of a :class:`fpemu.validate.twin.model_report.ModelReport`: losses of both runs,
    the loss scale (where a scaler ran), the ulp distance of every tensor at every step (a
    picture), the differences, then the checks by layer and by step, and the autocast audit."""
    checks = report.checks
    tone: Tone = "good" if report.exact else ("warn" if report.ok else "bad")
    page = Page(report.title, summary=report.summary(), tone=tone)
    page.section("Settings").facts(report.settings)
    if report.trace:
        _trace_sections(page, report)
    steps = sorted({c.step for c in checks})
    layers = list(dict.fromkeys((c.kind, c.name) for c in checks))
    if checks:
        grid = [[math.nan] * len(steps) for _ in layers]
        where = {k: i for i, k in enumerate(layers)}
        for c in checks:
            grid[where[(c.kind, c.name)]][steps.index(c.step)] = c.max_ulps
        ulp = page.section("Ulp distance by layer and step")
        ulp.figure(ulp_heatmap([f"{k} {n}" for k, n in layers], [str(s) for s in steps], grid),
                   "Largest distance in ulps between the two sides, per tensor (rows, in "
                   "execution order) and step (columns); white: bit-identical; black (fmt): "
                   "the sides hold it in different formats; grey: not recorded.")  # fmt: skip
    diffs = [c for c in checks if not c.exact]
    sec = page.section(f"Differences ({len(diffs)})")
    if diffs:
        _checks_table(sec, diffs, with_step=True)
    else:
        sec.text("Every tensor of every step is bit-identical.", tone="good")
    by_layer = page.section("By layer")
    cols = ["kind", "tensor", "op", "format", *(f"step {s}" for s in steps), "causes"]
    rows, tones = [], []
    for kind, name in layers:
        mine = [c for c in checks if (c.kind, c.name) == (kind, name)]
        ulps: dict[int, float] = {c.step: c.max_ulps for c in mine}
        causes = ", ".join(dict.fromkeys(c.cause for c in mine))
        rows.append([kind, name, mine[0].op,
                     ", ".join(dict.fromkeys(_format(c) for c in mine)),
                     *(ulps.get(s) for s in steps), causes])  # fmt: skip
        worst = "bad" if any(not c.explained for c in mine) else (
            "good" if all(c.exact for c in mine) else "warn")  # fmt: skip
        tones.append([""] * (4 + len(steps)) + [worst])
    by_layer.table(
        cols,
        rows,
        tones=tones,
        caption="Largest distance in ulps per step; click a header to sort.",
    )
    by_step = page.section("By step")
    for s in steps:
        mine = [c for c in checks if c.step == s]
        n_exact = sum(c.exact for c in mine)
        sub = by_step.group(f"step {s}: {n_exact} of {len(mine)} tensors bit-identical",
                            collapsed=n_exact == len(mine))  # fmt: skip
        _checks_table(sub, mine, with_step=False)
    if report.audit:
        keys = list(report.audit[0])
        page.section("Autocast audit").table(keys, [[r[k] for k in keys] for r in report.audit])
    return page.render()


def _format(c: Any) -> str:
    return c.torch_format if c.torch_format == c.fpemu_format else (
        f"{c.torch_format}/{c.fpemu_format}")  # fmt: skip


def _checks_table(sec: Any, checks: list[Any], *, with_step: bool) -> None:
    cols = ["kind", "tensor", "op", "format", "identical", "compared", "max ulps", "cause",
            "first difference", "note"]  # fmt: skip
    rows = []
    for c in checks:
        f = c.first
        first = "" if f is None else (f"{f['index']}: torch {f['torch']} ({f['torch_bits']}), "
                                      f"fpemu {f['fpemu']} ({f['fpemu_bits']})")  # fmt: skip
        rows.append([c.kind, c.name, c.op, _format(c), c.identical, c.compared, c.max_ulps,
                     c.cause, first, c.note])  # fmt: skip
    tones = [[""] * 7 + [_tone(c), "", ""] for c in checks]
    if with_step:
        cols = ["step", *cols]
        rows = [[c.step, *r] for c, r in zip(checks, rows, strict=True)]
        tones = [["", *t] for t in tones]
    sec.table(cols, rows, tones=tones)


def _trace_sections(page: Page, report: Any) -> None:
    """Loss curves of both sides, and the loss scale where a scaler ran."""
    trace = report.trace
    sides = [k[len("loss_") :] for k in trace[0] if k.startswith("loss_")]
    other = next((s for s in sides if s != "fpemu"), "framework")
    curves = {s: [float(t[f"loss_{s}"]) for t in trace] for s in sides}
    skipped = [t["step"] for t in trace if t.get(f"skipped_{other}")]
    sec = page.section("Loss")
    sec.figure(line_chart(curves, ylabel="loss", marks=skipped,
                          mark_label=f"skipped by {other} ({len(skipped)})"),
               f"Training loss of {other} and of fpemu, step by step.")  # fmt: skip
    scaler = report.settings.get("grad_scaler", report.settings.get("loss_scale", "None"))
    scaled = str(scaler) != "None"
    cols = ["step", *(f"loss {s}" for s in sides), "loss difference", "scale",
            *(f"skipped {s}" for s in sides)]  # fmt: skip
    rows = []
    for t in trace:
        ls = [float(t[f"loss_{s}"]) for s in sides]
        diff = abs(ls[0] - ls[-1]) if len(ls) > 1 else 0.0
        rows.append([t["step"], *ls, diff, float(t["scale"]),
                     *("yes" if t.get(f"skipped_{s}") else "no" for s in sides)])  # fmt: skip
    sec.table(cols, rows)
    if scaled:
        page.section("Loss scale").figure(
            line_chart(
                {f"scale ({other})": [float(t["scale"]) for t in trace]},
                steps=True,
                ylabel="loss scale",
                log=True,
                marks=skipped,
                mark_label=f"skipped ({len(skipped)})",
            ),
            f"The loss scale of each step ({scaler}); a cross marks a skipped step.",
        )


__all__ = ["checks_page", "model_page"]
