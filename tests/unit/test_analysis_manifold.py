"""The count manifold (analysis/manifold.py, manifold_experiment.py): every metric against a brute-force
computation, each toy variant's own curve given the shape its construction makes and named nearest to itself
(also rotated, scaled and slightly noised), noise turning by 120°, and the experiment end to end on a
synthetic capture."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes
from scipy.stats import ortho_group

from countlens.analysis import manifold as mf
from countlens.analysis.noise import noise_floor, shuffled_centroids
from countlens.core.errors import ConfigError
from countlens.toy import VARIANTS
from tests.helpers.captures import write_capture

L, D = 10, 4  # toy curves of the checked constructions at n = 0..L, width D (seconds to build)
RAYS = ("linear", "linear-preln-bare")
SEGMENTS = ("softmax", "softmax-preln-learned", "softmax-preln-bare")


@pytest.fixture(scope="module")
def toys():
    curves, built = mf.toy_curves(range(L + 1), VARIANTS, D)
    assert built == dict.fromkeys(VARIANTS, L)
    return curves


# ------------------------------------------------------------------------------------- brute force


def brute_metrics(counts, C):
    """The metrics of SPEC §4, each by a route the module does not take (full SVD, loops, arccos, polyfit)."""
    C = np.asarray(C, dtype=float)
    C0 = C - C.mean(axis=0)
    _, s, vt = np.linalg.svd(C0, full_matrices=True)
    s2 = s ** 2
    share = np.cumsum(s2) / s2.sum()
    dims95 = next(i + 1 for i, f in enumerate(share) if f >= 0.95 - 1e-12)
    steps = [math.dist(C[j + 1], C[j]) for j in range(len(C) - 1)]
    angles = []
    for j in range(len(C) - 2):
        a, b = C[j + 1] - C[j], C[j + 2] - C[j + 1]
        angles.append(math.degrees(math.acos(np.clip(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)), -1, 1))))
    n = np.asarray(counts[:-1], dtype=float)
    keep = n >= 1
    slope = np.polyfit(np.log(n[keep]), np.log(np.asarray(steps)[keep]), 1)[0]
    plane = C0 @ vt[:2].T @ vt[:2]
    return {"dims95": dims95, "participation_ratio": s2.sum() ** 2 / (s2 ** 2).sum(),
            "step_cv": np.std(steps) / np.mean(steps), "step_slope": slope,
            "turn_mean_deg": np.mean(angles), "turn_std_deg": np.std(angles),
            "out_of_plane": np.linalg.norm(C0 - plane) ** 2 / np.linalg.norm(C0) ** 2}


def brute_procrustes(A, B):
    """scipy's orthogonal Procrustes on the padded, centred, unit-norm curves."""
    A = A - A.mean(axis=0)
    B = B - B.mean(axis=0)
    A, B = A / np.linalg.norm(A), B / np.linalg.norm(B)
    w = max(A.shape[1], B.shape[1])
    A, B = np.pad(A, ((0, 0), (0, w - A.shape[1]))), np.pad(B, ((0, 0), (0, w - B.shape[1])))
    R, _ = orthogonal_procrustes(B, A)
    return float(np.linalg.norm(A - B @ R))


@pytest.mark.parametrize("k, d", [(12, 5), (9, 40), (30, 3)])
def test_metrics_match_a_brute_force_computation(k, d):
    rng = np.random.default_rng(k * d)
    counts = np.arange(k) + 2 * (d == 40)  # counts need not start at 0
    t = np.log1p(counts)[:, None]
    C = np.hstack([t, np.sin(t), 0.3 * rng.normal(size=(k, d - 2))]) @ ortho_group.rvs(d, random_state=k)
    got, want = mf.manifold_metrics(counts, C), brute_metrics(counts, C)
    assert got["dims95"] == want["dims95"]
    for key in mf.METRICS[1:]:
        assert got[key] == pytest.approx(want[key], rel=1e-7, abs=1e-9), key
    B = rng.normal(size=(k, d + 3))
    assert mf.procrustes_distance(C, B) == pytest.approx(brute_procrustes(C, B), rel=1e-9)
    assert mf.procrustes_distance(C, C) < 1e-12  # congruent curves at round-off, not at sqrt(eps)


def test_procrustes_is_a_shape_distance():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(15, 6))
    Q = ortho_group.rvs(9, random_state=4)
    moved = 5.0 * np.pad(A, ((0, 0), (0, 3))) @ Q + rng.normal(size=9)  # rotated into a wider space, scaled, shifted
    assert mf.procrustes_distance(A, moved) < 1e-12
    assert mf.procrustes_distance(A, A * [1, 1, 1, 1, 1, -1]) < 1e-12  # a reflection is allowed
    assert 0 < mf.procrustes_distance(A, rng.normal(size=(15, 6))) <= 2
    assert math.isnan(mf.procrustes_distance(A, np.ones((15, 6))))  # a curve that does not move has no shape
    best, ties = mf.nearest({"a": 0.3, "b": 0.1, "c": 0.1 + 1e-12, "d": math.nan})
    assert (best, ties) == ("b", ["b", "c"])


