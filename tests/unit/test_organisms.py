"""Model organisms (countlens.llm.organisms): a tiny organism trained once per session, loaded as any Hugging
Face model; countlens's greedy answers against ``generate``; the planted zeros; resuming; refusals."""

from __future__ import annotations

import numpy as np
import pytest

from countlens.core.errors import ConfigError, UsageError
from countlens.llm.organisms import train as T
from countlens.llm.organisms.experiment import (
    CHECKPOINT,
    OrganismConfig,
    OrganismResult,
    answerable,
    held_out_correct,
    parse_live_heads,
    plan_organism,
    run_organism,
)

# L = 3 with one live head of two, MLPs: ~150 steps of a width-16 model (seconds).
TINY = dict(L=3, layers=1, heads=2, width=16, live_heads=[[0, 1]], pairs=[["a", "b"]], configs=["count", "tally"],
            lr=1e-2, batch_size=16, max_steps=400, eval_every=20)


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    """(folder, result) of the tiny organism, trained once (and kept in a cache of its own, ``CACHE``)."""
    from countlens.core.threads import torch_threads

    folder = tmp_path_factory.mktemp("organism") / "tiny"
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        mp.setenv("COUNTLENS_CACHE", str(cache))
        result = run_organism(OrganismConfig(**TINY), out=folder, reuse=True)
    CACHE.append(cache)
    return folder, result


CACHE: list = []


@pytest.fixture(scope="module")
def loaded(organism):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, _ = organism
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(folder))


def test_the_tiny_organism_trains_to_the_target_and_says_so(organism):
    folder, result = organism
    assert result.converged and result.held_out_accuracy >= 0.99
    assert [r["n"] for r in result.held_out] == [0, 1, 2, 3]
    assert sum(r["prompts"] for r in result.held_out) == 4 * 1 * 2 * 2  # counts x pairs x wordings x seeds
    assert result.curve and result.curve[-1]["step"] == result.steps
    assert OrganismResult.read(folder).to_dict() == result.to_dict()
    assert not (folder / CHECKPOINT).exists()  # a finished organism keeps no checkpoint


def test_it_loads_as_a_stock_llama_with_the_chat_template(organism, loaded):
    model, tok = loaded
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 1 and model.config.num_attention_heads == 2
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == tok.eos_token_id


def test_countlens_greedy_answers_equal_generate_and_the_recorded_accuracy(organism, loaded):
    import torch

    from countlens.llm.answers import answer_prompts

    folder, result = organism
    model, tok = loaded
    plan = plan_organism(OrganismConfig(**TINY), folder.parent / "unused")
    generated = []
    with torch.inference_mode():
        answers = answer_prompts(model, tok, plan.held_out, batch_size=5)
        for p in plan.held_out:
            out = model.generate(torch.tensor([p.ids]), max_new_tokens=16, do_sample=False)
            generated.append(tok.decode(out[0, len(p.ids):], skip_special_tokens=True))
    assert answers.answer_text == generated
    right = np.array([a == p.n for a, p in zip(answers.answer, plan.held_out, strict=True)])
    assert right.mean() == pytest.approx(result.held_out_accuracy)
    # The training loop's one-forward accuracy is greedy decoding's.
    assert (held_out_correct(model, plan) == right).all()


def test_dead_heads_write_exactly_zero_and_live_ones_do_not(loaded):
    model, _ = loaded
    o = model.model.layers[0].self_attn.o_proj.weight.detach().numpy()  # (d, heads * head_dim)
    assert (o[:, 0:8] == 0).all()  # head 0.0 is dead
    assert np.abs(o[:, 8:16]).min(axis=0).max() > 0 and np.linalg.norm(o[:, 8:16]) > 0.1


