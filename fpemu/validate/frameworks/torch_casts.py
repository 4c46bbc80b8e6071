"""Casts: ``torch.Tensor.to(dtype)`` against :func:`fpemu.round`, bit for bit.

For each target (bfloat16, float16, float8_e4m3fn, float8_e5m2) the check runs torch's cast on
a sample of float32 inputs (random bit patterns, every special, every value of the target,
every midpoint between neighbours and the float32 numbers next to each midpoint) and compares
the results, widened exactly back to float32, bit for bit (NaN: "both NaN").

Conventions are discovered, not assumed: the check tries fpemu's overflow options
(``"inf"``, ``"nan"``, ``"saturate"``) in turn, and for float64 inputs two models, one rounding
(:func:`fpemu.round` on the float64 value) and double rounding through float32. It reports
``"agree"`` when fpemu's default reproduces torch, ``"finding"`` (naming the option or model)
when another one does, and ``"differ"`` with the first differing input otherwise.

torch is imported lazily: this module imports without it.

>>> x = float32_sample("float8_e4m3fn", n_random=16)
>>> x.dtype.name, bool(np.isnan(x).any()), bool((x == 464.0).any())
('float32', True, True)
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fpemu.bits import all_values, encode
from fpemu.formats import Format, FormatLike, get_format
from fpemu.rounding import round as fround
from fpemu.validate.frameworks.report import CheckResult, hex_bits

#: Formats torch can cast to, by fpemu canonical name.
TARGETS: tuple[str, ...] = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")

#: A rounding function with :func:`fpemu.round`'s shape: ``(x, fmt, *, overflow) -> array``.
Rounder = Callable[..., Any]

_F32 = get_format("float32")


def _torch_dtype(f: Format) -> Any:
    import torch  # noqa: PLC0415 - optional dependency

    names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
             "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}  # fmt: skip
    if f.name not in names:
        raise ValueError(f"fmt={f.name!r} is not a torch cast target; accepted: {', '.join(names)}")
    return names[f.name]


def torch_cast(x: np.ndarray, fmt: FormatLike) -> tuple[np.ndarray, np.ndarray]:
    """Cast with torch; return (result widened exactly to ``x``'s dtype, result bit patterns).

    Raises:
        ValueError: ``fmt`` is not a torch dtype.
        TypeError: ``x`` is not float32/float64.
    """
    import torch  # noqa: PLC0415 - optional dependency

    f = get_format(fmt)
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"x must be float32 or float64, got dtype {x.dtype}")
    t = torch.from_numpy(np.ascontiguousarray(x)).to(_torch_dtype(f))
    code_t = {8: torch.uint8, 16: torch.int16, 32: torch.int32}[f.bits]
    codes = t.view(code_t).numpy().astype(np.int64) & ((1 << f.bits) - 1)
    wide = t.to(torch.float64 if x.dtype == np.float64 else torch.float32).numpy()
    return wide, codes


def _bits_view(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint64 if a.dtype == np.float64 else np.uint32)


def mismatches(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Boolean mask: bit patterns differ and the two are not both NaN.

    >>> mismatches(np.array([0.0, np.nan, 1.0]), np.array([-0.0, np.nan, 1.0])).tolist()
    [True, False, False]
    """
    if a.dtype != b.dtype or a.shape != b.shape:
        raise ValueError(f"cannot compare {a.dtype}{a.shape} with {b.dtype}{b.shape}")
    return np.asarray((_bits_view(a) != _bits_view(b)) & ~(np.isnan(a) & np.isnan(b)))


# -- samples ------------------------------------------------------------------------------------
def _specials32() -> np.ndarray:
    pats = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001,
            0x7FFFFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x00800000, 0x80800000, 0x00000001, 0x80000001,
            0x007FFFFF, 0x3F800000, 0xBF800000]  # fmt: skip
    return np.array(pats, dtype=np.uint32).view(np.float32)


