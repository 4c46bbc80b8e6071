"""The fast paths behind ``compare_keras``'s speed, each against the path it replaces, bit for bit.

* ``fpemu.rounding.rne_bfloat16`` (what ``round_to(float32, "bf16")`` now calls) against
  ``fpemu.rounding.round`` over every bfloat16 code with every class of dropped bits, by
  Hypothesis over arbitrary bit patterns, and against ml_dtypes' bfloat16 cast (a library we
  did not write).
* ``model_report.compare_arrays`` (its bit-identical shortcut, bfloat16 code views and whole-array
  distance of 16-bit codes) against the previous implementation, kept here verbatim.
* ``StepChecker``'s per-step caches (torch tensors converted once, the forward recomputation
  reused by the backward one, the shadow optimizer run only when a parameter differs): a
  diverging run's report equals the one computed with the caches defeated.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fpemu import rounding
from fpemu.nn.tensor import _BF16_KERNEL_MAX, round_to
from fpemu.validate.twin.model_report import _BITS, _distance, _value, codes, compare_arrays

# -- the bfloat16 rounding kernel ---------------------------------------------------------------
#: Dropped-bit classes of a float32 word (its low 16 bits): exact, just above exact, below /
#: at / above the tie, all ones, and the quarter points.
LOW_HALVES = (0x0000, 0x0001, 0x4000, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def _every_class() -> np.ndarray:
    """Every bfloat16 code (sign, exponent, 7 fraction bits; lsb odd and even, zeros,
    subnormals, the top binade, inf, NaNs) with every class of dropped bits: 2**16 * 8 words."""
    high = np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)
    words = high[:, None] | np.array(LOW_HALVES, np.uint32)[None, :]
    return words.reshape(-1).view(np.float32)


def test_rne_bfloat16_equals_round_on_every_class() -> None:
    x = _every_class()
    got, want = rounding.rne_bfloat16(x), rounding.round(x, "bfloat16")
    assert got.dtype == np.float32 and got.shape == x.shape
    mismatches = int(np.count_nonzero(_bits(got) != _bits(want)))  # NaN bits included
    assert mismatches == 0


def test_rne_bfloat16_every_low_half_of_edge_words() -> None:
    """All 2**16 dropped-bit patterns under the codes where rounding changes binade or
    overflows: max finite, the largest subnormal, 1.0, and their negatives."""
    tops = np.array([0x7F7F, 0x007F, 0x3F80, 0x0000, 0x7F80, 0x7FC0], np.uint32)
    tops = np.concatenate([tops, tops | np.uint32(0x8000)])
    words = (tops[:, None] << np.uint32(16)) | np.arange(1 << 16, dtype=np.uint32)[None, :]
    x = words.reshape(-1).view(np.float32)
    assert np.array_equal(_bits(rounding.rne_bfloat16(x)), _bits(rounding.round(x, "bfloat16")))


def test_rne_bfloat16_against_ml_dtypes() -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _every_class()
    with np.errstate(invalid="ignore", over="ignore"):  # NaN and overflowing inputs
        theirs = x.astype(ml_dtypes.bfloat16).astype(np.float32)  # RNE, IEEE overflow to inf
    ours = rounding.rne_bfloat16(x)
    nan = np.isnan(x)
    assert np.array_equal(np.isnan(ours), nan)
    assert np.array_equal(_bits(ours)[~nan], _bits(theirs)[~nan])


@settings(max_examples=200)
@given(hnp.arrays(np.uint32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=9)))
def test_hypothesis_rne_bfloat16_equals_round(words: np.ndarray) -> None:
    x = words.view(np.float32)
    got = rounding.rne_bfloat16(x)
    assert got.shape == x.shape
    assert np.array_equal(_bits(got), _bits(rounding.round(x, "bfloat16")))


def test_rne_bfloat16_does_not_touch_its_input_and_takes_views() -> None:
    x = np.array([[1 + 2**-8, -3e38], [np.nan, 2**-133]], np.float32)
    keep = x.copy()
    x.setflags(write=False)
    got = rounding.rne_bfloat16(x.T)  # a transposed (non-contiguous) read-only view
    assert np.array_equal(_bits(x), _bits(keep))
    assert np.array_equal(_bits(got), _bits(rounding.round(np.ascontiguousarray(x.T), "bf16")))


def test_round_to_bfloat16_uses_the_kernel_and_keeps_rounds_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    x = _every_class()[:4096].copy()
    calls: list[int] = []
    real = rounding.rne_bfloat16

    def spy(a: np.ndarray) -> np.ndarray:
        calls.append(a.size)
        return real(a)

    monkeypatch.setattr(rounding, "rne_bfloat16", spy)
    out = round_to(x, "bf16")
    assert calls == [x.size]
    assert np.array_equal(_bits(out), _bits(rounding.round(x, "bfloat16")))
    # float64 input, and arrays big enough for round()'s threads, keep the general path
    calls.clear()
    x64 = np.array([1 + 2**-8 + 2**-40], np.float64)  # via float32: a tie, down to 1.0
    assert round_to(x64, "bf16").tolist() == [1.0078125]
    big = np.zeros(_BF16_KERNEL_MAX, np.float32)
    assert np.array_equal(round_to(big, "bf16"), big)
    assert calls == []


# -- compare_arrays -----------------------------------------------------------------------------
def _previous_compare_arrays(t: Any, f: Any, t_fmt: str, f_fmt: str) -> dict[str, Any]:
    """compare_arrays as it was before the fast paths (verbatim but for this name)."""
    t, f = np.asarray(t), np.asarray(f)
    if t.shape != f.shape:
        raise ValueError(f"shapes differ: torch {t.shape}, fpemu {f.shape}")
    n = int(t.size)
    dist: np.ndarray
    if t_fmt != f_fmt:
        same = np.zeros(t.shape, bool)
        dist = np.full(t.shape, np.inf)
    else:
        ct, cf = codes(t, t_fmt), codes(f, f_fmt)
        same = ct == cf
        if not same.all():
            same |= np.isnan(t) & np.isnan(f)  # NaN payloads are not compared
        dist = np.zeros(0)
        if not same.all():  # distances of the differing elements only (usually a few)
            k = ~same
            dist = _distance(t[k], f[k], ct[k], cf[k], t_fmt)
    out: dict[str, Any] = {"compared": n, "identical": int(same.sum()),
                           "max_ulps": float(dist.max()) if dist.size else 0.0,
                           "first": None}  # fmt: skip
    if n and not same.all():
        i = np.unravel_index(int(np.flatnonzero(~same.reshape(-1))[0]), t.shape)
        hex_t = f"0x{int(codes(t[i], t_fmt)):0{_BITS[t_fmt][1] // 4}x}"
        hex_f = f"0x{int(codes(f[i], f_fmt)):0{_BITS[f_fmt][1] // 4}x}"
        out["first"] = {"index": str(tuple(int(k) for k in i)), "torch": _value(t[i]),
                        "fpemu": _value(f[i]), "torch_bits": hex_t,
                        "fpemu_bits": hex_f}  # fmt: skip
    return out


def _same_report(t: np.ndarray, f: np.ndarray, t_fmt: str, f_fmt: str) -> None:
    got, want = compare_arrays(t, f, t_fmt, f_fmt), _previous_compare_arrays(t, f, t_fmt, f_fmt)
    assert json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 2**-133, -(2**-149), 3.3e38, -1.0],
                    np.float32)  # fmt: skip


@pytest.mark.parametrize("fmt", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize("fraction", [0.0, 0.01, 0.5, 1.0])
def test_compare_arrays_equals_previous(fmt: str, fraction: float) -> None:
    rng = np.random.default_rng(7)
    dt = np.float64 if fmt == "float64" else np.float32
    base = rng.standard_normal((24, 16)) * 2.0 ** rng.integers(-20, 20, (24, 16))
    base.flat[: SPECIALS.size] = SPECIALS
    t = round_to(base, fmt).astype(dt)
    f = t.copy()
    m = rng.random(t.shape) < fraction
    f[m] = round_to(np.asarray(f[m], np.float64) * 1.02, fmt)  # one-sided distances
    f[m & (rng.random(t.shape) < 0.1)] *= -1  # and a few sign changes
    if fraction == 1.0:
        f.flat[3] = np.nan  # a NaN against inf
    elif fraction and fmt != "float64":  # NaN against NaN with another payload: not a difference
        t.flat[5], f.flat[5] = np.nan, np.uint32(0xFFE10000).view(np.float32)
    for a, b in ((t, f), (f, t), (t, t.copy()), (t.T, f.T), (t[:, ::3], f[:, ::3]),
                 (t[0, 0], f[0, 0]), (t[:0], f[:0])):  # fmt: skip
        _same_report(a, b, fmt, fmt)
    _same_report(t, f, fmt, "float32" if fmt != "float32" else "bfloat16")


@settings(max_examples=150)
@given(
    st.sampled_from(["float32", "bfloat16", "float16"]),
    hnp.arrays(np.uint32, st.tuples(st.just(2), st.integers(1, 5), st.integers(1, 6))),
    st.integers(0, 3),
)
@example("float32", np.array([[[0x7F800001]], [[0]]], np.uint32), 0)  # a signalling NaN word
def test_hypothesis_compare_arrays_equals_previous(fmt: str, words: np.ndarray,
                                                   shift: int) -> None:  # fmt: skip
    x = round_to(words.view(np.float32), fmt).astype(np.float32)
    a, b = x[0], x[1]
    _same_report(a, b, fmt, fmt)
    with np.errstate(invalid="ignore"):  # a signalling NaN word warns when it is widened
        near = round_to(a.astype(np.float64) * (1 + 2.0**-shift), fmt).astype(np.float32)
    _same_report(a, near, fmt, fmt)  # one-sided distances of every size
    _same_report(near, a, fmt, fmt)


# -- StepChecker's caches -------------------------------------------------------------------------
DIVERGING = ["mixed_bfloat16", "mixed_float16"]


@pytest.mark.parametrize("entry", DIVERGING)
def test_checker_caches_do_not_change_the_report(entry: str, monkeypatch: pytest.MonkeyPatch
                                                 ) -> None:  # fmt: skip
    """compare_keras's checker (StepChecker) on a run whose sides drift apart."""
    import os  # noqa: PLC0415

    os.environ.setdefault("KERAS_BACKEND", "torch")
    torch = pytest.importorskip("torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":
        pytest.skip("keras was imported with another backend")
    from fpemu.validate import compare_keras  # noqa: PLC0415
    from fpemu.validate.twin import checker as checker_mod  # noqa: PLC0415

    torch.set_num_threads(1)
    old = keras.config.dtype_policy()
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 8)).astype(np.float32), rng.integers(0, 4, 16)

    def run() -> dict[str, Any]:
        keras.config.set_dtype_policy(entry)
        keras.utils.set_random_seed(0)
        L = keras.layers
        model = keras.Sequential([keras.Input((8,)), L.Dense(16, activation="relu", name="fc1"),
                                  L.LayerNormalization(name="ln"),
                                  L.Dense(4, name="fc2")])  # fmt: skip
        try:  # a large step: the two sides drift apart
            d: dict[str, Any] = compare_keras(model, x, y, steps=5, lr=0.5, momentum=0.9).to_dict()
        finally:
            keras.config.set_dtype_policy(old)
        d["settings"].pop("keras")
        return d

    fast = run()
    cls = checker_mod.StepChecker
    real_arr, real_graph, real_params = cls.arr, cls._local_graph, cls.params

    def arr(self: Any, which: str, name: str) -> Any:
        self._arrays.clear()  # convert torch's tensor again every time
        return real_arr(self, which, name)

    def local_graph(self: Any, node: Any) -> Any:
        self._local.pop(node.name, None)  # recompute the op every time
        return real_graph(self, node)

    def params(self: Any) -> None:
        self._shadow_step()  # the shadow update every step, as before
        real_params(self)

    monkeypatch.setattr(cls, "arr", arr)
    monkeypatch.setattr(cls, "_local_graph", local_graph)
    monkeypatch.setattr(cls, "params", params)
    slow = run()
    assert json.dumps(fast, sort_keys=True) == json.dumps(slow, sort_keys=True)
    causes = {c["cause"] for c in fast["checks"]}
    assert causes - {"exact"}, causes  # the explanations ran


