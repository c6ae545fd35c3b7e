"""The DAS checks of ``organism check`` (countlens.llm.organisms.location_checks.das_checks) on a tiny organism
planted in the first of two blocks (block 1 zeroed): they pass where the construction says they must, the
full-rank IIA after the live block is the source runs' own first-token accuracy computed from plain forwards,
and each check fails where it must — ``DAS after`` on the random-initialised model of the same architecture,
``DAS before`` when the live head is claimed a block too late (the residual after the real live block then
counts as "before")."""

from __future__ import annotations

import copy

import numpy as np
import pytest

# tests/unit/test_organisms.py's TINY with a second, zeroed block after the live one (so the location after the
# live block is not the last, and a claim one block late has a "before" location that carries the count).
EARLY = dict(L=3, layers=2, heads=2, width=16, live_heads=[[0, 1]], pairs=[["a", "b"]], configs=["count", "tally"],
             lr=1e-2, batch_size=16, max_steps=600, eval_every=20, softmax="full")


@pytest.fixture(scope="module")
def early(tmp_path_factory):
    """(folder, OrganismResult, LoadedModel, held-out seeds) of the early organism, trained once."""
    from countlens.core.threads import torch_threads
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.experiment import HELD_OUT_SEED, OrganismConfig, run_organism

    folder = tmp_path_factory.mktemp("organism") / "early"
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        mp.setenv("COUNTLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        result = run_organism(OrganismConfig(**EARLY), out=folder, reuse=True)
    seeds = [HELD_OUT_SEED + j for j in range(int(result.config["held_out_seeds"]))]
    return folder, result, ModelSpec(model=str(folder)).load(False), seeds


def _claimed(result, live_heads):
    claimed = copy.deepcopy(result)
    claimed.live_heads = live_heads
    return claimed


@pytest.fixture(scope="module")
def das_rows(early, tmp_path_factory):
    """(rows, kept folder): :func:`das_checks` of the early organism as planted, its DAS result kept."""
    from countlens.core.threads import torch_threads
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.kept import Kept, organism_stamp
    from countlens.llm.organisms.location_checks import das_checks

    folder, result, loaded, seeds = early
    keep = tmp_path_factory.mktemp("checks")
    with torch_threads(1):
        rows = das_checks(ModelSpec(model=str(folder)), result, loaded, seeds, Kept(keep, organism_stamp(result)))
    return rows, keep


def test_the_das_checks_pass_on_the_planted_organism(early, das_rows):
    from countlens.llm.das.experiment import DAS_LEAK, IIA_REACHED, DasResult

    _, result, _, _ = early
    assert result.converged
    rows, keep = das_rows
    after, before = rows
    assert (after["name"], before["name"]) == ("DAS after the live heads", "DAS before the live heads")
    assert after["passed"] and after["value"] >= IIA_REACHED and "at location 1" in after["detail"]
    assert before["passed"] and before["value"] <= DAS_LEAK and "locations [0]" in before["detail"]
    kept = DasResult.read(keep / "das")  # the run is kept as the das stage writes it, its bases beside
    assert sorted({r["rank"] for r in kept.rows}) == [1, 2, 4, 16] and {r["index"] for r in kept.rows} == {0, 1}
    smallest = next(loc["smallest_rank"] for loc in kept.locations if loc["index"] == 1)
    assert f"smallest rank reaching it: {smallest}" in after["detail"]
    assert smallest is not None and smallest < 16  # a finding, on this organism: a learned subspace below full rank
    # ... which a random subspace of that rank, on the same pairs, does not reach
    random = next(r["iia_random"] for r in kept.rows if r["index"] == 1 and r["rank"] == smallest)
    assert random < IIA_REACHED and f"a random subspace of rank {smallest}: IIA {random:.3f}" in after["detail"]
    # before the live block the interchange adds nothing: every rank's IIA is the base runs' own
    assert all(r["iia"] == r["iia_base"] and r["shift"] == pytest.approx(0.0, abs=1e-9)
               for r in kept.rows if r["index"] == 0)
    assert set(kept.subspaces) >= {"embed", "blocks.0.hook_resid_post"}


def test_full_rank_iia_after_the_live_block_is_the_source_runs_own_accuracy(early, das_rows):
    """At full rank the interchange after the (last) live block is boundary patching there, and no head after it
    moves anything: the IIA is the fraction of held-out pairs whose source prompt, run plainly (``generate``'s
    first token), answers its own count's first token."""
    import torch

    from countlens.llm.answers import answer_token_ids
    from countlens.llm.das.experiment import DasResult, _pair_set, plan_das
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.location_checks import das_config

    folder, result, loaded, seeds = early
    _, keep = das_rows
    plan = plan_das(das_config(ModelSpec(model=str(folder)), result, loaded.tokenizer, seeds))
    members = sorted({i for pair in plan.held_out for i in pair})
    pairs = _pair_set(plan, plan.held_out, members)
    right = []
    with torch.no_grad():
        for s in pairs.source:
            p = plan.prompts[members[s]]
            first = loaded.model.generate(torch.tensor([p.ids]), max_new_tokens=1, do_sample=False)[0, -1]
            right.append(int(first) == answer_token_ids(loaded.tokenizer, p.n)[0])
    full = next(r for r in DasResult.read(keep / "das").rows if r["index"] == 1 and r["rank"] == 16)
    assert full["iia"] == pytest.approx(float(np.mean(right)), abs=1e-9)


def test_das_after_fails_on_the_random_initialised_model(early):
    """The same run on the organism's architecture at random initialisation: nothing there answers the source's
    count, so even the full-rank interchange after the live block (boundary patching there) stays far below the
    bound."""
    from countlens.core.threads import torch_threads
    from countlens.llm.capture.experiment import random_init_model
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.location_checks import das_checks

    folder, result, loaded, seeds = early
    spec = ModelSpec(model=str(folder))
    with torch_threads(1):
        random = random_init_model(spec.resolve(False), loaded.tokenizer, 0)
        after, before = das_checks(spec, result, random, seeds)
    assert not after["passed"] and after["value"] < 0.5
    assert before["passed"]  # the boundary's residual before any block is one vector in every model


def test_das_before_fails_when_the_live_head_is_claimed_a_block_late(early):
    """The live head claimed in block 1: the residual after block 0, where the real live head has already read
    the items, is then a "before" location, and DAS reads the count there."""
    from countlens.core.threads import torch_threads
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.location_checks import das_checks

    folder, result, loaded, seeds = early
    with torch_threads(1):
        after, before = das_checks(ModelSpec(model=str(folder)), _claimed(result, [[1, 1]]), loaded, seeds)
    assert after["passed"] and "at location 2" in after["detail"]  # after block 1 nothing has moved since block 0
    assert not before["passed"] and before["value"] >= 0.95 and "locations [0, 1]" in before["detail"]


def test_a_kept_das_run_is_reused_by_a_rerun(early, das_rows, monkeypatch):
    from countlens.llm.das import experiment as das_experiment
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.kept import Kept, organism_stamp
    from countlens.llm.organisms.location_checks import das_checks

    def not_again(*args, **kwargs):
        raise AssertionError("recomputed a kept DAS run")
    monkeypatch.setattr(das_experiment, "run_das", not_again)
    folder, result, loaded, seeds = early
    rows, keep = das_rows
    again = das_checks(ModelSpec(model=str(folder)), result, loaded, seeds, Kept(keep, organism_stamp(result)))
    assert again == rows
    with pytest.raises(AssertionError, match="recomputed"):  # another organism's: computed afresh
        das_checks(ModelSpec(model=str(folder)), result, loaded, seeds,
                   Kept(keep, {**organism_stamp(result), "steps": -1}))
