"""Figure 9's experiments on a tiny random model: patching and steering results, their files and figures,
the refusals (probe file from another capture, bad Δ grids, bad count pairs, locations the model lacks,
steering units and directions that cannot run) and the configs' and results' round trips through JSON; and
steering in count units on a model whose read-out is linear in the steered direction, where the expected
count moves by exactly the predicted amount."""

import json

import numpy as np
import pytest

from countlens.core.capture import CaptureMeta
from countlens.core.errors import ConfigError
from countlens.core.report import Page, Section
from countlens.core.store import read_meta
from countlens.llm import (
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
from countlens.llm.patching.figures import draw_patching
from countlens.llm.steering.figures import draw_steering, steering_view
from countlens.probes.probe import ProbeResult
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models, write_probes  # noqa: F401
from tests.helpers.report_checks import check_report


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
    config = PatchingConfig(model=ModelSpec(model=str(tiny_model_dir)), batch_size=4, answer_tokens=3).with_options(
        L=16, sources=[9, 2], targets=[2, 9], pairs=[["a", "b"]], configs=["count"])
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
    assert all(r["expected_shift"] == pytest.approx(0, abs=1e-4) and r["relative_norm"] == 0 for r in zero)  # batching
    assert result.units == "readout" and result.step_per_unit == pytest.approx(1 / result.probe_norm)
    assert result.candidates == list(range(17))
    for name in ("probe", "random"):  # the control has the probe step's norm
        assert [c["step_norm"] for c in result.curves[name]] == pytest.approx([3 / result.probe_norm, 0,
                                                                               3 / result.probe_norm])
    moved = [r for r in result.rows if r["delta"] == 3.0]
    assert all(r["target"] == r["n"] + 3 and r["relative_norm"] > 0 for r in moved)
    assert [f.name for f in result.save(tmp_path)] == ["steering.json", "steering.csv"]
    again = SteeringResult.read(tmp_path / "steering.json")
    assert again == result == round_trip(result)
    assert {p.name for p in draw_steering(again, tmp_path)} == {"fig9b_steering.png", "fig9b_steering.pdf"}
    page = Page(tmp_path)
    steering_view(page, Section(None, "steering.json", again))
    check_report(tmp_path, "".join(page.parts))


def test_every_steering_row_records_the_step_over_its_own_boundary_vectors_norm(capture_dir, tiny_model_dir,  # noqa: F811
                                                                              tmp_path):
    """``relative_norm`` of every row is ‖step‖ / ‖the prompt's boundary vector at the steered location‖,
    the vector taken here from an unpadded forward of the prompt alone (a hook on the last block's output,
    written against the Llama modules); ``step_norm`` is the probe step's norm |Δ| / ‖w‖ (the random
    control's too). The boundary norms differ from prompt to prompt, so a ratio to another prompt's norm, or
    to a mean norm, would fail."""
    import torch

    from countlens.llm.models import load_model
    from countlens.llm.prompts import PromptSettings, build_prompts

    meta = read_meta(capture_dir)
    write_probes(tmp_path / "probes.json", meta, best=2)
    config = SteeringConfig(acts=str(capture_dir), probes=str(tmp_path / "probes.json"), deltas=[-2.0, 0.5, 4.0],
                            counts=[2, 7, 11, 15], max_prompts=4, answer_tokens=1)
    result = run_steering(config)
    assert result.location == "blocks.1.hook_resid_post" == meta["locations"][-1]
    settings = meta["settings"]
    loaded = load_model(str(tiny_model_dir), progress=False)
    model = loaded.model
    prompts = build_prompts(loaded.tokenizer, PromptSettings(**{k: settings[k] for k in PromptSettings().to_dict()}))
    kept = {}
    handle = model.model.layers[-1].register_forward_hook(
        lambda module, args, out: kept.update(h=(out[0] if isinstance(out, tuple) else out)[0, -1].clone()))
    norm = {}
    try:
        with torch.inference_mode():
            for p in prompts:
                model(input_ids=torch.tensor([p.ids]))
                norm[(p.seed, p.config, p.pair, p.n)] = float(np.linalg.norm(kept["h"].double().numpy()))
    finally:
        handle.remove()
    w = np.asarray(json.loads((tmp_path / "probes.json").read_text())["locations"][2]["fits"][0]["coef"])
    mine = sorted({norm[(r["seed"], r["config"], r["pair"], r["n"])] for r in result.rows})
    assert len(mine) == 4 and min(np.diff(mine)) > 1e-4 * mine[-1]  # four prompts, told apart by their norms
    assert len(result.rows) == 2 * 3 * 4  # probe and random, three Δ, four prompts
    for r in result.rows:
        step = abs(r["delta"]) / np.linalg.norm(w)
        assert r["step_norm"] == pytest.approx(step, rel=1e-6)
        assert r["relative_norm"] == pytest.approx(step / norm[(r["seed"], r["config"], r["pair"], r["n"])],
                                                   rel=1e-5)


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
        probe_direction(probes, CaptureMeta.from_record(meta), None)
    assert caught.value.field == "probes"
    other = ProbeResult.read(write_probes(tmp_path / "q.json", meta))
    other.locations.append(type(other.locations[0])("blocks.9.hook_resid_post", 9, []))
    with pytest.raises(ConfigError, match="locations"):
        probe_direction(other, CaptureMeta.from_record(meta), None)


def test_a_bad_location_is_a_config_error_in_patching_and_steering(tiny_model_dir, capture_dir, tmp_path):  # noqa: F811
    config = PatchingConfig(model=ModelSpec(model=str(tiny_model_dir)), locations="0:7",
                            answer_tokens=1).with_options(L=16, sources=[9], targets=[2])
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
    steering = SteeringConfig(acts="a", probes="p", location="3", deltas=[-1.0, 1.0], device="cuda",
                              directions=["probe", "mean-diff"], units="count")
    for config in (capture, patching, steering):
        assert type(config).from_dict(json.loads(json.dumps(config.to_dict()))) == config
    assert capture.to_dict()["model"]["device"] == "cuda:1" and capture.to_dict()["prompts"]["counts"] == [1, 2]


def test_patching_nests_its_prompt_settings_and_reads_the_old_flat_config():
    from countlens.llm.prompts import PromptSettings

    config = PatchingConfig().with_options(L=16, sources=[9, 3], targets=[3, 9], seeds=[0, 1], template="plain")
    assert config.prompts == PromptSettings(L=16, counts=[3, 9], per_count=1, pairs=[["a", "b"]], configs=["count"],
                                            seeds=[0, 1], template="plain")  # its counts: the sources and targets
    assert PatchingConfig(sources=[1], targets=[2]).prompts.counts == [1, 2]
    old = {"model": {"model": "default"}, "L": 16, "sources": [9, 3], "targets": [3, 9], "per_count": 1,
           "pairs": [["a", "b"]], "configs": ["count"], "seeds": [0, 1], "template": "plain", "locations": None,
           "batch_size": 16, "answer_tokens": 16, "min_gap": 0.05}  # a patching.json's config before the nesting
    assert PatchingConfig.from_dict(old) == config
    for values, field in (({"L": 8}, "sources"), ({"targets": [3, 40]}, "targets"), ({"counts": [1]}, "counts")):
        with pytest.raises(ConfigError) as caught:  # an L below a source names sources, never the derived counts
            config.with_options(**values)
        assert caught.value.field == field


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


# ----------------------------------------------------------------------------- steering in count units

@pytest.mark.parametrize(("settings", "field"), [
    ({"units": "metres"}, "units"), ({"directions": ["up"]}, "directions"), ({"directions": []}, "directions"),
    ({"directions": ["probe", "probe"]}, "directions"), ({"directions": ["mean-diff"]}, "units"),
    ({"probes": "", "units": "count"}, "probes"), ({"acts": "", "units": "count"}, "acts"),
    ({"probes": "", "units": "count", "directions": ["mean-diff"]}, "location")])
def test_steering_units_and_directions_that_cannot_run_name_their_field(settings, field):
    with pytest.raises(ConfigError) as caught:
        SteeringConfig(**{"acts": "x", "probes": "y", **settings}).validate()
    assert caught.value.field == field, str(caught.value)


def test_count_units_without_a_count_direction_are_refused_before_the_model_loads(tiny_model_dir, tmp_path,  # noqa: F811
                                                                                 monkeypatch):
    import countlens.llm.steering.experiment as steering

    one = tmp_path / "one-count"
    run_capture(CaptureConfig().with_options(model=str(tiny_model_dir), L=16, counts=[4], per_count=3,
                                             pairs=[["a", "b"]], configs=["count"], seeds=[0]), one, progress=False)
    monkeypatch.setattr(steering, "capture_model", lambda *a, **k: pytest.fail("the model loaded"))
    config = SteeringConfig(acts=str(one), probes="", location="1", counts=[4], units="count",
                            directions=["mean-diff"])
    with pytest.raises(ConfigError, match="one count") as caught:
        run_steering(config)
    assert caught.value.field == "acts"
    with pytest.raises(ConfigError, match="not a countlens activation folder") as caught:
        run_steering(SteeringConfig(**{**config.to_dict(), "acts": str(tmp_path / "nothing")}))
    assert caught.value.field == "acts"


S0, BETA, B_E = 4.5, 2.0, 3.0  # the clean read-out's centre, its sharpness, the constant component's size


def linear_readout_model(path, tokenizer_dir, v, e):
    """A one-block GPT-2 whose answer over the digits is linear in the boundary vector along ``v``.

    Every weight is zero but the block's MLP output bias ``b = S0·v + B_E·e`` (so every prompt's boundary
    vector after the block is ``b``), a final LayerNorm that is the identity on mean-zero vectors (gain 1e6,
    eps 1e12) and the unembedding rows of "0".."9": ``logit_k(y) = β k u·y − β k² e·y / (2 B_E)`` with
    ``u = v/‖v‖²``. At ``y = b + Δ v`` that is ``−β (k − (S0 + Δ))² / 2`` plus a constant: p(k) is a discrete
    Gaussian centred at ``S0 + Δ``, so the expected count moves by Δ per step of Δ v."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = GPT2Config(vocab_size=len(tok), n_embd=len(v), n_layer=1, n_head=4, n_positions=1024, n_inner=64,
                        layer_norm_epsilon=1e12, tie_word_embeddings=False, bos_token_id=tok.bos_token_id,
                        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = GPT2LMHeadModel(config).eval()
    u = v / (v @ v)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.transformer.ln_f.weight.fill_(1e6)
        model.transformer.h[0].mlp.c_proj.bias.copy_(torch.as_tensor(S0 * v + B_E * e))
        for k in range(10):
            [t] = tok(str(k), add_special_tokens=False)["input_ids"]
            model.lm_head.weight[t] = torch.as_tensor(BETA * k * u - BETA * k * k / (2 * B_E) * e)
    model.save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return path


def expected_count(y, v, e):
    """Σ k p(k) over the digits for the (mean-zero) final vector ``y``, from the model's weights in closed form."""
    u = v / (v @ v)
    k = np.arange(10)
    logits = BETA * k * (u @ y) - BETA * k ** 2 * (e @ y) / (2 * B_E)
    p = np.exp(logits - logits.max())
    return float(k @ p / p.sum())


def test_in_count_units_the_expected_count_moves_by_the_predicted_amount(smollm2_tokenizer, tmp_path):  # noqa: F811
    from countlens.core.store import ActivationWriter, acts_array, column, load_capture

    rng = np.random.default_rng(0)
    v, e = (x - x.mean() for x in rng.standard_normal((2, 32)))
    v /= np.linalg.norm(v)
    e -= (e @ v) * v
    e /= np.linalg.norm(e)
    model = linear_readout_model(tmp_path / "model", smollm2_tokenizer, v, e)
    real = tmp_path / "real"
    run_capture(CaptureConfig().with_options(model=str(model), L=12, counts=list(range(10)), per_count=2,
                                             pairs=[["a", "b"]], configs=["count"], seeds=[0]), real, progress=False)
    # The capture this model would give if it counted: the boundary vector after the block moves by v per item.
    ds, meta = load_capture(real), read_meta(real)
    b = S0 * v + B_E * e
    acts = acts_array(ds, dtype=np.float32)
    np.testing.assert_allclose(acts[:, 1], np.broadcast_to(b, acts[:, 1].shape), atol=1e-5)
    n = column(ds, "n")
    acts[:, 1] = b + n[:, None] * v
    counting = tmp_path / "counting"
    writer = ActivationWriter(counting, {k: x for k, x in meta.items() if k != "complete"})
    writer.write_shard(0, {"acts": acts, **{c: list(ds[c]) for c in ("n", "m", "pair", "config", "seed", "prompt",
                                                                      "boundary_index", "n_tokens",
                                                                      "first_item_index", "last_item_index")}})
    writer.finish()
    probe = v + 0.5 * e  # a probe direction partly off v
    write_probes(tmp_path / "probes.json", meta)
    probes = json.loads((tmp_path / "probes.json").read_text())
    for loc in probes["locations"]:
        loc["fits"][0]["coef"] = probe.tolist()
    (tmp_path / "probes.json").write_text(json.dumps(probes))
    config = SteeringConfig(acts=str(counting), probes=str(tmp_path / "probes.json"), location="1",
                            deltas=[-2.0, 0.0, 1.0, 2.0], counts=[3, 5], max_prompts=2, answer_tokens=1,
                            units="count", directions=["probe", "mean-diff"])
    result = run_steering(config)
    assert result.mean_diff_norm == pytest.approx(1.0) and result.step_per_unit == pytest.approx(1.0)
    clean = expected_count(b, v, e)
    assert result.clean_expected == pytest.approx(clean, abs=1e-5) and clean == pytest.approx(S0, abs=1e-3)
    for c in result.curves["mean-diff"]:  # Δ more items' worth of v: the expected count moves by Δ
        assert c["mean_expected_shift"] == pytest.approx(c["delta"], abs=0.02)
        assert c["step_norm"] == pytest.approx(abs(c["delta"]))
        assert c["mean_relative_norm"] == pytest.approx(abs(c["delta"]) / np.linalg.norm(b), rel=1e-5)
    random = np.random.default_rng([config.seed, 32]).standard_normal(32)
    steps = {"probe": probe / np.linalg.norm(probe), "mean-diff": v, "random": random / np.linalg.norm(random)}
    for row in result.rows:  # every direction, the same norm per Δ: the closed form of the model's read-out
        y = b + row["delta"] * steps[row["direction"]]
        assert row["steered_expected"] == pytest.approx(expected_count(y - y.mean(), v, e), abs=1e-4)
        assert row["step_norm"] == pytest.approx(abs(row["delta"]))
        assert row["relative_norm"] == pytest.approx(abs(row["delta"]) / np.linalg.norm(b), rel=1e-5)
