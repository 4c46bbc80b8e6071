"""Batches of dot products through fpemu.matmul take the row-tile kernel: the same bits.

``(B, 1, K) @ (B, K, 1)`` runs on :func:`fpemu.tensorcore.rows.t_fdpa_rows` (the kernel of
``dpa``, through :func:`fpemu.tensorcore.rows.dot_batch`) instead of one tiny matrix per dot
product. The matrix route is still what computes a
``(B, 1, K) @ (B, K, 2)`` product, so its first column is the reference: both routes must give
the same bits on values that reach every corner of the block arithmetic (zeros of both signs,
subnormals, the format's extremes, overflow, NaN and infinities). Both routes are checked
against MMA-Sim and the published cases in test_mma_parity.py and test_tensorcore.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import fpemu
from fpemu.formats import get_format
from fpemu.linalg.ops import _exact_float64
from fpemu.tensorcore import ARCHS, chain_blocks
from fpemu.tensorcore.mma import dpa, mma
from fpemu.tensorcore.rows import dot_batch


def corner_values(rng: np.random.Generator, shape: tuple[int, ...], fmt: str) -> np.ndarray:
    f = get_format(fmt)
    pool = np.array(
        [0.0, -0.0, f.tiny, -f.tiny, f.tiny * 2.0**-f.mbits, f.max, -f.max, 1.0, -1.0, 2.0**-9]
    )
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-14, 8, shape))
    pick = rng.random(shape) < 0.3
    x[pick] = rng.choice(pool, size=int(pick.sum()))
    return np.asarray(fpemu.round(x, f, overflow="saturate"), dtype=np.float64)


def bits(x: Any) -> np.ndarray:
    return np.asarray(x, dtype=np.float64).view(np.uint64)


def _spec_or_none(arch: Any, fmt: str, acc: str) -> Any:
    try:
        return arch.block_spec(get_format(fmt), get_format(acc))
    except ValueError:
        return None


PAIRS = [("fp16", "fp32"), ("fp16", "fp16"), ("bf16", "fp32"), ("tf32", "fp32"), ("e4m3", "fp32")]
#: Every (architecture, input format, accumulator) with a native block (not via FP16).
PAIRS = [("fp16", "fp32"), ("fp16", "fp16"), ("bf16", "fp32"), ("tf32", "fp32"), ("e4m3", "fp32")]
CASES = [
    (name, fmt, acc)
    for name, arch in ARCHS.items()
    for fmt, acc in [*PAIRS, ("e5m2", "fp32")]
    if _spec_or_none(arch, fmt, acc) is not None
    and not arch.runs_via_fp16(get_format(fmt), get_format(acc))
]


@pytest.mark.parametrize("special", [False, True], ids=["finite", "specials"])
@pytest.mark.parametrize(("arch", "fmt", "acc"), CASES)
def test_rows_route_equals_matrix_route(arch: str, fmt: str, acc: str, special: bool) -> None:
    A = ARCHS[arch]
    spec = A.block_spec(get_format(fmt), get_format(acc))
    rng = np.random.default_rng(11)
    B, K = 400, 3 * spec.n + 5
    a = corner_values(rng, (B, 1, K), fmt)
    b = corner_values(rng, (B, K, 2), fmt)
    b[..., 1] = b[..., 0]
    c_fmt = "float32" if spec.result.fmt.ebits == 8 else spec.result.fmt.name
    c = corner_values(rng, (B, 1, 2), c_fmt)
    c[..., 1] = c[..., 0]
    # rows whose products lie just below the zero floor, with a zero C: the block exponent
    # is the floor, which decides how many of their bits survive
    f, half = get_format(fmt), spec.floor // 2 - 2
    for x, shape in ((a, (50, 1, K)), (b, (50, K, 2))):
        v = rng.standard_normal(shape) * np.exp2(half + rng.integers(-3, 4, shape))
        x[10:60] = np.asarray(fpemu.round(v, f), dtype=np.float64)
    b[10:60, :, 1] = b[10:60, :, 0]
    c[10:60] = 0.0
    if special:  # a NaN, infinities of both signs, an inf in C: the specials of spec 2.5
        a[0, 0, 2], a[1, 0, 1], b[2, 4, :], c[3] = np.nan, np.inf, -np.inf, np.inf
        a[4, 0, 0], b[4, 0, :] = np.inf, 0.0
    matrix = chain_blocks(a, b, c, spec=spec, fmt=f)[..., :1]
    rows = dot_batch(a, b[..., :1], c[..., :1], spec=spec, fmt=f, b_fmt=f,
                     c_fmt=get_format(c_fmt))  # fmt: skip
    assert rows is not None and rows.shape == (B, 1, 1)
    assert np.array_equal(bits(rows), bits(matrix))


def test_public_batched_matmul_equals_dpa() -> None:
    rng = np.random.default_rng(3)
    a, b = corner_values(rng, (1000, 16), "fp16"), corner_values(rng, (1000, 16), "fp16")
    c = corner_values(rng, (1000,), "float32")
    pub = fpemu.matmul(a[:, None, :], b[:, :, None], c=c[:, None, None], fmt="fp16", model="h100")
    want = dpa(a, b, c, instruction="sm90.wgmma.f16.f32")
    assert np.array_equal(bits(np.asarray(pub)[:, 0, 0]), bits(want))


@pytest.mark.parametrize(
    "name", ["sm90.wgmma.f16.f32", "cdna3.mfma.f16.f32", "cdna1.mfma.f16.f32", "cdna2.mfma.f16.f32"]
)
def test_instruction_model_batch_equals_mma_per_matrix(name: str) -> None:
    rng = np.random.default_rng(4)
    a, b = corner_values(rng, (60, 1, 32), "fp16"), corner_values(rng, (60, 32, 1), "fp16")
    got = fpemu.matmul(a, b, fmt="fp16", model=name)
    want = np.stack([mma(a[i], b[i], instruction=name) for i in range(60)])
    assert np.array_equal(bits(got), bits(want.astype(np.float32)))


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "tf32", "e5m2", "float8_e4m3", "fp32", "e4m3"])
def test_exact_input_skip_agrees_with_round(fmt: str) -> None:
    """matmul skips rounding an input exactly when fpemu.round would return it unchanged
    (checked for IEEE-style formats with subnormals; e4m3fn is always rounded)."""
    f = get_format(fmt)
    checked = f.specials == "ieee" and f.subnormals
    rng = np.random.default_rng(6)
    grid = np.asarray(fpemu.round(rng.standard_normal(600) * np.exp2(rng.integers(-40, 40, 600)),
                                  f, overflow="saturate"), dtype=np.float64)  # fmt: skip
    sub = np.arange(-4, 5) * 2.0 ** (f.emin - f.mbits)  # the subnormal grid and zeros
    big = 2.0 ** (f.emax + 1)  # on the grid, one binade above the top: overflow
    edges = np.array([f.max, -f.max, f.tiny, 0.0, -0.0, np.inf, -np.inf, np.nan, big, -big])
    base = np.concatenate([grid, sub, edges])
    cands = np.concatenate([base, np.nextafter(base, np.inf), np.nextafter(base, -np.inf),
                            base + 2.0 ** (f.emin - f.mbits - 1)])  # fmt: skip
    for v in cands:
        x = np.array([[v]])
        with np.errstate(over="ignore", invalid="ignore"):
            r = np.asarray(fpemu.round(x, f), dtype=np.float64)
        same_bits = bool((r.view(np.uint64) == x.view(np.uint64)).all())
        want = checked and same_bits and bool(np.isfinite(v))
        assert _exact_float64(x, f) == want, (fmt, v)
    assert _exact_float64(grid.reshape(20, 30), f) == checked  # a whole array on the grid
    assert not _exact_float64(np.append(grid, 1 + 2.0 ** -(f.mbits + 1)), f)  # one value off


@pytest.mark.parametrize("where", [0, 40_000, 3 * 32768 + 6])
@pytest.mark.parametrize("bad", [2.0**-25, 3 * 2.0**-25, 65520.0, np.inf, np.nan, 1 + 2.0**-11])
def test_exact_input_skip_in_every_chunk(where: int, bad: float) -> None:
    """The check runs in cache-sized chunks: a value off the fp16 grid is found in any chunk,
    zeros and subnormals on the grid pass, a strided view agrees. Oracle: NumPy's float16
    cast (RNE), which returns a float64 value unchanged exactly when it is an fp16 value."""
    h = get_format("fp16")
    rng = np.random.default_rng(8)
    n = 3 * 32768 + 8  # not a multiple of the chunk
    x = rng.standard_normal(n) * np.exp2(rng.integers(-26, 14, n))
    x[rng.random(n) < 0.2] = 0.0
    x = x.astype(np.float16).astype(np.float64)  # on the grid: subnormals, zeros, +-0
    assert bool((np.abs(x[x != 0]) < h.tiny).any())
    assert _exact_float64(x, h) and _exact_float64(x[::-3], h)
    x[where] = bad
    with np.errstate(over="ignore", invalid="ignore"):
        oracle = bool((x.astype(np.float16).astype(np.float64).view(np.uint64)
                       == x.view(np.uint64)).all())  # fmt: skip
    assert not oracle or not np.isfinite(bad)  # an infinity or NaN is refused: "round it"
    assert not _exact_float64(x, h)
    assert not _exact_float64(x.reshape(8, -1)[:, ::-1], h)  # not contiguous


@pytest.mark.parametrize(
    ("acc", "model", "oracle"),
    [("fp32", "h100", np.float32), ("fp16", "h100", np.float16),
     ("bf16", "sequential", "bfloat16")],
)  # fmt: skip
def test_addend_is_rounded_to_acc_or_kept_when_exact(acc: str, model: str, oracle: Any) -> None:
    """``c`` is rounded to ``acc`` first (skipped where it already is): the same bits as with
    ``c`` rounded beforehand by NumPy's or ml_dtypes' cast (RNE), and ``c`` is not changed."""
    import ml_dtypes  # noqa: PLC0415 - a core dependency

    dt = np.dtype(getattr(ml_dtypes, oracle) if isinstance(oracle, str) else oracle)
    rng = np.random.default_rng(9)
    a, b = corner_values(rng, (300, 1, 16), "fp16"), corner_values(rng, (300, 16, 1), "fp16")
    c = rng.standard_normal((300, 1, 1)) * np.exp2(rng.integers(-20, 12, (300, 1, 1)))
    c[:5] = 0.0
    keep = c.copy()
    pre = c.astype(dt).astype(np.float64)  # the oracle's rounding: exact in acc
    assert not np.array_equal(pre, c)  # some values really round
    got = fpemu.matmul(a, b, c=c, fmt="fp16", acc=acc, model=model)
    want = fpemu.matmul(a, b, c=pre, fmt="fp16", acc=acc, model=model)
    assert np.array_equal(bits(got), bits(want)) and np.array_equal(c, keep)
    for given in (pre.astype(dt), pre[0, 0, 0]):  # the cast data itself, and a scalar
        one = fpemu.matmul(a, b, c=given, fmt="fp16", acc=acc, model=model)
        ref = fpemu.matmul(a, b, c=np.broadcast_to(np.float64(given), pre.shape), fmt="fp16",
                           acc=acc, model=model)  # fmt: skip
        assert np.array_equal(bits(one), bits(ref))
