"""Array code takes its namespace from its input: proved on the CPU with a fake CuPy.

``tests/fake_cupy.py`` installs a second array namespace as ``sys.modules["cupy"]`` whose
arrays are not NumPy arrays and which, like CuPy, refuses implicit conversion to NumPy and
NumPy arrays mixed in. Running fpemu on those arrays must (1) stay on the fake "device", (2)
go through the fake namespace's functions, (3) never call ``numpy.<func>`` on device data, and
(4) give results bit-identical to plain NumPy.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import fpemu
from fpemu import arith, linalg
from fpemu.backend import cupy_or_none, to_numpy, xp
from fpemu.formats import FORMATS
from fpemu.tensorcore import ARCHS, tensor_core_matmul
from tests import fake_cupy
from tests.fake_cupy import FakeCupy, is_device, to_device

RNG = np.random.default_rng(20261121)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCupy]:
    mod = fake_cupy.install(strict=True)
    monkeypatch.setitem(sys.modules, "cupy", mod)
    yield mod


def _same_bits(got: Any, want: Any) -> None:
    """``got`` is a device array with the dtype, shape and bits of the NumPy ``want``."""
    assert is_device(got), f"result left the device: {type(got)}"
    g, w = got.get(), np.asarray(want)
    assert g.dtype == w.dtype and g.shape == w.shape
    if g.dtype.kind == "f":
        nan = np.isnan(w)
        assert np.array_equal(np.isnan(g), nan)
        ui = np.dtype(f"u{g.dtype.itemsize}")
        assert np.array_equal(g[~nan].view(ui), w[~nan].view(ui))
    else:
        assert np.array_equal(g, w)


def _check(fake: FakeCupy, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run ``fn`` on NumPy inputs and on device copies: same bits, device namespace used."""
    want = fn(*args, **kwargs)
    before = sum(fake.recorder.calls.values())
    dev = [to_device(a) if isinstance(a, np.ndarray) else a for a in args]
    kw = {k: to_device(v) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()}
    got = fn(*dev, **kw)
    _same_bits(got, want)
    assert sum(fake.recorder.calls.values()) > before, "the fake namespace was never called"
    assert fake.recorder.events == [], "\n".join(map(str, fake.recorder.events))


# ----------------------------------------------------------------------------- the fake itself
def test_fake_refuses_what_cupy_refuses_and_records_numpy_calls(fake: FakeCupy) -> None:
    x: Any = to_device(np.arange(4.0))
    assert xp(x) is fake and not isinstance(x, np.ndarray)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(x)
    with pytest.raises(TypeError, match="Unsupported type"):
        _ = x + np.ones(4)
    with pytest.raises(TypeError, match="Unsupported type"):
        fake.where(x > 1, x, np.zeros(4))
    y = np.add(x, 1.0)  # works through NEP 13, as on CuPy, but is recorded
    assert is_device(y) and [e.kind for e in fake.recorder.events][-1] == "numpy-call"
    assert "test_backend.py" in fake.recorder.events[-1].where
    assert is_device(fake.float64(2.0) * x) and is_device(x.sum())  # 0-d device reductions


def test_fake_catches_a_function_that_does_not_dispatch(fake: FakeCupy) -> None:
    def host_only(v: Any) -> Any:
        return np.asarray(v, dtype=np.float64) * 2

    with pytest.raises(TypeError, match="Implicit conversion"):
        host_only(to_device(np.ones(3)))
    assert fake.recorder.fatal()[0].line == "return np.asarray(v, dtype=np.float64) * 2"


