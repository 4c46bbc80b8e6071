"""FP8 recipes (issue 15): scale traces against scalar transcriptions of the specs, the FP8
linear layer's gradients, bad parameters, and torchao 0.18's emulated Float8Linear.

The transcriptions below are written from fp8-mx.md §4.1-§4.3 with Python floats and
``fractions.Fraction``; they do not call fpemu's scale code. A float32 quotient is obtained as
``RN32(float(Fraction))``: RN64 then RN32 of a quotient of two binary32 numbers equals one
RN32 (53 >= 2*24 + 2), and Fraction division is exact.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from fpemu.amp.recipes import RECIPES, Recipe, RoleSpec, get_recipe
from fpemu.nn import SGD, Tensor, gradcheck
from fpemu.nn import functional as fn
from fpemu.nn.fp8 import FP8State, fp8_linear, fp8_mlp

FLT_MAX = float(np.finfo(np.float32).max)
MAXES = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}
SCRIPT = [1.5, 0.0, 1000.0, 2.0, math.inf, math.nan, 3.0, 0.0, 1e-3, 5.0, 7e-45, 0.25]


def rn32(v: float | Fraction) -> float:
    """Round to binary32 (nearest even) via struct; +-inf on overflow."""
    f = float(v)
    try:
        return float(struct.unpack("f", struct.pack("f", f))[0])
    except OverflowError:
        return math.copysign(math.inf, f)


def div32(a: float, b: float) -> float:
    if b == 0:
        return math.inf
    return rn32(Fraction(a) / Fraction(b))


# -- transcriptions ------------------------------------------------------------------------
def te_delayed_trace(amaxes, fp8_max, n, algo, margin):  # type: ignore[no-untyped-def]
    """fp8-mx.md §4.1, fused bulk update: a zero amax skips the roll; scale kept when bad."""
    hist, scale, trace = [0.0] * n, 1.0, []
    for cur in amaxes:
        used = scale  # the scale step t quantizes with: from steps <= t-1
        hist[0] = rn32(cur)
        last = hist[0]
        if last != 0:  # NaN != 0 is True: NaN rolls in
            window = [*hist[1:], last]
            # fmaxf reduction from 0 (TE delayed_scaling.cu kernel_bulk): NaN entries skipped
            a = max([0.0, *(v for v in window if not math.isnan(v))])
            hist = [0.0, *hist[2:], last] if n > 1 else [0.0]
            amax = a if algo == "max" else last
        else:
            amax = 0.0
        top = fp8_max * 2.0**-margin
        if math.isfinite(amax) and amax > 0:
            s = div32(top, amax)
            scale = FLT_MAX if s == math.inf else s
        trace.append((used, list(hist), scale))
    return trace


def te_current_scale(amax: float, fp8_max: float, pow2: bool, eps: float = 0.0) -> float:
    """fp8-mx.md §4.2 compute_scale_from_amax."""
    amax = rn32(amax)
    if amax < eps:
        amax = eps
    if math.isinf(amax) or amax == 0 or math.isnan(amax):
        return 1.0
    s = div32(fp8_max, amax)
    if s == math.inf:
        s = FLT_MAX
    if pow2:  # clear the mantissa: the largest power of two <= s
        s = math.ldexp(0.5, math.frexp(s)[1])
    return s


def torchao_scale(amax: float, fp8_max: float) -> float:
    """fp8-mx.md §4.3: RN32(fp8_max / max(amax, 1e-12)) (float64 division, narrowed)."""
    a = rn32(amax)
    if math.isnan(a):
        return math.nan
    if math.isinf(a):
        return 0.0
    return rn32(fp8_max / max(a, 1e-12))


def bits(v: float) -> int:
    return int(np.float32(v).view(np.uint32))


# -- scale traces ----------------------------------------------------------------------------
@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize(("n", "margin"), [(1, 0), (3, 0), (4, 2)])
@pytest.mark.parametrize("role", ["input", "grad_output"])
def test_te_delayed_trace(algo: str, n: int, margin: int, role: str) -> None:
    r = get_recipe("te_delayed", amax_history_len=n, amax_compute_algo=algo, margin=margin)
    st = FP8State(r)
    fmax = MAXES[r.roles()[role].fmt]
    want = te_delayed_trace(SCRIPT, fmax, n, algo, margin)
    for cur, (used, hist, scale) in zip(SCRIPT, want, strict=True):
        got_used = st.scale_for(role, np.float32(cur))
        st.update()
        assert bits(got_used) == bits(used)
        assert [bits(v) for v in st.history[role]] == [bits(v) for v in hist]
        assert bits(st.scale[role]) == bits(scale), (cur, st.scale[role], scale)


@pytest.mark.parametrize("pow2", [False, True])
@pytest.mark.parametrize("role", ["input", "grad_output"])
def test_te_current_scales(pow2: bool, role: str) -> None:
    spec = RoleSpec("e4m3" if role == "input" else "e5m2", "tensor", "te_current", pow2)
    r = get_recipe("te_current", **{role: spec})
    st = FP8State(r)
    for cur in [*SCRIPT, 56.000004, 1e-40, 3.4e38]:
        got = st.scale_for(role, np.float32(cur))
        assert bits(got) == bits(te_current_scale(cur, MAXES[spec.fmt], pow2)), cur


@pytest.mark.parametrize("role", ["input", "grad_output"])
def test_torchao_scales(role: str) -> None:
    st = FP8State("torchao_tensorwise")
    fmax = MAXES[st.recipe.roles()[role].fmt]
    for cur in [*SCRIPT, 1e-13, 56.000004]:
        got = float(st.scale_for(role, np.float32(cur)))
        want = torchao_scale(cur, fmax)
        assert (math.isnan(got) and math.isnan(want)) or bits(got) == bits(want), cur


def _ref_quant(x: np.ndarray, scale: float, fmt: str) -> np.ndarray:
    """satfinite RNE of RN32(x * scale), via ml_dtypes (a library fpemu did not write)."""
    dt = ml_dtypes.float8_e4m3fn if fmt == "float8_e4m3fn" else ml_dtypes.float8_e5m2
    v = np.clip(x.astype(np.float32) * np.float32(scale), -MAXES[fmt], MAXES[fmt])
    return v.astype(dt).astype(np.float64)


def test_layer_delayed_with_spike_records_and_saturates() -> None:
    """Through the layer: the used scales follow the transcription; the spike saturates."""
    r = get_recipe("te_delayed", amax_history_len=4)
    st = FP8State(r)
    rng = np.random.default_rng(1)
    w = Tensor(rng.uniform(-1, 1, (8, 16)).astype(np.float32), requires_grad=True)
    amaxes = [1.0, 1.0, 200.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    for a in amaxes:
        x = rng.uniform(-1, 1, (4, 16)).astype(np.float32)
        x = (x / np.abs(x).max() * a).astype(np.float32)
        xt = Tensor(x, requires_grad=True)
        y = fp8_linear(xt, w, None, recipe=r, state=st)
        y.backward(np.ones(y.shape, np.float32))
    want = te_delayed_trace([float(np.float32(a)) for a in amaxes], 448.0, 4, "max", 0)
    used = [rec["input"]["scale"] for rec in st.records]
    assert [bits(u) for u in used] == [bits(t[0]) for t in want]
    sat = [rec["input"]["saturated"] for rec in st.records]
    assert sat[2] > 0  # the spike quantized with the stale scale 448 overflows
    assert sat[3] == 0 and sat[0] == 0


def test_layer_forward_operands_match_independent_quantizer() -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(6, 40)).astype(np.float32)
    w = rng.normal(size=(5, 40)).astype(np.float32)
    st = FP8State("te_current")
    y = fp8_linear(Tensor(x), Tensor(w), None, recipe="te_current", state=st)
    sx = te_current_scale(float(np.abs(x).max()), 448.0, False)
    sw = te_current_scale(float(np.abs(w).max()), 448.0, False)
    qx, qw = _ref_quant(x, sx, "float8_e4m3fn"), _ref_quant(w, sw, "float8_e4m3fn")
    exact = (qx @ qw.T) * (rn32(1 / sx) * rn32(1 / sw))
    terms = (np.abs(qx) @ np.abs(qw).T) * (rn32(1 / sx) * rn32(1 / sw))
    # fast accumulation truncates each 32-product block below 2**(emax-13) (fp8-mx.md §6):
    # per block at most 32 * 2**-13 = 2**-8 of its |terms|, plus two fp32 roundings.
    assert np.all(np.abs(y.data - exact) <= 2.0**-7 * terms + 2.0**-22 * np.abs(exact))
    assert st.records[0]["input"]["scale"] == sx


# -- gradients -------------------------------------------------------------------------------
def test_gradcheck_quantization_off() -> None:
    rng = np.random.default_rng(3)
    ins = [rng.normal(size=(3, 5)), rng.normal(size=(4, 5)), rng.normal(size=4)]
    res = gradcheck(lambda x, w, b: fp8_linear(x, w, b, recipe=None), ins, policy="float64")
    assert res.ok, res


def _pow2_exact_recipe() -> Recipe:
    return get_recipe(
        "te_current",
        input=RoleSpec("e4m3", "tensor", "te_current", True),
        weight=RoleSpec("e4m3", "tensor", "te_current", True),
        grad_output=RoleSpec("e5m2", "tensor", "te_current", True),
    )


@pytest.mark.parametrize("recipe", ["pow2", "fp8_noscale"])
def test_fp8_equals_disabled_on_exact_data(recipe: str) -> None:
    """Small integers with power-of-two scales quantize exactly and every sum is exact, so
    the FP8 layer must give the quantization-off layer's bits (forward and all gradients)."""
    r = _pow2_exact_recipe() if recipe == "pow2" else get_recipe(recipe)
    rng = np.random.default_rng(4)
    x0 = rng.integers(-4, 5, (8, 48)).astype(np.float32)
    w0 = rng.integers(-3, 4, (6, 48)).astype(np.float32)
    b0 = rng.integers(-2, 3, 6).astype(np.float32)
    g0 = rng.integers(-3, 4, (8, 6)).astype(np.float32)
    outs = []
    for rec in (r, None):
        x, w, b = (Tensor(a, "float32" if rec else "float64", requires_grad=True)
                   for a in (x0, w0, b0))  # fmt: skip
        y = fp8_linear(x, w, b, recipe=rec)
        y.backward(g0.astype(y.data.dtype))
        outs.append([np.asarray(t, np.float64) for t in (y.data, x.grad, w.grad, b.grad)])
    for a, b_ in zip(*outs, strict=True):
        assert np.array_equal(a.view(np.uint64), b_.view(np.uint64))


