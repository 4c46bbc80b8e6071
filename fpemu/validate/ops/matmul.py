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
``(1 - gamma_K)`` times the true one, which the bound divides out. The watch asks for the
bound only where torch's output differs from fpemu's value: ``m`` is then gathered element by
element where few are asked for, else it is the whole GEMM of magnitudes. bfloat16/float16
kernels may flush subnormals: :func:`_flushed` adds what that can lose. The GEMMs run in float32;
where an operand holds a float32 subnormal (float32 arithmetic handles those ~50x slower) it is
scaled by a power of two that makes every value normal and keeps every partial sum in range
(:func:`_scales`), and the result scaled back in float64, both exact; where no scale is safe
(an inf or NaN, or magnitudes near float32's largest) the GEMM runs in float64. The bound holds
either way. The kernel's result is then rounded once to the output dtype
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

from fpemu.validate.ops import Call, Out, exact, gather, lazy, register
from fpemu.validate.ops._exact import exact32
from fpemu.validate.ops._num import fmt, to
from fpemu.validate.ops._wide import has_subnormal, widen32_sub

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
    # the operands as float32 (exact) and whether each holds a subnormal of its own format,
    # a float32 subnormal but for float16 (its subnormals are normal float32 numbers)
    (a_, own_a), (b_, own_b) = _widened(a), _widened(b)
    sub_a, sub_b = own_a and a.dtype != np.float16, own_b and b.dtype != np.float16
    # float32 arithmetic on subnormal operands is ~50x slower on x86 (microcode assists; a
    # bfloat16 logits gradient holds thousands): such a GEMM runs on operands scaled by a power
    # of two that makes them normal (:func:`_scales`), or, where no scaling is safe, in float64
    # (there they are normal numbers); its value is then nearer the exact sum, and the bound
    # below still holds
    f64_in = np.float64 in (a.dtype, b.dtype)
    scales = _scales(a_, b_, sub_a, sub_b, k) if (sub_a or sub_b) and not f64_in else None
    wide: Any = np.float64 if f64_in or ((sub_a or sub_b) and scales is None) else np.float32
    u = U64 if f64_in else U32
    a_, b_ = a_.astype(wide, copy=False), b_.astype(wide, copy=False)
    if scales is not None:
        # exact: a power of two times a float32 that stays below 2**126 (see _scales); the
        # float32 GEMM of the scaled operands, widened and scaled back in float64 (exact), is
        # the float32 GEMM the bound assumes, with fewer underflows (the bound below reads the
        # unscaled a_ and b_)
        sa = a_ * np.float32(2.0 ** scales[0]) if scales[0] else a_
        sb = b_ * np.float32(2.0 ** scales[1]) if scales[1] else b_
        s = np.matmul(sa, sb).astype(np.float64)
        s *= 2.0 ** -(scales[0] + scales[1])
        wide = np.float64  # the center and the sums below: float64
    else:
        s = np.matmul(a_, b_)
    if alpha != 1.0:
        s *= wide(alpha)
    cw: np.ndarray | None = None
    if c is not None:
        cw = np.asarray(c).astype(wide) * wide(beta)
        s += cw
    value = to(s, name) if wide is np.float32 or name == "float64" else _to_low(s, name)
    # the factor is rounded up by 2**-20 to cover the one rounding of each product with it;
    # Higham's bound assumes no underflow: each of the K+3 roundings may also lose up to a
    # subnormal spacing of the accumulation format (and m * factor may flush to zero)
    fac = 2 * _gamma(k + 3, u) / (1 - _gamma(k, u)) * (1 + 2.0**-20)
    floor = (k + 3) * (2.0**-149 if u == U32 else 2.0**-1074)
    low = fmt(a) in _TINY or fmt(b) in _TINY
    # a subnormal of the operand's own format (float16's are normal float32 numbers)
    if fmt(a) == "float16":
        sub_a = own_a
    if fmt(b) == "float16":
        sub_b = own_b
    reason = (
        f"{what} summation order: float32 accumulation of K={k} products, two orders within "
        f"2 gamma_(K+3) sum|a b| (Higham 3.5), then one rounding to {name}"
    )
    shape = np.shape(s)
    cabs = None if cw is None else np.abs(cw)

    def bound(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(center, err)`` at flat output indices: sum|a||b| by gathered dot products where
        few elements are asked for (a 2-D product), else the whole GEMM of magnitudes."""
        by_rows = a_.ndim == 2 and b_.ndim == 2 and idx.size * _GATHER <= s.size
        aa = bb = None
        if not by_rows:  # (float64 where the value's operands were scaled: no subnormals)
            aa, bb = (np.abs(x.astype(wide, copy=False)) for x in (a_, b_))
        flush: Any = 0.0
        if low and not by_rows:  # without a subnormal operand, only the K + 3 flushed results
            flush = (
                _flushed(aa, bb, fmt(a), fmt(b), abs(alpha))
                if aa is not None and bb is not None and (sub_a or sub_b)
                else (k + 3) * 2.0**-126
            )
        with np.errstate(over="ignore"):
            if by_rows:
                i, j = np.divmod(idx, shape[-1])
                ga, gb = np.abs(a_[i].astype(np.float64)), np.abs(b_.T[j].astype(np.float64))
                mag = np.einsum("ik,ik->i", ga, gb)
                if low:  # _flushed's terms at these elements only, from the same rows
                    flush = _flushed_at(ga, gb, fmt(a) if sub_a else "", fmt(b) if sub_b else "",
                                        abs(alpha), k)  # fmt: skip
                if alpha != 1.0:
                    mag *= abs(alpha)
                if cabs is not None:
                    mag += gather(cabs, shape, idx)  # (not the whole broadcast array)
            else:
                assert aa is not None and bb is not None
                full = np.matmul(aa, bb)
                if alpha != 1.0:
                    full *= wide(abs(alpha))
                if cabs is not None:
                    full += cabs
                mag = np.asarray(full, np.float64).reshape(-1)[idx]
            err = mag * fac + floor
            if np.any(flush):
                if not (by_rows and np.ndim(flush)):  # a scalar, or the whole output's terms
                    flush = gather(flush, shape, idx)
                err = err + flush * (1 + 2.0**-20)
        return np.asarray(s).reshape(-1)[idx].astype(np.float64), err

    # A lower estimate of ``bound``'s err from the center alone: fpemu's GEMM lies within
    # gamma_(K+3) m + (K+3) 2**-149 of the exact sum (its accumulation is float32 or float64,
    # Higham 3.5 either way), so m >= (|center| - (K+3) 2**-149) / (1 + gamma_(K+3)) and
    # 2 gamma_(K+3) times that is at most ``bound``'s err (which is at least 2 gamma_(K+3) m:
    # its factor divides by 1 - gamma_K and rounds up). Where torch's value differs only by
    # where a midpoint fell, the center's own size admits it: the GEMM of magnitudes is then
    # needed only where the sum cancels.
    q = 2 * _gamma(k + 3, u) / (1 + _gamma(k + 3, U32)) * (1 - 2.0**-40)
    cfloor = (k + 3) * 2.0**-149

    def quick(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        c = np.asarray(s).reshape(-1)[idx].astype(np.float64)
        e = np.abs(c)  # max(|c| - cfloor, 0) * q, the same operations in place
        e -= cfloor
        np.maximum(e, 0.0, out=e)
        e *= q
        return c, e

    return lazy(value, bound, reason, quick=quick)


#: the scaled operands' largest possible partial sum, as a power of two: below float32's
#: 2**128 with a margin for the rounding of each partial sum (at most K of them)
_TOP = 124
#: the largest scale (a float32 power of two; 2**-149 times it is far into the normal range)
_CAP = 100


def _scales(a: np.ndarray, b: np.ndarray, sub_a: bool, sub_b: bool, k: int) -> Any:
    """Powers of two ``(ea, eb)`` by which float32 ``a`` and ``b`` (the one holding a subnormal,
    ``sub_a``/``sub_b``) are scaled so that every nonzero is a normal float32, while every
    product and partial sum of the scaled GEMM stays below ``2**_TOP``: ``max|a| 2**ea max|b|
    2**eb K < 2**_TOP``; None where that leaves a subnormal operand less than ``2**24``
    (its smallest subnormal, 2**-149, must reach 2**-125), or an operand is not finite (the
    caller then runs the GEMM in float64). The scaled operands are exact (powers of two of
    normal results), and so is the float64 scaling back; the largest scale up to ``2**_CAP``
    is taken, so that fewer products of the scaled operands are subnormal.

    >>> _scales(np.float32([[1.0, 1e-40]]), np.float32([[2.0], [1.0]]), True, False, 2)
    (100, 0)
    """
    amax = float(np.max(np.abs(a))) if a.size else 0.0
    bmax = float(np.max(np.abs(b))) if b.size else 0.0
    if not (np.isfinite(amax) and np.isfinite(bmax)):
        return None
    room = _TOP - math.ceil(math.log2(max(k, 1)))
    for m in (amax, bmax):
        if m > 0.0:
            room -= math.frexp(m)[1]  # m < 2**e
    if sub_a and sub_b:
        ea = eb = min(room // 2, _CAP)
    else:
        ea, eb = (min(room, _CAP), 0) if sub_a else (0, min(room, _CAP))
    if (sub_a and ea < 24) or (sub_b and eb < 24):
        return None
    return ea, eb


def _widened(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """``x`` as float32 (exact for the low formats and float32: :func:`widen32`, integer passes
    with ``astype``'s bits and layout) or float64 as it is, and ``_subnormal(x, own=True)``."""
    if fmt(x) in _FIELDS:
        return widen32_sub(x)
    return (x if x.dtype == np.float64 else x.astype(np.float32)), _subnormal(x, own=True)


#: the formats :func:`has_subnormal` reads
_FIELDS = ("bfloat16", "float16", "float32")
#: a lazy bound gathers sum|a||b| element by element (float64 dot products of gathered rows)
#: when it is asked for at most 1/_GATHER of the outputs, else one float32 GEMM of the
#: magnitudes: measured on a 512x128x512 product, 1,000 gathered elements cost about that GEMM
#: (~0.5 ms), 5,000 ten times it
_GATHER = 256


def _subnormal(x: np.ndarray, *, own: bool = False) -> bool:
    """Whether ``x`` holds a float32 subnormal (``own``: a subnormal of its own format), read
    from the bits: zero exponent fields that are not zeros (integer passes)."""
    name = fmt(x)
    if name == "float16" and not own:
        return False  # float16 values are normal float32 numbers
    if name not in _FIELDS or not x.size:
        return name == "float64" and _below(x, _F32_TINY)
    return has_subnormal(x)  # bfloat16's subnormals are float32's; float32's its own


def _below(x: np.ndarray, tiny: Any) -> bool:
    """Whether ``x`` holds a nonzero of magnitude below ``tiny`` (a subnormal, for ``tiny``
    the smallest normal of its format)."""
    if not x.size:
        return False
    m = np.abs(x)
    return bool(np.count_nonzero(m < tiny) != np.count_nonzero(m == 0))


_F32_TINY = np.float32(2.0**-126)


def _to_low(s: np.ndarray, name: str) -> np.ndarray:
    """A float64 GEMM's value in a 16-bit or float32 format: float32 first, then the 16-bit
    cast (a double rounding, harmless here: the judge bounds from the float64 center ``s``;
    only which elements it asks the bound for can change)."""
    return to(s.astype(np.float32), name)


#: the smallest normal of the low formats: oneDNN's bfloat16/float16 GEMMs (AVX512-BF16 dot
#: products) treat subnormal inputs as zero and flush subnormal float32 results (measured on
#: the bench GPT's backward: bfloat16 gradients near 1e-38 come back ~1% off, or 0)
_TINY = {"bfloat16": 2.0**-126, "float16": 2.0**-14}


def _flushed(aa: np.ndarray, bb: np.ndarray, fa: str, fb: str, alpha: float) -> Any:
    """What a kernel that flushes subnormals may lose, beyond Higham's bound: each of the
    K + 3 float32 results below 2**-126 (products and partial sums), and every term with a
    subnormal operand (``|a_ik| < tiny``: the term is at most ``|a_ik| |b_kj|``, so the lost
    sum is at most ``(sum of row i's subnormal |a|) max_k |b_kj|``, likewise for ``b``).
    ``aa``, ``bb``: the operands' magnitudes; a scalar unless an operand holds a subnormal."""
    out: Any = (aa.shape[-1] + 3) * 2.0**-126
    for x, name, axis in ((aa, fa, -1), (bb, fb, -2)):
        tiny = _TINY.get(name)
        # no subnormal: every magnitude below the smallest normal is a zero (cheap counts)
        if tiny is None or np.count_nonzero(x < tiny) == np.count_nonzero(x == 0):
            continue
        sub = np.sum(x * (x < tiny), axis=axis, keepdims=True, dtype=np.float64)
        if axis == -1:  # rows of a: (sum over k of subnormal |a_ik|) * max_k |b_kj|
            out = out + alpha * sub * np.max(bb, axis=-2, keepdims=True).astype(np.float64)
        else:
            out = out + alpha * np.max(aa, axis=-1, keepdims=True).astype(np.float64) * sub
    return out


def _flushed_at(ga: np.ndarray, gb: np.ndarray, fa: str, fb: str, alpha: float, k: int) -> Any:
    """:func:`_flushed` at some outputs, from their rows of ``|a|`` (``ga``) and columns of
    ``|b|`` (``gb``), one per output, as float64: the same numbers (the subnormal sums are
    exact in any order: at most K multiples of the format's subnormal spacing below its
    smallest normal; maxima and the products are taken as :func:`_flushed` takes them).
    ``fa``/``fb``: the operand's format where it holds a subnormal of it, else ""."""
    out: Any = (k + 3) * 2.0**-126
    tiny = _TINY.get(fa)
    if tiny is not None:
        sub = np.sum(ga * (ga < tiny), axis=-1, dtype=np.float64)
        out = out + alpha * sub * np.max(gb, axis=-1)
    tiny = _TINY.get(fb)
    if tiny is not None:
        sub = np.sum(gb * (gb < tiny), axis=-1, dtype=np.float64)
        out = out + alpha * np.max(ga, axis=-1) * sub
    return out


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


def _emulated(
    call: Call, a: np.ndarray, b: np.ndarray, c: Any, *, alpha: float, beta: float
) -> np.ndarray:
    from fpemu.linalg import matmul  # noqa: PLC0415 - the emulate path only

    name = call.out_dtypes[0]
    if alpha != 1.0 or beta not in (0.0, 1.0):
        raise ValueError(f"alpha={alpha}, beta={beta}: emulated GEMMs take alpha=1, beta in (0, 1)")
    src = fmt(a)
    c = None if c is None or beta == 0.0 else np.asarray(c)
    model = emulated_model(str(call.model), src)
    if model == "exact32":  # c in its own format: exact32 reads its precision from the dtype
        return to(exact32(a, b, c), name)
    cc = None if c is None else c.astype(np.float64)
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

    # squeezing keeps the flat order: a lazy bound's indices stay valid
    return Out(
        sq(out.value), out.exact, sq(out.center), sq(out.err), out.reason, out.bound, out.quick
    )
