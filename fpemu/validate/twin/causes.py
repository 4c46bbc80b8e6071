"""Why a tensor differs: recompute the op in fpemu from torch's own inputs, and bound what a
different summation order or math library may change.

Each bound is an error analysis, stated in the function that computes it:

* A float32 accumulation of ``K`` products in any order lies within ``(K-1) u |a|.|b|`` of the
  exact sum (Higham, *Accuracy and Stability*, eq. 3.5, u = 2**-24); two orders differ by at
  most twice that, and rounding each to the output format adds at most one ulp of it.
* A transcendental (erf, tanh, exp) that torch evaluates in float32 opmath within a few ulps
  and rounds to bfloat16/float16 can differ from fpemu's once-rounded float64 value by at most
  one ulp of the output format (both sides round values closer than one ulp of it); in float32
  itself torch's vectorised functions are accurate to ``MATH_ULPS_F32`` ulps.
* Fused reductions (softmax, log_softmax, layer_norm, the losses) over ``K`` elements of
  positive terms have a float32 relative error of at most about ``K u`` per side.

>>> import numpy as np
>>> x = np.float32([[1.0, 2.0]]); w = np.float32([[3.0, 4.0]])
>>> float(linear_bound(x, w, None, out="float32")[0, 0]) == 2 * 1 * 2.0**-24 * 11
True
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu.backend import scratch
from fpemu.bits import ulp

U32 = 2.0**-24
#: torch's vectorised float32 erf/tanh/exp/log (Sleef u10 and ATen's own polynomials) are
#: within about 1-2 ulps; with the composite formulas of GELU/SiLU around them, 4 ulps per side.
MATH_ULPS_F32 = 8.0
#: ops whose result is exact given their inputs (selection, one correctly rounded + or *,
#: reshapes): a local difference has no numeric excuse.
EXACT_OPS = frozenset({"relu", "add", "sub", "mul", "identity", "flatten"})
MATMUL_OPS = frozenset({"linear", "matmul"})
MATH_OPS = frozenset({"gelu", "gelu_erf", "silu", "tanh", "sigmoid"})
REDUCTION_OPS = frozenset({"softmax", "log_softmax", "layer_norm", "cross_entropy", "mse",
                           "keras_mse"})  # fmt: skip
LOW = ("bfloat16", "float16")


_MBITS = {"float32": 23, "bfloat16": 7, "float16": 10}
_TINY = {"float32": 2.0**-126, "bfloat16": 2.0**-126, "float16": 2.0**-14}


def _ulp(v: np.ndarray, fmt: str) -> np.ndarray:
    """ulp of ``fmt`` at ``|v|`` (the spacing of the binade, subnormal spacing below it)."""
    a = np.abs(np.asarray(v, np.float64))
    if fmt in _MBITS:  # fast path: 2**(exponent - mbits) from frexp, floored at the subnormals
        e = np.frexp(np.maximum(a, _TINY[fmt]))[1] - 1
        with np.errstate(over="ignore"):
            return np.asarray(np.ldexp(1.0, e - _MBITS[fmt]), np.float64)
    return np.asarray(ulp(a, fmt), np.float64)


def linear_bound(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, *, out: str,
                 transpose: bool = True) -> np.ndarray:  # fmt: skip
    """Largest |difference| of two float32 accumulations of ``x @ w.T (+ b)`` before their
    rounding to ``out``: ``2 (K-1) u (|x| @ |w|.T + |b|)`` elementwise (``K`` terms, the bias
    one more); ``within`` adds the final rounding. ``transpose=False`` bounds ``x @ w``."""
    ax, aw = np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(w, np.float64))
    mag = np.asarray(ax @ (aw.T if transpose else aw), np.float64)
    k = ax.shape[-1] + (b is not None)
    if b is not None:
        mag += np.abs(np.asarray(b, np.float64))
    del out  # the rounding to the output format is added by within()
    mag *= 2 * max(k - 1, 1) * U32  # in place: the same product as the scalar times mag
    return mag


#: ``matmul_within`` gathers the operand rows of the differing elements when they are at most
#: this fraction of the output (else one GEMM of magnitudes is cheaper than the gathers)
GATHER_FRACTION = 1 / 16


def matmul_within(
    t: np.ndarray, f: np.ndarray, x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
    fmt: str, transpose: bool = True, scale: float = 1.0, first_fmt: str | None = None,
) -> tuple[bool, float]:  # fmt: skip
    """``within(t, f, scale * linear_bound(x, w, b) [+ ulp(t)], fmt)``, with the bound evaluated
    only where ``t`` and ``f`` differ: elsewhere ``|t - f| = 0`` satisfies any bound, so the
    verdict is the same; the bound in ulps is the largest over the differing elements (0.0 when
    none differ). ``first_fmt`` adds one ulp of that format at ``t`` (a result rounded to it,
    the compute format, before its final format ``fmt``). Costs ``K`` multiply-adds per
    differing element instead of a GEMM of magnitudes when few differ (the usual case: two
    float32 orders flip a bfloat16 rounding for about one output in a thousand).

    >>> x, w = np.float32([[1.0, 1.0]]), np.ones((2, 2), np.float32)  # x @ w.T = [[2, 2]]
    >>> f = np.float32([[2.0, 2.0000002]])  # one float32 ulp above 2 in the second element
    >>> matmul_within(np.float32([[2.0, 2.0]]), f, x, w, fmt="float32")
    (True, 2.0)
    """
    t, f, x, w = (np.asarray(a) for a in (t, f, x, w))
    wk = w if transpose else w.T  # (N, K): output column j uses row j
    ok2 = t.ndim >= 1 and x.shape[-1] == wk.shape[-1] and t.shape[-1] == wk.shape[0] and \
        t.size == x.size // max(x.shape[-1], 1) * wk.shape[0]  # fmt: skip
    idx = np.flatnonzero(t != f)  # one pass; NaN != NaN, so both-NaN pairs are dropped next
    if idx.size:
        idx = idx[~(np.isnan(t.flat[idx]) & np.isnan(f.flat[idx]))]  # payloads not compared
    if not idx.size:
        return True, 0.0
    if not ok2 or idx.size > GATHER_FRACTION * t.size:
        bound = linear_bound(x, w, b, out=fmt, transpose=transpose) * scale
        if first_fmt is not None:
            bound = bound + _ulp(t, first_fmt)
        bound = bound.reshape(-1)
        return within(t.flat[idx], f.flat[idx], bound[idx], fmt)
    rows, cols = np.divmod(idx, t.shape[-1])
    x2 = x.reshape(-1, x.shape[-1])
    mag = np.empty(rows.size, np.float64)
    step = max(1, 2**20 // max(x.shape[-1], 1))  # gathered blocks of about 8 MB
    for lo in range(0, rows.size, step):
        r, c = rows[lo : lo + step], cols[lo : lo + step]
        ax = np.abs(x2[r].astype(np.float64))
        aw = np.abs(wk[c].astype(np.float64))
        mag[lo : lo + step] = np.einsum("pk,pk->p", ax, aw)
    k = x.shape[-1] + (b is not None)
    if b is not None:
        mag += np.abs(np.asarray(b, np.float64).reshape(-1)[cols])
    bound = mag * (2 * max(k - 1, 1) * U32) * scale
    tv, fv = t.reshape(-1, t.shape[-1])[rows, cols], f.reshape(-1, t.shape[-1])[rows, cols]
    if first_fmt is not None:
        bound = bound + _ulp(tv, first_fmt)
    return within(tv, fv, bound, fmt)


def within(t: np.ndarray, f: np.ndarray, bound: np.ndarray, fmt: str) -> tuple[bool, float]:
    """(every |t - f| <= bound + ulp, the bound in ulps of ``fmt`` at the largest ratio).

    One ulp of ``fmt`` at the larger of the two results is added: two values within ``bound``
    of each other before their final rounding to ``fmt`` are at most that much further apart.
    """
    t, f = np.asarray(t), np.asarray(f)
    if fmt in _MBITS and t.shape == f.shape == np.shape(bound) and t.size:
        return _within_buffers(t, f, np.asarray(bound, np.float64), fmt)
    t64, f64 = np.asarray(t, np.float64), np.asarray(f, np.float64)
    bound = bound + _ulp(np.maximum(np.abs(t64), np.abs(f64)), fmt)
    d = np.abs(t64 - f64)
    ok = bool(np.all((d <= bound) | (np.isnan(t) & np.isnan(f))))
    u = _ulp(np.maximum(np.abs(np.asarray(t, np.float64)), np.finfo(np.float32).tiny), fmt)
    return ok, float(np.max(bound / u)) if np.size(bound) else 0.0


def _ulp_into(a: np.ndarray, fmt: str, out: np.ndarray, e: np.ndarray) -> np.ndarray:
    """``_ulp(a, fmt)`` of a non-negative float64 array, computed in the buffers ``out``
    (float64) and ``e`` (int32): the same frexp and ldexp, no temporaries."""
    np.maximum(a, _TINY[fmt], out=out)
    np.frexp(out, out=(out, e))
    e -= 1 + _MBITS[fmt]
    with np.errstate(over="ignore"):
        np.ldexp(1.0, e, out=out)
    return out


def _within_buffers(t: np.ndarray, f: np.ndarray, bound: np.ndarray,
                    fmt: str) -> tuple[bool, float]:  # fmt: skip
    """``within`` for same-shaped arrays, in one reused work block: the same operations in the
    same order (every step is elementwise and correctly rounded, so the bits are the same),
    without the dozen large temporaries whose page faults cost more than the arithmetic."""
    n = t.size
    w = scratch(4 * n, np.float64).reshape(4, *t.shape)
    at, af, ul, b = w[0], w[1], w[2], w[3]
    e = scratch(n, np.int32).reshape(t.shape)
    np.copyto(at, t)
    np.copyto(af, f)
    np.subtract(at, af, out=b)
    d_ok = np.abs(b, out=b)  # |t - f|, compared below once the bound is known
    np.abs(at, out=at)
    np.abs(af, out=af)
    np.maximum(at, af, out=af)
    np.add(bound, _ulp_into(af, fmt, ul, e), out=af)  # af: the bound plus one ulp
    ok = bool(np.all((d_ok <= af) | (np.isnan(t) & np.isnan(f))))
    np.maximum(at, np.finfo(np.float32).tiny, out=at)
    np.divide(af, _ulp_into(at, fmt, ul, e), out=af)
    return ok, float(np.max(af))


def math_bound(op: str, x: np.ndarray, g: np.ndarray | None, *, out: str) -> np.ndarray:
    """Largest |difference| of two float32 evaluations of a transcendental ``op`` (forward, or
    backward with upstream gradient ``g``), elementwise: ``2 MATH_ULPS_F32 u M + ulp_out``.

    ``M`` bounds the magnitudes of the terms the formula adds, so cancellation is covered:
    GELU ``0.5 x (1 + erf(x/sqrt2))`` adds terms of size ``|x|``; its derivative
    ``Phi(x) + x phi(x)`` terms of size ``1 + |x|`` (tanh form: ``1 + |x| (1 + x^2)``);
    SiLU ``x s`` and ``s (1 + x (1 - s))``: ``|x|`` and ``1 + |x|``; tanh and sigmoid have no
    cancellation: ``1`` (their outputs and derivatives are at most 1 in size).
    """
    ax = np.abs(np.asarray(x, np.float64))
    if g is None:
        mag = ax if op in ("gelu", "gelu_erf", "silu") else np.ones_like(ax)
    else:
        deriv = {"gelu_erf": 1 + ax, "silu": 1 + ax, "gelu": 1 + ax * (1 + ax * ax)}
        mag = np.abs(np.asarray(g, np.float64)) * deriv.get(op, np.ones_like(ax))
    del out  # the rounding to the output format is added by within()
    return 2 * MATH_ULPS_F32 * U32 * mag


def op_bound_ulps(op: str, fmt: str, k: int) -> float | None:
    """A bound in ulps of ``fmt`` for a local difference of ``op`` (not a matmul), or None
    when the op is exact. ``k`` is the length of the reduced axis (reductions only)."""
    if op in EXACT_OPS:
        return None
    if fmt in LOW:  # float32 opmath rounded once more to the low format: one ulp either way
        return 1.0
    if op in MATH_OPS:
        return MATH_ULPS_F32
    if op in REDUCTION_OPS:  # positive sums of k terms: (k-1) u relative, per side, plus exp/log
        return 2.0 * (k + 4)
    return None


def explain_local(
    op: str, fmt: str, local_ulps: float, k: int, bound: tuple[bool, float] | None = None
) -> tuple[str, bool, float | None]:
    """(cause, explained, bound in ulps) for an op whose local recomputation differs by
    ``local_ulps``; ``bound`` is a matmul's ``within`` result."""
    if bound is not None:
        cause = "math library" if op in MATH_OPS else "reduction order"
        return cause, bound[0], bound[1]
    b = op_bound_ulps(op, fmt, k)
    if b is None:
        return "unexplained", False, None
    cause = "math library" if op in MATH_OPS else "reduction order"
    return cause, local_ulps <= b, b


def abs_sum(a: Any, axis: int = 0) -> np.ndarray:
    """Sum of absolute values along ``axis`` in float64."""
    return np.asarray(np.abs(np.asarray(a, np.float64)).sum(axis=axis))
