"""Layer norm emulations against torch's CPU kernels (bits where exact)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup, names  # noqa: E402
from fpemu.validate.watch.convert import dtype_name, to_numpy, tree_to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import capability, emulate, judged, one_ulp_off  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
LN = torch.ops.aten.native_layer_norm.default
LNB = torch.ops.aten.native_layer_norm_backward.default


def _rows(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """Random rows plus adversarial ones: a large offset (cancellation in x - mean), huge and
    tiny magnitudes, subnormals, signed zeros, constant rows (variance 0), inf and NaN."""
    x = rng.standard_normal((m, n)) * rng.choice([1.0, 1e-3, 1e3], size=(m, 1))
    x += rng.choice([0.0, 10.0, 3000.0, -1e4], size=(m, 1))
    x[0] = 1000.0 + rng.standard_normal(n) * 1e-3  # cancellation: spread far below the mean
    x[1] = rng.standard_normal(n) * 1e-39  # float32 subnormals
    x[2] = 0.0
    x[2, ::2] = -0.0
    x[3] = 7.0  # constant row: variance 0, rstd = 1/sqrt(eps)
    x[4] = rng.standard_normal(n) * 1e30
    x[5, 0] = np.inf
    x[6, -1] = np.nan
    return x.astype(np.float32)


def _ln_args(dt: torch.dtype, n: int, weights: str, seed: int) -> tuple[torch.Tensor, ...]:
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(_rows(rng, 24, n)).to(dt)
    if weights == "none":
        return x, None, None
    wdt = torch.float32 if weights == "float32" else dt
    w = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(wdt)
    b = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(wdt)
    return x, w, b


#: (dtype, weights) pairs: a low input with float32 weights is autocast's mixed-type kernel
WEIGHTS = [(dt, w) for dt in DTYPES for w in ("float32", "same", "none")
           if not (dt == torch.float32 and w == "same")]  # fmt: skip


@pytest.mark.parametrize("n", [5, 13, 33, 520])
@pytest.mark.parametrize(("dt", "weights"), WEIGHTS, ids=str)
def test_layer_norm_exact(dt: torch.dtype, weights: str, n: int) -> None:
    x, w, b = _ln_args(dt, n, weights, n)
    v = [j.verdict for j in judged(LN, x, [n], w, b, 1e-5)]
    assert v == ["identical"] * 3, v


def test_layer_norm_multi_dim_shape_exact() -> None:
    x = torch.randn(3, 4, 6, 5, generator=torch.Generator().manual_seed(1)) * 5 + 40
    w = torch.randn(6, 5)
    v = [j.verdict for j in judged(LN, x, [6, 5], w, None, 1e-6)]
    assert v == ["identical"] * 3


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_layer_norm_planted_fault_differs(dt: torch.dtype) -> None:
    x, w, b = _ln_args(dt, 40, "float32", 3)
    outs, emulated = emulate(LN, x, [40], w, b, 1e-5)
    for k in range(3):
        t = one_ulp_off(to_numpy(outs[k]), 9)
        assert judge(t, emulated[k]).verdict == "differs"


def test_layer_norm_is_not_the_correctly_rounded_value() -> None:
    """E5 reproduced: the kernel (and so the emulation) is far from the exact layer norm."""
    x, _, _ = _ln_args(torch.float32, 64, "none", 5)
    y = LN(x[:1], [64], None, None, 1e-5)[0].numpy().astype(np.float64)
    xd = x[:1].numpy().astype(np.float64)
    exact = (xd - xd.mean()) / np.sqrt(xd.var() + np.float32(1e-5))
    assert np.max(np.abs(y - exact) / np.spacing(np.abs(exact).astype(np.float32))) > 100
    assert judged(LN, x[:1], [64], None, None, 1e-5)[0].verdict == "identical"


@pytest.mark.parametrize("mask", [(True, True, True), (True, False, False), (False, True, True)])
@pytest.mark.parametrize(("dt", "weights"), [p for p in WEIGHTS if p[1] != "none"], ids=str)
def test_layer_norm_backward_bounded(dt: torch.dtype, weights: str, mask: tuple[bool, ...]) -> None:
    rng = np.random.default_rng(7)
    n = 37
    x = torch.from_numpy(_rows(rng, 24, n)[7:]).to(dt)  # finite rows
    wdt = torch.float32 if weights == "float32" else dt
    w = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(wdt)
    b = torch.from_numpy(rng.standard_normal(n).astype(np.float32)).to(wdt)
    _, mean, rstd = LN(x, [n], w, b, 1e-5)
    dy = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32)).to(dt)
    js = judged(LNB, dy, x, [n], mean, rstd, w, b, list(mask))
    assert len(js) == sum(mask)
    assert all(j.verdict in ("identical", "bounded") for j in js), [
        (j.verdict, j.cause) for j in js
    ]


@pytest.mark.parametrize("n", [1, 5, 13, 32, 37, 257])
@pytest.mark.parametrize("weights", [True, False])
def test_layer_norm_backward_grad_input_exact_float32(weights: bool, n: int) -> None:
    """The float32 input gradient bit for bit (lane sums, tail, shuffle tree, fusions); a
    one-ulp change of it differs."""
    rng = np.random.default_rng(n)
    x = torch.from_numpy(_rows(rng, 24, n)[7:])
    w = torch.from_numpy(rng.standard_normal(n).astype(np.float32)) if weights else None
    b = torch.from_numpy(rng.standard_normal(n).astype(np.float32)) if weights else None
    _, mean, rstd = LN(x, [n], w, b, 1e-5)
    dy = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32))
    outs, emulated = emulate(LNB, dy, x, [n], mean, rstd, w, b, [True, False, False])
    assert emulated[0] is not None and emulated[0].exact
    assert judge(to_numpy(outs[0]), emulated[0]).verdict == "identical"
    assert judge(one_ulp_off(to_numpy(outs[0]), 3), emulated[0]).verdict == "differs"


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(("dt", "weights"), [p for p in WEIGHTS if p[1] != "none"], ids=str)
def test_layer_norm_backward_weight_grads_exact_given_threads(
    dt: torch.dtype, weights: str, threads: int
) -> None:
    """grad_weight/grad_bias bit for bit once the emulation knows torch's thread count (the
    row partition), for float32 and the bf16/fp16 buffers; a one-ulp change differs."""
    rng = np.random.default_rng(threads)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for m, n in ((7, 13), (16, 40), (33, 8)):
            x = torch.from_numpy(_rows(rng, m + 7, n)[7:]).to(dt)
            wdt = torch.float32 if weights == "float32" else dt
            w, b = torch.randn(n).to(wdt), torch.randn(n).to(wdt)
            _, mean, rstd = LN(x, [n], w, b, 1e-5)
            dy = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32)).to(dt)
            args = (dy, x, [n], mean, rstd, w, b, [False, True, True])
            outs = list(LNB(*args)[1:])
            call = Call(str(LNB), tuple(tree_to_numpy(args)), {},
                        tuple(dtype_name(t.dtype) for t in outs), capability=capability(),
                        options={"num_threads": threads})  # fmt: skip
            emulated = lookup(str(LNB))(call)
            for t, e in zip(outs, emulated, strict=True):
                assert e is not None and e.exact
                assert judge(to_numpy(t), e).verdict == "identical"
                assert judge(one_ulp_off(to_numpy(t), 2), e).verdict == "differs"
    finally:
        torch.set_num_threads(old)


def test_layer_norm_backward_bound_catches_a_wrong_gradient() -> None:
    """A weight/bias gradient 0.1% off (far above the float32 bound) differs."""
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((8, 64)).astype(np.float32))
    w, b = torch.randn(64), torch.randn(64)
    _, mean, rstd = LN(x, [64], w, b, 1e-5)
    dy = torch.randn(8, 64)
    outs, emulated = emulate(LNB, dy, x, [64], mean, rstd, w, b, [True, True, True])
    for t, e in zip(outs[1:], emulated[1:], strict=True):
        assert e is not None
        assert judge(to_numpy(t), e).verdict in ("identical", "bounded")
        assert judge(to_numpy(t) * np.float32(1.001), e).verdict == "differs"


def test_registered() -> None:
    have = set(names())
    for op in (
        "aten.native_layer_norm.default",
        "aten.native_layer_norm_backward.default",
        "aten.native_batch_norm.default",
        "aten.native_batch_norm_backward.default",
    ):
        assert op in have


def _scan_oracle(terms: np.ndarray, buf: str) -> np.ndarray:
    """The buffer loop with exact sums (Fraction) and one correct rounding to float32, then
    one to the buffer's format, per step (reference/: no fpemu code)."""
    from fractions import Fraction  # noqa: PLC0415

    from reference.rounding import round_value  # noqa: PLC0415
    from reference.spec import BFLOAT16, FLOAT16, FLOAT32  # noqa: PLC0415
    from reference.value import to_float  # noqa: PLC0415

    spec = {"float32": FLOAT32, "bfloat16": BFLOAT16, "float16": FLOAT16}[buf]
    acc = np.zeros(terms.shape[1:])
    for k in range(terms.shape[0]):
        for i in np.ndindex(acc.shape):
            r32 = round_value(
                Fraction(float(acc[i])) + Fraction(float(terms[k][i])), FLOAT32, "rne"
            )
            acc[i] = to_float(round_value(r32, spec, "rne"))
    return acc


