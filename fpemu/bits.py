"""Bit patterns: values <-> integer codes, enumeration of small formats, ulp and neighbours.

>>> import numpy as np
>>> hex(int(encode(1.0, "fp16"))), float(decode(0x7BFF, "fp16"))
('0x3c00', 65504.0)
>>> all_values("float4_e2m1fn")
array([-6. , -4. , -3. , -2. , -1.5, -1. , -0.5,  0. ,  0.5,  1. ,  1.5,
        2. ,  3. ,  4. ,  6. ])
>>> float(next_up(1.0, "bf16")), float(ulp(1.0, "bf16"))
(1.0078125, 0.0078125)
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format, FormatLike, Overflow, get_format
from fpemu.inputs import as_array, as_float_array
from fpemu.rounding import round as fround

MAX_ENUMERABLE_BITS = 16


def code_dtype(fmt: FormatLike) -> np.dtype[Any]:
    """The smallest unsigned integer dtype that holds the format's bit patterns."""
    f = get_format(fmt)
    for dt in (np.uint8, np.uint16, np.uint32, np.uint64):
        if f.bits <= np.dtype(dt).itemsize * 8:
            return np.dtype(dt)
    raise AssertionError("formats have at most 64 bits")  # pragma: no cover


def canonical_nan(fmt: FormatLike) -> int:
    """The code :func:`encode` gives NaN: quiet NaN (IEEE), all ones (fn), sign only (fnuz).

    Raises:
        ValueError: the format has no NaN.
    """
    f = get_format(fmt)
    top = (2**f.ebits - 1) << f.mbits
    if f.specials == "ieee":
        return int(top | (1 << (f.mbits - 1) if f.mbits else 1))
    if f.specials == "fn":
        return int(top | ((1 << f.mbits) - 1))
    if f.specials == "fnuz":
        return int(1 << (f.bits - 1))
    raise ValueError(f"format {f.name} has no NaN")


def encode(x: Any, fmt: FormatLike) -> Any:
    """Bit patterns of values that are exactly representable in ``fmt``.

    NaN maps to :func:`canonical_nan`; -0 to the sign bit alone (to 0 in fnuz formats).

    Raises:
        ValueError: some value is not representable (round it first with :func:`fpemu.round`).
    """
    f = get_format(fmt)
    a = as_float_array(x, arg="x")
    np_ = xp(a)
    if not (f.signed and f.zero):  # scale formats: fpemu.round does not target them
        return _encode_scale(a, f)
    same = (fround(a, f, overflow="saturate" if not f.has_nan else None) == a) | np_.isnan(a)
    if not bool(np_.all(same | (np_.isinf(a) & f.has_inf))):
        bad = a[~(same | (np_.isinf(a) & f.has_inf))].reshape(-1)[0]
        raise ValueError(
            f"x contains {float(bad)!r}, not representable in {f.name}; round it first"
        )
    mag = np_.abs(a)
    mant, ex = np_.frexp(mag)  # mag = mant * 2**ex, mant in [0.5, 1)
    normal = (ex - 1 >= f.emin) & np_.isfinite(mag) & (mag != 0)
    e_field = np_.where(normal, ex - 1 + f.bias, 0)
    m_norm = np_.ldexp(mant, f.mbits + 1) - 2**f.mbits
    with np.errstate(over="ignore"):  # only subnormal positions are kept; others may overflow
        m_sub = np_.ldexp(np_.where(np_.isfinite(mag), mag, 0.0), f.mbits - f.emin)
    m_field = np_.where(normal, m_norm, m_sub).astype(np_.uint64)
    code = (e_field.astype(np_.uint64) << np_.uint64(f.mbits)) | m_field
    if f.has_inf:
        code = np_.where(np_.isinf(a), np_.uint64((2**f.ebits - 1) << f.mbits), code)
    neg = np_.signbit(a) & ~np_.isnan(a) & ((code != 0) | f.has_negative_zero)
    code = code | (neg.astype(np_.uint64) << np_.uint64(f.bits - 1))
    if f.has_nan:
        code = np_.where(np_.isnan(a), np_.uint64(canonical_nan(f)), code)
    out = code.astype(code_dtype(f))
    return out[()] if out.ndim == 0 else out


