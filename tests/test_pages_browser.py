"""The report pages in a real browser: headless Chromium draws them and runs their script.

Skipped, with the reason, where no ``chromium`` or ``chromium-browser`` is on PATH (CI does not
install one; on Debian: ``apt-get install chromium``).

Two runs of the browser per page:

- ``--screenshot`` (1200 x 1600, the page as a reader sees it first) with
  ``--enable-logging=stderr --v=0``, which copies the page's console to stderr: an uncaught
  JavaScript error appears there as ``"Uncaught ..."``. The PNG must be that size and not one
  colour.
- ``--dump-dom`` on a copy of the page with a probe script put first in ``<head>``: it listens
  for ``error`` events on ``window`` before the page's own script runs (so an exception thrown
  by the page's script at load, or by a click handler, is recorded), then, on ``load``, clicks
  table headers as told and writes what it saw (the errors, the column after each click, the
  number of figures) as JSON into an attribute of ``<body>``, which the dumped DOM carries back.
  A missing attribute fails the test: a probe that did not run proves nothing.

``test_a_planted_error_is_seen_by_both_methods`` shows that both methods do see an error.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fpemu.pages import Page
from fpemu.pages.figures import available
from fpemu.validate.frameworks.report import CheckResult, Report
from fpemu.verify.report import ChunkResult
from fpemu.verify.report import Report as CampaignReport
from tests.page_parser import parse
from tests.test_pages import HOSTILE, _hand_made_model_report

BROWSER = next((shutil.which(n) for n in ("chromium", "chromium-browser") if shutil.which(n)),
               None)  # fmt: skip
pytestmark = pytest.mark.skipif(
    BROWSER is None, reason="no chromium or chromium-browser on PATH (apt-get install chromium)"
)
WIDTH, HEIGHT = 1200, 1600

PROBE = """<script>
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });
window.addEventListener('load', function () {
  var out = {errors: window.__errors, columns: [],
             figures: document.querySelectorAll('figure svg').length};
  try {
    var t = document.querySelector('table.sortable');
    CLICKS.forEach(function (i) {
      t.tHead.rows[0].cells[i].click();
      out.columns.push(Array.prototype.map.call(t.tBodies[0].rows,
                                                function (r) { return r.cells[i].textContent; }));
    });
  } catch (e) { out.errors.push('probe: ' + e); }
  document.body.setAttribute('data-probe', JSON.stringify(out));
});
</script>"""


def _browser(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert BROWSER is not None
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
           f"--user-data-dir={tmp / 'profile'}", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def screenshot(tmp: Path, page: str) -> tuple[Path, str]:
    """Draw ``page``; return the PNG and the browser's stderr (the console among it)."""
    html, png = tmp / "page.html", tmp / "page.png"
    html.write_text(page, encoding="utf-8")
    run = _browser(tmp, "--enable-logging=stderr", "--v=0", f"--screenshot={png}",
                   f"--window-size={WIDTH},{HEIGHT}", html.as_uri())  # fmt: skip
    assert png.is_file(), f"no screenshot; browser said: {run.stderr[-2000:]}"
    return png, run.stderr


def probe(tmp: Path, page: str, clicks: list[int] | None = None) -> dict[str, Any]:
    """Load ``page`` with the probe; click the first sortable table's headers ``clicks``."""
    html = tmp / "probed.html"
    script = PROBE.replace("CLICKS", json.dumps(clicks or []))
    html.write_text(page.replace("<head>", "<head>" + script, 1), encoding="utf-8")
    run = _browser(tmp, "--virtual-time-budget=3000", "--dump-dom", html.as_uri())
    found = [v for tag, k, v in parse(run.stdout).attrs if tag == "body" and k == "data-probe"]
    assert found, f"the probe did not run; browser said: {run.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(found[0])
    return result


def check_png(png: Path) -> None:
    """A PNG of WIDTH x HEIGHT pixels that is not a single colour."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == (WIDTH, HEIGHT)
    image = pytest.importorskip("PIL.Image").open(png)
    image.load()  # decodes every chunk: a truncated file raises here
    colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is None or len(colours) > 16, f"a blank page: {colours}"


@functools.cache
def _pages() -> dict[str, tuple[str, int]]:
    """Pages to draw, each with the number of figures it shows (with matplotlib)."""
    checks = Report(title=f"validate torch {HOSTILE}", environment={"torch": "x"})
    checks.add(CheckResult("casts", "f32 -> bf16", "agree", compared=3))
    checks.add(CheckResult("casts", "f32 -> f16", "differ", compared=3, witness={"in": "0x1"}))
    checks.add(CheckResult("scaler", "growth", "finding", notes=["a note"]))
    bad = CampaignReport.from_chunks(HOSTILE, "planted", 1,
                                     [ChunkResult(0, 0, 40, {"tie": 3, "nan": 1})])  # fmt: skip
    pages = {"model": (_hand_made_model_report().to_html(), 2),
             "checks": (checks.to_html(), 1), "campaign": (bad.to_html(), 1)}  # fmt: skip
    try:
        import sklearn  # noqa: F401, PLC0415 - the experiment's data set
    except ImportError:
        return pages
    from fpemu.training.experiment import run_experiment  # noqa: PLC0415

    res = run_experiment(configs=("digits",), runs=("FP32", "FP16 + dynamic scaling"), steps=3,
                         progress=False)  # fmt: skip
    pages["experiment"] = (res.to_html(), 2)
    return pages


@pytest.mark.parametrize("name", ["model", "checks", "campaign", "experiment"])
def test_page_draws_without_a_script_error(tmp_path: Path, name: str) -> None:
    pages = _pages()
    if name not in pages:
        pytest.skip("the experiment's digits data set needs scikit-learn")
    page, figures = pages[name]
    png, stderr = screenshot(tmp_path, page)
    check_png(png)
    assert "Uncaught" not in stderr, stderr[-2000:]
    seen = probe(tmp_path, page, clicks=[0, 0])  # sort the first table both ways
    assert seen["errors"] == []
    assert seen["figures"] == (figures if available() else 0)
    first, second = seen["columns"]
    assert second == first[::-1] or len(set(first)) < len(first)  # reversed (ties keep order)


def test_clicking_a_header_sorts_numbers_as_numbers(tmp_path: Path) -> None:
    page = Page("sorting")
    page.section("s").table(
        ["name", "ulps", "note"],
        [["b", 10, "x"], ["a", math.inf, "y"], ["c", 2, ""], ["d", 1.5, "z"]],
    )
    seen = probe(tmp_path, page.render(), clicks=[1, 1, 0, 2])
    assert seen["errors"] == []
    assert seen["columns"] == [["1.5", "2", "10", "inf"],  # 10 after 2: numbers, not text
                               ["inf", "10", "2", "1.5"],  # the second click reverses
                               ["a", "b", "c", "d"],
                               ["x", "y", "z", ""]]  # fmt: skip


def test_a_planted_error_is_seen_by_both_methods(tmp_path: Path) -> None:
    page = Page("broken")
    page.section("s").table(["a"], [[1]])
    broken = page.render().replace("</main>", "</main><script>notDefined();</script>")
    _, stderr = screenshot(tmp_path, broken)
    assert "Uncaught ReferenceError: notDefined is not defined" in stderr
    seen = probe(tmp_path, broken)
    assert seen["errors"] == ["Uncaught ReferenceError: notDefined is not defined"]
