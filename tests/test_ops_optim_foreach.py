"""The ``_foreach_*`` emulations against torch's CPU kernels: bit for bit where claimed (random and
adversarial lists, float32/bfloat16/float16), bounded where torch's kernel is (sqrt, norm, a
scalar ``other`` with ``alpha``), and along real multi-tensor optimizer steps and
``clip_grad_norm_``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup, names  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.optim_trace_util import trace_judged  # noqa: E402
from tests.test_ops_optim import adversarial, offset  # noqa: E402
from tests.watch_ops_util import capability, emulate, one_ulp_off, verdicts  # noqa: E402

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SIZES = (1, 7, 33, 1003)
SCALARS = (0.9, 0.04471017781221601, -0.0, 1e-8, 3.0)


def tlist(dtype: torch.dtype, seed: int, positive: bool = False) -> list[torch.Tensor]:
    out = [offset(adversarial(n, dtype, seed + n), (seed + i) % 4) for i, n in enumerate(SIZES)]
    return [t.abs() + 0.5 if positive else t for t in out]


def ident(v: list[str]) -> bool:
    return v == ["identical"] * len(v)


def op(name: str) -> object:
    base, overload = name.split(".")
    return getattr(getattr(aten, base), overload)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_identical(dtype: torch.dtype, kind: str) -> None:
    """Identical, except alpha != 1 with a 0-d other (float32) or in a low format on the SIMD
    builds, where which loop computes an element is not known: bounded."""
    low_simd = dtype != torch.float32 and capability() != "default"
    a, b = tlist(dtype, 1), tlist(dtype, 2)
    for inplace in ("", "_"):
        name = f"_foreach_{kind}{inplace}"
        for s in SCALARS:
            v = verdicts(op(f"{name}.Scalar"), [t.clone() for t in a], s)
            assert ident(v), (name, s, v)
        v = verdicts(op(f"{name}.ScalarList"), [t.clone() for t in a], list(SCALARS[:4]))
        assert ident(v), (name, v)
        alphas = (1, 0.01, -0.1) if kind in ("add", "sub") else (None,)
        for alpha in alphas:
            kw = {} if alpha is None else {"alpha": alpha}
            v = verdicts(op(f"{name}.List"), [t.clone() for t in a], b, **kw)
            if (low_simd and alpha not in (None, 1)) or kind in ("maximum", "minimum"):
                # (maximum/minimum: a +0/-0 tie in the lists, its zero's sign is not judged)
                assert set(v) <= {"identical", "bounded"}, (name, alpha, v)
            else:
                assert ident(v), (name, alpha, v)
        if kind in ("add", "mul", "div"):
            for alpha in (1, 0.3) if kind == "add" else (None,):
                kw = {} if alpha is None else {"alpha": alpha}
                other = torch.tensor(0.7, dtype=dtype if alpha == 1 else torch.float32)
                v = verdicts(op(f"{name}.Tensor"), [t.clone() for t in a], other, **kw)
                # alpha*other rounded first in the remainder loop: bounded (see the module doc)
                allowed = {"identical"} if alpha in (None, 1) else {"identical", "bounded"}
                assert set(v) <= allowed, (name, alpha, v)


def test_div_low_formats_identical() -> None:
    for dtype in (torch.bfloat16, torch.float16):
        a, b = tlist(dtype, 1), tlist(dtype, 2)
        for s in SCALARS:
            assert ident(verdicts(aten._foreach_div.Scalar, a, s)), (dtype, s)
        assert ident(verdicts(aten._foreach_div.List, a, b))
        assert ident(verdicts(aten._foreach_div.Tensor, a, torch.tensor(0.7, dtype=dtype)))


@pytest.mark.parametrize(
    "name,rounds",
    [("_foreach_add.Scalar", True), ("_foreach_sub_.Scalar", True),
     ("_foreach_mul.Scalar", False), ("_foreach_mul_.Scalar", True),
     ("_foreach_div_.Scalar", False)],
)  # fmt: skip
def test_low_format_scalar_rounding(name: str, rounds: bool) -> None:
    """Measured: add/sub and in-place mul_ round a Python scalar to bfloat16 first, mul and
    div keep it in float32; the emulation is identical and the other model would differ."""
    a = tlist(torch.bfloat16, 4)
    outs, em = emulate(op(name), [t.clone() for t in a], 0.9)
    t = to_numpy(outs[3])
    assert em[3] is not None and judge(t, em[3]).verdict == "identical"
    x = to_numpy(a[3]).astype(np.float32)
    s = np.float32(0.9) if rounds else to_numpy(torch.tensor(0.9, dtype=torch.bfloat16))
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide}
    kind = name.split(".", maxsplit=1)[0].removeprefix("_foreach_").removesuffix("_")
    with np.errstate(all="ignore"):
        other = to_numpy(torch.from_numpy(f[kind](x, np.float32(s))).to(torch.bfloat16))
    assert judge(other, em[3]).verdict == "differs", name


def test_maximum_ties_and_nan() -> None:
    """NaN propagates; +0/-0 ties: the scalar loop keeps self, the vector loop the other (the
    zero's sign is left unjudged: bounded with a zero-width bound); -0/-0 and +0/+0 exact."""
    z = torch.tensor([0.0, -0.0, 0.0, -0.0, float("nan"), 1.0, float("nan")] * 40)
    y = torch.tensor([-0.0, 0.0, 0.0, -0.0, 1.0, float("nan"), float("nan")] * 40)
    for kind in ("maximum", "minimum"):
        for n in (7, 280):
            v = verdicts(op(f"_foreach_{kind}.List"), [z[:n]], [y[:n]])
            assert set(v) <= {"identical", "bounded"}, v
        assert ident(verdicts(op(f"_foreach_{kind}.List"), [z[2:5]], [y[2:5]]))
        for s in (0.0, -0.0, float("nan"), 0.5):
            v = verdicts(op(f"_foreach_{kind}.Scalar"), [z], s)
            assert set(v) <= {"identical", "bounded"}, v
        outs, em = emulate(op(f"_foreach_{kind}.List"), [z], [y])
        t = to_numpy(outs[0])
        assert em[0] is not None
        assert judge(one_ulp_off(t, 2), em[0]).verdict == "differs"  # +0 -> 1e-45: caught


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("kind", ["lerp", "addcmul", "addcdiv"])
def test_ternary_identical(dtype: torch.dtype, kind: str) -> None:
    a, b = tlist(dtype, 3), tlist(dtype, 4)
    b = [t.masked_fill(t == 0, 0.0) for t in b]  # -0 ends: lerp's zero sign is not judged
    c = tlist(dtype, 5, positive=kind == "addcdiv")
    vals = [0.0999999999999998, 0.7, -0.5263157894736844, 1e-3]
    for inplace in ("", "_"):
        name = f"_foreach_{kind}{inplace}"
        if kind == "lerp":
            for w in vals[:2]:
                assert ident(verdicts(op(f"{name}.Scalar"), [t.clone() for t in a], b, w))
            assert ident(verdicts(op(f"{name}.ScalarList"), [t.clone() for t in a], b, vals))
            ws = [(t.float().abs() % 1.5).to(dtype) for t in c]
            assert ident(verdicts(op(f"{name}.List"), [t.clone() for t in a], b, ws))
            continue
        for v in vals:
            assert ident(verdicts(op(f"{name}.Scalar"), [t.clone() for t in a], b, c, v))
        assert ident(verdicts(op(f"{name}.ScalarList"), [t.clone() for t in a], b, c, vals))
        scal = torch.tensor(vals, dtype=torch.float32)
        assert ident(verdicts(op(f"{name}.Tensor"), [t.clone() for t in a], b, c, scal))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unary(dtype: torch.dtype) -> None:
    a = tlist(dtype, 6)
    for kind in ("neg", "abs", "reciprocal", "sign"):
        assert ident(verdicts(op(f"_foreach_{kind}.default"), a))
        assert ident(verdicts(op(f"_foreach_{kind}_.default"), [t.clone() for t in a]))
    assert ident(verdicts(aten._foreach_zero_.default, [t.clone() for t in a]))
    for sq in (aten._foreach_sqrt.default, aten._foreach_sqrt_.default):
        v = verdicts(sq, [t.clone().abs() for t in a])
        assert set(v) <= {"identical", "bounded"}, v
        v = verdicts(sq, a)  # negative inputs: NaN in both
        assert set(v) <= {"identical", "bounded"}, v


def test_copy_identical() -> None:
    for dst_dt, src_dt in ((torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                           (torch.float32, torch.float16),
                           (torch.float16, torch.float32)):  # fmt: skip
        dst, src = tlist(dst_dt, 1), tlist(src_dt, 2)
        assert ident(verdicts(aten._foreach_copy_.default, dst, src)), (dst_dt, src_dt)
    zero_d = [torch.tensor(0.01), torch.tensor(1.0)]  # ASGD's step sizes: 0-d tensors
    assert ident(verdicts(aten._foreach_copy_.default, zero_d, [torch.tensor(0.5)] * 2))


def test_sqrt_bound_holds_and_catches() -> None:
    """The 1-ulp bound holds on 10^5 random float32 bit patterns (torch's MKL sqrt is not
    correctly rounded on some of them), and a fault of 3 ulps is caught."""
    g = np.random.default_rng(8)
    x = g.integers(0, 0x7F800000, 100_000, dtype=np.uint32).view(np.float32)
    outs, em = emulate(aten._foreach_sqrt.default, [torch.from_numpy(x)])
    t = to_numpy(outs[0])
    assert em[0] is not None
    assert np.count_nonzero(t.view(np.uint32) != em[0].value.view(np.uint32)) > 0
    assert judge(t, em[0]).verdict == "bounded"
    bad = t.copy()
    bad.view(np.uint32)[77] += 3
    assert judge(bad, em[0]).verdict == "differs"
    # float64: torch's MKL sqrt is within 1 ulp of the correctly rounded root (measured)
    x64 = g.integers(0, 0x7FF0000000000000, 100_000, dtype=np.uint64).view(np.float64)
    assert set(verdicts(aten._foreach_sqrt.default, [torch.from_numpy(x64)])) <= {
        "identical", "bounded"}  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_norm_bounded(dtype: torch.dtype) -> None:
    a = [torch.randn(n, generator=torch.Generator().manual_seed(n)).to(dtype) for n in SIZES]
    a.append(torch.randn(70_001).to(dtype))
    for ord_ in (2, 1, float("inf")):
        v = verdicts(aten._foreach_norm.Scalar, a, ord_)
        assert set(v) <= {"identical", "bounded"}, (ord_, v)
    assert ident(verdicts(aten._foreach_norm.Scalar, a, float("inf")))
    outs, em = emulate(aten._foreach_norm.Scalar, a, 2)
    t = to_numpy(outs[3])
    assert em[3] is not None
    wrong = (t.astype(np.float64) * (1 + 2e-2)).astype(t.dtype).reshape(())
    assert judge(wrong, em[3]).verdict == "differs"


@pytest.mark.parametrize(
    "name,args",
    [
        ("_foreach_mul_.Scalar", (0.9,)),
        ("_foreach_add_.List", ("B", 0.01)),
        ("_foreach_lerp_.Scalar", ("B", 0.1)),
        ("_foreach_addcmul_.Scalar", ("B", "B", 1e-3)),
        ("_foreach_addcdiv_.ScalarList", ("B", "P", [-0.5] * 4)),
        ("_foreach_div_.ScalarList", ([0.3] * 4,)),
    ],
)
def test_planted_one_ulp_fault_differs(name: str, args: tuple[object, ...]) -> None:
    a, b, p = tlist(torch.float32, 7), tlist(torch.float32, 8), tlist(torch.float32, 9, True)
    a = [t.nan_to_num(0.5, 0.5, 0.5) for t in a]
    real = [b if x == "B" else p if x == "P" else x for x in args]
    if name == "_foreach_add_.List":
        real, kw = [b], {"alpha": 0.01}
    else:
        kw = {}
    outs, em = emulate(op(name), a, *real, **kw)
    t = to_numpy(outs[3])
    assert em[3] is not None
    assert judge(t, em[3]).verdict == "identical"
    assert judge(one_ulp_off(t, 500), em[3]).verdict == "differs"


def _step(make: object, steps: int = 3) -> None:
    torch.manual_seed(0)
    ps = [torch.nn.Parameter(torch.randn(33, 7)), torch.nn.Parameter(torch.randn(5))]
    opt = make(ps)  # type: ignore[operator]
    for _ in range(steps):
        for q in ps:
            q.grad = torch.randn_like(q)
        opt.step()


_BOUNDED_OK = {"aten._foreach_sqrt.default", "aten._foreach_sqrt_.default",
               "aten._foreach_norm.Scalar"}  # fmt: skip


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True,
                                   foreach=True),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, foreach=True),
        lambda ps: torch.optim.Adam(ps, lr=0.1, weight_decay=0.01, foreach=True),
        lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=True),
        lambda ps: torch.optim.AdamW(ps, lr=0.1, foreach=True, amsgrad=True, maximize=True),
        lambda ps: torch.optim.Adam(ps, lr=0.1, foreach=False),
    ],
    ids=["sgd-nesterov", "sgd-dampening", "adam-wd", "adamw", "adamw-amsgrad", "adam-single"],
)  # fmt: skip
def test_optimizer_steps_traced(make: object) -> None:
    mine = set(names())
    mode = trace_judged(lambda: _step(make), lambda n: n in mine and ("_foreach_" in n or any(
        k in n for k in ("lerp", "addcmul", "addcdiv"))))  # fmt: skip
    assert mode.seen, mode.all
    for name, vs in mode.seen.items():
        allowed = {"identical", "bounded"} if name in _BOUNDED_OK else {"identical"}
        assert set(vs) <= allowed, (name, vs)


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm_traced(foreach: bool) -> None:
    torch.manual_seed(1)
    ps = [torch.nn.Parameter(torch.randn(300, 7)), torch.nn.Parameter(torch.randn(5))]
    for q in ps:
        q.grad = torch.randn_like(q) * 10
    mode = trace_judged(lambda: torch.nn.utils.clip_grad_norm_(ps, 0.5, foreach=foreach),
                        lambda n: n.startswith("aten._foreach_"))  # fmt: skip
    if foreach:
        assert set(mode.seen) == {"aten._foreach_norm.Scalar", "aten._foreach_mul_.Tensor"}
    for name, vs in mode.seen.items():
        allowed = {"identical", "bounded"} if name in _BOUNDED_OK else {"identical"}
        assert set(vs) <= allowed, (name, vs)


