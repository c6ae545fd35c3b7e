"""Counting tasks (issue 30): the registry and ``--task``'s grammar, ``lists`` unchanged bit for bit, ``repeat`` and
``letters`` prompts, item tokens from character spans in every tiny family's tokenizer and SmolLM2's, running
counts, and the analyses that refuse a task without twins."""

import hashlib
import json
import re

import numpy as np
import pytest
from transformers import AutoTokenizer

from countlens.core.errors import ConfigError, UsageError
from countlens.llm.capture.residuals import position_columns
from countlens.llm.prompts import CONFIGURATIONS, PromptSettings, arrangement, build_prompts
from countlens.llm.tasks import TASKS, encode, item_positions, item_problem, parse_task
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_models  # noqa: F401
from tests.helpers.model_families import BY_NAME, family_tokenizer


@pytest.fixture(scope="module")
def tok(smollm2_tokenizer):  # noqa: F811
    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer))


def _rows(prompts) -> list:
    return [[p.n, p.m, p.pair, p.config, p.seed, p.prompt, p.ids, p.first_item_index, p.last_item_index]
            for p in prompts]


# sha256 of _rows(build_prompts(SmolLM2, settings)) as build_prompts wrote them before tasks existed (commit 6e41e28)
OLD_DIGESTS = [
    ({"L": 40, "counts": [0, 1, 7, 40], "per_count": 2, "seeds": [0, 1]},
     "0a5606560bc71370b93f11feacb1d6ebf183d42f7d3e1e329cfcce4364596779"),
    ({"L": 12, "counts": [0, 3, 12], "template": "plain", "seeds": [3]},
     "6eeab24e5d8f3aa2689dfbbb4882599c738c6cb9bcb71eb20e33fb3a351d982e"),
]


@pytest.mark.parametrize(("settings", "digest"), OLD_DIGESTS)
def test_lists_equals_the_old_build_prompts_bit_for_bit(tok, settings, digest):
    prompts = build_prompts(tok, PromptSettings(**settings))
    assert PromptSettings(**settings).task == "lists"
    assert hashlib.sha256(json.dumps(_rows(prompts)).encode()).hexdigest() == digest
    assert build_prompts(tok, PromptSettings(**settings, task="lists")) == prompts


def test_lists_prompts_rebuilt_independently(tok):
    settings = PromptSettings(L=10, counts=[0, 2, 10], seeds=[4], pairs=[["cat", "dog"]])
    got = build_prompts(tok, settings)
    want = []
    for config in settings.configs:
        for n in settings.counts:
            items = arrangement(4, n, 0, 10)
            words = "".join(" cat" if i else " dog" for i in items)
            message = CONFIGURATIONS[config].format(target="cat", items=words)
            text = tok.apply_chat_template([{"role": "user", "content": message}], tokenize=False,
                                           add_generation_prompt=True)
            want.append((n, text, tok(text, add_special_tokens=False)["input_ids"]))
    assert [(p.n, p.prompt, p.ids) for p in got] == want
    for p in got:  # each item its own token, between the first and the last
        assert list(p.item_indices) == list(range(p.first_item_index, p.last_item_index + 1))[:p.n + p.m]


def test_registry_order_and_task_grammar():
    assert list(TASKS)[:3] == ["lists", "repeat", "letters"]
    assert parse_task("repeat").values == {"separator": "space", "word": "a"}
    task = parse_task(" repeat:separator=comma, word=dog")
    assert task.values == {"separator": "comma", "word": "dog"} and task.text == "repeat:separator=comma,word=dog"
    assert PromptSettings(task="repeat:word=b,separator=pipe").task == "repeat:separator=pipe,word=b"
    for text, words in (("count", "must be one of lists, repeat, letters"), ("repeat:sep=comma", "takes the options"),
                        ("repeat:separator=tab", "separator must be one of space, comma, newline, pipe"),
                        ("repeat:comma", "option=value"), ("repeat:word=a b", "a word of letters"),
                        ("lists:x=1", "lists takes no options"), ("letters:letter=RR", "one lower-case letter"),
                        ("repeat:word=a,word=b", "given twice")):
        with pytest.raises(ConfigError, match=words) as caught:
            PromptSettings(task=text)
        assert caught.value.field == "task" and "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match="wordings of repeat") as caught:
        PromptSettings(task="repeat", configs=["nope"])
    assert caught.value.field == "configs"


def _independent_positions(text: str, offsets, pattern: str, region: tuple[int, int]) -> tuple[list, list]:
    """Item spans found by a regular expression inside ``region`` of the text, and each item's last token
    (the last token sharing a character with it), by a plain loop."""
    spans = [(m.start() + region[0], m.end() + region[0]) for m in re.finditer(pattern, text[region[0]:region[1]])]
    positions = [max(i for i, (s, e) in enumerate(offsets) if e > s and s < b and e > a) for a, b in spans]
    return spans, positions


