"""The GEMM's quick bound (``Out.quick``): a smaller error from the center alone that the
judge tries before the GEMM of magnitudes. It must never exceed the full bound, element by
element, so that every verdict is the one the full bound alone gives. No torch needed."""

from __future__ import annotations

import dataclasses
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from fpemu.validate.ops import Call, Out, lookup
from fpemu.validate.watch.verdict import _admitted, judge

BF16 = ml_dtypes.bfloat16


def _operands(rng: np.random.Generator, m: int, k: int, n: int, kind: str) -> tuple[Any, Any]:
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    if kind == "cancel":  # rows whose sums nearly cancel: |center| far below sum|a b|
        b[:, 0] = -b[:, 1]
        a[0] = a[1] * (1 + 2.0**-20)
    elif kind == "tiny":  # magnitudes near the float32 subnormal range
        a *= 2.0**-70
        b *= 2.0**-60
    elif kind == "special":  # zeros, infinities and NaN among ordinary values
        a[0, 0], a[1, :] = np.inf, 0.0
        b[0, 1] = np.nan
    return a, b


def _gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, dtype: Any, name: str,
          alpha: float, beta: float) -> Out:  # fmt: skip
    args = (a.astype(dtype), b.astype(dtype))
    if c is None:
        call = Call("aten.mm.default", args, {}, (name,))
    else:
        call = Call("aten.addmm.default", (c.astype(dtype), *args),
                    {"alpha": alpha, "beta": beta}, (name,))  # fmt: skip
    with np.errstate(all="ignore"):  # infinities and NaN are data here
        return lookup(call.op)(call)[0]


FORMATS = ((BF16, "bfloat16"), (np.float16, "float16"), (np.float32, "float32"),
           (np.float64, "float64"))  # fmt: skip
CASES = [
    (dtype, name, kind, k, addmm)
    for dtype, name in FORMATS
    for kind in ("plain", "cancel", "tiny", "special")
    for k in (1, 7, 130)
    for addmm in (False, True)
]


@pytest.mark.parametrize(("dtype", "name", "kind", "k", "addmm"), CASES)
def test_quick_error_never_exceeds_the_full_bound(dtype: Any, name: str, kind: str, k: int,
                                                  addmm: bool) -> None:  # fmt: skip
    """At every element: the same center as the full bound, and an error no larger (where the
    center is finite; a non-finite center admits nothing but NaN for NaN in either)."""
    rng = np.random.default_rng(k * 7 + len(kind))
    a, b = _operands(rng, 9, k, 6, kind)
    c = rng.standard_normal((9, 6)) if addmm else None
    out = _gemm(a, b, c, dtype, name, 0.5 if addmm else 1.0, -2.0 if addmm else 1.0)
    assert out.quick is not None and out.bound is not None
    idx = np.arange(out.value.size)
    with np.errstate(all="ignore"):
        qc, qe = out.quick(idx)
        fc, fe = out.bound(idx)
    np.testing.assert_array_equal(qc.view(np.uint64), fc.view(np.uint64))
    fin = np.isfinite(qc)
    assert fin.any()
    assert np.all(qe[fin] <= fe[fin]), (qe[fin] / fe[fin]).max()
    assert np.all(qe[fin] >= 0)


def _torch_like(a: np.ndarray, b: np.ndarray, dtype: Any, name: str) -> np.ndarray:
    """Another float32 accumulation order (k descending, one rounding per step), then one
    rounding to the output format: what some kernel may return."""
    a32, b32 = a.astype(dtype).astype(np.float32), b.astype(dtype).astype(np.float32)
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for i in reversed(range(a.shape[1])):
        acc = (acc + (a32[:, i : i + 1] * b32[i : i + 1, :])).astype(np.float32)
    return acc.astype(dtype)


