"""The integer-pass conversions of ``fpemu.validate.ops._wide`` against the library casts they
replace, bit for bit (NaN payloads included) and layout for layout: ``widen32`` over every
bfloat16 and float16 pattern, ``narrow16`` over every class of float32 word (every sign,
exponent and kept fraction with each class of dropped bits; all 2**32 words under ``-m slow``),
``has_subnormal`` over every 16-bit pattern, and the ops that use them (the GEMM's value and
lazy bound, casts) against the same ops computed with the library casts."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fpemu.validate.ops import Call, _wide, casts, lookup, matmul
from fpemu.validate.ops._wide import has_subnormal, narrow16, widen32

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
DTYPES = {"bfloat16": BF16, "float16": F16}
CODES = np.arange(1 << 16, dtype=np.uint16)


def _cast(x: np.ndarray, dt: Any) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(dt)


def _same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype, shape, strides and bits (NaN payloads included)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.strides == want.strides
    u = f"u{got.dtype.itemsize}"
    bad = got.view(u) != want.view(u)
    assert not bad.any(), (np.flatnonzero(bad)[:5], got.view(u)[bad][:5], want.view(u)[bad][:5])


def _layouts(x: np.ndarray) -> Iterator[np.ndarray]:
    """``x`` (1-D) in the layouts the ops meet: C and F 2-D, a transposed 3-D, a strided
    slice, a reversed view, one element, 0-d and empty."""
    n = x.size - x.size % 36
    m = x[:n].reshape(-1, 12)
    yield x
    yield m
    yield m.T
    yield x[:n].reshape(12, -1, 3).transpose(2, 0, 1)
    yield x[::3]
    yield x[::-1]
    yield m[:, 2:7]
    yield x[:1]
    yield x[5].reshape(())
    yield x[:0]


# -- widen32 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_widen32_every_pattern_and_layout(name: str) -> None:
    x = CODES.view(DTYPES[name])
    for v in _layouts(x):
        _same(widen32(v), _cast(v, np.float32))


def test_widen32_float16_integer_path_every_finite_pattern_and_layout() -> None:
    """The float16 words without inf/NaN (zeros, subnormals, the largest) through the integer
    passes, and through widen32, which takes them for such arrays."""
    x = CODES.view(F16)
    x = x[np.isfinite(_cast(x, np.float32))]
    for v in _layouts(x):
        want = _cast(v, np.float32)
        _same(_wide._f16_words(v), want)
        _same(widen32(v), want)


def test_widen32_float32_is_returned_and_others_refused() -> None:
    x = np.float32([1.0, np.nan])
    assert widen32(x) is x
    with pytest.raises(TypeError):
        widen32(np.float64([1.0]))


def test_widen32_float16_under_flush_to_zero_takes_the_cast() -> None:
    """A thread that reads subnormal inputs as zero (torch.set_flush_denormal) would zero the
    subnormal float16 words in the multiplication: the cast takes them, same bits."""
    torch = pytest.importorskip("torch")
    x = CODES.view(F16)
    x = x[np.isfinite(_cast(x, np.float32))]
    want = x.astype(np.float32)
    if not torch.set_flush_denormal(True):
        pytest.skip("no flush-to-zero on this CPU")
    try:
        assert _wide._daz()
        _same(widen32(x), want)
    finally:
        torch.set_flush_denormal(False)
    assert not _wide._daz()


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_widen32_sub_equals_widen32_and_has_subnormal(name: str) -> None:
    """Every 16-bit pattern (float32: every class of word), with and without inf/NaN, each
    pattern alone among normal numbers for the subnormal test, and in every layout."""
    x = CODES.view(DTYPES[name]) if name in DTYPES else _words("float16").view(np.float32)
    finite = x[np.isfinite(_cast(x, np.float32))]
    for v in [*_layouts(x), *_layouts(finite)]:
        w, sub = _wide.widen32_sub(v)
        if name == "float32":
            assert w is v  # float32 comes back as it is
        else:
            _same(w, _cast(v, np.float32))
        assert sub == has_subnormal(v)
    one = np.ones(5, x.dtype)
    for code in x[:: 1 if name in DTYPES else 97]:
        one[2] = code
        assert _wide.widen32_sub(one)[1] == has_subnormal(one), code


# -- has_subnormal ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_has_subnormal_every_pattern(name: str) -> None:
    tiny = {"bfloat16": 2.0**-126, "float16": 2.0**-14}[name]
    x = CODES.view(DTYPES[name])
    m = np.abs(_cast(x, np.float64))
    sub = (m > 0) & (m < tiny)
    one = np.ones(7, DTYPES[name])
    for code in range(1 << 16):  # each pattern among normal numbers, at the end
        one[-1] = x[code]
        assert has_subnormal(one) == sub[code], hex(code)
    assert not has_subnormal(x[:0])
    assert has_subnormal(x.reshape(256, 256).T)  # any layout


def test_has_subnormal_float32_edges_and_random() -> None:
    words = np.array([0, 1, 0x7FFFFF, 0x800000, 0x7F800000, 0x7FC00000, 0x7F800001], np.uint32)
    words = np.concatenate([words, words | np.uint32(0x80000000)])
    rng = np.random.default_rng(3)
    words = np.concatenate([words, rng.integers(0, 1 << 32, 20000, dtype=np.uint64).astype(
        np.uint32)])  # fmt: skip
    x = words.view(np.float32)
    m = np.abs(_cast(x, np.float64))
    sub = (m > 0) & (m < 2.0**-126)
    base = np.ones(3, np.float32)
    for i in range(x.size):
        base[1] = x[i]
        assert has_subnormal(base) == sub[i], hex(words[i])


# -- narrow16 -----------------------------------------------------------------------------------
#: dropped-bit classes: exact, one above, below / at / above the tie, all ones, quarter points,
#: for bfloat16 (16 dropped bits) and float16 (13, with the 3 above them varied too)
_LOW = {
    "bfloat16": (0x0000, 0x0001, 0x4000, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF),
    "float16": (0x0000, 0x0001, 0x0800, 0x0FFF, 0x1000, 0x1001, 0x1800, 0x1FFF),
}


def _words(name: str) -> np.ndarray:
    """Every sign, exponent and float16-kept fraction (bfloat16: every high half) with every
    class of dropped bits: the float32 words where rounding can go either way, the binade
    edges, zeros, subnormals, overflow, inf and NaN."""
    if name == "bfloat16":
        high = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    else:
        high = np.arange(1 << 19, dtype=np.uint32) << np.uint32(13)  # sign, exponent, 10 bits
    low = np.array(_LOW[name], np.uint32)
    return (high[:, None] | low[None, :]).reshape(-1)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_narrow16_every_class_of_word(name: str) -> None:
    x = _words(name).view(np.float32)
    nan = np.isnan(x)
    # without NaN (bfloat16 takes the cast for an array holding one), and with all of them
    for v in (x[~nan], x):
        _same(narrow16(v, name), _cast(v, DTYPES[name]))


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_narrow16_layouts_and_blocks(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small blocks and no small-array shortcut: every layout, several blocks with the
    out-of-range elements (float16) in some of them, partial last blocks."""
    monkeypatch.setattr(_wide, "_BLOCK", 1000)
    monkeypatch.setattr(_wide, "_SMALL", 0)
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(36000) * rng.choice([1e-8, 1e-5, 1.0, 6e4], 36000)).astype(
        np.float32)  # fmt: skip
    x[:3000] = np.abs(x[:3000]) + 1.0  # a whole first block in range
    x[30000:30003] = [0.0, -0.0, np.inf]
    for v in _layouts(x):
        _same(narrow16(v, name), _cast(v, DTYPES[name]))
    x[100] = np.nan
    for v in _layouts(x):
        _same(narrow16(v, name), _cast(v, DTYPES[name]))