# -- causes.within and linear_bound -------------------------------------------------------------
def _previous_within(t: Any, f: Any, bound: Any, fmt: str) -> tuple[bool, float]:
    """causes.within as it was before its work-buffer path (verbatim but for this name)."""
    from fpemu.validate.twin.causes import _ulp  # noqa: PLC0415

    t64, f64 = np.asarray(t, np.float64), np.asarray(f, np.float64)
    bound = bound + _ulp(np.maximum(np.abs(t64), np.abs(f64)), fmt)
    d = np.abs(t64 - f64)
    ok = bool(np.all((d <= bound) | (np.isnan(t) & np.isnan(f))))
    u = _ulp(np.maximum(np.abs(np.asarray(t, np.float64)), np.finfo(np.float32).tiny), fmt)
    return ok, float(np.max(bound / u)) if np.size(bound) else 0.0


@pytest.mark.parametrize("fmt", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("scale", [0.0, 2.0**-30, 1e-3, 1.0])
def test_within_equals_previous(fmt: str, scale: float) -> None:
    from fpemu.validate.twin.causes import within  # noqa: PLC0415

    rng = np.random.default_rng(3)
    base = rng.standard_normal((20, 12)) * 2.0 ** rng.integers(-30, 30, (20, 12))
    base[0, :4] = [0.0, -0.0, 2**-133, -(2**-149)]
    if scale == 1.0:  # infinities and NaN make the largest ratio inf or NaN: once only
        base.flat[: SPECIALS.size] = SPECIALS
    t = round_to(base, fmt).astype(np.float32)
    f = round_to(t.astype(np.float64) * (1 + 2.0**-6 * rng.standard_normal(t.shape)), fmt)
    f = f.astype(np.float32)
    with np.errstate(invalid="ignore"):  # 0 * inf: a NaN bound, as a real one may be
        bound = np.abs(rng.standard_normal(t.shape)) * scale * np.abs(t.astype(np.float64))
    for a, b in ((t, f), (f, t), (t, t), (t[3:, ::2], f[3:, ::2])):
        bd = bound[: a.shape[0], : a.shape[1]] if a.shape != t.shape else bound
        bd = np.ascontiguousarray(bd[:, : a.shape[1]])
        with np.errstate(invalid="ignore"):  # inf - inf in the specials
            got, want = within(a, b, bd, fmt), _previous_within(a, b, bd, fmt)
        assert got[0] == want[0]
        assert np.float64(got[1]).view(np.uint64) == np.float64(want[1]).view(np.uint64)
    # one ulp apart with a zero bound: exactly at the limit, within
    mbits = {"float32": 23, "bfloat16": 7, "float16": 10}[fmt]
    one, nxt = np.ones((2, 2), np.float32), np.full((2, 2), 1 + 2.0**-mbits, np.float32)
    assert within(one, nxt, np.zeros((2, 2)), fmt) == _previous_within(one, nxt, 0.0, fmt)
    assert within(one, nxt, np.zeros((2, 2)), fmt)[0]


# -- causes.matmul_within: the bound only where the results differ ------------------------------
def _full_within(t: Any, f: Any, x: Any, w: Any, b: Any, fmt: str, transpose: bool, scale: float,
                 first_fmt: str | None) -> tuple[bool, float]:  # fmt: skip
    """The whole-matrix route: one GEMM of magnitudes, then ``within`` restricted to the
    differing elements (identical ones satisfy any bound) for the largest ratio."""
    from fpemu.validate.twin.causes import _ulp, linear_bound, within  # noqa: PLC0415

    bound = linear_bound(x, w, b, out=fmt, transpose=transpose) * scale
    if first_fmt is not None:
        bound = bound + _ulp(t, first_fmt)
    bound = bound.reshape(t.shape)
    k = ~((t == f) | (np.isnan(t) & np.isnan(f)))
    ok = within(t, f, bound, fmt)[0]
    return ok, (within(t[k], f[k], bound[k], fmt)[1] if k.any() else 0.0)


@pytest.mark.parametrize("n_diff", [0, 1, 7, 200])  # 200 of 24*20: the whole-matrix fallback
@pytest.mark.parametrize("case", ["linear", "linear_bias", "dx", "dw", "db"])
@pytest.mark.parametrize("fmt", ["bfloat16", "float32"])
def test_matmul_within_matches_the_whole_matrix(n_diff: int, case: str, fmt: str) -> None:
    from fpemu.validate.twin.causes import matmul_within  # noqa: PLC0415

    rng = np.random.default_rng(n_diff + len(case))
    x = round_to(rng.standard_normal((24, 33)), "bfloat16").astype(np.float32)
    w = round_to(rng.standard_normal((20, 33)), "bfloat16").astype(np.float32)
    bias = round_to(rng.standard_normal(20), "bfloat16").astype(np.float32) if \
        case == "linear_bias" else None  # fmt: skip
    args: dict[str, Any] = {"transpose": case.startswith("linear"), "scale": 1.0,
                            "first_fmt": None}  # fmt: skip
    if case == "dx":  # (24, 20) @ (20, 33)
        a, b = x[:, :20].copy(), w[:, :]
    elif case == "dw":  # g^T x: a transposed view, as the checker passes it
        a, b = x[:, :20].T, x
        args.update(scale=2.0**-10, first_fmt="bfloat16")
    elif case == "db":  # ones @ g, a 1-D result
        a, b = np.ones((1, 24)), x[:, :20]
    else:
        a, b = x, w
    exact = np.asarray(np.asarray(a, np.float64) @ (np.asarray(b, np.float64).T if
                       args["transpose"] else np.asarray(b, np.float64)))  # fmt: skip
    if bias is not None:
        exact = exact + bias
    if case == "db":
        exact = exact[0]
    t = round_to(exact, fmt).astype(np.float32)
    f = t.copy()
    idx = rng.choice(t.size, min(n_diff, t.size), replace=False)
    step = 2.0 ** (-7 if fmt == "bfloat16" else -23)
    # half of them one ulp off (within the bound), the rest, when asked, far off
    f.flat[idx] = (t.flat[idx] * (1 + step)).astype(np.float32)
    for far in (False, True):
        g = f.copy()
        if far and idx.size:
            g.flat[idx[0]] = t.flat[idx[0]] * 1.5 + 1.0  # outside any reduction-order bound
        got = matmul_within(t, g, a, b, bias, fmt=fmt, **args)
        want = _full_within(t, g, a, b, bias, fmt, **args)
        assert got[0] == want[0]
        if far and idx.size:
            assert not got[0]
        # the largest ratio: the same bound summed in another float64 order (K = 33 positive
        # terms: relative difference below 33 * 2**-53)
        assert got[1] == pytest.approx(want[1], rel=2.0**-40, abs=0.0)
