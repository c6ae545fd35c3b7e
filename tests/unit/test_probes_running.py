"""Running-count probes (Figure 10): the split keeps prompts whole, the buckets are the relative positions,
every cell is the fit → select → score of Figure 7 (checked against scikit-learn's Ridge), the baselines are
what they say, and a capture that cannot be probed this way is refused before the first fit."""

import json

import matplotlib
import numpy as np
import pytest
from sklearn.linear_model import Ridge

from countlens.core.capture import CaptureMeta
from countlens.core.errors import ConfigError
from countlens.core.report import Page, Section
from countlens.probes.data import ProbeData, load_probe_data
from countlens.probes.metrics import control_labels, r2, rounded_accuracy
from countlens.probes.probe import ProbeConfig, run_probes
from countlens.probes.running import (
    RunningCountResult,
    load_item_data,
    majority_baseline,
    run_running_count,
)
from countlens.probes.splits import split_groups
from tests.helpers.captures import ITEM_LOCATIONS, assert_round_trip, write_capture, write_items_capture
from tests.helpers.report_checks import check_report

matplotlib.use("Agg")
ALPHAS = tuple(np.logspace(-3, 3, 7))


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    path = tmp_path_factory.mktemp("items") / "acts"
    return path, write_items_capture(path)


@pytest.fixture(scope="module")
def result(items):
    path, _ = items
    return run_running_count(ProbeConfig(str(path), target="running_count", position_buckets=4, alphas=ALPHAS,
                                         seeds=(0, 1)))


def test_split_groups_keeps_every_group_in_one_part():
    groups = np.repeat(np.arange(50), np.arange(50) % 4 + 1)  # groups of 1..4 rows
    train, val, test = split_groups(groups, seed=2)
    assert sorted(np.concatenate([train, val, test]).tolist()) == list(range(len(groups)))
    parts = [set(groups[p].tolist()) for p in (train, val, test)]
    assert not (parts[0] & parts[1]) and not (parts[0] & parts[2]) and not (parts[1] & parts[2])
    assert [len(p) for p in parts] == [30, 10, 10]  # fractions of groups, not of rows
    again = split_groups(groups, seed=2)
    assert all(np.array_equal(a, b) for a, b in zip((train, val, test), again, strict=True))
    with pytest.raises(ConfigError, match="the data set has 3 prompts") as err:
        split_groups(np.repeat([7, 8, 9], 20), seed=0)
    assert err.value.field == "fractions"


def test_buckets_are_relative_positions_and_the_boundary_is_the_last(items):
    path, cols = items
    data = load_item_data(path)
    bucket = data.buckets(4)
    for row in range(0, len(cols["n"]), 7):
        k, total = cols["item_index"][row], cols["n"][row] + cols["m"][row]
        expected = 4 if k < 0 else int(np.floor(4 * k / total))
        assert bucket[row] == expected and (k < 0 or k / total >= expected / 4)
    assert np.array_equal(data.running_count, cols["running_count"]) and np.array_equal(data.prompt_id, cols["prompt_id"])


def _sklearn_probe(X, y, train, val, test):
    """Independent fit → select: standardise on the training rows, one scikit-learn Ridge per α, select by
    validation rounded accuracy (ties: MSE, then the smaller α). Returns (α, test predictions, model, scale)."""
    mean, scale = X[train].mean(0), X[train].std(0)
    scale[scale == 0] = 1.0
    scored = []
    for alpha in ALPHAS:
        model = Ridge(alpha=alpha, solver="svd").fit((X[train] - mean) / scale, y[train])
        pv = model.predict((X[val] - mean) / scale)
        scored.append((-rounded_accuracy(y[val], pv), float(np.mean((pv - y[val]) ** 2)), alpha, model))
    best = min(scored, key=lambda t: t[:3])
    return best[2], best[3].predict((X[test] - mean) / scale), best[3], scale


