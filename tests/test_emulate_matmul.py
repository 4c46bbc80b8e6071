"""fpemu.emulate: every matmul-class op, forward and backward, equals fpemu.matmul of the
policy-rounded operands under the named model, bit for bit.

The operands' rounding is NumPy's / ml_dtypes' float32 -> float16 / bfloat16 conversion (RNE,
not fpemu's); the GEMM is fpemu.matmul under the model (the issue's definition of the emulated
value). Bits are compared as unsigned integers.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import fpemu  # noqa: E402
from fpemu.validate.ops import _exact  # noqa: E402
from fpemu.validate.ops.matmul import exact32  # noqa: E402
from reference.dot import exact_dot  # noqa: E402
from reference.rounding import round_value  # noqa: E402
from reference.spec import FLOAT32  # noqa: E402
from reference.value import to_float  # noqa: E402

LOW = {"float16": (torch.float16, np.float16), "bfloat16": (torch.bfloat16, ml_dtypes.bfloat16)}
#: (policy, model, low dtype): each model takes that input format
CASES = [
    ("torch_cuda_fp16", "h100", "float16"),
    ("torch_cuda_bf16", "sm90.wgmma.bf16.f32", "bfloat16"),
    ("torch_cuda_fp16", "cdna3.mfma.f16.f32", "float16"),
    ("torch_cuda_bf16", "a100", "bfloat16"),
    ("torch_cuda_fp16", "sequential", "float16"),
]


def bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def tnp(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def low(t: torch.Tensor, name: str) -> np.ndarray:
    """float32 tensor -> NumPy's RNE rounding to ``name`` (the independent cast)."""
    return tnp(t).astype(LOW[name][1])


def ref(a: np.ndarray, b: np.ndarray, name: str, model: str, c: np.ndarray | None = None) -> Any:
    r = fpemu.matmul(
        a.astype(np.float32), b.astype(np.float32), fmt=name, acc="float32", out=name,
        c=None if c is None else c.astype(np.float64), model=model,
    )  # fmt: skip
    return np.asarray(r).astype(LOW[name][1])


