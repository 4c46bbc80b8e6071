"""Helpers shared by tests: bit comparison (the tiling, fast-path and emulation tests) and
inputs exact in a format over many binades."""

from __future__ import annotations

from typing import Any

import numpy as np

import fpemu


def bits(x: Any) -> np.ndarray:
    x = np.asarray(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def same_bits(x: Any, y: Any) -> bool:
    return np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(bits(x), bits(y))


def values(rng: np.random.Generator, shape: tuple[int, ...], fmt: str) -> np.ndarray:
    """Values exact in ``fmt`` over many binades, with zeros of both signs."""
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-12, 4, shape))
    x[rng.random(shape) < 0.1] = 0.0
    x[rng.random(shape) < 0.05] = -0.0
    return np.asarray(fpemu.round(x, fmt, overflow="saturate"), dtype=np.float64)
