"""Loss scalers against what the frameworks were observed (or read) to do.

Every expected number below is either copied from the AMP research note (shared/research/amp.md,
section cited; "[observed]" rows were recorded from torch 2.13.0+cpu and Keras 3.15.1) or derived
by hand in a comment from the framework's source rule. None comes from running fpemu.
"""

from __future__ import annotations

import math
import pickle
import re
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from fpemu.amp.scaling import (
    SCALER_ALIASES,
    SCALERS,
    ApexDynamicScaler,
    FreshGradScaler,
    HysteresisScaler,
    KerasLossScaleOptimizer,
    LossScaler,
    NaiveDoublingScaler,
    NoScaler,
    ScalerArgumentError,
    StaticScaler,
    StepRecord,
    TfKerasLossScaleOptimizer,
    TorchGradScaler,
    TutorialScaler,
    TutorialSkippingScaler,
    get_scaler,
)

F32 = np.float32
BAD = {"ok": 1.0, "inf": math.inf, "-inf": -math.inf, "nan": math.nan}


class Param:
    """A parameter with a NumPy grad."""

    def __init__(self, grad: np.ndarray | None = None) -> None:
        self.grad = grad


class Opt:
    """A duck-typed optimizer that counts the steps it was asked to take."""

    def __init__(self, n: int = 1) -> None:
        self.params = [Param() for _ in range(n)]
        self.steps = 0

    def step(self) -> str:
        self.steps += 1
        return "stepped"


def fill_grads(scaler: LossScaler, opt: Opt, kind: str) -> None:
    """Scaled grads as backward would give them: (0.5, 1) * scale, the second made inf/NaN."""
    for p in opt.params:
        g = np.array(scaler.scale(np.array([0.5, 1.0], dtype=F32)), dtype=F32)
        if kind != "ok":
            g[1] = BAD[kind]
        p.grad = g


def iterate(scaler: LossScaler, opt: Opt, kind: str) -> tuple[bool, float, float, int]:
    """One training iteration; returns (stepped, scale used, scale after update, tracker)."""
    used = scaler.get_scale()
    before = opt.steps
    fill_grads(scaler, opt, kind)
    scaler.step(opt)
    record = scaler.update()
    assert record is not None
    return opt.steps > before, used, record.scale_after, record.growth_tracker


def drive(scaler: LossScaler, kinds: list[str]) -> list[tuple[bool, float, float, int]]:
    opt = Opt()
    return [iterate(scaler, opt, k) for k in kinds]


# amp.md 1.9-B [observed 2.13]: GradScaler("cpu", growth_interval=3), init 2**16.
# (grads, stepped, scale used, scale after update, tracker)
TRACE_B = [
    ("ok", True, 65536, 65536, 1),
    ("ok", True, 65536, 65536, 2),
    ("inf", False, 65536, 32768, 0),
    ("ok", True, 32768, 32768, 1),
    ("ok", True, 32768, 32768, 2),
    ("ok", True, 32768, 65536, 0),
    ("ok", True, 65536, 65536, 1),
    ("ok", True, 65536, 65536, 2),
    ("ok", True, 65536, 131072, 0),
    ("nan", False, 131072, 65536, 0),
    ("-inf", False, 65536, 32768, 0),
    ("ok", True, 32768, 32768, 1),
    ("ok", True, 32768, 32768, 2),
    ("ok", True, 32768, 65536, 0),
]


def assert_trace_b(scaler: LossScaler) -> None:
    rows = drive(scaler, [r[0] for r in TRACE_B])
    assert rows == [tuple(r[1:]) for r in TRACE_B]


# ---------------------------------------------------------------------------------------------
# torch.amp.GradScaler
# ---------------------------------------------------------------------------------------------


def test_torch_trace_1_9_b() -> None:
    assert_trace_b(TorchGradScaler(growth_interval=3))


def test_torch_defaults_1_9_a() -> None:
    s = TorchGradScaler()
    # amp.md 1.9-A [observed]: the default state dict, exactly these keys and values.
    expected = {
        "scale": 65536.0,
        "growth_factor": 2.0,
        "backoff_factor": 0.5,
        "growth_interval": 2000,
        "_growth_tracker": 0,
    }
    assert s.state_dict() == expected
    assert list(s.state_dict()) == list(expected)
    assert s._scale is None  # amp.md 1.2: lazily created by the first scale()
    s.scale(F32(1.0))
    assert isinstance(s._scale, np.float32) and float(s._scale) == 65536.0
    assert s.state_dict() == expected


def test_torch_growth_after_2000_finite_updates_1_9_c() -> None:
    # amp.md 1.9-C [observed]: updates 1..1999 keep 65536 with tracker = update count; the
    # 2000th gives 131072 and tracker 0; the next leaves tracker 1.
    s, opt = TorchGradScaler(), Opt()
    for n in range(1, 2000):
        assert iterate(s, opt, "ok")[2:] == (65536.0, n)
    assert iterate(s, opt, "ok")[2:] == (131072.0, 0)
    assert iterate(s, opt, "ok")[2:] == (131072.0, 1)


def test_torch_first_iterations_skipped_1_9_d() -> None:
    # amp.md 1.9-D [observed]: init 2**24, growth_interval 4; iterations 0-4 overflowed and were
    # skipped, then training ran from 524288. The overflow pattern is scripted here.
    s = TorchGradScaler(init_scale=2.0**24, growth_interval=4)
    rows = drive(s, ["inf"] * 5 + ["ok"] * 7)
    assert [(not r[0], r[1], r[2], r[3]) for r in rows] == [
        (True, 16777216, 8388608, 0),
        (True, 8388608, 4194304, 0),
        (True, 4194304, 2097152, 0),
        (True, 2097152, 1048576, 0),
        (True, 1048576, 524288, 0),
        (False, 524288, 524288, 1),
        (False, 524288, 524288, 2),
        (False, 524288, 524288, 3),
        (False, 524288, 1048576, 0),
        (False, 1048576, 1048576, 1),
        (False, 1048576, 1048576, 2),
        (False, 1048576, 1048576, 3),
    ]


