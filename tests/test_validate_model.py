"""from_torch (a torch model as an fpemu.nn graph module), compare_arrays (compare_keras's
comparison), and the command line ``fpemu validate model``: options, formats, bad arguments.
compare_torch itself: tests/test_validate_compare_torch.py."""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fpemu.cli import main  # noqa: E402
from fpemu.cli.validate import main as validate_main  # noqa: E402
from fpemu.nn.graph import GraphModule  # noqa: E402
from fpemu.validate import from_torch  # noqa: E402
from fpemu.validate.twin.model_report import compare_arrays, ulps  # noqa: E402

nn = torch.nn


def _mlp() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch() -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 8)

    def forward(self, x: Any) -> Any:
        return x + self.fc2(torch.relu(self.fc1(x)))


class Residual(nn.Module):
    """``x + fc2(relu(fc1(x)))`` twice, then a head: a custom module traced through."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(8, 4)

    def forward(self, x: Any) -> Any:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


# -- from_torch ---------------------------------------------------------------------------------
def test_from_torch_copies_parameters_bit_for_bit() -> None:
    net = Residual()
    model = from_torch(net)
    assert isinstance(model, GraphModule)
    theirs = dict(net.named_parameters())
    assert [n for n, _ in model.named_parameters()] == list(theirs)
    for name, p in model.named_parameters():
        a = np.asarray(p.data, np.float32).view(np.uint32)
        assert np.array_equal(a, theirs[name].detach().numpy().view(np.uint32)), name


def test_from_torch_follows_the_real_graph() -> None:
    ops = [(n.op, n.source) for n in from_torch(Residual()).nodes]
    # two residual blocks (linear, relu, linear, add) and the head, traced through ModuleList
    assert [o for o, _ in ops] == ["input"] + ["linear", "relu", "linear", "add"] * 2 + [
        "linear", "identity"]
    assert ops[1][1] == "blocks.0.fc1 (torch.nn.Linear)"


def test_from_torch_forward_in_bf16_matches_torch_autocast() -> None:
    net = _mlp().eval()
    x, _ = _batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = net(x).float().detach().numpy()
    got = from_torch(net, policy="torch_cpu_bf16")(x.numpy())
    assert got.fmt.name == "bfloat16"
    assert np.array_equal(np.asarray(got.data, np.float32).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize(
    ("module", "named"),
    [(nn.Sequential(nn.Linear(4, 4), nn.Conv1d(1, 1, 1)), "Conv1d"),
     (nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), "BatchNorm1d")],
)
def test_unsupported_layer_is_named_with_what_is_supported(module: Any, named: str) -> None:
    with pytest.raises(ValueError, match=named) as err:
        from_torch(module)
    assert "supported modules: Linear, ReLU" in str(err.value)


def test_unsupported_function_is_named() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: Any) -> Any:
            return torch.exp(self.fc(x))

    with pytest.raises(ValueError, match="unsupported function 'exp'"):
        from_torch(Net())


def test_dropout_in_training_mode_is_refused() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    with pytest.raises(ValueError, match=r"Dropout\(p=0\.5\) in training mode"):
        from_torch(net)
    assert from_torch(net.eval()).nodes[2].op == "identity"


def test_from_torch_rejects_non_modules_and_float64() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        from_torch(lambda x: x)
    with pytest.raises(TypeError, match="float32"):
        from_torch(nn.Linear(2, 2).double())


# -- compare_arrays ------------------------------------------------------------------------
def test_compare_arrays_counts_and_first_difference() -> None:
    a = np.array([1.0, 2.0, -0.0, np.nan], np.float32)
    b = np.array([1.0, 2.0 + 2**-6, 0.0, np.nan], np.float32)
    c = compare_arrays(a, b, "bfloat16", "bfloat16")
    # 2 + 2**-6 is one bfloat16 ulp (2**-6 at 2) above 2; -0 and +0 differ in bits, 0 ulps apart
    assert c["compared"] == 4 and c["identical"] == 2 and c["max_ulps"] == 1.0
    assert c["first"] == {"index": "(1,)", "torch": "2.0", "fpemu": "2.015625",
                          "torch_bits": "0x4000", "fpemu_bits": "0x4001"}
    assert ulps(np.float32([np.inf]), np.float32([65504.0]), "float16").tolist() == [1.0]
    assert compare_arrays(a, a, "float32", "bfloat16")["identical"] == 0  # formats differ



# -- command line -------------------------------------------------------------------------------
FACTORY = '''
import torch

def make():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    g = torch.Generator().manual_seed(1)
    return net, torch.randn(8, 4, generator=g), torch.randint(0, 3, (8,), generator=g)

def options():
    net, x, y = make()
    return net, x, y, {"optimizer": "adam", "lr": 1e-3}

def wrong():
    return 42
'''


def test_cli_validate_model_json(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "net.py"
    f.write_text(FACTORY)
    rc = main(["validate", "model", f"{f}:make", "--steps", "2", "--autocast", "fp16",
               "--scaler", "init_scale=1024,growth_interval=1", "--json"])  # fmt: skip
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["ok"] is True
    assert d["settings"]["autocast"] == ["cpu", "float16"] and d["settings"]["steps"] == 2
    assert d["settings"]["mode"] == "independent" and len(d["trace"]) == 2
    assert d["settings"]["grad_scaler"] == {"init_scale": 1024.0, "growth_interval": 1}
    assert main(["validate", "model", f"{f}:options", "--steps", "1", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "- optimizer: adam" in out and "| step | loss torch | loss twin |" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["model", "{f}:make", "--autocast", "fp8"], "--autocast fp8: accepted bf16, fp16, off"),
     (["model", "{f}:make", "--steps", "0"], "--steps 0: accepted an int >= 1"),
     (["model", "{f}:make", "--scaler", "speed=2"], "--scaler speed=2: accepted off, default"),
     (["model", "{f}:nope"], "has no function nope"),
     (["model", "{f}:wrong"], "accepted (model, inputs, targets[, options])"),
     (["model", "nofile.py:make"], "no file nofile.py"),
     (["model"], "FILE.py:FACTORY (missing)")],
)
def test_cli_bad_arguments_are_one_line(tmp_path: Any, capsys: pytest.CaptureFixture[str],
                                        argv: list[str], message: str) -> None:  # fmt: skip
    f = tmp_path / "net.py"
    f.write_text(FACTORY)
    rc = main(["validate", *[a.replace("{f}", str(f)) for a in argv]])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and "\n" not in err


def test_cli_without_torch_says_how_to_get_the_cpu_build(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    assert validate_main(["torch", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'torch==2.13.0' --index-url https://download.pytorch.org/whl/cpu" in err
    assert "CUDA build of several GB" in err


def test_cli_prints_a_table_by_default(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "net.py"
    f.write_text(FACTORY)
    assert main(["validate", "model", f"{f}:make", "--steps", "1", "--autocast", "off"]) == 0
    out = capsys.readouterr().out
    assert "compare_torch: steps" in out and "loss twin" in out and out.rstrip().endswith("OK")


def test_cli_lockstep_has_no_twin(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "net.py"
    f.write_text(FACTORY)
    assert main(["validate", "model", f"{f}:make", "--steps", "2", "--lockstep", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["settings"]["mode"] == "lockstep" and d["drift"] == [] and d["ok"] is True
    assert [t["loss_twin"] for t in d["trace"]] == [None, None]
    assert sum(d["counts"].values()) == len(d["rows"]) > 0
