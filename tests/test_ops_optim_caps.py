"""The optimizer and GradScaler emulations under the other CPU builds: torch reads
``ATEN_CPU_CAPABILITY`` at import, so each build runs in a fresh process (default: two roundings
per multiply-add; avx2: fused, like avx512). The full test files were also run this way (see the
module docstrings of fpemu/validate/ops/optim*.py); this keeps one case per kernel in the suite."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

_SCRIPT = """
import torch
from tests.watch_ops_util import verdicts
a = torch.ops.aten
g = torch.Generator().manual_seed(1)
s, e, t = (torch.randn(1003, generator=g) for _ in range(3))
v = {
    "lerp.Scalar": verdicts(a.lerp.Scalar, s, e, 0.1),
    "lerp.Scalar large": verdicts(a.lerp.Scalar, s, e, 0.8),
    "lerp.Tensor": verdicts(a.lerp.Tensor, s, e, t),
    "addcmul": verdicts(a.addcmul.default, s, e, t, value=0.001),
    "addcdiv": verdicts(a.addcdiv.default, s, e, t.abs() + 1, value=-0.5),
}
print(torch.backends.cpu.get_cpu_capability(), v)
bad = {k: x for k, x in v.items() if x != ["identical"] * len(x)}
assert not bad, bad
"""


@pytest.mark.parametrize("cap", ["default", "avx2"])
def test_capabilities(cap: str) -> None:
    env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, cwd=root, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert cap.upper() in r.stdout, r.stdout
