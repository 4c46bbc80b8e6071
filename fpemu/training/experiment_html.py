"""The HTML page of the mixed-precision experiment (:meth:`ExperimentResult.to_html`, ``fpemu
experiment --html``): per configuration, the loss curves of every run, the loss scale of the
runs that scale, and a sortable table of the results.

The function takes the result by its attributes (it does not import
:mod:`fpemu.training.experiment`, which imports it).

>>> from fpemu.training.experiment import ExperimentResult, Row
>>> res = ExperimentResult(steps=2, seed=0, acc_model="fast", rows=[Row("digits", "FP32",
...     "fp32", "none", 0.5, 0, 1.0, 1.0, 2.3, 0.1, losses=[2.4, 2.3], scales=[1.0, 1.0])])
>>> "<h1>fpemu experiment</h1>" in experiment_page(res)
True
"""

from __future__ import annotations

import math
from typing import Any

from fpemu.pages import Page, line_chart
from fpemu.pages.page import Tone

#: Accuracy below FP32's by more than this many points is marked as a failure.
LOST_POINTS = 1.0


def experiment_page(res: Any) -> str:
    """One section per configuration: loss curves, loss scales, the table."""
    configs = list(dict.fromkeys(r.config for r in res.rows))
    failed = sum(_lost(r, res.rows) for r in res.rows)
    tone: Tone = "warn" if failed else "good"
    page = Page("fpemu experiment", tone=tone, summary=(
        f"{len(res.rows)} runs in {len(configs)} configuration{'s' if len(configs) != 1 else ''}"
        f", {res.steps} steps each; {failed} lost more than {LOST_POINTS:g} point of test "
        "accuracy against FP32 (or have no FP32 run to compare with)"))  # fmt: skip
    page.section("Settings").facts({"steps per run": res.steps, "seed": res.seed,
                                    "matmul accumulation model": res.acc_model})  # fmt: skip
    for cfg in configs:
        rows = [r for r in res.rows if r.config == cfg]
        sec = page.section(f"Configuration {cfg}")
        curves = {r.run: r.losses for r in rows if r.losses}
        if curves:
            sec.figure(line_chart(curves, ylabel="loss (unweighted)", log=True),
                       f"{cfg}: training loss of every run, step by step (log scale; a curve "
                       "that stops has become inf or NaN).")  # fmt: skip
        scaled = {r.run: r.scales for r in rows if r.scales and any(s != 1.0 for s in r.scales)}
        if scaled:
            sec.figure(line_chart(scaled, ylabel="loss scale", log=True, steps=True),
                       f"{cfg}: the loss scale of the runs with a scaler; a drop is a step "
                       "skipped for an overflow.")  # fmt: skip
        base = next((r for r in rows if r.run == "FP32"), None)
        table, tones = [], []
        for r in rows:
            delta = None if base is None else round(100 * (r.accuracy - base.accuracy), 1)
            table.append([r.run, r.policy, r.scaler, round(100 * r.accuracy, 1), delta,
                          r.skipped, round(r.zero_pct, 1), round(r.zero_pct_unscaled, 1),
                          r.final_loss, round(r.seconds, 2)])  # fmt: skip
            lost = "bad" if _lost(r, rows) else "good"
            finite = "" if math.isfinite(r.final_loss) else "bad"
            tones.append(["", "", "", lost, lost, "", "", "", finite, ""])
        sec.table(["run", "policy", "scaler", "test accuracy %", "vs FP32 (points)",
                   "skipped steps", "zero grads %", "zero grads % before scaling",
                   "final loss (unweighted)", "seconds"], table, tones=tones)  # fmt: skip
    return page.render()


def _lost(r: Any, rows: list[Any]) -> bool:
    """Whether run ``r`` lost more than :data:`LOST_POINTS` of accuracy against its FP32 run."""
    base = next((b for b in rows if b.config == r.config and b.run == "FP32"), None)
    if base is None:
        return True
    return bool(100 * (base.accuracy - r.accuracy) > LOST_POINTS)


__all__ = ["LOST_POINTS", "experiment_page"]
