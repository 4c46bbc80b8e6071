"""Validation results: one :class:`CheckResult` per check, gathered in a :class:`Report`.

A check compares what a framework does (run, not assumed) with what fpemu computes. Its
status is one of:

* ``"agree"``: identical results on every input tried;
* ``"finding"``: identical once a documented convention difference is taken into account (an
  fpemu option or model reproduces the framework; the note says which);
* ``"differ"``: a real difference; ``witness`` holds the first differing case;
* ``"skipped"``: the framework (or a feature of it) is not available.

>>> r = Report(title="demo")
>>> r.add(CheckResult("casts", "float32 -> bfloat16", "agree", compared=3))
>>> r.add(CheckResult("casts", "float32 -> float16", "differ", compared=3,
...                   witness={"input": "0x3f800001", "torch": "0x3c00", "fpemu": "0x3c01"}))
>>> r.ok
False
>>> print(r.to_markdown().splitlines()[-1])
| casts | float32 -> float16 | **differ** | 3 | input=0x3f800001 torch=0x3c00 fpemu=0x3c01 |
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["agree", "finding", "differ", "skipped"]
STATUSES: tuple[str, ...] = ("agree", "finding", "differ", "skipped")


@dataclass
class CheckResult:
    """The outcome of one check.

    Attributes:
        group: the family of checks ("casts", "autocast", "scaler", "training", "keras").
        name: what was compared, e.g. ``"float32 -> bfloat16"``.
        status: one of :data:`STATUSES`.
        compared: how many values / cases / steps were compared.
        witness: the first difference (``"differ"``), or an illustrative case (``"finding"``):
            label -> text, values in hex where they are bit patterns.
        notes: findings and explanations, one sentence each.
        data: extra machine-readable facts (e.g. the largest loss difference in ulps).
    """

    group: str
    name: str
    status: Status
    compared: int = 0
    witness: dict[str, str] | None = None
    notes: list[str] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status={self.status!r} is not one of {STATUSES}")

    @property
    def ok(self) -> bool:
        """Whether the check passed (agree, finding or skipped)."""
        return self.status != "differ"

    def detail(self) -> str:
        """One line: the witness as ``label=value`` pairs, then the notes.

        >>> CheckResult("g", "n", "finding", notes=["a note"], witness={"x": "1"}).detail()
        'x=1; a note'
        """
        parts = []
        if self.witness:
            parts.append(" ".join(f"{k}={v}" for k, v in self.witness.items()))
        parts.extend(self.notes)
        return "; ".join(parts)


@dataclass
class Report:
    """An ordered collection of check results plus facts about the environment."""

    title: str = "fpemu validation"
    results: list[CheckResult] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)

    def add(self, result: CheckResult) -> None:
        """Append one result."""
        if not isinstance(result, CheckResult):
            raise TypeError(f"result must be a CheckResult, got {type(result).__name__}")
        self.results.append(result)

    def extend(self, results: list[CheckResult]) -> None:
        """Append several results."""
        for r in results:
            self.add(r)

    def __iter__(self) -> Iterator[CheckResult]:
        return iter(self.results)

    def __len__(self) -> int:
        return len(self.results)

    @property
    def ok(self) -> bool:
        """Whether no check differs."""
        return all(r.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        """Number of results per status.

        >>> Report(results=[CheckResult("g", "n", "agree")]).counts()["agree"]
        1
        """
        return {s: sum(r.status == s for r in self.results) for s in STATUSES}

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "title": self.title,
            "ok": self.ok,
            "counts": self.counts(),
            "environment": dict(self.environment),
            "results": [asdict(r) for r in self.results],
        }

    def to_json(self) -> str:
        """The report as indented JSON text."""
        return json.dumps(self.to_dict(), indent=2, default=str)

    def to_markdown(self) -> str:
        """A markdown section: environment list, then one table row per check."""
        lines = [f"## {self.title}", ""]
        for k, v in self.environment.items():
            lines.append(f"- {k}: {v}")
        c = self.counts()
        lines += [
            "",
            f"Checks: {len(self)}; " + ", ".join(f"{s}: {c[s]}" for s in STATUSES),
            "",
            "| group | check | status | compared | first difference / notes |",
            "|---|---|---|---|---|",
        ]
        for r in self.results:
            status = r.status if r.ok else f"**{r.status}**"
            detail = r.detail().replace("|", "\\|")
            name = r.name.replace("|", "\\|")
            lines.append(f"| {r.group} | {name} | {status} | {r.compared} | {detail} |")
        for r in self.results:
            rows = r.data.get("rows")
            if isinstance(rows, list) and rows and all(isinstance(x, dict) for x in rows):
                lines += ["", f"### {r.name}", "", *_rows_markdown(rows)]
        return "\n".join(lines)

    def to_html(self) -> str:
        """A self-contained HTML page: status per group (a picture), environment, one
        sortable table per group (see :mod:`fpemu.validate.frameworks.report_html`)."""
        from fpemu.validate.frameworks.report_html import checks_page  # noqa: PLC0415 - page code apart

        return checks_page(self)

    def render(self, console: Any = None) -> None:
        """Print the report as a rich table (to ``console``, default: a new stdout console).

        Narrower than 120 columns, the table has no notes column: each row with a witness or a
        note gets a number, and the notes follow the table as numbered paragraphs, so that no
        cell wraps word by word and no word is cut.

        >>> import io
        >>> from rich.console import Console
        >>> con = Console(file=io.StringIO(), width=80)
        >>> r = Report(title="demo")
        >>> r.add(CheckResult("casts", "float32 -> float16", "finding", 3, notes=["why " * 30]))
        >>> r.render(con)
        >>> out = con.file.getvalue()
        >>> max(map(len, out.splitlines())) <= 80, "1. why why" in out
        (True, True)
        """
        from rich import box  # noqa: PLC0415 - rich is only needed for display
        from rich.console import Console  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415

        con = console if console is not None else Console()
        narrow = con.width < 120
        table = Table(title=self.title, box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("group", "check", "status", "n"):
            table.add_column(col, no_wrap=col in ("status", "n"))
        table.add_column("note" if narrow else "first difference / notes",
                         no_wrap=narrow, overflow="fold")  # fmt: skip
        colour = {"agree": "green", "finding": "yellow", "differ": "bold red", "skipped": "dim"}
        notes: list[str] = []
        for r in self.results:
            status = f"[{colour[r.status]}]{r.status}[/]"
            detail = r.detail()
            if narrow and detail:  # by number; rows with the same detail share it
                if detail not in notes:
                    notes.append(detail)
                detail = str(notes.index(detail) + 1)
            table.add_row(r.group, r.name, status, str(r.compared), detail, style=None)
        con.print(table)
        for i, note in enumerate(notes, 1):
            con.print(_hanging(f"{i}. {note}", con.width), markup=False, highlight=False)
        c = self.counts()
        con.print(", ".join(f"{s}: {c[s]}" for s in STATUSES))


def _hanging(text: str, width: int) -> str:
    """``text`` wrapped at ``width`` with its continuation lines indented under its first word
    after the number (``"12. "``)."""
    import textwrap  # noqa: PLC0415

    indent = " " * (text.index(" ") + 1)
    return textwrap.fill(text, width=width, subsequent_indent=indent, break_on_hyphens=False)


def _rows_markdown(rows: list[dict[str, Any]]) -> list[str]:
    keys = list(rows[0])
    out = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for row in rows:
        out.append("| " + " | ".join(str(row.get(k, "")).replace("|", "\\|") for k in keys) + " |")
    return out


def hex_bits(value: int, bits: int) -> str:
    """A bit pattern as zero-padded hex.

    >>> hex_bits(0x3c00, 16), hex_bits(7, 8)
    ('0x3c00', '0x07')
    """
    return f"0x{value:0{bits // 4}x}"
