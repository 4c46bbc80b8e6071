"""The exact claims of the norm, batch-norm, embedding and pooling emulations hold under every
``ATEN_CPU_CAPABILITY``: torch reads it at import, so the exact tests run again in two fresh
interpreters (``default`` and ``avx2``, side by side); this machine's own capability (avx512
here) is the in-process run of those files."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

FILES = [
    "test_ops_norms.py",
    "test_ops_norms_bits.py",
    "test_ops_batchnorm.py",
    "test_ops_embedding.py",
    "test_ops_conv.py",
]


@pytest.mark.skipif(os.environ.get("ATEN_CPU_CAPABILITY") is not None, reason="the child run")
def test_exact_claims_hold_under_default_and_avx2() -> None:
    here = Path(__file__).parent
    runs = {}
    for cap in ("default", "avx2"):
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
        cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]
        cmd += [str(here / f) for f in FILES] + ["-k", "exact"]
        runs[cap] = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    outs = {cap: proc.communicate(timeout=300)[0] for cap, proc in runs.items()}  # reap all
    for cap, proc in runs.items():
        out = outs[cap]
        assert proc.returncode == 0, (cap, out[-3000:])
        assert " passed" in out and "skipped" not in out and "failed" not in out, (cap, out[-500:])
