"""The fast row-tile T-FDPA (``fpemu.tensorcore.rows``) gives the bits of the block-by-block
route (``fused._t_fdpa_blocks``, itself checked against MMA-Sim 2.1.1 in test_mma_parity.py and
against exact rationals in test_mma_models.py) for every T-FDPA instruction model, on operand
codes drawn from every distribution the parity campaign uses (all bit patterns including
inf/NaN, narrow and wide exponents, subnormals, zeros, huge exponents, extreme C), over several
row tiles, partial blocks and chains of blocks."""

from __future__ import annotations

import zlib

import ml_dtypes
import numpy as np
import pytest

from fpemu.formats import get_format
from fpemu.linalg import matmul
from fpemu.tensorcore import amd, amd_rows, exact, fused, rows
from fpemu.tensorcore.instructions import INSTRUCTIONS
from fpemu.tensorcore.mma import _RESULT, dpa, mma

#: format -> (storage dtype of its codes, code width in bits, exponent bits, mantissa bits)
_ML = {
    "float16": (np.float16, 16, 5, 10),
    "bfloat16": (ml_dtypes.bfloat16, 16, 8, 7),
    "tf32": (np.float32, 32, 8, 10),  # a 19-bit code in the top of a float32
    "float32": (np.float32, 32, 8, 23),
    "float8_e4m3fn": (ml_dtypes.float8_e4m3fn, 8, 4, 3),
    "float8_e5m2": (ml_dtypes.float8_e5m2, 8, 5, 2),
    "float6_e3m2fn": (ml_dtypes.float6_e3m2fn, 8, 3, 2),
    "float6_e2m3fn": (ml_dtypes.float6_e2m3fn, 8, 2, 3),
    "float4_e2m1fn": (ml_dtypes.float4_e2m1fn, 8, 2, 1),
}
_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32}


