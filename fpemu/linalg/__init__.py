"""Dot products, sums and matmuls with explicit input, accumulator and output formats.

``matmul``/``dot``/``sum`` round their inputs, accumulate in a stated order with a registered
accumulation model (:mod:`fpemu.linalg.chains`; Tensor Core models register themselves from
:mod:`fpemu.tensorcore`) and round the result; :mod:`fpemu.linalg.error_analysis` measures
each model's error against the exact result.

>>> import numpy as np
>>> from fpemu.linalg import matmul
>>> a = np.array([[1.0, 2.0**-11, 2.0**-11]])
>>> float(matmul(a, np.ones((3, 1)), fmt="fp16", acc="fp16")[0, 0])
1.0
"""

from fpemu.linalg.chains import DEFAULT_BLOCK, blocked, fast, pairwise, sequential
from fpemu.linalg.error_analysis import compare_models, exact_matmul
from fpemu.linalg.ops import dot, matmul, sum
from fpemu.linalg.registry import Model, ModelInfo, get_model, models, register_model
from fpemu.linalg.step import MAX_EXACT_INPUT_PRECISION

__all__ = [
    "DEFAULT_BLOCK",
    "MAX_EXACT_INPUT_PRECISION",
    "Model",
    "ModelInfo",
    "blocked",
    "compare_models",
    "dot",
    "exact_matmul",
    "fast",
    "get_model",
    "matmul",
    "models",
    "pairwise",
    "register_model",
    "sequential",
    "sum",
]
