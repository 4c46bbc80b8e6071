"""A running error bound for a kernel's float32 formula: value (float64) and a bound on how far
the kernel's float32 evaluation may be from it, whatever the compiler fused.

Why: GCC builds torch's AVX2/AVX512 kernels with ``-mfma`` and contracts ``a*b + c`` into one
FMA where it chooses (scalar tails and the ``Vectorized`` operators alike), and the libm/Sleef
transcendentals are within a documented number of ulps only. Each :class:`IV` operation adds the
worst case of its own rounding, ``u*|result| + eta`` (``u = 2**-24``, ``eta = 2**-150`` for the
float32 underflow), to the propagated bounds of its operands; a fused pair only removes a
rounding, so the bound covers every contraction pattern. Transcendentals add ``K_LIBM`` ulps of
their float32 result plus their largest slope over the operand's interval times its bound.

>>> import numpy as np
>>> x = IV.of(np.float32([3.0]))
>>> y = x * x + IV.const(1.0)
>>> float(y.v[0]), bool(y.e[0] < 2e-6)
(10.0, True)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fpemu.validate.ops import Out, bounded, lazy
from fpemu.validate.ops._fp import K_LIBM
from fpemu.validate.ops._num import to

__all__ = ["IV", "iv_ends", "iv_lazy", "iv_out"]

U = 2.0**-24
ETA = 2.0**-150


def _round(v: np.ndarray, e: np.ndarray) -> IV:
    """The bound after the kernel rounds a value within ``e`` of ``v`` to float32.

    An infinite ``v`` with ``e = 0`` is an infinite operand met by exact ones (``-inf - m``, a
    masked logit less its row's maximum: float64 does not overflow on float32 operands), whose
    IEEE result is that infinity in float32 too: exact, not ``inf`` off (which made every
    element that a row sum or product of it reaches unjudged)."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = IV(v, e + U * (np.abs(v) + e) + ETA)
        inf = np.isinf(out.v)
        if inf.any():
            out.e[inf & (np.asarray(e) == 0)] = 0.0  # (e broadcast as out.e is)
        return out


class IV:
    """``v`` (float64) and ``e`` (float64 >= 0): the float32 evaluation is within ``e`` of ``v``."""

    def __init__(self, v: Any, e: Any) -> None:
        self.v = np.asarray(v, np.float64)
        self.e = np.asarray(e, np.float64)

    @staticmethod
    def of(x: np.ndarray) -> IV:
        """An exactly known operand (a tensor's element)."""
        return IV(np.asarray(x, np.float64), np.zeros(np.shape(x)))

    @staticmethod
    def const(c: float) -> IV:
        """A float32 constant of the kernel (``opmath_t(c)``), exact after its one rounding."""
        return IV(np.float64(np.float32(c)), 0.0)

    def __add__(self, o: IV) -> IV:
        return _round(self.v + o.v, self.e + o.e)

    def __sub__(self, o: IV) -> IV:
        return _round(self.v - o.v, self.e + o.e)

    def __mul__(self, o: IV) -> IV:
        with np.errstate(invalid="ignore", over="ignore"):
            e = np.abs(self.v) * o.e + np.abs(o.v) * self.e + self.e * o.e
        return _round(self.v * o.v, e)

    def __truediv__(self, o: IV) -> IV:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            v = self.v / o.v
            den = np.abs(o.v) - o.e
            e = np.where(den > 0, (self.e + np.abs(v) * o.e) / den, np.inf)
        return _round(v, e)

    def func(self, f: Any, slope: Any) -> IV:
        """A libm/Sleef transcendental ``f`` (float64, accurate) with ``slope(lo, hi)`` a bound
        on ``|f'|`` over ``[lo, hi]``: within ``K_LIBM`` ulps of float32 of the exact value."""
        with np.errstate(invalid="ignore", over="ignore"):
            v = f(self.v)
            prop = np.where(self.e > 0, slope(self.v - self.e, self.v + self.e) * self.e, 0.0)
            mag = np.abs(v) + prop
            ulp = np.ldexp(1.0, np.frexp(np.maximum(mag, 2.0**-126))[1] - 24)
        return IV(v, prop + K_LIBM * ulp + ETA)


def iv_out(value: np.ndarray, iv: IV, name: str, reason: str, *, ftz: bool = False) -> Out:
    """An :class:`Out`: ``value`` (the kernel's formula in float32, rounded to ``name``) and the
    interval ``iv`` of the float32 result (:func:`iv_ends`)."""
    center, err = iv_ends(iv, name, ftz=ftz)
    return bounded(to(value, name), err, reason, center=center)


def iv_lazy(
    value: np.ndarray, iv_at: Callable[[np.ndarray], IV], name: str, reason: str, *,
    ftz: bool = False,
) -> Out:  # fmt: skip
    """:func:`iv_out` with the interval computed only where the watcher asks for it:
    ``iv_at(flat_indices)`` is the interval of those elements (:func:`fpemu.validate.ops.lazy`)."""
    return lazy(to(value, name), lambda idx: iv_ends(iv_at(idx), name, ftz=ftz), reason)


def iv_ends(iv: IV, name: str, *, ftz: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """``(center, err)`` of the float32 result's interval ``iv`` given by its ends rounded to
    ``name`` (RNE is monotone, so torch's result lies between them; ``judge`` leaves
    representable ends unchanged). ``ftz``: the kernel flushes subnormal float32 results to
    zero (oneDNN): 0 is admitted where the interval reaches below the float32 normals."""
    with np.errstate(invalid="ignore", over="ignore"):
        slack = iv.e * (1 + 2.0**-40)
        slack += np.abs(iv.v) * 2.0**-50  # float64 evaluation of v, e
        lo = to(iv.v - slack, name).astype(np.float64)
        hi = to(iv.v + slack, name).astype(np.float64)
        if ftz:
            # lo <= hi: the interval avoids [-2^-126, 2^-126] only if it lies above or below it
            sub = ~((lo >= 2.0**-126) | (hi <= -(2.0**-126)))
            if sub.any():
                lo, hi = (
                    np.where(sub, np.minimum(lo, 0.0), lo),
                    np.where(sub, np.maximum(hi, 0.0), hi),
                )
        center = lo * 0.5 + hi * 0.5  # exact: lo, hi are 16-bit/float32 values, far from underflow
        err = hi * 0.5 - lo * 0.5
        odd = ~np.isfinite(err)  # infinite ends, NaN: the general rules, on those elements only
        if odd.any():
            k = np.nonzero(odd)
            lk, hk, vk = lo[k], hi[k], np.broadcast_to(iv.v, err.shape)[k]
            fin = np.isfinite(lk) & np.isfinite(hk)
            # an interval reaching an infinity (a divisor's bound straddling 0): not judged
            center[k] = np.where(np.isnan(vk), np.nan,
                                 np.where(lk == hk, lk, np.where(fin, center[k], 0.0)))  # fmt: skip
            err[k] = np.where(np.isnan(vk) | (lk == hk), 0.0, np.inf)
    return center, err