@pytest.mark.parametrize(("dtype", "name"), [(BF16, "bfloat16"), (np.float32, "float32")])
@pytest.mark.parametrize("seed", range(4))
def test_judge_with_the_quick_bound_gives_the_full_bounds_verdicts(dtype: Any, name: str,
                                                                   seed: int) -> None:  # fmt: skip
    """Outputs of another accumulation order, with and without planted faults (one ulp up
    at many elements; one element far off), judged with the quick bound and without it:
    the same verdict, counts and first element. Across the cases the quick bound admits some
    elements and leaves others to the full bound (both stages run)."""
    rng = np.random.default_rng(seed)
    admitted = left = 0  # differing elements the quick bound admits, and the others
    for kind in ("plain", "cancel"):
        a, b = _operands(rng, 64, 256, 48, kind)
        out = _gemm(a, b, None, dtype, name, 1.0, 1.0)
        full = dataclasses.replace(out, quick=None)
        t = _torch_like(a, b, dtype, name)
        u = np.uint16 if name == "bfloat16" else np.uint32
        one_up = t.copy()
        sel = rng.random(t.shape) < 0.2
        one_up.view(u)[sel] += 1
        far = t.copy()
        far[3, 4] = t[3, 4] * 3 + 1
        for torch_out in (t, one_up, far):
            jq, jf = judge(torch_out, out), judge(torch_out, full)
            assert jq == jf
            diff = np.flatnonzero(torch_out.view(u) != out.value.view(u))
            if diff.size:
                tf = torch_out.reshape(-1)[diff].astype(np.float64)
                with np.errstate(all="ignore"):
                    ok = _admitted(tf, *out.quick(diff), name)
                admitted, left = admitted + int(ok.sum()), left + int((~ok).sum())
        assert judge(far, out).verdict == "differs"
    assert admitted > 0 and left > 0



@pytest.mark.parametrize(("dtype", "name"), [(BF16, "bfloat16"), (np.float16, "float16")])
@pytest.mark.parametrize("which", ["a", "b", "both", "neither"])
def test_flush_terms_at_gathered_outputs_are_the_whole_outputs(dtype: Any, name: str,
                                                               which: str) -> None:  # fmt: skip
    """``_flushed_at`` on the gathered rows of ``|a|`` and columns of ``|b|`` gives, bit for bit,
    ``_flushed``'s terms of the whole output at those elements (operands holding subnormals
    of their format, some rows/columns without, an infinity among the magnitudes)."""
    from fpemu.validate.ops.matmul import _TINY, _flushed, _flushed_at  # noqa: PLC0415

    rng = np.random.default_rng(len(which))
    tiny = _TINY[name]
    a = rng.choice([-1.0, 1.0], (40, 33)) * (0.05 + rng.random((40, 33)))  # normal values
    b = rng.choice([-1.0, 1.0], (33, 28)) * (0.05 + rng.random((33, 28)))
    if which in ("a", "both"):
        a[::3, ::4] = rng.random((14, 9)) * tiny  # subnormals of the format
    if which in ("b", "both"):
        b[::5, 1::3] = rng.random((7, 9)) * tiny
    b[2, 3] = np.inf
    a_, b_ = np.abs(a.astype(dtype).astype(np.float32)), np.abs(b.astype(dtype).astype(np.float32))
    sub_a = bool(((a_ < tiny) & (a_ != 0)).any())
    sub_b = bool(((b_ < tiny) & (b_ != 0)).any())
    assert sub_a == (which in ("a", "both")) and sub_b == (which in ("b", "both"))
    with np.errstate(all="ignore"):
        whole = np.broadcast_to(_flushed(a_, b_, name, name, 0.75), (40, 28)).reshape(-1)
        idx = np.sort(rng.choice(40 * 28, 90, replace=False))
        i, j = np.divmod(idx, 28)
        at = _flushed_at(a_[i].astype(np.float64), b_.T[j].astype(np.float64),
                         name if sub_a else "", name if sub_b else "", 0.75, 33)  # fmt: skip
    at = np.broadcast_to(np.asarray(at, np.float64), idx.shape)
    assert np.array_equal(np.asarray(whole[idx], np.float64).view(np.uint64), at.view(np.uint64),
                          equal_nan=False)  # fmt: skip
