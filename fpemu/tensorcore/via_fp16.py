"""FP8 ``mma.sync`` on the FP16 datapath: two interleaved FP16 blocks, then C added apart.

The recorded H100 and B200 outputs of ``mma.sync.m16n8k32`` with FP8 inputs (``tests/data/
tensorcore``, PROVENANCE.md) are reproduced bit for bit, with FP16 accumulation on both GPUs and
FP32 accumulation on B200, by this model of one k32 instruction (``n = 16`` below):

1. the FP8 operands become FP16 values (exact) and the products go through the architecture's
   FP16 fused block (:mod:`fpemu.tensorcore.block`: ``n`` products, ``F = 25``, FP32
   truncation or FP16 round-to-nearest-even);
2. two such blocks, chained: the first over the instruction's ``k`` with ``k % 4`` in {0, 1},
   the second over ``k % 4`` in {2, 3} (the low and high FP16 pairs of each thread's packed FP8
   registers), the first starting from +0 and the second taking the first's rounded result as
   its C;
3. the instruction's C is then added to that result in one IEEE addition, rounded to nearest
   even in the accumulator format.

A longer K is a chain of instructions, each result the C of the next (a partial last
instruction is padded with zero products).

>>> import numpy as np
>>> from fpemu.tensorcore.block import FP16_RNE, BlockSpec
>>> a = np.zeros((1, 32)); a[0, :3] = [1.0, 2.0**-11, 2.0**-11]; b = np.ones((32, 1))
>>> spec = BlockSpec(n=16, frac_bits=25, result=FP16_RNE)
>>> float(via_fp16(a, b, np.zeros((1, 1)), spec=spec)[0, 0])  # k 0, 1 first: 1 + 2**-11 ties to 1
1.0
>>> float(via_fp16(a, b, np.array([[-1.0]]), spec=spec)[0, 0])  # C is not in the first block
0.0
"""

from __future__ import annotations

import numpy as np

from fpemu.arith import add
from fpemu.backend import xp
from fpemu.formats import get_format
from fpemu.tensorcore.block import F64, BlockSpec, chain_blocks, labels

_FP16 = get_format("float16")


def instruction_order(n: int) -> list[int]:
    """The ``k`` of one instruction of ``2 * n`` products in the order the two blocks take them.

    >>> instruction_order(4)
    [0, 1, 4, 5, 2, 3, 6, 7]
    """
    ks = range(2 * n)
    return [k for k in ks if k % 4 < 2] + [k for k in ks if k % 4 >= 2]


def via_fp16(a: F64, b: F64, c: F64, *, spec: BlockSpec) -> F64:
    """``A @ B + C`` with FP8 instructions run on the FP16 datapath (module docstring).

    Args:
        a: (..., M, K) values exact in FP16 (FP8 values are).
        b: (..., K, N) values exact in FP16; batch dimensions broadcast.
        c: (..., M, N) accumulator values, exact in ``spec.result.fmt``.
        spec: the FP16 block (``n`` products per block, ``2 * n`` per instruction).

    Returns:
        (..., M, N) float64 results, exact in ``spec.result.fmt``.

    Raises:
        ValueError: inexact inputs.
    """
    np_ = xp(a, b, c)
    acc = spec.result.fmt
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    d = np_.array(np_.broadcast_to(c, (*batch, a.shape[-2], b.shape[-1])), dtype=np_.float64)
    labels(d, acc, zeros=spec.zeros, arg="c")  # validates c
    step = 2 * spec.n
    K = a.shape[-1]
    pad = -K % step
    if pad:
        a = np_.concatenate([a, np_.zeros((*a.shape[:-1], pad))], axis=-1)
        b = np_.concatenate([b, np_.zeros((*b.shape[:-2], pad, b.shape[-1]))], axis=-2)
    order = np_.asarray(instruction_order(spec.n))
    for k0 in range(0, K + pad, step):
        ks = k0 + order
        part = chain_blocks(a[..., ks], b[..., ks, :], np_.zeros(d.shape), spec=spec, fmt=_FP16)
        d = np_.asarray(add(part, d, fmt=acc, mode="rne"), dtype=np_.float64)
    result: F64 = d
    return result
