"""fpemu.arith: correctly rounded elementwise ops, proved against the exact oracle in reference/
and cross-checked with numpy float16/float32, ml_dtypes bfloat16 arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference.arith as ra
from fpemu import arith
from fpemu.bits import decode
from fpemu.formats import get_format
from fpemu.rounding import round as fround
from fpemu.testing.strategies import values
from tests.conftest import DET_MODES, spec_of
from tests.oracle import assert_same_bits

BINARY = ("add", "sub", "mul", "div")
ALL_OPS = (*BINARY, "sqrt", "fma")
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}


def oracle(op: str, fmt: str, mode: str, *cols: Any, **kw: Any) -> np.ndarray:
    """reference.arith.<op> on every element (the operands are broadcast first)."""
    spec = spec_of(fmt)
    fn = getattr(ra, op)
    arrs = [a.reshape(-1).tolist() for a in np.broadcast_arrays(*map(np.asarray, cols))]
    return np.array(
        [fn(*args, spec, mode, **kw) for args in zip(*arrs, strict=True)], dtype=np.float64
    )


def emulated(op: str, fmt: str, mode: str, *cols: Any, **kw: Any) -> np.ndarray:
    out = getattr(arith, op)(*cols, fmt=fmt, mode=mode, **kw)
    return np.asarray(out, dtype=np.float64).reshape(-1)


def codes_values(fmt: str) -> np.ndarray:
    f = get_format(fmt)
    return decode(np.arange(2**f.bits), fmt)


def all_pairs(fmt: str, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
    v = codes_values(fmt)
    x, y = np.meshgrid(v, v, indexing="ij")
    return x.reshape(-1)[::stride], y.reshape(-1)[::stride]


def finite_random(fmt: str, n: int, rng: np.random.Generator) -> np.ndarray:
    v = codes_values(fmt)
    v = v[np.isfinite(v)]
    return rng.choice(v, n)


def interesting(fmt: str, n: int, rng: np.random.Generator, arity: int) -> list[np.ndarray]:
    """Random codes (NaN, inf, subnormals included) plus ties, cancellations, overflow, tiny."""
    f = get_format(fmt)
    v = codes_values(fmt)
    if not f.has_inf:
        v = v[~np.isinf(v)]
    cols = [rng.choice(v, n) for _ in range(arity)]
    x = finite_random(fmt, n, rng)
    ulp = np.ldexp(1.0, np.maximum(np.frexp(np.abs(x))[1] - 1, f.emin) - f.mbits)
    sign = rng.choice([-1.0, 1.0], n)
    tiny = f.smallest_subnormal * rng.integers(1, 9, n)
    firsts = [x, x, x, np.full(n, f.max), tiny]
    seconds = [
        decode_round(sign * ulp / 2, fmt),  # ties (add/sub) where ulp/2 is representable
        -x,  # cancellation to a signed zero
        decode_round(-(x - np.sign(x) * ulp), fmt),  # cancellation to one ulp
        rng.choice([f.max, f.max / 2, float(ulp[0])], n),  # overflow
        rng.choice([1.0, 0.5, -tiny[0]], n) * rng.choice([1, 2**-8, 2**8], n),  # tiny results
    ]
    for first, second in zip(firsts, seconds, strict=True):
        more = [first, second] + [finite_random(fmt, n, rng) for _ in range(arity - 2)]
        cols = [np.concatenate([c, m]) for c, m in zip(cols, more[:arity], strict=True)]
    return cols


def decode_round(x: Any, fmt: str) -> np.ndarray:
    """Values of fmt next to x (the oracle rounds toward zero, independently of fpemu)."""
    spec = spec_of(fmt)
    return np.array([ra.mul(float(t), 1.0, spec, "rtz") for t in np.asarray(x).reshape(-1)])


def valid_for_oracle(fmt: str, cols: list[np.ndarray]) -> np.ndarray:
    f = get_format(fmt)
    ok = np.ones(cols[0].shape, bool)
    for c in cols:
        if not f.has_inf:
            ok &= ~np.isinf(c)
    return ok


# -- exhaustive float8 -------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("op", BINARY)
def test_float8_pairs_strided_rne(fmt: str, op: str) -> None:
    x, y = all_pairs(fmt, stride=7)
    assert_same_bits(emulated(op, fmt, "rne", x, y), oracle(op, fmt, "rne", x, y), x)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("mode", DET_MODES)
def test_float8_pairs_exhaustive(fmt: str, op: str, mode: str) -> None:
    x, y = all_pairs(fmt)
    assert_same_bits(emulated(op, fmt, mode, x, y), oracle(op, fmt, mode, x, y), x)


@pytest.mark.parametrize("fmt", ["float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
@pytest.mark.parametrize("mode", DET_MODES)
def test_small_formats_every_mode_sampled(fmt: str, mode: str) -> None:
    rng = np.random.default_rng(7)
    f = get_format(fmt)
    v = codes_values(fmt)
    v = v[np.isfinite(v)] if not f.has_nan else v[~np.isinf(v)] if not f.has_inf else v
    for op in ALL_OPS:
        cols = [rng.choice(v, 600) for _ in range(ARITY[op])]
        if not f.has_nan:  # results that would be NaN are refused by formats without NaN
            keep = ~np.isnan(np.asarray(_naive(op, *cols)))
            cols = [c[keep] for c in cols]
        want = oracle(op, fmt, mode, *cols)
        assert_same_bits(emulated(op, fmt, mode, *cols), want, cols[0])


def _naive(op: str, *c: np.ndarray) -> Any:
    with np.errstate(all="ignore"):
        if op == "sqrt":
            return np.sqrt(c[0])
        if op == "fma":
            return c[0] * c[1] + c[2]
        return getattr(
            np, {"add": "add", "sub": "subtract", "mul": "multiply", "div": "divide"}[op]
        )(c[0], c[1])


# -- fp16 / bf16 against the oracle ------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("mode", DET_MODES)
def test_16bit_sampled_vs_oracle(fmt: str, op: str, mode: str) -> None:
    rng = np.random.default_rng(hash((fmt, op, mode)) % 2**32)
    cols = interesting(fmt, 150, rng, ARITY[op])
    want = oracle(op, fmt, mode, *cols)
    assert_same_bits(emulated(op, fmt, mode, *cols), want, cols[0])


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", ALL_OPS)
def test_16bit_flush_and_saturate_vs_oracle(fmt: str, op: str) -> None:
    rng = np.random.default_rng(3)
    cols = interesting(fmt, 100, rng, ARITY[op])
    kw = {"subnormals": False, "overflow": "saturate"}
    want = oracle(op, fmt, "rne", *cols, **kw)
    assert_same_bits(emulated(op, fmt, "rne", *cols, **kw), want, cols[0])


@settings(max_examples=150)
@given(st.data())
def test_hypothesis_fma_add_vs_oracle(data: st.DataObject) -> None:
    fmt = data.draw(st.sampled_from(["float16", "bfloat16", "float8_e4m3fn"]))
    mode = data.draw(st.sampled_from(DET_MODES))
    allow_inf = get_format(fmt).has_inf
    x, y, z = (data.draw(values(fmt, allow_infinity=allow_inf)) for _ in range(3))
    spec = spec_of(fmt)
    for got, want in (
        (arith.fma(x, y, z, fmt=fmt, mode=mode), ra.fma(x, y, z, spec, mode)),
        (arith.add(x, z, fmt=fmt, mode=mode), ra.add(x, z, spec, mode)),
        (arith.div(x, z, fmt=fmt, mode=mode), ra.div(x, z, spec, mode)),
    ):
        assert_same_bits(got, want)


@pytest.mark.parametrize("fmt", ["float32", "tf32"])
@pytest.mark.parametrize("op", ALL_OPS)
@pytest.mark.parametrize("mode", ["rne", "rtz", "rup", "rto"])
def test_float32_tf32_vs_oracle(fmt: str, op: str, mode: str) -> None:
    rng = np.random.default_rng(11)
    n = 200
    f = get_format(fmt)
    cols = []
    for _ in range(ARITY[op]):
        bits = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        with np.errstate(invalid="ignore"):  # signalling NaN patterns
            v = bits.view(np.float32).astype(np.float64)
        v = np.asarray(decode_round(v, fmt)) if fmt == "tf32" else v
        v[: n // 4] = np.ldexp(rng.integers(1, 2**f.precision, n // 4), -f.mbits)  # near 1
        cols.append(v)
    if op in ("add", "sub", "fma"):  # far-apart magnitudes: the float64 sum alone is inexact
        cols[-1][n // 2 : 3 * n // 4] = np.ldexp(cols[-1][n // 2 : 3 * n // 4], -60)
    want = oracle(op, fmt, mode, *cols)
    assert_same_bits(emulated(op, fmt, mode, *cols), want, cols[0])


# -- cases where computing in float64 and rounding once more is wrong ----------------------------
DOUBLE_ROUNDING = [
    # (op, fmt, mode, operands): the float64 result lands on a tie or on the grid of fmt
    ("fma", "bfloat16", "rne", (3.0, 87.0, 2.0**-100)),  # 261 + tiny: naively ties to 260
    ("fma", "bfloat16", "rne", (3.0, 89.0, -(2.0**-100))),  # 267 - tiny: naively ties to 268
    ("fma", "float32", "rne", (24929.0, 673.0, 2.0**-60)),  # 2**24 + 1 + tiny
    ("fma", "float32", "rne", (-24929.0, 673.0, -(2.0**-60))),
    ("fma", "float16", "rne", (3.0, 683.0, 2.0**-60)),  # 2049 + tiny (z not an fp16 value)
    ("fma", "float16", "rup", (1.0, 1.0, 2.0**-60)),
    ("add", "float32", "rup", (1.0, 2.0**-100)),  # float64 swallows the tiny term
    ("add", "float32", "rtz", (1.0, -(2.0**-100))),
    ("add", "bfloat16", "rdown", (-1.0, -(2.0**-80))),
    ("sub", "float32", "rto", (1.0, 2.0**-90)),
    ("mul", "float32", "rtz", (3.0, 1.0 / 3.0)),  # 1 - 2**-54 ties to 1.0 in float64
    ("sqrt", "float32", "rup", (1.0 + 2.0**-52,)),  # 1 + 2**-53 - tiny rounds to 1.0
]


@pytest.mark.parametrize(("op", "fmt", "mode", "args"), DOUBLE_ROUNDING)
def test_naive_float64_would_double_round(op: str, fmt: str, mode: str, args: tuple) -> None:
    want = getattr(ra, op)(*args, spec_of(fmt), mode)
    naive = float(fround(np.float64(_naive(op, *map(np.float64, args))), fmt, mode=mode))
    assert naive != want, "the case has no teeth: naive float64 evaluation is already right"
    assert_same_bits(getattr(arith, op)(*args, fmt=fmt, mode=mode), want)


# -- arbitrary float64 operands (exact scalar path) ------------------------------------------------
@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("op", ALL_OPS)
def test_arbitrary_float64_operands(fmt: str, op: str) -> None:
    rng = np.random.default_rng(5)
    n = 60
    cols = []
    for _ in range(ARITY[op]):
        v = rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n))
        v[:6] = [0.1, -1e300, 1e-300, 5e-324, 1.7e308, -0.0]
        cols.append(v)
    for mode in ("rne", "rup", "rdown", "rto"):
        want = oracle(op, fmt, mode, *cols)
        assert_same_bits(emulated(op, fmt, mode, *cols), want, cols[0])


def test_float64_output_rne_matches_numpy_and_oracle() -> None:
    rng = np.random.default_rng(9)
    x, y, z = (rng.standard_normal(300) * np.exp2(rng.integers(-30, 30, 300)) for _ in range(3))
    x32 = x.astype(np.float32).astype(np.float64)
    for op, npop in (
        ("add", np.add),
        ("sub", np.subtract),
        ("mul", np.multiply),
        ("div", np.divide),
    ):
        assert_same_bits(getattr(arith, op)(x, y, fmt="float64"), npop(x, y))
    assert_same_bits(arith.sqrt(np.abs(x), fmt="float64"), np.sqrt(np.abs(x)))
    for fma_x in (x32, x):
        want = oracle("fma", "float64", "rne", fma_x, y, z)
        assert_same_bits(arith.fma(fma_x, y, z, fmt="float64"), want)


# -- cross-checks with arithmetic we did not write -------------------------------------------------
def _random_bits(dtype: Any, n: int, seed: int) -> np.ndarray:
    width = np.dtype(dtype).itemsize * 8
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2**width, n, dtype=np.uint64).astype(f"uint{width}").view(dtype)


@pytest.mark.parametrize(("dtype", "fmt"), [(np.float16, "float16"), (np.float32, "float32")])
def test_matches_numpy_hardware_arithmetic(dtype: Any, fmt: str) -> None:
    x, y = _random_bits(dtype, 50_000, 1), _random_bits(dtype, 50_000, 2)
    with np.errstate(all="ignore"):
        cases = {
            "add": x + y,
            "sub": x - y,
            "mul": x * y,
            "div": x / y,
            "sqrt": np.sqrt(x),
        }
    for op, want in cases.items():
        args = (x,) if op == "sqrt" else (x, y)
        got = getattr(arith, op)(*args, fmt=fmt)
        assert got.dtype == dtype
        assert_same_bits(got, want.astype(np.float64), x)


def test_matches_ml_dtypes_bfloat16() -> None:
    bf = ml_dtypes.bfloat16
    x, y = _random_bits(np.uint16, 50_000, 3).view(bf), _random_bits(np.uint16, 50_000, 4).view(bf)
    with np.errstate(all="ignore"):
        cases = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y}
        for op, want in cases.items():
            got = getattr(arith, op)(x, y, fmt="bfloat16")
            assert_same_bits(got, want.astype(np.float64), x.astype(np.float64))


def test_fp16_fma_matches_float64_evaluation() -> None:
    """fp16 x*y + z is exact in float64 whenever the result is in range (span <= 41 bits), and
    numpy's float64 -> float16 conversion rounds correctly: an independent fma for fp16."""
    x, y, z = (_random_bits(np.float16, 50_000, s) for s in (5, 6, 7))
    with np.errstate(all="ignore"):
        want = (x.astype(np.float64) * y + z.astype(np.float64)).astype(np.float16)
    assert_same_bits(arith.fma(x, y, z, fmt="fp16"), want.astype(np.float64), x)


