"""Figures for report pages, drawn by matplotlib's SVG backend and returned as inline SVG text.

Every function returns the ``<svg>`` element as a string, or None when matplotlib (the
``plot`` extra) is not installed; :meth:`fpemu.pages.Section.figure` then shows how to get it.
Figures are built on :class:`matplotlib.figure.Figure` (no pyplot, no global state). Text is
drawn as paths (matplotlib's default ``svg.fonttype``), so no font is needed; the XML
prologue, the DOCTYPE, the metadata and the namespace declarations (which name URLs) are
dropped, and every ``id`` is prefixed per figure so that several figures on one page do not
share clip paths or glyphs by accident. Pixel images (the ulp grid) are inline base64 PNG.

>>> svg = line_chart({"loss": [1.0, 0.5, 0.25]}, title="demo")
>>> svg is None or (svg.startswith("<svg") and "http" not in svg)
True
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

#: Colours of check statuses and of mismatch classes (shared by the pages).
STATUS_COLOURS = {"agree": "#43a047", "finding": "#f9a825", "differ": "#e53935",
                  "skipped": "#9e9e9e"}  # fmt: skip
_COUNTER = itertools.count()
_ID = re.compile(r'\bid="([^"]+)"')


def available() -> bool:
    """Whether matplotlib can be imported (the figures need it).

    >>> isinstance(available(), bool)
    True
    """
    try:
        import matplotlib  # noqa: F401, PLC0415 - optional dependency
    except ImportError:
        return False
    return True


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure  # noqa: PLC0415 - optional dependency

    return Figure(figsize=(width, height), layout="constrained")


def to_svg(fig: Any) -> str:
    """``fig`` as an ``<svg>`` element to inline in HTML: no prologue, no metadata, and ids
    (with their ``#id`` references) prefixed with a per-figure tag."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None, "Format": None,
                                             "Type": None})  # fmt: skip
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    # inline in HTML the parser puts <svg> (and xlink:href) in their namespaces itself: the
    # namespace declarations, the only URLs left, go too
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    tag = f"f{next(_COUNTER)}-"
    for name in set(_ID.findall(text)):
        text = text.replace(f'id="{name}"', f'id="{tag}{name}"')
        text = text.replace(f'href="#{name}"', f'href="#{tag}{name}"')
        text = text.replace(f"url(#{name})", f"url(#{tag}{name})")
    return text


def line_chart(
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    xlabel: str = "step",
    ylabel: str = "",
    log: bool | None = None,
    steps: bool = False,
    marks: Sequence[int] = (),
    mark_label: str = "",
) -> str | None:
    """One line per entry of ``series`` (label -> y at x = 0, 1, ...).

    Args:
        log: logarithmic y axis (base 2 when ``steps``); None: log where every finite value
            is positive and they span more than a factor of 10.
        steps: draw as a step function (a loss scale changes between steps).
        marks: x positions to mark with a red cross on the first series (skipped steps).
    """
    if not available():
        return None
    fig = _figure(9.0, 3.2)
    ax = fig.subplots()
    values = [np.asarray(v, np.float64) for v in series.values()]
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - optional dependency

    for k, ((label, _), y) in enumerate(zip(series.items(), values, strict=True)):
        x = np.arange(len(y))
        # the first series wide and solid, later ones thinner and dashed: two runs that agree
        # bit for bit draw on top of each other and must both stay visible
        style = {
            "label": label,
            "linewidth": 2.6 if k == 0 else 1.3,
            "linestyle": "-" if k == 0 else (0, (4, 2 + k)),
            "alpha": 0.75 if k == 0 else 1,
        }
        if steps:  # the last value held for one more step, so that it shows as a level
            ax.step(np.arange(len(y) + 1), np.append(y, y[-1:]), where="post", **style)
        else:
            ax.plot(x, y, marker="." if len(y) <= 40 else None, **style)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    finite = np.concatenate([v[np.isfinite(v)] for v in values]) if values else np.zeros(0)
    if log is None:
        log = bool(finite.size and finite.min() > 0 and finite.max() > 10 * finite.min())
    if log and finite.size and finite.min() > 0:
        ax.set_yscale("log", base=2 if steps else 10)
    if marks and values:
        first = values[0]
        m = np.asarray([i for i in marks if 0 <= i < len(first)], dtype=np.intp)
        top = float(finite.max()) if finite.size else 1.0
        y = np.where(np.isfinite(first[m]), first[m], top)
        ax.scatter(m, y, marker="x", color="#c62828", zorder=3,
                   label=mark_label or f"marked ({len(m)})")  # fmt: skip
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if len(series) > 1 or marks:
        ax.legend(fontsize="small")
    return to_svg(fig)


