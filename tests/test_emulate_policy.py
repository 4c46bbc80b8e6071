"""fpemu.emulate's policy: CUDA's autocast lists (not CPU's) inside the program's own autocast
regions only, the weight-cast cache, counted non-emulated ops, bad arguments, determinism."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import fpemu  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _run(policy: str, fn: object, *, autocast: bool = False) -> object:
    with fpemu.emulate(policy=policy, model="sequential", autocast=autocast):
        return fn()  # type: ignore[operator]


def test_cuda_lists_not_cpu_lists() -> None:
    """amp.md 2.2-2.4: on CUDA softmax, sum, layer_norm, exp run in float32 on a float16 input;
    CPU autocast leaves them in the input's dtype."""
    x = torch.randn(4, 8).half()
    w, b = torch.ones(8), torch.zeros(8)

    def ops() -> list[torch.dtype]:
        with torch.autocast("cuda"):
            outs = [
                F.softmax(x, -1),
                x.sum(),
                F.layer_norm(x, (8,), w, b),
                torch.exp(x),
                x @ x.t(),
                F.relu(x),
                F.cross_entropy(x, torch.zeros(4, dtype=torch.long)),
            ]
        return [o.dtype for o in outs]  # fmt: skip

    cuda = _run("torch_cuda_fp16", ops)
    cpu = _run("torch_cpu_fp16", ops)
    f32, f16 = torch.float32, torch.float16
    assert cuda == [f32, f32, f32, f32, f16, f16, f32]
    assert cpu == [f16, f16, f16, f16, f16, f16, f32]


def test_no_region_no_casts_and_enabled_false() -> None:
    x, w = torch.randn(3, 4), torch.randn(2, 4)

    def ops() -> list[torch.dtype]:
        out = [F.linear(x, w).dtype]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out.append(F.linear(x, w).dtype)  # the policy's dtype, not the region's
            with torch.autocast("cuda", enabled=False):
                out.append(F.linear(x, w).dtype)
            out.append(F.linear(x, w).dtype)
        return out

    f32, f16 = torch.float32, torch.float16
    assert _run("torch_cuda_fp16", ops) == [f32, f16, f32, f16]
    # torch's own CPU autocast is never switched on inside the block
    with fpemu.emulate(policy="torch_cuda_fp16"), torch.autocast("cpu"):
        assert not torch.is_autocast_enabled("cpu")


def test_promote_set_opt_dtype_and_banned() -> None:
    a16, a32 = torch.randn(3).half(), torch.randn(3)

    def ops() -> list[torch.dtype]:
        with torch.autocast("cuda"):
            return [torch.addcmul(a16, a16, a32).dtype, torch.addcmul(a16, a16, a16).dtype,
                    a16.sum(dtype=torch.float16).dtype]  # fmt: skip

    assert _run("torch_cuda_fp16", ops) == [torch.float32, torch.float16, torch.float16]
    with pytest.raises(RuntimeError, match="binary_cross_entropy_with_logits"):
        _run("torch_cuda_fp16", lambda: F.binary_cross_entropy(a32.sigmoid(), a32.sigmoid()),
             autocast=True)  # fmt: skip


def test_weight_cast_once_grads_summed_in_low_dtype() -> None:
    """Research note E3: a weight used twice in a region is cast once, so its two gradient
    contributions are summed in the low dtype before the float32 .grad."""
    g = torch.Generator().manual_seed(0)
    w = torch.randn(16, 16, generator=g, requires_grad=True)
    x1, x2 = torch.randn(8, 16, generator=g), torch.randn(8, 16, generator=g)
    up1, up2 = torch.randn(8, 16, generator=g).half(), torch.randn(8, 16, generator=g).half()
    with fpemu.emulate(policy="torch_cuda_fp16", model="sequential", autocast=True):
        y1, y2 = F.linear(x1, w), F.linear(x2, w)
        torch.autograd.backward([y1, y2], [up1, up2])
    gw1 = up1.float().t() @ x1.half().float()  # exact enough? no: use the emulated GEMMs
    del gw1
    with fpemu.emulate(policy="torch_cuda_fp16", model="sequential", autocast=True):
        w1 = w.detach().clone().requires_grad_(True)
        F.linear(x1, w1).backward(up1)
        w2 = w.detach().clone().requires_grad_(True)
        F.linear(x2, w2).backward(up2)
    summed_low = (w1.grad.half() + w2.grad.half()).float()  # one fp16 rounding of the sum
    assert torch.equal(w.grad, summed_low)
    assert not torch.equal(w.grad, w1.grad + w2.grad)  # the float32 sum differs here


def test_not_emulated_ops_are_counted() -> None:
    x = torch.rand(5)
    with fpemu.emulate(policy="fp32") as em:
        torch.special.bessel_j0(x)
    assert em.not_emulated == {"aten.special_bessel_j0.default": 1}
    assert "ops not emulated: 1, by name: aten.special_bessel_j0.default 1" in em.summary()


