"""Float32 building blocks of torch's CPU kernels: a correctly rounded fused multiply-add, Python
scalars converted the way ATen converts them, and the libm/Sleef/MKL candidate sets that bound a
transcendental's float32 result.

Why candidates, not a fixed ulp bound of the exact value: a kernel evaluates a formula in float32
around its transcendental call (``0.5*x*(1+tanh(u))``); where that evaluation cancels, a one-ulp
change of ``tanh`` moves the result by many ulps of the result. So the emulation evaluates the
kernel's own float32 formula at every float32 value the transcendental may have returned (or at
the two ends, where the formula is monotone in it) and reports the hull.

>>> import numpy as np
>>> fma32(np.float32([1 + 2**-23]), np.float32([1 - 2**-23]), np.float32([-1.0])).tolist()
[-1.4210854715202004e-14]
>>> [float(c[0]) for c in candidates(np.float64([1.0]), 1)]
[0.9999999403953552, 1.0, 1.0000001192092896]
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from fpemu.validate.ops import Call, Emulation, Out, bounded, register
from fpemu.validate.ops._fma import fma32
from fpemu.validate.ops._num import LOW, to

__all__ = ["K_LIBM", "by_bits", "candidates", "code_table", "codes", "fma", "fma32", "hull_out",
           "monotone", "quiet", "scalar"]  # fmt: skip

#: ulps within which torch's float32 transcendental lies from the exact value. Sources: Sleef's
#: ``*_u10`` functions (the AVX2/AVX512 ``Vectorized<float>``) are documented at most 1.0 ulp;
#: MKL VML in ``VML_HA`` mode (torch's ``vml.h``) about 1 ulp; glibc (the scalar tails and
#: ``ATEN_CPU_CAPABILITY=default``) per sysdeps/x86_64/fpu/libm-test-ulps, the table behind its
#: manual's "Known Maximum Errors": float exp 1, log 1, pow 1, tanh 2, erf 0; double tanh 2,
#: exp/log/pow/erf 1. One bound covering all of them.
K_LIBM = 2


def quiet(*ops: str) -> Callable[[Emulation], Emulation]:
    """``register`` with NumPy's floating-point warnings off inside the emulation (NaN and inf
    inputs are data, not errors)."""

    def deco(fn: Emulation) -> Emulation:
        @functools.wraps(fn)
        def run(call: Call) -> Sequence[Out | None]:
            with np.errstate(all="ignore"):
                return fn(call)

        register(*ops)(run)
        return fn

    return deco


def by_bits(x: np.ndarray, f: Callable[[np.ndarray], Out], *, key: Any = None) -> Out:
    """``f(x)`` for an elementwise emulation ``f`` of one 16-bit tensor, evaluated once per
    distinct bit pattern (at most 65536) and spread back: the same Out, much faster on large
    bfloat16/float16 activations.

    ``key``: a hashable naming everything ``f`` depends on besides the values (the op, its
    output format and options): ``f`` is then evaluated once per process on every code of the
    dtype, and each call only indexes that table by the tensor's bits (a training step runs
    the same activation on new values every step). ``f``'s Out must be exact or bounded
    whatever the values (its kind is the table's).

    >>> import ml_dtypes
    >>> x = np.arange(9000, dtype=np.float32).astype(ml_dtypes.bfloat16)
    >>> a = by_bits(x, lambda v: Out(np.negative(v)))
    >>> b = by_bits(x, lambda v: Out(np.negative(v)), key=("doctest-neg",))
    >>> bool((a.value.view(np.uint16) == b.value.view(np.uint16)).all())
    True
    """
    if x.dtype.itemsize != 2 or x.size < 8192:
        return f(x)
    if key is None:
        keys, inv = codes(x)
        out = f(keys.view(x.dtype))
    else:
        out = code_table(key, x.dtype, f)
        inv = np.ascontiguousarray(x).view(np.uint16).ravel()  # a code is its own index

    def spread(a: Any) -> Any:
        arr = np.asarray(a)
        return arr[inv].reshape(x.shape) if arr.ndim else arr

    bound = out.bound
    return Out(spread(out.value), out.exact,
               None if out.center is None else spread(out.center),
               None if out.err is None else spread(out.err), out.reason,
               None if bound is None else lambda idx: bound(inv[idx]))  # fmt: skip


T = TypeVar("T")
#: (key, dtype) -> ``f`` of every code of a 16-bit dtype (:func:`code_table`)
_TABLES: dict[Any, Any] = {}
_CODES = np.arange(1 << 16, dtype=np.uint16)


def code_table(key: Any, dt: np.dtype[Any], f: Callable[[np.ndarray], T]) -> T:
    """``f`` of all 65,536 values of the 16-bit dtype ``dt`` (in code order, so a tensor's bits
    index the result), computed once per process for ``key`` (a hashable naming everything
    ``f`` depends on besides the values): :func:`by_bits`' tables and the activations'
    backward factors.

    >>> import ml_dtypes
    >>> t = code_table(("doctest-abs",), np.dtype(ml_dtypes.bfloat16), np.abs)
    >>> float(t[np.float32(-2.0).astype(ml_dtypes.bfloat16).view(np.uint16)])
    2.0
    """
    out = _TABLES.get((key, dt))
    if out is None:
        if len(_TABLES) >= 64:  # a table holds up to ~1 MB (a bound per code): start again
            _TABLES.clear()
        out = _TABLES[key, dt] = f(_CODES.view(dt))
    return out  # type: ignore[no-any-return]


def codes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct bit patterns of a 16-bit array (sorted, uint16) and, for each element in
    flat order, the position of its pattern among them."""
    bits = np.ascontiguousarray(x).view(np.uint16).ravel()
    seen = np.zeros(1 << 16, np.bool_)
    seen[bits] = True
    keys = np.flatnonzero(seen).astype(np.uint16)
    pos = np.zeros(1 << 16, np.intp)
    pos[keys] = np.arange(keys.size)
    return keys, pos[bits]


def fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """``a*b + c`` rounded once in ``a``'s dtype (float32 via :func:`fma32`; float64 exactly is
    not available in NumPy, so float64 falls back to two roundings, which the callers bound)."""
    if np.asarray(a).dtype == np.float64:
        return np.asarray(np.asarray(a) * b + c)
    return fma32(a, b, c)


def scalar(v: Any, compute: np.dtype[Any]) -> Any:
    """A Python scalar (or 0-d array) as ATen's kernel sees it: ``double -> opmath`` (one RNE
    rounding from the double to float32), bools and ints converted exactly where representable."""
    return np.asarray(float(v), np.float64).astype(compute)[()]


def candidates(value64: Any, k: int = K_LIBM, dt: Any = np.float32) -> list[np.ndarray]:
    """The float values (dtype ``dt``) within ``k`` steps of ``value64`` rounded to ``dt``: every
    value a function documented within ``k`` ulps of ``value64`` may return (``value64`` being
    float64-accurate). Ordered from the lowest to the highest."""
    with np.errstate(over="ignore", invalid="ignore"):
        rn = np.asarray(value64).astype(dt)
    down = [rn]
    up: list[np.ndarray] = []
    lo = hi = rn
    for _ in range(k):
        lo = np.nextafter(lo, dt(-np.inf)).astype(dt)
        hi = np.nextafter(hi, dt(np.inf)).astype(dt)
        down.insert(0, lo)
        up.append(hi)
    return down + up


def hull_out(
    value: np.ndarray,
    evals: Sequence[np.ndarray],
    name: str,
    reason: str,
) -> Out:
    """An :class:`Out` for ``value`` (the float32/float64 evaluation with the transcendental
    correctly rounded) admitting every result in ``evals`` (the same evaluation at the other
    admissible transcendental values), rounded to the output format ``name``.

    The interval is given on already rounded values (RNE is monotone, so the kernel's result is
    between the roundings of the lowest and highest evaluation); ``judge``'s outward rounding
    leaves representable ends unchanged, so a one-ulp fault outside the hull is caught.
    """
    stack = np.stack([np.asarray(e, np.float64) for e in evals])
    nans = np.isnan(stack)
    allnan = np.asarray(nans.all(axis=0))
    somenan = np.asarray(nans.any(axis=0) & ~allnan)
    with np.errstate(invalid="ignore"):
        lo, hi = np.fmin.reduce(stack, axis=0), np.fmax.reduce(stack, axis=0)
    with np.errstate(over="ignore", invalid="ignore"):
        return _hull(value, lo, hi, allnan, somenan, name, reason)


def _hull(value: np.ndarray, lo: np.ndarray, hi: np.ndarray, allnan: np.ndarray,
          somenan: np.ndarray, name: str, reason: str) -> Out:  # fmt: skip
    out = to(value, name)
    if name in LOW:
        lo = to(lo, name).astype(np.float64)
        hi = to(hi, name).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        center = np.where(lo == hi, lo, lo / 2 + hi / 2)
        err = np.where(lo == hi, 0.0, hi / 2 - lo / 2)
    # all evaluations NaN: torch's must be NaN; some NaN (an inf-inf at one end): not judged
    center = np.where(allnan, np.nan, center)
    err = np.where(somenan, np.inf, err)
    return bounded(out, err, reason, center=center)


def monotone(
    f: Callable[..., np.ndarray], args: Sequence[np.ndarray], cands: Sequence[list[np.ndarray]]
) -> list[np.ndarray]:
    """``f(*args, *t)`` at each corner of the candidate boxes ``cands`` (first, middle, last of
    each list): enough where ``f``'s float evaluation is monotone in each transcendental."""
    pts: list[list[np.ndarray]] = [[c[0], c[len(c) // 2], c[-1]] for c in cands]
    out: list[np.ndarray] = []

    def rec(i: int, chosen: list[np.ndarray]) -> None:
        if i == len(pts):
            out.append(f(*args, *chosen))
            return
        for p in pts[i]:
            rec(i + 1, [*chosen, p])

    rec(0, [])
    return out
