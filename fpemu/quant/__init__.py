"""FP8, MX and NVFP4: block formats, scale rules, quantize, FP8 scaling and scaled matmul."""

from __future__ import annotations

from fpemu.quant.block import (
    BLOCK_ALIASES,
    BLOCK_FORMATS,
    MXINT8_ELEMENT,
    BlockFormat,
    BlockFormatLike,
    get_block_format,
)
from fpemu.quant.explain import BlockExplanation, ElementRow, RuleResult, explain_block
from fpemu.quant.matmul import fma32, scaled_matmul
from fpemu.quant.pack import pack_fp4, pack_fp6, to_bytes, to_ml_dtypes, unpack_fp4, unpack_fp6
from fpemu.quant.quantize import Quantized, dequantize, quantize
from fpemu.quant.scales import SCALE_RULES, ScaleRule, e8m0_codes, e8m0_value
from fpemu.quant.tensor_scaling import (
    block_amax,
    deepseek_scale,
    quantize_fp8,
    te_delayed_update,
    te_scale,
    torchao_scale,
)

__all__ = [
    "BLOCK_ALIASES",
    "BLOCK_FORMATS",
    "MXINT8_ELEMENT",
    "SCALE_RULES",
    "BlockExplanation",
    "BlockFormat",
    "BlockFormatLike",
    "ElementRow",
    "Quantized",
    "RuleResult",
    "ScaleRule",
    "block_amax",
    "deepseek_scale",
    "dequantize",
    "e8m0_codes",
    "e8m0_value",
    "explain_block",
    "fma32",
    "get_block_format",
    "pack_fp4",
    "pack_fp6",
    "quantize",
    "quantize_fp8",
    "scaled_matmul",
    "te_delayed_update",
    "te_scale",
    "to_bytes",
    "to_ml_dtypes",
    "torchao_scale",
    "unpack_fp4",
    "unpack_fp6",
]
