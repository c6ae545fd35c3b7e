"""Regression test: acts_array lost float64 precision (datasets' numpy formatter casts to float32)."""

import numpy as np

from countlens.store import ActivationWriter, acts_array, load_capture


def test_float64_capture_keeps_float64_precision(tmp_path):
    writer = ActivationWriter(tmp_path / "cap", {"locations": ["h"], "d": 2, "dtype": "float64", "settings": {}})
    x = np.array([[[1.0 + 1e-12, 1.0 / 3.0]]])  # (rows, locations, d); 1e-12 vanishes in float32
    writer.write_shard(0, {"acts": x, "n": [1], "m": [0], "pair": ["toy"], "config": ["v"], "seed": [0],
                           "prompt": [""], "boundary_index": [0], "n_tokens": [2]})
    writer.finish()
    got = acts_array(load_capture(tmp_path / "cap"))
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, x)
