"""Boundary capture on tiny random models vs an independent ``output_hidden_states`` forward
(:mod:`tests.helpers.hidden_states`), at tolerance 1e-5 (float32); the hook-site table, its hooks removed
after any failure, one error for a location the model lacks, and the capture's resume key pinned.
"""

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from countlens.core.errors import ConfigError
from countlens.core.locations import location_names
from countlens.core.store import read_meta
from countlens.llm import (
    CaptureConfig,
    CaptureResult,
    acts_array,
    load_capture,
    plan_capture,
    run_capture,
)
from countlens.llm.capture.experiment import _settings_key
from countlens.llm.capture.residuals import (
    BoundaryCapture,
    find_blocks,
    pad_batch,
    pad_token_id,
    shard_runner,
)
from countlens.llm.hooks import SITES, HookSite, hook_sites
from countlens.llm.models import load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.hidden_states import ATOL, assert_matches_reference
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_models  # noqa: F401


def explicit_attention_parts(model, block, ids) -> dict:
    """The input of ``block`` and the output of its self-attention, from plain HF hooks on one prompt."""
    seen = {}
    h1 = block.register_forward_pre_hook(lambda m, a, k: seen.update(x=(a[0] if a else k["hidden_states"])),
                                         with_kwargs=True)
    h2 = block.self_attn.register_forward_hook(lambda m, a, o: seen.update(attn=o[0]))
    try:
        with torch.no_grad():
            model(input_ids=torch.tensor([ids]))
    finally:
        h1.remove()
        h2.remove()
    return seen


@pytest.fixture(scope="module")
def prompt_settings():
    return PromptSettings(L=30, counts=[0, 3, 17, 30], pairs=[["a", "b"], ["cat", "dog"]], configs=["count"],
                          seeds=[0])


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
@pytest.mark.parametrize("side", ["left", "right"])
def test_capture_matches_hidden_states_with_padding(tiny_models, prompt_settings, arch, side):  # noqa: F811
    loaded = load_model(str(tiny_models[arch]), progress=False)
    prompts = build_prompts(loaded.tokenizer, prompt_settings)
    assert len({p.n_tokens for p in prompts}) > 2  # the batch really is padded
    ids, mask, index = pad_batch(prompts, pad_id=2, padding_side=side)
    with torch.inference_mode(), BoundaryCapture(loaded.model) as cap:
        acts = cap.run(ids, mask, index)
    assert acts.shape == (len(prompts), 3, 32) and acts.dtype == torch.float32
    for row, p in enumerate(prompts):
        assert_matches_reference(loaded.model, acts[row], p.ids)


def _tiny_from_config(kind: str):
    from transformers import GemmaConfig, GPTNeoXConfig

    torch.manual_seed(0)
    if kind == "gemma":
        cfg = GemmaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                          num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=256)
    else:
        cfg = GPTNeoXConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                            num_attention_heads=4, max_position_embeddings=256)
    model = AutoModelForCausalLM.from_config(cfg).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(20.0)
    return model


@pytest.mark.parametrize("kind", ["gemma", "gpt-neox"])
def test_blocks_found_generically_gemma_and_neox(kind):
    model = _tiny_from_config(kind)
    assert len(find_blocks(model)) == 3
    rng = np.random.default_rng(0)
    seqs = [rng.integers(3, 128, size=n).tolist() for n in (5, 9, 12)]

    class P:  # the minimal prompt interface pad_batch needs
        def __init__(self, ids):
            self.ids, self.n_tokens, self.boundary_index = ids, len(ids), len(ids) - 1

    for side in ("left", "right"):
        ids, mask, index = pad_batch([P(s) for s in seqs], pad_id=0, padding_side=side)
        with torch.inference_mode(), BoundaryCapture(model) as cap:
            acts = cap.run(ids, mask, index)
        for row, s in enumerate(seqs):
            assert_matches_reference(model, acts[row], s)


