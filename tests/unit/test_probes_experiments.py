"""Probe experiments on in-memory data: splits, selection, sweep and the exact-probe norm."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from countlens.errors import UsageError
from countlens.probes.experiments import (
    NormSweepResult,
    ProbeData,
    ProbeResult,
    first_block_location,
    parse_alphas,
    resolve_locations,
    run_norm_sweep,
    run_probes,
    split_rows,
)
from countlens.probes.metrics import rounded_accuracy

NAMES = ["embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def _data(rows=400, d=10, seed=0):
    """Location 0: noise; location 1: count along a direction plus noise; location 2: exactly linear."""
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 40, size=rows).astype(float)
    direction = rng.normal(size=d)
    acts = np.stack([rng.normal(size=(rows, d)),
                     np.outer(n, direction) * 0.2 + rng.normal(size=(rows, d)) * 0.5,
                     np.outer(n, direction) + 3.0], axis=1).astype(np.float32)  # (rows, 3, d)
    return ProbeData("memory", {"model": "synthetic"}, list(NAMES), n, acts)


def test_parse_alphas():
    np.testing.assert_allclose(parse_alphas("1e-6:1e4:41"), np.logspace(-6, 4, 41))
    np.testing.assert_allclose(parse_alphas("1,0,0.5"), [0, 0.5, 1])
    for bad in ("-1,2", "0:1:5", "1e-3:1:0", "a,b", "nan", ""):
        with pytest.raises(UsageError):
            parse_alphas(bad)


def test_split_rows_is_a_seeded_partition():
    train, val, test = split_rows(101, seed=3)
    assert len(val) == len(test) == 20 and len(train) == 61
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(101))
    again = split_rows(101, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again, strict=True))
    assert not np.array_equal(split_rows(101, seed=4)[1], val)
    with pytest.raises(UsageError, match="needs at least"):
        split_rows(3, seed=0)
    with pytest.raises(UsageError):
        split_rows(100, seed=0, fractions=(0.5, 0.5, 0.0))


def test_resolve_locations():
    assert resolve_locations(NAMES, None) == [0, 1, 2]
    assert resolve_locations(NAMES, "embed,2") == [0, 2]
    assert resolve_locations(NAMES, "1:2") == [1, 2]
    for bad in ("blocks.9.hook_resid_post", "3", "2:5", "-1"):
        with pytest.raises(UsageError, match="does not exist"):
            resolve_locations(NAMES, bad)
    assert first_block_location(NAMES) == 1
    assert first_block_location(["attn_out", "h"]) == 1
    assert first_block_location(["only"]) == 0


def test_run_probes_selects_on_validation_and_scores_test():
    data = _data()
    alphas = np.logspace(-4, 4, 17)
    result = run_probes(data, [0, 1, 2], alphas, seeds=[0, 1])
    fit = result.locations[1].fits[1]
    # independent recomputation with a loop of sklearn fits on standardised inputs
    train, val, test = split_rows(len(data.n), 1)
    X = data.X(1)
    mean, scale = X[train].mean(0), X[train].std(0)
    Z = (X - mean) / scale
    scored = []
    for alpha in alphas:
        model = Ridge(alpha=alpha, solver="svd").fit(Z[train], data.n[train])
        pv = model.predict(Z[val])
        scored.append((-rounded_accuracy(data.n[val], pv), np.mean((pv - data.n[val]) ** 2), alpha, model))
    best = min(scored, key=lambda t: t[:3])
    assert fit.alpha == best[2]
    pred = best[3].predict(Z[test])
    assert fit.test_rounded_acc == pytest.approx(rounded_accuracy(data.n[test], pred))
    assert fit.coef_norm == pytest.approx(np.linalg.norm(best[3].coef_ / scale), rel=1e-8)
    assert fit.n_train + fit.n_val + fit.n_test == len(data.n)
    # the noise location cannot count; the exactly linear one counts perfectly and is the best
    assert result.locations[0].stat("test_rounded_acc")[0] < 0.2
    assert result.locations[2].stat("test_rounded_acc") == (1.0, 1.0, 1.0)
    assert result.best_location().name == NAMES[2]
    again = ProbeResult.from_dict(result.to_dict())
    assert again.locations[1].fits[1] == fit


def test_run_probes_resumes_from_partial_results(tmp_path):
    data = _data()
    first = run_probes(data, [1], np.logspace(-2, 2, 5), [0], partial_dir=tmp_path)
    assert len(list(tmp_path.glob("location_001_*.json"))) == 1
    data.acts[:] = 0  # a rerun with the same configuration must not recompute
    second = run_probes(data, [1], np.logspace(-2, 2, 5), [0], partial_dir=tmp_path)
    assert second.locations[0].fits[0] == first.locations[0].fits[0]


def test_norm_sweep_norms_fall_with_alpha_and_stars_are_least_squares():
    data = _data(rows=300)
    alphas = np.logspace(-3, 5, 9)
    result = run_norm_sweep(data, 1, alphas, seeds=[0, 2], standardize=False)
    for s in result.seeds:
        assert np.all(np.diff(s.coef_norm) < 0)  # ridge shrinks the norm monotonically in its own coordinates
        train, _, test = split_rows(300, s.seed)
        X = data.X(1)
        ref = np.linalg.lstsq(np.c_[X[train], np.ones(len(train))], data.n[train], rcond=None)[0]
        assert s.unregularised_norm == pytest.approx(np.linalg.norm(ref[:-1]), rel=1e-8)
        assert s.unregularised_acc == pytest.approx(rounded_accuracy(data.n[test], X[test] @ ref[:-1] + ref[-1]))
    assert NormSweepResult.from_dict(result.to_dict()) == result


def test_classifier_probe_native_scores_match_sklearn_on_standardised_inputs():
    from sklearn.linear_model import LogisticRegression

    from countlens.probes.experiments import fit_classifier_probe

    data = _data(rows=300, d=6)
    splits = split_rows(300, 0)
    train, val, test = splits
    X = data.X(1)
    out = fit_classifier_probe(X, data.n, splits, C=10.0)
    mean, scale = X[train].mean(0), X[train].std(0)
    clf = LogisticRegression(C=10.0, max_iter=1000).fit((X[train] - mean) / scale, data.n[train].astype(int))
    assert out["test_acc"] == pytest.approx(np.mean(clf.predict((X[test] - mean) / scale) == data.n[test]))
    assert out["val_acc"] == pytest.approx(np.mean(clf.predict((X[val] - mean) / scale) == data.n[val]))
    assert out["class_norm_max"] == pytest.approx(np.linalg.norm(clf.coef_ / scale, axis=1).max(), rel=1e-10)
    assert out["classes"] == len(np.unique(data.n[train]))
    noise = fit_classifier_probe(data.X(0), data.n, splits, C=10.0)
    assert noise["test_acc"] < out["test_acc"]
    # a C grid: one classifier per value, the best by validation accuracy (ties: the smaller C) is kept
    grid = fit_classifier_probe(X, data.n, splits, C=[10.0, 1e-4, 1.0])
    assert grid["C_grid"] == [1e-4, 1.0, 10.0]
    for c_value, val_acc in zip(grid["C_grid"], grid["val_acc_path"], strict=True):
        ref = LogisticRegression(C=c_value, max_iter=1000).fit((X[train] - mean) / scale, data.n[train].astype(int))
        assert val_acc == pytest.approx(np.mean(ref.predict((X[val] - mean) / scale) == data.n[val]))
    best = max(grid["val_acc_path"])
    assert grid["C"] == grid["C_grid"][grid["val_acc_path"].index(best)] and grid["val_acc"] == best
    assert grid["val_acc_path"][0] < best  # C = 1e-4 all but erases the class vectors
    with pytest.raises(ValueError):
        fit_classifier_probe(X, data.n, splits, C=[1.0, -1.0])