def test_each_cell_is_a_ridge_fit_on_whole_prompts_that_sklearn_reproduces(items, result):
    path, cols = items
    assert isinstance(result, RunningCountResult)
    bucket = load_item_data(path).buckets(4)
    loc = result.locations[1]
    X = cols["acts"][:, 1, :].astype(np.float32).astype(np.float64)  # the capture stores float32
    for target, b, seed in (("running_count", 2, 1), ("n", 0, 0), ("n", 4, 1)):
        fit = next(f for f in loc.cell(target, b).fits if f.seed == seed)
        train, val, test = (np.intersect1d(part, np.flatnonzero(bucket == b))
                            for part in split_groups(cols["prompt_id"], seed))
        ids = [set(cols["prompt_id"][p].tolist()) for p in (train, val, test)]
        assert not (ids[0] & ids[2]) and not (ids[0] & ids[1]) and not (ids[1] & ids[2])  # prompts stay whole
        assert (fit.n_train, fit.n_val, fit.n_test) == (len(train), len(val), len(test))
        y = (cols["running_count"] if target == "running_count" else cols["n"]).astype(np.float64)
        alpha, pred, model, scale = _sklearn_probe(X, y, train, val, test)
        assert fit.alpha == pytest.approx(alpha)
        assert fit.r2 == pytest.approx(r2(y[test], pred), abs=1e-6)
        assert fit.test_rounded_acc == pytest.approx(rounded_accuracy(y[test], pred))
        assert fit.coef_norm == pytest.approx(np.linalg.norm(model.coef_ / scale), rel=1e-6)
        # the control task: the same protocol on the Hewitt–Liang labels of the same rows
        labels = control_labels(y, 0)
        _, control_pred, _, _ = _sklearn_probe(X, labels, train, val, test)
        assert fit.control_test_rounded_acc == pytest.approx(rounded_accuracy(labels[test], control_pred))
        assert fit.selectivity == pytest.approx(fit.test_rounded_acc - fit.control_test_rounded_acc)


def test_the_counter_location_reads_the_count_so_far_and_the_others_do_not(result):
    counter, embed, final = result.locations[1], result.locations[0], result.locations[2]
    items = [b.index for b in result.item_buckets()]
    for b in items:
        assert counter.cell("running_count", b).stat("r2")[0] > 0.99
        assert final.cell("n", b).stat("r2")[0] > 0.99
        assert embed.cell("n", b).stat("r2")[0] < 0.3  # an item's identity says nothing about the final count
    # at the counter, the final count is read only as far as the count so far predicts it: more at the end
    assert counter.cell("n", items[0]).stat("r2")[0] < 0.5 < counter.cell("n", items[-1]).stat("r2")[0]
    assert result.best_location("running_count").name == ITEM_LOCATIONS[1]
    assert result.best_location("n").name == ITEM_LOCATIONS[2]
    boundary = result.buckets[-1]
    assert boundary.label == "boundary" and boundary.lo is None and boundary.rows == result.source["prompts"]


def test_baselines_are_the_majority_label_and_the_training_mean(items, result):
    path, cols = items
    data = load_item_data(path)
    bucket = data.buckets(4)
    b, seed = 0, 1
    train, _, test = (np.intersect1d(p, np.flatnonzero(bucket == b)) for p in split_groups(cols["prompt_id"], seed))
    y = cols["running_count"].astype(float)
    values, counts = np.unique(y[train], return_counts=True)
    majority = values[np.argmax(counts)]
    saved = next(x for x in result.buckets[b].baselines if x.target == "running_count" and x.seed == seed)
    assert saved.majority == majority
    assert saved.majority_test_rounded_acc == pytest.approx(np.mean(y[test] == majority))
    assert saved.constant_r2 == pytest.approx(r2(y[test], np.full(len(test), y[train].mean())))
    assert majority_baseline(y, (np.array([], dtype=int),) * 3, "n", 0).majority is None


