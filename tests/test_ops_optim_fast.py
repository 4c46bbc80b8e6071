"""The single-loop path of ``lerp32`` (a scalar weight below 0.5: Adam's ``1 - beta1``) against
the general path (the same weight as an array: both loops, the selects) and against the exact
oracle (``reference.arith.fma``: one rounding of ``w * (e - s) + s``, the float32 difference
rounded first) or NumPy's float32 arithmetic (the default build's two roundings), bit for bit,
on ties, subnormals, infinities, NaN, signed zeros, broadcast, strided and 16-bit operands, and
through the registered in-place emulation (with a one-ulp planted fault still caught)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpemu.validate.ops import Call, lookup
from fpemu.validate.ops._num import to
from fpemu.validate.ops.optim import lerp32
from fpemu.validate.watch.verdict import judge
from reference.arith import fma as ref_fma
from reference.spec import FLOAT32

F32 = np.float32
#: scalar weights of the single-loop path: zeros of both signs, Adam's 0.1, the largest float32
#: below 0.5, negative ones, a subnormal
WEIGHTS = [0.0, -0.0, 0.1, 0.49999997, -0.49999997, -0.3, 1e-40, 2.0**-149]


def operands(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``self`` and ``end``: normals, nearly equal pairs (cancellation in ``end - self``),
    few-bit values (ties of the product-sum), subnormals, +-0, +-inf, NaN, huge values."""
    g = np.random.default_rng(seed)
    s = g.standard_normal(n).astype(F32)
    e = (s * (1 + 1e-6 * g.standard_normal(n))).astype(F32)
    e[::3] = g.standard_normal(e[::3].size).astype(F32)
    few = g.integers(-64, 64, n).astype(F32) * F32(0.125)
    s[1::7], e[1::7] = few[1::7], few[1::7] * 3 + F32(0.5)
    special = F32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 3e38, -3e38, 2.0**-149])
    k = min(n, special.size)
    s[-k:] = special[:k]
    e[-2 * k : -k] = special[:k]
    e[-k:] = special[::-1][:k]
    return s, e


def same_bits(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = np.isnan(want.astype(np.float64))
    assert np.array_equal(np.isnan(got.astype(np.float64)), nan)
    u = f"u{got.dtype.itemsize}"
    bad = (got.view(u) != want.view(u)) & ~nan
    assert not bad.any(), list(zip(got[bad][:5], want[bad][:5], strict=False))


def oracle(s: np.ndarray, e: np.ndarray, w: float, fused: bool) -> np.ndarray:
    """torch's vector loop for ``|w| < 0.5``: ``d = RN32(e - s)``, then ``w * d + s`` rounded
    once (fused, the exact oracle) or twice (NumPy's float32 product, then sum)."""
    with np.errstate(all="ignore"):
        s, e = np.broadcast_arrays(s, e)
        d = e - s
        w32 = F32(w)
        if not fused:
            return np.asarray(w32 * d + s, F32)
        out = np.empty(s.shape, F32)
        for i in np.ndindex(s.shape):
            out[i] = F32(ref_fma(float(w32), float(d[i]), float(s[i]), FLOAT32))
        return out


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("w", WEIGHTS)
def test_scalar_weight_path_matches_oracle_and_general_path(w: float, fused: bool) -> None:
    s, e = operands(400, 3)
    with np.errstate(all="ignore"):
        vec, sca = lerp32(s, e, F32(w), fused=fused)
        assert sca is vec  # one loop: nothing to tell apart
        same_bits(vec, oracle(s, e, w, fused))
        general = lerp32(s, e, np.full(s.shape, w, F32), fused=fused)  # an array weight
        same_bits(vec, general[0])
        same_bits(vec, general[1])


@pytest.mark.parametrize("fused", [True, False])
def test_scalar_weight_path_broadcast_and_strided(fused: bool) -> None:
    """``self`` a row broadcast against ``end`` and the reverse, strided views, a 0-d pair."""
    s, e = operands(60, 5)
    mat = np.tile(e, (3, 1))
    with np.errstate(all="ignore"):
        for a, b in ((s, mat), (mat, s), (s[::2], e[1::2]), (s[:1].reshape(()), e[:1].reshape(()))):
            got = lerp32(a, b, F32(0.1), fused=fused)[0]
            same_bits(got, lerp32(a, b, np.full(np.broadcast_shapes(a.shape, b.shape), 0.1, F32),
                                  fused=fused)[0])  # fmt: skip
            same_bits(got, oracle(a, b, 0.1, fused))


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32"])
def test_inplace_emulation_single_loop_and_planted_fault(name: str) -> None:
    """``lerp_.Scalar`` with a scalar weight through the registered emulation: ``self`` strided,
    ``end`` broadcast; the value is the general path's rounded to the format, and a result one
    ulp off is judged ``differs``."""
    s, e = operands(200, 9)
    dt = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": F32}[name]
    with np.errstate(all="ignore"):
        self_ = np.tile(s.astype(dt), (2, 2))[:, ::2]  # (2, 200), strided
        end = e.astype(dt)
        assert not self_.flags.c_contiguous
        want32 = lerp32(self_.astype(F32), end.astype(F32), np.full(self_.shape, 0.1, F32),
                        fused=True)[0]  # fmt: skip
    want = to(want32, name)
    call = Call("aten.lerp_.Scalar", (self_, end, 0.1), {}, (name,), capability="avx512")
    out = lookup("aten.lerp_.Scalar")(call)[0]
    assert out is not None and out.exact
    same_bits(out.value, want)
    assert judge(want, out).verdict == "identical"
    finite = np.flatnonzero(np.isfinite(want.astype(np.float64)).reshape(-1))
    bad = np.array(want, copy=True)
    bad.reshape(-1).view(f"u{bad.dtype.itemsize}")[finite[7]] += 1
    assert judge(bad, out).verdict == "differs"
