"""Dask arrays in :func:`fpemu.round`, :func:`fpemu.quantize`, :func:`fpemu.dequantize` and
:func:`fpemu.matmul`: lazy, chunked so that every result is bit-identical to the in-memory one.

Dask is imported only when a Dask array is passed (``pip install 'fpemu[scale]'``). This module
is part of the numeric core and imports no other part of fpemu: each entry point passes its
in-memory function in (``fpemu.round`` passes itself). Each chunk
is computed by the in-memory function, wherever the scheduler runs it (threads, processes or a
``distributed`` cluster), and the chunks are laid out so that nothing a result depends on is cut:

* ``round``: element by element, any chunks.
* ``quantize``: a block (an NVFP4 2-D tile: its rows too) never straddles two chunks: the block
  axis is rechunked to multiples of the block size (the row axis to multiples of the tile
  rows). NVFP4's per-tensor scale comes from the whole array's maximum, computed first by Dask
  and handed to every chunk.
* ``matmul``: an output element is one accumulation chain over all of K in the model's order,
  so K is one chunk (``a`` is rechunked along its last axis, ``b`` along its K axis); rows,
  columns and batch keep their chunks.

Stochastic rounding draws its numbers in C order over the whole array, which chunks cannot
reproduce: ``rng`` with a Dask array is refused.

>>> import numpy as np, dask.array as da, fpemu
>>> x = da.from_array(np.linspace(-1, 1, 10), chunks=3)
>>> r = fpemu.round(x, "e4m3")
>>> type(r).__name__, r.chunks
('Array', ((3, 3, 3, 1),))
>>> bool((r.compute() == fpemu.round(np.linspace(-1, 1, 10), "e4m3")).all())
True
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np


def is_dask(x: Any) -> bool:
    """Whether ``x`` is a ``dask.array.Array`` (without importing Dask).

    >>> is_dask(np.zeros(2))
    False
    """
    mod = sys.modules.get("dask.array")
    return mod is not None and isinstance(x, mod.Array)


def _da() -> Any:
    try:
        import dask.array as da  # noqa: PLC0415 - optional dependency, only for Dask input
    except ImportError:  # pragma: no cover - a Dask array implies Dask is installed
        raise ImportError("Dask arrays need Dask: pip install 'fpemu[scale]'") from None
    return da


def _no_rng(rng: Any) -> None:
    if rng is not None:
        raise ValueError(
            f"rng={rng!r} with a Dask array: stochastic draws are made in C order over the "
            "whole array, which chunks cannot reproduce; compute the array first"
        )


# -- round --------------------------------------------------------------------------------------
def round_dask(fround: Callable[..., Any], x: Any, fmt: Any, **options: Any) -> Any:
    """``fround(x, fmt, **options)`` (:func:`fpemu.round`, passed in: this core module imports
    no other part of fpemu) on a Dask array, chunk by chunk; the result keeps ``x``'s chunks."""
    _no_rng(options.get("rng"))
    # the dtype and every argument check: one in-memory call on an empty chunk of x's dtype
    meta = np.asarray(fround(np.empty((0,), dtype=x.dtype), fmt, **options))
    return x.map_blocks(lambda blk: np.asarray(fround(blk, fmt, **options)), dtype=meta.dtype)


