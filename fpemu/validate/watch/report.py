"""The watch report: verdict counts, one row per op, procedure findings; JSON, Markdown, summary.

The contract scripts rely on: ``counts`` (a dict with the five verdicts as keys), ``rows`` (dicts
with ``step``, ``phase``, ``module``, ``op``, ``verdict``, ``cause`` and more), ``procedure``
(dicts with ``step``, ``finding`` and more), ``to_json()``, ``to_markdown()``, ``summary()``.

>>> r = WatchReport(rows=[{"step": 0, "phase": "forward", "module": "fc", "op": "aten.mm.default",
...     "verdict": "bounded", "cause": "GEMM order"}], procedure=[], settings={})
>>> r.counts["bounded"], r.ok
(1, True)
>>> r.summary()  # doctest: +NORMALIZE_WHITESPACE
'watch: 1 ops: 0 identical, 1 bounded, 0 not_emulated, 0 policy, 0 differs;
 0 procedure findings: OK'
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["VERDICTS", "WatchReport"]

#: the five verdicts, from best to worst
VERDICTS = ("identical", "bounded", "not_emulated", "policy", "differs")
#: verdicts that make a report fail (exit status 1 on the command line)
FAILING = ("differs", "policy")


@dataclass
class WatchReport:
    """What ``watch`` saw: see the module docstring for the contract."""

    rows: list[dict[str, Any]]
    procedure: list[dict[str, Any]]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def counts(self) -> dict[str, int]:
        """Rows per verdict (every verdict present, zeros included)."""
        c = Counter(r["verdict"] for r in self.rows)
        return {v: c.get(v, 0) for v in VERDICTS}

    @property
    def ok(self) -> bool:
        """No row ``differs`` or is ``policy``, and no procedure finding."""
        c = self.counts
        return not any(c[v] for v in FAILING) and not self.procedure

    def where(self, *verdicts: str) -> list[dict[str, Any]]:
        """The rows with one of ``verdicts``."""
        return [r for r in self.rows if r["verdict"] in verdicts]

    def not_emulated(self) -> dict[str, int]:
        """ATen ops without an emulation, with how often each ran."""
        return dict(Counter(r["op"] for r in self.where("not_emulated")))

    def counts_line(self) -> str:
        """The ops, their counts per verdict and the procedure findings, in words (the body of
        :meth:`summary`, and of ``compare_torch``'s)."""
        c = self.counts
        parts = ", ".join(f"{c[v]} {v}" for v in VERDICTS)
        n = len(self.procedure)
        return f"{len(self.rows)} ops: {parts}; {n} procedure finding{'s' * (n != 1)}"

    def summary(self) -> str:
        """One line: counts per verdict, findings, OK or FAIL."""
        return f"watch: {self.counts_line()}: {'OK' if self.ok else 'FAIL'}"

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data."""
        return {
            "summary": self.summary(),
            "ok": self.ok,
            "counts": self.counts,
            "not_emulated": self.not_emulated(),
            "procedure": self.procedure,
            "settings": self.settings,
            "rows": self.rows,
        }

    def to_json(self, *, indent: int | None = 1) -> str:
        """The report as JSON (``json.loads`` gives :meth:`to_dict`)."""
        return json.dumps(self.to_dict(), indent=indent, default=_jsonable)

    def grouped(self) -> list[dict[str, Any]]:
        """Rows merged by (step, phase, module, op, verdict, cause): count, ndiff, max ulps."""
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        for r in self.rows:
            key = (r["step"], r["phase"], r["module"], r["op"], r["verdict"], r["cause"])
            g = groups.setdefault(
                key,
                {
                    **{k: r[k] for k in ("step", "phase", "module", "op", "verdict", "cause")},
                    "count": 0,
                    "ndiff": 0,
                    "ulps": 0.0,
                },
            )
            g["count"] += 1
            g["ndiff"] += r.get("ndiff", 0)
            g["ulps"] = max(g["ulps"], r.get("ulps", 0.0))
        return list(groups.values())

    def to_markdown(self, *, all_rows: bool = False) -> str:
        """A Markdown report: summary, findings, and the rows that are not ``identical``
        (``all_rows=True``: every row), grouped."""
        lines = ["# fpemu watch report", "", self.summary(), ""]
        if self.procedure:
            lines += ["## Procedure findings", "", "| step | finding | detail |", "|---|---|---|"]
            lines += [f"| {p['step']} | {p['finding']} | {p['detail']} |" for p in self.procedure]
            lines.append("")
        rows = [g for g in self.grouped() if all_rows or g["verdict"] != "identical"]
        lines += [
            "## Ops" + ("" if all_rows else " (not identical)"),
            "",
            "| step | phase | module | op | verdict | n | max ulps | cause |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for g in rows:
            lines.append(
                f"| {g['step']} | {g['phase']} | {g['module'] or '-'} | `{g['op']}` | "
                f"{g['verdict']} | {g['count']} | {_ulps(g['ulps'])} | "
                f"{g['cause'].replace('|', '/')} |"
            )
        return "\n".join(lines) + "\n"

    def to_html(self) -> str:
        """One self-contained HTML page (:mod:`fpemu.validate.watch.report_html`)."""
        from fpemu.validate.watch.report_html import watch_page  # noqa: PLC0415

        return watch_page(self)

    def render(self, console: Any = None) -> None:
        """Print the summary, findings and the ops not identical as rich text."""
        from fpemu.validate.watch.report_html import render  # noqa: PLC0415

        render(self, console)

    def __repr__(self) -> str:
        return f"WatchReport({self.summary()!r})"


def _ulps(u: float) -> str:
    return "-" if u == 0 else ("inf" if u == float("inf") else f"{u:.3g}")


def _jsonable(o: Any) -> Any:
    if isinstance(o, float):
        return str(o)
    if hasattr(o, "tolist"):
        return o.tolist()
    return str(o)
