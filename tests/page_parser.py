"""Reading fpemu's HTML pages back with the standard library's parser, for the page tests.

:func:`parse` checks that every element is closed in order (a page the builder got wrong shows
up as a mismatched end tag), and collects what the tests look at: tags, attributes, text and
tables (caption, header, rows of cell texts, each cell's ``data-sort``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}  # fmt: skip


@dataclass
class Table:
    caption: str = ""
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    sort_keys: list[list[str | None]] = field(default_factory=list)
    classes: str = ""


@dataclass
class Parsed:
    tags: Counter[str] = field(default_factory=Counter)
    attrs: list[tuple[str, str, str]] = field(default_factory=list)  # (tag, name, value)
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out = Parsed()
        self.stack: list[str] = []
        self.cell: list[str] | None = None
        self.cell_key: str | None = None
        self.table: Table | None = None
        self.row: list[str] | None = None
        self.keys: list[str | None] | None = None
        self.in_caption = False
        self.in_script = False

    def _attrs(self, tag: str, attrs: list[tuple[str, str | None]]) -> dict[str, str]:
        self.out.tags[tag] += 1
        d = {k: v or "" for k, v in attrs}
        for k, v in d.items():
            self.out.attrs.append((tag, k, v))
            if k == "id":
                self.out.ids.append(v)
        return d

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        d = self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)
        if tag == "table":
            self.table = Table(classes=d.get("class", ""))
        elif tag == "tr":
            self.row, self.keys = [], []
        elif tag in ("td", "th"):
            self.cell, self.cell_key = [], d.get("data-sort")
        elif tag == "caption":
            self.in_caption = True
        elif tag == "script":
            self.in_script = True

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._attrs(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.out.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else ''}>")
            return
        self.stack.pop()
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row.append("".join(self.cell).strip())
            if self.keys is not None:
                self.keys.append(self.cell_key)
            self.cell = None
        elif tag == "tr" and self.table is not None and self.row is not None:
            if not self.table.header:
                self.table.header = self.row
            else:
                self.table.rows.append(self.row)
                self.table.sort_keys.append(self.keys or [])
            self.row = None
        elif tag == "table" and self.table is not None:
            self.out.tables.append(self.table)
            self.table = None
        elif tag == "caption":
            self.in_caption = False
        elif tag == "script":
            self.in_script = False

    def handle_data(self, data: str) -> None:
        if self.in_script:
            self.out.scripts.append(data)
            return
        self.out.text.append(data)
        if self.cell is not None:
            self.cell.append(data)
        if self.in_caption and self.table is not None:
            self.table.caption += data


def parse(page: str) -> Parsed:
    """The parts of ``page``; ``errors`` lists misnested or unclosed elements."""
    p = _Parser()
    p.feed(page)
    p.close()
    if p.stack:
        p.out.errors.append(f"unclosed: {p.stack}")
    return p.out


def external_references(parsed: Parsed, page: str) -> list[str]:
    """Everything that would make a browser fetch something: a src/href that is not a
    ``#fragment`` or an inline ``data:image/png;base64`` (imshow's pixels in SVG), a URL in any
    attribute, a <link>, a <script src>, an <iframe>/<object>/<embed>/<img>, a CSS url() or
    @import, or the text ``http:``/``https:``/``//`` as a reference anywhere in the page."""
    found = []
    for tag, name, value in parsed.attrs:
        v = value.strip().lower()
        if name in ("src", "href", "xlink:href", "action", "data", "srcset", "poster"):
            if not v.startswith(("#", "data:image/png;base64,")):  # in the page, or inline
                found.append(f"<{tag} {name}={value!r}>")
        if v.startswith(("http:", "https:", "//", "ftp:", "data:text/html")):
            found.append(f"<{tag} {name}={value!r}>")
    for tag in ("link", "iframe", "object", "embed", "img", "base"):
        if parsed.tags[tag]:
            found.append(f"<{tag}> x{parsed.tags[tag]}")
    low = page.lower()
    for needle in ("http://", "https://", "@import", "url(http", "url(//"):
        if needle in low:
            found.append(needle)
    return found
