"""A tiny autograd engine: Tensor, ops, modules and optimizers, every rounding explicit.

>>> import numpy as np
>>> from fpemu.nn import MLP, functional as fn
>>> m = MLP([4, 8, 3], policy="torch_cuda_fp16", seed=0)
>>> fn.sum(m(np.ones((2, 4), np.float32))).fmt.name
'float16'
"""

from fpemu.nn import functional  # binds Tensor's operators (see fpemu.nn.tensor)
from fpemu.nn.fp8 import FP8Linear, FP8State, fp8_linear, fp8_mlp
from fpemu.nn.graph import GraphModule
from fpemu.nn.modules import MLP, LayerNorm, Linear, Module
from fpemu.nn.optim import SGD, Adam, AdamW, Optimizer, clip_grad_norm
from fpemu.nn.tensor import GradCheck, Tensor, cast, gradcheck, round_to

__all__ = [
    "MLP",
    "SGD",
    "Adam",
    "AdamW",
    "FP8Linear",
    "FP8State",
    "GradCheck",
    "GraphModule",
    "LayerNorm",
    "Linear",
    "Module",
    "Optimizer",
    "Tensor",
    "cast",
    "clip_grad_norm",
    "fp8_linear",
    "fp8_mlp",
    "functional",
    "gradcheck",
    "round_to",
]
