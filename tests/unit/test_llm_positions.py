"""The count at every item (``llm capture --positions items``): one row per (prompt, position) from the same
forward pass, equal to an independent ``output_hidden_states`` forward at that position; the position columns
against a brute-force recount of each prompt's items; the boundary rows equal a boundary capture's, whose
shard files are byte for byte those of the capture loop before items existed; both backends; resume; the disk
check and the refusals, before any weights load.
"""

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.core.store import (
    COLUMNS,
    POSITION_COLUMNS,
    SHARDS,
    ActivationWriter,
    acts_array,
    load_capture,
    read_meta,
)
from countlens.llm import CaptureConfig, plan_capture, run_capture
from countlens.llm.capture.experiment import capture_runner
from countlens.llm.capture.residuals import batches, capture_rows, kept_positions
from countlens.llm.models import load_model
from tests.helpers.hidden_states import ATOL, final_norm
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer, tiny_models  # noqa: F401

BASE = dict(L=14, counts=[0, 2, 5, 14], pairs=[["a", "b"], ["cat", "dog"]], configs=["count", "tally"], seeds=[0],
            batch_size=3, shard_rows=5)


def all_positions(model, ids: list[int]) -> torch.Tensor:
    """(n_blocks + 1, T, d) of one unpadded prompt from ``output_hidden_states`` (the last one normed)."""
    with torch.no_grad():
        hs = model(input_ids=torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.stack([h[0] for h in hs])


def assert_rows_match_hidden_states(model, tokenizer, ds, special: bool = False, rtol: float = 1e-6) -> None:
    """Every row's vectors equal the unpadded forward's hidden states at the row's position."""
    acts = torch.from_numpy(acts_array(ds, dtype=np.float32))
    rows = ds.remove_columns("acts")
    cache: dict[str, torch.Tensor] = {}
    for i, row in enumerate(rows):
        if row["prompt"] not in cache:
            ids = tokenizer(row["prompt"], add_special_tokens=special)["input_ids"]
            assert len(ids) == row["n_tokens"]
            cache[row["prompt"]] = all_positions(model, ids)
        ref = cache[row["prompt"]][:, row["position"]]  # (n_locations, d)
        tol = ATOL + rtol * ref.abs().amax(dim=1, keepdim=True)
        assert torch.all((acts[i, :-1] - ref[:-1]).abs() <= tol[:-1]), (i, float((acts[i, :-1] - ref[:-1]).abs().max()))
        with torch.no_grad():
            normed = final_norm(model)(acts[i, -1])
        assert torch.all((normed - ref[-1]).abs() <= tol[-1]), i


def recount(tokenizer, rows) -> dict[str, list]:
    """The position columns recomputed by brute force: each prompt re-tokenized, its item tokens decoded and
    compared with the pair's target word."""
    out = {k: [] for k in POSITION_COLUMNS}
    seen: dict[str, int] = {}
    for row in rows:
        seen.setdefault(row["prompt"], row["prompt_id"])
    for prompt, pid in sorted(seen.items(), key=lambda kv: kv[1]):
        row = next(r for r in rows if r["prompt_id"] == pid)
        ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        target = row["pair"].split("/")[0]
        words = [tokenizer.decode([t]).strip() for t in ids[row["first_item_index"]:row["last_item_index"] + 1]] \
            if row["first_item_index"] >= 0 else []
        assert len(words) == row["n"] + row["m"]
        running = 0
        for k, word in enumerate(words):
            running += word == target
            for key, value in zip(POSITION_COLUMNS, (pid, row["first_item_index"] + k, k, word == target, running),
                                  strict=True):
                out[key].append(value)
        assert running == row["n"]
        for key, value in zip(POSITION_COLUMNS, (pid, len(ids) - 1, -1, False, row["n"]), strict=True):
            out[key].append(value)
    return out


@pytest.mark.parametrize("name, side", [("llama-3", "left")])  # every family: tests/integration/test_model_families.py
def test_items_rows_equal_hidden_states_and_a_recount(family_model, tmp_path, name, side):  # noqa: F811
    folder = family_model(name)
    config = CaptureConfig().with_options(model=str(folder), positions="items", padding_side=side, **BASE)
    result = run_capture(config, tmp_path / "cap", progress=False)
    ds = load_capture(result.folder)
    meta = read_meta(result.folder)
    plan = plan_capture(config, progress=False)
    assert meta["positions"] == "items" and meta["n_prompt_rows"] == meta["n_prompts"] == len(plan.prompts) == 16
    assert len(ds) == result.n_rows == meta["n_rows"] == sum(p.n + p.m + 1 for p in plan.prompts)
    rows = ds.remove_columns("acts").to_list()
    # the rows are the plan's prompts in order, each prompt's items in order and then its boundary
    assert [r["prompt"] for r in rows] == [p.prompt for p in plan.prompts for _ in kept_positions(p, "items")]
    want = recount(plan.tokenizer, rows)
    for key in POSITION_COLUMNS:
        assert [r[key] for r in rows] == want[key], key
    assert any(r["is_target"] for r in rows) and any(not r["is_target"] and r["item_index"] >= 0 for r in rows)
    loaded = load_model(str(folder), progress=False)
    assert_rows_match_hidden_states(loaded.model, loaded.tokenizer, ds)


def test_boundary_rows_equal_a_boundary_capture_and_its_files_are_unchanged(tiny_models, tmp_path):  # noqa: F811
    """The boundary rows of an items capture are the boundary capture's vectors bit for bit (same forward
    passes); and a boundary capture writes the very bytes the capture loop wrote before positions existed
    (that loop, copied here, over the same runner)."""
    model = str(tiny_models["llama"])
    plain_config = CaptureConfig().with_options(model=model, **BASE)
    plain = load_capture(run_capture(plain_config, tmp_path / "plain", progress=False).folder)
    items = load_capture(run_capture(plain_config.with_options(positions="items"), tmp_path / "items",
                                     progress=False).folder)
    boundary = np.flatnonzero(np.asarray(items["item_index"]) == -1)
    assert np.array_equal(acts_array(items, dtype=np.float32)[boundary], acts_array(plain, dtype=np.float32))
    assert [items["prompt"][i] for i in boundary] == plain["prompt"]
    assert plain.column_names == [*COLUMNS[1:], "acts"] and "positions" not in read_meta(tmp_path / "plain")
    assert "positions" not in read_meta(tmp_path / "plain")["settings"]

    plan = plan_capture(plain_config, progress=False)
    loaded, runner = capture_runner(plan, progress=False)
    writer = ActivationWriter(tmp_path / "old-loop", {"locations": runner.names, "d": runner.d,
                                                      "settings": plan.key})
    for s, shard in enumerate(plan.shards()):  # the capture loop before items existed
        acts = np.empty((len(shard), len(runner.names), runner.d), dtype=np.float32)
        with torch.inference_mode():
            for idx in batches(shard, runner.batch_size):
                acts[idx] = runner.run_batch([shard[i] for i in idx])
        writer.write_shard(s, capture_rows(shard, acts))
    new, old = sorted((tmp_path / "plain" / SHARDS).rglob("*.*")), sorted((tmp_path / "old-loop" / SHARDS).rglob("*.*"))
    assert [p.relative_to(tmp_path / "plain") for p in new] == [p.relative_to(tmp_path / "old-loop") for p in old]
    assert len(new) == 3 * len(plan.shards())
    for a, b in zip(new, old, strict=True):
        assert a.read_bytes() == b.read_bytes(), a


def test_transformer_lens_items_equal_hf_items(tiny_models, tmp_path):  # noqa: F811
    model = str(tiny_models["gpt2"])
    kw = dict(model=model, positions="items", L=10, counts=[1, 6], pairs=[["a", "b"]], configs=["count"],
              seeds=[0, 1], batch_size=4)
    hf = load_capture(run_capture(CaptureConfig().with_options(**kw), tmp_path / "hf", progress=False).folder)
    tl = load_capture(run_capture(CaptureConfig().with_options(**kw, backend="transformer-lens"), tmp_path / "tl",
                                  progress=False).folder)
    assert tl.remove_columns("acts").to_list() == hf.remove_columns("acts").to_list()
    np.testing.assert_allclose(acts_array(tl)[:, :3], acts_array(hf), atol=ATOL, rtol=0)
    assert read_meta(tmp_path / "tl")["locations"][3:] == ["blocks.0.hook_resid_mid", "blocks.1.hook_resid_mid"]


def test_items_with_answers_repeat_the_prompts_answer_on_its_rows(tiny_models, tmp_path):  # noqa: F811
    kw = dict(model=str(tiny_models["qwen2"]), L=10, counts=[0, 3, 10], pairs=[["a", "b"]], configs=["count"],
              seeds=[0], batch_size=2, answers=True, answer_tokens=2)
    items = load_capture(run_capture(CaptureConfig().with_options(**kw, positions="items"), tmp_path / "i",
                                     progress=False).folder)
    plain = load_capture(run_capture(CaptureConfig().with_options(**kw), tmp_path / "p", progress=False).folder)
    boundary = np.flatnonzero(np.asarray(items["item_index"]) == -1)
    for name in ("answer_text", "answer", "answer_logprob", "answer_logprobs", "answer_expected", "answer_rank"):
        column = items[name]
        assert [column[i] for i in boundary] == plain[name], name
        pid = items["prompt_id"]
        assert all(column[i] == column[boundary[pid[i]]] for i in range(len(items))), name
    np.testing.assert_allclose(acts_array(items)[boundary], acts_array(plain), atol=ATOL, rtol=0)
    assert_rows_match_hidden_states(load_model(kw["model"], progress=False).model,
                                    load_model(kw["model"], progress=False).tokenizer, items)


def test_an_interrupted_items_capture_resumes_to_the_same_rows(tiny_models, tmp_path):  # noqa: F811
    config = CaptureConfig().with_options(model=str(tiny_models["llama"]), positions="items", **BASE)
    out = tmp_path / "cap"
    run_capture(config, out, progress=False)
    reference = load_capture(out).remove_columns("acts").to_list()
    acts = acts_array(load_capture(out))
    import shutil

    from countlens.core.io import read_json, write_json_atomic

    shutil.rmtree(out / SHARDS / "00001")
    write_json_atomic(out / "meta.json", {**read_json(out / "meta.json", "meta"), "complete": False})
    run_capture(config, out, progress=False)
    assert load_capture(out).remove_columns("acts").to_list() == reference
    np.testing.assert_array_equal(acts_array(load_capture(out)), acts)


def test_resume_key_grows_only_with_items(tiny_models):  # noqa: F811
    base = CaptureConfig().with_options(model=str(tiny_models["llama"]), **BASE)
    plain, items = plan_capture(base, progress=False), plan_capture(base.with_options(positions="items"), progress=False)
    assert "positions" not in plain.key and items.key == {**plain.key, "positions": "items"}
    assert plain.rows() == 16 and items.rows() == sum(p.n + p.m + 1 for p in items.prompts)
    assert all(len(p.item_indices) == len(p.item_targets) == p.n + p.m for p in items.prompts)
    acts, other = items.disk_bytes()
    assert acts == items.rows() * 3 * 32 * 4 and other > 0
    assert "rows (16 prompts) x 3 locations x 32 dims x 4 bytes" in items.size_text()


def test_bad_positions_are_refused_before_the_weights_load(tiny_models, tmp_path, monkeypatch):  # noqa: F811
    import transformers

    def refuse(*args, **kwargs):
        raise AssertionError("the weights were loaded before the bad input was refused")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    model = str(tiny_models["llama"])
    for extra, words in [(dict(positions="every"), "positions must be one of boundary, items"),
                         (dict(positions="items", counts=[0]), "counts are all 0")]:
        with pytest.raises(ConfigError, match=words) as caught:  # when the config is built, or by its plan
            run_capture(CaptureConfig().with_options(model=model, **{**BASE, **extra}), tmp_path / "out",
                        progress=False)
        assert caught.value.field == "positions"
        assert not (tmp_path / "out").exists()
