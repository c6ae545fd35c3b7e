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


# --- objects and file:PATH (issue 30, points 1, 2, 3, 5) -------------------------------------------------------

def _tokenizers(smollm2_dir) -> dict:
    """SmolLM2's tokenizer, every tiny family's, and the real ones of the cache (where fetched), by name, each with
    the template it is used with."""
    from tests.helpers.model_families import FAMILIES
    from tests.helpers.real_tokenizers import FAMILIES as REAL
    from tests.helpers.real_tokenizers import real_tokenizer_dir

    out = {"smollm2": (AutoTokenizer.from_pretrained(str(smollm2_dir)), "chat")}
    for fam in FAMILIES:
        out[fam.name] = (family_tokenizer(fam, smollm2_dir), "plain" if fam.template is None else "chat")
    for name in REAL:
        folder = real_tokenizer_dir(name)
        if folder is not None:
            tok = AutoTokenizer.from_pretrained(str(folder))
            out[f"real-{name}"] = (tok, "chat" if tok.chat_template else "plain")
    return out


@pytest.fixture(scope="module")
def all_tokenizers(smollm2_tokenizer):  # noqa: F811
    found = _tokenizers(smollm2_tokenizer)
    assert {"real-qwen2", "real-llama3", "real-phi3"} <= set(found) or pytest.skip(
        "the real tokenizers are not cached (python -m tests.helpers.real_tokenizers)")
    return found


def _rendered(tok, template: str, messages: list[dict]) -> tuple[str, bool]:
    """The text the model reads for ``messages`` (the last the user's), written out here, and whether the
    tokenizer adds its special tokens."""
    if template == "plain":
        return messages[-1]["content"] + "\nAnswer:", True
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), False


def _check_items(tok, p, special: bool, spans_in_text: list[tuple[int, int]], targets: list[bool]) -> None:
    """``p``'s ids, item positions, running counts and boundary equal a computation written here: each item's
    last token is the last token whose characters meet it; the running count per distinct item token."""
    enc = tok(p.prompt, add_special_tokens=special, return_offsets_mapping=True)
    assert p.ids == enc["input_ids"] and p.boundary_index == len(enc["input_ids"]) - 1
    want = [max(i for i, (s, e) in enumerate(enc["offset_mapping"]) if e > s and s < b and e > a)
            for a, b in spans_in_text]
    assert list(p.item_indices) == want and list(p.item_targets) == targets
    tokens = sorted(set(want))
    per_token = [sum(t for w, t in zip(want, targets, strict=True) if w == k) for k in tokens]
    columns = position_columns([p], "items")
    assert columns["position"] == [*tokens, p.boundary_index]
    assert columns["running_count"] == [*np.cumsum(per_token).astype(int).tolist(), p.n]
    assert columns["is_target"] == [*(c > 0 for c in per_token), False]


def test_objects_prompts_items_and_counts_in_every_tokenizer(all_tokenizers):
    from countlens.llm.tasks.objects import CATEGORIES

    nouns = {w: cat for cat, (_, words) in CATEGORIES.items() for w in words}
    for tok, template in all_tokenizers.values():
        for category in ("fruit", "instrument"):
            settings = PromptSettings(task=f"objects:category={category}", L=10, counts=[0, 1, 4, 10], seeds=[0, 5],
                                      template=template)
            prompts = build_prompts(tok, settings)
            assert len(prompts) == settings.n_prompts() == 4 * 3 * 2
            for p in prompts:
                head = {"count": "\nList:", "how-many": "I have", "tally": "list of objects:"}[p.config]
                listed = re.search(re.escape(head) + r"(.*?)(?:\.\n|\n|<| \[|$)", p.prompt).group(1)
                found = [(m.start(2), m.end(2), m.group(2)) for m in re.finditer(r"(^| )(?:a|an) ([a-z]+)", listed)]
                assert all(nouns[w] for _, _, w in found) and len(found) == p.n + p.m
                assert sum(nouns[w] == category for _, _, w in found) == p.n
                joints = [listed[b:listed.index(" ", a2 - 4 if listed[a2 - 3:a2] == "an " else a2 - 3)]
                          for (_, b, _), (a2, _, _) in zip(found[:-1], found[1:], strict=True)]
                assert joints == [","] * (len(found) - 2) + [" and"] * (len(found) > 1)  # "x, y and z"
                user = p.prompt.index(listed, p.prompt.index(head))
                message = {"count": f"Count how many {CATEGORIES[category][0]} are in the following list. Answer "
                                    f"with a number.\nList:{listed}"}.get(p.config)
                if message is not None:  # the whole text, rendered here
                    assert p.prompt == _rendered(tok, template, [{"role": "user", "content": message}])[0]
                _check_items(tok, p, template == "plain", [(user + a, user + b) for a, b, _ in found],
                             [nouns[w] == category for _, _, w in found])


