"""The fast paths of the ``sum`` emulation against their references, bit for bit:

* ``_num.to`` from float64 to bfloat16/float16 (the fast path the sum's value takes) against
  ``fpemu.round`` on every code of each format, the midpoints between them and
  their float64 neighbours up to the double-rounding traps (2^28, 2^29 ulps of float64), the
  overflow thresholds and the subnormals, and against the exact ``reference`` rounding on a
  random sample of every magnitude;
* ``sum``'s Out (value, exactness, center, err) against ``iv_out`` of the interval written out
  here from its definition (NumPy's float64 sums of the values and the magnitudes), for
  bfloat16, float16, float32 and float64 tensors: ordinary, all ``-0`` columns, NaN and inf
  (the general path), near the top of the format (ends rounding to inf), 0-d, keepdim or not,
  one or several axes, strided; and the input is left as it was.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fpemu.rounding import round as fround
from fpemu.validate.ops import Call, lookup
from fpemu.validate.ops._iv import IV, iv_out
from fpemu.validate.ops._num import dtype, to
from fpemu.validate.ops.reductions import _WHY, _axes
from reference.rounding import round_float
from reference.spec import BFLOAT16, FLOAT16
from tests.tiles_util import same_bits

SPECS = {"bfloat16": BFLOAT16, "float16": FLOAT16}


def traps(name: str) -> np.ndarray:
    """Finite float64 values on and around every rounding boundary of format ``name``."""
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype(name))
    with np.errstate(invalid="ignore"):
        v = np.unique(codes.astype(np.float64))
    v = v[np.isfinite(v)]
    mids = v[:-1] / 2 + v[1:] / 2
    top = float(v[-1])
    base = np.concatenate([v, mids, [top * 1.5, top * 2, 3.4028234663852886e38, 2.0**128,
                                     1e300, 2.0**-149, 2.0**-150, 2.0**-151, 1e-300]])  # fmt: skip
    out = [base]
    for k in (1, 2, 3, 2**28, 2**29, 2**30):
        step = np.spacing(base) * k
        out += [base + step, base - step]
    all_ = np.concatenate(out)
    all_ = np.concatenate([all_, -all_])
    return all_[np.isfinite(all_)]


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_to_equals_fpemu_round_on_every_boundary(name: str) -> None:
    v = traps(name)
    got, want = to(v, name), np.asarray(fround(v, name)).astype(dtype(name))
    assert same_bits(got, want)
    assert got.size > 500_000


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_to_against_the_exact_reference(name: str) -> None:
    g = np.random.default_rng(17)
    v = g.standard_normal(3000) * np.exp2(g.uniform(-160, 140, 3000))
    v = np.concatenate([v, traps(name)[::997]])
    got = to(v, name).astype(np.float64)
    for x, r in zip(v.tolist(), got.tolist(), strict=True):
        w = round_float(x, SPECS[name])
        assert r == w and np.copysign(1, r) == np.copysign(1, w), (x, r, w)


def reference_out(x: np.ndarray, axes: tuple[int, ...], keep: bool, name: str) -> object:
    """``iv_out`` of the interval as ``_sum_iv`` defines it, written out with NumPy sums."""
    u = 2.0**-53 if name == "float64" or x.dtype == np.float64 else 2.0**-24
    v = x.astype(np.float64)
    k = int(np.prod([x.shape[a] for a in axes])) if x.ndim else 1
    with np.errstate(all="ignore"):
        total = np.sum(v, axis=axes, keepdims=keep) if x.ndim else v
        absum = np.sum(np.abs(v), axis=axes, keepdims=keep) if x.ndim else np.abs(v)
        g = (k - 1) * u / (1 - (k - 1) * u) if k > 1 else 0.0
        return iv_out(total, IV(total, g * absum + k * 2.0**-52 * absum), name, _WHY)


def cases() -> list[tuple[str, np.ndarray, object, bool]]:
    g = np.random.default_rng(4)
    out: list[tuple[str, np.ndarray, object, bool]] = []
    for name, dt in (("bfloat16", ml_dtypes.bfloat16), ("float16", np.float16),
                     ("float32", np.float32), ("float64", np.float64)):  # fmt: skip
        x = (g.standard_normal((64, 24)) * np.exp2(g.integers(-8, 8, (64, 24)))).astype(dt)
        x[:, 3] = -0.0  # a column of negative zeros: the sum is -0
        out += [(name, x, [0], True), (name, x, [0], False), (name, x, [1], True),
                (name, x, [0, 1], False), (name, x, None, False),
                (name, x[::2, 1::3], [0], True), (name, x.reshape(8, 8, 24), [0, 1], True),
                (name, x[0, 0].reshape(()), [0], False)]  # fmt: skip
        special = x.copy()
        special[5, 0], special[7, 1], special[9, 2] = np.nan, np.inf, -np.inf
        out.append((name, special, [0], True))
        top = float(np.finfo(dt).max) if name != "bfloat16" else 3.3895313892515355e38
        near = np.full((4, 6), top * 0.3, dt)  # sums near/above the top: ends round to inf
        out.append((name, near, [0], False))
    return out


@pytest.mark.parametrize("case", range(len(cases())))
def test_sum_out_equals_iv_out_and_leaves_the_input(case: int) -> None:
    name, x, dim, keep = cases()[case]
    before = x.copy()
    args: tuple[object, ...] = (x, dim, keep) if dim is not None else (x,)
    op = "aten.sum.dim_IntList" if dim is not None else "aten.sum.default"
    got = lookup(op)(Call(op, args, {}, (name,)))[0]  # registered: warnings off, as watched
    want = reference_out(x, _axes(x, dim), keep if dim is not None else False, name)
    assert got is not None
    assert same_bits(got.value, want.value)  # type: ignore[attr-defined]
    assert got.exact is False and got.reason == _WHY
    idx = np.arange(np.size(got.value))
    gb, wb = got.bounds_at(idx), want.bounds_at(idx)  # type: ignore[attr-defined]
    assert gb is not None and wb is not None
    assert all(same_bits(p, q) for p, q in zip(gb, wb, strict=True))
    assert same_bits(x, before)
