"""Figure 9a's boundary patching and Figure 9b's steering on the boundary-step runner (countlens.llm.boundary):
each (prompt, cell) one row of a batched step from the prompt's shared cache, the candidates scored and the
greedy answer decoded from the step's cache, equals the whole prompt pass per cell (``scored_answers``, the
runner before issue 46): the same answer texts, the candidates' log-probabilities within 1e-10 nats in float64
and 1e-5 in float32 (bfloat16 and float16 to their tolerance), on tiny random models of several families
(sliding-window layers included); and the decode steps after a boundary step read what a whole forward of the
prompt and the generated tokens reads (the rows' own later tokens beyond the shared prefix, past a sliding
window too)."""

import numpy as np
import pytest
import torch

from countlens.llm.answers import cached_forward, greedy_tokens, stop_token_ids
from countlens.llm.boundary import PrefixBatch, boundary_scored_answers, shared_cache_rows
from countlens.llm.capture.residuals import find_blocks, pad_token_id
from countlens.llm.models import load_model
from countlens.llm.patching.edits import scored_answers
from countlens.llm.patching.experiment import boundary_vectors
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer  # noqa: F401
from tests.unit.test_boundary_step import HALF_TOLERANCE, pairs

FAMILIES = ("llama-3", "qwen2", "gemma-2", "gpt-2", "phi-3", "olmo-2")
COUNTS = [0, 1, 2, 3, 4, 5, 6, 10, 12]  # 10 and 12: two tokens each in SmolLM2's vocabulary