def test_mlp_trains_under_te_delayed() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(32, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    m = fp8_mlp([8, 16, 2], recipe="te_delayed", seed=0)
    opt = SGD(m.parameters(), lr=0.2)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = fn.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]
    assert len(m.layers[0].state.records) == 15  # type: ignore[attr-defined]


# -- bad parameters --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"amax_history_len": 0}, "amax_history_len=0"),
        ({"amax_history_len": 2.0}, "amax_history_len=2.0"),
        ({"margin": math.nan}, "margin=nan"),
        ({"margin": 0.5}, "margin=0.5"),
        ({"amax_compute_algo": "mean"}, "amax_compute_algo='mean'.*max, most_recent"),
        ({"epsilon": -1.0}, "epsilon=-1.0"),
        ({"dgrad": "slow"}, "dgrad='slow'.*fast, split"),
        ({"master": "float16"}, "master='float16'.*float32, bfloat16"),
        ({"grad_output": RoleSpec("e4m3", "tensor", "none")}, "grad_output.fmt='float8_e4m3fn'"),
    ],
)
def test_bad_recipe_parameters(changes: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        get_recipe("te_delayed", **changes)


def test_bad_role_specs_and_names() -> None:
    with pytest.raises(ValueError, match="granularity='block64'"):
        RoleSpec("e4m3", "block64")
    with pytest.raises(ValueError, match="fmt='float8_e4m3fn' with granularity='nvfp4'"):
        RoleSpec("e4m3", "nvfp4", "nvfp4")
    with pytest.raises(ValueError, match="scale_rule='amax'"):
        RoleSpec("e4m3", "tensor", "amax")
    with pytest.raises(ValueError, match="recipe='te_fast'; accepted: deepseek_v3"):
        get_recipe("te_fast")
    delayed_rows = get_recipe("te_delayed", input=RoleSpec("e4m3", "row", "te_delayed"))
    with pytest.raises(ValueError, match=r"te_delayed.*input row/te_delayed"):
        fp8_linear(Tensor(np.ones((2, 4))), Tensor(np.ones((3, 4))), recipe=delayed_rows)
    with pytest.raises(ValueError, match="state belongs to recipe 'te_current'"):
        fp8_linear(Tensor(np.ones((2, 4))), Tensor(np.ones((3, 4))), recipe="te_delayed",
                   state=FP8State("te_current"))  # fmt: skip


def test_presets_are_valid_and_cite_formats() -> None:
    assert set(RECIPES) >= {"te_delayed", "te_current", "te_mxfp8", "te_blockwise", "te_nvfp4",
                            "torchao_tensorwise", "torchao_rowwise", "deepseek_v3"}  # fmt: skip
    d = RECIPES["deepseek_v3"]
    assert (d.input.granularity, d.weight.granularity, d.input.power_2) == \
        ("block1x128", "block128x128", True)  # fmt: skip
    assert RECIPES["te_nvfp4"].grad_output.stochastic


# -- torchao 0.18 Float8Linear(emulate=True) on CPU --------------------------------------------
def test_torchao_float8_emulated_step_matches_operands() -> None:
    """One training step against torchao's emulated Float8Linear (runs on CPU, torch 2.13).

    Bit for bit: the E4M3/E5M2 data and scales of input, weight and grad_output. Outputs and
    gradients differ by design: torchao's emulation computes ``torch.mm(qa / sa, qb / sb)`` in
    float32 (dequantize by division, CPU sgemm order; float8_ops.py:382), while fpemu runs the
    FP8 tensor-core chain (fast for fprop, split for dgrad/wgrad) with the ``RN32(1/s)``
    epilogue of ``torch._scaled_mm`` (fp8-mx.md §4.3). We show that torchao's results are
    exactly ``torch.mm`` of fpemu's operands, and bound fpemu's distance from the exact GEMM.
    """
    torch = pytest.importorskip("torch")
    f8 = pytest.importorskip("torchao.float8")
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False))
    f8.convert_to_float8_training(m, config=f8.Float8LinearConfig(emulate=True))
    x = torch.randn(16, 64, requires_grad=True)
    g = torch.randn(16, 32)
    y = m(x)
    y.backward(g)
    w = m[0].weight
    st = FP8State("torchao_tensorwise")
    xt, wt = (
        Tensor(x.detach().numpy(), requires_grad=True),
        Tensor(w.detach().numpy(), requires_grad=True),
    )
    yo = fp8_linear(xt, wt, None, recipe="torchao_tensorwise", state=st)
    yo.backward(g.numpy())
    hp_tensor_and_scale_to_float8 = pytest.importorskip(
        "torchao.float8.float8_training_tensor"
    ).hp_tensor_and_scale_to_float8
    tensor_to_scale = pytest.importorskip("torchao.float8.float8_utils").tensor_to_scale

    deq = {}
    for role, t, dt in (("input", x, torch.float8_e4m3fn), ("weight", w, torch.float8_e4m3fn),
                        ("grad_output", g, torch.float8_e5m2)):  # fmt: skip
        s = tensor_to_scale(t.detach(), dt)
        q = hp_tensor_and_scale_to_float8(t.detach(), s, dt)
        ours_q, ours_s = st.last[role]
        assert bits(float(s)) == bits(float(ours_s)), role
        theirs = q._data.float().numpy().astype(np.float64)
        assert np.array_equal(theirs.view(np.uint64), np.asarray(ours_q).view(np.uint64)), role
        deq[role] = torch.from_numpy(np.asarray(ours_q, np.float32)) / torch.tensor(ours_s)
    ref_y = torch.mm(deq["input"], deq["weight"].t())
    ref_dx = torch.mm(deq["grad_output"], deq["weight"])
    ref_dw = torch.mm(deq["grad_output"].t(), deq["input"])
    for theirs, ref in ((y, ref_y), (x.grad, ref_dx), (w.grad, ref_dw)):
        assert torch.equal(theirs.detach(), ref)  # every difference is the GEMM model's
    for ours, ref in ((yo.data, ref_y), (xt.grad, ref_dx), (wt.grad, ref_dw)):
        r64 = ref.numpy().astype(np.float64)
        # both approximate the same exact sum: fp32 sgemm within K*2**-24 relative to the sum
        # of |terms| and the chain within 2**-7 of it (see the forward test); scale bound by the
        # largest |ref| times 2**-6 covers both for K <= 64.
        assert np.max(np.abs(np.asarray(ours, np.float64) - r64)) <= 2.0**-6 * np.abs(r64).max()


