"""16-bit activations judged from per-process tables (``by_bits(..., key=...)`` and
``_act.xpart``): every code of the dtype evaluated once, each call indexing the table by
the tensor's bits. Checked against the direct evaluation (the same emulation on pieces below
``by_bits``' size threshold, which never use a table): the value's bits, the exactness claim
and the bound (center, err) at sampled elements, for GELU (both forms, oneDNN's path and the
ATen bound), its backward, sigmoid, tanh and SiLU on bfloat16 and float16, with zeros,
subnormals, infinities and NaN among the inputs; and a one-ulp planted fault still differs.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from fpemu.validate.ops import Call, Out, lookup
from fpemu.validate.watch.verdict import judge

DT = {"bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
PIECE = 4096  # below by_bits' threshold (8192): evaluated directly


def _inputs(name: str, n: int = 20_000, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 3).astype(np.float32)
    x[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-30, 7e-6]
    return x.astype(DT[name])


def _call(op: str, args: tuple[Any, ...], name: str, **kwargs: Any) -> Call:
    return Call(op, args, kwargs, (name,), capability="avx512", options={"mkldnn": True})


def _out(op: str, args: tuple[Any, ...], name: str, **kwargs: Any) -> Out:
    emulation = lookup(op)
    assert emulation is not None
    (out,) = emulation(_call(op, args, name, **kwargs))
    assert out is not None
    return out


def _bits(a: Any) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint16).ravel()


def _compare(op: str, args: tuple[np.ndarray, ...], name: str, **kwargs: Any) -> None:
    whole = _out(op, args, name, **kwargs)
    n = args[0].size
    pieces = [_out(op, tuple(a[i : i + PIECE] for a in args), name, **kwargs)
              for i in range(0, n, PIECE)]  # fmt: skip
    assert all(p.exact == whole.exact for p in pieces)
    direct = np.concatenate([np.asarray(p.value) for p in pieces])
    assert (_bits(whole.value) == _bits(direct)).all()
    if whole.exact:
        return
    sample = np.random.default_rng(1).choice(n, 400, replace=False)
    sample = np.concatenate([np.arange(8), sample])
    with np.errstate(all="ignore"):  # NaN and inf inputs are data (as in the judge)
        got = whole.bounds_at(sample)
    assert got is not None
    for k, i in enumerate(sample.tolist()):
        with np.errstate(all="ignore"):
            want = pieces[i // PIECE].bounds_at(np.array([i % PIECE]))
        assert want is not None
        for g, w in zip(got, want, strict=True):
            gv, wv = float(np.asarray(g)[k]), float(np.asarray(w)[0])
            assert gv == wv or (np.isnan(gv) and np.isnan(wv)), (op, i, gv, wv)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("op", ["sigmoid", "tanh", "silu"])
def test_activation_tables_equal_direct_evaluation(op: str, name: str) -> None:
    _compare(f"aten.{op}.default", (_inputs(name),), name)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_tables_equal_direct_evaluation(approximate: str, name: str) -> None:
    _compare("aten.gelu.default", (_inputs(name),), name, approximate=approximate)


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_backward_tables_equal_direct_evaluation(approximate: str, name: str) -> None:
    x, dy = _inputs(name), _inputs(name, seed=5)
    _compare("aten.gelu_backward.default", (dy, x), name, approximate=approximate)


def test_a_planted_fault_still_differs_through_the_table() -> None:
    x = _inputs("bfloat16")
    out = _out("aten.gelu.default", (x,), "bfloat16", approximate="none")
    torch_like = np.array(out.value, copy=True)
    i = 100
    u = torch_like.view(np.uint16)
    u[i] = u[i] + np.uint16(1) if np.isfinite(float(torch_like[i])) else u[i]
    assert judge(torch_like, out).verdict == "differs"
