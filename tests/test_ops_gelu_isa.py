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
from fpemu.validate.ops import activations
assert not activations.onednn.available()
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
