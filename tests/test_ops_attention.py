"""Flash-attention (CPU SDPA) emulations against torch's kernels: every output within the
derived bound, on random and adversarial inputs, and a fault beyond the bound is caught."""

from __future__ import annotations

import dataclasses
from decimal import Decimal, getcontext
from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, Out, lookup, names  # noqa: E402
from fpemu.validate.ops._attention_bound import (  # noqa: E402
    add_unmasked,
    causal_keys,
    const,
    expm1_up,
    finish,
    rowmax,
    unmasked,
)
from fpemu.validate.ops._num import fmt as _fmt  # noqa: E402
from fpemu.validate.ops._num import ulp  # noqa: E402
from fpemu.validate.ops.attention import _scores  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import emulate  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
FWD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
BWD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default

# (q length, kv length, head dim, causal, mask, logit magnitude): a kv length of 600 spans two
# 512-key blocks (the online rescaling); magnitude 8 gives logits of ~100 (exp underflow)
CASES = [
    (8, 8, 16, True, False, 1.0),
    (37, 37, 8, True, False, 3.0),
    (20, 600, 16, False, False, 1.0),
    (16, 16, 64, False, True, 1.0),
    (40, 40, 32, True, False, 8.0),
    (200, 200, 8, True, False, 1.0),  # 64-row q blocks
]


def _inputs(dt: torch.dtype, case: tuple[object, ...], seed: int) -> tuple[object, ...]:
    lq, lk, d, causal, mask, mag = case
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(2, 2, lq, d, generator=g) * mag).to(dt)
    k = (torch.randn(2, 2, lk, d, generator=g) * mag).to(dt)
    v = torch.randn(2, 2, lk, d, generator=g).to(dt)
    kw = {"attn_mask": torch.randn(lq, lk, generator=g).to(dt)} if mask else {}
    go = torch.randn(2, 2, lq, d, generator=g).to(dt)
    return q, k, v, causal, kw, go


def _run(fn: object, *args: object, **kw: object) -> object:
    """Call torch, skipping where torch itself cannot run the kernel on this capability (its
    bf16 blocked path needs AVX512: 'pack_vnni2 is only supported when avx512 is supported')."""
    try:
        return fn(*args, **kw)  # type: ignore[operator]
    except RuntimeError as exc:
        if "only supported when avx512" in str(exc):
            pytest.skip(f"torch cannot run this on {torch.backends.cpu.get_cpu_capability()}")
        raise


def _ok(outs: list[object], emulated: list[Out | None]) -> list[str]:
    res = []
    for t, e in zip(outs, emulated, strict=True):
        assert e is not None and not e.exact
        res.append(judge(to_numpy(t), e).verdict)
    return res


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_flash_attention_forward_and_backward_bounded(dt: torch.dtype, case: tuple) -> None:
    q, k, v, causal, kw, go = _inputs(dt, case, 0)
    outs, em = _run(emulate, FWD, q, k, v, 0.0, causal, **kw)
    assert set(_ok(outs, em)) <= {"identical", "bounded"}
    outs2, em2 = emulate(BWD, go, q, k, v, outs[0], outs[1], 0.0, causal, **kw)
    assert set(_ok(outs2, em2)) <= {"identical", "bounded"}


def test_flash_attention_explicit_scale_bounded() -> None:
    q, k, v, _, _, go = _inputs(torch.float32, (12, 12, 8, False, False, 1.0), 3)
    outs, em = emulate(FWD, q, k, v, 0.0, False, scale=0.3)
    assert set(_ok(outs, em)) <= {"identical", "bounded"}
    outs2, em2 = emulate(BWD, go, q, k, v, outs[0], outs[1], 0.0, False, scale=0.3)
    assert set(_ok(outs2, em2)) <= {"identical", "bounded"}


