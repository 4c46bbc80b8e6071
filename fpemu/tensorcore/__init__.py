"""Bit-accurate models of NVIDIA tensor-core and AMD matrix-core multiply-accumulate.

Each architecture (``v100``, ``t4``, ``a100``, ``ada``, ``h100``, ``b200`` and aliases such as
``sm_80`` or ``h200``) is a model for :func:`fpemu.matmul` (``model="h100"``), built from one
fused block dot-add (:mod:`fpemu.tensorcore.block`) chained along K
(:mod:`fpemu.tensorcore.arch`). :func:`compare` shows a tensor-core result beside sequential
FP32 accumulation and the exact value.

>>> import numpy as np
>>> a = np.array([[0.5] * 4]); b = np.full((4, 1), 2.0**-24)  # spec 2.7 case E4
>>> c = np.array([[1.0]])
>>> [tensor_core_matmul(a, b, c, arch=x, fmt="fp16").item() for x in ("a100", "h100")]
[1.0, 1.0000001192092896]

Importing this package registers every architecture with :mod:`fpemu.linalg`:

>>> from fpemu.linalg import matmul
>>> matmul(a, b, fmt="fp16", c=c, model="sm_90").item()
1.0000001192092896

and every matrix-instruction model of :mod:`fpemu.tensorcore.instructions` (NVIDIA ``mma``,
``wgmma``, ``tcgen05`` and block-scaled forms, AMD CDNA ``mfma``; MMA-Sim's inventory):

>>> matmul(a, b, fmt="fp16", c=c, model="cdna3.mfma.f16.f32", k=4).item()
1.0000001192092896
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fpemu.linalg import register_model
from fpemu.linalg.tiles import tileable
from fpemu.tensorcore.arch import (
    ARCH_ALIASES,
    ARCHS,
    Arch,
    get_arch,
    make_model,
    tensor_core_matmul,
)
from fpemu.tensorcore.block import BlockSpec, ResultFormat, block_dot_add, chain_blocks
from fpemu.tensorcore.compare import Comparison, compare
from fpemu.tensorcore.instructions import INSTRUCTIONS, Instruction, get_instruction
from fpemu.tensorcore.mma import dpa, mma, register_instructions
from fpemu.tensorcore.specials import encode

__all__ = [
    "ARCHS",
    "ARCH_ALIASES",
    "INSTRUCTIONS",
    "Arch",
    "BlockSpec",
    "Comparison",
    "Instruction",
    "ResultFormat",
    "block_dot_add",
    "chain_blocks",
    "compare",
    "dpa",
    "encode",
    "get_arch",
    "get_instruction",
    "make_model",
    "mma",
    "register_all",
    "register_instructions",
    "tensor_core_matmul",
]


def register_all(register: Callable[..., Any]) -> None:
    """Register every architecture with a ``register(name, fn, *, aliases, description)``.

    ``fpemu.linalg.register_model`` is the intended ``register``; the aliases of an
    architecture are the names in :data:`ARCH_ALIASES` that point to it.

    >>> seen = {}
    >>> register_all(lambda name, fn, *, aliases, description: seen.update({name: aliases}))
    >>> seen["h100"]
    ('sm_90', 'sm_90a', 'h200', 'hopper')
    """
    for name, arch in ARCHS.items():
        aliases = tuple(k for k, v in ARCH_ALIASES.items() if v == name)
        register(name, make_model(arch), aliases=aliases, description=arch.description)


# Marked tileable: each output element depends on its own row, column and C element only, so
# fpemu.linalg.matmul may compute output tiles on threads (fpemu.linalg.tiles).
register_all(lambda name, fn, **kw: register_model(name, tileable(fn, name), replace=True, **kw))
# Every matrix-instruction model (fpemu.tensorcore.instructions), e.g. model="sm90.wgmma.fp8.f16".
register_instructions(
    lambda name, fn, **kw: register_model(name, tileable(fn, name), replace=True, **kw)
)