def _values(rng: np.random.Generator, fmt: str, shape: tuple[int, ...]) -> np.ndarray:
    """Random values of ``fmt``; each row draws from one distribution (see module doc)."""
    dt, bits, eb, mb = _ML[fmt]
    width = 1 + eb + mb
    n = int(np.prod(shape))
    mode = np.repeat(rng.integers(0, 6, shape[0]), n // shape[0])
    top = (1 << eb) - 1
    bias = (1 << (eb - 1)) - 1
    e = rng.integers(0, top + 1, n)
    e = np.where(mode == 1, rng.integers(max(bias - 3, 0), min(bias + 4, top + 1), n), e)
    e = np.where(mode == 2, rng.integers(1, max(top, 2), n), e)
    e = np.where(mode == 3, rng.integers(0, min(3, top + 1), n), e)
    e = np.where(mode == 5, rng.integers(max(top - 3, 0), top + 1, n), e)
    man = rng.integers(0, 1 << mb, n)
    sign = rng.integers(0, 2, n)
    code = (sign << (width - 1)) | (e << mb) | man
    code = np.where((mode == 4) & (rng.random(n) < 0.7), 0, code)
    code = np.where(rng.random(n) < 0.03, 0, code)
    if fmt == "tf32":
        code = code << 13
    with np.errstate(invalid="ignore"):  # NaN codes
        return code.astype(_UINT[bits]).view(dt).astype(np.float64).reshape(shape)


def _same(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return (x.view(np.uint64) == y.view(np.uint64)) | (np.isnan(x) & np.isnan(y))


_T = [i for i in INSTRUCTIONS.values() if i.algorithm == "t-fdpa"]


@pytest.mark.parametrize("name", [i.name for i in _T])
def test_rows_equal_blocks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ins = INSTRUCTIONS[name]
    monkeypatch.setattr(rows, "TILE", 640)  # several tiles and a partial last one
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    result = _RESULT[ins.rho]
    pairs = {(ins.inputs[0], ins.inputs[0]), (ins.inputs[0], ins.inputs[-1])}
    for (fa, fb), c_name in [(p, c) for p in sorted(pairs) for c in ins.c]:
        for k in sorted({ins.k, ins.shapes[-1]}):
            L = ins.fused(k)
            for K in (k, 2 * k + (1 if k > 1 else 0)):
                B = 700
                a, b = _values(rng, fa, (B, K)), _values(rng, fb, (B, K))
                c = _values(rng, c_name if c_name != "float32" else "float32", (B, 1))[:, 0]
                kw = dict(
                    fa=get_format(fa),
                    fb=get_format(fb),
                    fc=get_format(c_name),
                    L=L,
                    F=ins.frac_bits,
                    e_zero=ins.e_zero,
                    result=result,
                )
                assert rows.plan(kw["fa"], kw["fb"], L, ins.e_zero) is not None
                fast = fused.t_fdpa(a, b, c, **kw)
                slow = fused._t_fdpa_blocks(a, b, c, **kw)
                ok = _same(fast, slow)
                assert ok.all(), (name, fa, fb, c_name, K, np.flatnonzero(~ok)[:5])


def test_rows_refuse_inexact_inputs() -> None:
    h = get_format("float16")
    kw = dict(
        fa=h, fb=h, fc=get_format("float32"), L=16, F=25, e_zero=-133, result=_RESULT["rz-fp32"]
    )
    a = np.ones((3, 16))
    for bad, arg in ((1 + 2.0**-11, "a"), (2.0**-15 + 2.0**-30, "a"), (65536.0, "a")):
        x = a.copy()
        x[1, 3] = bad
        with pytest.raises(ValueError, match=rf"^{arg} holds values that are not exact in float16"):
            rows.t_fdpa_rows(x, a, np.zeros(3), **kw)
    with pytest.raises(ValueError, match=r"^c holds values that are not exact in float32"):
        rows.t_fdpa_rows(a, a, np.full(3, 0.1), **kw)


def test_plan_refuses_unreadable_label_ranges() -> None:
    f32 = get_format("float32")
    assert rows.plan(f32, f32, 16, -133) is not None  # 8-bit exponents fit with W = 5
    assert rows.plan(f32, f32, 64, -133) is None  # W = 7 cannot span labels -133 .. 254


_TR = [i for i in INSTRUCTIONS.values() if i.algorithm in ("tr-fdpa", "gtr-fdpa")]


@pytest.mark.parametrize("name", [i.name for i in _TR])
def test_amd_rows_equal_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CDNA3 TR/GTR-FDPA on row tiles equal the whole-batch route (amd.tr_fdpa/gtr_fdpa)."""
    ins = INSTRUCTIONS[name]
    monkeypatch.setattr(amd_rows, "TILE", 640)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    split = ins.algorithm == "gtr-fdpa"
    ref = amd.gtr_fdpa if split else amd.tr_fdpa
    fnuz = {"float8_e4m3fnuz": "float8_e4m3fn", "float8_e5m2fnuz": "float8_e5m2"}
    for fa_name, fb_name in sorted(
        {(ins.inputs[0], ins.inputs[0]), (ins.inputs[0], ins.inputs[-1])}
    ):
        for k in ins.shapes:
            L = ins.fused(k)
            for K in (k, 3 * k):
                B = 700
                # FNUZ values: the fn codes' finite values that FNUZ holds (one exponent lower).
                a = _values(rng, fnuz.get(fa_name, fa_name), (B, K))
                b = _values(rng, fnuz.get(fb_name, fb_name), (B, K))
                if fa_name in fnuz:
                    a = np.where(
                        np.isfinite(a) & (np.abs(a) <= 240), a / 2, np.where(np.isfinite(a), 0.0, a)
                    )
                    b = np.where(
                        np.isfinite(b) & (np.abs(b) <= 240), b / 2, np.where(np.isfinite(b), 0.0, b)
                    )
                c = _values(rng, "float32", (B, 1))[:, 0]
                fa, fb = get_format(fa_name), get_format(fb_name)
                slow = ref(a, b, c, L=L, fa=fa, fb=fb)
                fast = amd_rows.tr_fdpa_rows(a, b, c, L=L, fa=fa, fb=fb, split=split)
                ok = _same(fast, slow)
                assert ok.all(), (name, fa_name, fb_name, K, np.flatnonzero(~ok)[:5])
                # Finite operands below 2**64: every tile takes the fast route (the reference
                # route is made to fail), and gives the same bits.
                a, b, c = (
                    np.where(np.isfinite(x) & (np.abs(x) < 2.0**64), x, 1.0) for x in (a, b, c)
                )
                slow = ref(a, b, c, L=L, fa=fa, fb=fb)
                with monkeypatch.context() as m:
                    m.setattr(amd, "gtr_fdpa" if split else "tr_fdpa", None)
                    fast = amd_rows.tr_fdpa_rows(a, b, c, L=L, fa=fa, fb=fb, split=split)
                assert _same(fast, slow).all(), (name, fa_name, fb_name, K)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_e_fdpa_rows_equal_fsum_route(fmt: str) -> None:
    """CDNA1's exact block sums: the expansion route equals the math.fsum route bit for bit,
    on every distribution (cancellation, subnormals, huge C, inf/NaN)."""
    rng = np.random.default_rng(zlib.crc32(fmt.encode()))
    for L, K in ((4, 16), (2, 8), (4, 4)):
        a, b = _values(rng, fmt, (3000, K)), _values(rng, fmt, (3000, K))
        c = _values(rng, "float32", (3000, 1))[:, 0]
        # cancelling pairs: b's second product undoes the first in a third of the rows
        a[::3, 1], b[::3, 1] = -a[::3, 0], b[::3, 0]
        fast = amd_rows.e_fdpa_rows(a, b, c, L=L)
        slow = amd.e_fdpa(a, b, c, L=L)
        ok = _same(fast, slow)
        assert ok.all(), (fmt, L, np.flatnonzero(~ok)[:5])


_ST = [i for i in INSTRUCTIONS.values() if i.algorithm == "st-fdpa"]


@pytest.mark.parametrize("name", [i.name for i in _ST])
def test_st_fdpa_rows_equal_blocks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Block-scaled T-FDPA (mxf8f6f4): the row route with scale exponents folded into values
    and labels equals the block route, for narrow and extreme (+-127) ue8m0 scales."""
    ins = INSTRUCTIONS[name]
    monkeypatch.setattr(rows, "TILE", 640)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    result = _RESULT[ins.rho]
    ue8m0 = get_format(ins.scales[0])
    for fa_name, fb_name in (("float8_e4m3fn", "float8_e5m2"), ("float4_e2m1fn", "float6_e3m2fn")):
        for lo, hi in ((-6, 6), (-127, 127)):
            B, K = 600, 2 * ins.k
            a, b = _values(rng, fa_name, (B, K)), _values(rng, fb_name, (B, K))
            c = _values(rng, "float32", (B, 1))[:, 0]
            sa = 2.0 ** rng.integers(lo, hi + 1, (B, K // 32)).astype(float)
            sb = 2.0 ** rng.integers(lo, hi + 1, (B, K // 32)).astype(float)
            kw = dict(
                fa=get_format(fa_name),
                fb=get_format(fb_name),
                fs=ue8m0,
                L=ins.block,
                F=ins.frac_bits,
                e_zero=ins.e_zero,
                result=result,
            )
            fast = fused.st_fdpa(a, b, c, sa, sb, **kw)
            with monkeypatch.context() as m:
                m.setattr(fused, "plan", lambda *args, **kwargs: None)  # the block route
                slow = fused.st_fdpa(a, b, c, sa, sb, **kw)
            ok = _same(fast, slow)
            assert ok.all(), (name, fa_name, fb_name, lo, np.flatnonzero(~ok)[:5])


@pytest.mark.parametrize("name", ["cdna3.mfma.f16.f32", "cdna3.mfma.fp8.f32"])
def test_amd_matrix_route_equals_dot_route(name: str) -> None:
    """CDNA3 ``mma`` on matrices (BLAS label maxima, int32 sums) equals the same products
    computed as independent dot products (``dpa`` on every (m, n))."""
    ins = INSTRUCTIONS[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    fmt = ins.inputs[0]
    src = {"float8_e4m3fnuz": "float8_e4m3fn"}.get(fmt, fmt)
    for k in ins.shapes:
        M, K, N = 37, 3 * k, 29
        a = _values(rng, src, (M, K))
        b = _values(rng, src, (K, N))
        c = _values(rng, "float32", (M, N))
        a, b, c = (np.where(np.isfinite(x) & (np.abs(x) < 2.0**64), x, 0.0) for x in (a, b, c))
        if fmt != src:
            a, b = a / 2, b / 2
        d = mma(a, b, c, instruction=name, k=k)
        ref = dpa(
            np.repeat(a, N, axis=0), np.tile(b.T, (M, 1)), c.reshape(-1), instruction=name, k=k
        ).reshape(M, N)
        assert _same(d, ref).all(), (name, k, np.argwhere(~_same(d, ref))[:3])


@pytest.mark.parametrize(("fmt", "bad"), [("float4_e2m1fn", 0.25), ("float4_e2m1fn", 6.5),
                                          ("float16", 2.0**-25), ("float8_e4m3fn", 480.0),
                                          ("bfloat16", 1 + 2.0**-8)])  # fmt: skip
@pytest.mark.parametrize("dense", [False, True])
def test_powers_refuse_inexact_values(fmt: str, bad: float, dense: bool) -> None:
    """The bit-level exactness check, with few or many zeros and subnormals around."""
    f = get_format(fmt)
    x = np.ones(4096)
    if dense:
        x[::2] = 0.0
        x[1::4] = 2.0**f.emin / 2  # subnormal in every format here
    exact.powers(x, f, "a")  # exact: no error
    x[77] = bad
    with pytest.raises(ValueError, match=rf"^a holds values that are not exact in {fmt}"):
        exact.powers(x, f, "a")


def test_fma32_chain_rows_equal_round_to_odd_route() -> None:
    """FP32 FMA chains: the boundary-detection route equals the two-sum + round-to-odd route,
    on every FP32 bit pattern distribution and on sums built to land on FP32 midpoints (normal
    and subnormal) with and without a float64 rounding error."""
    rng = np.random.default_rng(7)
    a, b = _values(rng, "float32", (20000, 4)), _values(rng, "float32", (20000, 4))
    c = _values(rng, "float32", (20000, 1))[:, 0]
    u = 2.0**-23
    # c + a*b with a*b = h * (1 - 2**-46) (a = h * (1 + u), b = 1 - u: FP32 values), h half
    # an FP32 ulp of c, c with an odd last bit: float64 rounds the sum onto the midpoint
    # c + h, the exact sum lies below it, so FP32 must round to c where ties-to-even would
    # give the other neighbour; and the mirror image c - h * (1 - 2**-46). In the normal
    # range and at the overflow threshold (c = FP32 max, h = 2**103: the exact sum stays
    # finite). Below 2**-126 float64 holds such sums exactly (no double rounding): the
    # subnormal pair (h = 2**-150 from a = 2**-126 (1 + u), b = 2**-24 (1 - u)) checks that.
    cases = []
    for cc, h in ((1.0 + u, 2.0**-24), (3.0 * 2.0**-149, 2.0**-150),
                  (2.0**128 - 2.0**104, 2.0**103), (-(1.0 + 3 * u), 2.0**-24)):  # fmt: skip
        lo = 2.0**-126 if h < 2.0**-126 else h
        for sign in (1.0, -1.0):
            cases.append((cc, sign * lo * (1 + u), (h / lo) * (1 - u)))
    for i, (cc, aa, bb) in enumerate(cases):
        a[i], b[i], c[i] = 0.0, 0.0, cc
        a[i, 0], b[i, 0] = aa, bb
        assert aa == float(np.float32(aa)) and bb == float(np.float32(bb))
        assert cc == float(np.float32(cc))
    s64 = a[: len(cases), 0] * b[: len(cases), 0] + c[: len(cases)]
    with np.errstate(over="ignore"):  # the naive double rounding is wrong on every case
        naive = s64.astype(np.float32).astype(np.float64)
    wrong = naive != amd.fma_chain(a, b, c)[: len(cases)]
    assert wrong.tolist() == [True, True, False, False, True, True, True, True]
    fast = amd_rows.fma32_chain_rows(a, b, c)
    slow = amd.fma_chain(a, b, c)
    ok = _same(fast, slow)
    assert ok.all(), np.flatnonzero(~ok)[:5]


def test_matmul_rounds_b_to_its_own_format() -> None:
    """fpemu.matmul with an instruction model and ``b_fmt``: B is rounded to b_fmt (e5m2), not
    to fmt (e4m3), and the result is the instruction's on those operands."""
    rng = np.random.default_rng(3)
    a = _values(rng, "float8_e4m3fn", (8, 32))
    b = _values(rng, "float8_e5m2", (32, 4))
    a, b = (np.where(np.isfinite(x) & (np.abs(x) < 400), x, 1.0) for x in (a, b))
    b[0, 0] = 2.0**-16  # an e5m2 subnormal that e4m3 cannot hold
    d = matmul(a, b, fmt="e4m3", acc="fp32", model="sm90.wgmma.fp8.f32", b_fmt="e5m2")
    ref = mma(a, b, None, instruction="sm90.wgmma.fp8.f32", a_fmt="e4m3", b_fmt="e5m2")
    assert _same(np.asarray(d, np.float64), ref).all()
    with pytest.raises(ValueError, match="b_fmt"):
        matmul(a, b, fmt="e4m3", acc="fp32", model="sm90.wgmma.fp8.f32", b_fmt="e9m9")


@pytest.mark.parametrize("name", [n for n, i in INSTRUCTIONS.items() if not i.scale_block])
def test_empty_and_short_shapes(name: str) -> None:
    """No dot products, K = 0 (C alone), one product, and a K that ends in a partial block:
    every model returns the exact values (ones times halves), shaped as asked."""
    ins = INSTRUCTIONS[name]
    for B, K in ((0, ins.k), (3, 0), (2, 1), (2, ins.k + 1), (2, 3 * ins.k)):
        if ins.algorithm == "ftz-mul-add" and K % ins.group:
            continue
        d = dpa(np.ones((B, K)), np.full((B, K), 0.5), np.zeros(B), instruction=name)
        assert d.shape == (B,) and (d == 0.5 * K).all(), (name, B, K, d)
    for M, K, N in ((0, ins.k, 3), (2, 0, 3), (2, ins.k, 0)):
        d = mma(np.ones((M, K)), np.full((K, N), 0.5), None, instruction=name)
        assert d.shape == (M, N) and (d == 0.5 * K).all(), (name, M, K, N)


@pytest.mark.parametrize("name", [n for n, i in INSTRUCTIONS.items()
                                  if i.algorithm == "ftz-mul-add"])  # fmt: skip
def test_ftz_rows_equal_reference(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CDNA2 (flush-to-zero FP32 products and pairwise sums): the route that leaves out the
    flushes that cannot act equals the reference bit for bit (signs of zeros included), on
    every distribution and over several row tiles."""
    ins = INSTRUCTIONS[name]
    monkeypatch.setattr(amd_rows, "TILE", 640)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    fmt = get_format(ins.inputs[0])
    for K in (ins.k, 4 * ins.k):
        a, b = _values(rng, fmt.name, (3000, K)), _values(rng, fmt.name, (3000, K))
        c = _values(rng, "float32", (3000, 1))[:, 0]
        a[::7, 0], b[::7, 1] = -0.0, -0.0
        slow = amd.ftz_mul_add(a, b, c, P=ins.group, emin=fmt.emin)
        fast = amd_rows.ftz_mul_add_rows(a, b, c, P=ins.group, fa=fmt, fb=fmt)
        assert _same(fast, slow).all(), (name, K, np.flatnonzero(~_same(fast, slow))[:5])
