"""Bit patterns: :func:`decode` any code of a format, :func:`encode` a value back to its code.

A code is the int ``sign << (ebits + mbits) | E << mbits | f``. Codes are read by their
pattern alone: the ``subnormals`` flag does not change what a code means, so ``E == 0`` codes
decode to subnormal values and subnormal values encode, whatever the flag.

>>> from reference.spec import FLOAT16, E4M3FN, E4M3FNUZ
>>> decode(0x3C00, FLOAT16), decode(0x7BFF, FLOAT16), decode(0x0001, FLOAT16) == 2**-24
(1.0, 65504.0, True)
>>> hex(encode(448.0, E4M3FN)), hex(encode(float("nan"), E4M3FNUZ))
('0x7e', '0x80')
"""

from __future__ import annotations

from fractions import Fraction

from reference.spec import Spec, floor_log2, pow2
from reference.value import (
    NAN,
    NEG_INF,
    NEG_ZERO,
    POS_INF,
    Value,
    from_float,
    is_negative,
    signed_inf,
    signed_zero,
    to_float,
)


def _fields(spec: Spec) -> tuple[int, int]:
    return (1 << spec.ebits) - 1, (1 << spec.mbits) - 1  # all-ones exponent, all-ones fraction


def decode_value(code: int, spec: Spec) -> Value:
    """Return the exact :data:`~reference.value.Value` a code stands for.

    Raises:
        TypeError: ``code`` is not an int.
        ValueError: ``code`` is outside ``0 .. 2**spec.bits - 1``.

    >>> from reference.spec import E4M3FNUZ
    >>> decode_value(0x01, E4M3FNUZ), decode_value(0x80, E4M3FNUZ)
    (Fraction(1, 1024), Special.NAN)
    """
    if isinstance(code, bool) or not isinstance(code, int):
        raise TypeError(f"code must be an int, got {code!r}")
    if not 0 <= code < (1 << spec.bits):
        raise ValueError(f"code={code} is out of range; expected 0 <= code < 2**{spec.bits}")
    emask, fmask = _fields(spec)
    negative = bool(code >> (spec.ebits + spec.mbits))
    e = (code >> spec.mbits) & emask
    f = code & fmask
    if spec.specials == "ieee" and e == emask:
        return signed_inf(negative) if f == 0 else NAN
    if spec.specials == "fn" and e == emask and f == fmask:
        return NAN
    if spec.specials == "fnuz" and negative and e == 0 and f == 0:
        return NAN
    if e == 0:
        mag = f * pow2(spec.emin - spec.mbits)
    else:
        mag = ((1 << spec.mbits) + f) * pow2(e - spec.bias - spec.mbits)
    if mag == 0:
        return signed_zero(negative)
    return -mag if negative else mag


def decode(code: int, spec: Spec) -> float:
    """Return the value of a code as a Python float (exact).

    >>> from reference.spec import E5M2
    >>> decode(0x7C, E5M2), decode(0xFC, E5M2), decode(0x80, E5M2)
    (inf, -inf, -0.0)
    """
    return to_float(decode_value(code, spec))


def nan_code(spec: Spec) -> int:
    """The canonical NaN code: ieee quiet NaN (top fraction bit), fn all ones, fnuz ``1 0..0``.

    Raises:
        ValueError: the format has no NaN.

    >>> from reference.spec import E4M3FN, FLOAT32
    >>> hex(nan_code(E4M3FN)), hex(nan_code(FLOAT32))
    ('0x7f', '0x7fc00000')
    """
    emask, fmask = _fields(spec)
    if spec.specials == "ieee":
        if spec.mbits == 0:
            raise ValueError(f"spec={spec} has no fraction bits, hence no NaN code")
        return (emask << spec.mbits) | (1 << (spec.mbits - 1))
    if spec.specials == "fn":
        return (emask << spec.mbits) | fmask
    if spec.specials == "fnuz":
        return 1 << (spec.ebits + spec.mbits)
    raise ValueError(f"spec={spec} (specials='finite') has no NaN")


def encode_value(v: Value, spec: Spec) -> int:
    """Return the code of an exact value (see :func:`encode`).

    >>> from reference.spec import FLOAT16
    >>> hex(encode_value(Fraction(-1365, 4096), FLOAT16))
    '0xb555'
    """
    sign = int(is_negative(v)) << (spec.ebits + spec.mbits)
    if v is NAN:
        return nan_code(spec)
    emask, _ = _fields(spec)
    if v is POS_INF or v is NEG_INF:
        if not spec.has_inf:
            raise ValueError(f"value={v!r} is not representable: spec={spec} has no infinity")
        return sign | (emask << spec.mbits)
    if v is NEG_ZERO:
        if not spec.has_negative_zero:
            raise ValueError(f"value=-0.0 is not representable: spec={spec} has no -0")
        return sign
    assert isinstance(v, Fraction)
    a = -v if v < 0 else v
    if a == 0:
        return 0
    e = 0 if a < spec.tiny else floor_log2(a) + spec.bias  # biased exponent field
    if e <= emask:
        sig = a / pow2((spec.emin if e == 0 else e - spec.bias) - spec.mbits)
        if sig.denominator == 1:
            code = sign | (e << spec.mbits) | (sig.numerator & ((1 << spec.mbits) - 1))
            if decode_value(code, spec) == v:  # also rejects codes that are NaN/inf
                return code
    raise ValueError(f"value={v!r} is not exactly representable in spec={spec}")


def encode(value: float, spec: Spec) -> int:
    """Return the code of a float that is exactly a value of ``spec``.

    NaN gives :func:`nan_code`. ``-0.0`` in a format without -0 is refused.

    Raises:
        ValueError: ``value`` is not exactly representable (or is NaN for a format without NaN).

    >>> from reference.spec import FLOAT16
    >>> hex(encode(1.0, FLOAT16)), hex(encode(-(2.0**-24), FLOAT16))
    ('0x3c00', '0x8001')
    >>> hex(encode(float("nan"), FLOAT16))
    '0x7e00'
    >>> encode(1.0 + 2**-11, FLOAT16)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: value=Fraction(2049, 2048) is not exactly representable in spec=Spec(...)
    """
    return encode_value(from_float(value), spec)
