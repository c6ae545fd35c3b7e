"""Geometry metrics against direct computations, and their invariances."""

import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn.decomposition import PCA

from countlens.analysis import geometry as g
from countlens.analysis.layerwise import centroids_from_arrays, compute_geometry
from countlens.core.errors import ConfigError, UsageError


def erank_direct(X):
    """Roy & Vetterli from the eigenvalues of the centred scatter matrix (an independent route to σ)."""
    Xc = X - X.mean(axis=0)
    eig = np.clip(np.linalg.eigvalsh(Xc.T @ Xc), 0, None)
    sigma = np.sqrt(eig)
    sigma = sigma[sigma > 1e-6 * sigma.max()]  # sqrt of eigenvalue round-off is ~1e-8
    p = sigma / sigma.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


@pytest.mark.parametrize("shape", [(10, 4), (10, 30), (5, 5), (40, 3)])
def test_effective_rank_matches_direct(shape):
    X = np.random.default_rng(sum(shape)).normal(size=shape) * np.linspace(0.1, 3, shape[1])
    assert g.effective_rank(X) == pytest.approx(erank_direct(X), rel=1e-9)


def test_effective_rank_invariances():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(12, 7)) @ np.diag([5, 3, 1, 0.5, 0.1, 0.01, 0.001])
    r = g.effective_rank(X)
    Q = ortho_group.rvs(7, random_state=2)
    assert g.effective_rank(3.7 * X) == pytest.approx(r, rel=1e-10)  # scale
    assert g.effective_rank(X @ Q) == pytest.approx(r, rel=1e-10)  # rotation
    assert g.effective_rank(X + rng.normal(size=7)) == pytest.approx(r, rel=1e-10)  # translation (centring)
    assert g.effective_rank(X[rng.permutation(12)]) == pytest.approx(r, rel=1e-10)  # row order


def test_effective_rank_known_values():
    line = np.outer(np.arange(10.0), [1.0, 2.0, -1.0])
    assert g.effective_rank(line) == pytest.approx(1.0, abs=1e-12)
    simplex = np.eye(6)  # 6 equidistant points: centred, 5 equal singular values
    assert g.effective_rank(simplex) == pytest.approx(5.0, rel=1e-12)
    assert g.effective_rank(np.ones((4, 3))) == 0.0


def test_count_centroids_and_gaps_match_loops():
    rng = np.random.default_rng(3)
    n = rng.integers(0, 8, size=200)
    acts = rng.normal(size=(200, 5))
    counts, C = g.count_centroids(acts, n)
    for j, c in enumerate(counts):
        np.testing.assert_allclose(C[j], acts[n == c].mean(axis=0), rtol=1e-12)
    gaps = g.adjacent_gaps(C)
    assert gaps[2] == pytest.approx(np.sqrt(((C[3] - C[2]) ** 2).sum()))


def test_gap_and_erank_ratio_match_direct():
    rng = np.random.default_rng(4)
    counts = np.arange(0, 30)
    C = rng.normal(size=(30, 6)) * (1 + counts[:, None])
    low, high = (2, 6), (20, 27)
    lo_gap = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(2, 6)])
    hi_gap = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(20, 27)])
    assert g.gap_ratio(counts, C, low, high) == pytest.approx(hi_gap / lo_gap, rel=1e-12)
    expect = erank_direct(C[20:28]) / erank_direct(C[2:7])
    assert g.erank_ratio(counts, C, low, high) == pytest.approx(expect, rel=1e-9)
    # Equally spaced points on a line: every gap equal, every window rank one.
    line = np.outer(counts, [0.3, -1.0])
    assert g.gap_ratio(counts, line, low, high) == pytest.approx(1.0)
    assert g.erank_ratio(counts, line, low, high) == pytest.approx(1.0)


def test_window_needs_every_count_and_names_those_present():
    counts = np.array([0, 1, 2, 3, 5, 6, 7])
    with pytest.raises(UsageError, match=r"needs counts 4.*has counts 0:3, 5:7"):
        g.window_rows(counts, (2, 6))
    with pytest.raises(UsageError, match="at least two counts"):
        g.window_rows(counts, (3, 3))
    with pytest.raises(ConfigError, match=r"^high 2:6 needs counts 4") as err:  # a window of a config field
        g.window_rows(counts, (2, 6), "high")
    assert err.value.field == "high"
    assert g.window_within((1, 100), counts, np.arange(2, 50)) == (2, 7)  # the counts every set holds
    assert g.describe_counts([9, 1, 2, 3, 7]) == "1:3, 7, 9"