def _encode_scale(a: Any, f: Format) -> Any:
    """Codes of an unsigned or zero-free format: encode the magnitude, then check by decoding."""
    np_ = xp(a)
    mag = np_.where(np_.isfinite(a), np_.abs(a), 0.0)
    mant, ex = np_.frexp(mag)
    normal = (ex - 1 >= f.emin) & (mag != 0)
    e_field = np_.where(normal, ex - 1 + f.bias, 0)
    m_norm = np_.ldexp(mant, f.mbits + 1) - 2**f.mbits
    m_sub = np_.ldexp(mag, f.mbits - f.emin)
    m_field = np_.clip(np_.where(normal, m_norm, m_sub), 0, 2**f.mbits - 1)
    code = (np_.clip(e_field, 0, 2**f.ebits - 1).astype(np_.uint64) << np_.uint64(f.mbits)) | (
        m_field.astype(np_.uint64)
    )
    code = np_.where(np_.isnan(a), np_.uint64(canonical_nan(f)), code).astype(code_dtype(f))
    back = decode(code, f)
    ok = (back == a) | np_.isnan(a)
    if not bool(np_.all(ok)):
        bad = a[~ok].reshape(-1)[0]
        raise ValueError(f"x contains {float(bad)!r}, not representable in {f.name}")
    return code[()] if code.ndim == 0 else code


def decode(codes: Any, fmt: FormatLike, *, dtype: Any = np.float64) -> Any:
    """Values of bit patterns ``codes`` (any integer array) in ``fmt``.

    Subnormal patterns of a format declared without subnormals decode to signed zero.

    Raises:
        TypeError: ``codes`` is not an integer array, or ``dtype`` is not float32/float64.
        ValueError: a code is negative or does not fit in the format's width.
    """
    f = get_format(fmt)
    c = as_array(codes, arg="codes")
    np_ = xp(c)
    if c.dtype.kind not in "iu":
        raise TypeError(f"codes must be an integer array, got dtype {c.dtype}")
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}")
    if c.size and (bool((c < 0).any()) or int(c.max()) >= 2**f.bits):
        raise ValueError(f"codes must lie in [0, 2**{f.bits}) for {f.name}")
    c = c.astype(np_.uint64)
    if f.bits <= MAX_ENUMERABLE_BITS:
        table = _decode_table(f)
        out = (table if np_ is np else np_.asarray(table)).take(c)
    else:
        out = _decode_arith(c, f)
    out = out.astype(dtype)
    return out[()] if out.ndim == 0 else out


@functools.lru_cache(maxsize=32)
def _decode_table(f: Format) -> np.ndarray:
    table: np.ndarray = _decode_arith(np.arange(2**f.bits, dtype=np.uint64), f)
    return table


def _decode_arith(c: Any, f: Format) -> Any:
    np_ = xp(c)
    sign = (c >> np_.uint64(f.bits - 1)) & np_.uint64(1 if f.signed else 0)
    e = ((c >> np_.uint64(f.mbits)) & np_.uint64(2**f.ebits - 1)).astype(np_.int64)
    m = (c & np_.uint64(2**f.mbits - 1)).astype(np_.float64)
    sub = m if f.subnormals else m * 0.0
    # zero-free formats (E8M0): field 0 is the normal binade 2**-bias
    mag = np_.where((e == 0) & f.zero, np_.ldexp(sub, f.emin - f.mbits),
                    np_.ldexp(m + 2**f.mbits, e - f.bias - f.mbits))  # fmt: skip
    top, full = e == 2**f.ebits - 1, m == 2**f.mbits - 1
    if f.specials == "ieee":
        mag = np_.where(top, np_.where(m == 0, np_.inf, np_.nan), mag)
    elif f.specials == "fn":
        mag = np_.where(top & full, np_.nan, mag)
    elif f.specials == "fnuz":
        mag = np_.where((sign == 1) & (e == 0) & (m == 0), np_.nan, mag)
    return np_.where(sign == 1, -mag, mag)


