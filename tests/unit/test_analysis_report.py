"""The HTML report: every value shown is read from the JSON file (and key) its span names."""

import re

from countlens.core.io import write_json_atomic
from countlens.pipeline.report import render_index
from countlens.pipeline.reproduce import build_stages
from tests.helpers.report_checks import check_report


def _render(out):
    return render_index(out, build_stages("quick"))


def _fake_report(out):
    stages = [
        {"stage": "toy-rates", "title": "Table 1: B_min rates", "status": "done", "wall_s": 3.21, "reused": False,
         "commands": ["countlens toy rates --d 16 --L 10,30"], "files": ["rates.json"]},
        {"stage": "toy-table2", "title": "Table 2", "status": "done", "wall_s": 12.5, "files": ["table2.json"]},
        {"stage": "toy-table3", "title": "Table 3", "status": "done", "wall_s": 40.25, "files": ["table3.json"]},
        {"stage": "geometry", "title": "Figures 5 and 6", "status": "done", "wall_s": 2.0,
         "files": ["figure5.csv", "figure5.png", "geometry.json"]},
        {"stage": "toy-lcap", "title": "Table 1: L_cap", "status": "failed", "wall_s": 0.01,
         "reason": "command not available: countlens toy lcap is not installed in this version"},
        {"stage": "compare", "title": "Toy vs LLM", "status": "skipped", "reason": "needs stage toy-construct"},
    ]
    write_json_atomic(out / "reproduce.json", {
        "preset": "quick", "model": "default", "stages": stages,
        "provenance": {"config": {"sizes": {"capture": ["--L", "256"], "toy-construct": {"d": 16, "L": 100}}},
                       "versions": {"numpy": "2.1.0", "python": "3.11.7"}, "command": "countlens reproduce",
                       "created_utc": "2026-01-01T00:00:00+00:00"}})
    write_json_atomic(out / "toy-rates/rates.json", {"d": 16, "tau": 0.25, "variants": {
        "softmax": {"L": [10, 30, 100], "b_min": [4.123456, 11.5, 37.0], "slope": 0.9987, "claimed": "1"},
        "softmax-preln-bare": {"L": [10], "b_min": [2.5], "slope": None, "claimed": "inf"}}})
    write_json_atomic(out / "toy-table2/table2.json", {"variant": "softmax", "optimizer": "lbfgs", "rows": [
        {"d": 4, "L": 250, "steps": 150, "diverged": [],
         "test_exact_accuracy": {"mean": 0.98781, "min": 0.9815, "max": 1.0},
         "full_domain_worst_error": {"mean": 0.65, "min": 0.444, "max": 0.757}}]})
    write_json_atomic(out / "toy-table3/table3.json", {"d": 16, "tau": 0.25, "variants": {"softmax": {
        "B": [10, 30], "l_max": [15, 50], "paper_constr": [12, 20], "attained": [10, 50],
        "attained_next_failing": [20, None], "attained_runs": [{"L": 10}]}},
        "provenance": {"config": {"attained_grid": [10, 20, 50]}}})
    write_json_atomic(out / "geometry/stage.json", stages[3])
    write_json_atomic(out / "geometry/geometry.json", {
        "locations": ["embed"], "counts": [1, 2], "seeds": [0], "pca": [],
        "low_window": [1, 10], "high_window": [91, 100], "pca_counts": [1, 100],
        "per_location": [{"index": 0, "name": "embed", "gap_ratio": "nan", "gap_ratio_min": "nan",
                          "gap_ratio_max": "nan", "erank_ratio": 1.5, "erank_ratio_min": 1.25,
                          "erank_ratio_max": 1.75}]})
    (out / "geometry/figure5.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    (out / "geometry/figure5.csv").write_text("a\n1\n")


def test_every_value_in_the_report_comes_from_its_json(tmp_path):
    _fake_report(tmp_path)
    text = _render(tmp_path)
    parser = check_report(tmp_path, text)
    shown = {(rel, tuple(keys)) for rel, keys, _ in parser.values}
    assert ("toy-rates/rates.json", ("variants", "softmax", "b_min", 0)) in shown
    assert ("toy-table2/table2.json", ("rows", 0, "test_exact_accuracy", "max")) in shown
    assert ("toy-table3/table3.json", ("variants", "softmax", "attained", 1)) in shown
    assert ("reproduce.json", ("stages", 0, "wall_s")) in shown
    assert ("geometry/geometry.json", ("per_location", 0, "erank_ratio_max")) in shown
    assert "4.123" in text and "command not available: countlens toy lcap" in text
    assert parser.images == ["geometry/figure5.png"]
    assert 'href="geometry/figure5.csv"' in text
    # Each figure opens at full size; Table 3 compares its constructions with the paper's as a checked ratio.
    assert 'href="geometry/figure5.png"' in text
    ratios = {(rel, tuple(keys), tuple(over)) for rel, keys, over, _ in parser.ratios}
    assert ratios == {("toy-table3/table3.json", ("variants", "softmax", "l_max", i),
                       ("variants", "softmax", "paper_constr", i)) for i in (0, 1)}
    # Table headers are words, not JSON keys, and the caption says what limits the attained column.
    table3 = text.split("<h2>Table 3")[1].split('<p class="caption">')[0]
    headers = re.findall(r"<th[^>]*>(.*?)</th>", table3)
    assert "attained L_max (trained)" in headers and not {"l_max", "paper_constr", "attained_next_failing"} & set(headers)
    assert "stops at the grid's end" in text


def test_the_check_catches_a_number_that_is_not_in_the_json(tmp_path):
    _fake_report(tmp_path)
    text = _render(tmp_path).replace(">4.123<", ">4.200<")
    try:
        check_report(tmp_path, text)
    except AssertionError:
        return
    raise AssertionError("a changed number went unnoticed")


def test_the_check_catches_a_ratio_that_is_not_the_jsons(tmp_path):
    _fake_report(tmp_path)
    text = _render(tmp_path)
    assert ">2.5<" in text  # 50 / 20, the constructions' gain over the paper's at B = 30
    try:
        check_report(tmp_path, text.replace(">2.5<", ">2.6<"))
    except AssertionError:
        return
    raise AssertionError("a changed ratio went unnoticed")


def test_geometry_floors_and_their_verdicts_come_from_the_json(tmp_path):
    """Issue 45: Figure 5's and 6's noise floors are shown beside the ratios, each caption saying where a value
    stands above its floor, every number a span of geometry.json."""
    from countlens.analysis.experiments import GeometryConfig, run_geometry
    from tests.helpers.captures import write_capture

    _fake_report(tmp_path)
    write_capture(tmp_path / "acts", range(0, 21))
    result = run_geometry(GeometryConfig(tmp_path / "acts", low=(1, 5), high=(15, 20), pca_counts=(1, 20)))
    result.save(tmp_path / "geometry")
    text = _render(tmp_path)
    parser = check_report(tmp_path, text)
    shown = {(rel, tuple(keys)) for rel, keys, _ in parser.values}
    rel = "geometry/geometry.json"
    assert (rel, ("per_location", 2, "floors", "gap_ratio", "shuffled_mean")) in shown
    assert (rel, ("per_location", 2, "floors", "erank_ratio", "half_b")) in shown
    assert (rel, ("pca", 1, "floors", "count_order", "z")) in shown
    assert (rel, ("floor_summary", "gap_ratio", "n_above")) in shown
    assert (rel, ("floor_summary", "count_order", "n_above")) in shown
    assert "stands above its shuffled-label floor" in text and ">120</span>°" in text
    # The synthetic count curve is ordered along PC1 at every PCA location: the caption names them all.
    assert result.floor_summary["count_order"]["n_above"] == 4
