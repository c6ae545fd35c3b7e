"""Counting prompts: item counts, the boundary token, determinism, and bad settings."""

import numpy as np
import pytest
from transformers import AutoTokenizer

from countlens.core.args import parse_int_list
from countlens.core.errors import ConfigError, UsageError
from countlens.llm.prompts import (
    PromptSettings,
    arrangement,
    build_prompts,
    mark_boundary,
    parse_pairs,
)
from tests.helpers.llm_fixtures import smollm2_tokenizer  # noqa: F401


@pytest.fixture(scope="module")
def tok(smollm2_tokenizer):  # noqa: F811
    return AutoTokenizer.from_pretrained(str(smollm2_tokenizer))


def _items_in(prompt_text: str) -> list[str]:
    # every configuration writes the items space-separated after "Sequence:", "List:" or "items:"
    for marker in ("Sequence:", "List:", "items:"):
        if marker in prompt_text:
            tail = prompt_text.split(marker, 1)[1]
            return tail.split("\n")[0].split("<|im_end|>")[0].split()
    raise AssertionError(prompt_text)


def test_prompts_hold_exactly_n_targets_and_m_distractors(tok):
    settings = PromptSettings(L=40, counts=[0, 1, 7, 40], per_count=2, seeds=[0, 1])
    prompts = build_prompts(tok, settings)
    assert len(prompts) == settings.n_prompts() == 4 * 2 * 4 * 3 * 2
    for p in prompts:
        target, distractor = p.pair.split("/")
        items = _items_in(p.prompt)
        assert items.count(target) == p.n and items.count(distractor) == p.m and len(items) == p.n + p.m
        assert 0 <= p.m <= settings.L - p.n
        assert p.ids == tok(p.prompt, add_special_tokens=False)["input_ids"]
        assert p.boundary_index == p.n_tokens - 1
        # SmolLM2's boundary: the newline after <|im_start|>assistant
        assert p.prompt.endswith("<|im_start|>assistant\n") and tok.decode([p.ids[-1]]) == "\n"
    assert all(p.m == 0 for p in prompts if p.n == 40)


def test_arrangement_is_deterministic_and_distractors_cover_the_domain():
    a = arrangement(3, 5, 0, 50)
    assert np.array_equal(a, arrangement(3, 5, 0, 50)) and a.sum() == 5
    ms = [len(arrangement(s, 10, 0, 50)) - 10 for s in range(400)]
    assert min(ms) == 0 or min(ms) < 3
    assert max(ms) > 35 and max(ms) <= 40
    # different seeds shuffle differently
    assert not all(np.array_equal(arrangement(s, 5, 0, 10), arrangement(0, 5, 0, 10)) for s in range(1, 6))


def test_same_seed_shares_m_and_order_across_pairs_and_configs(tok):
    prompts = build_prompts(tok, PromptSettings(L=30, counts=[4, 9], seeds=[2]))
    by_count = {}
    for p in prompts:
        is_target = [w == p.pair.split("/")[0] for w in _items_in(p.prompt)]
        by_count.setdefault(p.n, set()).add(tuple(is_target))
    assert all(len(v) == 1 for v in by_count.values())


def test_plain_template_ends_in_answer_colon(tok):
    prompts = build_prompts(tok, PromptSettings(L=10, counts=[3], template="plain", configs=["count"]))
    assert all(p.prompt.endswith("\nAnswer:") and "<|im_start|>" not in p.prompt for p in prompts)
    assert tok.decode([prompts[0].ids[-1]]) == ":"
    assert "⟦:⟧" in mark_boundary(tok, prompts[0])


def test_marked_boundary_shows_the_newline(tok):
    p = build_prompts(tok, PromptSettings(L=5, counts=[2], configs=["count"], pairs=[["a", "b"]], seeds=[0]))[0]
    assert mark_boundary(tok, p).endswith("assistant⟦\\n⟧")