def test_lenient_fake_lists_every_offending_line(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake_cupy.install(strict=False)
    monkeypatch.setitem(sys.modules, "cupy", mod)
    x: Any = to_device(np.ones(3))
    r = np.asarray(x) + np.sqrt(x).get()
    assert isinstance(r, np.ndarray)
    assert [e.kind for e in mod.recorder.events] == ["implicit", "numpy-call"]


# ----------------------------------------------------------------------------- backend.py
def test_xp_numpy_by_default_and_refuses_mixing(fake: FakeCupy) -> None:
    d, h = to_device(np.ones(2)), np.ones(2)
    assert xp(h) is np and xp(1.0, [1, 2]) is np and xp() is np
    assert xp(d) is fake and xp(d, d, 3.0) is fake
    with pytest.raises(TypeError, match="cannot mix cupy and numpy arrays"):
        xp(d, h)
    with pytest.raises(TypeError, match="cannot mix"):
        fpemu.round(d, "fp16") + 0 if xp(d, h) else None


def test_xp_without_cupy_never_imports_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    assert xp(np.ones(1)) is np and "cupy" not in sys.modules


def test_to_numpy_copies_device_arrays_and_passes_host_ones(fake: FakeCupy) -> None:
    h = np.arange(5.0)
    d = to_device(h)
    out = to_numpy(d)
    assert type(out) is np.ndarray and np.array_equal(out, h)
    out[0] = 99.0
    assert d.get()[0] == 0.0  # a copy, not a view of device memory
    assert to_numpy(h) is h and to_numpy([1, 2]).tolist() == [1, 2]


def test_cupy_or_none_without_a_usable_cupy(fake: FakeCupy) -> None:
    assert cupy_or_none() is None  # the fake has no cuda runtime: treated as "no GPU"


_IMPORT_CHECK = """
import importlib, sys
class Block:
    seen = []
    def find_spec(self, name, path=None, target=None):
        if name == "cupy" or name.startswith("cupy."):
            Block.seen.append(name)
            raise ImportError("cupy blocked by the test")
        return None
sys.meta_path.insert(0, Block())
for m in ["fpemu", "fpemu.linalg", "fpemu.arith", "fpemu.tensorcore", "fpemu.nn.tensor",
          "fpemu.nn.functional", "fpemu.cli", "fpemu.tensorcore.hardware", "fpemu.cli.crosscheck",
          "fpemu.tensorcore.hardware.mma"]:
    importlib.import_module(m)
import fpemu.tensorcore.hardware.mma as mma
mma.kernel_source(mma.INSTRUCTIONS["fp16"])
assert Block.seen == [] and "cupy" not in sys.modules, Block.seen
print("ok")
"""


def test_importing_fpemu_does_not_import_cupy() -> None:
    r = subprocess.run([sys.executable, "-c", _IMPORT_CHECK], capture_output=True, text=True,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ----------------------------------------------------------------------------- rounding, bits
_FP16_ALL = np.arange(2**16, dtype=np.uint16).view(np.float16).astype(np.float64)
_WIDE = np.concatenate(
    [np.exp2(RNG.uniform(-140, 140, 4000)) * RNG.choice([-1.0, 1.0], 4000),
     [0.0, -0.0, np.inf, -np.inf, 65520.0, 3.0e38, -5e-324]]
)  # fmt: skip
_MODES = ["rne", "rna", "rtz", "rup", "rdown", "rto"]


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "tf32", "float8_e4m3fn", "float8_e5m2",
                                 "float8_e4m3fnuz", "float4_e2m1fn", "float32"])  # fmt: skip
def test_round_dispatches(fake: FakeCupy, fmt: str) -> None:
    has_nan = FORMATS[fmt].has_nan
    x = np.concatenate([_FP16_ALL, _WIDE])
    x = x if has_nan else x[~np.isnan(x)]
    for mode in _MODES:
        _check(fake, fpemu.round, x, fmt, mode=mode)
    _check(fake, fpemu.round, x, fmt, subnormals=False)
    _check(fake, fpemu.round, x, fmt, overflow="saturate", mode="rtz")
    if fmt != "float32":  # float32 input (widened exactly inside)
        _check(fake, fpemu.round, x[np.abs(x) < 3e38].astype(np.float32), fmt)
    assert fake.recorder.calls["empty_like"] > 0


def test_stochastic_round_dispatches(fake: FakeCupy) -> None:
    rng = np.random.default_rng(1)
    want = fpemu.round(_WIDE, "bf16", mode="stochastic", rng=np.random.default_rng(1))
    _same_bits(fpemu.round(to_device(_WIDE), "bf16", mode="stochastic", rng=rng), want)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16", "float8_e4m3fn", "float6_e3m2fn",
                                 "float8_e5m2fnuz"])  # fmt: skip
def test_decode_encode_and_neighbours_dispatch(fake: FakeCupy, fmt: str) -> None:
    codes = fpemu.codes(fmt)
    _check(fake, fpemu.decode, codes, fmt)
    _check(fake, fpemu.decode, codes.astype(np.int64), fmt, dtype=np.float32)
    v = fpemu.decode(codes, fmt)
    finite = v[np.isfinite(v)]
    _check(fake, fpemu.encode, v, fmt)
    for fn in (fpemu.ulp, fpemu.next_up, fpemu.next_down):
        _check(fake, fn, finite, fmt)
        _check(fake, fn, _WIDE, fmt)


