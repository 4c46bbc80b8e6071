"""fpemu.validate.ops.activations against torch 2.13's CPU kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.validate.ops import (  # noqa: E402
    Call,
    _onednn,
    lookup,
    names,
)
from fpemu.validate.ops._erf import ERF64_ERR, erf64  # noqa: E402
from fpemu.validate.ops._num import (  # noqa: E402
    to,
    ulp,
)
from fpemu.validate.ops.gelu import gelu  # noqa: E402
from fpemu.validate.watch.convert import to_numpy  # noqa: E402
from fpemu.validate.watch.verdict import judge  # noqa: E402
from tests.ops_nn_util import check, inputs, rerun, specials  # noqa: E402
from tests.watch_ops_util import (  # noqa: E402
    capability,
    emulate,
    one_ulp_off,
)

aten = torch.ops.aten
LOWF = ("float32", "bfloat16", "float16")
N = 2000


def xs(name: str, seed: int) -> object:
    """Random values plus a dense sweep of the tails where the float32 formulas cancel."""
    sweep = torch.linspace(-12, 12, 1537, dtype=torch.float64).to(getattr(torch, name))
    return torch.cat([inputs(name, N, seed=seed), sweep])


@pytest.mark.parametrize("name", (*LOWF, "float64"))
def test_selections_exact(name: str) -> None:
    x, g = xs(name, 1), xs(name, 2)
    check(aten.relu.default, x)
    check(aten.relu_.default, x.clone())
    check(aten.threshold_backward.default, g, x, 0)
    check(aten.threshold_backward.default, g, x, 0.1)
    for slope in (0.01, 0.2, 1 / 3):
        check(aten.leaky_relu.default, x, slope)
        check(aten.leaky_relu_backward.default, g, x, slope, False)
    check(aten.hardtanh.default, x, -1.0, 1.0)
    check(aten.hardtanh.default, x, 0.0, 6.0)
    check(aten.hardtanh_backward.default, g, x, -1.0, 1.0)


@pytest.mark.parametrize("name", LOWF)
def test_sigmoid_tanh_backward(name: str) -> None:
    g = xs(name, 3)
    y = torch.sigmoid(xs(name, 4))
    check(aten.sigmoid_backward.default, g, y)
    fused = name == "float32" and capability() != "default"
    check(aten.tanh_backward.default, g, torch.tanh(xs(name, 5)),
          claim="bounded" if fused else "exact")  # fmt: skip


def test_float16_sigmoid_backward_rounds_per_op() -> None:
    """E1: one rounding would differ from torch on many elements; per-op rounding on none."""

    g = torch.randn(20000, dtype=torch.float16)
    y = torch.rand(20000, dtype=torch.float16)
    t = aten.sigmoid_backward.default(g, y).numpy()
    gf, yf = g.float().numpy(), y.float().numpy()
    once = to((gf * (1 - yf)) * yf, "float16")
    assert np.count_nonzero(once != t) > 100
    check(aten.sigmoid_backward.default, g, y)


@pytest.mark.parametrize("name", LOWF)
def test_transcendentals_bounded(name: str) -> None:
    x, g = xs(name, 6), xs(name, 7)
    out = []
    for op in (aten.sigmoid.default, aten.tanh.default, aten.silu.default):
        out += check(op, x, claim="bounded")
    # erf-GELU: contiguous, >= 2 elements: oneDNN's minimax GELU, exact; else ATen: bounded
    check(aten.gelu.default, x)
    check(aten.gelu.default, x[:3556].reshape(-1, 7).t(), claim="bounded")
    for v in (-3.25, 0.5, 2.75):
        check(aten.gelu.default, torch.tensor([v], dtype=x.dtype), claim="bounded")
    out += check(aten.gelu.default, x, approximate="tanh", claim="bounded")
    out += check(aten.gelu_backward.default, g, x, claim="bounded")
    out += check(aten.gelu_backward.default, g, x, approximate="tanh", claim="bounded")
    out += check(aten.silu_backward.default, g, x, claim="bounded")
    assert "identical" in out or "bounded" in out


@pytest.mark.parametrize("name", LOWF)
def test_bounds_are_tight(name: str) -> None:
    """16-bit formats: most elements admit one value only, and a result one ulp off there is
    'differs'; float32: the bound's median width stays within a few dozen ulps."""

    x = torch.linspace(0.5, 3, 1000, dtype=torch.float64).to(getattr(torch, name))
    g = torch.linspace(-2, 2, 1000, dtype=torch.float64).to(getattr(torch, name))
    # float32: the same values strided (contiguous ones run oneDNN's kernel, emulated exactly)
    xs = torch.stack([x, x], 1)[:, 0] if name == "float32" else x
    cases = [(aten.gelu.default, (x,), {"approximate": "tanh"}),
             (aten.sigmoid.default, (x,), {}), (aten.silu.default, (x,), {}),
             (aten.gelu_backward.default, (g, xs), {}), (aten.silu_backward.default, (g, x), {}),
             (aten.gelu_backward.default, (g, x), {"approximate": "tanh"})]  # fmt: skip
    for op, args, kw in cases:
        outs, em = emulate(op, *args, **kw)
        t, e = to_numpy(outs[0]), em[0]
        assert e is not None
        bounds = e.bounds_at(np.arange(t.size))  # eager or lazy: the bound at every element
        assert bounds is not None
        center, err = bounds[0].reshape(t.shape), bounds[1].reshape(t.shape)
        single = np.flatnonzero(err == 0)
        if name == "float32":
            # float32: the bound is a few ulps wide (erf's A&S error, the running bound)
            width = 2 * err / ulp(center, name)
            assert np.median(width) <= 80, (str(op), kw, np.median(width))
            continue
        assert single.size / t.size > 0.7, (str(op), kw, single.size / t.size)
        assert judge(one_ulp_off(t, int(single[len(single) // 2])), e).verdict == "differs"


@pytest.mark.parametrize("name", ["bfloat16", "float16"])
def test_large_16_bit_tensors_by_distinct_values(name: str) -> None:
    """Above 8192 elements a 16-bit input is emulated once per distinct value (``by_bits``):
    the Out equals the element-by-element one (chunks of 4096), and torch stays within it."""
    x = (torch.randn(40000, dtype=torch.float64) * 3).to(getattr(torch, name))
    xn = to_numpy(x)
    for op, kw in ((aten.gelu.default, {}), (aten.gelu.default, {"approximate": "tanh"}),
                   (aten.sigmoid.default, {}), (aten.silu.default, {}), (aten.tanh.default, {}),
                   (aten.exp.default, {})):  # fmt: skip
        emulation = lookup(str(op))
        assert emulation is not None
        whole = emulation(Call(str(op), (xn,), kw, (name,)))[0]
        parts = [emulation(Call(str(op), (xn[i : i + 4096],), kw, (name,)))[0]
                 for i in range(0, xn.size, 4096)]  # fmt: skip
        assert whole is not None and all(p is not None for p in parts)
        for field in ("value", "center", "err"):
            a = np.broadcast_to(np.asarray(getattr(whole, field), np.float64), xn.shape)
            b = np.concatenate([np.broadcast_to(np.asarray(getattr(p, field), np.float64),
                                                (min(4096, xn.size - 4096 * k),))
                                for k, p in enumerate(parts)])  # fmt: skip
            assert np.array_equal(a, b, equal_nan=True), (str(op), field)
        check(op, x, claim="bounded", **kw)
    g = (torch.randn(40000, dtype=torch.float64)).to(getattr(torch, name))
    gn = to_numpy(g)
    for op, kw in ((aten.gelu_backward.default, {}),
                   (aten.gelu_backward.default, {"approximate": "tanh"}),
                   (aten.silu_backward.default, {})):  # fmt: skip
        emulation = lookup(str(op))
        assert emulation is not None
        whole = emulation(Call(str(op), (gn, xn), kw, (name,)))[0]
        parts = [emulation(Call(str(op), (gn[i : i + 4096], xn[i : i + 4096]), kw, (name,)))[0]
                 for i in range(0, xn.size, 4096)]  # fmt: skip
        assert whole is not None and all(p is not None for p in parts)
        whole_b = whole.bounds_at(np.arange(xn.size))  # lazy bounds: asked for everywhere
        parts_b = [p.bounds_at(np.arange(p.value.size)) for p in parts if p is not None]
        assert whole_b is not None and all(b is not None for b in parts_b)
        for k, field in enumerate(("center", "err")):
            a = whole_b[k]
            b = np.concatenate([pb[k] for pb in parts_b if pb is not None])
            assert np.array_equal(a, b, equal_nan=True), (str(op), field)
        a = np.asarray(whole.value, np.float64).ravel()
        b = np.concatenate(
            [np.asarray(p.value, np.float64).ravel() for p in parts if p is not None]
        )
        assert np.array_equal(a, b, equal_nan=True), (str(op), "value")
        check(op, g, x, claim="bounded", **kw)


def test_erf64_against_math_erf() -> None:
    """The vectorised float64 erf used for the centers is within ERF64_ERR of math.erf."""
    z = np.concatenate([np.linspace(-12, 12, 240001), np.logspace(-300, 1, 2000),
                        -np.logspace(-300, 1, 2000), [0.0, -0.0, np.inf, -np.inf]])  # fmt: skip
    ref = np.array([math.erf(v) for v in z.tolist()])
    assert np.max(np.abs(erf64(z) - ref)) < ERF64_ERR
    assert np.isnan(erf64(np.array([np.nan]))[0])


def test_gelu_without_avx512_onednn_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without oneDNN's AVX512 kernel the erf-GELU of a contiguous tensor is judged by the
    erf-formula bound (tests/test_ops_gelu_isa.py checks it against oneDNN's AVX2 kernel)."""
    monkeypatch.setattr(_onednn, "available", lambda: False)
    out = gelu(Call("aten.gelu.default", (np.float32([1.0, 2.0]),), {}, ("float32",)))[0]
    assert out is not None and not out.exact


def test_float64_transcendental_not_emulated() -> None:

    with pytest.raises(NotImplementedError, match="float64"):
        gelu(Call("aten.gelu.default", (np.float64([1.0]),), {}, ("float64",)))


def test_registered() -> None:
    have = set(names())
    for op in ("aten.relu.default", "aten.relu_.default", "aten.threshold_backward.default",
               "aten.gelu.default", "aten.gelu_backward.default", "aten.silu.default",
               "aten.silu_backward.default", "aten.sigmoid.default",
               "aten.sigmoid_backward.default", "aten.tanh.default", "aten.tanh_backward.default",
               "aten.leaky_relu.default", "aten.leaky_relu_backward.default",
               "aten.hardtanh.default", "aten.hardtanh_backward.default"):  # fmt: skip
        assert op in have, op


def test_capabilities() -> None:
    """The same claims hold under ATEN_CPU_CAPABILITY=default and avx2 (subprocesses)."""
    rerun(__file__)


def test_value_only_parts_equal_the_bounded_ones() -> None:
    """The backwards' x-parts computed without their bound (float32 inputs: the bound is
    computed only where torch differs) give the same float32 bits as with it."""
    from fpemu.validate.ops import activations as act  # noqa: PLC0415
    from fpemu.validate.ops import gelu as g  # noqa: PLC0415

    rng = np.random.default_rng(3)
    special = [0.0, -0.0, 1e-40, -1e-40, np.inf, -np.inf, np.nan, 88.0, -88.0]
    x = np.concatenate([rng.standard_normal(5000) * 4, rng.standard_normal(500) * 40, special])
    x = x.astype(np.float32)
    pairs = [(act._silu_s, act._silu_s_value), (act._silu_q, act._silu_q_value),
             (g._gelu_bw_erf, g._gelu_bw_erf_value), (g._gelu_bw_tanh, g._gelu_bw_tanh_value),
             (g._gelu_bw_erf, lambda t: g._erf_once(t)[0])]  # fmt: skip
    for fn, value in pairs:
        with np.errstate(all="ignore"):  # inf and NaN inputs are data (the emulations run so)
            a, b = fn(x)[0], value(x)
        assert a.dtype == b.dtype == np.float32
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), fn.__name__


def _bwd_x(seed: int) -> np.ndarray:
    """float32 GELU-backward inputs: random at several scales, the tails where oneDNN's exp
    reaches its zero threshold (|x| ~ 13.2: 2**(n-1) built as the bits 0), tiny, subnormal and
    huge values (R*R overflows), and the specials."""
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal(20001) * 2, rng.standard_normal(5000) * 6,
             rng.uniform(-20, 20, 5000), rng.standard_normal(2000) * 1e-3,
             rng.uniform(13.1, 13.3, 3000), -rng.uniform(13.1, 13.3, 3000),
             rng.uniform(-1, 1, 500) * 1e-39, rng.uniform(-1, 1, 500) * 3e38,
             specials("float32")]  # fmt: skip
    return np.concatenate(parts).astype(np.float32)


def test_gelu_backward_float32_onednn_exact() -> None:
    """A contiguous float32 ``x`` of two or more elements runs oneDNN's GELU backward: emulated
    bit for bit (``_onednn_bwd``) wherever its kernel is known, and a one-ulp fault is
    'differs' (``check``); any layout of ``dy``, any length (the JIT's vector tails)."""
    from fpemu.validate.ops import _onednn_bwd  # noqa: PLC0415
    from fpemu.validate.ops.gelu import _gelu_bw_erf_value  # noqa: PLC0415

    claim = "exact" if _onednn_bwd.kernel_fused() is not None else "bounded"
    x = _bwd_x(11)
    rng = np.random.default_rng(12)
    g = rng.standard_normal(x.size).astype(np.float32)
    xt, gt = torch.from_numpy(x), torch.from_numpy(g)
    assert check(aten.gelu_backward.default, gt, xt, claim=claim)
    # the kernel is not the correctly rounded formula: the exact claim is a finding
    d = aten.gelu_backward.default(torch.ones_like(xt), xt).numpy()
    with np.errstate(all="ignore"):
        plain = _gelu_bw_erf_value(x)
    fin = np.isfinite(plain)
    assert np.count_nonzero(d[fin].view(np.uint32) != plain[fin].view(np.uint32)) > x.size // 4
    for n in range(2, 70):
        check(aten.gelu_backward.default, gt[:n], xt[100 : 100 + n], claim=claim)
    x2 = xt[: 300 * 64].reshape(300, 64)
    g2 = gt[: 300 * 64].reshape(64, 300)
    check(aten.gelu_backward.default, g2.t(), x2, claim=claim)  # strided dy: still oneDNN
    check(aten.gelu_backward.default, gt[:64].expand(300, 64), x2, claim=claim)
    x1 = xt[:300].reshape(300, 1)[:, :1].reshape(1, 300)  # size-1 dims: contiguous for both
    assert x1.is_contiguous()
    check(aten.gelu_backward.default, gt[:300].reshape(1, 300), x1, claim=claim)


def test_gelu_backward_float32_aten_path_bounded() -> None:
    """A strided or one-element float32 ``x`` runs ATen's kernel (A&S/Sleef or libm): bounded,
    never claimed exact."""
    x = torch.from_numpy(_bwd_x(13)[:20000].reshape(-1, 2)).t()[0]
    g = torch.randn(x.shape, dtype=torch.float32)
    xe = x[:64].reshape(1, 64).expand(50, 64)  # stride 0: not contiguous either
    for args in ((g, x), (g[:1], x[:1]), (g[: 50 * 64].reshape(50, 64), xe)):
        _, em = emulate(aten.gelu_backward.default, *args)
        assert em[0] is not None and not em[0].exact
        check(aten.gelu_backward.default, *args, claim="bounded")


def test_gelu_backward_float32_planted_faults() -> None:
    """One-ulp faults planted anywhere in a oneDNN float32 gelu_backward are 'differs'."""
    from fpemu.validate.ops import _onednn_bwd  # noqa: PLC0415

    if _onednn_bwd.kernel_fused() is None:
        pytest.skip("oneDNN's GELU-backward kernel is not known on this CPU")
    x = torch.from_numpy(_bwd_x(14))
    g = torch.randn(x.shape, dtype=torch.float32)
    outs, em = emulate(aten.gelu_backward.default, g, x)
    t, e = to_numpy(outs[0]), em[0]
    assert e is not None and e.exact and judge(t, e).verdict == "identical"
    fin = np.flatnonzero(np.isfinite(t) & (t != 0))
    for i in [*fin[:: max(1, fin.size // 40)].tolist(), int(fin[-1])]:
        assert judge(one_ulp_off(t, i), e).verdict == "differs", i


def test_gelu_float32_large_in_blocks() -> None:
    """A float32 erf-GELU larger than a block (oneDNN's kernel emulated block by block) is
    identical to torch, a one-ulp fault 'differs' (``check``), 1-D and 3-D."""
    claim = "exact" if _onednn.available() else "bounded"
    x = torch.from_numpy(_bwd_x(16))
    check(aten.gelu.default, x, claim=claim)
    check(aten.gelu.default, x[: 6 * 64 * 100].reshape(6, 64, 100), claim=claim)


def test_erf_blocks_same_bits() -> None:
    """erf64 and erf_center of an array larger than a block equal their values on small
    pieces bit for bit (the blocked path is elementwise), specials included."""
    from fpemu.validate.ops import _erf  # noqa: PLC0415

    z = (_bwd_x(17) * np.float32(math.sqrt(0.5))).astype(np.float32)
    assert z.size > 2 * _erf.BLOCK
    for fn in (_erf.erf64, _erf.erf_center):
        whole = fn(z)
        parts = np.concatenate([fn(z[i : i + 1000]) for i in range(0, z.size, 1000)])
        assert np.array_equal(whole.view(np.uint64), parts.view(np.uint64)), fn.__name__
        assert np.array_equal(fn(z.reshape(-1, 1)).reshape(-1).view(np.uint64),
                              whole.view(np.uint64))  # fmt: skip


def test_gelu_with_mkldnn_disabled_is_judged_on_atens_kernels() -> None:
    """``torch.backends.mkldnn.enabled = False`` sends GELU to ATen's own kernels: the watch
    must judge them so (bounded), not against oneDNN's bit-exact emulation (a false alarm)."""
    import warnings  # noqa: PLC0415

    import fpemu  # noqa: PLC0415

    x = torch.randn(128, 96, generator=torch.Generator().manual_seed(0), requires_grad=True)
    dy = torch.randn(128, 96, generator=torch.Generator().manual_seed(1))
    verdicts = {}
    for enabled in (True, False):
        with warnings.catch_warnings():  # torch warns about Intel GPUs when the flag is set
            warnings.simplefilter("ignore", UserWarning)
            with torch.backends.mkldnn.flags(enabled=enabled), fpemu.watch() as w:
                torch.nn.functional.gelu(x).backward(dy)
                torch.nn.functional.gelu(x.detach().bfloat16())
        verdicts[enabled] = [r["verdict"] for r in w.report().rows if "gelu" in r["op"]]
    assert len(verdicts[False]) == 3 and "differs" not in verdicts[False]
    assert "bounded" in verdicts[False]  # ATen's float32 erf is not oneDNN's: bounded
    assert "differs" not in verdicts[True]
