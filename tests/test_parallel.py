"""fpemu.threads: bit-identical results for every thread count, bad counts refused, BLAS held.

The reference of each comparison is the one-thread result, which the other test files check
against the independent oracles; here the claim is that splitting the work changes no bit. The
tile grain is lowered so that small odd shapes really split (each test checks that it did).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import fpemu
from fpemu import parallel
from fpemu.nn import functional
from fpemu.tensorcore.mma import dpa
from tests.tiles_util import same_bits, values

THREADS = (2, 3, 7)


@pytest.fixture(autouse=True)
def small_grain(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Split even small calls, and record how many tiles each parallel run had."""
    monkeypatch.setattr(parallel, "GRAIN", 64.0)
    seen: list[int] = []
    real = parallel.map_tiles

    def spy(fn: Any, items: Any) -> Any:
        seen.append(len(items))
        return real(fn, items)

    monkeypatch.setattr(parallel, "map_tiles", spy)
    yield seen


# -- the thread count ---------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, 257])
def test_threads_refuses_out_of_range(bad: int) -> None:
    with pytest.raises(ValueError, match=rf"n={bad}: expected an int from 1 to 256"):
        with fpemu.threads(bad):
            pass


@pytest.mark.parametrize("bad", ["x", 2.0, True, None])
def test_threads_refuses_non_int(bad: Any) -> None:
    with pytest.raises(TypeError, match=r"n=.*expected an int"):
        with fpemu.threads(bad):
            pass


def test_threads_nest_and_restore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(parallel.ENV, raising=False)
    assert fpemu.num_threads() == len(os.sched_getaffinity(0))
    with fpemu.threads(np.int64(3)):
        assert fpemu.num_threads() == 3
        with fpemu.threads(5):
            assert fpemu.num_threads() == 5
        assert fpemu.num_threads() == 3
    assert fpemu.num_threads() == len(os.sched_getaffinity(0))


def test_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(parallel.ENV, " 6 ")
    assert fpemu.num_threads() == 6
    with fpemu.threads(2):
        assert fpemu.num_threads() == 2  # the block wins
    for bad in ("x", "0"):
        monkeypatch.setenv(parallel.ENV, bad)
        with pytest.raises(ValueError, match=f"FPEMU_NUM_THREADS={bad!r}"):
            fpemu.num_threads()


def test_tiles_run_once_each_in_order_and_do_not_nest() -> None:
    inner: list[int] = []

    def fn(i: int) -> int:
        inner.append(parallel.num_threads())
        return i * i

    with fpemu.threads(3):
        assert parallel.map_tiles(fn, list(range(20))) == [i * i for i in range(20)]
    assert inner == [1] * 20  # a tile never splits again


def test_first_failing_tile_raises() -> None:
    def fn(i: int) -> int:
        if i in (5, 9):
            raise ValueError(f"tile {i}")
        return i

    with fpemu.threads(4), pytest.raises(ValueError, match="tile 5"):
        parallel.map_tiles(fn, list(range(12)))


def test_blas_held_to_one_thread_while_tiles_run() -> None:
    from threadpoolctl import threadpool_info  # noqa: PLC0415 - a core dependency, lazy in fpemu

    def blas_threads(_: int) -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads(0)
    with fpemu.threads(2):
        during = parallel.map_tiles(blas_threads, [0, 1])
    assert before and all(n == [1] * len(before) for n in during)
    assert blas_threads(0) == before  # restored


# -- round and quantize -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("dtype", "fmt", "mode"),
    [(np.float64, "fp16", "rne"), (np.float32, "bf16", "rne"), (np.float64, "e4m3", "rtz"),
     (np.float64, "e5m2", "rto"), (np.float32, "e2m1", "rup")],
)  # fmt: skip
def test_round_same_bits_for_every_thread_count(
    dtype: Any, fmt: str, mode: str, small_grain: list[int]
) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(3 * 32768 + 17) * np.exp2(rng.integers(-30, 30, 3 * 32768 + 17))
    x = x.astype(dtype)
    with fpemu.threads(1):
        want = fpemu.round(x, fmt, mode=mode, overflow="saturate")
    for n in THREADS:
        with fpemu.threads(n):
            assert same_bits(fpemu.round(x, fmt, mode=mode, overflow="saturate"), want), n
    assert max(small_grain) > 1


