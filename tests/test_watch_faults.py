"""Planted faults: ``fpemu.watch`` reports each at the right phase and module (issue 22).

* a custom ``autograd.Function`` whose backward rounds the gradient to bfloat16 -> ``policy``,
  backward, in the module that applies it (float32 run and bf16 autocast run);
* an activation rounded through bfloat16 in a float32 run -> ``policy``, forward;
* a CPU kernel replaced through ``torch.library`` by one that is one ulp off -> ``differs``;
* a GradScaler rebuilt every step -> procedure finding ``scaler rebuilt``;
* a ``.half()`` inside a ``no_grad`` block -> ``policy``, forward;
and the other procedure findings (non-finite step, fp16 backward without scaling, clipping
still-scaled gradients), each on an otherwise correct program.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402, N812
from torch import nn  # noqa: E402

import fpemu  # noqa: E402


class RoundGradBF16(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g.to(torch.bfloat16).to(g.dtype)


class Net(nn.Module):
    def __init__(self, middle: nn.Module) -> None:
        super().__init__()
        self.fc1, self.mid, self.fc2 = nn.Linear(8, 16), middle, nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.mid(self.fc1(x)))


class GradRounder(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # .float(): under bf16 autocast the gradient reaching the Function is float32 too
        return RoundGradBF16.apply(torch.relu(x).float())


class ActRounder(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).to(torch.bfloat16).float()


class HalfStats(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            scale = x.half().abs().amax().float() + 1.0
        return torch.relu(x) / scale


def _train(
    net: nn.Module, *, steps: int = 2, autocast: Any = None, scaler: str = "none",
    clip: bool = False, sgd_lr: float = 0.1,
) -> fpemu.validate.watch.WatchReport:  # fmt: skip
    torch.manual_seed(0)
    xs = [torch.randn(4, 8) for _ in range(steps)]
    ys = [torch.randint(0, 3, (4,)) for _ in range(steps)]
    opt = torch.optim.SGD(net.parameters(), lr=sgd_lr)
    gs = torch.amp.GradScaler("cpu") if scaler == "once" else None
    with fpemu.watch() as w:
        for x, y in zip(xs, ys, strict=True):
            opt.zero_grad()
            if scaler == "every_step":
                gs = torch.amp.GradScaler("cpu")
            on = autocast is not None
            with torch.autocast("cpu", dtype=autocast or torch.float32, enabled=on):
                loss = F.cross_entropy(net(x), y)
            if gs is None:
                loss.backward()
                if clip:
                    nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                opt.step()
            else:
                gs.scale(loss).backward()
                if clip:
                    nn.utils.clip_grad_norm_(net.parameters(), 1.0)
                gs.step(opt)
                gs.update()
    return w.report()


def _rows(r: Any, verdict: str) -> list[dict[str, Any]]:
    return [row for row in r.rows if row["verdict"] == verdict]


@pytest.mark.parametrize("autocast", [None, torch.bfloat16])
def test_custom_function_backward_rounding_to_bf16(autocast: Any) -> None:
    r = _train(Net(GradRounder()), autocast=autocast)
    bad = _rows(r, "policy")
    assert bad, r.summary()
    assert {(b["phase"], b["module"], b["op"]) for b in bad} == {
        ("backward", "mid", "aten._to_copy.default")
    }
    assert "custom autograd.Function" in bad[0]["cause"]
    assert {b["step"] for b in bad} == {0, 1}


def test_activation_rounded_through_bf16_in_float32_run() -> None:
    r = _train(Net(ActRounder()))
    bad = _rows(r, "policy")
    assert {(b["phase"], b["module"], b["op"]) for b in bad} == {
        ("forward", "mid", "aten._to_copy.default")
    }
    assert "autocast off" in bad[0]["cause"]


def test_half_inside_no_grad() -> None:
    r = _train(Net(HalfStats()), autocast=torch.bfloat16)
    bad = _rows(r, "policy")
    assert {(b["phase"], b["module"], b["op"]) for b in bad} == {
        ("forward", "mid", "aten._to_copy.default")
    }
    assert "float16" in bad[0]["cause"]


def test_correct_programs_of_the_fault_tests_are_clean() -> None:
    """The same nets without the fault: nothing to report (the tests above can fail)."""
    for net in (Net(nn.ReLU()),):
        for autocast in (None, torch.bfloat16):
            r = _train(net, autocast=autocast)
            assert not _rows(r, "policy") and not _rows(r, "differs"), r.summary()
    r = _train(Net(nn.ReLU()), autocast=torch.float16, scaler="once", clip=False)
    assert r.procedure == [] and not _rows(r, "policy") and not _rows(r, "differs")


def test_kernel_one_ulp_off_through_torch_library() -> None:
    lib = torch.library.Library("aten", "IMPL")

    def bad_relu(x: torch.Tensor) -> torch.Tensor:
        out = torch.where(x > 0, x, torch.zeros((), dtype=x.dtype))
        flat = out.view(-1)
        flat[0] = torch.nextafter(flat[0], torch.tensor(float("inf"), dtype=x.dtype))
        return out

    with warnings.catch_warnings():  # torch warns that it overrides its own kernel: intended
        warnings.simplefilter("ignore", UserWarning)
        lib.impl("relu", bad_relu, "CPU")
    try:
        r = _train(Net(nn.ReLU()))
    finally:
        del lib  # unregisters the kernel
    bad = _rows(r, "differs")
    assert bad and all(b["op"] == "aten.relu.default" for b in bad)
    assert {(b["phase"], b["module"]) for b in bad} == {("forward", "mid")}
    assert bad[0]["ndiff"] == 1 and bad[0]["ulps"] == 1.0
    r = _train(Net(nn.ReLU()))  # the kernel is torch's own again
    assert not _rows(r, "differs")


def test_scaler_rebuilt_every_step() -> None:
    r = _train(Net(nn.ReLU()), autocast=torch.float16, scaler="every_step", steps=3)
    found = [p for p in r.procedure if p["finding"] == "scaler rebuilt"]
    assert [p["step"] for p in found] == [1, 2]
    assert not _train(Net(nn.ReLU()), autocast=torch.float16, scaler="once", steps=3).procedure


def test_fp16_backward_without_loss_scaling() -> None:
    r = _train(Net(nn.ReLU()), autocast=torch.float16)
    found = {p["finding"] for p in r.procedure}
    assert "fp16 backward without loss scaling" in found


def test_clipping_scaled_gradients() -> None:
    r = _train(Net(nn.ReLU()), autocast=torch.float16, scaler="once", clip=True)
    assert [p["finding"] for p in r.procedure] == ["clipping scaled gradients"] * 2


def test_step_on_non_finite_gradients() -> None:
    net = Net(nn.ReLU())
    with torch.no_grad():
        net.fc1.weight[0, 0] = float("inf")
    r = _train(net, steps=1)
    assert [p["finding"] for p in r.procedure] == ["step on non-finite gradients"]


def test_report_contract() -> None:
    r = _train(Net(nn.ReLU()), steps=1)
    assert set(r.counts) == {"identical", "bounded", "differs", "policy", "not_emulated"}
    for row in r.rows:
        assert {"step", "phase", "module", "op", "verdict", "cause"} <= set(row)
        assert row["phase"] in ("forward", "backward", "optimizer", "scaler")
    data = json.loads(r.to_json())
    assert data["counts"] == r.counts and len(data["rows"]) == len(r.rows)
    assert r.to_markdown().startswith("# fpemu watch report")
    assert r.summary().startswith("watch: ")


def test_bad_policy_argument() -> None:
    with pytest.raises(ValueError, match="policy"), fpemu.watch(policy="no_such_policy"):
        pass
    with pytest.raises(TypeError, match="policy"), fpemu.watch(policy=3):
        pass


def test_importing_fpemu_does_not_import_torch() -> None:
    code = "import sys, fpemu; assert 'torch' not in sys.modules; fpemu.watch; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_non_finite_gradients_found_per_tensor(capability: str) -> None:
    """The batched finiteness test (one inf-norm per gradient) names exactly the gradients
    holding an inf or a NaN, whatever their dtype and wherever the value lies (a NaN after
    finite values and before them, -inf, a float16 gradient at its largest finite value, an
    empty one), under each CPU capability's kernels (a subprocess each)."""
    code = textwrap.dedent(
        """
        import torch
        from fpemu.validate.watch.procedure import _non_finite
        nan, inf = float("nan"), float("inf")
        big = torch.full((300,), 65504.0, dtype=torch.float16)
        grads = [
            torch.ones(1000),                                        # 0 finite
            torch.cat([torch.ones(700), torch.tensor([nan])]),       # 1 NaN last
            torch.cat([torch.tensor([nan]), torch.ones(700)]),       # 2 NaN first
            torch.tensor([1.0, -inf, 2.0]),                          # 3 -inf
            big,                                                     # 4 fp16 max: finite
            torch.tensor([inf], dtype=torch.bfloat16),               # 5 inf bf16
            torch.zeros(0),                                          # 6 empty: finite
            torch.full((33,), nan, dtype=torch.float16),             # 7 all NaN
            torch.randn(64, 64, dtype=torch.float64),                # 8 finite float64
        ]
        print(_non_finite(grads), _non_finite([]), _non_finite([torch.zeros(0)]))
        """
    )
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parent.parent)  # fmt: skip
    assert out.stdout.split("\n")[0] == "[1, 2, 3, 5, 7] [] []"
