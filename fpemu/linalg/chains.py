"""The built-in accumulation models and the exact-chain engine that runs them.

``sequential``, ``pairwise``, ``blocked`` and ``fast`` (see :mod:`fpemu.linalg.ops` for their
definitions). The engine lays operands out for the k loop and, where the float32 hardware adder
is the exact step, runs whole chains inside NumPy's einsum (its loop order checked at first use).

>>> import numpy as np
>>> from fpemu.formats import get_format
>>> a = np.array([[1.0, 2.0**-11, 2.0**-11]]); b = np.ones((3, 1))
>>> h = get_format("fp16")
>>> float(sequential(a, b, None, fmt=h, acc=h, out=h)[0, 0])
1.0
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.arith import MAX_RO_PRECISION
from fpemu.backend import xp
from fpemu.formats import Format
from fpemu.linalg.registry import Model, register_model
from fpemu.linalg.step import (
    _F32,
    _check_exact_inputs,
    _fits_float32,
    _products_fit_float32,
    _reject_unknown,
    _Rounding,
    _rounding,
    _same_format,
    _step_options,
)
from fpemu.linalg.tiles import tileable

#: Default chunk length of the ``"blocked"`` model.
DEFAULT_BLOCK = 32
_ROW_BLOCK = 64  # output rows per pass: keeps the accumulator slice and products in L2
_K_BLOCK = 8  # products formed per multiply call (fewer, larger NumPy calls)
_TILE_BYTES = 32768  # output tile of an einsum chain: it stays in L1 for all k


def _zeros(a: Any, b: Any, c: Any) -> Any:
    np_ = xp(a)
    shape = (*a.shape[:-1], b.shape[-1])
    return np_.zeros(shape) if c is None else np_.array(c, dtype=np_.float64)


@dataclass(frozen=True)
class _Plan:
    """Operands laid out for the k loop, and which adder performs ``round_acc(s + p)``.

    ``fast32``: the products are exact float32 numbers and ``acc`` is IEEE float32 under
    round-to-nearest-even, so float32 hardware addition is the exact step (and a product needs
    no rounding). Otherwise everything is float64 and :meth:`_Rounding.add` is the step.
    """

    a_t: Any  # (..., K, M): a transposed, so that a[..., :, k] is contiguous
    b: Any  # (..., K, N)
    fast32: bool
    r: _Rounding
    #: Whether a zero product may be +0 whatever its sign: true on the fast32 path when ``c``
    #: holds no -0, because under round-to-nearest ``s`` then never is -0, and ``s + (+-0)``
    #: is ``s`` for every other ``s``.
    plus_zero_products: bool = False
    #: Whether NumPy's einsum may run whole chains (see :func:`_einsum_chains`): NumPy arrays,
    #: exact products, and the hardware adder of ``a_t.dtype`` is the step (fast32, or a float64
    #: accumulator, whose step is the float64 adder: see :meth:`_Rounding.add`).
    einsum: bool = False

    def product(self, k: int, rows: slice) -> Any:
        x, y = self.a_t[..., k, rows], self.b[..., k, :]
        if self.plus_zero_products:
            return xp(x).einsum("...r,...n->...rn", x, y)
        return x[..., None] * y[..., None, :]

    def products(self, k0: int, k1: int, rows: slice, buf: Any) -> Any:
        """``(..., k1 - k0, rows, N)`` products, into ``buf`` when its shape fits."""
        x, y = self.a_t[..., k0:k1, rows, None], self.b[..., k0:k1, None, :]
        shape = np.broadcast_shapes(x.shape, y.shape)
        if buf is None or buf.shape != shape:
            buf = xp(x).empty(shape, dtype=x.dtype)
        if self.plus_zero_products:  # einsum's outer product is 2x faster, but 0 + x*y
            return xp(x).einsum("...kr,...kn->...krn", x[..., 0], y[..., 0, :], out=buf)
        return xp(x).multiply(x, y, out=buf)

    def leaf(self, k: int, rows: slice) -> Any:
        """``round_acc(a[k] * b[k])``."""
        p = self.product(k, rows)
        return p if self.fast32 else self.r.round(p)

    def add(self, s: Any, p: Any) -> Any:
        """``round_acc(s + p)``, in place into ``s`` where the hardware does it."""
        if self.fast32:
            return np.add(s, p, out=s) if type(s) is np.ndarray else xp(s).add(s, p, out=s)
        return self.r.add(s, p)


def _plan(a: Any, b: Any, c: Any, fmt: Format, r: _Rounding, model: str) -> _Plan:
    _check_exact_inputs(fmt, model)
    np_ = xp(a)
    fast32 = r.ieee32_rne and _products_fit_float32(a, b, fmt)
    dt = np_.float32 if fast32 else np_.float64
    a_t = np_.ascontiguousarray(np_.swapaxes(a, -1, -2), dtype=dt)
    no_neg0 = c is None or not bool(((c == 0) & np_.signbit(c)).any())
    # float64 accumulator: products exact (and finite: |product| < 2**1024) in float64
    wide = r.fmt.precision > MAX_RO_PRECISION and 2 * (fmt.emax + 1) <= 1023
    einsum = (fast32 or wide) and np_ is np and _einsum_runs_in_k_order(np.dtype(dt).name)
    b_ = np_.ascontiguousarray(b, dtype=dt)
    if einsum and not (a_t.flags.aligned and b_.flags.aligned):  # else einsum would buffer
        a_t, b_ = a_t.copy(), b_.copy()
    return _Plan(a_t, b_, fast32, r, fast32 and no_neg0, einsum)


def _by_rows(a: Any, b: Any, c: Any, plan: _Plan, body: Callable[[_Plan, Any, slice], Any]) -> Any:
    """Run ``body(plan, s_rows, rows)`` on blocks of output rows (their working set fits L2).

    Returns the sums in ``plan.a_t.dtype``."""
    np_ = xp(a)
    s = np_.ascontiguousarray(_zeros(a, b, c), dtype=plan.a_t.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in builtins.range(0, s.shape[-2], _ROW_BLOCK):
            rows = slice(i, i + _ROW_BLOCK)
            s[..., rows, :] = body(plan, s[..., rows, :], rows)
    return s


def _einsum_chains(x_t: Any, y: Any, c: Any, k0: int, k1: int) -> Any:
    """``s[..., r, n]``: the chains ``s = s + x_t[..., k, r] * y[..., k, n]`` for k in [k0, k1),
    from ``s = c`` (or +0), in the dtype of ``x_t`` and ``y``, by NumPy's C einsum.

    ``einsum("kr,kn->rn", x, y, out=s)`` zero-fills ``s``, then for k (outermost), for r:
    ``s[r, :] = x[k, r] * y[k, :] + s[r, :]`` elementwise (``sum_of_products_muladd``): with the
    strides used here NumPy's iterator orders the axes n (inner), r, k (outer), so each element
    gets exactly the sequential chain, one hardware rounding (fused or not: the products are
    exact) per step. (With a single output element k becomes the inner, reduced axis, summed
    in SIMD lanes: callers exclude that case; a single output column is computed transposed, to
    keep the long axis inner.) The order is an implementation detail of NumPy, so
    :func:`_einsum_runs_in_k_order` checks it before use.

    ``c`` joins as a prefix of unit products: ``e_j * c[j, :]`` for j = 0, ..., R - 1 rebuilds
    ``c`` exactly from +0 when ``c`` is finite and holds no -0 (the caller checks), since then
    every added ``0 * c`` is a zero that changes nothing. Output rows go in tiles that stay in L1.
    """
    np_ = xp(x_t)
    M, N = x_t.shape[-1], y.shape[-1]
    if N == 1 and M > 1:  # products commute exactly: compute the transposed problem
        ct = None if c is None else np_.swapaxes(c, -1, -2)
        return np_.swapaxes(_einsum_chains(y, x_t, ct, k0, k1), -1, -2)
    s = np_.empty((*x_t.shape[:-2], M, N), dtype=x_t.dtype)
    step = max(1, _TILE_BYTES // (N * s.itemsize))
    for idx in np.ndindex(*x_t.shape[:-2]):
        x, yk, out = x_t[idx][k0:k1], y[idx][k0:k1], s[idx]
        if c is not None:  # [c rows of this tile; y[k0:k1]], c rows filled per tile
            yc = np_.empty((step + k1 - k0, N), dtype=s.dtype)
            yc[step:] = yk
        for i in builtins.range(0, M, step):
            rows = slice(i, i + step)
            if c is None:
                np_.einsum("kr,kn->rn", x[:, rows], yk, out=out[rows], optimize=False)
                continue
            r = min(step, M - i)
            yc[step - r : step] = c[idx][rows]
            xc = np_.concatenate([np_.eye(r, dtype=s.dtype), x[:, rows]])
            np_.einsum("kr,kn->rn", xc, yc[step - r :], out=out[rows], optimize=False)
    return s


@functools.cache
def _einsum_runs_in_k_order(dtype: str) -> bool:
    """Whether :func:`_einsum_chains` gives sequential chains in ``dtype`` (float32/float64).

    With ``big = 2**precision``, ``big + 1`` ties back to ``big`` and ``(big + 3) + 1`` to
    ``big + 4``: the exact chains ``big, 1, ..., 1, -big`` from 0 and from 3 end at 0 and 4,
    while sums in SIMD lanes, or any order that adds some ones before ``big``, end higher.
    """
    big = 2.0 ** (np.finfo(dtype).nmant + 1)
    col = np.array([big] + [1.0] * 9 + [-big], dtype=dtype)
    for m, n in ((2, 3), (1, 3), (3, 1), (20, 2)):
        x_t = np.ones((col.size, m), dtype=dtype)
        y = np.repeat(col[:, None], n, axis=1)
        for c, want in ((None, 0.0), (np.full((m, n), 3.0, dtype=dtype), 4.0)):
            got = _einsum_chains(x_t, y, c, 0, col.size)
            if got.shape != (m, n) or not bool((got == want).all()):
                return False
    return True


def _chain_body(k0: int, k1: int) -> Callable[[_Plan, Any, slice], Any]:
    """``s = round_acc(s + a[k] * b[k])`` for k in [k0, k1): products made _K_BLOCK at a time."""

    def body(plan: _Plan, s: Any, rows: slice) -> Any:
        buf = None
        for j0 in builtins.range(k0, k1, _K_BLOCK):
            j1 = min(k1, j0 + _K_BLOCK)
            buf = plan.products(j0, j1, rows, buf)
            for j in builtins.range(j1 - j0):
                s = plan.add(s, buf[..., j, :, :])
        return s

    return body


def _finish(s: Any, acc: Format, out: Format, r: _Rounding) -> Any:
    if _same_format(acc, out):
        return s
    fin = _rounding(
        out, arg="out", mode=r.mode, subnormals=r.subnormals, overflow=r.overflow, rng=r.rng
    )
    return fin.round(xp(s).asarray(s, dtype=xp(s).float64))


def _einsum_ok(plan: _Plan, a: Any, b: Any, c: Any) -> bool:
    """Whether :func:`_einsum_chains` computes the chains (from ``c``) of this plan."""
    if not plan.einsum or max(a.shape[-2], b.shape[-1]) < 2:  # one output: a reduction loop
        return False
    if c is None:
        return True
    np_ = xp(c)
    return bool(np_.isfinite(c).all()) and not bool(((c == 0) & np_.signbit(c)).any())


def _float64(s: Any) -> Any:
    return xp(s).asarray(s, dtype=xp(s).float64)


def _sequential(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    r, rest = _step_options(acc, dict(options), "sequential")
    _reject_unknown(rest, "sequential")
    plan = _plan(a, b, c, fmt, r, "sequential")
    if _einsum_ok(plan, a, b, c):
        with np.errstate(over="ignore", invalid="ignore"):
            s = _einsum_chains(plan.a_t, plan.b, c, 0, a.shape[-1])
    else:
        s = _by_rows(a, b, c, plan, _chain_body(0, a.shape[-1]))
    return _finish(s, acc, out, r)


def sequential(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    """FMA chain ``s = round_acc(s + a[k] * b[k])`` for k = 0, 1, ... from ``s = c`` (or +0).

    >>> import numpy as np
    >>> from fpemu.formats import get_format
    >>> f16 = get_format("fp16")
    >>> float(sequential(np.array([[1.0, 2.0**-11]]), np.ones((2, 1)), None,
    ...                  fmt=f16, acc=f16, out=f16)[0, 0])
    1.0
    """
    return _float64(_sequential(a, b, c, fmt=fmt, acc=acc, out=out, **options))


def _pairwise(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    r, rest = _step_options(acc, dict(options), "pairwise")
    _reject_unknown(rest, "pairwise")
    plan = _plan(a, b, c, fmt, r, "pairwise")
    K = a.shape[-1]
    # A subtree of 2 or 3 products is a chain (p0 + p1, and (p1 + p2) + p0 by commutativity),
    # which einsum runs from +0 instead of -0: zero signs inside the tree cannot reach the result
    # when c holds no -0 (see _Plan.plus_zero_products; round to nearest only).
    chains = plan.einsum and a.ndim == 2 and b.shape[-1] >= 2 and _einsum_ok(plan, a, b, c)

    def tree(plan: _Plan, lo: int, hi: int, rows: slice) -> Any:
        if chains and 2 <= hi - lo <= 3:  # the loop order of _einsum_chains, one call
            ks = slice(lo, hi) if hi - lo == 2 else [lo + 1, lo + 2, lo]
            x, y = plan.a_t[ks, rows], plan.b[ks]
            out = xp(x).empty((x.shape[1], y.shape[1]), dtype=x.dtype)
            return xp(x).einsum("kr,kn->rn", x, y, out=out, optimize=False)
        if hi - lo == 1:
            return plan.leaf(lo, rows)
        h = (hi - lo) // 2
        return plan.add(tree(plan, lo, lo + h, rows), tree(plan, lo + h, hi, rows))

    def body(plan: _Plan, s: Any, rows: slice) -> Any:
        return plan.add(s, tree(plan, 0, K, rows)) if K else s

    return _finish(_by_rows(a, b, c, plan, body), acc, out, r)


def pairwise(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    """Recursive halving: ``T(t) = round_acc(T(t[:h]) + T(t[h:]))``, ``h = len(t) // 2``.

    Leaves are the products rounded to ``acc``; the addend (or +0) joins last:
    ``round_acc(c + T(products))`` (so an all -0 tree gives +0 except under rdown).
    """
    return _float64(_pairwise(a, b, c, fmt=fmt, acc=acc, out=out, **options))


def _blocked(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    r, rest = _step_options(acc, dict(options), "blocked")
    block = rest.pop("block", DEFAULT_BLOCK)
    _reject_unknown(rest, "blocked")
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive int, got block={block!r}")
    plan = _plan(a, b, c, fmt, r, "blocked")
    K, step = a.shape[-1], int(block)
    if _einsum_ok(plan, a, b, None):  # each chunk's chains at once, then one add per chunk
        np_ = xp(a)
        s = np_.ascontiguousarray(_zeros(a, b, c), dtype=plan.a_t.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            for k0 in builtins.range(0, K, step):
                s = plan.add(s, _einsum_chains(plan.a_t, plan.b, None, k0, min(K, k0 + step)))
        return _finish(s, acc, out, r)

    def body(plan: _Plan, s: Any, rows: slice) -> Any:
        for k0 in builtins.range(0, K, step):
            part = _chain_body(k0, min(K, k0 + step))(plan, xp(s).zeros_like(s), rows)
            s = plan.add(s, part)
        return s

    return _finish(_by_rows(a, b, c, plan, body), acc, out, r)


def blocked(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    """Chunks of ``block`` products, each a sequential chain from +0, added in order to ``c``."""
    return _float64(_blocked(a, b, c, fmt=fmt, acc=acc, out=out, **options))


def _fast(a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any) -> Any:
    if not _same_format(acc, _F32):
        raise ValueError(f"model='fast' accumulates in float32 only, got acc={acc.name}")
    r, rest = _step_options(acc, dict(options), "fast")
    _reject_unknown(rest, "fast")
    if not r.ieee32_rne:
        raise ValueError(
            f"model='fast' is float32 hardware arithmetic: mode='rne' with default subnormals "
            f"and overflow only, got mode={r.mode.value!r}, subnormals={r.subnormals!r}, "
            f"overflow={r.overflow!r}"
        )
    if not _fits_float32(fmt):
        raise ValueError(f"model='fast' needs inputs that fit float32, got fmt={fmt.name}")
    np_ = xp(a)
    with np.errstate(over="ignore", invalid="ignore"):
        s = np_.matmul(_float32_operand(a), _float32_operand(b))
        if c is not None:
            s = s + np_.asarray(c, dtype=np_.float32)
    return _finish(s, acc, out, r)


def _float32_operand(x: Any) -> Any:
    """``x.astype(float32)`` (exact: ``x`` holds values of a format that fits float32), without
    the copy where ``x`` already is C-contiguous float32 (same layout, so the same BLAS calls)."""
    np_ = xp(x)
    return x if x.dtype == np_.float32 and x.flags.c_contiguous else x.astype(np_.float32)


def fast(a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any) -> Any:
    """Platform BLAS in float32 (order unspecified, not bit-reproducible); acc must be float32."""
    return _float64(_fast(a, b, c, fmt=fmt, acc=acc, out=out, **options))


#: The built-in models' implementations, used by :func:`matmul`: they also take float32
#: operands (values of ``fmt``) and return the accumulator's dtype (float32 or float64).
_NATIVE: dict[Model, Model] = {
    sequential: _sequential,
    pairwise: _pairwise,
    blocked: _blocked,
    fast: _fast,
}
# Independent outputs: matmul may split them over threads (not "fast": BLAS has its own).
for _fn in (sequential, pairwise, blocked, _sequential, _pairwise, _blocked):
    tileable(_fn)

register_model(
    "sequential",
    sequential,
    aliases=("seq", "fma_chain"),
    description="k = 0, 1, ...: one FMA (single rounding to acc) per product",
)
register_model(
    "pairwise",
    pairwise,
    aliases=("tree",),
    description="recursive halving tree, h = n // 2, one rounding per addition",
)
register_model(
    "blocked",
    blocked,
    aliases=("block", "chunked"),
    description="sequential chains of `block` products, chunk sums added in order",
)
register_model(
    "fast",
    fast,
    aliases=("blas",),
    description="numpy.matmul in float32 (BLAS order, not bit-reproducible)",
)
