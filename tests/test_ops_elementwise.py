"""fpemu.validate.ops.elementwise against torch 2.13's CPU kernels, bit for bit where exact."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import (  # noqa: E402
    Call,
    names,
)
from fpemu.validate.ops.elementwise import div  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.ops_nn_util import DTYPES, check, inputs, rerun  # noqa: E402
from tests.watch_ops_util import (  # noqa: E402
    capability,
    emulate,
    one_ulp_off,
)

aten = torch.ops.aten
N = 300


def pair(name: str, seed: int) -> tuple[object, object]:
    a = inputs(name, N, seed=seed)
    b = inputs(name, N, seed=seed + 1)
    return a, b[torch.randperm(b.numel(), generator=torch.Generator().manual_seed(seed))]


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_binary_tensor(name: str, op: str) -> None:
    a, b = pair(name, 1)
    check(getattr(aten, op).Tensor, a, b)
    check(getattr(aten, op).Tensor, a.reshape(-1, 1)[:20], b[:7])  # broadcast
    if op in ("add", "sub"):
        # the SIMD builds fuse a + alpha*b except on a loop's tail: 16-bit and float64 bounded
        claim = "exact" if name == "float32" or capability() == "default" else "bounded"
        for alpha in (2, 0.1, -3.5):
            check(getattr(aten, op).Tensor, a, b, alpha=alpha, claim=claim)
        check(getattr(aten, op + "_").Tensor, a.clone(), b, alpha=0.3, claim=claim)
        check(getattr(aten, op).Tensor, a, b, alpha=1)
    else:
        check(getattr(aten, op + "_").Tensor, a.clone(), b)


@pytest.mark.parametrize("name", DTYPES)
def test_binary_python_scalars(name: str) -> None:
    a, _ = pair(name, 2)
    # scalars that round differently via float32 and directly: the kernel's conversion shows
    for s in (2, 0.1, 1 / 3, 1 + 2**-8 + 2**-30, -1e-3, 7.0, 1e10):
        check(aten.mul.Tensor, a, s)
        check(aten.mul.Scalar, a, s)
        check(aten.div.Tensor, a, s)
        check(aten.div.Scalar, a, s)
        check(aten.div_.Scalar, a.clone(), s)
        check(aten.add.Tensor, a, s)
        claim = "exact" if name == "float32" or capability() == "default" else "bounded"
        check(aten.sub.Tensor, a, s, alpha=3, claim=claim)
        check(aten.rsub.Scalar, a, s)
        check(aten.add.Tensor, a, torch.tensor(s, dtype=torch.float32))  # 0-d float32 tensor


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_mixed_dtypes_promote(name: str) -> None:
    a, b = pair(name, 3)
    b32 = b.float()
    for op in (aten.add.Tensor, aten.mul.Tensor, aten.div.Tensor):
        check(op, b32, a)
        check(op, a, b32)
    check(aten.div.Tensor, a, torch.tensor(7, dtype=torch.int64))  # mean over a count
    for s in (0.1, 1 + 2**-8 + 2**-30, 1 / 3):  # 0-d tensors of other dtypes, either side
        for sdt in (torch.float32, torch.float64):
            t = torch.tensor(s, dtype=sdt)
            for op in (aten.mul.Tensor, aten.div.Tensor, aten.add.Tensor, aten.gt.Tensor):
                check(op, a, t)
                check(op, t, a)
            check(aten.maximum.default, a, t, claim="bounded")
            check(aten.where.self, a > 0, a, t)
    check(aten.div.Tensor, torch.arange(10), torch.tensor(3))  # integers: true division


@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_div_rounding_modes(name: str) -> None:
    a, b = pair(name, 4)
    for mode in ("trunc", "floor"):
        check(aten.div.Tensor_mode, a, b, rounding_mode=mode)
        check(aten.div.Tensor_mode, torch.arange(-9, 9), torch.tensor(4), rounding_mode=mode)


@pytest.mark.parametrize("name", DTYPES)
def test_unary_exact(name: str) -> None:
    a = inputs(name, N, seed=5)
    for op in (aten.neg.default, aten.abs.default, aten.reciprocal.default):
        check(op, a)
    if name in ("bfloat16", "float16"):  # float32 sqrt runs MKL VML on large tensors: bounded
        check(aten.sqrt.default, a)
        every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
        check(aten.sqrt.default, every.view(getattr(torch, name)))  # every code
        for n in (8, 15, 16, 17, 33, 1000):  # all-tail and vector+tail lengths
            check(aten.sqrt.default, inputs(name, n, seed=n, special=False).abs())
            check(aten.sqrt.default, inputs(name, n, seed=n + 1))
    # 16-bit rsqrt: vector path rounds once, the scalar tail twice (exact on default)
    tail = name in ("bfloat16", "float16") and capability() != "default"
    check(aten.rsqrt.default, a, claim="bounded" if tail else "exact")
    for n in (8, 15, 16, 17, 33):  # all-tail and vector+tail lengths (an fp16 tail rounds twice)
        check(aten.rsqrt.default, a[:n].contiguous(), claim="bounded" if tail else "exact")
    for n in (33, 1000):  # sizes whose last elements take the scalar tail
        big = inputs(name, n, seed=n, special=False).abs()
        check(aten.rsqrt.default, big, claim="bounded" if tail else "exact")
    for e in (2, 2.0, 3, -1, -2, 1, -0.5):
        # float16 pow is std::pow(Half, Half) for every exponent: a libm value
        claim = "bounded" if name == "float16" or (tail and e == -0.5) else "exact"
        check(aten.pow.Tensor_Scalar, a, e, claim=claim)


@pytest.mark.parametrize("name", DTYPES)
def test_unary_libm_bounded(name: str) -> None:
    a = inputs(name, 4000, seed=6)
    libm = (aten.exp.default, aten.log.default)
    for op in libm + ((aten.sqrt.default,) if name not in ("bfloat16", "float16") else ()):
        check(op, a, claim="bounded")
        check(op, a.abs() * 30, claim="bounded")
    for e in (0.5, 1.5, -1.7, 4):
        check(aten.pow.Tensor_Scalar, a.abs(), e, claim="bounded")
        check(aten.pow.Tensor_Scalar, a, e, claim="bounded")


@pytest.mark.parametrize("name", DTYPES)
def test_clamp_maxmin_where(name: str) -> None:
    a, b = pair(name, 7)
    check(aten.clamp.default, a, -0.1, 1 + 2**-8 + 2**-30)
    check(aten.clamp.default, a, None, 0.3)
    check(aten.clamp_min.default, a, 0.1)
    check(aten.clamp_max.default, a, -1 / 3)
    check(aten.clamp_.default, a.clone(), 0.0, 6.0)
    v = check(aten.maximum.default, a, b, claim="bounded")
    check(aten.minimum.default, a, b, claim="bounded")
    assert v == ["identical"]
    c = a > b
    check(aten.where.self, c, a, b)
    check(aten.where.self, c, a, torch.tensor(0.1, dtype=torch.float64))
    check(aten.where.self, c, a, torch.tensor(1 + 2**-8 + 2**-30, dtype=torch.float64))


@pytest.mark.parametrize("name", DTYPES)
def test_masked_fill_and_fill(name: str) -> None:
    a, b = pair(name, 8)
    m = a > b
    for v in (-1e4, float("-inf"), 1 + 2**-8 + 2**-30, 0.1, 3, 1e-40):
        check(aten.masked_fill.Scalar, a, m, v)
        check(aten.masked_fill_.Scalar, a.clone(), m, v)
        check(aten.masked_fill.Tensor, a, m, torch.tensor(v, dtype=a.dtype))
        check(aten.fill_.Tensor, a.clone(), torch.tensor(v, dtype=a.dtype))


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("op", ["eq", "ne", "lt", "le", "gt", "ge"])
def test_compare(name: str, op: str) -> None:
    a, b = pair(name, 9)
    check(getattr(aten, op).Tensor, a, b)
    check(getattr(aten, op).Tensor, a, a)
    for s in (0.1, 1 + 2**-8 + 2**-30, 0, 1e-40, 3):
        check(getattr(aten, op).Scalar, a, s)
        check(getattr(aten, op).Scalar, torch.full((3,), s, dtype=torch.float64).to(a.dtype), s)
    check(getattr(aten, op).Scalar, torch.tensor([1, -100, 5]), -100)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_libm_16_bit_mostly_single_valued(name: str) -> None:
    """K_LIBM float32 ulps are far below a 16-bit ulp: most outputs admit one value, and a
    result one ulp off there is 'differs'."""
    x = torch.linspace(-4, 4, 999, dtype=torch.float64).to(getattr(torch, name))
    for op, arg in ((aten.exp.default, x), (aten.log.default, x.abs() + 0.01)):
        outs, em = emulate(op, arg)
        t, e = to_numpy(outs[0]), em[0]
        assert e is not None
        bounds = e.bounds_at(np.arange(t.size))  # eager or lazy: the bound at every element
        assert bounds is not None
        single = np.flatnonzero(bounds[1] == 0)
        assert single.size > 0.95 * t.size, (str(op), single.size)
        assert judge(one_ulp_off(t, int(single[len(single) // 2])), e).verdict == "differs"


def test_bitwise_logical_not() -> None:
    m = torch.rand(50) > 0.5
    check(aten.bitwise_not.default, m)
    check(aten.bitwise_not.default, torch.arange(-5, 5))
    check(aten.logical_not.default, torch.tensor([0.0, -0.0, 1.0, float("nan")]))


def test_planted_fault_in_bounded_libm_is_caught() -> None:
    """A result several ulps from every admissible value is 'differs' for a bounded op."""

    a = torch.linspace(-3, 3, 64)
    outs, emulated = emulate(aten.exp.default, a)
    bad = to_numpy(outs[0]).copy()
    bad[5] = np.nextafter(np.nextafter(np.nextafter(bad[5], np.inf), np.inf), np.inf)
    bad[5] = np.float32(bad[5] * (1 + 2**-20))
    assert judge(bad, emulated[0]).verdict == "differs"


def test_registered() -> None:
    have = set(names())
    for op in ("aten.add.Tensor", "aten.add_.Tensor", "aten.sub.Tensor", "aten.rsub.Scalar",
               "aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor", "aten.div.Scalar",
               "aten.div_.Scalar", "aten.div.Tensor_mode", "aten.neg.default",
               "aten.reciprocal.default", "aten.pow.Tensor_Scalar", "aten.sqrt.default",
               "aten.rsqrt.default", "aten.exp.default", "aten.log.default", "aten.abs.default",
               "aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default",
               "aten.maximum.default", "aten.minimum.default", "aten.where.self",
               "aten.masked_fill.Scalar", "aten.masked_fill_.Scalar", "aten.masked_fill.Tensor",
               "aten.eq.Scalar", "aten.ne.Tensor", "aten.lt.Scalar", "aten.le.Tensor",
               "aten.gt.Scalar", "aten.ge.Tensor", "aten.fill_.Tensor",
               "aten.bitwise_not.default"):  # fmt: skip
        assert op in have, op


def test_bad_rounding_mode() -> None:

    with pytest.raises(ValueError, match="rounding_mode 'round'"):
        div(Call("aten.div.Tensor_mode", (np.float32([1]), np.float32([2])),
                 {"rounding_mode": "round"}, ("float32",)))  # fmt: skip


def test_capabilities() -> None:
    """The same claims hold under ATEN_CPU_CAPABILITY=default and avx2 (subprocesses)."""
    rerun(__file__)