def test_fully_masked_row_is_zero_exactly() -> None:
    q, k, v, _, _, _ = _inputs(torch.float32, (4, 4, 8, False, False, 1.0), 4)
    mask = torch.zeros(4, 4)
    mask[2] = -float("inf")
    outs, em = emulate(FWD, q, k, v, 0.0, False, attn_mask=mask)
    assert float(outs[0][:, :, 2].abs().max()) == 0.0 and float(outs[1][:, :, 2].abs().max()) == 0.0
    assert set(_ok(outs, em)) <= {"identical", "bounded"}


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_a_fault_beyond_the_bound_differs(dt: torch.dtype) -> None:
    """Moving one output element by twice its bound (plus a rounding) is caught, and so is
    an attention computed without the causal mask."""
    q, k, v, _, _, go = _inputs(dt, CASES[1], 1)
    outs, em = emulate(FWD, q, k, v, 0.0, True)
    for t, e in zip(outs, em, strict=True):
        assert e is not None and e.err is not None and e.center is not None
        bad = to_numpy(t).copy()
        i = 5
        c = float(e.center.reshape(-1)[i])
        err = float(np.broadcast_to(np.asarray(e.err), bad.shape).reshape(-1)[i])
        step = float(ulp(c, _fmt(bad)))
        bad.reshape(-1)[i] = c + 2 * err + 3 * step  # outside center +- err by > one rounding
        assert judge(bad, e).verdict == "differs"
    wrong = FWD(q, k, v, 0.0, False)  # not causal
    assert judge(to_numpy(wrong[0]), em[0]).verdict == "differs"
    _, em2 = emulate(BWD, go, q, k, v, outs[0], outs[1], 0.0, True)
    wrong2 = BWD(go, q, k, v, outs[0], outs[1], 0.0, False)
    assert "differs" in [
        judge(to_numpy(t), e).verdict for t, e in zip(wrong2, em2, strict=True) if e is not None
    ]


def test_bf16_probabilities_are_rounded_before_pv() -> None:
    """The finding: bf16 output error is of the order of bf16's rounding of p (not of the
    float32 GEMM): with p rounded to bf16 the measured output is much closer than without."""
    q, k, v, _, _, _ = _inputs(torch.bfloat16, (64, 64, 16, False, False, 1.0), 2)
    out, _ = _run(FWD, q, k, v, 0.0, False)
    qd, kd, vd = (x.double() for x in (q, k, v))
    s = (qd @ kd.transpose(-1, -2)) * float(np.float32(0.25))
    p = torch.exp(s - s.amax(-1, keepdim=True))
    exact = (p @ vd) / p.sum(-1, keepdim=True)
    rounded = (p.to(torch.bfloat16).double() @ vd) / p.sum(-1, keepdim=True)
    t = out.double()
    assert float((t - rounded.to(torch.bfloat16).double()).abs().max()) < float(
        (t - exact.to(torch.bfloat16).double()).abs().max()
    ) or torch.equal(rounded.to(torch.bfloat16), exact.to(torch.bfloat16))


def test_dropout_is_refused() -> None:
    """torch's CPU flash kernel refuses dropout itself; the emulation refuses it too rather
    than judge a random mask."""
    q = np.zeros((1, 1, 2, 4), np.float32)
    call = Call(str(FWD), (q, q, q, 0.5, False), {}, ("float32", "float32"))
    with pytest.raises(NotImplementedError, match=r"dropout_p=0\.5"):
        lookup(str(FWD))(call)


def test_registered() -> None:
    have = set(names())
    for op in (
        "aten._scaled_dot_product_flash_attention_for_cpu.default",
        "aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
    ):
        assert op in have