def test_decode_of_wide_formats_dispatches(fake: FakeCupy) -> None:
    codes = RNG.integers(0, 2**32, 5000, dtype=np.uint64).astype(np.uint32)
    _check(fake, fpemu.decode, codes, "float32")
    _check(fake, fpemu.decode, codes >> np.uint32(13), "tf32")


# ----------------------------------------------------------------------------- accumulate, arith
def _mat(*shape: int, scale: float = 1.0) -> np.ndarray:
    return RNG.standard_normal(shape) * scale


@pytest.mark.parametrize("model", ["sequential", "pairwise", "blocked", "fast"])
def test_matmul_models_dispatch(fake: FakeCupy, model: str) -> None:
    a, b, c = _mat(3, 5, 40), _mat(40, 6), _mat(3, 5, 6)
    _check(fake, linalg.matmul, a, b, fmt="fp16", model=model)
    acc = "float32" if model == "fast" else "bf16"  # the fast model accumulates in FP32 only
    _check(fake, linalg.matmul, a, b, c=c, fmt="bf16", acc=acc, model=model)
    acc = "float32" if model == "fast" else "fp16"
    _check(fake, linalg.matmul, a, b, fmt="e4m3", acc=acc, out="e5m2", model=model)


def test_dot_and_sum_dispatch(fake: FakeCupy) -> None:
    _check(fake, linalg.dot, _mat(300), _mat(300), fmt="fp16")
    _check(fake, linalg.sum, _mat(4, 300, scale=100.0), fmt="fp16", acc="fp16")
    _check(fake, linalg.sum, _mat(4, 30), fmt="bf16", axis=0)


def test_matmul_stochastic_accumulation_dispatches(fake: FakeCupy) -> None:
    a, b = _mat(4, 64), _mat(64, 3)
    want = linalg.matmul(a, b, fmt="fp16", acc="bf16", mode="stochastic",
                             rng=np.random.default_rng(3))  # fmt: skip
    got = linalg.matmul(to_device(a), to_device(b), fmt="fp16", acc="bf16",
                            mode="stochastic", rng=np.random.default_rng(3))  # fmt: skip
    _same_bits(got, want)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_arith_binary_dispatches(fake: FakeCupy, op: str) -> None:
    x, y = fpemu.round(_WIDE, "fp16"), fpemu.round(_WIDE[::-1].copy(), "fp16")
    for mode in ("rne", "rtz", "rto"):
        _check(fake, getattr(arith, op), x, y, fmt="bf16", mode=mode)


def test_arith_fma_sqrt_cast_dispatch(fake: FakeCupy) -> None:
    x = fpemu.round(_mat(2000), "bf16")
    y, z = fpemu.round(_mat(2000), "bf16"), fpemu.round(_mat(2000), "bf16")
    _check(fake, arith.fma, x, y, z, fmt="bf16")
    _check(fake, arith.sqrt, np.abs(x), fmt="fp16", mode="rup")
    _check(fake, arith.cast, x, "e4m3", mode="rtz")


def test_arith_slow_path_on_float64_inputs_dispatches(fake: FakeCupy) -> None:
    """Inputs not exact in float32 take the per-element exact path (explicit host round trip)."""
    x, y = _mat(300), _mat(300)
    for op in (arith.add, arith.mul, arith.div):
        _check(fake, op, x, y, fmt="bf16", mode="rto")
        _check(fake, op, x, y, fmt="float64")
    _check(fake, arith.fma, x, y, _mat(300), fmt="fp16", mode="rtz")
    _check(fake, arith.sqrt, np.abs(x), fmt="float64")


def test_arith_cast_with_from_fmt_dispatches(fake: FakeCupy) -> None:
    x = fpemu.round(_mat(500), "bf16")
    _check(fake, arith.cast, x, "e4m3", from_fmt="bf16")


# ----------------------------------------------------------------------------- tensor cores
_TC_FMTS = {"fp16": "float16", "bf16": "bfloat16", "tf32": "tf32", "fp8": "float8_e4m3fn"}


@pytest.mark.parametrize("arch", list(ARCHS))
def test_tensor_core_models_dispatch(fake: FakeCupy, arch: str) -> None:
    for family, n in ARCHS[arch].blocks.items():
        fmt = _TC_FMTS[family]
        a = fpemu.round(_mat(2, 16, 2 * n + 3), fmt)
        b = fpemu.round(_mat(2 * n + 3, 8), fmt)
        a[0, 0, 0], a[0, 1, 1], b[2, 3] = FORMATS[fmt].smallest_subnormal, 0.0, 0.0
        c = fpemu.round(_mat(2, 16, 8), "float32")
        _check(fake, tensor_core_matmul, a, b, c, arch=arch, fmt=fmt)
        _check(fake, linalg.matmul, a, b, fmt=fmt, model=arch)


