"""The lazy bounds of ``_log_softmax`` and ``_log_softmax_backward_data`` (float32, last
dimension, C-contiguous copies: :func:`fpemu.validate.ops.softmax._rows`) against the eager
running bound written out here from its definition (the whole arrays' IV arithmetic, then
``iv_ends``), bit for bit: the value, the reason, and ``(center, err)`` at every element and at
shuffled subsets (a gathered element must get the whole arrays' bits), on rows with NaN, +-inf,
+-0, subnormals, huge and tiny values, one element and odd lengths; strided and transposed
inputs (the latter take the eager path); and the judge's verdict on a perturbed torch output is
the same for the lazy Out as for the eager one (its dense path against its gathered one).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fpemu.validate.ops import Call, Out, bounded, lookup
from fpemu.validate.ops._iv import IV, iv_ends
from fpemu.validate.ops.softmax import _WHY, K_EXP, K_LIBM, _exp, _log, _sum
from fpemu.validate.watch.verdict import judge

F32 = np.float32
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -3e-42, 2.0**-126, 3e38, -3e38, 1e-30,
           88.0, -104.0, 1.0, -1.0]  # fmt: skip


def eager_forward(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """value, center, err of the float32 log_softmax over the last dim, the eager way."""
    xl = x.astype(F32)
    with np.errstate(all="ignore"):
        m = np.max(xl, axis=-1, keepdims=True)
        X, M = IV.of(xl), IV.of(m)
        d = X - M
        ls = _log(_sum(_exp(d, K_LIBM)))
        one, two = d - ls, X - (M + ls)
        center, err = iv_ends(IV(one.v, np.maximum(one.e, two.e)), "float32")
        dv = (xl - m).astype(F32)
        s = np.sum(np.exp(dv.astype(np.float64)).astype(F32), axis=-1, keepdims=True)
        val = dv - np.log(s.astype(np.float64)).astype(F32)
    return val, center, err


def eager_backward(g: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    gl, yl = g.astype(F32), y.astype(F32)
    with np.errstate(all="ignore"):
        G = IV.of(gl)
        center, err = iv_ends(G - _exp(IV.of(yl), K_EXP) * _sum(G), "float32")
        sv = np.sum(gl, axis=-1, keepdims=True, dtype=F32)
        val = gl - np.exp(yl.astype(np.float64)).astype(F32) * sv
    return val, center, err


def bits(a: Any) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def same_out(out: Out, want: tuple[np.ndarray, np.ndarray, np.ndarray], seed: int) -> None:
    val, center, err = want
    assert bits(out.value) == bits(val) and out.value.dtype == F32
    assert not out.exact and out.reason == _WHY
    n = val.size
    c, e = out.bounds_at(np.arange(n))
    assert bits(c) == bits(np.ravel(center)) and bits(e) == bits(np.ravel(err))
    rng = np.random.default_rng(seed)
    for k in {1, max(1, n // 3), n}:
        idx = rng.permutation(n)[:k]
        c, e = out.bounds_at(idx)
        assert bits(c) == bits(np.ravel(center)[idx]) and bits(e) == bits(np.ravel(err)[idx])


def forward(x: np.ndarray, dim: int = -1) -> Out:
    out = lookup("aten._log_softmax.default")(
        Call("aten._log_softmax.default", (x, dim, False), {}, ("float32",)))
    return out[0]


def backward(g: np.ndarray, y: np.ndarray, dim: int = -1) -> Out:
    op = "aten._log_softmax_backward_data.default"
    return lookup(op)(Call(op, (g, y, dim, "float32"), {}, ("float32",)))[0]


def rows(rng: np.random.Generator, shape: tuple[int, ...], special: float) -> np.ndarray:
    """Logits of every magnitude, a share ``special`` of them from :data:`SPECIAL`."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-30, 8, shape))
    pick = rng.random(shape) < special
    x[pick] = rng.choice(SPECIAL, int(pick.sum()))
    return x.astype(F32)


@settings(max_examples=60)
@given(st.integers(1, 5), st.integers(1, 70), st.sampled_from([0.0, 0.05, 0.3]),
       st.integers(0, 2**31))  # fmt: skip