def data(*shapes: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # magnitudes over 2**-8..2**3 (finite in fp16): alignment and rounding in blocks matter
    return [
        torch.randn(s, generator=g) * torch.exp2(torch.randint(-8, 4, s, generator=g).float())
        for s in shapes
    ]


@pytest.mark.parametrize(("policy", "model", "name"), CASES)
@pytest.mark.parametrize("how", ["region", "autocast=True"])
def test_linear_forward_and_backward_gemms(policy: str, model: str, name: str, how: str) -> None:
    x, w, b, g = data((6, 40), (5, 40), (5,), (6, 5))
    x.requires_grad_(True)
    w.requires_grad_(True)
    dt = LOW[name][0]
    with fpemu.emulate(policy=policy, model=model, autocast=how != "region") as em:
        if how == "region":
            with torch.autocast("cuda"):
                y = F.linear(x, w, b)
        else:
            y = F.linear(x, w, b)
        y.backward(g.to(dt))
    assert y.dtype == dt and torch.isfinite(y).all()
    x_, w_, b_, g_ = (low(t, name) for t in (x, w, b, g))
    assert (bits(tnp(y)) == bits(ref(x_, w_.T, name, model, c=b_))).all()
    # backward GEMMs: dL/dx = g @ W, dL/dW = g^T @ x, in the low dtype, widened to float32
    gx = ref(g_, w_, name, model).astype(np.float32)
    gw = ref(g_.T, x_, name, model).astype(np.float32)
    assert (bits(tnp(x.grad)) == bits(gx)).all()
    assert (bits(tnp(w.grad)) == bits(gw)).all()
    assert em.emulated["aten.addmm.default"] == 1 and em.emulated["aten.mm.default"] == 2


@pytest.mark.parametrize(("policy", "model", "name"), CASES[:3])
def test_batched_linear_matmul_bmm_baddbmm(policy: str, model: str, name: str) -> None:
    x3, w, b, p, q, c = data((2, 3, 24), (7, 24), (7,), (4, 5, 24), (4, 24, 6), (4, 5, 6))
    with fpemu.emulate(policy=policy, model=model, autocast=True) as em:
        y3 = F.linear(x3, w, b)  # flattened to one addmm
        z = p @ q  # matmul -> bmm
        zb = torch.bmm(p, q)
        zz = torch.baddbmm(c, p, q)
        m = torch.mm(p[0], q[0])
        am = torch.addmm(c[0], p[0], q[0])
    x_, w_, b_, p_, q_, c_ = (low(t, name) for t in (x3, w, b, p, q, c))
    want3 = ref(x_.reshape(6, 24), w_.T, name, model, c=b_).reshape(2, 3, 7)
    assert (bits(tnp(y3)) == bits(want3)).all()
    assert (bits(tnp(z)) == bits(ref(p_, q_, name, model))).all()
    assert (bits(tnp(zb)) == bits(ref(p_, q_, name, model))).all()
    assert (bits(tnp(zz)) == bits(ref(p_, q_, name, model, c=c_))).all()
    assert (bits(tnp(m)) == bits(ref(p_[0], q_[0], name, model))).all()
    assert (bits(tnp(am)) == bits(ref(p_[0], q_[0], name, model, c=c_[0]))).all()
    for op in ("aten.addmm.default", "aten.bmm.default", "aten.baddbmm.default"):
        assert em.emulated[op] >= 1


def test_bmm_backward_gemms() -> None:
    p, q, g = data((3, 5, 16), (3, 16, 4), (3, 5, 4), seed=3)
    p.requires_grad_(True)
    q.requires_grad_(True)
    with fpemu.emulate(policy="torch_cuda_bf16", model="h100", autocast=True):
        z = torch.bmm(p, q)
        z.backward(g.to(torch.bfloat16))
    p_, q_, g_ = (low(t, "bfloat16") for t in (p, q, g))
    want_p = ref(g_, np.swapaxes(q_, 1, 2), "bfloat16", "h100").astype(np.float32)
    want_q = ref(np.swapaxes(p_, 1, 2), g_, "bfloat16", "h100").astype(np.float32)
    assert (bits(tnp(p.grad)) == bits(want_p)).all()
    assert (bits(tnp(q.grad)) == bits(want_q)).all()


def test_a_model_differs_from_another() -> None:
    """The test above can fail: h100's 16-product blocks and a sequential chain give other
    bits on these operands (the models are not interchangeable)."""
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(16, 256, generator=g), torch.randn(16, 256, generator=g)
    outs = []
    for model in ("h100", "sequential"):
        with fpemu.emulate(policy="torch_cuda_fp16", model=model, autocast=True):
            outs.append(bits(tnp(F.linear(x, w))))
    assert np.isfinite(tnp(F.linear(x, w))).all()
    assert (outs[0] != outs[1]).any()


def test_float32_program_without_region() -> None:
    """No autocast region and autocast=False: float32 stays float32 (no casts), and the GEMM
    is a float32 FMA chain (sequential), the model h100 taking no float32 inputs."""
    x, w = data((4, 33), (3, 33), seed=1)
    with fpemu.emulate(policy="torch_cuda_fp16", model="h100") as em:
        y = F.linear(x, w)
    assert y.dtype == torch.float32 and em.counts["casts"] == 0
    want = fpemu.matmul(tnp(x), tnp(w).T, fmt="float32", acc="float32", model="sequential")
    assert (bits(tnp(y)) == bits(np.asarray(want, np.float32))).all()


def _oracle32(a: np.ndarray, b: np.ndarray, c: np.ndarray | None) -> np.ndarray:
    """RN32 of the exact ``c + a @ b``, by reference/ (Fractions), element by element."""
    out = np.empty((a.shape[0], b.shape[1]), np.float32)
    for i in range(a.shape[0]):
        for j in range(b.shape[1]):
            x = exact_dot(list(map(float, a[i])), list(map(float, b[:, j])),
                          None if c is None else float(c[j]))  # fmt: skip
            v = to_float(round_value(x, FLOAT32, "rne"))
            if x == 0:  # IEEE: an exact zero sum is +0 unless every term (c included) is -0
                terms = [float(p) for p in a[i].astype(np.float64) * b[:, j]]
                neg = c is not None and all(np.signbit([*terms, float(c[j])]))
                v = -0.0 if neg else 0.0
            out[i, j] = v
    return out


def _adversarial(name: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Operands whose exact sums sit on float32 ties and need every term: big terms that
    cancel, a float32 midpoint made of low-precision terms, tiny terms breaking the tie,
    products below float32's normal range, +-0."""
    rng = np.random.default_rng(seed)
    lowt = LOW[name][1]
    k = 48
    a = (rng.standard_normal((12, k)) * np.exp2(rng.integers(-5, 3, (12, k)))).astype(lowt)
    b = (rng.standard_normal((k, 10)) * np.exp2(rng.integers(-5, 3, (k, 10)))).astype(lowt)
    a[0, :4], b[:4, 0] = [2.0**10, 1.0, -(2.0**10), 2.0**-13], [1, 2.0**-14, 1, 1]  # tie + tiny
    a[1, :3], b[:3, 1] = [2.0**12, 1.0, 0.0], [1.0, 2.0**-12, 0.0]  # a float32 midpoint
    a[1, 3:], b[3:, 1] = 0, 0
    a[2], b[:, 2] = -0.0, 1.0  # all products -0
    a[3, :] = a[3, :] * (2.0**-10 if name == "float16" else 2.0**-60)  # tiny products
    c = (rng.standard_normal(10) * 4).astype(lowt)
    c[1], c[2] = 0.0, -0.0
    return a, b, c


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("seed", [0, 1])
def test_fast_is_the_exact_sum_rounded_once_to_float32(name: str, seed: int) -> None:
    """model="fast": RN32 of the exact c + a b (reference/ Fractions), then the output dtype;
    the same bits whatever order a BLAS would take."""
    a, b, c = _adversarial(name, seed)
    ta, tb, tc = (torch.from_numpy(v.astype(np.float32)) for v in (a, b, c))
    with fpemu.emulate(policy=f"torch_cuda_{'fp16' if name == 'float16' else 'bf16'}",
                       model="fast", autocast=True):  # fmt: skip
        y = torch.addmm(tc, ta, tb)
        z = torch.mm(ta, tb)
    want_y = _oracle32(a, b, c).astype(LOW[name][1])
    want_z = _oracle32(a, b, None).astype(LOW[name][1])
    assert (bits(tnp(y)) == bits(want_y)).all()
    assert (bits(tnp(z)) == bits(want_z)).all()


def test_exact32_float32_inputs_against_the_oracle() -> None:
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((9, 40)) * np.exp2(rng.integers(-30, 30, (9, 40)))).astype(np.float32)
    b = (rng.standard_normal((40, 7)) * np.exp2(rng.integers(-30, 30, (40, 7)))).astype(np.float32)
    b[:, 0] = a[0] * 0 + 1  # column 0: a row sum with huge cancellation
    a[0, 1::2] = -a[0, ::2][: a[0, 1::2].size]
    assert (bits(exact32(a, b)) == bits(_oracle32(a, b, None))).all()


def test_exact32_breaks_a_float64_tie_by_the_exact_residual() -> None:
    """1 + 2**-24 + 2**-80: float64 (fsum too) gives 1 + 2**-24, a float32 tie that rounds to
    1 by itself; the exact sum is above it, so RN32 is 1 + 2**-23 (and a sum of ties is even)."""
    a = np.float32([[1.0, 2.0**-24, 2.0**-80], [1.0, 2.0**-24, 0.0], [1.0, 2.0**-24, -(2.0**-80)]])
    got = exact32(a, np.ones((3, 1), np.float32))[:, 0]
    assert got.tolist() == [1.0 + 2.0**-23, 1.0, 1.0]
    assert (bits(got) == bits(_oracle32(a, np.ones((3, 1), np.float32), None)[:, 0])).all()


def test_exact32_non_finite_and_huge_magnitudes() -> None:
    """inf/NaN follow IEEE (0 * inf and inf - inf are NaN); a magnitude GEMM that overflows
    float32 (2**100 * 2**100) sends the element to the exact path."""
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    a = np.float32([[1.0, inf], [0.0, inf], [1.0, nan], [inf, inf], [2.0**100, 1.0]])
    b = np.float32([[1.0, 1.0], [1.0, -1.0]])
    got = exact32(a, b)
    assert np.isnan(got[2]).all() and np.isnan(got[3, 1])
    assert got[0].tolist() == [np.inf, -np.inf] and got[3, 0] == np.inf
    a2 = np.float32([[2.0**100, 2.0**-20], [1.0, 1.0]])
    b3 = np.float32([[2.0**100, 1.0], [1.0, 1.0]])
    assert exact32(a2, b3)[0].tolist() == [np.inf, 2.0**100]  # 2**200 overflows float32


def test_mv_and_dot() -> None:
    """mv is on CUDA's lower list; dot is on its promote list (float16 inputs stay float16)."""
    m, v, u = data((6, 40), (40,), (40,), seed=9)
    with fpemu.emulate(policy="torch_cuda_fp16", model="h100", autocast=True) as em:
        y = torch.mv(m, v)
        d = torch.dot(v.half(), u.half())
        d32 = torch.dot(v, u)  # promote: float32 stays float32 (an FMA chain on CUDA cores)
    m_, v_, u_ = (low(t, "float16") for t in (m, v, u))
    assert y.dtype == torch.float16 and d.dtype == torch.float16 and d32.dtype == torch.float32
    assert (bits(tnp(y)) == bits(ref(m_, v_[:, None], "float16", "h100")[:, 0])).all()
    assert bits(tnp(d)) == bits(ref(v_[None, :], u_[:, None], "float16", "h100")[0, 0])
    want32 = fpemu.matmul(tnp(v)[None, :], tnp(u)[:, None], fmt="float32", acc="float32",
                          model="sequential")  # fmt: skip
    assert bits(tnp(d32)) == bits(np.asarray(want32, np.float32)[0, 0])
    assert em.emulated["aten.mv.default"] == 1 and em.emulated["aten.dot.default"] == 2


def test_exact32_tiny_products_and_zero_signs() -> None:
    """Products below float32's range (their float32 magnitudes underflow to 0): a sum that
    rounds to a float32 subnormal, one that rounds to -0, an exact cancellation to +0, and a
    zero row, against the Fraction oracle."""
    t = 2.0**-80
    a = np.float32([[t, t, t], [-t, -t, 0.0], [t, -t, 0.0], [0.0, 0.0, 0.0],
                    [1.0, 2.0**-60, -1.0], [-(2.0**-82), 0.0, 0.0]])  # fmt: skip
    b = np.float32([[2.0**-69, 0.0], [2.0**-69, 1.0], [2.0**-69, 0.0]]).astype(np.float32)
    got = exact32(a, b)
    want = _oracle32(a, b, None)
    assert (bits(got) == bits(want)).all()
    assert got[0, 0] == np.float32(3 * 2.0**-149) and got[1, 0] == np.float32(-(2.0**-148))
    assert got[5, 0] == 0 and np.signbit(got[5, 0])  # -2**-151 rounds to -0
    assert got[2, 0] == 0 and not np.signbit(got[2, 0])  # t - t: +0
    assert got[4, 1] == np.float32(2.0**-60)  # (1 + 2**-60) - 1 in float64 would be 0


def _paths_case(name: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows for each of exact32's tests: narrow-range rows (a float64 sum is exact: the grid
    test), wide-range rows (the bound test), a float32 midpoint made of low-precision terms,
    and rows beyond the grid test, where a float64 sum taken big terms first is not exact."""
    rng = np.random.default_rng(seed)
    k, n = 64, 12
    a = rng.standard_normal((16, k)) * np.exp2(rng.integers(-3, 3, (16, k)))
    b = rng.standard_normal((k, n)) * np.exp2(rng.integers(-3, 3, (k, n)))
    a[8:12] *= np.exp2(rng.integers(-14, 10, (4, k)))  # wide rows
    b[:, 8:] *= np.exp2(rng.integers(-14, 10, (k, 4)))
    c = rng.standard_normal(n) * 2
    a[12], b[:, 0] = 0.0, 0.0
    a[12, :2], b[:2, 0] = [1.0, 1.0], [1.0, 2.0**-24]  # 1 + 2**-24: a float32 tie, even: 1
    # 16 B + 16 t - 16 B with t = ((1 + u) sc)**2 (its last bit 2**-2(p+e)) and B a big
    # product, and zeros: a float64 sum that adds a t to a multiple of B drops t's last bits
    # (BLAS's lanes, index order); the bias -B is folded into the GEMM
    u, sc, b1, b2 = (2.0**-10, 2.0**-14, 2.0**8, 2.0**7) if name == "float16" else (
        2.0**-7, 1.0, 2.0**24, 2.0**23)  # fmt: skip
    a[13, :16], a[13, 16:32], a[13, 32:48], a[13, 48:] = b1, (1 + u) * sc, -b1, 0.0
    b[:16, 1], b[16:32, 1], b[32:48, 1] = b2, (1 + u) * sc, b2
    a[14], b[:, 2] = 0.0, 0.0
    a[14, :2], b[:2, 2] = [(1 + u) * sc, b1], [(1 + u) * sc, b2]
    c[2] = -b1 * b2
    # B + t - B with m just beyond the grid test's limit 2**(53 + q) (bfloat16: q = -14)
    h1, h2 = (b1, b2) if name == "float16" else (2.0**20, 2.0**19)
    a[15], b[:, 3] = 0.0, 0.0
    a[15, :3], b[:3, 3] = [h1, (1 + u) * sc, -h1], [h2, (1 + u) * sc, h2]
    lowt = LOW[name][1]
    return a.astype(lowt), b.astype(lowt), c.astype(lowt)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact32_every_path_against_the_oracle(
    name: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """exact32 (grid, bound and exact tests, the bias folded into the GEMM) against RN32 of
    the exact sum (reference/ Fractions); the data make a float64 sum rounded to float32
    wrong (the test can fail), and take some but not all elements to the exact path."""
    a, b, c = _paths_case(name, seed)
    taken: list[int] = []
    orig = _exact.exact_sums32

    def counting(terms: np.ndarray, **kw: Any) -> np.ndarray:
        taken.append(len(terms))
        return orig(terms, **kw)

    monkeypatch.setattr(_exact, "exact_sums32", counting)
    got_c, got = exact32(a, b, c), exact32(a, b)
    monkeypatch.undo()
    want_c, want = _oracle32(a, b, c), _oracle32(a, b, None)
    assert (bits(got_c) == bits(want_c)).all() and (bits(got) == bits(want)).all()
    assert 0 < sum(taken) < got.size + got_c.size  # the exact path: some elements, not all
    # c as a full matrix (not folded into the GEMM: the bound and exact tests with c)
    full = np.ascontiguousarray(np.broadcast_to(c, got_c.shape))
    assert (bits(exact32(a, b, full)) == bits(want_c)).all()
    # a float64 sum in index order (row 13), rounded to float32, is wrong here
    terms = a.astype(np.float64)[:, :, None] * b.astype(np.float64)[None, :, :]
    seq = np.cumsum(terms, axis=1)[:, -1].astype(np.float32)
    assert (bits(seq) != bits(want)).any()
    # batched (bmm): each matrix of the batch as above
    ab, bb = np.stack([a, a[::-1]]), np.stack([b, b[:, ::-1]])
    got_b = exact32(ab, bb)
    assert (bits(got_b[0]) == bits(want)).all()
    assert (bits(got_b[1]) == bits(_oracle32(a[::-1], b[:, ::-1], None))).all()


def test_a_failed_emulation_keeps_torchs_value() -> None:
    """The matmul family runs torch's meta kernel, not its CPU kernel; an emulation that
    refuses (alpha != 1 on a tensor-core model) is counted failed and torch's own value is
    returned (its CPU kernel then runs); under strict it raises. The views of a result are
    the result's memory (counted emulated, nothing computed)."""
    a, b, c = data((5, 24), (24, 6), (6,), seed=11)
    a, b, c = a.half(), b.half(), c.half()
    with fpemu.emulate(policy="torch_cuda_fp16", model="h100") as em:
        y = torch.addmm(c, a, b, alpha=2.0)
        yt = y.t()
    want = torch.addmm(c, a, b, alpha=2.0)
    assert (bits(tnp(y)) == bits(tnp(want))).all() and yt.data_ptr() == y.data_ptr()
    assert em.counts["failed"] == 1 and "alpha=2.0" in em.failed["aten.addmm.default"]
    assert em.emulated.get("aten.t.default") == 1
    with pytest.raises(ValueError, match="alpha"):
        with fpemu.emulate(policy="torch_cuda_fp16", model="h100", strict=True):
            torch.addmm(c, a, b, alpha=2.0)
