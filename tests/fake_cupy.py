"""A stand-in for CuPy on the CPU: a second array namespace that delegates to NumPy.

Installed as ``sys.modules["cupy"]`` it makes :func:`fpemu.backend.xp` return it for
:class:`FakeArray` inputs, so tests can prove that array code takes its namespace from its
input, without a GPU. It behaves like CuPy where that matters for dispatch:

* a :class:`FakeArray` is *not* a ``numpy.ndarray``; its functions return FakeArrays (0-d
  arrays, not NumPy scalars, from reductions);
* ``numpy.asarray(fake)`` (``__array__``) is refused, as CuPy refuses implicit transfers;
* a NumPy array given to a ``cupy.*`` function or mixed with a FakeArray in an operator is
  refused, as CuPy refuses it;
* ``numpy.<func>(fake)`` works through ``__array_function__``/``__array_ufunc__`` (NEP 18/13),
  as it does on CuPy, but each such call is recorded: it bypasses ``xp()``.

Every event is recorded with the first fpemu source line (file:line) on the stack. With
``strict=False`` the refused operations are recorded and then carried out on the host instead,
so one run lists every offending line.
"""

from __future__ import annotations

import inspect
import linecache
import operator
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

_HOST_TO_DEVICE = {"asarray", "array", "asanyarray", "ascontiguousarray"}
_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Event:
    """One recorded dispatch problem.

    Attributes:
        kind: ``"implicit"`` (numpy.asarray of a device array), ``"mixed"`` (a NumPy array
            given to the device namespace), or ``"numpy-call"`` (numpy.<name> on a device array).
        name: the function or operator involved.
        where: ``path:line`` of the first fpemu frame (or the first non-helper frame).
        line: that source line.
    """

    kind: str
    name: str
    where: str
    line: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind} {self.name}: {self.line}"


@dataclass
class Recorder:
    """Calls made through the fake namespace and dispatch events."""

    strict: bool = True
    calls: Counter[str] = field(default_factory=Counter)
    events: list[Event] = field(default_factory=list)

    def event(self, kind: str, name: str) -> None:
        frame = inspect.currentframe()
        first: tuple[str, str] | None = None
        while frame is not None:
            fn = frame.f_code.co_filename
            if fn != __file__ and "/numpy/" not in fn:
                try:
                    rel = str(Path(fn).resolve().relative_to(_ROOT))
                except ValueError:
                    rel = fn
                here = (f"{rel}:{frame.f_lineno}", linecache.getline(fn, frame.f_lineno).strip())
                if rel.startswith("fpemu/"):
                    first = here
                    break
                first = first or here
            frame = frame.f_back
        where, line = first or ("?", "")
        self.events.append(Event(kind, name, where, line))

    def fatal(self) -> list[Event]:
        """Events that real CuPy refuses with a TypeError."""
        return [e for e in self.events if e.kind in ("implicit", "mixed")]

    def numpy_calls(self) -> list[Event]:
        """``numpy.<name>(device array)`` calls: work on CuPy via NEP 13/18, bypass xp()."""
        return [e for e in self.events if e.kind == "numpy-call"]


class FakeArray:
    """A device array: wraps a NumPy array, is not one."""

    __slots__ = ("_a",)
    __module__ = "cupy._core.core"  # where cupy.ndarray lives: fpemu.backend.to_numpy looks
    _rec: Recorder = Recorder()

    def __init__(self, a: np.ndarray) -> None:
        self._a = a

    # -- conversions that CuPy refuses or restricts
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        self._rec.event("implicit", "numpy.asarray")
        if self._rec.strict:
            raise TypeError(
                "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to "
                "construct a NumPy array explicitly. (fake cupy)"
            )
        return self._a if dtype is None else self._a.astype(dtype)

    def get(self) -> np.ndarray:
        return self._a.copy()

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        # Operators on NumPy scalars (np.float64(2) * x) arrive here too; only an explicit
        # numpy.<ufunc>(...) call in the source line counts as bypassing xp().
        caller = _caller_line()
        if f"np.{ufunc.__name__}" in caller or f"numpy.{ufunc.__name__}" in caller:
            self._rec.event("numpy-call", f"numpy.{ufunc.__name__}")
        args = _unwrap(inputs, self._rec, f"numpy.{ufunc.__name__}")
        kw = _unwrap(kwargs, self._rec, f"numpy.{ufunc.__name__}")
        return _wrap(getattr(ufunc, method)(*args, **kw))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        self._rec.event("numpy-call", f"numpy.{func.__name__}")
        name = f"numpy.{func.__name__}"
        return _wrap(func(*_unwrap(args, self._rec, name), **_unwrap(kwargs, self._rec, name)))

    # -- attributes and methods delegate, results stay on the "device"
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # no __array_interface__ / __array_struct__: not host memory
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if callable(attr):
            rec = self._rec

            def method(*args: Any, **kwargs: Any) -> Any:
                rec.calls[f"ndarray.{name}"] += 1
                n = f"ndarray.{name}"
                return _wrap(attr(*_unwrap(args, rec, n), **_unwrap(kwargs, rec, n)))

            return method
        return _wrap(attr) if isinstance(attr, np.ndarray) else attr

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self._a[_unwrap(key, self._rec, "getitem")])

    def __setitem__(self, key: Any, value: Any) -> None:
        # CuPy accepts a NumPy value here (an explicit-enough host-to-device copy).
        v = value._a if isinstance(value, FakeArray) else value
        self._a[_unwrap(key, self._rec, "setitem")] = v

    def __len__(self) -> int:
        return len(self._a)

    def __iter__(self) -> Any:
        return (_wrap(x) for x in self._a)

    def __bool__(self) -> bool:
        return bool(self._a)

    def __float__(self) -> float:
        return float(self._a)

    def __int__(self) -> int:
        return int(self._a)

    def __index__(self) -> int:
        return operator.index(self._a.item())

    def __repr__(self) -> str:
        return f"fake_cupy.{self._a!r}"

    __hash__ = None  # type: ignore[assignment]