def test_result_round_trips_saves_csv_and_draws(result, tmp_path):
    from countlens.probes.figures import draw_running_count, plot_running_count, running_count_view

    again = assert_round_trip(result)
    assert again.locations[1].cells[3] == result.locations[1].cells[3]
    written = result.save(tmp_path)
    assert [p.name for p in written] == ["running_count.json", "running_count.csv"]
    lines = (tmp_path / "running_count.csv").read_text().splitlines()
    cells = sum(len(c.fits) for loc in result.locations for c in loc.cells)
    assert len(lines) == 1 + cells and lines[0].startswith("location,index,target,bucket,position_lo")
    back = RunningCountResult.read(tmp_path)
    saved = json.loads((tmp_path / "running_count.json").read_text())
    assert saved["best_location"]["running_count"] == ITEM_LOCATIONS[1]
    assert saved["locations"][1]["items_mean"]["running_count"]["r2"] > 0.99
    fig = plot_running_count(back)
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert "running count (targets so far): test R²" in titles and "final count n: selectivity" in titles
    assert any("majority baseline" in [t.get_text() for t in ax.get_yticklabels()] for ax in fig.axes)
    assert {p.name for p in draw_running_count(back, tmp_path)} == {"fig10_running_count.png", "fig10_running_count.pdf"}
    page = Page(tmp_path)
    running_count_view(page, Section(stage=None, rel="running_count.json", result=back))
    html = "".join(page.parts)
    check_report(tmp_path, html)
    assert "split" in html and "majority baseline" in html


def test_an_interrupted_run_resumes(items, tmp_path, monkeypatch):
    import countlens.probes.running as running

    path, _ = items
    config = ProbeConfig(str(path), target="running_count", locations="0:1", position_buckets=2, alphas=ALPHAS,
                         seeds=(0,), control=False)
    first = run_running_count(config)
    fit_cell = running.fit_cell
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) > 6:  # location 0's six cells finish, location 1 is interrupted
            raise KeyboardInterrupt
        return fit_cell(*args, **kwargs)

    monkeypatch.setattr(running, "fit_cell", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_running_count(config, resume_dir=tmp_path / "partial")
    assert len(list((tmp_path / "partial").glob("running-location-*.json"))) == 1
    monkeypatch.setattr(running, "fit_cell", fit_cell)
    second = run_running_count(config, resume_dir=tmp_path / "partial")
    assert second.locations == first.locations and not (tmp_path / "partial").exists()
    assert first.locations[0].cells[0].fits[0].control_test_rounded_acc is None  # control off


def test_figure7_on_an_items_capture_reads_its_boundary_rows(items):
    path, cols = items
    data = load_probe_data(path)
    boundary = cols["item_index"] < 0
    assert len(data.n) == int(boundary.sum()) and np.array_equal(data.n, cols["n"][boundary])
    assert np.allclose(data.acts, cols["acts"][boundary].astype(np.float32))
    config = ProbeConfig("m", alphas=ALPHAS, seeds=(0,))
    direct = run_probes(config, ProbeData("m", CaptureMeta(), list(ITEM_LOCATIONS), cols["n"][boundary].astype(float),
                                          cols["acts"][boundary].astype(np.float32)))
    assert run_probes(config, data).locations == direct.locations


def test_what_cannot_be_probed_is_refused_naming_the_field(items, tmp_path):
    path, _ = items
    for kwargs, field, message in (({"target": "count"}, "target", "target must be one of n, running_count"),
                                   ({"target": "running_count", "position_buckets": 0}, "position_buckets",
                                    "must be >= 1"),
                                   ({"target": "running_count", "position_buckets": 2.5}, "position_buckets",
                                    "whole number"),
                                   ({"target": "running_count", "classifier_C": (1.0,)}, "classifier_C",
                                    "Figure 7's"),
                                   ({"target": "running_count", "figure_locations": "1"}, "figure_locations",
                                    "Figure 7's")):
        with pytest.raises(ConfigError, match=message) as err:
            ProbeConfig("x", **kwargs)
        assert err.value.field == field
    boundary = tmp_path / "boundary"
    write_capture(boundary, counts=range(5))
    with pytest.raises(ConfigError, match="needs an items capture") as err:
        run_running_count(ProbeConfig(str(boundary), target="running_count"))
    assert err.value.field == "target" and "acts" in err.value.fields
    with pytest.raises(ConfigError, match="run_running_count") as err:
        run_probes(ProbeConfig(str(path), target="running_count"))
    assert err.value.field == "target"
    with pytest.raises(ConfigError, match="location 'nope' does not exist") as err:
        run_running_count(ProbeConfig(str(path), target="running_count", locations="nope"))
    assert err.value.field == "locations"
    few = tmp_path / "few"
    write_items_capture(few, counts=(1, 2), distractors=(0,), reps=1, shards=1)
    with pytest.raises(ConfigError, match="the data set has 2 prompts") as err:
        run_running_count(ProbeConfig(str(few), target="running_count"))
    assert err.value.field == "fractions"
