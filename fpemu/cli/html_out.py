"""The ``--html FILE`` option of ``validate``, ``verify`` and ``experiment``: a self-contained
page of the report (its ``to_html()``; the pages themselves are :mod:`fpemu.pages`).

The path is checked before the run (a long run must not end in a missing folder).

>>> import argparse
>>> p = argparse.ArgumentParser()
>>> add_html_option(p)
>>> try:
...     check_html_path(p.parse_args(["--html", "/nowhere/r.html"]).html)
... except UsageError as err:
...     print(err)
--html /nowhere/r.html: folder /nowhere does not exist; accepted a file in an existing folder
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fpemu.cli.errors import UsageError


def add_html_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--html FILE`` to ``parser``."""
    parser.add_argument("--html", metavar="FILE", type=Path, default=None,
                        help="also write the report as one self-contained HTML page (tables "
                             "sortable by a click, plots inline; nothing fetched)")  # fmt: skip


def check_html_path(path: Path | None) -> None:
    """Refuse, before the run, a ``--html`` path that cannot be written: a folder, or a file in
    a folder that does not exist.

    Raises:
        UsageError: (a ValueError) one line naming the path.
    """
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"--html {path}: is a folder; accepted a file path")
    if not path.parent.is_dir():
        raise UsageError(f"--html {path}: folder {path.parent} does not exist; accepted a file "
                         "in an existing folder")  # fmt: skip


def write_html(path: Path | None, report: Any) -> None:
    """Write ``report.to_html()`` to ``path`` (nothing when ``path`` is None)."""
    if path is not None:
        path.write_text(report.to_html(), encoding="utf-8")
