"""Figure 9's experiments on a tiny random model: patching and steering results, their files and figures,
and the refusals (probe file from another capture, bad Δ grids, bad count pairs)."""

import json

import numpy as np
import pytest

from countlens.core.errors import UsageError
from countlens.core.io import write_json_atomic
from countlens.core.store import read_meta
from countlens.llm.experiments import (
    CaptureConfig,
    PatchingConfig,
    PatchingResult,
    SteeringConfig,
    SteeringResult,
    probe_direction,
    run_capture,
    run_patching,
    run_steering,
)
from countlens.llm.figures import draw_patching, draw_steering
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models  # noqa: F401


@pytest.fixture(scope="module")
def capture_dir(tiny_model_dir, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("behaviour") / "acts"
    run_capture(CaptureConfig(model=str(tiny_model_dir), L=16, counts=list(range(17)), pairs=[["a", "b"]],
                              configs=["count"], seeds=[0]), out, progress=False)
    return out


def fake_probes(meta, **source):
    w = np.random.default_rng(7).standard_normal(meta["d"])
    return {"source": {"model": meta["model"], "rows": meta["n_prompts"], "d": meta["d"], **source},
            "best_location": meta["locations"][1],
            "locations": [{"name": n, "fits": [{"coef": w.tolist()}]} for n in meta["locations"]]}


def test_patching_result_per_location_and_files(tiny_model_dir, tmp_path):  # noqa: F811
    config = PatchingConfig(model=str(tiny_model_dir), L=16, sources=[9, 2], targets=[2, 9], pairs=[["a", "b"]],
                            configs=["count"], batch_size=4, max_new_tokens=3)
    result = run_patching(config)
    assert [loc["index"] for loc in result.locations] == [0, 1, 2]
    assert len(result.rows) == 2 * 3
    assert all(0 <= loc["moved_to_source"] <= 1 for loc in result.locations)
    assert result.locations[0]["label"] == "embeddings"
    files = result.save(tmp_path / "patching.json")
    assert [f.name for f in files] == ["patching.json", "patching.csv"]
    again = PatchingResult.from_dict(json.loads((tmp_path / "patching.json").read_text()))
    assert again.locations == result.locations
    assert {p.name for p in draw_patching(again, tmp_path)} == {"fig9a_patching.png", "fig9a_patching.pdf"}


@pytest.mark.parametrize(("sources", "targets"), [([3, 4], [5]), ([], []), ([3], [3])])
def test_patching_refuses_bad_count_pairs(sources, targets):
    with pytest.raises(UsageError):
        PatchingConfig(sources=sources, targets=targets).validate()


def test_steering_result_and_figure(capture_dir, tmp_path):
    meta = read_meta(capture_dir)
    write_json_atomic(tmp_path / "probes.json", fake_probes(meta))
    config = SteeringConfig(acts=str(capture_dir), probes=str(tmp_path / "probes.json"), deltas=[-3.0, 0.0, 3.0],
                            counts=[4, 8, 12], max_prompts=3, max_new_tokens=3)
    result = run_steering(config)
    assert result.location == meta["locations"][1]
    assert [c["delta"] for c in result.curves["probe"]] == [-3.0, 0.0, 3.0]
    assert [c["readout_shift"] for c in result.curves["probe"]] == pytest.approx([-3.0, 0.0, 3.0])
    zero = [r for r in result.rows if r["delta"] == 0.0]
    assert all(r["steered_answer"] == r["clean_answer"] for r in zero)  # Δ = 0 changes nothing
    result.save(tmp_path / "steering.json")
    again = SteeringResult.from_dict(json.loads((tmp_path / "steering.json").read_text()))
    assert {p.name for p in draw_steering(again, tmp_path)} == {"fig9b_steering.png", "fig9b_steering.pdf"}


@pytest.mark.parametrize("deltas", [[], [float("nan")], [1.0, float("inf")]])
def test_steering_refuses_empty_or_non_finite_deltas(deltas):
    with pytest.raises(UsageError, match="deltas"):
        SteeringConfig(acts="x", probes="y", deltas=deltas).validate()


@pytest.mark.parametrize("source", [{"model": "other/model"}, {"rows": 5}, {"d": 7}])
def test_probe_file_from_another_capture_is_refused(capture_dir, source):
    meta = read_meta(capture_dir)
    with pytest.raises(UsageError, match="another capture"):
        probe_direction(fake_probes(meta, **source), meta, None)
    other = fake_probes(meta)
    other["locations"].append({"name": "blocks.9.hook_resid_post", "fits": []})
    with pytest.raises(UsageError, match="locations"):
        probe_direction(other, meta, None)
