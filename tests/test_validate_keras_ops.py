"""Keras 3's Adam/AdamW and MeanSquaredError (torch backend) against fpemu's ``KerasAdam`` and
``keras_mse``, and ``compare_keras`` with them.

What is bit-exact and what is bounded, measured on this CPU and asserted:

* Adam's moments ``m`` and ``v`` are bit-identical to Keras's at every step on AVX2/AVX512
  builds (float32 multiplies and fused ``add_`` only); on the default build torch rounds
  ``add_``'s product separately, and each step's moments are within that rounding. The variable
  update goes through torch's float32 ``sqrt``, which is not correctly rounded on CPU (about one
  result in five is one ulp off here, MKL's vectorised sqrt): each step's update is compared
  from Keras's own variable and must lie within ``OPTIMIZER_UPDATE_ROUNDINGS`` roundings of the
  update plus one ulp of the variable (the bound ``compare_keras`` states as ``optimizer``).
* ``powf`` is torch's ``pow`` of two 0-d float32 tensors, bit for bit.
* ``keras_mse``'s gradient is Keras's bit for bit (seeded with a loss scale); its value is
  within the float32 summation-order bound.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
torch = pytest.importorskip("torch")
keras = pytest.importorskip("keras")

import fpemu.validate.twin.keras_compare as kc  # noqa: E402
from fpemu.nn.tensor import Tensor  # noqa: E402
from fpemu.validate import compare_keras, from_keras  # noqa: E402
from fpemu.validate.twin.causes import U32  # noqa: E402
from fpemu.validate.twin.keras_ops import KerasAdam, keras_mse, powf  # noqa: E402
from fpemu.validate.twin.update_checks import OPTIMIZER_UPDATE_ROUNDINGS  # noqa: E402

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="keras was imported with another backend"
)
L = keras.layers
#: torch's CPU add_(x, alpha=a) is one fused multiply-add on the vectorised builds only
FUSED = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


@pytest.fixture(autouse=True)
def _setup() -> Any:
    old, threads = keras.config.dtype_policy(), torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    keras.config.set_dtype_policy(old)
    torch.set_num_threads(threads)


def _bits(a: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(a, np.float32)).view(np.uint32)


def _ulp32(a: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(a.astype(np.float32))).astype(np.float64)


@pytest.mark.parametrize(
    ("cls", "kw"),
    [("Adam", {}), ("AdamW", {"weight_decay": 0.004}),
     ("Adam", {"learning_rate": 0.01, "beta_1": 0.8, "beta_2": 0.99, "epsilon": 1e-6}),
     ("AdamW", {"learning_rate": 0.05, "weight_decay": 0.1, "epsilon": 0.0})],
)  # fmt: skip
def test_keras_adam_step_by_step(cls: str, kw: dict[str, Any]) -> None:
    rng = np.random.default_rng(len(kw))
    w0 = [rng.standard_normal((7, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)]
    kv = [keras.Variable(w.copy()) for w in w0]
    ko = getattr(keras.optimizers, cls)(**kw)
    ko.build(kv)
    ps = [Tensor(w.copy(), "float32", requires_grad=True) for w in w0]
    fo = KerasAdam(ps, lr=kw.get("learning_rate", 0.001), beta_1=kw.get("beta_1", 0.9),
                   beta_2=kw.get("beta_2", 0.999), epsilon=kw.get("epsilon", 1e-7),
                   weight_decay=kw.get("weight_decay"))  # fmt: skip
    for _ in range(25):
        gs = [(rng.standard_normal(w.shape) * 10.0 ** rng.integers(-3, 3)).astype(np.float32)
              for w in w0]  # fmt: skip
        before = [v.value.detach().numpy().copy() for v in kv]
        for i, (p, b) in enumerate(zip(ps, before, strict=True)):
            p.data = b.copy()  # this step from Keras's own variables: a per-step comparison
            if not FUSED and fo.state[i]:  # and, on the default build, its own moments too
                fo.state[i] = {
                    "momentum": ko._momentums[i].value.detach().numpy().copy(),
                    "velocity": ko._velocities[i].value.detach().numpy().copy(),
                }
        with torch.no_grad():
            ko.apply([torch.from_numpy(g.copy()) for g in gs], kv)
        fo.step(gs)
        for i, (v, p) in enumerate(zip(kv, ps, strict=True)):
            for key, kvar, g in (("momentum", ko._momentums[i], gs[i]),
                                 ("velocity", ko._velocities[i], gs[i] * gs[i])):  # fmt: skip
                want_m, got_m = kvar.value.detach().numpy(), fo.state[i][key]
                if FUSED:  # add_(g, alpha=1-beta): one fused rounding on both sides
                    assert np.array_equal(_bits(want_m), _bits(got_m)), key
                else:  # two roundings in torch: the product's and the sum's, each half an ulp
                    mag = np.maximum(np.abs(want_m), np.abs(got_m))
                    bound = _ulp32(mag) + _ulp32(np.abs(g))
                    assert np.all(np.abs(want_m.astype(np.float64) - got_m) <= bound), key
            got, want = np.asarray(p.data, np.float64), v.value.detach().numpy().astype(np.float64)
            step = np.abs(want - before[i].astype(np.float64))
            bound = OPTIMIZER_UPDATE_ROUNDINGS * U32 * step + _ulp32(want)
            assert np.all(np.abs(got - want) <= bound)


def test_powf_is_torch_pow_of_0d_float32() -> None:
    for b in (0.9, 0.999, 0.99, 0.95, 0.8):
        bt = torch.tensor(b, dtype=torch.float32)
        for t in range(1, 2001, 7):
            want = torch.pow(bt, torch.tensor(float(t), dtype=torch.float32)).numpy()
            got = powf(np.float32(b), np.float32(t))
            assert _bits(got) == _bits(want), (b, t)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("shape", [(32, 3), (7, 5), (16, 1), (64, 10)])
def test_keras_mse_gradient_bits_and_value_bound(dtype: str, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(shape[0] * shape[1])
    pred = torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(
        getattr(torch, dtype)).requires_grad_(True)  # fmt: skip
    target = rng.standard_normal(shape).astype(np.float32)
    loss = keras.losses.MeanSquaredError()(torch.from_numpy(target), pred)
    (loss * 1024.0).backward()  # a loss scale as the seed
    p = Tensor(pred.detach().float().numpy(), dtype, requires_grad=True)
    y = keras_mse(p, target)
    y.backward(np.float32(1024.0))
    assert np.array_equal(_bits(pred.grad.float().numpy()), _bits(p.grad))
    # two float32 orders of summing n = rows*cols positive terms: (n - 1) u relative each
    n = shape[0] * shape[1]
    lv, fv = float(loss.detach()), float(y.data)
    assert abs(lv - fv) <= 2 * (n - 1) * U32 * lv + float(np.spacing(np.float32(lv)))


def test_keras_mse_rejects_a_wrong_target_shape() -> None:
    with pytest.raises(ValueError, match=r"keras_mse target shape \(3,\) != prediction shape"):
        keras_mse(Tensor(np.zeros((3, 1), np.float32)), np.zeros(3, np.float32))


# -- compare_keras with Adam/AdamW and MSE ------------------------------------------------------
def _regression(policy: str) -> tuple[Any, np.ndarray, np.ndarray]:
    keras.config.set_dtype_policy(policy)
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), L.Dense(16, activation="relu"), L.Dense(4)])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    return m, x, rng.standard_normal((16, 4)).astype(np.float32)


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_compare_keras_adam_mse(policy: str, optimizer: str) -> None:
    m, x, y = _regression(policy)
    scale = {"initial_scale": 2.0**18, "dynamic_growth_steps": 2}
    r = compare_keras(m, x, y, loss="mse", optimizer=optimizer, lr=0.01, steps=5,
                      loss_scale=scale if policy == "mixed_float16" else None)  # fmt: skip
    assert r.ok, r.first_unexplained()
    assert r.settings["optimizer"] == f"keras {optimizer}"
    assert [t["skipped_keras"] for t in r.trace] == [t["skipped_fpemu"] for t in r.trace]
    if policy == "mixed_float16":  # 2**18 overflows the float16 gradients at first
        assert any(t["skipped_keras"] for t in r.trace)
        assert not all(t["skipped_keras"] for t in r.trace)
    # step 0: every activation, output gradient and parameter gradient bit-identical
    for kind in ("activation", "backward", "grad", "scaler"):
        for c in r.select(step=0, kind=kind):
            assert c.exact, c
    for c in r.checks:  # what may differ, and why
        if c.kind == "param":
            assert c.exact or c.cause in ("optimizer", "propagated"), c
        elif c.kind == "loss":
            assert c.exact or (c.cause == "reduction order" and c.explained), c


def test_wrong_adam_beta_is_pinned_to_the_first_update(monkeypatch: pytest.MonkeyPatch) -> None:
    real = kc._optimizer

    def wrong(name: str, params: Any, hyper: Any) -> Any:  # beta_2 0.99 instead of 0.999
        return real(name, params, {**hyper, "beta_2": 0.99})

    monkeypatch.setattr(kc, "_optimizer", wrong)
    m, x, y = _regression("mixed_bfloat16")
    first = compare_keras(m, x, y, loss="mse", optimizer="adam", lr=0.01,
                          steps=2).first_unexplained()  # fmt: skip
    assert first is not None and (first.step, first.kind) == (0, "param")
    assert first.cause == "optimizer" and first.name == f"{m.layers[0].name}.kernel"


def test_a_layer_under_another_policy_is_refused() -> None:
    keras.config.set_dtype_policy("float32")
    d = L.Dense(4)  # built under float32
    keras.config.set_dtype_policy("mixed_bfloat16")
    m = keras.Sequential([keras.Input((8,)), L.Dense(16), d])
    with pytest.raises(ValueError, match=r"has dtype policy 'float32', the model 'mixed_bfloat16'"):
        from_keras(m)


def test_keras_adam_bad_hyperparameters() -> None:
    p = [Tensor(np.zeros(2, np.float32), requires_grad=True)]
    for kw, match in (({"beta_2": 1.0}, r"beta_2=1.0: accepted a number in \[0, 1\)"),
                      ({"epsilon": float("nan")}, r"epsilon=nan: accepted a finite number"),
                      ({"weight_decay": "x"}, r"weight_decay='x': accepted None or a finite"),
                      ({"lr": -1.0}, r"lr")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            KerasAdam(p, **kw)
    with pytest.raises(ValueError, match=r"KerasAdam models float32 variables, got bfloat16"):
        KerasAdam([Tensor(np.zeros(2), "bfloat16", requires_grad=True)]).step([np.ones(2)])


KERAS_FACTORY = """
import numpy as np
import keras

def make():
    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(4)])
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.standard_normal((16, 4)).astype(np.float32)
    return m, x, y, {"loss": "mse", "optimizer": "adam", "lr": 0.01}
"""


def test_cli_validate_model_runs_a_keras_factory(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import json  # noqa: PLC0415

    from fpemu.cli import main  # noqa: PLC0415

    f = tmp_path / "kmodel.py"
    f.write_text(KERAS_FACTORY)
    rc = main(["validate", "model", f"{f}:make", "--steps", "2", "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["ok"] is True and d["title"] == "compare_keras"
    assert d["settings"]["optimizer"] == "keras adam" and d["settings"]["loss"] == "mse"
    assert d["settings"]["policy"] == "keras_mixed_bfloat16" and len(d["trace"]) == 2
    for flag in (["--autocast", "fp16"], ["--scaler", "default"], ["--lockstep"]):
        assert main(["validate", "model", f"{f}:make", *flag]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{flag[0]}: not for a Keras model" in err[0], err
