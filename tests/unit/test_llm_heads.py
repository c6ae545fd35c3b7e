"""Figure 12's heads on tiny random models: the attention masses equal the model's own eager attention with
``output_attentions=True`` (several families, left-padded batches); the head ablation, batched and stepped from
the prompt's KV cache, equals a hand-written hook on the attention output projection's input in a full forward;
the projection's input is the heads side by side (grouped-query attention included); every architecture of the
hook-site registry is checked on a tiny model; unknown architectures are refused before any weights load."""

import re

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.core.locations import location_names
from countlens.core.report import Page, Section
from countlens.llm.capture.residuals import find_blocks, pad_token_id
from countlens.llm.heads.attention import (
    ablated_scores,
    boundary_scores,
    eager_attention,
    head_masses,
    head_replacement,
    target_excess,
)
from countlens.llm.heads.experiment import HeadsConfig, HeadsResult, plan_heads, prompt_roles, run_heads
from countlens.llm.heads.figures import draw_heads, heads_view
from countlens.llm.hooks import (
    ATTENTION_OUTPUTS,
    HookSet,
    attention_output_site,
    attention_pattern_site,
    hook_sites,
)
from countlens.llm.models import ModelSpec, load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer, tiny_models, write_probes  # noqa: F401

# The families of tests/helpers/model_families.py, one per architecture of tests/helpers/tiny_models.py.
FAMILIES = ("llama-3", "qwen2", "qwen3", "gemma-2", "gemma-3", "mistral", "phi-3", "gpt-2", "gpt-neox", "olmo-2")
# The attention output projection of each family, written out by hand (independent of the registry).
BY_HAND = {"gpt2": lambda block: block.attn.c_proj, "gpt_neox": lambda block: block.attention.dense}


def settings(family: str, counts=(1, 3, 4)) -> PromptSettings:
    return PromptSettings(L=6, counts=list(counts), pairs=[["a", "b"]], configs=["count"], seeds=[0],
                          template="plain" if family == "gpt-2" else "chat")


def loaded_family(family_model, family):  # noqa: F811
    return load_model(str(family_model(family)), progress=False)


def reference_masses(model, prompt, role, query: int) -> np.ndarray:
    """(n_blocks, H, 3) masses from ``output_attentions=True`` of one unpadded prompt, summed by hand;
    ``model`` was loaded with ``attn_implementation="eager"`` (not through the code under test)."""
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        att = model(input_ids=torch.tensor([prompt.ids]), output_attentions=True).attentions
    items = list(range(prompt.first_item_index, prompt.last_item_index + 1))
    targets = [p for p, r in zip(items, role, strict=True) if r]
    distractors = [p for p, r in zip(items, role, strict=True) if not r]
    out = []
    for a in att:
        row = a[0, :, query].double()  # (H, T)
        t, d = row[:, targets].sum(-1), row[:, distractors].sum(-1)
        out.append(torch.stack([t, d, 1.0 - t - d], dim=-1))
    return torch.stack(out).numpy()


@pytest.mark.parametrize("family", FAMILIES)
def test_masses_equal_output_attentions(family_model, family):  # noqa: F811
    loaded = loaded_family(family_model, family)
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, settings(family))
    roles = prompt_roles(prompts, settings(family))
    site = attention_output_site(model.config.model_type)
    before = model.config._attn_implementation
    with torch.inference_mode():
        masses, means = head_masses(model, prompts, roles, site, pad_token_id(tok), batch_size=3)  # left-padded
    assert model.config._attn_implementation == before  # eager only while measuring
    assert len({p.n_tokens for p in prompts}) > 1  # the batch really was padded
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_pretrained(str(family_model(family)), attn_implementation="eager").eval()
    for i, (p, role) in enumerate(zip(prompts, roles, strict=True)):
        for q, query in enumerate((p.boundary_index, p.last_item_index)):
            np.testing.assert_allclose(masses[i, :, q], reference_masses(eager, p, role, query), atol=2e-5)
    np.testing.assert_allclose(masses.sum(-1), 1.0, atol=1e-5)
    assert means.shape == (len(find_blocks(model)), means.shape[1])