# -- stochastic rounding ---------------------------------------------------------------------------
def test_stochastic_matches_oracle_with_same_uniforms() -> None:
    rng = np.random.default_rng(2)
    x, y = finite_random("float16", 3000, rng), finite_random("float16", 3000, rng)
    keep = np.abs(x * y) < 65504  # fpemu.round and the oracle disagree on stochastic overflow
    x, y = x[keep], y[keep]
    got = arith.mul(x, y, fmt="fp16", mode="stochastic", rng=np.random.default_rng(42))
    u = np.random.default_rng(42).random(x.size)
    spec = spec_of("float16")
    want = [
        ra.mul(a, b, spec, "stochastic", u=Fraction(t)) for a, b, t in zip(x, y, u, strict=True)
    ]
    assert_same_bits(got, want, x)


# -- zeros, specials, shapes, dtypes, errors ---------------------------------------------------
@pytest.mark.parametrize("mode", DET_MODES)
def test_signed_zero_rules(mode: str) -> None:
    spec = spec_of("float16")
    cases = [(1.0, -1.0), (-0.0, -0.0), (0.0, -0.0), (-0.0, 0.0), (2.0**-24, -(2.0**-24))]
    for x, y in cases:
        assert_same_bits(arith.add(x, y, fmt="fp16", mode=mode), ra.add(x, y, spec, mode))
        assert_same_bits(arith.sub(x, -y, fmt="fp16", mode=mode), ra.sub(x, -y, spec, mode))
        assert_same_bits(arith.fma(x, 1.0, y, fmt="fp16", mode=mode), ra.fma(x, 1.0, y, spec, mode))
    assert np.signbit(arith.add(1.0, -1.0, fmt="fp16", mode="rdown"))
    assert not np.signbit(arith.add(1.0, -1.0, fmt="fp16", mode="rup"))
    assert np.signbit(arith.sqrt(-0.0, fmt="bf16"))


