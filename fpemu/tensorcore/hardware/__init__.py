"""Cross-checking fpemu's tensor-core models against real NVIDIA tensor cores (CuPy).

* :mod:`fpemu.tensorcore.hardware.mma`: PTX ``mma.sync`` kernels (source generated from the fragment
  layouts), GPU detection (compute capability -> model), :func:`run_mma`.
* :mod:`fpemu.tensorcore.hardware.words`: values <-> raw fp16/bf16/tf32/fp32 words.
* :mod:`fpemu.tensorcore.hardware.generators`: the test-case generators (plain NumPy).
* :mod:`fpemu.tensorcore.hardware.crosscheck`: the bit-for-bit comparison with a model.
* :mod:`fpemu.cli.crosscheck`: ``fpemu crosscheck``.

Everything here imports without CuPy; only :func:`run_mma` (and the CLI on a GPU) loads it.
Not yet run on GPU hardware in this repository (see ``docs/gpu.md``).

>>> sorted(INSTRUCTIONS)
['bf16', 'fp16', 'fp16_acc16', 'fp16_k8', 'tf32']
"""

from fpemu.tensorcore.hardware.crosscheck import Result, crosscheck, emulate_words, save_mismatches
from fpemu.tensorcore.hardware.generators import GENERATORS, Cases, generate
from fpemu.tensorcore.hardware.mma import (
    CAPABILITY_MODELS,
    INSTRUCTIONS,
    Instruction,
    kernel_source,
    model_for_capability,
    run_mma,
)
from fpemu.tensorcore.hardware.words import from_words, same_words, to_words

__all__ = [
    "CAPABILITY_MODELS",
    "GENERATORS",
    "INSTRUCTIONS",
    "Cases",
    "Instruction",
    "Result",
    "crosscheck",
    "emulate_words",
    "from_words",
    "generate",
    "kernel_source",
    "model_for_capability",
    "run_mma",
    "same_words",
    "save_mismatches",
    "to_words",
]
