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
kernel and, capped at SSE41, the unfused one): no element differs (NaN results compared as NaN
only: for a NaN input of sign + torch keeps the sign, the emulation gives -NaN). The emulation
as it runs now (blocks in buffers allocated once, no test where a sum is exact) was compared
once, outside the tests, with the previous one (one fresh array per step; 971b57b) on all 2**32
inputs, fused and unfused: identical, NaN bits included.

>>> import numpy as np
>>> [round(v, 6) for v in gelu_erf_bwd(np.float32([0.0, 1.0, -1.0]), fused=True).tolist()]
[0.5, 1.083315, -0.083315]
"""

from __future__ import annotations

import os

import numpy as np

from fpemu.validate.ops._fma import fma32_into
from fpemu.validate.ops._num import blocked
from fpemu.validate.ops._onednn import cpu_flags as _flags

__all__ = ["gelu_erf_bwd", "kernel_fused", "runs"]

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


def _isa_cap() -> str | None:
    """oneDNN's ISA cap from the environment ('' when none; None when the two names disagree)."""
    caps = {os.environ.get(v, "").strip().upper() for v in ("ONEDNN_MAX_CPU_ISA",
                                                             "DNNL_MAX_CPU_ISA")}  # fmt: skip
    caps.discard("")
    return "" if not caps else caps.pop() if len(caps) == 1 else None


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
    """``a*b + c`` of float32 operands rounded once, for sums that are 0 or normal in float32
    (:meth:`_Work.fma` on fresh buffers, as the FMA kernel's blocks run it)."""
    a = np.asarray(a, _F)
    shape = np.broadcast_shapes(a.shape, np.shape(b), np.shape(c))
    a64, b64, c64 = (np.array(np.broadcast_to(np.asarray(v, _F), shape), np.float64).reshape(-1)
                     for v in (a, b, c))  # fmt: skip
    work = _Work(a64.size)
    with np.errstate(all="ignore"):
        work.fma(work.w, a64, b64, c64)
    return work.w.reshape(shape).copy()


def _d(v: np.float32) -> np.ndarray:
    """A float32 constant as a 0-d float64 array (exact; a NumPy call converts a scalar
    operand each time: measured about 1 us a call)."""
    return np.array(v, np.float64)


def _s(v: float | np.float32) -> np.ndarray:
    """A float32 constant as a 0-d float32 array (see :func:`_d`)."""
    return np.array(v, _F)


_SIGN, _U23 = np.array(-(2**31), np.int32), np.array(23, np.uint32)
#: ``2**23 + 126``: added to an integer-valued float32 ``fx`` in [-126, 0] it gives the bits
#: ``0x4B000000 + fx + 126`` (exact), whose shift by 23 is ``(fx + 126) << 23``
_POW_MAGIC = _s(2**23 + 126)
_EXP64 = tuple(_d(c) for c in (_EXP[4], _EXP[3], _EXP[2], _EXP[1], _EXP[0], _ONE))
_AS64 = tuple(_d(c) for c in _AS[::-1])
_RSQRT2_S, _RSQRTPI_S, _LOG2E_S = _s(_RSQRT2), _s(_RSQRTPI), _s(_LOG2E)
_HALF_S, _ONE_S, _TWO_S = _s(0.5), _s(1), _s(2)
_P_D, _ONE_D = _d(_P), _d(_ONE)
#: ln2 (float32) split: its upper 17 significant bits and the rest (exact, 2 bits)
_LN2_HI = _s(_c(0x3F317200))
_LN2_LO = _s(_LN2 - _c(0x3F317200))


