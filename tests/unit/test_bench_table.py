"""BENCHMARKS.md is generated from the benches' recorded rows (bench/record.py, bench/table.py): the committed
file is what the committed rows give (a hand edit or a stale table fails here), it stays short, and every row
reruns with a command that exists."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import record  # noqa: E402
import table  # noqa: E402


def test_committed_table_is_what_the_rows_give():
    text = table.render()
    assert (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8") == text, \
        "BENCHMARKS.md differs from bench/results/rows/: run `python bench/table.py`"
    assert len(text) <= table.LIMIT == 15_000
    rows = table.load_rows()
    assert len(rows) >= 20
    # one line per row, in the declared order first
    lines = [ln for ln in text.splitlines() if ln.startswith("| ") and not ln.startswith("| what")]
    assert len(lines) == len(rows)
    listed = [(b, k) for b, k, _ in rows if (b, k) in table.ORDER]
    assert listed == sorted(listed, key=table.ORDER.index)
    assert "[history](docs/history/2026-12-04-benchmarks.md)" in text
    assert (ROOT / "docs" / "history" / "2026-12-04-benchmarks.md").is_file()


def test_every_row_reruns_with_a_command_that_exists():
    benches = {p.stem for p in (ROOT / "bench").glob("bench_*.py")}
    assert {b for b, _ in table.ORDER} <= benches | {"make"}
    for bench, key, row in table.load_rows():
        assert row["what"] and row["command"] and row["date"] and row["machine"], (bench, key)
        datetime.strptime(row["date"], "%Y-%m-%d")
        words = [w for w in shlex.split(row["command"]) if "=" not in w or w.startswith("--")]
        if bench == "make":
            assert words[-2:] == ["make", key] and f"\n{key}:" in (ROOT / "Makefile").read_text()
        else:
            assert words[:2] == ["python", f"bench/{bench}.py"], row["command"]


def test_write_row_replaces_by_key_and_renders_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "ROWS", tmp_path)
    common = dict(countlens="1.0 s", baseline="a loop (12.0 s)", command="python bench/bench_ridge.py")
    record.write_row("bench_ridge", "path", what="first", ratio="3×", **common)
    record.write_row("bench_ridge", "path", what="ridge path", ratio="12.0×", note="equal to 1e-8", **common)
    record.write_row("bench_zzz_new", "x", what="a new bench", ratio="—", **common)
    record.write_row("bench_toy_check", "regression", what="check", ratio="28×", date="2026-11-29",
                     machine="development VM, 2 cores", load="idle", **common)
    data = json.loads((tmp_path / "bench_ridge.json").read_text(encoding="utf-8"))
    assert list(data["rows"]) == ["path"] and data["rows"]["path"]["what"] == "ridge path"
    stamped = data["rows"]["path"]
    assert stamped["date"] == datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert stamped["machine"] == record.this_machine() and f"{record.os.cpu_count()} cores" in stamped["machine"]
    assert stamped["load"].startswith("load ")
    assert not list(tmp_path.glob("*.tmp")) and not list(tmp_path.glob(".*.tmp"))  # replaced atomically
    order = [(b, k) for b, k, _ in table.load_rows(tmp_path)]
    assert order == [("bench_toy_check", "regression"), ("bench_ridge", "path"), ("bench_zzz_new", "x")]
    lines = table.render(tmp_path).splitlines()
    assert lines[-3] == ("| check | 1.0 s | a loop (12.0 s) | **28×** | 29 Nov 2026 · development VM, 2 cores · idle "
                         "| `python bench/bench_ridge.py` |")
    assert "| **12.0×**; equal to 1e-8 |" in lines[-2]
    assert "| a new bench | 1.0 s | a loop (12.0 s) | — |" in lines[-1]


def test_bad_rows_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(record, "ROWS", tmp_path)
    with pytest.raises(ValueError, match="key"):
        record.write_row("bench_ridge", "a b", what="w", countlens="c", baseline="b", ratio="1×", command="c")
    with pytest.raises(ValueError, match="command"):
        record.write_row("bench_ridge", "k", what="w", countlens="c", baseline="b", ratio="1×", command=" ")
    (tmp_path / "bench_old.json").write_text(json.dumps({"bench": "bench_old", "rows": {"k": {"what": "w"}}}))
    with pytest.raises(ValueError, match="lacks"):
        table.load_rows(tmp_path)


def test_span_and_cells():
    assert record.span([12.04, 13.8], "{:.1f}", "×") == "12.0–13.8×"
    assert record.span([28.2, 27.9], "{:.0f}", "×") == "28×"
    assert record.span([2.43e7, 6.2e7], record.sci) == "2.4e7–6.2e7"
    assert record.sci(1.36e8, 3) == "1.36e8" and record.sci(0.00123) == "1.2e-3"
    row = dict(what="a | b", countlens="x", baseline="", ratio="—", note="target < 60 s", command="c",
               date="2026-12-02", machine="m", load="")
    assert table.row_line(row) == "| a \\| b | x | — | target < 60 s | 2 Dec 2026 · m | `c` |"


def test_check_mode_fails_on_a_hand_edit(tmp_path, monkeypatch, capsys):
    target = tmp_path / "BENCHMARKS.md"
    target.write_text(table.render() + "| a hand-written row |\n", encoding="utf-8")
    monkeypatch.setattr(table, "TARGET", target)
    assert table.main(["--check"]) == 1
    assert "python bench/table.py" in capsys.readouterr().err
    assert table.main([]) == 0 and table.main(["--check"]) == 0
