"""Domains of a verification campaign: which operand bit patterns are tried.

A domain is a frozen dataclass that numbers its cases ``0 .. size - 1`` and produces the
operand codes of any range of cases as unsigned integer arrays, deterministically: case ``k`` is
the same operands however the domain is cut into chunks, so a chunk can be recomputed anywhere
(another process, another machine, a rerun) and give the same result.

Codes are turned into values with :func:`values` (a bit view through NumPy's or ml_dtypes'
dtype), which is independent of fpemu's own decoding.

>>> d = AllPairs("e4m3fn")
>>> d.size, d.arity, chunk_bounds(d.size, 1, 4)
(65536, 2, (16384, 32768))
>>> [c.tolist() for c in d.cases(257, 260)]
[[1, 1, 1], [1, 2, 3]]
>>> values(np.array([0x3C00, 0x8000, 0x7C00], dtype=np.uint64), "fp16").tolist()
[1.0, -0.0, inf]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import ml_dtypes
import numpy as np
from numpy.typing import NDArray

from fpemu.formats import get_format

U64 = NDArray[np.uint64]
F64 = NDArray[np.float64]

_MASK64 = (1 << 64) - 1


@runtime_checkable
class Domain(Protocol):
    """What a campaign needs from a domain (all shipped domains are frozen dataclasses)."""

    @property
    def fmt(self) -> str:
        """Canonical name of the operands' format."""

    @property
    def arity(self) -> int:
        """Number of operands per case."""

    @property
    def size(self) -> int:
        """Number of cases."""

    def cases(self, lo: int, hi: int) -> tuple[U64, ...]:
        """Operand codes of cases ``lo .. hi - 1``, one array per operand."""

    def describe(self) -> str:
        """One line saying what the domain is."""


