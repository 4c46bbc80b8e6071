"""The optimizer pointwise emulations (lerp, addcmul, addcdiv) against torch's CPU kernels, bit for
bit, on random and adversarial float32/bfloat16/float16 inputs, under this machine's capability
(tests/test_ops_optim_caps.py replays them under ATEN_CPU_CAPABILITY=default and avx2)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import Call, lookup, names  # noqa: E402
from fpemu.validate.ops.optim import fma32, lerp32  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.watch_ops_util import capability, emulate, one_ulp_off, verdicts  # noqa: E402

aten = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16, torch.float16]
#: sizes across the SIMD body and tails (16/32 floats per avx512 step), storage offsets 0..3
#: move the data's alignment (GCC peels unaligned heads of auto-vectorised tail loops)
SIZES = [1, 7, 33, 67, 1003]


def adversarial(n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random normals mixed with +-0, +-inf, NaN, subnormals, huge and tiny magnitudes."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64)
    tiny = float(torch.finfo(dtype).smallest_normal)
    special = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), tiny / 4,
                            -tiny * 3, float(torch.finfo(dtype).max) / 2, 1e-30, 1.0, -1.0],
                           dtype=torch.float64)  # fmt: skip
    pick = torch.rand(n, generator=g) < 0.15
    idx = torch.randint(0, len(special), (n,), generator=g)
    x = torch.where(pick, special[idx], x)
    return x.to(dtype)


def offset(t: torch.Tensor, k: int) -> torch.Tensor:
    """``t``'s values in a view starting ``k`` elements into a larger buffer."""
    base = torch.zeros(t.numel() + k, dtype=t.dtype)
    base[k:] = t
    return base[k:]


def near(t: torch.Tensor, seed: int) -> torch.Tensor:
    """Values close to ``t`` (cancellation in ``end - self``, ``self + product``)."""
    g = torch.Generator().manual_seed(seed)
    return (t.double() * (1 + 1e-3 * torch.randn(t.shape, generator=g, dtype=torch.float64))).to(
        t.dtype
    )


