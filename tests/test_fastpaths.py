"""The fast paths of the training step, each against the path it replaces, bit for bit.

Each compares bits with the path it replaces: numpy.where for the relu mask, the float64
expression for optim._axpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from fpemu.formats import get_format
from fpemu.nn.functional import _relu_grad
from fpemu.nn.optim import _axpy
from fpemu.nn.tensor import round_to


def _edge_float32() -> np.ndarray:
    f16 = get_format("float16")
    base = [
        0.0,
        f16.smallest_subnormal,
        f16.tiny,
        f16.max,
        65520.0,
        65519.996,
        2.0**16,
        2.0**-25,
        3 * 2.0**-26,
        2.0**-24 * 1.5,
        1e-45,
        3.4e38,
        np.inf,
        np.nan,
        1.0,
        2049.0,
    ]
    v = np.array(base, np.float32)
    near = np.concatenate([np.nextafter(v, np.float32(np.inf)), np.nextafter(v, np.float32(0))])
    all_ = np.concatenate([v, near])
    bits = np.array([0x7F800001, 0x7FBFFFFF, 0xFFC00001, 0x7FC00000], np.uint32).view(np.float32)
    return np.concatenate([all_, -all_, bits])


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_relu_grad_mask_matches_where(dt: type) -> None:
    with np.errstate(all="ignore"):
        x = _edge_float32().astype(dt)
        v, g = np.meshgrid(x, x)
        want = np.where(v > 0, g, 0.0)
    got = _relu_grad(v, g)
    assert got.dtype == dt
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("fmt", ["float32", "float16", "bfloat16", "float64"])
@pytest.mark.parametrize("alpha", [1.0, -0.1, 0.9, 1e-3])
def test_axpy_matches_float64_expression(fmt: str, alpha: float) -> None:
    f = get_format(fmt)
    rng = np.random.default_rng(1)
    dt = np.float64 if fmt == "float64" else np.float32
    with np.errstate(all="ignore"):
        y = round_to((rng.normal(size=5000) * 10.0 ** rng.integers(-40, 38, 5000)).astype(dt), f)
        x = round_to((rng.normal(size=5000) * 10.0 ** rng.integers(-40, 38, 5000)).astype(dt), f)
        a = np.float64(round_to(np.float64(alpha), f))
        exact = y.astype(np.float64) + a * x.astype(np.float64)
        opmath = "float32" if dt == np.float32 else "float64"
        want = round_to(round_to(exact, opmath), f)
        for own in (False, True):
            got = _axpy(y.copy(), alpha, x, f, own_y=own)
            np.testing.assert_array_equal(
                got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}")
            )