def test_torch_underflow_to_zero_after_166_backoffs_1_8() -> None:
    # amp.md 1.8 [observed]: from 2**16 every inf halves exactly through the fp32 subnormals:
    # 1.0 after 16, 2**-149 = 1.401298464324817e-45 after 165, 0.0 after 166; 0 then stays 0.
    s, opt = TorchGradScaler(), Opt()
    after = [iterate(s, opt, "inf")[2] for _ in range(166)]
    assert after[15] == 1.0
    assert after[164] == 1.401298464324817e-45
    assert after[165] == 0.0 and after[164] != 0.0
    assert all(a > 0 for a in after[:165])
    # At scale 0: scaled loss 0, grads 0, unscale 0 * inf = NaN, found_inf stays 0, the step
    # RUNS and the tracker counts (amp.md 1.8 "Scale underflow to 0").
    assert float(s.scale(F32(3.0))) == 0.0
    opt.params[0].grad = np.zeros(2, dtype=F32)
    before = opt.steps
    s.step(opt)
    assert opt.steps == before + 1
    assert np.isnan(opt.params[0].grad).all()
    record = s.update()
    assert record is not None and not record.found_inf and record.scale_after == 0.0
    assert record.growth_tracker == 1
    for _ in range(3):  # 0 * growth_factor = 0
        assert iterate(s, opt, "ok")[2] == 0.0


def test_torch_init_scale_zero_gives_nan_params_1_8() -> None:
    # amp.md 1.8 [observed]: GradScaler("cpu", init_scale=0.0): NaN after one step, tracker 1.
    s, opt = TorchGradScaler(init_scale=0.0), Opt()
    stepped, used, after, tracker = iterate(s, opt, "ok")
    assert stepped and used == 0.0 and after == 0.0 and tracker == 1
    assert np.isnan(opt.params[0].grad).all()


def test_torch_growth_refused_at_2_127_1_8() -> None:
    # amp.md 1.8 [observed]: 2**127 with finite grads and growth_interval=1 stays 2**127 and the
    # tracker returns to 0 (2**128 would be inf, so the growth is refused).
    s = TorchGradScaler(init_scale=2.0**127, growth_interval=1)
    assert drive(s, ["ok", "ok"]) == [(True, 2.0**127, 2.0**127, 0)] * 2


def test_torch_oscillation_2_126_2_127_1_8() -> None:
    # amp.md 1.8 [observed]: from 2**126 (growth_interval=1) the scale reaches 2**127, then the
    # scaled loss overflows, the step is skipped and the scale halves: 2**127/2**126 forever.
    # A loss of 3 is finite at 2**126 (3 * 2**126 = 1.5 * 2**127 is below float32's max, just
    # under 2**128) and inf at 2**127 (3 * 2**127 = 1.5 * 2**128): derived by hand.
    s, opt = TorchGradScaler(init_scale=2.0**126, growth_interval=1), Opt()
    trace = []
    for _ in range(6):
        used = s.get_scale()
        opt.params[0].grad = np.array([s.scale(F32(3.0))], dtype=F32)
        s.step(opt)
        record = s.update()
        assert record is not None
        trace.append((used, record.skipped, record.scale_after))
    grow, back = (2.0**126, False, 2.0**127), (2.0**127, True, 2.0**126)
    assert trace == [grow, back] * 3


def test_torch_reciprocal_rounding_1_8() -> None:
    # amp.md 1.8 [observed]: scale 3.0 -> inv 0.3333333432674408; fp32 grads [0.3, 0.6, 0.9]
    # unscale to [0.10000000894069672, 0.20000001788139343, 0.30000001192092896].
    s = TorchGradScaler(init_scale=3.0)
    s.scale(F32(1.0))
    grads = [np.array([0.3, 0.6, 0.9], dtype=F32), np.array([1.0], dtype=F32)]
    keep = grads[0]
    assert s.unscale_(grads) is False
    assert grads[0] is keep  # unscaled in place, like torch
    assert grads[0].tolist() == [0.10000000894069672, 0.20000001788139343, 0.30000001192092896]
    assert grads[1].tolist() == [0.3333333432674408]  # 1.0 * inv is inv itself


def test_torch_bf16_grads_unscale_1_4() -> None:
    # amp.md 1.4 [observed]: on CPU, bf16 grads of 131072 became 2.0 (scale 2**16).
    s = TorchGradScaler()
    s.scale(F32(1.0))
    g = np.array([131072.0], dtype=ml_dtypes.bfloat16)
    grads = {"w": g}
    s.unscale_(grads)
    assert grads["w"].dtype == ml_dtypes.bfloat16 and grads["w"].tolist() == [2.0]


def test_torch_scale_dtype_promotion_1_3() -> None:
    # amp.md 1.3 [observed]: scale(tensor(1., bf16)) gave tensor(65536.) in fp32.
    s = TorchGradScaler()
    out = s.scale(np.asarray(1.0, dtype=ml_dtypes.bfloat16))
    assert out.dtype == np.float32 and float(out) == 65536.0
    # Lists and tuples are scaled element by element and keep their type (amp.md 1.3).
    pair = s.scale((F32(1.0), [F32(2.0)]))
    assert isinstance(pair, tuple) and isinstance(pair[1], list)
    assert float(pair[0]) == 65536.0 and float(pair[1][0]) == 131072.0


def test_torch_get_scale_before_scale_and_load_1_2_1_7() -> None:
    # amp.md 1.2: before the first scale(), get_scale() returns init_scale as given.
    assert TorchGradScaler(init_scale=0.1).get_scale() == 0.1
    # ...and after it, the float32 value (fp32(0.1) = 0.100000001490116119384765625, by hand).
    s = TorchGradScaler(init_scale=0.1)
    s.scale(F32(1.0))
    assert s.get_scale() == 0.100000001490116119384765625
    # amp.md 1.7 [observed]: a fresh scaler reports the loaded scale before any scale().
    fresh = TorchGradScaler()
    fresh.load_state_dict({**TorchGradScaler().state_dict(), "scale": 1024.0})
    assert fresh.get_scale() == 1024.0


def test_torch_disabled_1_2() -> None:
    # amp.md 1.2: disabled: scale returns x unchanged, step just steps, unscale_/update do
    # nothing, get_scale 1.0, state_dict {}.
    s, opt = TorchGradScaler(enabled=False), Opt()
    x = np.array([3.0], dtype=F32)
    assert s.scale(x) is x
    opt.params[0].grad = np.array([np.inf], dtype=F32)
    assert s.unscale_(opt) is False
    assert s.step(opt) == "stepped" and opt.steps == 1  # no inf check when disabled
    assert s.update() is None
    assert s.get_scale() == 1.0 and s.state_dict() == {}
    s.load_state_dict({})  # a no-op, no error
    # A disabled torch scaler does not validate the factors (they are checked only if enabled).
    TorchGradScaler(enabled=False, growth_factor=0.5)


