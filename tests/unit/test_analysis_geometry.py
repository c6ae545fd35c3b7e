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
