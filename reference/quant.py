"""Exact scalar MX / NVFP4 block quantization and FP8 scale rules (Fractions, one block at a time).

Written from the rules as published (OCP MX v1.0 §6.3; NVIDIA's round-up from amax/elem_max;
torchao's CEIL/EVEN options; Transformer Engine's and torchao's NVFP4 float32 operation
orders), as summarised with citations in the project's research note fp8-mx.md §1-§5. Every
float32 operation of a kernel is written as "exact result, then one RN32".

>>> mx_block([480.0, 9.5, -17.0], "e4m3", "floor")
(127, [448.0, 10.0, -16.0])
>>> mx_block([480.0, 9.5, -17.0], "e4m3", "rceil")
(128, [240.0, 5.0, -8.0])
>>> mx_block([6.0, 0.25, 0.75, 2.5, 5.0], "e2m1", "ceil")[1]
[3.0, 0.0, 0.5, 1.0, 2.0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

from reference.bits import encode_value
from reference.rounding import round_value
from reference.spec import E2M1FN, E2M3FN, E3M2FN, E4M3FN, E5M2, FLOAT32, Spec, floor_log2, pow2
from reference.value import NEG_ZERO, POS_INF, Value, to_float

#: Element formats (OCP MX §5.2) by short name; "int8" is handled as integers k/64.
ELEMENTS: dict[str, Spec] = {
    "e4m3": E4M3FN, "e5m2": E5M2, "e3m2": E3M2FN, "e2m3": E2M3FN, "e2m1": E2M1FN,
}  # fmt: skip
#: emax_elem (exponent of the largest normal binade) per element, OCP MX §5.2 table.
EMAX: dict[str, int] = {"e4m3": 8, "e5m2": 15, "e3m2": 4, "e2m3": 2, "e2m1": 2, "int8": 0}
#: Largest element magnitude.
MAXV: dict[str, Fraction] = {
    "e4m3": Fraction(448), "e5m2": Fraction(57344), "e3m2": Fraction(28),
    "e2m3": Fraction(15, 2), "e2m1": Fraction(6), "int8": Fraction(127, 64),
}  # fmt: skip
#: Fraction bits of each element (the EVEN rule rounds amax to this width).
MBITS: dict[str, int] = {"e4m3": 3, "e5m2": 2, "e3m2": 2, "e2m3": 3, "e2m1": 1, "int8": 6}

FLT_MAX = Fraction((2**24 - 1) * 2**104)


def ceil_log2(a: Fraction) -> int:
    """``ceil(log2 a)`` for ``a > 0``, exactly."""
    e = floor_log2(a)
    return e if a == pow2(e) else e + 1


def rn32(v: Fraction) -> Value:
    """One float32 round-to-nearest-even (overflow gives +-inf)."""
    return round_value(v, FLOAT32, "rne")


def e8m0_exponent(amax: float, elem: str, rule: str) -> int | None:
    """The unbiased E8M0 exponent of a block with maximum magnitude ``amax`` (None: NaN scale).

    NaN -> NaN scale; Inf -> 127; 0 -> -127; otherwise the rule, clamped to [-127, 127].
    ``rceil`` is cuBLAS/TE's: ``ceil(log2(RN32(RN32(amax) * RN32(1/max))))``.
    """
    if math.isnan(amax):
        return None
    if math.isinf(amax):
        return 127
    if amax == 0:
        return -127
    a = Fraction(amax)
    if rule == "floor":
        e = floor_log2(a) - EMAX[elem]
    elif rule == "ceil":
        e = ceil_log2(a) - EMAX[elem]
    elif rule == "even":
        f = floor_log2(a)
        sig = a / pow2(f)  # in [1, 2)
        # round the significand half-up to MBITS fraction bits; reaching 2 bumps the exponent
        e = f + (1 if sig >= 2 - pow2(-(MBITS[elem] + 1)) else 0) - EMAX[elem]
    elif rule == "rceil":
        rcp = rn32(1 / MAXV[elem])
        a32 = rn32(a)
        assert isinstance(rcp, Fraction) and isinstance(a32, Fraction)
        d = rn32(a32 * rcp)
        assert isinstance(d, Fraction)
        e = -127 if d == 0 else ceil_log2(d)
    elif rule == "rceil_exact":  # the mathematical rule, to compare with TE's float32 one
        e = ceil_log2(a / MAXV[elem])
    else:
        raise ValueError(f"unknown rule {rule!r}")
    return max(-127, min(127, e))


def _element(v: Fraction, elem: str) -> float:
    """RNE with saturation of an exact value to the element format (zero keeps v's sign)."""
    if elem == "int8":
        k = round(v * 64)  # Python's round of a Fraction: ties to even
        p = float(Fraction(max(-127, min(127, k)), 64))
    else:
        p = to_float(round_value(v, ELEMENTS[elem], "rne", overflow="saturate"))
    return -0.0 if p == 0 and v < 0 else p


def mx_block(values: Sequence[float], elem: str, rule: str) -> tuple[int, list[float]]:
    """E8M0 code and element values ``P_i`` of one MX block (NaN scale: every P_i NaN).

    Infinite elements saturate to +-max (gfloat, TE ``satfinite``).
    """
    amax = max((abs(v) for v in values), key=lambda t: (math.isnan(t), t))
    e = e8m0_exponent(amax, elem, rule)
    if e is None:
        return 255, [math.nan] * len(values)
    out = []
    for v in values:
        if math.isinf(v):
            out.append(math.copysign(float(MAXV[elem]), v))
        else:
            p = _element(Fraction(v) / pow2(e), elem)
            out.append(math.copysign(p, v) if p == 0 else p)
    return e + 127, out


def element_code(p: float, elem: str) -> int:
    """Bit pattern of an element value (int8: two's-complement byte of k = 64 p)."""
    if elem == "int8":
        return int(Fraction(p) * 64) & 0xFF
    negative_zero = p == 0 and math.copysign(1.0, p) < 0
    return encode_value(NEG_ZERO if negative_zero else Fraction(p), ELEMENTS[elem])


def _e4m3_sat(v: Fraction) -> Fraction:
    r = round_value(v, E4M3FN, "rne", overflow="saturate")
    assert isinstance(r, Fraction)
    return r


def nvfp4_scales(block_amax: float, g: float, order: str) -> tuple[Fraction, Fraction, Fraction]:
    """(block scale s_b, element multiplier, tensor decode scale) of one NVFP4 block.

    ``g`` is the tensor amax. Orders: ``"te"`` (TE kernel and reference_nvfp4.py) and
    ``"torchao"`` (nvfp4_quantize), fp8-mx.md §3.2-§3.3.
    """
    b, gg = Fraction(block_amax), Fraction(g)
    if order == "te":
        s_enc_v = rn32(Fraction(2688) / gg) if gg != 0 else POS_INF
        s_enc = FLT_MAX if s_enc_v is POS_INF else s_enc_v
        assert isinstance(s_enc, Fraction)
        if gg == 0 or s_enc == 0:
            s_enc = Fraction(1)
        s_dec = _f(rn32(1 / s_enc))
        m = _f(rn32(s_enc * _f(rn32(Fraction(1, 6)))))
        prod = rn32(b * m)
        s_b = _e4m3_sat(FLT_MAX if prod is POS_INF else min(_f(prod), FLT_MAX))
        den = _f(rn32(s_b * s_dec))
        inv = FLT_MAX if den == 0 else min(_f_or_max(rn32(1 / den)), FLT_MAX)
        return s_b, inv, s_dec
    if order == "torchao":
        pts = _f(rn32(gg / 2688))
        t = _f(rn32(_f(rn32(b / 6)) / pts))
        s_b = _e4m3_sat(min(max(t, pow2(-6)), Fraction(448)))
        inv = _f(rn32(_f(rn32(1 / pts)) / s_b))
        return s_b, inv, pts
    raise ValueError(f"unknown order {order!r}")


def _f(v: Value) -> Fraction:
    assert isinstance(v, Fraction), v
    return v


def _f_or_max(v: Value) -> Fraction:
    return FLT_MAX if v is POS_INF else _f(v)


def e2m1_of_scaled(x: float, inv: Fraction, rbyte: int | None = None) -> float:
    """E2M1 value of ``RN32(x * inv)``: RNE with saturation, or TE's 8-bit stochastic rule.

    Stochastic (``rbyte`` in 0..255): ``t = RN32(|y| + rbyte/256 * step(|y|))``, truncated to
    the E2M1 grid of t's binade, capped at 6 (fp8-mx.md §3.6).
    """
    y = rn32(Fraction(x) * inv)
    neg = x < 0 or (x == 0 and math.copysign(1, x) < 0)
    a = FLT_MAX * 2 if y is POS_INF or (not isinstance(y, Fraction)) else abs(y)
    if rbyte is None:
        q = abs(_element(a, "e2m1"))
    else:

        def step(t: Fraction) -> Fraction:
            return Fraction(2) if t >= 4 else Fraction(1) if t >= 2 else Fraction(1, 2)

        t = _f_or_max(rn32(a + Fraction(rbyte, 256) * step(a)))
        st = step(t)
        q = float(min((t // st) * st, Fraction(6)))
    return -q if neg else q
