"""The matmul family: ``mm``, ``addmm``, ``bmm``, ``baddbmm``, ``mv``, ``dot`` (what ``linear``,
``matmul`` and ``einsum`` decompose to on the CPU).

**watch** (``call.model`` is None): torch's CPU GEMMs (MKL for float32, oneDNN for bfloat16 and
float16) accumulate in float32 in an order they do not specify, so the value is bounded. Any
float32 accumulation of ``K`` products plus ``c`` lies within ``gamma_{K+3} m`` of the exact
``s = beta c + alpha a b``, with ``m = |beta c| + |alpha| |a| |b|`` (Higham, *Accuracy and
Stability*, eq. 3.5; ``gamma_n = n u / (1 - n u)``, ``u = 2**-24``; the 3 covers the product
rounding, the ``+ c`` and the alpha/beta scalings). fpemu's own value ``v`` is a float32 BLAS
GEMM of the same operands (within ``gamma_{K+3} m`` of ``s`` by the same argument), so the
kernel's value before its final rounding lies within ``2 gamma_{K+3} m`` of ``v``; ``m`` itself
is a float32 GEMM of the absolute values, a sum of non-negative terms, at least
``(1 - gamma_K)`` times the true one, which the bound divides out. Only float32 BLAS calls: no
float64 GEMM in the hot path. The kernel's result is then rounded once to the output dtype
(measured on torch 2.13: bfloat16 ``addmm`` equals the correctly rounded ``c + a b`` on
64x256x32 random inputs, while rounding ``a b`` to bfloat16 before adding ``c`` differs in 530
of 2048 outputs).

**emulate** (``call.model`` names an accumulation model): the value is :func:`fpemu.matmul`
under that model, inputs in their own format, accumulation in float32, one rounding to the
output dtype; the result is exact by definition (it is what the emulated hardware computes).

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> a = np.float32([[1.0, 2.0]]); b = np.float32([[3.0], [4.0]])
>>> out = lookup("aten.mm.default")(Call("aten.mm.default", (a, b), {}, ("float32",)))[0]
>>> out.value.tolist(), out.exact
([[11.0]], False)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from fpemu.validate.ops import Call, Out, bounded, exact, register
from fpemu.validate.ops._num import fmt, to

__all__ = ["emulated_model", "exact32", "gemm"]

U32 = 2.0**-24
U64 = 2.0**-53


def _gamma(n: int, u: float) -> float:
    return n * u / (1.0 - n * u)


def gemm(
    call: Call,
    a: Any,
    b: Any,
    c: Any = None,
    *,
    alpha: float = 1.0,
    beta: float = 1.0,
    what: str = "GEMM",
) -> Out:
    """``beta c + alpha a @ b`` (``c`` may be None) as torch's CPU kernel computes it, judged to
    the float32-accumulation bound (watch) or under ``call.model`` (emulate)."""
    a, b = np.asarray(a), np.asarray(b)
    name = call.out_dtypes[0]
    k = a.shape[-1]
    if call.model is not None:
        return exact(_emulated(call, a, b, c, alpha=alpha, beta=beta))
    wide: Any = np.float64 if np.float64 in (a.dtype, b.dtype) else np.float32
    u = U64 if wide is np.float64 else U32
    a_, b_ = a.astype(wide, copy=False), b.astype(wide, copy=False)
    s = np.matmul(a_, b_)
    mag = np.matmul(np.abs(a_), np.abs(b_))
    if alpha != 1.0:
        s *= wide(alpha)
        mag *= wide(abs(alpha))
    if c is not None:
        cw: np.ndarray = np.asarray(c).astype(wide) * wide(beta)
        s += cw
        mag += np.abs(cw)
    factor = 2 * _gamma(k + 3, u) / (1 - _gamma(k, u))
    with np.errstate(over="ignore"):  # in mag's own dtype: the factor is rounded up by 2**-20
        err = mag * wide(factor * (1 + 2.0**-20))  # to cover that product's one rounding
        # Higham's bound assumes no underflow: each of the K+3 roundings may also lose up to a
        # subnormal spacing of the accumulation format (and mag * factor may flush to zero)
        err += wide((k + 3) * (2.0**-149 if wide is np.float32 else 2.0**-1074))
    reason = (
        f"{what} summation order: float32 accumulation of K={k} products, two orders within "
        f"2 gamma_(K+3) sum|a b| (Higham 3.5), then one rounding to {name}"
    )
    return bounded(to(s, name), err, reason, center=s)


#: models that take float32/float64 inputs (the ordered chains); a tensor-core model does not
_WIDE_OK = frozenset({"sequential", "pairwise", "blocked"})


def emulated_model(model: str, fmt_name: str) -> str:
    """The accumulation model ``emulate`` runs for ``model`` on inputs of ``fmt_name``.

    ``"fast"`` on float16/bfloat16/float32 inputs is ``"exact32"`` (:func:`exact32`: the exact
    sum rounded once to float32, the value every float32 BLAS order approximates, and the same
    bits on every CPU and thread count, which a BLAS result is not); on float64 inputs the FMA
    chain. A float32 or float64 GEMM under a model without such inputs (a tensor-core model)
    runs as CUDA cores run it with torch's default ``allow_tf32=False``: one FMA chain per
    output (``"sequential"``).

    >>> emulated_model("fast", "bfloat16"), emulated_model("h100", "float32")
    ('exact32', 'sequential')
    """
    wide = fmt_name in ("float32", "float64")
    if model == "fast":
        return "sequential" if fmt_name == "float64" else "exact32"
    if wide and model not in _WIDE_OK and not model.endswith(("f32.f32", "f64.f64")):
        return "sequential"
    return model


_BIG = 1 << 20  # the ulp exponent of a zero: no constraint


def _ulp_exp(x: np.ndarray, prec: int) -> np.ndarray:
    """Elementwise ``q`` such that ``x`` is a multiple of ``2**q`` (its ulp exponent for a
    format of ``prec`` bits: ``E - prec`` for ``x = f 2**E``; ``_BIG`` for zeros and inf)."""
    fin = np.isfinite(x) & (x != 0)
    _, e = np.frexp(np.where(fin, x, 1.0))
    return np.where(fin, e - prec, _BIG).astype(np.int64)


def _grid_exact(m: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Where every partial sum is exact in float64: terms on the grid ``2**q``, ``m`` (their
    magnitude sum) at most ``2**(53 + q)``; ``m > 0`` (zero sums are decided elsewhere)."""
    with np.errstate(over="ignore"):
        limit = np.ldexp(1.0, np.minimum(np.asarray(q) + 53, 1000).astype(np.int64))
    return np.asarray((m <= limit) & (m > 0))


