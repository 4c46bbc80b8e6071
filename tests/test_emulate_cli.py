"""``fpemu emulate FILE.py:FUNC``: the user's function runs under emulate, its result and the
summary are printed; every bad argument is one stderr line and exit status 2."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fpemu.cli import main

ROOT = Path(__file__).resolve().parent.parent

PROG = textwrap.dedent(
    """
    import torch
    from helper import SIZE  # a module beside the file: its folder is on sys.path

    def train():
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(SIZE, 16), torch.nn.ReLU(),
                                  torch.nn.Linear(16, 2))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x, y = torch.randn(32, SIZE), torch.randint(0, 2, (32,))
        for _ in range(2):
            opt.zero_grad()
            with torch.autocast("cuda"):
                out = net(x)
                loss = torch.nn.functional.cross_entropy(out, y)
            loss.backward()
            opt.step()
        return {"dtype": str(out.dtype), "loss_dtype": str(loss.dtype)}

    def broken():
        raise ValueError("user code says no")

    NOT_A_FUNCTION = 3
    """
)


@pytest.fixture
def prog(tmp_path: Path) -> Path:
    (tmp_path / "helper.py").write_text("SIZE = 8\n")
    path = tmp_path / "prog.py"
    path.write_text(PROG)
    (tmp_path / "bad.py").write_text("import nonexistent_module_xyz\n")
    (tmp_path / "syntax.py").write_text("def f(:\n")
    return path


def test_runs_the_function_and_prints_summary(
    prog: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["emulate", f"{prog}:train", "--policy", "torch_cuda_fp16", "--model", "h100"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "dtype: torch.float16" in out and "loss_dtype: torch.float32" in out  # CUDA lists
    assert "policy torch_cuda_fp16 (compute float16), model h100" in out
    assert "aten.addmm.default 4" in out and "ops not emulated:" in out


def test_recipe_prints_amax_and_scale_traces(
    prog: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["emulate", f"{prog}:train", "--policy", "torch_cuda_bf16", "--recipe",
               "te_delayed"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    for line in ("0 input amax:", "0 input scale: 1 ", "2 grad_output amax:", "recipe state 2:"):
        assert line in out


def _bad(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--policy", "nope"], ["fpemu emulate: --policy nope", "torch_cuda_fp16"]),
        (["--policy", "fp32", "--model", "h1000"], ["--model h1000", "h100"]),
        (["--policy", "fp32", "--recipe", "te_x"], ["--recipe te_x", "te_delayed"]),
    ],
)
def test_bad_settings(prog: Path, args: list[str], words: list[str],
                      capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    line = _bad(["emulate", f"{prog}:train", *args], capsys)
    for w in words:
        assert w in line


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("{d}/prog.py", ["FILE.py:FUNC", "accepted a Python file and a function"]),
        ("{d}/nofile.py:train", ["no file"]),
        ("{d}/prog.py:missing", ["has no function missing"]),
        ("{d}/prog.py:NOT_A_FUNCTION", ["has no function NOT_A_FUNCTION"]),
        ("{d}/bad.py:f", ["importing", "ModuleNotFoundError"]),
        ("{d}/syntax.py:f", ["line 1"]),
        ("{d}/prog.py:broken", ["user code says no"]),
    ],
)
def test_bad_targets(prog: Path, target: str, words: list[str],
                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    line = _bad(["emulate", target.format(d=prog.parent), "--policy", "fp32"], capsys)
    assert line.startswith("fpemu emulate: ")
    for w in words:
        assert w in line


def test_missing_policy_is_one_line(prog: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _bad(["emulate", f"{prog}:train"], capsys)
    assert "--policy" in line


def test_bad_settings_refused_before_torch_is_imported(prog: Path) -> None:
    code = ("import sys; from fpemu.cli import main; rc = main(['emulate', sys.argv[1], "
            "'--policy', 'nope']); print(rc, 'torch' in sys.modules)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code, f"{prog}:train"], capture_output=True,
                       text=True, env=env, check=True)  # fmt: skip
    assert r.stdout.split() == ["2", "False"]


def test_emulate_experiment_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "fig.png"
    rc = main(["emulate-experiment", "--steps", "1", "--configs", "fp16", "--plot", str(png)])
    out = capsys.readouterr().out
    assert rc == 0 and png.stat().st_size > 10_000
    assert out.startswith("| config | policy / model / recipe | loss 0 |")
    assert "| fp16 | torch_cuda_fp16 / h100 / - |" in out and "fp16: ops emulated" in out


def test_emulate_experiment_plot_folder_must_exist(capsys: pytest.CaptureFixture[str]) -> None:
    line = _bad(["emulate-experiment", "--plot", "/no/such/folder/f.png"], capsys)
    assert "--plot /no/such/folder/f.png" in line and "does not exist" in line


def test_a_function_that_raises_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "boom.py"
    path.write_text("def boom():\n    raise KeyError('no data')\n")
    line = _bad(["emulate", f"{path}:boom", "--policy", "torch_cuda_bf16"], capsys)
    assert "the function raised KeyError: 'no data'" in line
