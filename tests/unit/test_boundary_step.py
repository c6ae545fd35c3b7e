"""The boundary-step runner (countlens.llm.boundary) against whole prompt passes, on tiny random models of every
family of the suite (sliding-window layers included): component patching from the twin at the boundary, each
(prompt, component) a row of one batched step from the prompt's shared cache, equals the same cell of a whole
prompt pass (``patched_prompt_logprobs``) within 1e-5 nats in float64 and float32; the rows share the prefix
cache's tensors (no copy per row); stacked setters write what one hook per setter writes; a setter that writes
anywhere but the boundary is refused."""

import numpy as np
import pytest
import torch

from countlens.llm.boundary import PrefixBatch, boundary_cell_scores, shared_cache_rows, shares_rows
from countlens.llm.capture.residuals import find_blocks, pad_token_id
from countlens.llm.components.ablation import (
    boundary_site_values,
    component_setter,
    twin_boundary_scores,
)
from countlens.llm.hooks import attention_output_site, component_output_sites, hook_sites
from countlens.llm.models import load_model
from countlens.llm.patching.edits import Setter, patched_prompt_logprobs, stacked_setters
from countlens.llm.prompts import PromptSettings
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer  # noqa: F401

FAMILIES = ("llama-3", "qwen2", "qwen3", "gemma-2", "gemma-3", "mistral", "phi-3", "gpt-2", "gpt-neox", "olmo-2")


def pairs(tok, family: str):
    """Two clean prompts of different lengths (left padding in the batch), their twins and candidates 0..4."""
    from countlens.llm.answers import candidate_token_ids
    from countlens.llm.positions.experiment import PositionPatchingConfig, prompt_pairs

    template = "plain" if family == "gpt-2" else "chat"
    out = []
    for n, L in ((3, 6), (6, 8)):
        config = PositionPatchingConfig(prompts=PromptSettings(L=L, counts=[n], pairs=[["a", "b"]], configs=["count"],
                                                               seeds=[0], template=template))
        out.append(prompt_pairs(tok, config)[0])
    assert out[0].clean.n_tokens != out[1].clean.n_tokens
    return [p.clean for p in out], [p.corrupt for p in out], candidate_token_ids(tok, [0, 1, 2, 3, 4], template)


def sites_of(model):
    arch, L = model.config.model_type, len(find_blocks(model))
    attn_out, mlp_out = component_output_sites(arch)
    writes = [s for b in range(L) for s in (hook_sites([b], L, attn_out)[0], hook_sites([b], L, mlp_out)[0])]
    return writes, hook_sites(range(L), L, attention_output_site(arch)), model.config.num_attention_heads


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", FAMILIES)
def test_twin_patching_from_the_boundary_step_is_the_whole_prompt_pass_cell_by_cell(
        family_model, family, dtype):  # noqa: F811
    loaded = load_model(str(family_model(family)), progress=False)
    model, tok = loaded.model.to(dtype), loaded.tokenizer
    clean, twins, cands = pairs(tok, family)
    writes, z_sites, H = sites_of(model)
    pad = pad_token_id(tok)
    # Gemma's eager attention turns a left-padded row into NaN in any batched forward (its pad queries see no
    # key), the prefix pass included: those families run one prompt per batch (their sliding layers still slide)
    batch = 1 if family.startswith("gemma") else 2
    with torch.inference_mode():
        got_w, got_h = twin_boundary_scores(model, clean, twins, [cands] * 2, writes, z_sites, H, pad, batch)
        for a, (prompt, twin) in enumerate(zip(clean, twins, strict=True)):
            w, z = boundary_site_values(model, twin.ids, [writes, z_sites])
            hd = z.shape[-1] // H
            cells = [[component_setter(s, w[j], "boundary")] for j, s in enumerate(writes)]
            cells += [[component_setter(s, z[j][h * hd:(h + 1) * hd], "boundary", h, hd)]
                      for j, s in enumerate(z_sites) for h in range(H)]
            whole = patched_prompt_logprobs(model, prompt.ids, cands, cells, batch_size=8)
            np.testing.assert_allclose(got_w[a], whole[:len(writes)], rtol=0, atol=1e-5)
            np.testing.assert_allclose(got_h[a].reshape(-1, len(cands)), whole[len(writes):], rtol=0, atol=1e-5)
            # the patches move the answer (a runner that wrote nothing would pass the line above only by luck)
            plain = patched_prompt_logprobs(model, prompt.ids, cands, [[]])
            assert np.abs(whole - plain).max() > 1e-4


