"""Emulations a Keras 3 training step on torch needs beside the families' own: ``pow`` of two
tensors (Keras Adam's ``beta ** step``), ``prod`` (shapes), ``all``/``any`` (the
LossScaleOptimizer's finite check) and ``random_`` (its seed generator), against torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import emulate, one_ulp_off, verdicts  # noqa: E402

aten = torch.ops.aten


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_pow_tensor_tensor_within_libm(dt: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    base = torch.rand(1000, generator=g, dtype=torch.float64).to(dt) * 2
    exp = (torch.rand(1000, generator=g, dtype=torch.float64) * 40 - 20).to(dt)
    assert set(verdicts(aten.pow.Tensor_Tensor, base, exp)) <= {"identical", "bounded"}
    for beta in (0.9, 0.999):  # Keras Adam: 0-d float32 tensors
        for t in (1, 7, 1000):
            b, s = torch.tensor(beta, dtype=dt), torch.tensor(float(t), dtype=dt)
            assert set(verdicts(aten.pow.Tensor_Tensor, b, s)) <= {"identical", "bounded"}


def test_pow_tensor_tensor_integers_exact_and_far_value_caught() -> None:
    a, b = torch.arange(-5, 6), torch.tensor(3)
    assert verdicts(aten.pow.Tensor_Tensor, a, b) == ["identical"]
    outs, em = emulate(aten.pow.Tensor_Tensor, torch.tensor([3.0]), torch.tensor([0.5]))
    t = outs[0].numpy()
    for _ in range(4):  # 4 ulps off: beyond the libm bound
        t = one_ulp_off(t)
    assert judge(t, em[0]).verdict == "differs"


@pytest.mark.parametrize("dt", [torch.int32, torch.int64, torch.bool])
def test_prod_integers_exact(dt: torch.dtype) -> None:
    x = torch.tensor([3, 4, 5], dtype=dt) if dt != torch.bool else torch.tensor([True, False])
    assert verdicts(aten.prod.default, x) == ["identical"]


def test_prod_float_bounded_and_dims() -> None:
    x = torch.rand(4, 6, dtype=torch.float32) + 0.5
    assert set(verdicts(aten.prod.default, x)) <= {"identical", "bounded"}
    assert set(verdicts(aten.prod.dim_int, x, 1, True)) <= {"identical", "bounded"}


@pytest.mark.parametrize("op", ["all", "any"])
def test_all_any_exact(op: str) -> None:
    x = torch.rand(3, 4, 5) > 0.3
    f = getattr(aten, op)
    assert verdicts(f.default, x) == ["identical"]
    assert verdicts(f.dim, x, 1) == ["identical"]
    assert verdicts(f.dims, x, [0, 2]) == ["identical"]
    assert verdicts(f.dims, x.float(), [1], True) == ["identical"]


def test_random_draw_judged_by_its_range() -> None:
    random_from = getattr(aten.random_, "from")  # an overload named by a Python keyword
    x = torch.empty(1000, dtype=torch.int64)
    assert verdicts(random_from, x, 5, 17) == ["identical"]
    outs, _ = emulate(random_from, torch.empty(100, dtype=torch.int64), 5, 17)
    bad = outs[0].numpy().copy()
    bad[3] = 17  # outside [5, 17): a draw torch could not have made
    call = Call("aten.random_.from", (bad, 5, 17), {}, ("int64",), options={"outputs": [bad]})
    out = lookup("aten.random_.from")(call)[0]
    assert out is not None and judge(bad, out).verdict == "differs"
    assert np.all(outs[0].numpy() >= 5)
