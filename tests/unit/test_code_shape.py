"""The code as a maintainer reads it: no function over 60 lines outside ``bench/``, and no module over 600
lines outside ``bench/`` and ``tests/`` (the house rule; a function is counted from its ``def`` to its last
line, its docstring included)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {"bench", "tests", "build", "site", "dist", ".venv", "report", "out"}
MAX_FUNCTION, MAX_MODULE = 60, 600


def _sources(skip: set[str] = SKIP) -> list[Path]:
    return [p for p in sorted(ROOT.rglob("*.py"))
            if not ({part for part in p.relative_to(ROOT).parts} & skip) and ".git" not in p.parts]


def test_the_walk_sees_the_rooms_and_the_core():
    seen = {p.relative_to(ROOT).parts[0] for p in _sources()}
    assert {"countlens", "toy", "llm", "probes", "analysis", "docsgen"} <= seen


def test_no_function_over_60_lines():
    """Tests and their helpers included: only ``bench/`` is exempt (issue 42)."""
    long = []
    for path in _sources(skip=SKIP - {"tests"}):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_no_module_over_600_lines():
    long = [f"{p.relative_to(ROOT)} ({n} lines)" for p in _sources()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE]
    assert long == []