@pytest.mark.parametrize("separator", ["space", "comma", "newline", "pipe"])
def test_repeat_prompts_are_what_the_model_reads(tok, separator):
    settings = PromptSettings(task=f"repeat:separator={separator}", L=30, counts=[0, 1, 5, 30], seeds=[0],
                              configs=["count"])
    prompts = build_prompts(tok, settings)
    between = {"space": " ", "comma": ", ", "newline": "\n", "pipe": " | "}[separator]
    lead = "\n" if separator == "newline" else " "
    for p in prompts:
        words = lead + between.join(["a"] * p.n) if p.n else ""
        message = ("Count how many words appear in the following sequence. Answer with a number.\nSequence:"
                   + words)
        text = tok.apply_chat_template([{"role": "user", "content": message}], tokenize=False,
                                       add_generation_prompt=True)
        assert p.prompt == text and p.ids == tok(text, add_special_tokens=False)["input_ids"]
        assert (p.m, p.pair, p.boundary_index) == (0, "a", len(p.ids) - 1)
        assert tok.decode([p.ids[-1]]) == "\n"  # the boundary: the newline after <|im_start|>assistant
        start = text.index("Sequence:") + len("Sequence:")
        offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans, want = _independent_positions(text, offsets, r"\ba\b", (start, start + len(words)))
        assert len(spans) == p.n and list(p.item_indices) == want and all(p.item_targets)
        # and again from the prefix: the item's last token is the last token of the text up to the item's end
        assert want == [len(tok(text[:b], add_special_tokens=False)["input_ids"]) - 1 for _, b in spans]
        columns = position_columns([p], "items")
        assert columns["running_count"] == [*range(1, p.n + 1), p.n] and columns["position"][-1] == p.boundary_index


