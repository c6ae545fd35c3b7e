"""Figure 9's experiments on a tiny random model: patching and steering results, their files and figures,
the refusals (probe file from another capture, bad Δ grids, bad count pairs, locations the model lacks) and
the configs' and results' round trips through JSON."""

import json

import pytest

from countlens.core.errors import ConfigError
from countlens.core.store import read_meta
from countlens.llm.experiments import (
    CaptureConfig,
    ModelSpec,
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
from countlens.probes.experiments import ProbeResult
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models, write_probes  # noqa: F401


@pytest.fixture(scope="module")
def capture_dir(tiny_model_dir, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("behaviour") / "acts"
    config = CaptureConfig().with_options(model=str(tiny_model_dir), L=16, counts=list(range(17)),
                                          pairs=[["a", "b"]], configs=["count"], seeds=[0])
    run_capture(config, out, progress=False)
    return out


def round_trip(result):
    return type(result).from_dict(json.loads(json.dumps(result.to_dict())))


def test_patching_result_per_location_and_files(tiny_model_dir, tmp_path):  # noqa: F811
    config = PatchingConfig(model=ModelSpec(model=str(tiny_model_dir)), L=16, sources=[9, 2], targets=[2, 9],
                            pairs=[["a", "b"]], configs=["count"], batch_size=4, answer_tokens=3)
    result = run_patching(config)
    assert [loc["index"] for loc in result.locations] == [0, 1, 2]
    assert len(result.rows) == 2 * 3
    assert all(0 <= loc["moved_to_source"] <= 1 for loc in result.locations)
    assert result.locations[0]["label"] == "embeddings"
    assert result.provenance["config"] == result.config == config.to_dict()
    files = result.save(tmp_path)
    assert [f.name for f in files] == ["patching.json", "patching.csv"] == list(PatchingResult.file_names())
    again = PatchingResult.read(tmp_path)
    assert again == result == round_trip(result)
    assert {p.name for p in draw_patching(again, tmp_path)} == {"fig9a_patching.png", "fig9a_patching.pdf"}


@pytest.mark.parametrize(("sources", "targets", "fields"), [
    ([3, 4], [5], ("sources", "targets")), ([], [], ("sources", "targets")), ([3], [3], ("sources", "targets")),
    ([200], [3], ("sources", "L")), ([3], [-1], ("targets", "L"))])
def test_patching_refuses_bad_count_pairs_naming_their_fields(sources, targets, fields):
    with pytest.raises(ConfigError) as caught:
        PatchingConfig(sources=sources, targets=targets).validate()
    assert caught.value.fields == fields


def test_steering_result_and_figure(capture_dir, tmp_path):
    meta = read_meta(capture_dir)
    write_probes(tmp_path / "probes.json", meta)
    config = SteeringConfig(acts=str(capture_dir), probes=str(tmp_path / "probes.json"), deltas=[-3.0, 0.0, 3.0],
                            counts=[4, 8, 12], max_prompts=3, answer_tokens=3)
    result = run_steering(config)
    assert result.location == meta["locations"][1]
    assert [c["delta"] for c in result.curves["probe"]] == [-3.0, 0.0, 3.0]
    assert [c["readout_shift"] for c in result.curves["probe"]] == pytest.approx([-3.0, 0.0, 3.0])
    zero = [r for r in result.rows if r["delta"] == 0.0]
    assert all(r["steered_answer"] == r["clean_answer"] for r in zero)  # Δ = 0 changes nothing
    assert [f.name for f in result.save(tmp_path)] == ["steering.json", "steering.csv"]
    again = SteeringResult.read(tmp_path / "steering.json")
    assert again == result == round_trip(result)
    assert {p.name for p in draw_steering(again, tmp_path)} == {"fig9b_steering.png", "fig9b_steering.pdf"}


@pytest.mark.parametrize("deltas", [[], [float("nan")], [1.0, float("inf")]])
def test_steering_refuses_empty_or_non_finite_deltas(deltas):
    with pytest.raises(ConfigError, match="deltas") as caught:
        SteeringConfig(acts="x", probes="y", deltas=deltas).validate()
    assert caught.value.field == "deltas"


@pytest.mark.parametrize("source", [{"model": "other/model"}, {"rows": 5}, {"d": 7}])
def test_probe_file_from_another_capture_is_refused(capture_dir, tmp_path, source):
    meta = read_meta(capture_dir)
    probes = ProbeResult.read(write_probes(tmp_path / "p.json", meta, **source))
    with pytest.raises(ConfigError, match="another capture") as caught:
        probe_direction(probes, meta, None)
    assert caught.value.field == "probes"
    other = ProbeResult.read(write_probes(tmp_path / "q.json", meta))
    other.locations.append(type(other.locations[0])("blocks.9.hook_resid_post", 9, []))
    with pytest.raises(ConfigError, match="locations"):
        probe_direction(other, meta, None)


def test_a_bad_location_is_a_config_error_in_patching_and_steering(tiny_model_dir, capture_dir, tmp_path):  # noqa: F811
    config = PatchingConfig(model=ModelSpec(model=str(tiny_model_dir)), L=16, sources=[9], targets=[2],
                            locations="0:7", answer_tokens=1)
    with pytest.raises(ConfigError, match="0:7. does not exist") as caught:
        run_patching(config)
    assert caught.value.field == "locations"
    write_probes(tmp_path / "probes.json", read_meta(capture_dir))
    steer = SteeringConfig(acts=str(capture_dir), probes=str(tmp_path / "probes.json"), location="blocks.7.hook_resid_post")
    with pytest.raises(ConfigError, match="does not exist") as caught:
        run_steering(steer)
    assert caught.value.field == "location"


def test_configs_round_trip_through_json():
    capture = CaptureConfig().with_options(model="some/model", revision="v1", device="cuda:1", dtype="bfloat16",
                                           counts=[1, 2], pairs=[["x", "o"]], answers=True, locations="0:3")
    patching = PatchingConfig(model=ModelSpec(model="m", device="mps"), sources=[1], targets=[2], answer_tokens=4)
    steering = SteeringConfig(acts="a", probes="p", location="3", deltas=[-1.0, 1.0], device="cuda")
    for config in (capture, patching, steering):
        assert type(config).from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert capture.to_dict()["model"]["device"] == "cuda:1" and capture.to_dict()["prompts"]["counts"] == [1, 2]


def test_with_options_sets_nested_settings_by_name():
    base = CaptureConfig()
    config = base.with_options(model="org/name", device="cuda", counts=[3], batch_size=2, template="plain")
    assert config.model == ModelSpec(model="org/name", device="cuda")
    assert config.prompts.counts == [3] and config.prompts.template == "plain" and config.batch_size == 2
    assert base == CaptureConfig()  # the base is left as it was
    whole = base.with_options(model=ModelSpec(model="x", dtype="float16"), device="mps")
    assert whole.model == ModelSpec(model="x", dtype="float16", device="mps")
    assert PatchingConfig().with_options(dtype="float16", L=20).model.dtype == "float16"
    with pytest.raises(TypeError, match="no setting"):
        base.with_options(colour="blue")


@pytest.mark.parametrize(("settings", "field"), [
    ({"dtype": "float8"}, "dtype"), ({"device": "gpu"}, "device"), ({"batch_size": 0}, "batch_size"),
    ({"counts": [5], "L": 4}, "counts"), ({"template": "jinja"}, "template"), ({"backend": "vllm"}, "backend"),
    ({"answers": True, "backend": "transformer-lens"}, "answers"), ({"model": " "}, "model"),
    ({"pairs": [["a", "a"]]}, "pairs"), ({"configs": ["poem"]}, "configs"), ({"shard_rows": 0}, "shard_rows")])
def test_capture_config_errors_name_their_field(settings, field):
    with pytest.raises(ConfigError) as caught:
        CaptureConfig().with_options(**settings).validate()
    assert caught.value.field == field
