"""compare_torch on the op table: the watch zoo in both modes, planted faults, the twin's drift
(nonzero where a bounded op's value differs from torch's kernel, zero where every op on the
path to the parameters is bit-identical), the caller's objects left alone, bad arguments.

The zoo is tests/watch_zoo.py (19 models) under its three configurations (bf16 autocast +
AdamW, fp16 autocast + GradScaler + SGD momentum, float32 + AdamW), 3 steps. A correct model
must give 0 rows ``differs``, ``policy`` or ``not_emulated`` and 0 procedure findings, in both
modes; in the independent mode the twin must run every op from the table (nothing left to
torch's kernel, no emulation failing). Three models per configuration run by default; every
model, configuration and mode for seed 0 with ``-m slow``, seeds 1-4 too.
"""

from __future__ import annotations

import copy
import io
import json
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from rich.console import Console  # noqa: E402
from torch import nn  # noqa: E402

import fpemu  # noqa: E402
from fpemu.validate import TwinReport, compare_torch  # noqa: E402
from tests.test_watch_faults import GradRounder, Net  # noqa: E402
from tests.watch_zoo import CONFIGS, ZOO, loss_fn, setup, train_step  # noqa: E402

MODES = ("independent", "lockstep")
FINDINGS = ("differs", "policy", "not_emulated")
#: the default run: three models per configuration, covering attention (by hand, SDPA and
#: nn.MultiheadAttention), convolutions with BatchNorm and pooling, embeddings with a tied
#: head, Dropout in train mode, shared weights and the functional API
DEFAULT = {
    "bf16_adamw": ("gpt_manual_attention", "cnn_batchnorm", "mlp_silu_dropout"),
    "fp16_scaler_sgd": ("gpt_sdpa", "shared_weights", "mha_encoder"),
    "fp32_adamw": ("gpt_dropout", "functional", "cnn1d"),
}


def _options(config: str) -> dict[str, Any]:
    if config == "bf16_adamw":
        return {"autocast": ("cpu", torch.bfloat16), "optimizer": "adamw", "lr": 1e-3}
    if config == "fp16_scaler_sgd":
        return {"autocast": ("cpu", torch.float16), "optimizer": "sgd", "lr": 0.05,
                "momentum": 0.9, "grad_scaler": {}}  # fmt: skip
    return {"optimizer": "adamw", "lr": 1e-3}


def _zoo(name: str, config: str, mode: str, seed: int = 0) -> TwinReport:
    """compare_torch on the zoo's model, data and configuration (as tests/watch_zoo.setup
    makes them: the same weights and batches the watch zoo trains)."""
    factory, data, kind = ZOO[name]
    torch.manual_seed(seed)
    model = factory().train()
    g = torch.Generator().manual_seed(1000 + seed)
    batches = [data(g) for _ in range(3)]
    return compare_torch(model, [x for x, _ in batches], [y for _, y in batches],
                         loss=lambda out, y: loss_fn(kind, out, y), steps=3, mode=mode,
                         **_options(config))  # fmt: skip


def _check_zoo(name: str, config: str, mode: str, seed: int = 0) -> None:
    r = _zoo(name, config, mode, seed)
    bad = [(x["step"], x["phase"], x["module"], x["op"], x["verdict"], x["cause"][:100])
           for x in r.rows if x["verdict"] in FINDINGS]  # fmt: skip
    assert not bad, f"{name}/{config}/{mode}/seed {seed}: {len(bad)} rows, first {bad[:3]}"
    assert r.procedure == [] and r.ok, r.summary()
    assert r.watch.settings["steps"] == 3 and len(r.trace) == 3
    assert {x["phase"] for x in r.rows} >= {"forward", "backward", "optimizer"}
    if mode == "lockstep":
        assert r.drift == [] and r.emulation == {}
        assert all(t["loss_twin"] is None for t in r.trace)
        return
    assert r.emulation["not_emulated"] == {} and r.emulation["failed"] == {}
    assert r.emulation["emulated"] > 0
    n_params = len({d["name"] for d in r.drift if d["kind"] == "param"})
    assert n_params == len(list(ZOO[name][0]().parameters()))
    assert all(math.isfinite(t["loss_twin"]) for t in r.trace)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("config", "name"), [(c, n) for c, ns in DEFAULT.items() for n in ns])