def test_lazy_equals_eager(r: int, c: int, special: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rows(rng, (r, c), special)
    same_out(forward(x), eager_forward(x), seed)
    g = rows(rng, (r, c), special) * F32(1e-3)
    y = rows(rng, (r, c), special)
    same_out(backward(g, y), eager_backward(g, y), seed)


@pytest.mark.parametrize("shape", [(1,), (7,), (1, 1), (2, 3, 65), (3, 1, 17), (3, 127), (2, 129),
                                   (4, 257), (2, 1000), (2, 8200)])
def test_shapes(shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(shape))
    x, g = rows(rng, shape, 0.1), rows(rng, shape, 0.1)
    same_out(forward(x), eager_forward(x), 1)
    same_out(backward(g, x), eager_backward(g, x), 2)


def test_scale_extremes() -> None:
    """Rows far above and far below 1, and rows whose exponentials all underflow but one."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 33)).astype(F32)
    x[0] *= F32(1e30)
    x[1] *= F32(1e-40)
    x[2] = F32(-200.0) * np.abs(x[2])
    x[2, 7] = 0
    x[3] = F32(3e38)
    x[4] = -np.inf
    x[5, ::2] = np.inf
    same_out(forward(x), eager_forward(x), 3)
    same_out(backward(x * F32(1e-3), x), eager_backward(x * F32(1e-3), x), 4)


def test_strided_and_transposed() -> None:
    """A strided tensor (its float32 copy is C-contiguous: lazy) and a transposed one over
    dim 0 (the eager path) give the eager bits."""
    rng = np.random.default_rng(6)
    big = rows(rng, (5, 42), 0.05)
    x = big[:, ::3]
    same_out(forward(x), eager_forward(np.ascontiguousarray(x)), 5)
    same_out(backward(x, big[:, 1::3]), eager_backward(x, np.ascontiguousarray(big[:, 1::3])), 6)
    t = big.T  # dim 0 of the transpose: rows of ``big``
    out = forward(t, 0)
    val, center, err = eager_forward(big)
    assert bits(np.ascontiguousarray(out.value.T)) == bits(val)
    assert out.err is not None and out.center is not None
    assert bits(np.ascontiguousarray(np.asarray(out.err).T)) == bits(err)
    assert bits(np.ascontiguousarray(np.asarray(out.center).T)) == bits(center)
    assert x.base is big  # the input is left as it was (a view, not written)


def test_judge_lazy_as_eager() -> None:
    """The judge's verdict on a torch output with many elements off (its dense path for an eager
    Out) is the verdict it gives the lazy Out (the gathered path)."""
    rng = np.random.default_rng(7)
    x = rows(rng, (64, 65), 0.0)
    val, center, err = eager_forward(x)
    eager = bounded(val, err, _WHY, center=center)
    lazy_out = forward(x)
    for spread in (1, 3, 100):
        t = val.copy().view(np.int32)
        t += rng.integers(-spread, spread + 1, t.shape).astype(np.int32)
        t = t.view(F32)
        assert repr(judge(t, lazy_out)) == repr(judge(t, eager))  # (NaN fields: repr)


def test_minus_product_is_the_float32_expression() -> None:
    """``g - e * s`` through float64 (the backward's value) equals the float32 expression bit
    for bit where products and differences are float32 subnormals, underflow to +-0, overflow,
    cancel to +-0, and with NaN and inf operands (the float32 fallback)."""
    from fpemu.validate.ops.softmax import _minus_product  # noqa: PLC0415

    rng = np.random.default_rng(8)
    n = 20000
    e = (rng.random(n) * np.exp2(rng.integers(-149, 5, n))).astype(F32)
    s = (rng.standard_normal(n) * np.exp2(rng.integers(-60, 60, n))).astype(F32)
    g = (rng.standard_normal(n) * np.exp2(rng.integers(-149, 20, n))).astype(F32)
    g[::7] = 0.0
    g[1::7] = -0.0
    g[2::7] = (e[2::7] * s[2::7])  # exact cancellation to +0
    sp = np.float32(SPECIAL)
    cases = [(g, e, s), (g[:9000].reshape(90, 100), e[:9000].reshape(90, 100), s[:90, None])]
    cases.append((rng.choice(sp, 3000), rng.choice(sp, 3000), rng.choice(sp, 3000)))
    with np.errstate(all="ignore"):
        for gg, ee, ss in cases:
            want = gg - ee * ss
            got = _minus_product(gg, ee, ss)
            assert got.dtype == F32 and bits(got) == bits(want)
    sub = e * s
    assert np.count_nonzero((np.abs(sub) < 2**-126) & (sub != 0)) > 1000  # subnormals seen