@functools.lru_cache(maxsize=16)
def midpoints(fmt: FormatLike) -> np.ndarray:
    """Every midpoint between neighbouring finite values of ``fmt``, and +-(max + ulp(max)/2).

    Returned as float64 (exact); for the targets here they are float32 numbers too.

    >>> midpoints("float4_e2m1fn")[-3:].tolist()
    [5.0, -7.0, 7.0]
    """
    f = get_format(fmt)
    v = all_values(f).astype(np.float64)
    mids = (v[:-1] + v[1:]) / 2
    over = f.max + 2.0 ** (f.emax - f.mbits) / 2
    return np.concatenate([mids, [-over, over]])


def float32_sample(fmt: FormatLike, *, n_random: int = 2**20, seed: int = 0) -> np.ndarray:
    """float32 inputs for a cast check: specials, ``n_random`` random bit patterns, every value
    of ``fmt``, every midpoint and both float32 neighbours of each midpoint, and values far
    beyond ``fmt``'s range."""
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    rand = rng.integers(0, 2**32, size=n_random, dtype=np.uint64).astype(np.uint32)
    vals = all_values(f).astype(np.float32)
    mids = midpoints(f).astype(np.float32)
    with np.errstate(over="ignore"):
        big = np.float32(f.max) * np.array([2, 4, 1e3, -2, -1e3], dtype=np.float32)
    parts = [
        _specials32(),
        rand.view(np.float32),
        vals,
        mids,
        np.nextafter(mids, np.float32(np.inf)),
        np.nextafter(mids, np.float32(-np.inf)),
        big,
    ]
    return np.concatenate(parts).astype(np.float32)  # fmt: skip