def test_bad_input_raises() -> None:
    em = lookup("aten._foreach_add.List")
    assert em is not None
    with pytest.raises(ValueError, match="other"):
        em(Call("aten._foreach_add.List", ([np.float32([1])], [np.float32([1])] * 2), {},
                ("float32",)))  # fmt: skip
    with pytest.raises(TypeError, match="self"):
        em(Call("aten._foreach_add.List", (np.float32([1]), [np.float32([1])]), {}, ("float32",)))
    em = lookup("aten._foreach_norm.Scalar")
    assert em is not None
    with pytest.raises(ValueError, match="ord"):
        em(Call("aten._foreach_norm.Scalar", ([np.float32([1])], 3), {}, ("float32",)))


def test_registered() -> None:
    have = set(names())
    for name in ("_foreach_add_.Scalar", "_foreach_add_.List", "_foreach_add_.ScalarList",
                 "_foreach_add_.Tensor", "_foreach_add.List", "_foreach_mul_.Scalar",
                 "_foreach_mul_.Tensor", "_foreach_div_.ScalarList", "_foreach_lerp_.Scalar",
                 "_foreach_addcmul_.Scalar", "_foreach_addcdiv_.ScalarList",
                 "_foreach_addcdiv_.Tensor", "_foreach_sqrt.default", "_foreach_maximum_.List",
                 "_foreach_neg.default", "_foreach_reciprocal_.default", "_foreach_norm.Scalar",
                 "_foreach_sub.List", "_foreach_zero_.default", "_foreach_copy_.default",
                 "_foreach_sign_.default"):  # fmt: skip
        assert f"aten.{name}" in have, name


