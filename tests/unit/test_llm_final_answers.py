"""Final answers (docs/definitions.md §2): a candidate count's probability is that of the model's final number
being that count, P(k) = p(k's tokens) × (1 − p(a token continuing the number)). Checked on a model built to
answer "10" with certainty in a vocabulary that splits digits (where scoring the tokens alone reads near 5),
against the tokenizers' own spelling of numbers, and on the candidates' total mass."""

import numpy as np
import pytest
import torch

from countlens.llm.answers import (
    answer_distribution,
    answer_prompts,
    candidate_logprobs,
    candidate_token_ids,
    number_continuations,
)
from countlens.llm.models import load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.llm_fixtures import smollm2_tokenizer  # noqa: F401
from tests.helpers.real_tokenizers import FAMILIES, real_tokenizer_dir
from tests.helpers.tiny_models import tiny_config


def _answers_ten(folder, tokenizer_dir, boundary_text: str):
    """A tiny Llama that writes "10" and then ends, whatever the prompt: attention and MLPs write nothing, so
    the residual at each position is its token's embedding; the unembedding maps the boundary token to "1",
    "1" to "0", and every other token to end-of-turn, each with a logit of about 40."""
    import shutil

    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    config = tiny_config("llama", len(tok), tok.bos_token_id or 0, tok.eos_token_id, tok.pad_token_id or 0)
    config.tie_word_embeddings = False
    model = AutoModelForCausalLM.from_config(config)
    boundary = tok(boundary_text, add_special_tokens=False)["input_ids"][-1]
    one, zero = (tok(d, add_special_tokens=False)["input_ids"][0] for d in "10")
    d = config.hidden_size
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        emb = model.get_input_embeddings().weight
        emb.zero_()
        emb[:, 3] = 5.0
        for token, axis in ((boundary, 0), (one, 1), (zero, 2)):
            emb[token] = 0.0
            emb[token, axis] = 5.0
        head = model.get_output_embeddings().weight
        head.zero_()
        head[one, 0] = head[zero, 1] = 10.0
        head[tok.eos_token_id, 2] = head[tok.eos_token_id, 3] = 10.0
    assert d >= 4
    model.save_pretrained(str(folder))
    for item in tokenizer_dir.iterdir():
        if item.is_file():
            shutil.copy2(item, folder / item.name)
    return folder


def test_a_model_that_answers_ten_has_expected_count_ten(smollm2_tokenizer, tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer))
    settings = PromptSettings(L=20, counts=[3, 10, 17], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    prompts = build_prompts(tok, settings)
    boundary = tok.decode(prompts[0].ids[-1:])
    loaded = load_model(str(_answers_ten(tmp_path / "ten", smollm2_tokenizer, boundary)), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    counts = list(range(0, 31))
    ids = candidate_token_ids(tok, counts)
    assert ids[1] == ids[10][:1]  # "1" begins "10": the tokenizer splits digits
    with torch.inference_mode():
        assert answer_prompts(model, tok, prompts, answer_tokens=4).answer == [10, 10, 10]
        logp = candidate_logprobs(model, tok, prompts, counts, batch_size=2)
        # the tokens alone, computed directly: "1" holds the mass of "10" (the old, first-answer read-out)
        first = torch.log_softmax(model(input_ids=torch.tensor([prompts[0].ids])).logits[0, -1].double(), -1)
        second = torch.log_softmax(model(input_ids=torch.tensor([prompts[0].ids + ids[1]])).logits[0, -1].double(), -1)
    tokens_alone = np.array([float(first[c[0]]) + sum(float(second[t]) for t in c[1:2]) if c[:1] == ids[1]
                             else float(first[c[0]]) for c in ids])
    assert answer_distribution(tokens_alone[None], counts).expected[0] < 6.0  # "1" and "10" share the mass
    dist = answer_distribution(logp, counts, [p.n for p in prompts])
    np.testing.assert_allclose(dist.expected, 10.0, atol=1e-3)
    assert dist.rank[1] == 1 and np.all(dist.p.argmax(axis=1) == counts.index(10))
    assert np.all(np.exp(logp).sum(axis=1) <= 1.0 + 1e-9)  # disjoint final answers
    np.testing.assert_allclose(np.exp(logp).sum(axis=1), 1.0, atol=1e-6)  # this model puts all its mass on 10


def test_continuations_are_the_digit_initial_tokens(smollm2_tokenizer):  # noqa: F811
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2_tokenizer))
    got = number_continuations(tok)
    assert sorted(tok.convert_ids_to_tokens(got.tolist())) == list("0123456789")  # SmolLM2 splits digits


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_continuations_follow_each_tokenizers_spelling(family):
    from transformers import AutoTokenizer

    folder = real_tokenizer_dir(family)
    if folder is None:
        pytest.skip("the real tokenizers are not cached (python -m tests.helpers.real_tokenizers)")
    tok = AutoTokenizer.from_pretrained(str(folder))
    got = set(number_continuations(tok).tolist())
    # every token after the first of a long number continues it; a number after a space starts a new one
    long = tok("1234567890987654321", add_special_tokens=False)["input_ids"]
    assert set(long[1:]) <= got
    # whatever holds the space before a number (" 7", "▁7", or a space token of its own) does not continue one
    spaced = [t for t in tok("x 7", add_special_tokens=False)["input_ids"]
              if tok.convert_ids_to_tokens(t)[:1] in (" ", "Ġ", "▁")]
    assert spaced and not set(spaced) & got
    letters = tok("abc", add_special_tokens=False)["input_ids"]
    assert not set(letters) & got
    for t in got:  # every member, written after "1", makes "1" followed by digits
        assert tok.decode(tok("1", add_special_tokens=False)["input_ids"] + [t])[:2].isdigit()
