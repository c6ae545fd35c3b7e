"""The package's shape: every module imports, and the import graph only points down.

Rooms (``countlens.toy``, ``llm``, ``probes``, ``analysis``) import the root package; ``analysis`` may import
``probes``; a room takes another room's names only from that room's package ``__all__``; ``toy`` never
imports ``llm``; the shared root modules import no room; only ``countlens.pipeline.cli``
imports a ``cli`` module; no room imports ``countlens.pipeline.reproduce`` or ``countlens.pipeline.cli``; and no two modules
import each other, directly or through others. Imports inside functions count as much as those at the top.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOMS = ("countlens.toy", "countlens.llm", "countlens.probes", "countlens.analysis")
CORE, PIPELINE = "countlens.core", "countlens.pipeline"
DISPATCHER = "countlens.pipeline.cli"
# Which rooms each room may import (besides itself and the core).
# llm may take analysis's geometry and the toy's B_min (through their __all__): the organisms' toy <-> organism
# comparison (countlens.llm.organisms.scaling); neither imports llm, so no cycle.
ALLOWED = {"countlens.toy": set(), "countlens.probes": {"countlens.toy"},
           "countlens.llm": {"countlens.probes", "countlens.analysis", "countlens.toy"},
           "countlens.analysis": {"countlens.probes", "countlens.toy"}}


def _package_dirs() -> dict[str, Path]:
    """Where each package's source lives (the installed package-dir mapping: countlens.toy is toy/), and
    every sub-package below them."""
    dirs = {pkg: Path(importlib.import_module(pkg).__path__[0]) for pkg in ("countlens", CORE, PIPELINE, *ROOMS)}
    for pkg, folder in list(dirs.items()):
        for init in sorted(folder.glob("*/__init__.py")):
            dirs.setdefault(f"{pkg}.{init.parent.name}", init.parent)
    return dirs


def _modules() -> dict[str, Path]:
    """Every module of the installed package: dotted name -> source file."""
    found = {}
    for pkg, folder in _package_dirs().items():
        for path in sorted(folder.glob("*.py")):
            found[pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"] = path
    return found


MODULES = _modules()


def _resolve(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ``ImportFrom`` names (relative imports resolved against ``module``)."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].stem == "__init__"
    parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imports(module: str) -> set[str]:
    """Modules of the package that ``module`` imports anywhere in its source (functions included; a module
    that calls ``importlib.import_module`` imports every module whose dotted name it spells out)."""
    source = MODULES[module].read_text(encoding="utf-8")
    tree = ast.parse(source)
    targets: set[str] = set()
    dynamic = "import_module" in source
    for node in ast.walk(tree):
        if dynamic and isinstance(node, ast.Constant) and node.value in MODULES:
            targets.add(node.value)
        elif isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in MODULES else base)
    return {_owner(t) for t in targets if _owner(t) is not None} - {module}


def _owner(name: str) -> str | None:
    """The package module ``name`` refers to (the longest known prefix), or None outside the package."""
    parts = name.split(".")
    for k in range(len(parts), 0, -1):
        if ".".join(parts[:k]) in MODULES:
            return ".".join(parts[:k])
    return None


GRAPH = {m: _imports(m) for m in MODULES}


def _room(module: str) -> str | None:
    return next((r for r in ROOMS if module == r or module.startswith(r + ".")), None)


def _floor(module: str) -> str:
    """``core``, ``room``, ``pipeline`` or ``root`` (the package itself and ``python -m countlens``)."""
    if module == CORE or module.startswith(CORE + "."):
        return "core"
    if module == PIPELINE or module.startswith(PIPELINE + "."):
        return "pipeline"
    return "room" if _room(module) else "root"


def _is_cli(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last == "cli" or last.endswith("_cli")


def _edges(rule) -> list[str]:
    return sorted(f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets if rule(a, b))


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module):
    if module.endswith(".__main__"):  # running it is `python -m countlens`; compiling is all an import would check
        compile(MODULES[module].read_text(encoding="utf-8"), str(MODULES[module]), "exec")
    else:
        importlib.import_module(module)


def test_the_graph_sees_the_known_arrows():
    assert "countlens.core.errors" in GRAPH["countlens.core.io"]
    assert any(_room(b) for b in GRAPH["countlens.pipeline.reproduce"])
    assert _floor("countlens.core.store") == "core" and _floor("countlens.llm.capture.residuals") == "room"
    assert _floor("countlens.pipeline.cli") == "pipeline" and _floor("countlens.__main__") == "root"


def test_every_module_is_on_a_floor():
    assert [m for m in MODULES if _floor(m) == "root"] == ["countlens", "countlens.__main__"]


def test_the_core_imports_no_room_and_not_the_pipeline():
    assert _edges(lambda a, b: _floor(a) == "core" and _floor(b) != "core") == []


def test_rooms_import_only_the_core_and_the_rooms_they_may():
    def bad(a, b):
        ra, rb = _room(a), _room(b)
        if ra is None:
            return False
        return _floor(b) not in ("core", "room") or (rb not in (ra, None) and rb not in ALLOWED[ra])
    assert _edges(bad) == []


def _foreign_imports() -> list[tuple[str, str, str]]:
    """Every ``from X import name`` in a room where X belongs to another room: (module, X, name)."""
    found = []
    for module, path in MODULES.items():
        room = _room(module)
        if room is None:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = _resolve(module, node)
                other = _room(base)
                if other not in (None, room):
                    found.extend((module, base, alias.name) for alias in node.names)
            elif isinstance(node, ast.Import):
                found.extend((module, alias.name, "") for alias in node.names if _room(alias.name) not in (None, room))
    return found


def _past_the_public_api(found) -> list[str]:
    """The imports of ``found`` that reach into another room's modules, or take a name its package does not
    export (its ``__all__``)."""
    bad = []
    for module, base, name in found:
        public = getattr(importlib.import_module(base), "__all__", ()) if base in ROOMS else ()
        if base not in ROOMS or name not in public:
            bad.append(f"{module}: from {base} import {name}")
    return sorted(bad)


def test_rooms_reach_each_other_only_through_the_public_api():
    # a room takes another room's names from that room's package and only names it exports, so a room's
    # modules can be regrouped without breaking the others
    assert _past_the_public_api(_foreign_imports()) == []


def test_the_public_api_rule_can_fail():
    assert _past_the_public_api([("countlens.llm.lens.readout", "countlens.probes.ridge", "standardisation"),
                                 ("countlens.analysis.compare", "countlens.probes", "_not_exported"),
                                 ("countlens.analysis.compare", "countlens.probes", "split_rows")]) == [
        "countlens.analysis.compare: from countlens.probes import _not_exported",
        "countlens.llm.lens.readout: from countlens.probes.ridge import standardisation"]


def test_toy_never_imports_llm():
    assert _edges(lambda a, b: _room(a) == "countlens.toy" and _room(b) == "countlens.llm") == []


def test_only_the_dispatcher_imports_cli_modules():
    # ... and a room's area command line (``countlens.llm.cli``), which gathers its room's command modules
    # (``countlens.llm.capture.cli``, one per experiment folder)
    def bad(a, b):
        area = a == f"{_room(a)}.cli" and _room(b) == _room(a)
        return _is_cli(b) and b != DISPATCHER and a != DISPATCHER and not area
    assert _edges(bad) == []


def test_the_rule_can_fail():
    global GRAPH
    saved = GRAPH
    GRAPH = {"countlens.core.io": {"countlens.toy.model"}, "countlens.toy.model": {"countlens.llm.capture.residuals"}}
    try:
        assert _edges(lambda a, b: _floor(a) == "core" and _floor(b) != "core") == ["countlens.core.io -> countlens.toy.model"]
        assert _edges(lambda a, b: _room(a) == "countlens.toy" and _room(b) == "countlens.llm") != []
    finally:
        GRAPH = saved


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_the_cycle_check_can_fail():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