class _Work:
    """The buffers of a block of ``n`` elements of the FMA kernel: float32 intermediates (named
    for their first use), float64 copies of the FMAs' operands, the float64 sum and its test."""

    def __init__(self, n: int) -> None:
        f32 = np.empty((8, n), _F)
        self.r, self.v, self.fx, self.rem, self.q, self.t, self.w, self.e = f32
        self.a64, self.b64, self.s64 = np.empty((3, n), np.float64)
        self.low = np.empty(n, np.uint64)
        self.flag = np.empty(n, np.bool_)
        # NumPy's maximum of two arrays is measured 2x faster than against a scalar
        self.ln_min = np.full(n, _LN_MIN, _F)

    def fma(self, out: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> None:
        """``out = RN32(a*b + c)`` in this block's buffers (:func:`._fma.fma32_into`: its exact
        sums are 0 or normal at every call site in :func:`_block`, see there)."""
        fma32_into(out, a, b, c, s=self.s64, low=self.low, flag=self.flag)

    def horner(self, out: np.ndarray, v: np.ndarray, coefs: tuple[np.ndarray, ...]) -> None:
        """``out`` = the kernel's Horner polynomial in float32 ``v`` (``coefs``: 0-d float64,
        highest degree first, at least two): the first step ``v*c0 + c1`` with the constant
        leading coefficient (a NaN can only come from ``v``), then ``out*v + c`` per
        coefficient, each one FMA."""
        v64, p64 = self.a64, self.b64
        v64[...] = v  # exact widening, once for every step
        self.fma(out, v64, coefs[0], coefs[1])
        for c in coefs[2:]:
            p64[...] = out
            self.fma(out, p64, v64, c)


def _block(x: np.ndarray, out: np.ndarray, work: _Work) -> None:
    """``out`` = :func:`gelu_erf_bwd` of a 1-D block ``x`` on the FMA kernels, in ``work``'s
    buffers (of ``x``'s size), each step with the operands in the kernel's order. The FMAs'
    exact sums are 0 or normal (what :meth:`_Work.fma` needs): ``p|R| + 1 >= 1``; the A&S
    Horner sums are multiples of ``2**-48`` (``W`` in (0, 1] and the coefficients are float32
    of exponent >= -3); ``1 + s*poly`` is a multiple of ``2**-48`` too, or near 1 where ``s``
    is tiny; exp's Horner sums lie above 0.03 (see :func:`_exp`)."""
    r, v, fx, rem, q, t, w, e = work.r, work.v, work.fx, work.rem, work.q, work.t, work.w, work.e
    a64, b64 = work.a64, work.b64
    np.multiply(x, _RSQRT2_S, r)
    # Q = exp(-R*R) (oneDNN's exp_compute_vector_fwd, see _exp): y = -(R*R) <= 0, clamped below
    np.multiply(r, r, v)
    np.negative(v, v)
    np.maximum(v, work.ln_min, out=v)
    np.multiply(v, _LOG2E_S, fx)  # floor(v*log2e + 0.5), a float32 product and sum
    np.add(fx, _HALF_S, fx)
    np.floor(fx, fx)
    # vfnmadd231ps, v - fx*ln2: its exact value is a float32 (see _exp), so float32 steps
    # that are each exact give it: with ln2 = hi + lo (hi its upper 17 significant bits, a
    # multiple of 2**-17; lo = 24 * 2**-24, 2 bits), -fx*hi (7 + 17 bits) and -fx*lo are exact;
    # -fx*hi + v is a multiple of 2**-25 (v too: |v| > 0.34 where fx != 0) below 0.36 in
    # magnitude, a float32; adding -fx*lo gives the exact value. NaN: -fx's, as the FMA's
    np.negative(fx, rem)
    np.multiply(rem, _LN2_HI, t)
    np.add(t, v, t)
    np.multiply(rem, _LN2_LO, rem)
    np.add(t, rem, rem)
    # 2 * 2**(n-1) built in the exponent field, (fx + 126) << 23 (through _POW_MAGIC's bits);
    # below ln(FLT_MIN) v is ln(FLT_MIN) itself, fx = -126: the bits 0, oneDNN's zero
    pw = v
    np.add(fx, _POW_MAGIC, pw)
    np.left_shift(pw.view(np.uint32), _U23, pw.view(np.uint32))
    work.horner(q, rem, _EXP64)
    np.multiply(q, pw, q)
    np.multiply(q, _TWO_S, q)
    np.multiply(r, _RSQRTPI_S, t)  # T = (R / sqrtpi) * Q
    np.multiply(t, q, t)
    a64[...] = r  # W = 1 / (p|R| + 1)
    np.abs(a64, a64)
    work.fma(w, a64, _P_D, _ONE_D)
    np.divide(_ONE_S, w, w)
    sq = v  # s = -Q * W
    np.negative(q, sq)
    np.multiply(sq, w, sq)
    work.horner(e, w, _AS64)
    a64[...] = sq  # erf = 1 + s*poly, one FMA
    b64[...] = e
    work.fma(e, a64, b64, _ONE_D)
    sign = fx.view(np.int32)  # the sign of R put back: an XOR of the bit
    np.bitwise_and(r.view(np.int32), _SIGN, sign)
    np.bitwise_xor(e.view(np.int32), sign, e.view(np.int32))
    # 0.5*erf + (T + 0.5): the product by 0.5 is exact (|erf| >= 2**-48 or 0), so the FMA is
    # the float32 sum
    np.add(t, _HALF_S, t)
    np.multiply(e, _HALF_S, e)
    np.add(e, t, out)


def _exp(y: np.ndarray) -> np.ndarray:
    """oneDNN's ``exp_compute_vector_fwd`` of float32 ``y <= 0`` (or NaN: then every result of
    :func:`_block` is NaN whatever ``Q`` is, through ``T``), on the SSE4.1/AVX kernels (every
    ``uni_vfmadd`` a float32 product then a float32 sum): its clamp from above is a no-op."""
    v = np.maximum(y, _LN_MIN)
    fx = np.floor(v * _LOG2E + _HALF)  # a float32 product, then a float32 sum, then floor
    # vfnmadd231ps, v - fx*ln2: the exact difference is 0 (fx = 0) or a nonzero multiple of
    # 2**-25 below 0.5 in magnitude (v, ln2 and the integer fx are float32 of exponent >= -2
    # there; |r| <= ln2/2 and a little): exact in float64 and in float32 (the FMA kernels)
    r = np.asarray(-fx * _LN2 + v, _F)
    # 2 * 2**(n-1), built in the exponent field: n - 1 = -127 gives the bits 0, i.e. 0.0;
    # oneDNN zeroes the result below ln(FLT_MIN), where v = ln(FLT_MIN) gives fx = -126, n - 1 =
    # -127: already 0
    pw = ((fx + _F(126)).astype(np.int32) << np.int32(23)).view(_F)
    # Horner in r, |r| <= 0.35: every partial sum lies above 0.03 (normal)
    p = np.asarray(_EXP[4] * r + _EXP[3], _F)
    for coef in (_EXP[2], _EXP[1], _EXP[0], _ONE):
        p = np.asarray(p * r + coef, _F)
    return np.asarray((p * pw) * _F(2), _F)


def _block_unfused(x: np.ndarray) -> np.ndarray:
    """:func:`gelu_erf_bwd` of a 1-D block on the SSE4.1/AVX kernels: :func:`_block`'s steps,
    every ``uni_vfmadd`` a float32 product then a float32 sum."""
    r = np.asarray(x * _RSQRT2, _F)
    q = _exp(-(r * r))
    t = (r * _RSQRTPI) * q
    w = _ONE / np.asarray(np.abs(r) * _P + _ONE, _F)
    s = -q * w
    poly = np.asarray(_AS[4] * w + _AS[3], _F)
    for coef in (_AS[2], _AS[1], _AS[0]):
        poly = np.asarray(poly * w + coef, _F)
    erf = np.asarray(s * poly + _ONE, _F)
    erf = np.where(np.signbit(r), -erf, erf)
    return np.asarray(erf * _HALF + (t + _HALF), _F)


def gelu_erf_bwd(x: np.ndarray, *, fused: bool) -> np.ndarray:
    """oneDNN's float32 GELU derivative ``d(x)`` (the module doc), bit for bit; ``fused``: the
    FMA kernels (:func:`kernel_fused`). torch's ``gelu_backward`` is then ``dy * d``. Runs in
    blocks of :data:`_BLOCK` elements (every temporary stays in cache), the FMA kernels' in
    buffers allocated once and reused."""
    a = np.asarray(x, _F)
    with np.errstate(all="ignore"):  # inf and NaN inputs are data: the kernel's own results
        if not fused:
            return blocked(lambda b: _block_unfused(b.reshape(-1)).reshape(b.shape), a, _F)
        flat = np.ascontiguousarray(a).reshape(-1)
        out = np.empty(flat.shape, _F)
        n = flat.size
        work = _Work(min(n, _BLOCK))
        for i in range(0, n, _BLOCK):
            if n - i < _BLOCK and i:
                work = _Work(n - i)  # the shorter last block
            _block(flat[i : i + _BLOCK], out[i : i + _BLOCK], work)
        return out.reshape(a.shape)