def test_special_operands() -> None:
    inf, nan = np.inf, np.nan
    got = arith.div([1.0, -1.0, 0.0, inf, 1.0], [0.0, 0.0, 0.0, inf, -inf], fmt="fp16")
    assert_same_bits(got, [inf, -inf, nan, nan, -0.0])
    assert_same_bits(arith.fma([0.0, inf], [inf, 1.0], [1.0, -inf], fmt="bf16"), [nan, nan])
    assert_same_bits(arith.div(1.0, 0.0, fmt="e4m3"), nan)  # no inf in e4m3fn: overflow rule
    assert_same_bits(arith.add(448.0, 32.0, fmt="e4m3", overflow="saturate"), 448.0)


def test_broadcasting_and_dtypes() -> None:
    a = np.ones((3, 1), np.float16)
    b = np.arange(4, dtype=np.float16)
    r = arith.add(a, b, fmt="fp16")
    assert r.shape == (3, 4) and r.dtype == np.float16
    assert arith.mul(a, b, fmt="bf16").dtype == np.float32  # bf16 values do not fit float16
    assert arith.add(np.float32(1), 2, fmt="fp16").dtype == np.float64  # Python int: float64
    assert arith.add(np.ones(2, np.float32), np.ones(2, np.float32), fmt="fp32").dtype == np.float32
    assert isinstance(arith.add(1.0, 2.0, fmt="fp16"), np.float64)
    bf = np.ones(2, ml_dtypes.bfloat16)
    assert arith.add(bf, bf, fmt="bf16").dtype == np.float32
    assert arith.fma(np.ones((2, 1, 3)), np.ones((4, 1)), 1.0, fmt="e5m2").shape == (2, 4, 3)


