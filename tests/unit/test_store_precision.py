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


def test_column_reads_every_kind_of_column_as_a_row_loop_does(tmp_path):
    """``column`` reads one Arrow slice: its values, dtype and row order (a selection's too) are those of reading
    the rows one by one."""
    from countlens.core.store import column

    writer = ActivationWriter(tmp_path / "cap", {"locations": ["h"], "d": 1, "dtype": "float32", "settings": {}})
    rows = 5
    writer.write_shard(0, {"acts": np.zeros((rows, 1, 1)), "n": [3, 1, 4, 1, 5], "m": [0, 2, 0, 1, 0],
                           "pair": ["a/b", "x/o", "a/b", "cat/dog", "x/o"], "config": ["count"] * rows,
                           "seed": [0] * rows, "prompt": [f"p{i}" for i in range(rows)],
                           "boundary_index": [9, 8, 7, 6, 5], "n_tokens": [10, 9, 8, 7, 6]})
    writer.finish()
    ds = load_capture(tmp_path / "cap")
    for view in (ds, ds.select([4, 0, 2])):
        for name in ("n", "pair", "prompt", "boundary_index"):
            got = column(view, name)
            loop = [view[i][name] for i in range(len(view))]
            assert got.tolist() == loop
            assert got.dtype == (np.dtype(ds.features[name].dtype) if name in ("n", "boundary_index")
                                 else np.asarray(loop).dtype)
