"""Figure 15, attribution patching (AtP) against activation patching, on tiny random models: AtP equals the patch
where the metric is exactly linear in the activation; its gradient is the metric's finite difference; every
activation-patching cell equals an explicit loop of whole forwards under a hand-written forward hook; the
agreement statistics are Spearman's and the top-k overlap computed by hand; the result round-trips with one CSV
row per cell; unknown architectures and blocks the model lacks are refused before any weights load."""

import re

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.core.report import Page, Section
from countlens.llm.answers import candidate_token_ids
from countlens.llm.attribution.atp import agreement, atp_effects, gradient_pass, top_k_overlap
from countlens.llm.attribution.experiment import (
    CSV_COLUMNS,
    AttributionConfig,
    AttributionResult,
    plan_attribution,
    run_attribution,
)
from countlens.llm.attribution.figures import attribution_view, draw_attribution
from countlens.llm.capture.residuals import find_blocks
from countlens.llm.hooks import attention_output_site, component_output_sites, hook_sites
from countlens.llm.models import ModelSpec, load_model
from countlens.llm.patching.replay import PositionPatcher
from countlens.llm.positions.experiment import prompt_pairs
from countlens.llm.prompts import PromptSettings
from tests.helpers.cli import assert_one_line_error, run_countlens
from tests.helpers.final_answers import final_from_logp
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer, tiny_models  # noqa: F401
from tests.helpers.report_checks import ReportParser


def settings(counts=(3,), L=6) -> PromptSettings:
    return PromptSettings(L=L, counts=list(counts), per_count=1, pairs=[["a", "b"]], configs=["count"], seeds=[0])


def first_pair(loaded, counts=(3,)):
    """The first clean prompt of ``settings(counts)``, its twin and the candidates "n" and "n − 1"."""
    config = AttributionConfig(prompts=settings(counts))
    pp = prompt_pairs(loaded.tokenizer, config)[0]
    return pp, candidate_token_ids(loaded.tokenizer, [pp.clean.n, pp.clean.n - 1], config.prompts.template)


def hooked_ld(model, ids, candidates, hooks) -> float:
    """LD = log P(candidates[0]) − log P(candidates[1]) (final answers) of the prompt ``ids``, each scored by its own
    whole forward (no cache), under plain torch forward hooks ``hooks`` ``[(module, fn(module, args, output))]``
    that touch the prompt's positions only (the candidate tokens' positions are left as they are)."""
    T = len(ids)
    handles = [m.register_forward_hook(fn) for m, fn in hooks]
    try:
        lps = []
        for cand in candidates:
            with torch.no_grad():
                logits = model(input_ids=torch.tensor([list(ids) + list(cand)])).logits[0].double()
            logp = torch.log_softmax(logits, -1)
            lps.append(final_from_logp(logp, T - 1, list(cand), model))
    finally:
        for h in handles:
            h.remove()
    return lps[0] - lps[1]


def keeper(store: dict, name: str):
    """A forward hook keeping row 0 of a module's output (item 0) as ``store[name]`` (T, w)."""
    def fn(module, args, output):
        store[name] = (output[0] if isinstance(output, tuple) else output)[0].detach().clone()
    return fn


