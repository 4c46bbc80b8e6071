"""Exact results of dot products and matmuls, and the error of each accumulation model.

Every value of a binary format is an integer times a power of two, so the exact result of
``a @ b + c`` is an integer sum once everything is scaled by the smallest quantum involved:
:func:`exact_matmul` computes it with Python integers (no rounding anywhere). :func:`compare_models`
runs accumulation models of :mod:`fpemu.linalg` on the same inputs and measures their error
against it, in ulps of the output format and relative, beside the classic worst-case bound

    |computed - exact| <= gamma_n * (sum_k |a_k b_k| + |c|),   gamma_n = n u / (1 - n u),

where ``u`` is the accumulator's unit roundoff (``2**-p`` for round-to-nearest, ``2**(1-p)`` for
the other modes) and ``n`` the number of roundings on the longest path: ``K`` for sequential,
``ceil(log2 K) + 2`` for pairwise (product, tree, addend), ``block + ceil(K / block)`` for
blocked and ``K + 1`` for the BLAS order (any summation order obeys ``n = K + 1``). A different
output format adds its own rounding, ``u_out * |result|``.

Intended for teaching and testing: exact results cost one Python-integer multiply-add per
product, so keep ``M * N * K`` to about a million.

>>> import numpy as np
>>> a = np.array([[1.0] + [2.0**-12] * 8]); b = np.array([[1.0]] + [[2.0**-13]] * 8)
>>> # exact: 1 + 8 * 2**-25 = 1 + 2**-22; sequential drops every 2**-25, pairwise some
>>> for row in compare_models(a, b, fmt="fp16", acc="fp32", models=("sequential", "pairwise")):
...     print(row.model, float(row.result[0, 0]), row.max_ulp_error)
sequential 1.0 2.0
pairwise 1.0000001192092896 1.0
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from fpemu.formats import Format, FormatLike, get_format
from fpemu.linalg.chains import DEFAULT_BLOCK
from fpemu.linalg.ops import matmul
from fpemu.linalg.registry import get_model
from fpemu.rounding import RoundMode, get_mode
from fpemu.rounding import round as fround

#: Models compared by default.
DEFAULT_MODELS: tuple[str, ...] = ("sequential", "pairwise", "blocked", "fast")


@dataclass(frozen=True)
class ModelError:
    """The error of one accumulation model on one problem (maxima over the output elements)."""

    #: Model name, as given.
    model: str
    #: The model's result (float64 array, values of the output format).
    result: np.ndarray
    #: Largest ``|result - exact|``.
    max_abs_error: float
    #: Largest ``|result - exact|`` in ulps of the output format at the exact value.
    max_ulp_error: float
    #: Largest ``|result - exact| / |exact|`` (inf where exact is 0 and the result is not).
    max_rel_error: float
    #: Roundings on the longest path, the ``n`` of the bound.
    n: int
    #: The classic relative bound ``n * u`` of the accumulator.
    nu: float
    #: Largest ``|result - exact| / (gamma_n * (sum |a_k b_k| + |c|) + output rounding)``;
    #: at most 1 for a correctly implemented model (nan if the bound does not apply).
    bound_ratio: float


@dataclass(frozen=True)
class ExactResult:
    """Exact ``a @ b + c`` as integers ``value * 2**scale`` (object arrays of Python ints)."""

    #: Exact results, ``(..., M, N)`` Python ints, to be multiplied by ``2**scale``.
    value: np.ndarray
    #: ``sum_k |a_k b_k| + |c|``, same scaling.
    magnitude: np.ndarray
    #: The power of two of one integer unit.
    scale: int

    def fractions(self) -> np.ndarray:
        """The exact results as an object array of :class:`fractions.Fraction`."""
        unit = Fraction(2) ** self.scale
        out: np.ndarray = np.vectorize(lambda v: Fraction(v) * unit, otypes=[object])(self.value)
        return out

    def to_float(self) -> np.ndarray:
        """The exact results rounded to float64 (round-to-nearest-even, correctly rounded)."""
        unit = Fraction(2) ** self.scale
        out: np.ndarray = np.vectorize(lambda v: float(v * unit), otypes=[float])(self.value)
        return out


def exact_matmul(a: Any, b: Any, *, fmt: FormatLike = "float16", c: Any = None) -> ExactResult:
    """Exact ``round_fmt(a) @ round_fmt(b) + c`` (finite values; ``c`` taken as given).

    Args:
        a: ``(..., M, K)`` (or a vector), rounded to ``fmt`` (nearest-even) first, as
            :func:`fpemu.linalg.matmul` does.
        b: ``(..., K, N)`` (or a vector), rounded likewise.
        fmt: input format.
        c: optional finite addend broadcastable to the result, used exactly as given.

    Raises:
        ValueError: non-finite inputs (an exact value needs finite ones), shapes that disagree.

    >>> r = exact_matmul([[1.0, 2.0**-30]], [[1.0], [1.0]], fmt="fp32")
    >>> r.fractions()[0, 0] == 1 + Fraction(1, 2**30)
    True
    """
    f = get_format(fmt)
    A, B = _rounded("a", a, f), _rounded("b", b, f)
    A = A[None, :] if A.ndim == 1 else A
    B = B[:, None] if B.ndim == 1 else B
    if A.shape[-1] != B.shape[-2]:
        raise ValueError(f"a has shape {A.shape} and b has shape {B.shape}: K differs")
    C = None if c is None else np.asarray(c, dtype=np.float64)
    if C is not None and not np.isfinite(C).all():
        raise ValueError("c must be finite for an exact result")
    qa = f.emin - f.mbits  # every value of fmt is an integer times 2**qa
    qc = _quantum_exponent(C) if C is not None else 2 * qa
    scale = min(2 * qa, qc)
    Ai, Bi = _to_ints(A, qa), _to_ints(B, qa)
    shift = 2 * qa - scale
    value = np.matmul(Ai, Bi) * (1 << shift)
    magnitude = np.matmul(np.abs(Ai), np.abs(Bi)) * (1 << shift)
    if C is not None:
        Ci = _to_ints(C, scale)
        value, magnitude = value + Ci, magnitude + np.abs(Ci)
    return ExactResult(np.asarray(value, dtype=object), np.asarray(magnitude, dtype=object), scale)


def compare_models(
    a: Any,
    b: Any,
    *,
    fmt: FormatLike = "float16",
    acc: FormatLike = "float32",
    out: FormatLike | None = None,
    c: Any = None,
    models: Sequence[str] | None = None,
    **options: Any,
) -> list[ModelError]:
    """Run each model on ``a @ b (+ c)`` and measure its error against the exact result.

    Arguments are those of :func:`fpemu.linalg.matmul` (``c`` is rounded to ``acc`` for the
    models and the exact result uses the same rounded ``c``); ``options`` go to every model
    (``block`` only to models that take it). ``models=None`` compares :data:`DEFAULT_MODELS`
    (``"fast"`` only for a float32 accumulator).

    Returns:
        One :class:`ModelError` per model, in the order given.

    >>> import numpy as np
    >>> rows = compare_models(np.ones((2, 64)), np.full((64, 2), 0.1), acc="fp16")
    >>> [(r.model, r.bound_ratio <= 1) for r in rows[:3]]
    [('sequential', True), ('pairwise', True), ('blocked', True)]
    """
    fa = get_format(acc, arg="acc")
    fo = fa if out is None else get_format(out, arg="out")
    C = None if c is None else fround(np.asarray(c, dtype=np.float64), fa)
    exact = exact_matmul(a, b, fmt=fmt, c=C)
    K = np.asarray(a).shape[-1]
    mode = get_mode(options.get("mode", "rne"))
    if models is None:
        fp32 = _same(fa, get_format("float32"))
        models = [m for m in DEFAULT_MODELS if m != "fast" or fp32]
    rows = []
    for name in models:
        get_model(name)  # unknown names fail before any work
        opts = dict(options)
        if name not in ("blocked", "block", "chunked"):
            opts.pop("block", None)
        res = matmul(a, b, fmt=fmt, acc=fa, out=fo, c=C, model=name, **opts)
        n = _roundings(name, K, int(opts.get("block", DEFAULT_BLOCK)))
        rows.append(_measure(name, np.asarray(res, dtype=np.float64), exact, fa, fo, mode, n))
    return rows


def unit_roundoff(fmt: FormatLike, mode: str | RoundMode = "rne") -> float:
    """``u = 2**-p`` for round-to-nearest modes, ``2**(1-p)`` for the others.

    >>> unit_roundoff("fp16"), unit_roundoff("fp16", "rtz")
    (0.00048828125, 0.0009765625)
    """
    f = get_format(fmt)
    near = get_mode(mode) in (RoundMode.RNE, RoundMode.RNA)
    return math.ldexp(1.0, -f.precision if near else 1 - f.precision)


def _roundings(model: str, K: int, block: int) -> int:
    if model in ("sequential", "seq", "fma_chain"):
        return max(K, 1)
    if model in ("pairwise", "tree"):
        return math.ceil(math.log2(max(K, 1))) + 2
    if model in ("blocked", "block", "chunked"):
        return min(block, K) + math.ceil(K / block)
    return K + 1


def _measure(
    name: str, res: np.ndarray, exact: ExactResult, fa: Format, fo: Format, mode: RoundMode, n: int
) -> ModelError:
    u, u_out = unit_roundoff(fa, mode), unit_roundoff(fo, mode)
    gamma = n * u / (1 - n * u) if n * u < 1 else math.inf
    ex = exact.fractions()
    mag = np.vectorize(lambda v: Fraction(v) * Fraction(2) ** exact.scale, otypes=[object])(
        exact.magnitude
    )
    worst_abs = worst_ulp = worst_rel = worst_ratio = 0.0
    for r, e, m in zip(res.reshape(-1), ex.reshape(-1), mag.reshape(-1), strict=True):
        if not math.isfinite(r):
            worst_abs = worst_ulp = worst_rel = worst_ratio = math.inf
            continue
        err = abs(Fraction(r) - e)
        worst_abs = max(worst_abs, float(err))
        worst_ulp = max(worst_ulp, float(err / _ulp(e, fo)))
        worst_rel = max(worst_rel, float(err / abs(e)) if e else (math.inf if err else 0.0))
        if _same(fa, fo):
            bound = gamma * m
        else:
            bound = gamma * m + u_out * (abs(e) + gamma * m)
        worst_ratio = max(worst_ratio, float(err / bound) if bound else (math.inf if err else 0))
    return ModelError(name, res, worst_abs, worst_ulp, worst_rel, n, n * u, worst_ratio)


def _ulp(x: Fraction, f: Format) -> Fraction:
    if x == 0:
        e = f.emin
    else:
        num, den = abs(x.numerator), x.denominator
        e = num.bit_length() - den.bit_length()
        if Fraction(num, den) < Fraction(2) ** e:  # floor(log2 |x|) exactly
            e -= 1
        e = max(e, f.emin)
    return Fraction(2) ** (e - f.mbits)


def _same(f: Format, g: Format) -> bool:
    return (f.ebits, f.mbits, f.bias, f.specials) == (g.ebits, g.mbits, g.bias, g.specials)


def _rounded(name: str, v: Any, f: Format) -> np.ndarray:
    arr = np.asarray(v, dtype=np.float64)
    if arr.ndim == 0:
        raise ValueError(f"{name} must have at least one dimension")
    r = np.asarray(fround(arr, f), dtype=np.float64)
    if not np.isfinite(r).all():
        raise ValueError(f"{name} has values that are not finite in {f.name}: no exact result")
    return r


def _quantum_exponent(x: np.ndarray) -> int:
    """An exponent q with every element of x an integer multiple of 2**q."""
    nz = x[x != 0]
    if nz.size == 0:
        return 0
    _, e = np.frexp(nz)
    return int(e.min()) - 53


def _to_ints(x: np.ndarray, q: int) -> np.ndarray:
    """Elements of x as Python ints in units of 2**q (exact: x holds multiples of 2**q)."""
    flat = [int(Fraction(float(v)) / Fraction(2) ** q) for v in x.reshape(-1)]
    return np.array(flat, dtype=object).reshape(x.shape)
