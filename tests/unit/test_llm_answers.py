"""The model's own answers: the parse rule on real-looking outputs, greedy answers from the KV cache against
``model.generate``, and the teacher-forced log-probability against a direct computation from logits."""

import numpy as np
import pytest
import torch

from countlens.core.store import read_meta
from countlens.llm.answers import (
    answer_batch,
    answer_prompts,
    answer_string,
    answer_token_ids,
    parse_answer,
    stop_token_ids,
)
from countlens.llm.capture.residuals import pad_batch
from countlens.llm.models import load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer, tiny_model_dir, tiny_models  # noqa: F401

PARSE_TABLE = [
    ("42", 42), (" 42.", 42), ("The answer is 42", 42), ("42\n", 42), ("**42**", 42), ("Count: 7 items", 7),
    ("0", 0), ("007", 7), ("-3", -3),
    ("forty-two", None), ("4 2", None), ("", None), ("   ", None), ("1,000", None), ("4.5", None),
    ("between 3 and 5", None), ("The letter a appears", None), ("٤٢", None),
    ("1111111111111", 1111111111111), ("1" * 19, None),  # a digit repeated until the token budget ends
]


@pytest.mark.parametrize(("text", "expected"), PARSE_TABLE)
def test_parse_rule_on_real_looking_outputs(text, expected):
    assert parse_answer(text) == expected


def test_answer_string_follows_the_template():
    assert answer_string(42) == "42" and answer_string(42, "plain") == " 42"


@pytest.fixture(scope="module")
def settings():
    return PromptSettings(L=20, counts=[0, 3, 12, 20], pairs=[["a", "b"], ["cat", "dog"]], configs=["count"],
                          seeds=[0])


def _generate(model, ids, max_new, stop):
    """Greedy ``generate`` on one unpadded prompt; the new ids up to (not including) the first stop id."""
    out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                         max_new_tokens=max_new, do_sample=False, pad_token_id=0)[0, len(ids):].tolist()
    for i, t in enumerate(out):
        if t in stop:
            return out[:i]
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_greedy_answers_equal_generate(tiny_models, settings, arch):  # noqa: F811
    loaded = load_model(str(tiny_models[arch]), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, settings)
    assert len({p.n_tokens for p in prompts}) > 2  # the batch really is padded
    stop = stop_token_ids(model, tok)
    with torch.inference_mode():
        got = answer_prompts(model, tok, prompts, batch_size=8, answer_tokens=6)
        for p, text, answer in zip(prompts, got.answer_text, got.answer, strict=True):
            want = tok.decode(_generate(model, p.ids, 6, stop), skip_special_tokens=True)
            assert text == want
            assert answer == parse_answer(want)


def test_stop_token_ends_the_answer(tiny_models, settings):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    p = build_prompts(tok, settings)[0]
    ids, mask, _ = pad_batch([p], 0, "left")
    with torch.inference_mode():
        first = int(torch.argmax(model(ids).logits[0, -1]))
        out = answer_batch(model, ids, mask, [[5]], {first}, answer_tokens=4)
    assert out.tokens == [[]]


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_logprob_equals_direct_computation(tiny_models, settings, arch):  # noqa: F811
    loaded = load_model(str(tiny_models[arch]), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, settings)
    assert {len(answer_token_ids(tok, p.n)) for p in prompts} == {1, 2}  # one- and two-token answers mixed
    with torch.inference_mode():
        got = answer_prompts(model, tok, prompts, batch_size=8, answer_tokens=1)
        for p, logprob in zip(prompts, got.answer_logprob, strict=True):
            want = _direct_logprob(model, tok, p.ids, answer_token_ids(tok, p.n))  # the count as the final answer
            assert logprob == pytest.approx(want, abs=1e-4)
    assert np.all(np.asarray(got.answer_logprob) < 0)


def test_capture_with_answers_stores_the_same_answers_and_vectors(tiny_model_dir, tmp_path):  # noqa: F811
    from countlens.core.store import acts_array, load_capture
    from countlens.llm import CaptureConfig, run_capture

    base = dict(model=str(tiny_model_dir), L=20, counts=[0, 3, 12, 20], pairs=[["a", "b"]], configs=["count"],
                seeds=[0], batch_size=3)
    with_answers = load_capture(run_capture(CaptureConfig().with_options(**base, answers=True, answer_tokens=5), tmp_path / "a",
                                            progress=False).folder)
    plain = load_capture(run_capture(CaptureConfig().with_options(**base), tmp_path / "p", progress=False).folder)
    assert acts_array(with_answers).shape == acts_array(plain).shape
    np.testing.assert_allclose(acts_array(with_answers), acts_array(plain), atol=1e-5, rtol=0)
    loaded = load_model(str(tiny_model_dir), progress=False)
    prompts = build_prompts(loaded.tokenizer, CaptureConfig().with_options(**base).prompts)
    order = {p.prompt: p for p in prompts}
    rows = [order[t] for t in with_answers["prompt"]]
    with torch.inference_mode():
        want = answer_prompts(loaded.model, loaded.tokenizer, rows, answer_tokens=5)
    assert with_answers["answer_text"] == want.answer_text
    assert with_answers["answer"] == want.answer
    np.testing.assert_allclose(with_answers["answer_logprob"], want.answer_logprob, atol=1e-4)
    assert "answer" not in plain.column_names