def replace_output(positions, value, columns=slice(None)):
    """A forward hook replacing item 0 of a module's output at the prompt ``positions`` (and last-axis
    ``columns``) by ``value``."""
    def fn(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden = hidden.clone()
        hidden[:, positions, columns] = value.to(hidden.dtype)
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden
    return fn


def replace_input(positions, value, columns=slice(None)):
    """A forward pre-hook replacing a module's first input likewise."""
    def fn(module, args):
        hidden = args[0].clone()
        hidden[:, positions, columns] = value.to(hidden.dtype)
        return (hidden, *args[1:])
    return fn


def test_atp_equals_activation_patching_where_the_metric_is_linear_in_the_activation(tiny_models):  # noqa: F811
    # Without the final norm, one-token answers' LD = (U_a − U_b) · h_L at the boundary: exactly linear in the last
    # block's output and in its MLP write there, so the first-order estimate is the patch itself.
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    model = loaded.model.double()
    model.model.norm = torch.nn.Identity()
    pp, cands = first_pair(loaded)
    assert all(len(c) == 1 for c in cands)
    L, T = len(find_blocks(model)), pp.clean.n_tokens
    _, mlp_out = component_output_sites("llama")
    sites = {"resid": hook_sites([L - 1, L], L), "attn": [], "mlp": hook_sites([L - 1], L, mlp_out), "z": []}
    gp = gradient_pass(model, pp.clean.ids, pp.corrupt.ids, cands, sites)
    resid = atp_effects(gp.base["resid"], gp.source["resid"], gp.grad["resid"])  # (2, T)
    mlp = atp_effects(gp.base["mlp"], gp.source["mlp"], gp.grad["mlp"])  # (1, T)
    blocks = find_blocks(model)
    source = {}  # the twin's last block output and MLP write, and the block below's output, read by hand
    handles = [blocks[L - 1].register_forward_hook(keeper(source, "resid")),
               blocks[L - 1].mlp.register_forward_hook(keeper(source, "mlp")),
               blocks[L - 2].register_forward_hook(keeper(source, "below"))]
    with torch.no_grad():
        model(input_ids=torch.tensor([pp.corrupt.ids]))
    for h in handles:
        h.remove()
    base = hooked_ld(model, pp.clean.ids, cands, [])
    for module, key, est in ((blocks[L - 1], "resid", resid[1, T - 1]), (blocks[L - 1].mlp, "mlp", mlp[0, T - 1])):
        act = hooked_ld(model, pp.clean.ids, cands, [(module, replace_output([T - 1], source[key][T - 1]))]) - base
        assert abs(act) > 1e-6  # the patch really moves the metric (float64: rounding is ~1e-15)
        assert est == pytest.approx(act, rel=1e-8, abs=1e-15), key  # measured: 7e-13 and 3e-10 relative
    # one block further down, the last block's norms are in the way: not linear, and no longer equal
    act = hooked_ld(model, pp.clean.ids, cands, [(blocks[L - 2], replace_output([T - 1], source["below"][T - 1]))]) - base
    assert abs(resid[0, T - 1] - act) > 1e-7 * abs(act)  # measured: 4.5e-7 relative


@pytest.mark.parametrize("family", ["llama-3", "gemma-2"])
def test_the_gradient_is_the_metrics_finite_difference(family_model, family):  # noqa: F811
    loaded = load_model(str(family_model(family)), progress=False)
    model = loaded.model.double()
    pp, cands = first_pair(loaded)
    arch = model.config.model_type
    L, blocks = len(find_blocks(model)), find_blocks(model)
    attn_out, mlp_out = component_output_sites(arch)
    sites = {"resid": hook_sites([1], L), "attn": hook_sites([0], L, attn_out), "mlp": hook_sites([1], L, mlp_out),
             "z": hook_sites([1], L, attention_output_site(arch))}
    gp = gradient_pass(model, pp.clean.ids, pp.corrupt.ids, cands, sites)
    base_ld = hooked_ld(model, pp.clean.ids, cands, [])
    assert gp.ld == pytest.approx(base_ld, abs=1e-9)
    rng = np.random.default_rng(0)
    # the models' norms compute in float32 even in a float64 model (~1e-7 relative noise in LD), so the step is
    # large and the five-point stencil's O(eps^4) error stays below that noise
    eps = 1e-3
    T = pp.clean.n_tokens
    checked = 0
    for kind, site in (("resid", sites["resid"][0]), ("attn", sites["attn"][0]), ("mlp", sites["mlp"][0]),
                       ("z", sites["z"][0])):
        module = site.module_of(blocks)
        base = torch.as_tensor(gp.base[kind][0])  # (T, w)
        v = torch.as_tensor(rng.standard_normal(base.shape))
        v[: T // 2] = 0.0  # a direction over the later half of the prompt only
        ld = {}
        for step in (2, 1, -1, -2):
            value = base + step * eps * v
            if site.when == "pre":
                handle = module.register_forward_pre_hook(replace_input(slice(0, T), value))
                try:
                    ld[step] = hooked_ld(model, pp.clean.ids, cands, [])
                finally:
                    handle.remove()
            else:
                ld[step] = hooked_ld(model, pp.clean.ids, cands, [(module, replace_output(slice(0, T), value))])
        finite = (8 * (ld[1] - ld[-1]) - (ld[2] - ld[-2])) / (12 * eps)
        analytic = float((v.numpy() * gp.grad[kind][0]).sum())
        assert abs(analytic) > 1e-2
        assert analytic == pytest.approx(finite, rel=1e-3, abs=5e-4), kind  # the float32 norms, and the end factor (a sum over the vocabulary)
        checked += 1
    assert checked == 4


@pytest.fixture(scope="module")
def llama_run(tiny_models):  # noqa: F811
    folder = tiny_models["llama"]
    loaded = load_model(str(folder), progress=False)
    config = AttributionConfig(model=ModelSpec(str(folder)), prompts=settings(), locations="0:2", layers="0,1",
                               positions="items", top_k=5)
    return loaded, config, run_attribution(config, loaded=loaded)


def test_every_activation_patching_cell_is_an_explicit_hooked_forward(llama_run):
    loaded, config, result = llama_run
    model = loaded.model
    pp, cands = first_pair(loaded)
    base, source = pp.clean.ids, pp.corrupt.ids  # noising: the twin's activations into the clean run
    blocks = find_blocks(model)
    T, H = pp.clean.n_tokens, model.config.num_attention_heads
    hd = model.config.hidden_size // H
    # the source run's activations, read by hand
    kept = {}

    def keep(name, pre=False):
        if pre:
            return lambda m, args: kept.__setitem__(name, args[0][0].detach().clone())
        return lambda m, args, out: kept.__setitem__(name, (out[0] if isinstance(out, tuple) else out)[0].detach()
                                                     .clone())
    handles = [blocks[0].register_forward_pre_hook(keep("resid0", pre=True)),
               blocks[0].register_forward_hook(keep("resid1")),
               blocks[1].self_attn.register_forward_hook(keep("attn1")),
               blocks[0].mlp.register_forward_hook(keep("mlp0")),
               blocks[1].self_attn.o_proj.register_forward_pre_hook(keep("z1", pre=True))]
    with torch.no_grad():
        model(input_ids=torch.tensor([source]))
    for h in handles:
        h.remove()
    ld_base = hooked_ld(model, base, cands, [])
    cells = {(c["kind"], c["layer"], c["head"], c["position"]): c for c in result.cells}
    p = pp.flipped_position
    checks = [
        (("resid", 1, None, p), [(blocks[0], replace_output([p], kept["resid1"][p]))]),
        (("attn", 1, None, T - 1), [(blocks[1].self_attn, replace_output([T - 1], kept["attn1"][T - 1]))]),
        (("attn", 1, None, None), [(blocks[1].self_attn, replace_output(slice(0, T), kept["attn1"]))]),
        (("mlp", 0, None, p), [(blocks[0].mlp, replace_output([p], kept["mlp0"][p]))]),
        (("mlp", 0, None, None), [(blocks[0].mlp, replace_output(slice(0, T), kept["mlp0"]))]),
    ]
    for key, hooks in checks:
        assert cells[key]["act"] == pytest.approx(hooked_ld(model, base, cands, hooks) - ld_base, abs=2e-5), key
    # location 0 (block 0's input) and the heads are inputs: forward pre-hooks
    for key, module, value, cols in ((("resid", 0, None, p), blocks[0], kept["resid0"][p], slice(None)),
                                     (("head", 1, 2, T - 1), blocks[1].self_attn.o_proj, kept["z1"][T - 1, 2 * hd:3 * hd],
                                      slice(2 * hd, 3 * hd)),
                                     (("head", 1, 3, None), blocks[1].self_attn.o_proj, kept["z1"][:, 3 * hd:4 * hd],
                                      slice(3 * hd, 4 * hd))):
        positions = slice(0, T) if key[3] is None else [key[3]]
        handle = module.register_forward_pre_hook(replace_input(positions, value, cols))
        try:
            want = hooked_ld(model, base, cands, []) - ld_base
        finally:
            handle.remove()
        assert cells[key]["act"] == pytest.approx(want, abs=2e-5), key
    assert result.pairs[0]["ld_clean"] == pytest.approx(ld_base, abs=2e-5)
    assert result.pairs[0]["ld_base_atp"] == pytest.approx(ld_base, abs=2e-5)
    assert any(abs(c["act"]) > 1e-3 for c in result.cells)


def test_the_grid_is_every_cell_and_trivial_cells_are_exact_zeros(llama_run):
    loaded, config, result = llama_run
    pair = result.pairs[0]
    P, B, H = len(pair["positions"]), 2, result.n_heads
    count = {k: sum(c["kind"] == k for c in result.cells) for k in ("resid", "attn", "mlp", "head")}
    assert count == {"resid": 3 * P, "attn": B * (P + 1), "mlp": B * (P + 1), "head": B * H * 2}
    trivial = [c for c in result.cells if c["trivial"]]
    assert trivial and all(c["atp"] == 0.0 and c["act"] == 0.0 for c in trivial)
    # before the turned item nothing differs; at the embeddings only the turned item's own position
    assert all(c["trivial"] for c in result.cells if c["position"] is not None and c["position"] < pair["flipped_position"])
    assert [c["position"] for c in result.cells if c["kind"] == "resid" and c["layer"] == 0 and not c["trivial"]] == \
        [pair["flipped_position"]]
    for group, a in result.agreement.items():
        atp, act = result.values(group)
        assert a["cells"] == atp.size and a["trivial"] == result.values(group, trivial=True)[0].size - atp.size
        assert a["speed_ratio"] == pytest.approx(a["act_seconds"] / result.atp_seconds, rel=1e-9)
    assert result.speed_ratio == pytest.approx(result.act_seconds / result.atp_seconds, rel=1e-9)


def test_agreement_is_spearman_and_the_top_k_overlap_by_hand():
    rng = np.random.default_rng(3)
    act = rng.standard_normal(40)
    atp = act + 0.5 * rng.standard_normal(40)

    def ranks(x):
        r = np.empty(x.size)
        r[np.argsort(x)] = np.arange(x.size)
        return r
    a = agreement(atp, act, 7)
    assert a["spearman"] == pytest.approx(np.corrcoef(ranks(atp), ranks(act))[0, 1], abs=1e-12)
    top_atp = set(sorted(range(40), key=lambda i: -abs(atp[i]))[:7])
    top_act = set(sorted(range(40), key=lambda i: -abs(act[i]))[:7])
    assert a["top_k_overlap"] == pytest.approx(len(top_atp & top_act) / 7)
    assert a["max_abs_error"] == pytest.approx(np.abs(atp - act).max())
    assert agreement(act, act, 5)["spearman"] == pytest.approx(1.0) and top_k_overlap(act, -act, 5) == 1.0
    assert agreement(np.zeros(4), act[:4], 2)["spearman"] is None  # a constant side has no rank correlation
    # heads: the projection input splits into (head, width) units, each its own dot product
    base, source, grad = (rng.standard_normal((2, 3, 8)) for _ in range(3))
    want = np.einsum("ltuw,ltuw->ltu", (source - base).reshape(2, 3, 4, 2), grad.reshape(2, 3, 4, 2))
    np.testing.assert_allclose(atp_effects(base, source, grad, width=2), want)


def test_result_round_trips_with_one_csv_row_per_cell(llama_run, tmp_path):
    _, _, result = llama_run
    written = result.save(tmp_path)
    assert {p.name for p in written} == {"attribution.json", "attribution.csv"}
    lines = (tmp_path / "attribution.csv").read_text().splitlines()
    assert lines[0] == ",".join(CSV_COLUMNS) and len(lines) == 1 + len(result.cells)
    again = AttributionResult.read(tmp_path)
    assert again.to_dict() == result.to_dict()
    assert {p.name for p in draw_attribution(again, tmp_path)} == {"fig15_attribution.png", "fig15_attribution.pdf"}
    page = Page(tmp_path.parent)
    attribution_view(page, Section(None, f"{tmp_path.name}/attribution.json", again))
    html = "".join(page.parts)
    assert html.count("<tr>") == 1 + 3
    parser = ReportParser()
    parser.feed(html)  # every number on the page is a value span of the JSON; no digit in the free text
    assert len(parser.values) >= 3 * 6 and not re.search(r"\d", " ".join(parser.free_text)), parser.free_text


def test_denoising_patches_the_clean_run_into_the_twin(tiny_models):  # noqa: F811
    folder = tiny_models["llama"]
    loaded = load_model(str(folder), progress=False)
    config = AttributionConfig(model=ModelSpec(str(folder)), prompts=settings(), locations="-1", layers="1",
                               positions="items", direction="denoising")
    result = run_attribution(config, loaded=loaded)
    pp, cands = first_pair(loaded)
    pair = result.pairs[0]
    assert pair["ld_base_atp"] == pytest.approx(hooked_ld(loaded.model, pp.corrupt.ids, cands, []), abs=2e-5)
    assert pair["ld_twin"] == pytest.approx(pair["ld_base_atp"], abs=2e-5)
    # the last location at the boundary carries everything the first answer token reads: its patch moves the
    # first-token difference to the clean run's; the rest of each final answer is read as in the twin
    boundary = next(c for c in result.cells if c["kind"] == "resid" and c["position"] == pp.clean.boundary_index)
    with torch.no_grad():
        first = [torch.log_softmax(loaded.model(input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)
                 for ids in (pp.clean.ids, pp.corrupt.ids)]
    a, b = (c[0] for c in cands)
    assert boundary["act"] == pytest.approx(float((first[0][a] - first[0][b]) - (first[1][a] - first[1][b])), abs=2e-5)


def test_an_unknown_architecture_and_a_missing_block_are_refused_before_any_weights(
        tmp_path, capsys, tiny_models, smollm2_tokenizer, monkeypatch):  # noqa: F811
    import shutil

    from transformers import AutoConfig

    import countlens.llm.models as models

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")
    monkeypatch.setattr(models.ModelSpec, "load", no_load)
    folder = tmp_path / "mamba"
    AutoConfig.for_model("mamba", hidden_size=16, num_hidden_layers=2, vocab_size=64).save_pretrained(folder)
    for item in smollm2_tokenizer.iterdir():
        shutil.copy2(item, folder / item.name)
    with pytest.raises(ConfigError) as err:
        plan_attribution(AttributionConfig(model=ModelSpec(str(folder)), prompts=settings()))
    assert err.value.field == "model" and "'mamba'" in str(err.value) and "COMPONENT_OUTPUTS" in str(err.value)
    with pytest.raises(ConfigError) as err:
        plan_attribution(AttributionConfig(model=ModelSpec(str(tiny_models["llama"])), prompts=settings(), layers="40"))
    assert err.value.field == "layers" and "40" in str(err.value)
    out = tmp_path / "out"
    for argv, word in ((["--model", str(folder)], "mamba"), (["--model", str(tiny_models["llama"]), "--layers", "40"],
                                                           "--layers"),
                       (["--model", str(tiny_models["llama"]), "--counts", "0"], "--counts"),
                       (["--model", str(tiny_models["llama"]), "--top-k", "0"], "--top-k")):
        code, _, err = run_countlens(capsys, "llm", "attribution", *argv, "--pairs", "a/b", "--out", str(out))
        assert_one_line_error(code, err, word)
        assert not out.exists()


@pytest.mark.parametrize("family", ["llama-3", "gemma-2"])
def test_patching_every_position_from_the_first_change_is_the_whole_prompt_patched(family_model, family):  # noqa: F811
    # the cached runner starts at the first position that differs; the naive one patches the whole prompt
    loaded = load_model(str(family_model(family)), progress=False)
    model = loaded.model
    pp, cands = first_pair(loaded)
    arch, H = model.config.model_type, model.config.num_attention_heads
    attn_out, _ = component_output_sites(arch)
    got = {}
    with torch.inference_mode():
        for method in ("cached", "naive"):
            whole = PositionPatcher(model, pp.corrupt.ids, pp.clean.ids, cands, method, site=attn_out)
            hd = getattr(model.config, "head_dim", None) or model.config.hidden_size // H
            z = PositionPatcher(model, pp.corrupt.ids, pp.clean.ids, cands, method, site=attention_output_site(arch),
                                head_dim=hd)
            got[method] = np.concatenate([whole.logprobs_every_position(1), z.logprobs_every_position(1, range(H))])
            # every head's boundary cell in one batch equals each head patched on its own
            last = pp.clean.n_tokens - 1
            one_by_one = np.concatenate([z.logprobs(1, [last], head=h) for h in range(H)])
            np.testing.assert_allclose(z.logprobs_heads(1, last, range(H)), one_by_one, atol=1e-5)
            assert np.abs(one_by_one - z.corrupt).max() > 1e-4
            assert whole.first_change(1) == pp.flipped_position  # before the turned item nothing differs
    np.testing.assert_allclose(got["cached"], got["naive"], atol=1e-4)
    assert np.abs(got["naive"] - whole.corrupt).max() > 1e-4  # the patches move the scores
    with pytest.raises(ValueError, match="all None"):
        z.logprobs_every_position(1, [None, 0])