def test_early_stop_skips_later_blocks_and_keeps_values(tiny_models, prompt_settings):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    model = loaded.model
    prompts = build_prompts(loaded.tokenizer, prompt_settings)
    ids, mask, index = pad_batch(prompts, pad_id=2)
    calls = []
    handle = find_blocks(model)[1].register_forward_pre_hook(lambda *a: calls.append(1))
    try:
        with torch.inference_mode():
            with BoundaryCapture(model) as cap:
                full = cap.run(ids, mask, index)
            assert len(calls) == 1
            with BoundaryCapture(model, locations=[0, 1]) as cap:
                part = cap.run(ids, mask, index)
            assert len(calls) == 1  # block 1 never ran
            with BoundaryCapture(model, locations=[0]) as cap:
                only_embed = cap.run(ids, mask, index)
    finally:
        handle.remove()
    torch.testing.assert_close(part, full[:, :2], atol=0, rtol=0)
    torch.testing.assert_close(only_embed, full[:, :1], atol=0, rtol=0)


def test_hooks_are_removed_even_after_an_error(tiny_models):  # noqa: F811
    model = load_model(str(tiny_models["gpt2"]), progress=False).model
    blocks = find_blocks(model)
    with pytest.raises(ValueError, match="boom"):
        with BoundaryCapture(model):
            assert all(len(b._forward_hooks) + len(b._forward_pre_hooks) >= 1 for b in blocks)
            raise ValueError("boom")
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)


def test_a_failure_partway_through_entering_leaves_no_hook(tiny_models, monkeypatch):  # noqa: F811
    """Regression: ``BoundaryCapture.__enter__`` used to leave the hooks it had registered on the model when
    registering a later one failed."""
    model = load_model(str(tiny_models["gpt2"]), progress=False).model
    blocks = find_blocks(model)

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot hook block 1")

    monkeypatch.setattr(blocks[1], "register_forward_hook", refuse)
    capture = BoundaryCapture(model, locations=[0, 1, 2])
    with pytest.raises(RuntimeError, match="cannot hook block 1"):
        with capture:
            pass
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)
    monkeypatch.undo()
    with torch.inference_mode(), capture as cap:  # the same capture still works afterwards
        ids = torch.tensor([[5, 6, 7]])
        assert cap.run(ids, torch.ones_like(ids), [2]).shape == (1, 3, 32)
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)


def test_hook_site_table():
    assert hook_sites([0, 1, 3], 3) == [HookSite(0, "", "pre", "blocks.0.hook_resid_pre"),
                                        HookSite(0, "", "post", "blocks.0.hook_resid_post"),
                                        HookSite(2, "", "post", "blocks.2.hook_resid_post")]
    assert SITES["resid_mid"].at(1).tl_name == "blocks.1.hook_resid_mid"
    for bad in ([], [4], [-1]):
        with pytest.raises(ConfigError, match="must lie in 0..3") as caught:
            hook_sites(bad, 3)
        assert caught.value.field == "locations"


def test_a_location_the_model_lacks_is_one_config_error(tiny_models):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    for make in (lambda: BoundaryCapture(loaded.model, [0, 3]), lambda: shard_runner(loaded, [3], "hf", "right", 2)):
        with pytest.raises(ConfigError, match="0..2 for a model with 2 blocks") as caught:
            make()
        assert caught.value.field == "locations"
    config = CaptureConfig().with_options(model=str(tiny_models["llama"]), locations="blocks.5.hook_resid_post")
    with pytest.raises(ConfigError, match="does not exist") as caught:
        plan_capture(config, progress=False)
    assert caught.value.field == "locations"


def test_pad_token_id_falls_back_to_eos_then_0():
    class Tok:
        def __init__(self, pad, eos):
            self.pad_token_id, self.eos_token_id = pad, eos

    assert [pad_token_id(Tok(3, 5)), pad_token_id(Tok(None, 5)), pad_token_id(Tok(None, None))] == [3, 5, 0]


