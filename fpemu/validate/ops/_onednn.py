"""oneDNN's GELU (``eltwise_gelu_erf``) on AVX512: the path torch 2.13 takes for a contiguous
``gelu(approximate='none')`` of two or more elements (``use_mkldnn``), emulated bit for bit.

oneDNN's ``jit_uni_eltwise_injector::gelu_erf_minimax_approx_compute_vector_fwd`` (avx512_core)
approximates ``erf(|x|/sqrt2)`` by one of 25 degree-5 polynomials chosen from the bits of
``|x|`` (``(bits(|x|) + 0xc21fffff) >> 21`` clamped to [1, 24]; 23, the constant 1, beyond
``rbound = 0x40b15cee``), evaluated by Horner with one FMA per degree, then
``0.5 * (x * (1 + sign(x)*P))`` with single roundings. The coefficients below are oneDNN's
``gelu_erf_minimax_polynomial`` table (float32 bit patterns, degree by degree). Measured
(tests/test_ops_activations.py, tests/test_ops_onednn_gelu.py): identical to torch 2.13 for
float32, bfloat16 and float16, random and special inputs (infinities give NaN: ``0 * inf`` in
the Horner step), every interval and its edges, NaN bits included. Once, outside the tests, on
all 2**32 float32 inputs: identical, NaN bits included, to the previous emulation (one
``_fma.sum32`` per Horner step, which tested the subnormal range too; 971b57b), and to torch.

>>> import numpy as np
>>> gelu_minimax(np.float32([0.0, 1.0, -1.0])).tolist()
[0.0, 0.8413447141647339, -0.15865525603294373]
"""

from __future__ import annotations

import functools
import os

import numpy as np

from fpemu.validate.ops._fma import fma32_into

__all__ = ["available", "bf16_flushes", "cpu_flags", "gelu_minimax"]

_POL = np.array([
    # degree 0
    0xa6f2cb94, 0x32827792, 0x3381cc0c, 0x34523d4a, 0x351ac44d, 0x35f36d88, 0x36ee8229, 0x37b8a3bb,
    0x3867a213, 0x3940033b, 0x3a2a5a1d, 0x3ae35863, 0x3b7828f2, 0x3c08b14b, 0x3c515ed3, 0xbb503236,
    0xbd8d8e5e, 0xbe8abcd9, 0xbf0c19a2, 0xbeccb328, 0x3e176ced, 0x3f470d99, 0x3f7abb28, 0x3f800000,
    0x00000000,
    # degree 1
    0x3f4c422a, 0x3f4c421f, 0x3f4c4207, 0x3f4c41cb, 0x3f4c413b, 0x3f4c3fad, 0x3f4c3a2f, 0x3f4c2d40,
    0x3f4c146a, 0x3f4bc341, 0x3f4ad08c, 0x3f48f8cf, 0x3f45fac7, 0x3f404e07, 0x3f3b980f, 0x3f48dff3,
    0x3f78b21b, 0x3fbb0704, 0x40019c32, 0x3fe536d6, 0x3f81331e, 0x3e6c8684, 0x3c98f936, 0x00000000,
    0x3f800000,
    # degree 2
    0xb62173f4, 0x3735e4cf, 0x37f2ff89, 0x388c23be, 0x3917535c, 0x39ab2ab0, 0x3a60fadb, 0x3af9b960,
    0x3b6e5491, 0x3c0a4ec5, 0x3ca5aa8c, 0x3d2138d9, 0x3d8737d4, 0x3ddfb660, 0x3e0f27ab, 0x3d94004b,
    0xbe0efdeb, 0xbf1d96c3, 0xbf89db58, 0xbf6d9897, 0xbef69fb8, 0xbdc4f8a8, 0xbbde6422, 0x00000000,
    0x00000000,
    # degree 3
    0xbe081a19, 0xbe084570, 0xbe08639b, 0xbe089837, 0xbe08f409, 0xbe09ab95, 0xbe0b66d0, 0xbe0e400a,
    0xbe124df8, 0xbe1bde02, 0xbe2f19c9, 0xbe4931bf, 0xbe685fbc, 0xbe89c95f, 0xbe96cbca, 0xbe8044aa,
    0xbe0550f2, 0x3dcfd6a1, 0x3e94c826, 0x3e79345f, 0x3decec91, 0x3ca46568, 0x3aa1e00a, 0x00000000,
    0x00000000,
    # degree 4
    0xba3d61db, 0x39f097a3, 0x3a5845dc, 0x3ab1fa35, 0x3b0cefb8, 0x3b653ab6, 0x3bcae527, 0x3c221712,
    0x3c6c5840, 0x3cc0a703, 0x3d1dcc19, 0x3d63656d, 0x3d955907, 0x3dbf9910, 0x3dd53f69, 0x3db7dcef,
    0x3d639ebe, 0xba6ede48, 0xbd22be69, 0xbd041cf1, 0xbc64f5ab, 0xbb097a32, 0xb8ebf380, 0x00000000,
    0x00000000,
    # degree 5
    0x3cb7d80c, 0x3c9b6050, 0x3c978d11, 0x3c92e850, 0x3c8d058b, 0x3c848454, 0x3c6cd623, 0x3c4c824b,
    0x3c2a7935, 0x3be0b390, 0x3b0651ac, 0xbb232f53, 0xbbd42fa0, 0xbc2c5366, 0xbc492c9e, 0xbc2a7aa6,
    0xbbd55d04, 0xba823a76, 0x3b102aa8, 0x3ae25a7e, 0x3a31f792, 0x38b84375, 0x3689bb5a, 0x00000000,
    0x00000000,
], np.uint32).view(np.float32).reshape(6, 25)  # fmt: skip
_BIAS = np.int64(np.array([0xC21FFFFF], np.uint32).view(np.int32)[0])
_RBOUND = np.array([0x40B15CEE], np.uint32).view(np.float32)[0]


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it cannot be read): what decides
    which of oneDNN's kernels runs."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            return frozenset(next((ln for ln in f if ln.startswith("flags")), "").split())
    except OSError:
        return frozenset()


