"""NumPy mirrors of the scaling kernels: the exact float32 arithmetic each framework does.

Every function here reproduces one piece of framework C++/Python arithmetic bit for bit:
which dtype a product is taken in, where a value is rounded to float32, and which values are
checked for inf/NaN. They are shared by the scaler classes of :mod:`fpemu.amp.scaling`.

>>> import numpy as np
>>> float(reciprocal_f32(np.float32(3.0)))  # torch: scale.double().reciprocal().float()
0.3333333432674408
"""

from __future__ import annotations

from typing import Any

import numpy as np

F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
FLT_MAX = float(np.finfo(np.float32).max)


def quiet() -> Any:
    """An ``np.errstate`` that silences overflow/invalid/divide warnings: inf and NaN are data."""
    return np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore")


def is_float_dtype(dtype: np.dtype[Any]) -> bool:
    """Whether ``dtype`` is a gradient dtype the scalers handle: float16/32/64 or bfloat16."""
    return dtype in (F16, F32, F64) or dtype.name == "bfloat16"


def to_f32(value: float) -> np.float32:
    """Round a Python float to float32 (RNE, overflow to inf), silently, like a C++ cast."""
    with quiet():
        return np.float32(np.float64(value))


def to_f32_checked(value: float) -> np.float32:
    """Round to float32 the way torch's ``fill_``/``torch.full`` do: overflow is an error.

    c10's ``checked_convert<float, double>`` refuses any finite value beyond +-FLT_MAX
    (infinities and NaN pass through).

    Raises:
        RuntimeError: ``value`` is finite and larger in magnitude than the float32 maximum.
    """
    v = float(value)
    if np.isfinite(v) and abs(v) > FLT_MAX:
        raise RuntimeError("value cannot be converted to type float without overflow")
    return to_f32(v)


def reciprocal_f32(scale: np.float32) -> np.float32:
    """torch's inverse scale: the reciprocal taken in float64, then rounded to float32.

    torch/amp/grad_scaler.py ``unscale_``: ``self._scale.double().reciprocal().float()``.
    A zero scale gives inf; a float32 subnormal scale gives a reciprocal that overflows to inf.
    """
    with quiet():
        return np.float32(np.reciprocal(np.float64(scale)))


def loss_array(x: Any) -> np.ndarray:
    """A loss value as an array: Python floats become float32 (torch's default dtype).

    Python ints and bools become int64 and bool arrays; NumPy arrays and scalars keep their dtype.
    """
    if isinstance(x, np.generic | np.ndarray):
        return np.asarray(x)
    if isinstance(x, bool | int):
        return np.asarray(x, dtype=np.bool_ if isinstance(x, bool) else np.int64)
    if isinstance(x, float):
        return np.asarray(x, dtype=F32)
    raise TypeError(f"loss must be a number or a NumPy array, got {type(x).__name__}")


def _non_float_to_f32(a: np.ndarray, what: str) -> np.ndarray | None:
    """Integers and bools promote to float32; other non-float dtypes are refused."""
    if a.dtype.kind in "biu":
        return a.astype(F32)
    if not is_float_dtype(a.dtype):
        raise TypeError(f"{what} has dtype {a.dtype}; accepted: float16/32/64, bfloat16, integers")
    return None


def torch_scalar_op(x: Any, scale: np.float32, op: Any = np.multiply) -> np.ndarray:
    """``x * scale`` (or ``op(x, scale)``) with torch's promotion against a 0-d float32 tensor.

    A 0-d ``x`` promotes with the scale (float16/bfloat16 -> float32, float64 stays); an n-d
    ``x`` keeps its dtype, and a float16/bfloat16 one is computed in float32 ("opmath": the CPU
    kernels read the 0-d scale as a float scalar) and rounded once to its dtype. Integers
    promote to float32. ``op`` is ``np.multiply`` (GradScaler.scale) or ``np.divide``
    (Keras's ``ops.divide`` on the torch backend, a true division on CPU).
    """
    a = loss_array(x)
    promoted = _non_float_to_f32(a, "outputs")
    if promoted is not None:
        a = promoted
    out_dtype = a.dtype if a.ndim > 0 else (F64 if a.dtype == F64 else F32)
    with quiet():
        if out_dtype == F64:
            return np.asarray(op(a.astype(F64), np.float64(scale)))
        return np.asarray(op(a.astype(F32), scale).astype(out_dtype))


def torch_multiply(x: Any, scale: np.float32) -> np.ndarray:
    """``outputs * scale`` as torch's ``GradScaler.scale`` computes it (see
    :func:`torch_scalar_op`).

    >>> torch_multiply(np.array([1.0009765625], dtype=np.float16), np.float32(3.0)).tolist()
    [3.00390625]
    """
    return torch_scalar_op(x, scale)


def any_nonfinite(arrays: list[np.ndarray]) -> bool:
    """Whether any element of any array is inf or NaN (checked in float32 for 16-bit dtypes)."""
    for a in arrays:
        wide = a if a.dtype in (F32, F64) else a.astype(F32)
        if not bool(np.isfinite(wide).all()):
            return True
    return False


def unscale_by_reciprocal(arrays: list[np.ndarray], inv: np.float32) -> list[np.ndarray]:
    """torch's ``_amp_foreach_non_finite_check_and_unscale_`` multiply: each grad times ``inv``.

    aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp: float32 grads are multiplied in float32,
    float64 grads in float64 (the float inv widened), and float16/bfloat16 grads in float32
    ("opmath") with one rounding back to their dtype. An ``inv`` of exactly 1 leaves values
    untouched. The dtype of every grad is kept.
    """
    out = []
    with quiet():
        for a in arrays:
            if inv == np.float32(1.0):
                out.append(a.copy())
            elif a.dtype == F64:
                out.append(a * np.float64(inv))
            elif a.dtype == F32:
                out.append(a * inv)
            else:
                out.append((a.astype(F32) * inv).astype(a.dtype))
    return out
