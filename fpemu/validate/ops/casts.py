"""Casts: ``_to_copy`` (``.to``, ``.half()``, autocast's casts) and ``copy_`` into another dtype.

torch 2.13 CPU converts float32 to bfloat16/float16 with one round-to-nearest-even, widens
exactly, and converts float64 to a 16-bit format through float32 (two roundings): measured,
``torch.tensor([1 + 2**-8 + 2**-40], dtype=torch.float64).to(torch.bfloat16)`` is 1.0, not the
correctly rounded 1.0078125. float16 <-> bfloat16 goes through float32 (exact, then one rounding).
Floats to integers truncate toward zero (C conversion); out-of-range values are not judged by
torch's contract and not emulated differently here.

>>> import numpy as np
>>> from fpemu.validate.ops import Call, lookup
>>> c = Call("aten._to_copy.default", (np.float64([1 + 2**-8 + 2**-40]),), {"dtype": "bfloat16"},
...          ("bfloat16",))
>>> float(lookup("aten._to_copy.default")(c)[0].value[0])
1.0
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fpemu.validate.ops import Call, Out, exact, register
from fpemu.validate.ops._num import LOW, dtype, fmt, to
from fpemu.validate.ops._wide import widen32

__all__ = ["convert"]


def convert(a: np.ndarray, name: str) -> np.ndarray:
    """``a`` converted to dtype ``name`` the way torch's CPU copy kernel converts it.

    >>> convert(np.float32([0.1]), "float16").dtype.name
    'float16'
    """
    a = np.asarray(a)
    src = fmt(a)
    if src == name:
        return np.array(a, copy=True)
    dt = dtype(name)
    if dt.kind == "b":
        return np.asarray(a != 0)
    if dt.kind in "iu":
        with np.errstate(invalid="ignore"):
            return (
                np.trunc(a.astype(np.float64)).astype(dt)
                if a.dtype.kind not in "iub"
                else a.astype(dt)
            )
    if a.dtype.kind in "iub":
        return to(a.astype(np.float32), name) if name in LOW else a.astype(dt)
    if name in LOW and src == "float64":
        return to(to(a, "float32"), name)  # torch: double -> float -> half/bfloat16
    if src in LOW and name in ("float32", *LOW):
        # exact widening (widen32: astype's bits by integer passes), then one rounding
        return to(widen32(a), name)
    return to(a, name) if name in LOW or name.startswith("float8") else a.astype(dt)


@register("aten._to_copy.default", "aten.to.dtype", "aten._to_copy.out")
def _to_copy(call: Call) -> Sequence[Out | None]:
    return [exact(convert(call.args[0], call.out_dtypes[0]))]


@register("aten.copy_.default", "aten.copy.default")
def _copy(call: Call) -> Sequence[Out | None]:
    dst, src = np.asarray(call.args[0]), np.asarray(call.args[1])
    return [exact(np.broadcast_to(convert(src, call.out_dtypes[0]), dst.shape).copy())]