def test_cast() -> None:
    x = np.array([1.0 + 2.0**-7, 300.0, -0.0, np.inf])
    assert_same_bits(arith.cast(x, "e5m2", from_fmt="bf16"), oracle("add", "e5m2", "rne", x, -0.0))
    assert_same_bits(arith.cast(x, "fp16", mode="rtz"), oracle("add", "fp16", "rtz", x, -0.0))
    with pytest.raises(ValueError, match=r"from_fmt=bfloat16"):
        arith.cast([0.1], "e4m3", from_fmt="bf16")
    with pytest.raises(ValueError, match=r"from_fmt=float8_e4m3fn"):
        arith.cast([np.inf], "fp16", from_fmt="e4m3")


def test_argument_errors() -> None:
    with pytest.raises(ValueError, match=r"fmt='fp12'"):
        arith.add(1.0, 2.0, fmt="fp12")
    with pytest.raises(ValueError, match=r"mode='nearest_odd'"):
        arith.add(1.0, 2.0, fmt="fp16", mode="nearest_odd")
    with pytest.raises(TypeError, match=r"\by\b.*dtype <U3"):
        arith.mul(1.0, "abc", fmt="fp16")
    with pytest.raises(ValueError, match=r"float64 supports only mode='rne'"):
        arith.add(1.0, 2.0, fmt="float64", mode="rtz")
    with pytest.raises(ValueError, match=r"rng"):
        arith.add(1.0, 2.0, fmt="fp16", mode="stochastic")
    with pytest.raises(ValueError, match=r"broadcast|shape"):
        arith.add(np.ones(3), np.ones(4), fmt="fp16")


