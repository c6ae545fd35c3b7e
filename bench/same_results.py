"""Are two report folders the same results, value for value? ``python bench/same_results.py OLD NEW``

Compares every result file of the report folder ``OLD`` with the same file in ``NEW`` (two runs of
``countlens reproduce``, e.g. before and after a change, each into its own folder):

- every JSON file: every key of OLD must be in NEW with an equal value (exactly; floats bit for bit, NaN equal
  to NaN); keys that NEW adds are allowed, and so are the config changes of a refactoring: a setting renamed
  (:data:`RENAMED`) or moved into a composed config (OLD's ``{"model": "default", "device": "cpu"}`` is
  NEW's ``{"model": {"model": "default", "device": "cpu"}}``). Not compared: ``provenance`` blocks (versions, command line, time),
  wall and CPU times (``seconds``, ``wall_s``, ...), and the pipeline's own bookkeeping (``stage.json``,
  ``reproduce.json``: calls, times and settings; their ``status`` is compared). A string holding OLD's folder
  path is compared with the same string holding NEW's;
- every CSV file: the same header and rows (NEW may add columns);
- every activation folder (a capture: ``meta.json`` and its shards): every column of every row equal, the
  activations bit for bit;
- figures (PNG, PDF) and the HTML page are only checked to exist (their bytes hold dates and fonts).

Prints one line per file and exits 1 when anything differs or is missing. ``--all`` (anywhere among the
arguments) also lists, under each JSON or CSV file that differs, every value that moved (key path or row and
column, old and new): the list a change of definition reports. ``--tolerance T`` lets numbers (JSON numbers,
CSV cells that read as numbers, activations) differ by at most ``T`` in absolute value, for a change that is
allowed to move float rounding only; the last line then also names the largest difference found, within ``T``
or not.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

TIMES = {"seconds", "act_seconds", "capture_seconds", "wall_s", "cpu_s", "created_utc", "load_seconds", "latency_s",
         "atp_seconds", "speed_ratio",
         "compute_s", "write_s"}
BOOKKEEPING = {"stage.json", "reproduce.json"}
# Settings renamed since older reports (old name -> new name): one name per setting (issue 20).
RENAMED = {"max_new_tokens": "answer_tokens"}
SKIP_DIRS = {".cache", "partial", "shards"}


_MISSING = object()


def _find(new: dict[str, Any], key: str) -> Any:
    """``new[key]``, else under the key's new name, else inside a composed config of ``new`` (one level)."""
    for name in (key, RENAMED.get(key)):
        if name in new:
            return new[name]
    for value in new.values():
        if isinstance(value, dict) and key in value and not isinstance(value[key], dict):
            return value[key]
    return _MISSING


class Tolerance:
    """How far two numbers may differ (absolute; 0: bit for bit), and the largest difference seen so far with
    where it was."""

    def __init__(self, tol: float = 0.0):
        self.tol = float(tol)
        self.largest, self.where = 0.0, ""
        self.file = ""  # the file being compared, named with the largest difference

    def same(self, a: float, b: float, where: str) -> bool:
        """Are numbers ``a`` and ``b`` equal within the tolerance (NaN equals NaN, not a number; integers are
        subtracted exactly)?"""
        nan_a, nan_b = (isinstance(x, float) and math.isnan(x) for x in (a, b))
        if nan_a or nan_b:
            return nan_a and nan_b
        if a == b:
            return True
        gap = float(abs(a - b))
        if gap > self.largest:
            self.largest, self.where = gap, f"{self.file}: {where}".lstrip(": ")
        return gap <= self.tol


EXACT = Tolerance()


def number(text: str) -> float | None:
    """``text`` as a number, or ``None`` when it is not one."""
    try:
        return float(text)
    except ValueError:
        return None


def _cells_same(a: str, b: str, tol: Tolerance, where: str) -> bool:
    """Two CSV cells: the same text, or both numbers equal within ``tol``."""
    if a == b:
        return True
    x, y = number(a), number(b)
    return x is not None and y is not None and tol.same(x, y, where)


def _equal(old: Any, new: Any, path: str, roots: tuple[str, str], tol: Tolerance = EXACT) -> str | None:
    """``None`` when ``new`` holds ``old`` (added keys aside), else the first key path that differs."""
    return next(_differences(old, new, path, roots, tol), None)


