"""Layer norm emulations bit for bit against torch's CPU kernels on the shapes the fast paths
branch on: whole Welford chunks (128, 256 columns: the bench GPT's rows) and partial ones, odd
column counts and tails of the 8-lane sums, one row and fewer rows than threads (the weight
gradient scan's zero-padded threads), more threads than one (threads side by side in the scan),
float32/bfloat16/float16 inputs, weights and biases present or None. Every exact output is
compared as bits with torch's, and a one-ulp change of it must differ."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Out  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import emulate, one_ulp_off  # noqa: E402

LN = torch.ops.aten.native_layer_norm.default
LNB = torch.ops.aten.native_layer_norm_backward.default
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
#: (rows, columns): one row, rows < 8 and > 8, whole chunks (128 = 16 vectors of 8 floats, 256 =
#: 16 vectors of 16 bfloat16/float16), odd counts with lane tails, a partial second chunk
SHAPES = [(1, 9), (3, 7), (9, 128), (5, 256), (17, 136), (10, 131), (2, 300)]


def _data(dt: torch.dtype, m: int, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    """Input rows (one with an offset far above its spread: cancellation in x - mean; one of
    repeated values: exact Welford sums on float32 midpoints), weights, bias, gradient."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, n)) * rng.choice([1.0, 1e-3, 30.0], size=(m, 1))
    x[0] += 100.0
    if m > 1:
        x[-1] = rng.integers(-4, 5, n) / 4  # few-bit values
    w = rng.standard_normal(n)
    b = rng.standard_normal(n)
    dy = rng.standard_normal((m, n))
    return tuple(torch.from_numpy(v.astype(np.float32)).to(dt) for v in (x, w, b, dy))


def _check_exact(outs: list[torch.Tensor | None], emulated: list[Out | None]) -> int:
    """Every exact emulated output equals torch's bits, and one ulp off differs; the count."""
    checked = 0
    for t, e in zip(outs, emulated, strict=True):
        if t is None or e is None or not e.exact:
            continue
        ref = to_numpy(t)
        assert judge(ref, e).verdict == "identical"
        assert judge(one_ulp_off(ref, ref.size // 2), e).verdict == "differs"
        checked += 1
    return checked


@pytest.mark.parametrize(("m", "n"), SHAPES)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
@pytest.mark.parametrize("weights", ["both", "none"])
def test_layer_norm_forward_exact_on_fast_path_shapes(
    dt: torch.dtype, m: int, n: int, weights: str
) -> None:
    x, w, b, _ = _data(dt, m, n, m * 1000 + n)
    args = (x, [n], w, b, 1e-5) if weights == "both" else (x, [n], None, None, 1e-5)
    outs, emulated = emulate(LN, *args)
    assert _check_exact(list(outs), emulated) == 3


@pytest.mark.parametrize("threads", [1, 2, 4])
@pytest.mark.parametrize(("m", "n"), SHAPES)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_layer_norm_backward_exact_on_fast_path_shapes(
    dt: torch.dtype, m: int, n: int, threads: int
) -> None:
    """grad_input (float32: exact), grad_weight and grad_bias (exact given the thread count),
    with weights and bias, with weights only, and without weights (no weight gradients)."""
    x, w, b, dy = _data(dt, m, n, m * 7 + n + threads)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for ww, bb in ((w, b), (w, None), (None, None)):
            _, mean, rstd = LN(x, [n], ww, bb, 1e-5)
            mask = [True, ww is not None, bb is not None]
            outs, emulated = emulate(LNB, dy, x, [n], mean, rstd, ww, bb, mask)
            want = (dt == torch.float32) + (ww is not None) + (bb is not None)
            assert _check_exact(list(outs), emulated) == want
    finally:
        torch.set_num_threads(old)


def _lane_oracle(lanes: np.ndarray, m1: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """``m1 = fma(c, lane - m1, m1)`` lane by lane with exact values (reference/: Fraction, one
    rounding to float32 per step; the delta is a float32 subtraction)."""
    from fractions import Fraction  # noqa: PLC0415

    from reference.rounding import round_value  # noqa: PLC0415
    from reference.spec import FLOAT32  # noqa: PLC0415
    from reference.value import to_float  # noqa: PLC0415

    out = m1.astype(np.float64)
    for r in range(lanes.shape[0]):
        for lane in range(lanes.shape[1]):
            delta = np.float32(lanes[r, lane]) - np.float32(out[r])
            exact = Fraction(float(cs[lane])) * Fraction(float(delta)) + Fraction(float(out[r]))
            out[r] = to_float(round_value(exact, FLOAT32, "rne"))
    return out.astype(np.float32)


def test_lane_means_repairs_an_inexact_boundary_sum() -> None:
    """The fused ``AddMoments`` mean recurrence (float64 sums, one boundary test after all lanes)
    against the exact loop, with a lane whose float64 sum is inexact on a float32 midpoint: c =
    8392705 * 2^-47, delta = 16769026 (c * delta = 1 + 2^-46, 8392705 * 16769026 = 2^47 + 2)
    and m1 = 2^24: the float64 sum 2^24 + 1 is the midpoint (the tie goes to 2^24), the exact
    one lies above it (2^24 + 2). Row 1 mirrors it below zero; row 2 is random. The crafted
    lane is lane 3 (the lanes before it are kept, the rest redone)."""
    from fpemu.validate.ops._moments import _lane_means  # noqa: PLC0415

    rng = np.random.default_rng(5)
    cs = np.float32([0.5, 0.25, 0.0, 8392705 * 2.0**-47, 0.0, 1 / 3, 0.0, 0.125])
    lanes = rng.standard_normal((3, 8)).astype(np.float32)
    m1 = np.float32([2.0**24, -(2.0**24), 0.7])
    lanes[:2, :3] = m1[:2, None]  # lanes 0-2 leave m1 at +-2^24 (delta 0)
    lanes[0, 3], lanes[1, 3] = 2.0**24 + 16769026, -(2.0**24 + 16769026)
    lanes[:2, 4:] = lanes[:2, 3:4] * 0 + np.float32([2.0**24 + 2, -(2.0**24 + 2)])[:, None]
    deltas = np.empty((3, 8), np.float32)
    ours = _lane_means(lanes, m1.copy(), cs, deltas, True)
    oracle = _lane_oracle(lanes, m1, cs)
    assert ours.view(np.uint32).tolist() == oracle.view(np.uint32).tolist()
    assert ours[0] == 2.0**24 + 2 and ours[1] == -(2.0**24 + 2)
    # the float64 sum rounded once would have given the tie's even neighbour
    assert np.float32(2.0**24 + 1.0) == 2.0**24