def float64_sample(fmt: FormatLike, *, n_random: int = 2**18, seed: int = 0) -> np.ndarray:
    """float64 inputs: values within a quarter float32 ulp of every midpoint of ``fmt`` (where
    rounding once and rounding through float32 disagree), random float64 numbers in float32's
    range, and the specials."""
    f = get_format(fmt)
    rng = np.random.default_rng(seed)
    rand32 = rng.integers(0, 2**32, size=n_random, dtype=np.uint64).astype(np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns widen quietly
        r64 = rand32.view(np.float32).astype(np.float64)
        specials = _specials32().astype(np.float64)
    if f.bits <= 16:
        mids = midpoints(f)
    else:  # float32 itself: midpoints between random neighbours
        a = r64[np.isfinite(r64)].astype(np.float32)
        mids = (a.astype(np.float64) + np.nextafter(a, np.float32(np.inf)).astype(np.float64)) / 2
        mids = mids[np.isfinite(mids)]
    q = np.spacing(np.abs(mids).astype(np.float32)).astype(np.float64) / 4
    low = rng.integers(0, 2**29, size=n_random, dtype=np.uint64)
    r64 = np.where(np.isfinite(r64), (r64.view(np.uint64) | low).view(np.float64), r64)
    # 1 + eps/2 + 2**-40: above the midpoint, yet a tie once rounded to float32 (for 16-bit and
    # smaller formats): the canonical double-rounding witness, first so reports show it.
    witness = np.array([1 + f.eps / 2 + 2**-40, -(1 + f.eps / 2 + 2**-40)])
    return np.concatenate([witness, specials, mids, mids + q, mids - q, r64])


# -- checks -------------------------------------------------------------------------------------
def _overflow_options(f: Format) -> list[str]:
    opts = [f.default_overflow] + [o for o in ("inf", "nan", "saturate") if o != f.default_overflow]
    return [o for o in opts if (o != "inf" or f.has_inf) and (o != "nan" or f.has_nan)]


def _value_text(v: float, code: int, f: Format) -> str:
    return f"{hex_bits(code, f.bits)} ({float(v)!r})"


def _fpemu_code(v: float, f: Format) -> int:
    try:
        return int(encode(np.float64(v), f))
    except ValueError:  # a value the format cannot hold: show it without a code
        return -1


def _witness(x: np.ndarray, i: int, torch_w: np.ndarray, codes: np.ndarray, ours: np.ndarray,
             f: Format, label: str = "fpemu") -> dict[str, str]:  # fmt: skip
    in_bits = 64 if x.dtype == np.float64 else 32
    code = _fpemu_code(float(ours[i]), f)
    ours_txt = _value_text(float(ours[i]), code, f) if code >= 0 else repr(float(ours[i]))
    return {
        "input": f"{hex_bits(int(_bits_view(x)[i]), in_bits)} ({float(x[i])!r})",
        "torch": _value_text(float(torch_w[i]), int(codes[i]), f),
        label: ours_txt,
    }


def _models(
    x: np.ndarray, f: Format, reference: Rounder
) -> list[tuple[str, str, Callable[[], Any]]]:
    """(model, overflow, thunk) candidates, fpemu's default first."""
    out: list[tuple[str, str, Callable[[], Any]]] = []
    models = ["once"] if x.dtype == np.float32 or f.name == "float32" else ["once", "via float32"]
    for model in models:
        for ovf in _overflow_options(f):
            if model == "once":
                thunk = functools.partial(reference, x, f, overflow=ovf)
            else:
                thunk = functools.partial(_via_f32, reference, x, f, ovf)
            out.append((model, ovf, thunk))
    out.sort(key=lambda m: (m[1] != f.default_overflow, m[0] != "once"))
    return out


def _via_f32(reference: Rounder, x: np.ndarray, f: Format, ovf: str) -> Any:
    return reference(np.asarray(reference(x, _F32)), f, overflow=ovf)


def check_cast(
    fmt: FormatLike,
    x: np.ndarray,
    *,
    reference: Rounder = fround,
) -> CheckResult:
    """Compare ``torch.from_numpy(x).to(fmt)`` with ``reference(x, fmt, overflow=...)``.

    Args:
        fmt: the target format (a torch dtype: see :data:`TARGETS`; float32 for float64 ``x``).
        x: float32 or float64 inputs.
        reference: the rounding to compare with (default :func:`fpemu.round`); tests inject a
            wrong one to show that the check fails.

    Returns:
        A :class:`CheckResult`: ``agree`` when fpemu's default overflow (and, for float64 input,
        one rounding) reproduces torch; ``finding`` naming the overflow option or the double
        rounding model that does; ``differ`` with the first differing input otherwise.
    """
    f = get_format(fmt)
    if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
        raise TypeError(f"x must be a float32 or float64 NumPy array, got {type(x).__name__}")
    src = "float64" if x.dtype == np.float64 else "float32"
    name = f"{src} -> {f.name}"
    torch_w, codes = torch_cast(x, f)
    first: tuple[str, str, np.ndarray, np.ndarray] | None = None
    for model, ovf, thunk in _models(x, f, reference):
        with np.errstate(over="ignore", invalid="ignore"):
            ours = np.asarray(thunk()).astype(x.dtype)
        bad = mismatches(torch_w, ours)
        if first is None:
            first = (model, ovf, ours, bad)
        if bad.any():
            continue
        default = model == "once" and ovf == f.default_overflow
        res = CheckResult("casts", name, "agree" if default else "finding", compared=x.size)
        res.data = {"model": model, "overflow": ovf}
        if ovf != f.default_overflow:
            res.notes.append(
                f"torch's overflow convention is {ovf!r} (fpemu's default for {f.name} is "
                f"{f.default_overflow!r}); fpemu.round(..., overflow={ovf!r}) matches"
            )
        if model != "once":
            with np.errstate(over="ignore", invalid="ignore"):
                once = np.asarray(reference(x, f, overflow=ovf)).astype(x.dtype)
            once_bad = mismatches(torch_w, once)
            i = int(np.flatnonzero(once_bad)[0]) if once_bad.any() else None
            res.notes.append(
                f"torch rounds float64 -> {f.name} through float32 (double rounding): equal to "
                f"fpemu.round(fpemu.round(x, 'float32'), '{f.name}') on every input; "
                f"one rounding differs on {int(once_bad.sum())} of {x.size}"
            )
            if i is not None:
                res.witness = _witness(x, i, torch_w, codes, once, f, "fpemu.round once")
        elif src == "float64":
            res.notes.append(f"torch rounds float64 -> {f.name} once (no double rounding)")
        return res
    assert first is not None
    model, ovf, ours, bad = first
    i = int(np.flatnonzero(bad)[0])
    return CheckResult(
        "casts", name, "differ", compared=x.size,
        witness=_witness(x, i, torch_w, codes, ours, f),
        notes=[f"{int(bad.sum())} of {x.size} inputs differ (fpemu default: rounding {model}, "
               f"overflow={ovf!r}); no fpemu overflow option or rounding model matches"],
        data={"mismatches": int(bad.sum())},
    )  # fmt: skip


def check_casts(
    *,
    formats: Sequence[str] = TARGETS,
    n_random: int = 2**20,
    seed: int = 0,
    reference: Rounder = fround,
) -> list[CheckResult]:
    """The cast checks: float32 and float64 inputs to every target, and float64 -> float32."""
    import torch  # noqa: F401, PLC0415 - fail early and clearly without torch

    out = []
    for name in formats:
        out.append(check_cast(name, float32_sample(name, n_random=n_random, seed=seed),
                              reference=reference))  # fmt: skip
    for name in formats:
        x64 = float64_sample(name, n_random=max(n_random // 4, 16), seed=seed + 1)
        out.append(check_cast(name, x64, reference=reference))
    x64 = float64_sample("float32", n_random=max(n_random // 4, 16), seed=seed + 2)
    out.append(check_cast("float32", x64, reference=reference))
    return out


def exhaustive_float32(
    fmt: FormatLike,
    *,
    chunk: int = 2**24,
    start: int = 0,
    stop: int = 2**32,
    overflow: str | None = None,
    progress: bool = True,
    reference: Rounder = fround,
) -> CheckResult:
    """Cast every float32 bit pattern in ``[start, stop)`` with torch and fpemu; compare bits.

    Args:
        fmt: target format.
        chunk: patterns per block (2**24 by default: about 0.5 s per block for bf16).
        start, stop: the range of float32 bit patterns (all 2**32 by default).
        overflow: fpemu's overflow option (default: the format's own convention).
        progress: show a rich progress bar.
        reference: the rounding to compare with (default :func:`fpemu.round`).
    """
    f = get_format(fmt)
    if not (0 <= start < stop <= 2**32) or chunk < 1:
        raise ValueError(f"need 0 <= start < stop <= 2**32 and chunk >= 1; got "
                         f"start={start}, stop={stop}, chunk={chunk}")  # fmt: skip
    ovf = overflow if overflow is not None else f.default_overflow
    name = (
        f"float32 -> {f.name} (exhaustive)"
        if (start, stop) == (0, 2**32)
        else (f"float32 -> {f.name} (patterns {hex_bits(start, 32)}..{hex_bits(stop - 1, 32)})")
    )
    total_bad, witness = 0, None
    blocks = range(start, stop, chunk)
    bar, task = _progress(progress, f"{f.name}", len(blocks))
    try:
        for lo in blocks:
            x = np.arange(lo, min(lo + chunk, stop), dtype=np.uint64).astype(np.uint32)
            x32 = x.view(np.float32)
            torch_w, codes = torch_cast(x32, f)
            with np.errstate(over="ignore", invalid="ignore"):
                ours = np.asarray(reference(x32, f, overflow=ovf)).astype(np.float32)
            bad = mismatches(torch_w, ours)
            n = int(bad.sum())
            if n and witness is None:
                witness = _witness(x32, int(np.flatnonzero(bad)[0]), torch_w, codes, ours, f)
            total_bad += n
            if bar is not None:
                bar.advance(task)
    finally:
        if bar is not None:
            bar.stop()
    res = CheckResult(
        "casts",
        name,
        "differ" if total_bad else "agree",
        compared=stop - start,
        witness=witness,
        data={"overflow": ovf, "mismatches": total_bad},
    )
    if ovf != f.default_overflow:
        res.notes.append(
            f"compared with fpemu.round(..., overflow={ovf!r}); fpemu's default for {f.name} "
            f"is {f.default_overflow!r}"
        )
        res.status = "finding" if not total_bad else "differ"
    return res


def _progress(show: bool, label: str, total: int) -> tuple[Any, Any]:
    if not show:
        return None, None
    from rich.progress import Progress  # noqa: PLC0415 - display only

    bar = Progress(transient=False)
    task = bar.add_task(f"exhaustive float32 -> {label}", total=total)
    bar.start()
    return bar, task
