"""Dot products, sums and matmuls with explicit input, accumulator and output formats.

``matmul(a, b, fmt=..., acc=..., out=..., c=..., model=...)`` rounds the inputs to ``fmt``
(round-to-nearest-even), then an *accumulation model* adds the exact products (and the addend
``c``) in the accumulator format ``acc`` in a stated order, and the result is rounded to
``out`` (default ``acc``). Built-in models (see :func:`models`):

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

import builtins
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from fpemu.arith import MAX_RO_PRECISION, round_to_odd
from fpemu.backend import xp
from fpemu.formats import Format, FormatLike, Overflow, get_format
from fpemu.rounding import RoundMode, get_mode
from fpemu.rounding import round as fround

F64 = NDArray[np.float64]
#: An accumulation model, see the module docstring for the contract.
Model = Callable[..., Any]

#: Largest input precision whose products are exact in float64 (2 * 26 <= 53).
MAX_EXACT_INPUT_PRECISION = 26
#: Default chunk length of the ``"blocked"`` model.
DEFAULT_BLOCK = 32
_ROW_BLOCK = 64  # output rows per pass: keeps the accumulator slice and products in L2
_K_BLOCK = 8  # products formed per multiply call (fewer, larger NumPy calls)
_TILE_BYTES = 32768  # output tile of an einsum chain: it stays in L1 for all k
_F16 = get_format("float16")
_F32 = get_format("float32")
_F64 = get_format("float64")


# -- registry ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelInfo:
    """A registered accumulation model."""

    #: Canonical name.
    name: str
    #: The model function.
    fn: Model
    #: Other names that resolve to it.
    aliases: tuple[str, ...]
    #: One-line description shown by :func:`models`.
    description: str


_MODELS: dict[str, ModelInfo] = {}
_MODEL_ALIASES: dict[str, str] = {}


def register_model(
    name: str,
    fn: Model,
    *,
    aliases: tuple[str, ...] | list[str] = (),
    description: str = "",
    replace: bool = False,
) -> None:
    """Make an accumulation model available to :func:`matmul` under ``name`` and ``aliases``.

    Args:
        name: canonical name (case-insensitive).
        fn: the model, ``fn(a, b, c, *, fmt, acc, out, **options) -> float64 ndarray``.
        aliases: other accepted names.
        description: one line for :func:`models`.
        replace: allow re-registering an existing name (otherwise ValueError).

    Raises:
        TypeError: ``name`` is not a str or ``fn`` is not callable.
        ValueError: the name or an alias is taken (and ``replace`` is False).

    >>> register_model("my_seq", get_model("sequential"), description="demo", replace=True)
    >>> "my_seq" in models()
    True
    """
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a non-empty str, got {name!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    keys = [_key(name)] + [_key(a) for a in aliases]
    for k in keys:
        owner = _MODEL_ALIASES.get(k, k if k in _MODELS else None)
        if owner is not None and owner != keys[0] and not replace:
            raise ValueError(f"model name {k!r} is already taken by model {owner!r}")
        if owner == keys[0] and not replace:
            raise ValueError(f"model {k!r} is already registered; pass replace=True")
    _MODELS[keys[0]] = ModelInfo(keys[0], fn, tuple(keys[1:]), description)
    for k in keys[1:]:
        _MODEL_ALIASES[k] = keys[0]


def get_model(name: str | Model) -> Model:
    """The model function registered as ``name`` (or an alias); a callable is returned as is.

    Raises:
        ValueError: unknown name (the message lists the known models).
        TypeError: ``name`` is neither a str nor callable.

    >>> get_model("seq") is get_model("sequential")
    True
    """
    if callable(name) and not isinstance(name, str):
        return name
    if not isinstance(name, str):
        raise TypeError(f"model must be a model name or a callable, got model={name!r}")
    k = _key(name)
    k = _MODEL_ALIASES.get(k, k)
    if k not in _MODELS:
        known = ", ".join(
            f"{m} ({', '.join(i.aliases)})" if i.aliases else m for m, i in _MODELS.items()
        )
        raise ValueError(f"unknown model={name!r}; known models: {known}")
    return _MODELS[k].fn


def models() -> dict[str, str]:
    """Registered model names and their descriptions.

    >>> [m for m in ("sequential", "pairwise", "blocked", "fast") if m in models()]
    ['sequential', 'pairwise', 'blocked', 'fast']
    """
    return {k: i.description for k, i in _MODELS.items()}


def _key(name: str) -> str:
    return name.strip().lower()


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
        b: right operand, rounded to ``fmt`` first.
        fmt: input format.
        acc: accumulator format.
        out: result format (default: ``acc``); the accumulator is rounded to it once at the end.
        c: optional addend broadcastable to the result, rounded to ``acc`` first.
        model: an accumulation model name (see :func:`models`) or a model callable.
        **options: passed to the model. Built-in models take ``mode``, ``subnormals``,
            ``overflow`` and ``rng`` (as for :func:`fpemu.round`, applied to every accumulation
            step and to the final rounding); ``"blocked"`` also takes ``block``.

    Returns:
        float32 array if every ``out`` value fits float32, else float64.

    Raises:
        ValueError: shapes do not match, unknown model or format, bad option value.
        TypeError: non-numeric operands, unknown option.

    >>> import numpy as np
    >>> a = np.array([[1.0, 1e-4], [2.0, 3.0]])
    >>> matmul(a, a, fmt="fp16", acc="fp32")
    array([[1.0002000e+00, 4.0006638e-04],
           [8.0000000e+00, 9.0002003e+00]], dtype=float32)
    """
    f = get_format(fmt, arg="fmt")
    fa = get_format(acc, arg="acc")
    fo = fa if out is None else get_format(out, arg="out")
    fn = get_model(model)
    impl = _NATIVE.get(fn)  # a built-in: takes float32 operands, returns the accumulator's dtype
    keep32 = impl is not None and _fits_float32(f)
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
    B = np_.broadcast_to(_round_input(B, b, f, keep32=keep32), (*batch, K, N))
    C = None
    if c is not None:
        C = fround(_operand("c", c, allow_0d=True), fa)
        C = C[..., None] if vec_b and C.ndim else C
        try:
            C = np_.broadcast_to(C, (*batch, M, N))
        except ValueError:
            raise ValueError(
                f"matmul: c with shape {tuple(np_.shape(c))} does not broadcast to the result"
            ) from None
    dt = np_.float32 if _fits_float32(fo) else np_.float64
    if impl is not None:  # its result is a new array holding values of fo
        res = np_.asarray(impl(A, B, C, fmt=f, acc=fa, out=fo, **options), dtype=dt)
    else:
        res = np_.asarray(fn(A, B, C, fmt=f, acc=fa, out=fo, **options), dtype=np_.float64)
        res = res.astype(dt)
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
    """``v`` as a float64 array (float32 if ``keep32`` and ``v`` is float32 or float16)."""
    arr = v if hasattr(v, "dtype") and hasattr(v, "shape") else np.asarray(v)
    dt = arr.dtype
    ok = dt.kind in "fiub" or (dt.kind == "V" and "float" in dt.name)
    if not ok:
        raise TypeError(f"{name} must hold real numbers, got {name} with dtype {dt}")
    if arr.ndim == 0 and not allow_0d:
        raise ValueError(f"{name} must have at least one dimension, got a 0-d {name}")
    np_ = xp(arr)
    narrow = keep32 and dt in (np_.float32, np_.float16)  # exact in float32: no float64 copy
    with np.errstate(invalid="ignore"):  # signalling NaNs quietly become NaN
        return np_.asarray(arr, dtype=np_.float32 if narrow else np_.float64)