def _write_jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _records() -> list[dict]:
    """Records of every kind: text with spans and targets, a chat, a count of 0, items of several tokens."""
    out = []
    for i, (words, counted) in enumerate(((["apple", "pear", "apple", "plum"], "apple"),
                                          (["strawberry", "x", "strawberry"], "strawberry"),
                                          (["dog", "dog", "cat"], "bird"))):
        text = f"Record {i}: how many {counted} here? " + ", ".join(words) + ". Reply with a number."
        start = text.index("? ") + 2
        spans, at = [], start
        for w in words:
            spans.append([at, at + len(w)])
            at += len(w) + 2
        targets = [w == counted for w in words]
        out.append({"text": text, "count": sum(targets), "spans": spans, "targets": targets})
    chat = "Now these: red, blue, red. How many red?"
    out.append({"messages": [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."},
                             {"role": "user", "content": chat}], "count": 2,
                "spans": [[11, 14], [22, 25], [16, 20]], "targets": [True, True, False]})  # spans out of order
    return out


def test_file_task_items_and_counts_in_every_tokenizer(all_tokenizers, tmp_path):
    records = _records()
    path = _write_jsonl(tmp_path / "mine.jsonl", records)
    for name, (tok, template) in all_tokenizers.items():
        chat = [r for r in records if "messages" in r]
        plain = template == "plain"
        kept = [r for r in records if not (plain and "messages" in r)]
        if plain:  # the plain template writes one message: a chat record is refused before any tokenizer
            with pytest.raises(ConfigError, match="plain.*chat conversation") as caught:
                build_prompts(tok, PromptSettings(task=f"file:{path}", template="plain"))
            assert "\n" not in str(caught.value) and chat
            path = _write_jsonl(tmp_path / f"{name}.jsonl", kept)
        settings = PromptSettings(task=f"file:{path}", template=template)
        prompts = build_prompts(tok, settings)
        want = sorted(kept, key=lambda r: r["count"])  # count order, the file's within a count
        assert [p.n for p in prompts] == [r["count"] for r in want] and settings.n_prompts() == len(kept)
        for p, r in zip(prompts, want, strict=True):
            messages = r.get("messages") or [{"role": "user", "content": r["text"]}]
            text, special = _rendered(tok, template, messages)
            assert p.prompt == text and (p.pair, p.config, p.seed) == ("file", "file", 0)
            start = text.rindex(messages[-1]["content"])
            order = sorted(range(len(r["spans"])), key=lambda i: r["spans"][i][0])
            assert p.m == len(order) - p.n
            _check_items(tok, p, special, [(start + r["spans"][i][0], start + r["spans"][i][1]) for i in order],
                         [r["targets"][i] for i in order])
        path = str(tmp_path / "mine.jsonl")


