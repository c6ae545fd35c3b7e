"""Probe norm needed for rounding-exact counting, and the toy-vs-LLM result object."""

import numpy as np

from countlens.analysis.compare import probe_norm_needed
from countlens.analysis.experiments import CompareResult
from countlens.core.report import format_value, lookup
from countlens.probes.splits import split_rows


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
    assert out["probe_best_acc"] == 1.0 and out["probe_norm_test_acc"] == 1.0
    assert (out["n_train"], out["n_val"], out["n_test"]) == (240, 80, 80)


def test_probe_accuracy_is_validation_selected_and_test_scored():
    # A weak count signal: the probe reported must be the one chosen on validation rows, scored on test
    # rows — not the best test score along the path.
    from countlens.analysis.compare import REL_ALPHAS
    from countlens.probes import RidgePathProbe, rounded_accuracy

    rng = np.random.default_rng(2)
    n = rng.integers(0, 30, size=300).astype(float)
    X = np.outer(n, rng.normal(size=8)) * 0.05 + rng.normal(size=(300, 8))
    out = probe_norm_needed(X, n)
    train, val, test = split_rows(300, 0)
    probe = RidgePathProbe(REL_ALPHAS, standardize=False, relative=True, refit=False).fit(
        X[train], n[train], X[val], n[val])
    assert out["probe_best_acc"] == rounded_accuracy(n[test], probe.predict(X[test]))
    path_test = [rounded_accuracy(n[test], X[test] @ w + b)
                 for w, b in zip(probe.coef_path_, probe.intercept_path_, strict=True)]
    assert out["probe_best_acc"] <= max(path_test)


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


def _compare_result():
    pca = {"counts": [1, 2, 3], "coords": [[-1.0, 0.0], [0.0, 0.1], [1.0, 0.0]], "explained_variance_ratio": [0.9, 0.1]}
    rows = [
        {"label": "softmax-postln-learned", "kind": "toy", "gap_ratio": 1.0, "erank_ratio": 1.0, "arc_angle": 0.0,
         "probe_norm": 3.0, "probe_best_acc": 1.0, "readout_norm": 3.5, "pca": pca},
        {"label": "linear", "kind": "toy", "gap_ratio": 1.0, "erank_ratio": 1.0, "arc_angle": 2e-8,
         "probe_norm": 1.0, "probe_best_acc": 1.0, "readout_norm": 1.2, "pca": pca},
        {"label": "LLM after block 1", "kind": "llm", "gap_ratio": 0.5, "erank_ratio": 1.2, "arc_angle": 1.3,
         "probe_norm": None, "probe_best_acc": 0.4, "readout_norm": None, "pca": pca},
    ]
    return CompareResult(rows=rows, low_window=[1, 10], high_window=[91, 100], arc_counts=[1, 100],
                         pca_counts=[1, 100], probe={"rel_alphas": [0.0, 1e-14, 1.0, 100.0]})


def test_compare_figure_shows_zero_angles_axes_and_what_was_tried():
    import matplotlib

    matplotlib.use("Agg")
    from countlens.analysis.figures import plot_compare

    fig = plot_compare(_compare_result())
    fig.canvas.draw()
    axes = {ax.get_title(): ax for ax in fig.axes}
    angle = axes["endpoint angle"]
    assert angle.get_xscale() == "linear" and angle.get_xlim()[0] == 0.0  # an exact zero is on the axis
    assert "0" in [t.get_text() for t in angle.texts]  # and labelled as such
    assert "rad" in angle.get_xlabel()
    probe = axes["probe norm for exact counting"]
    assert probe.get_xlabel() and "not reached" in " ".join(t.get_text() for t in probe.texts)
    assert "1e-14" in " ".join(t.get_text() for t in probe.texts)  # says what was tried
    pca_axes = [ax for ax in fig.axes if ax.get_xlabel().startswith("PC1")]
    assert len(pca_axes) == 3 and all(ax.get_ylabel().startswith("PC2") and ax.get_xticks().size for ax in pca_axes)
    assert any(ax.get_ylabel() == "count $n$" for ax in fig.axes)  # the colour bar
    legend = probe.get_legend()
    if legend is not None:  # the legend never covers a drawn value
        box = legend.get_window_extent()
        points = probe.transData.transform([(float(r["readout_norm"]), i) for i, r in
                                            enumerate(_compare_result().rows) if r["readout_norm"]])
        assert not any(box.contains(x, y) for x, y in points)


def test_source_floors_match_a_by_hand_loop_and_separate_signal_from_noise():
    """Issue 45: the comparison's floors (pooled gap ratio, erank ratio, PCA count order) equal a loop over the
    same shuffled labels, and a planted count code stands above them where noise does not."""
    import pytest

    from countlens.analysis import geometry as g
    from countlens.analysis import noise
    from countlens.analysis.compare import source_floors

    rng = np.random.default_rng(11)
    n = np.repeat(np.arange(1, 31), 4)
    groups = np.tile([0, 1], len(n) // 2)
    phase = (n / 8.0)[:, None] ** 2 * rng.uniform(0.3, 1.5, size=10)
    signal = np.concatenate([np.cos(phase), np.sin(phase)], axis=1)
    windows = {"low": (1, 8), "high": (23, 30), "pca_counts": (1, 30)}
    for scale, above in ((3.0, True), (0.0, False)):
        X = rng.normal(size=(len(n), 20)) + scale * signal
        counts, C = g.count_centroids(X, n)
        floors = source_floors(counts, C, X, n, groups=groups, n_shuffles=6, **windows)
        labels = noise.shuffled_labels(n, 6, noise.NOISE_SEED, groups=groups)
        by_hand = []
        for lab in labels:
            Cs = np.stack([X[lab == c].mean(axis=0) for c in range(1, 31)])
            lo = np.mean([np.linalg.norm(Cs[k + 1] - Cs[k]) for k in range(0, 7)])
            hi = np.mean([np.linalg.norm(Cs[k + 1] - Cs[k]) for k in range(22, 29)])
            by_hand.append(hi / lo)
        assert floors["gap_ratio"]["shuffled_mean"] == pytest.approx(np.mean(by_hand), rel=1e-10)
        assert floors["gap_ratio"]["shuffled_std"] == pytest.approx(np.std(by_hand, ddof=1), rel=1e-8)
        assert floors["count_order"]["value"] == pytest.approx(g.count_order(C, counts), rel=1e-12)
        assert floors["gap_ratio"]["above_floor"] is above and floors["count_order"]["above_floor"] is above
        assert np.isfinite(floors["erank_ratio"]["half_a"])  # two prompts per seed and count: halves exist