@pytest.mark.parametrize("case", CASES[:5], ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_emulate_value_is_the_watch_center(dt: torch.dtype, case: tuple) -> None:
    """Under emulate (call.model set) only the value is computed: it equals, bit for bit, the
    value watch derives its bound around (the same float64 center rounded once), forward and
    backward, masks and fully masked rows included; its bound is not claimed (infinite)."""
    q, k, v, causal, kw, go = _inputs(dt, case, 5)
    if "attn_mask" in kw:
        kw["attn_mask"][2] = -float("inf")  # a fully masked row
    for op, args in ((FWD, (q, k, v, 0.0, causal)), (BWD, None)):
        if args is None:
            out, lse = _run(FWD, q, k, v, 0.0, causal, **kw)
            args = (go, q, k, v, out, lse, 0.0, causal)
        outs, watched = _run(emulate, op, *args, **kw)
        np_args = tuple(to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args)
        np_kw = {n: to_numpy(t) for n, t in kw.items()}
        call = Call(str(op), np_args, np_kw, tuple(_fmt(to_numpy(t)) for t in outs))
        emulated = lookup(str(op))(dataclasses.replace(call, model="fast"))
        for w, e in zip(watched, emulated, strict=True):
            assert w is not None and e is not None and np.isinf(e.err).all()
            assert w.value.dtype == e.value.dtype
            assert (w.value.view(np.uint8) == e.value.view(np.uint8)).all()
            _same_centers(w, e)


def _same_centers(w: Out | None, e: Out | None) -> None:
    """The float64 centers agree bit for bit (any NaN equals any NaN)."""
    assert w is not None and e is not None
    idx = np.arange(w.value.size)
    bw, be = w.bounds_at(idx), e.bounds_at(idx)
    assert bw is not None and be is not None
    (cw, _), (ce, _) = bw, be
    same = (cw.view(np.uint64) == ce.view(np.uint64)) | (np.isnan(cw) & np.isnan(ce))
    assert same.all(), (cw[~same][:3], ce[~same][:3])


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_backward_with_a_non_finite_logsumexp_keeps_the_centers(dt: torch.dtype) -> None:
    """The watch path zeroes the masked probabilities itself only for a finite logsumexp; rows
    whose given lse is -inf, +inf or NaN (-inf - lse is NaN, not -inf) keep the plain order:
    the centers equal the emulate path's (exp(s - lse) with -inf at masked keys) bit for bit,
    causal and with a -inf mask."""
    q, k, v, _, _, go = _inputs(dt, (9, 9, 8, True, False, 1.0), 6)
    out, lse = _run(FWD, q, k, v, 0.0, True)
    bad = lse.clone()
    bad[0, 0, 1], bad[0, 1, 3], bad[1, 0, 0] = -float("inf"), float("inf"), float("nan")
    mask = torch.zeros(9, 9)
    mask[4, :3] = -float("inf")
    for lse_in, kw in ((bad, {}), (lse, {"attn_mask": mask}), (bad, {"attn_mask": mask})):
        args = (go, q, k, v, out, lse_in, 0.0, True)
        np_args = tuple(to_numpy(a) if isinstance(a, torch.Tensor) else a for a in args)
        np_kw = {n: to_numpy(t) for n, t in kw.items()}
        call = Call(str(BWD), np_args, np_kw, (_fmt(to_numpy(q)),) * 3)
        with np.errstate(all="ignore"):  # the bounds of such rows are inf/NaN (then inf)
            watched = lookup(str(BWD))(call)
            emulated = lookup(str(BWD))(dataclasses.replace(call, model="fast"))
        for w, e in zip(watched, emulated, strict=True):
            _same_centers(w, e)


def test_expm1_up_bounds_expm1_from_above() -> None:
    """The float32 expm1 bound of the watch path, widened by its own 11 float32 roundings
    (counted in the module's W32), is >= expm1(y)(1 + err) + err evaluated exactly (Decimal at
    60 digits), on each branch: max y <= 2^-9 (coefficient at max y), <= 2^-6 (Taylor), beyond
    (float64 expm1 of the argument widened by (1 + 2^-24)^81 < 1 + 2^-17), mixed arrays too;
    and not looser than that widening plus 2^-19."""
    getcontext().prec = 60
    grids = [
        [0.0, 1e-12, 1e-7, 3e-5, 2.0**-10, 2.0**-9],
        [1e-6, 2.0**-9 * 1.01, 0.005, 0.01, 2.0**-6],
        [1e-6, 0.0157, 0.0625, 0.3, 2.0, 30.0, 80.0],
    ]
    for grid, widened in zip(grids, (False, False, True), strict=True):
        y = np.float32(grid)
        for err in (0.0, 2.0**-23, 1.2e-4):
            got = expm1_up(y.copy(), err)
            d_err = Decimal(err)
            for yi, gi in zip(y.tolist(), got.tolist(), strict=True):
                exact = (Decimal(yi).exp() - 1) * (1 + d_err) + d_err
                assert Decimal(gi) * Decimal((1 + 2.0**-24) ** 11) >= exact, (yi, err, gi)
                arg = Decimal(yi) * Decimal(1 + 2.0**-17) if widened else Decimal(yi)
                upper = ((arg.exp() - 1) * (1 + d_err) + d_err) * Decimal(1 + 2.0**-19)
                assert Decimal(gi) <= upper + Decimal(2.0**-140), (yi, err, gi)


def test_rowmax_equals_numpy_max() -> None:
    """Row maxima by halving give numpy's max bit for bit (odd lengths, -inf rows, NaN)."""
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 5, 7, 9, 64, 65):
        for dt in (np.float32, np.float64):
            a = rng.standard_normal((3, 4, n)).astype(dt)
            a[0, 1] = -np.inf
            a[2, 3, n // 2] = np.nan
            want = np.max(a, axis=-1, keepdims=True)
            got = rowmax(a)
            assert got.shape == want.shape
            assert (got.view(np.uint8) == want.view(np.uint8)).all() or (
                np.array_equal(got, want, equal_nan=True)
            )


def test_float32_constants_round_up() -> None:
    """A bound's constant as float32 never undercuts the float64 one, and is the nearest such."""
    for c in (1 / 3, 2.0**-24 * 5, 1 + 2.0**-30, 0.1, 2.0**-126 + 2.0**-148, 1.0):
        f = const(c)
        assert f.dtype == np.float32 and Fraction(float(f)) >= Fraction(c)
        below = np.nextafter(f, np.float32(0))
        assert Fraction(float(below)) < Fraction(c)


def test_numpy_exp_lanes_do_not_depend_on_masked_neighbours() -> None:
    """What the watch path's probs relies on: numpy's float64 exp gives an element the same
    bits whether its neighbours are -inf (masked keys: the slow path) or 0, at every
    alignment, underflowing and subnormal results included."""
    rng = np.random.default_rng(8)
    for _ in range(200):
        n = int(rng.integers(1, 3000))
        x = -np.abs(rng.standard_normal(n)) * 10.0 ** rng.uniform(-3, 3.2, n)
        m = rng.random(n) < rng.random()
        off = int(rng.integers(0, 8))
        a, b = np.empty(n + 8)[off : off + n], x.copy()
        a[:] = x
        a[m], b[m] = -np.inf, 0.0
        ea, eb = np.exp(a), np.exp(b)
        assert (ea[~m].view(np.uint64) == eb[~m].view(np.uint64)).all()
        assert (ea[m] == 0).all()


def test_numpy_exp_on_the_unmasked_keys_gives_the_plain_exp_bits() -> None:
    """What probs relies on (exp with ``where``: the unmasked runs only): each computed element
    has the bits of the plain exp, at every run length and alignment, underflow, subnormal,
    overflow, inf and NaN included, and the others keep theirs; also on the causal pattern of
    attention-shaped arrays, whose ``unmasked`` is the cached complement of the pattern."""
    rng = np.random.default_rng(11)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(300):
            n = int(rng.integers(1, 3000))
            x = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3.2, n)
            x[rng.random(n) < 0.01] = rng.choice([np.nan, np.inf, -np.inf])
            keep = rng.random(n) < rng.random()
            off = int(rng.integers(0, 8))
            a = np.empty(n + 8)[off : off + n]
            a[:] = x
            np.exp(a, out=a, where=keep)
            assert (a[keep].view(np.uint64) == np.exp(x)[keep].view(np.uint64)).all()
            assert (a[~keep].view(np.uint64) == x[~keep].view(np.uint64)).all()
        for lq, lk in ((64, 64), (37, 37), (9, 40), (40, 9)):
            x = -np.abs(rng.standard_normal((2, 3, lq, lk))) * 10.0 ** rng.uniform(-3, 3, lk)
            keep = unmasked(causal_keys(lq, lk))
            assert keep is unmasked(causal_keys(lq, lk)) and (keep == ~causal_keys(lq, lk)).all()
            a = np.where(keep, x, 0.0)
            np.exp(a, out=a, where=keep)
            want = np.where(keep, np.exp(x), 0.0)
            assert (a.view(np.uint64) == want.view(np.uint64)).all()
    m = rng.random((2, 5, 5)) < 0.5
    assert (unmasked(m) == ~m).all()


