"""The watch zoo under each of torch's CPU kernel sets: ``ATEN_CPU_CAPABILITY`` is read when
torch is imported, so each capability runs in a subprocess. The default suite runs three
representative models (a GPT with flash attention and a tied head, a CNN with BatchNorm, an MLP
with LayerNorm) in every configuration under ``default`` and ``avx2`` (this process covers the
machine's own, ``avx512`` where the CPU has it); ``-m slow`` runs the whole zoo.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import sys
import fpemu
from tests.watch_zoo import CONFIGS, ZOO, setup, train_step
names = sys.argv[1].split(",") if sys.argv[1] != "all" else list(ZOO)
bad = []
for name in names:
    for config in CONFIGS:
        model, opt, scaler, batches = setup(name, config, 0)
        with fpemu.watch() as w:
            for batch in batches:
                train_step(name, config, model, opt, scaler, batch)
        r = w.report()
        assert r.settings["capability"] == sys.argv[2], r.settings
        bad += [(name, config, row["op"], row["verdict"], row["cause"][:100]) for row in r.rows
                if row["verdict"] in ("differs", "policy", "not_emulated")]
        bad += [(name, config, p["finding"]) for p in r.procedure]
print(len(bad), bad[:5])
"""


def _run(names: str, capability: str) -> str:
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", SCRIPT, names, capability], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1500)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_representative_models(capability: str) -> None:
    assert _run("gpt_sdpa,cnn_batchnorm,mlp_layernorm", capability).startswith("0 ")


@pytest.mark.slow
@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_whole_zoo(capability: str) -> None:
    assert _run("all", capability).startswith("0 ")