def _cases(dtype: torch.dtype) -> list[tuple[int, int, int]]:
    return [(n, k, 7 * n + k) for n in SIZES for k in ((0, 1, 3) if n > 1 else (0,))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("weight", [0.0999999999999998, 0.7, 0.5, 0.0, 1.0, -0.3, 1.7])
def test_lerp_scalar_identical(dtype: torch.dtype, weight: float) -> None:
    """Identical; where the end is -0 and w = 1 only the sign of a zero may differ (bounded)."""
    for n, k, seed in _cases(dtype):
        s = offset(adversarial(n, dtype, seed), k)
        e = near(s, seed + 1) if seed % 2 else adversarial(n, dtype, seed + 1)
        want = {"identical", "bounded"} if weight >= 0.5 else {"identical"}
        assert set(verdicts(aten.lerp_.Scalar, s.clone(), e, weight)) <= want, (n, k)
        assert set(verdicts(aten.lerp.Scalar, s, e, weight)) <= want, (n, k)
        e = e.masked_fill(e == 0, 0.0)  # no -0 ends: exact
        assert verdicts(aten.lerp.Scalar, s, e, weight) == ["identical"], (n, k)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_lerp_tensor_identical(dtype: torch.dtype) -> None:
    for n, k, seed in _cases(dtype):
        s = offset(adversarial(n, dtype, seed), k)
        e = adversarial(n, dtype, seed + 1)
        g = torch.Generator().manual_seed(seed)
        w = (torch.rand(n, generator=g) * 3 - 1).to(dtype)
        w[::5] = 0.5
        if n > 3:
            w[1], w[2] = float("nan"), 1.0
        want = {"identical", "bounded"}  # w = 1 with end = -0: the sign of zero is not judged
        assert set(verdicts(aten.lerp_.Tensor, s.clone(), e, w)) <= want, (n, k)
        assert set(verdicts(aten.lerp.Tensor, s, e, w)) <= want, (n, k)
        e = e.masked_fill(e == 0, 0.0)
        assert verdicts(aten.lerp_.Tensor, s.clone(), e, w) == ["identical"], (n, k)
        assert verdicts(aten.lerp.Tensor, s, e, w) == ["identical"], (n, k)
        # a 0-d weight broadcast over the tensors
        assert verdicts(aten.lerp.Tensor, s, e, torch.tensor(0.3, dtype=dtype)) == ["identical"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("value", [0.0010000000000000009, -1.0, 1.0, 3e-39, -0.5263157894736844])
def test_addcmul_addcdiv_identical(dtype: torch.dtype, value: float) -> None:
    for n, k, seed in _cases(dtype):
        s = offset(adversarial(n, dtype, seed), k)
        t1, t2 = adversarial(n, dtype, seed + 1), adversarial(n, dtype, seed + 2)
        for op in (aten.addcmul_.default, aten.addcdiv_.default):
            assert verdicts(op, s.clone(), t1, t2, value=value) == ["identical"], (op, n, k)
        assert verdicts(aten.addcmul.default, s, t1, t2, value=value) == ["identical"]
        assert verdicts(aten.addcdiv.default, s, t1, t2, value=value) == ["identical"]
        # Adam's operands: self ~ -value * t1 * t2 (cancellation), a positive denominator
        t2p = t2.abs() + 1e-3
        assert verdicts(aten.addcmul_.default, near(-value * t1 * t2, seed).to(dtype), t1, t2,
                        value=value) == ["identical"]  # fmt: skip
        assert verdicts(aten.addcdiv_.default, s.clone(), t1, t2p, value=value) == ["identical"]


def test_broadcast_and_large() -> None:
    """Broadcast operands (in-place and not) and a tensor above torch's 32768-element grain
    (split across threads: every chunk's tail is computed like its body)."""
    g = torch.Generator().manual_seed(5)
    s, t1 = torch.randn(4, 5, generator=g), torch.randn(5, generator=g)
    t2 = torch.randn(4, 1, generator=g)
    assert verdicts(aten.addcmul_.default, s.clone(), t1, t2, value=0.3) == ["identical"]
    assert verdicts(aten.addcmul.default, t1, s, t2, value=0.3) == ["identical"]
    assert verdicts(aten.lerp_.Scalar, s.clone(), t1, 0.1) == ["identical"]
    z = torch.tensor(0.25)  # 0-d tensors keep their shape
    assert verdicts(aten.lerp_.Scalar, z.clone(), torch.tensor(1.5), 0.1) == ["identical"]
    assert verdicts(aten.addcmul_.default, z.clone(), z, torch.tensor(3.0)) == ["identical"]
    assert verdicts(aten.addcdiv.default, z, z, torch.tensor(3.0)) == ["identical"]
    big = torch.randn(70001, generator=g)
    other = torch.randn(70001, generator=g)
    assert verdicts(aten.lerp_.Scalar, big.clone(), other, 0.1) == ["identical"]
    assert verdicts(aten.addcmul_.default, big.clone(), other, other, value=0.001) == ["identical"]


def test_float64_exact_or_bounded() -> None:
    g = torch.Generator().manual_seed(9)
    s = torch.randn(100, generator=g, dtype=torch.float64)
    e = torch.randn(100, generator=g, dtype=torch.float64)
    want = ["identical"] if capability() == "default" else ["identical", "bounded"]
    for op, args in ((aten.lerp.Scalar, (s, e, 0.1)), (aten.addcmul.default, (s, e, e)),
                     (aten.addcdiv.default, (s, e, e.abs() + 1))):  # fmt: skip
        assert set(verdicts(op, *args)) <= set(want)


@pytest.mark.parametrize("op,extra", [(aten.lerp_.Scalar, (0.1,)),
                                      (aten.addcmul_.default, (None,)),
                                      (aten.addcdiv_.default, (None,))])  # fmt: skip
def test_planted_one_ulp_fault_differs(op: object, extra: tuple[object, ...]) -> None:
    g = torch.Generator().manual_seed(2)
    s, a, b = (torch.randn(40, generator=g) for _ in range(3))
    args = (s, a, 0.1) if extra[0] is not None else (s, a, b.abs() + 1)
    outs, emulated = emulate(op, *args)
    t = to_numpy(outs[0])
    assert emulated[0] is not None
    assert judge(t, emulated[0]).verdict == "identical"
    assert judge(one_ulp_off(t, 17), emulated[0]).verdict == "differs"


def test_fma_models_differ_where_torch_decides() -> None:
    """The one-rounding and two-rounding models really differ on these inputs, so the identical
    verdicts above pin down which one this build uses."""
    g = np.random.default_rng(3)
    s, e = g.standard_normal(1000).astype(np.float32), g.standard_normal(1000).astype(np.float32)
    one = lerp32(s, e, np.float32(0.1), fused=True)[0]
    two = lerp32(s, e, np.float32(0.1), fused=False)[0]
    assert np.count_nonzero(one.view(np.uint32) != two.view(np.uint32)) > 50
    t = torch.lerp(torch.from_numpy(s), torch.from_numpy(e), 0.1).numpy()
    model = two if capability() == "default" else one
    assert np.array_equal(t.view(np.uint32), model.view(np.uint32))


def test_fma32_against_exact_fractions() -> None:
    g = np.random.default_rng(11)
    a, b = g.standard_normal(300).astype(np.float32), g.standard_normal(300).astype(np.float32)
    c = (-(a.astype(np.float64) * b) * (1 + 1e-7 * g.standard_normal(300))).astype(np.float32)
    # the float64 sum lands exactly on a float32 midpoint the exact value is not on (naive
    # double rounding would tie to even: 1 + 2^-22), and float32-subnormal results
    u = 2.0**-23
    a = np.append(a, np.float32([1 + u, 1 + u, 2.0**-70, -(2.0**-75), 3.0]))
    b = np.append(b, np.float32([2.0**-24 * (1 - u), -(2.0**-24) * (1 - u), 1.5 * 2.0**-70,
                                 2.0**-70, 2.0**-130]))  # fmt: skip
    c = np.append(c, np.float32([1 + u, -(1 + u), 2.0**-148, 2.0**-147, 2.0**-149]))
    # a family of float64-midpoint hits: c = 1 + k u, a*b = 2^-24 (1 - u^2) = half an ulp
    # minus a sliver, for many k (odd and even last bits), both signs
    k = np.arange(1, 200, dtype=np.float64)
    sign = np.where(k % 3 == 0, -1.0, 1.0)
    a = np.append(a, np.float32(sign * (1 + u)))
    b = np.append(b, np.full(k.size, 2.0**-24 * (1 - u), np.float32))
    c = np.append(c, np.float32(sign * (1 + k * u)))
    got = fma32(a, b, c)
    assert got[300] == np.float32(1 + u)
    # the large-array path (boundary cases found first) gives the same bits as the small one
    reps = 17000 // a.size + 2
    big = fma32(np.tile(a, reps), np.tile(b, reps), np.tile(c, reps))
    assert big.size > 16384
    assert np.array_equal(big.view(np.uint32), np.tile(got, reps).view(np.uint32))
    for x, y, z, r in zip(a, b, c, got, strict=True):
        exact_value = Fraction(float(x)) * Fraction(float(y)) + Fraction(float(z))
        # the float32 nearest to the exact value (ties to even) via float64 round-to-odd-free path
        lo = np.float32(float(exact_value))
        cands = [np.nextafter(lo, np.float32(-np.inf)), lo, np.nextafter(lo, np.float32(np.inf))]
        best = min(cands, key=lambda f: (abs(Fraction(float(f)) - exact_value),
                                         int(np.float32(f).view(np.uint32)) & 1))  # fmt: skip
        assert np.float32(r).view(np.uint32) == np.float32(best).view(np.uint32)


def test_bad_input_raises() -> None:
    em = lookup("aten.lerp.Scalar")
    assert em is not None
    with pytest.raises(TypeError, match="self"):
        em(Call("aten.lerp.Scalar", (np.int64([1]), np.float32([1]), 0.5), {}, ("int64",)))
    with pytest.raises(TypeError, match="weight"):
        em(Call("aten.lerp.Scalar", (np.float32([1]), np.float32([1]), "x"), {}, ("float32",)))


def test_registered() -> None:
    have = set(names())
    for op in ("aten.lerp.Scalar", "aten.lerp_.Scalar", "aten.lerp.Tensor", "aten.lerp_.Tensor",
               "aten.addcmul.default", "aten.addcmul_.default", "aten.addcdiv.default",
               "aten.addcdiv_.default"):  # fmt: skip
        assert op in have, op
