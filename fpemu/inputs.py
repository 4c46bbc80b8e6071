"""What the array functions accept: the one place that turns a user's input into a float array.

Every public function that takes values (:func:`fpemu.round`, the arithmetic of
:mod:`fpemu.arith`, :func:`fpemu.linalg.matmul`/``dot``/``sum``, :func:`fpemu.encode`,
:func:`fpemu.ulp`, :func:`fpemu.next_up`/``next_down``, the assertions of
:mod:`fpemu.testing` and :class:`fpemu.nn.Tensor`) converts its arguments here, so all of them
take the same inputs:

* float16, float32 and float64 arrays, in either byte order;
* ml_dtypes arrays: bfloat16, float8_*, float6_*, float4_e2m1fn (and ml_dtypes' int2/int4);
* integer arrays and bools (``False``/``True`` are 0 and 1). An integer that is not exactly a
  float64 (``2**53 + 1``) is a ValueError: it would be rounded before fpemu sees it;
* Python numbers and (nested) lists of them;
* anything with ``__array__`` or ``__dlpack__``; PyTorch CPU tensors of every real dtype,
  bfloat16 and float8 included (read through their bits, so exactly);
* CuPy arrays, which stay CuPy arrays (the namespace comes from :func:`fpemu.backend.xp`).

Complex, string, object and datetime data are a TypeError naming the argument and the dtype;
a torch tensor on a GPU is a TypeError that says to pass ``.cpu()`` (fpemu never moves data
between devices behind the caller's back, as :func:`fpemu.backend.xp` refuses to mix them).

Every conversion is exact: the values a function sees are the values the caller passed.

>>> import numpy as np, ml_dtypes
>>> as_float_array(3, arg="x")
array(3.)
>>> as_float_array(np.array([1.5], ">f4"), arg="x", keep32=True).dtype
dtype('float32')
>>> as_float_array(np.array([0.1], ml_dtypes.bfloat16), arg="x").tolist()
[0.10009765625]
>>> result_dtype("e4m3", np.ones(2, np.float16)), result_dtype("bf16", [1, 2])
(dtype('float16'), dtype('float64'))
>>> as_float_array(2**53 + 1, arg="x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
ValueError: x holds the integer 9007199254740993, which is not exactly a float64 ...
"""

from __future__ import annotations

import numbers
import sys
from typing import Any

import ml_dtypes
import numpy as np

from fpemu.backend import xp
from fpemu.formats import Format, FormatLike, get_format

#: What every array argument accepts (quoted by the TypeErrors).
ACCEPTED = (
    "accepted: float16/float32/float64 arrays in either byte order, ml_dtypes arrays "
    "(bfloat16, float8, float6, float4), integer or bool arrays, Python numbers and lists, "
    "objects with __array__ or __dlpack__ (CPU torch tensors), CuPy arrays"
)

_F64, _F32, _F16 = np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.float16)
_EXACT_INT = 2**53  # every integer of at most this magnitude is a float64
#: torch dtypes NumPy holds as they are (the name after "torch.").
_TORCH_NUMPY = {
    "float64", "float32", "float16", "bool",
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
}  # fmt: skip


def as_float_array(x: Any, *, arg: str, keep32: bool = False) -> Any:
    """``x`` as a float64 array of its namespace (NumPy or CuPy), holding exactly its values.

    Args:
        x: any accepted input (see the module docstring).
        arg: the argument's name, for error messages.
        keep32: return float32 instead where that loses nothing: float32 and float16 data
            and ml_dtypes floats (bfloat16, float8, ...) of at most 16 bits.

    Returns:
        A float64 (or, with ``keep32``, float32) array in native byte order; ``x`` itself when
        it already is one (never a copy to write into: callers must not modify it). Python
        scalars give 0-d arrays.

    Raises:
        TypeError: ``x`` does not hold real numbers, or is a torch tensor on a GPU.
        ValueError: an integer is not exactly a float64.

    >>> as_float_array([[1, 2], [3, 4]], arg="x").dtype
    dtype('float64')
    """
    if type(x) is np.ndarray:  # the hot path: one type check and one dtype check
        dt = x.dtype
        if dt is _F64 or (keep32 and dt is _F32):
            return x
    return _widen(as_array(x, arg=arg), arg, keep32)


