"""Probe metrics against scikit-learn and explicit loops."""

import numpy as np
import pytest
from sklearn.metrics import mean_absolute_error, r2_score

from countlens.probes.metrics import binned_accuracy, count_bins, mae, native_norm, r2, rounded_accuracy


def test_rounded_accuracy_matches_a_loop_and_treats_half_as_wrong():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 50, size=500).astype(float)
    pred = y + rng.uniform(-1.5, 1.5, size=500)
    expected = np.mean([abs(p - t) < 0.5 for p, t in zip(pred, y, strict=True)])
    assert rounded_accuracy(y, pred) == pytest.approx(expected)
    # an error of exactly one half is not rounding-exact (|ŷ − n| < 1/2), on either side
    assert rounded_accuracy([3.0, 3.0], [3.5, 2.5]) == 0.5  # floor(2.5 + .5) = 3 counts, 3.5 -> 4 does not
    assert rounded_accuracy([3.0], [3.4999]) == 1.0


def test_r2_and_mae_match_sklearn():
    rng = np.random.default_rng(1)
    y = rng.normal(size=100) * 10
    pred = y + rng.normal(size=100)
    assert r2(y, pred) == pytest.approx(r2_score(y, pred), rel=1e-12)
    assert mae(y, pred) == pytest.approx(mean_absolute_error(y, pred), rel=1e-12)
    assert r2([2.0, 2.0], [2.0, 2.0]) == 1.0 and r2([2.0, 2.0], [1.0, 2.0]) == 0.0


def test_count_bins_and_binned_accuracy_match_a_loop():
    rng = np.random.default_rng(2)
    y = rng.integers(0, 101, size=2000).astype(float)
    pred = y + rng.normal(size=2000) * (0.2 + y / 100)
    bins = count_bins(y)
    assert bins[0] == (0, 0) and bins[1] == (1, 10) and bins[-1] == (91, 100)
    assert len(bins) == 11
    out = binned_accuracy(y, pred, bins)
    for b in out:
        rows = [(t, p) for t, p in zip(y, pred, strict=True) if b["lo"] <= t <= b["hi"]]
        assert b["rows"] == len(rows)
        assert b["accuracy"] == pytest.approx(np.mean([np.floor(p + 0.5) == t for t, p in rows]))
    assert sum(b["rows"] for b in out) == len(y)
    assert binned_accuracy(y, pred, [(500, 509)])[0] == {"lo": 500, "hi": 509, "accuracy": None, "rows": 0}
    assert count_bins(np.array([5, 12, 13]), width=10, start=0) == [(0, 9), (10, 19)]


def test_native_norm():
    assert native_norm(np.array([3.0, 4.0])) == 5.0
    np.testing.assert_allclose(native_norm(np.array([[3.0, 4.0], [1.0, 0.0]])), [5.0, 1.0])
