"""``countlens llm heads`` end to end on a tiny model: the files it writes and reads back, and bad input (one
line, exit 2, before the model loads, nothing written); one slow check on the embedded SmolLM2."""

import shutil

import numpy as np
import pytest

from countlens.core.locations import location_names
from countlens.llm.heads.experiment import HeadsResult
from countlens.llm.models import load_model
from tests.helpers.cli import assert_one_line_error, run_countlens
from tests.helpers.final_answers import final_from_logp
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models, write_probes  # noqa: F401

SMALL = ["--L", "8", "--counts", "1:4", "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--quiet"]


@pytest.fixture(scope="module")
def probes(tiny_model_dir, tmp_path_factory):  # noqa: F811
    model_id = load_model(str(tiny_model_dir), progress=False).model_id
    path = tmp_path_factory.mktemp("probes") / "probes.json"
    return write_probes(path, {"model": model_id, "n_prompts": 5, "d": 32, "locations": location_names(2)}, best=1)


def test_heads_writes_result_csvs_and_figure(capsys, tiny_model_dir, probes, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    code, stdout, err = run_countlens(capsys, "llm", "heads", "--model", str(tiny_model_dir), *SMALL,
                                      "--ablate-prompts", "2", "--layers", "0:1", "--probes", str(probes),
                                      "--out", str(out))
    assert code == 0, err
    assert {p.name for p in out.iterdir()} == {"heads.json", "heads.csv", "heads_prompts.csv", "fig12_heads.png",
                                               "fig12_heads.pdf"}
    result = HeadsResult.read(out)
    assert (result.n_layers, result.n_heads, result.n_kv_heads) == (2, 4, 2) and result.layers == [0, 1]
    assert result.probe["location"] == "blocks.0.hook_resid_post"
    assert np.allclose(result.grid("boundary_target_mean") + result.grid("boundary_distractor_mean")
                       + result.grid("boundary_other_mean"), 1.0)
    header = (out / "heads.csv").read_text().splitlines()[0].split(",")
    assert header[:3] == ["layer", "head", "kv_head"] and "effect_mean" in header
    assert "heads: 2 blocks x 4 heads" in stdout


def test_heads_without_ablation_measures_masses_only(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    code, _, err = run_countlens(capsys, "llm", "heads", "--model", str(tiny_model_dir), *SMALL, "--ablate-prompts",
                                 "0", "--out", str(tmp_path / "out"))
    assert code == 0, err
    result = HeadsResult.read(tmp_path / "out")
    assert result.layers == [] and not any(h["ablated"] for h in result.heads)


@pytest.mark.parametrize("args, words", [
    (["--counts", "0"], ["--counts", ">= 1"]),
    (["--layers", "7"], ["--layers", "block 7 does not exist"]),
    (["--ablate-prompts", "-1"], ["--ablate-prompts"]),
    (["--location", "1"], ["--location", "--probes"]),
    (["--batch-size", "0"], ["--batch-size"]),
])
def test_bad_input_is_one_line_and_writes_nothing(capsys, tiny_model_dir, tmp_path, args, words):  # noqa: F811
    out = tmp_path / "out"
    code, _, err = run_countlens(capsys, "llm", "heads", "--model", str(tiny_model_dir), *SMALL, *args,
                                 "--out", str(out))
    assert_one_line_error(code, err, *words)
    assert not out.exists()


def test_probes_of_another_model_are_refused(capsys, tiny_model_dir, tmp_path):  # noqa: F811
    other = write_probes(tmp_path / "probes.json", {"model": "another", "n_prompts": 5, "d": 32,
                                                    "locations": location_names(2)})
    code, _, err = run_countlens(capsys, "llm", "heads", "--model", str(tiny_model_dir), *SMALL, "--probes",
                                 str(other), "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "--probes", "another model")
    assert not (tmp_path / "out").exists()


def test_an_architecture_without_a_known_projection_is_refused_before_loading(capsys, tmp_path,
                                                                              smollm2_tokenizer):  # noqa: F811
    from transformers import AutoConfig

    folder = tmp_path / "mamba"
    AutoConfig.for_model("mamba", hidden_size=16, num_hidden_layers=2, vocab_size=64).save_pretrained(folder)
    for item in smollm2_tokenizer.iterdir():
        shutil.copy2(item, folder / item.name)  # no weights: loading them would fail differently
    code, _, err = run_countlens(capsys, "llm", "heads", "--model", str(folder), *SMALL, "--out", str(tmp_path / "o"))
    assert_one_line_error(code, err, "--model", "'mamba'", "hook-site registry")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_smollm2_masses_equal_output_attentions_and_ablation_equals_the_full_forward():
    """The embedded model (30 blocks, 9 heads, 3 key/value heads): the masses of two prompts equal
    ``output_attentions=True``, and two heads' cached ablation equals a full forward with the same edit."""
    import torch

    from countlens.llm.answers import candidate_token_ids
    from countlens.llm.capture.residuals import pad_token_id
    from countlens.llm.heads.attention import ablated_scores, eager_attention, head_masses
    from countlens.llm.heads.experiment import prompt_roles
    from countlens.llm.hooks import attention_output_site, hook_sites
    from countlens.llm.prompts import PromptSettings, build_prompts

    loaded = load_model("default", progress=False)
    model, tok = loaded.model, loaded.tokenizer
    settings = PromptSettings(L=8, counts=[3, 7], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    prompts = build_prompts(tok, settings)
    roles = prompt_roles(prompts, settings)
    site = attention_output_site(model.config.model_type)
    with torch.inference_mode():
        masses, means = head_masses(model, prompts, roles, site, pad_token_id(tok), batch_size=2)
    for i, (p, role) in enumerate(zip(prompts, roles, strict=True)):
        with eager_attention(model), torch.no_grad():
            att = model(input_ids=torch.tensor([p.ids]), output_attentions=True).attentions
        items = np.arange(p.first_item_index, p.last_item_index + 1)
        for b in (0, 15, 29):
            row = att[b][0, :, p.boundary_index].double().numpy()  # (H, T)
            np.testing.assert_allclose(masses[i, b, 0, :, 0], row[:, items[role]].sum(-1), atol=2e-5)
            np.testing.assert_allclose(masses[i, b, 0, :, 1], row[:, items[~role]].sum(-1), atol=2e-5)
    cands = [candidate_token_ids(tok, [p.n, p.n - 1]) for p in prompts]
    sites = hook_sites([12], 30, site)
    with torch.inference_mode():
        got, _ = ablated_scores(model, prompts, cands, sites, means, 9, pad_token_id(tok), batch_size=2)
    hd = means.shape[-1] // 9
    proj = model.model.layers[12].self_attn.o_proj
    for i, p in enumerate(prompts):
        for h in (0, 8):
            def hook(module, args, h=h, pos=p.boundary_index):
                z = args[0].clone()
                z[0, pos, h * hd:(h + 1) * hd] = torch.as_tensor(means[12, h * hd:(h + 1) * hd], dtype=z.dtype)
                return (z,)
            handle = proj.register_forward_pre_hook(hook)
            try:
                for k, cand in enumerate(cands[i]):
                    assert len(cand) == 1  # single-digit counts: one token each
                    with torch.no_grad():
                        logp = torch.log_softmax(model(input_ids=torch.tensor([p.ids + cand])).logits[0].double(), -1)
                    want = final_from_logp(logp, len(p.ids) - 1, cand, model)  # the count as the final answer
                    assert got[i, 0, h, k] == pytest.approx(want, abs=2e-4)
            finally:
                handle.remove()