def test_attention_only_keeps_every_mlp_weight_zero_through_training(tmp_path):
    config = OrganismConfig(**{**TINY, "attention_only": True, "max_steps": 6, "eval_every": 3})
    result = run_organism(config, out=tmp_path / "a")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "a"))
    assert result.mlp_width == 0 and model.config.intermediate_size == 1
    for name in T.MLP_MODULES:
        assert (getattr(model.model.layers[0].mlp, name).weight == 0).all()
    assert (model.model.layers[0].self_attn.o_proj.weight[:, 0:8] == 0).all()


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path):
    from safetensors.numpy import load_file

    short = OrganismConfig(**{**TINY, "max_steps": 8, "eval_every": 4, "target_accuracy": 1.0})
    straight = run_organism(short, out=tmp_path / "straight")
    first = run_organism(OrganismConfig(**{**TINY, "max_steps": 4, "eval_every": 4, "target_accuracy": 1.0}),
                         out=tmp_path / "resumed")
    assert first.steps == 4 and (tmp_path / "resumed" / CHECKPOINT).is_file()
    resumed = run_organism(short, out=tmp_path / "resumed")
    assert resumed.steps == straight.steps == 8
    assert [c["step"] for c in resumed.curve] == [4, 8]
    a, b = (load_file(str(tmp_path / f / "model.safetensors")) for f in ("straight", "resumed"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    # A finished folder with the same settings is reused as it is.
    again = run_organism(short, out=tmp_path / "resumed")
    assert again.to_dict() == resumed.to_dict()


def test_live_heads_parse_and_are_checked_against_the_shape():
    assert parse_live_heads("0.1,1.3") == [[0, 1], [1, 3]] and parse_live_heads(None) is None
    with pytest.raises(ConfigError, match="block.head"):
        parse_live_heads("0-1")
    with pytest.raises(ConfigError) as err:
        OrganismConfig(layers=2, heads=4, live_heads=[[2, 0]])
    assert err.value.field == "live_heads"
    with pytest.raises(ConfigError) as err:
        OrganismConfig(heads=4, live_heads=[[0, 4]])
    assert err.value.field == "live_heads"


def test_width_must_divide_into_even_heads():
    with pytest.raises(ConfigError) as err:
        OrganismConfig(width=30, heads=4)
    assert err.value.field == "width"
    with pytest.raises(ConfigError) as err:
        OrganismConfig(width=12, heads=4)  # head size 3: rotary positions need it even
    assert err.value.field == "width"


def test_an_answer_the_tokenizer_cannot_write_is_refused():
    class Digits:  # writes 0..9 as one token each and has no token for a two-digit count's "1" + "0"
        eos_token_id = 99

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [int(text)] if len(text) == 1 else [0]}

        def decode(self, ids):
            return "".join(str(i) for i in ids)

    answerable(Digits(), 9)
    with pytest.raises(ConfigError) as err:
        answerable(Digits(), 12)
    assert err.value.field == "L" and "count 10" in str(err.value)


def test_a_folder_holding_something_else_is_refused_and_left_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="something other than an organism"):
        plan_organism(OrganismConfig(**TINY), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_organism_with_other_settings_is_refused(organism):
    folder, _ = organism
    with pytest.raises(UsageError, match="other settings"):
        plan_organism(OrganismConfig(**{**TINY, "seed": 1}), folder)


def test_every_ground_truth_check_passes_on_the_organism(organism):
    from countlens.llm.organisms.checks import ZERO, check_organism

    folder, _ = organism
    result = check_organism(folder)
    by_name = {c["name"]: c for c in result.checks}
    assert set(by_name) == {"answers", "dead heads", "dead heads alike", "live heads first", "DLA dead heads",
                            "DLA live heads first", "boundary patching", "probe after the live heads",
                            "probe before the live heads"}
    assert result.failed() == [], result.checks
    assert by_name["dead heads"]["value"] <= ZERO and by_name["live heads first"]["value"] == [[0, 1]]
    assert by_name["DLA dead heads"]["value"] <= ZERO and by_name["DLA live heads first"]["value"] == [[0, 1]]


def test_the_head_checks_fail_where_the_circuit_is_not_what_is_claimed(organism, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.checks import components_checks, heads_checks
    from countlens.llm.organisms.experiment import HELD_OUT_SEED, read_organism

    folder, _ = organism
    claimed = read_organism(folder)
    claimed.live_heads = [[0, 0]]  # the zeroed head claimed live: it cannot rank first
    spec = ModelSpec(model=str(folder))
    checks = {c["name"]: c for c in heads_checks(spec, claimed, spec.load(False), [HELD_OUT_SEED])}
    assert not checks["live heads first"]["passed"]
    # A "dead" head that writes after all: its ablation moves the logit difference.
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    weights = load_file(str(broken / "model.safetensors"))
    key = "model.layers.0.self_attn.o_proj.weight"
    weights[key][:, 0:8] = weights[key][:, 8:16]
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    spec = ModelSpec(model=str(broken))
    checks = {c["name"]: c for c in heads_checks(spec, read_organism(broken), spec.load(False), [HELD_OUT_SEED])}
    assert not checks["dead heads"]["passed"] and checks["dead heads"]["value"] > 1e-3
    # ... and its direct logit attribution is no longer zero
    checks = {c["name"]: c for c in components_checks(spec, read_organism(broken), spec.load(False), [HELD_OUT_SEED])}
    assert not checks["DLA dead heads"]["passed"] and checks["DLA dead heads"]["value"] > 1e-3


def test_a_finished_organism_is_reused_from_the_cache(organism, tmp_path, monkeypatch):
    from countlens.llm.organisms.experiment import cached_folder

    folder, result = organism
    monkeypatch.setenv("COUNTLENS_CACHE", str(CACHE[0]))
    assert (cached_folder(OrganismConfig(**TINY)) / "model.safetensors").read_bytes() == \
        (folder / "model.safetensors").read_bytes()
    again = run_organism(OrganismConfig(**TINY), out=tmp_path / "copy", reuse=True)
    assert again.steps == result.steps and again.held_out == result.held_out and again.folder == str(tmp_path / "copy")
    assert (tmp_path / "copy" / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    # Other settings are not served the cached organism.
    other = run_organism(OrganismConfig(**{**TINY, "seed": 5, "max_steps": 2, "eval_every": 2}), out=tmp_path / "o",
                         reuse=True)
    assert other.steps == 2 and not other.converged
