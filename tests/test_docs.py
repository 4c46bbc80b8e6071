"""The documentation is executed: every ```python block of docs/*.md and README.md runs.

Rules:

- Each page is one test case (id = file name). Its ```python blocks run in order in one fresh
  namespace, so a block may use names defined by earlier blocks of the same page.
- A ```text block that follows a ```python block directly (nothing but blank lines between)
  is that block's expected output: what the block prints must equal it, line by line
  (trailing spaces ignored). Printed numbers in the docs therefore come from fpemu.
- A block whose first line is ``# requires: torch`` (comma-separated module names) needs
  optional packages: when one is missing, the rest of the page is skipped (importorskip).
  A block that fails to import one of the optional packages in :data:`OPTIONAL` without
  declaring it is skipped the same way (with a message saying so), so a GPU-only page does
  not fail on a machine without CuPy; every other error fails the page.
- Python that must not run (it needs files or hardware) goes in a ```py or ```pycon block:
  highlighted, not executed.
- ``mkdocs build --strict`` must succeed (skipped when mkdocs or mkdocstrings is absent; the
  ``docs`` tox env installs them).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_REQUIRES = re.compile(r"#\s*requires:\s*(.+)")
#: Optional packages a page may use; fpemu itself never needs them.
OPTIONAL = frozenset({"torch", "keras", "cupy", "matplotlib", "sklearn", "tqdm"})


@dataclass(frozen=True)
class Block:
    """One ```python block, where it starts, and the output it must print (if given)."""

    code: str
    line: int
    expected: str | None


def blocks(text: str) -> list[Block]:
    """The python blocks of a markdown text, each with the ```text block right after it."""
    fences = [(m.group(1), m.group(2), m.start(), m.end()) for m in _FENCE.finditer(text)]
    out = []
    for i, (lang, body, start, end) in enumerate(fences):
        if lang != "python":
            continue
        expected = None
        if i + 1 < len(fences):
            nlang, nbody, nstart, _ = fences[i + 1]
            if nlang == "text" and not text[end:nstart].strip():
                expected = nbody
        out.append(Block(body, text.count("\n", 0, start) + 2, expected))
    return out


def _lines(s: str) -> list[str]:
    return [line.rstrip() for line in s.strip("\n").splitlines()]


def run_page(path: Path) -> None:
    """Execute a page's python blocks in order in one namespace; compare printed output."""
    namespace: dict[str, object] = {"__name__": f"docs_{path.stem.replace('-', '_')}"}
    for block in blocks(path.read_text(encoding="utf-8")):
        first = block.code.lstrip().splitlines()[0] if block.code.strip() else ""
        req = _REQUIRES.fullmatch(first.strip())
        if req:
            for name in req.group(1).split(","):
                pytest.importorskip(name.strip())
        where = f"{path.name}:{block.line}"
        buf = io.StringIO()
        try:
            with contextlib.redirect_stdout(buf):
                exec(compile(block.code, where, "exec"), namespace)  # executing docs is the point
        except ModuleNotFoundError as err:
            if err.name is None or err.name.split(".")[0] not in OPTIONAL:
                raise
            pytest.skip(f"{where}: needs {err.name} (better: declare '# requires: {err.name}')")
        if block.expected is not None:
            got, want = _lines(buf.getvalue()), _lines(block.expected)
            assert got == want, (
                f"{where}: printed output differs from the ```text block after it\n"
                f"--- printed\n{buf.getvalue()}--- documented\n{block.expected}"
            )


@pytest.mark.parametrize("path", PAGES, ids=[p.name for p in PAGES])
def test_page_examples_run(path: Path) -> None:
    run_page(path)


def test_block_extraction() -> None:
    """The extractor finds python blocks, their output blocks, and nothing else."""
    text = (
        "intro\n```python\nprint(1)\n```\n\n```text\n1\n```\n"
        "```bash\nls\n```\n```python\nx = 2\n```\nprose\n```text\nnot output\n```\n"
    )
    found = blocks(text)
    assert [b.code for b in found] == ["print(1)\n", "x = 2\n"]
    assert [b.expected for b in found] == ["1\n", None]
    assert found[0].line == 3


def test_output_mismatch_is_caught(tmp_path: Path) -> None:
    """A wrong documented output fails the page (so the check is not vacuous)."""
    page = tmp_path / "bad.md"
    page.write_text("```python\nprint(1 + 1)\n```\n\n```text\n3\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="printed output differs"):
        run_page(page)


def test_missing_optional_package_skips(tmp_path: Path) -> None:
    """An undeclared optional import skips; a missing non-optional module fails."""
    page = tmp_path / "gpu.md"
    page.write_text("```python\nimport cupy_that_is_not_there\n```\n", encoding="utf-8")
    with pytest.raises(ModuleNotFoundError):
        run_page(page)
    page.write_text("```python\n# requires: not_installed_pkg\nx = 1\n```\n", encoding="utf-8")
    with pytest.raises(pytest.skip.Exception):
        run_page(page)


def test_api_docstring_rendering() -> None:
    """The griffe extension behind docs/api.md fences doctests and converts Sphinx roles."""
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        g = importlib.import_module("griffe_doctest")
    except ModuleNotFoundError as err:  # griffe comes with mkdocstrings[python]
        pytest.skip(f"{err.name} is not installed")
    finally:
        sys.path.remove(str(ROOT / "docs"))
    text = "Intro.\n\n    >>> f([1])\n    [1.0]\n\nSee :func:`~fpemu.rounding.round`."
    assert g.convert_roles(g.fence_doctests(text)).split("\n") == [
        "Intro.", "", "    ```pycon", "    >>> f([1])", "    [1.0]", "    ```", "",
        "See [`round`][fpemu.rounding.round].",
    ]  # fmt: skip
    assert g.convert_roles(":data:`fpemu.formats.FORMATS`") == "`fpemu.formats.FORMATS`"


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with warnings treated as errors (broken links, bad API references)."""
    for module in ("mkdocs", "mkdocstrings", "mkdocstrings_handlers.python"):
        if importlib.util.find_spec(module.split(".")[0]) is None:
            pytest.skip(f"{module} is not installed (pip install '.[docs]')")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