def test_target_excess_is_zero_for_even_item_attention():
    masses = np.array([[[0.2, 0.6, 0.2]], [[0.5, 0.0, 0.5]]])  # (P, 1, 3)
    got = target_excess(masses, np.array([1, 2]), np.array([3, 0]))
    assert got[0, 0] == pytest.approx(0.25 - 0.25)  # a quarter of the items, a quarter of their attention
    assert np.isnan(got[1, 0])  # no distractor: no preference to measure


def test_head_replacement_edits_the_last_position_of_the_chosen_head_only():
    z = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)  # R=2, T=3, H=4, hd=2
    out = head_replacement(z, torch.tensor([2, -1]), torch.full((2, 2), -1.0), head_dim=2)
    assert torch.equal(out[0, -1, 4:6], torch.tensor([-1.0, -1.0]))
    mask = torch.ones_like(z, dtype=torch.bool)
    mask[0, -1, 4:6] = False
    assert torch.equal(out[mask], z[mask]) and torch.equal(out[1], z[1])


def logprob_by_hand(model, ids, candidate, edit_module, edit) -> float:
    """log P(candidate as the final answer | ids): every token teacher-forced in one full forward (no cache),
    then no token that continues the number, with ``edit(z)`` applied in place to the input of ``edit_module``
    at the boundary position only."""
    from countlens.llm.answers import number_continuations
    from countlens.llm.models import tokenizer_of

    boundary = len(ids) - 1

    def hook(module, args):
        z = args[0].clone()
        edit(z, boundary)
        return (z, *args[1:])

    handle = edit_module.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids + candidate])).logits[0].double()
    finally:
        handle.remove()
    logp = torch.log_softmax(logits, dim=-1)
    ends = torch.as_tensor(number_continuations(tokenizer_of(model)))
    return float(sum(logp[boundary + j, t] for j, t in enumerate(candidate))) + float(
        torch.log1p(-logp[-1].exp()[ends].sum()))


def projection(model, block: int):
    blk = find_blocks(model)[block]
    by_hand = BY_HAND.get(model.config.model_type)
    return by_hand(blk) if by_hand else blk.self_attn.o_proj


@pytest.mark.parametrize("family", ["llama-3", "gemma-2", "phi-3", "gpt-2", "gpt-neox"])
def test_ablation_equals_hand_written_hook(family_model, family):  # noqa: F811
    loaded = loaded_family(family_model, family)
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, settings(family))
    template = settings(family).template
    cands = [[tok(s, add_special_tokens=False)["input_ids"] for s in (f"{' ' if template == 'plain' else ''}{p.n}",
                                                                      f"{' ' if template == 'plain' else ''}{p.n - 1}")]
             for p in prompts]
    H = model.config.num_attention_heads
    blocks = [0, len(find_blocks(model)) - 1]
    width = projection(model, 0).weight.shape[1 if family not in ("gpt-2",) else 0]
    means = torch.randn(len(find_blocks(model)), width, generator=torch.Generator().manual_seed(0)) * 3
    sites = hook_sites(blocks, len(find_blocks(model)), attention_output_site(model.config.model_type))
    with torch.inference_mode():
        got, _ = ablated_scores(model, prompts, cands, sites, means, H, pad_token_id(tok), batch_size=2)
        clean, _ = boundary_scores(model, prompts, cands, pad_token_id(tok), batch_size=3)
    hd = width // H
    for i, p in enumerate(prompts):
        for j, b in enumerate(blocks):
            for h in range(H):
                def edit(z, pos, b=b, h=h):
                    z[0, pos, h * hd:(h + 1) * hd] = means[b, h * hd:(h + 1) * hd]
                for k, cand in enumerate(cands[i]):
                    want = logprob_by_hand(model, p.ids, cand, projection(model, b), edit)
                    assert got[i, j, h, k] == pytest.approx(want, abs=2e-4), (i, b, h, k)
    assert np.abs(got - clean[:, None, None, :]).max() > 1e-3  # the ablations really changed the answer
    with torch.inference_mode():  # a chosen subset of heads, in the order given: those heads' columns
        some, _ = ablated_scores(model, prompts, cands, sites, means, H, pad_token_id(tok), batch_size=2,
                                 heads=[H - 1, 0])
    np.testing.assert_allclose(some, got[:, :, [H - 1, 0]], atol=1e-5)


