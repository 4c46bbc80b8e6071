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
    "_foreach_add.List": verdicts(a._foreach_add.List, [s, e], [t, s], alpha=0.01),
    "_foreach_lerp_.Scalar": verdicts(a._foreach_lerp_.Scalar, [s.clone()], [e], 0.1),
    "_foreach_addcmul_.Scalar": verdicts(a._foreach_addcmul_.Scalar, [s.clone()], [e], [t], 1e-3),
    "_fused_adamw_": verdicts(a._fused_adamw_.default, [s.clone()], [e.clone()], [t.clone()],
                              [t.abs() * 1e-2], [], [torch.tensor(3.0)], lr=1e-2, beta1=0.9,
                              beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                              maximize=False),
    "_fused_adam_": verdicts(a._fused_adam_.default, [s.clone()], [e.clone()], [t.clone()],
                             [t.abs() * 1e-2], [], [torch.tensor(3.0)], lr=1e-2, beta1=0.9,
                             beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False,
                             maximize=False),
    "_fused_sgd_": verdicts(a._fused_sgd_.default, [s.clone()], [e.clone()], [t.clone()],
                            weight_decay=0.01, momentum=0.9, lr=0.1, dampening=0.1,
                            nesterov=True, maximize=False, is_first_step=False),
    "unscale": verdicts(a._amp_foreach_non_finite_check_and_unscale_.default, [s.clone()],
                        torch.tensor(0.0), torch.tensor(1 / 3.0)),
}
print(torch.backends.cpu.get_cpu_capability(), v)
bad = {k: x for k, x in v.items() if x != ["identical"] * len(x)}
assert not bad, bad
"""


def test_capabilities() -> None:
    """default and avx2, each in a fresh process (run side by side to keep the test short)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    procs = {}
    for cap in ("default", "avx2"):
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        procs[cap] = subprocess.Popen(
            [sys.executable, "-c", _SCRIPT], env=env, cwd=root, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip
    outs = {cap: proc.communicate(timeout=300)[0] for cap, proc in procs.items()}  # reap all
    for cap, proc in procs.items():
        out = outs[cap]
        assert proc.returncode == 0, out
        assert cap.upper() in out, out
