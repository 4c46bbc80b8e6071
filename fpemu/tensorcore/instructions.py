"""Matrix instructions as data: one frozen dataclass per instruction model, one registry.

An :class:`Instruction` names one arithmetic behaviour of one instruction family on one
architecture: NVIDIA ``mma.sync`` (``mma``), Hopper ``wgmma``, Blackwell ``tcgen05`` and the
block-scaled ``mma.block_scale`` forms, and AMD CDNA ``mfma``. The names read
``<arch>.<family>.<kind>.<D type>`` (``"sm90.wgmma.fp8.f16"``, ``"cdna3.mfma.fp8.f32"``), so
families that differ never share a name. Parameters and algorithms follow MMA-Sim 2.1.1
(research note ``mma-parity.md`` sections 1.2, 1.3, 2, 3 and 4):

- ``t-fdpa``: truncated fused dot-product-add: ``block`` products and C, each term cut to
  ``frac_bits`` fraction bits below the largest exponent label, summed exactly, rounded once
  (``rho``); zero terms are left out of the maximum, which is at least ``e_zero``.
- ``st-fdpa``: the same with one ue8m0 scale per operand row folded into each product's label.
- ``gst-fdpa``: groups of ``group`` FP4 products summed exactly, each group labelled by its
  scales' exponents, then a 5-term truncated sum with ``frac_bits = 35``.
- ``fma``: a chain of IEEE fused multiply-adds in increasing k (f32, f64).
- ``e-fdpa``: each block of products and C summed exactly and rounded once to FP32 (CDNA1).
- ``ftz-mul-add``: FP32 products and sums with subnormals flushed (CDNA2).
- ``tr-fdpa`` / ``gtr-fdpa``: two-stage truncate-then-floor sums (CDNA3), ``gtr`` splitting
  even and odd k.

>>> ins = get_instruction("sm90.wgmma.fp8.f16")
>>> ins.family, ins.algorithm, ins.block, ins.frac_bits, ins.rho, ins.e_zero
('wgmma', 't-fdpa', 32, 13, 'rne-fp16', -21)
>>> get_instruction("hopper.wgmma.fp8.f16") is ins  # arch aliases: sm_90, hopper, h100
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Algorithm = Literal[
    "t-fdpa", "st-fdpa", "gst-fdpa", "fma", "e-fdpa", "ftz-mul-add", "tr-fdpa", "gtr-fdpa"
]
#: Final conversion of a fused sum: truncation to FP32 or to 13 fraction bits (the FP8
#: accumulator of Ada/Hopper), round-to-nearest-even to FP16 or FP32 (mma-parity.md 1.1).
Rho = Literal["rz-fp32", "rz-e8m13", "rne-fp16", "rne-fp32", "ieee"]

_FP8 = ("float8_e4m3fn", "float8_e5m2")
_F8F6F4 = (*_FP8, "float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn")
_FNUZ = ("float8_e4m3fnuz", "float8_e5m2fnuz")
#: The NaN each family writes for any NaN result (mma-parity.md 1.1, 3.4; None: the hardware
#: passes a NaN through, no canonical encoding is claimed).
NAN_F32 = 0x7FFFFFFF
NAN_F16 = 0x7FFF


@dataclass(frozen=True)
class Instruction:
    """One matrix instruction model (defining fields only; see the module docstring).

    Attributes:
        name: ``<arch>.<family>.<kind>.<d>``.
        vendor: ``"nvidia"`` or ``"amd"``.
        arch: ``"sm70"`` ... ``"sm120"``, ``"cdna1"`` ... ``"cdna3"``.
        family: ``"mma"`` (mma.sync), ``"wgmma"``, ``"tcgen05"``, ``"mma.block_scale"``,
            ``"tcgen05.block_scale"``, ``"mfma"``.
        algorithm: the arithmetic (module docstring).
        inputs: formats accepted for A and for B (any pair, A and B may differ where the
            tuple has more than one entry).
        d: the D (output and accumulator) format.
        c: the C formats accepted (D's first).
        shapes: the instruction k values; the first is the default. A longer K chains
            instructions, each result the C of the next.
        block: products per fused block (``L_max``); an instruction with a smaller k fuses k.
        frac_bits: ``F`` of the fused sum (0 where unused).
        rho: the final conversion.
        e_zero: the lower bound of the common exponent when a term is zero (MMA-Sim's label
            of a zero term).
        group: products per exactly summed group (``gst-fdpa``), or per pairwise group
            (``ftz-mul-add``).
        scale_block: k per block scale (16 or 32; 0: not block-scaled); ``scales``: formats.
        nan: the NaN code written for every NaN result, or None (not canonical).
    """

    name: str
    vendor: str
    arch: str
    family: str
    algorithm: Algorithm
    inputs: tuple[str, ...]
    d: str
    c: tuple[str, ...]
    shapes: tuple[int, ...]
    block: int
    frac_bits: int = 0
    rho: Rho = "ieee"
    e_zero: int = 0
    group: int = 0
    scale_block: int = 0
    scales: tuple[str, ...] = ()
    nan: int | None = None

    @property
    def k(self) -> int:
        """The default instruction k (the first of :attr:`shapes`)."""
        return self.shapes[0]

    def fused(self, k: int) -> int:
        """Products fused per block for an instruction of ``k``: ``min(k, block)``.

        >>> get_instruction("sm90.mma.f16.f32").fused(8)
        8
        """
        return min(k, self.block)

    @property
    def summary(self) -> str:
        """One line with the parameters (for listings and the model registry)."""
        parts = [f"{self.algorithm}", f"k={'/'.join(map(str, self.shapes))}", f"L={self.block}"]
        if self.frac_bits:
            parts.append(f"F={self.frac_bits}")
        if self.rho != "ieee":
            parts.append(self.rho)
        if self.e_zero:
            parts.append(f"e_zero={self.e_zero}")
        if self.group:
            parts.append(f"G={self.group}")
        if self.scale_block:
            parts.append(f"scales {'/'.join(self.scales)} per {self.scale_block}")
        return f"{self.vendor} {self.family} {self.arch}: " + ", ".join(parts)


def _t(arch: str, family: str, kind: str, d: str, inputs: tuple[str, ...], shapes: tuple[int, ...],
       block: int, F: int, e32: int, *, c: tuple[str, ...] = (), rho: Rho | None = None,
       ) -> Instruction:  # fmt: skip
    """A T-FDPA NVIDIA instruction; ``e32`` is the FP32-output e_zero (FP16: e32 + 112)."""
    f16 = d == "float16"
    return Instruction(
        name=f"{arch}.{family}.{kind}.{'f16' if f16 else 'f32'}", vendor="nvidia", arch=arch,
        family=family, algorithm="t-fdpa", inputs=inputs, d=d, c=(d, *c), shapes=shapes,
        block=block, frac_bits=F, rho=rho or ("rne-fp16" if f16 else "rz-fp32"),
        e_zero=e32 + 112 if f16 else e32, nan=NAN_F16 if f16 else NAN_F32,
    )  # fmt: skip


def _nvidia() -> list[Instruction]:
    F32, F16, H, B, T = "float32", "float16", ("float16",), ("bfloat16",), ("tf32",)
    out = [
        _t("sm70", "mma", "f16", F32, H, (4,), 4, 23, -131, c=(F16,)),
        _t("sm70", "mma", "f16", F16, H, (4,), 4, 23, -131),
        _t("sm75", "mma", "f16", F32, H, (8,), 8, 24, -132),
        _t("sm75", "mma", "f16", F16, H, (8,), 8, 24, -132),
        # Turing runs the Volta m8n8k4 shape with Volta's settings (mma-parity.md 1.2).
        _t("sm75", "mma", "m8n8k4-f16", F32, H, (4,), 4, 23, -131, c=(F16,)),
        _t("sm75", "mma", "m8n8k4-f16", F16, H, (4,), 4, 23, -131),
    ]
    for arch, F, ez, big in (("sm80", 24, -132, 8), ("sm89", 24, -132, 8), ("sm90", 25, -133, 16),
                             ("sm100", 25, -133, 16), ("sm120", 25, -133, 16)):  # fmt: skip
        out += [
            _t(arch, "mma", "f16", F32, H, (16, 8), big, F, ez),
            _t(arch, "mma", "f16", F16, H, (16, 8), big, F, ez),
            _t(arch, "mma", "bf16", F32, B, (16, 8), big, F, ez),
            _t(arch, "mma", "tf32", F32, T, (8, 4), big // 2, F, ez),
            _fma(arch, "mma", "f64", "float64", (4,) if arch != "sm90" else (4, 8, 16)),
        ]
    for d in (F32, F16):
        out.append(_t("sm89", "mma", "fp8", d, _FP8, (32, 16), 16, 13, -132,
                      rho="rz-e8m13" if d == F32 else None))  # fmt: skip
        out.append(_t("sm120", "mma", "fp8", d, _FP8, (32, 16), 32, 25, -133))
        out.append(_t("sm120", "mma", "f8f6f4", d, _F8F6F4, (32,), 32, 25, -133))
        out.append(_t("sm90", "wgmma", "fp8", d, _FP8, (32,), 32, 13, -133,
                      rho="rz-e8m13" if d == F32 else None))  # fmt: skip
        out.append(_t("sm90", "wgmma", "f16", d, H, (16,), 16, 25, -133))
        out.append(_t("sm100", "tcgen05", "f16", d, H, (16,), 16, 25, -133))
        out.append(_t("sm100", "tcgen05", "f8f6f4", d, _F8F6F4, (32,), 32, 25, -133))
    out += [
        _t("sm90", "wgmma", "bf16", F32, B, (16,), 16, 25, -133),
        _t("sm90", "wgmma", "tf32", F32, T, (8,), 8, 25, -133),
        _t("sm100", "tcgen05", "bf16", F32, B, (16,), 16, 25, -133),
        _t("sm100", "tcgen05", "tf32", F32, T, (8,), 8, 25, -133),
    ]
    for arch, fam in (("sm100", "tcgen05.block_scale"), ("sm120", "mma.block_scale")):
        base = dict(vendor="nvidia", arch=arch, family=fam, d=F32, c=(F32,), rho="rz-fp32",
                    nan=NAN_F32)  # fmt: skip
        out += [
            Instruction(name=f"{arch}.{fam}.mxf8f6f4.f32", algorithm="st-fdpa", inputs=_F8F6F4,
                        shapes=(32,), block=32, frac_bits=25, e_zero=-133, scale_block=32,
                        scales=("float8_e8m0fnu",), **base),  # type: ignore[arg-type]
            Instruction(name=f"{arch}.{fam}.mxf4.f32", algorithm="gst-fdpa",
                        inputs=("float4_e2m1fn",), shapes=(64,), block=64, frac_bits=35,
                        e_zero=-139, group=16, scale_block=32, scales=("float8_e8m0fnu",),
                        **base),  # type: ignore[arg-type]
            Instruction(name=f"{arch}.{fam}.mxf4nvf4.f32", algorithm="gst-fdpa",
                        inputs=("float4_e2m1fn",), shapes=(64,), block=64, frac_bits=35,
                        e_zero=-139, group=16, scale_block=16,
                        scales=("float8_e8m0fnu", "ue4m3"), **base),  # type: ignore[arg-type]
        ]  # fmt: skip
    return out


def _fma(arch: str, family: str, kind: str, d: str, shapes: tuple[int, ...]) -> Instruction:
    vendor = "amd" if arch.startswith("cdna") else "nvidia"
    return Instruction(name=f"{arch}.{family}.{kind}.{'f64' if d == 'float64' else 'f32'}",
                       vendor=vendor, arch=arch, family=family, algorithm="fma",
                       inputs=(d,), d=d, c=(d,), shapes=shapes, block=1)  # fmt: skip


def _amd() -> list[Instruction]:
    F32, H, B = "float32", ("float16",), ("bfloat16",)

    def mk(arch: str, kind: str, alg: Algorithm, inputs: tuple[str, ...], shapes: tuple[int, ...],
           block: int, **kw: object) -> Instruction:  # fmt: skip
        return Instruction(name=f"{arch}.mfma.{kind}.f32", vendor="amd", arch=arch,
                           family="mfma", algorithm=alg, inputs=inputs, d=F32, c=(F32,),
                           shapes=shapes, block=block, **kw)  # type: ignore[arg-type]  # fmt: skip

    tr = dict(frac_bits=24, rho="rne-fp32", nan=NAN_F32)
    out = []
    for arch in ("cdna1", "cdna2", "cdna3"):
        out.append(_fma(arch, "mfma", "f32", F32, (1, 2, 4)))
    out += [
        _fma("cdna2", "mfma", "f64", "float64", (4,)),
        _fma("cdna3", "mfma", "f64", "float64", (4,)),
        mk("cdna1", "f16", "e-fdpa", H, (8, 4, 16), 4, rho="rne-fp32"),
        mk("cdna1", "bf16", "e-fdpa", B, (4, 2, 8), 2, rho="rne-fp32"),
        mk("cdna2", "f16", "ftz-mul-add", H, (8, 4, 16), 4, group=4),
        mk("cdna2", "bf16", "ftz-mul-add", B, (4, 2, 8), 2, group=2),
        mk("cdna2", "bf16_1k", "ftz-mul-add", B, (8, 4, 16), 4, group=4),
        mk("cdna3", "xf32", "tr-fdpa", ("tf32",), (8, 4), 4, **tr),
        mk("cdna3", "f16", "tr-fdpa", H, (16, 8, 4), 8, **tr),
        mk("cdna3", "bf16", "tr-fdpa", B, (16, 8, 4), 8, **tr),
        mk("cdna3", "fp8", "gtr-fdpa", _FNUZ, (32, 16), 16, **tr),
    ]
    return out


#: Every instruction model by name.
INSTRUCTIONS: dict[str, Instruction] = {i.name: i for i in (*_nvidia(), *_amd())}

#: Other spellings of the architecture part of a name.
ARCH_ALIASES: dict[str, str] = {
    "sm_70": "sm70", "volta": "sm70", "v100": "sm70",
    "sm_75": "sm75", "turing": "sm75", "t4": "sm75",
    "sm_80": "sm80", "ampere": "sm80", "a100": "sm80",
    "sm_89": "sm89", "ada": "sm89", "l40s": "sm89",
    "sm_90": "sm90", "sm_90a": "sm90", "hopper": "sm90", "h100": "sm90", "h200": "sm90",
    "sm_100": "sm100", "sm_100a": "sm100", "blackwell": "sm100", "b200": "sm100",
    "sm_120": "sm120", "sm_120a": "sm120", "rtx-blackwell": "sm120",
    "mi100": "cdna1", "mi250x": "cdna2", "mi300x": "cdna3", "gfx908": "cdna1",
    "gfx90a": "cdna2", "gfx942": "cdna3",
}  # fmt: skip


def get_instruction(name: str | Instruction, *, arg: str = "instruction") -> Instruction:
    """Resolve an instruction model by name (architecture aliases accepted).

    Raises:
        ValueError: unknown name (the message lists the known ones).
        TypeError: neither a str nor an :class:`Instruction`.

    >>> get_instruction("SM_120.mma.block_scale.mxf4nvf4.f32").scales
    ('float8_e8m0fnu', 'ue4m3')
    """
    if isinstance(name, Instruction):
        return name
    if not isinstance(name, str):
        raise TypeError(f"{arg} must be an instruction name, got {name!r}")
    key = name.strip().lower()
    head, _, rest = key.partition(".")
    key = f"{ARCH_ALIASES.get(head, head)}.{rest}"
    if key not in INSTRUCTIONS:
        raise ValueError(f"unknown {arg}={name!r}; known: {', '.join(INSTRUCTIONS)}")
    return INSTRUCTIONS[key]
