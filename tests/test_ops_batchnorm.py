"""Batch norm emulations against torch's CPU kernels (bits where exact, else the derived
bound)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup, names  # noqa: E402
from fpemu.validate.watch.convert import dtype_name, to_numpy, tree_to_numpy  # noqa: E402
from fpemu.validate.watch.schema import outputs, written_ids  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import capability, emulate, judged, one_ulp_off  # noqa: E402

BN = torch.ops.aten.native_batch_norm.default
BNB = torch.ops.aten.native_batch_norm_backward.default
#: (dtype, statistics dtype): float32 weights with a low input are autocast's mixed kernel
BN_TYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.float32),
            (torch.float16, torch.float32)]  # fmt: skip


def _bn_args(dt: torch.dtype, pdt: torch.dtype, shape: tuple[int, ...], seed: int) -> tuple:
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = rng.standard_normal(shape) * 3 + rng.choice(
        [0.0, 100.0, -2e3], size=(1, c) + (1,) * (len(shape) - 2)
    )
    x.reshape(-1)[[0, 1, 2]] = [0.0, -0.0, 1e-39]  # zeros and a subnormal
    xt = torch.from_numpy(x.astype(np.float32)).to(dt)
    w, b = torch.randn(c).to(pdt), torch.randn(c).to(pdt)
    rm, rv = torch.randn(c).to(pdt), (torch.rand(c) + 0.5).to(pdt)
    return xt, w, b, rm, rv


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (3, 5, 37), (2, 3, 33)], ids=str)
@pytest.mark.parametrize(("dt", "pdt"), BN_TYPES, ids=str)
def test_batch_norm_exact(dt: torch.dtype, pdt: torch.dtype, shape: tuple, train: bool) -> None:
    """out, save_mean, save_invstd and the updated running statistics, bit for bit."""
    x, w, b, rm, rv = _bn_args(dt, pdt, shape, len(shape) + shape[1])
    js = judged(BN, x, w, b, rm, rv, train, 0.1, 1e-5)
    assert [j.verdict for j in js] == ["identical"] * 5


def test_batch_norm_without_affine_or_running_stats_exact() -> None:
    x, _, _, _, _ = _bn_args(torch.float32, torch.float32, (4, 6, 3, 3), 9)
    assert [j.verdict for j in judged(BN, x, None, None, None, None, True, 0.3, 1e-3)] == [
        "identical"
    ] * 3


@pytest.mark.parametrize(("dt", "pdt"), BN_TYPES, ids=str)
def test_batch_norm_planted_fault_differs(dt: torch.dtype, pdt: torch.dtype) -> None:
    x, w, b, rm, rv = _bn_args(dt, pdt, (2, 4, 6, 6), 11)
    outs, emulated = emulate(BN, x, w, b, rm, rv, True, 0.1, 1e-5)
    for t, e in zip(outs, emulated, strict=True):
        assert e is not None
        assert judge(one_ulp_off(to_numpy(t), 1), e).verdict == "differs"


@pytest.mark.parametrize("shape", [(16, 6), (4, 6, 1, 1)], ids=str)
@pytest.mark.parametrize(
    ("dt", "pdt"),
    [*BN_TYPES, (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16)],
    ids=str,
)
def test_batch_norm_per_thread_layouts_bounded(
    dt: torch.dtype, pdt: torch.dtype, shape: tuple
) -> None:
    """2-D inputs and spatial size 1 (torch's per-thread kernels), and statistics kept in a low
    format, are bounded: every output within the derived bound."""
    x, w, b, rm, rv = _bn_args(dt, pdt, shape, 5)
    for train in (True, False):
        v = [j.verdict for j in judged(BN, x, w, b, rm.clone(), rv.clone(), train, 0.1, 1e-5)]
        assert set(v) <= {"identical", "bounded"}, v


def _with_threads(func: object, *args: object, threads: int) -> list[str]:
    """Verdicts when the emulation is told torch's thread count (``Call.options``)."""
    ids = written_ids(func, args, {})
    np_args = tree_to_numpy(args, copy_ids=ids)
    outs = outputs(func, args, {}, func(*args))  # type: ignore[operator]
    call = Call(str(func), tuple(np_args), {}, tuple(dtype_name(t.dtype) for t in outs),
                capability=capability(), options={"num_threads": threads})  # fmt: skip
    emulated = lookup(str(func))(call)
    return [judge(to_numpy(t), e).verdict for t, e in zip(outs, emulated, strict=True) if e]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize(
    ("shape", "channels_last"),
    [((16, 6), False), ((33, 20), False), ((4, 6, 1, 1), False), ((2, 5, 3, 3), True)],
    ids=str,
)
@pytest.mark.parametrize(("dt", "pdt"), BN_TYPES, ids=str)
def test_batch_norm_channels_last_layouts_exact_given_threads(
    dt: torch.dtype, pdt: torch.dtype, shape: tuple, channels_last: bool, threads: int
) -> None:
    """2-D inputs, spatial size 1 and channels-last arrays (torch's per-thread kernels) bit for
    bit once the emulation knows the thread count, train and eval."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x, w, b, rm, rv = _bn_args(dt, pdt, shape, threads)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        for train in (True, False):
            v = _with_threads(BN, x, w, b, rm.clone(), rv.clone(), train, 0.1, 1e-5,
                              threads=threads)  # fmt: skip
            assert v == ["identical"] * 5, v
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize(
    ("shape", "channels_last"),
    [((16, 6), False), ((33, 20), False), ((5, 40), False), ((3, 20, 2, 5), True)],
    ids=str,
)
@pytest.mark.parametrize(("dt", "pdt"), BN_TYPES, ids=str)
def test_batch_norm_channels_last_backward_exact_given_threads(
    dt: torch.dtype, pdt: torch.dtype, shape: tuple, channels_last: bool, threads: int
) -> None:
    """The per-thread backward kernels bit for bit given the thread count, train and eval,
    with a random and a cancelling (dy = 0.7 y + 0.3) gradient."""
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x, w, b, rm, rv = _bn_args(dt, pdt, shape, threads + 1)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = x.contiguous(memory_format=fmt)
        y, sm, si = BN(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
        g = torch.Generator().manual_seed(threads)
        for dy in (torch.randn(x.shape, generator=g).to(dt), (y.float() * 0.7 + 0.3).to(dt)):
            dy = dy.contiguous(memory_format=fmt)
            for train in (True, False):
                v = _with_threads(BNB, dy, x, w, rm, rv, sm, si, train, 1e-5, [True, True, True],
                                  threads=threads)  # fmt: skip
                assert v == ["identical"] * 3, v
    finally:
        torch.set_num_threads(old)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize(("dt", "pdt"), BN_TYPES, ids=str)
def test_batch_norm_backward_bounded(dt: torch.dtype, pdt: torch.dtype, train: bool) -> None:
    x, w, b, rm, rv = _bn_args(dt, pdt, (4, 3, 5, 5), 13)
    _, sm, si = BN(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    dy = torch.randn(x.shape).to(dt)
    for mask in ([True, True, True], [True, False, False], [False, True, True]):
        js = judged(BNB, dy, x, w, rm, rv, sm, si, train, 1e-5, mask)
        assert len(js) == sum(mask)
        assert {j.verdict for j in js} <= {"identical", "bounded"}


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (2, 4, 37), (3, 2, 3, 3), (2, 3, 64)], ids=str)
def test_batch_norm_backward_exact_float32(shape: tuple, train: bool, weighted: bool) -> None:
    """The float32 contiguous backward bit for bit; a one-ulp change of any output differs."""
    x, w, b, rm, rv = _bn_args(torch.float32, torch.float32, shape, 19)
    w = w if weighted else None
    _, sm, si = BN(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(len(shape)))
    mask = [True, weighted, True]
    outs, emulated = emulate(BNB, dy, x, w, rm, rv, sm, si, train, 1e-5, mask)
    for t, e in zip(outs, emulated, strict=True):
        assert e is not None and e.exact
        assert judge(to_numpy(t), e).verdict == "identical"
        assert judge(one_ulp_off(to_numpy(t), 1), e).verdict == "differs"


@pytest.mark.parametrize("cancel", [False, True])
@pytest.mark.parametrize("shape", [(4, 3, 5, 5), (2, 4, 37), (8, 4, 7, 7)], ids=str)
@pytest.mark.parametrize(("dt", "pdt"), BN_TYPES, ids=str)
def test_batch_norm_backward_exact(
    dt: torch.dtype, pdt: torch.dtype, shape: tuple, cancel: bool
) -> None:
    """float32 and autocast's bf16/fp16-input kernel bit for bit, train and eval; ``cancel``
    feeds dy = 0.7 y + 0.3, whose input gradient is ~0 (dy - grad_mean - (x - mean) k cancels)."""
    x, w, b, rm, rv = _bn_args(dt, pdt, shape, 23)
    y, sm, si = BN(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    g = torch.Generator().manual_seed(shape[1])
    dy = (y.float() * 0.7 + 0.3).to(dt) if cancel else torch.randn(x.shape, generator=g).to(dt)
    for train in (True, False):
        outs, emulated = emulate(BNB, dy, x, w, rm, rv, sm, si, train, 1e-5, [True, True, True])
        for t, e in zip(outs, emulated, strict=True):
            assert e is not None and e.exact
            assert judge(to_numpy(t), e).verdict == "identical"
            assert judge(one_ulp_off(to_numpy(t), 1), e).verdict == "differs"


@pytest.mark.parametrize(
    ("dt", "pdt"),
    [*BN_TYPES, (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16)],
    ids=str,
)
def test_batch_norm_strided_input_bounded(dt: torch.dtype, pdt: torch.dtype) -> None:
    """A strided input (neither contiguous nor channels-last) takes torch's generic kernel,
    which computes in the input's format for bf16/fp16: forward and backward stay within the
    bound (this case once escaped a float32-only bound)."""
    x, w, b, rm, rv = _bn_args(dt, pdt, (3, 4, 5, 6), 29)
    x = x.transpose(2, 3)
    for train in (True, False):
        v = [j.verdict for j in judged(BN, x, w, b, rm.clone(), rv.clone(), train, 0.1, 1e-5)]
        assert set(v) <= {"identical", "bounded"}, v
        _, sm, si = BN(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
        dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(3)).to(dt)
        v = [j.verdict for j in judged(BNB, dy, x, w, rm, rv, sm, si, train, 1e-5, [True] * 3)]
        assert set(v) <= {"identical", "bounded"}, v


def test_batch_norm_backward_bound_catches_a_wrong_gradient() -> None:
    x, w, b, rm, rv = _bn_args(torch.float32, torch.float32, (4, 3, 5, 5), 17)
    _, sm, si = BN(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    dy = torch.randn(x.shape)
    outs, emulated = emulate(BNB, dy, x, w, rm, rv, sm, si, True, 1e-5, [True, True, True])
    for t, e in zip(outs, emulated, strict=True):
        assert e is not None
        assert judge(to_numpy(t) * np.float32(1.001), e).verdict == "differs"


def test_registered() -> None:
    have = set(names())
    for op in ("aten.native_batch_norm.default", "aten.native_batch_norm_backward.default"):
        assert op in have