def test_letters_share_tokens_and_count_per_token(tok):
    settings = PromptSettings(task="letters:letter=r", L=12, counts=[0, 3, 7], seeds=[1], configs=["count"])
    for p in build_prompts(tok, settings):
        string = p.prompt.split("String: ", 1)[1].split("<|im_end|>")[0]
        assert len(string) == p.n + p.m and string.count("r") == p.n
        start = p.prompt.index("String: ") + len("String: ")
        offsets = tok(p.prompt, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        spans, want = _independent_positions(p.prompt, offsets, r"[a-z]", (start, start + len(string)))
        assert list(p.item_indices) == want
        tokens = sorted(set(want))
        per_token = [sum(1 for (a, _), t in zip(spans, want, strict=True) if t == k and p.prompt[a] == "r")
                     for k in tokens]
        columns = position_columns([p], "items")
        assert columns["position"] == [*tokens, p.boundary_index]
        assert columns["running_count"] == [*np.cumsum(per_token).tolist(), p.n]
        assert columns["is_target"] == [*(c > 0 for c in per_token), False]


@pytest.mark.parametrize("family", ["llama-3", "qwen2", "gemma-2", "mistral", "phi-3", "gpt-2", "gpt-neox", "olmo-2"])
def test_items_found_in_every_tiny_family(smollm2_tokenizer, family):  # noqa: F811
    fam = BY_NAME[family]
    tok = family_tokenizer(fam, smollm2_tokenizer)
    template = "plain" if fam.template is None else "chat"
    for task, pattern in (("repeat:separator=comma", r"\ba\b"), ("repeat:separator=space,word=cat", r"\bcat\b"),
                          ("lists", r"\b[ab]\b")):
        settings = PromptSettings(task=task, L=9, counts=[0, 4, 9], seeds=[0], configs=["count"], template=template,
                                  pairs=[["a", "b"]])
        for p in build_prompts(tok, settings):
            start = p.prompt.index("Sequence:") + len("Sequence:")
            end = p.prompt.index(fam.ending, start) if fam.ending in p.prompt[start:] else len(p.prompt)
            enc = tok(p.prompt, add_special_tokens=template == "plain", return_offsets_mapping=True)
            assert p.ids == enc["input_ids"] and p.prompt.endswith(fam.ending)
            spans, want = _independent_positions(p.prompt, enc["offset_mapping"], pattern, (start, end))
            assert list(p.item_indices) == want and len(want) == p.n + p.m
            assert sum(p.item_targets) == p.n


def test_spans_to_tokens_rules_and_the_merged_item_named(tok):
    spans = np.array([[5, 6], [8, 9], [11, 12]])  # the three "a" of "List:a, a, a"
    offsets = [(0, 4), (4, 5), (5, 6), (6, 7), (7, 9), (9, 10), (10, 12)]  # "List" ":" "a" "," " a" "," " a"
    assert item_positions(offsets, spans, "whole").tolist() == [2, 4, 6]
    two_tokens = [(0, 5), (5, 6), (6, 8), (8, 9), (9, 12)]  # ", " one token, ", a" one token
    assert item_positions(two_tokens, spans, "whole").tolist() == [1, 3, 4]
    merged = [(0, 5), (5, 6), (6, 9), (9, 12)]  # ", a" holds item 1 and no other item: fine
    assert item_positions(merged, spans, "whole").tolist() == [1, 2, 3]
    glued = [(0, 5), (5, 9), (9, 12)]  # one token over items 0 and 1
    assert item_positions(glued, spans, "whole").tolist() == [-1, -1, 2]
    assert item_positions(glued, spans, "shared").tolist() == [1, 1, 2]
    text = "List:a, a, a"
    ids = tok(text, add_special_tokens=False)["input_ids"][:3]
    _, problem = item_problem(tok, text, ids, glued[:3], spans, "whole")
    assert "item 0 'a' (characters 5..6) is merged with a neighbouring item" in problem


def test_a_tokenizer_without_offsets_is_refused(tok):
    class Slow:  # what a slow (Python) tokenizer of transformers does when asked for offsets
        chat_template = tok.chat_template

        def __call__(self, texts, add_special_tokens=True, return_offsets_mapping=False):
            if return_offsets_mapping:
                raise NotImplementedError("return_offset_mapping is not available when using Python tokenizers")
            return tok(texts, add_special_tokens=add_special_tokens)

        def apply_chat_template(self, *args, **kwargs):
            return tok.apply_chat_template(*args, **kwargs)

    with pytest.raises(UsageError, match="no character offsets"):
        encode(Slow(), ["a b"], False)
    with pytest.raises(UsageError, match="no character offsets"):
        build_prompts(Slow(), PromptSettings(task="repeat", L=3, counts=[2], seeds=[0], configs=["count"]))


def test_analyses_without_twins_refuse_the_task_before_any_model():
    from countlens.llm.heads.experiment import HeadsConfig
    from countlens.llm.positions.experiment import PositionPatchingConfig

    for config in (PositionPatchingConfig, HeadsConfig):
        with pytest.raises(ConfigError, match="corrupted twin.*task repeat does not define") as caught:
            config(prompts=PromptSettings(task="repeat:separator=comma", L=12, counts=[3, 6], configs=["count"],
                                          seeds=[0]))
        assert caught.value.field == "task" and "\n" not in str(caught.value)



def _last_block_output(model, ids):
    """The last block's output (before the final norm: ``blocks.{l}.hook_resid_post``), (T, d)."""
    import torch

    kept = []
    hook = model.model.layers[-1].register_forward_hook(lambda m, i, o: kept.append(o[0] if isinstance(o, tuple) else o))
    with torch.no_grad():
        model(torch.tensor([ids]))
    hook.remove()
    return kept[0][0]


def test_capture_of_repeat_items_matches_an_independent_forward(tiny_models, tmp_path):  # noqa: F811
    from countlens.core.store import read_meta
    from countlens.llm import CaptureConfig, acts_array, load_capture, run_capture
    from countlens.llm.models import load_model

    loaded = load_model(str(tiny_models["llama"]), progress=False)
    config = CaptureConfig().with_options(model=str(tiny_models["llama"]), task="repeat:separator=comma", L=6,
                                          counts=[0, 1, 3, 6], seeds=[0, 1], configs=["count"], positions="items",
                                          locations="-1", batch_size=3)
    assert config.prompts.n_prompts() == 4  # one prompt per count: repeat's prompts do not depend on the seed
    result = run_capture(config, tmp_path / "cap", loaded=loaded, progress=False)
    meta, ds = read_meta(result.folder), load_capture(result.folder)
    assert meta["task"] == "repeat:separator=comma" and meta["settings"]["task"] == "repeat:separator=comma"
    rows, acts = ds.remove_columns("acts").to_list(), acts_array(ds)
    assert len(rows) == sum(n + 1 for n in (0, 1, 3, 6)) == result.n_rows
    for prompt_id in sorted({r["prompt_id"] for r in rows}):
        mine = [i for i, r in enumerate(rows) if r["prompt_id"] == prompt_id]
        text, n = rows[mine[0]]["prompt"], rows[mine[0]]["n"]
        enc = loaded.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        words = [m.end() for m in re.finditer(r"\ba\b", text.split("Sequence:", 1)[1].split("<|im_end|>")[0])]
        start = text.index("Sequence:") + len("Sequence:")
        want = [max(i for i, (s, e) in enumerate(enc["offset_mapping"]) if s < start + b <= e) for b in words]
        assert [rows[i]["position"] for i in mine] == [*want, len(enc["input_ids"]) - 1]
        assert [rows[i]["running_count"] for i in mine] == [*range(1, n + 1), n]
        hidden = _last_block_output(loaded.model, enc["input_ids"])
        np.testing.assert_allclose(acts[mine, 0], hidden[[rows[i]["position"] for i in mine]].numpy(), atol=1e-4)
