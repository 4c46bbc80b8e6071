"""fpemu.validate against the installed torch: every check passes on fpemu and fails on a
deliberately wrong reference (a wrong rounding, preset, scaler or optimizer)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import fpemu  # noqa: E402
from fpemu.amp.policy import get_policy  # noqa: E402
from fpemu.amp.scaling import TorchGradScaler  # noqa: E402
from fpemu.cli.validate import main as cli_main  # noqa: E402
from fpemu.validate import ScalerRecorder, check_trace, validate_torch  # noqa: E402
from fpemu.validate.frameworks.torch_autocast import check_autocast  # noqa: E402
from fpemu.validate.frameworks.torch_casts import (  # noqa: E402
    TARGETS,
    check_cast,
    exhaustive_float32,
    float32_sample,
    float64_sample,
)
from fpemu.validate.frameworks.torch_scaler import (  # noqa: E402
    SCRIPTS,
    check_misuse,
    check_scripts,
    check_training_replay,
)
from fpemu.validate.frameworks.torch_training import check_sgd_update, check_training  # noqa: E402

torch.set_num_threads(1)


# -- casts --------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", TARGETS)
def test_float32_casts_match_fpemu(fmt: str) -> None:
    res = check_cast(fmt, float32_sample(fmt, n_random=2**14))
    assert res.ok, res.detail()
    assert res.compared > 2**14


def test_e4m3fn_overflow_convention_is_discovered() -> None:
    res = check_cast("float8_e4m3fn", float32_sample("float8_e4m3fn", n_random=256))
    # torch's cast of 1e9 and of inf, observed directly, decides what the check must report.
    big = torch.tensor([1e9, float("inf")]).to(torch.float8_e4m3fn).float().tolist()
    expected = "saturate" if big == [448.0, 448.0] else "nan"
    assert res.data["overflow"] == expected
    assert res.status == ("agree" if expected == "nan" else "finding")


def test_float64_double_rounding_answer() -> None:
    w = 1 + 2**-8 + 2**-40  # above bf16's midpoint 1 + 2**-8; float32 rounds it onto the tie
    torch_says = torch.tensor([w], dtype=torch.float64).to(torch.bfloat16).double().item()
    once = float(fpemu.round(w, "bfloat16"))
    assert once == 1 + 2**-7  # one correct rounding goes up
    res = check_cast("bfloat16", float64_sample("bfloat16", n_random=256))
    assert res.ok
    if torch_says == 1.0:  # torch rounded through float32 (double rounding)
        assert res.status == "finding" and res.data["model"] == "via float32"
        assert res.witness is not None and "0x3f80" in res.witness["torch"]
    else:
        assert res.data["model"] == "once"


@pytest.mark.parametrize("fmt", ["float16", "float8_e5m2"])
def test_float64_casts_match_a_model(fmt: str) -> None:
    assert check_cast(fmt, float64_sample(fmt, n_random=256)).ok


def _rtz(x: Any, fmt: Any, *, overflow: Any = None) -> Any:
    return fpemu.round(x, fmt, mode="rtz", overflow=overflow)


def _flush(x: Any, fmt: Any, *, overflow: Any = None) -> Any:
    return fpemu.round(x, fmt, subnormals=False, overflow=overflow)


@pytest.mark.parametrize("wrong", [_rtz, _flush])
@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn"])
def test_cast_check_catches_a_wrong_rounding(wrong: Any, fmt: str) -> None:
    res = check_cast(fmt, float32_sample(fmt, n_random=1024), reference=wrong)
    assert res.status == "differ"
    assert res.witness is not None and set(res.witness) == {"input", "torch", "fpemu"}
    x = np.array([int(res.witness["input"].split()[0], 16)], np.uint32).view(np.float32)
    theirs = torch.from_numpy(x).to(getattr(torch, fmt)).float().numpy()
    ours = np.asarray(wrong(x, fmt, overflow=res.data.get("overflow")), np.float32)
    assert theirs.view(np.uint32)[0] != ours.view(np.uint32)[0] or np.isnan(theirs[0])


def test_exhaustive_slice_and_its_failure() -> None:
    lo = 0x3F800000 - 2**19  # around 1.0, both binades
    assert exhaustive_float32("bfloat16", start=lo, stop=lo + 2**20, progress=False).ok
    bad = exhaustive_float32(
        "float16", start=lo, stop=lo + 2**20, progress=False, reference=_rtz, chunk=2**18
    )
    assert bad.status == "differ" and bad.data["mismatches"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"])
def test_exhaustive_float32(fmt: str) -> None:
    # the overflow convention is the one torch showed on the sample (e4m3fn: saturate)
    ovf = check_cast(fmt, float32_sample(fmt, n_random=256)).data["overflow"]
    res = exhaustive_float32(fmt, overflow=ovf, progress=False)
    assert res.ok and res.compared == 2**32, res.detail()


# -- autocast -----------------------------------------------------------------------------------
def test_autocast_presets_match_torch() -> None:
    for res in check_autocast():
        assert res.status == "agree", res.detail()
        assert res.compared == 2 * 20


def test_autocast_catches_a_wrong_preset() -> None:
    good = get_policy("torch_cpu_bf16")
    wrong = dataclasses.replace(good, name="wrong_softmax", lower=good.lower | {"softmax"})
    (res,) = check_autocast([wrong])
    assert res.status == "differ"
    assert res.witness == {"case": "softmax(x, -1) x=float32", "torch": "float32",
                           "fpemu": "bfloat16"}  # fmt: skip


# -- GradScaler ---------------------------------------------------------------------------------
def test_scaler_scripts_agree() -> None:
    results = check_scripts()
    assert [r.status for r in results] == ["agree"] * len(SCRIPTS), [r.detail() for r in results]


class _OffByOne(TorchGradScaler):
    """Wrong on purpose: grows one update late, yet reports the requested interval."""

    def __init__(self, **kw: Any) -> None:
        self.requested = kw.get("growth_interval", 2000)
        super().__init__(**{**kw, "growth_interval": self.requested + 1})

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "growth_interval": self.requested}


def _off_by_one(**kw: Any) -> TorchGradScaler:
    return _OffByOne(**kw)


class _BackoffQuarter(TorchGradScaler):
    """Wrong on purpose: backs off by 0.25, yet reports torch's 0.5."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**{**kw, "backoff_factor": 0.25})

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "backoff_factor": 0.5}