def codes(fmt: FormatLike) -> np.ndarray:
    """Every bit pattern of a format of at most 16 bits, in increasing code order.

    Raises:
        ValueError: the format is wider than 16 bits.
    """
    f = get_format(fmt)
    if f.bits > MAX_ENUMERABLE_BITS:
        raise ValueError(f"{f.name} has {f.bits} bits; enumeration is for formats of <= 16 bits")
    return np.arange(2**f.bits, dtype=np.uint64).astype(code_dtype(f))


def all_values(fmt: FormatLike) -> np.ndarray:
    """The distinct finite values of a format of at most 16 bits, increasing (zero once, as +0)."""
    v = decode(codes(fmt), fmt)
    out: np.ndarray = np.unique(v[np.isfinite(v)]) + 0.0
    return out


def ulp(x: Any, fmt: FormatLike) -> Any:
    """Spacing of ``fmt`` in the binade of each ``|x|``: ``2**(max(floor(log2|x|), emin) - mbits)``.

    Zero and values below the smallest normal give the subnormal spacing
    (:attr:`Format.smallest_subnormal`); values beyond the largest binade extend the exponent;
    infinities give inf and NaN gives NaN.
    """
    f = get_format(fmt)
    a = as_float_array(x, arg="x")
    np_ = xp(a)
    _, ex = np_.frexp(a)
    q = np_.where(
        (ex - 1 >= f.emin) & (a != 0), np_.ldexp(1.0, ex - 1 - f.mbits), f.smallest_subnormal
    )
    q = np_.where(np_.isfinite(a), q, np_.abs(a))
    return q[()] if q.ndim == 0 else q


def next_up(x: Any, fmt: FormatLike) -> Any:
    """The smallest value of ``fmt`` strictly greater than each ``x`` (any float64).

    Above the largest finite value: +inf where the format has infinities, else NaN. NaN gives NaN;
    ``next_up(-inf)`` is ``-max``.
    """
    f = get_format(fmt)
    a = as_float_array(x, arg="x")
    np_ = xp(a)
    ovf: Overflow = "inf" if f.has_inf else "saturate"
    with np.errstate(over="ignore", invalid="ignore"):  # stepping past max overflows
        up = fround(np_.where(np_.isnan(a), 0.0, a), f, mode="rup", overflow=ovf)
        on = up == a  # already a value of the format: step from it
        below = np_.nextafter(np_.abs(a), 0.0)  # a float just under |a|: its binade's spacing
        step = np_.where(a < 0, ulp(below, f), ulp(a, f))
        stepped = a + step
        res = np_.where(on, stepped, up)
        res = np_.where((res > f.max) | (on & (a == f.max)), np_.inf if f.has_inf else np_.nan, res)
        res = np_.where(np_.isneginf(a), -f.max, np_.where(np_.isnan(a), np_.nan, res))
        res = np_.where(np_.isposinf(a), np_.inf if f.has_inf else np_.nan, res)
        res = np_.where((res == 0) & (a < 0), -0.0, res)  # next_up(-tiniest) is -0, as in IEEE 754
    if not f.has_negative_zero:
        res = res + 0.0
    return res[()] if res.ndim == 0 else res


def next_down(x: Any, fmt: FormatLike) -> Any:
    """The largest value of ``fmt`` strictly less than each ``x`` (mirror of :func:`next_up`)."""
    f = get_format(fmt)
    a = as_float_array(x, arg="x")
    res = -next_up(-a, f)
    if not f.has_negative_zero:
        res = res + 0.0
    return res