def test_tensor_core_specials_and_fp16_accumulation_dispatch(fake: FakeCupy) -> None:
    a, b = fpemu.round(_mat(16, 32), "fp16"), fpemu.round(_mat(32, 8), "fp16")
    a[0, 0], a[1, 1], b[2, 2] = np.inf, np.nan, -np.inf
    c = fpemu.round(_mat(16, 8, scale=1e4), "fp16")
    c[3, 3] = 65504.0
    for arch in ("v100", "a100", "h100"):
        _check(fake, tensor_core_matmul, a, b, c, arch=arch, fmt="fp16", acc="fp16")
        _check(fake, tensor_core_matmul, a, b, arch=arch, fmt="fp16", zeros="drop",
               tiny_sign="keep")  # fmt: skip


# ----------------------------------------------------------------------------- autograd
def _check_many(fake: FakeCupy, fn: Callable[..., list[Any]], *args: Any) -> None:
    """:func:`_check` for a function returning a list of arrays (every one compared)."""
    want = fn(*args)
    before = sum(fake.recorder.calls.values())
    got = fn(*[to_device(a) if isinstance(a, np.ndarray) else a for a in args])
    assert len(got) == len(want) > 0
    for g, w in zip(got, want, strict=True):
        _same_bits(g, w)
    assert sum(fake.recorder.calls.values()) > before, "the fake namespace was never called"
    assert fake.recorder.events == [], "\n".join(map(str, fake.recorder.events))


def test_autograd_step_dispatches(fake: FakeCupy) -> None:
    from fpemu.nn import functional as fn  # noqa: PLC0415
    from fpemu.nn.optim import SGD  # noqa: PLC0415
    from fpemu.nn.tensor import Tensor  # noqa: PLC0415

    def step(xa: Any, wa: Any) -> list[Any]:
        x = Tensor(xa, "float32")
        w = Tensor(wa, "float32", requires_grad=True)
        fn.sum(fn.relu(fn.matmul(x, w, policy="torch_cuda_fp16"))).backward()
        grad = w.grad
        SGD([w], lr=0.1, momentum=0.9).step()
        return [grad, w.data]

    xa, wa = _mat(4, 8).astype(np.float32), _mat(8, 3).astype(np.float32)
    _check_many(fake, step, xa, wa)


_POLICIES = ["torch_cuda_fp16", "torch_cpu_bf16", "apex_O2", "naive_fp16", "float64"]


@pytest.mark.parametrize("policy", _POLICIES)
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_mlp_training_steps_dispatch(fake: FakeCupy, policy: str, optimizer: str) -> None:
    """An MLP moved to the device: forward, loss, scaled backward, optimizer steps, clipping."""
    from fpemu.nn import MLP  # noqa: PLC0415
    from fpemu.nn import functional as fn  # noqa: PLC0415
    from fpemu.nn.optim import SGD, Adam, clip_grad_norm  # noqa: PLC0415

    def train(xa: Any, ya: Any) -> list[Any]:
        model = MLP([6, 8, 5, 3], activation="gelu", norm=True, policy=policy, seed=1)
        model.to(xp(xa))
        params, master = model.parameters(), model.policy.master
        opt = (
            SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3, master=master)
            if optimizer == "sgd"
            else Adam(params, lr=1e-2, weight_decay=1e-3, master=master)
        )
        out: list[Any] = []
        for _ in range(2):
            opt.zero_grad()
            with np.errstate(all="ignore"):  # pure-fp16 Adam's first step makes NaNs: data
                loss = fn.cross_entropy(model(xa), ya, policy=model.policy)
                fn.mul(loss, np.float32(1024.0)).backward()  # a NumPy scalar scale, as scalers
                grads = opt.gradients()
                clipped, _ = clip_grad_norm(grads, 1e3)
            opt.step([None if g is None else g / 1024 for g in clipped])
            out += [loss.data, *[g for g in grads if g is not None]]
        return out + [p.data for p in params] + [v for s in opt.state for v in s.values()]

    xa = _mat(5, 6).astype(np.float32)
    ya = np.array([0, 2, 1, 1, 0])
    _check_many(fake, train, xa, ya)