def _round_input(x: Any, given: Any, f: Format, *, keep32: bool) -> Any:
    """``x`` (``given`` as an array) rounded to ``f`` (RNE, the format's defaults), as float32
    if ``keep32`` allows. Skipped where the dtype of ``given`` holds only values of ``f``
    (float16 data for float16 or float32 inputs, float32 data for float32)."""
    src = getattr(given, "dtype", None)
    np_ = xp(x)
    if (src == np_.float16 and (_same_format(f, _F16) or _same_format(f, _F32))) or (
        src == np_.float32 and _same_format(f, _F32)
    ):
        return x
    if np_ is np and x.dtype == np.float64 and _same_format(f, _F16):
        # NumPy's float64 -> float16 cast is this rounding (RNE, gradual underflow, overflow to
        # inf; the test of the accumulator casts checks it against the oracle), in one pass
        with np.errstate(over="ignore", invalid="ignore"):
            return x.astype(np.float16).astype(np.float32 if keep32 else np.float64)
    return fround(x, f)


def _fits_float32(f: Format) -> bool:
    return f.precision <= 24 and f.max <= _F32.max and f.emin - f.mbits >= -149


# -- the exact step: s = round_acc(s + p), p exact ------------------------------------------------
@dataclass(frozen=True)
class _Rounding:
    """One accumulator rounding: format and options, validated once per call."""

    fmt: Format
    mode: RoundMode
    subnormals: bool | None
    overflow: Overflow | None
    rng: np.random.Generator | None

    @property
    def ieee_rne(self) -> bool:
        """Round-to-nearest-even with IEEE gradual underflow and overflow to infinity."""
        return (
            self.mode is RoundMode.RNE
            and self.subnormals in (None, True)
            and self.overflow in (None, "inf")
            and self.fmt.has_inf
            and self.fmt.subnormals
        )

    @property
    def ieee32_rne(self) -> bool:
        """Whether this is exactly what float32 hardware addition does."""
        return self.ieee_rne and _same_format(self.fmt, _F32)

    @property
    def native_dtype(self) -> Any:
        """float16/float32 when NumPy's correctly rounded cast from float64 is this rounding."""
        if self.ieee_rne and _same_format(self.fmt, _F32):
            return np.float32
        if self.ieee_rne and _same_format(self.fmt, _F16):
            return np.float16
        return None

    def round(self, x: Any) -> Any:
        if self.fmt.precision > MAX_RO_PRECISION:
            return x  # float64 accumulator under rne: x is already RN53 (checked in _rounding)
        native = self.native_dtype
        if native is not None:  # same result as fround (tests check the casts), much faster
            with np.errstate(over="ignore"):
                return x.astype(native).astype(xp(x).float64)
        return fround(
            x,
            self.fmt,
            mode=self.mode,
            subnormals=self.subnormals,
            overflow=self.overflow,
            rng=self.rng,
        )

    def add(self, s: Any, p: Any) -> Any:
        """``round(s + p)`` for float64 ``s``, ``p`` whose exact sum TwoSum captures."""
        np_ = xp(s)
        with np.errstate(all="ignore"):
            hi = s + p
            bb = hi - s
            lo = (s - (hi - bb)) + (p - bb)
            if self.fmt.precision > MAX_RO_PRECISION:
                z = hi
            else:
                z = round_to_odd(hi, np_.where(np_.isfinite(hi), lo, 0.0))
        if self.mode is RoundMode.RDOWN:  # an exact zero sum is -0 unless both terms are +0
            both_pos0 = (s == 0) & (p == 0) & ~np_.signbit(s) & ~np_.signbit(p)
            z = np_.where((hi == 0) & ~both_pos0, -0.0, z)
        return self.round(z)


