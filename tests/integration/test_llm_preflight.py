"""Refusals before the weights load: every check that needs only the tokenizer and the model's config
(chat template, items, generation-prompt ending, context length, locations) runs on a model folder that has
no weight file at all, gives one line with exit status 2 and writes nothing; with the weights present,
``preflight_capture`` opens none of them."""

import json
import shutil
import sys

import pytest
from transformers import AutoTokenizer

from countlens.llm import CaptureConfig, preflight_capture
from countlens.pipeline.cli import main
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer  # noqa: F401

SMALL = ["--L", "12", "--counts", "0:12", "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--quiet"]
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# The generation prompt depends on the message: short ones get a thinking prefix, long ones do not.
VARYING_ENDING = (
    "{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{%- if messages[-1]['content'] | length > 105 %}"
    "{{- '<|im_start|>assistant\\n' }}{%- else %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}{%- endif %}"
)


@pytest.fixture
def weightless(family_model, tmp_path):  # noqa: F811
    """A copy of the tiny Qwen2-family model without its weight file."""
    folder = shutil.copytree(family_model("qwen2"), tmp_path / "weightless")
    for path in folder.iterdir():
        if path.suffix in WEIGHT_SUFFIXES:
            path.unlink()
    return folder


def set_template(folder, template):
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    if template is not None:
        (folder / "chat_template.jinja").write_text(template)


def assert_refused(capsys, tmp_path, argv, *words):
    out = tmp_path / "out"
    code = main(["llm", "capture", *argv, "--out", str(out)])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("countlens: error:"), lines
    for word in words:
        assert word in lines[0], lines[0]
    assert "cannot load" not in lines[0]  # refused by the check itself, not by the missing weights
    assert not out.exists()


def test_good_config_passes_preflight_without_weights(weightless, tmp_path):
    preflight_capture(CaptureConfig().with_options(model=str(weightless)), out=tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_no_chat_template_refused_before_load(weightless, tmp_path, capsys):
    set_template(weightless, None)
    assert_refused(capsys, tmp_path, ["--model", str(weightless), *SMALL], "--template plain")


def test_generation_prompt_ending_differently_refused(weightless, tmp_path, capsys):
    set_template(weightless, VARYING_ENDING)
    assert_refused(capsys, tmp_path, ["--model", str(weightless), *SMALL], "ends prompts differently",
                   "--template plain")


def test_item_not_one_token_names_the_default_pairs_that_work(weightless, tmp_path, capsys):
    argv = ["--model", str(weightless), *[a if a != "a/b" else "a/b,zebra/lion" for a in SMALL]]
    assert_refused(capsys, tmp_path, argv, "pair zebra/lion is not one token per item",
                   "of the defaults, a/b, x/o, cat/dog, red/blue work", "--pairs")


def test_item_merging_with_its_neighbour_only_in_some_positions_refused(weightless, tmp_path, capsys):
    tok = AutoTokenizer.from_pretrained(str(weightless))
    tok.add_tokens([" a a a"])  # three targets in a row become one token; one or two stay apart
    tok.save_pretrained(str(weightless))
    assert_refused(capsys, tmp_path, ["--model", str(weightless), *SMALL], "pair a/b in the prompt n=",
                   "here though not everywhere", "--pairs")


def test_context_length_and_locations_refused_before_load(weightless, tmp_path, capsys):
    base = ["--model", str(weightless), "--pairs", "a/b", "--configs", "count", "--seeds", "0", "--quiet"]
    assert_refused(capsys, tmp_path, [*base, "--L", "1100", "--counts", "1100"], "context is 1024", "lower --L")
    assert_refused(capsys, tmp_path, [*base, "--L", "8", "--counts", "0:2", "--locations", "0:7"], "--locations")


def test_preflight_opens_no_weight_file(family_model, tmp_path, monkeypatch):  # noqa: F811
    import safetensors
    import torch
    import transformers.modeling_utils

    def refuse(*args, **kwargs):
        raise AssertionError("a weight loader was called")

    for module, name in ((safetensors, "safe_open"), (transformers.modeling_utils, "safe_open"),
                         (torch, "load"), (transformers.modeling_utils, "load_state_dict")):
        monkeypatch.setattr(module, name, refuse)
    opened, recording = [], [True]  # an audit hook cannot be removed: it stops recording instead
    sys.addaudithook(lambda event, args: opened.append(str(args[0]))
                     if recording[0] and event == "open" and args else None)
    folder = family_model("qwen2")
    try:
        preflight_capture(CaptureConfig().with_options(model=str(folder)), progress=False)
    finally:
        recording[0] = False
    weights = [p for p in opened if p.startswith(str(folder)) and p.endswith(WEIGHT_SUFFIXES)]
    assert any(p.startswith(str(folder)) for p in opened) and not weights


def test_gguf_without_chat_template_refused_from_its_header(tmp_path, capsys, monkeypatch):
    # The header alone says there is no template: refused before the vocabulary converts (tens of seconds
    # for a large one) and before anything is cached or hashed.
    from countlens.llm import models
    from tests.helpers.tiny_gguf import write_tiny_gguf

    def refuse(*args, **kwargs):
        raise AssertionError("the GGUF vocabulary was converted")

    monkeypatch.setenv("COUNTLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(models.cache, "_convert_tokenizer", refuse)
    path = write_tiny_gguf(tmp_path / "base.gguf", chat_template=None)
    assert_refused(capsys, tmp_path, ["--model", str(path), *SMALL], "no chat template", "--template plain")
    assert not (tmp_path / "cache").exists()
