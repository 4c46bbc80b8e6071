"""``judge``'s fast paths against the straightforward exact judge, field by field.

The fast paths (:mod:`fpemu.validate.watch.verdict`): the sufficient test ``|t - center| < err``
before the rounding of the range's ends, the whole-array judgement of a bounded output where
most elements differ, the NaN pairs looked for only where the ulp distance is infinite,
:func:`~fpemu.validate.ops.gather` (no whole broadcast array), ``max_ulps`` with its work
space. The reference below is the judge as it was written before them: gather the differing
elements, drop the NaN pairs, the ulp distance from ``frexp``, the bound's center and err
broadcast and gathered, both ends rounded by ``to``, compared. Inputs are adversarial: NaN
(other payloads too), +-inf, -0.0, subnormals in torch's output, the center and the err;
torch's values exactly at ``RN(center -+ err)`` and one code beyond; an err of 0, NaN, inf;
scalar, broadcast and elementwise errs; lazy bounds with and without ``quick``; float32,
bfloat16, float16, float64 and integer outputs; shape and dtype mismatches; outputs with no,
few, most and all elements differing. No torch, no timing.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpemu.validate.ops import Out, bounded, gather, lazy
from fpemu.validate.ops._num import FLOATS, dtype, max_ulps, to
from fpemu.validate.watch import verdict
from fpemu.validate.watch.verdict import Judged, _admitted, judge

BF16 = ml_dtypes.bfloat16
NAMES = ("float32", "bfloat16", "float16", "float64")
_EMIN = {"float64": -1022, "float32": -126, "float16": -14, "bfloat16": -126}
_MBITS = {"float64": 52, "float32": 23, "float16": 10, "bfloat16": 7}
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


# ---- the reference: the judge written plainly --------------------------------------------


def ref_max_ulps(a: np.ndarray, b: np.ndarray, name: str) -> float:
    """max |a - b| / (2**floor(log2 max(min(|a|, |b|), 2**emin)) 2**-mbits); inf with a NaN."""
    if a.size == 0:
        return 0.0
    with np.errstate(all="ignore"):
        d = np.abs(a - b)
        m = np.maximum(np.minimum(np.abs(a), np.abs(b)), 2.0 ** _EMIN[name])
        _, e = np.frexp(m)  # m = f 2**e, f in [0.5, 1): floor(log2 m) = e - 1
        p = np.where(np.isfinite(m), np.ldexp(1.0, e - 1), np.inf)
        r = d / p
    top = float(r.max())
    return float("inf") if top != top else top * 2.0 ** _MBITS[name]


def ref_admitted(tf: np.ndarray, center: Any, err: Any, name: str) -> np.ndarray:
    """RN(center - err') <= tf <= RN(center + err'), err' = err + |center| 2**-51; NaN for
    NaN where the center is NaN."""
    c, e = np.asarray(center, np.float64), np.asarray(err, np.float64)
    with np.errstate(all="ignore"):
        e = e + np.abs(c) * 2.0**-51
        lo = to(c - e, name).astype(np.float64)
        hi = to(c + e, name).astype(np.float64)
        return np.asarray(((tf >= lo) & (tf <= hi)) | (np.isnan(tf) & np.isnan(c)))


def ref_judge(t: np.ndarray, out: Out) -> Judged:
    v, t = np.asarray(out.value), np.asarray(t)
    if t.shape != v.shape or t.dtype != v.dtype:
        cause = f"shape/dtype: torch {t.dtype}{list(t.shape)}, fpemu {v.dtype}{list(v.shape)}"
        return Judged("differs", t.size, t.size, float("inf"), cause=cause)
    is_float = t.dtype.kind == "f" or t.dtype.name in FLOATS
    if is_float:
        u = _UINT[t.dtype.itemsize]
        diff = np.ascontiguousarray(t).view(u) != np.ascontiguousarray(v).view(u)
    else:
        diff = np.asarray(t != v)
    idx = np.flatnonzero(diff)
    tf = t.reshape(-1)[idx].astype(np.float64)
    vf = v.reshape(-1)[idx].astype(np.float64)
    if is_float:
        keep = ~(np.isnan(tf) & np.isnan(vf))
        idx, tf, vf = idx[keep], tf[keep], vf[keep]
    if idx.size == 0:
        return Judged("identical", t.size)
    name = t.dtype.name
    ulps = ref_max_ulps(tf, vf, name) if is_float else float("inf")
    first = tuple(int(i) for i in np.unravel_index(int(idx[0]), t.shape))
    base = {"n": t.size, "ndiff": int(idx.size), "ulps": ulps, "first": first,
            "torch_value": float(tf[0]), "fpemu_value": float(vf[0])}  # fmt: skip
    if out.exact or not is_float or (out.bound is None and out.err is None):
        cause = "emulation claims exact" if out.exact else (out.reason or "no bound")
        return Judged("differs", cause=cause, **base)

    def full(i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if out.bound is not None:
            return out.bound(i)
        c = out.center if out.center is not None else v
        return tuple(np.broadcast_to(np.asarray(x), t.shape).reshape(-1)[i] for x in (c, out.err))

    with np.errstate(all="ignore"):
        if out.quick is None:
            ok = ref_admitted(tf, *full(idx), name)
        else:
            ok = ref_admitted(tf, *out.quick(idx), name)
            rest = np.flatnonzero(~ok)
            if rest.size:
                ok[rest] = ref_admitted(tf[rest], *full(idx[rest]), name)
    if ok.all():
        return Judged("bounded", cause=out.reason, **base)
    bad = int(np.flatnonzero(~ok)[0])
    base.update(first=tuple(int(i) for i in np.unravel_index(int(idx[bad]), t.shape)),
                torch_value=float(tf[bad]), fpemu_value=float(vf[bad]))  # fmt: skip
    cause = f"outside the bound ({out.reason}): {int(np.count_nonzero(~ok))} elements"
    return Judged("differs", cause=cause, **base)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    return type(a) is type(b) and bool(a == b)


def check(t: np.ndarray, out: Out) -> Judged:
    """judge == the reference, every field (floats by their bits); the verdict. (Signaling
    NaNs among the inputs make casts warn: not part of a verdict.)"""
    with np.errstate(all="ignore"):
        got, want = judge(t, out), ref_judge(t, out)
    bad = [f for f, x, y in zip(Judged._fields, got, want, strict=True) if not _same(x, y)]
    assert not bad, (bad, got, want)
    return got


# ---- inputs --------------------------------------------------------------------------------


def _codes(name: str, bits: np.ndarray) -> np.ndarray:
    """Format values (in the format's dtype) from raw bit patterns."""
    dt = dtype(name)
    return bits.astype(_UINT[dt.itemsize]).view(dt)


def _special(name: str) -> np.ndarray:
    """NaN (two payloads), +-inf, +-0, the smallest subnormal and normal, the largest finite."""
    f = ml_dtypes.finfo(dtype(name))
    vals = [np.inf, -np.inf, 0.0, -0.0, float(f.smallest_subnormal), -float(f.tiny),
            float(f.tiny), float(f.max), -float(f.max), np.nan]  # fmt: skip
    out = np.array(vals).astype(dtype(name))
    nan2 = out[-1:].copy()
    nan2.view(_UINT[out.itemsize])[0] ^= 1  # another NaN payload
    return np.concatenate([out, nan2])


def _nudged(x: np.ndarray, k: int) -> np.ndarray:
    """The codes ``k`` bit patterns away (a neighbour; across +-0 and inf a NaN or the other
    sign: adversarial too)."""
    u = _UINT[x.dtype.itemsize]
    return (x.view(u).astype(np.int64) + k).astype(u).view(x.dtype)


def case(
    rng: np.random.Generator,
    name: str,
    shape: tuple[int, ...],
    frac: float,
    err_kind: str,
    center_kind: str,
    specials: bool,
) -> tuple[np.ndarray, Out]:
    """(torch's output, a bounded Out) with about ``frac`` of the elements differing:
    neighbours, the rounded ends of the range and one code beyond them, specials."""
    dt = dtype(name)
    n = int(np.prod(shape))
    v = (rng.standard_normal(n) * 4.0 ** rng.integers(-3, 4, n)).astype(dt)
    if specials:
        sp = _special(name)
        v[rng.integers(0, n, sp.size * 2)] = np.tile(sp, 2)
        v[rng.integers(0, n, 4)] = (rng.random(4) * float(ml_dtypes.finfo(dt).tiny)).astype(dt)
    vf = v.astype(np.float64)
    with np.errstate(all="ignore"):
        ulp = np.abs(vf) * 2.0 ** -_MBITS[name]
        if center_kind == "value":
            center = None
            c64 = vf
        else:
            c64 = vf + ulp * rng.uniform(-0.7, 0.7, n)
            if specials:
                c64[rng.integers(0, n, 3)] = [np.nan, np.inf, -np.inf]
            center = c64 if center_kind == "float64" else c64.astype(np.float32)
            c64 = np.asarray(center, np.float64)
        scale = ulp * rng.uniform(0.0, 1.5, n)
    if err_kind == "scalar":
        err: Any = float(np.nanmedian(scale[np.isfinite(scale)])) if n else 0.0
    elif err_kind == "zero":
        err = 0.0
    elif err_kind == "broadcast":
        err = np.nan_to_num(scale.reshape(shape)[..., :1], posinf=1.0)  # one per row
        if err.ndim > 1:
            err = err.max(axis=tuple(range(err.ndim - 1)), keepdims=True)[0]  # shape (1,)
    else:
        err = np.nan_to_num(scale.reshape(shape), posinf=1.0)
        if specials:
            flat = err.reshape(-1)
            flat[rng.integers(0, n, 4)] = [0.0, np.nan, np.inf, 1e300]
    out = bounded(v.reshape(shape), err, "test bound", center=None if center is None
                  else np.asarray(center).reshape(shape))  # fmt: skip
    t = v.copy()
    pick = rng.random(n) < frac
    e64 = np.broadcast_to(np.asarray(err, np.float64), shape).reshape(-1)
    with np.errstate(all="ignore"):
        w = e64 + np.abs(c64) * 2.0**-51
        lo, hi = to(c64 - w, name), to(c64 + w, name)
    how = rng.integers(0, 8, n)
    cand = [_nudged(v, 1), _nudged(v, -1), lo, hi, _nudged(lo, -1), _nudged(hi, 1),
            _nudged(v, 2), _nudged(hi, -1)]  # fmt: skip
    for k, arr in enumerate(cand):
        sel = pick & (how == k)
        t[sel] = arr[sel]
    if specials:
        sp = _special(name)
        t[rng.integers(0, n, sp.size)] = sp
    return t.reshape(shape), out


# ---- the tests -----------------------------------------------------------------------------

ERRS = ("elementwise", "scalar", "broadcast", "zero")
CENTERS = ("value", "float64", "float32")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("err_kind", ERRS)
@pytest.mark.parametrize("center_kind", CENTERS)
@pytest.mark.parametrize("specials", [False, True])
def test_bounded_outputs_small_and_dense(name: str, err_kind: str, center_kind: str,
                                         specials: bool) -> None:  # fmt: skip
    """Small outputs (the gathered path) and large ones with few, most and all elements
    differing (the whole-array path from half of them up): the reference's fields."""
    rng = np.random.default_rng(zlib.crc32(f"{name}{err_kind}{center_kind}{specials}".encode()))
    seen = set()
    for shape, frac in (((7,), 0.5), ((3, 5), 1.0), ((64, 128), 0.02), ((64, 128), 0.6),
                        ((2, 64, 64), 1.0), ((8192,), 0.9)):  # fmt: skip
        t, out = case(rng, name, shape, frac, err_kind, center_kind, specials)
        seen.add(check(t, out).verdict)
        # the same output with every differing element made admissible by a huge err
        check(t, dataclasses.replace(out, err=np.float64(np.inf)))
        if t.ndim == 2:  # transposed views: strided arrays, C order of the transpose
            c = None if out.center is None else np.asarray(out.center).T
            check(t.T, dataclasses.replace(out, value=out.value.T, center=c,
                                           err=np.asarray(out.err).T))  # fmt: skip
    if not specials and err_kind != "zero":
        assert "differs" in seen or "bounded" in seen


@pytest.mark.parametrize("name", NAMES)
def test_dense_path_runs_and_falls_back(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole-array path is taken (a spy counts it) where most of a large output differs,
    gives up where a NaN or inf makes the ulp distance infinite, and both give the
    reference's fields; without the path (the threshold out of reach) the same fields."""
    calls = {"dense": 0, "none": 0}
    real = verdict._judge_dense

    def spy(*a: Any) -> Any:
        r = real(*a)
        calls["dense" if r is not None else "none"] += 1
        return r

    monkeypatch.setattr(verdict, "_judge_dense", spy)
    rng = np.random.default_rng(7)
    results = []
    for specials in (False, True):
        for err_kind in ("elementwise", "scalar", "zero"):
            t, out = case(rng, name, (96, 64), 0.8, err_kind, "float64", specials)
            results.append((t, out, check(t, out)))
    assert calls["dense"] >= 3 and calls["none"] >= 1, calls
    monkeypatch.setattr(verdict, "_DENSE", 10**9)
    for t, out, j in results:
        assert check(t, out) == j or all(map(_same, check(t, out), j))


def test_an_element_just_outside_is_found_first_and_counted() -> None:
    """Planted: two elements one code beyond ``RN(center + err)`` in a dense float32 output:
    differs, the first planted one reported, both counted; one code inside: bounded."""
    n = 10000
    v = np.linspace(1.0, 2.0, n, dtype=np.float32)
    err = np.full(n, 2.0**-23)  # half an ulp: the range rounds to v's neighbours
    out = bounded(v, err, "r")
    t = _nudged(v, 1)  # every element one code up: admitted
    assert check(t, out).verdict == "bounded"
    t[[4321, 8000]] = _nudged(v, 2)[[4321, 8000]]
    j = check(t, out)
    assert j.verdict == "differs" and j.first == (4321,) and j.cause.endswith(": 2 elements")


@pytest.mark.parametrize("name", NAMES)
def test_sufficient_and_exact_admissions_mixed(name: str) -> None:
    """Every element one code up; most errs 1.2 codes (the sufficient test admits), some 0.6
    (only the rounded range does), some 0.3 (outside): bounded with the first differing
    element reported, then differs with the first element outside, on the whole-array and
    the gathered paths alike."""
    dt = dtype(name)
    n = 10000
    v = np.linspace(1.0, 1.9, n).astype(dt)
    t = _nudged(v, 1)
    code = t.astype(np.float64) - v.astype(np.float64)
    err = code * 1.2
    err[[5000, 7000]] = code[[5000, 7000]] * 0.6
    for sel in (slice(None), slice(0, 60)):  # 60 elements: the gathered path
        j = check(t[sel], bounded(v[sel], err[sel], "r"))
        assert j.verdict == "bounded" and j.first == (0,)
    err[[6000, 9000]] = code[[6000, 9000]] * 0.3
    err[[30, 40]] = code[[30, 40]] * 0.3
    for sel in (slice(None), slice(0, 60)):
        j = check(t[sel], bounded(v[sel], err[sel], "r"))
        # (float64's own 2-ulp widening of the ends admits 0.3 codes too)
        assert name == "float64" or (j.verdict == "differs" and j.first == (30,))


@settings(max_examples=300)
@given(st.data())
def test_admitted_is_the_exact_test(data: st.DataObject) -> None:
    """``_admitted`` (the sufficient test, then the exact one on the rest) against the exact
    test alone, on drawn format codes, centers (any float64, specials included) and errs (0,
    subnormal, huge, inf, NaN, negative), scalar or elementwise, and torch's values at the
    rounded ends and one code beyond."""
    name = data.draw(st.sampled_from((*NAMES, "float8_e4m3fn", "float8_e5m2")))
    dt = dtype(name)
    n = data.draw(st.integers(1, 12))
    bits = data.draw(st.lists(st.integers(0, 2 ** (8 * dt.itemsize) - 1), min_size=n,
                              max_size=n))  # fmt: skip
    codes = _codes(name, np.array(bits, np.uint64))
    with np.errstate(all="ignore"):
        cf = codes.astype(np.float64)
    fl = st.floats(allow_nan=True, allow_infinity=True)
    center = np.array(data.draw(st.lists(fl, min_size=n, max_size=n)), np.float64)
    near = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    with np.errstate(all="ignore"):  # (signaling NaNs among the codes)
        center = np.where(near, cf * (1 + 2.0**-30), center)  # many centers near torch's
    errs = st.sampled_from([0.0, 5e-324, 1e-300, 2.0**-24, 1e-3, 1.0, 1e300, np.inf, np.nan,
                            -1.0]) | st.floats(0, 1e10)  # fmt: skip
    if data.draw(st.booleans()):
        err: Any = np.float64(data.draw(errs))
    else:
        err = np.array(data.draw(st.lists(errs, min_size=n, max_size=n)), np.float64)
    with np.errstate(all="ignore"):
        w = err + np.abs(center) * 2.0**-51
        ends = [to(center - w, name), to(center + w, name)]
    pick = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
    cand = [codes, *ends, *(_nudged(np.asarray(e, dt), k) for e in ends for k in (-1, 1))]
    t = np.array([cand[k].reshape(-1)[i] for i, k in enumerate(pick)], dt)
    with np.errstate(all="ignore"):
        tf = t.astype(np.float64)
        got = _admitted(tf, center, err, name)
    np.testing.assert_array_equal(got, ref_admitted(tf, center, err, name))


@settings(max_examples=200)
@given(st.data())
def test_judge_on_drawn_small_outputs(data: st.DataObject) -> None:
    """Whole judgements of small drawn outputs (codes of every kind on both sides)."""
    name = data.draw(st.sampled_from(NAMES))
    dt = dtype(name)
    n = data.draw(st.integers(1, 16))
    codes = st.integers(0, 2 ** (8 * dt.itemsize) - 1)
    vb = np.array(data.draw(st.lists(codes, min_size=n, max_size=n)), np.uint64)
    v = _codes(name, vb)
    moves = data.draw(st.lists(st.sampled_from([0, 0, 1, -1, 2, 1 << 15]), min_size=n,
                               max_size=n))  # fmt: skip
    t = np.array([_nudged(v[i : i + 1], k)[0] for i, k in enumerate(moves)], dt)
    err = data.draw(st.sampled_from([0.0, 1e-3, 1.0, np.inf, np.nan]))
    for out in (bounded(v, err, "r"), Out(v), Out(v, exact=False, reason="unbounded")):
        check(t, out)


def _lazy_out(v: np.ndarray, c: np.ndarray, e: np.ndarray, q: float | None) -> Out:
    def bound(i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return c.reshape(-1)[i], e.reshape(-1)[i]

    def quick(i: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return c.reshape(-1)[i], e.reshape(-1)[i] * q

    return lazy(v, bound, "lazy", quick=None if q is None else quick)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("q", [None, 0.0, 0.5, 1.0])
def test_lazy_bounds_with_and_without_quick(name: str, q: float | None) -> None:
    """Lazy outputs (a bound at flat indices; a quick one inside it, or none): the
    reference's fields, small and large, with specials."""
    rng = np.random.default_rng(int(q or 0) + len(name))
    for shape, frac, specials in (((9,), 0.6, True), ((128, 64), 0.1, True),
                                  ((128, 64), 0.9, False)):  # fmt: skip
        t, out = case(rng, name, shape, frac, "elementwise", "float64", specials)
        c = np.asarray(out.center, np.float64)
        e = np.broadcast_to(np.asarray(out.err, np.float64), shape)
        check(t, _lazy_out(out.value, c, e, q))


def test_gemm_outputs_against_the_reference() -> None:
    """The GEMM's own lazy bound and quick (matmul), bfloat16 and float32, against another
    accumulation order with planted faults."""
    from fpemu.validate.ops import Call, lookup  # noqa: PLC0415

    rng = np.random.default_rng(3)
    for dt, name in ((BF16, "bfloat16"), (np.float32, "float32")):
        a = rng.standard_normal((48, 200)).astype(dt)
        b = rng.standard_normal((200, 40)).astype(dt)
        c = rng.standard_normal(40).astype(dt)
        for op, args in (("aten.mm.default", (a, b)), ("aten.addmm.default", (c, a, b))):
            out = lookup(op)(Call(op, args, {}, (name,)))[0]
            acc = np.zeros((48, 40), np.float32)
            for k in reversed(range(200)):
                acc = acc + a[:, k : k + 1].astype(np.float32) * b[k].astype(np.float32)
            if op == "aten.addmm.default":
                acc = acc + c.astype(np.float32)
            t = acc.astype(dt)
            assert check(t, out).verdict in ("identical", "bounded")
            t2 = t.copy()
            t2[5, 7] = t2[5, 7] * 2 + 1
            assert check(t2, out).verdict == "differs"


@pytest.mark.parametrize("kind", ["int64", "int32", "bool", "uint8"])
def test_integer_outputs(kind: str) -> None:
    rng = np.random.default_rng(1)
    v = rng.integers(0, 2, (6, 700)).astype(kind)
    t = v.copy()
    assert check(t, Out(v)).verdict == "identical"
    t[2, 3] = 1 - t[2, 3] if kind == "bool" else t[2, 3] + 1
    t = t.astype(kind)
    for out in (Out(v), bounded(v, 1.0, "r")):
        assert check(t, out).verdict == "differs"


def test_shape_and_dtype_mismatch() -> None:
    v = np.zeros((4, 5), np.float32)
    check(np.zeros((5, 4), np.float32), bounded(v, 1.0, "r"))
    check(v.astype(np.float16), bounded(v, 1.0, "r"))
    check(v.astype(BF16), Out(v))


@pytest.mark.parametrize("name", NAMES)
def test_identical_and_nan_only_outputs(name: str) -> None:
    """No element differs, or only NaN against NaN (other payloads): identical, small and
    large; a NaN against a number: differs with an infinite distance."""
    dt = dtype(name)
    v = np.linspace(-3, 3, 9000).astype(dt)
    for out in (Out(v), bounded(v, 1e-3, "r")):
        check(v.copy(), out)
    v[::3] = np.nan
    t = v.copy()
    t[::3] = _nudged(v[::3], 1)  # NaN with another payload (or inf for the all-ones one)
    nan = np.isnan(t.astype(np.float64))
    t[~nan & np.isnan(v.astype(np.float64))] = v[0]  # keep NaN where it stayed NaN
    for out in (Out(v), bounded(v, 1e-3, "r")):
        check(t, out)
    t[1] = np.asarray(np.nan, dt)
    j = check(t, bounded(v, 1e-3, "r"))
    assert j.verdict == "differs" and j.ulps == float("inf")


@pytest.mark.parametrize("name", NAMES)
def test_max_ulps_work_space_and_reference(name: str) -> None:
    """``max_ulps`` with and without its work space, against the frexp formula, on every
    pairing of special and ordinary values (NaN, inf, zeros, subnormals)."""
    dt = dtype(name)
    rng = np.random.default_rng(5)
    vals = np.concatenate([_special(name), rng.standard_normal(20).astype(dt)])
    with np.errstate(all="ignore"):
        f = vals.astype(np.float64)
    a, b = np.repeat(f, f.size), np.tile(f, f.size)
    for sel in (slice(None), np.isfinite(a) & np.isfinite(b), np.zeros(a.size, bool)):
        aa, bb = a[sel], b[sel]
        want = ref_max_ulps(aa, bb, name)
        assert _same(max_ulps(aa, bb, name), want)
        assert _same(max_ulps(aa.copy(), bb.copy(), name, overwrite=True), want)
    assert _same(max_ulps(np.float64(1.0), np.float64(1.0 + 2.0**-20), name),
                 ref_max_ulps(np.array([1.0]), np.array([1.0 + 2.0**-20]), name))  # fmt: skip


def test_gather_is_the_broadcast_gather() -> None:
    """``gather`` (no whole broadcast array) gives ``broadcast_to(...).reshape(-1)[idx]``:
    scalars, rows, columns, size-1 axes, non-contiguous arrays, 0-d outputs."""
    rng = np.random.default_rng(2)
    shape = (4, 5, 6)
    idx = rng.integers(0, 120, 50)
    base = rng.standard_normal(shape).astype(np.float32)
    for a in (np.float32(2.5), 3.0, np.array(7.0), rng.standard_normal(6),
              rng.standard_normal((5, 1)), rng.standard_normal((1, 5, 6)), base,
              base.transpose(0, 2, 1).copy().transpose(0, 2, 1), base[:, ::-1, :]):  # fmt: skip
        want = np.broadcast_to(np.asarray(a), shape).reshape(-1)[idx]
        got = gather(a, shape, idx)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    assert gather(np.array(4.0), (), np.array([0])).tolist() == [4.0]
    with pytest.raises(ValueError):
        gather(np.zeros(4), shape, idx)
