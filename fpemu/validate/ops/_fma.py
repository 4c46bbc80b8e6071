"""Float32 arithmetic helpers for the normalisation/convolution emulations: a correctly
rounded float32 fused multiply-add, the kernels' ``a * b + c`` with or without fusion, and
the standard error-bound factors.

torch's SIMD builds (``avx2``, ``avx512``) evaluate ``Vectorized`` ``fmadd`` (and, where GCC
contracts them, some written ``a * b + c``) with one rounding; the ``default`` build rounds
twice. Which expressions fuse is measured per kernel (see the callers).

>>> import numpy as np
>>> a = np.float32(1 + 2**-12); c = np.float32(-(1 + 2**-11))
>>> float(fma32(a, a, c)) == 2.0**-24
True
>>> float(mad(a, a, c, fused=False))
0.0
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.arith import round_to_odd

__all__ = ["U32", "fma32", "gamma", "grow", "mad"]

#: unit roundoff of float32
U32 = 2.0**-24


def fma32(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a * b + c`` on float32 values with one rounding to float32 (RNE).

    The product of two float32 values is exact in float64; the float64 sum's error is recovered
    by TwoSum and folded in by round-to-odd, so the final float64 -> float32 rounding is the
    correct single rounding (53 >= 24 + 2 bits).
    """
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    cc = np.asarray(c, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = p + cc
        bb = s - p
        e = (p - (s - bb)) + (cc - bb)
    e = np.where(np.isfinite(e), e, 0.0)
    with np.errstate(over="ignore"):
        return np.asarray(round_to_odd(s, e), np.float64).astype(np.float32)


def mad(a: Any, b: Any, c: Any, *, fused: bool) -> np.ndarray:
    """The kernel's ``a * b + c`` in float32: one rounding when ``fused``, else two."""
    if fused:
        return fma32(a, b, c)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(np.float32(1) * np.asarray(a, np.float32) * np.asarray(b, np.float32)
                          + np.asarray(c, np.float32), np.float32)  # fmt: skip


def gamma(k: Any, u: float = U32) -> np.ndarray:
    """``(1 + u)**k - 1``: the relative error bound of ``k`` chained roundings of unit ``u``
    (Higham's gamma_k without its ``k u < 1`` condition, valid for every ``k``)."""
    return np.asarray(np.expm1(np.asarray(k, np.float64) * np.log1p(u)), np.float64)


def grow(k: Any, u: float = U32) -> np.ndarray:
    """``(1 + u)**k``: how much ``k`` roundings can grow a magnitude."""
    return 1.0 + gamma(k, u)