@pytest.mark.parametrize("policy", ["torch_cuda_fp16", "float64"])
def test_elementwise_and_fused_ops_dispatch(fake: FakeCupy, policy: str) -> None:
    from fpemu.amp.policy import autocast  # noqa: PLC0415
    from fpemu.nn import functional as fn  # noqa: PLC0415
    from fpemu.nn.tensor import Tensor, cast  # noqa: PLC0415

    def graph(xa: Any, wa: Any, ba: Any, ta: Any) -> list[Any]:
        fmt = "float64" if policy == "float64" else "float32"
        x = Tensor(xa, fmt, requires_grad=True)
        w = Tensor(wa, fmt, requires_grad=True)
        b = Tensor(ba, fmt, requires_grad=True)
        g = Tensor(xp(xa).ones(4), fmt, requires_grad=True)
        z = Tensor(xp(xa).zeros(4), fmt, requires_grad=True)
        with autocast(policy):
            h = fn.linear(x, w) + b * 0.5 - 1.0  # bias (1, 4) broadcast: unbroadcast in backward
            h = fn.layer_norm(h, g, z)
            parts = [fn.tanh(h), fn.sigmoid(h), fn.softmax(h), fn.log_softmax(h),
                     cast(fn.relu(h), "bf16")]  # fmt: skip
            y = fn.mean(parts[0]) + fn.sum(fn.mul(parts[1], parts[2])) + fn.mean(parts[3])
            y = y + fn.mse(parts[4], ta) + fn.sum(fn.gelu(h)) * np.float64(0.25)
        y.backward()
        return [y.data, *[t.data for t in parts], *[t.grad for t in (x, w, b, g, z)]]

    xa, wa = _mat(3, 5).astype(np.float32), _mat(4, 5).astype(np.float32)
    ba, ta = _mat(1, 4).astype(np.float32), _mat(3, 4)
    _check_many(fake, graph, xa, wa, ba, ta)


def test_model_to_and_state_dicts_move_between_namespaces(fake: FakeCupy) -> None:
    from fpemu.nn import MLP  # noqa: PLC0415
    from fpemu.nn.optim import Adam  # noqa: PLC0415

    host = MLP([3, 4, 2], policy="apex_O2", seed=2)
    dev = MLP([3, 4, 2], policy="apex_O2", seed=2).to(fake)
    assert all(is_device(p.data) for p in dev.parameters())
    assert type(dev.parameters()[0].numpy()) is np.ndarray  # an explicit host copy
    dev.load_state_dict(host.state_dict())  # host state goes to the device
    host.load_state_dict(dev.state_dict())  # and back
    for p, q in zip(host.parameters(), dev.parameters(), strict=True):
        _same_bits(q.data, p.data)
    opt = Adam(dev.parameters(), master="float32")
    opt.load_state_dict(Adam(host.parameters(), master="float32").state_dict())
    assert opt.master is not None and all(is_device(m) for m in opt.master)
    assert dev.to(np) is dev and all(type(p.data) is np.ndarray for p in dev.parameters())
    assert fake.recorder.events == [], "\n".join(map(str, fake.recorder.events))


def test_training_statistics_and_accuracy_dispatch(fake: FakeCupy) -> None:
    """Gradient statistics and accuracy of a device model equal the host ones."""
    from fpemu.nn import MLP  # noqa: PLC0415
    from fpemu.nn import functional as fn  # noqa: PLC0415
    from fpemu.training.loop import _layer_stats, accuracy, classify  # noqa: PLC0415

    rng = np.random.default_rng(5)
    x = (rng.standard_normal((16, 4)) * 30.0).astype(np.float32)
    y = rng.integers(0, 3, 16)
    results = []
    for dev in (False, True):
        model = MLP([4, 8, 3], policy="naive_fp16", seed=3)
        xs = to_device(x) if dev else x
        if dev:
            model.to(fake)
        with np.errstate(all="ignore"):
            loss = fn.cross_entropy(model(xs), y)
            fn.mul(loss, 2.0**15).backward()  # overflows some fp16 gradients
            stats = _layer_stats(model, model.policy.compute, 2.0**15)
        assert all(is_device(p.grad) == dev for p in model.parameters())
        results.append((stats, accuracy(model, xs, y), classify(model.parameters()[0].grad,
                                                               model.policy.compute)))  # fmt: skip
    assert results[0] == results[1]
    over = [s["after_scaling"]["overflow"] for s in results[0][0].values()]
    assert 0 < max(over) < 1  # some, not all, gradients overflow: not a vacuous comparison
    assert fake.recorder.events == [], "\n".join(map(str, fake.recorder.events))