def ulp_heatmap(
    rows: Sequence[str], columns: Sequence[str], ulps: Any, *, title: str = ""
) -> str | None:
    """A rows x columns grid of ulp distances: white where 0, yellow to red on a log scale,
    black where infinite (different formats), grey where missing (NaN). Cells are labelled
    with their value when the grid is small."""
    if not available():
        return None
    from matplotlib.colors import ListedColormap  # noqa: PLC0415 - optional dependency

    u = np.asarray(ulps, np.float64).reshape(len(rows), len(columns))
    finite = u[np.isfinite(u)]
    top = max(float(finite.max()) if finite.size else 0.0, 1.0)
    vmax = math.log2(1.0 + top)
    # log2(1 + ulps): 0 stays 0 (white); inf (formats differ) above vmax (the "over" colour)
    shown = np.where(np.isinf(u), 2 * vmax + 1, np.log2(1.0 + np.where(np.isinf(u), 0.0, u)))
    cmap = ListedColormap([(1.0, 1.0, 1.0), *_reds(255)]).with_extremes(
        bad="#bdbdbd", over="#212121"
    )
    fig = _figure(min(9.0, 2.6 + 0.45 * len(columns)) + 2.2, max(2.4, 1.2 + 0.22 * len(rows)))
    ax = fig.subplots()
    im = ax.imshow(np.ma.masked_invalid(shown), cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto",
                   interpolation="nearest")  # fmt: skip
    ax.set_xticks(range(len(columns)), list(columns), fontsize=8)
    ax.set_yticks(range(len(rows)), list(rows), fontsize=8)
    ax.set_xlabel("step")
    if title:
        ax.set_title(title)
    if u.size <= 600:
        for (i, j), v in np.ndenumerate(u):
            if v != 0 and not math.isnan(v):
                label = "fmt" if math.isinf(v) else f"{v:g}"
                colour = "white" if math.isinf(v) or shown[i, j] > 0.6 * vmax else "black"
                ax.text(j, i, label, ha="center", va="center", fontsize=7, color=colour)
    ticks = sorted({0.0, *(float(2**k - 1) for k in range(1, 64) if 2**k - 1 <= top), top})
    bar = fig.colorbar(im, ax=ax, extend="max", ticks=[math.log2(1 + t) for t in ticks])
    bar.ax.set_yticklabels([f"{t:g}" for t in ticks], fontsize=7)
    bar.set_label("max ulps", fontsize=8)
    return to_svg(fig)


def _reds(n: int) -> list[tuple[float, float, float]]:
    """``n`` colours from pale yellow to dark red (a fixed ramp: no colormap registry)."""
    lo, mid, hi = (
        np.array([1.0, 0.93, 0.55]),
        np.array([0.96, 0.45, 0.15]),
        np.array([0.55, 0.0, 0.05]),
    )
    out = []
    for t in np.linspace(0.0, 1.0, n):
        c = lo + (mid - lo) * (2 * t) if t < 0.5 else mid + (hi - mid) * (2 * t - 1)
        out.append((float(c[0]), float(c[1]), float(c[2])))
    return out


def stacked_bars(
    labels: Sequence[str],
    stacks: Mapping[str, Sequence[float]],
    *,
    colours: Mapping[str, str] | None = None,
    title: str = "",
    xlabel: str = "",
) -> str | None:
    """Horizontal bars, one per label, each stacked from ``stacks`` (segment -> one value per
    label), with the total written after each bar."""
    if not available():
        return None
    fig = _figure(9.0, 1.1 + 0.38 * max(len(labels), 1))
    ax = fig.subplots()
    y = np.arange(len(labels))
    left = np.zeros(len(labels))
    for name, vals in stacks.items():
        v = np.asarray(vals, np.float64)
        colour = (colours or {}).get(name)
        ax.barh(y, v, left=left, label=name, color=colour, height=0.6)
        left += v
    for yi, total in zip(y, left, strict=True):
        ax.text(total, yi, f" {total:g}", va="center", fontsize=8)
    ax.set_yticks(y, list(labels), fontsize=8)
    ax.invert_yaxis()  # first label on top, as in the tables
    ax.set_xlim(0, max(float(left.max(initial=0.0)) * 1.12, 1.0))
    ax.set_xlabel(xlabel)
    if title:
        ax.set_title(title)
    if stacks:  # above the axes, where it hides no bar
        fig.legend(fontsize="small", ncols=min(len(stacks), 7), loc="outside upper center")
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415 - optional dependency

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, axis="x", alpha=0.3)
    return to_svg(fig)


__all__ = ["STATUS_COLOURS", "available", "line_chart", "stacked_bars", "to_svg", "ulp_heatmap"]
