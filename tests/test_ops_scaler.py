"""GradScaler's kernels against torch's CPU kernels, bit for bit: unscale (+ found_inf), the scale
update (growth, backoff, tracker), and ``full``; plus a real GradScaler step traced op by op."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup, names  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.optim_trace_util import trace_judged  # noqa: E402
from tests.watch_ops_util import emulate, judged, one_ulp_off, verdicts  # noqa: E402

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


def grads(dtype: torch.dtype, seed: int, bad: bool = False) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = [torch.randn(n, generator=g).mul(1e4).to(dtype) for n in (1, 7, 33, 1003)]
    out[1][3] = 2.0**-20  # subnormal in float16 after unscaling
    out[2][5] = -0.0
    if bad:
        out[2][4] = float("inf") if seed % 2 else float("nan")
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scale", [65536.0, 3.0, 1.0, 2.0**-3])
@pytest.mark.parametrize("bad", [False, True])
def test_unscale_identical(dtype: torch.dtype, scale: float, bad: bool) -> None:
    # GradScaler's own inverse: the float32 scale's reciprocal in double, rounded to float32
    inv = torch.tensor(scale, dtype=torch.float32).double().reciprocal().float()
    for start in (0.0, 1.0):
        found = torch.tensor(start)
        gs = grads(dtype, int(scale) + bad, bad)
        js = judged(aten._amp_foreach_non_finite_check_and_unscale_.default, gs, found, inv)
        assert [j.verdict for j in js] == ["identical"] * (len(gs) + 1)
        assert found.item() == (1.0 if bad else start)  # torch's own answer, as emulated


def test_unscale_planted_fault_differs() -> None:
    gs = grads(torch.float32, 3)
    inv = torch.tensor(1 / 3.0)
    outs, emulated = emulate(
        aten._amp_foreach_non_finite_check_and_unscale_.default, gs, torch.tensor(0.0), inv
    )
    t = to_numpy(outs[3])
    assert emulated[3] is not None
    assert judge(one_ulp_off(t, 100), emulated[3]).verdict == "differs"
    # a found_inf that stays 0 where torch wrote 1 differs too
    assert emulated[4] is not None
    assert judge(np.float32(1.0).reshape(()), emulated[4]).verdict == "differs"


@pytest.mark.parametrize(
    "scale,tracker,found,growth,backoff,interval",
    [
        (65536.0, 0, 0.0, 2.0, 0.5, 2000),  # count up
        (65536.0, 1999, 0.0, 2.0, 0.5, 2000),  # grow
        (65536.0, 1999, 1.0, 2.0, 0.5, 2000),  # back off, tracker reset
        (3.0, 5, float("nan"), 2.0, 0.3, 10),  # NaN found_inf counts as found; inexact backoff
        (2.0**127, 9, 0.0, 2.0, 0.5, 10),  # growth would overflow: scale kept, tracker reset
        (1.1, 0, 0.0, 1.0001, 0.5, 1),  # inexact growth, interval 1
        (1e-45, 0, 1.0, 2.0, 0.5, 100),  # back off to zero (float32 subnormal underflow)
    ],
)
def test_update_scale_identical(
    scale: float, tracker: int, found: float, growth: float, backoff: float, interval: int
) -> None:
    s = torch.tensor(scale, dtype=torch.float32)
    t = torch.tensor(tracker, dtype=torch.int32)
    f = torch.tensor(found, dtype=torch.float32)
    v = verdicts(aten._amp_update_scale_.default, s, t, f, growth, backoff, interval)
    assert v == ["identical", "identical"]


@pytest.mark.parametrize(
    "value,dtype",
    [
        (65536.0, torch.float32),
        (0.1, torch.float32),
        (0.1, torch.bfloat16),
        (1 + 2**-11 + 2**-40, torch.float16),  # double -> float32 -> float16: a tie, to even
        (1 + 2**-8 + 2**-40, torch.bfloat16),
        (0, torch.int32),
        (3, torch.int64),
        (True, torch.bool),
        (0.1, torch.float64),
    ],
)
def test_full_identical(value: float, dtype: torch.dtype) -> None:
    v = verdicts(aten.full.default, [2, 3], value, dtype=dtype)
    assert v == ["identical"]
    assert verdicts(aten.full.default, [], value, dtype=dtype) == ["identical"]


def test_full_converts_via_float32() -> None:
    em = lookup("aten.full.default")
    assert em is not None
    out = em(Call("aten.full.default", ([1], 1 + 2**-11 + 2**-40), {}, ("float16",)))[0]
    assert out is not None
    assert out.value.item() == 1.0  # a direct double -> float16 rounding would give 1 + 2**-10


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_grad_scaler_step_traced(dtype: torch.dtype) -> None:
    """A real GradScaler run (fp16/bf16 autocast, AdamW, one overflowing step) judged op by op."""
    mine = {
        "aten._amp_foreach_non_finite_check_and_unscale_.default",
        "aten._amp_update_scale_.default",
        "aten.full.default",
    }
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16, growth_interval=2)
    x = torch.randn(16, 8)
    scales = []

    def run() -> None:
        for step in range(4):
            with torch.autocast("cpu", dtype=dtype):
                loss = lin(x * (1e38 if step == 1 else 1.0)).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
            opt.zero_grad()

    mode = trace_judged(run, mine)
    assert set(mode.seen) == mine
    assert all(v == "identical" for vs in mode.seen.values() for v in vs), mode.seen
    assert scales == [2.0**16, 2.0**15, 2.0**15, 2.0**16]  # backed off once, then grew


def test_bad_input_raises() -> None:
    em = lookup("aten._amp_update_scale_.default")
    assert em is not None
    with pytest.raises(TypeError, match="growth_tracker"):
        em(Call("aten._amp_update_scale_.default",
                (np.float32(1.0), np.float32(0.0), np.float32(0.0), 2.0, 0.5, 10), {},
                ("float32", "int32")))  # fmt: skip
    em2 = lookup("aten._amp_foreach_non_finite_check_and_unscale_.default")
    assert em2 is not None
    with pytest.raises(TypeError, match="self"):
        op = "aten._amp_foreach_non_finite_check_and_unscale_.default"
        em2(Call(op, (np.float32([1.0]), np.float32(0.0), np.float32(1.0)), {}, ("float32",)))


def test_registered() -> None:
    have = set(names())
    for op in ("aten._amp_foreach_non_finite_check_and_unscale_.default",
               "aten._amp_update_scale_.default", "aten.full.default"):  # fmt: skip
        assert op in have, op