@pytest.mark.parametrize("buf", ["float32", "bfloat16", "float16"])
def test_layer_norm_buffer_scan_is_the_exact_loop(buf: str) -> None:
    """The weight-gradient buffer loop (one or two NumPy calls per row, boundary cases found
    after the loop and the loop restarted there) equals the loop with exact sums, on random
    exact products and on products built so the float64 sum is inexact and lands on a float32
    midpoint (the double rounding the restart must repair) at several steps, including the
    last."""
    from fpemu.validate.ops._ln_grads import _scan  # noqa: PLC0415

    rng = np.random.default_rng(7)
    a = rng.standard_normal((40, 3, 6)).astype(np.float32).astype(np.float64)
    b = rng.standard_normal((40, 3, 6)).astype(np.float32).astype(np.float64)
    terms = a * b  # exact products of float32 values
    ours, oracle = _scan(terms, 6, buf), _scan_oracle(terms, buf)
    assert (ours.view(np.uint64) == oracle.view(np.uint64)).all()
    # acc = 1 after step 0 (every buffer format holds 1), then 1 + 2^-24 + 2^-76: a float64
    # sum that rounds onto the float32 midpoint 1 + 2^-24 while the exact sum lies above it
    t = np.zeros((6, 2, 6))
    t[0] = 1.0
    t[1, 0, 2] = 2.0**-24 + 2.0**-76
    t[3, 1, 5] = -(2.0**-25 + 2.0**-77)  # below 1 the midpoint is 1 - 2^-25
    t[5, 0, 0] = 2.0**-24 + 2.0**-76
    ours, oracle = _scan(t, 6, buf), _scan_oracle(t, buf)
    assert (ours.view(np.uint64) == oracle.view(np.uint64)).all()
    if buf == "float32":  # the repair is visible: plain float64 then float32 would give 1.0
        assert ours[0, 2] == 1 + 2.0**-23 and ours[0, 0] == 1 + 2.0**-23
        assert ours[1, 5] == 1 - 2.0**-24
    # in the buffer's own format: 1 + h + 2^-24 + 2^-60 (h: half the buffer's ulp at 1) rounds
    # in float64 onto the float32 tie 1 + h + 2^-24, which goes to even (1 + h), a buffer tie
    # that goes to 1; the exact sum gives float32 1 + h + 2^-23 and the buffer's 1 + 2h
    h = {"float32": 2.0**-24, "bfloat16": 2.0**-8, "float16": 2.0**-11}[buf]
    if buf != "float32":
        t = np.zeros((2, 1, 1))
        t[0] = 1.0
        t[1] = h + 2.0**-24 + 2.0**-60
        ours = _scan(t, 1, buf)
        assert ours[0, 0] == 1 + 2 * h == _scan_oracle(t, buf)[0, 0]