def _same_format(f: Format, g: Format) -> bool:
    return (f.ebits, f.mbits, f.bias, f.specials, f.subnormals) == (
        g.ebits,
        g.mbits,
        g.bias,
        g.specials,
        g.subnormals,
    )


def _rounding(
    fmt: Format,
    *,
    arg: str,
    mode: str | RoundMode,
    subnormals: bool | None,
    overflow: Overflow | None,
    rng: np.random.Generator | None,
) -> _Rounding:
    m = get_mode(mode)
    if fmt.precision > MAX_RO_PRECISION:
        r = _Rounding(fmt, m, subnormals, overflow, rng)
        ok = _same_format(fmt, _F64) and m is RoundMode.RNE and subnormals in (None, True)
        if not ok or overflow not in (None, "inf"):
            raise ValueError(
                f"{arg}={fmt.name}: a float64 accumulator supports only mode='rne' with default "
                f"subnormals/overflow (and formats of precision <= {MAX_RO_PRECISION} any mode)"
            )
        return r
    if (subnormals, overflow, rng) != (None, None, None) or m is RoundMode.STOCHASTIC:
        fround(np.zeros(0), fmt, mode=m, subnormals=subnormals, overflow=overflow, rng=rng)
    return _Rounding(fmt, m, subnormals, overflow, rng)


