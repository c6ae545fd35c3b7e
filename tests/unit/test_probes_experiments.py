"""Probe experiments on in-memory data: splits, selection, sweep and the exact-probe norm."""

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from countlens.core.capture import CaptureMeta
from countlens.core.errors import ConfigError, UsageError
from countlens.probes.data import ProbeData
from countlens.probes.metrics import rounded_accuracy
from countlens.probes.probe import ProbeConfig, ProbeResult, run_probes
from countlens.probes.splits import split_rows
from countlens.probes.sweep import SweepConfig, SweepResult, run_sweep
from tests.helpers.captures import assert_round_trip

NAMES = ["embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def _data(rows=400, d=10, seed=0):
    """Location 0: noise; location 1: count along a direction plus noise; location 2: exactly linear."""
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 40, size=rows).astype(float)
    direction = rng.normal(size=d)
    acts = np.stack([rng.normal(size=(rows, d)),
                     np.outer(n, direction) * 0.2 + rng.normal(size=(rows, d)) * 0.5,
                     np.outer(n, direction) + 3.0], axis=1).astype(np.float32)  # (rows, 3, d)
    return ProbeData("memory", CaptureMeta(model_id="synthetic"), list(NAMES), n, acts)


def test_configs_validate_in_their_own_terms():
    assert ProbeConfig("x", alphas=(1.0, 0.0, 0.5)).alphas == (0.0, 0.5, 1.0)
    for bad, message in (({"alphas": (-1.0, 2.0)}, "alphas must be finite"), ({"alphas": ()}, "alphas must not"),
                         ({"alphas": ("big",)}, "alphas must be numbers"),
                         ({"seeds": ()}, "seeds must not"), ({"fractions": (0.5, 0.5, 0.0)}, "test > 0"),
                         ({"fractions": (0.5, 0.5, 0.5)}, "sum to 1"), ({"blas_threads": 0}, "blas_threads must be >= 1"),
                         ({"bin_width": 0}, "bin_width must be >= 1"),
                         ({"classifier_C": (1.0, 0.0)}, "classifier_C values must be finite and > 0")):
        with pytest.raises(ConfigError, match=message) as err:
            ProbeConfig("x", **bad)
        assert err.value.field == next(iter(bad))  # the error is about the field that holds the value
    with pytest.raises(ConfigError, match="alphas must be finite"):
        SweepConfig("x", alphas=(float("nan"),))


def test_run_time_checks_name_the_field():
    data = _data(rows=60)
    for config, field, message in ((ProbeConfig("m", locations="embed,nope"), "locations", "'nope' does not exist"),
                                   (ProbeConfig("m", locations="0:1", figure_locations="2"), "figure_locations",
                                    "not among the probed locations"),
                                   (SweepConfig("m", location="9"), "location", "location 9 does not exist")):
        run = run_probes if isinstance(config, ProbeConfig) else run_sweep
        with pytest.raises(ConfigError, match=message) as err:
            run(config, data)
        assert err.value.field == field and str(err.value).startswith(field)
    with pytest.raises(ConfigError, match="the data set has 3 rows") as err:
        split_rows(3, 0)
    assert err.value.field == "fractions"


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
        split_rows(100, seed=0, fractions=(0.0, 0.5, 0.5))
    train, val, test = split_rows(100, seed=0, fractions=(0.75, 0.25, 0.0))  # a fit-and-select split
    assert len(train) == 75 and len(val) == 25 and len(test) == 0


def test_run_probes_selects_on_validation_and_scores_test():
    data = _data()
    alphas = np.logspace(-4, 4, 17)
    result = run_probes(ProbeConfig("memory", alphas=tuple(alphas), seeds=(0, 1)), data)
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
    again = assert_round_trip(result)
    assert again.locations[1].fits[1] == fit and isinstance(again, ProbeResult)
    assert again.provenance["config"]["seeds"] == [0, 1]  # the config's own fields, as given
    assert again.config["split_sizes"] == {"train": 240, "validation": 80, "test": 80}  # the protocol as run


def test_run_probes_resumes_an_interrupted_run_and_clears_its_cache(tmp_path, monkeypatch):
    import countlens.probes.probe as experiments

    data = _data()
    config = ProbeConfig("memory", locations="1:2", alphas=tuple(np.logspace(-2, 2, 5)), seeds=(0,))
    first = run_probes(config, data)
    fit_probe = experiments.fit_probe
    calls = []

    def interrupted(X, *args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return fit_probe(X, *args, **kwargs)

    monkeypatch.setattr(experiments, "fit_probe", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_probes(config, data, resume_dir=tmp_path / "partial")
    assert len(list((tmp_path / "partial").glob("location-*.json"))) == 1  # the finished location is kept
    monkeypatch.setattr(experiments, "fit_probe", fit_probe)
    data.acts[:, 1] = 0  # the rerun must reuse location 1, not recompute it
    second = run_probes(config, data, resume_dir=tmp_path / "partial")
    assert second.locations[0].fits[0] == first.locations[0].fits[0]
    assert second.locations[1].fits[0] == first.locations[1].fits[0]
    assert not (tmp_path / "partial").exists()  # a finished run leaves no resume files


def test_norm_sweep_norms_fall_with_alpha_and_stars_are_least_squares():
    data = _data(rows=300)
    alphas = np.logspace(-3, 5, 9)
    result = run_sweep(SweepConfig("memory", location="1", alphas=tuple(alphas), seeds=(0, 2), standardize=False), data)
    for s in result.seeds:
        assert np.all(np.diff(s.coef_norm) < 0)  # ridge shrinks the norm monotonically in its own coordinates
        train, _, test = split_rows(300, s.seed)
        X = data.X(1)
        ref = np.linalg.lstsq(np.c_[X[train], np.ones(len(train))], data.n[train], rcond=None)[0]
        assert s.unregularised_norm == pytest.approx(np.linalg.norm(ref[:-1]), rel=1e-8)
        assert s.unregularised_acc == pytest.approx(rounded_accuracy(data.n[test], X[test] @ ref[:-1] + ref[-1]))
    assert isinstance(assert_round_trip(result), SweepResult)
    assert result.provenance["config"]["location"] == "1" and result.config["location"] == NAMES[1]


def test_classifier_probe_native_scores_match_sklearn_on_standardised_inputs():
    from sklearn.linear_model import LogisticRegression

    from countlens.probes.classifier import fit_classifier_probe

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
    with pytest.raises(ConfigError, match="classifier_C values"):
        fit_classifier_probe(X, data.n, splits, C=[1.0, -1.0])
