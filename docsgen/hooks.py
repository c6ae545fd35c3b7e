"""MkDocs hooks (``mkdocs.yml``: ``hooks``): put the generated pages into the build — the CLI reference, the
figure gallery, the executed tutorials and the benchmark table — as files of the build, never of the
repository. ``COUNTLENS_DOCS_REPORT`` names the report folder whose pictures the gallery shows (default
``build/docs-report``, which ``make docs`` fills with ``countlens reproduce --preset test``)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

log = logging.getLogger("mkdocs.hooks.countlens")
TIMINGS: dict[str, float] = {}


def report_folder() -> Path | None:
    """The report folder the gallery's pictures come from (``None`` where there is none)."""
    folder = Path(os.environ.get("COUNTLENS_DOCS_REPORT", ROOT / "build" / "docs-report"))
    return folder if folder.is_dir() else None


def front_page() -> str:
    """The site's home page: the README, its links into ``docs/`` made relative to the site, its tutorial
    scripts linked as their executed pages."""
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    text = text.replace("](docs/", "](").replace("](BENCHMARKS.md)", "](benchmarks.md)")
    text = text.replace("](tutorials/)", "](tutorials/a_probe_a_model.md)").replace("](gallery/notes/)", "](gallery/index.md)")
    text = re.sub(r"\]\(gallery/notes/([a-z0-9-]+)\.md\)", r"](gallery/\1.md)", text)
    return re.sub(r"\]\((tutorials/[a-z_]+)\.py\)", r"](\1.md)", text)


def generated_pages() -> dict[str, str | bytes]:
    """Every generated file of the site, by its path in the site's sources."""
    import time

    from docsgen import benchmarks, cli_reference, gallery, notebook

    out: dict[str, str | bytes] = {}
    start = time.perf_counter()
    out["index.md"] = front_page()
    out["reference/cli.md"] = cli_reference.reference()
    out.update(gallery.pages(report_folder()))
    out["benchmarks.md"] = benchmarks.page()
    TIMINGS["generated pages"] = time.perf_counter() - start
    for script in sorted((ROOT / "docs" / "tutorials").glob("*.py")):
        run = notebook.execute(script)
        TIMINGS[f"tutorial {script.stem}"] = run.seconds
        log.info("tutorial %s executed in %.1f s", script.stem, run.seconds)
        if run.error:
            raise RuntimeError(f"tutorial {script.name} failed: {run.error}")
        out[f"tutorials/{script.stem}.md"] = run.markdown
        out.update({f"tutorials/{name}": png for name, png in run.images.items()})
    return out


API_TREE = ROOT / "build" / "docs-api"
ROOMS = {"toy": "toy", "llm": "llm", "probes": "probes", "analysis": "analysis"}  # pyproject.toml's package-dir


def api_tree() -> Path:
    """The package as it imports, for mkdocstrings to read: ``build/docs-api/countlens/`` links every folder of
    ``countlens/`` (and copies its files) and the rooms that install below it from folders of their own (``countlens.toy`` is
    ``toy/``), which griffe's finder does not follow."""
    package = API_TREE / "countlens"
    package.mkdir(parents=True, exist_ok=True)
    wanted = {entry.name: entry for entry in (ROOT / "countlens").iterdir() if entry.name != "__pycache__"}
    wanted.update({name: ROOT / folder for name, folder in ROOMS.items()})
    import shutil

    for entry in package.iterdir():
        if entry.is_symlink() or entry.is_file():
            entry.unlink()
        else:
            shutil.rmtree(entry)
    for name, target in wanted.items():
        if target.is_dir():
            (package / name).symlink_to(target)
        else:  # a copy: griffe follows a linked __init__.py back to countlens/ and misses the rooms
            shutil.copyfile(target, package / name)
    return API_TREE


def on_startup(command, dirty):
    """Build the API tree before any plugin reads its configuration: mkdocstrings-python globs its ``paths``
    when its handler starts, and drops a path that does not exist yet (a fresh clone has no ``build/``)."""
    api_tree()


def on_config(config):
    api_tree()  # also here for ``mkdocs serve``'s rebuilds, which run on_config again but not on_startup
    return config


def on_files(files, config):
    from mkdocs.structure.files import File

    for path, content in generated_pages().items():
        files.append(File.generated(config, path, content=content))
    return files


def on_post_build(config):
    import json

    (Path(config["site_dir"]) / "timings.json").write_text(json.dumps(TIMINGS, indent=1))
    log.info("docs timings: %s", ", ".join(f"{k} {v:.1f} s" for k, v in TIMINGS.items()))
