"""Exact scalar oracle for low-precision floating point (pure Python; shares no code with fpemu).

Everything here works on Python ints and :class:`fractions.Fraction`: slow, scalar and exact.
See ``reference/README.md`` for the guarantees and the precise definitions.

>>> from reference import FLOAT16, round_float
>>> round_float(65520.0, FLOAT16, "rne"), round_float(65520.0, FLOAT16, "rtz")
(inf, 65504.0)
"""

from reference.arith import add, div, fma, mul, sqrt, sub
from reference.bits import decode, encode
from reference.dot import blocked_dot, exact_dot, pairwise_dot, pairwise_sum, sequential_dot
from reference.grid import next_down, next_up, ulp
from reference.rounding import (
    MODES,
    OVERFLOWS,
    round_float,
    round_fraction,
    round_value,
)
from reference.spec import (
    BFLOAT16,
    E2M1FN,
    E2M3FN,
    E3M2FN,
    E4M3,
    E4M3FN,
    E4M3FNUZ,
    E5M2,
    E5M2FNUZ,
    FLOAT16,
    FLOAT32,
    FLOAT64,
    TF32,
    Spec,
)
from reference.value import (
    NAN,
    NEG_INF,
    NEG_ZERO,
    POS_INF,
    Special,
    Value,
    from_float,
    to_float,
)

__all__ = [
    "BFLOAT16",
    "E2M1FN",
    "E2M3FN",
    "E3M2FN",
    "E4M3",
    "E4M3FN",
    "E4M3FNUZ",
    "E5M2",
    "E5M2FNUZ",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "MODES",
    "NAN",
    "NEG_INF",
    "NEG_ZERO",
    "OVERFLOWS",
    "POS_INF",
    "TF32",
    "Spec",
    "Special",
    "Value",
    "add",
    "blocked_dot",
    "decode",
    "div",
    "encode",
    "exact_dot",
    "fma",
    "from_float",
    "mul",
    "next_down",
    "next_up",
    "pairwise_dot",
    "pairwise_sum",
    "round_float",
    "round_fraction",
    "round_value",
    "sequential_dot",
    "sqrt",
    "sub",
    "to_float",
    "ulp",
]
