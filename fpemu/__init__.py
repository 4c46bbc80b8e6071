"""fpemu: a pure-NumPy reference emulator of mixed-precision floating-point numerics.

>>> import fpemu
>>> float(fpemu.round(1 + 0.0001, "fp16"))   # swamped: 1 + 1e-4 is 1 in FP16
1.0
>>> float(fpemu.round(1e-4 * 1e-4, "fp16"))  # underflow: below FP16's smallest subnormal
0.0
"""

from fpemu import tensorcore  # registers the Tensor Core accumulation models
from fpemu.amp.policy import Policy, autocast, get_policy, preset_names
from fpemu.amp.scaling import get_scaler
from fpemu.arith import add, cast, div, fma, mul, sqrt, sub
from fpemu.bits import (
    all_values,
    canonical_nan,
    code_dtype,
    codes,
    decode,
    encode,
    next_down,
    next_up,
    ulp,
)
from fpemu.formats import ALIASES, FORMATS, Format, get_format
from fpemu.limits import FInfo, finfo
from fpemu.linalg import dot, get_model, matmul, models, register_model
from fpemu.linalg.error_analysis import compare_models, exact_matmul
from fpemu.nn import MLP, Linear
from fpemu.nn.optim import SGD, Adam, clip_grad_norm
from fpemu.nn.tensor import Tensor
from fpemu.parallel import num_threads, threads
from fpemu.quant import (
    BLOCK_FORMATS,
    BlockFormat,
    Quantized,
    dequantize,
    explain_block,
    get_block_format,
    quantize,
    scaled_matmul,
)
from fpemu.rounding import RoundMode, get_mode, round
from fpemu.storage import format_of, from_storage, storage_dtype, to_storage
from fpemu.tensorcore import tensor_core_matmul
from fpemu.training import TrainResult, train

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """Lazy attributes: ``fpemu.watch`` and ``fpemu.emulate`` import torch only when used."""
    if name == "emulate":
        import fpemu.emulate as emulate_module  # noqa: PLC0415 - a callable module

        return emulate_module
    if name == "watch":
        from fpemu.validate.watch import watch  # noqa: PLC0415

        return watch
    raise AttributeError(f"module 'fpemu' has no attribute {name!r}")


__all__ = [
    "ALIASES",
    "BLOCK_FORMATS",
    "FORMATS",
    "MLP",
    "SGD",
    "Adam",
    "BlockFormat",
    "FInfo",
    "Format",
    "Linear",
    "Policy",
    "Quantized",
    "RoundMode",
    "Tensor",
    "TrainResult",
    "add",
    "all_values",
    "autocast",
    "canonical_nan",
    "cast",
    "clip_grad_norm",
    "code_dtype",
    "codes",
    "compare_models",
    "decode",
    "dequantize",
    "div",
    "dot",
    "emulate",
    "encode",
    "exact_matmul",
    "explain_block",
    "finfo",
    "fma",
    "format_of",
    "from_storage",
    "get_block_format",
    "get_format",
    "get_mode",
    "get_model",
    "get_policy",
    "get_scaler",
    "matmul",
    "models",
    "mul",
    "next_down",
    "next_up",
    "num_threads",
    "preset_names",
    "quantize",
    "register_model",
    "round",
    "scaled_matmul",
    "sqrt",
    "storage_dtype",
    "sub",
    "tensor_core_matmul",
    "tensorcore",
    "threads",
    "to_storage",
    "train",
    "ulp",
    "watch",
]
