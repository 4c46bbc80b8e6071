"""Dask arrays in round, quantize/dequantize and matmul: lazy, and the in-memory bits.

Every result is computed on one shared ``distributed.LocalCluster`` (two workers, threads for
speed) and compared bit for bit with the in-memory call on the same data, which the other test
files check against the independent oracles. Chunks are chosen to cut what must not be cut
(K, blocks, tiles) so that the rechunking is exercised.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import fpemu

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

from tests.test_parallel import MODELS, same_bits, values  # noqa: E402


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as c:
        yield c


@pytest.fixture(scope="module")
def client(cluster: Any) -> Iterator[Any]:
    with distributed.Client(cluster) as cl:
        yield cl


def test_importing_fpemu_does_not_import_dask() -> None:
    code = (
        "import sys, numpy as np, fpemu; fpemu.round(np.ones(3), 'fp16'); "
        "fpemu.matmul(np.ones((2, 2)), np.ones((2, 2))); "
        "fpemu.quantize(np.ones(32), 'mxfp4'); print('dask' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("fmt", "mode", "dtype"),
    [("fp16", "rne", np.float64), ("bf16", "rne", np.float32), ("e4m3", "rtz", np.float64),
     ("e2m1", "rup", np.float32)],
)  # fmt: skip
def test_round(client: Any, fmt: str, mode: str, dtype: Any) -> None:
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((37, 53)) * np.exp2(rng.integers(-20, 20, (37, 53)))).astype(dtype)
    d = fpemu.round(da.from_array(x, chunks=(10, 17)), fmt, mode=mode, overflow="saturate")
    assert isinstance(d, da.Array) and d.chunks == ((10, 10, 10, 7), (17, 17, 17, 2))
    got = client.compute(d).result()
    assert same_bits(got, fpemu.round(x, fmt, mode=mode, overflow="saturate"))


def test_round_refuses_rng_and_checks_arguments_at_once() -> None:
    x = da.ones(10, chunks=3)
    with pytest.raises(ValueError, match=r"rng=Generator.*Dask array"):
        fpemu.round(x, "fp16", mode="stochastic", rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="unknown rounding mode='nope'"):
        fpemu.round(x, "fp16", mode="nope")


QUANT = [
    ("mxfp8_e4m3", (40, 96), (17, 50), -1, False),
    ("mxfp4", (96, 24), (50, 13), 0, False),
    ("mxint8", (40, 70), (25, 30), -1, True),  # padded: the last chunk grows to whole blocks
    ("nvfp4", (24, 80), (13, 21), -1, False),  # the tensor scale from the whole array
    ("nvfp4_2d", (40, 48), (20, 20), -1, True),  # 16 x 16 tiles: rows aligned too, padded
]


@pytest.mark.parametrize(("fmt", "shape", "chunks", "axis", "pad"), QUANT)
def test_quantize_and_dequantize(
    client: Any, fmt: str, shape: Any, chunks: Any, axis: int, pad: bool
) -> None:
    rng = np.random.default_rng(2)
    x = (rng.standard_normal(shape) * np.exp2(rng.integers(-6, 6, shape))).astype(np.float32)
    want = fpemu.quantize(x, fmt, axis=axis, pad=pad)
    q = fpemu.quantize(da.from_array(x, chunks=chunks), fmt, axis=axis, pad=pad)
    assert isinstance(q.elements, da.Array) and q.tensor_scale == want.tensor_scale
    el, sc, ec, scc, back = client.compute(
        [q.elements, q.scales, q.element_codes, q.scale_codes, fpemu.dequantize(q)]
    )
    assert same_bits(el.result(), want.elements) and same_bits(sc.result(), want.scales)
    assert np.array_equal(ec.result(), want.element_codes)
    assert np.array_equal(scc.result(), want.scale_codes)
    assert same_bits(back.result(), fpemu.dequantize(want))


def test_quantize_errors_at_once() -> None:
    x = da.ones((4, 40), chunks=(2, 7))
    with pytest.raises(ValueError, match="block size 32 does not divide the axis length 40"):
        fpemu.quantize(x, "mxfp8_e4m3")
    with pytest.raises(ValueError, match="scale_rule='te' is not a rule"):
        fpemu.quantize(da.ones((4, 64), chunks=7), "mxfp8_e4m3", scale_rule="te")
    with pytest.raises(ValueError, match="axis=2 is out of range"):
        fpemu.quantize(da.ones((4, 64), chunks=7), "mxfp8_e4m3", axis=2)
    with pytest.raises(ValueError, match="nvfp4_2d has 2-D tiles; x must have at least 2"):
        fpemu.quantize(da.ones(64, chunks=7), "nvfp4_2d")


@pytest.mark.parametrize(("model", "fmt", "acc", "options"), MODELS, ids=[m[0] for m in MODELS])
def test_matmul_every_model(
    client: Any, model: str, fmt: str, acc: str, options: dict[str, Any]
) -> None:
    rng = np.random.default_rng(7)
    a, b = values(rng, (3, 21, 40), fmt), values(rng, (3, 40, 13), fmt)
    c = values(rng, (3, 21, 13), "bf16")
    kw = dict(fmt=fmt, acc=acc, model=model, **options)
    A = da.from_array(a, chunks=(2, 11, 15))  # K cut in three: matmul makes it whole
    B = da.from_array(b, chunks=(3, 25, 7))
    d = fpemu.matmul(A, B, c=da.from_array(c, chunks=(3, 21, 13)), **kw)
    assert isinstance(d, da.Array)
    assert same_bits(client.compute(d).result(), fpemu.matmul(a, b, c=c, **kw))


def test_matmul_with_numpy_operand_and_scalar_c(client: Any) -> None:
    rng = np.random.default_rng(8)
    a, b = values(rng, (30, 17), "fp16"), values(rng, (17, 9), "fp16")
    d = fpemu.matmul(da.from_array(a, chunks=(7, 5)), b, c=0.5, fmt="fp16", model="h100")
    want = fpemu.matmul(a, b, c=0.5, fmt="fp16", model="h100")
    assert same_bits(client.compute(d).result(), want)


def test_matmul_dask_errors() -> None:
    with pytest.raises(ValueError, match=r"a has shape \(4,\)"):
        fpemu.matmul(da.ones(4, chunks=2), np.ones((4, 2)))
    with pytest.raises(ValueError, match="unknown model='nope'"):
        fpemu.matmul(da.ones((2, 4), chunks=2), np.ones((4, 2)), model="nope")
    with pytest.raises(ValueError, match="rng="):
        fpemu.matmul(da.ones((2, 4), chunks=2), np.ones((4, 2)), mode="stochastic",
                     acc="bf16", rng=np.random.default_rng(0))  # fmt: skip


def test_scheduler_address(cluster: Any) -> None:
    """A client connected by address, as a remote cluster is used."""
    rng = np.random.default_rng(9)
    a, b = values(rng, (33, 40), "bf16"), values(rng, (40, 27), "bf16")
    with distributed.Client(cluster.scheduler_address) as remote:
        d = fpemu.matmul(da.from_array(a, chunks=(10, 9)), b, fmt="bf16", model="a100")
        got = remote.compute(d).result()
    assert same_bits(got, fpemu.matmul(a, b, fmt="bf16", model="a100"))