def test_attention_output_is_the_heads_side_by_side_with_grouped_query_attention(family_model):  # noqa: F811
    loaded = loaded_family(family_model, "llama-3")
    model, tok = loaded.model, loaded.tokenizer
    config = model.config
    H, KV = config.num_attention_heads, config.num_key_value_heads
    assert KV < H  # grouped-query attention: H / KV heads share one key/value head
    attn = find_blocks(model)[1].self_attn
    seen = {}
    hooks = [attn.v_proj.register_forward_hook(lambda m, a, out: seen.__setitem__("v", out[0])),
             attn.o_proj.register_forward_pre_hook(lambda m, a: seen.__setitem__("z", a[0][0]))]
    prompt = build_prompts(tok, settings("llama-3"))[0]
    try:
        with eager_attention(model), torch.no_grad():
            weights = model(input_ids=torch.tensor([prompt.ids]), output_attentions=True).attentions[1][0]
    finally:
        for handle in hooks:
            handle.remove()
    hd = seen["z"].shape[-1] // H
    v = seen["v"].view(len(prompt.ids), KV, hd)  # (T, KV, hd)
    for h in range(H):
        torch.testing.assert_close(seen["z"][:, h * hd:(h + 1) * hd], weights[h] @ v[:, h // (H // KV)],
                                   atol=1e-5, rtol=1e-5)


def test_run_heads_result_round_trips_and_reads_the_probe(tiny_models, tmp_path):  # noqa: F811
    model_dir = tiny_models["llama"]
    loaded = load_model(str(model_dir), progress=False)
    names = location_names(2)
    probes = write_probes(tmp_path / "probes.json", {"model": loaded.model_id, "n_prompts": 9, "d": 32,
                                                     "locations": names}, best=1)
    config = HeadsConfig(model=ModelSpec(str(model_dir)), prompts=settings("llama", counts=(1, 2, 3)),
                         ablate_prompts=2, probes=str(probes))
    result = run_heads(config, loaded=loaded)
    assert len(result.heads) == 2 * 4 and result.layers == [0, 1] and result.probe["index"] == 1
    assert sum(p["ablated"] for p in result.prompts) == 2
    # the probe reads the output of block 0, which block 1's heads cannot reach
    assert all(h["readout_shift_mean"] == 0.0 for h in result.heads if h["layer"] == 1)
    assert any(abs(h["readout_shift_mean"]) > 0 for h in result.heads if h["layer"] == 0)
    written = result.save(tmp_path / "out")
    assert [p.name for p in written] == list(HeadsResult.file_names())
    assert HeadsResult.read(tmp_path / "out").to_dict() == result.to_dict()
    assert {p.name for p in draw_heads(result, tmp_path / "out")} == {"fig12_heads.png", "fig12_heads.pdf"}
    page = Page(tmp_path)
    heads_view(page, Section(None, "out/heads.json", HeadsResult.read(tmp_path / "out")))
    html = "".join(page.parts)
    assert html.count("<table>") == 3  # by target excess, by ablation, by the probe's read-out
    assert not re.search(r">[^<]*\d[^<]*<", re.sub(r'<span class="v"[^>]*>[^<]*</span>', "", html))  # values are spans
    # the clean read-out is the probe on block 0's output at the boundary (output_hidden_states)
    w = np.asarray(result_probe_coef(probes), dtype=np.float64)
    for rec in (r for r in result.prompts if r["ablated"]):
        ids = build_prompts(loaded.tokenizer, config.prompts)[rec["index"]].ids
        with torch.no_grad():
            hidden = loaded.model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states[1][0, -1]
        assert rec["readout_clean"] == pytest.approx(float(hidden.double().numpy() @ w), abs=1e-4)


def result_probe_coef(path):
    from countlens.probes.probe import ProbeResult

    return ProbeResult.read(path).locations[1].fits[0].coef


def test_every_registered_architecture_has_its_projection_and_attention_weights():
    from transformers import AutoConfig, AutoModelForCausalLM

    special = {"gpt2": dict(n_embd=16, n_layer=1, n_head=2, n_positions=16),
               "gpt_bigcode": dict(n_embd=16, n_layer=1, n_head=2, n_positions=16),
               "gptj": dict(n_embd=16, n_layer=1, n_head=2, n_positions=16, rotary_dim=4),
               "gpt_neo": dict(hidden_size=16, num_layers=1, num_heads=2, attention_types=[[["global"], 1]],
                               max_position_embeddings=16),
               "bloom": dict(hidden_size=16, n_layer=1, n_head=2),
               "opt": dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, ffn_dim=32,
                           word_embed_proj_dim=16, max_position_embeddings=16),
               "falcon": dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                              new_decoder_architecture=True, num_kv_heads=1)}
    for arch, path in ATTENTION_OUTPUTS.items():
        kwargs = special.get(arch) or dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=8,
                                           max_position_embeddings=16, num_local_experts=2, num_experts=2,
                                           num_experts_per_tok=1, moe_intermediate_size=8,
                                           shared_expert_intermediate_size=8)
        config = AutoConfig.for_model(arch, vocab_size=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, **kwargs)
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
        block = find_blocks(model)[0]
        got = {}
        hooks = [block.get_submodule(path).register_forward_pre_hook(lambda m, a, got=got: got.update(z=a[0].shape)),
                 block.get_submodule(path.rsplit(".", 1)[0]).register_forward_hook(
                     lambda m, a, out, got=got: got.update(w=out[1].shape))]
        # the registry's attention-weights site, through the hook set
        pattern = hook_sites([0], 1, attention_pattern_site(arch))
        try:
            with torch.no_grad(), HookSet(find_blocks(model)).attach([(pattern[0], lambda w, got=got: got.update(
                    p=w.shape))]):
                model(input_ids=torch.tensor([[3, 4, 5]]))
        finally:
            for handle in hooks:
                handle.remove()
        heads = (getattr(config, "text_config", None) or config).num_attention_heads
        assert got["w"] == got["p"] == (1, heads, 3, 3), arch
        assert got["z"][-1] % heads == 0, arch