@settings(max_examples=300, deadline=None)
@given(words=hnp.arrays(np.uint32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=40)),
       name=st.sampled_from(["bfloat16", "float16"]), block=st.integers(1, 300),
       transpose=st.booleans())  # fmt: skip
def test_narrow16_hypothesis(words: np.ndarray, name: str, block: int, transpose: bool) -> None:
    x = words.view(np.float32)
    if transpose:
        x = x.T
    saved = _wide._BLOCK, _wide._SMALL
    _wide._BLOCK, _wide._SMALL = block, 0
    try:
        got = narrow16(x, name)
    finally:
        _wide._BLOCK, _wide._SMALL = saved
    _same(got, _cast(x, DTYPES[name]))


def test_narrow16_refuses_other_dtypes() -> None:
    with pytest.raises(TypeError):
        narrow16(np.float64([1.0]), "float16")
    with pytest.raises(TypeError):
        narrow16(np.float32([1.0]), "float8_e4m3fn")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_narrow16_every_float32_word(name: str) -> None:
    """All 2**32 words (NaN words apart for bfloat16: an array holding one takes the cast),
    2**26 at a time (minutes: NumPy's float16 cast of the subnormal range is slow)."""
    for start in range(0, 1 << 32, 1 << 26):
        u = np.arange(1 << 26, dtype=np.uint32)
        u += np.uint32(start)
        x = u.view(np.float32)
        if name == "bfloat16":
            x = x[~np.isnan(x)]
        got, want = narrow16(x, name), _cast(x, DTYPES[name])
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), hex(start)


