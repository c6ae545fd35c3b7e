"""The model's own answers: the parse rule on real-looking outputs, greedy answers from the KV cache against
``model.generate``, and the teacher-forced log-probability against a direct computation from logits."""

import numpy as np
import pytest
import torch

from countlens.llm.answers import (
    answer_batch,
    answer_prompts,
    answer_string,
    answer_token_ids,
    parse_answer,
    stop_token_ids,
)
from countlens.llm.capture import pad_batch
from countlens.llm.models import load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models  # noqa: F401

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
            answer = answer_token_ids(tok, p.n)
            full = torch.tensor([p.ids + answer])
            logp = torch.log_softmax(model(full).logits[0].double(), dim=-1)  # (T + k, V)
            want = sum(float(logp[len(p.ids) - 1 + j, a]) for j, a in enumerate(answer))
            assert logprob == pytest.approx(want, abs=1e-4)
    assert np.all(np.asarray(got.answer_logprob) < 0)


def test_capture_with_answers_stores_the_same_answers_and_vectors(tiny_model_dir, tmp_path):  # noqa: F811
    from countlens.core.store import acts_array, load_capture
    from countlens.llm.experiments import CaptureConfig, run_capture

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
    from countlens.llm.experiments import CaptureConfig, run_capture

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
    from countlens.llm.experiments import CaptureConfig, run_capture

    base = dict(model=str(tiny_model_dir), L=10, counts=[1, 5], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    runs = {name: run_capture(CaptureConfig().with_options(**base, **extra), tmp_path / name, progress=False)
            for name, extra in [("model", {}), ("r0", {"random_init": True}), ("r0b", {"random_init": True}),
                                ("r1", {"random_init": True, "init_seed": 1})]}
    acts = {name: acts_array(load_capture(r.folder)) for name, r in runs.items()}
    assert "random init, seed 0" in runs["r0"].meta["model"]
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
