"""The benchmark page: the current table (``BENCHMARKS.md`` at the repository root) and, where ``make bench``
has written them, the benches' machine-readable results (``bench/results/*.json``: one per bench script, with
its command, date, machine and the lines it printed)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def results() -> list[dict]:
    """The machine-readable results ``bench/run_all.py`` wrote, one per bench script."""
    folder = ROOT / "bench" / "results"
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*.json"))] \
        if folder.is_dir() else []


def page() -> str:
    """The site's benchmark page: the root BENCHMARKS.md, then the latest `make bench` results if any."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    text = text.replace("](docs/", "](")
    found = results()
    if found:
        text += ("\n\n## The latest `make bench` run, as the benches wrote it\n\n"
                 "| bench | date | machine | wall (s) | exit | what it printed (ratio lines) |\n|---|---|---|---|---|---|\n")
        for r in found:
            lines = "<br>".join(x.replace("|", "\\|") for x in r.get("ratio_lines", [])[:6])
            text += (f"| `{r['command']}` | {r['date']} | {r['machine']} | {r['wall_s']:.1f} | {r['exit']} | "
                     f"{lines} |\n")
    return text