# -- training loop, experiment, command line --------------------------------------------------
def test_train_with_recipe_records_trace() -> None:
    from fpemu.training import train  # noqa: PLC0415 - keeps the module import light

    r = train("moons", hidden=(8,), steps=4, batch_size=16, recipe="te_current", progress=False)
    assert r.config["recipe"] == "te_current"
    assert len(r.fp8_trace["layers.0"]) == 4  # eval forwards after training are not counted
    with pytest.raises(ValueError, match="needs policy='fp32'"):
        train("moons", steps=1, policy="torch_cuda_fp16", recipe="te_current", progress=False)


def test_fp8_experiment_spike_saturates_only_delayed() -> None:
    from fpemu.training.fp8_experiment import run_fp8_experiment  # noqa: PLC0415

    rows = {r.run: r for r in run_fp8_experiment(
        runs=("TE delayed + spike", "TE current + spike"), steps=8, spike_steps=(5,))}  # fmt: skip
    assert 5 in rows["TE delayed + spike"].saturated_steps()
    assert rows["TE current + spike"].saturated_steps() == []
    with pytest.raises(ValueError, match="runs=\\['FP4'\\]"):
        run_fp8_experiment(runs=("FP4",))


def test_cli_train_recipe(capsys: pytest.CaptureFixture[str]) -> None:
    from fpemu.cli import main  # noqa: PLC0415

    assert main(["train", "moons", "--recipe", "te_delayed", "--steps", "3", "--hidden", "8",
                 "--no-progress"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "FP8 recipe te_delayed" in out and "grad_output" in out
    assert main(["train", "--recipe", "te_fast"]) == 2
    err = capsys.readouterr().err
    assert "--recipe te_fast: unknown recipe; accepted: fp8_noscale" in err
    assert all(n in err for n in ("te_blockwise", "deepseek_v3", "torchao_rowwise"))
    assert main(["train", "--recipe", "te_current", "--policy", "torch_cuda_bf16"]) == 2
    assert "--policy torch_cuda_bf16: not with --recipe te_current (--recipe runs under fp32" \
        in capsys.readouterr().err


def test_mxfp8_equals_disabled_on_exact_data() -> None:
    """Small integers: RCEIL E8M0 scales are powers of two that keep them exact in E4M3 (and
    every partial sum is exact), so te_mxfp8 gives the quantization-off layer's bits."""
    rng = np.random.default_rng(6)
    x0 = rng.integers(-4, 5, (8, 40)).astype(np.float32)  # K = 40: padded to 64 blocks
    w0 = rng.integers(-3, 4, (6, 40)).astype(np.float32)
    g0 = rng.integers(-3, 4, (8, 6)).astype(np.float32)
    outs = []
    for rec in ("te_mxfp8", None):
        x, w = (Tensor(a, "float32" if rec else "float64", requires_grad=True) for a in (x0, w0))
        y = fp8_linear(x, w, None, recipe=rec)
        y.backward(g0.astype(y.data.dtype))
        outs.append([np.asarray(t, np.float64) for t in (y.data, x.grad, w.grad)])
    for a, b_ in zip(*outs, strict=True):
        assert np.array_equal(a.view(np.uint64), b_.view(np.uint64))


def test_nvfp4_layer_trains_and_records() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(32, 16)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    m = fp8_mlp([16, 32, 2], recipe="te_nvfp4", seed=0)
    opt = SGD(m.parameters(), lr=0.2)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = fn.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    rec = m.layers[0].state.records[-1]  # type: ignore[attr-defined]
    assert set(rec) == {"input", "weight", "grad_output"} and math.isnan(rec["input"]["scale"])


def test_delayed_nan_amax_in_history() -> None:
    """A NaN amax rolls into the history; TE's fused kernel reduces the window with fmaxf
    (delayed_scaling.cu kernel_bulk), so 'max' still scales from the finite entries, while
    'most_recent' and the unfused torch.max path keep the old scale (fp8-mx.md §4.1)."""
    from fpemu.quant import te_delayed_update  # noqa: PLC0415

    h = np.array([[math.nan], [0.0], [8.0]], np.float32)  # row 0: the NaN just measured
    new_h, s = te_delayed_update(h, np.float32([3.0]), "e4m3")
    assert np.isnan(new_h[2, 0]) and new_h[1, 0] == 8.0 and s[0] == 56.0  # 448 / 8
    _, s = te_delayed_update(h, np.float32([3.0]), "e4m3", fused=False)
    assert s[0] == 3.0
    _, s = te_delayed_update(h, np.float32([3.0]), "e4m3", algo="most_recent")
    assert s[0] == 3.0
    # through the layer the tensor amax itself drops NaN elements (fmaxf): an all-NaN tensor
    # measures 0, which skips the roll
    st = FP8State("te_delayed")
    x = Tensor(np.full((2, 4), np.nan, np.float32))
    with np.errstate(invalid="ignore"):
        fp8_linear(x, Tensor(np.ones((3, 4), np.float32)), None, recipe="te_delayed", state=st)
    assert st.history["input"][0] == 0.0
