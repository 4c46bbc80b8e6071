"""The classic loss-scaling mistakes (issue 11 item 5) against real torch running the same code.

Each torch side below is the mistaken code written literally (the tutorial scaler class, the
step function that builds a GradScaler per call), run on torch 2.13 CPU. The model is one
float32 weight vector used in float16 by hand, ``mean(float(half(w) * half(x)))``: its
gradient ``float32(half(half(scale / 32) * half(x)))`` overflows float16 once the scale is large
enough, and every operation is elementwise and correctly rounded, so fpemu's autograd must give
the same bits under any ATEN_CPU_CAPABILITY. The optimizer is SGD with lr = 2**-10: ``lr * g``
is exact, so torch's fused and unfused ``add_`` kernels round identically. Traces and weights
are compared bit for bit; nothing expected is computed by fpemu alone.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from fpemu.amp.scaling import (
    FreshGradScaler,
    LossScaler,
    TutorialScaler,
    TutorialSkippingScaler,
    get_scaler,
)
from fpemu.nn import functional as fn
from fpemu.nn.optim import SGD
from fpemu.nn.tensor import Tensor, cast
from fpemu.testing import assert_bitwise_equal
from fpemu.training.loop import train

torch = pytest.importorskip("torch")

N, LR, STEPS = 32, 2.0**-10, 10
_RNG = np.random.default_rng(0)
W0 = _RNG.normal(size=N).astype(np.float32)
# |x| in [1, 4]: the float16 gradient 2**(s - 5) * x overflows (>= 65520) from scale 2**20 on
XS = [(_RNG.uniform(1, 4, N) * _RNG.choice([-1, 1], N)).astype(np.float32) for _ in range(STEPS)]
# |x| in [32, 64]: already 2**16 / 32 * 32 = 65536 overflows float16, at every step
BIG = [x * 16 for x in XS]

Trace = list[tuple[float, bool, float]]  # (scale used, overflow found, scale after)


# -- the torch side: the mistakes, written as people write them ---------------------------------
class TorchTutorialScaler:
    """The tutorial scaler, verbatim in spirit (a Python float scale)."""

    def __init__(self, init_scale: float = 2.0**16) -> None:
        self.scale = init_scale

    def scale_loss(self, loss: Any) -> Any:
        return loss * self.scale

    def unscale_gradients(self, model: Any) -> None:
        for p in model.parameters():
            if p.grad is not None:
                p.grad.div_(self.scale)

    def update_scale(self, overflow: bool) -> None:
        self.scale = self.scale / 2 if overflow else self.scale * 2


def check_overflow(model: Any) -> bool:
    return any(not torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


class TorchModel(torch.nn.Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.from_numpy(W0.copy()))

    def forward(self, x: Any) -> Any:
        return (self.w.half() * x.half()).float().mean()


def torch_tutorial(xs: list[np.ndarray], *, skip: bool) -> tuple[Trace, np.ndarray]:
    model = TorchModel()
    opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=False)
    scaler, trace = TorchTutorialScaler(), []
    for x in xs:
        opt.zero_grad()
        used = scaler.scale
        scaler.scale_loss(model(torch.from_numpy(x))).backward()
        scaler.unscale_gradients(model)
        if skip:  # the usual repair: check first, skip the step on overflow
            overflow = check_overflow(model)
            if not overflow:
                opt.step()
        else:  # the tutorial's order: step, then check
            opt.step()
            overflow = check_overflow(model)
        scaler.update_scale(overflow)
        trace.append((used, overflow, scaler.scale))
    return trace, model.w.detach().numpy().copy()


def torch_gradscaler(xs: list[np.ndarray], *, fresh: bool) -> tuple[Trace, np.ndarray]:
    model = TorchModel()
    opt = torch.optim.SGD(model.parameters(), lr=LR, foreach=False)
    carried = torch.amp.GradScaler("cpu")
    trace = []
    for x in xs:
        # The mistake builds the scaler inside the step function. torch.cuda.amp.GradScaler()
        # disables itself without CUDA (test below), so the CPU device of the same class is used.
        scaler = torch.amp.GradScaler("cpu") if fresh else carried
        opt.zero_grad()
        used = scaler.get_scale()
        before = model.w.detach().clone()
        scaler.scale(model(torch.from_numpy(x))).backward()
        scaler.step(opt)
        scaler.update()
        skipped = bool(torch.equal(before, model.w.detach()))
        next_scale = 2.0**16 if fresh else scaler.get_scale()  # a fresh one next call
        trace.append((used, skipped, next_scale))
    return trace, model.w.detach().numpy().copy()


# -- the fpemu side: the same model and data through fpemu's autograd and scaler protocol --------
def fpemu_run(scaler: LossScaler, xs: list[np.ndarray]) -> tuple[Trace, np.ndarray, list[Any]]:
    w = Tensor(W0.copy(), "float32", requires_grad=True)
    opt = SGD([w], lr=LR)
    trace, records = [], []
    for x in xs:
        opt.zero_grad()
        with np.errstate(all="ignore"):
            loss = fn.mean(cast(cast(w, "float16") * Tensor(x, "float16"), "float32"))
            used = scaler.get_scale()
            scaler.scale(loss).backward()
            scaler.step(opt)
            rec = scaler.update()
        assert rec is not None
        flag = rec.found_inf if isinstance(scaler, TutorialScaler) else rec.skipped
        trace.append((used, flag, rec.scale_after))
        records.append(rec)
    return trace, np.asarray(w.data), records


def _same(trace_f: Trace, w_f: np.ndarray, trace_t: Trace, w_t: np.ndarray) -> None:
    assert trace_f == trace_t
    assert_bitwise_equal(w_f, w_t, "float32")  # inf and NaN included, by code


# -- tests -----------------------------------------------------------------------------------------
def test_tutorial_scaler_matches_torch_and_corrupts_the_weights_at_its_first_overflow() -> None:
    trace_t, w_t = torch_tutorial(XS, skip=False)
    trace_f, w_f, recs = fpemu_run(TutorialScaler(), XS)
    _same(trace_f, w_f, trace_t, w_t)
    # doubles every clean step from 2**16; the first overflow comes at 2**20 (step 4) ...
    assert [s for s, _, _ in trace_f[:5]] == [2.0**k for k in range(16, 21)]
    first = next(i for i, (_, inf, _) in enumerate(trace_f) if inf)
    assert first == 4
    assert not any(r.skipped for r in recs)  # the step is never skipped
    # ... and that overflow was applied: replay to just before and just after it
    _, w_before, _ = fpemu_run(TutorialScaler(), XS[:first])
    _, w_after, _ = fpemu_run(TutorialScaler(), XS[: first + 1])
    assert np.isfinite(w_before).all()
    assert not np.isfinite(w_after).all()  # inf/NaN reached the weights
    assert not np.isfinite(w_t).all()


def test_tutorial_with_skipping_matches_torch_and_overflows_every_other_step() -> None:
    trace_t, w_t = torch_tutorial(XS, skip=True)
    trace_f, w_f, recs = fpemu_run(TutorialSkippingScaler(), XS)
    _same(trace_f, w_f, trace_t, w_t)
    assert np.isfinite(w_f).all()  # skipping saves the weights ...
    flags = [inf for _, inf, _ in trace_f]
    assert flags[:4] == [False] * 4
    assert flags[4:] == [True, False] * 3  # ... but it grows every step: every other one is lost
    assert [r.skipped for r in recs] == flags


def test_fresh_gradscaler_matches_torch_and_never_adapts() -> None:
    for xs in (XS, BIG):
        trace_t, w_t = torch_gradscaler(xs, fresh=True)
        trace_f, w_f, recs = fpemu_run(FreshGradScaler(), xs)
        _same(trace_f, w_f, trace_t, w_t)
        assert {s for s, _, _ in trace_f} == {2.0**16}  # the scale never moves
        assert all(r.growth_tracker == 0 for r in recs)
    # gradients that overflow at 2**16: every step is skipped, forever; the weights never move
    assert all(skipped for _, skipped, _ in trace_f)
    assert_bitwise_equal(w_f, W0, "float32")


def test_carried_gradscaler_matches_torch_and_recovers() -> None:
    trace_t, w_t = torch_gradscaler(BIG, fresh=False)
    trace_f, w_f, _ = fpemu_run(get_scaler("torch", device="cpu"), BIG)
    _same(trace_f, w_f, trace_t, w_t)
    # backs off 2**16 -> 2**15 -> ... until the gradients fit, then trains
    assert trace_f[0] == (2.0**16, True, 2.0**15)
    assert not all(skipped for _, skipped, _ in trace_f)
    assert np.isfinite(w_f).all() and not np.array_equal(w_f, W0)


def test_literal_cuda_gradscaler_disables_itself_without_cuda() -> None:
    if torch.cuda.is_available():  # pragma: no cover - CPU-only CI
        pytest.skip("this machine has CUDA")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FutureWarning (deprecated alias), UserWarning (no CUDA)
        scaler = torch.cuda.amp.GradScaler()
    assert not scaler.is_enabled()


def test_tutorial_dtypes() -> None:
    s = TutorialScaler(init_scale=2.0**16)
    # a Python float scale keeps the loss's dtype: float16 computed in float32, rounded once
    assert s.scale(np.float16(0.5)).dtype == np.float16
    assert float(s.scale(np.float16(0.5))) == 32768.0
    assert np.isinf(s.scale(np.float16(1.0)))  # 65536 is beyond float16's 65504
    assert s.scale(np.float64(1.5)).dtype == np.float64
    g16 = np.array([3.0, 65504.0], np.float16)
    s.unscale_([g16])  # divided in place, in float16
    assert g16.dtype == np.float16
    assert g16.tolist() == [float(np.float16(3.0 / 65536)), float(np.float16(65504.0 / 65536))]
    # float32 gradients at a scale beyond float32: float32(2**128) is inf, x / inf = 0
    big = TutorialScaler(init_scale=2.0**200)
    g = [np.array([1.0, -1.0], np.float32)]
    big.unscale_(g)
    assert g[0].tolist() == [0.0, -0.0]


def test_bad_arguments() -> None:
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="init_scale"):
            TutorialScaler(init_scale=bad)
    with pytest.raises(TypeError, match="init_scale"):
        TutorialScaler(init_scale="big")  # type: ignore[arg-type]
    s = TutorialSkippingScaler()
    s.load_state_dict({"scale": 8.0, "doublings": 3})
    assert s.state_dict() == {"scale": 8.0, "doublings": 3}
    with pytest.raises(ValueError, match="missing"):
        s.load_state_dict({"scale": 8.0})


def test_registry_names() -> None:
    assert type(get_scaler("tutorial")) is TutorialScaler
    assert type(get_scaler("tutorial_skip")) is TutorialSkippingScaler
    assert type(get_scaler("fresh_gradscaler")) is FreshGradScaler


def test_in_the_training_loop() -> None:
    kw: dict[str, Any] = dict(hidden=(8,), policy="torch_cuda_fp16", steps=12, batch_size=32,
                              acc_model="sequential", progress=False)  # fmt: skip
    tut = train("moons", scaler="tutorial", **kw)
    first = next(s.step for s in tut.steps if s.nonfinite_grads)
    assert [s.scale for s in tut.steps[: first + 1]] == [2.0 ** (16 + k) for k in range(first + 1)]
    assert tut.skipped_steps == 0 and np.isnan(tut.final_loss)
    fresh = train("moons", scaler="fresh_gradscaler", loss_weight=64.0, **kw)
    assert {s.scale for s in fresh.steps} == {2.0**16}
    assert fresh.skipped_steps == 12
