"""The report of ``fpemu.validate.compare_torch``: what ``fpemu.watch`` found in torch's run (the
verdict of every ATen op, the procedure findings) and, in the independent mode, the drift
between torch's run and its emulated twin, step by step and tensor by tensor.

The drift of one tensor: how many elements differ in their bits (any NaN equals any NaN) and
the largest distance between the two values in ulps of the tensor's own format (steps between
the bit patterns made monotonic: 0 and -0 differ in their bits but are 0 ulps apart; one NaN
against a number is inf).

>>> import numpy as np
>>> tensor_drift(np.float32([1.0, 2.0, -0.0]), np.float32([1.0, 2.0000002, 0.0]))
{'format': 'float32', 'n': 3, 'ndiff': 2, 'max_ulps': 1.0, 'max_abs': 2.384185791015625e-07}
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fpemu.validate.twin.model_report import native
from fpemu.validate.watch.report import WatchReport

__all__ = ["FINDINGS", "TwinReport", "audit_rows", "tensor_drift"]

#: row verdicts that make the report fail (``not_emulated``: an op nobody checked)
FINDINGS = ("differs", "policy", "not_emulated")


def _ordinal(a: np.ndarray) -> np.ndarray:
    """Bit patterns made monotonic (sign-magnitude to signed), as float64 (exact up to 2**53)."""
    bits = np.ascontiguousarray(a).view(f"u{a.dtype.itemsize}").astype(np.uint64)
    top = np.uint64(1) << np.uint64(8 * a.dtype.itemsize - 1)
    mag = (bits & (top - np.uint64(1))).astype(np.float64)
    return np.where((bits & top) != 0, -mag, mag)


def tensor_drift(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """Elements that differ between ``a`` and ``b`` (same shape and float dtype: float64,
    float32, float16, ml_dtypes bfloat16) and their largest distance in ulps of that dtype."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(
            f"tensors differ in shape or dtype: {a.dtype}{list(a.shape)}, {b.dtype}{list(b.shape)}"
        )
    out: dict[str, Any] = {
        "format": str(a.dtype),
        "n": int(a.size),
        "ndiff": 0,
        "max_ulps": 0.0,
        "max_abs": 0.0,
    }
    a, b = a.reshape(-1), b.reshape(-1)  # 0-d arrays (a loss) take no boolean index
    u = f"u{a.dtype.itemsize}"
    na, nb = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    differ = (np.ascontiguousarray(a).view(u) != np.ascontiguousarray(b).view(u)) & ~(na & nb)
    out["ndiff"] = int(np.count_nonzero(differ))
    if out["ndiff"]:
        oa, ob = _ordinal(a[differ]), _ordinal(b[differ])
        dist = np.where(na[differ] | nb[differ], np.inf, np.abs(oa - ob))
        out["max_ulps"] = float(dist.max())
        # ulps say how far apart in the format; near zero (a gradient changing sign) that is
        # a huge count for a tiny value, which the absolute difference puts in proportion
        with np.errstate(invalid="ignore"):
            gap = np.abs(a[differ].astype(np.float64) - b[differ].astype(np.float64))
        out["max_abs"] = float(np.nanmax(gap)) if not np.isnan(gap).all() else math.nan
    return out


def audit_rows(rows: list[dict[str, Any]], *, step: int = 0) -> list[dict[str, Any]]:
    """The dtypes every ATen op of ``step`` ran in, one row per (phase, op, input dtypes,
    output dtypes) with how often: what autocast (and the program) really did."""
    seen: Counter[tuple[str, str, str, str]] = Counter()
    for r in rows:
        if r["step"] == step:
            key = (
                r["phase"],
                r["op"].removeprefix("aten."),
                ",".join(r.get("in_dtypes", [])),
                ",".join(r.get("out_dtypes", [])),
            )
            seen[key] += 1
    return [
        {"phase": k[0], "op": k[1], "inputs": k[2], "outputs": k[3], "count": n}
        for k, n in seen.items()
    ]