def _check_exact_inputs(fmt: Format, model: str) -> None:
    if fmt.precision > MAX_EXACT_INPUT_PRECISION or fmt.emin - fmt.mbits < -400:
        raise ValueError(
            f"model={model!r} needs products exact in float64: fmt={fmt.name} has precision "
            f"{fmt.precision} > {MAX_EXACT_INPUT_PRECISION}; use an input format up to float32"
        )


def _products_fit_float32(a: Any, b: Any, fmt: Format) -> bool:
    """Whether every product of an ``a`` and a ``b`` value is an exact float32 number."""
    if 2 * fmt.precision > 24:
        return False
    if 2 * (fmt.emin - fmt.mbits) >= -149 and fmt.max * fmt.max <= _F32.max:
        return True  # fp16, fp8: true for every pair of values of the format
    np_ = xp(a)
    with np.errstate(all="ignore"):
        amax, bmax = float(np_.abs(a).max(initial=0.0)), float(np_.abs(b).max(initial=0.0))
        amin = float(np_.where(a != 0, np_.abs(a), np_.inf).min(initial=np_.inf))
        bmin = float(np_.where(b != 0, np_.abs(b), np_.inf).min(initial=np_.inf))
        finite = bool(np_.isfinite(a).all()) and bool(np_.isfinite(b).all())
    return finite and amax * bmax <= _F32.max and amin * bmin >= _F32.tiny


# -- built-in models ---------------------------------------------------------------------------
def _step_options(
    acc: Format, options: dict[str, Any], model: str
) -> tuple[_Rounding, dict[str, Any]]:
    known = {"mode", "subnormals", "overflow", "rng"}
    opts = {k: options.pop(k) for k in list(options) if k in known}
    return _rounding(
        acc,
        arg="acc",
        mode=opts.get("mode", "rne"),
        subnormals=opts.get("subnormals"),
        overflow=opts.get("overflow"),
        rng=opts.get("rng"),
    ), options


def _reject_unknown(options: dict[str, Any], model: str) -> None:
    if options:
        names = ", ".join(sorted(options))
        raise TypeError(f"model={model!r} got unknown option(s) {names}")


def _zeros(a: Any, b: Any, c: Any) -> Any:
    np_ = xp(a)
    shape = (*a.shape[:-1], b.shape[-1])
    return np_.zeros(shape) if c is None else np_.array(c, dtype=np_.float64)


