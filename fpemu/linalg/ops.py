"""Dot products, sums and matmuls with explicit input, accumulator and output formats.

``matmul(a, b, fmt=..., acc=..., out=..., c=..., model=...)`` rounds the inputs to ``fmt``
(round-to-nearest-even), then an *accumulation model* adds the exact products (and the addend
``c``) in the accumulator format ``acc`` in a stated order, and the result is rounded to
``out`` (default ``acc``). Built-in models (see :func:`fpemu.linalg.models`):

- ``"sequential"``: ``s = c (or +0); for k = 0, 1, ...: s = round_acc(s + a[k] * b[k])``: one
  fused multiply-add (a single rounding) per step, vectorised over the whole output.
- ``"pairwise"``: the products (each rounded to ``acc``) are summed by the recursive halving
  tree ``sum(t) = round_acc(sum(t[:h]) + sum(t[h:]))``, ``h = len(t) // 2``; then
  ``round_acc(c + tree)``.
- ``"blocked"`` (``block=``, default 32): the K range is cut into chunks of ``block``; each chunk
  is a ``sequential`` chain started from +0, and the chunk results are added in order into the
  running sum started from ``c`` (or +0), one rounding per addition.
- ``"fast"``: platform BLAS (``numpy.matmul`` on float32) after the exact input rounding: FP32
  accumulation in an unspecified order, not bit-reproducible; ``acc`` must be float32.

Every step of the exact models is the exact sum rounded once: for inputs of at most 12 bits of
precision whose products fit float32 (fp16, fp8 and in-range bf16/tf32) with an IEEE float32
accumulator under round-to-nearest-even, the float32 adder itself does it (the product is an
exact float32, and IEEE addition is correctly rounded). Otherwise the product is exact in float64
(inputs of at most 26 bits), the sum ``s + p`` is made exact with TwoSum, reduced to float64
round-to-odd and rounded once to ``acc`` (see :mod:`fpemu.arith`). Both routes give the same bits.
("float64 sum, then round to acc" is NOT enough: it double-rounds for bf16/fp16 accumulators
(``2**-100 + 3 * 87`` in bf16), float32 inputs (48-bit products) and every directed mode;
tests/test_accumulate.py checks such cases against the oracle and that the naive way fails.)
Where the hardware adder is the step (that float32 case, or a float64 accumulator) and the
arrays are NumPy's, whole chains run inside NumPy's C einsum, whose loop order gives exactly
the sequential chain (checked at first use; see ``_einsum_chains``); otherwise a Python loop
over k updates blocks of output rows.

Options of the exact models: ``mode``, ``subnormals``, ``overflow`` and ``rng`` of
:func:`fpemu.round`, used for every accumulation step and the final rounding to ``out``. A
float64 accumulator supports ``mode="rne"`` only. Stochastic rounding draws one uniform per
step and output element, in a fixed order (blocks of output rows, then k): reproducible for a
given seed and shape. Inputs must have at most 26 bits of precision (float32 and narrower).

Other models plug in with :func:`register_model`. A model is a callable
``fn(a, b, c, *, fmt, acc, out, **options) -> float64 ndarray`` where ``a`` is ``(..., M, K)`` and
``b`` is ``(..., K, N)`` with equal batch shapes, both float64 holding values of ``fmt`` (already
rounded: a model must not round them again), ``c`` is None or a ``(..., M, N)`` float64 array of
``acc`` values, ``fmt``/``acc``/``out`` are :class:`~fpemu.formats.Format` objects, and the
result is ``(..., M, N)`` float64 holding values of ``out``. ``options`` are the extra keyword
arguments given to :func:`matmul`.

>>> import numpy as np
>>> a = np.array([[1.0, 2.0**-11, 2.0**-11, 2.0**-11]]); b = np.ones((4, 1))
>>> float(matmul(a, b, fmt="fp16", acc="fp16")[0, 0])
1.0
>>> float(matmul(a, b, fmt="fp16", acc="fp16", model="pairwise")[0, 0])
1.0009765625
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fpemu import parallel
from fpemu.backend import xp
from fpemu.daskarray import is_dask, matmul_dask
from fpemu.formats import Format, FormatLike, get_format
from fpemu.inputs import as_array, as_float_array
from fpemu.linalg.chains import _NATIVE
from fpemu.linalg.registry import Model, get_model
from fpemu.linalg.step import _F16, _F32, _fits_float32, _same_format
from fpemu.linalg.tiles import run_model
from fpemu.rounding import round as fround


# -- public entry points ------------------------------------------------------------------------
def matmul(
    a: Any,
    b: Any,
    *,
    fmt: FormatLike = "float16",
    acc: FormatLike = "float32",
    out: FormatLike | None = None,
    c: Any = None,
    model: str | Model = "sequential",
    **options: Any,
) -> Any:
    """``a @ b (+ c)`` with inputs in ``fmt``, accumulation in ``acc``, result in ``out``.

    Shapes follow :func:`numpy.matmul`: ``(..., M, K) @ (..., K, N)`` with broadcast batch
    dimensions; a 1-D ``a`` (or ``b``) is a row (column) vector whose axis is removed afterwards.

    Args:
        a: left operand, rounded to ``fmt`` (round-to-nearest-even) first.
        b: right operand, rounded to ``fmt`` first (to the option ``b_fmt`` where an
            instruction model takes mixed A/B formats).
        fmt: input format.
        acc: accumulator format.
        out: result format (default: ``acc``); the accumulator is rounded to it once at the end.
        c: optional addend broadcastable to the result, rounded to ``acc`` first.
        model: an accumulation model name (see :func:`models`) or a model callable.
        **options: passed to the model. Built-in models take ``mode``, ``subnormals``,
            ``overflow`` and ``rng`` (as for :func:`fpemu.round`, applied to every accumulation
            step and to the final rounding); ``"blocked"`` also takes ``block``.

    Returns:
        float32 array if every ``out`` value fits float32, else float64. A Dask operand gives
        a lazy Dask array, K in one chunk per output block (:mod:`fpemu.daskarray`).

    Raises:
        ValueError: shapes do not match, unknown model or format, bad option value.
        TypeError: non-numeric operands, unknown option.

    >>> import numpy as np
    >>> a = np.array([[1.0, 1e-4], [2.0, 3.0]])
    >>> matmul(a, a, fmt="fp16", acc="fp32")
    array([[1.0002000e+00, 4.0006638e-04],
           [8.0000000e+00, 9.0002003e+00]], dtype=float32)
    """
    if is_dask(a) or is_dask(b) or is_dask(c):  # lazily, K whole per block (fpemu.daskarray)
        get_model(model)  # an unknown model fails now, not at compute time
        fo = get_format(acc if out is None else out, arg="out" if out is not None else "acc")
        dtype = np.float32 if _fits_float32(fo) else np.float64
        return matmul_dask(matmul, a, b, c=c, dtype=dtype, fmt=fmt, acc=acc, out=out,
                           model=model, **options)  # fmt: skip
    f = get_format(fmt, arg="fmt")
    # An instruction model with mixed A/B formats (e4m3 x e5m2, FP6/FP4): b in its own format.
    fb = get_format(options["b_fmt"], arg="b_fmt") if options.get("b_fmt") is not None else f
    fa = get_format(acc, arg="acc")
    fo = fa if out is None else get_format(out, arg="out")
    fn = get_model(model)
    impl = _NATIVE.get(fn)  # a built-in: takes float32 operands, returns the accumulator's dtype
    keep32 = impl is not None and _fits_float32(f) and _fits_float32(fb)
    A, B = _operand("a", a, keep32=keep32), _operand("b", b, keep32=keep32)
    vec_a, vec_b = A.ndim == 1, B.ndim == 1
    if vec_a:
        A = A[None, :]
    if vec_b:
        B = B[:, None]
    if A.shape[-1] != B.shape[-2]:
        raise ValueError(
            f"matmul: a has shape {tuple(A.shape)} and b has shape {tuple(B.shape)}; "
            f"the contracted sizes {A.shape[-1]} and {B.shape[-2]} differ"
        )
    np_ = xp(A, B)
    try:
        batch = np.broadcast_shapes(A.shape[:-2], B.shape[:-2])
    except ValueError:
        raise ValueError(
            f"matmul: batch shapes of a {tuple(A.shape)} and b {tuple(B.shape)} do not broadcast"
        ) from None
    M, K, N = A.shape[-2], A.shape[-1], B.shape[-1]
    A = np_.broadcast_to(_round_input(A, a, f, keep32=keep32), (*batch, M, K))
    B = np_.broadcast_to(_round_input(B, b, fb, keep32=keep32), (*batch, K, N))
    C = None
    if c is not None:
        # rounded to acc (skipped where already exact, as for the inputs; a fresh or
        # read-only array either way: broadcast_to below makes it read-only)
        C = _round_input(_operand("c", c, allow_0d=True), c, fa, keep32=False)
        C = C[..., None] if vec_b and C.ndim else C
        try:
            C = np_.broadcast_to(C, (*batch, M, N))
        except ValueError:
            raise ValueError(
                f"matmul: c with shape {tuple(np_.shape(c))} does not broadcast to the result"
            ) from None
    dt = np_.float32 if _fits_float32(fo) else np_.float64
    # run_model computes independent output tiles on threads (fpemu.parallel): same bits
    if impl is not None:  # its result is a new array holding values of fo
        res = np_.asarray(run_model(impl, A, B, C, fmt=f, acc=fa, out=fo, **options), dtype=dt)
    else:
        res = run_model(fn, A, B, C, fmt=f, acc=fa, out=fo, **options)
        res = np_.asarray(res, dtype=np_.float64).astype(dt)
    if vec_b:
        res = res[..., 0]
    if vec_a:
        res = res[..., 0, :] if not vec_b else res[..., 0]
    return res[()] if res.ndim == 0 else res


def dot(
    a: Any,
    b: Any,
    *,
    fmt: FormatLike = "float16",
    acc: FormatLike = "float32",
    out: FormatLike | None = None,
    c: Any = None,
    model: str | Model = "sequential",
    **options: Any,
) -> Any:
    """Dot product over the last axis (broadcasting the others), as :func:`matmul` computes it.

    >>> float(dot([1.0, 2.0**-11, 2.0**-11], [1.0, 1.0, 1.0], acc="fp16"))
    1.0
    """
    A, B = _operand("a", a), _operand("b", b)
    if A.ndim == 0 or B.ndim == 0:
        raise ValueError(f"dot needs vectors, got a with shape {A.shape}, b with shape {B.shape}")
    C = None if c is None else _operand("c", c, allow_0d=True)[..., None, None]
    res = matmul(
        A[..., None, :], B[..., :, None], fmt=fmt, acc=acc, out=out, c=C, model=model, **options
    )
    return res[..., 0, 0][()]


def sum(  # noqa: A001 - the natural name, like numpy.sum
    x: Any,
    *,
    axis: int = -1,
    fmt: FormatLike = "float16",
    acc: FormatLike = "float32",
    out: FormatLike | None = None,
    model: str | Model = "sequential",
    **options: Any,
) -> Any:
    """Sum of ``x`` along ``axis`` (inputs rounded to ``fmt``), as a dot with ones.

    >>> float(sum([1.0] + [2.0**-11] * 4, acc="fp16")), float(sum([1.0] + [2.0**-11] * 4))
    (1.0, 1.001953125)
    """
    X = _operand("x", x)
    if X.ndim == 0:
        raise ValueError("sum needs at least one axis, got a 0-d x")
    if not -X.ndim <= axis < X.ndim:
        raise ValueError(f"axis={axis} is out of range for x with {X.ndim} dimensions")
    X = xp(X).moveaxis(X, axis, -1)
    ones = xp(X).ones(X.shape[-1], dtype=xp(X).float64)
    return dot(X, ones, fmt=fmt, acc=acc, out=out, model=model, **options)


def _operand(name: str, v: Any, *, allow_0d: bool = False, keep32: bool = False) -> Any:
    """``v`` as a float64 array (float32 if ``keep32`` and that is exact: float32, float16 and
    ml_dtypes data), converted by :func:`fpemu.inputs.as_float_array`."""
    arr = as_float_array(v, arg=name, keep32=keep32)
    if arr.ndim == 0 and not allow_0d:
        raise ValueError(f"{name} must have at least one dimension, got a 0-d {name}")
    return arr


def _round_input(x: Any, given: Any, f: Format, *, keep32: bool) -> Any:
    """``x`` (``given`` as an array) rounded to ``f`` (RNE, the format's defaults), as float32
    if ``keep32`` allows. Skipped where the dtype of ``given`` holds only values of ``f``
    (float16 data for float16 or float32 inputs, float32 data for float32)."""
    src = as_array(given, arg="input").dtype  # the data's own dtype (torch, big-endian too)
    np_ = xp(x)
    if (src == np_.float16 and (_same_format(f, _F16) or _same_format(f, _F32))) or (
        src == np_.float32 and _same_format(f, _F32)
    ):
        return x
    if np_ is not np or x.dtype != np.float64:
        return fround(x, f)
    # element-wise work: contiguous data splits into tiles on threads (fpemu.parallel)
    flat: Any = x.reshape(-1) if x.flags.c_contiguous else None
    parts = [slice(0, x.size)] if flat is None else parallel.tiles(x.size, cost=3.0)
    if len(parts) == 1:
        exact = _exact_float64(x, f)
    else:
        exact = all(parallel.map_tiles(lambda s: _exact_float64(flat[s], f), parts))
    if exact:
        # already on f's grid (pre-rounded data, the common case): rounding would return x,
        # and these read-only checks cost a fraction of a rounding pass
        return x.astype(np.float32) if keep32 else x
    if _same_format(f, _F16):
        # NumPy's float64 -> float16 cast is this rounding (RNE, gradual underflow, overflow to
        # inf; the test of the accumulator casts checks it against the oracle), in one pass
        out = np.empty(x.shape, np.float32 if keep32 else np.float64)

        def cast(src: Any, dst: Any) -> None:
            with np.errstate(over="ignore", invalid="ignore"):
                dst[...] = src.astype(np.float16)

        if len(parts) == 1:
            cast(x, out)
        else:
            dst = out.reshape(-1)
            parallel.map_tiles(lambda s: cast(flat[s], dst[s]), parts)
        return out
    return fround(x, f)


_ABS = np.uint64(0x7FFF_FFFF_FFFF_FFFF)
#: Elements per chunk of :func:`_exact_float64` (256 KiB of uint64: in L2 with its mask).
_CHUNK = 1 << 15


def _exact_float64(x: Any, f: Format) -> bool:
    """Whether ``fpemu.round(x, f)`` would return ``x`` itself, bit for bit (float64 ``x``).

    Checked for IEEE-style formats with subnormals only (their every finite value, either
    zero sign included, rounds to itself): no fraction bit below ``f``'s, no magnitude above
    ``f.max`` (which also excludes infinities and NaN, whose bits lie above every finite
    value's), and values below ``2**emin`` on the subnormal grid. A False only means "round it".

    >>> from fpemu.formats import get_format
    >>> h = get_format("fp16")
    >>> _exact_float64(np.array([1.5, -0.0, 2.0**-24, 65504.0]), h)
    True
    >>> [_exact_float64(np.array([v]), h) for v in (1 + 2.0**-11, 2.0**-25, 65520.0, np.inf)]
    [False, False, False, False]
    """
    if not (f.specials == "ieee" and f.subnormals and f.emin >= -1022 and f.mbits < 52):
        return False
    if x.size == 0:
        return True
    flat = x.reshape(-1)
    u = flat.view(np.uint64)
    if int(np.bitwise_or.reduce(u, axis=None)) & ((1 << (52 - f.mbits)) - 1):
        return False  # a fraction bit below f's (in some value)
    top = np.float64(f.max).view(np.uint64)
    tiny = np.float64(2.0**f.emin).view(np.uint64) - np.uint64(1)
    # The rest in chunks that stay in the cache, in two reused buffers (whole-array
    # temporaries cost page faults and memory passes: about half the time of this check).
    mag = np.empty(min(u.size, _CHUNK), np.uint64)
    small = np.empty(mag.size, np.bool_)
    for i in range(0, u.size, _CHUNK):
        part = u[i : i + _CHUNK]
        m, s = mag[: part.size], small[: part.size]
        np.bitwise_and(part, _ABS, out=m)
        if m.max() > top:
            return False  # above f.max: overflow, an infinity or a NaN
        m -= np.uint64(1)  # a zero wraps to the top: only nonzero values below 2**emin count
        np.less(m, tiny, out=s)
        if bool(s.any()):  # values in f's subnormal range: on its grid?
            t = np.ldexp(flat[i : i + _CHUNK][s], f.mbits - f.emin)  # exact
            if not bool((t == np.trunc(t)).all()):
                return False
    return True