def test_matches_torch_cpu_bfloat16_and_float16() -> None:
    torch = pytest.importorskip("torch")
    for fmt, tdt, npdt in (
        ("bfloat16", torch.bfloat16, ml_dtypes.bfloat16),
        ("float16", torch.float16, np.float16),
    ):
        xb, yb = _random_bits(np.uint16, 20_000, 8), _random_bits(np.uint16, 20_000, 9)
        x = torch.from_numpy(xb.view(np.int16)).view(tdt)
        y = torch.from_numpy(yb.view(np.int16)).view(tdt)
        with np.errstate(invalid="ignore"):  # signalling NaN patterns
            xs, ys = xb.view(npdt).astype(np.float64), yb.view(npdt).astype(np.float64)
        for op, want in (("add", x + y), ("sub", x - y), ("mul", x * y), ("div", x / y)):
            got = getattr(arith, op)(xs, ys, fmt=fmt)
            assert_same_bits(got, want.double().numpy(), xs)
        assert_same_bits(arith.sqrt(xs, fmt=fmt), torch.sqrt(x).double().numpy(), xs)


def _ro53_by_integers(v: Fraction) -> float:
    """Round-to-odd to 53 bits, by integer arithmetic (normal float64 range only)."""
    if v == 0:
        return 0.0
    sign, m = (-1 if v < 0 else 1), abs(v)
    e = m.numerator.bit_length() - m.denominator.bit_length() - 54
    while m / Fraction(2) ** e >= 2**53:
        e += 1
    q, r = divmod(m.numerator * 2 ** max(-e, 0), m.denominator * 2 ** max(e, 0))
    return sign * math.ldexp(q | (1 if r else 0), e)


def test_round_to_odd_matches_integer_definition() -> None:
    rng = np.random.default_rng(12)
    x = rng.standard_normal(3000) * np.exp2(rng.integers(-200, 200, 3000))
    y = rng.standard_normal(3000) * np.exp2(rng.integers(-200, 200, 3000))
    y[:500] = -x[:500] * (1 + rng.integers(-4, 4, 500) * 2.0**-52)  # cancellations
    y[500:600] = np.ldexp(1.0, np.frexp(x[500:600])[1] - 54)  # exact float64 ties
    hi = x + y
    lo = (x - (hi - (hi - x))) + (y - (hi - x))  # TwoSum
    got = arith.round_to_odd(hi, lo)
    want = [_ro53_by_integers(Fraction(a) + Fraction(b)) for a, b in zip(x, y, strict=True)]
    assert_same_bits(np.abs(got), np.abs(want), x)