def edits_of(model, tok, prompts, twins):
    """Per cell the edits of every prompt (cell-major, one per prompt): the twins' boundary vectors patched at
    three locations (Figure 9a), then a step added at one location (Figure 9b), two sizes."""
    L = len(find_blocks(model))
    locs = [0, L // 2, L]
    vectors = boundary_vectors(model, tok, twins, locs, batch_size=1)  # (P, locs, d) float32
    g = np.random.default_rng(0)
    step = g.standard_normal(vectors.shape[-1]) * float(vectors[:, 1].norm(dim=-1).mean())
    edits = [(loc, "replace", vectors[i, j]) for j, loc in enumerate(locs) for i in range(len(prompts))]
    edits += [(1, "add", delta * step) for delta in (0.5, 2.0) for _ in prompts]
    return edits


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("family", FAMILIES)
def test_patching_and_steering_from_the_boundary_step_are_the_whole_prompt_passes(family_model, family, dtype):  # noqa: F811
    loaded = load_model(str(family_model(family)), progress=False)
    model, tok = loaded.model.to(dtype), loaded.tokenizer
    template = "plain" if family == "gpt-2" else "chat"
    prompts, twins, _ = pairs(tok, family)
    batch = 1 if family.startswith("gemma") else 2  # gemma's left padding: NaN in any batched forward
    with torch.inference_mode():
        edits = edits_of(model, tok, prompts, twins)
        C = len(edits) // len(prompts)
        clean = scored_answers(model, tok, prompts, COUNTS, template, batch, answer_tokens=6)
        whole = scored_answers(model, tok, prompts * C, COUNTS, template, batch, 6, edits)
        got = boundary_scored_answers(model, tok, prompts, COUNTS, [None] * len(prompts) + edits, template, batch, 6,
                                      step_rows=5)  # steps of 5 rows: a prompt's cells split across steps
    P = len(prompts)
    atol = 1e-10 if dtype == torch.float64 else 1e-5  # float64: what is left is the order of the sums
    for want, mine in ((clean, got.take(range(P))), (whole, got.take(range(P, len(got.answer_text))))):
        assert mine.answer_text == want.answer_text and mine.answer == want.answer
        np.testing.assert_allclose(mine.candidate_logprobs, want.candidate_logprobs, rtol=0, atol=atol)
        np.testing.assert_allclose(mine.answer_logprob, want.answer_logprob, rtol=0, atol=atol)
    # the edits move the scores, and the answers are several tokens long (the decode steps ran)
    assert np.abs(whole.candidate_logprobs - np.tile(clean.candidate_logprobs, (C, 1))).max() > 1e-3
    assert max(len(tok(t, add_special_tokens=False)["input_ids"]) for t in got.answer_text) >= 3


@pytest.mark.parametrize("family", ["llama-3", "gemma-2", "gpt-2"])
def test_decode_steps_from_shared_rows_read_what_a_whole_forward_reads(family_model, family):  # noqa: F811
    """Three rows of one prompt share its prefix cache; each is fed its own tokens for 20 decode steps (past
    gemma-2's sliding window of 16: the shared part slides out): every step's logits equal those of one
    forward of the prompt and the row's tokens, and the prefix cache is left as it was."""
    loaded = load_model(str(family_model(family)), progress=False)
    model, tok = loaded.model.double(), loaded.tokenizer
    [prompt, _], _, _ = pairs(tok, family)
    g = torch.Generator().manual_seed(0)
    feeds = torch.randint(0, model.config.vocab_size, (3, 20), generator=g)
    with torch.inference_mode():
        batch = PrefixBatch(model, [prompt], pad_token_id(tok))
        before = [layer.keys.clone() for layer in batch.cache.layers]
        cache = shared_cache_rows(batch.cache, torch.tensor([0, 0, 0]), model)
        mask, last = batch.mask[[0, 0, 0]], batch.positions[[0, 0, 0], -1:]
        logits, cache = cached_forward(model, batch.ids[[0, 0, 0], -1:], mask, last, cache)
        steps = [logits]
        for k in range(feeds.shape[1]):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            logits, cache = cached_forward(model, feeds[:, k:k + 1], mask, last + k + 1, cache)
            steps.append(logits)
        ids = torch.cat([torch.tensor([prompt.ids] * 3), feeds], dim=1)
        full = model(input_ids=ids).logits.double()
        T = len(prompt.ids)
        for k, step in enumerate(steps):
            torch.testing.assert_close(step.double(), full[:, T - 1 + k], rtol=0, atol=1e-5)  # float32 logits
        for layer, keys in zip(batch.cache.layers, before, strict=True):
            assert torch.equal(layer.keys, keys)


def test_the_one_decode_loop_stops_rows_at_their_stop_token(family_model):  # noqa: F811
    """``greedy_tokens`` after a boundary step: a row whose greedy token is a stop id ends there (nothing
    appended), the others run to ``answer_tokens``."""
    loaded = load_model(str(family_model("llama-3")), progress=False)
    model, tok = loaded.model.double(), loaded.tokenizer
    [prompt, _], _, _ = pairs(tok, "llama-3")
    with torch.inference_mode():
        batch = PrefixBatch(model, [prompt], pad_token_id(tok))
        logits, cache, mask, last = batch.boundary([0, 0])
        first = int(torch.argmax(logits[0]))
        free = greedy_tokens(model, logits, cache, mask, last, stop_token_ids(model, tok), 4, batch.pad_id)
        logits, cache, mask, last = batch.boundary([0, 0])
        stopped = greedy_tokens(model, logits, cache, mask, last, {first}, 4, batch.pad_id)
    assert len(free[0]) == 4 and free[0][0] == first
    assert stopped == [[], []]


def test_the_source_pass_is_the_capture_and_the_candidates_of_two_passes(family_model):  # noqa: F811
    """Figure 9a's sources in one pass (``source_pass``: the capture's hooks during the candidates' prompt pass)
    give what the capture pass and the candidates' pass gave apart, bit for bit."""
    from countlens.llm.answers import candidate_logprobs
    from countlens.llm.patching.experiment import source_pass

    loaded = load_model(str(family_model("llama-3")), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    prompts, _, _ = pairs(tok, "llama-3")
    with torch.inference_mode():
        vectors, lp = source_pass(model, tok, prompts, [0, 1, 2], COUNTS, "chat", batch_size=2)
        want_v = boundary_vectors(model, tok, prompts, [0, 1, 2], batch_size=2)
        want_lp = candidate_logprobs(model, tok, prompts, COUNTS, "chat", batch_size=2)
    assert torch.equal(vectors, want_v) and np.array_equal(lp, want_lp)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("family", ["llama-3", "qwen2", "gemma-2"])
def test_boundary_answers_in_half_precision_are_the_whole_prompt_passes_to_the_dtypes_tolerance(
        family_model, family, dtype):  # noqa: F811
    """``--dtype bfloat16/float16`` through the decode path too: the boundary step's candidates and greedy answers
    (the rows' decode steps from the shared cache) against the whole prompt pass per cell in the same dtype.
    The candidates agree within a few of the dtype's ulps (the two run the same arithmetic in other shapes and
    orders; on these models they come out equal), and the greedy answers are the same tokens."""
    loaded = load_model(str(family_model(family)), progress=False)
    model, tok = loaded.model.to(dtype), loaded.tokenizer
    prompts, twins, _ = pairs(tok, family)
    batch = 1 if family.startswith("gemma") else 2
    with torch.inference_mode():
        edits = edits_of(model, tok, prompts, twins)
        C = len(edits) // len(prompts)
        whole = scored_answers(model, tok, prompts * C, COUNTS, "chat", batch, 6, edits)
        got = boundary_scored_answers(model, tok, prompts, COUNTS, edits, "chat", batch, 6, step_rows=5)
    tol = HALF_TOLERANCE[dtype]
    assert np.isfinite(got.candidate_logprobs).all() and np.isfinite(got.answer_logprob).all()
    np.testing.assert_allclose(got.candidate_logprobs, whole.candidate_logprobs, rtol=0, atol=tol)
    np.testing.assert_allclose(got.answer_logprob, whole.answer_logprob, rtol=0, atol=tol)
    assert got.answer_text == whole.answer_text and got.answer == whole.answer
    assert min(len(tok(t, add_special_tokens=False)["input_ids"]) for t in got.answer_text) >= 3  # decode steps ran
    assert np.ptp(whole.candidate_logprobs, axis=0).max() > 10 * tol  # the edits move the scores past the tolerance