def test_torch_growth_interval_zero_never_grows_1_1() -> None:
    # amp.md 1.1 [observed]: with growth_interval 0 the scale never grows, the tracker counts.
    rows = drive(TorchGradScaler(growth_interval=0), ["ok"] * 5)
    assert [(r[2], r[3]) for r in rows] == [(65536.0, n) for n in range(1, 6)]


def test_torch_two_optimizers_one_backoff_1_8() -> None:
    # amp.md 1.8 [observed]: inf only in the second optimizer: the first steps, the second is
    # skipped, the single update halves once (growth_interval=1: 65536 -> 32768).
    s, a, b = TorchGradScaler(growth_interval=1), Opt(), Opt()
    fill_grads(s, a, "ok")
    fill_grads(s, b, "inf")
    assert s.step(a) == "stepped"
    assert s.step(b) is None
    record = s.update()
    assert (a.steps, b.steps) == (1, 0)
    assert record is not None and record.scale_after == 32768.0 and record.skipped


def test_torch_gradient_accumulation_counts_updates_1_8() -> None:
    # amp.md 1.8 [observed]: four micro-batches then one update leave tracker 1; unscale_ per
    # micro-batch without update() raises the "already been called" RuntimeError.
    s, opt = TorchGradScaler(), Opt()
    total = np.zeros(2, dtype=F32)
    for _ in range(4):
        total += np.asarray(s.scale(np.array([0.5, 1.0], dtype=F32)))
    opt.params[0].grad = total
    s.step(opt)
    record = s.update()
    assert record is not None and record.growth_tracker == 1
    s.scale(F32(1.0))
    s.unscale_(opt)
    with pytest.raises(RuntimeError, match=re.escape("unscale_() has already been called")):
        s.unscale_(opt)


def test_torch_clipping_after_unscale_1_8() -> None:
    # amp.md 1.8 [observed]: after unscale_, clipping sees unscaled grads (norm 5 for [3, 4, 0]);
    # with inf grads, whatever clipping writes, the step is still skipped.
    s, opt = TorchGradScaler(), Opt()
    opt.params[0].grad = np.asarray(s.scale(np.array([3.0, 4.0, 0.0], dtype=F32)))
    s.unscale_(opt)
    assert float(np.linalg.norm(opt.params[0].grad)) == 5.0
    s.step(opt)
    s.update()
    opt.params[0].grad = np.array([0.0, np.inf, 0.0], dtype=F32) * F32(s.get_scale())
    s.scale(F32(1.0))
    s.unscale_(opt)
    opt.params[0].grad = np.array([0.0, 0.0, 0.0], dtype=F32)  # "clipped" to something finite
    assert s.step(opt) is None and opt.steps == 1


def test_torch_order_errors_1_8() -> None:
    # amp.md 1.4/1.5/1.8: the messages of the ordering errors.
    fix = (
        "This may indicate your script did not use scaler.scale(loss or outputs) earlier in "
        "the iteration."
    )
    s, opt = TorchGradScaler(), Opt()
    opt.params[0].grad = np.ones(2, dtype=F32)
    with pytest.raises(
        AssertionError, match=re.escape("Attempted step but _scale is None.  " + fix)
    ):
        s.step(opt)
    with pytest.raises(AssertionError, match=re.escape("Attempted unscale_ but _scale is None.")):
        s.unscale_(opt)
    with pytest.raises(AssertionError, match=re.escape("Attempted update but _scale is None.")):
        s.update()
    s.scale(F32(1.0))
    with pytest.raises(
        AssertionError, match=re.escape("No inf checks were recorded prior to update.")
    ):
        s.update()
    s.unscale_(opt)
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "unscale_() has already been called on this optimizer since the last update()."
        ),
    ):
        s.unscale_(opt)
    s.step(opt)  # step after unscale_ is the documented clipping order
    with pytest.raises(
        RuntimeError, match=re.escape("step() has already been called since the last update().")
    ):
        s.step(opt)
    with pytest.raises(RuntimeError, match=re.escape("unscale_() is being called after step().")):
        s.unscale_(opt)
    s.update()
    with pytest.raises(
        RuntimeError,
        match=re.escape("Closure use is not currently supported if GradScaler is enabled."),
    ):
        s.step(opt, closure=lambda: 0.0)


def test_torch_fp16_and_missing_grads_1_8() -> None:
    s, opt = TorchGradScaler(), Opt(2)
    s.scale(F32(1.0))
    # amp.md 1.8: an fp16 param grad raises ValueError "Attempting to unscale FP16 gradients."
    # (checked for every param before any grad is touched: the fp32 one stays scaled).
    opt.params[0].grad = np.array([65536.0], dtype=F32)
    opt.params[1].grad = np.array([1.0], dtype=np.float16)
    with pytest.raises(ValueError, match=re.escape("Attempting to unscale FP16 gradients.")):
        s.unscale_(opt)
    assert opt.params[0].grad.tolist() == [65536.0]
    # amp.md 1.8: a step whose params all have grad None: "No inf checks were recorded for this
    # optimizer."
    empty = Opt(2)
    with pytest.raises(
        AssertionError, match=re.escape("No inf checks were recorded for this optimizer.")
    ):
        s.step(empty)


def test_torch_constructor_errors_1_1() -> None:
    # amp.md 1.1 [observed 2.13]: AssertionError("The growth factor must be > 1.0.") and
    # ("The backoff factor must be < 1.0."); fpemu's error is also a ValueError naming the value.
    with pytest.raises(AssertionError, match=re.escape("The growth factor must be > 1.0.")):
        TorchGradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match=re.escape("growth_factor=1.0")):
        TorchGradScaler(growth_factor=1.0)
    with pytest.raises(AssertionError, match=re.escape("The backoff factor must be < 1.0.")):
        TorchGradScaler(backoff_factor=1.0)
    with pytest.raises(ScalerArgumentError, match=re.escape("backoff_factor=2")):
        TorchGradScaler(backoff_factor=2)
    with pytest.raises(TypeError, match="growth_interval"):
        TorchGradScaler(growth_interval=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="init_scale"):
        TorchGradScaler(init_scale="big")  # type: ignore[arg-type]


def test_torch_load_empty_state_dict_1_7() -> None:
    # amp.md 1.7: the message for loading {} (saved from a disabled scaler).
    msg = (
        "The source state dict is empty, possibly because it was saved from a disabled "
        "instance of GradScaler."
    )
    with pytest.raises(RuntimeError, match=re.escape(msg)):
        TorchGradScaler().load_state_dict({})


