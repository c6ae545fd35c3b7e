"""BENCHMARKS.md, generated: the short intro, then one table of the current figures built from the rows the
benches recorded (``bench/results/rows/*.json``, written by ``bench/record.py``'s ``write_row``).

    python bench/table.py            # rewrite BENCHMARKS.md from the rows
    python bench/table.py --check    # exit 1 where BENCHMARKS.md is not what the rows give (a hand edit)

``make bench`` (``bench/run_all.py``) runs every bench, each of which records its rows, then this. The row
order is declared once, in :data:`ORDER`; a row that is not listed there comes after the listed ones, sorted by
bench and key, so a new bench's row is never dropped.
"""

from __future__ import annotations

import argparse
import sys
from datetime import date as _date
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from record import ROWS, read_rows  # noqa: E402

ROOT = HERE.parent
TARGET = ROOT / "BENCHMARKS.md"
LIMIT = 15_000  # characters: the bound on BENCHMARKS.md

# (bench, key) of every row, in the table's order
ORDER: list[tuple[str, str]] = [
    ("bench_toy_check", "regression"),
    ("bench_toy_check", "classification"),
    ("bench_toy_rates", "rates"),
    ("bench_toy_train", "gradient"),
    ("bench_toy_train", "lbfgs_step"),
    ("bench_ridge", "path"),
    ("bench_probe_threads", "threads"),
    ("bench_geometry", "geometry"),
    ("bench_capture", "capture"),
    ("bench_positions", "items"),
    ("bench_behaviour", "distribution"),
    ("bench_load", "gguf_check"),
    ("bench_load", "second_load"),
    ("bench_position_patching", "cells"),
    ("bench_heads", "ablation"),
    ("bench_lens", "tuned_lens"),
    ("bench_components", "dla"),
    ("bench_component_patching", "transformerlens"),
    ("bench_libraries", "nnsight_components"),
    ("bench_libraries", "position_patching"),
    ("bench_libraries", "nnsight_boundary_patching"),
    ("bench_libraries", "boundary_memory"),
    ("bench_attribution", "atp"),
    ("bench_das", "das"),
    ("bench_tasks", "file_task"),
    ("bench_ray_capture", "overhead"),
    ("make", "demo"),
    ("make", "test"),
    ("make", "docs"),
]

INTRO = """\
# Benchmarks

The current figure of each benchmark: countlens against the baseline a researcher would otherwise write or use,
both run back to back on the same inputs in one run, so the ratio holds where the absolute times are noisy.
Tests never assert wall-clock times. Each row says when and on what machine it was measured (with the load
average, or "idle") and the command that reruns it.

This file is generated (`python bench/table.py`; a test fails where it was edited by hand): each bench records
its rows with `bench/record.py` in `bench/results/rows/<bench>.json`, and `make bench` (`python bench/run_all.py`)
reruns every bench (`make bench BENCHES=bench_ridge` one), writes each one's output, command, date and machine
to `bench/results/<bench>.json` (shown on the site's benchmark page under this table) and regenerates the table. Every earlier measurement — `make demo`
timings of other days and code, the recipes tried, the profiles behind each choice — is in the
[history](docs/history/2026-12-04-benchmarks.md).
"""

HEADER = "| what | countlens | baseline | ratio | measured (date · machine · load) | rerun |\n|---|---|---|---|---|---|\n"


def load_rows(folder: Path = ROWS) -> list[tuple[str, str, dict]]:
    """Every recorded row as ``(bench, key, row)``, in :data:`ORDER`, then the unlisted ones sorted."""
    found: dict[tuple[str, str], dict] = {}
    for path in sorted(Path(folder).glob("*.json")):
        data = read_rows(path)
        for key, row in data["rows"].items():
            found[(data.get("bench", path.stem), key)] = row
    rank = {name: i for i, name in enumerate(ORDER)}
    names = sorted(found, key=lambda name: (rank.get(name, len(ORDER)), name))
    return [(bench, key, found[(bench, key)]) for bench, key in names]


def _cell(text: str) -> str:
    """Text safe inside one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _day(iso: str) -> str:
    """``2026-11-29`` -> ``29 Nov 2026`` (anything else as it is)."""
    try:
        d = _date.fromisoformat(iso[:10])
    except ValueError:
        return iso
    return f"{d.day} {d:%b %Y}"


def row_line(row: dict) -> str:
    """One table line of a recorded row."""
    ratio = row["ratio"].strip()
    shown = ratio if ratio in ("—", "-", "") else f"**{ratio}**"
    note = row.get("note", "")
    if note:  # a note that starts with "of" continues the ratio ("0.37 of the target"); others follow a ";"
        shown = row["note"] if shown in ("—", "-", "") else f"{shown}{' ' if note.startswith('of ') else '; '}{note}"
    measured = " · ".join(x for x in (_day(row["date"]), row["machine"], row["load"]) if x)
    cells = [row["what"], row["countlens"], row["baseline"] or "—", shown, measured, f"`{row['command']}`"]
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def render(folder: Path = ROWS) -> str:
    """The whole of BENCHMARKS.md from the rows in ``folder``."""
    lines = [row_line(row) for _, _, row in load_rows(folder)]
    return INTRO + "\n" + HEADER + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="only compare BENCHMARKS.md with what the rows give; exit 1 where it differs "
                         "(default: off, rewrite it)")
    args = ap.parse_args(argv)
    text = render()
    if len(text) > LIMIT:
        print(f"BENCHMARKS.md would be {len(text):,} characters (limit {LIMIT:,}): shorten the rows' notes",
              file=sys.stderr)
        return 2
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print("BENCHMARKS.md is not what bench/results/rows/ gives: run `python bench/table.py`",
                  file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.name}: {len(text.splitlines()) - len(INTRO.splitlines()) - 3} rows, {len(text):,} chars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
