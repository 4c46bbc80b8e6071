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