def exact32(a: Any, b: Any, c: Any = None) -> np.ndarray:
    """``RN32(c + sum_k a[..., i, k] b[..., k, j])``: the exact sum rounded once to float32.

    ``a`` and ``b`` hold float32 values (float16, bfloat16, float32 data), so each product is
    exact in float64 (at most 48 significant bits, exponents within float64's range). A float64
    BLAS GEMM ``s`` of them lies within ``e = gamma_(K+1) m`` of the exact sum in any order
    (Higham 3.5, the products being exact; ``m = |c| + sum |a b|``). ``m`` is bounded from above
    by ``min(rowsum |a| colmax |b|, rowmax |a| colsum |b|)`` (no second GEMM; a looser bound
    only decides which elements are recomputed, not their values). Where ``RN32(s - e)`` and
    ``RN32(s + e)`` agree (the round-to-nearest map is monotone), that is the result whatever
    order BLAS took; elsewhere (a float32 rounding boundary within ``e``) ``s`` is still exact
    where every term is a multiple of ``2**q`` and ``m <= 2**(53 + q)`` (then every partial sum
    in any order is exact; ``q`` from the rows' and columns' smallest ulps); the rest is
    recomputed with :func:`math.fsum` (correctly rounded to float64; a float32 tie of that
    float64 value is broken by the sign of the exact residual). A sum that is exactly zero is +0
    (an accumulator from +0) unless ``c`` is -0 and every product is -0; a zero result is always
    decided exactly (a tiny negative sum rounds to -0), except a zero row or column, whose sum
    is ``c``. Non-finite results (inf/NaN inputs) come from NumPy's einsum without BLAS: IEEE
    sums of infinities and NaNs do not depend on the order (no finite float64 sum of these
    products overflows); NaN is float32's default NaN.

    >>> x = np.float32([[2.0**24, 1.0, 1.0]]); y = np.float32([[1.0], [1.0], [1.0]])
    >>> float(exact32(x, y)[0, 0]) == 2.0**24 + 2  # a float32 chain would give 2**24
    True
    """
    # contiguous operands: NumPy's matmul takes its BLAS path (strided batches do not)
    a32, b32 = np.ascontiguousarray(a, np.float32), np.ascontiguousarray(b, np.float32)
    a64, b64 = a32.astype(np.float64), b32.astype(np.float64)  # float32 values: exact
    k = a64.shape[-1]
    with np.errstate(over="ignore", invalid="ignore"):
        s = np.matmul(a64, b64)
        # m = sum_k |a_ik| |b_kj| <= min(rowsum_i colmax_j, rowmax_i colsum_j): no second GEMM
        # (a looser m only sends more elements to the exact path); a float64 sum of K
        # non-negative terms is at least (1 - gamma_K) times the exact one, a product (1 - u)
        aa, bb = np.abs(a64), np.abs(b64)
        up = 1.0 / ((1.0 - _gamma(k, U64)) * (1.0 - 2 * U64))
        m = (
            np.minimum(
                np.sum(aa, axis=-1, keepdims=True)
                * np.max(bb, axis=-2, keepdims=True, initial=0.0),
                np.max(aa, axis=-1, keepdims=True, initial=0.0)
                * np.sum(bb, axis=-2, keepdims=True),
            )
            * up
        )
    c64 = None if c is None else np.broadcast_to(np.asarray(c, np.float64), s.shape)
    if c64 is not None:
        s = s + c64
        m = (m + np.abs(c64)) * (1.0 + 2 * U64)  # the addition's rounding
    g = _gamma(k + 1, U64) * (1.0 + 4 * U64)  # and the rounding of m * g
    with np.errstate(over="ignore", invalid="ignore"):
        e = m * g + np.abs(s) * 2.0**-52  # + the rounding of s +- e itself
        lo, hi = (s - e).astype(np.float32), (s + e).astype(np.float32)
        out = s.astype(np.float32)
    finite = np.isfinite(s)
    redo = finite & ~(lo == hi)  # an infinite m (float32 overflow) gives lo = -inf, hi = inf
    # a zero row of a or column of b: every product is +-0, the sum is c, or +0 (-0 only if c
    # is -0 and every product -0: decided exactly); any other zero result: its sign, exactly
    zero = np.broadcast_to(
        ~np.any(a64 != 0, axis=-1, keepdims=True) | ~np.any(b64 != 0, axis=-2, keepdims=True),
        s.shape,
    )
    if c64 is not None:
        zero = zero & (c64 == 0)
    out[zero & finite] = np.float32(0.0)
    signs = finite & (out == 0) & ~zero  # zero signs: decided exactly, whatever the grid
    if c64 is not None:
        signs |= zero & np.signbit(c64)
    if redo.any():  # terms on a grid 2**q with m <= 2**(53 + q): s is exact in any order
        pa = {"bfloat16": 8, "float16": 11}.get(fmt(np.asarray(a)), 24)
        pb = {"bfloat16": 8, "float16": 11}.get(fmt(np.asarray(b)), 24)
        # the smallest ulp of a row (column) is the ulp of its smallest nonzero magnitude
        qa = _ulp_exp(np.min(np.abs(a32), axis=-1, keepdims=True, where=a32 != 0,
                             initial=np.inf), pa)  # fmt: skip
        qb = _ulp_exp(np.min(np.abs(b32), axis=-2, keepdims=True, where=b32 != 0,
                             initial=np.inf), pb)  # fmt: skip
        idx = np.nonzero(redo)
        q = np.broadcast_to(qa + qb, s.shape)[idx]
        if c64 is not None:
            _, ec = np.frexp(c64[idx])
            q = np.minimum(q, np.where(c64[idx] != 0, ec - 24, _BIG))
        exact = _grid_exact(m[idx], q)
        redo[tuple(x[exact] for x in idx)] = False
    if not finite.all():
        with np.errstate(over="ignore", invalid="ignore"):
            s_ieee = np.einsum("...mk,...kn->...mn", a64, b64, optimize=False)
            if c64 is not None:
                s_ieee = s_ieee + c64
        bad = ~finite
        out[bad] = np.where(np.isnan(s_ieee[bad]), np.float32(np.nan), s_ieee[bad])
    redo |= signs
    if redo.any():
        out[redo] = _exact_rows(a64, b64, c64, redo)
    return np.asarray(out, np.float32)


