"""Drive MMA-Sim 2.1.1 beside fpemu's instruction models (used by tests/test_mma_parity.py).

Every instruction string mmasim accepts is mapped to one fpemu model with its operand formats
and shape ``k``; random operand *codes* are drawn from a mixture of distributions (all bit
patterns, narrow and wide exponents, subnormals, zeros, cancelling pairs, extreme C) and given
to both: mmasim as torch tensors, fpemu as the values they encode. A K longer than one
instruction is cut into k-slices by hand, each mmasim result the next slice's C, because
mmasim's ``dpa`` chains its internal blocks over whatever K it gets (mma-parity.md 1.4).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest

pytest.importorskip("mmasim")  # a test extra; also keeps --doctest-modules collection clean
import torch
from mmasim.amd import MFMA
from mmasim.amd.isa_mfma import arch_mfma_suffix
from mmasim.nv_ptx import MMA, WGMMA, MMABlockScale, TCGen05MMA, TCGen05MMABlockScale
from mmasim.nv_ptx.isa_mma import mma_block_scale_shape_and_type, mma_shape_and_type
from mmasim.nv_ptx.isa_tcgen05mma import (
    tcgen05mma_block_scale_shape_and_type,
    tcgen05mma_shape_and_type,
)
from mmasim.nv_ptx.isa_wgmma import wgmma_shape_and_type

from fpemu.tensorcore.instructions import get_instruction
from fpemu.tensorcore.mma import dpa
from fpemu.tensorcore.specials import encode, same_bits

NV_ARCH = {"Volta": "sm70", "Turing": "sm75", "Ampere": "sm80", "Ada Lovelace": "sm89",
           "Hopper": "sm90", "Blackwell": "sm100", "RTX Blackwell": "sm120"}  # fmt: skip
PTX_FMT = {"f16": "float16", "bf16": "bfloat16", "tf32": "tf32", "f32": "float32",
           "f64": "float64", "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2",
           "e3m2": "float6_e3m2fn", "e2m3": "float6_e2m3fn", "e2m1": "float4_e2m1fn",
           "fp8": "float8_e4m3fnuz", "bf8": "float8_e5m2fnuz", "xf32": "tf32",
           "ue8m0": "float8_e8m0fnu", "ue4m3": "ue4m3"}  # fmt: skip
D_SUFFIX = {"float32": "f32", "float16": "f16", "float64": "f64"}


@dataclass(frozen=True)
class Case:
    """One mmasim instruction and the fpemu model call that should match it."""

    family: str  # mmasim constructor family
    arch: str  # mmasim arch name
    string: str  # mmasim shape_and_type / suffix (m, n removed where free)
    model: str
    a: str
    b: str
    c: str
    k: int
    scale: str | None = None
    block: int = 0

    @property
    def key(self) -> str:
        return f"{self.model}[{self.a},{self.b},{self.c},k{self.k},{self.scale},{self.block}]"

    def op(self) -> Any:
        cls = {
            "mma": MMA,
            "wgmma": WGMMA,
            "tcgen05": TCGen05MMA,
            "mma.block_scale": MMABlockScale,
            "tcgen05.block_scale": TCGen05MMABlockScale,
            "mfma": MFMA,
        }
        return cls[self.family](self.arch, self.string)  # fmt: skip


def _nv(family: str, arch: str, s: str) -> Case:
    parts = s.split(".")
    shape = parts[0]
    k = int(shape.split("k")[1])
    kind = next((p.removeprefix("kind::") for p in parts if p.startswith("kind::")), None)
    block = next((int(p[5:]) for p in parts if p.startswith("block")), 0)
    types = [p for p in parts[1:] if not p.startswith(("kind::", "block"))]
    scale = PTX_FMT[types.pop()] if block else None
    d, a, b = (PTX_FMT[t] for t in types[:3])
    c = PTX_FMT[types[3]] if len(types) > 3 else d
    fam = family
    if kind in ("mxf8f6f4", "mxf4", "mxf4nvf4"):
        ak = kind
    elif kind == "f8f6f4":
        ak = "f8f6f4"
    elif a.startswith("float8"):
        ak = "fp8"
    else:
        ak = {"float16": "f16", "bfloat16": "bf16", "tf32": "tf32", "float64": "f64"}[a]
    if arch == "Turing" and shape.startswith("m8n8k4") and ak == "f16":
        ak = "m8n8k4-f16"
    model = f"{NV_ARCH[arch]}.{fam}.{ak}.{D_SUFFIX[d]}"
    return Case(family, arch, s, model, a, b, c, k, scale, block)


def _amd(arch: str, suffix: str) -> Case:
    m = re.fullmatch(r"(f32|f64)_(\d+)x(\d+)x(\d+)(?:_\d+b)?_?(.*)", suffix)
    assert m, suffix
    d, k, rest = PTX_FMT[m.group(1)], int(m.group(4)), m.group(5)
    toks = rest.split("_")
    a = PTX_FMT[toks[0]]
    b = PTX_FMT[toks[1]] if len(toks) > 1 and toks[1] in PTX_FMT else a
    kind = "bf16_1k" if rest.endswith("_1k") else ("fp8" if toks[0] in ("fp8", "bf8") else toks[0])
    return Case("mfma", arch, suffix, f"{arch.lower()}.mfma.{kind}.{D_SUFFIX[d]}", a, b, d, k)


def all_cases() -> list[Case]:
    """Every instruction mmasim 2.1.1 accepts, deduplicated by what fpemu is asked to do."""
    out: dict[str, Case] = {}
    lists = [("mma", mma_shape_and_type), ("wgmma", wgmma_shape_and_type),
             ("tcgen05", tcgen05mma_shape_and_type),
             ("mma.block_scale", mma_block_scale_shape_and_type),
             ("tcgen05.block_scale", tcgen05mma_block_scale_shape_and_type)]  # fmt: skip
    for family, table in lists:
        for arch, strings in table.items():
            for s in strings:
                case = _nv(family, arch, s)
                out.setdefault(case.key, case)
    for arch, suffixes in arch_mfma_suffix.items():
        for s in suffixes:
            case = _amd(arch, s)
            out.setdefault(case.key, case)
    return list(out.values())


# -- operand codes ---------------------------------------------------------------------------

#: format -> (code bits, exponent bits, mantissa bits, torch dtype or None for uint8 codes)
CODE = {
    "float64": (64, 11, 52, torch.float64), "float32": (32, 8, 23, torch.float32),
    "tf32": (32, 8, 23, torch.float32), "float16": (16, 5, 10, torch.float16),
    "bfloat16": (16, 8, 7, torch.bfloat16), "float8_e4m3fn": (8, 4, 3, torch.float8_e4m3fn),
    "float8_e5m2": (8, 5, 2, torch.float8_e5m2),
    "float8_e4m3fnuz": (8, 4, 3, torch.float8_e4m3fnuz),
    "float8_e5m2fnuz": (8, 5, 2, torch.float8_e5m2fnuz),
    "float6_e3m2fn": (6, 3, 2, None), "float6_e2m3fn": (6, 2, 3, None),
    "float4_e2m1fn": (4, 2, 1, None),
}  # fmt: skip
_INT = {64: torch.int64, 32: torch.int32, 16: torch.int16, 8: torch.uint8}
_ML = {"float6_e3m2fn": ml_dtypes.float6_e3m2fn, "float6_e2m3fn": ml_dtypes.float6_e2m3fn,
       "float4_e2m1fn": ml_dtypes.float4_e2m1fn}  # fmt: skip


def codes(rng: np.random.Generator, fmt: str, shape: tuple[int, ...], mode: Any) -> Any:
    """Random codes (uint64) of ``fmt``; ``mode`` (per row) picks the distribution:
    0 all bit patterns, 1 narrow exponents near 1, 2 wide exponents, 3 subnormal/tiny,
    4 mostly zeros, 5 huge exponents."""
    bits, eb, mb, _ = CODE[fmt]
    n = int(np.prod(shape))
    sign = rng.integers(0, 2, n, dtype=np.uint64)
    man = rng.integers(0, 1 << mb, n, dtype=np.uint64)
    top = (1 << eb) - 1
    bias = (1 << (eb - 1)) - 1
    m = np.broadcast_to(np.asarray(mode)[:, None], (shape[0], n // shape[0])).reshape(-1)
    e = rng.integers(0, top + 1, n)
    e = np.where(m == 1, rng.integers(max(bias - 3, 0), min(bias + 4, top + 1), n), e)
    e = np.where(m == 2, rng.integers(1, max(top, 2), n), e)
    e = np.where(m == 3, rng.integers(0, min(3, top + 1), n), e)
    e = np.where(m == 5, rng.integers(max(top - 3, 0), top + 1, n), e)
    if fmt in ("float32", "float64", "float16", "bfloat16", "tf32", "float8_e5m2"):
        e = np.where((m != 0) & (e == top), top - 1, e)  # only mode 0 makes inf/NaN
    x = (sign << np.uint64(bits - 1)) | (e.astype(np.uint64) << np.uint64(mb)) | man
    x = np.where((m == 4) & (rng.random(n) < 0.7), np.uint64(0), x)
    x = np.where(rng.random(n) < 0.03, np.uint64(0), x)  # zeros everywhere
    return x.reshape(shape)


def to_torch(x: Any, fmt: str) -> Any:
    bits, _, _, dt = CODE[fmt]
    if dt is None:  # fp6 in bits 5:0, fp4 in bits 5:2 of a byte (mma-parity.md 7)
        return torch.from_numpy((x << np.uint64(6 - bits)).astype(np.uint8))
    signed = x.astype(np.uint64).astype(np.int64) if bits == 64 else x.astype(f"uint{bits}")
    if bits in (16, 32):
        signed = signed.view(f"int{bits}")
    return torch.from_numpy(np.ascontiguousarray(signed)).view(_INT[bits]).view(dt)


def to_values(x: Any, fmt: str) -> Any:
    dt = CODE[fmt][3]
    if dt is None:
        return x.astype(np.uint8).view(_ML[fmt]).astype(np.float64)
    if fmt == "tf32":
        x = x & np.uint64(0xFFFFE000)  # mmasim truncates FP32 to TF32 itself
    t = to_torch(x, fmt)
    return t.to(torch.float64).numpy()


def pack_fp4(x: Any) -> Any:
    """(B, K) e2m1 codes -> (B, K/2) bytes, element 2i in the high nibble (mmasim 2.1.1)."""
    return torch.from_numpy(((x[:, 0::2] << np.uint64(4)) | x[:, 1::2]).astype(np.uint8))


def scales(rng: np.random.Generator, fmt: str, shape: tuple[int, int]) -> tuple[Any, Any]:
    """(torch scales, float64 values): ue8m0 mostly near 2**0, some extremes, rare NaN."""
    if fmt == "float8_e8m0fnu":
        c = rng.integers(117, 138, shape)
        c = np.where(rng.random(shape) < 0.2, rng.integers(0, 256, shape), c)
        c = np.where(rng.random(shape) < 0.002, 255, c).astype(np.uint8)
        v = np.where(c == 255, np.nan, np.ldexp(1.0, c.astype(np.int64) - 127))
        return torch.from_numpy(c).view(torch.float8_e8m0fnu), v
    c = rng.integers(0, 256, shape).astype(np.uint8)  # ue4m3: mmasim clears bit 7
    t = torch.from_numpy(c).view(torch.float8_e4m3fn)
    v = torch.from_numpy(c & 0x7F).view(torch.float8_e4m3fn).to(torch.float64).numpy()
    return t, v


def run(case: Case, n: int, seed: int, *, instructions: int = 1,
        trim: int = 0) -> tuple[Any, list[str]]:  # fmt: skip
    """``n`` random dot products of ``instructions`` chained k-instructions on both sides.

    ``trim``: the last ``trim`` columns of A and B are +0 codes on the mmasim side and left out
    on fpemu's (a K that is not a multiple of k: fpemu must zero-pad as a kernel does).

    Returns (the rows that differ, a few examples)."""
    rng = np.random.default_rng(seed)
    K = case.k * instructions
    mode_ab = rng.integers(0, 6, n)
    mode_c = rng.integers(0, 6, n)
    a = codes(rng, case.a, (n, K), mode_ab)
    b = codes(rng, case.b, (n, K), rng.integers(0, 6, n))
    cancel = rng.random(n) < 0.15  # pairs a[2i+1] b[2i+1] = -a[2i] b[2i]
    if CODE[case.a][0] == CODE[case.b][0] and case.a == case.b:
        sbit = np.uint64(1 << (CODE[case.a][0] - 1))
        a[cancel, 1::2] = a[cancel, 0::2] ^ sbit
        b[cancel, 1::2] = b[cancel, 0::2]
    c = codes(rng, case.c, (n, 1), mode_c)[:, 0]
    if trim:
        assert not case.scale and 0 < trim < K
        a[:, K - trim :] = 0
        b[:, K - trim :] = 0
    op = case.op()
    av, bv, cv = to_values(a, case.a), to_values(b, case.b), to_values(c, case.c)
    ct = to_torch(c, case.c)
    kw: dict[str, Any] = {}
    alpha = beta = None
    if case.scale:
        blk = case.block
        alpha, sa = scales(rng, case.scale, (n, K // blk))
        beta, sb = scales(rng, case.scale, (n, K // blk))
        kw = dict(scale_a=sa, scale_b=sb, scale_fmt=case.scale)
    d = ct
    for i in range(instructions):
        sl = slice(i * case.k, (i + 1) * case.k)
        if case.a == "float4_e2m1fn" and case.scale and case.model.split(".")[-2] != "mxf8f6f4":
            at, bt = pack_fp4(a[:, sl]), pack_fp4(b[:, sl])
        else:
            at, bt = to_torch(a[:, sl], case.a), to_torch(b[:, sl], case.b)
        if case.scale:
            ss = slice(i * case.k // case.block, (i + 1) * case.k // case.block)
            assert alpha is not None and beta is not None
            d = op.dpa(at, bt, d, alpha[:, ss], beta[:, ss])
        else:
            d = op.dpa(at, bt, d)
    want = d.view(_INT[d.element_size() * 8]).numpy().astype(f"int{d.element_size() * 8}")
    want = want.view(f"uint{d.element_size() * 8}")
    ins = get_instruction(case.model)
    if d.dtype == torch.float16 and ins.nan is not None:
        # mmasim 2.1.1 makes every NaN its FP32 0x7FFFFFFF and converts D with torch's
        # .to(float16) (fdpa.py:63-71, mma-parity.md): the vectorised AVX2/AVX512 conversion keeps
        # the payload (0x7FFF, the rule it states), the scalar ATEN_CPU_CAPABILITY=default kernel
        # quiets it to 0x7E00. That is the oracle's host, not its rule: take its NaN as the rule's
        # 0x7FFF, so the bit comparison of fpemu's encoding holds on every CPU.
        nan16 = np.isnan(want.view(np.float16))
        want = np.where(nan16, np.uint16(ins.nan), want).astype(np.uint16)
    av, bv = av[:, : K - trim], bv[:, : K - trim]
    got = encode(dpa(av, bv, cv, instruction=case.model, a_fmt=case.a, b_fmt=case.b,
                     c_fmt=case.c, k=case.k, **kw), case.model)  # fmt: skip
    ok = same_bits(got, want, case.model)
    bad = np.flatnonzero(~ok)
    ex = [f"row {i}: a={a[i].tolist()} b={b[i].tolist()} c={int(c[i]):#x} fpemu={int(got[i]):#x}"
          f" mmasim={int(want[i]):#x}" for i in bad[:3]]  # fmt: skip
    return bad, ex