def as_array(x: Any, *, arg: str) -> Any:
    """``x`` as a NumPy or CuPy array of its own element type, in native byte order.

    The dtype is checked (real numbers only) but not widened: a bfloat16 torch tensor gives
    an ml_dtypes bfloat16 array with the same bits, a Python float a 0-d float64 array.

    Raises:
        TypeError, ValueError: as :func:`as_float_array`.

    >>> as_array(np.array([1, 2], ">i4"), arg="x").dtype
    dtype('int32')
    """
    arr = x if type(x) is np.ndarray else _to_array(x, arg)
    dt = arr.dtype
    if not _real(dt):
        raise TypeError(
            f"{arg} must be a real numeric array; got {arg} with dtype {dt} ({ACCEPTED})"
        )
    if not dt.isnative:
        arr = arr.astype(dt.newbyteorder("="))
    return arr


def result_dtype(fmt: FormatLike, *inputs: Any) -> np.dtype[Any]:
    """The dtype of a result in ``fmt`` computed from ``inputs``: their float dtype, widened
    until every value of ``fmt`` fits.

    float16/float32/float64 data count as themselves; ml_dtypes floats as float32; integers,
    bools, Python numbers and lists as float64. The widest input wins, then float16, float32
    and float64 are tried in turn. :func:`fpemu.round` and :mod:`fpemu.arith` follow this rule.

    >>> result_dtype("bf16", np.float16(1)), result_dtype("fp16", np.float16(1))
    (dtype('float32'), dtype('float16'))
    """
    f = get_format(fmt)
    widest = _F16
    for i, v in enumerate(inputs):
        dt = as_array(v, arg=f"inputs[{i}]").dtype
        if dt in (_F16, _F32, _F64):
            cand = dt
        elif _ml_float(dt):
            cand = _F32 if dt.itemsize <= 2 else _F64
        else:
            cand = _F64
        widest = max(widest, cand, key=lambda d: d.itemsize)
    for dt in (_F16, _F32, _F64):
        if dt.itemsize >= widest.itemsize and fits(f, dt):
            return dt
    return _F64


def fits(f: Format, dt: np.dtype[Any]) -> bool:
    """Whether every value of ``f`` is a value of the IEEE float dtype ``dt``.

    >>> fits(get_format("bf16"), np.dtype(np.float16)), fits(get_format("bf16"), np.dtype("f4"))
    (False, True)
    """
    fi = np.finfo(dt)
    return (
        f.precision <= fi.nmant + 1
        and f.max <= float(fi.max)
        and f.emin - f.mbits >= int(fi.minexp) - int(fi.nmant)
    )


# -- conversion ---------------------------------------------------------------------------------
def _to_array(x: Any, arg: str) -> Any:
    cupy = sys.modules.get("cupy")  # as fpemu.backend.xp: only an existing cupy array counts
    if cupy is not None and isinstance(x, cupy.ndarray):
        return x
    if isinstance(x, np.ndarray):  # a subclass (matrix, masked array): its data
        return np.asarray(x)
    if _is_torch(x):
        return _from_torch(x, arg)
    if isinstance(x, (list, tuple)) or isinstance(x, (numbers.Number, np.generic)):
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError, OverflowError) as err:
            raise TypeError(f"{arg} is not a (nested) list of numbers: {err}; {ACCEPTED}") from None
        return _from_objects(arr, arg) if arr.dtype == object else arr
    try:
        if hasattr(x, "__array__"):
            return np.asarray(x)
        if hasattr(x, "__dlpack__"):
            return np.from_dlpack(x)
    except (TypeError, ValueError, RuntimeError, BufferError) as err:
        raise TypeError(
            f"{arg}: cannot read {type(x).__name__} as an array ({err}); {ACCEPTED}"
        ) from None
    arr = np.asarray(x)  # anything else: strings, None, ... are refused by the dtype check
    return _from_objects(arr, arg) if arr.dtype == object and arr.size else arr


def _from_objects(arr: np.ndarray, arg: str) -> np.ndarray:
    """A list NumPy could only store as objects (ints beyond 64 bits, mixed types): elementwise."""
    out = np.empty(arr.shape, _F64)
    flat = out.reshape(-1)
    for i, v in enumerate(arr.reshape(-1)):
        if isinstance(v, (bool, np.bool_)):
            flat[i] = float(v)
        elif isinstance(v, (int, np.integer)):
            flat[i] = _exact_int(int(v), arg)
        elif isinstance(v, (float, np.floating)) and not isinstance(v, np.longdouble):
            flat[i] = float(v)
        else:
            raise TypeError(
                f"{arg} must be a real numeric array; got {arg} with dtype object holding "
                f"{v!r} of type {type(v).__name__} ({ACCEPTED})"
            )
    return out


