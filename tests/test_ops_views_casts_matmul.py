"""The lead's op families against torch 2.13 CPU: views, selections, joins and factories
(exact), casts (exact: a float64 tensor goes to bfloat16/float16 through float32, two
roundings, as torch does) and the matmul family (bounded by the float32 accumulation of K
products). Each exact claim is tested with a planted one-ulp fault; the file reruns itself
under ``ATEN_CPU_CAPABILITY=default`` and ``avx2``."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import matmul  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.ops_nn_util import check, rerun  # noqa: E402
from tests.watch_ops_util import emulate, one_ulp_off  # noqa: E402

aten = torch.ops.aten
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def _x(dt: torch.dtype, *shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * 3).to(dt)


@pytest.mark.parametrize("dt", [*FLOATS, torch.int64])
def test_views_and_selections_exact(dt: torch.dtype) -> None:
    x = _x(dt, 4, 5, 6) if dt.is_floating_point else torch.arange(120).view(4, 5, 6)
    check(aten.view.default, x, [20, 6])
    check(aten.t.default, x[0])
    check(aten.transpose.int, x, 0, 2)
    check(aten.permute.default, x, [2, 0, 1])
    check(aten.expand.default, x[:, :1], [4, 3, 6])
    check(aten.unsqueeze.default, x, -1)
    check(aten.squeeze.dim, x[:, :1], 1)
    check(aten.slice.Tensor, x, 2, 1, 5, 2)
    check(aten.select.int, x, 1, -1)
    check(aten.split.Tensor, x, 2, 2)
    check(aten.split_with_sizes.default, x, [1, 4], 1)
    check(aten.unbind.int, x, 0)
    check(aten.cat.default, [x, x[:1]], 0)
    check(aten.stack.default, [x, x], 1)
    check(aten.index_select.default, x, 1, torch.tensor([4, 0, 0]))
    check(aten.gather.default, x, 2, torch.zeros(4, 5, 2, dtype=torch.int64))
    check(aten.index.Tensor, x, [None, torch.tensor([1, 3])])
    check(aten.tril.default, x[0], -1)
    check(aten.triu.default, x[0], 1)
    check(aten.clone.default, x)
    check(aten.select_backward.default, x[:, 2], [4, 5, 6], 1, 2)
    check(aten.slice_backward.default, x[:, 1:4], [4, 5, 6], 1, 1, 4, 1)


@pytest.mark.parametrize("dt", [*FLOATS, torch.int64])
def test_factories_exact(dt: torch.dtype) -> None:
    v = 1 + 2**-8 + 2**-40  # a double that torch rounds twice (to float32, then the format)
    v = v if dt.is_floating_point else 7
    check(aten.full.default, [3, 2], v, dtype=dt)
    check(aten.zeros.default, [2, 3], dtype=dt)
    check(aten.ones.default, [2, 3], dtype=dt)
    check(aten.fill_.Scalar, torch.empty(5, dtype=dt), v)
    check(aten.zero_.default, torch.ones(5, dtype=dt))
    check(aten.full_like.default, torch.empty(2, 2, dtype=dt), v)
    check(aten.ones_like.default, torch.empty(2, 2, dtype=dt))
    check(aten.arange.start_step, 2, 11, 3, dtype=torch.int64)


@pytest.mark.parametrize("src", [torch.float64, torch.float32, torch.bfloat16, torch.float16,
                                 torch.int64, torch.bool])  # fmt: skip
@pytest.mark.parametrize("dst", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_casts_exact(src: torch.dtype, dst: torch.dtype) -> None:
    if src == torch.bool:
        x = torch.tensor([True, False, True])
    elif src == torch.int64:
        x = torch.tensor([0, 1, -7, 2**24 + 1, 2**40 + 3])
    else:
        x = _x(src, 1000)
        if src == torch.float64:  # double-rounding cases: 1 + 2**-8 + tiny, 1 + 2**-11 + tiny
            x[:4] = torch.tensor([1 + 2**-8 + 2**-40, 1 + 2**-11 + 2**-40, 3e-45, -7e38])
    check(aten._to_copy.default, x, dtype=dst)
    check(aten.copy_.default, torch.empty(x.shape, dtype=dst), x)


def test_cast_double_rounding_is_torchs() -> None:
    """torch's float64 -> bfloat16 rounds to float32 first: the correctly rounded cast of
    1 + 2**-8 + 2**-40 is 1.0078125, torch's (and fpemu's emulation of it) 1.0."""
    x = torch.tensor([1 + 2**-8 + 2**-40], dtype=torch.float64)
    outs, em = emulate(aten._to_copy.default, x, dtype=torch.bfloat16)
    assert float(outs[0]) == 1.0 and float(em[0].value[0]) == 1.0


@pytest.mark.parametrize("dt", FLOATS)
def test_matmul_family_bounded(dt: torch.dtype) -> None:
    a, b, c = _x(dt, 16, 200, seed=1), _x(dt, 200, 24, seed=2), _x(dt, 24, seed=3)
    check(aten.mm.default, a, b, claim="bounded")
    check(aten.addmm.default, c, a, b, claim="bounded")
    check(aten.addmm.default, c, a, b, beta=0.5, alpha=2.0, claim="bounded")
    check(aten.bmm.default, torch.stack([a, -a]), torch.stack([b, b]), claim="bounded")
    check(aten.baddbmm.default, c, torch.stack([a, a]), torch.stack([b, -b]), claim="bounded")
    check(aten.mv.default, a, b[:, 0], claim="bounded")
    check(aten.dot.default, a[0], b[:, 0], claim="bounded")


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_gemm_catches_one_ulp_wherever_the_bound_allows(dt: torch.dtype) -> None:
    """A one-ulp fault must be ``differs`` on every element whose exact value lies farther
    than the accumulation bound 2 gamma_(K+3) |a||b| from both midpoints around torch's
    result (there no float32 accumulation order could have rounded to the neighbour); the
    exact value and the midpoints are computed here in float64 (exact for these sizes)."""
    a, b = _x(dt, 32, 64, seed=4), _x(dt, 64, 32, seed=5)
    outs, em = emulate(aten.mm.default, a, b)
    t = to_numpy(outs[0])
    a64, b64 = a.double().numpy(), b.double().numpy()
    exact = a64 @ b64  # products of 16-bit values and 64 of their sums are exact in float64
    k, u = 64, 2.0**-24
    bound = 2 * (k + 3) * u / (1 - (k + 3) * u) * (np.abs(a64) @ np.abs(b64))
    tv = t.astype(np.float64)
    fmt_ulp = {torch.bfloat16: 2.0**-7, torch.float16: 2.0**-10}[dt]
    _, e = np.frexp(np.abs(tv))
    step = np.ldexp(fmt_ulp, e - 1)  # the format's spacing at torch's value (normal range)
    far = (np.abs(exact - (tv + step / 2)) > bound) & (np.abs(exact - (tv - step / 2)) > bound)
    assert far.sum() > 0.5 * far.size  # most elements are far from a midpoint: a real test
    for i in np.flatnonzero(far.ravel()):
        faulty = one_ulp_off(t, int(i))
        assert judge(faulty, em[0]).verdict == "differs", (int(i), float(exact.ravel()[i]))


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float32])
def test_gemm_lazy_bound_both_routes_cover_the_accumulation_bound(dt: torch.dtype) -> None:
    """The GEMM bound is computed only where asked: by gathered float64 dot products for a few
    elements, by the float32 GEMM of magnitudes for many. Both cover 2 gamma_(K+3) |a||b|
    (computed here in float64) and agree to float32's accuracy."""
    a, b = _x(dt, 48, 96, seed=8), _x(dt, 96, 40, seed=9)
    _, em = emulate(aten.addmm.default, _x(dt, 48, 40, seed=10), a, b)
    a64, b64 = a.double().numpy(), b.double().numpy()
    k, u = 96, 2.0**-24
    need = 2 * (k + 3) * u / (1 - (k + 3) * u) * (np.abs(a64) @ np.abs(b64)).ravel()
    few = np.arange(0, 48 * 40, 97)  # well under an eighth of the elements: gathers
    every = np.arange(48 * 40)  # all of them: the GEMM of magnitudes
    got_few, got_all = em[0].bounds_at(few), em[0].bounds_at(every)
    assert got_few is not None and got_all is not None
    assert (got_few[1] >= need[few]).all() and (got_all[1] >= need).all()
    assert np.allclose(got_few[1], got_all[1][few], rtol=1e-5, atol=0)
    assert np.array_equal(got_few[0], got_all[0][few])