def bf16_flushes() -> bool:
    """Whether oneDNN converts float32 to bfloat16 with ``vcvtneps2bf16`` (AVX512_BF16), which
    flushes subnormal inputs to zero (measured: torch's bfloat16 gelu of 2**-126 is 0)."""
    return "avx512_bf16" in cpu_flags()


@functools.cache
def available() -> bool:
    """Whether oneDNN on this machine runs its avx512_core kernels: the CPU has AVX512 F, BW,
    VL and DQ (``/proc/cpuinfo``) and no ``ONEDNN_MAX_CPU_ISA``/``DNNL_MAX_CPU_ISA`` below it."""
    for var in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        isa = os.environ.get(var, "").upper()
        if isa and not isa.startswith(("AVX512", "AVX10", "ALL")):
            return False
    return all(f in cpu_flags() for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


def gelu_minimax(x: np.ndarray) -> np.ndarray:
    """oneDNN's float32 GELU of float32 ``x`` (see the module doc), bit for bit. Runs in blocks
    of :data:`_BLOCK` elements whose buffers are allocated once and reused: every temporary
    stays in cache (measured faster than whole arrays, and than fresh arrays per step)."""
    x = np.asarray(x, np.float32)
    flat = np.ascontiguousarray(x).reshape(-1)
    out = np.empty(flat.shape, np.float32)
    n = flat.size
    with np.errstate(all="ignore"):
        work = _Work(min(n, _BLOCK))
        for i in range(0, n, _BLOCK):
            if n - i < _BLOCK and i:
                work = _Work(n - i)  # the shorter last block
            work.block(flat[i : i + _BLOCK], out[i : i + _BLOCK])
    return out.reshape(x.shape)


#: elements per block (measured on the bench's 8 x 64 x 512 activations: 16384 fastest of
#: 4096 to 65536)
_BLOCK = 16384
#: the table widened to float64 (exact): each degree's coefficients are gathered straight into
#: a float64 buffer for the Horner sum
_POL64 = _POL.astype(np.float64)
# operands as 0-d arrays: a NumPy call converts a scalar each time (measured 1 us a call)
_SIGN, _BIAS32 = np.array(-(2**31), np.int32), np.array(_BIAS, np.int32)
_ONE, _HALF, _RB = np.array(1, np.float32), np.array(0.5, np.float32), np.array(_RBOUND)
_I21, _I23 = np.array(21, np.int32), np.array(23, np.int32)


class _Work:
    """The float32, int and float64 buffers of a block of ``n`` elements."""

    def __init__(self, n: int) -> None:
        self.xp = np.empty(n, np.float32)
        self.bits = np.empty(n, np.int32)
        self.idx = np.empty(n, np.intp)
        self.x64, self.p64, self.c64, self.s64 = (np.empty(n, np.float64) for _ in range(4))
        self.low = np.empty(n, np.uint64)
        self.flag = np.empty(n, np.bool_)
        # the clamp's bounds as arrays: NumPy's maximum and minimum of two arrays are measured
        # 2.5x faster than against a scalar
        self.lo, self.hi = np.full(n, 1, np.int32), np.full(n, 24, np.int32)

    def block(self, x: np.ndarray, y: np.ndarray) -> None:
        """``y = gelu_minimax(x)`` for 1-D float32 ``x`` and ``y`` of the buffers' size.

        Each Horner step is ``fma32(p, |x|, c)``: the float64 product is exact, the float64 sum
        ``s`` carries one rounding, and ``float32(s)`` is the single rounding of the exact sum
        except where ``s`` lies on a float32 rounding boundary. Only its midpoints need testing
        (bits 28..0 of ``s`` are 1 then zeros: ``_fma.fma32_into`` then redoes the element), not
        the float32 subnormal range (``_fma.boundary32``'s second test): no exact sum lands
        there. Every nonzero coefficient of columns 1..24 (the clamped index) has magnitude
        >= 2**-26 (the least is 0x32827792, about 2**-25.97) and is a multiple of 2**-49. A sum
        ``p*x + c`` with ``c = 0`` is the exact float64 product (rounded once by the cast, into
        the subnormals too). With ``c != 0``, ``|p*x + c| < 2**-126`` needs ``|p*x| > 2**-27``,
        so ``p != 0``, hence ``|x| <= rbound < 8`` (column 23, taken beyond rbound, keeps
        ``p = 0`` until its constant term; 24 only for NaN) and ``p`` normal (else
        ``|p*x| < 2**-123``); then ``ulp(p)*ulp(x) > 2**-48*|p*x| > 2**-75`` for normal ``x``,
        and for subnormal ``x`` (ulp 2**-149) ``|p| > 2**99`` gives ``ulp(p) > 2**75``. Both
        terms are thus multiples of 2**-75, and so is the exact sum: 0 or above 2**-75."""
        xp, bits, idx, flag = self.xp, self.bits, self.idx, self.flag
        x64, p64, c64, s64 = self.x64, self.p64, self.c64, self.s64
        low = self.low
        np.abs(x, xp)
        # the interval: (bits(|x|) + bias) >> 21 in int32 (the addition wraps, as oneDNN's
        # vpaddd does), clamped to [1, 24]; beyond rbound 23 (NaN compares false: it keeps 24)
        np.add(xp.view(np.int32), _BIAS32, bits)
        np.right_shift(bits, _I21, bits)
        np.maximum(bits, self.lo, out=bits)
        np.minimum(bits, self.hi, out=bits)
        np.greater(xp, _RB, flag)
        np.copyto(bits, _I23, where=flag)
        idx[...] = bits  # a gather by intp indices is the fastest measured
        x64[...] = xp  # exact: the Horner products are exact in float64
        np.take(_POL64[5], idx, out=p64, mode="clip")  # (idx is in [1, 24]: no clipping)
        for deg in (4, 3, 2, 1, 0):
            np.take(_POL64[deg], idx, out=c64, mode="clip")
            fma32_into(y, p64, x64, c64, s=s64, low=low, flag=flag)
            if deg:
                p64[...] = y
        # P with the sign of x (oneDNN flips the sign bit), then 0.5 * (x * (1 + P))
        np.bitwise_and(x.view(np.int32), _SIGN, bits)
        yb = y.view(np.int32)
        np.bitwise_xor(yb, bits, yb)
        np.add(y, _ONE, y)
        np.multiply(x, y, y)
        np.multiply(y, _HALF, y)
