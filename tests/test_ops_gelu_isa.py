"""GELU (erf form) where oneDNN runs its pre-AVX512 kernels (an AVX2-only CPU, emulated here
with ``ONEDNN_MAX_CPU_ISA=AVX2`` in a subprocess): fpemu's erf-formula bound must hold for
torch's result (no ``differs``), and the emulation must not refuse the op."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import numpy as np, torch
from tests.watch_ops_util import verdicts
from fpemu.validate.ops import gelu
assert not gelu.onednn.available()
rng = np.random.default_rng(0)
seen = set()
for dt in (torch.float32, torch.bfloat16, torch.float16):
    for x in (rng.standard_normal(50000) * 3, np.linspace(-12, 12, 50001),
              rng.standard_normal(20000) * 1e-3):
        t = torch.from_numpy(x.astype(np.float32)).to(dt)
        seen |= set(verdicts(torch.ops.aten.gelu.default, t))
print(sorted(seen))
"""


def test_gelu_bound_holds_for_onednn_avx2_kernel() -> None:
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert set(ast.literal_eval(out.stdout.strip())) <= {"identical", "bounded"}, out.stdout


BWD_SCRIPT = """
import numpy as np, torch
from fpemu.validate.ops import _onednn_bwd
from tests.test_ops_activations import _bwd_x
from tests.watch_ops_util import emulate, verdicts
x = torch.from_numpy(_bwd_x(21))
g = torch.randn(x.shape, dtype=torch.float32, generator=torch.Generator().manual_seed(3))
seen = set(verdicts(torch.ops.aten.gelu_backward.default, g, x))
for n in (2, 3, 17, 31, 33, 47):
    seen |= set(verdicts(torch.ops.aten.gelu_backward.default, g[:n], x[:n]))
exact = emulate(torch.ops.aten.gelu_backward.default, g, x)[1][0].exact
print(repr((torch.backends.cpu.get_cpu_capability(), _onednn_bwd.kernel_fused(), exact,
            sorted(seen))))
"""


def test_gelu_backward_onednn_exact_per_isa() -> None:
    """float32 gelu_backward of a contiguous input (oneDNN's kernel) is identical to the
    emulation under every ATen capability (oneDNN ignores it) and with oneDNN capped at AVX2
    (FMA kernel) and at AVX/SSE4.1 (no FMA: a product and a sum)."""
    runs = [{"ATEN_CPU_CAPABILITY": c} for c in ("default", "avx2", "avx512")]
    runs += [{"ONEDNN_MAX_CPU_ISA": isa} for isa in ("AVX2", "AVX", "SSE41")]
    procs = []
    for extra in runs:
        env = {**os.environ, **extra, "PYTHONPATH": str(ROOT)}
        procs.append((extra, subprocess.Popen([sys.executable, "-c", BWD_SCRIPT], cwd=ROOT,
                                              env=env, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE, text=True)))  # fmt: skip
    results = [(extra, *p.communicate(timeout=600), p.returncode) for extra, p in procs]
    for extra, out, err, code in results:  # every child reaped before any assertion
        assert code == 0, (extra, err[-2000:])
        cap, fused, exact, seen = ast.literal_eval(out.strip())
        if "ONEDNN_MAX_CPU_ISA" in extra and extra["ONEDNN_MAX_CPU_ISA"] != "AVX2":
            assert fused is False, (extra, fused)  # the SSE4.1/AVX kernels have no FMA
        if fused is None:  # a CPU whose oneDNN kernel is not known: bounded, never exact
            assert not exact and set(seen) <= {"identical", "bounded"}, (extra, seen)
            continue
        assert exact and seen == ["identical"], (extra, cap, fused, seen)