def test_window_curve_averages_runs_of_counts():
    counts, C = np.arange(7), np.arange(14.0).reshape(7, 2)
    wc, wC = mf.window_curve(counts, C, 3)
    assert wc.tolist() == [1.0, 4.0] and wC.tolist() == [[2.0, 3.0], [8.0, 9.0]]  # the short last run dropped
    assert np.array_equal(mf.window_curve(counts, C, 1)[1], C)


# ------------------------------------------------------------------------------------- the toy's shapes


def test_linear_variants_are_equally_spaced_rays(toys):
    for v in RAYS:
        m = mf.manifold_metrics(np.arange(L + 1), toys[v])
        assert m["dims95"] == 1 and m["participation_ratio"] == pytest.approx(1, abs=1e-12), v
        assert m["turn_mean_deg"] < 1e-6 and m["step_cv"] < 1e-12 and abs(m["step_slope"]) < 1e-12, v
        assert m["out_of_plane"] < 1e-12, v


def test_softmax_without_post_ln_is_a_segment_with_shrinking_steps(toys):
    # o = (a z_b + n z_s) / (a + n): a point moving toward z_s ever slower (pre-LN only changes z_b, z_s)
    for v in SEGMENTS:
        m = mf.manifold_metrics(np.arange(L + 1), toys[v])
        assert m["dims95"] == 1 and m["turn_mean_deg"] < 1e-6 and m["out_of_plane"] < 1e-12, v
        assert np.all(np.diff(mf.curve_steps(toys[v])) < 0) and m["step_slope"] < 0, v


def test_bare_post_ln_is_a_planar_arc_of_the_sphere(toys):
    # LN of the segment's points: on the circle |h| = sqrt(d) about the origin in one plane, so the steps (chords)
    # turn by half the sum of the two arcs they span, seen from the centre
    h = toys["softmax-postln-bare"]
    m = mf.manifold_metrics(np.arange(L + 1), h)
    assert np.allclose(np.linalg.norm(h, axis=1), math.sqrt(D), rtol=1e-12)
    assert m["out_of_plane"] < 1e-12 and m["participation_ratio"] > 1.01 and m["turn_mean_deg"] > 1
    u = h / np.linalg.norm(h, axis=1, keepdims=True)
    arcs = np.degrees(np.arccos(np.clip(np.sum(u[1:] * u[:-1], axis=1), -1, 1)))
    assert mf.turning_angles(h) == pytest.approx((arcs[1:] + arcs[:-1]) / 2, abs=1e-6)


def test_learned_post_ln_construction_reads_one_coordinate_of_the_arc(toys):
    # The checked construction sets gamma = G e1 (w ⊙ gamma = W G e1; beta = 0): gamma ⊙ LN(o) keeps one coordinate
    # of the arc, so its h(n, 0) is a segment with unequal steps, not a two-dimensional arc.
    m = mf.manifold_metrics(np.arange(L + 1), toys["softmax-postln-learned"])
    assert m["dims95"] == 1 and m["turn_mean_deg"] < 1e-6 and m["step_cv"] > 0.05


def _twins(toys, v):
    """The variants whose curves are congruent to ``v``'s (the two linear variants are one ray)."""
    return [w for w in VARIANTS if mf.procrustes_distance(toys[v], toys[w]) < mf.TIE]


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_is_nearest_to_itself_also_moved_and_slightly_noised(toys, variant):
    C = toys[variant]
    assert mf.nearest(mf.shape_match(C, toys))[1] == _twins(toys, variant)
    rng = np.random.default_rng(VARIANTS.index(variant))
    Q = ortho_group.rvs(D + 5, random_state=VARIANTS.index(variant))
    moved = 7.5 * np.pad(C, ((0, 0), (0, 5))) @ Q + rng.normal(size=D + 5)
    spread = np.linalg.norm(moved - moved.mean(axis=0)) / math.sqrt(moved.size)
    moved += 1e-5 * spread * rng.normal(size=moved.shape)
    distances = mf.shape_match(moved, toys)
    assert distances[variant] < 1e-4
    assert mf.nearest(distances, tie=1e-6)[1] == _twins(toys, variant)
    clean, copy = mf.manifold_metrics(np.arange(L + 1), C), mf.manifold_metrics(np.arange(L + 1), moved)
    assert copy["dims95"] == clean["dims95"]
    assert copy["turn_mean_deg"] == pytest.approx(clean["turn_mean_deg"], abs=0.05)
    assert copy["step_cv"] == pytest.approx(clean["step_cv"], abs=1e-3)


# ------------------------------------------------------------------------------------- the noise floor