@pytest.mark.parametrize("buf", ["float32", "bfloat16", "float16"])
def test_layer_norm_buffer_scan_checks_every_block(
    buf: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scan's boundary check runs over blocks of steps (cache-sized): with 3 steps a block,
    double-rounding cases in later blocks (steps 13 and 27, after random exact products) are
    still found and repaired, equal to the exact loop."""
    from fpemu.validate.ops import _ln_grads as grads  # noqa: PLC0415

    monkeypatch.setattr(grads, "_CHECK_BLOCK", 24)  # 2 threads x 4 columns: 3 steps a block
    rng = np.random.default_rng(17)
    a = rng.standard_normal((30, 2, 4)).astype(np.float32).astype(np.float64)
    b = rng.standard_normal((30, 2, 4)).astype(np.float32).astype(np.float64)
    t = a * b * 2.0**-30  # small next to the buffer's 1: the buffer stays near 1
    t[0] = 1.0
    ours, oracle = grads._scan(t, 4, buf), _scan_oracle(t, buf)
    assert (ours.view(np.uint64) == oracle.view(np.uint64)).all()
    # now buffers exactly at 1 when the crafted terms arrive: zero terms between them
    t = np.zeros((30, 2, 4))
    t[0] = 1.0
    t[13, 0, 1] = 2.0**-24 + 2.0**-76  # float64 rounds onto the float32 midpoint 1 + 2^-24
    t[27, 1, 3] = -(2.0**-25 + 2.0**-77)
    ours, oracle = grads._scan(t, 4, buf), _scan_oracle(t, buf)
    assert (ours.view(np.uint64) == oracle.view(np.uint64)).all()
    if buf == "float32":  # repaired: plain float64 then float32 would leave 1.0
        assert ours[0, 1] == 1 + 2.0**-23 and ours[1, 3] == 1 - 2.0**-24


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_layer_norm_backward_16_bit_grad_input_bound_is_tight_and_catches(dt: torch.dtype) -> None:
    """The 16-bit input gradient is bounded (computed where torch differs from the value): most
    elements admit one value, so one ulp off there differs; a 1% error anywhere differs."""
    rng = np.random.default_rng(11)
    x = torch.from_numpy(rng.standard_normal((64, 96)).astype(np.float32)).to(dt)
    w, b = torch.randn(96).to(dt), torch.randn(96).to(dt)
    _, mean, rstd = LN(x, [96], w, b, 1e-5)
    dy = torch.from_numpy(rng.standard_normal(x.shape).astype(np.float32)).to(dt)
    outs, em = emulate(LNB, dy, x, [96], mean, rstd, w, b, [True, False, False])
    t, e = to_numpy(outs[0]), em[0]
    assert e is not None and not e.exact
    assert judge(t, e).verdict in ("identical", "bounded")
    bounds = e.bounds_at(np.arange(t.size))
    assert bounds is not None
    lo = np.asarray(to_numpy(torch.from_numpy(bounds[0] - bounds[1]).to(dt)), np.float64)
    hi = np.asarray(to_numpy(torch.from_numpy(bounds[0] + bounds[1]).to(dt)), np.float64)
    single = np.flatnonzero(lo == hi)
    # the float32 bound (gamma_{N+2} of the row sums) is far below half a 16-bit ulp for most
    # elements: a bound that had lost its tightness would admit two values nearly everywhere
    assert single.size > t.size // 2
    assert judge(one_ulp_off(t, int(single[single.size // 2])), e).verdict == "differs"
    bad = t.astype(np.float32)
    bad.reshape(-1)[7] *= 1.01
    assert judge(bad.astype(t.dtype), e).verdict == "differs"
