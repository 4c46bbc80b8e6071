"""Self-contained HTML report pages: escaped text, sortable tables, inline SVG figures.

The validation, verification and experiment reports build their ``to_html()`` pages from
:class:`Page` and the figures of :mod:`fpemu.pages.figures`. A page fetches nothing: CSS and
JavaScript are inline, figures are inline SVG (matplotlib's SVG backend, the ``plot`` extra;
without it a page keeps its tables and says how to get the plots).

>>> p = Page("demo", summary="all agree", tone="good")
>>> p.section("Checks").table(["check", "status"], [["casts", "agree"]])
>>> p.render().startswith("<!DOCTYPE html>")
True
"""

from fpemu.pages.figures import line_chart, stacked_bars, ulp_heatmap
from fpemu.pages.page import NO_PLOTS, Page, Section, esc

__all__ = ["NO_PLOTS", "Page", "Section", "esc", "line_chart", "stacked_bars", "ulp_heatmap"]
