"""Explain one block: amax, the scale every rule gives, each element's code, value and error.

>>> import numpy as np
>>> e = explain_block([480.0, 9.5, -17.0, 0.0], "mxfp8_e4m3")
>>> [(r.rule, r.exponent, r.saturated) for r in e.rules]
[('floor', 0, 1), ('ceil', 1, 0), ('even', 0, 1), ('rceil', 1, 0)]
>>> print(e.render().splitlines()[0])
block of 4 values, mxfp8_e4m3 (float8_e4m3fn x 32, float8_e8m0fnu scales), amax 480
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.quant.block import BlockFormatLike, get_block_format
from fpemu.quant.quantize import dequantize, quantize


@dataclass(frozen=True)
class RuleResult:
    """What one scale rule makes of the block."""

    rule: str
    scale_code: int
    scale: float
    exponent: int | None  # log2 of an E8M0 scale (None for NVFP4 / a NaN scale)
    saturated: int  # elements clamped to the element maximum
    max_abs_error: float


@dataclass(frozen=True)
class ElementRow:
    """One element under the chosen rule."""

    value: float
    code: int
    element: float
    decoded: float
    error: float


@dataclass(frozen=True)
class BlockExplanation:
    """The block, the result of every rule, and the elements under ``rule``."""

    block_format: str
    description: str
    amax: float
    rule: str
    rules: tuple[RuleResult, ...]
    elements: tuple[ElementRow, ...]
    code_width: int

    def render(self) -> str:
        """A plain-text table."""
        lines = [f"block of {len(self.elements)} values, {self.block_format} "
                 f"({self.description}), amax {self.amax:.9g}", "",
                 "rule    code  scale           saturated  max |error|"]  # fmt: skip
        for r in self.rules:
            mark = " <-" if r.rule == self.rule else ""
            lines.append(f"{r.rule:<7} 0x{r.scale_code:02x}  {r.scale:<15.9g} {r.saturated:<10d} "
                         f"{r.max_abs_error:.6g}{mark}")  # fmt: skip
        lines += ["", f"elements under {self.rule}:", "x               code  element  x_hat"
                  "           error"]  # fmt: skip
        for e in self.elements:
            code = f"0x{e.code:0{self.code_width}x}"
            lines.append(f"{e.value:<15.9g} {code:<5} {e.element:<8.6g} {e.decoded:<15.9g} "
                         f"{e.error:.6g}")  # fmt: skip
        return "\n".join(lines)


def explain_block(
    values: Any, block_format: BlockFormatLike, *, rule: str | None = None
) -> BlockExplanation:
    """Quantize one block (zero-padded to the block size) under every rule of the format.

    Raises:
        ValueError: more values than one block holds; unknown format or rule.
    """
    bf = get_block_format(block_format)
    x = np.asarray(values, dtype=np.float32).reshape(-1)
    if x.size > bf.block_size or bf.tile_rows > 1:
        raise ValueError(
            f"values: one 1-D block of at most {bf.block_size} values is explained, got {x.size}"
        )
    chosen = bf.scale_rule if rule is None else rule
    if chosen not in bf.rules:
        raise ValueError(f"rule={chosen!r}; accepted for {bf.name}: {', '.join(bf.rules)}")
    padded = np.zeros(bf.block_size, np.float32)
    padded[: x.size] = x
    results: list[RuleResult] = []
    rows: tuple[ElementRow, ...] = ()
    for r in bf.rules:
        q = quantize(padded, bf, scale_rule=r)
        xhat = dequantize(q)[: x.size]
        code = int(q.scale_codes[0])
        scale = float(q.scales[0]) * (1.0 if q.tensor_scale is None else q.tensor_scale)
        exp = code - 127 if not bf.two_level and code != 255 else None
        with np.errstate(invalid="ignore"):  # a NaN scale saturates nothing
            sat = int(np.sum(np.abs(x.astype(np.float64)) > bf.max * scale))
        err = xhat - x.astype(np.float64)
        results.append(RuleResult(r, code, scale, exp, sat,
                                  float(np.max(np.abs(err))) if x.size else 0.0))  # fmt: skip
        if r == chosen:
            rows = tuple(
                ElementRow(float(v), int(c), float(p), float(d), float(d - v))
                for v, c, p, d in zip(
                    x, q.element_codes[: x.size], q.elements[: x.size], xhat, strict=True
                )
            )
    desc = f"{bf.element.name} x {bf.block_size}, {bf.scale.name} scales"
    width = 2 if bf.element.bits > 4 else 1
    amax = float(np.max(np.abs(x))) if x.size else 0.0
    return BlockExplanation(bf.name, desc, amax, chosen, tuple(results), rows, width)
