"""Fast paths of the elementwise emulations against their references, bit for bit:

* ``sqrt`` of float32 (``_sqrt32``): NumPy's float32 ``sqrt`` against the exact square root
  (``reference.arith.sqrt``: Fractions and ``isqrt``) on every exponent, the subnormals and the
  specials, and the whole Out (value, exactness, reason, the lazy bound at every element)
  against ``unary_libm``'s general float64 path, on contiguous, strided, transposed, 0-d and
  empty tensors; a result outside the K_LIBM-ulp bound is still judged ``differs``.
* Python scalars stored in a dtype (remembered per value): ``-0.0`` and ``0.0`` stay apart,
  ``True``/``1``/``1.0`` agree, whatever was asked first.
"""

from __future__ import annotations

import numpy as np
import pytest

from fpemu.validate.ops import Call
from fpemu.validate.ops._fp import K_LIBM
from fpemu.validate.ops.elementwise import _store, _stored, add
from fpemu.validate.ops.libm import sqrt, unary_libm
from fpemu.validate.watch.verdict import judge
from reference.arith import sqrt as ref_sqrt
from reference.spec import FLOAT32
from tests.tiles_util import same_bits


def patterns() -> np.ndarray:
    """float32 bit patterns: a few of every exponent (both signs), the subnormals' ends and
    middles, +-0, +-inf, quiet and signalling NaNs of both signs."""
    g = np.random.default_rng(7)
    exps = np.arange(256, dtype=np.uint32) << np.uint32(23)
    mant = g.integers(0, 2**23, (256, 6), dtype=np.uint32)
    mant[:, 0], mant[:, 1] = 0, 2**23 - 1
    pos = (exps[:, None] | mant).reshape(-1)
    extra = np.uint32([1, 2, 3, 0x400000, 0x7FFFFF, 0x7F800001, 0x7FA00000, 0x7FC00001])
    bits = np.concatenate([pos, extra])
    return np.concatenate([bits, bits | np.uint32(0x80000000)]).view(np.float32)


def test_float32_sqrt_is_the_correctly_rounded_square_root() -> None:
    x = patterns()
    with np.errstate(invalid="ignore"):
        got = np.sqrt(x)
    for xi, gi in zip(x.tolist(), got.tolist(), strict=True):
        want = ref_sqrt(xi, FLOAT32)
        if np.isnan(want):
            assert np.isnan(gi), xi
        else:  # compare the values and the sign of a zero
            assert gi == want and np.copysign(1, gi) == np.copysign(1, want), (xi, gi, want)


