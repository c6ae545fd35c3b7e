"""Regression test: acts_array lost float64 precision (datasets' numpy formatter casts to float32)."""

import numpy as np

from countlens.core.store import ActivationWriter, acts_array, load_capture


def test_float64_capture_keeps_float64_precision(tmp_path):
    writer = ActivationWriter(tmp_path / "cap", {"locations": ["h"], "d": 2, "dtype": "float64", "settings": {}})
    x = np.array([[[1.0 + 1e-12, 1.0 / 3.0]]])  # (rows, locations, d); 1e-12 vanishes in float32
    writer.write_shard(0, {"acts": x, "n": [1], "m": [0], "pair": ["toy"], "config": ["v"], "seed": [0],
                           "prompt": [""], "boundary_index": [0], "n_tokens": [2]})
    writer.finish()
    got = acts_array(load_capture(tmp_path / "cap"))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, x)


def test_geometry_of_a_float64_toy_export_is_computed_in_float64(tmp_path):
    """Regression: geometry read captures without their dtype, so a float64 toy export ran at float32."""
    from countlens.analysis.experiments import GeometryConfig, run_geometry
    from countlens.analysis.geometry import effective_rank
    from countlens.toy.export import export_toy_activations
    from countlens.toy.model import ToyConfig, boundary_representation, full_domain, init_params

    cfg = ToyConfig("softmax", d=4, L=12)
    params = init_params(cfg, seed=1)
    export_toy_activations(cfg, params, tmp_path / "toy", L=12, seed=0)
    result = run_geometry(GeometryConfig(tmp_path / "toy", low=(1, 4), high=(8, 11), pca_counts=(1, 11)))
    n, m = full_domain(12)
    h = boundary_representation(cfg, params, n, m).detach().numpy().astype(np.float64)  # (pairs, d)
    C = np.stack([h[n.numpy() == c].mean(axis=0) for c in range(13)])  # (13, d) centroids over m
    gaps = np.linalg.norm(np.diff(C, axis=0), axis=1)
    row = result.per_location[1]
    assert row["name"] == "h"
    assert abs(row["gap_ratio"] - gaps[8:11].mean() / gaps[1:4].mean()) < 1e-12 * row["gap_ratio"]
    expect = effective_rank(C[8:12]) / effective_rank(C[1:5])
    assert abs(row["erank_ratio"] - expect) < 1e-12 * expect