def chunk_bounds(size: int, i: int, n: int) -> tuple[int, int]:
    """Case range ``[lo, hi)`` of chunk ``i`` of ``n`` (sizes differ by at most one).

    >>> [chunk_bounds(10, i, 3) for i in range(3)]
    [(0, 3), (3, 6), (6, 10)]
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n={n!r} chunks: expected an int >= 1")
    if not isinstance(i, int) or not 0 <= i < n:
        raise ValueError(f"chunk i={i!r}: expected 0 <= i < n={n}")
    return size * i // n, size * (i + 1) // n


def storage(fmt: str) -> np.dtype[Any]:
    """The NumPy / ml_dtypes dtype whose bit patterns are those of ``fmt`` (a canonical name)."""
    name = get_format(fmt).name
    if name in ("float16", "float32", "float64"):
        return np.dtype(
            np.float16 if name == "float16" else np.float32 if name == "float32" else np.float64
        )
    if not hasattr(ml_dtypes, name):
        raise ValueError(f"format {name!r} has no ml_dtypes dtype; campaigns need one")
    dt: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
    return dt


def values(codes: Any, fmt: str) -> F64:
    """float64 values of bit patterns (a bit view, then an exact widening; no fpemu code)."""
    dt = storage(fmt)
    width = np.dtype(f"u{dt.itemsize}")
    with np.errstate(invalid="ignore"):  # signalling NaNs quietly become NaN
        out: F64 = np.asarray(codes).astype(width).view(dt).astype(np.float64)
    return out


def codes_of(x: Any, fmt: str) -> U64:
    """Bit patterns of float64 values that ``fmt`` represents exactly (ml_dtypes' cast)."""
    dt = storage(fmt)
    with np.errstate(invalid="ignore", over="ignore"):
        narrow = np.asarray(x, dtype=np.float64).astype(dt)
    out: U64 = narrow.view(f"u{dt.itemsize}").astype(np.uint64)
    return out


def _check_fmt(fmt: str, *, max_bits: int = 16) -> str:
    f = get_format(fmt)
    if f.bits > max_bits:
        raise ValueError(
            f"fmt={fmt!r} has {f.bits} bits; this domain takes formats of <= {max_bits} bits"
        )
    storage(f.name)
    return f.name


@dataclass(frozen=True)
class AllCodes:
    """Every bit pattern of a format of at most 16 bits (one operand).

    >>> AllCodes("bf16").size
    65536
    """

    fmt: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", _check_fmt(self.fmt))

    @property
    def arity(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return 1 << get_format(self.fmt).bits

    def cases(self, lo: int, hi: int) -> tuple[U64, ...]:
        return (np.arange(lo, hi, dtype=np.uint64),)

    def describe(self) -> str:
        return f"every {self.fmt} code ({self.size} cases)"


@dataclass(frozen=True)
class AllTuples:
    """Every tuple of ``arity`` codes of a format: pairs (``arity=2``) or triples (``3``).

    Case ``k`` holds the codes of its base-``2**bits`` digits, the first operand most significant.

    >>> AllTuples("e5m2", arity=3).size == 2**24
    True
    """

    fmt: str
    arity: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", _check_fmt(self.fmt))
        if self.arity not in (1, 2, 3):
            raise ValueError(f"arity={self.arity!r}: expected 1, 2 or 3")

    @property
    def size(self) -> int:
        return 1 << (get_format(self.fmt).bits * self.arity)

    def cases(self, lo: int, hi: int) -> tuple[U64, ...]:
        bits = np.uint64(get_format(self.fmt).bits)
        mask = np.uint64((1 << int(bits)) - 1)
        k = np.arange(lo, hi, dtype=np.uint64)
        out = []
        for j in range(self.arity):
            shift = np.uint64(int(bits) * (self.arity - 1 - j))
            out.append((k >> shift) & mask)
        return tuple(out)

    def describe(self) -> str:
        what = {1: "code", 2: "pair of codes", 3: "triple of codes"}[self.arity]
        return f"every {self.fmt} {what} ({self.size} cases)"


def AllPairs(fmt: str) -> AllTuples:
    """Every pair of codes of ``fmt`` (``AllTuples(fmt, 2)``)."""
    return AllTuples(fmt, 2)


@dataclass(frozen=True)
class Float32Patterns:
    """Every float32 bit pattern, ``0 .. 2**32 - 1`` (one operand, format float32)."""

    @property
    def fmt(self) -> str:
        return "float32"

    @property
    def arity(self) -> int:
        return 1

    @property
    def size(self) -> int:
        return 1 << 32

    def cases(self, lo: int, hi: int) -> tuple[U64, ...]:
        return (np.arange(lo, hi, dtype=np.uint64),)

    def describe(self) -> str:
        return f"every float32 bit pattern ({self.size} cases)"


def boundary_codes(fmt: str) -> U64:
    """TestFloat-style boundary operands: chosen exponent fields times chosen significands.

    Exponent fields: 0 (zero/subnormal), 1, 2, bias-1, bias, bias+1 (around 1.0), the two
    largest finite fields and all ones (inf/NaN); significands: 0, 1, 2, the middle and its
    neighbours, all ones and one less; both signs. Sorted, without repeats.

    >>> len(boundary_codes("fp16")), [hex(int(c)) for c in boundary_codes("e4m3fn")[:3]]
    (144, ['0x0', '0x1', '0x2'])
    """
    f = get_format(_check_fmt(fmt, max_bits=32))
    top = (1 << f.ebits) - 1
    exps = {0, 1, 2, f.bias - 1, f.bias, f.bias + 1, top - 2, top - 1, top}
    full = (1 << f.mbits) - 1
    mid = 1 << max(f.mbits - 1, 0)
    sigs = {0, 1, 2, mid - 1, mid, mid + 1, full - 1, full}
    out = {
        (s << (f.bits - 1)) | (e << f.mbits) | m
        for s in (0, 1)
        for e in exps
        if 0 <= e <= top
        for m in sigs
        if 0 <= m <= full
    }
    return np.array(sorted(out), dtype=np.uint64)


@dataclass(frozen=True)
class Boundary:
    """Every ``arity``-tuple of :func:`boundary_codes` (TestFloat's boundary generator idea).

    >>> Boundary("fp16", arity=3).size == 144**3
    True
    """

    fmt: str
    arity: int = 2

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", _check_fmt(self.fmt, max_bits=32))
        if self.arity not in (1, 2, 3):
            raise ValueError(f"arity={self.arity!r}: expected 1, 2 or 3")

    @property
    def size(self) -> int:
        n = int(boundary_codes(self.fmt).size)
        size: int = n**self.arity
        return size

    def cases(self, lo: int, hi: int) -> tuple[U64, ...]:
        table = boundary_codes(self.fmt)
        n = table.size
        k = np.arange(lo, hi, dtype=np.int64)
        out = []
        for j in range(self.arity):
            digit = (k // n ** (self.arity - 1 - j)) % n
            out.append(table[digit])
        return tuple(out)

    def describe(self) -> str:
        return f"{self.fmt} boundary operands, every {self.arity}-tuple ({self.size} cases)"


def _splitmix64(x: U64) -> U64:
    # SplitMix64 finaliser (Steele, Lea, Flood 2014): a bijective 64-bit hash; uint64 arrays wrap.
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    out: U64 = z ^ (z >> np.uint64(31))
    return out


@dataclass(frozen=True)
class RandomCodes:
    """``count`` cases of ``arity`` uniformly random codes, a pure function of ``seed`` and case.

    Operand ``j`` of case ``k`` is a hash of ``(seed, k, j)``, so any chunk is reproducible alone.

    >>> a = RandomCodes("fp16", arity=2, count=10, seed=1)
    >>> bool((a.cases(0, 10)[1][3:5] == a.cases(3, 5)[1]).all())
    True
    """

    fmt: str
    arity: int = 2
    count: int = 1_000_000
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt", _check_fmt(self.fmt, max_bits=32))
        if self.arity not in (1, 2, 3):
            raise ValueError(f"arity={self.arity!r}: expected 1, 2 or 3")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ValueError(f"count={self.count!r}: expected an int >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r}: expected an int >= 0")

    @property
    def size(self) -> int:
        return self.count

    def cases(self, lo: int, hi: int) -> tuple[U64, ...]:
        bits = get_format(self.fmt).bits
        k = np.arange(lo, hi, dtype=np.uint64)
        key = np.uint64(_splitmix64(np.array([self.seed], dtype=np.uint64))[0])
        out = []
        for j in range(self.arity):
            h = _splitmix64(k * np.uint64(self.arity) + np.uint64(j) + key)
            out.append(h >> np.uint64(64 - bits))
        return tuple(out)

    def describe(self) -> str:
        return f"{self.count} random {self.fmt} {self.arity}-tuples (seed {self.seed})"
