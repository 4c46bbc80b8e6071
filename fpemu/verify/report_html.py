"""The HTML page of verification campaigns (:meth:`fpemu.verify.Report.to_html`, ``fpemu
verify --html``): mismatch counts per campaign and class (a picture), one sortable table of
the campaigns, and each campaign's first mismatching cases in bits.

The function takes reports by their attributes (it does not import :mod:`fpemu.verify.report`,
which imports it), so several campaigns' reports can share one page.

>>> from fpemu.verify.report import ChunkResult, Report
>>> r = Report.from_chunks("add<x>", "demo", 1, [ChunkResult(0, 0, 4, {"tie": 1})])
>>> page = campaigns_page([r])
>>> "add&lt;x&gt;" in page and "1 mismatch in 4 cases" in page
True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fpemu.pages import Page, stacked_bars
from fpemu.pages.page import Tone

#: One colour per mismatch class (fpemu.verify.report.CLASSES, in that order).
CLASS_COLOURS = {"nan": "#6a1b9a", "zero": "#1565c0", "sign": "#00838f", "overflow": "#e53935",
                 "subnormal": "#f9a825", "tie": "#ef6c00", "other": "#616161"}  # fmt: skip


def campaigns_page(reports: Sequence[Any], *, title: str | None = None) -> str:
    """One page for ``reports`` (:class:`fpemu.verify.Report`), in the order given.

    Raises:
        ValueError: no reports.
    """
    if not reports:
        raise ValueError("reports: empty; accepted one or more fpemu.verify.Report")
    cases = sum(r.cases for r in reports)
    bad = sum(r.mismatches for r in reports)
    incomplete = [r for r in reports if not r.complete]
    tone: Tone = "bad" if bad else ("warn" if incomplete else "good")
    head = reports[0].headline() if len(reports) == 1 else (
        f"{len(reports)} campaigns: {bad} mismatch{'es' if bad != 1 else ''} in {cases} cases"
        + (f" ({len(incomplete)} incomplete)" if incomplete else ""))  # fmt: skip
    name = reports[0].campaign if len(reports) == 1 else f"{len(reports)} campaigns"
    page = Page(title or f"fpemu verify: {name}", summary=head, tone=tone)
    classes = [c for c in CLASS_COLOURS if any(r.counts.get(c) for r in reports)]
    pic = page.section("Mismatches per campaign")
    stacks = {c: [r.counts.get(c, 0) for r in reports] for c in classes}
    pic.figure(stacked_bars([r.campaign for r in reports], stacks, colours=CLASS_COLOURS,
                            xlabel="mismatching cases"),
               "Mismatching cases per campaign, coloured by class"
               + ("." if bad else "; none was found (every bar is empty)."))  # fmt: skip
    table = page.section("Campaigns")
    cols = ["campaign", "cases", "chunks", "mismatches", *classes, "chunk CPU s", "description"]
    rows, tones = [], []
    for r in reports:
        rows.append([r.campaign, r.cases, f"{r.chunks_done}/{r.chunks_total}", r.mismatches,
                     *(r.counts.get(c, 0) for c in classes), round(r.seconds, 3),
                     r.description])  # fmt: skip
        status = "bad" if r.mismatches else ("warn" if not r.complete else "good")
        tones.append(["", "", "" if r.complete else "warn", status] + [""] * (len(classes) + 2))
    table.table(cols, rows, tones=tones)
    for r in reports:
        sub = table.group(r.headline(), collapsed=not r.examples)
        if r.extra:
            sub.facts(r.extra)
        if r.examples:
            sub.table(["case", "operands", "got", "expected", "class"],
                      [[int(e["case"]), " ".join(e.get("operands", [])), e.get("got", ""),
                        e.get("expected", ""), e["class"]] for e in r.examples],
                      caption="The first mismatching cases, in bits.")  # fmt: skip
        else:
            sub.text("No mismatching case.", tone="good" if r.complete else "warn")
    return page.render()


__all__ = ["CLASS_COLOURS", "campaigns_page"]
