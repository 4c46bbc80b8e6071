"""MX quantization against torchao 0.18 ``to_mx`` (every scale mode, 6000 blocks per
format and rule by default, 10**5 under -m slow); gfloat and ml_dtypes: test_quant_gfloat.py.

Every disagreement must fall in a documented finding (fp8-mx.md §1.6, §2.1, §8), checked by
its own predicate; each finding also has a test that shows both answers.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

import fpemu
from fpemu.quant import dequantize, get_block_format, quantize
from reference import quant as ref
from tests.quant_cases import blocks

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # torchao's import warns about optional CUDA kernels
    mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.kernels import unpack_uint4

TORCH_DTYPE = {"mxfp8_e4m3": torch.float8_e4m3fn, "mxfp8_e5m2": torch.float8_e5m2,
               "mxfp6_e3m2": "fp6_e3m2", "mxfp6_e2m3": "fp6_e2m3",
               "mxfp4": torch.float4_e2m1fn_x2}  # fmt: skip
RULES = ["floor", "ceil", "even", "rceil"]
N_DEFAULT = 6_000  # per (format, rule) in the default run (~0.2 s each)
N_SLOW = 100_000  # per (format, rule) under -m slow


def torchao_mx(x: np.ndarray, name: str, rule: str) -> tuple[np.ndarray, np.ndarray]:
    """torchao's (scale codes, element codes) for float32 blocks x (n, 32)."""
    mode = getattr(ScaleCalculationMode, rule.upper())
    s, d = mx_tensor.to_mx(torch.from_numpy(x), TORCH_DTYPE[name], 32, mode)
    scodes = s.view(torch.uint8).numpy().reshape(-1)
    if name == "mxfp4":
        ecodes = unpack_uint4(d.view(torch.uint8)).numpy()
    elif name.startswith("mxfp6"):
        ecodes = d.numpy()
    else:
        ecodes = d.view(torch.uint8).numpy()
    return scodes, ecodes.reshape(x.shape).astype(np.uint8)


def _element_codes(y: np.ndarray, name: str) -> Any:
    el = get_block_format(name).element
    return fpemu.bits.encode(fpemu.round(y, el, overflow="saturate"), el)


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("name", list(TORCH_DTYPE))
def test_torchao_to_mx_agrees_except_documented_findings(name: str, rule: str) -> None:
    _sweep(name, rule, N_DEFAULT, 100)


@pytest.mark.slow
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("name", list(TORCH_DTYPE))
def test_torchao_to_mx_agrees_except_documented_findings_large(name: str, rule: str) -> None:
    _sweep(name, rule, N_SLOW, 500)


