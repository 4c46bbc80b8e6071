"""Every public array function takes the same inputs (fpemu.inputs): a table of input kinds x
functions, bit-compared against the float64 path on the exactly widened values.

The expected values are computed independently of fpemu's conversion: each kind's values are
widened by its own library (``numpy``/``ml_dtypes`` ``astype(float64)``, torch's ``.double()``,
Python ``float``), then the function runs on that float64 array, the path every other test file
checks against the oracle. The expected dtypes restate the documented rule
(docs/formats-and-rounding.md, "What inputs are accepted, what comes out") as a table.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
import pytest

import fpemu
from fpemu import arith
from fpemu.inputs import as_array, as_float_array
from fpemu.linalg import dot, matmul
from fpemu.linalg import sum as fsum
from fpemu.nn import Tensor
from fpemu.testing import assert_bitwise_equal, assert_representable, assert_ulp_close, ulp_distance

RNG = np.random.default_rng(20261123)
F16, F32, F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


class Kind(NamedTuple):
    """An input of one kind, its values widened independently, and its dtype category."""

    x: Any
    ref: np.ndarray  # the values as float64, widened by the kind's own library
    cat: str  # "f64", "f32", "f16", "ml" (ml_dtypes floats), "int" (ints, bools, Python)
    fmt: str  # the format of the data (Tensor's default format)


def _values(dtype: Any, shape: tuple[int, ...] = (4, 3)) -> np.ndarray:
    """Random finite values exact in ``dtype`` (built in float64, then rounded by its library)."""
    top = float(ml_dtypes.finfo(dtype).max) / 2  # type: ignore[no-untyped-call]
    v = RNG.normal(size=shape) * 2.0 ** RNG.integers(-6, 6, size=shape)
    out: np.ndarray = np.clip(v, -top, top).astype(dtype)
    return out


def _numpy(dtype: Any, cat: str, fmt: str, order: str = "=") -> Callable[[], Kind]:
    def make() -> Kind:
        a = _values(dtype)
        ref = a.astype(np.float64)  # numpy's / ml_dtypes' own exact widening
        if order != "=":
            a = a.astype(np.dtype(dtype).newbyteorder(order))
        return Kind(a, ref, cat, fmt)

    return make


def _ints(dtype: Any) -> Callable[[], Kind]:
    def make() -> Kind:
        info = np.iinfo(dtype)
        a = RNG.integers(max(info.min, -1000), min(info.max, 1000), size=(4, 3)).astype(dtype)
        return Kind(a, np.array(a.tolist(), dtype=np.float64), "int", "float64")

    return make


def _torch(name: str, cat: str, fmt: str, **kw: Any) -> Callable[[], Kind]:
    def make() -> Kind:
        torch = pytest.importorskip("torch")
        dt = getattr(torch, name)
        if dt.is_floating_point:
            t = torch.from_numpy(_values(np.float32)).to(dt)  # torch rounds to its dtype
        else:
            t = torch.randint(-100, 100, (4, 3), dtype=dt)
        ref = t.double().numpy().copy()  # torch's own exact widening
        if kw.get("grad"):
            t = t.clone().requires_grad_(True)
        if kw.get("transposed"):
            t, ref = t.t().contiguous().t(), ref  # same values, non-contiguous strides
        return Kind(t, ref, cat, fmt)

    return make


class HasArray:
    """A foreign array type that only offers ``__array__``."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.a if dtype is None else self.a.astype(dtype)


