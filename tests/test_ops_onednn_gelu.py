"""oneDNN's float32 GELU emulations (``_onednn.gelu_minimax``, the forward; ``_onednn_bwd.
gelu_erf_bwd``, the backward's derivative) against torch 2.13's CPU kernels (oneDNN itself, the
oracle), bit for bit: every interval of the forward's minimax polynomials with the codes at its
edges, rbound, tiny and subnormal inputs, zeros, infinities and NaN, a dense sweep of float32
bit patterns, lengths around the emulations' block size, and inputs where a Horner sum lands on
a float32 midpoint (found by search), which the emulations get right only through their
midpoint repair. torch runs oneDNN for a contiguous float32 tensor of two or more elements with
mkldnn enabled; the forward is emulated on AVX512 machines, the backward where its kernel is
known: elsewhere these tests skip."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import _fma, _onednn, _onednn_bwd  # noqa: E402
from reference.arith import fma as ref_fma  # noqa: E402
from reference.spec import FLOAT32  # noqa: E402

needs_fwd = pytest.mark.skipif(not _onednn.available(), reason="oneDNN's avx512_core GELU "
                               "is emulated only on AVX512 machines")  # fmt: skip
needs_bwd = pytest.mark.skipif(_onednn_bwd.kernel_fused() is None,
                               reason="oneDNN's GELU-backward kernel is unknown here")  # fmt: skip


@contextlib.contextmanager
def mkldnn_on() -> Iterator[None]:
    """torch with oneDNN enabled (setting the flag, torch warns about Intel GPUs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with torch.backends.mkldnn.flags(enabled=True):
            yield


def torch_fwd(x: np.ndarray) -> np.ndarray:
    """torch's float32 erf-GELU of ``x`` (oneDNN's kernel)."""
    assert x.dtype == np.float32 and x.size >= 2 and x.flags.c_contiguous
    with mkldnn_on():
        return np.asarray(torch.nn.functional.gelu(torch.from_numpy(x)).numpy())


def torch_bwd(x: np.ndarray) -> np.ndarray:
    """torch's float32 ``gelu_backward`` of ``x`` with ``dy = 1``: oneDNN's derivative."""
    assert x.dtype == np.float32 and x.size >= 2 and x.flags.c_contiguous
    with mkldnn_on():
        dy = torch.ones(x.shape, dtype=torch.float32)
        return np.asarray(torch.ops.aten.gelu_backward.default(dy, torch.from_numpy(x)).numpy())


def emu_fwd(x: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return _onednn.gelu_minimax(x)


def emu_bwd(x: np.ndarray) -> np.ndarray:
    fused = _onednn_bwd.kernel_fused()
    assert fused is not None
    with np.errstate(all="ignore"):
        return _onednn_bwd.gelu_erf_bwd(x, fused=fused)


def assert_bits(got: np.ndarray, want: np.ndarray, x: np.ndarray, *, nan_sign: bool) -> None:
    """``got`` has ``want``'s bits at every element; where ``want`` is NaN, with its sign and
    payload (``nan_sign``) or only NaN."""
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    g, w = got.view(np.uint32).reshape(-1), want.view(np.uint32).reshape(-1)
    bad = g != w
    if not nan_sign:
        bad &= ~(np.isnan(got) & np.isnan(want)).reshape(-1)
    i = np.flatnonzero(bad)[:5]
    assert not i.size, [(hex(int(a)), hex(int(b)), hex(int(c)))
                        for a, b, c in zip(x.view(np.uint32).reshape(-1)[i], g[i], w[i],
                                           strict=True)]  # fmt: skip


#: the first code (bits of |x|) of each interval of the forward's index
#: ``(bits + 0xc21fffff) >> 21``, from 1 to 25 (24: NaN only, 25: clamped to 24)
STARTS = [(i << 21) + 0x3DE00001 for i in range(1, 26)]
RBOUND = 0x40B15CEE


def edges() -> np.ndarray:
    """Both signs of: each interval's first code, the codes either side of it and its middle;
    rbound and its neighbours; tiny, subnormal and extreme codes; zeros, infinities, NaNs."""
    codes = []
    for s in STARTS:
        codes += [s - 2, s - 1, s, s + 1, s + (1 << 20)]
    codes += [RBOUND - 1, RBOUND, RBOUND + 1, 0, 1, 2, 0x3FF, 0x7FFFFF, 0x800000, 0x800001,
              0x1000000, 0x33800000, 0x3DE00000, 0x7F7FFFFF, 0x7F800000, 0x7F800001, 0x7FC00000,
              0x7FFFFFFF]  # fmt: skip
    pos = np.array(codes, np.uint32)
    return np.concatenate([pos, pos | np.uint32(0x80000000)]).view(np.float32)


def test_edges_are_what_they_claim() -> None:
    """The interval starts are where the index (computed here from the definition) steps, and
    the edge set covers every interval 1..24 and both sides of rbound."""
    b = np.abs(edges()).view(np.int32)
    idx = np.clip((b + np.int32(-0x3DE00001)) >> 21, 1, 24)
    assert set(idx.tolist()) == set(range(1, 25))
    for i, s in enumerate(STARTS[1:], start=2):
        assert ((s - 1 - 0x3DE00001) >> 21, (s - 0x3DE00001) >> 21) == (i - 1, i)


@needs_fwd
def test_forward_edges() -> None:
    x = edges()
    assert_bits(emu_fwd(x), torch_fwd(x), x, nan_sign=True)


@needs_bwd
def test_backward_edges() -> None:
    x = edges()
    assert_bits(emu_bwd(x), torch_bwd(x), x, nan_sign=False)


def sweep(offset: int) -> np.ndarray:
    """Every 4096th float32 bit pattern from ``offset`` (2**20 inputs, both signs)."""
    return np.arange(offset, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32)


@needs_fwd
@pytest.mark.parametrize("offset", [0, 2741])
def test_forward_dense_sweep(offset: int) -> None:
    x = sweep(offset)
    assert_bits(emu_fwd(x), torch_fwd(x), x, nan_sign=True)


@needs_bwd
@pytest.mark.parametrize("offset", [0, 2741])
def test_backward_dense_sweep(offset: int) -> None:
    """NaN results are compared as NaN only: for a NaN input of sign + torch keeps the sign,
    the emulation gives -NaN (measured; its sign is not claimed)."""
    x = sweep(offset)
    assert_bits(emu_bwd(x), torch_bwd(x), x, nan_sign=False)


@needs_fwd
@needs_bwd
@pytest.mark.parametrize("n", [2, 3, 17, 16383, 16384, 16385, 40000])
def test_lengths_around_the_block(n: int) -> None:
    """Lengths below, at and above the emulations' block of 16384 (a shorter last block),
    1-D and 3-D."""
    g = np.random.default_rng(n)
    x = (g.standard_normal(n) * 3).astype(np.float32)
    for shape in [(n,), (1, 1, n)]:
        xs = x.reshape(shape)
        assert_bits(emu_fwd(xs), torch_fwd(xs), xs, nan_sign=True)
        assert_bits(emu_bwd(xs), torch_bwd(xs), xs, nan_sign=False)


#: the codes of |x| where a Horner sum of the forward has an inexact float64 sum on a float32
#: midpoint (the cast rounds it the wrong way): the only ones among all 2**31 codes of |x|
#: (searched outside the tests, every code run with the repair spied on). At none of them, nor
#: anywhere else, does the repaired value change the GELU itself (searched too: every code run
#: with and without the repair): so the repair is checked at the FMA, against the exact oracle
FWD_MIDPOINTS = [0x2770A2F2, 0x3052E502, 0x30BD4503]
#: the same for the FMAs of the backward's FMA kernel (its FMAs see only ``|R|`` and ``R*R``:
#: the codes of |x| cover every input); here too no derivative changes with the repair
BWD_MIDPOINTS = [0x4CC8BEA0, 0x4CC8BEA1]


def repaired(monkeypatch: pytest.MonkeyPatch, module: object) -> list[tuple[float, ...]]:
    """A list that fills, as the emulations run, with the FMAs whose result ``module``'s
    ``repair32`` changed (both kernels' FMAs are ``_fma.fma32_into``, which calls
    ``_fma.repair32``): ``(a, b, c, the cast's float32, the repaired float32)``."""
    real = module.repair32  # type: ignore[attr-defined]
    seen: list[tuple[float, ...]] = []

    def spy(out: np.ndarray, p: tuple[np.ndarray, np.ndarray], c: np.ndarray, s: np.ndarray,
            risky: np.ndarray) -> None:  # fmt: skip
        cast = out.copy()
        real(out, p, c, s, risky)
        a, b, cc = (np.broadcast_to(v, s.shape) for v in (*p, c))
        for i in np.flatnonzero(cast.view(np.uint32) != out.view(np.uint32)):
            seen.append((float(a[i]), float(b[i]), float(cc[i]), float(cast[i]), float(out[i])))

    monkeypatch.setattr(module, "repair32", spy)
    return seen


def check_repairs(seen: list[tuple[float, ...]], least: int) -> None:
    """At least ``least`` repairs, each the exact FMA rounded once (``reference.arith.fma``,
    Fractions), where the float64 sum's cast was not."""
    assert len(seen) >= least, seen
    for a, b, c, cast, fixed in seen:
        want = ref_fma(a, b, c, FLOAT32)
        assert np.float32(fixed).view(np.uint32) == np.float32(want).view(np.uint32), (a, b, c)
        assert cast != want, (a, b, c)


@needs_fwd
def test_forward_midpoint_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The forward's Horner sums at these inputs land on float32 midpoints: repaired to the
    single rounding (the plain cast is wrong there); the results are torch's."""
    seen = repaired(monkeypatch, _fma)
    pos = np.array([*FWD_MIDPOINTS, 0x3F800000], np.uint32)
    x = np.concatenate([pos, pos | np.uint32(0x80000000)]).view(np.float32)
    assert_bits(emu_fwd(x), torch_fwd(x), x, nan_sign=True)
    check_repairs(seen, 2 * len(FWD_MIDPOINTS))


@needs_bwd
def test_backward_midpoint_repair(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for the backward's FMA kernel."""
    if _onednn_bwd.kernel_fused() is not True:
        pytest.skip("oneDNN's GELU backward runs its unfused kernel here: no FMA to repair")
    seen = repaired(monkeypatch, _fma)
    pos = np.array([*BWD_MIDPOINTS, 0x3F800000], np.uint32)
    x = np.concatenate([pos, pos | np.uint32(0x80000000)]).view(np.float32)
    assert_bits(emu_bwd(x), torch_bwd(x), x, nan_sign=False)
    check_repairs(seen, 2 * len(BWD_MIDPOINTS))
