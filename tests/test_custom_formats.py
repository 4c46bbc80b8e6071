"""fpemu.round and fpemu.arith on custom formats across the whole space :class:`Format` allows.

The other test files use the named formats and a narrow Hypothesis strategy (ebits 2..8, mbits
<= 12, biases near the standard one). Here a deterministic grid and a Hypothesis strategy reach
the rest: ebits 1..11, mbits up to 52, biases from negative (smallest subnormal above 1) to
the two extremes (emax = 1023, emin - mbits = -1074), every specials convention, subnormals on
and off, every rounding mode, every overflow option and both input dtypes, compared bit for bit
with the exact oracle in ``reference/``. The reproducers of issue 11 item 4 come first.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import reference
import reference.arith as ra
from fpemu import arith
from fpemu.formats import Format
from fpemu.rounding import round as fround
from tests.conftest import DET_MODES, spec_of
from tests.oracle import assert_same_bits

ALL_MODES = [*DET_MODES, "stochastic"]
SPECIALS = ("ieee", "fn", "fnuz", "finite")
EBITS = (1, 2, 3, 5, 8, 11)
MBITS = (0, 1, 2, 7, 22, 23, 40, 52)
F64_MAX = float(np.finfo(np.float64).max)
SEED = 20261123

E11M2 = Format("e11m2", ebits=11, mbits=2, bias=1023)
E11M40 = Format("e11m40", ebits=11, mbits=40, bias=1023)
E5M2_NEG = Format("e5m2nb", ebits=5, mbits=2, bias=-10)  # smallest subnormal 2**9 = 512
E8M22 = Format("e8m22", ebits=8, mbits=22, bias=127)


def oracle(x: Any, f: Format, mode: str = "rne", **kw: Any) -> np.ndarray:
    """reference.round_float on every element (``u``: one uniform per element, for stochastic)."""
    spec = spec_of(f, subnormals=kw.pop("subnormals", None))
    u = kw.pop("u", None)
    pts = np.asarray(x, dtype=np.float64).reshape(-1)
    us = [None] * pts.size if u is None else [Fraction(float(t)) for t in u]
    return np.array(
        [
            reference.round_float(float(p), spec, mode, u=t, **kw)
            for p, t in zip(pts, us, strict=True)
        ]
    )


# -- (1) the reproducers of issue 11 item 4 -------------------------------------------------------
def test_rne_near_float64_top_with_few_fraction_bits() -> None:
    # 1e300 lies in binade 996; the quantum there is 2**994 and 1e300 / 2**994 = 5.97...:
    # the nearest multiple is 6, so the result is 6 * 2**994 = 0x1.8p+996 (checked below)
    got = fround(1e300, E11M2)
    assert Fraction(1e300) / 2**994 - 6 < Fraction(1, 2) and float(got) == float.fromhex(
        "0x1.8p+996"
    )
    assert_same_bits(got, oracle([1e300], E11M2))
    # max = 1.75 * 2**1023 = 0x1.cp+1023 is a value of the format: it rounds to itself
    assert E11M2.max == float.fromhex("0x1.cp+1023")
    assert_same_bits(fround(E11M2.max, E11M2), [E11M2.max])
    assert_same_bits(fround(E11M2.max, E11M2), oracle([E11M2.max], E11M2))
    # -DBL_MAX = -(2**1024 - 2**971) is within 2**971 of -2**1024; quantum 2**1021: rounds to
    # -8 * 2**1021 = -2**1024 > max in magnitude, so rne overflows to -inf
    assert Fraction(F64_MAX) == 2**1024 - 2**971
    assert_same_bits(fround(-F64_MAX, E11M2), [-math.inf])
    assert_same_bits(fround(-F64_MAX, E11M2), oracle([-F64_MAX], E11M2))


def test_mul_overflow_beyond_float64_in_a_wide_format() -> None:
    # the exact product -2**1200 exceeds max (< 2**1024): rne and rna both overflow to -inf
    x, y = -(2.0**600), 2.0**600
    for mode in ("rne", "rna"):
        want = ra.mul(x, y, spec_of(E11M40), mode)
        assert want == -math.inf
        assert_same_bits(arith.mul(x, y, fmt=E11M40, mode=mode), [want])


def test_directed_modes_keep_the_sticky_bit_when_the_quantum_exceeds_one() -> None:
    # smallest subnormal 2**(emin - mbits) = 2**(11 - 2) = 512: any positive x rounds up to it
    assert E5M2_NEG.smallest_subnormal == 512.0
    for mode in ("rup", "rto"):
        assert_same_bits(fround(5e-324, E5M2_NEG, mode=mode), [512.0])
        assert_same_bits(fround(5e-324, E5M2_NEG, mode=mode), oracle([5e-324], E5M2_NEG, mode))
    for mode in ("rdown", "rto"):
        assert_same_bits(fround(-5e-324, E5M2_NEG, mode=mode), [-512.0])
        assert_same_bits(fround(-5e-324, E5M2_NEG, mode=mode), oracle([-5e-324], E5M2_NEG, mode))


def test_float32_nan_overflow_with_22_fraction_bits() -> None:
    # h.max = (2**23 - 1) * 2**105 = 0x1.fffffcp+127 is a value of h: no overflow, no NaN
    assert Fraction(E8M22.max) == (2**23 - 1) * 2**105
    got = fround(np.float32(E8M22.max), E8M22, overflow="nan")
    assert got.dtype == np.float32
    assert_same_bits(got, [E8M22.max])
    assert_same_bits(got, oracle([E8M22.max], E8M22, overflow="nan"))


def test_float32_input_to_a_format_wider_than_float32_is_refused() -> None:
    with pytest.raises(ValueError, match="float32 cannot hold"):
        fround(np.float32(np.inf), E11M40, overflow="saturate")
    with pytest.raises(ValueError, match="float32 cannot hold"):
        fround(np.array([1.0, 2.0], dtype=np.float32), "float64")


# -- (2) the grid ----------------------------------------------------------------------------------
def bias_choices(ebits: int, mbits: int, specials: str) -> dict[str, int]:
    """Named biases: negative, zero, standard, both extremes and the edges of the fast paths."""
    top = reference.Spec(ebits, mbits, 0, specials).emax  # emax at bias 0, by the oracle's rule
    return {
        "emax=1023": top - 1023,  # the smallest bias float64 allows
        "emin-mbits=-1074": 1075 - mbits,  # the largest
        "standard": 2 ** (ebits - 1) - 1,
        "zero": 0,
        "negative": -3,
        "quantum>1": -mbits - 3,  # emin - mbits = 4: every value is a multiple of 16
        "emax-mbits=970": top - 970 - mbits,  # float64 K trick: last format it serves
        "emax-mbits=971": top - 971 - mbits,
        "emin=-1022": 1023,
        "emin=-1023": 1024,
        "emax=127": top - 127,  # float32's range
        "emin-mbits=-149": 150 - mbits,
        "emax-mbits=103": top - 103 - mbits,  # float32 K trick
        "emax-mbits=104": top - 104 - mbits,
        "emin=-126": 127,
        "emin=-127": 128,
    }


def _make(e: int, m: int, b: int, sp: str, sub: bool) -> Format | None:
    try:
        return Format(f"e{e}m{m}b{b}{sp}{'' if sub else '-nosub'}", e, m, b, sp, sub)  # type: ignore[arg-type]
    except ValueError:
        return None


@lru_cache(maxsize=1)
def grid() -> tuple[list[Format], list[Format]]:
    """(full grid, default subset): every valid format of EBITS x MBITS x SPECIALS x biases x
    subnormals; the subset keeps one format per (ebits, mbits, specials), its bias taken in turn
    from emax = 1023, emin - mbits = -1074 and the other named biases, the subnormal flag
    alternating."""
    full: list[Format] = []
    small: list[Format] = []
    turn = 0
    for e in EBITS:
        for m in MBITS:
            for sp in SPECIALS:
                try:
                    named = bias_choices(e, m, sp)
                except ValueError:  # no such format (ieee with ebits 1)
                    continue
                for b in sorted(set(named.values())):
                    for sub in (True, False):
                        f = _make(e, m, b, sp, sub)
                        if f is not None:
                            full.append(f)
                names = list(named)
                extremes, others = names[:2], names[2:]
                order = [extremes[turn % 3]] if turn % 3 < 2 else []
                order += [others[(turn // 3 + k) % len(others)] for k in range(len(others))]
                for name in order:  # the first valid one
                    f = _make(e, m, named[name], sp, (turn // 2) % 2 == 0)
                    if f is not None:
                        small.append(f)
                        turn += 1
                        break
    return full, small


def fits_float32(f: Format) -> bool:
    """Every value of f is a float32 (from the oracle's exact constants)."""
    spec = spec_of(f, subnormals=True)
    return (
        f.mbits <= 23
        and spec.max <= reference.FLOAT32.max
        and spec.smallest_subnormal >= reference.FLOAT32.smallest_subnormal
    )


def _exact(v: Fraction) -> float | None:
    try:
        x = float(v)
    except OverflowError:
        return None
    return x if Fraction(x) == v else None


def targeted_points(f: Format, n_random: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(all points, points near the top): every boundary of f, its float64 neighbours, tiny and
    huge float64 values, signed zeros, infinities, NaN (if f has it), and a seeded sample."""
    spec = spec_of(f, subnormals=True)  # subnormal sizes matter to the flush too
    mx, top_q = spec.max, reference.spec.pow2(spec.emax - spec.mbits)
    s, tiny = spec.smallest_subnormal, spec.tiny
    top = [mx, mx - top_q / 2, mx + top_q / 2, mx + top_q, 2 * mx, mx - top_q]
    low = [s, s / 2, 3 * s / 2, s / 4, 3 * s / 4, tiny, tiny - s / 2, tiny + s / 2]
    exact_top = [x for x in map(_exact, top) if x is not None] + [F64_MAX, 1e300]
    exact_low = [x for x in map(_exact, low) if x is not None]
    fixed = [1.0, 1 / 3, 5e-324, 1e-320, 2.0**-1022, 1e-300, 0.0]
    base = np.array(exact_top + exact_low + fixed)
    with np.errstate(over="ignore"):
        base = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf)])
    rng = np.random.default_rng(seed)
    lo, hi = max(spec.emin - spec.mbits - 3, -1074), min(spec.emax + 2, 1023)
    rand = np.ldexp(1 + rng.random(n_random), rng.integers(lo, hi + 1, n_random))
    bits = rng.integers(0, 2**63, n_random // 2, dtype=np.uint64).view(np.float64)
    pos = np.concatenate([base, rand, bits[np.isfinite(bits)], [np.inf]])
    pts = np.concatenate([pos, -pos, [np.nan] if f.has_nan else []])
    with np.errstate(over="ignore"):
        near = np.array([*exact_top, np.inf])
        near = np.concatenate([near, np.nextafter(near, np.inf), np.nextafter(near, -np.inf)])
    return pts, np.concatenate([near, -near])


def overflows(f: Format) -> list[str]:
    return [
        o
        for o in ("inf", "nan", "saturate")
        if (o != "inf" or f.has_inf) and (o != "nan" or f.has_nan)
    ]


def check_round(
    f: Format, x: np.ndarray, mode: str, overflow: str | None, cache: dict[Any, float], **kw: Any
) -> None:
    """fpemu.round of x (float64, and float32 when f allows it) against the oracle, bit for bit.

    ``cache`` holds oracle results of deterministic modes (float32 inputs repeat float64 ones).
    """
    dtypes = [np.float64, np.float32] if fits_float32(f) else [np.float64]
    for dt in dtypes:
        with np.errstate(over="ignore"):
            xs = x.astype(dt)
        extra: dict[str, Any] = {}
        if mode == "stochastic":
            extra = {
                "rng": np.random.default_rng(SEED),
                "u": np.random.default_rng(SEED).random(xs.size),
            }
        u = extra.pop("u", None)
        got = fround(xs, f, mode=mode, overflow=overflow, **kw, **extra)
        assert got.dtype == dt, (f, mode, overflow, dt)
        if u is None:
            keys = [(float(a).hex(), mode, overflow, kw.get("subnormals")) for a in xs]
            todo = [k for k in dict.fromkeys(keys) if k not in cache]
            todo_x = np.array([float.fromhex(k[0]) for k in todo])
            cache.update(zip(todo, oracle(todo_x, f, mode, overflow=overflow, **kw), strict=True))
            want = np.array([cache[k] for k in keys])
        else:
            want = oracle(xs, f, mode, overflow=overflow, u=u, **kw)
        try:
            assert_same_bits(got, want, xs)
        except AssertionError as err:
            raise AssertionError(
                f"{f} mode={mode} overflow={overflow} {kw} dtype={dt.__name__}: {err}"
            ) from None


def _seed(f: Format) -> int:  # deterministic (str hashes are salted per process)
    return f.ebits * 10**9 + f.mbits * 10**7 + (f.bias + 2**21) * 8 + SPECIALS.index(f.specials)


def run_format(f: Format, n_random: int) -> None:
    """Every mode with the format's default overflow on all points; the other overflow options on
    the points near the top (elsewhere they cannot matter); the other subnormal flag; refusals."""
    pts, near = targeted_points(f, n_random, _seed(f))
    valid = pts if f.has_nan else pts[~np.isnan(pts)]  # NaN input: refused below
    cache: dict[Any, float] = {}
    for mode in ALL_MODES:
        check_round(f, valid, mode, None, cache)
        for ovf in overflows(f):
            check_round(f, near, mode, ovf, cache)
    for mode in ("rne", "rup", "rdown"):
        check_round(f, valid, mode, None, cache, subnormals=not f.subnormals)
    if not fits_float32(f):
        with pytest.raises(ValueError, match="float32 cannot hold"):
            fround(np.ones(2, dtype=np.float32), f)
    if not f.has_nan:
        with pytest.raises(ValueError, match="NaN"):
            fround(np.array([1.0, np.nan]), f)
    for bad in {"inf", "nan"} - set(overflows(f)):
        with pytest.raises(ValueError, match=f"overflow='{bad}'"):
            fround(1.0, f, overflow=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("f", grid()[1], ids=str)
def test_grid_round_vs_oracle(f: Format) -> None:
    run_format(f, n_random=6)


@pytest.mark.slow
@pytest.mark.parametrize("f", grid()[0], ids=str)
def test_full_grid_round_vs_oracle(f: Format) -> None:
    run_format(f, n_random=60)


def test_grid_reaches_the_space() -> None:
    full, small = grid()
    for fs in (full, small):
        assert {f.ebits for f in fs} == set(EBITS)
        assert {f.mbits for f in fs} == set(MBITS)
        assert {f.specials for f in fs} == set(SPECIALS)
        assert {f.subnormals for f in fs} == {True, False}
        assert any(f.emax == 1023 for f in fs) and any(f.emin - f.mbits == -1074 for f in fs)
        assert any(f.bias < 0 for f in fs) and any(f.emin - f.mbits > 0 for f in fs)
        assert any(fits_float32(f) for f in fs) and not all(fits_float32(f) for f in fs)


# -- arithmetic on custom formats ---------------------------------------------------------------
ARITY = {"add": 2, "sub": 2, "mul": 2, "div": 2, "sqrt": 1, "fma": 3}


def arith_operands(f: Format, rng: np.random.Generator) -> np.ndarray:
    """Values at the extremes of f and of float64, and a sample from f's range."""
    spec = spec_of(f, subnormals=True)
    s, mx = float(spec.smallest_subnormal), float(spec.max)
    v = [mx, mx / 2, s, 3 * s, float(spec.tiny), 1.0, 1.5, 1 / 3, 2.0**600, 2.0**-600, F64_MAX,
         5e-324, 2.0**-537, 3 * 2.0**-538, 5 * 2.0**-538, 0.0]  # fmt: skip
    v += [np.inf] if f.has_inf else []
    lo, hi = max(spec.emin - spec.mbits, -1074), min(spec.emax, 1023)
    r = np.ldexp(1 + rng.random(6), rng.integers(lo, hi + 1, 6))
    w = np.concatenate([v, r])
    return np.concatenate([w, -w])


def check_arith(f: Format, n: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    v = arith_operands(f, rng)
    spec = spec_of(f)
    for op, arity in ARITY.items():
        cols = [rng.choice(v, n) for _ in range(arity)]
        for mode in DET_MODES:
            for ovf in overflows(f):
                want, keep = [], []
                for i in range(n):
                    try:
                        want.append(
                            getattr(ra, op)(*(float(c[i]) for c in cols), spec, mode, overflow=ovf)
                        )
                    except ValueError:  # NaN result in a format without NaN: fpemu refuses too
                        continue
                    keep.append(i)
                got = getattr(arith, op)(*(c[keep] for c in cols), fmt=f, mode=mode, overflow=ovf)
                try:
                    assert_same_bits(got, want)
                except AssertionError as err:
                    rows = [[float(c[k]).hex() for c in cols] for k in keep]
                    raise AssertionError(
                        f"{op} {f} mode={mode} overflow={ovf}: {err}\n{rows[:4]}"
                    ) from None


def _arith_formats(fs: list[Format]) -> list[Format]:
    return [f for f in fs if f.precision <= arith.MAX_RO_PRECISION]


@pytest.mark.parametrize("f", _arith_formats(grid()[1])[::4], ids=str)
def test_grid_arith_vs_oracle(f: Format) -> None:
    check_arith(f, n=8, seed=f.ebits * 100 + f.mbits)


@pytest.mark.slow
@pytest.mark.parametrize("f", _arith_formats(grid()[0]), ids=str)
def test_full_grid_arith_vs_oracle(f: Format) -> None:
    check_arith(f, n=40, seed=f.ebits * 100 + f.mbits)


# Extremes by hand, each against the oracle: overflow past float64's top, underflow to the
# smallest subnormal in the directed modes, huge and negative biases.
E11M50_TOP = Format("e11m50", ebits=11, mbits=50, bias=1023)
E11M30_BOTTOM = Format("e11m30_bottom", ebits=11, mbits=30, bias=1044)  # emin - mbits = -1073
E11M40_FLOOR = Format("e11m40_floor", ebits=11, mbits=40, bias=1035, specials="finite")  # -1074
E3M1_NEG = Format("e3m1_neg", ebits=3, mbits=1, bias=-20, specials="fnuz")  # values >= 2**20


@pytest.mark.parametrize(
    ("op", "args", "f"),
    [
        ("mul", (2.0**600, 2.0**600), E11M50_TOP),
        ("mul", (-(2.0**1000), 1.5), E11M50_TOP),
        ("add", (F64_MAX, F64_MAX), E11M50_TOP),
        ("fma", (2.0**1000, 2.0**23, -(2.0**1023)), E11M50_TOP),
        ("div", (F64_MAX, 2.0**-10), E11M50_TOP),
        ("fma", (2.0**1000, 2.0**100, -math.inf), E11M50_TOP),  # x * y overflows float64
        ("fma", (2.0**1000, 2.0**100, math.inf), E11M50_TOP),
        ("mul", (2.0**-537, 2.0**-537), E11M30_BOTTOM),
        ("mul", (2.0**-537, 5 * 2.0**-540), E11M30_BOTTOM),  # 1.25 * 2**-1074: below the tie
        ("mul", (2.0**-537, 3 * 2.0**-539), E11M30_BOTTOM),  # 0.75 * 2**-1074
        ("div", (2.0**-1000, 3 * 2.0**70), E11M30_BOTTOM),
        ("fma", (2.0**-600, 2.0**-474, -(2.0**-1074)), E11M40_FLOOR),
        ("sub", (2.0**-1060, 2.0**-1060 + 2.0**-1070), E11M40_FLOOR),
        ("sqrt", (5e-324,), E11M40_FLOOR),
        ("mul", (3.0, 1e-300), E3M1_NEG),
        ("add", (2.0**21, 2.0**-30), E3M1_NEG),
        ("div", (1.0, 3.0), E3M1_NEG),
        ("sqrt", (2.0**45,), E3M1_NEG),
    ],
)
def test_arith_extremes(op: str, args: tuple[float, ...], f: Format) -> None:
    spec = spec_of(f)
    for mode in DET_MODES:
        for ovf in overflows(f):
            for sign in (1.0, -1.0):
                a = (sign * args[0], *args[1:]) if op != "sqrt" else args
                want = getattr(ra, op)(*a, spec, mode, overflow=ovf)
                got = getattr(arith, op)(*a, fmt=f, mode=mode, overflow=ovf)
                assert_same_bits(got, [want], [a[0]])


def test_arith_stochastic_on_exact_products() -> None:
    # the products of these operands are exact float64 numbers (<= 53 bits, no underflow), so
    # the one stochastic rounding sees the exact value and must match the oracle draw for draw
    rng = np.random.default_rng(SEED)
    for f in (E11M2, E11M40, E5M2_NEG, E3M1_NEG, E11M30_BOTTOM):
        spec = spec_of(f, subnormals=True)
        lo, hi = max(spec.emin - spec.mbits, -1000) // 2, min(spec.emax, 1000) // 2
        x = rng.integers(1, 2**26, 64) * np.ldexp(1.0, rng.integers(lo, hi + 1, 64) - 26)
        y = rng.integers(1, 2**26, 64) * np.ldexp(1.0, rng.integers(lo, hi + 1, 64) - 26)
        y *= rng.choice([-1.0, 1.0], 64)
        assert (np.abs(x * y) > 2.0**-1022).all()
        got = arith.mul(x, y, fmt=f, mode="stochastic", rng=np.random.default_rng(3))
        u = np.random.default_rng(3).random(64)
        want = [ra.mul(float(a), float(b), spec_of(f), "stochastic", u=Fraction(float(t)))
                for a, b, t in zip(x, y, u, strict=True)]  # fmt: skip
        assert_same_bits(got, want, x * y)


def test_arith_refuses_precision_above_51_unless_float64() -> None:
    for f in (Format("e10m52", 10, 52, 511), Format("e8m51", 8, 51, 127)):
        with pytest.raises(ValueError, match="precision"):
            arith.add(1.0, 2.0, fmt=f)


# -- (3) Hypothesis: a format from the whole space, a float64, every option ----------------------
@st.composite
def custom_formats(draw: st.DrawFn) -> Format:
    specials = draw(st.sampled_from(SPECIALS))
    ebits = draw(st.integers(2 if specials == "ieee" else 1, 11))
    mbits = draw(
        st.integers(1 if specials == "ieee" else (1 if ebits == 1 and specials == "fn" else 0), 52)
    )
    top = reference.Spec(ebits, mbits, 0, specials).emax
    lo, hi = top - 1023, 1075 - mbits  # emax <= 1023 and emin - mbits >= -1074
    assume(lo <= hi)
    bias = draw(
        st.one_of(
            st.sampled_from([lo, hi]),
            st.integers(lo, hi),
            st.integers(lo, min(hi, lo + 40)),  # emax near 1023
            st.integers(max(lo, hi - 40), hi),  # the smallest subnormal near 2**-1074
        )
    )
    return Format("hyp", ebits, mbits, bias, specials, draw(st.booleans()))  # type: ignore[arg-type]


@settings(max_examples=300)
@given(custom_formats(), st.data())
def test_hypothesis_whole_space(f: Format, data: st.DataObject) -> None:
    spec = spec_of(f, subnormals=True)
    lo, hi = max(spec.emin - spec.mbits - 3, -1074), min(spec.emax + 2, 1023)
    near = st.builds(
        lambda e, k, s: s * math.ldexp(1 + k / 2**52, e),
        st.integers(lo, hi), st.integers(0, 2**52 - 1), st.sampled_from([1.0, -1.0]),
    )  # fmt: skip
    x = data.draw(st.one_of(near, st.floats(allow_nan=f.has_nan)), label="x")
    mode = data.draw(st.sampled_from(ALL_MODES), label="mode")
    ovf = data.draw(st.sampled_from([None, *overflows(f)]), label="overflow")
    sub = data.draw(st.sampled_from([None, True, False]), label="subnormals")
    use32 = fits_float32(f) and data.draw(st.booleans(), label="float32")
    with np.errstate(over="ignore"):
        xs = np.array([x], dtype=np.float32 if use32 else np.float64)
    kw: dict[str, Any] = {"subnormals": sub, "overflow": ovf}
    u = None
    if mode == "stochastic":
        seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
        kw["rng"], u = np.random.default_rng(seed), np.random.default_rng(seed).random(1)
    got = fround(xs, f, mode=mode, **kw)
    kw.pop("rng", None)
    assert got.dtype == xs.dtype
    assert_same_bits(got, oracle(xs, f, mode, u=u, **kw), xs)