def test_independent_noise_turns_by_120_degrees():
    rng = np.random.default_rng(0)
    assert mf.manifold_metrics(np.arange(60), rng.normal(size=(60, 800)))["turn_mean_deg"] == pytest.approx(120, abs=2)
    # a ray's prompts (8 per count, with noise) with their count labels shuffled: the centroids are iid around
    # one mean (120° on average even along one line: successive steps reverse with probability 2/3)
    n = np.repeat(np.arange(30), 8)
    X = n[:, None] * rng.normal(size=(1, 300)) + 0.5 * rng.normal(size=(len(n), 300))
    counts, shuffled = shuffled_centroids(X, n, n_shuffles=5, seed=1)
    turns = [mf.manifold_metrics(counts, S)["turn_mean_deg"] for S in shuffled]
    assert np.mean(turns) == pytest.approx(120, abs=5)
    C = np.stack([X[n == c].mean(axis=0) for c in counts])
    assert mf.manifold_metrics(counts, C)["turn_mean_deg"] < 30  # the real labels: a ray under a little noise


# ------------------------------------------------------------------------------------- the experiment


@pytest.fixture(scope="module")
def capture(tmp_path_factory):
    path = tmp_path_factory.mktemp("manifold") / "acts"
    write_capture(path, counts=range(0, L + 1), seeds=(0, 1), reps=2, n_loc=3, d=6)  # the toys' L: built once
    return path


def _config(capture, **kw):
    from countlens.analysis.manifold_experiment import ManifoldConfig

    return ManifoldConfig(acts=str(capture), **{"variants": ("linear", "softmax-postln-bare"), "toy_d": D,
                                                "window": 2, "n_shuffles": 4, **kw})


def test_the_experiment_reports_every_location_beside_its_floor(capture, tmp_path):
    from countlens.analysis.manifold_experiment import ManifoldResult, run_manifold
    from countlens.analysis.manifold_figures import draw_manifold
    from countlens.core.capture import open_capture

    result = run_manifold(_config(capture))
    cap = open_capture(capture)
    for i, row in enumerate(result.per_location):  # every value the numerics give on the capture's centroids
        X, y = cap.acts(i), cap.counts()
        counts = np.unique(y)
        C = np.stack([X[y == c].mean(axis=0) for c in counts])
        want = brute_metrics(counts, C)
        assert row["dims95"] == want["dims95"]
        assert row["turn_mean_deg"] == pytest.approx(want["turn_mean_deg"], rel=1e-9)
        assert row["procrustes"]["linear"] == pytest.approx(brute_procrustes(C, mf.toy_curves(counts, ("linear",), D)[0]
                                                                             ["linear"]), rel=1e-9)
        assert row["nearest_toy"] == min(row["procrustes"], key=row["procrustes"].get)
        if i:  # the floor is analysis.noise's, with the labels shuffled and the halves split within seeds
            floor = noise_floor(lambda A, c: mf.manifold_metrics(c, A)["turn_mean_deg"], X, y, n_shuffles=4,
                                groups=cap.column("seed")).to_dict()
            got = row["floor"]["turn_mean_deg"]
            for key in ("value", "shuffled_mean", "shuffled_std", "half_a", "half_b", "above_floor"):
                assert got[key] == pytest.approx(floor[key], rel=1e-9), key
        assert row["turn_noise_deg"] == pytest.approx(row["floor"]["turn_mean_deg"]["shuffled_mean"])
        assert 60 < row["turn_noise_deg"] < 150  # few dimensions (d = 6): near, not at, 120
        assert row["windowed"]["turn_mean_deg"] == pytest.approx(
            mf.manifold_metrics(*mf.window_curve(counts, C, 2))["turn_mean_deg"], rel=1e-9)
    assert result.per_location[1]["shape_above_floor"]  # the synthetic count curve stands far above its noise
    result.save(tmp_path)
    with open(tmp_path / "manifold.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header[:11] == ["location", "index", "dims95", "participation_ratio", "step_cv", "step_slope",
                           "turn_mean_deg", "turn_std_deg", "out_of_plane", "turn_noise_deg", "nearest_toy"]
    assert header[11:13] == ["procrustes_linear", "procrustes_softmax-postln-bare"]
    back = ManifoldResult.read(tmp_path)
    assert back.per_location[1]["procrustes"] == result.per_location[1]["procrustes"]
    assert back.provenance["config"]["window"] == 2
    assert len(back.curve["coords"]) == L + 1 and len(back.curve["coords"][0]) == 3
    assert [p.suffix for p in draw_manifold(back, tmp_path)] == [".png", ".pdf"]


def test_an_unset_window_is_five_counts_or_a_sixth_of_a_short_curve():
    from countlens.analysis.manifold_experiment import default_window

    assert [default_window(k) for k in (101, 51, 13, 11, 5)] == [5, 5, 2, 1, 1]


@pytest.mark.parametrize("kw, field", [({"window": 5}, "window"), ({"counts": (3, 4)}, "counts"),
                                       ({"counts": (3, 40)}, "counts"), ({"variants": ("ray",)}, "variants"),
                                       ({"curve_location": "blocks.9.hook_resid_post"}, "curve_location"),
                                       ({"toy_d": 2}, "toy_d"), ({"n_shuffles": 1}, "n_shuffles")])
def test_bad_settings_name_their_field_before_any_work(capture, kw, field):
    from countlens.analysis.manifold_experiment import run_manifold

    with pytest.raises(ConfigError) as err:
        run_manifold(_config(capture, **kw))
    assert err.value.field == field