def _exact_int(v: int, arg: str) -> float:
    try:
        f = float(v)
    except OverflowError:
        f = float("nan")
    if f != v:
        raise ValueError(_int_message(arg, v))
    return f


def _int_message(arg: str, v: int) -> str:
    return (
        f"{arg} holds the integer {v}, which is not exactly a float64 (more than 53 significant "
        "bits); accepted: integers that float64 holds (all of magnitude <= 2**53), or floats"
    )


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "device") and hasattr(x, "dtype")


def _from_torch(t: Any, arg: str) -> Any:
    """A CPU tensor as a NumPy array with the same bits (zero-copy where NumPy has the dtype)."""
    torch = sys.modules["torch"]
    if t.device.type != "cpu":
        raise TypeError(
            f"{arg} is a torch tensor on device {t.device}; fpemu computes on the CPU (NumPy) or "
            f"on CuPy arrays and never moves data between devices itself: pass {arg}.cpu(), or "
            f"cupy.from_dlpack({arg}) to stay on the GPU"
        )
    t = t.detach().resolve_conj().resolve_neg()
    name = str(t.dtype).removeprefix("torch.")
    if name in _TORCH_NUMPY:
        return t.numpy()
    ml = getattr(ml_dtypes, name, None)  # bfloat16, float8_*: ml_dtypes spells them alike
    if ml is not None and _ml_float(np.dtype(ml)) and np.dtype(ml).itemsize == t.element_size():
        bits = {1: torch.uint8, 2: torch.int16}[t.element_size()]
        return t.view(bits).numpy().view(ml)
    raise TypeError(
        f"{arg} must be a real numeric array; got {arg} with dtype {t.dtype} ({ACCEPTED})"
    )


def _real(dt: np.dtype[Any]) -> bool:
    return dt.kind in "fiub" or _ml(dt)


def _ml(dt: np.dtype[Any]) -> bool:
    # ml_dtypes' kinds vary (float8_e5m2 says "f", bfloat16 "V"): ask for the scalar's module
    return bool(dt.type.__module__.startswith("ml_dtypes"))


def _ml_float(dt: np.dtype[Any]) -> bool:
    return _ml(dt) and "float" in dt.name


def _widen(arr: Any, arg: str, keep32: bool) -> Any:
    """An array of accepted dtype (native order) as float64, or float32 with ``keep32``."""
    dt = arr.dtype
    if dt == _F64 or (keep32 and dt == _F32):
        return arr
    narrow = keep32 and (dt in (_F32, _F16) or (_ml_float(dt) and dt.itemsize <= 2))
    if dt.kind in "iu" and dt.itemsize >= 8:
        _check_exact_ints(arr, arg)
    elif dt.kind == "f" and dt.itemsize > 8:  # long double: only its float64 values
        _check_exact_long(arr, arg)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns quietly become NaN
        return arr.astype(_F32 if narrow else _F64)


def _check_exact_ints(arr: Any, arg: str) -> None:
    """Refuse 64-bit integers with more than 53 significant bits (vectorised, exact)."""
    if not arr.size:
        return
    signed = arr.dtype.kind == "i"
    if not (arr.max() > _EXACT_INT or (signed and arr.min() < -_EXACT_INT)):
        return
    np_ = xp(arr)
    one = np_.uint64(1)
    u = arr.view(np_.uint64)
    if signed:
        u = np_.where(arr < 0, ~u + one, u)  # |v| in two's complement, also right for -2**63
    low = u & (~u + one)  # the lowest set bit (0 for 0)
    low = np_.where(low == 0, one, low)
    bad = (u // low) >= np_.uint64(_EXACT_INT)  # the odd part needs more than 53 bits
    if bool(bad.any()):
        v = int(arr[bad].reshape(-1)[0])
        raise ValueError(_int_message(arg, v))


def _check_exact_long(arr: np.ndarray, arg: str) -> None:
    with np.errstate(all="ignore"):
        back = arr.astype(_F64).astype(arr.dtype)
    bad = (back != arr) & ~np.isnan(arr)
    if bool(bad.any()):
        v = arr[bad].reshape(-1)[0]
        raise ValueError(f"{arg} holds {v!r} ({arr.dtype}), which is not a float64; round it first")
