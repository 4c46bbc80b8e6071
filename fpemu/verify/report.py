"""Chunk results and the campaign report: cases, mismatches by class, first examples in bits.

Mismatch classes, the first that applies (``got`` from the function under test, ``expected``
from the reference): ``nan`` (exactly one is NaN), ``zero`` (one is a zero: a lost or wrong
sign of zero, a flush), ``sign`` (opposite signs), ``overflow`` (one is infinite or the
largest finite magnitude), ``subnormal`` (one is subnormal), ``tie`` (the exact result lies
halfway between the two: a tie broken the wrong way), ``other``.

>>> r = ChunkResult(0, 0, 10, {"tie": 1}, ({"case": 3, "class": "tie"},), 0.5)
>>> rep = Report.from_chunks("demo", "ten cases", 2, [r])
>>> rep.cases, rep.mismatches, rep.complete
(10, 1, False)
>>> print(rep.to_markdown().splitlines()[0])
### demo: 1 mismatch in 10 cases (1 of 2 chunks)
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

#: Mismatch classes in the order they are tested.
CLASSES: tuple[str, ...] = ("nan", "zero", "sign", "overflow", "subnormal", "tie", "other")
#: Examples kept per chunk and per report (the first ones by case number).
EXAMPLES = 10


@dataclass(frozen=True)
class ChunkResult:
    """What one chunk found: its case range, mismatch counts by class, first examples."""

    index: int
    lo: int
    hi: int
    counts: dict[str, int]
    examples: tuple[dict[str, Any], ...] = ()
    seconds: float = 0.0

    @property
    def cases(self) -> int:
        """Number of cases in the chunk."""
        return self.hi - self.lo

    def to_json(self) -> str:
        """One JSON line (no newline)."""
        return json.dumps(
            {
                "chunk": self.index,
                "lo": self.lo,
                "hi": self.hi,
                "counts": self.counts,
                "examples": list(self.examples),
                "seconds": round(self.seconds, 6),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, line: str) -> ChunkResult:
        """Parse :meth:`to_json`'s output.

        >>> ChunkResult.from_json(ChunkResult(1, 5, 9, {}).to_json()).cases
        4
        """
        d = json.loads(line)
        return cls(
            int(d["chunk"]),
            int(d["lo"]),
            int(d["hi"]),
            {str(k): int(v) for k, v in d["counts"].items()},
            tuple(d["examples"]),
            float(d["seconds"]),
        )


@dataclass(frozen=True)
class Report:
    """A campaign's results so far (complete when every chunk is in)."""

    campaign: str
    description: str
    chunks_total: int
    chunks_done: int
    cases: int
    counts: dict[str, int]
    examples: tuple[dict[str, Any], ...] = ()
    #: Sum of the chunks' process CPU times (each measured in the process that ran it;
    #: chunks running at once in one process's threads each count that process's CPU).
    seconds: float = 0.0
    #: Facts about the run that made the report (scheduler, wall and CPU time, rate).
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_chunks(
        cls, campaign: str, description: str, chunks_total: int, results: Iterable[ChunkResult]
    ) -> Report:
        """Merge chunk results (each chunk index once) into a report."""
        rs = sorted(results, key=lambda r: r.index)
        if len({r.index for r in rs}) != len(rs):
            raise ValueError("a chunk index appears twice in results")
        counts = {c: sum(r.counts.get(c, 0) for r in rs) for c in CLASSES}
        examples = sorted((e for r in rs for e in r.examples), key=lambda e: int(e["case"]))
        return cls(
            campaign,
            description,
            chunks_total,
            len(rs),
            sum(r.cases for r in rs),
            {c: n for c, n in counts.items() if n},
            tuple(examples[:EXAMPLES]),
            sum(r.seconds for r in rs),
        )

    @property
    def mismatches(self) -> int:
        """Total number of mismatching cases."""
        return sum(self.counts.values())

    @property
    def complete(self) -> bool:
        """Whether every chunk has been run."""
        return self.chunks_done == self.chunks_total

    @property
    def ok(self) -> bool:
        """Complete and without a mismatch."""
        return self.complete and self.mismatches == 0

    def results(self) -> dict[str, Any]:
        """The findings only (no timings): equal for equal runs, however they were scheduled."""
        return {
            "campaign": self.campaign,
            "chunks": [self.chunks_done, self.chunks_total],
            "cases": self.cases,
            "counts": self.counts,
            "examples": list(self.examples),
        }

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-ready."""
        return {
            **self.results(),
            "description": self.description,
            "mismatches": self.mismatches,
            "complete": self.complete,
            "chunk_cpu_seconds": round(self.seconds, 3),
            **self.extra,
        }

    def to_json(self) -> str:
        """Indented JSON of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def headline(self) -> str:
        """One line: campaign, mismatches, cases, chunks."""
        n = self.mismatches
        what = f"{n} mismatch{'es' if n != 1 else ''}"
        part = "" if self.complete else f" ({self.chunks_done} of {self.chunks_total} chunks)"
        return f"{self.campaign}: {what} in {self.cases} cases{part}"

    def _example_rows(self) -> list[list[str]]:
        rows = []
        for e in self.examples:
            ops = " ".join(e.get("operands", []))
            rows.append([str(e["case"]), ops, e.get("got", ""), e.get("expected", ""), e["class"]])
        return rows

    def to_markdown(self) -> str:
        """A markdown section: headline, counts by class, first examples."""
        lines = [f"### {self.headline()}", ""]
        if self.description:
            lines += [self.description, ""]
        if self.counts:
            lines += ["| class | mismatches |", "|---|---|"]
            lines += [f"| {c} | {n} |" for c, n in self.counts.items()]
            lines += ["", "| case | operands | got | expected | class |", "|---|---|---|---|---|"]
            lines += ["| " + " | ".join(r) + " |" for r in self._example_rows()]
        return "\n".join(lines)

    def to_html(self) -> str:
        """A self-contained HTML page: mismatch counts by class (a picture), the campaign's
        table and its first mismatching cases (see :mod:`fpemu.verify.report_html`)."""
        from fpemu.verify.report_html import campaigns_page  # noqa: PLC0415 - page code apart

        return campaigns_page([self])

    def to_rich(self) -> Any:
        """A :class:`rich.table.Table` of the report (rich is a dependency of fpemu)."""
        from rich.table import Table  # noqa: PLC0415 - only when rendering

        t = Table(title=self.headline(), caption=self.description)
        for col in ("case", "operands", "got", "expected", "class"):
            t.add_column(col)
        for r in self._example_rows():
            t.add_row(*r)
        if self.counts:
            t.add_section()
            t.add_row(
                "", "by class: " + ", ".join(f"{c} {n}" for c, n in self.counts.items()), "", "", ""
            )
        return t
