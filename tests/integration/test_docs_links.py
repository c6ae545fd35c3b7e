"""Nothing stale in what a reader reads: every repository path and every `countlens ...` command line in the
README, BENCHMARKS.md and the docs' Markdown (the tutorials' text cells included) exists and parses with the
CLI's own parser (nothing is run); the front page and the benchmark table keep to their sizes."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from docsgen.cli_reference import check_command

ROOT = Path(__file__).resolve().parents[2]
# The first part of a path that names a file or folder of this repository (what a reader would open).
ROOTS = ("countlens", "toy", "llm", "probes", "analysis", "docs", "tests", "bench", "docsgen")
TOP_FILES = ("README.md", "BENCHMARKS.md", "Makefile", "pyproject.toml", "mkdocs.yml")
HISTORY = "docs/history/"  # kept as it was written: its commands are of their day; its paths still checked


def pages() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return found + sorted((ROOT / "docs" / "tutorials").glob("*.py"))


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)


def command_lines(text: str) -> list[tuple[str, bool]]:
    """``(line, full)``: each `countlens ...` line of a code block (backslash continuations joined; parsed
    whole), and each inline `` `countlens ...` `` (its command and options checked)."""
    found = []
    for block in code_blocks(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.strip().removeprefix("$ ")
            if line.startswith("countlens ") and "..." not in line and "|" not in line.split("#")[0]:
                found.append((line, True))
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    for inline in re.findall(r"`(countlens [^`]+)`", prose):
        if "..." not in inline and "|" not in inline and not re.search(r"[A-Z]{3,}\b(?!\.)", inline.split(" ", 2)[1]):
            found.append((inline, False))
    return found


def repo_paths(text: str) -> list[str]:
    """Repository paths the text names: in backticks or as link targets, under one of :data:`ROOTS` or a
    top-level file; placeholders (``<stage>``, ``{l}``, ``*``, capitals like ``DIR``) are left out."""
    candidates = re.findall(r"`([^`\s]+)`", text) + re.findall(r"\]\(([^)\s]+)\)", text)
    out = []
    for c in candidates:
        c = c.split("#")[0].rstrip(".,;:)")
        if re.search(r"[<>{}$]|\.\.\.|…", c) or not c:
            continue
        first = c.split("/")[0]
        if (first in ROOTS and "/" in c) or c in TOP_FILES:
            out.append(c.split(":")[0])
    return out


def test_the_front_page_and_the_benchmark_table_keep_their_sizes():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme) <= 12_000, len(readme)
    assert len((ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")) <= 15_000
    for stale in ("countlens/pipeline/presets.py", "countlens/llm/cli.py"):
        for page in pages():
            assert stale not in page.read_text(encoding="utf-8"), (stale, _rel(page))


def test_every_path_the_docs_name_exists():
    missing = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for path in repo_paths(text):
            if path.startswith(("http", "mailto")):
                continue
            base = ROOT if not path.startswith(("../", "./")) and path.split("/")[0] in ROOTS + TOP_FILES \
                else page.parent
            if not glob.glob(str(base / path)):
                missing.append(f"{_rel(page)}: {path}")
    assert not missing, "\n".join(missing)


def test_every_relative_link_of_the_readme_resolves():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if not t.startswith(("http", "#"))]
    assert links
    assert [t for t in links if not (ROOT / t).exists()] == []


def test_every_countlens_command_line_parses_with_the_cli():
    bad, seen = [], 0
    for page in pages():
        if _rel(page).startswith(HISTORY):
            continue
        for line, full in command_lines(page.read_text(encoding="utf-8")):
            seen += 1
            why = check_command(line, full=full)
            if why:
                bad.append(f"{_rel(page)}: {line}\n    {why}")
    assert seen > 50, seen  # the README, the guides and the gallery notes name many
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("line, full", [
    ("countlens reproduce --preset nope --out report", True),  # a value outside its choices
    ("countlens toy construct --variant softmax --json p.json", True),  # a required option missing
    ("countlens llm patch --no-such-flag 3", False),  # an option that does not exist
    ("countlens nosuch --out x", True),  # a command that does not exist
])
def test_the_check_can_fail(line, full):
    assert check_command(line, full=full) is not None
