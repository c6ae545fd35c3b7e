"""The report as a reader meets it, in headless Chromium: readable from a narrow window to a wide screen
(no sideways scrolling at 800 and 1,920 px) and every figure opening at full resolution."""

import re
import shutil
import subprocess
from urllib.parse import unquote, urlparse

import pytest

from tests.helpers.report_checks import ReportParser

PNG, PDF = b"\x89PNG\r\n\x1a\n", b"%PDF"
WIDTHS = (800, 1920)


def _browser() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium; .ci/run installs it); "
                    "browser checks skipped")
    return browser


def _body(browser: str, page, width: int) -> dict[str, str]:
    """The ``data-*`` attributes the page's script sets on ``<body>`` once loaded, at ``width`` px."""
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                          f"--window-size={width},1000", "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    return dict(re.findall(r'data-([a-z-]+)="(\d+)"', re.search(r"<body[^>]*>", dom).group(0)))


@pytest.mark.slow
@pytest.mark.parametrize("width", WIDTHS)
def test_no_sideways_scrolling(test_preset_report, width):
    browser = _browser()
    out, _ = test_preset_report
    seen = _body(browser, out / "index.html", width)
    assert int(seen["viewport-width"]) == width
    assert int(seen["scroll-width"]) <= width, seen
    assert seen["broken-images"] == "0"


@pytest.mark.slow
def test_the_width_check_can_fail(test_preset_report, tmp_path):
    browser = _browser()
    out, _ = test_preset_report
    page = tmp_path / "index.html"
    page.write_text((out / "index.html").read_text().replace("<main>", '<main><div style="width:1200px">x</div>'))
    assert int(_body(browser, page, 800)["scroll-width"]) > 800


@pytest.mark.slow
def test_every_figure_opens_at_full_resolution(test_preset_report):
    out, _ = test_preset_report
    parser = ReportParser()
    parser.feed((out / "index.html").read_text())
    figures = [h for h in parser.links if urlparse(h).path.endswith((".png", ".pdf"))]
    # Every image on the page is a link to itself at full size, and has its PDF beside it.
    for src in parser.images:
        assert src in parser.links and src[:-4] + ".pdf" in parser.links, src
    for href in figures:
        path = out / unquote(urlparse(href).path)
        assert path.is_file(), href
        assert path.read_bytes()[:8].startswith(PNG if href.endswith(".png") else PDF), href
    assert len(figures) >= 2 * len(parser.images) >= 18