@pytest.mark.parametrize("layout", ["flat", "matrix", "transposed", "strided", "0-d", "empty"])
def test_sqrt32_out_equals_unary_libm(layout: str) -> None:
    x = patterns()
    arrays = {
        "flat": x,
        "matrix": x[: x.size // 8 * 8].reshape(-1, 8),
        "transposed": x[: x.size // 8 * 8].reshape(-1, 8).T,
        "strided": x[::3],
        "0-d": x[300].reshape(()),
        "empty": x[:0].reshape(0, 4),
    }
    a = arrays[layout]
    call = Call("aten.sqrt.default", (a,), {}, ("float32",))
    with np.errstate(all="ignore"):
        new = sqrt(call)[0]
        old = unary_libm(call, np.sqrt)[0]
    assert new is not None and old is not None
    assert same_bits(new.value, old.value)
    assert (new.exact, new.reason) == (old.exact, old.reason) == (False, old.reason)
    idx = np.arange(a.size)
    with np.errstate(all="ignore"):  # the float64 path warns on signalling NaNs
        bn, bo = new.bounds_at(idx), old.bounds_at(idx)
    assert bn is not None and bo is not None
    assert all(same_bits(p, q) for p, q in zip(bn, bo, strict=True))


def test_sqrt32_bound_admits_k_libm_ulps_and_not_more() -> None:
    """torch's MKL VML may be an ulp or two off; three ulps off is a fault."""
    g = np.random.default_rng(3)
    x = np.abs(g.standard_normal(1000)).astype(np.float32) + np.float32(1e-3)
    out = sqrt(Call("aten.sqrt.default", (x,), {}, ("float32",)))[0]
    assert out is not None
    v = out.value
    for k, verdict in (
        (0, "identical"),
        (1, "bounded"),
        (K_LIBM, "bounded"),
        (K_LIBM + 1, "differs"),
    ):
        t = v.copy()
        t.view(np.uint32)[17] += np.uint32(k)
        assert judge(t, out).verdict == verdict, k


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16", "float64", "int64"])
def test_stored_scalars_are_remembered_per_value_and_sign(name: str) -> None:
    for order in ((0.0, -0.0), (-0.0, 0.0)):
        got = [_stored(v, name) for v in order]
        want = [_store(v, name) for v in order]
        for g_, w_ in zip(got, want, strict=True):
            assert same_bits(np.asarray(g_), np.asarray(w_))
    if name != "int64":
        assert np.signbit(np.float64(_stored(-0.0, name)))
        assert not np.signbit(np.float64(_stored(0.0, name)))
    for v in (True, 1, 1.0, 0.1, 2**60 + 1, float("inf")):
        if name == "int64" and v == float("inf"):
            continue
        assert same_bits(np.asarray(_stored(v, name)), np.asarray(_store(v, name))), v


def test_add_with_signed_zero_scalars_in_either_order() -> None:
    """``x + 0.0`` and ``x + (-0.0)`` on ``x = -0``: +0 and -0 (IEEE, NumPy's float32 sum)."""
    x = np.float32([-0.0, 1.0])
    for order in ((0.0, -0.0), (-0.0, 0.0)):
        for v in order:
            out = add(Call("aten.add.Tensor", (x, v), {}, ("float32",)))[0]
            assert out is not None
            assert same_bits(out.value, x + np.float32(v)), v


_SCALARS = (0.0, -0.0, True, False, 1, -1, 1.0, -1.0, 2, 0.5, 0.1, 1 + 2.0**-30, 2**60 + 1,
            1e-8, 0.999, 1e300, -1e300, float("inf"), float("-inf"), float("nan"))  # fmt: skip


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16", "float64"])
def test_remembered_scalar_operands_equal_the_conversions(name: str) -> None:
    """The remembered opmath scalars (``_operand``'s stored-then-widened value and ``_val``'s
    double-to-opmath value) are the uncached conversions' bits for every value and sign, in
    whichever order they are asked, and the shared arrays are read-only."""
    from fpemu.validate.ops import elementwise as el  # noqa: PLC0415
    from fpemu.validate.ops._fp import scalar  # noqa: PLC0415

    cdt = el._cdt(name)
    for _ in range(2):  # the second round reads the caches
        for v in _SCALARS:
            with np.errstate(all="ignore"):
                got = el._operand(v, name, cdt)
                want = np.asarray(_store(v, name)).astype(cdt)
                got_val, want_val = el._val(v, cdt), scalar(v, cdt)
            assert got.dtype == want.dtype and got.shape == ()
            assert same_bits(got, want), (v, got, want)
            assert not got.flags.writeable
            assert same_bits(np.asarray(got_val), np.asarray(want_val)), v
            assert np.asarray(got_val).dtype == cdt


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("cap", ["avx512", "default"])
def test_add_alpha_branches_equal_the_formula(name: str, cap: str) -> None:
    """``add``/``sub`` with every kind of alpha (one and minus one as bool, int and float, a
    float that rounds to one in the dtype, others, NaN): the one-rounding branch exactly
    where the stored alpha is +-1, the value of the two-rounding formula elsewhere."""
    from fpemu.validate.ops._num import dtype as dt_  # noqa: PLC0415

    g = np.random.default_rng(4)
    x = (g.standard_normal(40) * 3).astype(np.float32).astype(dt_(name))
    y = (g.standard_normal(40) * 3).astype(np.float32).astype(dt_(name))
    cdt = np.float64 if name == "float64" else np.float32
    for alpha in (1, True, 1.0, -1, -1.0, 1 + 2.0**-30, 2, 0.5, 0.1, -3.0, float("nan")):
        for op in ("aten.add.Tensor", "aten.sub.Tensor"):
            with np.errstate(all="ignore"):
                out = add(Call(op, (x, y), {"alpha": alpha}, (name,), cap))[0]
                assert out is not None
                al = np.asarray(_store(-alpha if op == "aten.sub.Tensor" else alpha, name))
                al = al.astype(cdt)
                xa, ya = x.astype(cdt), y.astype(cdt)
                if al == 1 or al == -1:
                    assert out.exact
                    want = np.asarray(xa + ya if al == 1 else xa - ya)
                    assert same_bits(out.value, want.astype(dt_(name))), alpha
                else:
                    two = (xa + (ya * al).astype(dt_(name)).astype(cdt)).astype(dt_(name))
                    if cap == "default":
                        assert out.exact and same_bits(out.value, two), alpha
                    else:  # the fused value: within the two-rounding one's bound
                        assert out.value.dtype == dt_(name)