def test_stochastic_round_stays_in_draw_order(small_grain: list[int]) -> None:
    x = np.linspace(-1, 1, 3 * 32768 + 5)
    with fpemu.threads(1):
        want = fpemu.round(x, "e4m3", mode="stochastic", rng=np.random.default_rng(3))
    with fpemu.threads(3):
        got = fpemu.round(x, "e4m3", mode="stochastic", rng=np.random.default_rng(3))
    assert same_bits(got, want) and small_grain == []


@pytest.mark.parametrize(("fmt", "axis"), [("mxfp8_e4m3", -1), ("mxfp4", 0), ("nvfp4", -1)])
def test_quantize_same_bits(fmt: str, axis: int, small_grain: list[int]) -> None:
    x = np.random.default_rng(2).standard_normal((96, 160)).astype(np.float32)
    with fpemu.threads(1):
        want = fpemu.quantize(x, fmt, axis=axis)
    for n in THREADS:
        with fpemu.threads(n):
            q = fpemu.quantize(x, fmt, axis=axis)
        assert np.array_equal(q.element_codes, want.element_codes)
        assert np.array_equal(q.scale_codes, want.scale_codes)
        assert same_bits(fpemu.dequantize(q), fpemu.dequantize(want))
    if fmt != "nvfp4":  # NVFP4's tensor scale is global: one call
        assert max(small_grain) > 1


# -- matmul: every model family -----------------------------------------------------------------
MODELS = [
    ("sequential", "fp16", "fp32", {}),
    ("sequential", "bf16", "bf16", {"mode": "rtz"}),
    ("pairwise", "fp16", "fp16", {}),
    ("blocked", "bf16", "fp32", {"block": 5}),
    ("h100", "fp16", "fp32", {}),
    ("a100", "bf16", "fp32", {}),
    ("a100", "tf32", "fp32", {}),
    ("v100", "fp16", "fp16", {}),
    ("h100", "e4m3", "fp32", {}),
    ("h100", "e5m2", "fp16", {}),  # FP8 via FP16 blocks
    ("b200", "e4m3", "fp32", {}),
    ("h100", "fp16", "fp32", {"zeros": "emin", "tiny_sign": "keep"}),
    ("sm90.wgmma.f16.f32", "fp16", "fp32", {}),  # t-fdpa
    ("cdna3.mfma.f16.f32", "fp16", "fp32", {}),  # tr-fdpa
    ("cdna3.mfma.fp8.f32", "e4m3fnuz", "fp32", {}),  # gtr-fdpa
    ("cdna1.mfma.f16.f32", "fp16", "fp32", {}),  # e-fdpa
    ("cdna2.mfma.bf16.f32", "bf16", "fp32", {}),  # ftz-mul-add
    ("sm80.mma.f64.f64", "float64", "float64", {}),  # fma chain
]
#: (a shape, b shape): split along the batch axis, the rows, the columns (the longest).
SHAPES = [((9, 5, 36), (9, 36, 7)), ((23, 36), (36, 6)), ((5, 36), (36, 19))]


@pytest.mark.parametrize(("model", "fmt", "acc", "options"), MODELS, ids=[m[0] for m in MODELS])
@pytest.mark.parametrize(("sa", "sb"), SHAPES, ids=["batch", "rows", "columns"])
def test_matmul_same_bits_for_every_thread_count(
    model: str, fmt: str, acc: str, options: dict[str, Any], sa: Any, sb: Any,
    small_grain: list[int],
) -> None:  # fmt: skip
    rng = np.random.default_rng(7)
    a, b = values(rng, sa, fmt), values(rng, sb, fmt)
    c = values(rng, (*sa[:-1], sb[-1]), "bf16")  # rounded to acc by matmul
    kw = dict(fmt=fmt, acc=acc, c=c, model=model, **options)
    with fpemu.threads(1):
        want = fpemu.matmul(a, b, **kw)
    assert small_grain == []
    for n in THREADS:
        with fpemu.threads(n):
            assert same_bits(fpemu.matmul(a, b, **kw), want), n
    assert max(small_grain) > 1


def test_matmul_with_rng_is_one_call(small_grain: list[int]) -> None:
    rng = np.random.default_rng(0)
    # float16 data: nothing to round, so any split would be the model's
    a, b = values(rng, (31, 40), "fp16").astype(np.float16), values(rng, (40, 29), "fp16")
    b = b.astype(np.float16)
    kw: dict[str, Any] = dict(fmt="fp16", acc="bf16", mode="stochastic")
    with fpemu.threads(1):
        want = fpemu.matmul(a, b, rng=np.random.default_rng(4), **kw)
    with fpemu.threads(3):
        got = fpemu.matmul(a, b, rng=np.random.default_rng(4), **kw)
    assert same_bits(got, want)
    assert small_grain == []  # one call: the draws are made in a fixed order


