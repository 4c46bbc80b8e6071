"""Helpers the activation emulations share (:mod:`.activations`, :mod:`.gelu`): opmath
widening, the multiply-add of a kernel the compiler may contract, exp's candidate values, and
the x-only factor of a backward (:func:`xpart`), tabulated per process for 16-bit inputs.

>>> x32(np.array([1.5], np.float16), "float16").dtype.name
'float32'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fpemu.validate.ops._fp import candidates, code_table, fma32
from fpemu.validate.ops._iv import IV

__all__ = ["ERF", "HULL", "IVR", "ends", "exp_cands", "fm", "x32", "xpart"]

_F = np.float32
HULL = "float32 formula at the extreme libm/Sleef values (K_LIBM ulps) and FMA contractions"
ERF = "erf within A&S 7.1.26's 1.5e-7 plus its float32 evaluation bound (oneDNN/vector/libm)"
IVR = "float32 formula's running error bound (each rounding, K_LIBM-ulp libm, any FMA)"


def x32(a: np.ndarray, name: str) -> np.ndarray:
    """A tensor widened to opmath; float64 transcendental kernels are not emulated."""
    if name == "float64":
        raise NotImplementedError("float64 transcendental activations are not emulated")
    return np.asarray(a).astype(_F)


def fm(a: Any, b: Any, c: Any, fused: bool) -> np.ndarray:
    """``a*b + c`` in float32: one FMA or two roundings (the compiler's choice)."""
    if fused:
        return fma32(a, b, c)
    return np.asarray(np.asarray(a, _F) * np.asarray(b, _F) + np.asarray(c, _F), _F)


def exp_cands(z: np.ndarray) -> list[np.ndarray]:
    with np.errstate(over="ignore", under="ignore"):
        return candidates(np.exp(np.asarray(z, np.float64)))


def ends(cands: list[np.ndarray]) -> list[np.ndarray]:
    """The lowest and highest of ``candidates`` (ordered low to high; NaN stays NaN)."""
    return [cands[0], cands[-1]]


def xpart(
    a: np.ndarray,
    name: str,
    fn: Callable[[np.ndarray], tuple[np.ndarray, IV]],
    value: Callable[[np.ndarray], np.ndarray],
    *,
    direct: Callable[[np.ndarray], tuple[np.ndarray, Callable[[np.ndarray], IV]]] | None = None,
) -> tuple[np.ndarray, Callable[[np.ndarray], IV]]:
    """The factor of a backward that depends on ``x`` only: its float32 value (every element)
    and its interval at given flat indices: for a large 16-bit ``a`` both evaluated once per
    process on every code of its dtype (:func:`._fp.code_table`: ``fn`` depends on ``x``
    alone) and indexed by the tensor's bits, otherwise the value everywhere and the interval
    only at the indices asked for. ``value``: ``fn``'s float32 value alone (without the
    interval's cost); ``direct``: a cheaper way to both for a float32 ``x`` (GELU's erf center,
    computed once for the value and the interval).

    >>> x = np.float32([1.0, 2.0])
    >>> v, iv_at = xpart(x, "float32", lambda t: (t * 2, IV.of(t * 2)), lambda t: t * 2)
    >>> v.tolist(), iv_at(np.array([1])).v.tolist()
    ([2.0, 4.0], [4.0])
    """
    if a.dtype.itemsize == 2 and a.size >= 8192:

        def every(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            val, iv = fn(x32(codes, name))
            return val, iv.v, np.broadcast_to(iv.e, np.shape(iv.v))

        tv, ivv, ive = code_table(("xpart", fn, name), a.dtype, every)
        bits = np.ascontiguousarray(a).view(np.uint16).ravel()  # a code is its own index
        return tv[bits].reshape(a.shape), lambda idx: IV(ivv[bits[idx]], ive[bits[idx]])
    x = x32(a, name)
    if direct is not None:
        return direct(x)
    flat = x.reshape(-1)
    return value(x), lambda idx: fn(flat[idx])[1]