def test_unmasked_add_on_the_causal_pattern_equals_the_masked_add() -> None:
    """The cached causal add (x + 0 where masked) gives the masked add's bits, on non-negative
    values, inf and NaN; a mask that is not the causal pattern takes the masked add."""
    rng = np.random.default_rng(9)
    for lq, lk in ((7, 7), (5, 9), (64, 64)):
        a = rng.random((2, 3, lq, lk)).astype(np.float32) * np.float32(1e-30)
        a[0, 1, 2, :3] = [np.inf, np.nan, 0.0]
        tri = causal_keys(lq, lk)
        want = a.copy()
        np.add(want, const(1e-38), out=want, where=~tri)
        got = a.copy()
        add_unmasked(got, 1e-38, tri)
        assert (got.view(np.uint32) == want.view(np.uint32)).all()
        other = np.broadcast_to(tri.copy(), a.shape)  # equal values, not the cached pattern
        got2 = a.copy()
        add_unmasked(got2, 1e-38, other)
        assert (got2.view(np.uint32) == want.view(np.uint32)).all()


def test_finish_turns_nan_into_an_infinite_bound() -> None:
    """finish's NaN test (by the max of the float32 GEMM and of the added floor) finds a NaN
    from either, and with a zero factor (inf * 0) falls back to the sum."""
    c = np.float32([[1.0, 2.0], [3.0, 4.0]])
    assert (finish(c, 2.0, 1.0) == np.float64([[3.0, 5.0], [7.0, 9.0]])).all()
    bad = c.copy()
    bad[1, 0] = np.nan
    e = finish(bad, 2.0, 1.0)
    assert np.isinf(e[1, 0]) and (e[0] == [3.0, 5.0]).all() and e[1, 1] == 9.0
    e = finish(c, 2.0, np.float64([[0.0, np.nan]]))
    assert np.isinf(e[:, 1]).all() and (e[:, 0] == [2.0, 6.0]).all()
    big = c.copy()
    big[0, 1] = np.inf
    with np.errstate(invalid="ignore"):
        e = finish(big, 0.0, 0.0)
    assert np.isinf(e[0, 1]) and (e.ravel()[[0, 2, 3]] == 0).all()


