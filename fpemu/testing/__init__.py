"""Tools for testers: bit-level assertions here; Hypothesis strategies in fpemu.testing.strategies.

The strategies need the ``strategies`` extra (Hypothesis); the assertions need nothing more.

>>> import numpy as np
>>> from fpemu.testing import assert_bitwise_equal, ulp_distance
>>> int(ulp_distance(1.0, 1.0009765625, "fp16"))
1
"""

from fpemu.testing.assertions import (
    MAX_REPORTED,
    assert_bitwise_equal,
    assert_representable,
    assert_ulp_close,
    ulp_distance,
)

__all__ = [
    "MAX_REPORTED",
    "assert_bitwise_equal",
    "assert_representable",
    "assert_ulp_close",
    "ulp_distance",
]
