"""Teacher-forced candidate answers, the one mechanism every answer read-out uses: scored from one prompt
pass's KV cache against a direct computation (prompt and candidate fed whole, no cache), in vocabularies that
split numbers into digits and in ones that do not; the distribution's expected count and rank; the normalised
logit difference."""

import numpy as np
import pytest
import torch

from countlens.llm import answers
from countlens.llm.answers import (
    _feeds,
    answer_distribution,
    candidate_logprobs,
    candidate_token_ids,
    normalised_ld,
    score_candidates,
)
from countlens.llm.capture.residuals import pad_batch, pad_token_id
from countlens.llm.models import load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.final_answers import final_logprob
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer  # noqa: F401

COUNTS = list(range(0, 23))  # one-digit and two-digit answers, and "1" a prefix of "10".."19"


def _direct(model, prompt_ids: list[int], candidate: list[int], tok) -> float:
    """log P(candidate as the final answer | prompt) from one unpadded forward, no cache."""
    return final_logprob(model, prompt_ids, candidate, answers.number_continuations(tok))


def test_feeds_cover_every_candidate_with_the_fewest_sequences():
    feeds, where = _feeds([[5], [1], [1, 0], [1, 2], [1, 0, 0], [7, 3]])
    assert feeds == [(1, 0, 0), (1, 2), (5,), (7, 3)]
    assert where == [2, 0, 0, 1, 0, 3]  # "1" and "10" read their tokens and what follows from the feed "1 0 0"


@pytest.mark.parametrize("family", ["llama-3", "gemma-2", "gemma-3", "gpt-2", "gpt-neox", "mistral", "olmo-2",
                                    "phi-3", "qwen3"])
def test_scores_from_the_cache_equal_a_direct_computation(family_model, family):  # noqa: F811
    loaded = load_model(str(family_model(family)), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    template = "plain" if family == "gpt-2" else "chat"
    prompts = build_prompts(tok, PromptSettings(L=12, counts=[0, 4, 9], pairs=[["a", "b"]], configs=["count"],
                                                seeds=[0], template=template))
    candidates = candidate_token_ids(tok, COUNTS, template)
    assert any(len(c) > 1 for c in candidates)  # the test covers multi-token answers
    with torch.inference_mode():
        got = candidate_logprobs(model, tok, prompts, COUNTS, template, batch_size=2)
        want = np.array([[_direct(model, p.ids, c, tok) for c in candidates] for p in prompts])
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=0)
    if len(_feeds(candidates)[0]) > 1:  # a row's feeds packed into one sequence under the block mask, except
        # where the prompt and its feeds outgrow a sliding attention window (the tiny Gemma-2's is short)
        fits = answers._within_window(model, max(len(p.ids) for p in prompts) + 4)
        assert answers._PACKS.get(model) is (True if fits else None)


@pytest.mark.parametrize("failure", ["refused", "ignored"])
def test_models_without_custom_masks_fall_back_to_one_feed_per_sequence(family_model, monkeypatch, failure):  # noqa: F811
    loaded = load_model(str(family_model("qwen3")), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, PromptSettings(L=12, counts=[2, 7], pairs=[["a", "b"]], configs=["count"],
                                                seeds=[0]))
    candidates = candidate_token_ids(tok, COUNTS)
    assert len(_feeds(candidates)[0]) > 1
    packed = answers._score_packed

    def broken(model, cache, attention_mask, last_pos, rows, out, ends):
        if failure == "refused":
            raise RuntimeError("this attention implementation takes no 4D mask")
        packed(model, cache, attention_mask, last_pos, rows, out, ends)
        out[rows[0][0]] += 1.0  # as if every feed had seen the others
    monkeypatch.setattr(answers, "_score_packed", broken)
    answers._PACKS.pop(model, None)
    with torch.inference_mode():
        got = candidate_logprobs(model, tok, prompts, COUNTS, batch_size=2)
        want = np.array([[_direct(model, p.ids, c, tok) for c in candidates] for p in prompts])
    assert answers._PACKS[model] is False
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=0)


def test_per_row_candidates_and_the_cache_left_unchanged(family_model):  # noqa: F811
    loaded = load_model(str(family_model("llama-3")), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, PromptSettings(L=12, counts=[3, 11], pairs=[["a", "b"]], configs=["count"],
                                                seeds=[0]))
    ids, mask, _ = pad_batch(prompts, pad_token_id(tok), "left")
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        cache = out.past_key_values
        before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
        rows = [[candidate_token_ids(tok, [p.n])[0], candidate_token_ids(tok, [p.n - 1])[0]] for p in prompts]
        got = score_candidates(model, out.logits[:, -1], cache, mask, positions[:, -1:], rows)
        want = np.array([[_direct(model, p.ids, c, tok) for c in r] for p, r in zip(prompts, rows, strict=True)])
    np.testing.assert_allclose(got, want, atol=2e-4, rtol=0)
    for (k, v), layer in zip(before, cache.layers, strict=True):  # the prompt's cache can still be decoded from
        assert torch.equal(k, layer.keys) and torch.equal(v, layer.values)


def test_distribution_expected_count_and_rank():
    logprobs = np.log(np.array([[0.1, 0.6, 0.3], [0.2, 0.2, 0.6]]))
    dist = answer_distribution(logprobs, [2, 3, 4], correct=[4, 3])
    np.testing.assert_allclose(dist.p.sum(axis=1), 1.0)
    np.testing.assert_allclose(dist.expected, [0.1 * 2 + 0.6 * 3 + 0.3 * 4, 0.2 * 2 + 0.2 * 3 + 0.6 * 4])
    assert dist.rank.tolist() == [2, 2]  # a tie with the correct count counts in its favour
    assert answer_distribution(logprobs, [2, 3, 4], correct=[9, 2]).rank.tolist() == [-1, 2]
    # normalising over the candidates: an unnormalised (log-probabilities not summing to one) row gives the same
    np.testing.assert_allclose(answer_distribution(logprobs - 3.0, [2, 3, 4]).p, dist.p)


def test_normalised_ld_reports_pairs_too_close_to_normalise():
    got = normalised_ld(np.array([1.0, 0.5, 0.2]), np.array([2.0, 1.0, 0.21]), np.array([0.0, 0.0, 0.2]))
    assert got[0] == 0.5 and got[1] == 0.5 and np.isnan(got[2])