def test_zoo_default(name: str, config: str, mode: str) -> None:
    _check_zoo(name, config, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_seed0_every_model(name: str, config: str, mode: str) -> None:
    _check_zoo(name, config, mode)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_more_seeds(name: str, config: str, mode: str, seed: int) -> None:
    _check_zoo(name, config, mode, seed)


def test_lockstep_is_the_watch_around_the_same_step() -> None:
    """The lockstep report's rows are those of ``fpemu.watch`` around the zoo's own training
    loop (tests/watch_zoo.train_step) on the same model, optimizer, scaler and batches."""
    name, config = "shared_weights", "fp16_scaler_sgd"
    model, opt, scaler, batches = setup(name, config, 0)
    start = copy.deepcopy(model)
    with fpemu.watch() as w:
        for batch in batches:
            train_step(name, config, model, opt, scaler, batch)
    want = [(x["step"], x["phase"], x["module"], x["op"], x["verdict"]) for x in w.report().rows]
    r = compare_torch(start, [x for x, _ in batches], [y for _, y in batches], steps=3,
                      mode="lockstep", **_options(config))  # fmt: skip
    got = [(x["step"], x["phase"], x["module"], x["op"], x["verdict"]) for x in r.rows]
    assert got == want


# -- planted faults ----------------------------------------------------------------------------
def _fault_data() -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=g), torch.randint(0, 3, (4,), generator=g)


@pytest.mark.parametrize("mode", MODES)
def test_backward_rounded_to_bf16_in_a_float32_run_is_reported(mode: str) -> None:
    torch.manual_seed(0)
    x, y = _fault_data()
    r = compare_torch(Net(GradRounder()), x, y, steps=2, mode=mode)
    bad = [row for row in r.rows if row["verdict"] in FINDINGS]
    assert not r.ok and bad
    assert {(b["phase"], b["module"], b["op"], b["verdict"]) for b in bad} == {
        ("backward", "mid", "aten._to_copy.default", "policy")
    }
    assert {b["step"] for b in bad} == {0, 1}
    torch.manual_seed(0)  # the same net without the fault: nothing (the test above can fail)
    assert compare_torch(Net(nn.ReLU()), x, y, steps=2, mode=mode).ok


@pytest.mark.parametrize("mode", MODES)
def test_a_scaler_rebuilt_every_step_in_the_users_step_is_reported(mode: str) -> None:
    def step(model: Any, opt: Any, scaler: Any, x: Any, y: Any) -> Any:
        scaler = torch.amp.GradScaler("cpu")  # the fault: a new scaler every step
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    torch.manual_seed(0)
    x, y = _fault_data()
    r = compare_torch(Net(nn.ReLU()), x, y, steps=3, mode=mode, step=step)
    assert not r.ok and {p["finding"] for p in r.procedure} == {"scaler rebuilt"}
    assert r.counts["differs"] == r.counts["policy"] == 0


# -- drift -------------------------------------------------------------------------------------
def test_bf16_gpt_drifts_and_the_drift_is_not_a_finding() -> None:
    """Bounded ops (GEMMs summed in another order, torch's vectorised sqrt against a correctly
    rounded one) give the twin other values; training carries them on."""
    r = _zoo("gpt_manual_attention", "bf16_adamw", "independent")
    assert r.ok and r.counts["bounded"] > 0
    last = r.drifted(step=2)
    assert last and max(d["max_ulps"] for d in last) > 1
    grew = [len(r.drifted(step=s)) for s in range(3)]
    assert grew[2] >= grew[0] and grew[2] > 0
    assert r.trace[2]["loss_torch"] != r.trace[2]["loss_twin"]
    assert "drift at step 2" in r.summary() and r.summary().endswith(": OK")


