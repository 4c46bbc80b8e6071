"""Dropout as torch 2.13's CPU kernels compute it.

``native_dropout(x, p, train)`` returns ``(output, mask)``; on the CPU (Dropout.cpp,
``native_dropout_cpu``) the mask is a Bernoulli(1 - p) draw and ``output = (x * mask) * scale``,
``scale = 1 / (1 - p)`` computed in double, the product by the 0/1 mask exact and the product
by ``scale`` one rounding in opmath, ``scale`` held in the tensor's dtype (torch 2.13 CPU,
measured: bfloat16/float16 round ``scale`` to the format first, ``mul_`` by a Scalar).
The mask is random: it cannot be recomputed, so the emulation reads torch's own mask from
``call.options["outputs"]`` (torch's outputs, NumPy, schema order, which the watcher passes)
and judges the output given that mask; the mask itself is not judged (None: any boolean draw
is a valid draw). Without ``outputs`` the forward is not emulated (NotImplementedError).
``train=False``: the output is a copy and the mask all True (both exact).

``native_dropout_backward(grad, mask, scale)`` is ``grad * mask * scale`` with ``scale`` as
float32 opmath (measured): exact.

CPU ``nn.Dropout`` itself dispatches ``empty_like``, ``bernoulli_``, ``div_.Scalar`` and
``mul.Tensor`` (measured), emulated by their own families.

>>> import numpy as np
>>> from fpemu.validate.ops import Call
>>> x, m = np.float32([1.0, 2.0]), np.array([True, False])
>>> out = native_dropout(Call("aten.native_dropout.default", (x, 0.5, True), {},
...                           ("float32", "bool"), options={"outputs": [x, m]}))
>>> out[0].value.tolist(), out[1]
([2.0, 0.0], None)
"""

from __future__ import annotations

import numpy as np

from fpemu.validate.ops import Call, Out, exact, register
from fpemu.validate.ops._num import to

__all__ = ["native_dropout", "native_dropout_backward"]


def _scaled(
    x: np.ndarray, mask: np.ndarray, scale: float, name: str, *, stored: bool
) -> np.ndarray:
    """``(x * mask) * scale``; ``stored``: ``scale`` held in the tensor's dtype (double ->
    float -> dtype), else as float32 opmath."""
    cdt = np.float64 if name == "float64" else np.float32
    sc = np.asarray([scale], np.float64)
    sc = sc if name == "float64" else sc.astype(np.float32)
    if stored:
        sc = to(sc, name).astype(cdt)
    with np.errstate(all="ignore"):
        xm = to(x.astype(cdt) * np.asarray(mask).astype(cdt), name)  # exact: mask is 0 or 1
        return to(xm.astype(cdt) * sc.astype(cdt)[0], name)


@register("aten.native_dropout.default")
def native_dropout(call: Call) -> list[Out | None]:
    """``(output, mask)``: output judged given torch's mask, the mask not judged."""
    x, p = call.args[0], float(call.args[1])
    train = call.arg(2, "train")
    name = call.out_dtypes[0]
    if train is False:
        return [exact(x.copy()), exact(np.ones(x.shape, np.bool_))]
    outs = call.options.get("outputs")
    if outs is None or len(outs) < 2:
        raise NotImplementedError("native_dropout needs torch's mask: call.options['outputs']")
    mask = np.asarray(outs[1])
    p1m = 1.0 - p
    scale = 0.0 if p1m == 0 else 1.0 / p1m
    return [exact(_scaled(x, mask, scale, name, stored=True)), None]  # the mask: random


@register("aten.native_dropout_backward.default")
def native_dropout_backward(call: Call) -> list[Out | None]:
    """``grad * mask * scale``."""
    g, mask, scale = call.args[0], call.args[1], float(call.args[2])
    return [exact(_scaled(g, mask, scale, call.out_dtypes[0], stored=False))]
