"""Modules, optimizers, state dicts, gradient accumulation and the training loop."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from fpemu.amp.policy import get_policy
from fpemu.amp.scaling import TorchGradScaler, get_scaler
from fpemu.nn import MLP
from fpemu.nn import functional as fn
from fpemu.nn.optim import SGD, Adam, clip_grad_norm
from fpemu.nn.tensor import Tensor
from fpemu.testing import assert_ulp_close
from fpemu.training.datasets import digits, get_dataset, moons, spirals
from fpemu.training.experiment import run_experiment
from fpemu.training.loop import GradView, classify, make_optimizer, make_scaler, train, train_step

RNG = np.random.default_rng(99)


def _param(values: list[float], fmt: str = "float64") -> Tensor:
    return Tensor(np.array(values), fmt, requires_grad=True)


# -- optimizers vs hand formulas --------------------------------------------------------------
def test_sgd_momentum_matches_hand_formula() -> None:
    w0, lr, mu, wd = np.array([1.0, -2.0, 0.5]), 0.1, 0.9, 0.01
    grads = [np.array([0.3, -0.1, 2.0]), np.array([-0.2, 0.4, 0.1]), np.array([1.0, 1.0, -1.0])]
    p = _param(w0.tolist())
    opt = SGD([p], lr=lr, momentum=mu, weight_decay=wd)
    w, buf = w0.copy(), None
    for g in grads:
        p.grad = g.copy()
        opt.step()
        d = g + wd * w  # torch.optim.SGD: d_p = grad + wd * p; buf = mu*buf + d_p; p -= lr*buf
        buf = d if buf is None else mu * buf + d
        w = w - lr * buf
        assert p.data.tolist() == w.tolist()  # float64 policy: same operations, same order


def test_adam_matches_textbook_formula() -> None:
    w0, lr, b1, b2, eps = np.array([1.0, -2.0, 0.5]), 0.01, 0.9, 0.999, 1e-8
    p = _param(w0.tolist())
    opt = Adam([p], lr=lr, betas=(b1, b2), eps=eps)
    w, m, v = w0.copy(), np.zeros(3), np.zeros(3)
    for t in range(1, 6):
        g = RNG.normal(size=3)
        p.grad = g.copy()
        opt.step()
        m = b1 * m + (1 - b1) * g  # Kingma & Ba, Algorithm 1
        v = b2 * v + (1 - b2) * g * g
        mhat, vhat = m / (1 - b1**t), v / (1 - b2**t)
        w = w - lr * mhat / (np.sqrt(vhat) + eps)
        np.testing.assert_allclose(p.data, w, rtol=1e-12, atol=0)
        np.testing.assert_allclose(opt.state[0]["exp_avg"], m, rtol=1e-12)


def test_adam_in_fp32_tracks_float64_formula() -> None:
    p32 = _param([1.0, -2.0, 0.5], "float32")
    opt = Adam([p32], lr=0.01)
    w, m, v = np.array([1.0, -2.0, 0.5]), np.zeros(3), np.zeros(3)
    for t in range(1, 4):
        g = np.array([0.5, -0.25, 1.0]) * t
        p32.grad = g.astype(np.float32)
        opt.step()
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        w = w - 0.01 * (m / (1 - 0.9**t)) / (np.sqrt(v / (1 - 0.999**t)) + 1e-8)
    assert p32.data.dtype == np.float32
    np.testing.assert_allclose(p32.data, w, rtol=1e-6)


def test_master_weights_keep_updates_that_fp16_params_lose() -> None:
    # lr*g = 1e-4 is below half an fp16 ulp of 1.0 (2**-11): a pure-fp16 update vanishes,
    # while fp32 master weights accumulate it (the point of Apex O2's master copy, amp.md 4.1).
    naive = _param([1.0], "float16")
    master = _param([1.0], "float16")
    o_naive = SGD([naive], lr=1e-2)
    o_master = SGD([master], lr=1e-2, master="float32")
    for _ in range(20):
        for p in (naive, master):
            p.grad = np.array([0.01], np.float32)
        o_naive.step()
        o_master.step()
    assert naive.data.tolist() == [1.0]
    assert o_master.master is not None
    assert abs(float(o_master.master[0][0]) - (1 - 20e-4)) < 1e-6
    assert master.data.tolist() == [0.998046875]  # fp16 nearest to 0.998


# -- optimizers vs torch.optim ------------------------------------------------------------------
# torch's CPU result for the same update is not one function of the inputs: ATen picks its kernel
# build at run time (ATEN_CPU_CAPABILITY: DEFAULT, AVX2, AVX512). The AVX2/AVX512 kernels compute
# add_(x, alpha), lerp_ and addcdiv_ with fused multiply-adds, the DEFAULT build rounds the
# product first; float16/bfloat16 elements past the last full vector go through a scalar path
# that rounds alpha*x to the 16-bit format before the add. fpemu models one of these (the fused
# kernel), so the comparison is a bound from the numerics, not bit equality:
#
# Weights start in [1.4, 1.6] (sign random) and stay in the binade [1, 2) for all 4 steps (the
# test checks this premise): SGD moves a weight by at most lr * sum|buf| <= 0.1 * 2.2 and Adam by
# at most lr * (1 - b1) / sqrt(1 - b2) = 3.2 * lr per step (Kingma & Ba, section 2.1). Inside
# one binade, rounding to nearest commutes with shifts by whole ulps, so if the two exact
# pre-rounding values of a step differ by less than (k + 1) ulp(w), the rounded weights differ
# by at most k + 1 ulps. Each implementation's update (lr * buf for SGD, step * m / denom for
# Adam) differs from the other's by less than one ulp(w): the differing roundings are of the
# product lr * buf (|lr * buf| <= 0.25 < |w|, so half an ulp of it is below ulp(w) / 4), of the
# momentum/weight-decay terms (|g| <= 0.25, |buf| < 1 <= |w|: one rounding of buf costs at most
# lr * ulp(buf) <= ulp(w) / 10 per step, 4 steps and two roundings: < ulp(w)), and for Adam of
# m (lerp with or without FMA) and of denom (each a relative 2**-24, scaled by
# |step * m / denom| <= 3.2 * lr = 0.032: far below 2**-24 * |w|). Hence: after step t the
# weights are at most t ulps apart, in the parameter's format.
def _binade_weights(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], n) * rng.uniform(1.4, 1.6, n)


@pytest.mark.parametrize("fmt", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("wd", "mom"), [(0.0, 0.0), (0.01, 0.9)])
def test_sgd_matches_torch_optim_within_one_ulp_per_step(fmt: str, wd: float, mom: float) -> None:
    torch = pytest.importorskip("torch")
    dt = getattr(torch, fmt)
    rng = np.random.default_rng(0)
    w0 = torch.tensor(_binade_weights(rng, 3000), dtype=dt)
    gs = [torch.tensor(np.clip(rng.normal(size=3000), -4, 4) / 16, dtype=dt) for _ in range(4)]
    pt = w0.clone().requires_grad_(True)
    ot = torch.optim.SGD([pt], lr=0.1, momentum=mom, weight_decay=wd, foreach=False)
    p = Tensor(w0.float().numpy(), fmt, requires_grad=True)
    opt = SGD([p], lr=0.1, momentum=mom, weight_decay=wd)
    for t, g in enumerate(gs, start=1):
        pt.grad = g.clone()
        ot.step()
        p.grad = g.float().numpy()
        opt.step()
        theirs = pt.detach().float().numpy()
        assert ((np.abs(theirs) >= 1) & (np.abs(theirs) < 2)).all()  # the bound's premise
        assert_ulp_close(p.data, theirs, fmt, max_ulp=t, err_msg=f"step {t}")


def test_adam_matches_torch_optim_within_one_ulp_per_step() -> None:
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    w0 = _binade_weights(rng, 2000).astype(np.float32)
    pt = torch.tensor(w0, requires_grad=True)
    ot = torch.optim.Adam([pt], lr=0.01, foreach=False)
    p = Tensor(w0, "float32", requires_grad=True)
    opt = Adam([p], lr=0.01)
    for t in range(1, 5):
        g = rng.normal(size=2000).astype(np.float32)
        pt.grad = torch.from_numpy(g.copy())
        ot.step()
        p.grad = g
        opt.step()
        theirs = pt.detach().numpy()
        assert ((np.abs(theirs) >= 1) & (np.abs(theirs) < 2)).all()  # the bound's premise
        assert_ulp_close(p.data, theirs, "float32", max_ulp=t, err_msg=f"step {t}")


def test_optimizer_bound_catches_a_wrong_update() -> None:
    # The bound is tight enough to fail on a real error: an lr off by one part in 2**16
    # moves a weight by 0.025 * 2**-16 = 3.8e-7 in one step, 3 float32 ulps of a weight in [1, 2).
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    w0 = _binade_weights(rng, 500).astype(np.float32)
    pt = torch.tensor(w0, requires_grad=True)
    ot = torch.optim.SGD([pt], lr=0.1 * (1 + 2.0**-16), foreach=False)
    p = Tensor(w0, "float32", requires_grad=True)
    opt = SGD([p], lr=0.1)
    g = np.full(500, 0.25, np.float32)
    pt.grad = torch.from_numpy(g.copy())
    ot.step()
    p.grad = g
    opt.step()
    with pytest.raises(AssertionError, match="not within 1 ulp"):
        assert_ulp_close(p.data, pt.detach().numpy(), "float32", max_ulp=1)


def test_pure_fp16_adam_eps_underflows_to_nan() -> None:
    # With fp16 state, eps = 1e-8 rounds away (below fp16's 2**-24) and a zero second moment
    # gives 0/0: the classic reason pure-FP16 Adam needs eps >= ~1e-4 or fp32 master state.
    p = _param([1.0, 1.0], "float16")
    opt = Adam([p], lr=1e-3)
    p.grad = np.array([0.0, 0.5], np.float32)
    opt.step()
    assert np.isnan(p.data[0]) and np.isfinite(p.data[1])
    q = _param([1.0, 1.0], "float16")
    opt32 = Adam([q], lr=1e-3, master="float32")
    q.grad = np.array([0.0, 0.5], np.float32)
    opt32.step()
    assert q.data[0] == 1.0 and q.data[1] == np.float16(1 - 1e-3)


def test_clip_grad_norm_like_torch() -> None:
    g, n = clip_grad_norm([np.array([3.0, 4.0], np.float32), None], 2.5)
    assert n == 5.0 and g[1] is None
    np.testing.assert_allclose(g[0], [1.5, 2.0], rtol=1e-6)
    same, _ = clip_grad_norm([np.array([0.3, 0.4])], 10.0)
    np.testing.assert_array_equal(same[0], [0.3, 0.4])  # coefficient clamped at 1
    bad, n_inf = clip_grad_norm([np.array([3.0, np.inf, 0.0])], 1.0)  # amp.md 1.8
    assert math.isinf(n_inf) and bad[0][0] == 0 and np.isnan(bad[0][1]) and bad[0][2] == 0


def test_optimizer_argument_errors() -> None:
    p = _param([1.0])
    with pytest.raises(ValueError, match="lr=-1"):
        SGD([p], lr=-1)
    with pytest.raises(TypeError, match="params must be"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="betas"):
        Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="grads has 2 entries"):
        SGD([p], lr=0.1).step([None, None])
    with pytest.raises(ValueError, match="optimizer='rmsprop'"):
        make_optimizer("rmsprop", MLP([2, 2]), lr=0.1)


# -- state dicts ------------------------------------------------------------------------------
def _setup(policy: str, optimizer: str, scaler: str, seed: int = 3):
    model = MLP([2, 16, 3], policy=policy, seed=seed)
    opt = make_optimizer(optimizer, model, lr=0.05)
    return model, opt, make_scaler(scaler, get_policy(policy))


@pytest.mark.parametrize(
    ("policy", "optimizer", "scaler"),
    [
        ("fp32", "sgd", "none"),
        ("torch_cuda_fp16", "adam", "torch"),
        ("apex_O2", "sgd", "apex"),
        ("keras_mixed_float16", "adam", "keras"),
    ],
)
def test_state_dicts_round_trip_bit_exactly(policy: str, optimizer: str, scaler: str) -> None:
    data = spirals(n=120, seed=1)
    x, y = data.x_train[:32], data.y_train[:32]
    model, opt, sc = _setup(policy, optimizer, scaler)
    for s in range(3):
        train_step(model, opt, sc, x, y, step=s)
    saved = (model.state_dict(), opt.state_dict(), sc.state_dict())
    json.dumps(sc.state_dict())  # plain data
    for s in range(3, 6):
        train_step(model, opt, sc, x, y, step=s)
    model2, opt2, sc2 = _setup(policy, optimizer, scaler, seed=11)  # different init
    model2.load_state_dict(saved[0])
    opt2.load_state_dict(saved[1])
    sc2.load_state_dict(saved[2])
    for s in range(3, 6):
        train_step(model2, opt2, sc2, x, y, step=s)
    for (n, a), (_, b) in zip(model.state_dict().items(), model2.state_dict().items(), strict=True):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), n
    assert sc.state_dict() == sc2.state_dict()
    s1, s2 = opt.state_dict(), opt2.state_dict()
    for st1, st2 in zip(s1["state"], s2["state"], strict=True):
        assert all(st1[k].tobytes() == st2[k].tobytes() for k in st1)


def test_load_state_dict_rejects_mismatches() -> None:
    m = MLP([2, 4, 3], policy="naive_fp16")
    sd = m.state_dict()
    with pytest.raises(ValueError, match="do not match"):
        m.load_state_dict({k: v for k, v in sd.items() if k != "layers.0.bias"})
    with pytest.raises(ValueError, match="shape"):
        m.load_state_dict({**sd, "layers.0.bias": np.zeros(5)})
    with pytest.raises(ValueError, match="not representable in float16"):
        m.load_state_dict({**sd, "layers.0.bias": np.full(4, 0.1)})
    opt = SGD(m.parameters(), lr=0.1, master="float32")
    with pytest.raises(ValueError, match="master weights"):
        SGD(m.parameters(), lr=0.1).load_state_dict(opt.state_dict())


# -- gradient accumulation --------------------------------------------------------------------
def _grads(model: MLP, xs: list[np.ndarray], ys: list[np.ndarray]) -> list[np.ndarray]:
    model.zero_grad()
    for x, y in zip(xs, ys, strict=True):
        loss = fn.cross_entropy(model(x), y, policy=model.policy)
        if len(xs) > 1:
            loss = fn.mul(loss, 1.0 / len(xs), policy=model.policy)
        loss.backward()
    return [p.grad.copy() for p in model.parameters()]  # type: ignore[union-attr]


@pytest.mark.parametrize(("policy", "rtol"), [("float64", 1e-13), ("fp32", 2e-6)])
def test_gradient_accumulation_equals_big_batch(policy: str, rtol: float) -> None:
    # Not bit-exact: the big batch sums all rows in one accumulation, the micro-batches sum two
    # halves and then add them (another order); the tolerance is a few ulps of the format.
    d = moons(n=200, seed=4)
    x, y = d.x_train[:64], d.y_train[:64]
    model = MLP([2, 32, 2], policy=policy, seed=2)
    big = _grads(model, [x], [y])
    small = _grads(model, [x[:32], x[32:]], [y[:32], y[32:]])
    for a, b in zip(big, small, strict=True):
        scale = float(np.max(np.abs(a)))
        np.testing.assert_allclose(a, b, rtol=0, atol=rtol * scale * 8)


def test_gradient_accumulation_in_train_matches_big_batch_run() -> None:
    a = train("moons", hidden=(16,), steps=20, batch_size=32, progress=False, seed=5)
    b = train("moons", hidden=(16,), steps=20, batch_size=32, micro_batches=4, progress=False,
              seed=5)  # fmt: skip
    la, lb = [s.loss for s in a.steps], [s.loss for s in b.steps]
    np.testing.assert_allclose(la, lb, rtol=1e-5)


# -- the loop under dynamic scaling -----------------------------------------------------------
def test_dynamic_scaling_skips_overflow_steps_and_loss_decreases() -> None:
    # init scale 2**24 makes the fp16 logit gradients overflow (cf. amp.md 1.9-D): the first
    # steps are skipped and the scale halves each time until the gradients fit.
    sc = TorchGradScaler(init_scale=2.0**24, growth_interval=1000)
    r = train("spirals", hidden=(32,), policy="torch_cuda_fp16", scaler=sc, steps=60, lr=0.2,
              batch_size=64, progress=False)  # fmt: skip
    skipped = [s.skipped for s in r.steps]
    first_ok = skipped.index(False)
    assert first_ok >= 1 and all(skipped[:first_ok]) and sum(skipped[first_ok:]) <= 3
    scales = [s.scale for s in r.steps]
    assert scales[: first_ok + 1] == [2.0**24 / 2**k for k in range(first_ok + 1)]
    for a, b in itertools.pairwise(r.steps):  # skipped exactly when non-finite; then halve
        assert a.skipped == a.nonfinite_grads
        assert b.scale == (a.scale / 2 if a.skipped else a.scale)
    assert np.mean([s.loss for s in r.steps[-10:]]) < 0.8 * r.steps[0].loss


def test_forced_overflow_midway_is_skipped() -> None:
    d = spirals(n=200, seed=0)
    model, opt, sc = _setup("torch_cuda_fp16", "sgd", "torch")
    x, y = d.x_train[:32], d.y_train[:32]
    rec, _ = train_step(model, opt, sc, x, y)
    before = model.state_dict()
    rec, _ = train_step(model, opt, sc, x * 1e30, y)  # inputs overflow fp16: inf/NaN grads
    assert rec.skipped and rec.nonfinite_grads
    assert all(before[k].tobytes() == v.tobytes() for k, v in model.state_dict().items())
    assert sc.get_scale() == rec.scale / 2


def test_torch_scaler_refuses_fp16_gradients() -> None:
    # amp.md 1.4 / section 5 #7: GradScaler with fp16 params raises.
    m = MLP([2, 4, 2], policy="naive_fp16")
    opt = make_optimizer("sgd", m, lr=0.1)
    sc = get_scaler("torch")
    sc.scale(fn.sum(m(np.ones((1, 2), np.float32)))).backward()
    with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
        sc.step(GradView(opt))


def test_clip_in_loop_runs_and_records() -> None:
    r = train("moons", hidden=(8,), steps=5, batch_size=16, clip=0.1, policy="torch_cuda_fp16",
              progress=False)  # fmt: skip
    d = r.to_dict()
    assert d["config"]["clip"] == 0.1 and len(d["steps"]) == 5
    assert set(d["grad_stats"]["layers.0"]) == {"after_scaling", "before_scaling"}
    json.loads(r.to_json())


def test_grad_stats_show_underflow_without_scaling() -> None:
    # a tiny loss weight: fp16 gradients flush to zero without scaling, not with it
    common = dict(hidden=(16,), steps=4, batch_size=32, loss_weight=2.0**-20, progress=False,
                  policy="torch_cuda_fp16")  # fmt: skip
    off = train("spirals", scaler=None, **common)  # type: ignore[arg-type]
    on = train("spirals", scaler="torch", **common)  # type: ignore[arg-type]
    w_off = off.grad_stats["layers.0"]["after_scaling"]["zero"]
    w_on = on.grad_stats["layers.0"]["after_scaling"]["zero"]
    assert w_off > 0.5 > w_on
    assert on.grad_stats["layers.0"]["before_scaling"]["zero"] > 0.5


def test_classify() -> None:
    f = get_policy("torch_cuda_fp16").compute
    assert classify(np.array([0.0, -0.0, 1e-7, 1e5, np.nan, 1.0]), f) == {
        "zero": 2 / 6, "subnormal": 1 / 6, "overflow": 2 / 6}  # fmt: skip


def test_train_argument_errors() -> None:
    with pytest.raises(ValueError, match="steps must be a positive int"):
        train("moons", steps=0, progress=False)
    with pytest.raises(ValueError, match="not a multiple"):
        train("moons", batch_size=10, micro_batches=3, progress=False)
    with pytest.raises(ValueError, match="unknown dataset"):
        train("mnist", progress=False)
    with pytest.raises(TypeError, match="scaler must be"):
        train("moons", scaler=3, progress=False)  # type: ignore[arg-type]


# -- the experiment -------------------------------------------------------------------------
def test_underflow_config_short_run_shows_the_failure_and_the_fix() -> None:
    res = run_experiment(configs=("underflow",), steps=60, progress=False,
                         runs=("FP32", "FP16, no scaling", "FP16 + dynamic scaling"))  # fmt: skip
    fp32, off, on = res.rows
    assert abs(on.accuracy - fp32.accuracy) <= 0.02 < fp32.accuracy - off.accuracy
    assert off.zero_pct > fp32.zero_pct + 30 and on.zero_pct < fp32.zero_pct + 5
    assert on.zero_pct_unscaled > fp32.zero_pct + 30  # what the scaler saved


@pytest.mark.slow
def test_full_experiment_claims() -> None:
    res = run_experiment(progress=False)
    for cfg in ("digits", "underflow", "adam"):
        rows = {r.run: r for r in res.rows if r.config == cfg}
        base = rows["FP32"].accuracy
        for run in ("FP16 + dynamic scaling", "BF16, no scaling"):
            assert abs(rows[run].accuracy - base) <= 0.01, (cfg, run)
    under = {r.run: r for r in res.rows if r.config == "underflow"}
    assert under["FP16, no scaling"].accuracy < under["FP32"].accuracy - 0.05
    adam = {r.run: r for r in res.rows if r.config == "adam"}
    assert adam["pure FP16, no master weights"].accuracy < adam["FP32"].accuracy - 0.5


# -- datasets ---------------------------------------------------------------------------------
def test_datasets_are_seeded_and_shaped() -> None:
    a, b = spirals(seed=3), spirals(seed=3)
    assert a.x_train.tobytes() == b.x_train.tobytes()
    assert spirals(seed=4).x_train.tobytes() != a.x_train.tobytes()
    m = moons(n=100)
    assert m.x_train.shape == (80, 2) and set(m.y_train.tolist()) == {0, 1}
    assert get_dataset(m) is m
    with pytest.raises(ValueError, match="classes"):
        spirals(classes=1)


def test_shipped_digits_equal_scikit_learns() -> None:
    sk = pytest.importorskip("sklearn.datasets")  # in the test extra
    ref = sk.load_digits()
    d = digits()
    x = np.concatenate([d.x_train, d.x_test])
    y = np.concatenate([d.y_train, d.y_test])
    got = sorted(zip(map(bytes, (x * 16).astype(np.uint8)), y.tolist(), strict=True))
    want = sorted(zip(map(bytes, np.asarray(ref.data).astype(np.uint8)), ref.target.tolist(),
                      strict=True))  # fmt: skip
    assert got == want  # the same 1797 (image, label) pairs, bit for bit
    assert np.array_equal(ref.data, np.round(ref.data))  # integer pixels: uint8 storage is exact
    assert d.features == 64 and d.classes == 10
    assert len(d.x_train) + len(d.x_test) == 1797
    assert 0.0 <= d.x_train.min() and d.x_train.max() <= 1.0
