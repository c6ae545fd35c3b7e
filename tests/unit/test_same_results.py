"""``bench/same_results.py``: old and new report folders compared value for value, bit for bit or within
``--tolerance``, with the largest difference named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import same_results  # noqa: E402


def report(folder: Path, shift: float) -> Path:
    """A one-stage report: a JSON and a CSV result whose value ``x`` is 1.0 + ``shift``."""
    stage = folder / "stage"
    stage.mkdir(parents=True)
    (stage / "r.json").write_text(json.dumps({"rows": [{"x": 1.0 + shift, "name": "a", "n": 3}],
                                              "seconds": 5.0 + 100 * shift}), encoding="utf-8")
    (stage / "r.csv").write_text(f"name,x\na,{1.0 + shift!r}\n", encoding="utf-8")
    return folder


def test_bit_for_bit_by_default_and_within_the_tolerance_when_given(tmp_path, capsys):
    old, near, far = (report(tmp_path / name, shift) for name, shift in (("old", 0.0), ("near", 4e-6),
                                                                         ("far", 3e-5)))
    assert same_results.main([str(old), str(old)]) == 0
    assert same_results.main([str(old), str(near)]) == 1  # bit for bit: 4e-6 differs
    capsys.readouterr()
    assert same_results.main(["--tolerance", "1e-5", str(old), str(near)]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 files the same within 1e-05" in out
    assert "largest numeric difference: 4e-06" in out  # the JSON's and the CSV's x, the first found named
    assert same_results.main([str(old), str(far), "--tolerance", "1e-5", "--all"]) == 1
    out = capsys.readouterr().out
    assert "0 of 2 files the same within 1e-05; 2 not" in out
    assert "largest numeric difference: 3e-05 (stage/r.csv: row 0, column x)" in out
    assert "$.rows[0].x: 1.0 became 1.00003" in out  # --all lists what moved past the tolerance
    assert "seconds" not in out  # times are not results


def test_a_text_or_a_missing_key_is_never_within_a_tolerance(tmp_path):
    old = report(tmp_path / "old", 0.0)
    new = report(tmp_path / "new", 0.0)
    (new / "stage" / "r.json").write_text(json.dumps({"rows": [{"x": 1.0, "name": "b", "n": 3}]}), encoding="utf-8")
    assert same_results.main(["--tolerance", "1", str(old), str(new)]) == 1
    (new / "stage" / "r.json").write_text(json.dumps({"rows": [{"x": 1.0, "name": "a"}]}), encoding="utf-8")
    assert same_results.main(["--tolerance", "1", str(old), str(new)]) == 1
    assert same_results.main(["--tolerance", "-1", str(old), str(old)]) == 2


def test_large_integers_are_compared_exactly():
    tol = same_results.Tolerance()
    assert not tol.same(2**60, 2**60 + 1, "$.n")  # equal as floats, not as integers
    assert tol.same(float("nan"), float("nan"), "$.x") and not tol.same(float("nan"), 1.0, "$.x")
    assert same_results.Tolerance(1).same(2**60, 2**60 + 1, "$.n")
