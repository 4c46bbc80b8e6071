"""fpemu.linalg: matmul/dot/sum models, bit for bit against reference/dot.py (scalar loops)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fpemu
import reference.dot as rd
from fpemu import linalg
from fpemu.formats import get_format
from fpemu.linalg import chains, dot, get_model, matmul, models, register_model
from fpemu.rounding import round as fround
from tests.conftest import spec_of
from tests.oracle import assert_same_bits, oracle_round, probe_points

IN_FORMATS = ["float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"]


def reference_matmul(
    model: str,
    a: np.ndarray,
    b: np.ndarray,
    c: np.ndarray | None,
    acc: str,
    out: str,
    mode: str = "rne",
    block: int = 0,
) -> np.ndarray:
    """Every output element by the oracle's scalar loop (a, b, c already rounded)."""
    sa, so = spec_of(acc), spec_of(out)
    M, N = a.shape[0], b.shape[1]
    res = np.empty((M, N))
    for i in range(M):
        for j in range(N):
            x, y = a[i].tolist(), b[:, j].tolist()
            cij = None if c is None else float(c[i, j])
            if model == "sequential":
                res[i, j] = rd.sequential_dot(x, y, cij, sa, so, mode)
            elif model == "pairwise":
                res[i, j] = rd.pairwise_dot(x, y, cij, sa, so, mode)
            else:
                res[i, j] = rd.blocked_dot(x, y, cij, block, sa, so, mode)
    return res


