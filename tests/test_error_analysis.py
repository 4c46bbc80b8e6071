"""fpemu.linalg.error_analysis: exact results against the oracle's exact_dot, errors, bounds."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import reference.dot as rd
from fpemu.linalg import matmul
from fpemu.linalg.error_analysis import compare_models, exact_matmul, unit_roundoff
from fpemu.rounding import round as fround


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e5m2", "float32"])
def test_exact_matmul_matches_oracle_exact_dot(fmt: str) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 20)) * 2.0 ** rng.integers(-20, 20, (3, 20))
    b = rng.standard_normal((20, 2))
    c = fround(rng.standard_normal((3, 2)) * 1e-3, "float32")
    a, b = fround(a, fmt, overflow="saturate"), fround(b, fmt)
    got = exact_matmul(a, b, fmt=fmt, c=c).fractions()
    for i in range(3):
        for j in range(2):
            assert got[i, j] == rd.exact_dot(a[i].tolist(), b[:, j].tolist(), float(c[i, j]))


def test_compare_models_errors_are_measured_exactly() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 100)), rng.standard_normal((100, 3))
    rows = compare_models(a, b, fmt="fp16", acc="fp16", models=("sequential", "pairwise"))
    A, B = fround(a, "fp16"), fround(b, "fp16")
    for row in rows:
        assert row.result.shape == (4, 3)
        errs = [
            abs(Fraction(float(row.result[i, j])) - rd.exact_dot(A[i].tolist(), B[:, j].tolist()))
            for i in range(4)
            for j in range(3)
        ]
        assert row.max_abs_error == float(max(errs))
        assert_same = matmul(a, b, fmt="fp16", acc="fp16", model=row.model)
        assert np.array_equal(row.result, assert_same)
    assert rows[0].n == 100 and rows[0].nu == 100 * 2.0**-11
    assert rows[1].n == 7 + 2


@pytest.mark.parametrize("acc", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("mode", ["rne", "rtz"])
def test_errors_respect_the_classic_bound(acc: str, mode: str) -> None:
    rng = np.random.default_rng(2)
    for scale in (1.0, 1e-3):
        a = rng.standard_normal((4, 300)) * scale
        b = np.abs(rng.standard_normal((300, 4)))  # same-sign terms make the bound nearly tight
        fast = ("fast",) if acc == "float32" and mode == "rne" else ()  # fast: rne only
        models = ("sequential", "pairwise", "blocked", *fast)
        opts = {"mode": mode} if mode != "rne" else {}
        for row in compare_models(a, b, fmt="fp16", acc=acc, models=models, block=16, **opts):
            assert 0 <= row.bound_ratio <= 1, row


def test_sequential_loses_the_small_terms_pairwise_keeps_them() -> None:
    a = np.array([[1.0] + [2.0**-12] * 1024])
    b = np.array([[1.0]] + [[2.0**-13]] * 1024)
    rows = {r.model: r for r in compare_models(a, b, fmt="fp16", acc="fp32")}
    exact = 1 + 1024 * 2.0**-25
    assert rows["sequential"].result[0, 0] == 1.0
    assert rows["sequential"].max_abs_error == exact - 1
    assert rows["pairwise"].max_abs_error < rows["sequential"].max_abs_error / 100


def test_unit_roundoff_and_errors() -> None:
    assert unit_roundoff("bf16") == 2.0**-8 and unit_roundoff("bf16", "rup") == 2.0**-7
    with pytest.raises(ValueError, match="not finite"):
        exact_matmul([[np.inf]], [[1.0]])
    with pytest.raises(ValueError, match="model='nope'"):
        compare_models([[1.0]], [[1.0]], models=("nope",))