def test_user_models_are_not_split(small_grain: list[int]) -> None:
    seen = []

    def model(a: Any, b: Any, c: Any, **kw: Any) -> Any:
        seen.append(a.shape)
        return a @ b

    a = np.ones((40, 30))
    with fpemu.threads(3):
        fpemu.matmul(a, a.T, model=model)
    assert seen == [(40, 30)]


@pytest.mark.parametrize(
    ("ins", "fmt", "scaled"),
    [("sm90.wgmma.f16.f32", "fp16", False), ("cdna3.mfma.f16.f32", "fp16", False),
     ("sm100.tcgen05.block_scale.mxf8f6f4.f32", "e4m3", True)],
)  # fmt: skip
def test_dpa_same_bits(ins: str, fmt: str, scaled: bool, small_grain: list[int]) -> None:
    rng = np.random.default_rng(5)
    a, b = values(rng, (101, 64), fmt), values(rng, (101, 64), fmt)
    c = values(rng, (101,), "bf16")
    kw: dict[str, Any] = dict(instruction=ins, a_fmt=fmt)
    if scaled:
        kw.update(scale_a=np.exp2(rng.integers(-3, 3, (101, 2))),
                  scale_b=np.exp2(rng.integers(-3, 3, (101, 2))))  # fmt: skip
    with fpemu.threads(1):
        want = dpa(a, b, c, **kw)
    for n in THREADS:
        with fpemu.threads(n):
            assert same_bits(dpa(a, b, c, **kw), want), n
    assert max(small_grain) > 1


def test_dpa_error_in_a_later_tile_is_raised() -> None:
    a = np.ones((64, 16))
    a[50, 3] = 1 + 2.0**-20  # not a float16
    with fpemu.threads(3), pytest.raises(ValueError, match="a holds values that are not exact"):
        dpa(a, np.ones((64, 16)), instruction="sm90.wgmma.f16.f32")


def test_training_step_same_bits(small_grain: list[int]) -> None:
    # the presets accumulate with "fast" (BLAS, its own threads); a tensor-core model splits
    pol = dataclasses.replace(fpemu.get_policy("torch_cuda_bf16"), acc_model="h100")

    def step() -> list[np.ndarray]:
        m = fpemu.MLP([24, 48, 10], policy=pol, seed=1)
        x = np.random.default_rng(1).standard_normal((64, 24)).astype(np.float32)
        loss = functional.cross_entropy(m(x), np.arange(64) % 10)
        loss.backward()
        return [np.asarray(p.grad) for p in m.parameters()]

    with fpemu.threads(1):
        want = step()
    with fpemu.threads(3):
        got = step()
    assert all(same_bits(g, w) for g, w in zip(got, want, strict=True))
    assert max(small_grain) > 1


@pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning")  # Python 3.12+ warns
def test_forked_child_gets_a_fresh_pool() -> None:
    """A child forked after the pool started must not wait on the parent's threads (without
    the fork hook it waits forever: the timeout turns that into a failure)."""
    import multiprocessing  # noqa: PLC0415

    with fpemu.threads(2):
        parallel.map_tiles(lambda i: i, [0, 1])  # the parent's pool has threads now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        assert pool.apply_async(_child_tiles).get(timeout=120) == [0, 1, 4]


def _child_tiles() -> list[int]:
    with fpemu.threads(2):
        return parallel.map_tiles(lambda i: i * i, [0, 1, 2])


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "e4m3"])
def test_matmul_input_rounding_same_bits(fmt: str, small_grain: list[int]) -> None:
    """Inputs not yet in fmt are rounded in tiles too (and exact ones skip it in tiles)."""
    rng = np.random.default_rng(12)
    a = rng.standard_normal((37, 41)) * np.exp2(rng.integers(-20, 10, (37, 41)))
    b = rng.standard_normal((41, 23))
    a[3, :5] = fpemu.round(a[3, :5], fmt)  # some values already exact
    with fpemu.threads(1):
        want = fpemu.matmul(a, b, fmt=fmt, model="h100" if fmt != "e4m3" else "sequential")
    for n in THREADS:
        with fpemu.threads(n):
            got = fpemu.matmul(a, b, fmt=fmt, model="h100" if fmt != "e4m3" else "sequential")
        assert same_bits(got, want), n
    assert max(small_grain) > 1