class HasDLPack:
    """A foreign array type that only offers the DLPack protocol."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack__(self, **kw: Any) -> Any:
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.a.__dlpack_device__()


def _foreign(cls: type) -> Callable[[], Kind]:
    def make() -> Kind:
        a = _values(np.float32)
        return Kind(cls(a), a.astype(np.float64), "f32", "float32")

    return make


def _list(ints: bool) -> Callable[[], Kind]:
    def make() -> Kind:
        a = RNG.integers(-50, 50, size=(4, 3)) if ints else _values(np.float64)
        lst = a.tolist()
        return Kind(lst, np.array([[float(v) for v in row] for row in lst]), "int", "float64")

    return make


def _strided() -> Kind:
    a = _values(np.float64, (4, 6))[:, ::2]
    return Kind(a, np.array(a.tolist()), "f64", "float64")


def _be_ints() -> Kind:
    k = _ints(np.int32)()
    return k._replace(x=k.x.astype(">i4"))


def _bools() -> Kind:
    a = RNG.integers(0, 2, size=(4, 3)).astype(bool)
    return Kind(a, np.where(a, 1.0, 0.0), "int", "float64")


ARRAY_KINDS: dict[str, Callable[[], Kind]] = {
    "float64": _numpy(np.float64, "f64", "float64"),
    ">f8": _numpy(np.float64, "f64", "float64", ">"),
    "float64-strided": _strided,
    "float32": _numpy(np.float32, "f32", "float32"),
    ">f4": _numpy(np.float32, "f32", "float32", ">"),
    "float16": _numpy(np.float16, "f16", "float16"),
    ">f2": _numpy(np.float16, "f16", "float16", ">"),
    "bfloat16": _numpy(ml_dtypes.bfloat16, "ml", "bfloat16"),
    "float8_e4m3fn": _numpy(ml_dtypes.float8_e4m3fn, "ml", "float8_e4m3fn"),
    "float8_e5m2": _numpy(ml_dtypes.float8_e5m2, "ml", "float8_e5m2"),
    "float6_e2m3fn": _numpy(ml_dtypes.float6_e2m3fn, "ml", "float6_e2m3fn"),
    "float4_e2m1fn": _numpy(ml_dtypes.float4_e2m1fn, "ml", "float4_e2m1fn"),
    "int64": _ints(np.int64),
    ">i4": _be_ints,
    "uint8": _ints(np.uint8),
    "bool": _bools,
    "list-float": _list(False),
    "list-int": _list(True),
    "__array__": _foreign(HasArray),
    "__dlpack__": _foreign(HasDLPack),
    "torch-float32": _torch("float32", "f32", "float32"),
    "torch-float64-grad": _torch("float64", "f64", "float64", grad=True),
    "torch-float16": _torch("float16", "f16", "float16"),
    "torch-bfloat16": _torch("bfloat16", "ml", "bfloat16"),
    "torch-bfloat16-strided": _torch("bfloat16", "ml", "bfloat16", transposed=True),
    "torch-float8_e4m3fn": _torch("float8_e4m3fn", "ml", "float8_e4m3fn"),
    "torch-float8_e5m2": _torch("float8_e5m2", "ml", "float8_e5m2"),
    "torch-int32": _torch("int32", "int", "float64"),
}


SCALAR_KINDS: dict[str, Callable[[], Kind]] = {
    "python-float": lambda: Kind(0.3, np.array(0.3), "int", "float64"),
    "python-int": lambda: Kind(3, np.array(3.0), "int", "float64"),
    "python-bool": lambda: Kind(True, np.array(1.0), "int", "float64"),
    "python-int-2**60": lambda: Kind(2**60, np.array(2.0**60), "int", "float64"),
    "numpy-float32": lambda: Kind(
        np.float32(0.3), np.array(float(np.float32(0.3))), "f32", "float32"
    ),
    "numpy-float16": lambda: Kind(
        np.float16(0.3), np.array(float(np.float16(0.3))), "f16", "float16"
    ),
    "numpy-int64-min": lambda: Kind(np.int64(-(2**63)), np.array(-(2.0**63)), "int", "float64"),
}


def _torch_scalar() -> Kind:
    torch = pytest.importorskip("torch")
    t = torch.tensor(0.3, dtype=torch.bfloat16)
    return Kind(t, np.array(t.double().item()), "ml", "bfloat16")


SCALAR_KINDS["torch-0d-bfloat16"] = _torch_scalar
ALL_KINDS = {**ARRAY_KINDS, **SCALAR_KINDS}

#: The documented result dtype of round / arith, per dtype category and format.
FITS_F16 = {"e4m3": True, "bf16": False}


def want_dtype(cat: str, fmt: str) -> np.dtype[Any]:
    if cat == "f16":
        return F16 if FITS_F16[fmt] else F32
    if cat in ("f32", "ml"):
        return F32
    return F64


def same_bits(got: Any, want: np.ndarray, dtype: np.dtype[Any] | None = None) -> None:
    """``got`` has ``want``'s shape, the given dtype, and ``want``'s bits in that dtype."""
    w = np.asarray(want)
    if dtype is not None:
        w = w.astype(dtype)
    assert type(got) is not np.ndarray or got.shape == w.shape, (got.shape, w.shape)
    g = np.asarray(got)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    assert g.shape == w.shape, (g.shape, w.shape)
    u = f"u{w.dtype.itemsize}"
    assert np.array_equal(g.view(u), w.view(u)), (g, w)


def _scalar_result(k: Kind, got: Any) -> None:
    """Scalars give NumPy scalars (0-d arrays never leak out)."""
    if k.ref.ndim == 0:
        assert isinstance(got, np.generic), type(got)


# -- the table ----------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", list(ALL_KINDS))
@pytest.mark.parametrize("fmt", ["bf16", "e4m3"])
def test_round(kind: str, fmt: str) -> None:
    k = ALL_KINDS[kind]()
    got = fpemu.round(k.x, fmt)
    same_bits(got, fpemu.round(k.ref, fmt), want_dtype(k.cat, fmt))
    _scalar_result(k, got)
    got = fpemu.round(k.x, fmt, mode="rtz")  # the general path too
    same_bits(got, fpemu.round(k.ref, fmt, mode="rtz"), want_dtype(k.cat, fmt))


@pytest.mark.parametrize("kind", list(ALL_KINDS))
def test_arith(kind: str) -> None:
    k = ALL_KINDS[kind]()
    fmt = "e4m3" if k.cat != "f16" else "bf16"  # both dtype rules of float16 data
    want = want_dtype(k.cat, fmt)
    for op, args, ref_args in (
        ("add", (k.x, k.x), (k.ref, k.ref)),
        ("sub", (k.x, 0.25), (k.ref, 0.25)),
        ("mul", (k.x, k.x), (k.ref, k.ref)),
        ("div", (k.x, 3), (k.ref, 3.0)),
        ("sqrt", (k.x,), (k.ref,)),  # negative values give NaN on both sides
        ("fma", (k.x, k.x, k.x), (k.ref, k.ref, k.ref)),
        ("cast", (k.x,), (k.ref,)),
    ):
        with np.errstate(invalid="ignore"):
            got = getattr(arith, op)(*args, fmt=fmt)
            expected = getattr(arith, op)(*ref_args, fmt=fmt)
        # a Python operand (0.25, 3) counts as float64: it widens the result of narrow data
        dt = F64 if op in ("sub", "div") else want
        same_bits(got, expected, dt)
        _scalar_result(k, got)


@pytest.mark.parametrize("kind", list(ARRAY_KINDS))
def test_matmul_dot_sum(kind: str) -> None:
    k = ARRAY_KINDS[kind]()
    for fmt in ("fp16", "bf16"):
        same_bits(matmul(k.x, k.x.T if hasattr(k.x, "T") else k.ref.T, fmt=fmt),
                  matmul(k.ref, k.ref.T, fmt=fmt))  # fmt: skip
        same_bits(dot(k.x, k.x, fmt=fmt), dot(k.ref, k.ref, fmt=fmt))
        same_bits(fsum(k.x, fmt=fmt, axis=0), fsum(k.ref, fmt=fmt, axis=0))
        same_bits(
            matmul(k.ref, k.ref.T, fmt=fmt, c=k.x[:, :1] if hasattr(k.x, "T") else None),
            matmul(k.ref, k.ref.T, fmt=fmt, c=k.ref[:, :1] if hasattr(k.x, "T") else None),
        )


@pytest.mark.parametrize("kind", list(ALL_KINDS))
def test_bits(kind: str) -> None:
    k = ALL_KINDS[kind]()
    same_bits(fpemu.encode(k.x, "float64"), k.ref.view(np.uint64))  # numpy's own bits
    for fn in (fpemu.ulp, fpemu.next_up, fpemu.next_down):
        got = fn(k.x, "bf16")
        same_bits(got, fn(k.ref, "bf16"), F64)
        _scalar_result(k, got)


@pytest.mark.parametrize("kind", list(ALL_KINDS))
def test_testing_assertions(kind: str) -> None:
    k = ALL_KINDS[kind]()
    assert_bitwise_equal(k.x, k.ref, "float64")
    assert_bitwise_equal(k.x, k.ref)  # the format from the dtypes
    assert_ulp_close(k.x, k.ref, "float64", max_ulp=0)
    assert np.all(ulp_distance(k.x, k.ref, "float64") == 0)
    assert_representable(k.x, k.fmt)
    off = k.ref.copy()
    off.reshape(-1)[0] = np.nextafter(off.reshape(-1)[0], np.inf)  # one ulp of float64 away
    with pytest.raises(AssertionError, match="Mismatched elements: 1 /"):
        assert_bitwise_equal(k.x, off, "float64")
    assert int(np.max(ulp_distance(k.x, off, "float64"))) == 1


@pytest.mark.parametrize("kind", list(ALL_KINDS))
def test_tensor(kind: str) -> None:
    k = ALL_KINDS[kind]()
    t = Tensor(k.x)
    assert t.fmt.name == k.fmt
    work = F64 if k.fmt == "float64" else F32  # every data format but float64 fits float32
    same_bits(t.data, k.ref, work)
    t = Tensor(k.x, "e4m3")
    same_bits(t.data, fpemu.round(k.ref, "e4m3"), F32)


# -- what comes out -----------------------------------------------------------------------------
def test_round_result_dtypes_follow_the_documented_rule() -> None:
    wide = fpemu.Format("e11m40", ebits=11, mbits=40, bias=1023)
    h = np.array([0.1, 3.0], np.float16)
    assert fpemu.round(h, "fp16").dtype == F16 and fpemu.round(h, "bf16").dtype == F32
    assert fpemu.round(h, wide).dtype == F64  # float16 data widen as far as the format needs
    assert fpemu.round(np.array([0.1], ml_dtypes.bfloat16), wide).dtype == F64
    with pytest.raises(ValueError, match="pass x as float64"):  # float32 data: same dtype out
        fpemu.round(np.ones(2, np.float32), wide)
    with pytest.raises(ValueError, match="pass x as float64"):
        fpemu.round(np.ones(2, ">f4"), wide)
    assert isinstance(fpemu.round(3, "bf16"), np.float64)
    assert isinstance(fpemu.round(np.float32(3), "bf16"), np.float32)


def test_specials_and_signalling_nans_convert_quietly() -> None:
    bits = np.array(
        [0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0x8000], np.uint16
    )  # inf, -inf, qNaN, sNaN, -0
    bf = bits.view(ml_dtypes.bfloat16)
    got = fpemu.round(bf, "e5m2")  # filterwarnings=error: any RuntimeWarning fails here
    assert got.dtype == F32
    assert np.isposinf(got[0]) and np.isneginf(got[1]) and np.isnan(got[2:4]).all()
    assert got[4] == 0 and np.signbit(got[4])
    h = np.array([0x7C01, 0x7E00], np.uint16).view(np.float16)  # sNaN, qNaN
    assert np.isnan(as_float_array(h, arg="x")).all()


def test_huge_exact_integers_are_accepted() -> None:
    for v in (2**53, 2**60, -(2**63), 2**64, 2**70, -(2**1000)):
        assert float(fpemu.round(v, "fp64")) == float(v)
    got = as_float_array(np.array([-(2**63), 2**62, 2**53], np.int64), arg="x")
    same_bits(got, np.array([-(2.0**63), 2.0**62, 2.0**53]))
    got = as_float_array(np.array([2**64 - 2**11, 2**63], np.uint64), arg="x")
    same_bits(got, np.array([2.0**64 - 2.0**11, 2.0**63]))
    same_bits(as_float_array([1, 2**70], arg="x"), np.array([1.0, 2.0**70]))
    # keep32 narrows only data that float32 holds exactly: never integers
    x, want = np.array([2**24 + 1, 2**40 + 1], np.int64), np.array([2.0**24 + 1, 2.0**40 + 1])
    same_bits(as_float_array(x, arg="x", keep32=True), want)
    same_bits(Tensor(x).data, want)


# -- what is refused ----------------------------------------------------------------------------
BAD_INTS = [
    (2**53 + 1, "9007199254740993"),
    (-(2**53) - 1, "-9007199254740993"),
    (np.array([1, 2**63 - 1], np.int64), "9223372036854775807"),
    (np.array([2**64 - 1], np.uint64), "18446744073709551615"),
    (np.array([2**60 + 1], ">i8"), "1152921504606846977"),
    ([[1, 2], [3, 2**70 + 1]], "1180591620717411303425"),
    (2**1024, str(2**1024)),
]


@pytest.mark.parametrize(("value", "text"), BAD_INTS)
def test_inexact_integers_are_value_errors(value: Any, text: str) -> None:
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("x", lambda: fpemu.round(value, "bf16")),
        ("y", lambda: arith.mul(1.0, value, fmt="bf16")),
        ("x", lambda: fpemu.encode(value, "fp64")),
        ("x", lambda: fpemu.ulp(value, "bf16")),
        ("desired", lambda: assert_bitwise_equal(1.0, value)),
        ("data", lambda: Tensor(value)),
    ]
    if isinstance(value, np.ndarray):
        calls.append(("b", lambda: matmul(np.ones((2, 1)), value.reshape(1, -1))))
    for arg, call in calls:
        with pytest.raises(ValueError, match=rf"^{arg} holds the integer {text}, which is not "
                           r"exactly a float64.*accepted: "):  # fmt: skip
            call()


BAD_DTYPES = [
    (np.ones(2, complex), "complex128"),
    (np.array(["a", "b"]), "<U1"),
    (np.array([1.0, None], dtype=object), "object"),
    (np.array(["2026-11-23"], dtype="datetime64[D]"), "datetime64"),
    ("abc", "<U3"),
    (1 + 2j, "complex128"),
    ([1.0, "a"], "<U32"),
    ([1, None], "object holding None"),
]


@pytest.mark.parametrize(("value", "dtype"), BAD_DTYPES)
def test_non_real_data_are_type_errors(value: Any, dtype: str) -> None:
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("x", lambda: fpemu.round(value, "bf16")),
        ("x", lambda: arith.add(value, 1.0, fmt="bf16")),
        ("z", lambda: arith.fma(1.0, 1.0, value, fmt="bf16")),
        ("x", lambda: arith.cast(value, "bf16")),
        ("x", lambda: fpemu.encode(value, "fp16")),
        ("codes", lambda: fpemu.decode(value, "fp16")),
        ("x", lambda: fpemu.next_up(value, "fp16")),
        ("x", lambda: fpemu.next_down(value, "fp16")),
        ("actual", lambda: assert_bitwise_equal(value, 1.0)),
        ("b", lambda: ulp_distance(1.0, value, "fp16")),
        ("desired", lambda: assert_ulp_close(1.0, value, "fp16")),
        ("x", lambda: assert_representable(value, "fp16")),
        ("data", lambda: Tensor(value)),
    ]
    if np.ndim(value):
        calls += [
            ("a", lambda: matmul(value, np.ones((2, 2)))),
            ("c", lambda: matmul(np.ones((1, 2)), np.ones((2, 2)), c=value)),
            ("x", lambda: fsum(value)),
        ]
    for arg, call in calls:
        with pytest.raises(TypeError, match=rf"^{arg} must be a real numeric array; got {arg} "
                           rf"with dtype {dtype}.*accepted: float16/float32/float64"):  # fmt: skip
            call()


def test_decode_takes_codes_of_any_integer_kind() -> None:
    codes = np.array([0x3C00, 0x7BFF, 0x8001, 0x7C00], np.uint16)
    want = codes.view(np.float16).astype(np.float64)  # numpy's own decoding of float16 bits
    same_bits(fpemu.decode(codes.astype(">u2"), "fp16"), want)
    same_bits(fpemu.decode(codes.astype(np.int64).tolist(), "fp16"), want)
    torch = pytest.importorskip("torch")
    same_bits(fpemu.decode(torch.tensor(codes.astype(np.int32)), "fp16"), want)
    with pytest.raises(TypeError, match="codes must be an integer array"):
        fpemu.decode(np.array([1.0], ">f8"), "fp16")


def test_torch_tensors_off_the_cpu_and_of_other_dtypes_are_refused() -> None:
    torch = pytest.importorskip("torch")
    meta = torch.ones(3, device="meta")  # stands in for a CUDA tensor: not on the CPU
    calls: list[Callable[[], Any]] = [lambda: fpemu.round(meta, "bf16"), lambda: matmul(meta, meta)]
    for call in calls:
        with pytest.raises(TypeError, match=r"torch tensor on device meta.*\.cpu\(\)"):
            call()
    with pytest.raises(TypeError, match=r"^x must be .*dtype torch\.complex64"):
        fpemu.round(torch.ones(2, dtype=torch.complex64), "bf16")
    # every float8 dtype torch has comes through its bits, exactly
    for name in ("float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu"):
        t = torch.tensor([0.5, 2.0, 0.25]).to(getattr(torch, name))
        same_bits(as_float_array(t, arg="x"), t.double().numpy())
    assert as_array(torch.tensor([0.5]).to(torch.bfloat16), arg="x").dtype == ml_dtypes.bfloat16


def test_long_double_only_where_it_holds_a_float64() -> None:
    if np.finfo(np.longdouble).nmant <= 52:
        pytest.skip("long double is float64 on this platform")
    same_bits(
        as_float_array(np.array([0.1], np.longdouble), arg="x"),
        np.array([float(np.longdouble(0.1))]),
    )
    fine = np.longdouble(1) + np.longdouble(2) ** -60
    with pytest.raises(ValueError, match=r"x holds .*float128.*not a float64"):
        fpemu.round(np.array([fine]), "bf16")


# -- namespaces and extras ----------------------------------------------------------------------
def test_cupy_arrays_stay_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests import fake_cupy  # noqa: PLC0415 - only this test installs the fake

    fake = fake_cupy.install(strict=True)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    h = np.array([[1.5, -2.0], [0.1, 7.0]], np.float32)
    d = fake_cupy.to_device(h)
    for keep32, dt in ((False, F64), (True, F32)):
        got = as_float_array(d, arg="x", keep32=keep32)
        assert fake_cupy.is_device(got) and got.dtype == dt
        same_bits(got.get(), h.astype(np.float64), dt)
    ints = fake_cupy.to_device(np.array([2**62, -(2**63)], np.int64))
    assert fake_cupy.is_device(as_float_array(ints, arg="x"))
    with pytest.raises(ValueError, match="9007199254740993"):
        as_float_array(fake_cupy.to_device(np.array([2**53 + 1])), arg="x")
    # Python numbers beside device arrays go to the device (as in CuPy's own operators)
    got = arith.fma(d, 3, np.float32(0.5), fmt="bf16")
    assert fake_cupy.is_device(got)
    same_bits(got.get(), arith.fma(h, 3, np.float32(0.5), fmt="bf16"))
    assert fake.recorder.events == [], "\n".join(map(str, fake.recorder.events))


def test_strategies_without_hypothesis_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "hypothesis", None)  # "not installed": import fails
    monkeypatch.delitem(sys.modules, "fpemu.testing.strategies", raising=False)
    with pytest.raises(ImportError, match=r"needs Hypothesis: pip install 'fpemu\[strategies\]'"):
        importlib.import_module("fpemu.testing.strategies")