@dataclass(frozen=True)
class _Plan:
    """Operands laid out for the k loop, and which adder performs ``round_acc(s + p)``.

    ``fast32``: the products are exact float32 numbers and ``acc`` is IEEE float32 under
    round-to-nearest-even, so float32 hardware addition is the exact step (and a product needs
    no rounding). Otherwise everything is float64 and :meth:`_Rounding.add` is the step.
    """

    a_t: Any  # (..., K, M): a transposed, so that a[..., :, k] is contiguous
    b: Any  # (..., K, N)
    fast32: bool
    r: _Rounding
    #: Whether a zero product may be +0 whatever its sign: true on the fast32 path when ``c``
    #: holds no -0, because under round-to-nearest ``s`` then never is -0, and ``s + (+-0)``
    #: is ``s`` for every other ``s``.
    plus_zero_products: bool = False
    #: Whether NumPy's einsum may run whole chains (see :func:`_einsum_chains`): NumPy arrays,
    #: exact products, and the hardware adder of ``a_t.dtype`` is the step (fast32, or a float64
    #: accumulator, whose step is the float64 adder: see :meth:`_Rounding.add`).
    einsum: bool = False

    def product(self, k: int, rows: slice) -> Any:
        x, y = self.a_t[..., k, rows], self.b[..., k, :]
        if self.plus_zero_products:
            return xp(x).einsum("...r,...n->...rn", x, y)
        return x[..., None] * y[..., None, :]

    def products(self, k0: int, k1: int, rows: slice, buf: Any) -> Any:
        """``(..., k1 - k0, rows, N)`` products, into ``buf`` when its shape fits."""
        x, y = self.a_t[..., k0:k1, rows, None], self.b[..., k0:k1, None, :]
        shape = np.broadcast_shapes(x.shape, y.shape)
        if buf is None or buf.shape != shape:
            buf = xp(x).empty(shape, dtype=x.dtype)
        if self.plus_zero_products:  # einsum's outer product is 2x faster, but 0 + x*y
            return xp(x).einsum("...kr,...kn->...krn", x[..., 0], y[..., 0, :], out=buf)
        return xp(x).multiply(x, y, out=buf)

    def leaf(self, k: int, rows: slice) -> Any:
        """``round_acc(a[k] * b[k])``."""
        p = self.product(k, rows)
        return p if self.fast32 else self.r.round(p)

    def add(self, s: Any, p: Any) -> Any:
        """``round_acc(s + p)``, in place into ``s`` where the hardware does it."""
        if self.fast32:
            return np.add(s, p, out=s) if type(s) is np.ndarray else xp(s).add(s, p, out=s)
        return self.r.add(s, p)


def _plan(a: Any, b: Any, c: Any, fmt: Format, r: _Rounding, model: str) -> _Plan:
    _check_exact_inputs(fmt, model)
    np_ = xp(a)
    fast32 = r.ieee32_rne and _products_fit_float32(a, b, fmt)
    dt = np_.float32 if fast32 else np_.float64
    a_t = np_.ascontiguousarray(np_.swapaxes(a, -1, -2), dtype=dt)
    no_neg0 = c is None or not bool(((c == 0) & np_.signbit(c)).any())
    # float64 accumulator: products exact (and finite: |product| < 2**1024) in float64
    wide = r.fmt.precision > MAX_RO_PRECISION and 2 * (fmt.emax + 1) <= 1023
    einsum = (fast32 or wide) and np_ is np and _einsum_runs_in_k_order(np.dtype(dt).name)
    b_ = np_.ascontiguousarray(b, dtype=dt)
    if einsum and not (a_t.flags.aligned and b_.flags.aligned):  # else einsum would buffer
        a_t, b_ = a_t.copy(), b_.copy()
    return _Plan(a_t, b_, fast32, r, fast32 and no_neg0, einsum)


