"""The fused optimizer kernels (_fused_adam_, _fused_adamw_, _fused_sgd_) against torch's CPU
kernels bit for bit, float32, over the SIMD body and the scalar tail, every option, and along
real fused optimizer steps with a GradScaler (grad_scale/found_inf)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup, names  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.optim_trace_util import trace_judged  # noqa: E402
from tests.watch_ops_util import emulate, one_ulp_off, verdicts  # noqa: E402

aten = torch.ops.aten
SIZES = (1, 7, 16, 23, 1003, 2061)


def state(seed: int) -> tuple[list[torch.Tensor], ...]:
    g = torch.Generator().manual_seed(seed)
    ps = [torch.randn(n, generator=g) for n in SIZES]
    gs = [torch.randn(n, generator=g) * 3 for n in SIZES]
    ms = [torch.randn(n, generator=g) * 0.1 for n in SIZES]
    vs = [torch.rand(n, generator=g) * 0.01 for n in SIZES]
    vmax = [v * 1.5 for v in vs]
    vmax[2][3] = 0.0
    gs[1][2], gs[3][0] = 0.0, -0.0  # zero gradients
    return ps, gs, ms, vs, vmax


ADAM_CASES = [
    (*c, c[1] == 0.0)
    for c in itertools.product(
        (False, True),  # adamw
        (0.0, 0.01),  # weight_decay
        (False, True),  # amsgrad
        (None, 3.0),  # grad_scale
    )
]  # fmt: skip  (maximize where there is no weight decay)


@pytest.mark.parametrize("adamw,wd,amsgrad,scale,maximize", ADAM_CASES)
def test_fused_adam_identical(
    adamw: bool, wd: float, amsgrad: bool, scale: float | None, maximize: bool
) -> None:
    fn = aten._fused_adamw_.default if adamw else aten._fused_adam_.default
    for step, beta1 in ((1.0, 0.9), (7.0, 0.9), (3.0, 0.3)):  # beta1 0.3: lerp's large branch
        ps, gs, ms, vs, vmax = state(int(step + 100 * wd))
        steps = [torch.tensor(step) for _ in ps]
        kw = {} if scale is None else {"grad_scale": torch.tensor(scale),
                                       "found_inf": torch.tensor(0.0)}  # fmt: skip
        v = verdicts(fn, ps, gs, ms, vs, vmax if amsgrad else [], steps, lr=1e-2, beta1=beta1,
                     beta2=0.999, weight_decay=wd, eps=1e-8, amsgrad=amsgrad, maximize=maximize,
                     **kw)  # fmt: skip
        assert v == ["identical"] * len(v), (step, beta1, v)


def test_fused_unaligned_views() -> None:
    """Params that are views at odd offsets of one buffer (not 64-byte aligned)."""
    flat = [torch.randn(3 * 1003 + 3, generator=torch.Generator().manual_seed(k)) for k in range(4)]
    ps, gs, ms, vs = ([f[i * 1004 + 1 : i * 1004 + 1004] for i in range(3)] for f in flat)
    vs = [v.abs() * 0.01 for v in vs]
    steps = [torch.tensor(3.0) for _ in ps]
    hyper = dict(beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False)
    v = verdicts(aten._fused_adam_.default, ps, gs, ms, vs, [], steps, lr=1e-2, beta1=0.9, **hyper)
    assert v == ["identical"] * len(v), v
    v = verdicts(aten._fused_sgd_.default, ps, gs, ms, weight_decay=0.01, momentum=0.9, lr=0.1,
                 dampening=0.1, nesterov=False, maximize=False, is_first_step=False)  # fmt: skip
    assert v == ["identical"] * len(v), v


def test_fused_adam_tensor_lr_and_skip() -> None:
    ps, gs, ms, vs, _ = state(3)
    steps = [torch.tensor(2.0) for _ in ps]
    common = dict(beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-6, amsgrad=False,
                  maximize=False)  # fmt: skip
    v = verdicts(aten._fused_adamw_.tensor_lr, ps, gs, ms, vs, [], steps,
                 lr=torch.tensor(3e-3), **common)  # fmt: skip
    assert v == ["identical"] * len(v)
    before = [p.clone() for p in ps]
    v = verdicts(aten._fused_adam_.default, ps, gs, ms, vs, [], steps, lr=1e-3,
                 grad_scale=torch.tensor(8.0), found_inf=torch.tensor(1.0), **common)  # fmt: skip
    assert v == ["identical"] * len(v)
    assert all(torch.equal(a, b) for a, b in zip(before, ps, strict=True))  # really skipped


SGD_CASES = [
    (*c, c[2] == 0.0, c[3] and c[0] == 0.0)
    for c in itertools.product(
        (0.0, 0.01),  # weight_decay
        (0.0, 0.9),  # momentum
        (0.0, 0.1),  # dampening
        (False, True),  # nesterov
    )
]  # fmt: skip  (maximize without dampening; a first step with nesterov and no decay)


@pytest.mark.parametrize("wd,mom,damp,nesterov,maximize,first", SGD_CASES)
def test_fused_sgd_identical(
    wd: float, mom: float, damp: float, nesterov: bool, maximize: bool, first: bool
) -> None:
    for scale in (None, 3.0) if wd else (None,):
        ps, gs, bufs, _, _ = state(5)
        kw = {} if scale is None else {"grad_scale": torch.tensor(scale)}
        v = verdicts(aten._fused_sgd_.default, ps, gs, bufs if mom else [], weight_decay=wd,
                     momentum=mom, lr=0.1, dampening=damp, nesterov=nesterov, maximize=maximize,
                     is_first_step=first, **kw)  # fmt: skip
        assert v == ["identical"] * len(v), v


def test_fused_sgd_tensor_lr_and_large() -> None:
    g = torch.Generator().manual_seed(1)
    ps = [torch.randn(70_001, generator=g)]  # several threads' chunks
    gs, bufs = [torch.randn(70_001, generator=g)], [torch.randn(70_001, generator=g)]
    v = verdicts(aten._fused_sgd_.tensor_lr, ps, gs, bufs, weight_decay=0.01, momentum=0.9,
                 lr=torch.tensor(0.05), dampening=0.1, nesterov=False, maximize=False,
                 is_first_step=False)  # fmt: skip
    assert v == ["identical"] * 3


def test_planted_one_ulp_fault_differs() -> None:
    ps, gs, ms, vs, _ = state(8)
    steps = [torch.tensor(4.0) for _ in ps]
    outs, em = emulate(aten._fused_adamw_.default, ps, gs, ms, vs, [], steps, lr=1e-2,
                       beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                       maximize=False)  # fmt: skip
    for k in (4, 5, 17, 23):  # a param in the SIMD body and in the tail, an exp_avg, exp_avg_sq
        t = to_numpy(outs[k])
        assert em[k] is not None
        assert judge(t, em[k]).verdict == "identical"
        assert judge(one_ulp_off(t, t.size - 1), em[k]).verdict == "differs"


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.Adam(ps, lr=0.1, weight_decay=0.01, fused=True),
        lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True, amsgrad=True),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, fused=True),
    ],
    ids=["adam", "adamw-amsgrad", "sgd"],
)
def test_fused_steps_with_grad_scaler_traced(make: object) -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(37, 9)
    opt = make(list(lin.parameters()))  # type: ignore[operator]
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    x = torch.randn(12, 37)

    def run() -> None:
        for step in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = lin(x * (1e38 if step == 1 else 1.0)).float().pow(2).mean()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()

    mode = trace_judged(run, lambda n: n.startswith("aten._fused_"))
    assert mode.seen, mode.all
    assert all(v == "identical" for vs in mode.seen.values() for v in vs), mode.seen


def test_bad_input_raises() -> None:
    em = lookup("aten._fused_sgd_.default")
    assert em is not None
    kw = dict(weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0, nesterov=False,
              maximize=False, is_first_step=False)  # fmt: skip
    with pytest.raises(TypeError, match="float32"):
        em(Call("aten._fused_sgd_.default", ([np.float16([1])], [np.float16([1])], []), kw,
                ("float16",) * 2))  # fmt: skip
    with pytest.raises(TypeError, match="grads"):
        em(Call("aten._fused_sgd_.default", ([np.float32([1])], np.float32([1]), []), kw,
                ("float32",) * 2))  # fmt: skip


def test_registered() -> None:
    have = set(names())
    for name in ("_fused_adam_.default", "_fused_adam_.tensor_lr", "_fused_adamw_.default",
                 "_fused_adamw_.tensor_lr", "_fused_sgd_.default",
                 "_fused_sgd_.tensor_lr"):  # fmt: skip
        assert f"aten.{name}" in have, name


@pytest.mark.parametrize("amsgrad", [False, True])
def test_fused_adversarial_values(amsgrad: bool) -> None:
    """inf/NaN/subnormal/huge gradients and states (no scaler to catch them)."""
    ps, gs, ms, vs, vmax = state(21)
    special = torch.tensor([float("inf"), -float("inf"), float("nan"), 1e-40, -1e-45, 3e38, -0.0])
    for lst, scale in ((gs, 1.0), (ms, 1e-3), (ps, 1.0)):
        for t in lst[3:]:
            t[: special.numel()] = special[: t.numel()] * scale
            t[-3:] = special[:3] * scale
    vs = [v.abs() for v in vs]
    steps = [torch.tensor(2.0) for _ in ps]
    for fn in (aten._fused_adam_.default, aten._fused_adamw_.default):
        v = verdicts(fn, [p.clone() for p in ps], [g.clone() for g in gs], [m.clone() for m in ms],
                     [x.clone() for x in vs], [x.clone() for x in vmax] if amsgrad else [], steps,
                     lr=1e-2, beta1=0.9, beta2=0.999, weight_decay=0.01, eps=1e-8,
                     amsgrad=amsgrad, maximize=False)  # fmt: skip
        assert v == ["identical"] * len(v), (fn, v)
    v = verdicts(aten._fused_sgd_.default, ps, gs, ms, weight_decay=0.01, momentum=0.9, lr=0.1,
                 dampening=0.1, nesterov=True, maximize=False, is_first_step=False)  # fmt: skip
    assert v == ["identical"] * len(v), v


_LOW_CASES = [(False, False, None), (True, True, 3.0), (True, False, None), (False, True, 8.0)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("adamw,amsgrad,scale", _LOW_CASES)
def test_fused_adam_low_formats(
    dtype: torch.dtype, adamw: bool, amsgrad: bool, scale: float | None
) -> None:
    """float16/bfloat16 params: identical where every candidate contraction agrees (almost
    everywhere), else within the candidates' span; a planted one-ulp fault is caught."""
    ps, gs, ms, vs, vmax = ([t.to(dtype) for t in lst] for lst in state(31 + amsgrad))
    vs = [v.abs() for v in vs]
    steps = [torch.tensor(5.0) for _ in ps]
    fn = aten._fused_adamw_.default if adamw else aten._fused_adam_.default
    kw = {} if scale is None else {"grad_scale": torch.tensor(scale)}
    outs, em = emulate(fn, ps, gs, ms, vs, vmax if amsgrad else [], steps, lr=1e-2, beta1=0.9,
                       beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=amsgrad,
                       maximize=False, **kw)  # fmt: skip
    verdicts_ = [judge(to_numpy(t), e).verdict for t, e in zip(outs, em, strict=True) if e]
    assert set(verdicts_) <= {"identical", "bounded"}, verdicts_
    assert verdicts_.count("identical") >= len(verdicts_) - 2, verdicts_
    t = to_numpy(outs[4])  # the 1003-element param
    assert em[4] is not None and judge(one_ulp_off(t, 500), em[4]).verdict == "differs"


