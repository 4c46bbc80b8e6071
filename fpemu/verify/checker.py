"""The independent fast checker: exact results in float64 and a rounding of its own.

The campaigns of fpemu's own operations compare :mod:`fpemu.arith` with this module, which
shares no code with it (it does not import :mod:`fpemu.rounding` or :mod:`fpemu.arith`; only
the format *data* of :mod:`fpemu.formats`). It is itself cross-checked against the scalar
oracle in ``reference/`` on samples (tests/test_verify_checker.py).

Exact results, for operands of formats of at most 16 bits (as in every shipped campaign):

* ``mul``: a product of two values of <= 11-bit precision has <= 22 bits and its exponent stays
  inside float64's normal range: the float64 product is exact.
* ``add``/``sub``/``fma``: Dekker's Fast2Sum of the operands ordered by magnitude gives
  ``hi + lo`` equal to the exact sum (``x * y`` exact as for ``mul``).
* ``div``/``sqrt``: the float64 result ``q = RN53(z)`` alone suffices. If ``z`` is not itself a
  number of ``p + 1 <= 25`` bits, it is relatively at least ``2**-(2p + 2)`` away from every
  ``p``-bit number and midpoint (``x - g*y`` and ``x - g*g`` are nonzero multiples of a quantum
  of ``x``), far more than the ``2**-53`` by which ``q`` moves, so ``q`` lies strictly between
  the same grid points as ``z``; if it is, ``q == z``.
* ``cast``: a float32 value is exact in float64.

The rounding (:func:`round_exact`) scales the magnitude by its quantum, splits off the
fraction with ``floor`` and decides per mode from the fraction and the sign of ``lo``.

>>> round_exact(np.array([1.0 + 2.0**-11]), np.array([0.0]), "fp16", "rne").tolist()
[1.0]
>>> round_exact(np.array([1.0 + 2.0**-11]), np.array([2.0**-60]), "fp16", "rne").tolist()
[1.0009765625]
>>> Checker("div", "fp16", "rup")(np.array([1.0]), np.array([3.0])).tolist()
[0.33349609375]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.formats import get_format

F64 = NDArray[np.float64]
#: The deterministic rounding modes every shipped campaign covers.
MODES: tuple[str, ...] = ("rne", "rna", "rtz", "rup", "rdown", "rto")
#: Operations and their arity.
OPS: dict[str, int] = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3, "cast": 1}


def _f64(x: Any) -> F64:
    out: F64 = np.asarray(x, dtype=np.float64)
    return out


def round_exact(hi: Any, lo: Any, fmt: str, mode: str) -> F64:
    """Round the exact value ``hi + lo`` to ``fmt`` under ``mode``.

    ``hi`` must be ``RN53`` of the exact value (or the exact value itself) and ``lo`` any number
    with the sign of the remainder ``z - hi`` (0 when exact). Overflow follows the format's
    convention (inf, NaN for fn/fnuz, the largest value for finite formats); modes that round
    toward zero for the sign at hand give the largest finite value instead.

    >>> round_exact(np.array([500.0, -500.0]), np.zeros(2), "e4m3fn", "rtz").tolist()
    [448.0, -448.0]
    """
    f = get_format(fmt)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {MODES}")
    h, low = np.broadcast_arrays(_f64(hi), _f64(lo))
    with np.errstate(all="ignore"):
        neg = np.signbit(h)
        a = np.abs(h)
        # direction of the exact magnitude from |hi|: +1 above, -1 below, 0 equal
        d = np.sign(np.where(np.isfinite(low), low, 0.0)) * np.where(neg, -1.0, 1.0)
        mant, ex = np.frexp(a)
        e = ex - 1  # floor(log2 a) for finite a > 0
        # a power of two with the exact value just below it lives in the binade underneath
        e = np.where((mant == 0.5) & (d < 0), e - 1, e)
        qe = np.maximum(e, f.emin) - f.mbits  # exponent of the quantum
        s = np.ldexp(np.where(np.isfinite(a), a, 0.0), -qe)  # exact: a power-of-two scaling
        n = np.floor(s)
        frac = s - n
        below = (frac == 0) & (d < 0)  # just under the integer n: fraction just under 1
        n = n - below
        above_half = (frac > 0.5) | ((frac == 0.5) & (d > 0)) | below
        at_half = (frac == 0.5) & (d == 0)
        inexact = (frac != 0) | (d != 0)
        odd = np.fmod(n, 2.0) == 1.0
        up = {
            "rne": above_half | (at_half & odd),
            "rna": above_half | at_half,
            "rtz": np.zeros_like(inexact),
            "rup": inexact & ~neg,
            "rdown": inexact & neg,
            "rto": inexact & ~odd,
        }[mode]
        mag = np.ldexp(n + up, qe)
        toward_zero = {"rtz": True, "rto": True, "rup": neg, "rdown": ~neg}.get(mode, False)
        special = {"ieee": np.inf, "fn": np.nan, "fnuz": np.nan, "finite": f.max}[f.specials]
        over = np.where(toward_zero, f.max, special)
        mag = np.where(mag > f.max, over, mag)
        mag = np.where(np.isinf(a), special, mag)  # an exact infinity is not an overflow
        mag = np.where(np.isnan(a), np.nan, mag)
        out: F64 = np.where(neg, -mag, mag)
    if f.specials == "fnuz":
        out = out + 0.0  # no negative zero
    return out


# -- exact parts: (hi, lo) with hi = RN53(z) (or z) and lo carrying the sign of z - hi ---------
def _fast_two_sum(x: F64, y: F64) -> tuple[F64, F64]:
    big = np.abs(x) >= np.abs(y)
    a, b = np.where(big, x, y), np.where(big, y, x)
    s = a + b
    lo = b - (s - a)  # Dekker: exact when |a| >= |b| (no overflow in these formats)
    return s, np.where(np.isfinite(s), lo, 0.0)


def _zero_sum_sign(s: F64, t1: F64, t2: F64, mode: str) -> F64:
    """IEEE 754 sign of an exactly zero sum: float64 already gives it under round-to-nearest;
    under rdown it is -0 unless both terms are +0."""
    if mode != "rdown":
        return s
    both_pos_zero = (t1 == 0) & ~np.signbit(t1) & (t2 == 0) & ~np.signbit(t2)
    out: F64 = np.where((s == 0) & ~both_pos_zero, -0.0, s)
    return out


def exact_parts(op: str, *xs: Any, mode: str = "rne") -> tuple[F64, F64]:
    """``(hi, lo)`` of the exact result of ``op`` on float64 operands (see the module notes).

    >>> hi, lo = exact_parts("add", np.array([1.0]), np.array([2.0**-70]))
    >>> hi.tolist(), lo.tolist()
    ([1.0], [8.470329472543003e-22])
    """
    if op not in OPS:
        raise ValueError(f"op={op!r}: expected one of {tuple(OPS)}")
    if len(xs) != OPS[op]:
        raise TypeError(f"op={op!r} takes {OPS[op]} operands, got {len(xs)}")
    v = [_f64(x) for x in xs]
    zero = np.zeros(np.broadcast_shapes(*(a.shape for a in v)))
    with np.errstate(all="ignore"):
        if op in ("add", "sub"):
            y = v[1] if op == "add" else -v[1]
            s, lo = _fast_two_sum(v[0], y)
            return _zero_sum_sign(s, v[0], y, mode), lo
        if op == "fma":
            p = v[0] * v[1]  # exact (<= 22 bits)
            s, lo = _fast_two_sum(p, v[2])
            return _zero_sum_sign(s, p, v[2], mode), lo
        if op == "mul":
            return v[0] * v[1], zero
        if op == "div":
            return v[0] / v[1], zero
        if op == "sqrt":
            return np.sqrt(v[0]), zero
        return np.broadcast_to(v[0], zero.shape).copy(), zero  # cast (x + 0 would lose -0)


@dataclass(frozen=True)
class Checker:
    """``op`` on operands of at most 16 bits (casts: float32), correctly rounded to ``fmt``.

    A picklable callable (it runs on Dask workers): float64 operand arrays in, float64 results.

    >>> Checker("add", "bf16", "rdown")(np.array([1.0]), np.array([-1.0])).tolist()
    [-0.0]
    """

    op: str
    fmt: str
    mode: str = "rne"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"op={self.op!r}: expected one of {tuple(OPS)}")
        if self.mode not in MODES:
            raise ValueError(f"mode={self.mode!r}: expected one of {MODES}")
        object.__setattr__(self, "fmt", get_format(self.fmt).name)

    def parts(self, *xs: Any) -> tuple[F64, F64]:
        """The exact result as ``(hi, lo)``."""
        return exact_parts(self.op, *xs, mode=self.mode)

    def __call__(self, *xs: Any) -> F64:
        hi, lo = self.parts(*xs)
        return round_exact(hi, lo, self.fmt, self.mode)


def fpemu_op(op: str, fmt: str, mode: str) -> Callable[..., Any]:
    """The fpemu operation a campaign checks (imported here, not in :class:`Checker`)."""
    return FpemuOp(op, get_format(fmt).name, mode)


@dataclass(frozen=True)
class FpemuOp:
    """A picklable call of :mod:`fpemu.arith` (``op`` in :data:`OPS`) in one format and mode.

    >>> FpemuOp("mul", "e4m3fn", "rne")(np.array([3.0]), np.array([7.0])).tolist()
    [20.0]
    """

    op: str
    fmt: str
    mode: str = "rne"

    def __call__(self, *xs: Any) -> F64:
        from fpemu import arith  # noqa: PLC0415 - the code under test, kept out of the checker

        if self.op == "cast":
            return _f64(arith.cast(_f64(xs[0]), self.fmt, mode=self.mode))
        fn = getattr(arith, self.op)
        return _f64(fn(*(_f64(x) for x in xs), fmt=self.fmt, mode=self.mode))