def test_scores_take_the_causal_pattern_only_for_finite_inputs() -> None:
    """The masked keys are the cached causal pattern for finite q and k without a mask, and
    s's own -inf (plus the pattern) where q or k holds inf or NaN (found from the float32
    |q|, |k|), with and without filling s."""
    rng = np.random.default_rng(10)
    q, k = rng.standard_normal((2, 1, 6, 4)), rng.standard_normal((2, 1, 6, 4))
    call = Call(str(FWD), (q, k, k, 0.0, True), {}, ("float32", "float32"))
    for fill in (True, False):
        masked = _scores(call, q, k, True, fill=fill)[3]
        assert masked is causal_keys(6, 6)
        for bad in (np.inf, -np.inf, np.nan):
            for qq, kk in ((q.copy(), k), (q, k.copy())):
                (qq if qq is not q else kk)[1, 0, 2, 1] = bad
                with np.errstate(invalid="ignore"):
                    s, _, _, masked, _, _ = _scores(call, qq, kk, True, fill=fill)
                assert masked is not causal_keys(6, 6) and masked.shape == s.shape
                assert (masked >= causal_keys(6, 6)).all()
                if fill:
                    assert np.isneginf(s[masked]).all()


def test_scores_zero_the_causal_keys_of_e_s_by_their_factors_as_by_the_masked_copy() -> None:
    """On the causal pattern alone, _scores zeroes e_s at the masked keys through its factors
    (cached arrays with 0 there): its bits equal those of the masked copy that a zero mask
    takes (scalar factors, then the masked keys set to +0), for ordinary inputs and for
    inputs whose |q||k| sums or float32 scores overflow (inf times 0 is NaN: zeroed after),
    with a negative scale too; every masked key is +0."""
    rng = np.random.default_rng(12)
    for mag, scale in ((1.0, None), (3.0, -0.7), (1e18, None), (1e30, None), (1e-30, 2.0)):
        q = rng.standard_normal((2, 3, 7, 5)).astype(np.float32) * np.float32(mag)
        k = rng.standard_normal((2, 3, 7, 5)).astype(np.float32) * np.float32(mag)
        q64, k64 = q.astype(np.float64), k.astype(np.float64)
        kw = {} if scale is None else {"scale": scale}
        got = []
        for extra in ({}, {"attn_mask": np.zeros((7, 7), np.float32)}):
            call = Call(str(FWD), (q, k, k, 0.0, True), {**kw, **extra}, ("float32", "float32"))
            with np.errstate(over="ignore", invalid="ignore"):
                _, e_s, _, masked, _, _ = _scores(call, q64, k64, True)
            assert (masked is causal_keys(7, 7)) == (not extra)
            got.append(e_s.copy())  # a scratch array: the next call overwrites it
        plain, ref = got
        tri = np.broadcast_to(causal_keys(7, 7), plain.shape)
        assert (plain.view(np.uint32) == ref.view(np.uint32)).all(), (mag, scale)
        assert (plain[tri].view(np.uint32) == 0).all()