def _caller_line() -> str:
    frame = inspect.currentframe()
    while frame is not None:
        fn = frame.f_code.co_filename
        if fn != __file__ and "/numpy/" not in fn:
            return linecache.getline(fn, frame.f_lineno)
        frame = frame.f_back
    return ""


def _unwrap(x: Any, rec: Recorder, name: str, *, host_ok: bool = False) -> Any:
    if isinstance(x, FakeArray):
        return x._a
    if isinstance(x, np.ndarray) and not host_ok:
        rec.event("mixed", name)
        if rec.strict:
            raise TypeError(f"Unsupported type {type(x)} (fake cupy: {name} got a NumPy array)")
        return x
    if isinstance(x, tuple):
        return tuple(_unwrap(v, rec, name, host_ok=host_ok) for v in x)
    if isinstance(x, list):
        return [_unwrap(v, rec, name, host_ok=host_ok) for v in x]
    if isinstance(x, dict):
        return {k: _unwrap(v, rec, name, host_ok=host_ok) for k, v in x.items()}
    return x


def _wrap(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return FakeArray(x)
    if isinstance(x, np.generic):
        return FakeArray(np.asarray(x))  # CuPy reductions give 0-d arrays, not scalars
    if isinstance(x, tuple):
        return tuple(_wrap(v) for v in x)
    return x


def _binary(ufunc: np.ufunc, reflected: bool = False) -> Callable[[FakeArray, Any], Any]:
    def op(self: FakeArray, other: Any) -> Any:
        self._rec.calls[ufunc.__name__] += 1
        o = _unwrap(other, self._rec, f"operator {ufunc.__name__}")
        return _wrap(ufunc(o, self._a) if reflected else ufunc(self._a, o))

    return op


def _inplace(ufunc: np.ufunc) -> Callable[[FakeArray, Any], Any]:
    def op(self: FakeArray, other: Any) -> Any:
        self._rec.calls[ufunc.__name__] += 1
        ufunc(self._a, _unwrap(other, self._rec, f"operator {ufunc.__name__}"), out=self._a)
        return self

    return op


def _unary(ufunc: np.ufunc) -> Callable[[FakeArray], Any]:
    def op(self: FakeArray) -> Any:
        self._rec.calls[ufunc.__name__] += 1
        return _wrap(ufunc(self._a))

    return op


_BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "truediv": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "pow": np.power, "matmul": np.matmul,
    "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
    "lshift": np.left_shift, "rshift": np.right_shift,
}  # fmt: skip
for _n, _u in _BINARY.items():
    setattr(FakeArray, f"__{_n}__", _binary(_u))
    setattr(FakeArray, f"__r{_n}__", _binary(_u, reflected=True))
    setattr(FakeArray, f"__i{_n}__", _inplace(_u))
for _n, _u in {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}.items():  # fmt: skip
    setattr(FakeArray, f"__{_n}__", _binary(_u))
for _n, _u in {"neg": np.negative, "pos": np.positive, "abs": np.absolute,
               "invert": np.invert}.items():  # fmt: skip
    setattr(FakeArray, f"__{_n}__", _unary(_u))


class FakeCupy(ModuleType):
    """The ``cupy`` module stand-in: every NumPy function, on FakeArrays."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__("cupy")
        self.ndarray = FakeArray
        self.recorder = recorder

    def asnumpy(self, x: Any) -> np.ndarray:
        return x.get() if isinstance(x, FakeArray) else np.asarray(x)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("cuda", "random", "linalg", "fft", "testing"):
            raise AttributeError(name)
        attr = getattr(np, name)
        if isinstance(attr, type) or not callable(attr):
            return attr  # dtypes (cupy.float64 is numpy.float64), constants
        rec = self.recorder

        def fn(*args: Any, **kwargs: Any) -> Any:
            rec.calls[name] += 1
            host = name in _HOST_TO_DEVICE
            a = _unwrap(args, rec, f"cupy.{name}", host_ok=host)
            k = _unwrap(kwargs, rec, f"cupy.{name}", host_ok=host)
            out = attr(*a, **k)
            if host and isinstance(out, np.ndarray) and any(x is out for x in a):
                out = out.copy()  # a device copy never aliases host memory
            return _wrap(out)

        return fn


def install(strict: bool = True) -> FakeCupy:
    """Make a fresh fake ``cupy`` module (the caller puts it in ``sys.modules``)."""
    rec = Recorder(strict=strict)
    FakeArray._rec = rec
    return FakeCupy(rec)


def to_device(x: Any) -> FakeArray:
    """A FakeArray copy of a NumPy array (``cupy.asarray``)."""
    return FakeArray(np.array(x, copy=True))


def is_device(x: Any) -> bool:
    """Whether ``x`` is a FakeArray (not silently a NumPy array)."""
    return isinstance(x, FakeArray)
