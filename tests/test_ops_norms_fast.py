"""The layer-norm backward's reuse of its work arrays' row views (``_ln_grads._rows``): the
buffer scan run again on new contents of the same work array, on another array of the same
shape, and on a strided one, equals the straightforward loop written here; the cached list is
the same object only for the same memory and layout."""

from __future__ import annotations

import numpy as np

from fpemu.backend import scratch
from fpemu.validate.ops._fma import sum32
from fpemu.validate.ops._ln_grads import _rows, _scan


def loop(terms: np.ndarray) -> np.ndarray:
    """``acc = RN32(acc + term)`` step by step from +0 (``sum32``: one rounding of the exact sum
    of a float64 exact product or float32 value and the float32 buffer), as float64."""
    acc = np.zeros(terms.shape[1:], np.float32)
    for t in terms:
        acc = sum32(t, acc)
    return acc.astype(np.float64)


def products(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    a = rng.standard_normal(shape).astype(np.float32).astype(np.float64)
    b = (rng.standard_normal(shape) * np.exp2(rng.integers(-30, 5, shape))).astype(np.float32)
    return a * b  # exact products of float32 values


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool((np.asarray(a).view(np.uint64) == np.asarray(b).view(np.uint64)).all())


def test_scan_on_reused_and_new_arrays() -> None:
    rng = np.random.default_rng(3)
    work = scratch((37, 2, 5), np.float64, key="test.norms.terms")
    for _ in range(3):  # the same memory, new contents: the cached views read them
        work[...] = products(rng, work.shape)
        assert same(_scan(work, 5, "float32"), loop(work))
    other = products(rng, (37, 2, 5))  # the same shape, other memory
    assert same(_scan(other, 5, "float32"), loop(other))
    wide = products(rng, (37, 2, 10))[:, :, ::2]  # strided: reshaped into a copy
    assert same(_scan(wide, 5, "float32"), loop(wide))
    short = products(rng, (1, 1, 3))  # one step
    assert same(_scan(short, 3, "float32"), loop(short))


def test_rows_cached_only_for_the_same_memory() -> None:
    a = np.arange(12.0).reshape(4, 3)
    first = _rows(a, "test")
    assert _rows(a, "test") is first
    assert _rows(a[:], "test") is first  # another view of the same memory and layout
    b = a.copy()
    other = _rows(b, "test")
    assert other is not first and all(np.shares_memory(r, b) for r in other)
    assert _rows(a.reshape(3, 4), "test") is not first  # same memory, another layout
    assert [r.tolist() for r in _rows(a[::2], "test")] == [[0.0, 1.0, 2.0], [6.0, 7.0, 8.0]]
