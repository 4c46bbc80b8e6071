"""ScalerRecorder, check_trace and the Report: no framework needed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from fpemu.amp.scaling import TorchGradScaler
from fpemu.validate import CheckResult, Report, ScalerRecorder, TraceEntry, check_trace


def _torch_rule_trace(found: list[bool], scale: float, interval: int) -> list[TraceEntry]:
    """The torch rule written out independently: grow after `interval` finite steps, halve on
    inf, no floor."""
    out, tracker = [], 0
    for bad in found:
        out.append(TraceEntry(scale, bad, bad))
        if bad:
            scale, tracker = scale * 0.5, 0
        else:
            tracker += 1
            if tracker == interval:
                scale, tracker = scale * 2.0, 0
    return out


FOUND = [False] * 5 + [True, True] + [False] * 7 + [True] + [False] * 3


def test_independent_torch_trace_agrees() -> None:
    res = check_trace(_torch_rule_trace(FOUND, 1024.0, 3), "torch", growth_interval=3)
    assert res.status == "agree" and res.compared == len(FOUND)


@pytest.mark.parametrize("interval", [2, 4])
def test_wrong_interval_points_at_the_first_growth(interval: int) -> None:
    trace = _torch_rule_trace(FOUND, 1024.0, interval)
    res = check_trace(trace, "torch", growth_interval=3)
    first = next(i for i, e in enumerate(trace) if e.scale != trace[0].scale)
    expected_first_bad = min(first, 3)  # torch grows at step 3; the trace changes at `first`
    assert res.status == "differ"
    assert res.data["first_bad_step"] == expected_first_bad


def test_keras_and_tf_keras_rules_differ_on_the_floor() -> None:
    trace = [(2.0, True), (1.0, True), (0.5, True), (0.25, False)]
    assert check_trace(trace, "keras").status == "agree"
    res = check_trace(trace, "tf_keras")  # tf.keras never goes below 1
    assert res.status == "differ" and res.data["first_bad_step"] == 2
    assert res.witness == {"step": "2", "recorded scale": "0.5", "expected scale": "1.0"}


def test_skipped_flag_is_checked() -> None:
    trace = [(8.0, True, False)]  # an inf step that was not skipped breaks torch's rule
    res = check_trace(trace, "torch")
    assert res.status == "differ" and "recorded skipped" in (res.witness or {})


def test_a_scaler_object_can_be_the_reference() -> None:
    trace = _torch_rule_trace(FOUND, 4.0, 2)
    assert check_trace(trace, TorchGradScaler(init_scale=4.0, growth_interval=2)).ok
    assert not check_trace(trace, TorchGradScaler(init_scale=4.0, growth_interval=5)).ok


def test_trace_formats_and_errors() -> None:
    rec = ScalerRecorder()
    rec.record(np.float32(4.0), np.bool_(False))
    assert check_trace([{"scale": 4.0, "found_inf": False}], "torch").ok
    assert check_trace(rec, "torch").ok
    with pytest.raises(ValueError, match="empty"):
        check_trace([], "torch")
    with pytest.raises(TypeError, match="trace\\[0\\]"):
        check_trace(["x"], "torch")
    with pytest.raises(ValueError, match="unknown scaler"):
        check_trace(rec, "nope")
    with pytest.raises(TypeError, match="scale must be a real number"):
        rec.record("1", False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="found_inf must be a bool"):
        rec.record(1.0, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"torch\.amp\.GradScaler"):
        rec.attach(object())


def test_report_outputs() -> None:
    r = Report(title="t", environment={"torch": "x"})
    r.add(CheckResult("casts", "a", "agree", compared=1))
    r.add(CheckResult("casts", "b|c", "differ", witness={"input": "0x1"}, notes=["n"]))
    r.add(CheckResult("autocast", "rows", "agree", data={"rows": [{"case": "c", "x": "f"}]}))
    assert not r.ok and r.counts() == {"agree": 2, "finding": 0, "differ": 1, "skipped": 0}
    md = r.to_markdown()
    assert "| casts | b\\|c | **differ** | 0 | input=0x1; n |" in md
    assert "### rows" in md and "| c | f |" in md
    assert json.loads(r.to_json())["counts"]["differ"] == 1
    with pytest.raises(ValueError, match="status"):
        CheckResult("g", "n", "fine")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="CheckResult"):
        r.add("x")  # type: ignore[arg-type]