def test_an_unknown_architecture_is_refused_before_any_weights(tmp_path, smollm2_tokenizer):  # noqa: F811
    import shutil

    from transformers import AutoConfig

    folder = tmp_path / "mamba"
    AutoConfig.for_model("mamba", hidden_size=16, num_hidden_layers=2, vocab_size=64).save_pretrained(folder)
    for item in smollm2_tokenizer.iterdir():
        shutil.copy2(item, folder / item.name)  # a tokenizer, a config, and no weights at all
    with pytest.raises(ConfigError) as err:
        plan_heads(HeadsConfig(model=ModelSpec(str(folder)), prompts=settings("llama")))
    assert err.value.field == "model" and "'mamba'" in str(err.value)


@pytest.mark.parametrize("change, field", [({"flip": "second"}, "flip"), ({"ablate_prompts": -1}, "ablate_prompts"),
                                           ({"batch_size": 0}, "batch_size"), ({"location": "1"}, "location")])
def test_bad_configs_name_their_field(change, field):
    with pytest.raises(ConfigError) as err:
        HeadsConfig(**change).validate()
    assert err.value.field == field


def test_counts_without_targets_and_blocks_the_model_lacks_are_refused(tiny_models):  # noqa: F811
    spec = ModelSpec(str(tiny_models["llama"]))
    with pytest.raises(ConfigError) as err:
        HeadsConfig(model=spec, prompts=settings("llama", counts=(0,))).validate()
    assert err.value.field == "counts"
    with pytest.raises(ConfigError) as err:
        plan_heads(HeadsConfig(model=spec, prompts=settings("llama"), layers="5"))
    assert err.value.field == "layers" and "block 5 does not exist" in str(err.value)