def test_file_task_reads_csv_and_a_datasets_folder_as_jsonl(tok, tmp_path):
    import csv

    import datasets

    records = [r for r in _records() if "text" in r]
    jsonl = _write_jsonl(tmp_path / "a.jsonl", records)
    with (tmp_path / "a.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "count", "spans", "targets"])
        for r in records:
            writer.writerow([r["text"], r["count"], json.dumps(r["spans"]), json.dumps(r["targets"])])
    datasets.Dataset.from_list(records).save_to_disk(str(tmp_path / "folder"))
    want = build_prompts(tok, PromptSettings(task=f"file:{jsonl}"))
    for other in (tmp_path / "a.csv", tmp_path / "folder"):
        assert build_prompts(tok, PromptSettings(task=f"file:{other}")) == want
    bare = _write_jsonl(tmp_path / "bare.jsonl", [{"text": r["text"], "count": r["count"]} for r in records])
    prompts = build_prompts(tok, PromptSettings(task=f"file:{bare}", counts=[0, 1]))
    assert [(p.n, p.m, p.item_indices, p.first_item_index) for p in prompts] == [(0, 0, (), -1)]
    assert prompts[0].prompt == want[0].prompt and want[0].m == 3  # counts filter the records


def test_the_example_file_loads_and_builds(tok):
    from pathlib import Path

    path = Path(__file__).parents[2] / "docs" / "tasks" / "example.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    prompts = build_prompts(tok, PromptSettings(task=f"file:{path}"))
    assert len(prompts) == len(lines) >= 4 and sorted(p.n for p in prompts) == sorted(r["count"] for r in lines)
    assert any("messages" in r for r in lines) and all(len(p.item_indices) == len(r["spans"])
                                                       for p, r in zip(prompts, sorted(lines, key=lambda r: r["count"]),
                                                                       strict=True))


BAD_FILES = [  # (file name, content, the message's words)
    ("missing.jsonl", None, r"missing.jsonl: does not exist"),
    ("empty.jsonl", "", r"empty.jsonl: holds no records"),
    ("blank.csv", "text,count\n", r"blank.csv: holds no records"),
    ("broken.jsonl", '{"text": "a", "count": 0}\n{"text": "b", "count":\n', r"broken.jsonl line 2: is not JSON"),
    ("broken.csv", 'text,count\n"a",0\n"b"\n', r"broken.csv line 3: has not 2 cells"),
    ("notes.txt", "a", r"notes.txt: must be a .jsonl or .csv file or a folder saved by datasets"),
    ("nocount.jsonl", '{"text": "a b"}\n', r"line 1: a record needs count"),
    ("notext.jsonl", '{"count": 1}\n', r"line 1: a record needs text or messages"),
    ("both.jsonl", '{"text": "a", "messages": [], "count": 1}\n', r"line 1: a record holds text or messages, not both"),
    ("badcount.jsonl", '{"text": "a", "count": "three"}\n', r"line 1: count must be a whole number, got 'three'"),
    ("negative.jsonl", '{"text": "a", "count": -1}\n', r"line 1: count must be >= 0, got -1"),
    ("disagree.jsonl", '{"text": "a a a", "count": 2, "spans": [[0, 1], [2, 3], [4, 5]]}\n',
     r"line 1: count 2 disagrees with its 3 target spans"),
    ("disagree2.jsonl", '{"text": "a b a", "count": 3, "spans": [[0, 1], [2, 3], [4, 5]], '
                        '"targets": [true, false, true]}\n', r"line 1: count 3 disagrees with its 2 target spans"),
    ("outside.jsonl", '{"text": "a a", "count": 0}\n{"text": "a a", "count": 2, "spans": [[0, 1], [2, 4]]}\n',
     r"line 2: span \[2, 4\] lies outside the text \(characters 0..3\)"),
    ("overlap.jsonl", '{"text": "abcd", "count": 2, "spans": [[0, 2], [1, 3]]}\n',
     r"line 1: spans \[0, 2\] and \[1, 3\] overlap"),
    ("targets.jsonl", '{"text": "a b", "count": 1, "spans": [[0, 1], [2, 3]], "targets": [true]}\n',
     r"line 1: targets must be a list of 2 bools"),
    ("lonely.jsonl", '{"text": "a b", "count": 1, "targets": [true]}\n', r"line 1: targets need spans"),
    ("assistant.jsonl", '{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "1"}], '
                        '"count": 1}\n', r"line 1: the last message must be the user's"),
    ("mixed.jsonl", '{"text": "a", "count": 1, "spans": [[0, 1]]}\n{"text": "a", "count": 1}\n',
     r"line 2: has no spans while line 1 has"),
]


@pytest.mark.parametrize(("name", "content", "words"), BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_a_bad_file_is_one_line_naming_task_before_any_tokenizer(tmp_path, name, content, words):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=words) as caught:
        PromptSettings(task=f"file:{path}")
    assert caught.value.field == "task" and "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"task: file {path}")


def test_file_task_settings_and_analyses_refused_in_one_line(tmp_path):
    from countlens.llm.heads.experiment import HeadsConfig
    from countlens.llm.positions.experiment import PositionPatchingConfig

    path = _write_jsonl(tmp_path / "a.jsonl", [{"text": "x y", "count": 1, "spans": [[0, 1], [2, 3]],
                                                "targets": [True, False]}])
    bare = _write_jsonl(tmp_path / "b.jsonl", [{"text": "x y", "count": 1}])
    assert PromptSettings(task=f"file:{path}").configs == ["file"]
    assert PromptSettings(task=f"file:{path}", configs=["tally", "count"]).configs == ["file"]  # not read
    for options, field, words in (({"configs": ["count", "poem"]}, "configs", "its one wording is file"),
                                  ({"per_count": 2}, "per_count", "per_count must be 1 for the task file"),
                                  ({"counts": [0, 2]}, "counts", r"keep no record of the task's file \(its counts: 1\)"),
                                  ({"task": "file"}, "task", "file needs its path")):
        with pytest.raises(ConfigError, match=words) as caught:
            PromptSettings(**{"task": f"file:{path}", **options})
        assert caught.value.field == field and "\n" not in str(caught.value)
    for config in (PositionPatchingConfig, HeadsConfig):
        with pytest.raises(ConfigError, match="needs each item's position.*no item spans") as caught:
            config(prompts=PromptSettings(task=f"file:{bare}", counts=[1]))
        assert caught.value.field == "task" and "\n" not in str(caught.value)
        with pytest.raises(ConfigError, match="task file does not define \\(a record names no text") as caught:
            config(prompts=PromptSettings(task=f"file:{path}", counts=[1]))
    with pytest.raises(ConfigError, match="needs each item's position"):
        PromptSettings(task=f"file:{bare}").require_items("an items capture")
    PromptSettings(task=f"file:{path}").require_items("an items capture")  # spans: items known


def test_an_item_the_tokenizer_merges_is_named_with_its_record(tok, tmp_path):
    word = "strawberry"  # one token in SmolLM2: two items inside it share that token
    assert len(tok(" " + word, add_special_tokens=False)["input_ids"]) == 1
    text = f"How many here? {word} and more."
    start = text.index(word)
    path = _write_jsonl(tmp_path / "m.jsonl", [
        {"text": "Fine: a b", "count": 1, "spans": [[6, 7], [8, 9]], "targets": [True, False]},
        {"text": text, "count": 1, "spans": [[start, start + 5], [start + 5, start + 10]], "targets": [True, False]}])
    settings = PromptSettings(task=f"file:{path}")
    with pytest.raises(ConfigError, match=r"item 0 'straw' \(characters \d+\.\.\d+\) is merged with a neighbouring "
                                          r"item.* in the file's line 2") as caught:
        build_prompts(tok, settings)
    assert caught.value.field == "task" and "\n" not in str(caught.value)


# --- corrupted twins per task (point 3) --------------------------------------------------------------------------

def _letters_twin_exists(tok, template: str, prompt, j: int, region: tuple[int, int]) -> bool:
    """Whether some other letter in place of item ``j`` keeps the prompt's length and every token outside the
    tokens over that letter, by trying all 25 here (the prompt's text is rendered, so the letter is found in it)."""
    enc = tok(prompt.prompt, add_special_tokens=template == "plain", return_offsets_mapping=True)
    a, b = region
    allowed = {i for i, (s, e) in enumerate(enc["offset_mapping"]) if e > s and s < b and e > a}
    for letter in "abcdefghijklmnopqstuvwxyz":  # every letter but the counted r
        ids = tok(prompt.prompt[:a] + letter + prompt.prompt[b:], add_special_tokens=template == "plain")["input_ids"]
        if len(ids) == len(enc["input_ids"]):
            differ = {i for i, (x, y) in enumerate(zip(enc["input_ids"], ids, strict=True)) if x != y}
            if differ and differ <= allowed:
                return True
    return False


@pytest.mark.parametrize("task", ["objects", "objects:category=vehicle", "letters:letter=r", "lists"])
def test_corrupted_twins_change_one_item_and_nothing_else(all_tokenizers, task):
    from countlens.llm.positions.experiment import corrupted_twin
    from countlens.llm.tasks.objects import CATEGORIES

    nouns = {w: cat for cat, (_, words) in CATEGORIES.items() for w in words}
    kind = task.split(":")[0]
    made = refused = 0
    for name in ("smollm2", "llama-3", "real-qwen2", "real-llama3", "real-phi3"):
        tok, template = all_tokenizers[name]
        settings = PromptSettings(task=task, L=10, counts=[1, 4, 10], seeds=[0, 1], template=template,
                                  pairs=[["a", "b"]], configs=["count", "tally"])
        for clean in build_prompts(tok, settings):
            for flip in ("first", "last"):
                targets = [i for i, t in enumerate(clean.item_targets) if t]
                j = targets[0] if flip == "first" else targets[-1]
                try:
                    pp = corrupted_twin(tok, clean, 0, settings, flip)
                except ConfigError as exc:  # only where no letter keeps the other tokens (checked here)
                    assert kind == "letters" and exc.field == "task" and "\n" not in str(exc)
                    assert re.search(r"no corrupted twin of the same tokens: every replacement of item \d+ 'r'", str(exc))
                    marker = "String: " if clean.config == "count" else "a string: "
                    user = clean.prompt.rindex(marker) + len(marker)
                    assert clean.prompt[user + j] == "r"
                    assert not _letters_twin_exists(tok, template, clean, j, (user + j, user + j + 1))
                    refused += 1
                    continue
                made += 1
                twin = pp.corrupt
                assert pp.flipped_item == j and pp.flipped_position == clean.item_indices[j]
                assert (twin.n, twin.m, twin.n_tokens) == (clean.n - 1, clean.m + 1, clean.n_tokens)
                differ = [i for i, (a, b) in enumerate(zip(clean.ids, twin.ids, strict=True)) if a != b]
                assert differ and max(differ) <= pp.flipped_position and (kind != "lists" or differ == [j + clean.first_item_index])
                assert list(twin.item_targets) == [t and i != j for i, t in enumerate(clean.item_targets)]
                # the twin's text, counted independently, has one target fewer and as many items
                head = {("objects", "count"): "\nList:", ("objects", "tally"): "list of objects:",
                        ("letters", "count"): "String:", ("letters", "tally"): "a string:",
                        ("lists", "count"): "Sequence:", ("lists", "tally"): "sequence of items:"}[kind, twin.config]
                user = re.split(r"\n|<| \[", twin.prompt[twin.prompt.rindex(head) + len(head):])[0]
                if kind == "objects":
                    category = task.partition("=")[2] or "fruit"
                    listed = re.findall(r"(?:^| )(?:a|an) ([a-z]+)", user)
                    assert sum(nouns[w] == category for w in listed) == twin.n and len(listed) == twin.n + twin.m
                elif kind == "letters":
                    assert user.strip().count("r") == twin.n and len(user.strip()) == twin.n + twin.m
                else:
                    assert user.split().count("a") == twin.n and len(user.split()) == twin.n + twin.m
    assert made >= 0.9 * (made + refused) and (kind == "letters" or refused == 0)


def test_repeat_refuses_twins_with_its_reason():
    from countlens.llm.positions.experiment import PositionPatchingConfig

    with pytest.raises(ConfigError, match=r"task repeat does not define \(its question counts every word") as caught:
        PositionPatchingConfig(prompts=PromptSettings(task="repeat", L=6, counts=[3], configs=["count"], seeds=[0]))
    assert caught.value.field == "task" and "\n" not in str(caught.value)


def test_a_twin_no_replacement_keeps_is_refused_in_one_line(tok):
    from countlens.llm.positions.experiment import corrupted_twin

    settings = PromptSettings(task="objects", L=6, counts=[3], configs=["count"], seeds=[0])
    [clean] = build_prompts(tok, settings)

    class Longer:  # a tokenizer whose every twin comes out one token longer
        def __getattr__(self, name):
            return getattr(tok, name)

        def __call__(self, text, **kwargs):
            out = tok(text, **kwargs)
            return out if kwargs.get("return_offsets_mapping") else {"input_ids": [*out["input_ids"], 0]}

    with pytest.raises(ConfigError, match=r"no corrupted twin of the same tokens: every replacement of item \d "
                                          r"'an? [a-z]+' .*tried 48\)") as caught:
        corrupted_twin(Longer(), clean, 0, settings, "last")
    assert caught.value.field == "task" and "\n" not in str(caught.value)


def test_counts_beyond_the_context_are_refused_in_the_tasks_own_terms(tiny_chat_model, capsys, tmp_path):
    # repeat's prompt grows with its count, not with L: the refusal names --counts (the tiny model's context
    # is 1,024 tokens), before any weight is read; lists names --L
    from countlens.pipeline.cli import main

    for task, extra, flag in (("repeat:separator=comma", ["--counts", "1100", "--L", "1100"], "--counts"),
                              ("lists", ["--counts", "1050", "--L", "1100", "--pairs", "a/b"], "--L")):
        code = main(["llm", "capture", "--model", str(tiny_chat_model), "--task", task, "--configs", "count",
                     "--seeds", "0", *extra, "--out", str(tmp_path / "never"), "--quiet"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and "context is 1024" in err[0], (task, err)
        assert f"lower {flag}" in err[0] or f"lower the largest of {flag}" in err[0], err[0]
        assert not (tmp_path / "never").exists()


def test_prompts_of_a_file_capture_refuse_a_file_changed_since(tmp_path):
    # steering rebuilds a capture's prompts from its recorded settings: from a task file whose records changed
    # since the capture they would not be the captured prompts, so the recorded digest must still match
    from types import SimpleNamespace

    from countlens.llm.capture.experiment import capture_prompts

    path = _write_jsonl(tmp_path / "a.jsonl", [{"text": "x y", "count": 1, "spans": [[0, 1], [2, 3]],
                                                "targets": [True, False]}])
    settings = PromptSettings(task=f"file:{path}", counts=[1])
    meta = SimpleNamespace(settings=settings.to_dict())
    assert capture_prompts(meta) == settings
    _write_jsonl(tmp_path / "a.jsonl", [{"text": "y x", "count": 1, "spans": [[0, 1], [2, 3]],
                                         "targets": [False, True]}])
    with pytest.raises(ConfigError, match="changed since; capture again") as caught:
        capture_prompts(meta)
    assert caught.value.field == "acts" and "\n" not in str(caught.value)
