"""from_torch and compare_torch: conversion, bad arguments, report formats, and faults injected
on the fpemu side (a wrong rounding, a wrong policy entry, a wrong optimizer, a wrong scaler)
that the report must pin to the right tensor and step."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rich.console import Console  # noqa: E402

import fpemu.validate.twin.compare as compare_mod  # noqa: E402
from fpemu.amp.policy import get_policy  # noqa: E402
from fpemu.amp.scaling import get_scaler  # noqa: E402
from fpemu.cli import main  # noqa: E402
from fpemu.cli.validate import main as validate_main  # noqa: E402
from fpemu.nn import functional as fn  # noqa: E402
from fpemu.nn.graph import GRAPH_OPS, GraphModule  # noqa: E402
from fpemu.nn.tensor import Tensor, round_to  # noqa: E402
from fpemu.validate import ModelReport, compare_torch, from_torch  # noqa: E402
from fpemu.validate.twin.model_report import compare_arrays, ulps  # noqa: E402
from tests.validate_model_zoo import ZOO, Residual  # noqa: E402

nn = torch.nn


@pytest.fixture(autouse=True)
def _one_thread() -> Any:
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def _mlp() -> Any:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch() -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(16, 8, generator=g), torch.randint(0, 4, (16,), generator=g)


# -- from_torch ---------------------------------------------------------------------------------
def test_from_torch_copies_parameters_bit_for_bit() -> None:
    net = Residual.make()
    model = from_torch(net)
    assert isinstance(model, GraphModule)
    theirs = dict(net.named_parameters())
    assert [n for n, _ in model.named_parameters()] == list(theirs)
    for name, p in model.named_parameters():
        a = np.asarray(p.data, np.float32).view(np.uint32)
        assert np.array_equal(a, theirs[name].detach().numpy().view(np.uint32)), name


def test_from_torch_follows_the_real_graph() -> None:
    ops = [(n.op, n.source) for n in from_torch(Residual.make()).nodes]
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
    x, y = torch.randn(4, 4), torch.randint(0, 4, (4,))
    with pytest.raises(ValueError, match="exp"):
        compare_torch(Net(), x, y)


def test_dropout_in_training_mode_is_refused_but_compare_uses_eval() -> None:
    net = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    with pytest.raises(ValueError, match=r"Dropout\(p=0\.5\) in training mode"):
        from_torch(net)
    assert from_torch(net.eval()).nodes[2].op == "identity"
    net.train()
    r = compare_torch(net, torch.randn(4, 4), torch.randint(0, 4, (4,)))
    assert net.training  # the user's model is left as it was
    assert r.select(step=0, kind="activation")


def test_from_torch_rejects_non_modules_and_float64() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        from_torch(lambda x: x)
    with pytest.raises(TypeError, match="float32"):
        from_torch(nn.Linear(2, 2).double())


# -- compare_torch arguments ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "match"),
    [({"loss": "hinge"}, "loss='hinge': accepted 'cross_entropy', 'mse'"),
     ({"loss": nn.CrossEntropyLoss(label_smoothing=0.1)}, "accepted 'cross_entropy'"),
     ({"loss": nn.L1Loss()}, "loss=L1Loss\\(\\): accepted"),
     ({"optimizer": "rmsprop"}, "optimizer='rmsprop': accepted sgd, adam, adamw"),
     ({"steps": 0}, "steps=0: accepted an int >= 1"),
     ({"autocast": ("cuda", torch.float16)}, "autocast=.*accepted None or"),
     ({"autocast": ("cpu", torch.float64)}, "autocast=.*accepted None or"),
     ({"grad_scaler": {"init": 1.0}}, "unknown keys \\['init'\\]")],
)
def test_bad_arguments_name_the_argument(kw: dict[str, Any], match: str) -> None:
    x, y = _batch()
    with pytest.raises(ValueError, match=match):
        compare_torch(_mlp(), x, y, **kw)


@pytest.mark.parametrize("loss", [nn.CrossEntropyLoss(), torch.nn.functional.cross_entropy])
def test_torch_loss_callables(loss: Any) -> None:
    x, y = _batch()
    r = compare_torch(_mlp(), x, y, loss=loss, autocast=("cpu", torch.bfloat16))
    assert r.settings["loss"] == "cross_entropy" and r.ok


def test_batches_may_be_lists_and_numpy() -> None:
    x, y = _batch()
    r = compare_torch(_mlp(), [x.numpy(), x.numpy() * 2], [y.numpy(), y.numpy()], steps=3,
                      autocast=("cpu", torch.bfloat16))  # fmt: skip
    assert [t["step"] for t in r.trace] == [0, 1, 2]
    assert r.ok


# -- report -----------------------------------------------------------------------------------
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


def test_report_formats() -> None:
    x, y = _batch()
    r = compare_torch(_mlp(), x, y, autocast=("cpu", torch.bfloat16), steps=2)
    d = json.loads(r.to_json())
    assert d["ok"] is True and len(d["checks"]) == len(r.checks) and d["trace"][1]["step"] == 1
    md = r.to_markdown()
    assert md.startswith("## compare_torch") and "| step | kind | tensor |" in md
    buf = io.StringIO()
    r.render(Console(file=buf, width=200))
    assert "tensors bit-identical" in buf.getvalue()
    kinds = {c.kind for c in r.checks}
    assert kinds == {"activation", "loss", "backward", "grad", "scaler", "param"}


# -- injected faults ----------------------------------------------------------------------------
def _bf16_run(**kw: Any) -> ModelReport:
    model, x, y, base = ZOO["plain_relu_bf16_sgd"]()
    base.update(kw)
    return compare_torch(model, x, y, **base)


#: every fault is pinned to the same tensor and step in both modes of compare_torch
MODES = ("independent", "lockstep")


@pytest.mark.parametrize("mode", MODES)
def test_wrong_policy_entry_is_pinned_to_its_layer(mode: str) -> None:
    # relu moved to the fp32 list: torch's relu of a bf16 linear output stays bf16
    bad = dataclasses.replace(get_policy("torch_cpu_bf16"), name="wrong", fp32=frozenset(
        {"relu", "cross_entropy", "mse"}))  # fmt: skip
    r = _bf16_run(policy=bad, mode=mode)
    first = r.first_unexplained()
    assert first is not None and (first.step, first.kind, first.op) == (0, "activation", "relu")
    assert first.name == "_1" and first.cause == "format"
    assert (first.torch_format, first.fpemu_format) == ("bfloat16", "float32")
    assert not r.ok
    if mode == "lockstep":  # each step starts again from torch's tensors: pinned again each step
        for s in range(len(r.trace)):
            bad_step = [c for c in r.select(step=s) if not c.explained]
            assert bad_step and (bad_step[0].name, bad_step[0].cause) == ("_1", "format")


@pytest.mark.parametrize("mode", MODES)
def test_wrong_accumulation_rounding_is_pinned_to_the_first_linear(mode: str) -> None:
    # a bfloat16 accumulator (rounding after every addition) instead of float32
    bad = dataclasses.replace(get_policy("torch_cpu_bf16"), name="wrong", acc="bfloat16",
                              acc_model="sequential")  # fmt: skip
    r = _bf16_run(policy=bad, mode=mode)
    first = r.first_unexplained()
    assert first is not None and (first.step, first.kind, first.name) == (0, "activation", "_0")
    assert first.op == "linear" and first.cause == "reduction order"
    assert first.local_ulps is not None and first.local_ulps > 0
    if mode == "lockstep":  # fpemu's side is the recomputation itself
        assert first.local_ulps == first.max_ulps


@pytest.mark.parametrize("mode", MODES)
def test_wrong_relu_rounding_is_unexplained_at_that_node(monkeypatch: pytest.MonkeyPatch,
                                                         mode: str) -> None:  # fmt: skip
    def relu_rtz(x: Tensor) -> Tensor:  # relu that nudges values one bf16 ulp toward zero
        y = fn.relu(x)
        v = np.asarray(y.data, np.float64)
        return Tensor(round_to(v * (1 - 2**-8), y.fmt), y.fmt)

    monkeypatch.setitem(GRAPH_OPS, "relu", relu_rtz)
    r = _bf16_run(mode=mode)
    first = r.first_unexplained()
    assert first is not None and (first.step, first.kind, first.name) == (0, "activation", "_1")
    assert first.cause == "unexplained" and first.op == "relu"


@pytest.mark.parametrize("mode", MODES)
def test_wrong_optimizer_is_pinned_to_the_update(monkeypatch: pytest.MonkeyPatch,
                                                 mode: str) -> None:  # fmt: skip
    real = compare_mod._optimizer

    def wrong(name: str, params: Any, hyper: Any) -> Any:  # momentum 0.5 instead of 0.9
        return real(name, params, {**hyper, "momentum": 0.5})

    monkeypatch.setattr(compare_mod, "_optimizer", wrong)
    r = _bf16_run(mode=mode)
    first = r.first_unexplained()
    # step 0: the momentum buffer is the gradient itself whatever the momentum; step 1 differs
    assert first is not None and (first.step, first.kind) == (1, "param")
    assert first.cause == "optimizer" and first.name == "0.weight"


@pytest.mark.parametrize("mode", MODES)
def test_wrong_scaler_is_pinned_to_the_growth_step(monkeypatch: pytest.MonkeyPatch,
                                                   mode: str) -> None:  # fmt: skip
    def wrong(name: str, **kw: Any) -> Any:  # grows after 3 finite steps instead of 2
        return get_scaler(name, **{**kw, "growth_interval": kw.get("growth_interval", 1) + 1})

    monkeypatch.setattr(compare_mod, "get_scaler", wrong)
    model, x, y, kw = ZOO["gelu_tanh_fp16_scaler_sgd"]()
    r = compare_torch(model, x, y, mode=mode, **kw)
    first = r.first_unexplained()
    assert first is not None and (first.step, first.kind) == (1, "scaler")
    assert first.first is not None and first.first["index"] == "(0,)"  # the scale itself


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
    assert d["settings"]["policy"] == "torch_cpu_fp16" and d["settings"]["steps"] == 2
    assert d["settings"]["grad_scaler"] == {"init_scale": 1024.0, "growth_interval": 1}
    assert main(["validate", "model", f"{f}:options", "--steps", "1", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "- optimizer: adam" in out and "| step | kind |" in out


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


# -- autocast audit -----------------------------------------------------------------------------
def test_audit_lists_every_op_with_torch_and_policy_formats() -> None:
    model, x, y, kw = ZOO["layernorm_bf16_adamw"]()
    r = compare_torch(model, x, y, **{**kw, "steps": 1})
    ops = {(a["phase"], a["aten op"]): a for a in r.audit}
    assert ops[("forward", "addmm")]["torch output"] == "bfloat16"
    assert ops[("forward", "native_layer_norm")]["torch inputs"] == "bfloat16,float32,float32"
    assert ops[("forward", "nll_loss_forward")]["fpemu output"] == "float32"
    assert ops[("backward", "native_layer_norm_backward")]["verdict"] == "agree"
    mapped = [a for a in r.audit if a["fpemu op"] != "-"]
    assert mapped and all(a["verdict"] == "agree" for a in mapped)
    # ops with no policy entry (casts, views) are listed, not dropped
    assert ops[("forward", "_to_copy")]["verdict"] == "not in the policy"
    assert "### autocast audit" in r.to_markdown()


def test_audit_shows_a_wrong_policy_entry() -> None:
    bad = dataclasses.replace(get_policy("torch_cpu_bf16"), name="wrong", fp32=frozenset(
        {"relu", "cross_entropy", "mse"}))  # fmt: skip
    r = _bf16_run(policy=bad, steps=1)
    relu = next(a for a in r.audit if a["aten op"] == "relu")
    assert (relu["torch output"], relu["fpemu output"], relu["verdict"]) == (
        "bfloat16", "float32", "differ")


def test_layer_norm_model_exact_with_two_threads() -> None:
    # torch's LayerNorm weight gradients depend on its thread count (one low-precision buffer
    # per thread); from_torch reads torch.get_num_threads() so the twin follows it
    torch.set_num_threads(2)
    model, x, y, kw = ZOO["layernorm_bf16_adamw"]()
    r = compare_torch(model, x, y, **{**kw, "steps": 1})
    assert r.ok
    for kind in ("activation", "backward", "grad"):
        assert all(c.exact for c in r.select(step=0, kind=kind)), kind
    ln = next(n for n in from_torch(model).nodes if n.op == "layer_norm")
    assert dict(ln.options)["threads"] == 2


def test_compare_leaves_the_users_model_untouched() -> None:
    net = _mlp()
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    x, y = _batch()
    compare_torch(net, x, y, autocast=("cpu", torch.bfloat16), steps=2, lr=0.5)
    for n, p in net.named_parameters():
        assert torch.equal(p, before[n]) and p.grad is None, n


def test_cli_prints_a_table_by_default(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "net.py"
    f.write_text(FACTORY)
    assert main(["validate", "model", f"{f}:make", "--steps", "1", "--autocast", "off"]) == 0
    out = capsys.readouterr().out
    assert "compare_torch" in out and "tensors bit-identical" in out