def test_capabilities() -> None:
    rerun(__file__)


def test_bf16_gemm_that_flushes_subnormals_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN's bfloat16 GEMM (AVX512-BF16 dot products) treats subnormal inputs as zero and
    flushes subnormal float32 products: gradients near 1e-38 (seen in the bench GPT's
    backward) come back ~1% off, or 0. The bound adds what flushing can lose, so torch's
    result is admitted; where this CPU's kernel does flush, Higham's bound alone would not
    admit it (the term is needed)."""
    g = torch.Generator().manual_seed(7)
    a = (torch.randn(64, 96, generator=g) * 1e-37).bfloat16()
    a[:, :8] = (torch.randn(64, 8, generator=g) * 1e-40).bfloat16()  # subnormal inputs
    b = (torch.randn(96, 48, generator=g) * 1e-3).bfloat16()  # float32-subnormal products
    outs, em = emulate(aten.mm.default, a, b)
    t = to_numpy(outs[0])
    assert judge(t, em[0]).verdict in ("identical", "bounded")
    exact = a.double().numpy() @ b.double().numpy()
    if ((t == 0) & (np.abs(exact) > 2.0**-126)).any():  # this CPU's kernel flushes
        monkeypatch.setattr(matmul, "_flushed", lambda *_: 0.0)
        _, em2 = emulate(aten.mm.default, a, b)
        assert judge(t, em2[0]).verdict == "differs"


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["mm", "addmm", "bmm"])
def test_gemm_with_subnormal_operand_against_torch(dt: torch.dtype, op: str) -> None:
    """torch's GEMMs on an operand holding subnormals of its format (as a GELU output's far
    left tail does in the bench GPT's backward), whose value fpemu computes on operands scaled by a
    power of two (``matmul._scales``): torch's result is admitted, and an output 2**-8 off
    (beyond the accumulation bound at this K) differs."""
    g = torch.Generator().manual_seed(11)
    a = torch.randn(2, 48, 64, generator=g).to(dt)
    tiny = torch.finfo(dt).tiny
    a[:, ::3, :8] = ((torch.rand(2, 16, 8, generator=g) * 0.9 + 0.05) * -tiny).to(dt)
    sub = (a != 0) & (a.abs() < tiny)
    assert sub.any()  # subnormals of the format
    b = torch.randn(2, 64, 40, generator=g).to(dt)
    if op == "bmm":
        outs, em = emulate(aten.bmm.default, a, b)
    elif op == "mm":
        outs, em = emulate(aten.mm.default, a[0], b[0])
    else:
        outs, em = emulate(aten.addmm.default, b[1, :48, :40].contiguous(), a[0], b[0])
    t = to_numpy(outs[0])
    assert judge(t, em[0]).verdict in ("identical", "bounded")
    bad = t.copy()
    flat = bad.reshape(-1)
    i = int(np.argmax(np.abs(flat.astype(np.float32))))
    flat[i] = (flat[i].astype(np.float32) * np.float32(1 + 2.0**-8)).astype(bad.dtype)
    assert judge(bad, em[0]).verdict == "differs"


def test_fp16_gemm_with_fp16_subnormal_operands_is_bounded() -> None:
    """float16 subnormals (below 2**-14) are normal float32 numbers, so the GEMM's float32
    subnormal test does not see them; the flushing term must still count them: the bound at
    every element is at least what dropping them can lose."""
    g = torch.Generator().manual_seed(3)
    a = (torch.randn(32, 64, generator=g) * 2.0**-12).half()  # small normals: Higham's term
    a[:, :16] = (torch.randn(32, 16, generator=g) * 2.0**-16).half()  # alone is far below them
    assert (a[:, :16].abs() < 2.0**-14).all() and (a[:, :16] != 0).any()  # float16 subnormals
    b = torch.randn(64, 24, generator=g).half()
    outs, em = emulate(aten.mm.default, a, b)
    assert judge(to_numpy(outs[0]), em[0]).verdict in ("identical", "bounded")
    an, bn = a.double().numpy(), b.double().numpy()
    lost = np.abs(an[:, :16]) @ np.abs(bn[:16, :])  # what flushing the subnormal inputs loses
    bounds = em[0].bounds_at(np.arange(32 * 24))
    assert bounds is not None
    assert (bounds[1] >= lost.reshape(-1)).all()


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_subnormal_test_on_bits_agrees_with_magnitudes(name: str) -> None:
    """The GEMM's subnormal test reads exponent fields; it must say what comparing the
    magnitudes with the smallest normal says (float32's, and the format's own)."""
    from fpemu.validate.ops._num import dtype  # noqa: PLC0415

    rng = np.random.default_rng(5)
    own_tiny = {"float32": 2.0**-126, "bfloat16": 2.0**-126, "float16": 2.0**-14}[name]
    for scale in (1.0, 1e-5, 2.0**-16, 2.0**-20, 1e-38, 1e-40, 1e-44, 0.0):
        x = (rng.standard_normal(500) * scale).astype(np.float32).astype(dtype(name))
        x[:3] = np.array([0.0, -0.0, 1.0], np.float32).astype(dtype(name))
        m = np.abs(x.astype(np.float64))
        has_f32 = bool(((m > 0) & (m < 2.0**-126)).any())
        has_own = bool(((m > 0) & (m < own_tiny)).any())
        assert matmul._subnormal(x) == has_f32, scale
        assert matmul._subnormal(x, own=True) == has_own, scale


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_subnormal_test_at_the_edges(name: str) -> None:
    """The words next to the subnormal range: zeros, the smallest normal, infinities and NaN
    are not subnormals; the smallest and the largest subnormal are (of either sign)."""
    from fpemu.validate.ops._num import dtype  # noqa: PLC0415

    dt = dtype(name)
    view = "u4" if name == "float32" else "u2"
    top = {"float32": 0x007FFFFF, "bfloat16": 0x007F, "float16": 0x03FF}[name]
    sign = 0x80000000 if name == "float32" else 0x8000
    inf = {"float32": 0x7F800000, "bfloat16": 0x7F80, "float16": 0x7C00}[name]
    plain = np.array([0, sign, top + 1, (top + 1) | sign, inf, inf | sign, inf | 1, inf | 0x40],
                     view).view(dt)  # fmt: skip
    assert not matmul._subnormal(plain, own=True)
    for word in (1, top, 1 | sign, top | sign):
        x = plain.copy()
        x.view(view)[3] = word
        assert matmul._subnormal(x, own=True), hex(word)
        if name != "float16":  # float16's subnormals are normal float32 numbers
            assert matmul._subnormal(x), hex(word)
