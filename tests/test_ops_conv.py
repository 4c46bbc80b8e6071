"""Convolution (bounded) and pooling (exact) emulations against torch's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import names  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import emulate, judged, one_ulp_off  # noqa: E402

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
CONV = torch.ops.aten.convolution.default
CONVB = torch.ops.aten.convolution_backward.default
MP = torch.ops.aten.max_pool2d_with_indices.default
MPB = torch.ops.aten.max_pool2d_with_indices_backward.default
AP = torch.ops.aten.avg_pool2d.default
APB = torch.ops.aten.avg_pool2d_backward.default
AD = torch.ops.aten._adaptive_avg_pool2d.default
ADB = torch.ops.aten._adaptive_avg_pool2d_backward.default

# (input, weight, stride, padding, dilation, groups, bias)
CONVS = [
    ((2, 3, 8, 8), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], 1, True),
    ((2, 4, 9, 7), (6, 2, 3, 2), [2, 1], [0, 1], [1, 2], 2, True),
    ((2, 4, 20), (6, 2, 3), [2], [1], [2], 2, False),
    ((1, 16, 5, 5), (8, 16, 1, 1), [1, 1], [0, 0], [1, 1], 1, True),
]


def _conv_inputs(dt: torch.dtype, case: tuple, seed: int) -> tuple:
    shape, wshape, st, pd, dl, gr, bias = case
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * 4
    x.view(-1)[:3] = torch.tensor([0.0, -0.0, 1e-30])
    w = torch.randn(wshape, generator=g)
    b = torch.randn(wshape[0], generator=g) * 30 if bias else None
    return x.to(dt), w.to(dt), None if b is None else b.to(dt), st, pd, dl, gr


@pytest.mark.parametrize("case", CONVS, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_convolution_forward_backward_bounded(dt: torch.dtype, case: tuple) -> None:
    x, w, b, st, pd, dl, gr = _conv_inputs(dt, case, 0)
    z = [0] * len(st)
    v = [j.verdict for j in judged(CONV, x, w, b, st, pd, dl, False, z, gr)]
    assert set(v) <= {"identical", "bounded"}
    y = CONV(x, w, b, st, pd, dl, False, z, gr)
    go = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(dt)
    bs = None if b is None else [w.shape[0]]
    for mask in ([True, True, b is not None], [False, True, False], [True, False, False]):
        js = judged(CONVB, go, x, w, bs, st, pd, dl, False, z, gr, mask)
        assert len(js) == sum(mask)
        assert {j.verdict for j in js} <= {"identical", "bounded"}


@pytest.mark.parametrize("dt", DTYPES[1:], ids=str)
def test_low_precision_convolution_adds_the_bias_before_its_one_rounding(dt: torch.dtype) -> None:
    """The finding behind the bound: oneDNN adds the bias to the float32 accumulator and rounds
    once; rounding the convolution to bf16/fp16 before adding the bias gives other bits."""
    x, w, b, st, pd, dl, gr = _conv_inputs(dt, CONVS[0], 3)
    assert b is not None
    y = CONV(x, w, b, st, pd, dl, False, [0, 0], gr).double()
    plain = CONV(x.double(), w.double(), None, st, pd, dl, False, [0, 0], gr)
    bias = b.double().reshape(1, -1, 1, 1)
    once = (plain + bias).to(dt).double()
    twice = (plain.to(dt).double() + bias).to(dt).double()
    assert int((y != once).sum()) == 0
    assert int((y != twice).sum()) > 0


def test_convolution_bound_catches_a_wrong_value() -> None:
    x, w, b, st, pd, dl, gr = _conv_inputs(torch.float32, CONVS[0], 4)
    outs, em = emulate(CONV, x, w, b, st, pd, dl, False, [0, 0], gr)
    t = to_numpy(outs[0])
    assert judge(t, em[0]).verdict in ("identical", "bounded")
    assert judge(t * np.float32(1 + 2**-12), em[0]).verdict == "differs"
    assert judge(to_numpy(CONV(x, w, None, st, pd, dl, False, [0, 0], gr)), em[0]).verdict == (
        "differs"
    )  # the bias left out


def test_transposed_convolution_is_refused() -> None:
    x = torch.randn(1, 2, 4, 4)
    w = torch.randn(2, 3, 3, 3)
    with pytest.raises(NotImplementedError, match="transposed"):
        emulate(CONV, x, w, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1)


def _pool_input(dt: torch.dtype, seed: int) -> torch.Tensor:
    """Ties (copied values), NaN, signed zeros, a subnormal, -inf."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 9, 8, generator=g)
    x.view(-1)[::7] = x.view(-1)[1::7]
    x[0, 1, 2, 2], x[0, 1, 2, 3], x[1, 2, 4, 4] = 0.0, -0.0, 1e-40
    x[1, 0, :3, :3] = -float("inf")
    return x.to(dt)