def test_endpoint_angle_known_and_tiny_angles():
    counts = np.arange(1, 4)
    for theta in (1e-7, 2e-4, 0.5, 1.7, 3.0):
        a = np.array([2.0, 0.0, 0.0])
        b = 5.0 * np.array([np.cos(theta), np.sin(theta), 0.0])
        C = np.stack([a, (a + b) / 2, b])
        assert g.endpoint_angle(counts, C, (1, 3)) == pytest.approx(theta, rel=1e-9)


def test_pca_2d_matches_sklearn():
    rng = np.random.default_rng(5)
    C = rng.normal(size=(25, 8)) @ np.diag([4, 2, 1, 1, 0.5, 0.5, 0.1, 0.1])
    coords, ev = g.pca_2d(C)
    ref = PCA(n_components=2).fit(C)
    np.testing.assert_allclose(np.abs(coords), np.abs(ref.transform(C)), rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ev, ref.explained_variance_ratio_, rtol=1e-10)
    assert np.all(coords[-1] >= 0)


def _synthetic(seeds=(0, 1, 2), counts=range(0, 16), reps=3, L=3, d=5):
    rng = np.random.default_rng(6)
    rows = [(s, c) for s in seeds for c in counts for _ in range(reps)]
    n = np.array([c for _, c in rows])
    seed = np.array([s for s, _ in rows])
    acts = rng.normal(size=(len(rows), L, d)) + np.sqrt(n)[:, None, None] * rng.normal(size=(1, L, d))
    return acts, n, seed


def test_compute_geometry_per_seed_matches_loops():
    acts, n, seed = _synthetic()
    cs = centroids_from_arrays(acts, n, seed, ["embed", "b0", "b1"])
    per_location, pca = compute_geometry(cs, (1, 4), (10, 14), (1, 14), [0, 2])
    for li in range(3):
        gaps, ranks = [], []
        for s in (0, 1, 2):
            C = np.stack([acts[(seed == s) & (n == c), li].mean(axis=0) for c in range(16)])
            lo = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(1, 4)])
            hi = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(10, 14)])
            gaps.append(hi / lo)
            ranks.append(erank_direct(C[10:15]) / erank_direct(C[1:5]))
        row = per_location[li]
        assert row["gap_ratio"] == pytest.approx(np.mean(gaps), rel=1e-10)
        assert row["gap_ratio_min"] == pytest.approx(min(gaps), rel=1e-10)
        assert row["erank_ratio_max"] == pytest.approx(max(ranks), rel=1e-8)
        assert row["gap_ratio_per_seed"]["1"] == pytest.approx(gaps[1], rel=1e-10)
    assert [p["index"] for p in pca] == [0, 2]
    assert pca[0]["counts"] == list(range(1, 15))


def test_compute_geometry_bad_input():
    acts, n, seed = _synthetic(counts=range(0, 6))
    cs = centroids_from_arrays(acts, n, seed, ["a", "b", "c"])
    with pytest.raises(ConfigError, match=r"seed 0: low 1:10 needs counts 6:10.*has counts 0:5") as err:
        compute_geometry(cs)
    assert err.value.field == "low"
    with pytest.raises(ConfigError, match=r"seed 0: high 4:9 needs counts 6:9.*has counts 0:5") as err:
        compute_geometry(cs, (0, 2), (4, 9))
    assert err.value.field == "high"
    with pytest.raises(ConfigError, match=r"pca_counts 0:9 needs counts 6:9") as err:
        compute_geometry(cs, (0, 2), (3, 5), (0, 9))
    assert err.value.field == "pca_counts"
    _, pca = compute_geometry(cs, (0, 2), (3, 5))  # unset, the PCA counts are 1..100 within those present
    assert pca[0]["counts"] == [1, 2, 3, 4, 5]
    one = n * 0 + 3
    with pytest.raises(UsageError, match=r"one count only \(3\)"):
        centroids_from_arrays(acts, one, seed, ["a", "b", "c"])


def test_grouped_sums_match_loops_for_pair_keys():
    rng = np.random.default_rng(7)
    keys = np.stack([rng.integers(0, 3, 90), rng.integers(0, 5, 90)], axis=1)
    values = rng.normal(size=(90, 2, 3))
    uniq, sums, sizes = g.grouped_sums(values, keys)
    for key, total, size in zip(uniq, sums, sizes, strict=True):
        rows = np.all(keys == key, axis=1)
        assert size == rows.sum()
        np.testing.assert_allclose(total, values[rows].sum(axis=0), rtol=1e-12)