def _backoff_quarter(**kw: Any) -> TorchGradScaler:
    return _BackoffQuarter(**kw)


def test_scaler_scripts_catch_growth_interval_off_by_one() -> None:
    res = check_scripts(SCRIPTS[:1], make_scaler=_off_by_one)[0]
    assert res.status == "differ"
    assert res.witness is not None
    # growth_interval=3: torch grows at the third finite update, the wrong scaler does not.
    assert res.witness["update"] == "2"
    assert res.witness["field"] == "scale"


def test_scaler_scripts_catch_a_wrong_backoff() -> None:
    res = check_scripts(SCRIPTS[:1], make_scaler=_backoff_quarter)[0]
    assert res.status == "differ" and res.witness is not None
    assert res.witness["event"] == "inf"


def test_misuse_errors_match() -> None:
    results = check_misuse()
    assert all(r.status == "agree" for r in results), [r.detail() for r in results if not r.ok]
    assert len(results) >= 12


class _Lenient(TorchGradScaler):
    """Wrong on purpose: forgets that unscale_ already ran."""

    def unscale_(self, target: Any) -> bool:
        st = self._states.get(id(target))
        if st is not None and st.stage == "unscaled":
            st.stage = "ready"
        return super().unscale_(target)


def test_misuse_check_catches_a_missing_error() -> None:
    results = {r.name: r for r in check_misuse(make_scaler=lambda **kw: _Lenient(**kw))}
    bad = results["misuse: unscale_ twice before update"]
    assert bad.status == "differ" and bad.witness is not None
    assert bad.witness["fpemu"] == "no error"
    assert bad.witness["torch"].startswith("RuntimeError: unscale_() has already been called")


