"""One self-contained HTML page: title, summary, facts, sections, sortable tables, figures.

Everything a :class:`Page` writes is escaped (:func:`html.escape`) at the point it is added,
except figures, which are SVG text made by :mod:`fpemu.pages.figures` (matplotlib's SVG
backend) and kept apart from user text. The page loads nothing: its CSS and its few lines of
JavaScript (click a table header to sort by that column, again to reverse) are inline, its
figures are inline SVG, and it names no URL.

>>> p = Page("demo <1>", summary="2 checks")
>>> s = p.section("Results")
>>> s.table(["name", "ulps"], [["a<b", 3], ["c", 1.5]])
>>> text = p.render()
>>> "demo &lt;1&gt;" in text and "a&lt;b" in text and 'data-sort="1.5"' in text
True
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

Cell = str | int | float | None
Tone = Literal["good", "warn", "bad", "muted", ""]

#: Shown in place of a figure when matplotlib is missing.
NO_PLOTS = "The plots need matplotlib: pip install 'fpemu[plot]'"

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1b1b1b;
margin:0;background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid
#ddd;padding-bottom:4px}h3{font-size:16px;margin:18px 0 6px}
.summary{font-size:16px;padding:8px 12px;border-radius:6px;background:#eef3f8;margin:8px 0}
.summary.good{background:#e6f4ea}.summary.bad{background:#fdecea}.summary.warn{background:#fff6e0}
table{border-collapse:collapse;margin:6px 0 14px;background:#fff;font-size:13px}
th,td{border:1px solid #d5d5d5;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f0;position:sticky;top:0}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th:after{content:" \\2195";color:#999;font-size:11px}
th.asc:after{content:" \\2191"!important;color:#333!important}
th.desc:after{content:" \\2193"!important;color:#333!important}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.good{color:#1b5e20}.warn{color:#8a5a00}.bad{color:#b71c1c;font-weight:600}.muted{color:#777}
caption{caption-side:top;text-align:left;color:#555;padding:2px 0}
figure{margin:10px 0 18px;background:#fff;border:1px solid #e0e0e0;padding:8px}
figure svg{max-width:100%;height:auto}figcaption{color:#555;font-size:13px}
.noplot{color:#8a5a00;font-style:italic}
details{margin:4px 0}summary{cursor:pointer;font-weight:600}
dl.facts{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;margin:8px 0}
dl.facts dt{color:#555}dl.facts dd{margin:0;word-break:break-word}
footer{color:#888;font-size:12px;margin-top:36px}
"""

# Sort a table by the clicked header: numbers (data-sort, else the cell text, "inf" too), then
# text, then empty cells; stable on ties; a second click on the same header reverses. Plain DOM.
_JS = """
(function(){
function key(td){var v=td.getAttribute('data-sort');if(v===null)v=td.textContent.trim();
if(v==='')return [2,''];
var n=v==='inf'?Infinity:(v==='-inf'?-Infinity:Number(v));
return isNaN(n)?[1,v.toLowerCase()]:[0,n];}
function cmp(a,b){if(a[0]!==b[0])return a[0]-b[0];return a[1]<b[1]?-1:(a[1]>b[1]?1:0);}
document.querySelectorAll('table.sortable').forEach(function(t){
var hs=t.tHead.rows[0].cells;
Array.prototype.forEach.call(hs,function(th,i){th.addEventListener('click',function(){
var dir=th.classList.contains('asc')?-1:1;
Array.prototype.forEach.call(hs,function(h){h.classList.remove('asc','desc');});
th.classList.add(dir>0?'asc':'desc');
var body=t.tBodies[0],rows=Array.prototype.slice.call(body.rows);
rows=rows.map(function(r,j){return [key(r.cells[i]),j,r];});
rows.sort(function(a,b){return dir*cmp(a[0],b[0])||a[1]-b[1];});
rows.forEach(function(x){body.appendChild(x[2]);});});});});
})();
"""


def esc(text: object) -> str:
    """``text`` as HTML text or attribute value (quotes escaped too).

    >>> esc('<script>"x"</script>')
    '&lt;script&gt;&quot;x&quot;&lt;/script&gt;'
    """
    return html.escape(str(text), quote=True)


def _cell(value: Cell, tone: str) -> str:
    cls = [tone] if tone else []
    if isinstance(value, bool) or value is None or isinstance(value, str):
        text = "" if value is None else str(value)
        attrs = f' class="{" ".join(cls)}"' if cls else ""
        return f"<td{attrs}>{esc(text)}</td>"
    v = float(value)
    shown = str(value) if isinstance(value, int) else _number(v)
    cls.append("num")
    key = shown if isinstance(value, int) or not math.isfinite(v) else repr(v)
    return f'<td class="{" ".join(cls)}" data-sort="{esc(key)}">{esc(shown)}</td>'