# -- quantize / dequantize ----------------------------------------------------------------------
def quantize_dask(
    quantize: Callable[..., Any], quantized: Any, x: Any, bf: Any, **options: Any
) -> Any:
    """:func:`fpemu.quantize` of a Dask array: a :class:`~fpemu.quant.Quantized` of Dask arrays
    (NVFP4's ``tensor_scale``, a float, is computed at once from the whole array).

    ``quantize`` is the in-memory quantizer (with a ``tensor_amax`` option), ``quantized`` the
    result class and ``bf`` the block format, passed in by :mod:`fpemu.quant.quantize`.
    """
    da = _da()
    _no_rng(options.get("rng"))
    _quantize = quantize
    if x.dtype.kind != "f" or x.dtype.itemsize not in (2, 4, 8):
        raise TypeError(f"x must be a float16/32/64 array, got dtype {x.dtype}")
    ax = bf.axis if options.get("axis") is None else options["axis"]
    if isinstance(ax, bool) or not isinstance(ax, int) or not -x.ndim <= ax < max(x.ndim, 1):
        raise ValueError(f"axis={ax!r} is out of range for an array of {x.ndim} dimensions")
    ax %= max(x.ndim, 1)
    opts = {k: v for k, v in options.items() if k != "axis"}
    # the in-memory checks of rule and mode, on one zero block (a 2-D tile for NVFP4 tiles)
    probe = np.zeros((bf.tile_rows, bf.block_size) if bf.tile_rows > 1 else bf.block_size)
    _quantize(probe.astype(x.dtype), bf, axis=-1, **opts)
    if bf.tile_rows > 1 and x.ndim < 2:  # the in-memory message
        raise ValueError(f"{bf.name} has 2-D tiles; x must have at least 2 dimensions")
    rows = None  # the row axis of 2-D tiles
    if bf.tile_rows > 1 and x.ndim >= 2:
        rows = x.ndim - 2 if ax == x.ndim - 1 else x.ndim - 1
    for d, unit in ((ax, bf.block_size), (rows, bf.tile_rows)):
        if d is not None and x.shape[d] % unit and not opts.get("pad"):
            what, n = ("axis" if d == ax else "rows"), x.shape[d]
            raise ValueError(  # the in-memory message (fpemu.quant.quantize._pad)
                f"block size {unit} does not divide the {what} length {n}; pass pad=True to "
                f"zero-pad, or choose an axis whose length is a multiple of {unit}"
            )
    chunks = list(x.chunks)
    chunks[ax] = _aligned(x.shape[ax], x.chunks[ax], bf.block_size)
    if rows is not None:
        chunks[rows] = _aligned(x.shape[rows], x.chunks[rows], bf.tile_rows)
    xr = x.rechunk(tuple(chunks))
    amax = None
    if bf.two_level:  # the per-tensor scale needs the whole tensor's maximum first
        x32 = xr.astype(np.float32)
        amax, nan = da.compute(da.nanmax(abs(x32)) if x.size else 0.0, da.isnan(x32).any())
        if bool(nan):
            raise ValueError("x contains NaN; NVFP4 scale rules are defined for non-NaN tensors")
        amax = np.float32(amax)
    import dask  # noqa: PLC0415

    delayed: Any = dask.delayed  # type: ignore[attr-defined]
    parts = xr.to_delayed()
    qs = np.empty(parts.shape, dtype=object)
    for idx in np.ndindex(*parts.shape):
        qs[idx] = delayed(_quantize_chunk, pure=True)(quantize, parts[idx], bf, ax, opts, amax)
    grown = [list(c) for c in xr.chunks]  # pad=True: the last chunks grow to whole blocks
    for d, unit in ((ax, bf.block_size), (rows, bf.tile_rows)):
        if d is not None:
            grown[d] = [-(-n // unit) * unit for n in grown[d]]
    short = [list(c) for c in grown]
    short[ax] = [n // bf.block_size for n in grown[ax]]
    fields = [
        _assemble(da, qs, i, sizes, dtype)
        for i, (sizes, dtype) in enumerate(
            ((grown, np.float64), (short, np.float64), (grown, np.uint8), (short, np.uint8))
        )
    ]
    tensor = None
    if bf.two_level:  # a function of the tensor's amax only: from the probe block
        one = _quantize(probe.astype(np.float32), bf, axis=-1, tensor_amax=amax, **opts)
        tensor = one.tensor_scale
    rule = bf.scale_rule if opts.get("scale_rule") is None else opts["scale_rule"]
    el, sc, ec, scc = fields
    return quantized(el, sc, ec, scc, bf, rule, ax, x.shape[ax], tensor)


def _aligned(size: int, chunks: tuple[int, ...], unit: int) -> tuple[int, ...]:
    """Chunks of ``size`` near ``chunks`` whose bounds (but the last) are multiples of ``unit``."""
    want = max(unit, -(-max(chunks) // unit) * unit)
    return tuple(min(want, size - lo) for lo in range(0, size, want)) or (0,)


def _quantize_chunk(
    quantize: Callable[..., Any], chunk: Any, bf: Any, ax: int, opts: dict[str, Any], amax: Any
) -> Any:
    q = quantize(chunk, bf, axis=ax, tensor_amax=amax, **opts)
    return q.elements, q.scales, q.element_codes, q.scale_codes


def _assemble(da: Any, qs: Any, i: int, sizes: list[list[int]], dtype: Any) -> Any:
    """Field ``i`` of the per-chunk results as one Dask array, chunk sizes ``sizes``."""
    grid = np.empty(qs.shape, dtype=object)
    for idx in np.ndindex(*qs.shape):
        shape = tuple(sizes[d][k] for d, k in enumerate(idx))
        grid[idx] = da.from_delayed(qs[idx][i], shape=shape, dtype=dtype)
    return da.block(grid.tolist())


def dequantize_dask(dequantize: Callable[..., Any], q: Any) -> Any:
    """:func:`fpemu.dequantize` (passed in) of a ``Quantized`` holding Dask arrays."""
    da = _da()
    Quantized = type(q)
    bs = q.block_format.block_size
    e = da.moveaxis(da.asarray(q.elements), q.axis, -1)
    s = da.moveaxis(da.asarray(q.scales), q.axis, -1)
    if any(n % bs for n in e.chunks[-1][:-1]):  # a chunk must hold whole blocks
        e = e.rechunk({e.ndim - 1: _aligned(e.shape[-1], e.chunks[-1], bs)})
    # each block's scale repeated over it, chunked as the elements: chunks pair up one to one
    s = da.repeat(s, bs, axis=-1).rechunk(e.chunks)

    def block(ev: Any, sv: Any) -> Any:
        part = Quantized(ev, sv[..., ::bs], None, None, q.block_format, q.scale_rule,
                         ev.ndim - 1, ev.shape[-1], q.tensor_scale)  # fmt: skip
        return dequantize(part)

    v = da.map_blocks(block, e, s, dtype=np.float64)
    return da.moveaxis(v[..., : q.length], -1, q.axis)


# -- matmul -------------------------------------------------------------------------------------
def matmul_dask(
    matmul: Callable[..., Any], a: Any, b: Any, *, c: Any, dtype: Any, **kwargs: Any
) -> Any:
    """``matmul(a, b, c=c, **kwargs)`` (:func:`fpemu.matmul`, passed in) with Dask operands:
    K is one chunk, each output block one in-memory call; ``dtype`` is the result's.

    ``a`` ``(..., M, K)`` and ``b`` ``(..., K, N)`` need at least two dimensions and equal
    batch shapes (NumPy operands are wrapped); ``c`` is broadcast to the result.
    """
    da = _da()
    _no_rng(kwargs.get("rng"))
    a, b = (x if is_dask(x) else da.from_array(np.asarray(x)) for x in (a, b))
    for name, x in (("a", a), ("b", b)):
        if x.ndim < 2:
            raise ValueError(
                f"{name} has shape {x.shape}: Dask operands need (..., M, K) and (..., K, N) arrays"
            )
    if a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
        raise ValueError(
            f"matmul: a has shape {a.shape} and b has shape {b.shape}; Dask operands need "
            "equal batch shapes and a's last size equal to b's K size"
        )
    a = a.rechunk({a.ndim - 1: -1})  # K whole: one accumulation chain per output element
    b = b.rechunk({b.ndim - 2: -1})
    shape = (*a.shape[:-1], b.shape[-1])
    letters = "".join(chr(ord("p") + i) for i in range(a.ndim - 2))
    out_idx, a_idx, b_idx = letters + "mn", letters + "mk", letters + "kn"
    args: list[Any] = [a, a_idx, b, b_idx]
    if c is not None:
        cd = c if is_dask(c) else da.from_array(np.asarray(c))
        cd = da.broadcast_to(cd, shape).rechunk((*a.chunks[:-1], b.chunks[-1]))
        args += [cd, out_idx]

    def block(x: Any, y: Any, z: Any = None) -> Any:
        return np.asarray(matmul(x, y, c=z, **kwargs))

    return da.blockwise(block, out_idx, *args, dtype=dtype, concatenate=True)


# -- a local cluster for the command line -------------------------------------------------------
@contextmanager
def local_cluster(workers: int, *, processes: bool = True) -> Iterator[Any]:
    """A ``distributed.LocalCluster`` of ``workers`` one-thread workers and its ``Client``,
    stopped on exit.

    Raises:
        ValueError: ``workers`` is not an int >= 1. ModuleNotFoundError: no ``distributed``.

    >>> with local_cluster(1, processes=False) as client:
    ...     client.submit(sum, [1, 2]).result()
    3
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers={workers!r}: expected an int >= 1")
    from distributed import Client, LocalCluster  # noqa: PLC0415 - optional dependency

    cluster = LocalCluster(  # type: ignore[no-untyped-call,unused-ignore]
        n_workers=workers, threads_per_worker=1, processes=processes, dashboard_address=None
    )
    client = Client(cluster)  # type: ignore[no-untyped-call,unused-ignore]
    try:
        yield client
    finally:
        client.close()  # type: ignore[no-untyped-call,unused-ignore]
        cluster.close()  # type: ignore[no-untyped-call,unused-ignore]
