"""oneDNN's GELU backward (``eltwise_gelu_erf``, backward by source): the path torch 2.13 takes
for a float32 ``gelu_backward(approximate='none')`` whose input ``x`` is contiguous with two or
more elements (``use_mkldnn(self)`` in ATen's ``gelu_backward_out_cpu``), emulated bit for bit.

oneDNN's ``jit_uni_eltwise_injector::gelu_erf_compute_vector_bwd`` computes the derivative
``d = 0.5 + T + 0.5*erf(R)`` with ``R = x*c`` (``c`` = 1/sqrt2 in float32), ``Q = exp(-R*R)`` by
oneDNN's own ``exp_compute_vector_fwd`` (Cody-Waite reduction by ``ln2``, a degree-5 polynomial,
the power of two built in the exponent field as ``2 * 2**(n-1)``, zero below ``ln(FLT_MIN)``),
``T = (R / sqrtpi) * Q`` and erf by Abramowitz-Stegun 7.1.26 (``W = 1 / (p|R| + 1)``, a Horner
polynomial in ``W``, ``erf = sign(R) * (1 - Q*W*poly)``); then ``P = T + 0.5`` and
``d = 0.5*erf + P`` as one FMA; the kernel's result is ``dy * d``. Every step rounds to
float32 once; ``uni_vfmadd*`` is one FMA on the AVX2/AVX512 kernels and a product then a sum
(two roundings) on the SSE4.1/AVX ones. The constants below are oneDNN's table entries
(float32 bit patterns). Measured (tests/test_ops_activations.py, tests/test_ops_gelu_isa.py):
identical to torch 2.13 on every element, under ``ATEN_CPU_CAPABILITY`` default/avx2/avx512
(oneDNN does not read it), with ``ONEDNN_MAX_CPU_ISA`` AVX2 (fused) and AVX/SSE41 (unfused);
once, outside the tests, on all 2**32 float32 inputs with ``dy = 1`` (AVX512 machine: the FMA
kernel and, capped at SSE41, the unfused one): no element differs.

>>> import numpy as np
>>> [round(v, 6) for v in gelu_erf_bwd(np.float32([0.0, 1.0, -1.0]), fused=True).tolist()]
[0.5, 1.083315, -0.083315]
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable

import numpy as np

from fpemu.validate.ops._fma import repair32

__all__ = ["blocked", "gelu_erf_bwd", "kernel_fused", "runs"]

_F = np.float32


def _c(bits: int) -> np.float32:
    return _F(np.array([bits], np.uint32).view(_F)[0])


_LOG2E, _LN_MAX, _LN_MIN, _LN2 = _c(0x3FB8AA3B), _c(0x42B17218), _c(0xC2AEAC50), _c(0x3F317218)
#: exp's polynomial, degree 1 to 5 (degree 0 is 1)
_EXP = tuple(_c(b) for b in (0x3F7FFFFB, 0x3EFFFEE3, 0x3E2AAD40, 0x3D2B9D0D, 0x3C07CFCE))
_P, _RSQRT2, _RSQRTPI = _c(0x3EA7BA05), _c(0x3F3504F3), _c(0x3F106EBA)
#: A&S 7.1.26's polynomial, degree 1 to 5 in W (0.254829592, -0.284496736, ... as float32)
_AS = tuple(_c(b) for b in (0x3E827906, 0xBE91A98E, 0x3FB5F0E3, 0xBFBA00E3, 0x3F87DC22))
_ONE, _HALF = _F(1), _F(0.5)
#: elements per block: every temporary of a block stays in cache (measured faster than whole
#: arrays on 512 x 512)
_BLOCK = 16384


def runs(x: np.ndarray, dy: np.ndarray) -> bool:
    """Whether torch 2.13 runs oneDNN's float32 ``gelu_backward`` for input ``x`` and gradient
    ``dy`` (``use_mkldnn(self)``, measured): ``x`` float32, contiguous, two or more elements;
    ``dy`` of its shape, any strides (a strided or stride-0 ``x`` runs ATen's kernel)."""
    return (x.dtype == _F and x.size >= 2 and x.flags.c_contiguous
            and np.shape(dy) == x.shape)  # fmt: skip


def blocked(fn: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """An elementwise ``fn`` (float32 to float32) applied to ``x`` in blocks of ``_BLOCK``
    elements (the same bits as ``fn(x)``; its temporaries stay in cache: oneDNN's forward GELU
    on 512 x 512 float32, measured 16 ms in one pass, 8 ms in blocks)."""
    if x.size <= _BLOCK:
        return fn(x)
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, _F)
    for i in range(0, flat.size, _BLOCK):
        out[i : i + _BLOCK] = fn(flat[i : i + _BLOCK])
    return out.reshape(x.shape)


def _isa_cap() -> str | None:
    """oneDNN's ISA cap from the environment ('' when none; None when the two names disagree)."""
    caps = {os.environ.get(v, "").strip().upper() for v in ("ONEDNN_MAX_CPU_ISA",
                                                             "DNNL_MAX_CPU_ISA")}  # fmt: skip
    caps.discard("")
    return "" if not caps else caps.pop() if len(caps) == 1 else None


@functools.cache
def _flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return frozenset(next((ln for ln in f if ln.startswith("flags")), "").split())
    except OSError:
        return frozenset()


def kernel_fused() -> bool | None:
    """Which of oneDNN's kernels runs here: True for the FMA ones (the CPU has AVX2 and FMA and
    ``ONEDNN_MAX_CPU_ISA`` allows AVX2), False for SSE4.1/AVX (capped there, or a CPU without
    AVX2), None where not known (no SSE4.1, an unknown cap): then not emulated."""
    cap, flags = _isa_cap(), _flags()
    if cap is None or "sse4_1" not in flags:
        return None
    if cap in ("SSE41", "AVX"):
        return False
    if cap and not cap.startswith(("AVX2", "AVX512", "AVX10", "ALL", "DEFAULT")):
        return None
    if "avx2" in flags:
        return True if "fma" in flags else None
    return False


def _fma(a: np.ndarray, b: np.ndarray | np.float32, c: np.ndarray | np.float32) -> np.ndarray:
    """``a*b + c`` of float32 operands rounded once, for sums that are 0 or normal in float32:
    the float64 product is exact and the float64 sum ``s`` carries one rounding, so ``s`` rounds
    to float32 as the exact sum does except where it lies on a float32 midpoint (bits 28..0 of
    its significand ``1`` then zeros); only there ``_fma.repair32`` redoes it (TwoSum,
    round-to-odd). Why no subnormal check (``_fma.boundary32``): at every call site in
    :func:`_block` the exact sum is 0 or above ``2**-126`` in magnitude (see there)."""
    s = a.astype(np.float64)
    s *= b
    s += c
    out = s.astype(_F)
    mid = (s.view(np.uint64) & np.uint64(0x1FFFFFFF)) == np.uint64(0x10000000)
    if mid.any():
        repair32(out, (a, b), np.asarray(c, np.float64), s, mid)
    return out


def _mad(a: np.ndarray, b: np.ndarray | np.float32, c: np.ndarray | np.float32,
         fused: bool) -> np.ndarray:  # fmt: skip
    """``uni_vfmadd``: one FMA (AVX2/AVX512) or a float32 product then a float32 sum."""
    if fused:
        return _fma(a, b, c)
    return np.asarray(a * b + c, _F)


def _exp(y: np.ndarray, fused: bool) -> np.ndarray:
    """oneDNN's ``exp_compute_vector_fwd`` of float32 ``y <= 0`` (or NaN: then every result of
    :func:`_block` is NaN whatever ``Q`` is, through ``T``): its clamp from above is a no-op."""
    below = y < _LN_MIN  # zeroed at the end
    v = np.maximum(y, _LN_MIN)
    fx = np.floor(v * _LOG2E + _HALF)  # a float32 product, then a float32 sum, then floor
    # vfnmadd231ps, v - fx*ln2: the exact difference is 0 (fx = 0) or a nonzero multiple of
    # 2**-25 (v, ln2 and the integer fx are float32 of exponent >= -2 there): normal
    r = _mad(-fx, _LN2, v, fused)
    # 2 * 2**(n-1), built in the exponent field: n - 1 = -127 gives the bits 0, i.e. 0.0
    pw = ((fx + _F(126)).astype(np.int32) << np.int32(23)).view(_F)
    pw[below] = 0
    # Horner in r, |r| <= 0.35: every partial sum lies above 0.03 (normal)
    p = _mad(np.full_like(r, _EXP[4]), r, _EXP[3], fused)
    for coef in (_EXP[2], _EXP[1], _EXP[0], _ONE):
        p = _mad(p, r, coef, fused)
    return np.asarray((p * pw) * _F(2), _F)


def _block(x: np.ndarray, fused: bool) -> np.ndarray:
    """:func:`gelu_erf_bwd` of a 1-D block. The FMAs' exact sums are 0 or normal (what
    :func:`_fma` needs): ``p|R| + 1 >= 1``; the A&S Horner sums are multiples of ``2**-48``
    (``W`` in (0, 1] and the coefficients are float32 of exponent >= -3); ``1 + s*poly`` is a
    multiple of ``2**-48`` too, or near 1 where ``s`` is tiny."""
    r = np.asarray(x * _RSQRT2, _F)
    q = _exp(-(r * r), fused)
    t = (r * _RSQRTPI) * q
    w = _ONE / _mad(np.abs(r), _P, _ONE, fused)
    s = -q * w
    poly = _mad(np.full_like(w, _AS[4]), w, _AS[3], fused)
    for coef in (_AS[2], _AS[1], _AS[0]):
        poly = _mad(poly, w, coef, fused)
    erf = _mad(s, poly, _ONE, fused)
    erf = np.where(np.signbit(r), -erf, erf)  # the sign of R put back (an XOR of the bit)
    # 0.5*erf + (T + 0.5): the product by 0.5 is exact (|erf| >= 2**-48 or 0), so the FMA is
    # the float32 sum, fused or not
    return np.asarray(erf * _HALF + (t + _HALF), _F)


def gelu_erf_bwd(x: np.ndarray, *, fused: bool) -> np.ndarray:
    """oneDNN's float32 GELU derivative ``d(x)`` (the module doc), bit for bit; ``fused``: the
    FMA kernels (:func:`kernel_fused`). torch's ``gelu_backward`` is then ``dy * d``."""
    a = np.asarray(x, _F)
    with np.errstate(all="ignore"):  # inf and NaN inputs are data: the kernel's own results
        return blocked(lambda b: _block(b.reshape(-1), fused).reshape(b.shape), a)