def test_torch_update_new_scale_1_6() -> None:
    # amp.md 1.6: update(new_scale) writes the float into the fp32 scale, tracker untouched.
    s = TorchGradScaler(growth_interval=3)
    drive(s, ["ok"])
    s.scale(F32(1.0))
    record = s.update(new_scale=0.3)
    # fp32(0.3) = 0.300000011920928955078125 (by hand: nearest float32 to 0.3).
    assert record is not None and record.scale_after == 0.300000011920928955078125
    assert record.growth_tracker == 1
    # A 0-d array is copied (a plain cast); a many-element one is refused with torch's reason.
    s.scale(F32(1.0))
    s.update(new_scale=np.asarray(5.0))
    assert s.get_scale() == 5.0
    s.scale(F32(1.0))
    with pytest.raises(AssertionError, match="new_scale should be a float or a 1-element"):
        s.update(new_scale=np.ones(2))


# ---------------------------------------------------------------------------------------------
# Hysteresis (apex csrc/update_scale_hysteresis.cu, amp.md 4.4)
# ---------------------------------------------------------------------------------------------


def test_hysteresis_tolerates_then_backs_off_4_4() -> None:
    # By hand from amp.md 4.4 with hysteresis 2, growth_interval 3, init 2**16:
    # inf: hyst 2->1 > 0 -> only tracker reset (scale 65536); inf: hyst 0 -> backoff 32768;
    # inf: hyst -1 -> backoff 16384; ok: tracker 1, hyst reset to 2; inf: hyst 1 -> tolerated.
    # Every inf step is skipped.
    s, opt = HysteresisScaler(hysteresis=2, growth_interval=3), Opt()
    trace = []
    for kind in ["inf", "inf", "inf", "ok", "inf", "ok", "ok", "ok"]:
        stepped, _, after, tracker = iterate(s, opt, kind)
        assert s.last_record is not None
        trace.append((stepped, after, tracker, s.last_record.hysteresis_tracker))
    assert trace == [
        (False, 65536, 0, 1),
        (False, 32768, 0, 0),
        (False, 16384, 0, -1),
        (True, 16384, 1, 2),
        (False, 16384, 0, 1),
        (True, 16384, 1, 2),
        (True, 16384, 2, 2),
        (True, 32768, 0, 2),
    ]


def test_hysteresis_one_is_torch_4_4() -> None:
    # hysteresis 1: the first inf takes the tracker to 0, so every inf backs off: torch's rule.
    assert_trace_b(HysteresisScaler(hysteresis=1, growth_interval=3))


# ---------------------------------------------------------------------------------------------
# Keras 3 and tf.keras
# ---------------------------------------------------------------------------------------------


def test_keras3_observed_trace_3_2() -> None:
    # amp.md 3.2 [observed keras 3.15.1], dynamic_growth_steps=3, initial 2**15.
    k, opt = KerasLossScaleOptimizer(dynamic_growth_steps=3), Opt()
    scales, counters, iterations = [], [], []
    for kind in ["ok", "ok", "inf", "ok", "ok", "ok", "nan", "ok"]:
        fill_grads(k, opt, kind)
        record = k.apply(opt)
        scales.append(record.scale_after)
        counters.append(k.step_counter)
        iterations.append(k.iterations)
    assert scales == [32768, 32768, 16384, 16384, 16384, 32768, 16384, 16384]
    assert counters == [1, 2, 0, 1, 2, 0, 0, 1]
    assert iterations == [1, 2, 2, 3, 4, 5, 5, 6]
    assert opt.steps == 6


def test_keras3_no_floor_3_2() -> None:
    # amp.md 3.2 [observed]: starting from 2.0, four infs give 0.125 (no floor).
    rows = drive(KerasLossScaleOptimizer(initial_scale=2.0), ["inf"] * 4)
    assert rows[-1][2] == 0.125


def test_keras3_defaults_and_dynamic_false_3_2() -> None:
    # amp.md 3.2 [observed]: defaults initial_scale=2.0**15, dynamic_growth_steps=2000; passing
    # dynamic=False raises (keras/src/optimizers/loss_scale_optimizer.py's message).
    k = KerasLossScaleOptimizer()
    assert (k.dynamic_scale, k.dynamic_growth_steps, k.step_counter) == (32768.0, 2000, 0)
    with pytest.raises(ValueError, match=re.escape("no longer supports `dynamic=False`")):
        KerasLossScaleOptimizer(dynamic=False)


def assert_keras_divides(cls: type[KerasLossScaleOptimizer]) -> None:
    # amp.md 3.2: Keras 3 divides by the scale. fp32(0.3) / 3 = 0.1000000039736429850... which
    # rounds to the float32 0.100000001490116119384765625 (by hand: the neighbours are that and
    # 0.10000000894069671630859375, midpoint 0.1000000052154064...). torch's multiply by the
    # rounded reciprocal gives 0.10000000894069672 instead (amp.md 1.8).
    k = cls(initial_scale=3.0)
    grads = [np.array([0.3], dtype=F32)]
    k.unscale_(grads)
    assert grads[0].tolist() == [0.100000001490116119384765625]


def test_keras3_divides_instead_of_multiplying_3_2() -> None:
    assert_keras_divides(KerasLossScaleOptimizer)


def test_keras3_growth_overflows_to_inf_and_sticks_3_2() -> None:
    # amp.md 3.2/6.4: no inf guard. By hand: 2**127 * 2 = 2**128 overflows float32 to inf; the
    # scaled grads are then non-finite, and inf / 2 = inf, so the scale stays inf and every
    # step is skipped.
    k, opt = KerasLossScaleOptimizer(initial_scale=2.0**127, dynamic_growth_steps=1), Opt()
    assert iterate(k, opt, "ok")[2] == math.inf
    for _ in range(3):
        stepped, used, after, _ = iterate(k, opt, "ok")
        assert not stepped and used == math.inf and after == math.inf


def test_keras3_underflows_to_zero() -> None:
    # By hand (same float32 halving as amp.md 1.8's torch run, which needs 166 from 2**16):
    # from 2**15, 164 halvings give 2**-149 and the 165th gives 0 (2**-150 ties to even: 0).
    k, opt = KerasLossScaleOptimizer(), Opt()
    after = [iterate(k, opt, "inf")[2] for _ in range(165)]
    assert after[163] == 1.401298464324817e-45 and after[164] == 0.0


def test_tf_keras_floor_at_one_3_3() -> None:
    # amp.md 3.3: non-finite grads give max(scale / 2, 1): from 2.0, four infs give 1.0 (Keras 3
    # gives 0.125 for the same run, amp.md 3.2).
    rows = drive(TfKerasLossScaleOptimizer(initial_scale=2.0), ["inf"] * 4)
    assert [r[2] for r in rows] == [1.0, 1.0, 1.0, 1.0]
    assert all(not r[0] for r in rows)


