"""Random and adversarial blocks for the quantization tests (float32, vectorised).

Each generator returns an array of shape (n, size) of float32 blocks. Categories follow
issue 14: amax at binade edges and at each rule's thresholds (max_elem * 2**k, 2**k and
(2 - 2**-(mbits+1)) * 2**k, each +-1 ulp), element ties, zeros, subnormals, all-equal blocks,
one huge outlier, Inf and NaN.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def _normal_bits(
    rng: np.random.Generator, n: int, lo: int = 0x00800000, hi: int = 0x7F7FFFFF
) -> np.ndarray:
    return rng.integers(lo, hi, size=n, dtype=np.uint32).view(np.float32)


def threshold_amax(rng: np.random.Generator, n: int, maxv: float, mbits: int) -> np.ndarray:
    """amax values at and one ulp around each rule's switching points."""
    k = rng.integers(-135, 120, size=n)
    base = rng.choice(np.array([maxv, 1.0, 2.0 - 2.0 ** -(mbits + 1), 1.5, 0.75 * maxv]), size=n)
    with np.errstate(over="ignore", under="ignore"):
        a = (base * np.ldexp(1.0, k)).astype(np.float32)
    a = np.where(np.isfinite(a) & (a > 0), a, F32(1.0)).astype(np.float32)
    nudge = rng.integers(-1, 2, size=n)
    a = np.where(nudge > 0, np.nextafter(a, F32(np.inf)), a)
    a = np.where(nudge < 0, np.nextafter(a, F32(0)), a)
    return a.astype(np.float32)


def blocks(seed: int, n: int, size: int, maxv: float, mbits: int) -> np.ndarray:
    """n blocks of ``size`` float32 values mixing every category (about n/8 of each)."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 8, size=n)
    amax = np.where(kind % 2 == 0, threshold_amax(rng, n, maxv, mbits), _normal_bits(rng, n))
    amax = np.where(kind == 7, _normal_bits(rng, n, 1, 0x00800000), amax).astype(np.float32)
    frac = rng.random((n, size), dtype=np.float32)
    x = (amax[:, None] * frac).astype(np.float32)
    # ties: elements on the midpoints of a 4-bit-significand grid of the amax binade
    grid = np.ldexp(np.floor(frac * 32) + 0.5, -5).astype(np.float32)
    x = np.where((kind == 1)[:, None], (amax[:, None] * grid).astype(np.float32), x)
    x = np.where((kind == 3)[:, None], amax[:, None], x)  # all equal
    x = np.where((kind == 5)[:, None] & (frac < 0.5), F32(0.0), x)  # zeros
    x[:, 0] = amax  # the maximum sits somewhere; move it
    perm = rng.permuted(np.tile(np.arange(size), (n, 1)), axis=1)
    x = np.take_along_axis(x, perm, axis=1)
    x = np.where(rng.random((n, size)) < 0.5, -x, x).astype(np.float32)
    special = rng.integers(0, 64, size=n)
    x[special == 0] = 0.0
    x[special == 1, 0] = np.inf
    x[special == 2, 1] = np.nan
    x[special == 3, 2] = -np.inf
    x[special == 4] *= F32(2.0**-100)  # mostly subnormal or tiny blocks
    return x.astype(np.float32)
