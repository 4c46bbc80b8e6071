"""``judge``'s shortcuts: no test here needs torch (judge takes NumPy arrays)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fpemu.validate.ops import Out
from fpemu.validate.watch.verdict import judge


def test_same_memory_is_identical_and_a_shifted_view_is_compared() -> None:
    """An output and its emulation that are the same memory read the same way (a view op) are
    identical without a comparison; a view one element off (the same strides, another address)
    is compared element by element and differs; strided (transposed) bfloat16 views are
    compared without copies and judged correctly."""
    base = np.arange(64, dtype=np.float32).reshape(8, 8).astype(ml_dtypes.bfloat16)
    t = base.T  # a non-contiguous view
    assert judge(t, Out(base.T)).verdict == "identical"
    flat = base.reshape(-1)
    assert judge(flat[1:33], Out(flat[0:32])).verdict == "differs"
    copy = np.ascontiguousarray(base).T.copy()  # the same values elsewhere, other strides
    assert judge(t, Out(copy)).verdict == "identical"
    wrong = copy.copy()
    wrong[3, 5] = ml_dtypes.bfloat16(1000.0)
    j = judge(t, Out(wrong))
    assert j.verdict == "differs" and j.first == (3, 5) and j.ndiff == 1