def _by_rows(a: Any, b: Any, c: Any, plan: _Plan, body: Callable[[_Plan, Any, slice], Any]) -> Any:
    """Run ``body(plan, s_rows, rows)`` on blocks of output rows (their working set fits L2).

    Returns the sums in ``plan.a_t.dtype``."""
    np_ = xp(a)
    s = np_.ascontiguousarray(_zeros(a, b, c), dtype=plan.a_t.dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for i in builtins.range(0, s.shape[-2], _ROW_BLOCK):
            rows = slice(i, i + _ROW_BLOCK)
            s[..., rows, :] = body(plan, s[..., rows, :], rows)
    return s


def _einsum_chains(x_t: Any, y: Any, c: Any, k0: int, k1: int) -> Any:
    """``s[..., r, n]``: the chains ``s = s + x_t[..., k, r] * y[..., k, n]`` for k in [k0, k1),
    from ``s = c`` (or +0), in the dtype of ``x_t`` and ``y``, by NumPy's C einsum.

    ``einsum("kr,kn->rn", x, y, out=s)`` zero-fills ``s``, then for k (outermost), for r:
    ``s[r, :] = x[k, r] * y[k, :] + s[r, :]`` elementwise (``sum_of_products_muladd``): with the
    strides used here NumPy's iterator orders the axes n (inner), r, k (outer), so each element
    gets exactly the sequential chain, one hardware rounding (fused or not: the products are
    exact) per step. (With a single output element k becomes the inner, reduced axis, summed
    in SIMD lanes: callers exclude that case; a single output column is computed transposed, to
    keep the long axis inner.) The order is an implementation detail of NumPy, so
    :func:`_einsum_runs_in_k_order` checks it before use.

    ``c`` joins as a prefix of unit products: ``e_j * c[j, :]`` for j = 0, ..., R - 1 rebuilds
    ``c`` exactly from +0 when ``c`` is finite and holds no -0 (the caller checks), since then
    every added ``0 * c`` is a zero that changes nothing. Output rows go in tiles that stay in L1.
    """
    np_ = xp(x_t)
    M, N = x_t.shape[-1], y.shape[-1]
    if N == 1 and M > 1:  # products commute exactly: compute the transposed problem
        ct = None if c is None else np_.swapaxes(c, -1, -2)
        return np_.swapaxes(_einsum_chains(y, x_t, ct, k0, k1), -1, -2)
    s = np_.empty((*x_t.shape[:-2], M, N), dtype=x_t.dtype)
    step = max(1, _TILE_BYTES // (N * s.itemsize))
    for idx in np.ndindex(*x_t.shape[:-2]):
        x, yk, out = x_t[idx][k0:k1], y[idx][k0:k1], s[idx]
        if c is not None:  # [c rows of this tile; y[k0:k1]], c rows filled per tile
            yc = np_.empty((step + k1 - k0, N), dtype=s.dtype)
            yc[step:] = yk
        for i in builtins.range(0, M, step):
            rows = slice(i, i + step)
            if c is None:
                np_.einsum("kr,kn->rn", x[:, rows], yk, out=out[rows], optimize=False)
                continue
            r = min(step, M - i)
            yc[step - r : step] = c[idx][rows]
            xc = np_.concatenate([np_.eye(r, dtype=s.dtype), x[:, rows]])
            np_.einsum("kr,kn->rn", xc, yc[step - r :], out=out[rows], optimize=False)
    return s


@functools.cache
def _einsum_runs_in_k_order(dtype: str) -> bool:
    """Whether :func:`_einsum_chains` gives sequential chains in ``dtype`` (float32/float64).

    With ``big = 2**precision``, ``big + 1`` ties back to ``big`` and ``(big + 3) + 1`` to
    ``big + 4``: the exact chains ``big, 1, ..., 1, -big`` from 0 and from 3 end at 0 and 4,
    while sums in SIMD lanes, or any order that adds some ones before ``big``, end higher.
    """
    big = 2.0 ** (np.finfo(dtype).nmant + 1)
    col = np.array([big] + [1.0] * 9 + [-big], dtype=dtype)
    for m, n in ((2, 3), (1, 3), (3, 1), (20, 2)):
        x_t = np.ones((col.size, m), dtype=dtype)
        y = np.repeat(col[:, None], n, axis=1)
        for c, want in ((None, 0.0), (np.full((m, n), 3.0, dtype=dtype), 4.0)):
            got = _einsum_chains(x_t, y, c, 0, col.size)
            if got.shape != (m, n) or not bool((got == want).all()):
                return False
    return True


def _chain_body(k0: int, k1: int) -> Callable[[_Plan, Any, slice], Any]:
    """``s = round_acc(s + a[k] * b[k])`` for k in [k0, k1): products made _K_BLOCK at a time."""

    def body(plan: _Plan, s: Any, rows: slice) -> Any:
        buf = None
        for j0 in builtins.range(k0, k1, _K_BLOCK):
            j1 = min(k1, j0 + _K_BLOCK)
            buf = plan.products(j0, j1, rows, buf)
            for j in builtins.range(j1 - j0):
                s = plan.add(s, buf[..., j, :, :])
        return s

    return body


def _finish(s: Any, acc: Format, out: Format, r: _Rounding) -> Any:
    if _same_format(acc, out):
        return s
    fin = _rounding(
        out, arg="out", mode=r.mode, subnormals=r.subnormals, overflow=r.overflow, rng=r.rng
    )
    return fin.round(xp(s).asarray(s, dtype=xp(s).float64))


def _einsum_ok(plan: _Plan, a: Any, b: Any, c: Any) -> bool:
    """Whether :func:`_einsum_chains` computes the chains (from ``c``) of this plan."""
    if not plan.einsum or max(a.shape[-2], b.shape[-1]) < 2:  # one output: a reduction loop
        return False
    if c is None:
        return True
    np_ = xp(c)
    return bool(np_.isfinite(c).all()) and not bool(((c == 0) & np_.signbit(c)).any())


def _float64(s: Any) -> Any:
    return xp(s).asarray(s, dtype=xp(s).float64)


def _sequential(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    r, rest = _step_options(acc, dict(options), "sequential")
    _reject_unknown(rest, "sequential")
    plan = _plan(a, b, c, fmt, r, "sequential")
    if _einsum_ok(plan, a, b, c):
        with np.errstate(over="ignore", invalid="ignore"):
            s = _einsum_chains(plan.a_t, plan.b, c, 0, a.shape[-1])
    else:
        s = _by_rows(a, b, c, plan, _chain_body(0, a.shape[-1]))
    return _finish(s, acc, out, r)


def sequential(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    """FMA chain ``s = round_acc(s + a[k] * b[k])`` for k = 0, 1, ... from ``s = c`` (or +0).

    >>> import numpy as np
    >>> f16 = get_format("fp16")
    >>> float(sequential(np.array([[1.0, 2.0**-11]]), np.ones((2, 1)), None,
    ...                  fmt=f16, acc=f16, out=f16)[0, 0])
    1.0
    """
    return _float64(_sequential(a, b, c, fmt=fmt, acc=acc, out=out, **options))


def _pairwise(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    r, rest = _step_options(acc, dict(options), "pairwise")
    _reject_unknown(rest, "pairwise")
    plan = _plan(a, b, c, fmt, r, "pairwise")
    K = a.shape[-1]
    # A subtree of 2 or 3 products is a chain (p0 + p1, and (p1 + p2) + p0 by commutativity),
    # which einsum runs from +0 instead of -0: zero signs inside the tree cannot reach the result
    # when c holds no -0 (see _Plan.plus_zero_products; round to nearest only).
    chains = plan.einsum and a.ndim == 2 and b.shape[-1] >= 2 and _einsum_ok(plan, a, b, c)

    def tree(plan: _Plan, lo: int, hi: int, rows: slice) -> Any:
        if chains and 2 <= hi - lo <= 3:  # the loop order of _einsum_chains, one call
            ks = slice(lo, hi) if hi - lo == 2 else [lo + 1, lo + 2, lo]
            x, y = plan.a_t[ks, rows], plan.b[ks]
            out = xp(x).empty((x.shape[1], y.shape[1]), dtype=x.dtype)
            return xp(x).einsum("kr,kn->rn", x, y, out=out, optimize=False)
        if hi - lo == 1:
            return plan.leaf(lo, rows)
        h = (hi - lo) // 2
        return plan.add(tree(plan, lo, lo + h, rows), tree(plan, lo + h, hi, rows))

    def body(plan: _Plan, s: Any, rows: slice) -> Any:
        return plan.add(s, tree(plan, 0, K, rows)) if K else s

    return _finish(_by_rows(a, b, c, plan, body), acc, out, r)


def pairwise(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    """Recursive halving: ``T(t) = round_acc(T(t[:h]) + T(t[h:]))``, ``h = len(t) // 2``.

    Leaves are the products rounded to ``acc``; the addend (or +0) joins last:
    ``round_acc(c + T(products))`` (so an all -0 tree gives +0 except under rdown).
    """
    return _float64(_pairwise(a, b, c, fmt=fmt, acc=acc, out=out, **options))


def _blocked(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    r, rest = _step_options(acc, dict(options), "blocked")
    block = rest.pop("block", DEFAULT_BLOCK)
    _reject_unknown(rest, "blocked")
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive int, got block={block!r}")
    plan = _plan(a, b, c, fmt, r, "blocked")
    K, step = a.shape[-1], int(block)
    if _einsum_ok(plan, a, b, None):  # each chunk's chains at once, then one add per chunk
        np_ = xp(a)
        s = np_.ascontiguousarray(_zeros(a, b, c), dtype=plan.a_t.dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            for k0 in builtins.range(0, K, step):
                s = plan.add(s, _einsum_chains(plan.a_t, plan.b, None, k0, min(K, k0 + step)))
        return _finish(s, acc, out, r)

    def body(plan: _Plan, s: Any, rows: slice) -> Any:
        for k0 in builtins.range(0, K, step):
            part = _chain_body(k0, min(K, k0 + step))(plan, xp(s).zeros_like(s), rows)
            s = plan.add(s, part)
        return s

    return _finish(_by_rows(a, b, c, plan, body), acc, out, r)


def blocked(
    a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any
) -> Any:
    """Chunks of ``block`` products, each a sequential chain from +0, added in order to ``c``."""
    return _float64(_blocked(a, b, c, fmt=fmt, acc=acc, out=out, **options))


def _fast(a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any) -> Any:
    if not _same_format(acc, _F32):
        raise ValueError(f"model='fast' accumulates in float32 only, got acc={acc.name}")
    r, rest = _step_options(acc, dict(options), "fast")
    _reject_unknown(rest, "fast")
    if not r.ieee32_rne:
        raise ValueError(
            f"model='fast' is float32 hardware arithmetic: mode='rne' with default subnormals "
            f"and overflow only, got mode={r.mode.value!r}, subnormals={r.subnormals!r}, "
            f"overflow={r.overflow!r}"
        )
    if not _fits_float32(fmt):
        raise ValueError(f"model='fast' needs inputs that fit float32, got fmt={fmt.name}")
    np_ = xp(a)
    with np.errstate(over="ignore", invalid="ignore"):
        s = np_.matmul(_float32_operand(a), _float32_operand(b))
        if c is not None:
            s = s + np_.asarray(c, dtype=np_.float32)
    return _finish(s, acc, out, r)


def _float32_operand(x: Any) -> Any:
    """``x.astype(float32)`` (exact: ``x`` holds values of a format that fits float32), without
    the copy where ``x`` already is C-contiguous float32 (same layout, so the same BLAS calls)."""
    np_ = xp(x)
    return x if x.dtype == np_.float32 and x.flags.c_contiguous else x.astype(np_.float32)


def fast(a: Any, b: Any, c: Any, *, fmt: Format, acc: Format, out: Format, **options: Any) -> Any:
    """Platform BLAS in float32 (order unspecified, not bit-reproducible); acc must be float32."""
    return _float64(_fast(a, b, c, fmt=fmt, acc=acc, out=out, **options))


#: The built-in models' implementations, used by :func:`matmul`: they also take float32
#: operands (values of ``fmt``) and return the accumulator's dtype (float32 or float64).
_NATIVE: dict[Model, Model] = {
    sequential: _sequential,
    pairwise: _pairwise,
    blocked: _blocked,
    fast: _fast,
}

register_model(
    "sequential",
    sequential,
    aliases=("seq", "fma_chain"),
    description="k = 0, 1, ...: one FMA (single rounding to acc) per product",
)
register_model(
    "pairwise",
    pairwise,
    aliases=("tree",),
    description="recursive halving tree, h = n // 2, one rounding per addition",
)
register_model(
    "blocked",
    blocked,
    aliases=("block", "chunked"),
    description="sequential chains of `block` products, chunk sums added in order",
)
register_model(
    "fast",
    fast,
    aliases=("blas",),
    description="numpy.matmul in float32 (BLAS order, not bit-reproducible)",
)