def _number(v: float) -> str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.6g}"


class Section:
    """Part of a page: headed content, added in order (see :meth:`Page.section`)."""

    def __init__(self, title: str, *, level: int = 2, collapsed: bool | None = None) -> None:
        self.title = title
        self.level = level
        self.collapsed = collapsed  # None: a plain section; else a <details> group
        self.parts: list[str | Section] = []
        self.tables = 0

    def text(self, paragraph: str, *, tone: Tone = "") -> None:
        """A paragraph of plain text."""
        cls = f' class="{tone}"' if tone else ""
        self.parts.append(f"<p{cls}>{esc(paragraph)}</p>")

    def facts(self, items: Mapping[str, object]) -> None:
        """Key-value pairs (settings, environment) as a definition list."""
        rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items.items())
        self.parts.append(f'<dl class="facts">{rows}</dl>')

    def table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[Cell]],
        *,
        caption: str = "",
        tones: Sequence[Sequence[str]] | None = None,
        sortable: bool = True,
    ) -> None:
        """A table; numbers are right-aligned and sort numerically; click a header to sort.

        ``tones``, when given, has one sequence per row with one CSS tone per cell
        ("good", "warn", "bad", "muted" or "").

        Raises:
            ValueError: a row with another number of cells than ``columns``.
        """
        body = []
        for i, row in enumerate(rows):
            if len(row) != len(columns):
                raise ValueError(f"rows[{i}] has {len(row)} cells; columns has {len(columns)}")
            tone = list(tones[i]) if tones is not None else [""] * len(row)
            body.append(
                "<tr>" + "".join(_cell(v, t) for v, t in zip(row, tone, strict=True)) + "</tr>"
            )
        head = "".join(f"<th>{esc(c)}</th>" for c in columns)
        cls = ' class="sortable"' if sortable else ""
        cap = f"<caption>{esc(caption)}</caption>" if caption else ""
        self.parts.append(f"<table{cls}>{cap}<thead><tr>{head}</tr></thead>"
                          f"<tbody>{''.join(body)}</tbody></table>")  # fmt: skip
        self.tables += 1

    def figure(self, svg: str | None, caption: str) -> None:
        """A figure from :mod:`fpemu.pages.figures` (inline SVG), or, where matplotlib is
        missing (``svg`` is None), a line saying how to get the plots."""
        inner = svg if svg is not None else f'<p class="noplot">{esc(NO_PLOTS)}</p>'
        self.parts.append(f"<figure>{inner}<figcaption>{esc(caption)}</figcaption></figure>")

    def group(self, title: str, *, collapsed: bool = True) -> Section:
        """A nested group that the reader can fold (``<details>``), returned to fill."""
        sub = Section(title, level=min(self.level + 1, 6), collapsed=collapsed)
        self.parts.append(sub)
        return sub

    def render(self) -> str:
        """The section as HTML."""
        inner = "".join(p.render() if isinstance(p, Section) else p for p in self.parts)
        if self.collapsed is None:
            return f"<section><h{self.level}>{esc(self.title)}</h{self.level}>{inner}</section>"
        opened = "" if self.collapsed else " open"
        return f"<details{opened}><summary>{esc(self.title)}</summary>{inner}</details>"


class Page:
    """A report page: a title, a one-line summary, then sections in order.

    Args:
        title: the page title (also the ``<title>``).
        summary: one line under the title: the verdict.
        tone: colours the summary: "good", "warn", "bad" or "" (neutral).
    """

    def __init__(self, title: str, *, summary: str = "", tone: Tone = "") -> None:
        self.title = title
        self.summary = summary
        self.tone = tone
        self.sections: list[Section] = []

    def section(self, title: str) -> Section:
        """A new top-level section, appended and returned to fill."""
        s = Section(title)
        self.sections.append(s)
        return s

    def render(self) -> str:
        """The whole page: one HTML5 document, nothing to fetch."""
        tone = f" {self.tone}" if self.tone else ""
        summary = f'<p class="summary{tone}">{esc(self.summary)}</p>' if self.summary else ""
        body = "".join(s.render() for s in self.sections)
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(self.title)}</title><style>{_CSS}</style></head>"
            f"<body><main><h1>{esc(self.title)}</h1>{summary}{body}"
            "<footer>Written by fpemu. Click a table header to sort by it.</footer></main>"
            f"<script>{_JS}</script></body></html>\n"
        )


__all__ = ["NO_PLOTS", "Cell", "Page", "Section", "Tone", "esc"]
