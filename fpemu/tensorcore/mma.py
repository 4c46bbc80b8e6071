"""Run an instruction model: :func:`dpa` on batches of dot products, :func:`mma` on matrices.

Both take values exact in the operand formats (float64 arrays), the instruction by name or
object (:mod:`fpemu.tensorcore.instructions`), and keyword-only options: ``a_fmt`` / ``b_fmt``
(mixed A/B formats where the instruction accepts them), ``c_fmt`` (Volta's FP16 C with FP32
D), ``scale_a`` / ``scale_b`` (block scales, as values) and ``k`` (the instruction shape: a
long K is a chain of k-instructions, each result the next C; a K that is not a multiple of k
is zero-padded to one, as a kernel pads A and B, except for block-scaled instructions, which
refuse it). Results are float64 values
exact in the instruction's D format; NaN is ``nan`` (:func:`fpemu.tensorcore.specials.encode`
gives the bits the hardware writes).

>>> import numpy as np
>>> a = np.zeros((1, 32)); a[0, :2] = [1.0, 2.0**-11]; b = np.ones((32, 1))
>>> float(mma(a, b, np.array([[2.0**-11]]), instruction="sm90.wgmma.fp8.f16",
...           a_fmt="e5m2", b_fmt="e4m3")[0, 0])  # one 32-block, C inside, F = 13, RNE
1.0009765625
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fpemu import parallel
from fpemu.backend import xp
from fpemu.formats import Format, FormatLike, get_format
from fpemu.rounding import round as fround
from fpemu.tensorcore import amd, fused
from fpemu.tensorcore.amd_rows import (
    e_fdpa_rows,
    fma32_chain_rows,
    ftz_mul_add_rows,
    tr_fdpa_matrix,
    tr_fdpa_rows,
)
from fpemu.tensorcore.block import (
    E8M13,
    F64,
    BlockSpec,
    ResultFormat,
    chain_blocks,
)
from fpemu.tensorcore.exact import powers
from fpemu.tensorcore.instructions import INSTRUCTIONS, Instruction, get_instruction

_RESULT = {
    "rz-fp32": ResultFormat(get_format("float32"), "rtz"),
    "rz-e8m13": ResultFormat(E8M13, "rtz"),
    "rne-fp16": ResultFormat(get_format("float16"), "rne"),
}
#: Rows of (row, K) work per tile of :func:`mma` on the generic route.
_TILE = 1 << 20


def _fmts(ins: Instruction, a_fmt: FormatLike | None, b_fmt: FormatLike | None,
          c_fmt: FormatLike | None) -> tuple[Format, Format, Format]:  # fmt: skip
    """Resolve and check the operand formats against the instruction."""
    out = []
    for arg, val, ok in (("a_fmt", a_fmt, ins.inputs), ("b_fmt", b_fmt if b_fmt is not None
                         else a_fmt, ins.inputs), ("c_fmt", c_fmt, ins.c)):  # fmt: skip
        f = get_format(ok[0] if val is None else val, arg=arg)
        if f.name not in ok:
            raise ValueError(f"{arg}={f.name!r} is not accepted by {ins.name}; accepted: "
                             f"{', '.join(ok)}")  # fmt: skip
        out.append(f)
    return out[0], out[1], out[2]


def _shape_k(ins: Instruction, k: int | None) -> int:
    if k is None:
        return ins.k
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or int(k) not in ins.shapes:
        raise ValueError(f"k={k!r} is not a shape of {ins.name}; accepted: {ins.shapes}")
    return int(k)


def _pad_k(ins: Instruction, kk: int, a: F64, b: F64, axis: int) -> tuple[F64, F64]:
    """A and B zero-padded along K (``axis`` of ``b``) to a whole number of k-instructions.

    A kernel pads A and B with zeros to a multiple of the instruction's k (the hardware has
    no shorter instruction), so the padded products (+0) take part: they change at most the
    sign of a zero result (-0 + +0 = +0). Block-scaled instructions are not padded: their
    scales cover whole blocks and a short K is refused (:func:`_scales`).
    """
    K = a.shape[1]
    if not K % kk or ins.scale_block:
        return a, b
    np_ = xp(a, b)
    pad = kk - K % kk
    a = np_.concatenate([a, np_.zeros((a.shape[0], pad))], axis=1)
    zb = np_.zeros((b.shape[0], pad) if axis == 1 else (pad, b.shape[1]))
    return a, np_.concatenate([b, zb], axis=axis)


def _scales(ins: Instruction, sa: Any, sb: Any, K: int) -> Format | None:
    if not ins.scale_block:
        if sa is not None or sb is not None:
            raise ValueError(f"scale_a/scale_b given, but {ins.name} is not block-scaled")
        return None
    if sa is None or sb is None:
        raise ValueError(f"{ins.name} needs scale_a and scale_b (one per {ins.scale_block} k)")
    if K % ins.k:
        raise ValueError(f"K={K} must be a multiple of k={ins.k} for {ins.name}")
    return None


def dpa(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    instruction: str | Instruction,
    a_fmt: FormatLike | None = None,
    b_fmt: FormatLike | None = None,
    c_fmt: FormatLike | None = None,
    scale_a: Any = None,
    scale_b: Any = None,
    scale_fmt: FormatLike | None = None,
    k: int | None = None,
) -> F64:
    """Dot products ``d[i] = sum_k a[i, k] * b[i, k] + c[i]`` as ``instruction`` computes them.

    Args:
        a, b: (B, K) values exact in ``a_fmt`` / ``b_fmt`` (default: the instruction's first
            input format; ``b_fmt`` defaults to ``a_fmt``).
        c: (B,) values exact in ``c_fmt`` (default the D format), or None for +0.
        instruction: an instruction model name or :class:`Instruction`.
        scale_a, scale_b: (B, K / scale_block) block scales (block-scaled instructions).
        scale_fmt: the scale format (default the instruction's first).
        k: the instruction shape (default the first of ``instruction.shapes``); a K that is
            not a multiple of it is zero-padded (block-scaled instructions: refused).

    Returns:
        (B,) float64 values exact in the D format.

    Raises:
        ValueError: a format, shape, scale or value the instruction does not accept.

    >>> float(dpa(np.array([[1.0, 2.0**-12]]), np.array([[1.0, 2.0**-12]]),
    ...           instruction="cdna1.mfma.f16.f32")[0]) == 1.0  # 1 + 2**-24: a tie, to even
    True
    """
    ins = get_instruction(instruction)
    fa, fb, fc = _fmts(ins, a_fmt, b_fmt, c_fmt)
    np_ = xp(a, b) if c is None else xp(a, b, c)
    a = np_.asarray(a, dtype=np_.float64)
    b = np_.asarray(b, dtype=np_.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"a and b must have the same (B, K) shape; got {a.shape}, {b.shape}")
    B, K = a.shape
    c = np_.zeros(B) if c is None else np_.asarray(c, dtype=np_.float64).reshape(-1)
    if c.shape != (B,):
        raise ValueError(f"c must have shape ({B},); got {c.shape}")
    kk = _shape_k(ins, k)
    L = ins.fused(kk)
    a, b = _pad_k(ins, kk, a, b, axis=1)
    K = a.shape[1]
    if B == 0:  # no dot products: nothing to check or compute
        _scales(ins, scale_a, scale_b, K)
        empty: F64 = np_.empty(0)
        return empty
    parts = _row_tiles(np_, B, K, scale_a, scale_b)
    if len(parts) > 1:  # independent dot products: row tiles on threads, the same bits

        def one(s: slice) -> F64:
            sa, sb = (None if x is None else np_.asarray(x)[s] for x in (scale_a, scale_b))
            return dpa(a[s], b[s], c[s], instruction=ins, a_fmt=fa, b_fmt=fb, c_fmt=fc,
                       scale_a=sa, scale_b=sb, scale_fmt=scale_fmt, k=kk)  # fmt: skip

        tiled: F64 = np_.concatenate(parallel.map_tiles(one, parts))
        return tiled
    if ins.algorithm in ("t-fdpa", "st-fdpa", "gst-fdpa"):
        return _nvidia(ins, a, b, c, fa, fb, fc, L, K, scale_a, scale_b, scale_fmt)
    for x, f, arg in ((a, fa, "a"), (b, fb, "b"), (c, fc, "c")):
        powers(x, f, arg)  # exactness checks from the bits (the AMD kernels do not check)
    _scales(ins, scale_a, scale_b, K)
    if ins.algorithm == "fma":
        if ins.d == "float64":
            return amd.fma_chain(a, b, c, double=True)
        return fma32_chain_rows(a, b, c)
    if ins.algorithm == "e-fdpa":
        return e_fdpa_rows(a, b, c, L=L)
    if ins.algorithm == "ftz-mul-add":
        if K % ins.group:
            raise ValueError(f"K={K} must be a multiple of {ins.group} for {ins.name}")
        return ftz_mul_add_rows(a, b, c, P=ins.group, fa=fa, fb=fb, k=kk)
    return tr_fdpa_rows(a, b, c, L=L, fa=fa, fb=fb, split=ins.algorithm == "gtr-fdpa")


#: Work units per product of an instruction model (tens of NumPy passes per product).
_DPA_COST = 16.0


def _row_tiles(np_: Any, B: int, K: int, sa: Any, sb: Any) -> list[slice]:
    """Row tiles of a :func:`dpa` call for :mod:`fpemu.parallel` (one unless it is large).

    Block scales are sliced with the rows, so they must come as (B, ...) arrays here."""
    if np_ is not np or any(x is not None and np.shape(x)[:1] != (B,) for x in (sa, sb)):
        return [slice(0, B)]
    return parallel.tiles(B, cost=_DPA_COST * max(K, 1))


def _nvidia(ins: Instruction, a: F64, b: F64, c: F64, fa: Format, fb: Format, fc: Format,
            L: int, K: int, sa: Any, sb: Any, scale_fmt: FormatLike | None) -> F64:  # fmt: skip
    np_ = xp(a)
    result = _RESULT[ins.rho]
    _scales(ins, sa, sb, K)
    if ins.algorithm == "t-fdpa":
        return fused.t_fdpa(a, b, c, fa=fa, fb=fb, fc=fc, L=L, F=ins.frac_bits,
                            e_zero=ins.e_zero, result=result)  # fmt: skip
    fs = get_format(ins.scales[0] if scale_fmt is None else scale_fmt, arg="scale_fmt")
    if fs.name not in ins.scales:
        raise ValueError(f"scale_fmt={fs.name!r} is not accepted by {ins.name}; accepted: "
                         f"{', '.join(ins.scales)}")  # fmt: skip
    sa = np_.asarray(sa, dtype=np_.float64).reshape(a.shape[0], -1)
    sb = np_.asarray(sb, dtype=np_.float64).reshape(a.shape[0], -1)
    blk = K // max(sa.shape[1], 1)
    allowed = (16,) if fs.name == "ue4m3" else tuple(sorted({ins.scale_block, 32}))
    if blk not in allowed or sa.shape[1] * blk != K or sb.shape != sa.shape:
        raise ValueError(f"scale_a and scale_b must have shape (B, K / block) with block in "
                         f"{allowed} for {fs.name} scales; got {sa.shape}, {sb.shape} for "
                         f"K={K}")  # fmt: skip
    powers(c, fc, "c")  # exactness checks from the bits
    if ins.algorithm == "st-fdpa":
        return fused.st_fdpa(a, b, c, sa, sb, fa=fa, fb=fb, fs=fs, L=L, F=ins.frac_bits,
                             e_zero=ins.e_zero, result=result)  # fmt: skip
    powers(a, fa, "a")
    powers(b, fb, "b")
    return fused.gst_fdpa(a, b, c, sa, sb, fs=fs, G=ins.group, L=L, F=ins.frac_bits,
                          e_zero=ins.e_zero, result=result)  # fmt: skip


def mma(
    a: Any,
    b: Any,
    c: Any = None,
    *,
    instruction: str | Instruction,
    a_fmt: FormatLike | None = None,
    b_fmt: FormatLike | None = None,
    c_fmt: FormatLike | None = None,
    scale_a: Any = None,
    scale_b: Any = None,
    scale_fmt: FormatLike | None = None,
    k: int | None = None,
) -> F64:
    """``D = A @ B + C`` as ``instruction`` computes it (options as in :func:`dpa`).

    Args:
        a: (M, K); b: (K, N); c: (M, N) or None; scale_a: (M, K / block); scale_b:
            (K / block, N).

    Returns:
        (M, N) float64 values exact in the D format.

    >>> mma(np.ones((2, 4)), np.ones((4, 3)), instruction="cdna3.mfma.f16.f32").tolist()
    [[4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]
    """
    ins = get_instruction(instruction)
    np_ = xp(a, b) if c is None else xp(a, b, c)
    a = np_.asarray(a, dtype=np_.float64)
    b = np_.asarray(b, dtype=np_.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a (M, K) and b (K, N) do not match: {a.shape}, {b.shape}")
    a, b = _pad_k(ins, _shape_k(ins, k), a, b, axis=0)
    (M, K), N = a.shape, b.shape[1]
    c = np_.zeros((M, N)) if c is None else np_.broadcast_to(np_.asarray(c, np_.float64), (M, N))
    if M == 0 or N == 0:  # an empty product
        _fmts(ins, a_fmt, b_fmt, c_fmt)
        empty: F64 = np_.empty((M, N))
        return empty
    if ins.algorithm == "t-fdpa":
        fa, fb, fc = _fmts(ins, a_fmt, b_fmt, c_fmt)
        _scales(ins, scale_a, scale_b, K)
        spec = BlockSpec(
            n=ins.fused(_shape_k(ins, k)),
            frac_bits=ins.frac_bits,
            result=_RESULT[ins.rho],
            zeros="floor",
            zero_floor=ins.e_zero,
        )
        return chain_blocks(a, b, c, spec=spec, fmt=fa, c_fmt=fc, b_fmt=fb)  # fmt: skip
    if ins.algorithm in ("tr-fdpa", "gtr-fdpa"):  # a matrix route for narrow inputs
        fa, fb, _ = _fmts(ins, a_fmt, b_fmt, c_fmt)
        d = tr_fdpa_matrix(a, b, c, L=ins.fused(_shape_k(ins, k)), fa=fa, fb=fb,
                           split=ins.algorithm == "gtr-fdpa")  # fmt: skip
        if d is not None:
            return d
    kw: dict[str, Any] = dict(instruction=ins, a_fmt=a_fmt, b_fmt=b_fmt, c_fmt=c_fmt,
                              scale_fmt=scale_fmt, k=k)  # fmt: skip
    out = np_.empty((M, N))
    rows = max(1, _TILE // max(N * max(K, 1), 1))
    bt = b.T
    for r0 in range(0, M, rows):
        r1 = min(M, r0 + rows)
        m = r1 - r0
        aa = np_.broadcast_to(a[r0:r1, None, :], (m, N, K)).reshape(m * N, K)
        bb = np_.broadcast_to(bt[None], (m, N, K)).reshape(m * N, K)
        if scale_a is not None and scale_b is not None:
            sa = np_.asarray(scale_a, np_.float64)[r0:r1]
            sb = np_.asarray(scale_b, np_.float64).T
            kw["scale_a"] = np_.broadcast_to(sa[:, None], (m, N, sa.shape[-1])).reshape(m * N, -1)
            kw["scale_b"] = np_.broadcast_to(sb[None], (m, N, sb.shape[-1])).reshape(m * N, -1)
        else:
            kw["scale_a"], kw["scale_b"] = scale_a, scale_b
        out[r0:r1] = dpa(aa, bb, c[r0:r1].reshape(-1), **kw).reshape(m, N)
    result: F64 = out
    return result


def model_function(instruction: str | Instruction) -> Callable[..., F64]:
    """The accumulation-model function ``fn(a, b, c, *, fmt, acc, out, **options)`` of one
    instruction, for :func:`fpemu.linalg.register_model`.

    ``fmt`` is A's format; options are those of :func:`mma` (``b_fmt``, ``c_fmt``,
    ``scale_a``, ``scale_b``, ``scale_fmt``, ``k``). ``acc`` must be the instruction's D
    format; ``out`` is reached from it by one round-to-nearest-even conversion. Batch
    dimensions run one matrix at a time.

    >>> fn = model_function("cdna3.mfma.f16.f32")
    >>> fn(np.ones((2, 1, 4)), np.ones((4, 1)), None, fmt="fp16", acc="fp32", out="fp32").tolist()
    [[[4.0]], [[4.0]]]
    """
    ins = get_instruction(instruction)

    def model(a: Any, b: Any, c: Any, *, fmt: FormatLike, acc: FormatLike, out: FormatLike,
              **options: Any) -> F64:  # fmt: skip
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"unknown option(s) {unknown} for {ins.name}; accepted: "
                            f"{', '.join(OPTIONS)}")  # fmt: skip
        acc_f = get_format(acc, arg="acc")
        if acc_f.name != ins.d:
            raise ValueError(f"acc={acc_f.name!r}: {ins.name} accumulates in {ins.d}")
        np_ = xp(a, b) if c is None else xp(a, b, c)
        a, b = np_.asarray(a, np_.float64), np_.asarray(b, np_.float64)
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        M, N = a.shape[-2], b.shape[-1]
        a3 = np_.broadcast_to(a, (*batch, *a.shape[-2:])).reshape(-1, *a.shape[-2:])
        b3 = np_.broadcast_to(b, (*batch, *b.shape[-2:])).reshape(-1, *b.shape[-2:])
        c3 = None if c is None else np_.broadcast_to(
            np_.asarray(c, np_.float64), (*batch, M, N)).reshape(-1, M, N)  # fmt: skip
        if M == N == 1 and options.get("scale_a") is None and options.get("scale_b") is None:
            # a batch of dot products: one dpa call on rows, as mma computes a 1 x 1 output
            c1 = None if c3 is None else c3.reshape(-1)
            d = dpa(a3[:, 0, :], b3[:, :, 0], c1, instruction=ins, a_fmt=fmt, **options)
            d = d.reshape(-1, 1, 1)
        else:
            d = np_.stack([mma(a3[i], b3[i], None if c3 is None else c3[i], instruction=ins,
                               a_fmt=fmt, **options) for i in range(a3.shape[0])])  # fmt: skip
        out_f = get_format(out, arg="out")
        if out_f.name != ins.d:
            d = np_.asarray(fround(d, out_f), dtype=np_.float64)
        result: F64 = d.reshape(*batch, M, N)
        return result

    model.__name__ = "mma_" + ins.name.replace(".", "_").replace("-", "_")
    model.__doc__ = f"{ins.summary}. See fpemu.tensorcore.mma.mma."
    return model


#: The options an instruction model takes through the registry.
OPTIONS = ("b_fmt", "c_fmt", "scale_a", "scale_b", "scale_fmt", "k")


def register_instructions(register: Callable[..., Any]) -> None:
    """Register every instruction with ``register(name, fn, *, aliases, description)``.

    >>> seen = {}
    >>> register_instructions(lambda name, fn, *, aliases, description: seen.update({name: fn}))
    >>> "sm90.wgmma.fp8.f16" in seen and "cdna3.mfma.fp8.f32" in seen
    True
    """
    for name, ins in INSTRUCTIONS.items():
        register(name, model_function(ins), aliases=(), description=ins.summary)