@pytest.mark.parametrize(
    ("kwargs", "exc", "words"),
    [
        ({"policy": "nope"}, ValueError, ["policy='nope'", "torch_cuda_fp16"]),
        ({"policy": 3}, TypeError, ["policy", "3"]),
        ({"policy": "fp32", "model": "h1000"}, ValueError, ["model='h1000'", "h100"]),
        ({"policy": "fp32", "model": 5}, TypeError, ["model", "5"]),
        ({"policy": "fp32", "autocast": "yes"}, TypeError, ["autocast", "'yes'"]),
        ({"policy": "fp32", "recipe": "te_nope"}, ValueError, ["recipe='te_nope'", "te_delayed"]),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], exc: type[Exception], words: list[str]) -> None:
    with pytest.raises(exc) as info, fpemu.emulate(**kwargs):  # type: ignore[arg-type]
        pass
    for w in words:
        assert w in str(info.value)


def test_importing_fpemu_imports_no_torch() -> None:
    code = "import sys, fpemu; fpemu.emulate; import fpemu.emulate; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


_DET = textwrap.dedent(
    """
    import sys, torch, numpy as np, fpemu
    torch.set_num_threads(int(sys.argv[1]))
    for model in ("fast", "h100"):
        # NumPy's generator: torch.randn's values differ between CPU capabilities
        rng = np.random.default_rng(0)
        x = torch.from_numpy(rng.standard_normal((32, 48), np.float32))
        w1 = torch.from_numpy(rng.standard_normal((64, 48), np.float32)).requires_grad_(True)
        w2 = torch.from_numpy(rng.standard_normal((16, 64), np.float32)).requires_grad_(True)
        with fpemu.emulate(policy="torch_cuda_bf16", model=model, autocast=True):
            y = torch.nn.functional.linear(torch.nn.functional.linear(x, w1), w2)
            y.backward(torch.ones_like(y))
        for t in (y, w1.grad, w2.grad):
            sys.stdout.write(t.detach().float().numpy().tobytes().hex() + "\\n")
    """
)


def test_same_bits_any_thread_count_and_capability() -> None:
    """The emulated values do not depend on torch's/NumPy's threads or the CPU capability
    (models fast and h100; ATEN_CPU_CAPABILITY=default on one thread against this machine's
    capability on two)."""
    outs = []
    for threads, cap in (("1", "default"), ("2", "")):
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": threads}
        if cap:
            env["ATEN_CPU_CAPABILITY"] = cap
        r = subprocess.run([sys.executable, "-c", _DET, threads], capture_output=True,
                           text=True, env=env, check=True)  # fmt: skip
        outs.append(r.stdout)
    assert len(outs[0].splitlines()) == 6 and outs[0] == outs[1]


_DET_GPT = textwrap.dedent(
    """
    import sys, hashlib, torch, numpy as np, fpemu
    from tests.watch_zoo import GPT
    torch.set_num_threads(int(sys.argv[1]))
    rng = np.random.default_rng(0)
    model = GPT(vocab=65, d=64, t=32, layers=2, heads=4, sdpa=True)
    with torch.no_grad():  # weights from NumPy's generator (torch.randn differs by capability)
        for p in model.parameters():
            p.copy_(torch.from_numpy(rng.standard_normal(p.shape).astype(np.float32) * 0.1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.from_numpy(rng.integers(0, 65, (4, 33)))
    for step in range(2):
        opt.zero_grad()
        with fpemu.emulate(policy="torch_cuda_bf16", model="fast"):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(idx[:, :-1])
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 65).float(),
                                                         idx[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
    for p in model.parameters():
        sys.stdout.write(hashlib.sha256(p.detach().numpy().tobytes()).hexdigest() + "\\n")
    """
)


def test_gpt_step_same_bits_under_other_simd_dispatch() -> None:
    """Two emulated training steps of a small GPT (embeddings, LayerNorm, GELU, SDPA, tied head,
    cross-entropy, AdamW: the transcendental, attention and norm emulations, not only GEMMs)
    give the same parameter bits with this CPU's native dispatch on two threads as with older
    CPUs' code paths on one: torch's ``ATEN_CPU_CAPABILITY`` (default, avx2), NumPy's SIMD
    dispatch with the AVX512 (and AVX2) targets disabled (``NPY_DISABLE_CPU_FEATURES``) and
    OpenBLAS's Haswell/Sandybridge kernels (``OPENBLAS_CORETYPE``)."""
    configs = [
        ("2", {}),
        ("1", {"ATEN_CPU_CAPABILITY": "default", "OPENBLAS_CORETYPE": "Haswell",
               "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}),
        ("1", {"ATEN_CPU_CAPABILITY": "avx2", "OPENBLAS_CORETYPE": "Sandybridge",
               "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR X86_V3"}),
    ]  # fmt: skip
    outs = []
    for threads, extra in configs:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": threads, **extra}
        for k in ("ATEN_CPU_CAPABILITY", "NPY_DISABLE_CPU_FEATURES", "OPENBLAS_CORETYPE"):
            if k not in extra:
                env.pop(k, None)
        r = subprocess.run([sys.executable, "-c", _DET_GPT, threads], capture_output=True,
                           text=True, env=env, check=True, cwd=str(ROOT))  # fmt: skip
        outs.append(r.stdout)
    assert len(outs[0].splitlines()) > 10
    assert outs[0] == outs[1] == outs[2]


def test_emulated_values_finite_and_fp32_policy_keeps_float32() -> None:
    x = torch.randn(3, 5)
    with fpemu.emulate(policy="fp32", autocast=True) as em:
        y = F.linear(x, torch.randn(2, 5))
    assert y.dtype == torch.float32 and em.counts["casts"] == 0
    assert np.isfinite(y.numpy()).all()
