"""What every ``fpemu`` command's output obeys: the width, no trailing blanks, paths checked
before a run.

- :func:`width` is the width to fit: ``COLUMNS`` when set (as ``COLUMNS=80 fpemu ...``), else
  the terminal's, else None (a pipe without ``COLUMNS``: a command may print wide lines).
- :func:`console` is a rich console of that width (``pipe_width`` in a pipe without ``COLUMNS``).
- :class:`RStripWriter` drops the blanks rich pads table cells and titles with before each line
  end; :func:`fpemu.cli.main` wraps stdout in it when stdout is not a terminal.
- :func:`writable` refuses an output path whose folder does not exist, before anything runs.

>>> import io
>>> buf = io.StringIO()
>>> w = RStripWriter(buf)
>>> _ = w.write("a  \\nb "); _ = w.write(" \\n"); w.flush()
>>> buf.getvalue()
'a\\nb\\n'
"""

from __future__ import annotations

import io
import os
import shutil
import sys
import textwrap
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from fpemu.cli.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["RStripWriter", "console", "fill", "width", "writable"]


def width() -> int | None:
    """``COLUMNS`` when set to a number >= 20, else the terminal's width, else None (a pipe).

    >>> width() is None or width() >= 20
    True
    """
    text = os.environ.get("COLUMNS", "")
    if text.isdigit() and int(text) >= 20:
        return int(text)
    try:
        tty = sys.stdout.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stdout
        tty = False
    return shutil.get_terminal_size().columns if tty else None


def fill(text: str, *, indent: int | None = None, columns: int | None = None) -> str:
    """Each line of ``text`` wrapped at :func:`width` when it is known (else as it is), its
    continuation lines indented by ``indent`` (default: the line's own leading blanks); a
    token longer than the width (an exact decimal) is kept whole. ``columns`` overrides the
    width.

    >>> print(fill("  key  a b c d e f g h i j", indent=7, columns=20))
      key  a b c d e f
           g h i j
    """
    w = columns or width()
    if w is None:
        return text
    out = []
    for line in text.split("\n"):
        lead = len(line) - len(line.lstrip(" ")) if indent is None else indent
        out += textwrap.wrap(line, width=w, subsequent_indent=" " * lead, break_long_words=False,
                             break_on_hyphens=False) or [""]  # fmt: skip
    return "\n".join(out)


def console(*, pipe_width: int | None = None, **kwargs: Any) -> Console:
    """A rich console (no highlighting) of :func:`width` columns; ``pipe_width`` (default 80)
    where stdout is a pipe and ``COLUMNS`` is not set."""
    from rich.console import Console  # noqa: PLC0415 - display only

    w = width()
    return Console(highlight=False, width=w if w is not None else pipe_width or 80, **kwargs)


class RStripWriter(io.TextIOBase):
    """A text stream that writes ``target`` line by line without trailing blanks.

    A partial line is held until its newline (or :meth:`flush`), so that blanks split over
    two writes are dropped too.
    """

    def __init__(self, target: IO[str]) -> None:
        super().__init__()
        self.target = target
        self._pending = ""

    def write(self, text: str) -> int:
        """Write the complete lines of ``pending + text``, each without trailing blanks."""
        lines = (self._pending + text).split("\n")
        self._pending = lines.pop()
        if lines:
            self.target.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        """Write a held partial line as it is (a prompt, the end of the output)."""
        if self._pending.strip(" "):
            self.target.write(self._pending)
        self._pending = ""
        self.target.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.target.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.target, "encoding", None) or "utf-8"


def writable(option: str, path: Path | str | None) -> None:
    """Refuse ``path`` for ``option`` unless its folder exists and it is not a folder
    (``-`` and None: stdout or no file, accepted).

    >>> writable("--json", "/no/such/r.json")
    Traceback (most recent call last):
    ...
    fpemu.cli.errors.UsageError: --json /no/such/r.json: folder /no/such does not exist
    """
    if path is None or str(path) == "-":
        return
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{option} {path}: is a folder; expected a file path")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"{option} {path}: folder {parent} is not writable")