def _exact_rows(a64: np.ndarray, b64: np.ndarray, c64: Any, redo: np.ndarray) -> np.ndarray:
    """RN32 of the exact sums at the ``redo`` elements (see :func:`exact32`), in their order."""
    idx = np.nonzero(redo)
    bt, i, j = idx[:-2], idx[-2], idx[-1]
    ab = np.broadcast_to(a64, (*redo.shape[:-1], a64.shape[-1]))
    bb = np.broadcast_to(b64, (*redo.shape[:-2], b64.shape[-2], redo.shape[-1]))
    terms = ab[(*bt, i)] * np.swapaxes(bb, -1, -2)[(*bt, j)]  # (n, K) exact products
    if c64 is not None:
        terms = np.concatenate([terms, np.asarray(c64)[idx][:, None]], axis=1)
    rows = terms.tolist()
    f = np.array([math.fsum(r) for r in rows], np.float64)  # RN64 of each exact sum
    with np.errstate(over="ignore"):  # beyond float32: RN gives inf
        v = f.astype(np.float32)
    down = np.where(v.astype(np.float64) <= f, v, np.nextafter(v, np.float32(-np.inf)))
    up = np.where(v.astype(np.float64) >= f, v, np.nextafter(v, np.float32(np.inf)))
    with np.errstate(invalid="ignore"):
        tie = (down != up) & (f - down.astype(np.float64) == up.astype(np.float64) - f)
    for n in np.flatnonzero(tie):  # f is a float32 tie: the exact residual's sign decides
        r = math.fsum([*rows[n], -f[n]])
        if r != 0.0:
            v[n] = up[n] if r > 0 else down[n]
    for n in np.flatnonzero(f == 0.0):  # exact zero: +0 unless every term (c included) is -0
        neg = c64 is not None and all(t == 0 and math.copysign(1.0, t) < 0 for t in rows[n])
        v[n] = np.float32(-0.0 if neg else 0.0)
    return v


