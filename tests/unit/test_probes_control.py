"""The Hewitt–Liang control task and the behaviour line: control labels are a fixed derangement of the
counts; on a representation that carries no count the control accuracy is at chance; selectivity, probe
coefficients and the model's zero-shot accuracy land in ``probes.json``."""

import dataclasses
import json

import numpy as np
import pytest

from countlens.core.capture import CaptureMeta
from countlens.probes.behaviour import behaviour_accuracy
from countlens.probes.data import ProbeData
from countlens.probes.figures import draw_probes
from countlens.probes.metrics import control_labels, count_bins
from countlens.probes.probe import ProbeConfig, ProbeResult, run_probes


def test_control_labels_are_a_seeded_derangement_of_the_counts():
    y = np.repeat(np.arange(20.0), 3)
    c = control_labels(y, 0)
    mapping = {a: b for a, b in zip(y, c, strict=True)}
    assert len(mapping) == 20 and all(a != b for a, b in mapping.items())  # a function with no fixed point
    assert sorted(mapping.values()) == sorted(mapping)  # a permutation: label frequencies kept
    assert np.array_equal(c, control_labels(y, 0)) and not np.array_equal(c, control_labels(y, 1))


def data(X, n, answer=None):
    return ProbeData("mem", CaptureMeta(locations=("h",)), ["h"], n.astype(np.float64), X[:, None, :], answer)


def test_control_task_on_a_representation_without_count_is_at_chance():
    rng = np.random.default_rng(0)
    K, per = 40, 30
    n = np.repeat(np.arange(K), per)
    X = rng.standard_normal((len(n), 16))  # carries no count
    result = run_probes(ProbeConfig(acts="mem", seeds=(0, 1)), data(X, n))
    fit = result.locations[0].fits[0]
    chance = 1.0 / K
    for f in result.locations[0].fits:
        assert f.control_test_rounded_acc <= 3 * chance
        assert f.test_rounded_acc <= 3 * chance
        assert abs(f.selectivity) <= 3 * chance
    assert len(fit.coef) == 16


def test_selectivity_is_high_on_a_count_line_and_saved(tmp_path):
    rng = np.random.default_rng(1)
    n = np.repeat(np.arange(30), 20)
    X = np.outer(n, rng.standard_normal(8)) + 1e-3 * rng.standard_normal((len(n), 8))  # a count line
    answer = np.where(n < 10, n, np.nan).astype(np.float64)  # the model answers the small counts only
    result = run_probes(ProbeConfig(acts="mem", seeds=(0,)), data(X, n, answer))
    loc = result.locations[0]
    assert loc.fits[0].test_rounded_acc == 1.0 and loc.fits[0].selectivity > 0.8
    result.save(tmp_path)
    saved = json.loads((tmp_path / "probes.json").read_text())
    assert saved["locations"][0]["selectivity_mean"] == pytest.approx(loc.fits[0].selectivity)
    assert saved["behaviour"]["binned"][0]["accuracy"] == 1.0 and saved["behaviour"]["binned"][-1]["accuracy"] == 0.0
    again = ProbeResult.from_dict(saved)
    assert dataclasses.asdict(again.behaviour) == saved["behaviour"]
    assert again.behaviour.accuracy == pytest.approx(1 / 3)
    assert {p.name for p in draw_probes(again, tmp_path)} >= {"fig7_binned_accuracy.png"}


def test_behaviour_accuracy_counts_unparsed_as_wrong():
    n = np.array([1.0, 2.0, 3.0, 12.0])
    out = behaviour_accuracy(n, np.array([1.0, np.nan, 4.0, 12.0]), count_bins(n))
    assert out.accuracy == 0.5 and out.parsed == 0.75 and out.rows == 4
    assert [b["accuracy"] for b in out.binned] == [pytest.approx(1 / 3), 1.0]
    assert behaviour_accuracy(n, None, count_bins(n)) is None