def test_resume_key_is_as_before_for_the_same_settings():
    """Pinned: existing capture folders resume only if the key a config makes never changes."""
    config = CaptureConfig().with_options(
        random_init=True, init_seed=4, revision="abc", trust_remote_code=True, dtype="float16", acts_dtype="float16",
        backend="transformer-lens", L=20, counts=[1, 2], pairs=[["x", "o"]], configs=["tally"], seeds=[3],
        template="plain", per_count=2, shard_rows=7, gguf_file="f.gguf", batch_size=3, padding_side="left")
    assert _settings_key(config, [1]) == {
        "L": 20, "counts": [1, 2], "per_count": 2, "pairs": [["x", "o"]], "configs": ["tally"], "seeds": [3],
        "template": "plain", "model": "default", "gguf_file": "f.gguf", "model_dtype": "float16", "dtype": "float16",
        "backend": "transformer-lens", "locations": [1], "shard_rows": 7, "revision": "abc",
        "trust_remote_code": True, "random_init_seed": 4}
    plain = _settings_key(CaptureConfig().with_options(answers=True, answer_tokens=3), None)
    assert list(plain) == ["L", "counts", "per_count", "pairs", "configs", "seeds", "template", "model", "gguf_file",
                           "model_dtype", "dtype", "backend", "locations", "shard_rows", "answer_tokens",
                           "answer_candidates"]
    assert (plain["model"], plain["locations"], plain["answer_tokens"]) == ("default", "all", 3)
    # answers are a distribution over the counts min..max now: a folder from before does not resume into it
    assert plain["answer_candidates"] == [0, 100]
    boundary = _settings_key(CaptureConfig(), None)
    assert list(boundary) == ["L", "counts", "per_count", "pairs", "configs", "seeds", "template", "model",
                              "gguf_file", "model_dtype", "dtype", "backend", "locations", "shard_rows"]
    items = _settings_key(CaptureConfig().with_options(positions="items"), None)
    assert items == {**boundary, "positions": "items"}


def test_capture_folder_rows_match_independent_forward(tiny_models, tmp_path):  # noqa: F811
    loaded = load_model(str(tiny_models["qwen2"]), progress=False)
    config = CaptureConfig().with_options(model=str(tiny_models["qwen2"]), L=24, counts=[0, 1, 2, 12, 24],
                                          per_count=2, seeds=[0, 1], configs=["count", "tally"], pairs=[["x", "o"]],
                                          batch_size=3, padding_side="left")
    result = run_capture(config, tmp_path / "cap", loaded=loaded, progress=False)
    assert result.n_rows == 40 and result.folder == tmp_path / "cap"
    assert CaptureResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result
    assert [p.name for p in result.save(tmp_path / "stage")] == ["capture.json"]
    assert CaptureResult.read(tmp_path / "stage") == result and result.provenance["config"] == config.to_dict()
    ds = load_capture(result.folder)
    meta = read_meta(result.folder)
    assert len(ds) == 5 * 2 * 2 * 2 * 1
    assert meta["locations"] == location_names(2) == ["embed", "blocks.0.hook_resid_post",
                                                      "blocks.1.hook_resid_post"]
    assert meta["d"] == 32 and meta["complete"] and meta["boundary"]["text"] == "\n"
    assert meta["settings"]["counts"] == [0, 1, 2, 12, 24] and "versions" in meta["provenance"]
    acts = acts_array(ds)
    assert acts.shape == (40, 3, 32)
    rows = ds.remove_columns("acts")
    assert sorted(zip(rows["n"], rows["seed"], rows["config"], strict=True)).count((12, 1, "tally")) == 2
    for i in range(0, len(ds), 5):
        ids = loaded.tokenizer(rows[i]["prompt"], add_special_tokens=False)["input_ids"]
        assert len(ids) == rows[i]["n_tokens"] == rows[i]["boundary_index"] + 1
        first, last = rows[i]["first_item_index"], rows[i]["last_item_index"]
        if rows[i]["n"] + rows[i]["m"] == 0:
            assert first == last == -1
        else:
            assert last - first + 1 == rows[i]["n"] + rows[i]["m"]
            assert {loaded.tokenizer.decode([t]) for t in ids[first:last + 1]} <= {" x", " o"}
        assert rows[i]["n"] + rows[i]["m"] <= 24
        assert_matches_reference(loaded.model, torch.from_numpy(acts[i]).float(), ids)
    # different counts give clearly different vectors (the comparison above is not trivially satisfied)
    by_n = {n: acts[np.array(rows["n"]) == n, 1].mean(0) for n in (0, 24)}
    assert np.abs(by_n[0] - by_n[24]).max() > 1e-2


