"""Figure 7 on weak models: the expected count, the correct count's rank and the counting capacity, from a
capture's answer-distribution columns, equal an independent recount; captures without those columns keep
today's Figure 7."""

import json

import matplotlib
import numpy as np
import pytest

from countlens.core.capture import CaptureMeta
from countlens.core.report import Page, Section
from countlens.probes.behaviour import behaviour_accuracy, counting_capacity
from countlens.probes.data import load_probe_data
from countlens.probes.metrics import count_bins
from countlens.probes.probe import ProbeConfig, ProbeResult, run_probes
from tests.helpers.captures import assert_round_trip, write_answer_capture
from tests.helpers.report_checks import check_report

matplotlib.use("Agg")


def test_counting_capacity_is_the_last_count_before_the_first_failure():
    counts = [0, 1, 2, 3, 4, 5]
    assert counting_capacity(counts, [0.0, 1.0, 0.5, 0.9, 0.4, 1.0]) == 3  # count 0 is not part of it; 5 is past a gap
    assert counting_capacity(counts, [1.0, 0.2, 1.0, 1.0, 1.0, 1.0]) is None  # fails at the smallest count >= 1
    assert counting_capacity(counts, [1.0] * 6) == 5
    assert counting_capacity([0], [1.0]) is None
    assert counting_capacity([2, 4, 8], [1.0, 1.0, None]) == 4  # over the captured counts; a missing rate fails


def test_distribution_columns_give_expected_count_rank_and_capacities(tmp_path):
    n, answer, expected, rank = write_answer_capture(tmp_path / "acts", counts=range(0, 13), capacity=3)
    data = load_probe_data(tmp_path / "acts")
    assert np.array_equal(data.expected, expected) and np.array_equal(data.rank, rank)
    result = run_probes(ProbeConfig(str(tmp_path / "acts"), alphas=(1e-2, 1.0), seeds=(0,)), data)
    b = result.behaviour
    assert b.distribution and b.capacity == 3 and b.rank1_capacity == 5 and b.capacity_from == 1
    assert b.accuracy == pytest.approx(np.mean(answer == n))
    assert b.rank1 == pytest.approx(np.mean(rank == 1))
    assert b.expected_mae == pytest.approx(np.mean(np.abs(expected - n)))
    for entry in b.binned:  # independent recount per count range
        inside = (n >= entry["lo"]) & (n <= entry["hi"])
        assert entry["expected"] == pytest.approx(expected[inside].mean())
        assert entry["rank"] == pytest.approx(rank[inside].mean())
        assert entry["rank1"] == pytest.approx(np.mean(rank[inside] == 1))
        assert entry["mean_count"] == pytest.approx(n[inside].mean())
    per = {c["n"]: c for c in b.per_count}
    assert per[4]["accuracy"] == 0.0 and per[4]["rank1"] == 1.0 and per[7]["rank"] > 1
    again = assert_round_trip(result)
    assert again.behaviour == b
    # Figure 7 gains the rank-1 line and a middle panel with the capacity in its title
    from countlens.probes.figures import plot_binned_accuracy, probe_view

    fig = plot_binned_accuracy(result)
    left = fig.axes[0]
    assert "correct count most likely (rank 1)" in [t.get_text() for t in left.get_legend().get_texts()]
    middle = fig.axes[1]
    assert "counting capacity: greedy n ≤ 3, rank 1 n ≤ 5" in middle.get_title()
    assert "expected count Σ k p(k)" in [t.get_text() for t in middle.get_legend().get_texts()]
    result.save(tmp_path / "out")
    page = Page(tmp_path / "out")
    probe_view(page, Section(stage=None, rel="probes.json", result=ProbeResult.read(tmp_path / "out")))
    html = "".join(page.parts)
    parser = check_report(tmp_path / "out", html)
    shown = {tuple(keys) for _, keys, _ in parser.values}
    assert {("behaviour", "capacity"), ("behaviour", "rank1_capacity"), ("behaviour", "expected_mae")} <= shown
    assert "Counting capacity" in html


def test_captures_without_the_distribution_keep_todays_figure7(tmp_path):
    n = np.repeat(np.arange(0, 8), 5).astype(float)
    answer = np.where(n <= 2, n, np.nan)
    b = behaviour_accuracy(n, answer, count_bins(n))
    assert not b.distribution and b.capacity == 2 and b.rank1_capacity is None and b.rank1 is None
    assert set(b.binned[0]) == {"lo", "hi", "accuracy", "rows"}  # today's keys only
    rng = np.random.default_rng(0)
    from countlens.probes.data import ProbeData
    from countlens.probes.figures import capacity_text, plot_binned_accuracy, probe_view

    X = np.outer(n, rng.normal(size=4))[:, None, :] + 0.01 * rng.normal(size=(len(n), 1, 4))
    result = run_probes(ProbeConfig("m", alphas=(1e-2, 1.0), seeds=(0,)), ProbeData("m", CaptureMeta(), ["h"], n, X, answer))
    fig = plot_binned_accuracy(result)
    assert len([ax for ax in fig.axes if ax.get_title()]) == 2  # accuracy and selectivity, as before
    assert capacity_text(result.behaviour) == "counting capacity: greedy n ≤ 2"
    result.save(tmp_path)
    saved = json.loads((tmp_path / "probes.json").read_text())
    assert saved["behaviour"]["capacity"] == 2 and saved["behaviour"]["distribution"] is False
    page = Page(tmp_path)
    probe_view(page, Section(stage=None, rel="probes.json", result=ProbeResult.read(tmp_path)))
    check_report(tmp_path, "".join(page.parts))
    never = behaviour_accuracy(n, np.full(len(n), 1.0), count_bins(n))
    assert never.capacity == 1 and behaviour_accuracy(n, np.full(len(n), 0.0), count_bins(n)).capacity is None