MAXES = [
    ([3, 2], [1, 1], [0, 0], [1, 1], False),
    ([2, 2], [], [0, 0], [1, 1], False),
    ([3, 3], [2, 2], [1, 1], [2, 1], True),
    ([2, 3], [1, 2], [1, 0], [1, 1], False),
]


@pytest.mark.parametrize("args", MAXES, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_max_pool_exact(dt: torch.dtype, args: tuple) -> None:
    x = _pool_input(dt, 0)
    x[0, 0, 0, 0] = float("nan")
    out, ind = MP(x, *args)
    assert [j.verdict for j in judged(MP, x, *args)] == ["identical", "identical"]
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(2)).to(dt)
    assert [j.verdict for j in judged(MPB, go, x, *args, ind)] == ["identical"]


AVGS = [
    ([2, 2], [], [0, 0], False, True, None),
    ([3, 3], [2, 2], [1, 1], False, True, None),
    ([3, 3], [2, 2], [1, 1], True, False, None),
    ([3, 2], [1, 1], [1, 0], False, True, 5),
]


@pytest.mark.parametrize("args", AVGS, ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_avg_pool_exact(dt: torch.dtype, args: tuple) -> None:
    x = _pool_input(dt, 1).nan_to_num(neginf=-3.0)
    out = AP(x, *args)
    assert [j.verdict for j in judged(AP, x, *args)] == ["identical"]
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(dt)
    assert [j.verdict for j in judged(APB, go, x, *args)] == ["identical"]


@pytest.mark.parametrize("size", [[3, 3], [4, 5], [9, 8], [2, 7]], ids=str)
@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_adaptive_avg_pool_exact(dt: torch.dtype, size: list) -> None:
    x = _pool_input(dt, 2).nan_to_num(neginf=-3.0)
    out = AD(x, size)
    assert [j.verdict for j in judged(AD, x, size)] == ["identical"]
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(4)).to(dt)
    assert [j.verdict for j in judged(ADB, go, x)] == ["identical"]


@pytest.mark.parametrize("dt", DTYPES, ids=str)
def test_pooling_planted_fault_differs(dt: torch.dtype) -> None:
    x = _pool_input(dt, 5).nan_to_num(neginf=-3.0)
    for op, args in ((MP, ([3, 3], [2, 2])), (AP, ([3, 3], [2, 2], [1, 1])), (AD, ([4, 5],))):
        outs, em = emulate(op, x, *args)
        assert em[0] is not None
        assert judge(one_ulp_off(to_numpy(outs[0]), 4), em[0]).verdict == "differs"
    outs, em = emulate(MP, x, [3, 3], [2, 2])
    bad = to_numpy(outs[1]).copy()
    bad.reshape(-1)[0] += 1
    assert em[1] is not None and judge(bad, em[1]).verdict == "differs"


def test_registered() -> None:
    have = set(names())
    for op in ("aten.convolution.default", "aten.convolution_backward.default",
               "aten.max_pool2d_with_indices.default",
               "aten.max_pool2d_with_indices_backward.default", "aten.avg_pool2d.default",
               "aten.avg_pool2d_backward.default", "aten._adaptive_avg_pool2d.default",
               "aten._adaptive_avg_pool2d_backward.default"):  # fmt: skip
        assert op in have
