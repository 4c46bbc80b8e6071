"""The float32 kernels of ``native_layer_norm_backward`` that the emulation pins bit for bit
(see :mod:`fpemu.validate.ops.norms` for the kernel's description and the tests): the float32
input gradient (:func:`_layer_norm_dx_f32`) and the weight and bias gradients given torch's
thread count (:func:`_layer_norm_dwdb`, its sequential buffer scan :func:`_scan`).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from fpemu.backend import scratch
from fpemu.validate.ops._fma import boundary32, mad, row_dot, sum32
from fpemu.validate.ops._num import to

__all__ = ["_layer_norm_dwdb", "_layer_norm_dx_f32", "_scan"]

_F = np.float32


def _layer_norm_dx_f32(dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray,
                       g: np.ndarray | None, fused: bool) -> np.ndarray:  # fmt: skip
    """float32 grad_input of ``layer_norm_backward_frame`` with weights (measured exact):
    ds = sum((dy*x)*w), db = sum(dy*w); b = (db*mean - ds)*a*a*a/N, c = -b*mean - db*a/N,
    dx = (b*x + (a*dy)*w) + c, with the SIMD builds fusing db*mean - ds, -b*mean - ..., and
    b*x + ... (the ``default`` build rounds every operation). Without weights: ds = sum(dy*x),
    db = sum(dy), dx = (b*x + a*dy) + c."""
    cols = dy.shape[1]
    # two float32 work arrays, each reused (fresh arrays page-fault: see scratch)
    gb = np.broadcast_to(_F(1) if g is None else g, dy.shape)
    work = dy * x  # float32 products
    if g is None:
        ds = row_dot(dy, x, fused, prod=work)
        db = row_dot(dy, gb, fused, prod=dy)
        q = np.multiply(rstd[:, None], dy, out=work)  # a*dy (operand order: NaN payloads)
    else:
        t = np.multiply(work, g)  # (dy*x)*w
        ds = row_dot(work, gb, fused, prod=t)
        db = row_dot(dy, gb, fused, prod=np.multiply(dy, g, out=work))
        q = np.multiply(np.multiply(rstd[:, None], dy, out=t), g, out=t)  # (a*dy)*w
    scale = _F(1) / _F(cols)
    a = rstd
    b0 = mad(db, mean, -ds, fused=fused)
    b = ((((b0 * a).astype(_F) * a).astype(_F) * a).astype(_F) * scale).astype(_F)
    c = mad(-b, mean, -((db * a).astype(_F) * scale).astype(_F), fused=fused)
    dx = mad(b[:, None], x, q, fused=fused)
    return np.asarray(np.add(dx, c[:, None], out=dx))


def _layer_norm_dwdb(
    dy: np.ndarray, x: np.ndarray, mean: np.ndarray, rstd: np.ndarray, threads: int,
    fused: bool, buf: str,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Weight and bias gradients of the kernel's two-pass reduction, given torch's thread count:
    ``parallel_for`` hands thread t the rows [t*chunk, (t+1)*chunk) (chunk = ceil(M / T), T =
    min(threads, M)); each thread accumulates its rows in order into a buffer of the input's
    format (``buf = buf + dy * (rstd*x + (-rstd*mean))``, both multiply-adds fused on the SIMD
    builds; bfloat16/float16 buffers round every row), then the ``threads`` buffers (unused ones
    are zeros) are added in float32 in thread order. The threads advance side by side here: the
    rows are laid out step by step (a thread out of rows adds zeros, which changes nothing: its
    buffer is never -0), every product is formed once before the sequential loop (exact in
    float64 where fused, rounded to float32 where not), and :func:`_scan` runs the loop."""
    rows, cols = x.shape
    used = min(threads, rows) if threads > 1 and rows > 1 else 1
    chunk = -(-rows // used) if rows else 0
    bias = (-rstd * mean).astype(_F)

    with np.errstate(all="ignore"):
        xhat = mad(rstd[:, None], x, bias[:, None], fused=fused)
        if used * chunk != rows:  # the last thread's missing rows: zero terms
            pad = np.zeros((used * chunk - rows, cols), _F)
            dy, xhat = np.concatenate([dy, pad]), np.concatenate([xhat, pad])
        # the terms laid out step by step, contiguous (chunk, used, 2 cols): step i of thread t
        # is row t*chunk + i; products then dy
        terms = scratch((chunk, used, 2 * cols), np.float64, key="norms.terms")
        d3 = dy.reshape(used, chunk, cols).transpose(1, 0, 2)
        x3 = xhat.reshape(used, chunk, cols).transpose(1, 0, 2)
        if fused:  # exact in float64
            np.multiply(d3, x3, out=terms[..., :cols], dtype=np.float64)
        else:
            terms[..., :cols] = d3 * x3
        terms[..., cols:] = d3
        acc = _scan(terms, cols if fused else 0, buf)
        g = np.zeros(cols, _F)
        bb = np.zeros(cols, _F)
        for i in range(used):  # unused threads' buffers are zeros: adding them changes nothing
            g = (g + acc[i, :cols]).astype(_F)
            bb = (bb + acc[i, cols:]).astype(_F)
    return g, bb


def _scan(terms: np.ndarray, risky_cols: int, buf: str) -> np.ndarray:
    """The buffers after ``buf = round_buf(float32(buf + term))`` for each step of ``terms``
    (steps, threads, columns; float64 terms that are float32 values or exact float32
    products), as float64 values.

    Each step costs three NumPy calls on contiguous rows, together cheaper than one mixed-type
    ``np.add`` into the float32 buffer (whose casts are buffered: measured 1.5x slower): the
    float64 sum of the term and the float64 copy of the buffer goes into a scratch row, is
    rounded to float32 by an assignment (NumPy's cast: nearest even), and widened back into the
    next row of ``hist``; a 16-bit buffer adds the cast of that float32 row to its format.
    Rounding the float64 sum ``s`` to float32 is the single rounding of the exact sum when the
    term is a float32 value (Figueroa: 53 >= 2*24 + 2), and also for an exact product unless
    ``s`` was inexact and lands on a float32 rounding boundary (a midpoint, or the float32
    subnormal range): those are found afterwards for the first ``risky_cols`` columns
    (:func:`_first_inexact`), and the scan restarts after the first such step with that step
    rounded by :func:`sum32` (round to odd)."""
    n_steps = terms.shape[0]
    width = math.prod(terms.shape[1:])
    low = buf != "float32"
    # hist[k]: the buffer before step k (float64 copies of values of the buffer's format); one
    # scratch row for the float64 sum (keeping every step's sum measured 2x slower: the
    # detection forms them again, block by block); lists of contiguous row views
    hist = scratch((n_steps + 1, *terms.shape[1:]), np.float64, key="norms.hist")
    hist[0] = 0
    s = np.empty(width)
    r32 = np.empty(width, _F)
    r_low = np.empty(width, to(np.zeros(0, _F), buf).dtype) if low else r32
    rows_t = _rows(terms.reshape(n_steps, width), "terms")
    rows_h = _rows(hist.reshape(n_steps + 1, width), "hist")
    start = 0
    while start < n_steps:
        todo = zip(rows_t[start:], rows_h[start:-1], rows_h[start + 1 :], strict=True)
        add = np.add
        if low:
            for t, h0, h1 in todo:
                add(t, h0, s)
                r32[...] = s  # float64 -> float32: nearest even
                r_low[...] = r32  # float32 -> buffer format: the RNE cast of ``to``
                h1[...] = r_low
        else:
            for t, h0, h1 in todo:
                add(t, h0, s)
                r32[...] = s
                h1[...] = r32
        if not risky_cols:
            break
        bad_step = _first_inexact(terms, hist, start, risky_cols)
        if bad_step is None:
            break
        k = bad_step
        fixed = (terms[k] + hist[k]).astype(_F)
        fixed[:, :risky_cols] = sum32(terms[k, :, :risky_cols], hist[k, :, :risky_cols])
        hist[k + 1] = to(fixed, buf)
        start = k + 1
    return hist[n_steps].copy()


class _Views(threading.local):
    """The last row-view lists :func:`_rows` made, per name and thread."""

    def __init__(self) -> None:
        self.made: dict[str, tuple[tuple[Any, ...], np.ndarray, list[np.ndarray]]] = {}


_VIEWS = _Views()


def _rows(a: np.ndarray, name: str) -> list[np.ndarray]:
    """``list(a)`` (the row views of a 2-D array), the same list as the last call's when ``a``
    is a view of the same memory with the same layout (the scan's work arrays are reused from
    call to call: 512 views cost ~0.05 ms a list). A kept list holds its array's memory (the
    owner), so no other array can take that memory while the list is kept."""
    owner = a
    while isinstance(owner.base, np.ndarray):
        owner = owner.base
    key = (a.__array_interface__["data"][0], a.shape, a.strides, a.dtype)
    hit = _VIEWS.made.get(name)
    if hit is not None and hit[0] == key and hit[1] is owner:
        return hit[2]
    views = list(a)
    _VIEWS.made[name] = (key, owner, views)
    return views


#: sums per block of the buffer scan's boundary check (cache-sized temporaries)
_CHECK_BLOCK = 16384


def _first_inexact(terms: np.ndarray, hist: np.ndarray, start: int, cols: int) -> int | None:
    """The first step from ``start`` whose float64 sum ``terms[k] + hist[k]`` (first ``cols``
    columns) is inexact and on a float32 rounding boundary (:func:`boundary32`, then TwoSum at
    the nonzero boundary sums only: a zero sum is exact), or None. Blocks of steps keep the
    temporaries in cache."""
    n_steps = terms.shape[0]
    per = max(1, _CHECK_BLOCK // max(1, terms[0, :, :cols].size))
    for k0 in range(start, n_steps, per):
        end = min(k0 + per, n_steps)
        p, c = terms[k0:end, :, :cols], hist[k0:end, :, :cols]
        s = p + c
        risky = boundary32(s)
        if not risky.any():
            continue
        idx = np.flatnonzero(risky)
        ss = s.reshape(-1)[idx]
        idx, ss = idx[ss != 0], ss[ss != 0]
        at = np.unravel_index(idx, s.shape)
        ps, cs = p[at], c[at]
        bb = ss - ps
        err = (ps - (ss - bb)) + (cs - bb)
        bad = idx[(err != 0) & np.isfinite(err)]
        if bad.size:
            return k0 + int(bad[0]) // int(s[0].size)
    return None
