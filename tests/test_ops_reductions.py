"""fpemu.validate.ops.reductions against torch 2.13's CPU kernels."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import names  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.ops_nn_util import check, inputs, rerun  # noqa: E402
from tests.watch_ops_util import emulate, one_ulp_off  # noqa: E402

aten = torch.ops.aten
DT = ("float32", "bfloat16", "float16", "float64")


def arr(shape: tuple[int, ...], name: str, seed: int) -> object:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * 3).to(getattr(torch, name))


@pytest.mark.parametrize("name", DT)
@pytest.mark.parametrize("shape", [(7,), (16, 33), (3, 5, 130), (2, 1000)])
def test_sum_mean(name: str, shape: tuple[int, ...]) -> None:
    x = arr(shape, name, len(shape))
    check(aten.sum.default, x, claim="bounded")
    check(aten.mean.default, x, claim="bounded")
    for d in range(len(shape)):
        check(aten.sum.dim_IntList, x, [d], claim="bounded")
        check(aten.sum.dim_IntList, x, [d], True, claim="bounded")
        check(aten.mean.dim, x, [d], claim="bounded")
        check(aten.mean.dim, x, [d], True, claim="bounded")
    if len(shape) > 1:
        check(aten.sum.dim_IntList, x, [0, -1], claim="bounded")
    if name in ("bfloat16", "float16"):  # dtype=float32: a float32 result of a 16-bit input
        check(aten.sum.dim_IntList, x, [0], dtype=torch.float32, claim="bounded")
        check(aten.sum.default, x, dtype=torch.float32, claim="bounded")


def test_sum_of_bools_and_ints_exact() -> None:
    m = torch.rand(100) > 0.3
    check(aten.sum.default, m)
    check(aten.sum.dim_IntList, torch.arange(60).reshape(6, 10), [1])


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_16_bit_sums_catch_one_ulp(name: str) -> None:
    """The float32 bound (gamma_255 * sum|x|, about 1e-2 here) is below a 16-bit ulp of these
    sums (0.25 bf16, 0.03 fp16): many outputs admit one value, and a fault there is caught."""

    x = arr((64, 256), name, 9)
    outs, em = emulate(aten.sum.dim_IntList, x, [1])
    t, e = to_numpy(outs[0]), em[0]
    bounds = e.bounds_at(np.arange(t.size))
    assert bounds is not None
    single = np.flatnonzero(bounds[1] == 0)
    assert single.size > 0.25 * t.size, single.size
    assert judge(one_ulp_off(t, int(single[3])), e).verdict == "differs"


@pytest.mark.parametrize("name", DT)
def test_max_min_exact(name: str) -> None:
    x = inputs(name, 97, seed=3).reshape(1, -1).repeat(3, 1)
    x[1, 5] = float("nan")
    x[2] = x[2].nan_to_num(nan=0.0)
    y = torch.cat([x, x[:, :1]], 1)  # a tie: the first index
    for op in (aten.amax.default, aten.amin.default):
        check(op, y, [1])
        check(op, y, [0, 1], True)
    check(aten.max.default, y[2])
    check(aten.min.default, y)
    for op in (aten.max.dim, aten.min.dim):
        check(op, y, 1)
        check(op, y, 0, True)


def test_registered() -> None:
    have = set(names())
    for op in ("aten.sum.default", "aten.sum.dim_IntList", "aten.mean.default", "aten.mean.dim",
               "aten.amax.default", "aten.amin.default", "aten.max.default", "aten.min.default",
               "aten.max.dim", "aten.min.dim"):  # fmt: skip
        assert op in have, op


def test_capabilities() -> None:
    """The same claims hold under ATEN_CPU_CAPABILITY=default and avx2 (subprocesses)."""
    rerun(__file__)


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_vector_norm(name: str) -> None:
    """``linalg_vector_norm`` (clip_grad_norm_'s total norm): ord +-inf and 0 exact, 1 and 2
    within the float32 sum's bound, on whole tensors and along dims; a result 5% off differs."""
    dt = getattr(torch, name)
    g = torch.Generator().manual_seed(59)  # the seed that once planted an admissible result
    x = (torch.randn(37, 53, dtype=torch.float64, generator=g) * 3).to(dt)
    op = aten.linalg_vector_norm.default
    for o in (2, 1, float("inf"), float("-inf"), 0):
        claim = "exact" if o in (float("inf"), float("-inf"), 0) else "bounded"
        check(op, x, o, claim=claim)
        check(op, x, o, [1], True, claim=claim)
        check(op, x, o, [0], claim=claim)
    check(op, x.to(torch.float32), 2, None, False, dtype=torch.float32, claim="bounded")
    outs, em = emulate(op, x, 2)
    # 5% off: beyond the bound for every format (1% is 1.3 ulps of bfloat16, and the rounding of
    # a bounded value next to a midpoint admits both neighbours: seed 59 planted a result the
    # bound rightly admits)
    bad = np.asarray(to_numpy(outs[0]).astype(np.float32) * np.float32(1.05)).astype(
        to_numpy(outs[0]).dtype
    )
    assert judge(bad, em[0]).verdict == "differs"


def test_vector_norm_other_orders_are_refused_by_name() -> None:
    """An order the emulation does not cover is a ValueError naming ``ord`` (the watcher lists
    the op as not emulated with this cause), never a silently wrong bound."""
    from fpemu.validate.ops import Call, lookup  # noqa: PLC0415

    em = lookup("aten.linalg_vector_norm.default")
    assert em is not None
    with pytest.raises(ValueError, match=r"ord=3\.0: not emulated; accepted 0, 1, 2, inf, -inf"):
        em(Call("aten.linalg_vector_norm.default", (np.float32([3, 4]), 3), {}, ("float32",)))


def test_clip_grad_norm_is_emulated() -> None:
    """``clip_grad_norm_`` under watch: every op emulated, nothing differs."""
    import fpemu  # noqa: PLC0415

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    loss = net(torch.randn(4, 8)).square().mean()
    loss.backward()
    with fpemu.watch() as w:
        torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
    r = w.report()
    assert r.counts["not_emulated"] == 0 and r.counts["differs"] == 0, r.summary()
    assert any(row["op"] == "aten.linalg_vector_norm.default" for row in r.rows)