def test_tf_keras_trace_and_iterations_3_3() -> None:
    # amp.md 3.3: double when counter + 1 >= growth_steps. By hand for growth_steps 3 and the
    # amp.md 3.2 sequence the scales equal Keras 3's; tf.keras's do_not_apply_fn also counts
    # skipped steps in iterations (keras/mixed_precision/loss_scale_optimizer.py, v2.x).
    t, opt = TfKerasLossScaleOptimizer(dynamic_growth_steps=3), Opt()
    scales, counters, iterations = [], [], []
    for kind in ["ok", "ok", "inf", "ok", "ok", "ok", "nan", "ok"]:
        fill_grads(t, opt, kind)
        scales.append(t.apply_gradients(opt).scale_after)
        counters.append(t.dynamic_counter)
        iterations.append(t.iterations)
    assert scales == [32768, 32768, 16384, 16384, 16384, 32768, 16384, 16384]
    assert counters == [1, 2, 0, 1, 2, 0, 0, 1]
    assert iterations == [1, 2, 3, 4, 5, 6, 7, 8]
    assert opt.steps == 6


def test_tf_keras_growth_guard_3_3() -> None:
    # amp.md 3.3: the doubling is assigned only if finite: 2**127 stays, counter back to 0.
    rows = drive(TfKerasLossScaleOptimizer(initial_scale=2.0**127, dynamic_growth_steps=1), ["ok"])
    assert rows == [(True, 2.0**127, 2.0**127, 0)]


def test_tf_keras_unscale_and_scaled_loss_dtypes_3_3() -> None:
    t = TfKerasLossScaleOptimizer(initial_scale=3.0)
    # get_unscaled_gradients multiplies by the float32 1/scale: the same arithmetic as torch's
    # (amp.md 3.3 and 1.8), so fp32 0.3 -> 0.10000000894069672 (amp.md 1.8's number).
    out = t.get_unscaled_gradients([np.array([0.3], dtype=F32), None])
    assert out[1] is None and out[0].tolist() == [0.10000000894069672]
    # get_scaled_loss casts the scale to the loss dtype: 2**16 in float16 is inf (by hand:
    # 65536 is past float16's rounding boundary 65520), so a float16 loss of 1 scales to inf.
    big = TfKerasLossScaleOptimizer(initial_scale=2.0**16)
    assert np.isinf(big.scale(np.asarray(1.0, dtype=np.float16)))
    assert float(big.scale(F32(1.0))) == 65536.0


def test_tf_keras_static_and_errors_3_3() -> None:
    # amp.md 3.3: with dynamic=False, initial_scale is required and fixed; the argument errors
    # are tf.keras's (keras/mixed_precision/loss_scale_optimizer.py).
    with pytest.raises(
        ValueError, match=re.escape('"initial_scale" must be specified if "dynamic" is False')
    ):
        TfKerasLossScaleOptimizer(dynamic=False)
    with pytest.raises(
        ValueError,
        match=re.escape('"dynamic_growth_steps" must be None if "dynamic" is False, but got: 5'),
    ):
        TfKerasLossScaleOptimizer(dynamic=False, initial_scale=8.0, dynamic_growth_steps=5)
    with pytest.raises(TypeError, match=re.escape("must be a bool, but got: 'yes'")):
        TfKerasLossScaleOptimizer(dynamic="yes")  # type: ignore[arg-type]
    # A fixed scale applies every step, inf included, and never changes.
    rows = drive(TfKerasLossScaleOptimizer(dynamic=False, initial_scale=8.0), ["inf", "ok"])
    assert rows == [(True, 8.0, 8.0, 0), (True, 8.0, 8.0, 0)]


# ---------------------------------------------------------------------------------------------
# Apex
# ---------------------------------------------------------------------------------------------


def test_apex_defaults_and_cap_4_2() -> None:
    # amp.md 4.2: defaults init 2**16, start min(max_loss_scale, init_scale), max 2**24.
    assert ApexDynamicScaler().get_scale() == 65536.0
    assert ApexDynamicScaler(init_scale=2.0**30).get_scale() == 2.0**24
    # Growth is capped: min(max, scale * 2) keeps 2**24 (by hand from the 4.2 pseudocode).
    rows = drive(ApexDynamicScaler(init_scale=2.0**24, scale_window=1), ["ok", "ok"])
    assert [r[2] for r in rows] == [2.0**24, 2.0**24]


def test_apex_window_trace_matches_torch_rule_4_2() -> None:
    # By hand: apex's "unskipped == scale_window -> double" is torch's growth rule, and its
    # backoff halves, so below the cap apex reproduces amp.md 1.9-B exactly.
    assert_trace_b(ApexDynamicScaler(scale_window=3))


def test_apex_min_loss_scale_and_falsy_min_4_2() -> None:
    # amp.md 4.2: with min_loss_scale the backoff is max(min, scale / 2); apex tests
    # `if self._min_loss_scale`, so 0 means no floor (by hand from the pseudocode).
    rows = drive(ApexDynamicScaler(init_scale=2048.0, min_loss_scale=1024.0), ["inf"] * 3)
    assert [r[2] for r in rows] == [1024.0, 1024.0, 1024.0]
    rows = drive(ApexDynamicScaler(init_scale=2.0, min_loss_scale=0.0), ["inf"] * 3)
    assert [r[2] for r in rows] == [1.0, 0.5, 0.25]


def test_apex_double_scale_underflow_4_2() -> None:
    # amp.md 4.2: the scale is a double with no floor (it falls to ~1e-308 and below). By hand:
    # from 2**16, 1090 halvings give 2**-1074 = 5e-324 and the 1091st gives 0.0; then apex's
    # own `1./scale` raises ZeroDivisionError at the next unscale.
    a, opt = ApexDynamicScaler(), Opt()
    for _ in range(1090):
        iterate(a, opt, "inf")
    assert a.get_scale() == 5e-324
    iterate(a, opt, "inf")
    assert a.get_scale() == 0.0
    with pytest.raises(ZeroDivisionError):
        iterate(a, opt, "ok")


