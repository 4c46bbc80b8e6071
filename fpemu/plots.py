"""Figures that explain low-precision formats and mixed-precision training, written to files.

Three figures, each a function that writes a PNG (or any format matplotlib can save, chosen by
the file name) and returns its path. Nothing is shown and no global matplotlib state (pyplot,
the backend) is touched: figures are built on :class:`matplotlib.figure.Figure` and rendered
by the Agg canvas.

- :func:`plot_representable`: where the values of one or more formats lie, on a log axis.
- :func:`plot_gradient_histogram`: a gradient-magnitude histogram against a format's
  underflow, subnormal, normal and overflow bands, before and after loss scaling.
- :func:`plot_training`: loss curves and the loss-scale trace of a training run.

matplotlib is an optional extra: ``pip install 'fpemu[plot]'``.

>>> import numpy as np, tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "values.png"
>>> plot_representable(["e4m3", "e5m2"], out).stat().st_size > 10_000
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fpemu.bits import all_values, ulp
from fpemu.formats import Format, FormatLike, get_format
from fpemu.rounding import round as fround

#: Formats drawn by :func:`plot_representable` by default.
DEFAULT_FORMATS = ("float4_e2m1fn", "float8_e4m3fn", "float8_e5m2", "float16")
#: Band colours: flushed to zero, subnormal, normal, overflow.
BAND_COLOURS = {
    "zero": "#9e9e9e",
    "subnormal": "#ffcc80",
    "normal": "#a5d6a7",
    "overflow": "#ef9a9a",
}
_BAND_NAMES = {
    "zero": "rounds to 0",
    "subnormal": "subnormal",
    "normal": "normal",
    "overflow": "overflow",
}


def _figure(rows: int, *, height: float = 2.6, width: float = 9.0) -> Any:
    """A matplotlib Figure with ``rows`` stacked axes (imports matplotlib here, lazily)."""
    try:
        from matplotlib.figure import Figure  # noqa: PLC0415 - optional dependency
    except ImportError as err:
        raise ImportError(
            "fpemu.plots needs matplotlib; install it with: pip install 'fpemu[plot]'"
        ) from err
    fig = Figure(figsize=(width, height * rows + 0.6), layout="constrained")
    return fig, fig.subplots(rows, 1, squeeze=False)[:, 0]


def _save(fig: Any, path: str | Path) -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    return out


def _log2_axis(ax: Any) -> None:
    ax.set_xscale("log", base=2)
    ax.grid(True, which="major", axis="x", alpha=0.3)


# ----- representable values --------------------------------------------------------------------
def plot_representable(
    formats: FormatLike | Sequence[FormatLike] = DEFAULT_FORMATS,
    path: str | Path = "representable.png",
    *,
    title: str | None = None,
) -> Path:
    """Draw where the positive values of each format lie, and how far apart they are.

    Top panel: one row per format, a tick at every positive finite value (formats of at most
    12 bits; wider ones show a tick per power of two), the subnormal range shaded orange, the
    normal range green and the overflow region red. Bottom panel: relative spacing
    ``ulp(x) / x`` against ``x``, a sawtooth between ``2**-mbits`` and ``2**-(mbits+1)`` over
    the normal range that climbs to 1 across the subnormals, where precision drains away.

    Args:
        formats: one format or several (names, aliases or Formats).
        path: the file to write; its suffix picks the image format.
        title: figure title (default: the format names).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: an unknown format name.
    """
    fmts = [
        get_format(f, arg="formats")
        for f in ([formats] if isinstance(formats, (str, Format)) else formats)
    ]
    fig, (top, bottom) = _figure(2, height=0.45 * len(fmts) + 1.8)
    lo = min(f.smallest_subnormal for f in fmts) / 2
    hi = max(f.max for f in fmts) * 64  # room for the labels right of max
    for row, f in enumerate(fmts):
        _format_row(top, row, f, hi)
        x = np.geomspace(f.smallest_subnormal, f.max, 2000)
        bottom.plot(x, ulp(x, f) / x, label=f.name, linewidth=0.7)
    top.set_yticks(range(len(fmts)), [f.name for f in fmts])
    top.set_ylim(-0.6, len(fmts) - 0.4)
    top.invert_yaxis()
    top.set_title(title or "Positive values of " + ", ".join(f.name for f in fmts))
    bottom.set_yscale("log", base=2)
    bottom.set_ylabel("relative spacing ulp(x)/x")
    bottom.set_xlabel("x")
    bottom.legend(loc="upper right", fontsize="small")
    for ax in (top, bottom):
        _log2_axis(ax)
        ax.set_xlim(lo, hi)
    return _save(fig, path)


def _format_row(ax: Any, row: int, f: Format, hi: float) -> None:
    sub_lo = f.smallest_subnormal
    ax.barh(row, f.tiny - sub_lo, left=sub_lo, height=0.7, color=BAND_COLOURS["subnormal"])
    ax.barh(row, f.max - f.tiny, left=f.tiny, height=0.7, color=BAND_COLOURS["normal"])
    ax.barh(row, hi - f.max, left=f.max, height=0.7, color=BAND_COLOURS["overflow"], alpha=0.5)
    if f.bits <= 12:  # few enough values to draw every one
        v = all_values(f)
        ticks, note = v[v > 0], f"{np.count_nonzero(v > 0)} values"
    else:  # one tick per binade (power of two), or the row turns solid black
        ticks = np.exp2(np.arange(math.ceil(math.log2(sub_lo)), f.emax + 1, dtype=np.float64))
        note = f"ticks at powers of two; {2**f.mbits} values per binade"
    ax.vlines(ticks, row - 0.35, row + 0.35, color="black", linewidth=0.6)
    ax.text(f.max, row, f"  max {f.max:.6g}\n  {note}", va="center", fontsize="x-small")


# ----- gradient histogram ----------------------------------------------------------------------
def band_fractions(g: Any, fmt: FormatLike) -> dict[str, float]:
    """Shares of the non-zero elements of ``g`` by what rounding to ``fmt`` makes of them.

    ``zero``: rounds to zero (underflow); ``subnormal``: rounds to a subnormal (precision
    lost); ``normal``; ``overflow``: beyond the largest value (becomes inf or NaN, or saturates
    in formats without either), or already inf/NaN. These are the numbers printed on
    :func:`plot_gradient_histogram`.

    >>> band_fractions([1e-9, 1e-6, 1.0, 1e5, 0.0], "fp16")
    {'zero': 0.25, 'subnormal': 0.25, 'normal': 0.25, 'overflow': 0.25}
    """
    f = get_format(fmt)
    a = np.asarray(g, dtype=np.float64).reshape(-1)
    nz = a[a != 0]
    if nz.size == 0:
        return dict.fromkeys(BAND_COLOURS, 0.0)
    finite = nz[np.isfinite(nz)]
    r = np.abs(fround(finite, f, overflow="saturate"))
    beyond = np.abs(finite) > f.max
    n = nz.size
    counts = {
        "zero": np.count_nonzero(r == 0),
        "subnormal": np.count_nonzero((r > 0) & (r < f.tiny)),
        "normal": np.count_nonzero((r >= f.tiny) & ~beyond),
        "overflow": np.count_nonzero(beyond) + n - finite.size,  # + the inf/NaN inputs
    }
    return {k: int(c) / n for k, c in counts.items()}


def auto_loss_scale(grads: Any, fmt: FormatLike) -> float:
    """The power of two that puts the largest gradient magnitude just under ``max / 2``.

    >>> auto_loss_scale([1e-3, -2e-5], "fp16")
    16777216.0
    """
    f = get_format(fmt)
    g = np.abs(np.asarray(grads, dtype=np.float64))
    top = float(g[np.isfinite(g)].max(initial=0.0))
    return 1.0 if top == 0 else math.ldexp(1.0, math.floor(math.log2(f.max / 2 / top)))


def plot_gradient_histogram(
    grads: Any,
    fmt: FormatLike,
    path: str | Path = "gradients.png",
    *,
    loss_scale: float | None = None,
    bins: int = 120,
    title: str | None = None,
) -> Path:
    """Histogram gradient magnitudes against a format's range, before and after loss scaling.

    The classic mixed-precision figure: the x axis is ``|g|`` on a log scale, shaded by what
    ``fmt`` does there: grey where a value rounds to zero (below half the smallest subnormal),
    orange over the subnormals (lost precision), green over the normal range and red beyond
    the largest value (overflow). The top panel shows the gradients as they are, the bottom
    one multiplied by ``loss_scale``; each panel lists the share of non-zero gradients that
    lands in each band (after rounding with :func:`fpemu.round`).

    Args:
        grads: an array, or a sequence of arrays (e.g. one per layer), of float gradients.
        fmt: the format the gradients are stored in (name, alias or Format).
        path: the file to write.
        loss_scale: the scale factor; default :func:`auto_loss_scale`.
        bins: histogram bins across the plotted range.
        title: figure title.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: ``loss_scale`` is not a positive finite number, or the gradients hold no
            finite non-zero value.
    """
    f = get_format(fmt)
    g = _flatten(grads)
    scale = auto_loss_scale(g, f) if loss_scale is None else float(loss_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"loss_scale must be a positive finite number; got {loss_scale=!r}")
    mags = np.abs(g[np.isfinite(g) & (g != 0)])
    if mags.size == 0:
        raise ValueError("grads holds no finite non-zero value to plot")
    lo = min(mags.min(), f.smallest_subnormal) / 8
    hi = max(mags.max() * scale, f.max) * 8
    edges = np.geomspace(lo, hi, bins + 1)
    fig, axes = _figure(2)
    for ax, factor, label in ((axes[0], 1.0, "unscaled"), (axes[1], scale, f"x {_pow2(scale)}")):
        with np.errstate(over="ignore"):
            scaled = g * factor
        _bands_background(ax, f, lo, hi)
        ax.hist(np.abs(scaled[scaled != 0]), bins=edges, color="#37474f")
        _log2_axis(ax)
        ax.set_xlim(lo, hi)
        ax.set_ylabel("count")
        shares = band_fractions(scaled, f)
        text = "\n".join(f"{_BAND_NAMES[k]}: {100 * v:.3g}%" for k, v in shares.items())
        zeros = int(np.count_nonzero(scaled == 0))
        ax.text(0.99, 0.95, f"{label}\n{text}\nexact zeros: {zeros}", transform=ax.transAxes,
                ha="right", va="top", fontsize="small", family="monospace",
                bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "none"})  # fmt: skip
    axes[0].set_title(title or f"Gradient magnitudes vs {f.name}, loss scale {_pow2(scale)}")
    axes[1].set_xlabel("|gradient|")
    return _save(fig, path)


def _pow2(x: float) -> str:
    mant, exp = math.frexp(x)
    return f"2^{exp - 1}" if mant == 0.5 else f"{x:g}"


def _flatten(grads: Any) -> np.ndarray:
    if isinstance(grads, np.ndarray):
        return grads.astype(np.float64).reshape(-1)
    parts = [np.asarray(g, dtype=np.float64).reshape(-1) for g in grads]
    return np.concatenate(parts) if parts else np.zeros(0)


def _bands_background(ax: Any, f: Format, lo: float, hi: float) -> None:
    half = f.smallest_subnormal / 2
    spans = [("zero", lo, half), ("subnormal", half, f.tiny), ("normal", f.tiny, f.max),
             ("overflow", f.max, hi)]  # fmt: skip
    for key, a, b in spans:
        ax.axvspan(a, b, color=BAND_COLOURS[key], alpha=0.45, linewidth=0, label=_BAND_NAMES[key])
    ax.legend(loc="upper left", fontsize="x-small", ncols=4)


# ----- training curves -------------------------------------------------------------------------
def plot_training(
    run: Any,
    path: str | Path = "training.png",
    *,
    scale: Sequence[float] | None = None,
    skipped: Sequence[bool] | None = None,
    title: str | None = None,
) -> Path:
    """Plot loss against step and, if known, the loss scale, marking skipped steps.

    Args:
        run: per-step losses (a sequence), several runs as ``{label: losses}``, or an object
            with a ``steps`` list of records having ``loss`` and, optionally, ``scale`` and
            ``skipped`` attributes (such as :class:`fpemu.training.TrainResult`).
        path: the file to write.
        scale: per-step loss scale (overrides the records').
        skipped: per-step flags: the step was skipped (overflow); drawn as red crosses.
        title: figure title.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: no losses, or ``scale``/``skipped`` of another length than the losses.
    """
    curves, rec_scale, rec_skipped = _curves(run)
    scale = rec_scale if scale is None else scale
    skipped = rec_skipped if skipped is None else skipped
    n = max(len(c) for c in curves.values())
    for name, seq in (("scale", scale), ("skipped", skipped)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries but the run has {n} steps")
    fig, axes = _figure(2 if scale is not None else 1)
    ax = axes[0]
    for label, losses in curves.items():
        ax.plot(np.arange(len(losses)), losses, label=label, linewidth=1.2)
    finite = np.concatenate([np.asarray(c, dtype=np.float64) for c in curves.values()])
    finite = finite[np.isfinite(finite)]
    if finite.size and finite.min() > 0:
        ax.set_yscale("log")
    ax.set_ylabel("loss")
    ax.set_title(title or "Training loss" + (" and loss scale" if scale is not None else ""))
    if len(curves) > 1 or next(iter(curves)) != "loss":
        ax.legend(fontsize="small")
    marks = np.flatnonzero(np.asarray(skipped if skipped is not None else [], dtype=bool))
    first = np.asarray(next(iter(curves.values())), dtype=np.float64)
    if len(marks):
        y = np.where(np.isfinite(first[marks]), first[marks], np.nanmax(finite, initial=1.0))
        ax.scatter(marks, y, marker="x", color="#c62828", zorder=3, label=f"skipped ({len(marks)})")
        ax.legend(fontsize="small")
    if scale is not None:
        sx = axes[1]
        sx.step(np.arange(n), scale, where="post", color="#1565c0")
        sx.set_yscale("log", base=2)
        sx.set_ylabel("loss scale")
        for m in marks:
            sx.axvline(m, color="#c62828", alpha=0.35, linewidth=0.8)
    axes[-1].set_xlabel("step")
    return _save(fig, path)


def _curves(run: Any) -> tuple[dict[str, list[float]], list[float] | None, list[bool] | None]:
    """(label -> losses, scale or None, skipped or None) from any accepted ``run``."""
    steps = getattr(run, "steps", None)
    if steps is not None and not isinstance(steps, int):
        records = list(steps)
        if not records:
            raise ValueError("run.steps is empty: nothing to plot")
        losses = [float(r.loss) for r in records]
        scale = [float(r.scale) for r in records] if hasattr(records[0], "scale") else None
        skipped = [bool(r.skipped) for r in records] if hasattr(records[0], "skipped") else None
        return {"loss": losses}, scale, skipped
    if isinstance(run, Mapping):
        curves = {str(k): list(map(float, v)) for k, v in run.items()}
    else:
        curves = {"loss": list(map(float, run))}
    if not curves or not all(curves.values()):
        raise ValueError("run holds no losses to plot")
    return curves, None, None
