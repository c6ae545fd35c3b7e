"""Probe norm needed for rounding-exact counting, and the toy-vs-LLM result object."""

import numpy as np

from countlens.analysis.compare import CompareResult, probe_norm_needed
from countlens.analysis.html_report import format_value, lookup


def test_probe_norm_of_a_rank_one_count_code():
    # x = offset + n u: the exact read-out is w = u / |u|^2 (norm 1/|u|). With a free intercept, ridge
    # shrinks predictions towards the mean count: c (n - mean) + mean, exact while (1 - c) |n - mean| < 1/2,
    # and |n - mean| reaches ~25 here, so the needed norm lies in [(1 - 1/40)/|u|, 1/|u|].
    rng = np.random.default_rng(0)
    n = rng.integers(0, 51, size=400).astype(float)
    u = np.array([0.0, 3.0, 4.0, 0.0]) / 10.0  # |u| = 0.5
    X = np.array([7.0, -2.0, 1.0, 5.0]) + n[:, None] * u
    out = probe_norm_needed(X, n)
    assert out["probe_norm"] is not None
    assert (1 - 1 / 40) * 2.0 <= out["probe_norm"] <= 2.0 + 1e-9
    assert out["probe_best_acc"] == 1.0
    assert out["n_test"] == 80 and out["n_train"] == 320


def test_probe_norm_not_reached_on_noise():
    rng = np.random.default_rng(1)
    n = rng.integers(0, 51, size=300)
    out = probe_norm_needed(rng.normal(size=(300, 6)), n)
    assert out["probe_norm"] is None
    assert out["probe_best_acc"] < 0.5


def test_closest_toy_uses_log_ratios():
    rows = [
        {"label": "softmax", "kind": "toy", "gap_ratio": 0.01, "erank_ratio": 1.0},
        {"label": "postln", "kind": "toy", "gap_ratio": 0.5, "erank_ratio": 2.0},
        {"label": "LLM a", "kind": "llm", "gap_ratio": 0.4, "erank_ratio": 1.5},
        {"label": "LLM b", "kind": "llm", "gap_ratio": 0.02, "erank_ratio": 0.9},
    ]
    res = CompareResult(rows=rows, low_window=[1, 10], high_window=[91, 100], arc_counts=[1, 100],
                        pca_counts=[1, 100])
    assert res.closest_toy() == {"LLM a": "postln", "LLM b": "softmax"}
    assert CompareResult.from_dict(res.to_dict()).rows == rows


def test_format_value_and_lookup():
    assert format_value(0.123456789) == "0.1235"
    assert format_value(12) == "12"
    assert format_value(None) == "—"
    assert format_value(True) == "yes"
    assert lookup({"a": [{"b": 3}]}, ["a", 0, "b"]) == 3
