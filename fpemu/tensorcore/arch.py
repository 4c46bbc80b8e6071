"""NVIDIA tensor-core architectures: which fused block each one runs, and the matmul model.

Per architecture and input format the research note (``tensorcore.md`` section 1 and 3) gives
the block size ``n``, the alignment width ``F`` and the accumulator format:

======  ======  ==========  ==========  =======  ============================================
arch    SM      fp16 n/F    bf16 n/F    tf32     fp8 (e4m3fn, e5m2)
======  ======  ==========  ==========  =======  ============================================
v100    sm_70   4 / 23      -           -        -
t4      sm_75   8 / 24      -           -        -
a100    sm_80   8 / 24      8 / 24      4 / 24   -
ada     sm_89   8 / 24      8 / 24      4 / 24   16 / 13, e8m13 truncated
h100    sm_90   16 / 25     16 / 25     8 / 25   32 / 13, e8m13 truncated; FP16 acc: via fp16
b200    sm_100  16 / 25     16 / 25     8 / 25   via fp16 (FP32 and FP16 accumulation)
======  ======  ==========  ==========  =======  ============================================

FP32 accumulation truncates each block result; FP16 accumulation (``acc="float16"``) keeps the
same blocks and rounds each block result to FP16 with round-to-nearest-even. A long K is cut
into consecutive blocks of ``n`` products, chained in increasing k (each block's rounded
result is the next block's C), which is also the order inside multi-block instructions
(m16n8k16 on Ampere = two blocks of 8). "via fp16": each k32 FP8 instruction runs as two
chained FP16 blocks over interleaved k, from +0, and C is added afterwards with one IEEE
round-to-nearest-even addition (:mod:`fpemu.tensorcore.via_fp16`).

>>> import numpy as np
>>> from fpemu.formats import get_format
>>> a = np.array([[1.0] + [2.0**-12] * 14 + [0.0]]); b = a.T.copy()  # spec 2.7 case E10
>>> [tensor_core_matmul(a, b, arch=x, fmt="fp16").item() - 1 for x in ("v100", "a100", "h100")]
[0.0, 7.152557373046875e-07, 8.344650268554688e-07]
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format, FormatLike, get_format
from fpemu.rounding import round as fround
from fpemu.tensorcore.block import (
    E8M13_TRUNC,
    F64,
    FP16_RNE,
    FP32_TRUNC,
    BlockSpec,
    ResultFormat,
    chain_blocks,
    labels,
)
from fpemu.tensorcore.rows import dot_batch
from fpemu.tensorcore.via_fp16 import via_fp16

#: Input formats with their family name in the architecture table.
_FAMILY = {
    "float16": "fp16",
    "bfloat16": "bf16",
    "tf32": "tf32",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
}


@dataclass(frozen=True)
class Arch:
    """One tensor-core generation.

    Attributes:
        name: canonical name (``"a100"``).
        sm: compute capability (``"sm_80"``).
        extra_bits: alignment bits beyond 23 for FP16/BF16/TF32 (``F = 23 + extra_bits``).
        blocks: products per fused block, by input family (fp16, bf16, tf32, fp8); FP8 run
            via FP16 uses the fp16 block (the instruction has two of them).
        fp8_acc: block result format of the native FP8 path with FP32 accumulation (None:
            FP32 accumulation runs via FP16, see ``fp8_via_fp16``).
        fp8_frac_bits: ``F`` of the native FP8 path.
        fp8_via_fp16: accumulators (``"float32"``, ``"float16"``) for which an FP8
            instruction runs on the FP16 datapath (:mod:`fpemu.tensorcore.via_fp16`).
        description: one line for the model registry.
    """

    name: str
    sm: str
    extra_bits: int
    blocks: dict[str, int]
    fp8_acc: ResultFormat | None = None
    fp8_frac_bits: int = 13
    fp8_via_fp16: tuple[str, ...] = ()
    description: str = ""

    def block_spec(self, fmt: Format, acc: Format) -> BlockSpec:
        """The fused block this architecture runs for ``fmt`` inputs and ``acc`` accumulation.

        Raises:
            ValueError: the architecture has no such instruction (format or accumulator).

        >>> ARCHS["h100"].block_spec(get_format("bf16"), get_format("fp32"))
        BlockSpec(n=16, frac_bits=25, result=ResultFormat(fmt=..., mode='rtz'), ...)
        """
        family = _FAMILY.get(fmt.name)
        if family is None or family not in self.blocks:
            have = sorted(k for k, v in _FAMILY.items() if v in self.blocks)
            raise ValueError(
                f"fmt={fmt.name!r} is not a tensor-core input format of arch={self.name!r}; "
                f"accepted: {', '.join(have)}"
            )
        if acc.name not in ("float32", "float16"):
            raise ValueError(
                f"acc={acc.name!r} is not a tensor-core accumulator; accepted: float32, float16"
            )
        n = self.blocks[family]
        fp16_acc = acc.name == "float16"
        if family == "fp8" and not self.runs_via_fp16(fmt, acc):
            assert self.fp8_acc is not None
            result = FP16_RNE if fp16_acc else self.fp8_acc
            return BlockSpec(n=n, frac_bits=self.fp8_frac_bits, result=result,
                             zero_floor=self.zero_floor(result))  # fmt: skip
        if family == "fp8":  # the FP16 block of this architecture (via_fp16)
            n = self.blocks["fp16"]
        elif fp16_acc and family != "fp16":
            raise ValueError(f"acc='float16' needs fmt='float16' (got fmt={fmt.name!r})")
        return BlockSpec(
            n=n, frac_bits=23 + self.extra_bits, result=FP16_RNE if fp16_acc else FP32_TRUNC
        )

    def zero_floor(self, result: ResultFormat) -> int:
        """The ``zeros="floor"`` clamp of this architecture for ``result`` (MMA-Sim's e_zero).

        ``result.emin - extra_bits - 5`` on every path, the F = 13 FP8 paths included
        (mma-parity.md section 1.2: -131/-132/-133 for FP32-range results, -19/-20/-21 for
        FP16 results on Volta / Turing to Ada / Hopper and later).

        >>> [ARCHS[x].zero_floor(E8M13_TRUNC) for x in ("ada", "h100")]
        [-132, -133]
        """
        return result.fmt.emin - self.extra_bits - 5

    def runs_via_fp16(self, fmt: Format, acc: Format) -> bool:
        """Whether ``fmt`` inputs with ``acc`` accumulation run on the FP16 datapath.

        >>> h100 = ARCHS["h100"]
        >>> [h100.runs_via_fp16(get_format("e4m3"), get_format(x)) for x in ("fp32", "fp16")]
        [False, True]
        """
        return _FAMILY.get(fmt.name) == "fp8" and acc.name in self.fp8_via_fp16


_FP16_BF16_TF32 = {"fp16": 8, "bf16": 8, "tf32": 4}
_HOPPER = {"fp16": 16, "bf16": 16, "tf32": 8}

#: Every modelled architecture by canonical name.
ARCHS: dict[str, Arch] = {
    a.name: a
    for a in (
        Arch("v100", "sm_70", 0, {"fp16": 4},
             description="NVIDIA V100 (Volta) tensor core: 4-product blocks, F=23, truncation"),
        Arch("t4", "sm_75", 1, {"fp16": 8},
             description="NVIDIA T4 (Turing) tensor core: 8-product blocks, F=24 (MMA-Sim only)"),
        Arch("a100", "sm_80", 1, _FP16_BF16_TF32,
             description="NVIDIA A100 (Ampere) tensor core: 8-product blocks (tf32: 4), F=24"),
        Arch("ada", "sm_89", 1, {**_FP16_BF16_TF32, "fp8": 16}, fp8_acc=E8M13_TRUNC,
             description="NVIDIA Ada (L40S, RTX 40) tensor core: as A100; fp8 16-blocks, e8m13"),
        Arch("h100", "sm_90", 2, {**_HOPPER, "fp8": 32}, fp8_acc=E8M13_TRUNC,
             fp8_via_fp16=("float16",),
             description="NVIDIA H100/H200 (Hopper) tensor core: 16-product blocks (tf32: 8), "
                         "F=25; fp8 32-blocks, e8m13 (FP16 accumulation: via fp16 blocks)"),
        Arch("b200", "sm_100", 2, {**_HOPPER, "fp8": 32}, fp8_via_fp16=("float32", "float16"),
             description="NVIDIA B200 (Blackwell) tensor core: as H100; fp8 mma.sync runs as "
                         "two fp16 blocks, then C added with round-to-nearest"),
    )
}  # fmt: skip

#: Other names accepted for an architecture.
ARCH_ALIASES: dict[str, str] = {
    "sm_70": "v100", "volta": "v100",
    "sm_75": "t4", "turing": "t4",
    "sm_80": "a100", "ampere": "a100", "a2": "a100",
    "sm_89": "ada", "l40s": "ada",
    "sm_90": "h100", "sm_90a": "h100", "h200": "h100", "hopper": "h100",
    "sm_100": "b200", "sm_100a": "b200", "blackwell": "b200",
}  # fmt: skip

#: The model options every architecture accepts (see :func:`tensor_core_matmul`).
OPTIONS = ("zeros", "tiny_sign", "block_size", "frac_bits", "zero_floor")


def get_arch(arch: str | Arch, *, arg: str = "arch") -> Arch:
    """Resolve an architecture name or alias (``"h100"``, ``"sm_90"``, ``"h200"``).

    Raises:
        ValueError: unknown name (the message lists the known ones).
        TypeError: neither a str nor an :class:`Arch`.

    >>> get_arch("SM_90").name
    'h100'
    """
    if isinstance(arch, Arch):
        return arch
    if not isinstance(arch, str):
        raise TypeError(f"{arg} must be an architecture name, got {arch!r}")
    key = arch.strip().lower()
    key = ARCH_ALIASES.get(key, key)
    if key not in ARCHS:
        raise ValueError(
            f"unknown {arg}={arch!r}; known: {', '.join(ARCHS)}; aliases: {', '.join(ARCH_ALIASES)}"
        )
    return ARCHS[key]


def tensor_core_matmul(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    arch: str | Arch,
    fmt: FormatLike,
    acc: FormatLike = "float32",
    out: FormatLike | None = None,
    **options: Any,
) -> F64:
    """``D = A @ B + C`` as the tensor cores of ``arch`` compute it, bit for bit.

    Args:
        a: (..., M, K) values exactly representable in ``fmt`` (not rounded again here).
        b: (..., K, N) values exactly representable in ``fmt``.
        c: None (+0) or (..., M, N) values exact in ``acc``.
        arch: architecture name or alias (see :data:`ARCHS`, :data:`ARCH_ALIASES`).
        fmt: input format: float16, bfloat16, tf32, float8_e4m3fn or float8_e5m2 (as the
            architecture supports).
        acc: accumulator: ``"float32"`` (default) or ``"float16"`` (FP16-accumulate mode).
        out: output format; default ``acc``. A narrower one is reached by one final
            round-to-nearest-even conversion (the ``cvt`` a kernel epilogue does).
        **options: explicit choices where the sources leave the hardware open:

            - ``zeros``: ``"floor"`` (default: zero products and a zero C are left out of
              the exponent maximum, which is clamped below at ``zero_floor``; MMA-Sim
              2.1.1's ``e_zero`` and Khattak & Mikaitis' floors agree on it) or ``"emin"``
              (a zero operand has label -126 and its products stay in the maximum: an
              older MMA-Sim snapshot). They differ only for bf16/tf32 with results near
              FP32's underflow and for a zero times a huge bf16 value (mma-parity.md
              section 6); docs/mma-inventory.md says why ``"floor"`` is the default.
              ``"drop"`` is the old name of ``"floor"``.
            - ``tiny_sign``: ``"positive"`` (default, MMA-Sim: a nonzero sum that truncates
              to zero gives +0) or ``"keep"`` (Khattak's MATLAB: it keeps its sign), spec 8.2.
            - ``block_size``, ``frac_bits``: override ``n`` and ``F`` (for experiments).
            - ``zero_floor``: the ``zeros="floor"`` clamp (default: :meth:`Arch.zero_floor`).

    Returns:
        (..., M, N) float64 values exact in ``out``.

    Raises:
        ValueError: unsupported format/accumulator for the architecture, bad shapes or
            options. TypeError: unknown option names.

    >>> a = np.array([[1.0, 1.0]]); b = np.array([[1.0], [-(2.0**-24)]])
    >>> c = np.array([[-1.0 + 2.0**-24]])
    >>> tensor_core_matmul(a, b, c, arch="v100", fmt="fp16").item()  # spec 2.7 E3
    1.1920928955078125e-07
    >>> tensor_core_matmul(a, b, c, arch="a100", fmt="fp16").item()
    0.0
    """
    A = get_arch(arch)
    f, acc_f = get_format(fmt), get_format(acc, arg="acc")
    out_f = acc_f if out is None else get_format(out, arg="out")
    spec = _apply_options(A.block_spec(f, acc_f), options)
    np_ = xp(a, b) if c is None else xp(a, b, c)
    a, b = np_.asarray(a, dtype=np_.float64), np_.asarray(b, dtype=np_.float64)
    shape = _result_shape(a, b)
    c_arr = np_.zeros(shape) if c is None else np_.broadcast_to(np_.asarray(c, np_.float64), shape)
    if A.runs_via_fp16(f, acc_f):
        labels(a, f, zeros=spec.zeros, arg="a")  # the FP16 blocks check FP16 exactness only
        labels(b, f, zeros=spec.zeros, arg="b")
        d = via_fp16(a, b, c_arr, spec=spec)
    else:  # a batch of single dot products runs on the row-tile kernel of dpa (same bits)
        rows = dot_batch(a, b, c_arr, spec=spec, fmt=f, b_fmt=f, c_fmt=_c_format(spec))
        d = chain_blocks(a, b, c_arr, spec=spec, fmt=f) if rows is None else rows
    if out_f != spec.result.fmt:
        d = np_.asarray(fround(d, out_f), dtype=np_.float64)
    return d


def _c_format(spec: BlockSpec) -> Format:
    """The format of C for :func:`chain_blocks` (its default: FP32 for FP32-range results)."""
    res = spec.result.fmt
    return get_format("float32") if res.ebits == 8 else res


def make_model(arch: str | Arch) -> Callable[..., F64]:
    """The registry model ``fn(a, b, c, *, fmt, acc, out, **options)`` of one architecture.

    >>> m = make_model("h100")
    >>> m(np.ones((1, 2)), np.ones((2, 1)), None, fmt="fp16", acc="float32", out="float32")
    array([[2.]])
    """
    A = get_arch(arch)

    def model(a: Any, b: Any, c: Any, *, fmt: FormatLike, acc: FormatLike, out: FormatLike,
              **options: Any) -> F64:  # fmt: skip
        return tensor_core_matmul(a, b, c, arch=A, fmt=fmt, acc=acc, out=out, **options)

    model.__name__ = f"tensor_core_{A.name}"
    model.__doc__ = f"{A.description}. See fpemu.tensorcore.tensor_core_matmul."
    return model


def _apply_options(spec: BlockSpec, options: dict[str, Any]) -> BlockSpec:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"unknown tensor-core option(s) {unknown}; accepted: {', '.join(OPTIONS)}")
    changes: dict[str, Any] = {}
    if options.get("block_size") is not None:
        changes["n"] = _check_int("block_size", options["block_size"], 1, 1024)
    if options.get("frac_bits") is not None:
        changes["frac_bits"] = _check_int("frac_bits", options["frac_bits"], 0, 51)
    if options.get("zero_floor") is not None:
        changes["zero_floor"] = _check_int("zero_floor", options["zero_floor"], -2000, 2000)
    for key in ("zeros", "tiny_sign"):
        if options.get(key) is not None:
            changes[key] = options[key]
    return replace(spec, **changes)  # BlockSpec validates the string options


def _check_int(arg: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{arg} must be an int, got {value!r}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{arg}={value} is out of range; expected {lo}..{hi}")
    return int(value)


def _result_shape(a: F64, b: F64) -> tuple[int, ...]:
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(
            f"a and b must have at least 2 dimensions; got a.shape={a.shape}, b.shape={b.shape}"
        )
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"inner dimensions differ: a.shape={a.shape}, b.shape={b.shape}")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (*batch, a.shape[-2], b.shape[-1])