@dataclass
class TwinReport:
    """``compare_torch``'s report (see the module docstring).

    Attributes:
        settings: the run's settings (model, mode, optimizer, ...).
        watch: ``fpemu.watch``'s report of torch's run.
        trace: per step: ``loss_torch``, ``loss_twin`` (None in lockstep), ``loss_ulps``,
            ``scale_torch``, ``scale_twin`` (the GradScaler's scale after the step, or None).
        drift: per step and tensor (``kind``: ``param``, ``grad``, ``buffer``): ``step``,
            ``kind``, ``name``, ``format``, ``n``, ``ndiff``, ``max_ulps`` (independent mode).
        emulation: the twin's op counts (``emulated``, ``not_emulated`` and ``failed`` by op).
        audit: :func:`audit_rows` of step 0 (``audit=True``).
    """

    settings: dict[str, Any]
    watch: WatchReport
    trace: list[dict[str, Any]] = field(default_factory=list)
    drift: list[dict[str, Any]] = field(default_factory=list)
    emulation: dict[str, Any] = field(default_factory=dict)
    audit: list[dict[str, Any]] = field(default_factory=list)
    title: str = "compare_torch"

    @property
    def counts(self) -> dict[str, int]:
        """The watch's rows per verdict."""
        return self.watch.counts

    @property
    def rows(self) -> list[dict[str, Any]]:
        """The watch's rows (one per ATen op torch ran)."""
        return self.watch.rows

    @property
    def procedure(self) -> list[dict[str, Any]]:
        """The watch's procedure findings."""
        return self.watch.procedure

    @property
    def ok(self) -> bool:
        """No row ``differs``, is ``policy`` or ``not_emulated``, and no procedure finding.
        Drift never fails a report (see ``compare_torch``)."""
        c = self.counts
        return not any(c[v] for v in FINDINGS) and not self.procedure

    def drifted(self, *, step: int | None = None) -> list[dict[str, Any]]:
        """The drift rows with differing elements (of ``step``, or every step)."""
        return [d for d in self.drift if d["ndiff"] and (step is None or d["step"] == step)]

    def _drift_text(self) -> str:
        if self.settings.get("mode") != "independent" or not self.trace:
            return ""
        last = self.trace[-1]
        moved = self.drifted(step=last["step"])
        n = len([d for d in self.drift if d["step"] == last["step"]])
        worst = max((d["max_ulps"] for d in moved), default=0.0)
        return (
            f"; drift at step {last['step']}: loss {last['loss_torch']:.7g} (torch) vs "
            f"{last['loss_twin']:.7g} (twin), {len(moved)} of {n} tensors differ"
            + (f" (max {_num(worst)} ulps)" if moved else "")
        )

    def summary(self) -> str:
        """One line: the watch's verdict counts and findings, the last step's drift, OK/FAIL."""
        return (
            f"{self.title} ({self.settings.get('mode')}): {self.watch.counts_line()}"
            f"{self._drift_text()}: {'OK' if self.ok else 'FAIL'}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data: summary, ok, counts, settings, trace, drift, emulation, audit,
        procedure and the watch's rows."""
        return {
            "title": self.title,
            "summary": self.summary(),
            "ok": self.ok,
            "counts": self.counts,
            "settings": native(self.settings),
            "trace": self.trace,
            "drift": self.drift,
            "emulation": self.emulation,
            "audit": self.audit,
            "procedure": self.procedure,
            "not_emulated": self.watch.not_emulated(),
            "rows": self.rows,
        }

    def to_json(self, *, indent: int | None = 1) -> str:
        """:meth:`to_dict` as JSON (non-finite floats as strings)."""
        return json.dumps(_finite(self.to_dict()), indent=indent, default=str)

    def drift_rows(self, *, only_differences: bool = False) -> list[dict[str, str]]:
        """The drift as text cells, one row per step and tensor."""
        return [
            {
                "step": str(d["step"]),
                "kind": d["kind"],
                "tensor": d["name"],
                "format": d["format"],
                "differing": f"{d['ndiff']}/{d['n']}",
                "max ulps": _num(d["max_ulps"]),
                "max abs": f"{d['max_abs']:.3g}",
            }
            for d in self.drift
            if d["ndiff"] or not only_differences
        ]

    def to_markdown(self, *, only_differences: bool = False) -> str:
        """Markdown: settings, summary, losses per step, the drift table (only the tensors
        that differ with ``only_differences``), the watch's findings and op groups."""
        lines = [f"## {self.title}", ""]
        lines += [
            f"- {k}: {v if isinstance(v, str) else json.dumps(native(v))}"
            for k, v in self.settings.items()
        ]
        lines += [
            "",
            self.summary(),
            "",
            "### Steps",
            "",
            "| step | loss torch | loss twin | loss ulps | scale torch | scale twin |",
            "|---|---|---|---|---|---|",
        ]
        for t in self.trace:
            lines.append(
                f"| {t['step']} | {_opt(t['loss_torch'])} | {_opt(t['loss_twin'])} | "
                f"{_opt(t['loss_ulps'])} | {_opt(t['scale_torch'])} | "
                f"{_opt(t['scale_twin'])} |"
            )
        rows = self.drift_rows(only_differences=only_differences)
        if self.drift:
            lines += ["", "### Drift (torch vs twin; information, not a finding)", ""]
            if rows:
                keys = list(rows[0])
                lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
                lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows]
            else:
                lines.append("Every parameter, gradient and buffer is bit-identical.")
        watch_md = self.watch.to_markdown().split("\n")[2:]  # without its title
        lines += ["", "### fpemu.watch of torch's run", "", *watch_md]
        return "\n".join(lines)

    def render(self, console: Any = None, *, only_differences: bool = False) -> None:
        """Print the losses, the drift table and the watch's findings as rich text."""
        from rich import box  # noqa: PLC0415 - display only
        from rich.console import Console  # noqa: PLC0415
        from rich.table import Table  # noqa: PLC0415

        con = console if console is not None else Console()
        steps = Table(title=f"{self.title}: steps", box=box.SIMPLE_HEAD, pad_edge=False)
        for col in ("step", "loss torch", "loss twin", "loss ulps", "scale"):
            steps.add_column(col, no_wrap=True)
        for t in self.trace:
            steps.add_row(
                str(t["step"]),
                _opt(t["loss_torch"]),
                _opt(t["loss_twin"]),
                _opt(t["loss_ulps"]),
                _opt(t["scale_torch"]),
            )
        con.print(steps)
        rows = self.drift_rows(only_differences=only_differences)
        if rows:
            table = Table(
                title="drift (information, not a finding)", box=box.SIMPLE_HEAD, pad_edge=False
            )
            for col in rows[0]:
                table.add_column(col, no_wrap=col != "tensor", overflow="fold")
            for r in rows:
                table.add_row(*r.values())
            con.print(table)
        self.watch.render(con)
        con.print(self.summary(), style="green" if self.ok else "red")

    def to_html(self) -> str:
        """A self-contained page: settings, losses of both runs, the drift, then the watch's
        sections (:mod:`fpemu.validate.twin.twin_page`)."""
        from fpemu.validate.twin.twin_page import twin_page  # noqa: PLC0415 - page code apart

        return twin_page(self)

    def __repr__(self) -> str:
        return f"TwinReport({self.summary()!r})"


def _num(v: float) -> str:
    return "inf" if math.isinf(v) else f"{v:g}"


def _opt(v: Any) -> str:
    if v is None:
        return "-"
    return _num(float(v)) if isinstance(v, (int, float)) else str(v)


def _finite(o: Any) -> Any:
    """Non-finite floats as strings (JSON has none)."""
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, dict):
        return {k: _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o