def _differences(old: Any, new: Any, path: str, roots: tuple[str, str], tol: Tolerance = EXACT):
    """Every key path where ``new`` does not hold ``old`` (added keys aside), as ``"path: old became new"``."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            yield f"{path}: a {type(new).__name__}, was an object"
            return
        for key, value in old.items():
            if key == "provenance" or key in TIMES:
                continue
            there = _find(new, key)
            if there is _MISSING:
                yield f"{path}.{key}: missing"
                continue
            if not isinstance(value, dict) and isinstance(there, dict) and key in there:
                there = there[key]  # a setting that became a composed config holding it
            yield from _differences(value, there, f"{path}.{key}", roots, tol)
        return
    if isinstance(old, list):
        if not isinstance(new, list) or len(old) != len(new):
            yield f"{path}: a list of {len(old)} became {len(new) if isinstance(new, list) else type(new).__name__}"
            return
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from _differences(a, b, f"{path}[{i}]", roots, tol)
        return
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (old, new))
    if numbers and tol.same(old, new, path):
        return
    if isinstance(old, str) and isinstance(new, str):
        old, new = old.replace(roots[0], "<OUT>"), new.replace(roots[1], "<OUT>")
    if numbers or type(old) is not type(new) or old != new:
        yield f"{path}: {old!r} became {new!r}"


def json_differences(old: Path, new: Path, roots: tuple[str, str], tol: Tolerance = EXACT) -> list[str]:
    """Every differing key path of two JSON result files (``--all``)."""
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (old, new))
    return [] if old.name in BOOKKEEPING else list(_differences(a, b, "$", roots, tol))


def csv_differences(old: Path, new: Path, tol: Tolerance = EXACT) -> list[str]:
    """Every differing (row, column) of two CSV result files (``--all``; OLD's columns, rows in order)."""
    (head_a, *rows_a), (head_b, *rows_b) = (list(csv.reader(p.open(encoding="utf-8"))) for p in (old, new))
    if any(h not in head_b for h in head_a) or len(rows_a) != len(rows_b):
        return [compare_csv(old, new) or ""]
    index = [head_b.index(h) for h in head_a]
    return [f"row {r}, column {h}: {x!r} became {rb[i]!r}"
            for r, (ra, rb) in enumerate(zip(rows_a, rows_b, strict=True))
            for h, x, i in zip(head_a, ra, index, strict=True)
            if not _cells_same(x, rb[i], tol, f"row {r}, column {h}")]


def compare_json(old: Path, new: Path, roots: tuple[str, str], tol: Tolerance = EXACT) -> str | None:
    a, b = (json.loads(p.read_text(encoding="utf-8")) for p in (old, new))
    if old.name in BOOKKEEPING:
        a = {"status": a.get("status"), "stages": [{"stage": s.get("stage"), "status": s.get("status")}
                                                   for s in a.get("stages", [])]}
        b = {"status": b.get("status"), "stages": [{"stage": s.get("stage"), "status": s.get("status")}
                                                   for s in b.get("stages", [])]}
    return _equal(a, b, "$", roots, tol)


def compare_csv(old: Path, new: Path, tol: Tolerance = EXACT) -> str | None:
    read = [list(csv.reader(p.open(encoding="utf-8"))) for p in (old, new)]
    (head_a, *rows_a), (head_b, *rows_b) = read
    missing = [h for h in head_a if h not in head_b]
    if missing:
        return f"columns {', '.join(missing)} missing"
    if len(rows_a) != len(rows_b):
        return f"{len(rows_a)} rows became {len(rows_b)}"
    index = [head_b.index(h) for h in head_a]
    found = None
    for r, (ra, rb) in enumerate(zip(rows_a, rows_b, strict=True)):
        for h, x, y in zip(head_a, ra, [rb[i] for i in index], strict=True):
            if not _cells_same(x, y, tol, f"row {r}, column {h}") and found is None:
                found = f"row {r}, column {h}: {x!r} became {y!r}"  # every cell is still seen by ``tol``
    return found


def compare_capture(old: Path, new: Path, tol: Tolerance = EXACT) -> str | None:
    import numpy as np

    from countlens.core.store import load_capture

    a, b = load_capture(old), load_capture(new)
    if len(a) != len(b):
        return f"{len(a)} rows became {len(b)}"
    for name in a.column_names:
        if name not in b.column_names:
            return f"column {name} missing"
        x = np.asarray(a.with_format("numpy", columns=[name])[name])
        y = np.asarray(b.with_format("numpy", columns=[name])[name])
        if x.shape != y.shape:
            return f"column {name} differs"
        if x.dtype.kind not in "fc":
            if not np.array_equal(x, y):
                return f"column {name} differs"
            continue
        gap = np.abs(x.astype(np.float64) - y.astype(np.float64))
        gap[(x == y) | (np.isnan(x) & np.isnan(y))] = 0.0  # equal infinities, NaN beside NaN
        worst = math.inf if np.isnan(gap).any() else float(gap.max(initial=0.0))
        if worst > 0 and not tol.same(0.0, worst, f"column {name}"):
            return f"column {name} differs (by up to {worst:.3g})"
    return None


def result_files(root: Path) -> list[Path]:
    """Every file under ``root`` that holds results (resume state and shard internals excluded)."""
    out = []
    for path in sorted(root.rglob("*")):
        parts = set(path.relative_to(root).parts[:-1])
        if path.is_file() and not parts & SKIP_DIRS and not any(p.startswith(".") for p in path.relative_to(root).parts):
            out.append(path)
    return out


def compare(old_root: Path, new_root: Path, tol: Tolerance = EXACT) -> list[tuple[str, str]]:
    """(relative path, verdict) for every result file of ``old_root``; numbers equal within ``tol``."""
    roots = (str(old_root.resolve()), str(new_root.resolve()))
    verdicts = []
    for old in result_files(old_root):
        rel = old.relative_to(old_root)
        new = new_root / rel
        tol.file = str(rel)
        if not new.exists():
            verdicts.append((str(rel), "MISSING"))
            continue
        if old.name == "meta.json" and (old.parent / "shards").is_dir():
            found = compare_json(old, new, roots, tol) or compare_capture(old.parent, new.parent, tol)
        elif old.suffix == ".json":
            found = compare_json(old, new, roots, tol)
        elif old.suffix == ".csv":
            found = compare_csv(old, new, tol)
        else:
            found = None  # figures, the page, logs: present is all we ask
        verdicts.append((str(rel), "same" if found is None else f"DIFFERS at {found}"))
    return verdicts


def _options(argv: list[str]) -> tuple[bool, Tolerance, list[str]] | None:
    """(``--all``, the tolerance, the two folders) from the command line, or ``None`` when it is wrong."""
    every = "--all" in argv
    argv = [a for a in argv if a != "--all"]
    tol = Tolerance()
    if "--tolerance" in argv:
        at = argv.index("--tolerance")
        value = number(argv[at + 1]) if at + 1 < len(argv) else None
        if value is None or not value >= 0:
            return None
        tol, argv = Tolerance(value), argv[:at] + argv[at + 2:]
    return (every, tol, argv) if len(argv) == 2 else None


def main(argv: list[str]) -> int:
    options = _options(argv)
    if options is None:
        print(__doc__.splitlines()[0] + "  [--all] [--tolerance T]", file=sys.stderr)
        return 2
    every, tol, argv = options
    old, new = (Path(a) for a in argv)
    verdicts = compare(old, new, tol)
    width = max(len(r) for r, _ in verdicts) if verdicts else 0
    roots = (str(old.resolve()), str(new.resolve()))
    for rel, verdict in verdicts:
        print(f"{rel:<{width}}  {verdict}")
        if every and verdict.startswith("DIFFERS") and rel.endswith((".json", ".csv")):
            diff = (json_differences if rel.endswith(".json") else csv_differences)
            args = (old / rel, new / rel, roots) if rel.endswith(".json") else (old / rel, new / rel)
            for line in diff(*args, tol):
                print(f"    {line}")
    bad = [r for r, v in verdicts if v != "same"]
    within = f" within {tol.tol:g}" if tol.tol else ""
    same = len(verdicts) - len(bad)
    print(f"{same} of {len(verdicts)} files the same{within}" + (f"; {len(bad)} not" if bad else ""))
    if tol.tol:
        print(f"largest numeric difference: {tol.largest:.3g}" + (f" ({tol.where})" if tol.where else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