def _sweep(name: str, rule: str, n: int, seed: int) -> None:
    bf = get_block_format(name)
    x = blocks(seed + RULES.index(rule) * 10 + list(TORCH_DTYPE).index(name), n, 32,
               bf.max, bf.element.mbits)  # fmt: skip
    q = quantize(x, name, scale_rule=rule)
    fs, fe = q.scale_codes.reshape(-1), q.element_codes
    ts, te = torchao_mx(x, name, rule)
    nan_block = np.isnan(x).any(axis=1)
    inf_block = np.isinf(x).any(axis=1) & ~nan_block
    tiny = (fs == 0) & ~nan_block  # fpemu's scale 2**-127
    plain = ~(nan_block | inf_block | tiny)
    # NaN blocks: both give the NaN scale 0xFF (the elements do not matter: the block is NaN)
    assert (ts[nan_block] == 255).all() and (fs[nan_block] == 255).all()
    # Finding 1 (§1.6): a block with Inf: fpemu 0xFE (2**127, as gfloat and TE); torchao
    # FLOOR/CEIL/EVEN read the exponent field 255 as 128 - emax_elem; RCEIL gives 0xFE too
    assert (fs[inf_block] == 254).all()
    want_inf = 254 if rule == "rceil" else 128 - bf.emax_elem + 127
    assert (ts[inf_block] == min(want_inf, 255)).all()
    # Finding 2 (§2.1, pytorch#125557): blocks with scale 2**-127 (amax tiny): same code, but
    # torchao divides by 2**-126 (FLOOR/CEIL/EVEN) or multiplies by 1.0 (RCEIL eager)
    assert (ts[tiny] == 0).all()
    divisor = 1.0 if rule == "rceil" else 2.0**-126
    assert np.array_equal(te[tiny], _element_codes(x[tiny].astype(np.float64) / divisor, name))
    # Finding 3 (§2.1): torchao's eager RCEIL takes ceil(log2(amax/max)) with a float32 log2
    # and misses the round-up just above max * 2**k; fpemu (TE's float_to_e8m0) rounds up
    off = plain & (ts != fs)
    if rule != "rceil":
        assert not off.any()
    else:
        amax = np.abs(x[off]).max(axis=1).astype(np.float64)
        assert (ts[off] == fs[off] - 1).all()
        ratio = amax / bf.max / np.ldexp(1.0, ts[off].astype(int) - 127)
        assert ((ratio > 1) & (ratio < 1 + 2.0**-16)).all()  # just above a power of two
        for a, c in zip(amax[:20], fs[off][:20], strict=False):  # the exact rule agrees with fpemu
            assert ref.e8m0_exponent(float(a), ref_name(name), "rceil_exact") == int(c) - 127
    same = plain & (ts == fs)
    assert np.array_equal(te[same], fe[same])
    assert same.sum() > 0.7 * n  # most blocks are ordinary: the sweep is not vacuous


def ref_name(name: str) -> str:
    return {"mxfp8_e4m3": "e4m3", "mxfp8_e5m2": "e5m2", "mxfp6_e3m2": "e3m2",
            "mxfp6_e2m3": "e2m3", "mxfp4": "e2m1"}[name]  # fmt: skip


def test_finding_torchao_rceil_misses_round_up_both_answers() -> None:
    amax = np.nextafter(np.float32(448.0 * 2.0**57), np.float32(np.inf))
    x = np.zeros((1, 32), np.float32)
    x[0, 0] = amax
    ts, _ = torchao_mx(x, "mxfp8_e4m3", "rceil")
    fs = quantize(x, "mxfp8_e4m3", scale_rule="rceil").scale_codes
    assert (int(ts[0]) - 127, int(fs[0, 0]) - 127) == (57, 58)
    assert ref.e8m0_exponent(float(amax), "e4m3", "rceil_exact") == 58  # exact: 58


def test_finding_torchao_tiny_blocks_both_answers() -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, :2] = [2.0**-120, 2.0**-121]
    for rule, want_ao in (("floor", [64.0, 32.0]), ("rceil", [0.0, 0.0])):
        ts, te = torchao_mx(x, "mxfp8_e4m3", rule)
        q = quantize(x, "mxfp8_e4m3", scale_rule=rule)
        assert int(ts[0]) == int(q.scale_codes[0, 0]) == 0
        ao = fpemu.bits.decode(te[0, :2], "e4m3").tolist()
        assert ao == want_ao  # torchao: divided by 2**-126 / multiplied by 1
        assert q.elements[0, :2].tolist() == [128.0, 64.0]  # fpemu: divided by 2**-127
        assert dequantize(q)[0, :2].tolist() == x[0, :2].tolist()


def test_finding_inf_block_both_answers() -> None:
    x = np.zeros((1, 32), np.float32)
    x[0, :2] = [np.inf, 1.0]
    ts, te = torchao_mx(x, "mxfp8_e4m3", "floor")
    q = quantize(x, "mxfp8_e4m3")
    assert (int(ts[0]), int(q.scale_codes[0, 0])) == (0xF7, 0xFE)
    assert fpemu.bits.decode(te[0, :2], "e4m3").tolist() == q.elements[0, :2].tolist() == [448, 0]