def test_fused_low_format_traced() -> None:
    """Pure-bfloat16 training with fused AdamW."""
    torch.manual_seed(3)
    lin = torch.nn.Linear(40, 24).to(torch.bfloat16)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-2, fused=True)
    x = torch.randn(8, 40, dtype=torch.bfloat16)

    def run() -> None:
        for _ in range(3):
            lin(x).float().pow(2).mean().backward()
            opt.step()
            opt.zero_grad()

    mode = trace_judged(run, lambda n: n.startswith("aten._fused_"))
    assert mode.seen and all(
        v in ("identical", "bounded") for vs in mode.seen.values() for v in vs
    ), mode.seen


def test_fused_sgd_low_format_torch_bug() -> None:
    """Evidence for the finding in optim_fused's docstring: torch's bf16 fused SGD with momentum
    departs from its own math (momentum buffer read as float32 memory) in the vector loop."""
    g = torch.Generator().manual_seed(0)
    for n, broken in ((64, True), (7, False)):
        p, gr, b = (torch.randn(n, generator=g).bfloat16() for _ in range(3))
        buf = b.clone()
        aten._fused_sgd_([p.clone()], [gr.clone()], [buf], weight_decay=0.0, momentum=0.9,
                         lr=0.1, dampening=0.0, nesterov=False, maximize=False,
                         is_first_step=False)  # fmt: skip
        math = (b.float() * 0.9 + gr.float()).bfloat16()  # one rounding of the float32 value
        err = (buf.float() - math.float()).abs().max().item()
        assert (err > 1.0) == broken, (n, err)
    em = lookup("aten._fused_sgd_.default")
    assert em is not None
    with pytest.raises(TypeError, match="bfloat16"):
        bf = to_numpy(torch.zeros(2, dtype=torch.bfloat16))
        em(Call("aten._fused_sgd_.default", ([bf], [bf], [bf]), {}, ("bfloat16",) * 3))
