"""The typed capture (countlens.core.capture): a folder written as countlens 0.x wrote it (meta.json beside
one ``save_to_disk`` folder per shard, written here without our writer) opens, with the same arrays, counts
and metadata; nothing travels inside ``info.description``."""

from __future__ import annotations

import json

import datasets
import numpy as np
import pytest

from countlens.core.capture import Capture, CaptureMeta, open_capture
from countlens.core.errors import UsageError
from countlens.probes.data import load_probe_data

LOCATIONS = ["embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]


def write_old_capture(folder, dtype="float16", items=False, seed=0):
    """A capture folder laid out by hand as the writer of the current main lays it out. Returns its rows."""
    rng = np.random.default_rng(seed)
    n = np.array([0, 1, 2, 3, 1, 2], dtype=np.int32)
    rows = len(n)
    acts = rng.normal(size=(rows, len(LOCATIONS), 4)).astype(dtype)  # (rows, locations, d)
    columns = {"n": n.tolist(), "m": [1] * rows, "pair": ["a/b"] * rows, "config": ["count"] * rows,
               "seed": [0] * rows, "prompt": [f"p{i}" for i in range(rows)], "boundary_index": [9] * rows,
               "n_tokens": [10] * rows, "first_item_index": [-1] * rows, "last_item_index": [-1] * rows}
    feats = {"acts": datasets.Array2D(shape=(len(LOCATIONS), 4), dtype=dtype), "n": datasets.Value("int32"),
             "m": datasets.Value("int32"), "pair": datasets.Value("string"), "config": datasets.Value("string"),
             "seed": datasets.Value("int32"), "prompt": datasets.Value("string"),
             "boundary_index": datasets.Value("int32"), "n_tokens": datasets.Value("int32"),
             "first_item_index": datasets.Value("int32"), "last_item_index": datasets.Value("int32")}
    if items:
        columns["item_index"] = [0, -1, 0, -1, 1, -1]
        feats["item_index"] = datasets.Value("int32")
    settings = {"model": "/models/tiny", "gguf_file": None, "model_dtype": "float32", "dtype": dtype,
                "counts": [0, 1, 2, 3], "template": "chat", "L": 5, "random_init_seed": 3}
    meta = {"locations": LOCATIONS, "d": 4, "model": "tiny (loaded)", "model_source": {"folder": "/models/tiny"},
            "n_blocks": 2, "dtype": dtype, "settings": settings, "counts": [0, 1, 2, 3], "L": 5, "template": "chat",
            "n_prompts": rows, "n_rows": rows, "complete": True, **({"positions": "items"} if items else {})}
    ds = datasets.Dataset.from_dict({**columns, "acts": acts}, features=datasets.Features(feats))
    (folder / "shards").mkdir(parents=True)
    ds.select(range(4)).save_to_disk(str(folder / "shards" / "00000"))
    ds.select(range(4, rows)).save_to_disk(str(folder / "shards" / "00001"))
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")
    return acts, n, meta


def test_an_old_folder_opens_with_its_arrays_counts_and_metadata(tmp_path):
    acts, n, meta = write_old_capture(tmp_path / "old")
    capture = open_capture(tmp_path / "old")
    assert len(capture) == capture.n_rows == 6 and capture.rows.info.description in ("", None)
    np.testing.assert_array_equal(capture.counts(), n)
    for i, name in enumerate(LOCATIONS):  # a name or an index; widened to float64 from the stored float16
        np.testing.assert_array_equal(capture.acts(name), acts[:, i].astype(np.float64))
        np.testing.assert_array_equal(capture.acts(i), capture.acts(name))
    stored = capture.all_acts()
    assert stored.dtype == np.float16 and np.array_equal(stored, acts)
    m = capture.meta
    assert (m.locations, m.d, m.dtype, m.n_blocks, m.positions) == (tuple(LOCATIONS), 4, "float16", 2, "boundary")
    # the two models meta.json holds, named apart: the one that ran and the one asked for
    assert (m.model_id, m.model_name, m.random_init_seed, m.counts) == ("tiny (loaded)", "/models/tiny", 3,
                                                                         (0, 1, 2, 3))
    assert m.to_dict() == meta and CaptureMeta.from_record(meta) == m
    data = load_probe_data(tmp_path / "old")  # a folder and the opened capture read the same
    assert data.meta == m and np.array_equal(data.acts, acts) and np.array_equal(data.n, n)
    assert np.array_equal(load_probe_data(capture).acts, acts)


def test_boundary_rows_of_an_items_capture_and_the_result_round_trip(tmp_path):
    acts, n, _ = write_old_capture(tmp_path / "items", dtype="float32", items=True)
    capture = open_capture(tmp_path / "items")
    boundary = capture.boundary()
    keep = np.array([1, 3, 5])  # item_index == -1
    assert len(boundary) == 3 and len(capture) == 6
    np.testing.assert_array_equal(boundary.counts(), n[keep])
    np.testing.assert_array_equal(boundary.acts(-1), acts[keep, -1].astype(np.float64))
    written = capture.save(tmp_path / "stage")
    document = json.loads(written[0].read_text())
    assert list(document) == ["folder", "n_rows", "meta", "provenance"]
    assert document["meta"] == json.loads((tmp_path / "items" / "meta.json").read_text())
    assert Capture.read(tmp_path / "stage") == capture


def test_a_folder_that_is_no_capture_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="not a countlens activation folder"):
        open_capture(tmp_path)
    write_old_capture(tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "meta.json").read_text())
    (tmp_path / "old" / "meta.json").write_text(json.dumps({**meta, "n_rows": 7}))
    with pytest.raises(UsageError, match="holds 6 of its 7 rows"):
        open_capture(tmp_path / "old")
    assert open_capture(tmp_path / "old", rows=False).n_rows == 7  # metadata alone: no rows read