def test_apex_static_and_scale_factor_4_2() -> None:
    # amp.md 4.2 pseudocode: a fixed loss_scale never skips and never changes; unskipped counts.
    rows = drive(ApexDynamicScaler(loss_scale=128.0), ["inf", "ok", "nan"])
    assert rows == [(True, 128.0, 128.0, 1), (True, 128.0, 128.0, 2), (True, 128.0, 128.0, 3)]
    # apex's update hardcodes /2 and *2: scale_factor=4 changes nothing (scaler.py).
    rows = drive(ApexDynamicScaler(scale_factor=4.0, scale_window=1), ["ok", "inf"])
    assert [r[2] for r in rows] == [131072.0, 65536.0]
    with pytest.raises(ValueError, match="loss_scale"):
        ApexDynamicScaler(loss_scale="auto")


def test_apex_unscale_into_fp32_master_grads_4_2() -> None:
    # apex multiplies by fp32(1/scale) into fp32 master grads: an fp16 grad of 1024 at 2**16
    # becomes the float32 2**-6 = 0.015625 (by hand).
    a = ApexDynamicScaler()
    opt = Opt()
    opt.params[0].grad = np.array([1024.0], dtype=np.float16)
    assert a.unscale_(opt) is False
    assert opt.params[0].grad.dtype == np.float32 and opt.params[0].grad.tolist() == [0.015625]
    assert a.state_dict() == {"loss_scale": 65536.0, "unskipped": 0}


# ---------------------------------------------------------------------------------------------
# Static, naive, none
# ---------------------------------------------------------------------------------------------


def test_static_scaler() -> None:
    rows = drive(StaticScaler(scale=1024.0), ["ok", "inf", "ok"])
    assert rows == [(True, 1024.0, 1024.0, 0)] * 3  # applies even the inf step
    rows = drive(StaticScaler(scale=1024.0, skip_nonfinite=True), ["ok", "inf"])
    assert [r[0] for r in rows] == [True, False]
    for bad in [0.0, -1.0, math.inf, math.nan, 1e39]:
        with pytest.raises(ValueError, match="scale"):
            StaticScaler(scale=bad)


def test_naive_doubling_is_wrong() -> None:
    # It doubles on every update, inf or not, and applies inf grads (by hand: 2**16 * 2**k).
    s, opt = NaiveDoublingScaler(), Opt()
    rows = [iterate(s, opt, k) for k in ["ok", "inf", "nan"]]
    assert [r[0] for r in rows] == [True, True, True]
    assert [r[2] for r in rows] == [2.0**17, 2.0**18, 2.0**19]
    assert np.isinf(opt.params[0].grad[1]) or np.isnan(opt.params[0].grad[1])
    # By hand: 2**16 * 2**112 = 2**128 overflows float32, so the 112th doubling gives inf.
    s = NaiveDoublingScaler()
    after = [iterate(s, opt, "ok")[2] for _ in range(112)]
    assert after[110] == 2.0**127 and after[111] == math.inf


def test_no_scaler() -> None:
    s, opt = NoScaler(), Opt()
    x = np.array([2.0], dtype=np.float16)
    assert s.scale(x) is x
    opt.params[0].grad = np.array([np.nan], dtype=F32)
    assert s.step(opt) == "stepped"
    record = s.update()
    assert record is not None and record.found_inf and not record.skipped
    assert record.scale_before == record.scale_after == 1.0


# ---------------------------------------------------------------------------------------------
# state_dict round trips, records, registry, containers
# ---------------------------------------------------------------------------------------------

ROUND_TRIP = [
    (lambda: TorchGradScaler(growth_interval=3, init_scale=3.0), "torch"),
    (lambda: HysteresisScaler(growth_interval=2, hysteresis=3), "hysteresis"),
    (lambda: KerasLossScaleOptimizer(dynamic_growth_steps=3), "keras"),
    (lambda: TfKerasLossScaleOptimizer(dynamic_growth_steps=3, initial_scale=4.0), "tf_keras"),
    (lambda: ApexDynamicScaler(scale_window=3), "apex"),
    (lambda: StaticScaler(scale=64.0), "static"),
    (lambda: NaiveDoublingScaler(init_scale=8.0), "naive"),
    (lambda: NoScaler(), "none"),
]
SEQ = ["ok", "inf", "ok", "ok", "nan", "ok", "ok", "ok", "inf", "ok", "ok"]


@pytest.mark.parametrize(("make", "name"), ROUND_TRIP, ids=[n for _, n in ROUND_TRIP])
def test_state_dict_round_trip_continues_identically(make: Any, name: str) -> None:
    a = make()
    assert a.name == name
    drive(a, SEQ[:5])
    saved = a.state_dict()
    b = make()
    b.load_state_dict(saved)
    assert b.state_dict() == saved
    assert b.get_scale() == a.get_scale()
    assert drive(a, SEQ[5:]) == drive(b, SEQ[5:])
    assert a.state_dict() == b.state_dict()


def test_pickle_only_between_iterations() -> None:
    # torch/amp/grad_scaler.py __getstate__ (2.13 source): refused while per-optimizer state
    # is pending; a pickled scaler continues identically.
    s, opt = TorchGradScaler(growth_interval=3), Opt()
    drive(s, ["ok", "inf"])
    fill_grads(s, opt, "ok")
    s.unscale_(opt)
    with pytest.raises(AssertionError, match="may only be pickled at the beginning"):
        pickle.dumps(s)
    s.step(opt)
    s.update()
    copy = pickle.loads(pickle.dumps(s))
    assert drive(copy, SEQ) == drive(s, SEQ)


def test_step_record_to_dict() -> None:
    s = TorchGradScaler(growth_interval=3)
    drive(s, ["inf"])
    assert s.last_record == StepRecord("torch", 0, 65536.0, 32768.0, True, True, 0)
    assert s.last_record.to_dict() == {
        "scaler": "torch",
        "step": 0,
        "scale_before": 65536.0,
        "scale_after": 32768.0,
        "found_inf": True,
        "skipped": True,
        "growth_tracker": 0,
        "hysteresis_tracker": None,
    }


def test_registry_names_aliases_and_errors() -> None:
    expected = {
        "torch": TorchGradScaler,
        "hysteresis": HysteresisScaler,
        "keras": KerasLossScaleOptimizer,
        "tf_keras": TfKerasLossScaleOptimizer,
        "apex": ApexDynamicScaler,
        "static": StaticScaler,
        "naive": NaiveDoublingScaler,
        "tutorial": TutorialScaler,
        "tutorial_skip": TutorialSkippingScaler,
        "fresh_gradscaler": FreshGradScaler,
        "none": NoScaler,
    }
    assert SCALERS == expected
    for name, cls in expected.items():
        assert type(get_scaler(name)) is cls
        assert type(get_scaler(name.upper())) is cls
    for alias, name in SCALER_ALIASES.items():
        assert type(get_scaler(alias)) is expected[name]
    accepted = "unknown scaler 'amp'; accepted: apex, fresh_gradscaler, hysteresis"
    with pytest.raises(ValueError, match=accepted):
        get_scaler("amp")
    with pytest.raises(ValueError, match=re.escape("growth_factor=0.5")):
        get_scaler("torch", growth_factor=0.5)
    with pytest.raises(TypeError):
        get_scaler("keras", growth_interval=3)
    assert get_scaler("torch", growth_interval=7).get_growth_interval() == 7  # type: ignore[attr-defined]


