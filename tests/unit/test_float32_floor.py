"""``bench/float32_floor.py``'s arithmetic: the largest gap per value column, identifiers left out."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import float32_floor  # noqa: E402


def test_largest_gap_per_value_column_against_a_loop():
    reference = [{"location": "embed", "seed": "0", "ld": "0.5", "shift": ""},
                 {"location": "L1", "seed": "1", "ld": "-0.25", "shift": "2.0"}]
    rows = [{"location": "embed", "seed": "0", "ld": "0.5000125", "shift": ""},
            {"location": "L1", "seed": "1", "ld": "-0.2500375", "shift": "1.999"}]
    assert float32_floor.numeric_columns(reference) == ["ld", "shift"]  # text and identifiers are not values
    gaps = float32_floor.largest_gaps(rows, reference)
    expected = {c: max(abs(float(a[c]) - float(b[c])) for a, b in zip(rows, reference, strict=True) if a[c])
                for c in ("ld", "shift")}
    assert gaps == pytest.approx(expected, abs=1e-15) and gaps["ld"] == pytest.approx(3.75e-5)
    with pytest.raises(SystemExit, match="not the same config"):
        float32_floor.largest_gaps(rows[:1], reference)
