"""Bounds for LayerNorm's backward computed in two different float32 formulations (fpemu's
closed form against torch's kernels), used by ``fpemu.validate.twin.checker`` to state a
``reduction order`` cause. Each bound is an error analysis, stated where it is computed.

>>> import numpy as np
>>> x = np.float32([[1.0, 2.0, 4.0]]); g = np.float32([[1.0, -1.0, 0.5]])
>>> b = layer_norm_input_bound(x, g, np.ones(3, np.float32), 1e-5)
>>> b.shape, bool((b > 0).all())
((1, 3), True)
"""

from __future__ import annotations

import numpy as np

from fpemu.validate.twin import causes


def layer_norm_input_bound(x: np.ndarray, g: np.ndarray, w: np.ndarray,
                           eps: float) -> np.ndarray:  # fmt: skip
    """The input gradient of a LayerNorm (row length ``K``) in two float32 formulations:
    fpemu's ``a (g w - mean(g w) - xh mean(g w xh))`` and torch's kernel
    ``a g w + b x + c`` (``b = (db mean - ds) a^3 / K``, ``c = -b mean - db a / K``). Each
    side sums ``K`` terms and rounds a few times more, each rounding within ``u`` of a
    partial result no larger than its terms: ``(K + 8) u M`` per side, ``M`` the sum of
    the magnitudes of either formulation's terms (large when ``|mean| >> std``)."""
    x, g, w = (np.asarray(v, np.float64) for v in (x, g, w))
    k = x.shape[-1]
    mu = x.mean(-1, keepdims=True)
    a = 1 / np.sqrt(x.var(-1, keepdims=True) + eps)
    gw, xh = np.abs(g * w), np.abs((x - mu) * a)
    ours = a * (gw + gw.mean(-1, keepdims=True) + xh * (gw * xh).mean(-1, keepdims=True))
    db, ds = gw.sum(-1, keepdims=True), (gw * np.abs(x)).sum(-1, keepdims=True)
    bb = (db * np.abs(mu) + ds) * a**3 / k
    theirs = a * gw + bb * np.abs(x) + bb * np.abs(mu) + db * a / k
    return np.asarray(2 * (k + 8) * causes.U32 * np.maximum(ours, theirs), np.float64)


def layer_norm_param_bound(x: np.ndarray, g: np.ndarray, tv: np.ndarray, fv: np.ndarray, *,
                           weight: bool, low: str) -> tuple[bool, float]:  # fmt: skip
    """LayerNorm weight (``weight=True``) or bias gradients sum ``M`` rows: in float32 two
    orders differ by at most ``2 M u sum|term|``; with a low-precision input torch's
    mixed-dtype kernel (CPU autocast; ``low`` is then the input's format, else "float32")
    rounds the running sum to the input format after every row, and each of those ``M``
    roundings can go the other way: at most ``M ulp_low(sum|term|)`` (every partial sum is
    at most ``sum|term|``). Keras casts the input to float32 first: float32 sums.
    ``g`` is the upstream gradient, unscaled as ``tv`` is."""
    xh = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    terms = np.abs(g * xh) if weight else np.abs(g)
    mag, rows = terms.sum(axis=0), terms.shape[0]
    if low in causes.LOW:
        b = rows * causes._ulp(mag, low) * 2
    else:
        b = 2 * rows * causes.U32 * mag
    return causes.within(tv, fv, b + causes._ulp(tv, "float32"), "float32")


__all__ = ["layer_norm_input_bound", "layer_norm_param_bound"]
