"""E8M0 scale rules: FLOOR, CEIL, EVEN and RCEIL as data and as bit-exact functions of amax.

Every rule maps a block's ``amax = max |x_i|`` to an E8M0 code ``c`` (scale ``2**(c - 127)``):

- ``floor`` (OCP MX v1.0 §6.3): ``floor(log2 amax) - emax_elem``.
- ``ceil`` (torchao option): ``ceil(log2 amax) - emax_elem``.
- ``even`` (torchao option): amax rounded to the element's mantissa width (half up), then FLOOR.
- ``rceil`` (NVIDIA cuBLAS/TE): ``ceil(log2(RN32(amax * RN32(1/max_elem))))``, computed as
  Transformer Engine's ``float_to_e8m0`` does on the float32 product (fp8-mx.md §2.1).

Special blocks (one choice for all rules, fp8-mx.md §1.6): amax NaN gives code 0xFF (NaN scale,
the whole block decodes to NaN); amax Inf gives 0xFE (2**127: gfloat's clip and TE's
``float_to_e8m0``); amax 0 gives code 0 (2**-127). Exponents are clamped to [-127, 127].

>>> import numpy as np
>>> from fpemu.quant.block import get_block_format
>>> bf = get_block_format("mxfp8_e4m3")
>>> amax = np.array([448.0, 449.0, 480.0, 496.0])
>>> {r: (e8m0_codes(amax, bf.element, r) - 127).tolist() for r in SCALE_RULES}
{'floor': [0, 0, 0, 0], 'ceil': [1, 1, 1, 1], 'even': [0, 0, 0, 1], 'rceil': [0, 1, 1, 1]}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format

E8M0_BIAS = 127
E8M0_NAN = 0xFF


@dataclass(frozen=True)
class ScaleRule:
    """One E8M0 scale rule: its name, what it computes and who uses it by default."""

    name: str
    formula: str
    used_by: str


#: The E8M0 scale rules (fp8-mx.md §2 table).
SCALE_RULES: dict[str, ScaleRule] = {
    r.name: r
    for r in (
        ScaleRule("floor", "floor(log2 amax) - emax_elem",
                  "OCP MX v1.0 §6.3; gfloat; microxcaling; torchao to_mx default"),
        ScaleRule("ceil", "ceil(log2 amax) - emax_elem", "torchao ScaleCalculationMode.CEIL"),
        ScaleRule("even", "floor(log2 round_half_up(amax, mbits)) - emax_elem",
                  "torchao ScaleCalculationMode.EVEN"),
        ScaleRule("rceil", "ceil(log2 RN32(amax * RN32(1/max_elem)))",
                  "cuBLAS, cuDNN, Transformer Engine MXFP8, DeepGEMM; torchao RCEIL"),
    )
}  # fmt: skip


def e8m0_codes(amax: Any, element: Format, rule: str) -> Any:
    """E8M0 codes (uint8) of blocks with maxima ``amax`` (float array, NaN/Inf allowed).

    ``amax`` is taken as exact; ``rceil`` first rounds it to float32 (its kernels' input).

    Raises:
        ValueError: unknown rule.

    >>> e8m0_codes(np.array([0.0, np.inf, np.nan, 6.0, 7.0]), Format("e2m1", 2, 1, 1, "finite"),
    ...            "even").tolist()
    [0, 254, 255, 127, 128]
    """
    if rule not in SCALE_RULES:
        raise ValueError(f"scale_rule={rule!r} is unknown; accepted: {', '.join(SCALE_RULES)}")
    a = xp(amax).asarray(amax, dtype=np.float64)
    np_ = xp(a)
    finite = np_.isfinite(a) & (a > 0)
    safe = np_.where(finite, a, 1.0)
    if rule == "rceil":
        code = _rceil_te(safe, element)
    else:
        mant, ex = np_.frexp(safe)  # safe = mant * 2**ex, mant in [0.5, 1): floor(log2) = ex - 1
        e = ex.astype(np_.int64) - 1
        if rule == "ceil":
            e = e + (mant != 0.5)
        elif rule == "even":
            # carry into the exponent iff the significand (2*mant) >= 2 - 2**-(mbits+1)
            e = e + (2 * mant >= 2.0 - 2.0 ** -(element.mbits + 1))
        code = np_.clip(e - element.emax + E8M0_BIAS, 0, 2 * E8M0_BIAS)
    code = np_.where(finite, code, np_.where(a == 0, 0, 2 * E8M0_BIAS))
    code = np_.where(np_.isnan(a), E8M0_NAN, code)
    return code.astype(np_.uint8)


def _rceil_te(amax: Any, element: Format) -> Any:
    """TE ``float_to_e8m0(amax * max_norm_rcp)`` (ptx_arch_spec.cuh:72-104, fp8-mx.md §2.1)."""
    np_ = xp(amax)
    rcp = np.float32(1.0) / np.float32(element.max)  # RN32(1/max): TE's Quantized_Limits rcp
    with np.errstate(under="ignore"):
        d = amax.astype(np_.float32) * rcp  # one float32 rounding, as the kernel
    bits = d.view(np_.uint32)
    e = ((bits >> 23) & 0xFF).astype(np_.int64)
    m = bits & 0x7FFFFF
    # round up iff the fraction is nonzero, except at the top binade (saturate) and for
    # float32 subnormals <= 2**-127 (they stay at code 0)
    up = (m != 0) & (e != 0xFE) & ~((e == 0) & (m <= 0x400000))
    return e + up


def e8m0_value(codes: Any) -> Any:
    """Scale values ``2**(code-127)`` of E8M0 codes as float64; 0xFF gives NaN.

    >>> e8m0_value(np.array([0, 127, 254, 255], dtype=np.uint8)).tolist()[1:]
    [1.0, 1.7014118346046923e+38, nan]
    """
    c = xp(codes).asarray(codes)
    np_ = xp(c)
    v = np_.ldexp(1.0, c.astype(np_.int64) - E8M0_BIAS)
    return np_.where(c == E8M0_NAN, np_.nan, v)