def test_the_rows_share_the_prefix_cache_and_a_cell_of_many_setters_is_the_whole_pass(family_model):  # noqa: F811
    loaded = load_model(str(family_model("gemma-2")), progress=False)  # sliding-window layers shorter than the prompt
    model, tok = loaded.model.double(), loaded.tokenizer
    clean, twins, cands = pairs(tok, "gemma-2")
    writes, z_sites, H = sites_of(model)
    pad = pad_token_id(tok)
    with torch.inference_mode():
        batch = PrefixBatch(model, clean[:1], pad)
        assert shares_rows(batch.cache)
        rows = torch.tensor([0, 0, 0])
        shared = shared_cache_rows(batch.cache, rows)
        for layer, base in zip(shared.layers, batch.cache.layers, strict=True):
            assert layer.shared_keys.data_ptr() == base.keys.data_ptr()  # the prompt's tensors, not a copy
            assert layer.keys.shape[0] == len(rows) and layer.keys.shape[-2] == 0
        assert any(layer.is_sliding for layer in shared.layers)
        [w] = boundary_site_values(model, twins[0].ids, [writes])
        every = [component_setter(s, w[j], "boundary") for j, s in enumerate(writes)]
        cells = [[[], every, every[:1]], [every[1:3]]]
        got = boundary_cell_scores(model, clean, [cands] * 2, cells, pad, batch_size=1, step_rows=2)
        for a in range(2):
            np.testing.assert_allclose(got[a], patched_prompt_logprobs(model, clean[a].ids, cands, cells[a]),
                                       rtol=0, atol=1e-9)


def test_stacked_setters_write_what_one_hook_each_writes():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(4, 3, 8, generator=g)
    site = hook_sites([1], 2)[0]
    setters = [Setter(site, torch.randn(1, 8, generator=g), positions=[-1], rows=[r]) for r in (0, 2)]
    setters += [Setter(site, torch.randn(1, 4, generator=g), positions=[-1], rows=[3], head=[1], width=4),
                Setter(site, torch.randn(1, 4, generator=g), positions=[-1], rows=[3], head=[0], width=4),
                Setter(site, torch.randn(8, generator=g), positions=[-2], rows=[1], mode="add"),
                Setter(site, torch.randn(1, 8, generator=g), positions=[-1], rows=[0])]  # row 0 again: later wins
    want = hidden
    for s in setters:
        want = s.write(want)
    stacked = stacked_setters(setters)
    assert len(stacked) == 4  # the whole-vector replacements (two, as row 0 repeats), the heads, the add
    got = hidden
    for s in stacked:
        got = s.write(got)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_setter_off_the_boundary_is_refused(family_model):  # noqa: F811
    loaded = load_model(str(family_model("llama-3")), progress=False)
    clean, _, cands = pairs(loaded.tokenizer, "llama-3")
    site = hook_sites([1], 2)[0]
    with pytest.raises(ValueError, match="positions=\\[-1\\]"):
        boundary_cell_scores(loaded.model, clean, [cands] * 2, [[[Setter(site, torch.zeros(32))]], []],
                             pad_token_id(loaded.tokenizer))


HALF_TOLERANCE = {torch.bfloat16: 0.1, torch.float16: 0.02}  # nats: a few of the dtype's ulps of the logits


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family", ["llama-3", "qwen2", "gemma-2"])
def test_the_boundary_step_in_half_precision_agrees_with_the_whole_pass_to_the_dtypes_tolerance(
        family_model, family, dtype):  # noqa: F811
    """``--dtype bfloat16/float16``: the batched boundary step of the twin's writes and the whole prompt pass in
    the same dtype agree within a few of its ulps (the two run the same arithmetic in other shapes and orders),
    and both within twice that of float64's."""
    loaded = load_model(str(family_model(family)), progress=False)
    tok = loaded.tokenizer
    clean, twins, cands = pairs(tok, family)
    batch = 1 if family.startswith("gemma") else 2
    got = {}
    for dt in (torch.float64, dtype):
        model = loaded.model.to(dt)
        writes, z_sites, H = sites_of(model)
        with torch.inference_mode():
            got[dt], _ = twin_boundary_scores(model, clean, twins, [cands] * 2, writes, z_sites, H,
                                              pad_token_id(tok), batch)
            w, _ = boundary_site_values(model, twins[0].ids, [writes, z_sites])
            cells = [[component_setter(s, w[j], "boundary")] for j, s in enumerate(writes)]
            whole = patched_prompt_logprobs(model, clean[0].ids, cands, cells, batch_size=8)
        assert np.isfinite(got[dt]).all()
        np.testing.assert_allclose(got[dt][0], whole, rtol=0, atol=1e-5 if dt == torch.float64 else HALF_TOLERANCE[dt])
    # and the half-precision runner reads what float64 reads, to the same tolerance
    np.testing.assert_allclose(got[dtype], got[torch.float64], rtol=0, atol=2 * HALF_TOLERANCE[dtype])