def _relu_mse(dtype: Any, scaler: Any, seed: int) -> TwinReport:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(16, 8, generator=g) for _ in range(5)]
    ys = [torch.randn(16, 3, generator=g) for _ in range(5)]
    return compare_torch(net, xs, ys, loss="mse", optimizer="sgd", lr=0.1, momentum=0.9,
                         autocast=("cpu", dtype), grad_scaler=scaler, steps=5)  # fmt: skip


@pytest.mark.parametrize(("dtype", "scaler"), [("bfloat16", None), ("float16", {})])
@pytest.mark.parametrize("seed", [0, 1])
def test_zero_drift_where_every_op_is_identical(dtype: str, scaler: Any, seed: int) -> None:
    """A ReLU MLP with Dropout(0.5), MSE and SGD momentum under autocast, 5 steps. The watch
    finds every op bit-identical to the table's value except the loss value itself
    (``mse_loss``'s float32 sum, in torch's vectorised order), which is an output only (its
    backward reads the inputs, not the loss). The twin computes each op from the same inputs
    as torch did, so by induction over the ops it reproduces every parameter, gradient and
    the scale bit for bit; this also shows both runs drew the same Dropout masks. The twin's
    loss is the table's value, as far from torch's as the watch measured."""
    r = _relu_mse(getattr(torch, dtype), scaler, seed)
    others = {x["op"] for x in r.rows if x["verdict"] != "identical"}
    assert others <= {"aten.mse_loss.default"}, others
    assert r.ok and r.drift and r.drifted() == []
    assert all(t["scale_torch"] == t["scale_twin"] for t in r.trace)
    loss_rows = [x for x in r.rows if x["op"] == "aten.mse_loss.default"]
    assert [t["loss_ulps"] for t in r.trace] == [x["ulps"] for x in loss_rows]


