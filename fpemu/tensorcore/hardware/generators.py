"""Test-case generators for the tensor-core cross-check: plain NumPy, no GPU needed.

Each generator makes ``P`` problems ``D = A @ B + C`` with ``A`` (P, 16, K), ``B`` (P, K, 8)
and ``C`` (P, 16, 8) as float64 values exactly representable in the input format (A, B) and
the accumulator format (C), built from random exponents and significands so no rounding is
involved. Each stresses one part of the fused block dot-add (``tensorcore.md`` section 2):

============  ==============================================================================
integers      small integers: every model gives the exact result; checks the fragment layout
uniform       values in [-1, 1]: the ordinary case, where block size and alignment width show
wide          exponents over the whole range that cannot overflow the accumulator
cancellation  product pairs that nearly cancel, or C = -(the products' sum rounded to FP32)
subnormal     subnormal inputs, and results in the accumulator's subnormal range where the
              formats allow it (bf16/tf32 into FP32, fp16 into FP16)
zeros         half the entries +-0; row 0 of A all -0 with C[0, 0] = -0 (IEEE would give -0)
specials      inf, -inf and NaN sprinkled into A, B and C
overflow      products and C near the accumulator's largest finite value, both signs
============  ==============================================================================

>>> import numpy as np
>>> cases = generate("integers", problems=2, fmt="bf16", acc="float32", k=16,
...                  rng=np.random.default_rng(0))
>>> cases.a.shape, cases.b.shape, cases.c.shape
((2, 16, 16), (2, 16, 8), (2, 16, 8))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from fpemu.formats import Format, FormatLike, get_format
from fpemu.rounding import round as fround

F64 = NDArray[np.float64]
M, N = 16, 8


@dataclass(frozen=True)
class Cases:
    """P problems: ``a`` (P, 16, K), ``b`` (P, K, 8), ``c`` (P, 16, 8), float64."""

    a: F64
    b: F64
    c: F64

    @property
    def problems(self) -> int:
        """Number of problems P."""
        return int(self.a.shape[0])


Shape = tuple[int, ...]
GeneratorFn = Callable[[np.random.Generator, int, Format, Format, int], Cases]


def values(
    rng: np.random.Generator,
    shape: Shape,
    f: Format,
    elo: int,
    ehi: int,
    *,
    subnormal: float = 0.0,
) -> F64:
    """Random values of ``f`` with exponents uniform in ``[elo, ehi]`` (clipped to the format).

    Significands are uniform over the format's fraction patterns and signs are random; a
    fraction ``subnormal`` of the entries are nonzero subnormals instead.

    >>> x = values(np.random.default_rng(1), (1000,), get_format("fp16"), -3, 3)
    >>> bool((fround(x, "fp16") == x).all()), float(np.abs(x).max()) < 16
    (True, True)
    """
    lo, hi = max(elo, f.emin), min(ehi, f.emax)
    if lo > hi:
        raise ValueError(f"empty exponent window [{elo}, {ehi}] for {f.name}")
    e = rng.integers(lo, hi + 1, size=shape)
    frac = rng.integers(0, 2**f.mbits, size=shape).astype(np.float64)
    x = np.ldexp(1.0 + frac / 2**f.mbits, e)
    if subnormal > 0 and f.subnormals and f.mbits > 0:
        sub = np.ldexp(rng.integers(1, 2**f.mbits, size=shape).astype(np.float64), f.emin - f.mbits)
        x = np.where(rng.random(shape) < subnormal, sub, x)
    sign: F64 = rng.choice(np.array([-1.0, 1.0]), size=shape)
    out: F64 = x * sign
    return out


def _shapes(problems: int, k: int) -> tuple[Shape, Shape, Shape]:
    return (problems, M, k), (problems, k, N), (problems, M, N)


def _integers(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    sa, sb, sc = _shapes(p, k)
    return Cases(
        rng.integers(-3, 4, sa).astype(np.float64),
        rng.integers(-3, 4, sb).astype(np.float64),
        rng.integers(-64, 65, sc).astype(np.float64),
    )


def _uniform(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    sa, sb, sc = _shapes(p, k)
    a, b, c = (rng.uniform(-1.0, 1.0, s) for s in (sa, sb, sc))
    return Cases(fround(a, f), fround(b, f), fround(c, acc))


def safe_exponent(f: Format, acc: Format, k: int) -> int:
    """Largest input exponent whose k products (and a C of the same size) cannot overflow ``acc``.

    >>> safe_exponent(get_format("bf16"), get_format("float32"), 16)
    60
    """
    # (k + 1) terms below 2**(2e + 2) each stay below 2**acc.emax * 1 when 2e + 2 + log2(k+1)
    # <= acc.emax.
    e = (acc.emax - 2 - int(np.ceil(np.log2(k + 1)))) // 2
    return min(e, f.emax)


def _wide(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    sa, sb, sc = _shapes(p, k)
    top = safe_exponent(f, acc, k)
    a, b = values(rng, sa, f, f.emin, top), values(rng, sb, f, f.emin, top)
    c = values(rng, sc, acc, acc.emin, min(2 * top + 1, acc.emax))
    return Cases(a, b, c)


def _cancellation(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    """Even problems: products in pairs x*y and (-x')*y with x' a neighbour of x; odd problems:
    C = -(sum of products) rounded to the accumulator (when that is finite)."""
    sa, sb, sc = _shapes(p, k)
    a, b = values(rng, sa, f, -4, 4), values(rng, sb, f, -4, 4)
    half = k // 2
    ae = a[0::2, :, :half]
    ulp = np.ldexp(1.0, np.frexp(ae)[1] - 1 - f.mbits)  # the spacing of a's binade
    step = rng.choice(np.array([-1.0, 0.0, 1.0]), size=ae.shape) * ulp
    a[0::2, :, half : 2 * half] = fround(-(ae + step), f)  # a neighbour of -a (or -a itself)
    b[0::2, half : 2 * half, :] = b[0::2, :half, :]
    c = np.zeros(sc)
    c[0::2] = fround(rng.uniform(-1.0, 1.0, c[0::2].shape) * 2.0**-12, acc)
    with np.errstate(over="ignore"):
        s = fround(np.matmul(a[1::2], b[1::2]), acc)  # near the exact sum: float64, then acc
    c[1::2] = np.where(np.isfinite(s), -s, 0.0)
    return Cases(a, b, c)


def _subnormal(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    sa, sb, sc = _shapes(p, k)
    a = values(rng, sa, f, f.emin, f.emin + 4, subnormal=0.5)
    # Aim products at the accumulator's subnormal range: a ~ 2**emin, so b ~ 2**(target - emin).
    lo, hi = acc.emin - acc.mbits + 2, acc.emin + 1
    elo, ehi = (min(max(e - f.emin, f.emin), f.emax) for e in (lo, hi))  # fp16 -> FP32: clamped
    b = values(rng, sb, f, elo, ehi, subnormal=0.25)
    c = values(rng, sc, acc, acc.emin, acc.emin + 2, subnormal=0.5)
    c[rng.random(sc) < 0.25] = 0.0
    # Every 4th problem: C = 0 and products below the smallest subnormal result, so that many
    # sums truncate (or round) to zero: the sign of such a zero is an open question (8.2).
    tgt = acc.emin - acc.mbits - 1 - (f.emin + 4)
    elo, ehi = (min(max(e, f.emin), f.emax) for e in (tgt - 6, tgt))
    b[3::4] = values(rng, b[3::4].shape, f, elo, ehi, subnormal=0.25)
    c[3::4] = 0.0
    return Cases(a, b, c)


def _zeros(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    base = _uniform(rng, p, f, acc, k)
    a, b, c = base.a.copy(), base.b.copy(), base.c.copy()
    for x in (a, b, c):
        zero = rng.random(x.shape) < 0.5
        x[zero] = rng.choice(np.array([-0.0, 0.0]), size=int(zero.sum()))
    a[:, 0, :] = -0.0  # row 0: every product with column 0 is -0 ...
    b[:, :, 0] = np.abs(b[:, :, 0])
    c[:, 0, 0] = -0.0  # ... and C is -0: the IEEE sum would be -0
    return Cases(a, b, c)


def _specials(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    base = _uniform(rng, p, f, acc, k)
    a, b, c = base.a.copy(), base.b.copy(), base.c.copy()
    pick = np.array([np.inf, -np.inf, np.nan])
    for x, rate in ((a, 1.0 / (M * k)), (b, 1.0 / (N * k)), (c, 1.0 / (M * N))):
        hit = rng.random(x.shape) < rate
        x[hit] = rng.choice(pick, size=int(hit.sum()))
    return Cases(a, b, c)


def _overflow(rng: np.random.Generator, p: int, f: Format, acc: Format, k: int) -> Cases:
    sa, sb, sc = _shapes(p, k)
    lo, hi = (min((acc.emax - d) // 2, f.emax) for d in (4, 0))  # products near 2**acc.emax
    a, b = values(rng, sa, f, lo, hi), values(rng, sb, f, lo, hi)
    c = values(rng, sc, acc, acc.emax - 2, acc.emax)
    return Cases(a, b, c)


@dataclass(frozen=True)
class Generator:
    """A named case generator (see the module docstring for what each one stresses)."""

    name: str
    fn: GeneratorFn
    description: str


#: Every generator, in the order the cross-check runs them (integers first: layout check).
GENERATORS: dict[str, Generator] = {
    g.name: g
    for g in (
        Generator("integers", _integers, "small integers: exact in every model (layout check)"),
        Generator("uniform", _uniform, "values in [-1, 1]"),
        Generator("wide", _wide, "exponents over the whole non-overflowing range"),
        Generator("cancellation", _cancellation, "nearly cancelling products, or C = -sum"),
        Generator("subnormal", _subnormal, "subnormal inputs and results"),
        Generator("zeros", _zeros, "+-0 entries; all-(-0) products with C = -0"),
        Generator("specials", _specials, "inf, -inf and NaN entries"),
        Generator("overflow", _overflow, "products and C near the largest finite value"),
    )
}


def generate(
    name: str,
    *,
    problems: int,
    fmt: FormatLike,
    acc: FormatLike,
    k: int,
    rng: np.random.Generator,
) -> Cases:
    """``problems`` cases from generator ``name`` for inputs in ``fmt`` and C in ``acc``.

    Args:
        name: a key of :data:`GENERATORS`.
        problems: number of 16 x 8 problems P (>= 1).
        fmt: input format of A and B.
        acc: accumulator format of C.
        k: K, the reduction length (>= 2, even).
        rng: the random source.

    Raises:
        ValueError: unknown generator, or bad ``problems``/``k``.
    """
    if name not in GENERATORS:
        raise ValueError(f"unknown generator {name!r}; accepted: {', '.join(GENERATORS)}")
    for arg, v in (("problems", problems), ("k", k)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{arg} must be a positive int, got {v!r}")
    if k % 2:
        raise ValueError(f"k must be even (pairs of products), got {k}")
    f, acc_f = get_format(fmt), get_format(acc, arg="acc")
    return GENERATORS[name].fn(rng, int(problems), f, acc_f, int(k))