# ------------------------------------------------------------------------------------ noise floor (issue 45)

def _noise_rows(per=4, counts=range(1, 41), seeds=(0, 1), d=24, signal=0.0, seed=0):
    """Prompts (``per`` per seed and count) with unit per-prompt noise and, for ``signal`` > 0, a count code
    on a helix in every dimension whose steps grow with the count (phase ``(n / 10)^2``)."""
    rng = np.random.default_rng(seed)
    rows = [(s, c) for s in seeds for c in counts for _ in range(per)]
    n = np.array([c for _, c in rows])
    groups = np.array([s for s, _ in rows])
    phase = (n / 10.0)[:, None] ** 2 * rng.uniform(0.3, 1.5, size=d // 2)
    X = rng.normal(size=(len(rows), d)) + signal * np.concatenate([np.cos(phase), np.sin(phase)], axis=1)
    return X, n, groups


def test_shuffled_and_split_half_labels_keep_the_design():
    from countlens.analysis import noise

    X, n, groups = _noise_rows(per=3, counts=range(1, 21))
    labels = noise.shuffled_labels(n, 5, seed=3, groups=groups)
    assert labels.shape == (5, len(n))
    for lab in labels:
        for s in (0, 1):  # a permutation within each seed: same multiset of counts per seed
            assert sorted(lab[groups == s]) == sorted(n[groups == s])
    assert not np.array_equal(labels[0], labels[1])
    np.testing.assert_array_equal(labels, noise.shuffled_labels(n, 5, seed=3, groups=groups))  # seeded
    half = noise.split_half_labels(n, seed=1, groups=groups)
    for s in (0, 1):
        for c in range(1, 21):
            cell = half[(groups == s) & (n == c)]
            assert sorted(cell.tolist()) == [-1, 0, 1]  # 3 prompts: one each, the odd one out
    with pytest.raises(UsageError, match="at least two per count"):
        noise.split_half_labels(np.array([1, 1, 2]))


def test_noise_floor_matches_a_brute_force_loop():
    """Every shuffle's centroids and metric, and the halves', recomputed by hand with the same labels."""
    from countlens.analysis import noise

    X, n, groups = _noise_rows(per=4, counts=range(1, 21), signal=0.5)
    f = lambda C, c: g.gap_ratio(c, C, (1, 5), (15, 20))  # noqa: E731
    floor = noise.noise_floor(f, X, n, n_shuffles=7, seed=2, groups=groups)
    labels = noise.shuffled_labels(n, 7, seed=2, groups=groups)
    half = noise.split_half_labels(n, seed=2, groups=groups)

    def by_hand(rows_X, rows_y):
        C = np.stack([rows_X[rows_y == c].mean(axis=0) for c in range(1, 21)])
        lo = np.mean([np.sqrt(((C[k + 1] - C[k]) ** 2).sum()) for k in range(0, 4)])
        hi = np.mean([np.sqrt(((C[k + 1] - C[k]) ** 2).sum()) for k in range(14, 19)])
        return hi / lo

    shuffled = [by_hand(X, lab) for lab in labels]
    np.testing.assert_allclose(floor.shuffled, shuffled, rtol=1e-10)
    assert floor.value == pytest.approx(by_hand(X, n), rel=1e-10)
    assert floor.half_a == pytest.approx(by_hand(X[half == 0], n[half == 0]), rel=1e-10)
    assert floor.half_b == pytest.approx(by_hand(X[half == 1], n[half == 1]), rel=1e-10)
    d = floor.to_dict()
    assert d["shuffled_mean"] == pytest.approx(sum(shuffled) / 7, rel=1e-12)
    sd = (sum((v - d["shuffled_mean"]) ** 2 for v in shuffled) / 6) ** 0.5
    assert d["shuffled_std"] == pytest.approx(sd, rel=1e-10)
    assert d["z"] == pytest.approx((floor.value - d["shuffled_mean"]) / sd, rel=1e-10)
    hits = sum(abs(v - d["shuffled_mean"]) >= abs(floor.value - d["shuffled_mean"]) for v in shuffled)
    assert d["p_value"] == pytest.approx((1 + hits) / 8)


def test_planted_signal_stands_above_the_floor_and_noise_does_not():
    from countlens.analysis import noise

    order = lambda C, c: g.count_order(C, c)  # noqa: E731
    gap = lambda C, c: g.gap_ratio(c, C, (1, 10), (31, 40))  # noqa: E731
    erank = lambda C, c: g.erank_ratio(c, C, (1, 10), (31, 40))  # noqa: E731
    turn = lambda C, c: g.turn_angle(C)  # noqa: E731
    X, n, groups = _noise_rows(signal=3.0)
    for f in (order, gap, turn):
        floor = noise.noise_floor(f, X, n, groups=groups)
        assert floor.above and abs(floor.z) > 4, f
        assert abs(floor.half_a - floor.half_b) < floor.shuffled_std  # the halves agree
    for seed in (1, 2, 5):  # pure noise: every quantity inside its floor
        X, n, groups = _noise_rows(signal=0.0, seed=seed)
        for f in (order, gap, erank, turn):
            floor = noise.noise_floor(f, X, n, groups=groups)
            assert not floor.above and abs(floor.z) < 2.5, (seed, f)
    # Pure noise turns by 120 degrees per step (two steps sharing a centroid have cosine -1/2).
    assert noise.noise_floor(turn, X, n).shuffled_mean == pytest.approx(120.0, abs=3.0)


def test_count_order_and_turn_angle_match_direct():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(9)
    C = rng.normal(size=(15, 6)) + np.arange(15)[:, None] * rng.normal(size=6)
    counts = np.arange(3, 18)
    pc1 = PCA(n_components=1).fit_transform(C)[:, 0]
    assert g.count_order(C, counts) == pytest.approx(abs(spearmanr(pc1, counts).statistic), rel=1e-12)
    angles = []
    for j in range(13):
        a, b = C[j + 1] - C[j], C[j + 2] - C[j + 1]
        angles.append(np.degrees(np.arccos(a @ b / np.linalg.norm(a) / np.linalg.norm(b))))
    assert g.turn_angle(C) == pytest.approx(np.mean(angles), rel=1e-10)
    line = np.outer(np.arange(6.0), [1.0, 2.0])
    assert g.turn_angle(line) == pytest.approx(0.0, abs=1e-6) and g.count_order(line, np.arange(6)) == 1.0


def test_compute_geometry_floors_match_loops():
    """The streamed replicate centroids give the floors a per-shuffle loop over the same labels gives."""
    from countlens.analysis import noise
    from countlens.analysis.layerwise import floor_specs, floor_summary, replicates_from_arrays

    acts, n, seed = _synthetic()
    cs = centroids_from_arrays(acts, n, seed, ["embed", "b0", "b1"])
    reps = replicates_from_arrays(acts, n, seed, floor_specs((1, 4), (10, 14), (1, 14), [0, 2], 3), n_shuffles=6)
    per_location, pca = compute_geometry(cs, (1, 4), (10, 14), (1, 14), [0, 2], reps)
    labels = noise.shuffled_labels(n, 6, noise.NOISE_SEED, groups=seed)
    half = noise.split_half_labels(n, noise.NOISE_SEED, groups=seed)
    li = 2
    expected = []
    for lab in labels:
        gaps = []
        for s in (0, 1, 2):
            rows = seed == s
            C = np.stack([acts[rows & (lab == c), li].mean(axis=0) for c in range(16)])
            lo = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(1, 4)])
            hi = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(10, 14)])
            gaps.append(hi / lo)
        expected.append(np.mean(gaps))
    floor = per_location[li]["floors"]["gap_ratio"]
    assert floor["shuffled_mean"] == pytest.approx(np.mean(expected), rel=1e-10)
    assert floor["shuffled_std"] == pytest.approx(np.std(expected, ddof=1), rel=1e-8)
    # Half A's pooled PCA count order at location 2, by hand.
    C = np.stack([np.mean([acts[(seed == s) & (n == c) & (half == 0), li].mean(axis=0) for s in (0, 1, 2)], axis=0)
                  for c in range(1, 15)])
    assert pca[1]["floors"]["count_order"]["half_a"] == pytest.approx(g.count_order(C, np.arange(1, 15)), rel=1e-10)
    summary = floor_summary(per_location, pca)
    assert summary["count_order"]["n"] == 2 and summary["gap_ratio"]["n"] == 3
    assert summary["gap_ratio"]["above"] == [r["name"] for r in per_location if r["floors"]["gap_ratio"]["above_floor"]]