def _emulated(
    call: Call, a: np.ndarray, b: np.ndarray, c: Any, *, alpha: float, beta: float
) -> np.ndarray:
    from fpemu.linalg import matmul  # noqa: PLC0415 - the emulate path only

    name = call.out_dtypes[0]
    if alpha != 1.0 or beta not in (0.0, 1.0):
        raise ValueError(f"alpha={alpha}, beta={beta}: emulated GEMMs take alpha=1, beta in (0, 1)")
    src = fmt(a)
    cc = None if c is None or beta == 0.0 else np.asarray(c).astype(np.float64)
    model = emulated_model(str(call.model), src)
    if model == "exact32":
        return to(exact32(a, b, cc), name)
    # float32 views of the operands are exact (float16/bfloat16/float32 values); matmul skips
    # its float64 widening for them
    wide = np.float64 if src == "float64" else np.float32
    r = matmul(
        a.astype(wide, copy=False),
        b.astype(wide, copy=False),
        fmt=src,
        acc="float64" if src == "float64" else "float32",
        out=name,
        c=cc,
        model=model,
    )
    return to(np.asarray(r), name)


@register("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(call: Call) -> Sequence[Out | None]:
    return [gemm(call, call.args[0], call.args[1])]


@register("aten.addmm.default", "aten.baddbmm.default")
def _addmm(call: Call) -> Sequence[Out | None]:
    beta, alpha = call.kwargs.get("beta", 1.0), call.kwargs.get("alpha", 1.0)
    c = None if beta == 0 else call.args[0]
    return [gemm(call, call.args[1], call.args[2], c, alpha=alpha, beta=beta)]


@register("aten.mv.default")
def _mv(call: Call) -> Sequence[Out | None]:
    v = np.asarray(call.args[1])
    out = gemm(call, call.args[0], v[:, None], what="GEMV")
    return [_squeezed(out)]


@register("aten.dot.default")
def _dot(call: Call) -> Sequence[Out | None]:
    a, b = np.asarray(call.args[0]), np.asarray(call.args[1])
    return [_squeezed(gemm(call, a[None, :], b[:, None], what="dot"), axes=(0, 1))]


def _squeezed(out: Out, axes: tuple[int, ...] = (-1,)) -> Out:
    def sq(x: Any) -> Any:
        return None if x is None else np.squeeze(np.asarray(x), axis=axes) if np.ndim(x) else x

    return Out(sq(out.value), out.exact, sq(out.center), sq(out.err), out.reason)