def test_gradient_containers_and_bad_targets() -> None:
    s = TorchGradScaler(init_scale=4.0)
    s.scale(F32(1.0))
    grads: dict[str, np.ndarray | None] = {"w": np.array([8.0], dtype=F32), "b": None}
    assert s.unscale_(grads) is False
    assert grads["w"] is not None and grads["w"].tolist() == [2.0] and grads["b"] is None
    with pytest.raises(TypeError, match="target must be"):
        s.unscale_((np.ones(1, dtype=F32),))
    with pytest.raises(TypeError, match=r"gradient \[0\] has dtype int64"):
        s.unscale_([np.ones(1, dtype=np.int64)])
    with pytest.raises(TypeError, match="optimizer must have"):
        s.step([np.ones(1, dtype=F32)])  # type: ignore[arg-type]


def test_scale_accepts_tensor_likes_and_iterables_1_3() -> None:
    class TensorLike:
        def __mul__(self, other: Any) -> tuple[str, Any]:
            return ("graph node", other)

    s = TorchGradScaler(init_scale=8.0)
    tag, factor = s.scale(TensorLike())
    # A tensor-like loss gets the scale as a 0-d float32 array (the torch scale tensor's dtype).
    assert tag == "graph node" and factor.shape == () and factor.dtype == np.float32
    assert float(factor) == 8.0
    # Other iterables are mapped lazily, like torch's apply_scale (amp.md 1.3).
    assert [float(v) for v in s.scale(F32(v) for v in (1.0, 2.0))] == [8.0, 16.0]
    with pytest.raises(ValueError, match="outputs must be a Tensor or an iterable of Tensors"):
        s.scale("loss")


# ---------------------------------------------------------------------------------------------
# The checks can fail: deliberately wrong scalers are caught by the same assertions
# ---------------------------------------------------------------------------------------------


class OffByOneTorch(TorchGradScaler):
    """Grows one finite update late (compares the old tracker, not tracker + 1)."""

    def _apply_rule(self, found_inf: bool) -> None:
        if found_inf:
            super()._apply_rule(found_inf)
        elif self._tracker() == self._growth_interval:
            self._scale = np.float32(float(self._scale32()) * self._growth_factor)
            self._growth_tracker = 0
        else:
            self._growth_tracker = self._tracker() + 1


class NoSkipTorch(TorchGradScaler):
    """Backs off but applies the inf step anyway."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._skips_nonfinite = False


class TorchStyleKeras(KerasLossScaleOptimizer):
    """Keras with torch's unscale (multiply by the rounded reciprocal) instead of division."""

    def _unscale(self, arrays: list[np.ndarray]) -> tuple[list[np.ndarray] | None, bool]:
        inv = np.float32(1.0 / float(self._dynamic_scale))
        return [a * inv for a in arrays], False


@pytest.mark.parametrize("wrong", [OffByOneTorch, NoSkipTorch], ids=["off_by_one", "no_skip"])
def test_wrong_torch_variants_fail_trace_b(wrong: type[TorchGradScaler]) -> None:
    with pytest.raises(AssertionError):
        assert_trace_b(wrong(growth_interval=3))


def test_wrong_keras_variant_fails_division_check() -> None:
    with pytest.raises(AssertionError):
        assert_keras_divides(TorchStyleKeras)


# ---------------------------------------------------------------------------------------------
# Differential test against the real torch.amp.GradScaler (runs where torch is installed)
# ---------------------------------------------------------------------------------------------


def test_against_real_torch_grad_scaler() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    configs = [
        dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=3),
        dict(init_scale=3.0, growth_factor=1.7, backoff_factor=0.37, growth_interval=2),
        dict(init_scale=1e-3, growth_factor=1.001, backoff_factor=0.9, growth_interval=1),
        dict(init_scale=1e38, growth_factor=3.0, backoff_factor=0.1, growth_interval=1),
    ]
    for cfg in configs:
        ref = torch.amp.GradScaler("cpu", **cfg)
        mine = TorchGradScaler(**cfg)  # type: ignore[arg-type]
        p32 = torch.zeros(5, requires_grad=True)
        pbf = torch.zeros(3, dtype=torch.bfloat16, requires_grad=True)
        p64 = torch.zeros(2, dtype=torch.float64, requires_grad=True)
        topt = torch.optim.SGD([p32, pbf, p64], lr=0.0)
        opt = Opt(3)
        for _ in range(40):
            loss = F32(rng.standard_normal())
            out_ref = ref.scale(torch.tensor(loss))
            out_mine = mine.scale(loss)
            assert out_ref.dtype == torch.float32
            assert np.asarray(out_mine).view(np.uint32) == out_ref.numpy().view(np.uint32)
            g32 = (rng.standard_normal(5) * 10.0 ** rng.integers(-30, 30)).astype(F32)
            if rng.random() < 0.3:
                g32[rng.integers(5)] = rng.choice([np.inf, -np.inf, np.nan])
            gbf = rng.standard_normal(3).astype(ml_dtypes.bfloat16)
            g64 = rng.standard_normal(2) * 1e10
            p32.grad, pbf.grad = (
                torch.from_numpy(g32.copy()),
                torch.from_numpy(gbf.view(np.uint16).copy()).view(torch.bfloat16),
            )
            p64.grad = torch.from_numpy(g64.copy())
            opt.params[0].grad, opt.params[1].grad, opt.params[2].grad = (
                g32.copy(),
                gbf.copy(),
                g64.copy(),
            )
            ref.unscale_(topt)
            mine.unscale_(opt)
            np.testing.assert_array_equal(
                opt.params[0].grad.view(np.uint32), p32.grad.numpy().view(np.uint32)
            )
            np.testing.assert_array_equal(
                opt.params[1].grad.view(np.uint16),
                pbf.grad.view(torch.int16).numpy().view(np.uint16),
            )
            np.testing.assert_array_equal(
                opt.params[2].grad.view(np.uint64), p64.grad.numpy().view(np.uint64)
            )
            ref.step(topt)
            mine.step(opt)
            ref.update()
            mine.update()
            assert mine.state_dict() == ref.state_dict()