@pytest.mark.parametrize("kwargs, fix", [
    (dict(counts=[0, 300]), "counts must"),
    (dict(L=0), "L must"),
    (dict(per_count=0), "per_count must"),
    (dict(configs=["nope"]), "configs must"),
    (dict(pairs=[["a", "a"]]), "pairs: a pair"),
    (dict(template="jinja"), "template must"),
    (dict(seeds=[]), "seeds must"),
])
def test_bad_settings_name_the_field(kwargs, fix):
    with pytest.raises(ConfigError, match=fix) as info:
        PromptSettings(**kwargs).validate()
    assert info.value.field == fix.split()[0].rstrip(":")
    assert "--" not in str(info.value)  # the command line words its own flags


def test_multi_token_item_is_refused(tok):
    with pytest.raises(ConfigError, match="not one token.*choose other pairs") as info:
        build_prompts(tok, PromptSettings(L=5, counts=[1], pairs=[["1", "0"]]))
    assert info.value.field == "pairs"
    with pytest.raises(UsageError, match="not one token"):
        build_prompts(tok, PromptSettings(L=5, counts=[1], pairs=[["a", "elephantine"]]))


def test_model_without_chat_template_needs_plain(tok):
    bare = AutoTokenizer.from_pretrained(tok.name_or_path)
    bare.chat_template = None
    with pytest.raises(ConfigError, match="template=\"plain\"") as info:
        build_prompts(bare, PromptSettings(L=5, counts=[1]))
    assert info.value.field == "template"


def test_parsers():
    assert parse_int_list("0:3,10,98:100", "counts", sort=True) == [0, 1, 2, 3, 10, 98, 99, 100]
    assert parse_int_list("10,0:3,20:30:5,2", "counts") == [10, 0, 1, 2, 3, 20, 25, 30, 2]
    assert parse_int_list("10,0:3,20:30:5,2", "counts", sort=True) == [0, 1, 2, 3, 10, 20, 25, 30]
    assert parse_pairs("a/b, cat/dog") == [["a", "b"], ["cat", "dog"]]
    for bad in ("3:1", "x", "", "0:9:0", "1:2:3:4"):
        with pytest.raises(ConfigError, match="^counts ") as caught:
            parse_int_list(bad, "counts")
        assert caught.value.field == "counts"
    with pytest.raises(ConfigError, match="pairs takes"):
        parse_pairs("a-b")
    with pytest.raises(ConfigError, match="pairs takes target/distractor items like a/b,cat/dog, got '{x}'"):
        parse_pairs("{x}")  # a brace in the user's text is shown as it is


def test_item_positions_from_offsets():
    from countlens.llm.prompts import item_positions

    spans = np.array([[5, 7], [7, 9], [9, 11]])  # " a", " b", " a" after "List:"
    own = [(0, 4), (4, 5), (5, 7), (7, 9), (9, 11), (11, 12)]
    assert item_positions(own, spans).tolist() == [2, 3, 4]
    trimmed = [(0, 0), (0, 4), (4, 5), (6, 7), (8, 9), (10, 11)]  # offsets without the spaces, a BOS first
    assert item_positions(trimmed, spans).tolist() == [3, 4, 5]
    merged_left = [(0, 4), (4, 7), (7, 9), (9, 11)]  # ":" + " a"
    assert item_positions(merged_left, spans).tolist() == [-1, 2, 3]
    merged_right = [(0, 5), (5, 7), (7, 9), (9, 12)]  # " a" + "\n"
    assert item_positions(merged_right, spans).tolist() == [1, 2, -1]
    split_space = [(0, 5), (5, 6), (6, 7), (7, 9), (9, 11)]  # " " and "a" apart
    assert item_positions(split_space, spans).tolist() == [-1, 3, 4]
    two_items = [(0, 5), (5, 9), (9, 11)]  # " a b" as one token
    assert item_positions(two_items, spans).tolist() == [-1, -1, 2]