def test_answers_refused_without_a_generation_prompt(tiny_model_dir, tmp_path):  # noqa: F811
    import shutil

    from countlens.core.errors import ConfigError
    from countlens.llm import CaptureConfig, run_capture

    model = tmp_path / "no-generation-prompt"
    shutil.copytree(tiny_model_dir, model)
    (model / "chat_template.jinja").write_text("{% for message in messages %}{{ message['content'] }}\n"
                                               "{% endfor %}")
    config = CaptureConfig().with_options(model=str(model), L=10, counts=[1, 2], pairs=[["a", "b"]],
                                          configs=["count"], seeds=[0], answers=True)
    with pytest.raises(ConfigError, match='generation prompt.*pass template="plain"') as caught:
        run_capture(config, tmp_path / "out", progress=False)
    assert caught.value.field == "template"
    assert not (tmp_path / "out").exists()


def test_random_init_capture_is_seeded_and_differs_from_the_model(tiny_model_dir, tmp_path):  # noqa: F811
    from countlens.core.store import acts_array, load_capture
    from countlens.llm import CaptureConfig, run_capture

    base = dict(model=str(tiny_model_dir), L=10, counts=[1, 5], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    runs = {name: run_capture(CaptureConfig().with_options(**base, **extra), tmp_path / name, progress=False)
            for name, extra in [("model", {}), ("r0", {"random_init": True}), ("r0b", {"random_init": True}),
                                ("r1", {"random_init": True, "init_seed": 1})]}
    acts = {name: acts_array(load_capture(r.folder)) for name, r in runs.items()}
    assert "random init, seed 0" in runs["r0"].meta.model_id
    assert np.array_equal(acts["r0"], acts["r0b"])
    assert not np.allclose(acts["r0"], acts["r1"]) and not np.allclose(acts["r0"], acts["model"])


def test_a_long_parsed_answer_is_stored_whole(tmp_path):
    """Regression: SmolLM2 answered "1111111111111" in `make demo`, which the int32 answer column refused."""
    from countlens.core.store import ActivationWriter, column, load_capture

    writer = ActivationWriter(tmp_path / "cap", {"locations": ["embed"], "d": 2, "settings": {}})
    texts = ["1111111111111", "7", "no idea"]
    writer.write_shard(0, {"acts": np.zeros((3, 1, 2)), "n": [1, 7, 2], "m": [0, 0, 0], "pair": ["a/b"] * 3,
                           "config": ["count"] * 3, "seed": [0] * 3, "prompt": [""] * 3,
                           "boundary_index": [0] * 3, "n_tokens": [1] * 3, "answer_text": texts,
                           "answer": [parse_answer(t) for t in texts], "answer_logprob": [-1.0, -0.5, -2.0]})
    writer.finish({"n_rows": 3})
    ds = load_capture(tmp_path / "cap")
    assert ds["answer"] == [1111111111111, 7, None] and column(ds, "answer_logprob").tolist() == [-1.0, -0.5, -2.0]


# ----------------------------------------------------------------------------- the answer as a distribution

def _direct_logprob(model, tok, prompt_ids: list[int], candidate: list[int]) -> float:
    """log P(candidate as the final answer | prompt): the prompt and the candidate fed whole in one unpadded
    forward, no cache (:func:`tests.helpers.final_answers.final_logprob`)."""
    from countlens.llm.answers import number_continuations
    from tests.helpers.final_answers import final_logprob

    return final_logprob(model, prompt_ids, candidate, number_continuations(tok))


def _whole_number_model(folder, out):
    """The model of ``folder`` with a vocabulary where 10..19 are one token each (as in vocabularies that do
    not split numbers into digits): tokens added, embeddings resized."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    tok.add_tokens([str(k) for k in range(10, 20)])
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    torch.manual_seed(0)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    model.save_pretrained(str(out))
    tok.save_pretrained(str(out))
    return out


@pytest.mark.parametrize("family", ["llama-3", "gpt-2", "whole-numbers"])
def test_capture_distribution_equals_direct_teacher_forcing(family_model, family, tmp_path):  # noqa: F811
    """Every candidate's log-probability in the capture equals a direct computation per candidate (no
    cache), in vocabularies that split numbers into digits (llama-3 style; GPT-2 after "Answer:", where
    " 12" is " 1" "2") and in one that does not; the expected count and rank follow from them; the correct answer's
    log-probability is its candidate's."""
    from countlens.core.store import load_capture
    from countlens.llm import CaptureConfig, plan_capture, run_capture
    from countlens.llm.answers import answer_distribution, candidate_logprobs, candidate_token_ids

    folder = (_whole_number_model(family_model("llama-3"), tmp_path / "whole") if family == "whole-numbers"
              else family_model(family))
    template = "plain" if family == "gpt-2" else "chat"
    config = CaptureConfig().with_options(model=str(folder), L=14, counts=[2, 5, 11, 14], pairs=[["a", "b"]],
                                          configs=["count"], seeds=[0], batch_size=3, answers=True,
                                          answer_tokens=2, template=template)
    ds = load_capture(run_capture(config, tmp_path / "cap", progress=False).folder)
    candidates = list(range(2, 15))
    assert read_meta(tmp_path / "cap")["answer_candidates"] == candidates
    loaded = load_model(str(folder), progress=False)
    model, tok = loaded.model, loaded.tokenizer
    ids = candidate_token_ids(tok, candidates, template)
    lengths = {len(c) for c in ids}
    assert lengths == {1} if family == "whole-numbers" else max(lengths) > 1  # "12" one token, or "1" "2"
    got = np.asarray(ds["answer_logprobs"])
    n = np.asarray(ds["n"])
    with torch.inference_mode():
        for row in range(len(ds)):
            prompt = tok(ds[row]["prompt"], add_special_tokens=template == "plain")["input_ids"]
            want = [_direct_logprob(model, tok, prompt, c) for c in ids]
            np.testing.assert_allclose(got[row], want, atol=2e-4, rtol=0)
    p = np.exp(got - got.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(ds["answer_expected"], p @ np.array(candidates), atol=1e-9)
    correct = got[np.arange(len(n)), n - 2]
    assert ds["answer_rank"] == (1 + (got > correct[:, None]).sum(axis=1)).tolist()
    np.testing.assert_array_equal(ds["answer_logprob"], correct)
    # the function API gives the same distribution for the same prompts
    plan_prompts = {p.prompt: p for p in plan_capture(config, progress=False).prompts}
    rows = [plan_prompts[t] for t in ds["prompt"]]
    with torch.inference_mode():
        api = candidate_logprobs(model, tok, rows, candidates, template, batch_size=3)
    np.testing.assert_allclose(api, got, atol=1e-4, rtol=0)
    dist = answer_distribution(api, candidates, [r.n for r in rows])
    np.testing.assert_allclose(dist.expected, ds["answer_expected"], atol=1e-4)


def test_candidates_beyond_the_context_are_refused_before_the_weights_load(tiny_model_dir, tmp_path):  # noqa: F811
    import json
    import shutil

    from countlens.core.errors import ConfigError
    from countlens.llm import CaptureConfig, plan_capture, run_capture

    kw = dict(L=10, counts=[1, 10], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    longest = plan_capture(CaptureConfig().with_options(model=str(tiny_model_dir), **kw), progress=False).prompts[-1]
    short = tmp_path / "short-context"
    shutil.copytree(tiny_model_dir, short)
    config = json.loads((short / "config.json").read_text())
    config["max_position_embeddings"] = longest.n_tokens + 1  # the prompts fit; "10" (two tokens) after them does not
    (short / "config.json").write_text(json.dumps(config))
    plan_capture(CaptureConfig().with_options(model=str(short), **kw), progress=False)  # without answers: fine
    with pytest.raises(ConfigError, match="longest candidate answer .2 tokens.* exceed the model's context") as caught:
        run_capture(CaptureConfig().with_options(model=str(short), answers=True, **kw), tmp_path / "out",
                    progress=False)
    assert caught.value.fields == ("L", "counts") and not (tmp_path / "out").exists()


def test_checked_candidates_refuse_answers_the_tokenizer_cannot_write():
    # A tokenizer that writes no digits (every one an unknown token) cannot tell the counts apart; one that writes
    # nothing for them cannot give them at all: each a one-line ConfigError naming the field, before any weights.
    from countlens.core.errors import ConfigError
    from countlens.llm.answers import checked_candidates

    def unknown(text, add_special_tokens=False):
        return {"input_ids": [0 if c.isdigit() else 1 for c in text]}

    def empty(text, add_special_tokens=False):
        return {"input_ids": [] if text.strip() == "7" else [ord(c) for c in text]}

    assert checked_candidates(unknown, [3]) == [[0]]
    with pytest.raises(ConfigError) as exc:
        checked_candidates(unknown, [1, 2, 3])
    assert exc.value.field == "counts" and "the answers 1 and 2 of {counts} encode to the same tokens" in \
        exc.value.template
    with pytest.raises(ConfigError) as exc:
        checked_candidates(empty, [6, 7], "plain", field="sources")
    assert exc.value.field == "sources" and "the answers [7] encode to no tokens" in exc.value.template
    assert checked_candidates(empty, [6, 8], "plain") == [[32, 54], [32, 56]]
