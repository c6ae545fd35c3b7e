"""Record a benchmark's current figures as rows of BENCHMARKS.md's table (machine-readable, committed).

Each bench script ends by calling :func:`write_row` once per table row it measures; the row lands in
``bench/results/rows/<bench>.json`` (one file per bench, its rows by key), stamped with the date (UTC) and the
machine (CPU model, cores, memory, the load average when it was written). ``python bench/table.py`` (run by
``make bench`` after the benches) regenerates BENCHMARKS.md's table from every such file, so a rerun of a bench
refreshes its row and nothing in the table is typed by hand.

    from record import write_row          # bench scripts run as ``python bench/bench_x.py``: bench/ is on sys.path
    write_row("bench_ridge", "path", what="ridge path, 31 locations × 41 α", countlens="one decomposition",
              baseline="a loop of sklearn `Ridge`", ratio="12.0–13.8×", command="python bench/bench_ridge.py",
              note="coefficients equal to 1e-8")

The file is replaced atomically (written beside it, then ``os.replace``) under an exclusive lock, so two
benches writing rows of the same file at once lose neither row.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shlex
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from countlens.core.io import locked, write_text_atomic

# where the rows go; COUNTLENS_BENCH_ROWS redirects them (a smoke run at toy sizes must not replace the figures)
ROWS = Path(os.environ.get("COUNTLENS_BENCH_ROWS") or Path(__file__).resolve().parent / "results" / "rows")
FIELDS = ("what", "countlens", "baseline", "ratio", "command", "note", "date", "machine", "load")
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


def this_machine() -> str:
    """This machine in a few words: CPU model, logical cores and memory (GiB), e.g.
    ``"Intel(R) Xeon(R) Processor, 2 cores, 23 GiB"``."""
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    memory = ""
    with contextlib.suppress(OSError, StopIteration, ValueError):
        kib = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                   if line.startswith("MemTotal:"))
        memory = f", {kib / 2 ** 20:.0f} GiB"
    return f"{cpu}, {os.cpu_count()} cores{memory}"


def load_now() -> str:
    """The 1-minute load average now, as the table shows it: ``"load 3.2"`` (``""`` where the OS has none)."""
    return f"load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""


def write_row(bench: str, key: str, *, what: str, countlens: str, baseline: str, ratio: str, command: str,
              note: str = "", date: str | None = None, machine: str | None = None,
              load: str | None = None) -> Path:
    """Record (or replace) one row of BENCHMARKS.md's table; returns the file written.

    bench: the bench script's stem (``"bench_ridge"``) or ``"make"`` for the ``make`` targets' timings; names
        the file ``bench/results/rows/<bench>.json``.
    key: the row within that bench (``"path"``); a second call with the same key replaces the row.
    what: what is measured, with its size (``"ridge path, 31 locations × 41 α"``).
    countlens: countlens's figure (``"5.1 s (cached)"``, ``"7.2e7 pairs/s"``).
    baseline: what it is compared against, with that figure where there is one (``"one forward per cell (91.9 s)"``).
    ratio: the headline ratio, shown bold (``"17.9×"``; ``"—"`` where there is no baseline).
    command: the command that reruns it, from the repository root (``"python bench/bench_ridge.py"``).
    note: shown after the ratio, after a ";": agreement, targets, caveats (``"LD equal to 2.7e-5 nats"``); one
        that starts with "of " continues the ratio instead (``ratio="0.37", note="of the target"``).
    date, machine, load: stamped now (UTC date ``YYYY-MM-DD``, :func:`this_machine`, :func:`load_now`); pass them
        only to record a figure measured earlier, exactly as it was recorded then (``load="idle"``).
    """
    for name, value in (("bench", bench), ("key", key)):
        if not _NAME.match(value):
            raise ValueError(f"write_row: {name} {value!r} must be letters, digits, '_', '-' or '.'")
    for name, value in (("what", what), ("command", command), ("ratio", ratio)):
        if not value.strip():
            raise ValueError(f"write_row: {name} must not be empty")
    row = {"what": what, "countlens": countlens, "baseline": baseline, "ratio": ratio, "command": command,
           "note": note, "date": date or datetime.now(timezone.utc).strftime("%Y-%m-%d"),
           "machine": this_machine() if machine is None else machine,
           "load": load_now() if load is None else load}
    ROWS.mkdir(parents=True, exist_ok=True)
    path = ROWS / f"{bench}.json"
    with locked(Path(tempfile.gettempdir()) / "countlens-bench-rows.lock"):
        data = read_rows(path) if path.exists() else {"bench": bench, "rows": {}}
        data["rows"][key] = row
        write_text_atomic(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    return path


def this_command(prefix: str = "") -> str:
    """The command line this bench runs under, from the repository root: ``prefix`` (environment settings such
    as ``"OMP_NUM_THREADS=1 "``), ``python bench/<script>.py`` and its arguments, quoted for a shell."""
    script = Path(sys.argv[0]).resolve()
    with contextlib.suppress(ValueError):
        script = script.relative_to(Path(__file__).resolve().parents[1])  # the repository root
    return prefix + " ".join(["python", str(script), *map(shlex.quote, sys.argv[1:])])


def env_prefix(names=("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")) -> str:
    """The thread settings this process runs under, as a command's prefix (``"OMP_NUM_THREADS=1 "``; ``""``
    where none is set). Read it before the bench sets its own defaults, or it shows those."""
    return "".join(f"{n}={os.environ[n]} " for n in names if n in os.environ)


def sci(x: float, digits: int = 2) -> str:
    """``x`` in short scientific notation, as the table writes rates: ``sci(6.2e7) == "6.2e7"``."""
    mantissa, _, exponent = f"{x:.{digits - 1}e}".partition("e")
    return f"{mantissa}e{int(exponent)}"


def span(values, fmt="{:.3g}", unit: str = "") -> str:
    """The range of ``values`` as the table writes it: ``"12.0–13.8×"`` (``"28×"`` where both ends print the
    same); ``fmt`` formats one value (a format string or a function such as :func:`sci`), ``unit`` follows."""
    show = fmt if callable(fmt) else fmt.format
    lo, hi = show(min(values)), show(max(values))
    return f"{lo}{unit}" if lo == hi else f"{lo}–{hi}{unit}"


def read_rows(path: Path) -> dict:
    """One bench's rows file, checked: ``{"bench": str, "rows": {key: {field: str}}}`` with every field."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    for key, row in data.get("rows", {}).items():
        missing = [f for f in FIELDS if f not in row]
        if missing:
            raise ValueError(f"{path}: row {key!r} lacks {', '.join(missing)}; rewrite it with bench/record.py")
    return data


