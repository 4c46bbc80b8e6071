"""fpemu.validate.ops.softmax against torch 2.13's CPU kernels (bounded claims)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import (  # noqa: E402
    Call,
    names,
)
from fpemu.validate.ops._num import ulp  # noqa: E402
from fpemu.validate.ops.softmax import softmax  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.ops_nn_util import check, rerun  # noqa: E402
from tests.watch_ops_util import emulate, one_ulp_off  # noqa: E402

aten = torch.ops.aten
LOWF = ("float32", "bfloat16", "float16")
SHAPES = [((4, 37), -1), ((3, 5, 16), 1), ((2, 3, 129), -1), ((6, 7), 0), ((1, 1000), -1)]


def logits(shape: tuple[int, ...], name: str, seed: int, scale: float = 4.0) -> object:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * scale
    return x.to(getattr(torch, name))


@pytest.mark.parametrize("name", LOWF)
@pytest.mark.parametrize(("shape", "dim"), SHAPES)
def test_forward_backward(name: str, shape: tuple[int, ...], dim: int) -> None:
    x = logits(shape, name, 1)
    x.view(-1)[:3] = torch.tensor([-1e4, 30.0, -30.0]).to(x.dtype)  # masked, large, tiny
    g = logits(shape, name, 2, 1.0)
    y = aten._softmax.default(x, dim, False)
    ly = aten._log_softmax.default(x, dim, False)
    check(aten._softmax.default, x, dim, False, claim="bounded")
    check(aten._log_softmax.default, x, dim, False, claim="bounded")
    check(aten._softmax_backward_data.default, g, y, dim, x.dtype, claim="bounded")
    check(aten._log_softmax_backward_data.default, g, ly, dim, x.dtype, claim="bounded")
    # (half_to_float=True: "softmax with half to float conversion is not supported on CPU")


def test_masked_rows_and_infinities() -> None:
    x = torch.randn(4, 8)
    x[0] = float("-inf")  # a fully masked row: NaN
    x[1, 2:] = float("-inf")
    x[2, 3] = float("inf")
    check(aten._softmax.default, x, -1, False, claim="bounded")
    check(aten._log_softmax.default, x, -1, False, claim="bounded")


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_bound_is_tight_in_16_bit(name: str) -> None:
    """Nearly every 16-bit output admits one value only, so a one-ulp fault is caught."""

    x = logits((8, 64), name, 3)
    for op in (aten._softmax.default, aten._log_softmax.default):
        outs, em = emulate(op, x, -1, False)
        t, e = to_numpy(outs[0]), em[0]
        single = np.flatnonzero(np.asarray(e.err).ravel() == 0)
        assert single.size > 0.9 * t.size, (str(op), single.size)
        assert judge(one_ulp_off(t, int(single[7])), e).verdict == "differs"


def test_float32_bound_width() -> None:
    """float32: the bound's median width stays below 250 ulps for softmax (each exp 20 ulps:
    40u relative, the sum's gamma and the exps again: about 80u; the reciprocal and product 2u
    more) and below 40 for log_softmax (Sleef exp, K_LIBM ulps)."""

    x = logits((8, 64), "float32", 4)
    for op in (aten._softmax.default, aten._log_softmax.default):
        _, em = emulate(op, x, -1, False)
        center, err = em[0].bounds_at(np.arange(x.numel()))  # eager or lazy alike
        width = 2 * err / ulp(center, "float32")
        limit = 250 if op == aten._softmax.default else 40
        assert np.median(width) < limit, (str(op), np.median(width))


def test_float64_not_emulated() -> None:

    with pytest.raises(NotImplementedError, match="float64"):
        softmax(Call("aten._softmax.default", (np.zeros((2, 2)), -1, False), {}, ("float64",)))


def test_registered() -> None:
    have = set(names())
    for op in ("aten._softmax.default", "aten._log_softmax.default",
               "aten._softmax_backward_data.default",
               "aten._log_softmax_backward_data.default"):  # fmt: skip
        assert op in have, op


def test_capabilities() -> None:
    """The same claims hold under ATEN_CPU_CAPABILITY=default and avx2 (subprocesses)."""
    rerun(__file__)


@pytest.mark.parametrize("name", LOWF)
def test_partly_masked_rows_are_judged(name: str) -> None:
    """A row with some -inf logits (causal attention by hand): ``-inf - max`` is exactly -inf
    in the kernel, so its other elements keep a finite bound, and one 0.1% off differs (the
    bound was infinite there: nothing in such a row was judged)."""
    x = logits((6, 40), name, 6)
    x[:, 20:] = float("-inf")
    x[0, 5] = float("-inf")
    assert check(aten._softmax.default, x, -1, False, claim="bounded")
    outs, emulated = emulate(aten._softmax.default, x, -1, False)
    a = to_numpy(outs[0])
    k = int(np.argmax(a.astype(np.float64).ravel()))
    off = np.array(a, copy=True)
    off.reshape(-1)[k] = (a.astype(np.float64).reshape(-1)[k] * 1.01).astype(a.dtype)
    assert judge(off, emulated[0]).verdict == "differs"


@pytest.mark.parametrize("name", LOWF)
@pytest.mark.parametrize("dim", [-1, 1])
def test_safe_softmax(name: str, dim: int) -> None:
    """``_safe_softmax`` (nn.MultiheadAttention's): softmax, and 0 in the rows that are -inf
    throughout (where ``_softmax`` gives NaN); those NaN, or an element elsewhere off, differ."""
    x = logits((3, 5, 16), name, 4)
    if dim == -1:
        x[0, 1, :] = float("-inf")  # a row all -inf
        x[:, :, 2] = float("-inf")  # partly masked rows
    else:
        x[0, :, 3] = float("-inf")
        x[:, 2, :] = float("-inf")
    assert torch.isinf(x).all(dim).any()
    check(aten._safe_softmax.default, x, dim, claim="bounded")
    outs, emulated = emulate(aten._safe_softmax.default, x, dim)
    nan = to_numpy(aten._softmax.default(x, dim, False))  # the plain kernel: NaN rows
    assert np.isnan(nan.astype(np.float64)).any()
    assert judge(nan, emulated[0]).verdict == "differs"
    a = to_numpy(outs[0])
    off = np.array(a, copy=True)
    k = int(np.flatnonzero(a.astype(np.float64).ravel() > 0.05)[0])
    off.reshape(-1)[k] = off.reshape(-1)[k] * 2
    assert judge(off, emulated[0]).verdict == "differs"


def test_safe_softmax_with_dtype() -> None:
    """``dtype`` converts the input first (``at::softmax``): bfloat16 in, float32 out."""
    x = logits((4, 40), "bfloat16", 5)
    x[0] = float("-inf")
    check(aten._safe_softmax.default, x, -1, torch.float32, claim="bounded")
    assert aten._safe_softmax.default(x, -1, torch.float32).dtype == torch.float32
