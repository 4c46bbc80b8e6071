"""``fpemu validate step FILE.py:FUNC``: ``FUNC()`` sets up and returns the step, which runs
``--steps`` times under ``fpemu.watch``; exit 0 when clean, 1 when an op differs or is
``policy`` or a procedure finding is made, 2 (one line) for a bad invocation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

GOOD = '''
import torch
from torch import nn
import torch.nn.functional as F
from helper_beside import WIDTH  # a module beside the file imports

def setup():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
    return step

def half_in_float32_run():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 3))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x, y = torch.randn(4, 8), torch.randint(0, 3, (4,))
    def step():
        opt.zero_grad()
        loss = F.cross_entropy(net(x.half().float()), y)
        loss.backward()
        opt.step()
    return step

def not_a_step():
    return 3

def raises():
    raise KeyError("no data")

def step_raises():
    def step():
        raise RuntimeError("shapes")
    return step
'''


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("step")
    (d / "helper_beside.py").write_text("WIDTH = 16\n")
    (d / "train.py").write_text(GOOD)
    return d / "train.py"


def _fpemu(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fpemu", *args], capture_output=True, text=True,
                          cwd=cwd, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})  # fmt: skip


def test_clean_step_json(script: Path, tmp_path: Path) -> None:
    r = _fpemu("validate", "step", f"{script}:setup", "--steps", "2", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["counts"]["differs"] == 0 and data["counts"]["policy"] == 0
    assert data["settings"]["steps"] == 2 and data["procedure"] == []
    assert {row["phase"] for row in data["rows"]} == {"forward", "backward", "optimizer"}


def test_policy_fault_exits_1_with_html(script: Path, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    r = _fpemu("validate", "step", f"{script}:half_in_float32_run", "--html", str(page))
    assert r.returncode == 1, r.stderr
    assert "policy" in r.stdout and max(len(line) for line in r.stdout.splitlines()) <= 80
    assert page.read_text().startswith("<!DOCTYPE html>")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["validate", "step"], "FILE.py:FUNC (missing)"),
        (["validate", "step", "{script}:nope"], "has no function nope"),
        (["validate", "step", "{script}:not_a_step"], "returned int"),
        (["validate", "step", "{script}:raises"], "the function raised KeyError"),
        (["validate", "step", "{script}:step_raises"], "the step raised RuntimeError: shapes"),
        (["validate", "step", "{script}:setup", "--steps", "0"], "--steps 0"),
        (["validate", "step", "{script}:setup", "--policy", "nope"], "--policy nope"),
        (["validate", "step", "{script}:setup", "--quick"], "--quick: only for"),
        (["validate", "torch", "--policy", "fp32"], "--policy fp32: only for"),
        (["validate", "step", "{script}:setup", "--html", "/no/such/dir/r.html"], "--html"),
    ],
)
def test_bad_invocations_one_line(script: Path, args: list[str], needle: str) -> None:
    r = _fpemu(*(a.format(script=script) for a in args))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