def test_transformer_lens_backend_gives_the_same_vectors(tiny_models, tmp_path):  # noqa: F811
    """TransformerBridge (eager attention, right-padded batches of mixed lengths) vs HF hooks (sdpa): same
    vectors to 1e-5; resid_mid checked against an explicit block input + attention output."""
    kw = dict(L=20, counts=[0, 5, 20], pairs=[["a", "b"]], configs=["count", "how-many"], seeds=[0], batch_size=4)
    for arch in ("llama", "gpt2"):
        hf_config = CaptureConfig().with_options(model=str(tiny_models[arch]), **kw)
        hf = load_capture(run_capture(hf_config, tmp_path / f"{arch}-hf", progress=False).folder)
        tl_model = load_model(str(tiny_models[arch]), progress=False)
        tl_config = CaptureConfig().with_options(model=str(tiny_models[arch]), backend="transformer-lens", **kw)
        tl = load_capture(run_capture(tl_config, tmp_path / f"{arch}-tl", loaded=tl_model, progress=False).folder)
        names = read_meta(tmp_path / f"{arch}-tl")["locations"]
        lengths = sorted(tl["n_tokens"])
        assert len(set(lengths[:4])) > 1  # the first batch of 4 mixes lengths: right padding, no mask
        assert names[:3] == read_meta(tmp_path / f"{arch}-hf")["locations"]
        assert names[3:] == ["blocks.0.hook_resid_mid", "blocks.1.hook_resid_mid"]
        key = lambda ds: np.lexsort((ds["config"], ds["n"]))  # noqa: E731
        a_hf, a_tl = acts_array(hf)[key(hf)], acts_array(tl)[key(tl)]
        np.testing.assert_allclose(a_tl[:, :3], a_hf, atol=ATOL, rtol=0)
        if arch == "llama":  # resid_mid = block input + self-attention output, from explicit HF hooks
            model = tl_model.model
            row = int(key(tl)[-1])
            ids = tl_model.tokenizer(tl[row]["prompt"], add_special_tokens=False)["input_ids"]
            seen = explicit_attention_parts(model, find_blocks(model)[1], ids)
            mid = (seen["x"] + seen["attn"])[0, -1].numpy()
            np.testing.assert_allclose(acts_array(tl)[row, 4], mid, atol=ATOL, rtol=0)


def test_a_plan_is_made_once_and_handed_to_the_run(tiny_models, tmp_path, monkeypatch):  # noqa: F811
    """``preflight_capture`` returns the plan ``run_capture(plan=...)`` runs; within a model pool (a report)
    the run's own planning reuses the pre-load check's plan; the capture equals one planned afresh."""
    from countlens.llm.capture import experiment
    from countlens.llm.capture.experiment import preflight_capture
    from countlens.llm.models import model_pool

    config = CaptureConfig().with_options(model=str(tiny_models["llama"]), L=8, counts=[1, 3], per_count=2,
                                          seeds=[0], configs=["count"], pairs=[["a", "b"]], batch_size=2)
    fresh = run_capture(config, tmp_path / "fresh", progress=False)
    plans = []
    real = experiment._plan
    monkeypatch.setattr(experiment, "_plan", lambda *a: plans.append(a[0]) or real(*a))
    plan = preflight_capture(config, tmp_path / "handed", progress=False)
    handed = run_capture(config, tmp_path / "handed", plan=plan, progress=False)
    assert len(plans) == 1 and handed.meta.settings == fresh.meta.settings
    np.testing.assert_array_equal(acts_array(load_capture(handed.folder)), acts_array(load_capture(fresh.folder)))
    with pytest.raises(ValueError, match="another config"):
        run_capture(config.with_options(L=9), tmp_path / "other", plan=plan, progress=False)
    with model_pool() as pool:
        preflight_capture(config, tmp_path / "pooled", progress=False, pool=pool)
        pooled = run_capture(config, tmp_path / "pooled", progress=False, pool=pool)  # the pool's plan
    assert len(plans) == 2 and pooled.n_rows == fresh.n_rows == 4
