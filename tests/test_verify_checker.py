"""The independent checker of fpemu.verify against the scalar oracle in reference/.

The checker is what fpemu's own campaigns trust, so it is proved on its own: on a sample of
boundary and random operands for every operation, format and mode, its results must equal the
oracle's bit for bit (NaN equals NaN).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import reference
from fpemu.verify.checker import MODES, Checker, exact_parts, round_exact
from fpemu.verify.domains import Boundary, RandomCodes, values

SPECS = {
    "float16": reference.FLOAT16,
    "bfloat16": reference.BFLOAT16,
    "float8_e4m3fn": reference.E4M3FN,
    "float8_e5m2": reference.E5M2,
}
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}
SAMPLE = 120  # cases per (op, format, mode) from each of two generators: the oracle is slow


def _bits_equal(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return np.float64(a).view(np.uint64) == np.float64(b).view(np.uint64)


def _sample(fmt: str, arity: int, seed: int) -> list[np.ndarray]:
    bnd = Boundary(fmt, arity)
    # boundary tuples spread over the whole product, plus random codes
    step = max(1, bnd.size // SAMPLE)
    ks = [bnd.cases(k, k + 1) for k in range(0, bnd.size, step)][:SAMPLE]
    b = [np.concatenate([k[j] for k in ks]) for j in range(arity)]
    r = RandomCodes(fmt, arity, SAMPLE, seed).cases(0, SAMPLE)
    return [values(np.concatenate([b[j], r[j]]), fmt) for j in range(arity)]


@pytest.mark.parametrize("fmt", list(SPECS))
@pytest.mark.parametrize("op", list(ARITY))
def test_checker_matches_oracle(op: str, fmt: str) -> None:
    spec = SPECS[fmt]
    xs = _sample(fmt, ARITY[op], seed=len(op) * 7 + len(fmt))
    oracle = getattr(reference, op)
    for mode in MODES:
        got = Checker(op, fmt, mode)(*xs)
        for i in range(got.size):
            args = [float(x[i]) for x in xs]
            want = oracle(*args, spec, mode)
            assert _bits_equal(float(got[i]), want), (op, fmt, mode, args, got[i], want)


@pytest.mark.parametrize("fmt", list(SPECS))
def test_cast_checker_matches_oracle(fmt: str) -> None:
    bnd = Boundary("float32", 1)
    codes = np.concatenate(
        [bnd.cases(0, bnd.size)[0], RandomCodes("float32", 1, 200, seed=9).cases(0, 200)[0]]
    )
    x = values(codes, "float32")
    for mode in MODES:
        got = Checker("cast", fmt, mode)(x)
        for i in range(x.size):
            want = reference.round_float(float(x[i]), SPECS[fmt], mode)
            assert _bits_equal(float(got[i]), want), (fmt, mode, x[i], got[i], want)


def test_round_exact_uses_the_sign_of_lo() -> None:
    """hi on a grid point or midpoint: lo decides (values checked against the oracle)."""
    one = np.array([1.0, 1.0, 1.0 + 2.0**-11, 1.0 + 2.0**-11, 2.0, 2.0**-14])
    lo = np.array([-(2.0**-60), 2.0**-60, 2.0**-60, -(2.0**-60), -(2.0**-70), -(2.0**-90)])
    for mode in MODES:
        got = round_exact(one, lo, "fp16", mode)
        for h, low, g in zip(one, lo, got, strict=True):
            want = reference.round_value(Fraction(h) + Fraction(low), reference.FLOAT16, mode)
            assert _bits_equal(float(g), float(want)), (mode, h, low, g, want)


def test_exact_parts_are_exact() -> None:
    xs = _sample("bfloat16", 3, seed=4)
    fin = np.isfinite(xs[0]) & np.isfinite(xs[1]) & np.isfinite(xs[2])
    a, b, c = (x[fin] for x in xs)
    hi, lo = exact_parts("fma", a, b, c)
    for i in range(a.size):
        z = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        assert Fraction(float(hi[i])) + Fraction(float(lo[i])) == z


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="mode='nearest'"):
        Checker("add", "fp16", "nearest")
    with pytest.raises(ValueError, match="op='pow'"):
        Checker("pow", "fp16")
    with pytest.raises(ValueError, match="mode='stochastic'"):
        round_exact(np.ones(1), np.zeros(1), "fp16", "stochastic")
    with pytest.raises(TypeError, match="takes 2 operands, got 1"):
        exact_parts("add", np.ones(1))