def test_answers_the_tokenizer_writes_alike_are_refused_before_any_weights(tiny_models, monkeypatch):  # noqa: F811
    # the ablation's logit difference n vs n - 1 needs two different answers: the plan checks them as every
    # answer-scoring read-out does (here a tokenizer stand-in that writes every count as the same token)
    import countlens.llm.answers as answers

    monkeypatch.setattr(answers, "candidate_token_ids", lambda tokenizer, counts, template="chat": [[7]] * len(counts))
    with pytest.raises(ConfigError) as err:
        plan_heads(HeadsConfig(model=ModelSpec(str(tiny_models["llama"])), prompts=settings("llama")))
    assert err.value.field == "counts" and "encode to the same tokens" in err.value.template


def test_hooks_and_attention_implementation_are_restored_after_an_error(tiny_models):  # noqa: F811
    from countlens.llm.heads.attention import AttentionPass

    model = load_model(str(tiny_models["llama"]), progress=False).model
    before = model.config._attn_implementation
    with pytest.raises(RuntimeError), AttentionPass(model, attention_output_site("llama")):
        assert model.config._attn_implementation == "eager"
        raise RuntimeError("boom")
    assert model.config._attn_implementation == before
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_heads_and_steering_read_a_probe_by_one_criterion(tiny_models, tmp_path):  # noqa: F811
    """Model id, width and locations are checked alike; the rows only where a capture is read (steering, the
    lenses), never for head ablation, which reads no capture."""
    from countlens.llm.heads.experiment import read_probe
    from countlens.llm.models import resolve_model
    from countlens.llm.steering.experiment import probe_mismatch
    from countlens.probes.probe import ProbeResult

    ref = resolve_model(str(tiny_models["llama"]), progress=False)
    names = location_names(2)
    meta = {"model": ref.model_id, "n_prompts": 9, "d": 32, "locations": names}
    fitted_elsewhere = write_probes(tmp_path / "rows.json", meta, rows=5)
    probes = ProbeResult.read(fitted_elsewhere)
    assert probe_mismatch(probes, ref.model_id, 32, names) == []
    assert probe_mismatch(probes, ref.model_id, 32, names, rows=(9, 9)) == ["rows"]
    assert read_probe(str(fitted_elsewhere), None, ref, 2, 32).index == 1  # the best location, rows not asked
    narrow = write_probes(tmp_path / "d.json", meta, d=7)
    assert probe_mismatch(ProbeResult.read(narrow), ref.model_id, 32, names, rows=(9,)) == ["width"]
    with pytest.raises(ConfigError, match="another model") as caught:
        read_probe(str(narrow), None, ref, 2, 32)
    assert caught.value.field == "probes"
    assert probe_mismatch(probes, ref.model_id, 32, names[:2]) == ["locations"]


def test_mean_std_skips_undefined_values_slice_by_slice():
    """The one mean/std of the heads' and the components' records, against numpy on each slice's finite
    values (NaN where a slice has none)."""
    from countlens.llm.heads.attention import mean_std

    values = np.random.default_rng(3).standard_normal((7, 2, 3))
    values[[0, 4, 5], 0, 1] = np.nan
    values[:, 1, 2] = np.nan
    mean, std, count = mean_std(values)
    assert mean.shape == std.shape == count.shape == (2, 3)
    for i in range(2):
        for j in range(3):
            x = values[:, i, j][np.isfinite(values[:, i, j])]
            assert count[i, j] == x.size
            if x.size:
                assert mean[i, j] == pytest.approx(x.mean(), abs=1e-12) and std[i, j] == pytest.approx(x.std(), abs=1e-12)
            else:
                assert np.isnan(mean[i, j]) and np.isnan(std[i, j])
