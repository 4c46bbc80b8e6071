"""MX quantization against gfloat 0.5.2 (OCP FLOOR blocks, special blocks) and ml_dtypes casts.

Disagreements are documented findings (fp8-mx.md §1.1, §2.2, §8), each checked by a predicate.
"""

from __future__ import annotations

import gfloat
import ml_dtypes
import numpy as np
import pytest
from gfloat import formats as gf

import fpemu
from fpemu.quant import dequantize, get_block_format, quantize
from tests.quant_cases import blocks

# -- gfloat: the OCP FLOOR block -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e3m2", "mxfp6_e2m3", "mxfp4",
                                  "mxint8"])  # fmt: skip
def test_gfloat_floor_blocks(name: str) -> None:
    info = {"mxfp8_e4m3": gf.format_info_mxfp8_e4m3, "mxfp8_e5m2": gf.format_info_mxfp8_e5m2,
            "mxfp6_e3m2": gf.format_info_mxfp6_e3m2, "mxfp6_e2m3": gf.format_info_mxfp6_e2m3,
            "mxfp4": gf.format_info_mxfp4_e2m1, "mxint8": gf.format_info_mxint8}[name]  # fmt: skip
    bf = get_block_format(name)
    x = blocks(200 + len(name), 150, 32, bf.max, bf.element.mbits)
    x = x[np.isfinite(x).all(axis=1)].astype(np.float64)  # gfloat: NaN/Inf covered below
    got = dequantize(quantize(x, name))
    int8_minus_two = 0
    for row, g in zip(x, got, strict=False):
        want = np.asarray(gfloat.quantize_block(info, row, gfloat.compute_scale_amax))
        if name == "mxint8" and not np.array_equal(want, g):
            # Finding (§1.1, §8.2): gfloat's INT8 is two's complement and reaches -2.0 * X;
            # fpemu follows the symmetric (sign-magnitude) MX INT8 of microxcaling: -127/64 * X
            scale = np.ldexp(1.0, int(np.floor(np.log2(np.abs(row).max()))))
            d = want != g
            assert (want[d] == -2.0 * scale).all() and (g[d] == -127 / 64 * scale).all()
            int8_minus_two += int(d.sum())
            continue
        assert np.array_equal(want, g)
    if name == "mxint8":
        assert int8_minus_two > 0


def test_gfloat_special_blocks() -> None:
    for vals, code in (([0.0], 0), ([1e-40], 0), ([np.inf, 1.0], 254), ([np.nan, 1.0], 255)):
        row = np.zeros(32)
        row[: len(vals)] = vals
        s = float(gfloat.compute_scale_amax(gf.format_info_mxfp8_e4m3.etype.emax, row))
        q = quantize(row.astype(np.float32), "mxfp8_e4m3")
        assert int(q.scale_codes[0]) == code
        assert np.array_equal(fpemu.quant.e8m0_value(q.scale_codes), [s], equal_nan=True)


# -- ml_dtypes casts ---------------------------------------------------------------------------


def test_ml_dtypes_element_casts_agree_on_every_scaled_value() -> None:
    # the element rounding (RNE, saturation done before the cast) agrees with ml_dtypes' casts
    rng = np.random.default_rng(5)
    for name, dt in (("mxfp4", ml_dtypes.float4_e2m1fn), ("mxfp6_e3m2", ml_dtypes.float6_e3m2fn),
                     ("mxfp6_e2m3", ml_dtypes.float6_e2m3fn),
                     ("mxfp8_e4m3", ml_dtypes.float8_e4m3fn)):  # fmt: skip
        bf = get_block_format(name)
        x = (rng.standard_normal((4000, 32)) * np.exp(rng.standard_normal((4000, 1)) * 4))
        x = x.astype(np.float32)
        q = quantize(x, name, scale_rule="rceil")
        y = x.astype(np.float64) / np.repeat(q.scales, 32, axis=-1)
        want = np.clip(y, -bf.max, bf.max).astype(dt)
        assert np.array_equal(q.element_codes, want.view(np.uint8) & (2**bf.element.bits - 1))


def test_finding_e8m0_casts_are_not_scale_rules() -> None:
    # §2.2: casting a scale to float8_e8m0fnu rounds ties up in the linear domain
    v = np.array([1.5, 3.0, 0.75], np.float32)
    assert v.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8).tolist() == [128, 129, 127]
    e = get_block_format("mxfp8_e4m3").element
    amax = v * np.float32(2.0**8)  # FLOOR of amax = v * 2**emax gives floor(log2 v)
    assert (fpemu.quant.e8m0_codes(amax, e, "floor").astype(int) - 127).tolist() == [0, 1, -1]