def test_the_twin_takes_each_value_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant a one-ulp error in the table's ReLU: the watch says ``differs`` and the twin,
    which computes with the table, drifts where it did not before."""
    import numpy as np  # noqa: PLC0415

    from fpemu.validate import ops  # noqa: PLC0415

    real = ops.lookup("aten.relu.default")
    assert real is not None

    def off_by_one(call: Any) -> Any:
        (out,) = real(call)
        v = np.asarray(out.value).copy()
        v[v > 0] = np.nextafter(v[v > 0], np.float32(np.inf), dtype=v.dtype)
        return [ops.exact(v)]

    monkeypatch.setitem(ops.TABLE, "aten.relu.default", off_by_one)
    torch.manual_seed(0)
    x, y = _fault_data()
    r = compare_torch(Net(nn.ReLU()), x, y, steps=2)  # float32: the table's relu is float32
    assert not r.ok and {x["op"] for x in r.rows if x["verdict"] == "differs"} == {
        "aten.relu.default"
    }
    assert r.drifted(step=0)


# -- the caller's objects, the user's step, the report ------------------------------------------
def test_model_and_generator_are_left_untouched() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 3)).train()
    before = {n: p.detach().clone() for n, p in net.named_parameters()}
    x, y = _fault_data()
    torch.manual_seed(123)
    state = torch.get_rng_state()
    compare_torch(net, x, y, steps=2, lr=0.5, optimizer="adamw")
    assert torch.equal(torch.get_rng_state(), state)
    assert net.training
    for n, p in net.named_parameters():
        assert torch.equal(p, before[n]) and p.grad is None, n


@pytest.mark.parametrize("mode", MODES)
def test_users_step_and_a_factory_optimizer(mode: str) -> None:
    # (clip_grad_norm_ is left out: its aten.linalg_vector_norm has no emulation yet, and
    # compare_torch would say so, not_emulated)
    def step(model: Any, opt: Any, scaler: Any, x: Any, y: Any) -> Any:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.CrossEntropyLoss(label_smoothing=0.1)(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        scaler.step(opt)
        scaler.update()
        return loss

    torch.manual_seed(0)
    x, y = _fault_data()
    r = compare_torch(Net(nn.ReLU()), x, y, steps=2, mode=mode, step=step, grad_scaler={},
                      optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.5))  # fmt: skip
    assert r.ok, r.summary()
    assert any(x["phase"] == "scaler" for x in r.rows)
    assert r.trace[1]["scale_torch"] == 65536.0  # growth_interval 2000: no change yet
    assert r.settings["step"].startswith("<function")


def test_report_formats() -> None:
    torch.manual_seed(0)
    x, y = _fault_data()
    r = compare_torch(Net(nn.ReLU()), x, y, steps=2, autocast=("cpu", torch.bfloat16))
    d = json.loads(r.to_json())
    assert d["ok"] is True and d["counts"] == r.counts and len(d["rows"]) == len(r.rows)
    assert [t["step"] for t in d["trace"]] == [0, 1] and len(d["drift"]) == len(r.drift)
    assert d["settings"]["autocast"] == ["cpu", "bfloat16"] and d["audit"] == r.audit
    md = r.to_markdown()
    assert md.startswith("## compare_torch") and "| step | loss torch | loss twin |" in md
    assert "### fpemu.watch of torch's run" in md and r.summary() in md
    buf = io.StringIO()
    r.render(Console(file=buf, width=200))
    assert r.summary() in buf.getvalue().replace("\n", "")
    assert repr(r).startswith("TwinReport('compare_torch (independent)")


# -- bad arguments -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kw", "error", "match"),
    [({"loss": "hinge"}, ValueError, "loss='hinge': accepted 'cross_entropy', 'mse'"),
     ({"optimizer": "rmsprop"}, ValueError, "optimizer='rmsprop': accepted sgd, adam, adamw"),
     ({"steps": 0}, ValueError, "steps=0: accepted an int >= 1"),
     ({"mode": "fast"}, ValueError, "mode='fast': accepted independent, lockstep"),
     ({"autocast": ("cuda", torch.float16)}, ValueError, "autocast=.*accepted None or"),
     ({"autocast": ("cpu", torch.float64)}, ValueError, "autocast=.*accepted None or"),
     ({"grad_scaler": {"init": 1.0}}, ValueError, "grad_scaler=.*unknown keys \\['init'\\]"),
     ({"grad_scaler": 2.0}, TypeError, "grad_scaler=2.0: accepted None or a dict"),
     ({"lr": 0.0}, ValueError, "lr=0.0: accepted a number in \\(0, inf\\)"),
     ({"lr": float("nan")}, ValueError, "lr=nan: accepted"),
     ({"momentum": 1.5}, ValueError, "momentum=1.5: accepted a number in \\[0, 1\\)"),
     ({"betas": (0.9,)}, ValueError, "betas=\\(0.9,\\): accepted two numbers"),
     ({"eps": 0}, ValueError, "eps=0: accepted"),
     ({"seed": "1"}, TypeError, "seed='1': accepted an int"),
     ({"audit": "yes"}, TypeError, "audit='yes': accepted True or False"),
     ({"step": 3}, TypeError, "step=3: accepted None or a callable"),
     ({"step": lambda *a: None, "autocast": ("cpu", torch.bfloat16)}, ValueError,
      "autocast=.*not with step="),
     ({"policy": 5}, TypeError, "policy must be a preset name or a Policy"),
     ({"policy": "nope"}, ValueError, "nope")],
)  # fmt: skip
def test_bad_arguments_name_the_argument(kw: dict[str, Any], error: type, match: str) -> None:
    x, y = _fault_data()
    with pytest.raises(error, match=match):
        compare_torch(Net(nn.ReLU()), x, y, **kw)


def test_bad_model_and_batches_are_named() -> None:
    x, y = _fault_data()
    with pytest.raises(TypeError, match=r"model: accepted a torch\.nn\.Module, got function"):
        compare_torch(lambda t: t, x, y)
    with pytest.raises(ValueError, match="inputs is empty"):
        compare_torch(Net(nn.ReLU()), [], y)
    with pytest.raises(TypeError, match="targets: a batch is str"):
        compare_torch(Net(nn.ReLU()), x, "labels")
