"""Griffe extension for the API reference: docstrings written for Sphinx/doctest, as Markdown.

- Doctests sit in the running text. Markdown would read their output (``[1.0, 2.0]``) as
  reference links and join the lines into a paragraph, so each run of doctest lines (prompts,
  continuations and output, up to a blank line) is wrapped in a ``pycon`` fence.
- Sphinx roles (``:func:`~fpemu.rounding.round```) become cross-references for fpemu objects
  (``[round][fpemu.rounding.round]``) and inline code for anything else.

Used by mkdocs.yml; not part of the fpemu package.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(class|func|meth|mod|data|attr|exc|obj|const):`(~?)([\w.]+)`")
#: Roles whose fpemu targets always have their own heading in the API page (undocumented
#: module constants do not, so ``:data:`` stays plain code).
_LINKED = {"class", "func", "meth", "mod", "exc"}


def _role(m: re.Match[str]) -> str:
    role, short, target = m.group(1), m.group(2), m.group(3)
    text = target.rsplit(".", 1)[-1] if short else target
    linked = role in _LINKED and target.startswith("fpemu.")
    return f"[`{text}`][{target}]" if linked else f"`{text}`"


def convert_roles(text: str) -> str:
    """Turn Sphinx roles into autorefs links (fpemu functions, classes) or inline code.

    >>> convert_roles(":func:`~fpemu.rounding.round` and :class:`numpy.random.Generator`")
    '[`round`][fpemu.rounding.round] and `numpy.random.Generator`'
    """
    return _ROLE.sub(_role, text)


def fence_doctests(text: str) -> str:
    """Wrap every run of doctest lines in a fenced ``pycon`` block at the run's indentation.

    >>> fence_doctests("Intro.\\n\\n>>> 1 + 1\\n2\\n\\nEnd.").split("\\n")[2:6]
    ['```pycon', '>>> 1 + 1', '2', '```']
    """
    out: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.lstrip().startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(line.lstrip())]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip():
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Apply :func:`fence_doctests` and :func:`convert_roles` to every docstring."""

    def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
        """Rewrite the object's docstring in place."""
        if obj.docstring is not None:
            obj.docstring.value = convert_roles(fence_doctests(obj.docstring.value))