def test_training_replay() -> None:
    assert check_training_replay(steps=15).status == "agree"
    assert check_training_replay(steps=15, make_scaler=_off_by_one).status == "differ"


# -- training side by side ----------------------------------------------------------------------
def test_training_side_by_side() -> None:
    # The verdict rests on the exact scale and skip sequences; the loss drift is reported (no
    # bound on it follows from the numerics: one logit rounding the other way changes the run).
    for res in check_training(steps=12):
        assert res.ok, res.detail()
        assert res.status in ("agree", "finding")
        assert np.isfinite(res.data["max_loss_diff_ulps"])
    (strict,) = check_training((("torch_cpu_fp16", True),), steps=12, max_ulps=-1.0)
    assert strict.status == "differ" and "torch loss" in (strict.witness or {})  # caller's bound


def test_training_side_by_side_catches_a_wrong_scaler() -> None:
    (res,) = check_training((("torch_cpu_fp16", True),), steps=20, make_scaler=_off_by_one)
    assert res.status == "differ" and res.witness is not None
    assert res.witness["field"] in ("scale", "skipped")


def _two_roundings(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    return np.asarray(w - np.float32(lr) * g, np.float32)


def _fused(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    return (w.astype(np.float64) - np.float64(np.float32(lr)) * g.astype(np.float64)).astype(
        np.float32
    )


def _off_by_a_rounding(w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
    return np.nextafter(_fused(w, g, lr), np.float32(np.inf))


def test_sgd_update_check_tells_the_roundings_apart() -> None:
    # torch's add_(alpha) is one FMA in its AVX2/AVX512 kernels and two roundings in the DEFAULT
    # build (ATEN_CPU_CAPABILITY=default): whichever runs here, the model equal to it agrees.
    fused, two = check_sgd_update(update=_fused), check_sgd_update(update=_two_roundings)
    default = check_sgd_update()
    if default.data["torch_rounding"] == "fused (one rounding)":
        assert (fused.status, two.status, default.status) == ("agree", "differ", "agree")
    else:  # fpemu models the fused kernel: a documented finding, explained bit for bit
        assert default.data["torch_rounding"] == "two roundings"
        assert (fused.status, two.status, default.status) == ("finding", "agree", "finding")
        assert default.data["torch_cpu_capability"] == "DEFAULT"
    assert check_sgd_update(update=_off_by_a_rounding).status == "differ"


# -- recorder with a real GradScaler ------------------------------------------------------------
def test_recorder_attached_to_torch_grad_scaler() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    scaler = ScalerRecorder().attach(torch.amp.GradScaler("cpu", growth_interval=3))
    rec = ScalerRecorder()
    rec.attach(scaler)
    for i in range(10):
        opt.zero_grad()
        scaler.scale(lin(torch.randn(8, 4)).pow(2).mean()).backward()
        if i in (4, 5):
            lin.weight.grad[0, 0] = float("nan")
        scaler.step(opt)
        scaler.update()
    assert [e.found_inf for e in rec] == [i in (4, 5) for i in range(10)]
    assert check_trace(rec, "torch", growth_interval=3).status == "agree"
    res = check_trace(rec, "torch", growth_interval=4)
    assert res.status == "differ" and res.data["first_bad_step"] == 3


# -- the suite and the command line -------------------------------------------------------------
def test_cli_writes_json_and_markdown(tmp_path: Any) -> None:
    j, m = tmp_path / "r.json", tmp_path / "r.md"
    rc = cli_main(
        ["torch", "--quick", "--only", "autocast", "--json", str(j), "--markdown", str(m)]
    )
    data = json.loads(j.read_text())
    assert rc == 0 and data["ok"] and data["environment"]["torch"] == torch.__version__
    assert len(data["results"]) == 2
    assert "| linear(x, W32, b32) |" in m.read_text()


def test_validate_torch_rejects_unknown_sections() -> None:
    with pytest.raises(ValueError, match="unknown sections"):
        validate_torch(sections=["nope"])