def operands(kind: str, fmt: str, M: int, K: int, N: int, seed: int) -> tuple[Any, Any]:
    """Random and adversarial operands, already values of ``fmt``."""
    rng = np.random.default_rng(seed)
    f = get_format(fmt)
    if kind == "random":
        a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    elif kind == "cancel":  # huge terms that cancel exactly, leaving the small ones
        a = rng.standard_normal((M, K)) * 2.0 ** rng.integers(-6, 6, (M, K))
        big = f.max / 4
        a[:, 0], a[:, K // 2] = big, -big
        b = rng.standard_normal((K, N))
        b[0], b[K // 2] = 1.0, 1.0
    elif kind == "mixed":  # every binade of the format
        e = rng.integers(f.emin - f.mbits, f.emax // 2, (M, K))
        a = rng.choice([-1.0, 1.0], (M, K)) * np.ldexp(rng.uniform(1, 2, (M, K)), e)
        b = np.ldexp(rng.uniform(-2, 2, (K, N)), rng.integers(-4, 4, (K, N)))
    else:  # subnormal and tiny products
        a = rng.integers(-8, 8, (M, K)) * f.smallest_subnormal
        b = rng.integers(-8, 8, (K, N)) * f.smallest_subnormal * 2.0 ** rng.integers(0, 12)
        b[: K // 3] = rng.standard_normal((K // 3, N))
    with np.errstate(over="ignore"):
        return fround(a, fmt, overflow="saturate"), fround(b, fmt, overflow="saturate")


KINDS = ["random", "cancel", "mixed", "tiny"]


@pytest.mark.parametrize("fmt", IN_FORMATS)
@pytest.mark.parametrize("acc", ["float32", "float16"])
@pytest.mark.parametrize("kind", KINDS)
def test_sequential_matches_scalar_loop(fmt: str, acc: str, kind: str) -> None:
    a, b = operands(kind, fmt, 3, 24, 4, seed=hash((fmt, acc, kind)) % 2**32)
    want = reference_matmul("sequential", a, b, None, acc, acc)
    assert_same_bits(matmul(a, b, fmt=fmt, acc=acc), want)


@pytest.mark.parametrize("model", ["pairwise", "blocked"])
@pytest.mark.parametrize("fmt", IN_FORMATS)
@pytest.mark.parametrize("acc", ["float32", "float16"])
@pytest.mark.parametrize("kind", KINDS)
def test_pairwise_blocked_match_scalar_loop(model: str, fmt: str, acc: str, kind: str) -> None:
    K = 23  # odd: the halving tree is unbalanced, the last block is short
    a, b = operands(kind, fmt, 3, K, 3, seed=hash((model, fmt, acc, kind)) % 2**32)
    opts = {"block": 5} if model == "blocked" else {}
    want = reference_matmul(model, a, b, None, acc, acc, block=5)
    assert_same_bits(matmul(a, b, fmt=fmt, acc=acc, model=model, **opts), want)


@pytest.mark.parametrize("model", ["sequential", "pairwise", "blocked"])
@pytest.mark.parametrize("mode", ["rtz", "rup", "rdown", "rna", "rto"])
def test_models_directed_modes_addend_and_output(model: str, mode: str) -> None:
    fmt, acc, out = "bfloat16", "float32", "float16"
    a, b = operands("mixed", fmt, 3, 17, 3, seed=4)
    c = fround(np.random.default_rng(1).standard_normal((3, 3)) * 1e3, acc)
    want = reference_matmul(model, a, b, c, acc, out, mode=mode, block=4)
    got = (
        matmul(a, b, fmt=fmt, acc=acc, out=out, c=c, model=model, mode=mode, block=4)
        if model == "blocked"
        else matmul(a, b, fmt=fmt, acc=acc, out=out, c=c, model=model, mode=mode)
    )
    assert_same_bits(got, want)


@pytest.mark.parametrize("block", [1, 2, 7, 16, 40])
def test_blocked_block_sizes(block: int) -> None:
    a, b = operands("cancel", "float16", 2, 33, 3, seed=block)
    want = reference_matmul("blocked", a, b, None, "float16", "float16", block=block)
    assert_same_bits(matmul(a, b, fmt="fp16", acc="fp16", model="blocked", block=block), want)


def test_float32_hardware_and_exact_routes_agree_with_oracle() -> None:
    """bf16 in range takes the float32-adder route, bf16 with tiny products the float64 route."""
    for scale in (1.0, 2.0**-70):
        a, b = operands("mixed", "bfloat16", 3, 20, 3, seed=8)
        a = fround(a * scale, "bf16")
        want = reference_matmul("sequential", a, b, None, "float32", "float32")
        assert_same_bits(matmul(a, b, fmt="bf16", acc="fp32"), want)


# Cases where "float64 sum, then round to acc" would round twice (the tests need teeth).
TEETH = [
    # (fmt, acc, mode, a, b, c)
    ("float16", "bfloat16", "rne", [3.0], [87.0], 2.0**-100),  # 261 + tiny ties to 260 naively
    ("float32", "float32", "rne", [24929.0], [673.0], 2.0**-100),  # 2**24 + 1 + tiny
    ("float16", "float32", "rup", [2.0**15, 2.0**-24], [2.0**15, 2.0**-24], None),
    ("bfloat16", "float32", "rtz", [2.0**60, -(2.0**-60)], [1.0, 1.0], None),
    ("float16", "float16", "rdown", [-1.0, 2.0**-24], [2.0**10, -(2.0**-24)], None),
]


@pytest.mark.parametrize(("fmt", "acc", "mode", "a", "b", "c"), TEETH)
def test_sequential_single_rounding_where_naive_double_rounds(
    fmt: str, acc: str, mode: str, a: list, b: list, c: float | None
) -> None:
    want = rd.sequential_dot(a, b, c, spec_of(acc), spec_of(acc), mode)
    s = 0.0 if c is None else c
    for x, y in zip(a, b, strict=True):
        s = float(fround(np.float64(s + x * y), acc, mode=mode))  # naive: float64 sum, round
    assert s != want, "no teeth: the naive float64 evaluation is already right here"
    A, B = np.array([a]), np.array(b)[:, None]
    C = None if c is None else np.array([[c]])
    assert_same_bits(matmul(A, B, fmt=fmt, acc=acc, c=C, mode=mode)[0, 0], want)


def test_empty_sum_and_signed_zeros() -> None:
    a, b = np.zeros((2, 0)), np.zeros((0, 3))
    assert_same_bits(matmul(a, b), np.zeros((2, 3)))
    assert_same_bits(matmul(a, b, c=np.full((2, 3), -0.0)), np.full((2, 3), -0.0))
    a0, b0 = np.array([[-0.0, 0.0, -0.0]]), np.array([[1.0], [-1.0], [1.0]])
    fp32 = spec_of("fp32")
    for c in (None, 0.0, -0.0):
        cc = None if c is None else np.array([[c]])
        for model in ("sequential", "pairwise", "blocked"):
            fn = {"sequential": rd.sequential_dot, "pairwise": rd.pairwise_dot}.get(model)
            args = ([-0.0, 0.0, -0.0], [1.0, -1.0, 1.0], c)
            want = fn(*args, fp32, fp32) if fn else rd.blocked_dot(*args, 2, fp32, fp32)
            got = (
                matmul(a0, b0, c=cc, model=model, block=2)
                if model == "blocked"
                else matmul(a0, b0, c=cc, model=model)
            )
            assert_same_bits(got[0, 0], want)
    assert np.signbit(matmul(a0, b0, c=np.array([[-0.0]]))[0, 0])  # -0 + -0 + -0 + -0


def test_batched_and_vector_shapes() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((3, 5, 6))
    got = matmul(a, b, fmt="bf16", acc="fp16")
    assert got.shape == (2, 3, 4, 6) and got.dtype == np.float32
    for i in range(2):
        for j in range(3):
            assert_same_bits(got[i, j], matmul(a[i, j], b[j], fmt="bf16", acc="fp16"))
    v, w = rng.standard_normal(5), rng.standard_normal((5, 6))
    assert_same_bits(matmul(v, w), matmul(v[None], w)[0])
    assert_same_bits(matmul(w.T, v), matmul(w.T, v[:, None])[:, 0])
    assert matmul(v, v).shape == ()
    assert_same_bits(dot(v, v), matmul(v[None], v[:, None])[0, 0])
    x = rng.standard_normal((3, 7))
    assert_same_bits(linalg.sum(x, axis=1), matmul(x, np.ones(7)))
    assert_same_bits(linalg.sum(x, axis=0, acc="fp16"), matmul(np.ones(3), x, acc="fp16"))
    c = rng.standard_normal(6)
    assert_same_bits(matmul(a, b, c=c)[1, 2], matmul(a[1, 2], b[2], c=np.tile(c, (4, 1))))
    assert matmul(a, b, acc="float64").dtype == np.float64


def test_float64_accumulator_rne() -> None:
    a, b = operands("mixed", "float16", 3, 20, 3, seed=3)
    want = reference_matmul("sequential", a, b, None, "float64", "float64")
    assert_same_bits(matmul(a, b, acc="float64"), want)


def test_fast_model_is_blas_on_rounded_inputs() -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((16, 32)), rng.standard_normal((32, 8))
    want = a.astype(np.float16).astype(np.float32) @ b.astype(np.float16).astype(np.float32)
    assert_same_bits(matmul(a, b, model="fast"), want)
    exact = matmul(a, b, model="sequential")
    assert np.max(np.abs(exact - want)) <= 1e-5 * np.max(np.abs(want))


def test_registry() -> None:
    calls: list[dict[str, Any]] = []

    def zero_model(a: Any, b: Any, c: Any, **kw: Any) -> Any:
        calls.append(kw)
        return np.zeros((*a.shape[:-1], b.shape[-1]))

    register_model("test_zero", zero_model, aliases=("tz0",), description="zeros", replace=True)
    assert models()["test_zero"] == "zeros"
    assert get_model("TZ0") is zero_model
    out = matmul(np.ones((2, 3)), np.ones((3, 4)), model="tz0", fmt="e4m3", flavour=1)
    assert out.shape == (2, 4) and not out.any()
    assert calls[0]["fmt"].name == "float8_e4m3fn" and calls[0]["flavour"] == 1
    assert calls[0]["acc"].name == "float32" and calls[0]["out"].name == "float32"
    with pytest.raises(ValueError, match="already"):
        register_model("test_zero", zero_model)
    with pytest.raises(ValueError, match="sequential"):
        register_model("other", zero_model, aliases=("seq",))
    with pytest.raises(TypeError, match="callable"):
        register_model("bad", 3)  # type: ignore[arg-type]


def test_argument_errors() -> None:
    a, b = np.ones((2, 3)), np.ones((3, 4))
    with pytest.raises(ValueError, match=r"model='kahan'.*sequential.*pairwise.*blocked.*fast"):
        matmul(a, b, model="kahan")
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(4, 3\)"):
        matmul(a, np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"batch shapes"):
        matmul(np.ones((2, 2, 3)), np.ones((3, 3, 4)))
    for bad in (0, -2):
        with pytest.raises(ValueError, match=rf"block={bad}"):
            matmul(a, b, model="blocked", block=bad)
    for bad in (2.5, True, "4"):
        with pytest.raises((TypeError, ValueError), match=r"block="):
            matmul(a, b, model="blocked", block=bad)
    with pytest.raises(TypeError, match=r"unknown option.*blocksize"):
        matmul(a, b, model="pairwise", blocksize=3)
    with pytest.raises(ValueError, match=r"acc='fp12'"):
        matmul(a, b, acc="fp12")
    with pytest.raises(ValueError, match=r"mode="):
        matmul(a, b, mode="sideways")
    with pytest.raises(ValueError, match=r"acc=float16"):
        matmul(a, b, acc="fp16", model="fast")
    with pytest.raises(ValueError, match=r"mode='rtz'"):
        matmul(a, b, model="fast", mode="rtz")
    assert_same_bits(matmul(a, b, model="fast", mode="rne"), matmul(a, b, model="fast"))
    with pytest.raises(ValueError, match=r"fmt=float64"):
        matmul(a, b, fmt="float64")
    with pytest.raises(ValueError, match=r"acc=float64"):
        matmul(a, b, acc="float64", mode="rtz")
    with pytest.raises(TypeError, match=r"\ba\b.*dtype"):
        matmul(np.array(["x"]), b)
    with pytest.raises(ValueError, match=r"0-d"):
        matmul(np.float64(1.0), b)
    with pytest.raises(ValueError, match=r"\bc\b"):
        matmul(a, b, c=np.ones(3))


@pytest.mark.slow
@pytest.mark.parametrize("fmt", IN_FORMATS)
@pytest.mark.parametrize("model", ["sequential", "pairwise", "blocked"])
def test_models_larger_campaign(fmt: str, model: str) -> None:
    for seed, kind in enumerate(KINDS * 3):
        for acc in ("float32", "float16", "bfloat16"):
            a, b = operands(kind, fmt, 4, 64, 4, seed=seed)
            want = reference_matmul(model, a, b, None, acc, acc, block=9)
            got = matmul(
                a, b, fmt=fmt, acc=acc, model=model, **({"block": 9} if model == "blocked" else {})
            )
            assert_same_bits(got, want)


def test_accumulation_doc_example_runs() -> None:
    """docs/accumulation.md: its python block runs and its asserts hold."""
    doc = Path(__file__).parent.parent / "docs" / "accumulation.md"
    blocks = re.findall(r"```python\n(.*?)```", doc.read_text(encoding="utf-8"), re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, str(doc), "exec"), {})


def test_numpy_casts_used_for_rne_accumulators_round_correctly() -> None:
    """The float16/float32 accumulators round with NumPy's float64 casts: check them."""
    pts = probe_points("float16", stride=16)
    with np.errstate(over="ignore"):
        got16 = pts.astype(np.float16).astype(np.float64)
    assert_same_bits(got16, oracle_round(pts, "float16", "rne"), pts)
    rng = np.random.default_rng(3)
    base = fround(rng.standard_normal(2000) * np.exp2(rng.integers(-150, 128, 2000)), "fp32")
    half_ulp = np.ldexp(1.0, np.maximum(np.frexp(base)[1] - 1, -126) - 24)
    pts = np.concatenate([base + half_ulp, np.nextafter(base + half_ulp, 0), base - half_ulp])
    with np.errstate(over="ignore"):
        got32 = pts.astype(np.float32).astype(np.float64)
    assert_same_bits(got32, oracle_round(pts, "float32", "rne"), pts)


# -- the einsum-driven chains: multi-tile shapes against an independent float32 loop ---------------
def _float32_chain(a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """Sequential FMA chain written independently: products of fp16 values are exact in float32,
    so one IEEE float32 addition per k is the single rounding into the accumulator."""
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    s = np.zeros(shape, np.float32)
    for k in range(a.shape[-1]):
        s = s + a32[..., :, k : k + 1] * b32[..., k : k + 1, :]
    assert c is None  # the addend case is tested separately (it starts the chain)
    return s


@pytest.mark.parametrize(
    "shape",
    [(3, 20, 1100), (1, 50, 1), (1, 40, 700), (700, 30, 1), (2, 3, 17, 70)],
    ids=["multi-tile", "M=N=1", "M=1", "N=1", "batched"],
)
def test_sequential_multi_tile_matches_an_independent_float32_loop(shape: tuple) -> None:
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    *batch, m, k, n = shape
    a = fpemu.round(rng.standard_normal((*batch, m, k)) * 2.0 ** rng.integers(-8, 8, k), "fp16")
    b = fpemu.round(rng.standard_normal((*batch, k, n)), "fp16")
    got = fpemu.matmul(a, b, fmt="fp16", acc="fp32", model="sequential")
    want = _float32_chain(a, b, None)
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_sequential_addend_starts_the_chain_including_negative_zero() -> None:
    rng = np.random.default_rng(5)
    a = fpemu.round(rng.standard_normal((4, 9, 600)), "fp16")[0]
    b = fpemu.round(rng.standard_normal((600, 300)), "fp16")
    c = fpemu.round(rng.standard_normal((9, 300)), "fp32")
    c[0, :5] = -0.0
    got = fpemu.matmul(a, b, fmt="fp16", acc="fp32", c=c, model="sequential")
    s = c.astype(np.float32)  # sequential: s = c, then s = fl32(s + a_k * b_k) for k = 0, 1, ...
    for k in range(a.shape[1]):
        s = s + a[:, k : k + 1].astype(np.float32) * b[k : k + 1, :].astype(np.float32)
    assert np.array_equal(got.view(np.uint32), s.view(np.uint32))


def test_einsum_fast_path_is_in_use_here() -> None:
    # If NumPy ever changed einsum's loop order, the self-check would route around einsum;
    # this test makes such a change visible instead of silently slower.
    ok = chains._einsum_runs_in_k_order
    assert ok("float32") and ok("float64")


@pytest.mark.parametrize("model", ["sequential", "pairwise", "blocked", "fast"])
def test_input_dtype_does_not_change_the_bits(model: str) -> None:
    rng = np.random.default_rng(11)
    a = fpemu.round(rng.standard_normal((33, 70)), "fp16")
    b = fpemu.round(rng.standard_normal((70, 45)), "fp16")
    runs = [fpemu.matmul(a.astype(dt), b.astype(dt), fmt="fp16", model=model)
            for dt in (np.float16, np.float32, np.float64)]  # fmt: skip
    for r in runs[1:]:
        assert np.array_equal(r.view(np.uint32), runs[0].view(np.uint32))
