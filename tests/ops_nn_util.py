"""Inputs and checks shared by the tests of the elementwise, activation, softmax, loss, reduction
and dropout op emulations (helper of tests/test_ops_*.py; imports torch lazily)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fpemu.validate.watch.convert import to_numpy
from fpemu.validate.watch.verdict import judge
from tests.watch_ops_util import emulate, one_ulp_off

DTYPES = ("float32", "bfloat16", "float16", "float64")
#: set in the subprocess that reruns a test file under another ATEN_CPU_CAPABILITY
RERUN = "FPEMU_OPS_NN_RERUN"


def specials(name: str) -> np.ndarray:
    """Adversarial float64 values exactly representable in ``name``: zeros, infinities, NaN,
    the extreme normals and subnormals, values around 1 and ties of the 16-bit formats."""
    import torch  # noqa: PLC0415

    fi = torch.finfo(getattr(torch, name))
    big = 65504.0 if name != "float16" else 0.25
    v = [0.0, -0.0, np.inf, -np.inf, np.nan, fi.max, -fi.max, fi.tiny, -fi.tiny,
         fi.smallest_normal / 4, -fi.smallest_normal / 8, 1.0, -1.0, 0.5, 2.0, 3.0,
         1 + fi.eps, 1 - fi.eps / 2, 1e-3, -7.25, 100.0, big]  # fmt: skip
    return np.asarray(v, np.float64)


def inputs(name: str, n: int, *, seed: int, scale: float = 3.0, special: bool = True) -> Any:
    """A torch tensor of dtype ``name``: ``n`` random values of mixed magnitude, then specials."""
    import torch  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    v = rng.standard_normal(n) * scale * np.exp2(rng.integers(-6, 4, n))
    if special:
        v = np.concatenate([v, specials(name)])
    return torch.tensor(v, dtype=torch.float64).to(getattr(torch, name))


def check(func: Any, *args: Any, claim: str = "exact", **kwargs: Any) -> list[str]:
    """Run ``func`` in torch and fpemu, assert each judged output is 'identical' (``claim``
    'exact') or 'identical'/'bounded' ('bounded'), and that a one-ulp fault at a finite
    element is 'differs' where the emulation claims exactness. Returns the verdicts."""
    outs, emulated = emulate(func, *args, **kwargs)
    verdicts = []
    for t, e in zip(outs, emulated, strict=True):
        if e is None:
            continue
        a = to_numpy(t)
        j = judge(a, e)
        allowed = ("identical",) if claim == "exact" else ("identical", "bounded")
        assert j.verdict in allowed, (str(func), a.dtype, j)
        if claim == "exact":
            assert e.exact, (str(func), e.reason)
        verdicts.append(j.verdict)
        if e.exact and a.dtype.kind in "fV" and a.size:
            fin = np.flatnonzero(np.isfinite(a.astype(np.float64)).ravel())
            if fin.size:
                bad = one_ulp_off(a, int(fin[len(fin) // 2]))
                assert judge(bad, e).verdict == "differs", str(func)
    return verdicts


def rerun(path: str, capabilities: tuple[str, ...] = ("default", "avx2")) -> None:
    """Run the test file ``path`` (all but its capability test) in subprocesses under each
    ``ATEN_CPU_CAPABILITY`` (torch reads it at import), concurrently, and assert they pass."""
    if os.environ.get(RERUN):
        return
    root = Path(__file__).resolve().parents[1]
    procs = []
    for cap in capabilities:
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap, PYTHONPATH=str(root), **{RERUN: "1"})
        cmd = [sys.executable, "-m", "pytest", path, "-q", "-x", "-k", "not capabilities",
               "-p", "no:randomly"]  # fmt: skip
        procs.append((cap, subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True)))  # fmt: skip
    results = [(cap, p.communicate(timeout=300)[0], p.returncode) for cap, p in procs]
    for cap, out, code in results:  # every child reaped before any assertion can fail
        assert code == 0, f"ATEN_CPU_CAPABILITY={cap}\n{out[-4000:]}"