_OPTIMIZERS = ["SGD", "Adam", "AdamW", "Adagrad", "RMSprop", "Adamax", "NAdam", "RAdam", "ASGD",
               "Adadelta", "Rprop"]  # fmt: skip


@pytest.mark.parametrize("cls", _OPTIMIZERS)
def test_every_optimizer_foreach_traced(cls: str) -> None:
    """Every torch.optim optimizer's multi-tensor step: each _foreach_/lerp/addcmul/addcdiv op
    it dispatches is emulated, and identical (sqrt: within its bound)."""
    mine = set(names())
    kw: dict[str, object] = {"foreach": True}
    kw.update({"SGD": {"lr": 0.1, "momentum": 0.9}, "Adam": {"maximize": True, "amsgrad": True},
               "RMSprop": {"momentum": 0.9, "centered": True}}.get(cls, {}))  # fmt: skip
    ours = ("_foreach_", "lerp", "addcmul", "addcdiv")
    mode = trace_judged(lambda: _step(lambda ps: getattr(torch.optim, cls)(ps, **kw), 2),
                        lambda n: n in mine and any(k in n for k in ours))  # fmt: skip
    dispatched = {n for n in mode.all if n.startswith("aten._foreach_")}
    assert dispatched and dispatched <= mine, dispatched - mine
    for name, vs in mode.seen.items():
        allowed = {"identical", "bounded"} if name in _BOUNDED_OK else {"identical"}
        assert set(vs) <= allowed, (name, vs)
