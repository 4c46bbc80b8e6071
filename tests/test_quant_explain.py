"""explain_block and the ``fpemu quant`` command module (configure/run)."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from fpemu.cli import quant_explain
from fpemu.cli.errors import UsageError
from fpemu.quant import dequantize, explain_block, quantize


def test_explain_block_agrees_with_quantize() -> None:
    vals = [480.0, 9.5, -17.0, 0.0, 1e-3]
    e = explain_block(vals, "mxfp8_e4m3", rule="rceil")
    assert e.amax == 480.0 and e.rule == "rceil"
    x = np.zeros(32, np.float32)
    x[:5] = vals
    for r in e.rules:
        q = quantize(x, "mxfp8_e4m3", scale_rule=r.rule)
        assert r.scale_code == int(q.scale_codes[0]) and r.exponent == r.scale_code - 127
        err = np.abs(dequantize(q)[:5] - x[:5].astype(np.float64)).max()
        assert r.max_abs_error == err
    q = quantize(x, "mxfp8_e4m3", scale_rule="rceil")
    assert [row.code for row in e.elements] == q.element_codes[:5].tolist()
    assert [row.error for row in e.elements] == (dequantize(q)[:5] - x[:5]).tolist()
    assert {r.rule: r.saturated for r in e.rules} == {"floor": 1, "ceil": 0, "even": 1, "rceil": 0}
    assert "rceil   0x80" in e.render()


def test_explain_nvfp4_and_errors() -> None:
    e = explain_block([6.0, 0.25, 0.75, 2.5, 5.0], "nvfp4")
    assert [r.rule for r in e.rules] == ["te", "torchao"]
    assert [row.element for row in e.elements] == [6.0, 0.0, 1.0, 2.0, 4.0]
    with pytest.raises(ValueError, match="one 1-D block of at most 32 values"):
        explain_block(np.ones(33), "mxfp4")
    with pytest.raises(ValueError, match="rule='te'"):
        explain_block([1.0], "mxfp4", rule="te")


def test_cli_module(capsys: pytest.CaptureFixture[str]) -> None:
    parser = quant_explain.configure(argparse.ArgumentParser())
    assert quant_explain.run(parser.parse_args(["7,1", "--block-format", "mxfp4"])) == 0
    out = capsys.readouterr().out
    assert "amax 7" in out and "even    0x80" in out
    with pytest.raises(UsageError, match="--rule te: accepted for mxfp4"):
        quant_explain.run(parser.parse_args(["1", "--block-format", "mxfp4", "--rule", "te"]))
    with pytest.raises(UsageError, match="at most 16 values"):
        quant_explain.run(parser.parse_args([",".join(["1"] * 17), "--block-format", "nvfp4"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["1,x"])