def _to_torch(torch: Any, a: np.ndarray) -> Any:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _bits(torch: Any, t: Any) -> tuple[str, list[int]]:
    """(dtype name, raw bit patterns) of a torch tensor, for bit-exact comparison."""
    name = str(t.dtype).removeprefix("torch.")
    ints = {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return name, [int(v) & (2 ** (8 * t.element_size()) - 1) for v in t.view(ints).reshape(-1)]


def _np_bits(a: np.ndarray) -> tuple[str, list[int]]:
    a = np.asarray(a)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
    return a.dtype.name, [int(v) for v in a.reshape(-1).view(uint)]


def test_scale_outputs_against_real_torch() -> None:
    torch = pytest.importorskip("torch")
    losses = [
        np.array([1.0009765625, 0.1, 60000.0, -3.5], dtype=np.float16),
        np.asarray(1.5, dtype=np.float16),
        np.array([0.3, 7.0], dtype=ml_dtypes.bfloat16),
        np.asarray(0.3, dtype=ml_dtypes.bfloat16),
        np.asarray(0.1, dtype=F32),
        np.array([0.1, 3e38, -1e-40], dtype=F32),
        np.array([0.1, 1e300], dtype=np.float64),
        np.asarray(0.1, dtype=np.float64),
        np.array([3, -7], dtype=np.int32),
    ]
    for init in [3.0, 2.0**16, 1e-3, 2.0**-149, 0.0, 3e38]:
        ref, mine = torch.amp.GradScaler("cpu", init_scale=init), TorchGradScaler(init_scale=init)
        for a in losses:
            assert _np_bits(mine.scale(a)) == _bits(torch, ref.scale(_to_torch(torch, a)))


def test_found_inf_and_skips_against_real_torch() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    for init in [2.0**16, 2.0**-149, 0.0]:
        ref, mine = torch.amp.GradScaler("cpu", init_scale=init), TorchGradScaler(init_scale=init)
        p = torch.zeros(4, requires_grad=True)
        topt, opt = torch.optim.SGD([p], lr=0.0), Opt()
        for _ in range(30):
            ref.scale(torch.tensor(1.0))
            mine.scale(F32(1.0))
            g = (rng.standard_normal(4) * 2.0 ** rng.integers(-160, 128)).astype(F32)
            if rng.random() < 0.3:
                g[rng.integers(4)] = rng.choice([np.inf, np.nan])
            p.grad, opt.params[0].grad = torch.from_numpy(g.copy()), g.copy()
            ref.unscale_(topt)
            found = mine.unscale_(opt)
            assert found == bool(sum(v.item() for v in ref._found_inf_per_device(topt).values()))
            assert _np_bits(opt.params[0].grad) == _bits(torch, p.grad)
            ref.step(topt)
            mine.step(opt)
            ref.update()
            mine.update()
            assert mine.state_dict() == ref.state_dict()


@pytest.mark.parametrize("gdtype", [np.float32, np.float16, ml_dtypes.bfloat16])
def test_keras3_against_real_keras(monkeypatch: pytest.MonkeyPatch, gdtype: Any) -> None:
    # Keras 3 on the torch backend (the backend amp.md's Keras observations used). SGD with
    # learning rate 1 from a zero variable leaves exactly 0 - grad/scale in it, exposing the bits.
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    torch = pytest.importorskip("torch")
    if keras.backend.backend() != "torch":
        pytest.skip("keras was imported with another backend")
    rng = np.random.default_rng(5)
    zeros = np.zeros(4, dtype=gdtype)
    for initial, steps in [(3.0, 3), (2.0**15, 2), (2.0**126, 1), (2.0**-148, 2)]:
        ref = keras.optimizers.LossScaleOptimizer(
            keras.optimizers.SGD(learning_rate=1.0),
            initial_scale=initial,
            dynamic_growth_steps=steps,
        )
        var = keras.Variable(_to_torch(torch, zeros), dtype=np.dtype(gdtype).name)
        ref.build([var])
        mine = KerasLossScaleOptimizer(initial_scale=initial, dynamic_growth_steps=steps)
        opt = Opt()
        for _ in range(12):
            for loss in [np.asarray(0.1, dtype=np.float16), np.array([0.3, 7.0], dtype=np.float16)]:
                assert _np_bits(mine.scale_loss(loss)) == _bits(
                    torch, ref.scale_loss(_to_torch(torch, loss))
                )
            g = (rng.standard_normal(4) * 2.0 ** rng.integers(-10, 10)).astype(gdtype)
            if rng.random() < 0.3:
                g[rng.integers(4)] = rng.choice([np.inf, np.nan])
            var.assign(_to_torch(torch, zeros))
            ref.apply([_to_torch(torch, g)], [var])
            opt.params[0].grad = g.copy()
            record = mine.apply(opt)
            assert record.scale_after == ref.dynamic_scale.value.item()
            assert (mine.step_counter, mine.iterations) == (
                ref.step_counter.value.item(),
                ref.iterations.value.item(),
            )
            if not record.skipped:
                expected = _bits(torch, var.value.detach())
                assert _np_bits(np.zeros_like(g) - opt.params[0].grad) == expected


def test_float32_overflow_errors_against_real_torch() -> None:
    # torch's fill_/full use a checked float conversion: a finite scale past float32's max is a
    # RuntimeError, at the first scale() or in update(new_scale=...). Compared with real torch.
    torch = pytest.importorskip("torch")

    def error(fn: Any) -> tuple[type[BaseException], str] | None:
        try:
            fn()
        except (RuntimeError, AssertionError, TypeError) as e:
            return type(e), str(e)
        return None

    ref, mine = torch.amp.GradScaler("cpu", init_scale=1e39), TorchGradScaler(init_scale=1e39)
    expected = error(lambda: ref.scale(torch.tensor(1.0)))
    assert expected is not None and expected[0] is RuntimeError
    assert error(lambda: mine.scale(F32(1.0))) == expected
    ref, mine = torch.amp.GradScaler("cpu"), TorchGradScaler()
    ref.scale(torch.tensor(1.0))
    mine.scale(F32(1.0))
    for new in [1e39, -1e39, math.inf, 0.3, 3.4028235677973366e38]:
        assert error(lambda n=new: mine.update(new_scale=n)) == error(
            lambda n=new: ref.update(new_scale=n)
        )
        assert mine.get_scale() == ref.get_scale() or (
            math.isnan(mine.get_scale()) and math.isnan(ref.get_scale())
        )
