"""The same core checks on a real GPU with real CuPy arrays, and the real tensor cores.

Skipped (module level, with the reason) where CuPy or a CUDA device is missing, which is the
case in CI. Run on a GPU machine with ``python -m pytest tests/test_gpu.py -m gpu``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fpemu
from fpemu import linalg
from fpemu.backend import cupy_or_none, to_numpy, xp
from fpemu.formats import FORMATS
from fpemu.tensorcore import ARCHS, tensor_core_matmul

pytestmark = pytest.mark.gpu
cupy = pytest.importorskip("cupy", reason="CuPy is not installed (pip install 'fpemu[cupy]')")
if cupy_or_none() is None:
    pytest.skip("CuPy is installed but no CUDA device is usable", allow_module_level=True)

from fpemu.tensorcore.hardware.crosscheck import crosscheck  # noqa: E402 - after the skips
from fpemu.tensorcore.hardware.generators import GENERATORS, generate  # noqa: E402
from fpemu.tensorcore.hardware.mma import (  # noqa: E402
    INSTRUCTIONS,
    device_capability,
    model_for_capability,
    run_mma,
    supported,
)
from fpemu.tensorcore.hardware.words import from_words, to_words  # noqa: E402

RNG = np.random.default_rng(20261121)
MAJOR, MINOR = device_capability(cupy)
SM = 10 * MAJOR + MINOR


def _same_bits(got: Any, want: Any) -> None:
    assert isinstance(got, cupy.ndarray), f"result left the GPU: {type(got)}"
    g, w = to_numpy(got), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape
    nan = np.isnan(w) if w.dtype.kind == "f" else np.zeros(w.shape, bool)
    assert np.array_equal(np.isnan(g) if g.dtype.kind == "f" else nan, nan)
    ui = np.dtype(f"u{g.dtype.itemsize}")
    assert np.array_equal(g[~nan].view(ui), w[~nan].view(ui))


def _both(fn: Any, *args: Any, **kwargs: Any) -> None:
    want = fn(*args, **kwargs)
    dev = [cupy.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    kw = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    _same_bits(fn(*dev, **kw), want)


def test_xp_is_cupy_for_gpu_arrays() -> None:
    d = cupy.ones(3)
    assert xp(d) is cupy
    with pytest.raises(TypeError, match="cannot mix"):
        xp(d, np.ones(3))


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "tf32", "float8_e4m3fn", "float8_e5m2",
                                 "float8_e4m3fnuz", "float4_e2m1fn"])  # fmt: skip
@pytest.mark.parametrize("mode", ["rne", "rna", "rtz", "rup", "rdown", "rto"])
def test_round_every_fp16_and_bf16_pattern_on_gpu(fmt: str, mode: str) -> None:
    fp16 = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float64)
    bf16 = (np.arange(2**16, dtype=np.uint32) << np.uint32(16)).view(np.float32)
    x64 = np.concatenate([fp16, bf16.astype(np.float64)])
    if not FORMATS[fmt].has_nan:
        x64 = x64[~np.isnan(x64)]
    _both(fpemu.round, x64, fmt, mode=mode)
    x32 = bf16 if FORMATS[fmt].has_nan else bf16[~np.isnan(bf16)]
    _both(fpemu.round, x32, fmt, mode=mode)
    _both(fpemu.round, x64, fmt, mode=mode, subnormals=False)


def test_round_random_float32_patterns_on_gpu() -> None:
    bits = RNG.integers(0, 2**32, 4_000_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    for fmt in ("float16", "bfloat16", "float8_e5m2"):
        _both(fpemu.round, x, fmt)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e4m3fn", "float32", "tf32"])
def test_decode_on_gpu(fmt: str) -> None:
    bits = FORMATS[fmt].bits
    codes = (np.arange(2**bits, dtype=np.uint32) if bits <= 16
             else RNG.integers(0, 2**bits, 10**6, dtype=np.uint64).astype(np.uint32))  # fmt: skip
    _both(fpemu.decode, codes, fmt)


@pytest.mark.parametrize("model", ["sequential", "pairwise", "blocked", "fast"])
def test_matmul_on_gpu(model: str) -> None:
    a, b = RNG.standard_normal((4, 64, 256)), RNG.standard_normal((256, 32))
    _both(linalg.matmul, a, b, fmt="fp16", model=model)
    _both(linalg.matmul, a, b, fmt="bf16", model=model)


@pytest.mark.parametrize("arch", list(ARCHS))
def test_tensor_core_models_on_gpu(arch: str) -> None:
    fmts = {"fp16": "float16", "bf16": "bfloat16", "tf32": "tf32", "fp8": "float8_e4m3fn"}
    for family in ARCHS[arch].blocks:
        fmt = fmts[family]
        a = fpemu.round(RNG.standard_normal((8, 16, 64)), fmt)
        b = fpemu.round(RNG.standard_normal((64, 8)), fmt)
        c = fpemu.round(RNG.standard_normal((8, 16, 8)), "float32")
        _both(tensor_core_matmul, a, b, c, arch=arch, fmt=fmt)


# ----------------------------------------------------------------------------- real tensor cores
_RUNNABLE = [n for n, i in INSTRUCTIONS.items() if supported(i, SM)]


@pytest.mark.parametrize("name", _RUNNABLE)
@pytest.mark.parametrize("ksteps", [1, 3])
def test_mma_kernel_layout_with_exact_integer_cases(name: str, ksteps: int) -> None:
    """Small integers are exact in every model: any difference is a layout or kernel bug."""
    i = INSTRUCTIONS[name]
    cs = generate("integers", problems=257, fmt=i.fmt, acc=i.acc, k=i.k * ksteps, rng=RNG)
    d = run_mma(i, to_words(cs.a, i.fmt), to_words(cs.b, i.fmt), to_words(cs.c, i.acc))
    want = np.matmul(cs.a, cs.b) + cs.c
    assert np.array_equal(from_words(d, i.acc), want)


@pytest.mark.parametrize("name", _RUNNABLE)
@pytest.mark.parametrize("gen", list(GENERATORS))
def test_mma_matches_the_model_of_this_gpu(name: str, gen: str) -> None:
    """The claim itself, at a small scale (``fpemu crosscheck`` runs 10**6 cases per row)."""
    model = model_for_capability(MAJOR, MINOR)
    r = crosscheck(INSTRUCTIONS[name], model, gen, cases=20_000, device=run_mma, rng=RNG,
                   ksteps=2)  # fmt: skip
    assert r.mismatches == 0, r.saved_arrays()
