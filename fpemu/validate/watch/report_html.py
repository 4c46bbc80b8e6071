"""The watch report as one self-contained page (``WatchReport.to_html()``) and as a rich table
(``WatchReport.render()``): verdicts per phase (a picture), procedure findings, ops without an
emulation, then the op groups that are not identical, sortable, one foldable group per step.
"""

from __future__ import annotations

from typing import Any

from fpemu.pages import figures
from fpemu.pages.page import Page

__all__ = ["render", "watch_page"]

_PHASES = ("forward", "backward", "optimizer", "scaler")
_COLOURS = {"identical": "#4caf50", "bounded": "#90caf9", "not_emulated": "#bdbdbd",
            "policy": "#ff9800", "differs": "#e53935"}  # fmt: skip
_TONE = {"identical": "good", "bounded": "", "not_emulated": "muted", "policy": "warn",
         "differs": "bad"}  # fmt: skip
_COLUMNS = ("step", "phase", "module", "op", "verdict", "count", "differing", "max ulps", "cause")


def _short(op: str) -> str:
    """``aten.mm.default`` -> ``mm``; other overloads keep their name (``sum.dim_IntList``)."""
    return op.removeprefix("aten.").removesuffix(".default")


def _ulps(u: float) -> str:
    return "" if u == 0 else ("inf" if u == float("inf") else f"{u:.3g}")


def _rows(groups: list[dict[str, Any]]) -> list[list[Any]]:
    return [[g["step"], g["phase"], g["module"] or "-", g["op"].removeprefix("aten."),
             g["verdict"], g["count"], g["ndiff"], _ulps(g["ulps"]), g["cause"]]
            for g in groups]  # fmt: skip


def watch_page(report: Any) -> str:
    """The page of a :class:`~fpemu.validate.watch.WatchReport`."""
    page = Page("fpemu watch report", summary=report.summary(), tone="good" if report.ok else "bad")
    top = page.section("Verdicts")
    top.facts({k: v for k, v in report.settings.items()})
    stacks = {v: [sum(1 for r in report.rows if r["phase"] == p and r["verdict"] == v)
                  for p in _PHASES] for v in report.counts}  # fmt: skip
    top.figure(figures.stacked_bars(_PHASES, stacks, colours=_COLOURS, xlabel="ops"),
               "ATen ops per phase, by verdict")  # fmt: skip
    top.table(["verdict", "ops"], [[v, n] for v, n in report.counts.items()],
              tones=[[_TONE[v], ""] for v in report.counts], sortable=False)  # fmt: skip
    if report.procedure:
        s = page.section("Procedure findings")
        s.table(["step", "finding", "phase", "module", "detail"],
                [[p["step"], p["finding"], p["phase"], p["module"] or "-", p["detail"]]
                 for p in report.procedure],
                tones=[["", "bad", "", "", ""] for _ in report.procedure])  # fmt: skip
    missing = report.not_emulated()
    if missing:
        s = page.section("Ops without an emulation")
        ranked = sorted(missing.items(), key=lambda kv: -kv[1])
        s.table(["op", "times"], [[k, v] for k, v in ranked])
    groups = [g for g in report.grouped() if g["verdict"] != "identical"]
    s = page.section("Ops that are not identical")
    if not groups:
        s.text("Every op is bit-identical to fpemu's emulation.", tone="good")
    else:
        s.table(_COLUMNS, _rows(groups), tones=[[_TONE[g["verdict"]] if c == "verdict" else ""
                                                for c in _COLUMNS] for g in groups])  # fmt: skip
        for step in sorted({g["step"] for g in groups}):
            mine = [g for g in groups if g["step"] == step]
            s.group(f"step {step}: {len(mine)} groups").table(_COLUMNS, _rows(mine))
    return page.render()


def render(report: Any, console: Any = None) -> None:
    """The report as rich text: the summary, findings, and the op groups not identical."""
    from rich import box  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    console = console or Console()
    console.print(report.summary(), style="green" if report.ok else "red")
    for p in report.procedure:
        console.print(f"step {p['step']}: {p['finding']}: {p['detail']}", style="red")
    groups = [g for g in report.grouped() if g["verdict"] != "identical"]
    if not groups:
        return
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("step", "phase", "module", "op", "verdict", "n", "ulps"):
        table.add_column(col, no_wrap=col != "module", overflow="fold", min_width=len(col))
    for g in groups:
        style = {"differs": "red", "policy": "yellow", "not_emulated": "dim"}.get(g["verdict"], "")
        table.add_row(str(g["step"]), g["phase"], g["module"] or "-",
                      _short(g["op"]), g["verdict"], str(g["count"]),
                      _ulps(g["ulps"]), style=style)  # fmt: skip
    console.print(table)
    causes = {g["cause"] for g in groups if g["verdict"] != "bounded"}
    for cause in sorted(causes):
        console.print(f"- {cause}", soft_wrap=False)
