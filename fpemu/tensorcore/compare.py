"""Tensor-core result beside sequential FP32 accumulation and the exact value, in ulps.

>>> import numpy as np
>>> r = compare([[0.5, 0.5, 0.5, 0.5]], [[2.0**-24]] * 4, c=[[1.0]], fmt="fp16", arch="h100")
>>> r.tensor_core.item(), r.exact.item(), r.tensor_core_ulps.item()
(1.0000001192092896, 1.0000001192092896, 0.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.formats import Format, FormatLike, get_format
from fpemu.linalg import get_model
from fpemu.rounding import round as fround
from fpemu.tensorcore.arch import get_arch, tensor_core_matmul

#: compare() computes the exact result with Fractions: at most this many products.
MAX_EXACT_PRODUCTS = 200_000


@dataclass(frozen=True)
class Comparison:
    """Results of one :func:`compare` call (all arrays (..., M, N), float64).

    Attributes:
        arch: architecture name.
        fmt: input format; ``acc``: accumulator format.
        tensor_core: the tensor-core model's result.
        sequential: sequential FMA-chain accumulation in ``acc`` (the ``"sequential"`` model of
            :mod:`fpemu.linalg`).
        exact: the exact ``A @ B + C`` rounded once to float64 (for display).
        tensor_core_ulps, sequential_ulps: signed error ``(result - exact) / ulp_acc(exact)``
            computed exactly, ``ulp_acc`` being the spacing of ``acc`` at the exact value.
    """

    arch: str
    fmt: Format
    acc: Format
    tensor_core: NDArray[np.float64]
    sequential: NDArray[np.float64]
    exact: NDArray[np.float64]
    tensor_core_ulps: NDArray[np.float64]
    sequential_ulps: NDArray[np.float64]

    def __str__(self) -> str:
        head = f"{self.arch} tensor core, {self.fmt.name} inputs, {self.acc.name} accumulation"
        rows = [head, f"{'index':>10} {'exact':>24} {'tensor core':>24} {'ulps':>8} "
                      f"{'sequential':>24} {'ulps':>8}"]  # fmt: skip
        for idx in np.ndindex(self.exact.shape):
            seq, sequ = repr(float(self.sequential[idx])), f"{self.sequential_ulps[idx]:+.3g}"
            rows.append(
                f"{','.join(map(str, idx)):>10} {float(self.exact[idx])!r:>24} "
                f"{float(self.tensor_core[idx])!r:>24} {self.tensor_core_ulps[idx]:>+8.3g} "
                f"{seq:>24} {sequ:>8}"
            )
        return "\n".join(rows)


def compare(
    a: Any,
    b: Any,
    *,
    fmt: FormatLike,
    arch: str,
    c: Any = None,
    acc: FormatLike = "float32",
    **options: Any,
) -> Comparison:
    """Compare one architecture's tensor-core ``A @ B + C`` with sequential and exact sums.

    ``a`` and ``b`` are first rounded to ``fmt`` and ``c`` to ``acc`` (nearest-even), as
    :func:`fpemu.matmul` does. The exact value uses Fractions, so the problem is limited to
    :data:`MAX_EXACT_PRODUCTS` products. ``options`` go to the tensor-core model.

    Raises:
        ValueError: too large a problem, or an unsupported format/architecture.
    """
    f, acc_f = get_format(fmt), get_format(acc, arg="acc")
    A = np.asarray(fround(np.asarray(a, dtype=np.float64), f), dtype=np.float64)
    B = np.asarray(fround(np.asarray(b, dtype=np.float64), f), dtype=np.float64)
    C = None if c is None else np.asarray(fround(np.asarray(c, dtype=np.float64), acc_f))
    name = get_arch(arch).name
    tc = tensor_core_matmul(A, B, C, arch=name, fmt=f, acc=acc_f, **options)
    if tc.size * A.shape[-1] > MAX_EXACT_PRODUCTS:
        raise ValueError(
            f"compare() is for small problems: {tc.size * A.shape[-1]} products > "
            f"{MAX_EXACT_PRODUCTS}; use fpemu.tensorcore.tensor_core_matmul"
        )
    exact = _exact(A, B, C, tc.shape)
    seq = np.asarray(get_model("sequential")(A, B, C, fmt=f, acc=acc_f, out=acc_f))
    return Comparison(
        arch=name, fmt=f, acc=acc_f, tensor_core=tc, sequential=seq,
        exact=np.array([float(x) if x is not None else math.nan for x in exact.flat]
                       ).reshape(tc.shape),
        tensor_core_ulps=_ulps(tc, exact, acc_f),
        sequential_ulps=_ulps(seq, exact, acc_f),
    )  # fmt: skip


def _exact(A: Any, B: Any, C: Any, shape: tuple[int, ...]) -> NDArray[np.object_]:
    """Exact ``A @ B + C`` as Fractions (None where a NaN or infinity takes part)."""
    A_ = np.broadcast_to(A, (*shape[:-1], A.shape[-1]))
    B_ = np.broadcast_to(B, (*shape[:-2], B.shape[-2], shape[-1]))
    C_ = np.zeros(shape) if C is None else np.broadcast_to(C, shape)
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(shape):
        row = A_[(*idx[:-1], slice(None))].tolist()
        col = B_[(*idx[:-2], slice(None), idx[-1])].tolist()
        c = float(C_[idx])
        if all(math.isfinite(t) for t in [*row, *col, c]):
            products = (Fraction(x) * Fraction(y) for x, y in zip(row, col, strict=True))
            out[idx] = sum(products, Fraction(c))
        else:
            out[idx] = None
    return out


def _ulps(value: NDArray[np.float64], exact: NDArray[np.object_], acc: Format) -> Any:
    out = np.full(value.shape, math.nan)
    for idx in np.ndindex(value.shape):
        x, v = exact[idx], float(value[idx])
        if x is None or not math.isfinite(v):
            continue
        e = max(math.floor(math.log2(abs(x))) if x else acc.emin, acc.emin)
        while Fraction(2) ** e > abs(x) and x:  # log2 of a Fraction may be off by one
            e -= 1
        while x and Fraction(2) ** (e + 1) <= abs(x):
            e += 1
        out[idx] = float((Fraction(v) - x) / Fraction(2) ** (max(e, acc.emin) - acc.mbits))
    return out
