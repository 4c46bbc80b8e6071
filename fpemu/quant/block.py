"""Block formats as data: element format, block size, scale format, default scale rule, axis.

One frozen dataclass (:class:`BlockFormat`), one registry (:data:`BLOCK_FORMATS`), one
resolver (:func:`get_block_format`). The presets are the OCP MX v1.0 concrete formats
(32-element blocks, E8M0 scales; fp8-mx.md §1.1-§1.3) and NVIDIA NVFP4 (16-element blocks,
UE4M3 block scales and an FP32 tensor scale; fp8-mx.md §3.1).

>>> bf = get_block_format("mxfp8_e4m3")
>>> bf.element.name, bf.block_size, bf.scale.name, bf.scale_rule, bf.emax_elem
('float8_e4m3fn', 32, 'float8_e8m0fnu', 'floor', 8)
>>> get_block_format("nvfp4").rules
('te', 'torchao')
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

from fpemu.formats import Format, FormatLike, get_format

#: MXINT8 elements: sign-magnitude 8-bit integers k/64, |k| <= 127 (fp8-mx.md §1.1: implied
#: scale 2**-6, max 127/64). As a Format: one exponent bit, bias 1, 6 fraction bits gives
#: exactly the grid k * 2**-6 (field 0 = subnormals 0..63/64, field 1 = 1..127/64).
MXINT8_ELEMENT = Format("mxint8_element", ebits=1, mbits=6, bias=1, specials="finite")

#: Scale rules of E8M0-scaled (MX) formats and of UE4M3-scaled (NVFP4) formats.
E8M0_RULES: tuple[str, ...] = ("floor", "ceil", "even", "rceil")
NVFP4_RULES: tuple[str, ...] = ("te", "torchao")


@dataclass(frozen=True)
class BlockFormat:
    """A block-scaled format: ``block_size`` elements along ``axis`` share one scale.

    Attributes:
        name: canonical name.
        element: element format (a :class:`~fpemu.formats.Format`).
        block_size: elements per block along the block axis.
        scale: scale format: ``float8_e8m0fnu`` (MX) or ``ue4m3`` (NVFP4, two-level).
        scale_rule: default scale rule (one of :attr:`rules`).
        axis: default block axis.
        tile_rows: rows of a 2-D tile (1: 1-D blocks; 16: NVFP4 16x16 weight tiles, the
            rows being the axis before the block axis).
        integer: elements are two's-complement integer codes (MXINT8).

    >>> BlockFormat("my_mxfp4_16", get_format("e2m1"), 16, get_format("e8m0"), "rceil").max
    6.0
    """

    name: str
    element: Format
    block_size: int
    scale: Format
    scale_rule: str
    axis: int = -1
    tile_rows: int = 1
    integer: bool = False

    def __post_init__(self) -> None:
        for arg in ("block_size", "tile_rows", "axis"):
            v = getattr(self, arg)
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{arg} must be an int, got {v!r}")
        if self.block_size < 1 or self.tile_rows < 1:
            raise ValueError(
                f"block_size={self.block_size}, tile_rows={self.tile_rows}: both must be >= 1"
            )
        if not isinstance(self.element, Format) or not isinstance(self.scale, Format):
            raise TypeError("element and scale must be fpemu.Format objects")
        if self.scale.name not in ("float8_e8m0fnu", "ue4m3"):
            raise ValueError(
                f"scale={self.scale.name!r} is not a scale format; accepted: float8_e8m0fnu, ue4m3"
            )
        if self.scale_rule not in self.rules:
            raise ValueError(
                f"scale_rule={self.scale_rule!r} is not a rule of {self.scale.name} scales; "
                f"accepted: {', '.join(self.rules)}"
            )

    @property
    def rules(self) -> tuple[str, ...]:
        """The scale rules this block format accepts."""
        return E8M0_RULES if self.scale.name == "float8_e8m0fnu" else NVFP4_RULES

    @property
    def emax_elem(self) -> int:
        """Exponent of the element format's largest normal binade (OCP MX §6.3 ``emax_elem``)."""
        return self.element.emax

    @property
    def max(self) -> float:
        """Largest element value."""
        return self.element.max

    @property
    def two_level(self) -> bool:
        """Whether the format has a per-tensor FP32 scale above the block scales (NVFP4)."""
        return self.scale.name == "ue4m3"

    def __str__(self) -> str:
        return self.name


def _mx(name: str, element: FormatLike, rule: str = "floor", integer: bool = False) -> BlockFormat:
    el = element if isinstance(element, Format) else get_format(element)
    return BlockFormat(name, el, 32, get_format("e8m0"), rule, integer=integer)


_NVFP4 = dict(element=get_format("e2m1"), block_size=16, scale=get_format("ue4m3"), scale_rule="te")

#: Every preset block format by canonical name. MX presets default to the OCP FLOOR rule
#: (OCP MX §6.3, fp8-mx.md §1.4); NVFP4 to Transformer Engine's operation order (§3.2).
BLOCK_FORMATS: dict[str, BlockFormat] = {
    b.name: b
    for b in (
        _mx("mxfp8_e4m3", "float8_e4m3fn"),
        _mx("mxfp8_e5m2", "float8_e5m2"),
        _mx("mxfp6_e3m2", "float6_e3m2fn"),
        _mx("mxfp6_e2m3", "float6_e2m3fn"),
        _mx("mxfp4", "float4_e2m1fn"),
        _mx("mxint8", MXINT8_ELEMENT, integer=True),
        BlockFormat("nvfp4", **_NVFP4),  # type: ignore[arg-type]
        BlockFormat("nvfp4_2d", tile_rows=16, **_NVFP4),  # type: ignore[arg-type]
    )
}

#: Other names accepted for a block format.
BLOCK_ALIASES: dict[str, str] = {
    "mxfp8": "mxfp8_e4m3", "mxfp6": "mxfp6_e3m2", "mxfp4_e2m1": "mxfp4",
    "nvfp4_16x16": "nvfp4_2d",
}  # fmt: skip

BlockFormatLike = Union[str, BlockFormat]


def get_block_format(block_format: BlockFormatLike, *, arg: str = "block_format") -> BlockFormat:
    """Resolve a block-format name or alias (case-insensitive) or a :class:`BlockFormat`.

    Raises:
        ValueError: unknown name (the message lists the known ones).
        TypeError: neither a str nor a BlockFormat.

    >>> get_block_format("MXFP8").name
    'mxfp8_e4m3'
    """
    if isinstance(block_format, BlockFormat):
        return block_format
    if not isinstance(block_format, str):
        raise TypeError(f"{arg} must be a block-format name or a BlockFormat, got {block_format!r}")
    key = block_format.strip().lower()
    key = BLOCK_ALIASES.get(key, key)
    if key not in BLOCK_FORMATS:
        raise ValueError(
            f"unknown {arg}={block_format!r}; known: {', '.join(BLOCK_FORMATS)}; "
            f"aliases: {', '.join(BLOCK_ALIASES)}"
        )
    return BLOCK_FORMATS[key]