# -- the ops that use them ----------------------------------------------------------------------
def _astype_widen(x: np.ndarray) -> tuple[np.ndarray, bool]:
    """The widening by the cast, the subnormal test by the magnitudes."""
    tiny = {"float16": 2.0**-14}.get(x.dtype.name, 2.0**-126)
    m = np.abs(_cast(x, np.float64))
    wide = x if x.dtype == np.float32 else x.astype(np.float32)
    return wide, bool(((m > 0) & (m < tiny)).any())


def _astype_to(real: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def to(x: Any, name: str) -> np.ndarray:
        arr = np.asarray(x)
        if name in DTYPES and arr.dtype == np.float32:
            return _cast(arr, DTYPES[name])
        return real(x, name)

    return to


def _outs(call: Call) -> list[Any]:
    """Every field of the op's Outs, a lazy bound's at every index and at single ones."""
    fn = lookup(call.op)
    assert fn is not None
    out: list[Any] = []
    with np.errstate(all="ignore"):  # inf and NaN operands are data (the watch runs so)
        outs = list(fn(call))
    for o in outs:
        assert o is not None
        n = o.value.size
        out += [o.value.dtype, o.value.shape, o.value.tobytes(), o.exact, o.reason]
        for idx in [np.arange(n)] + [np.array([i]) for i in {0, n // 2, max(n - 1, 0)} if n]:
            for f in (o.bound, o.quick):
                if f is not None:
                    with np.errstate(all="ignore"):
                        out += [np.asarray(v).tobytes() for v in f(idx)]
    return out


def _gemm_operands(name: str, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, ...]]:
    dt = DTYPES[name]
    a = (rng.standard_normal((37, 24)) * 3).astype(np.float32).astype(dt)
    b = (rng.standard_normal((24, 19)) * 3).astype(np.float32).astype(dt)
    yield a, b
    yield np.ascontiguousarray(a.T).T, b.T.copy().T  # F-ordered
    s = a.copy()
    s[3, :5] = np.array([1e-40, -1e-39, 6e-8, -6e-6, 0.0]).astype(np.float32).astype(dt)
    yield s, b  # subnormals (bfloat16: float32's; float16: its own)
    n = a.copy()
    n[1, 1], n[2, 2] = np.inf, -np.inf
    n.view(np.uint16)[4, 4] = 0x7F81 if name == "bfloat16" else 0x7C01  # a NaN payload
    yield n, b
    yield a[:0], b
    yield a[::2, ::3], b[::3]


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["aten.mm.default", "aten.addmm.default"])
def test_gemm_equals_the_library_casts(name: str, op: str, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:  # fmt: skip
    """The GEMM's Out (value, bound at every index and gathered) with widen32/narrow16
    equals the one computed with astype, on subnormal, inf, NaN, F-ordered, strided and
    empty operands."""
    rng = np.random.default_rng(11)
    monkeypatch.setattr(_wide, "_SMALL", 0)
    for a, b in _gemm_operands(name, rng):
        args: tuple[Any, ...] = (a, b)
        if op == "aten.addmm.default":
            args = ((rng.standard_normal(b.shape[1])).astype(np.float32).astype(a.dtype), a, b)
        call = Call(op, args, {}, (name,))
        got = _outs(call)
        with monkeypatch.context() as m:
            m.setattr(matmul, "widen32_sub", _astype_widen)
            m.setattr(matmul, "to", _astype_to(matmul.to))
            want = _outs(call)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            assert g == w


@pytest.mark.parametrize("src", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("dst", ["bfloat16", "float16", "float32"])
def test_casts_equal_the_library_casts(src: str, dst: str, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:  # fmt: skip
    """``_to_copy`` between the 16-bit formats and float32: every 16-bit pattern, and every
    class of float32 word, as ``astype`` converts them (through float32)."""
    monkeypatch.setattr(_wide, "_SMALL", 0)
    x = CODES.view(DTYPES[src]) if src in DTYPES else _words("float16").view(np.float32)
    wide = _cast(x, np.float32)
    want = wide if dst == "float32" else _cast(wide, DTYPES[dst])
    if src == dst:
        want = x
    for v, w in ((x, want), (x.reshape(-1, 64).T, want.reshape(-1, 64).T)):
        got = casts.convert(v, dst)
        assert got.dtype == w.dtype and got.shape == w.shape
        assert np.array_equal(np.ascontiguousarray(got).view(f"u{got.itemsize}"),
                              np.ascontiguousarray(w).view(f"u{w.itemsize}"))  # fmt: skip


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_gemm_accumulation_route(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GEMM's accumulation, read from its center. Without subnormals, and with float16
    subnormals (normal float32 numbers): a float32 GEMM (float32 values). With a bfloat16 or
    float32 subnormal: a float32 GEMM of the operands scaled by a power of two, scaled back in
    float64: row 0, all subnormals of a few units of the format's smallest, whose products an
    unscaled float32 GEMM rounds to float32's subnormal spacing (beyond gamma_K, or to 0),
    comes out within gamma_K of its exact sum, and the other rows are float32 values. With an
    inf beside the subnormal (no scale is safe): a float64 GEMM (row 1 is not a float32
    value)."""
    rng = np.random.default_rng(2)
    dt = np.dtype(np.float32) if name == "float32" else DTYPES[name]
    a = (rng.standard_normal((30, 40)) / 3).astype(np.float32).astype(dt)
    b = (rng.standard_normal((40, 20)) / 3).astype(np.float32).astype(dt)

    def center(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):  # (inf times 0 in the inf case's bound)
            out = lookup("aten.mm.default")(Call("aten.mm.default", (x, b), {}, (name,)))[0]
            assert out is not None and out.bound is not None
            return np.asarray(out.bound(np.arange(600))[0]).reshape(30, 20)

    def is32(v: np.ndarray) -> bool:
        return bool(np.array_equal(v, v.astype(np.float32).astype(np.float64)))

    assert is32(center(a))
    x = a.copy()
    if name == "float16":
        x[0, :3] = np.float16(6e-8)  # float16 subnormals: normal float32 numbers
        assert is32(center(x))
        return
    unit = 2.0**-149 if name == "float32" else 2.0**-133  # the format's smallest subnormal
    x[0] = (rng.integers(1, 8, 40) * unit).astype(np.float32).astype(dt)
    exact = x.astype(np.float64) @ b.astype(np.float64)  # float64: within 40 * 2**-53
    tol = 2 * 43 * 2.0**-24 * (np.abs(x[0].astype(np.float64)) @ np.abs(b.astype(np.float64)))
    if name == "float32":  # (bfloat16's subnormal products are exact float32 subnormals)
        plain = x[0] @ b  # unscaled: the products round to float32's subnormal spacing
        assert (np.abs(plain - exact[0]) > tol).any()
    seen: list[Any] = []
    scales = matmul._scales
    monkeypatch.setattr(matmul, "_scales", lambda *a: seen.append(scales(*a)) or seen[-1])
    c = center(x)
    assert seen and seen[0] is not None and seen[0][0] >= 24  # the scaled route
    assert (np.abs(c[0] - exact[0]) <= tol).all() and np.abs(c[0]).min() > 0
    assert is32(c[1:])
    x[2, 5] = np.inf
    c = center(x)
    assert not is32(c[1]) and np.isinf(c[2]).any()


@pytest.mark.parametrize("name", ["bfloat16", "float32"])
def test_gemm_scales_keep_every_partial_sum_in_range(name: str) -> None:
    """``matmul._scales``: the scaled operands are exact (a power of two back gives the
    original), hold no subnormal, and every product and partial sum stays below 2**_TOP (the
    largest magnitudes times K); None where an operand is not finite or the room left for the
    subnormal operand is under 2**24 (the GEMM then runs in float64)."""
    rng = np.random.default_rng(5)
    dt = np.dtype(np.float32) if name == "float32" else BF16
    for big in (2.0**-100, 1.0, 2.0**40, 2.0**90):
        for k, both in ((1, False), (96, False), (96, True), (4096, True)):
            a = (rng.standard_normal((8, k)) * big).astype(np.float32)
            a[0, 0] = 2.0**-149 if name == "float32" else 2.0**-133
            b = (rng.standard_normal((k, 6))).astype(np.float32)
            if both:
                b[-1, 1] = a[0, 0]
            a, b = a.astype(dt).astype(np.float32), b.astype(dt).astype(np.float32)
            got = matmul._scales(a, b, True, both, k)
            room = matmul._TOP - np.log2(k) - np.log2(np.abs(a).max()) - np.log2(np.abs(b).max())
            if got is None:
                assert room < 24 * (2 if both else 1) + 2, (big, k, both)
                continue
            ea, eb = got
            sa, sb = a * np.float32(2.0**ea), b * np.float32(2.0**eb)
            assert np.array_equal(sa * 2.0**-ea, a) and np.array_equal(sb * 2.0**-eb, b)
            assert not has_subnormal(sa) and (not both or not has_subnormal(sb))
            assert ea >= 24 and (eb >= 24 if both else eb == 0)
            top = float(np.abs(sa.astype(np.float64)).max() * np.abs(sb.astype(np.float64)).max())
            assert top * k < 2.0**matmul._TOP
    nan = np.float32([[np.nan, 2.0**-149]])
    assert matmul._scales(nan, np.ones((2, 1), np.float32), True, False, 2) is None
