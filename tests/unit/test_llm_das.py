"""The causal count subspace (countlens.llm.das): the numerics against closed forms, the interchange run through
the model against an explicit forward with a hand-written hook, the refusals before the weights load, and the
ground truth on a tiny organism (IIA >= 0.95 after its one live block, <= 0.05 before it; a random rank-1
subspace fails where a learned one passes; full rank equals the source runs' own answers)."""

from __future__ import annotations

import copy
import shutil

import numpy as np
import pytest

from countlens.llm.das import subspace as S
from tests.helpers.cli import assert_one_line_error, run_countlens

# The tiny organism of tests/unit/test_organisms.py (L = 3, one block, live head 0.1): trained once here.
TINY = dict(L=3, layers=1, heads=2, width=16, live_heads=[[0, 1]], pairs=[["a", "b"]], configs=["count", "tally"],
            lr=1e-2, batch_size=16, max_steps=400, eval_every=20, softmax="full")


# ------------------------------------------------------------------------------------------- numerics


def test_interchange_is_projection_of_the_difference():
    rng = np.random.default_rng(0)
    hb, hs = rng.standard_normal((5, 7)), rng.standard_normal((5, 7))
    R = S.random_basis(7, 3, seed=1)
    assert S.is_orthonormal(R)
    out = S.interchange(hb, hs, R)
    P = R @ R.T
    np.testing.assert_allclose(out, hb + (hs - hb) @ P, atol=1e-12)
    # the subspace's coordinates are the source's, the complement's the base's
    np.testing.assert_allclose(out @ R, hs @ R, atol=1e-12)
    np.testing.assert_allclose(out @ (np.eye(7) - P), hb @ (np.eye(7) - P), atol=1e-12)
    np.testing.assert_allclose(S.interchange(hb, hs, S.random_basis(7, 7, seed=2)), hs, atol=1e-12)  # full rank


def test_principal_angle_against_closed_forms():
    R = np.eye(5)[:, :2]
    assert S.principal_angle_deg(R, np.array([1.0, 1.0, 0, 0, 0])) == pytest.approx(0.0, abs=1e-6)
    assert S.principal_angle_deg(R, np.array([0, 0, 3.0, 0, 0])) == pytest.approx(90.0)
    assert S.principal_angle_deg(R, np.array([1.0, 0, 1.0, 0, 0])) == pytest.approx(45.0)
    with pytest.raises(ValueError):
        S.direction_basis(np.zeros(3))


def test_learned_basis_stays_orthonormal_under_adam(one_torch_thread):
    import torch

    module = S.orthonormal_module(12, 3, seed=0)
    np.testing.assert_allclose(S.basis_of(module).detach().numpy(), S.random_basis(12, 3, 0), atol=1e-5)
    target = torch.as_tensor(S.random_basis(12, 3, 5), dtype=torch.float32)
    optimiser = torch.optim.Adam(module.parameters(), lr=0.05)
    for _ in range(200):  # pull span(R) onto span(target): ‖(I − R Rᵀ) target‖²
        R = S.basis_of(module)
        loss = ((target - R @ (R.T @ target)) ** 2).sum()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    R = S.basis_of(module).detach().double().numpy()
    assert S.is_orthonormal(R, 1e-5)
    assert loss.item() < 1e-3  # the same subspace: every target column's angle to span(R) is ~0
    assert max(S.principal_angle_deg(R, t) for t in target.numpy().T) < 2.0
    with pytest.raises(ValueError):
        S.orthonormal_module(4, 5, seed=0)


# ------------------------------------------------------------------------- the interchange in the model


@pytest.fixture(scope="module")
def tiny(tiny_chat_model):
    from countlens.llm.models import ModelSpec
    from countlens.llm.prompts import PromptSettings, build_prompts

    loaded = ModelSpec(model=str(tiny_chat_model)).load(progress=False)
    prompts = build_prompts(loaded.tokenizer, PromptSettings(L=6, counts=[1, 3, 5], pairs=[["a", "b"]],
                                                             configs=["count"], seeds=[0, 1]))
    return loaded, prompts


def test_interchange_equals_an_explicit_hooked_forward(tiny):
    """The DAS step (prefix cache + one boundary step under the project's add setter) gives the logits of a whole
    forward of the base prompt whose boundary vector at the location is replaced, by a hook written here, with
    h_b + R Rᵀ (h_s − h_b) computed from the plain forward's hidden states."""
    import torch

    from countlens.llm.capture.residuals import pad_token_id
    from countlens.llm.das.search import BoundarySteps

    loaded, prompts = tiny
    model = loaded.model
    steps = BoundarySteps(model, prompts, pad_token_id(loaded.tokenizer))
    base, source, location = 0, 4, 1  # the output of block 0 (HF applies the final norm to the last one)
    assert prompts[base].n != prompts[source].n
    with torch.no_grad():
        hidden = [model(torch.tensor([p.ids]), output_hidden_states=True).hidden_states for p in (prompts[base],
                                                                                                   prompts[source])]
    hb, hs = hidden[0][location][0, -1].double().numpy(), hidden[1][location][0, -1].double().numpy()
    vectors = steps.vectors([location]).double().numpy()[:, 0]  # the step's own boundary vectors
    np.testing.assert_allclose(vectors[base], hb, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(vectors[source], hs, rtol=1e-4, atol=1e-4)
    R = S.random_basis(hb.size, 3, seed=3)
    step = torch.as_tensor(S.interchange_step(vectors[[base]], vectors[[source]], R), dtype=torch.float32)
    with torch.no_grad():
        got, *_ = steps.logits([base], steps.interchange(location, step))
    wanted_vector = torch.as_tensor(S.interchange(hb, hs, R), dtype=torch.float32)

    def replace(module, args, output):  # block location-1's output, last position replaced
        hiddens = output[0] if isinstance(output, tuple) else output
        hiddens = hiddens.clone()
        hiddens[0, -1] = wanted_vector
        return (hiddens, *output[1:]) if isinstance(output, tuple) else hiddens

    handle = model.model.layers[location - 1].register_forward_hook(replace)
    try:
        with torch.no_grad():
            wanted = model(torch.tensor([prompts[base].ids])).logits[0, -1]
    finally:
        handle.remove()
    np.testing.assert_allclose(got[0].numpy(), wanted.numpy(), rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        clean, *_ = steps.logits([base])
    assert float((clean[0] - wanted).abs().max()) > 1e-3  # the interchange did change the logits


# --------------------------------------------------------------------------------------------- refusals


@pytest.fixture
def weightless(tiny_chat_model, tmp_path):
    folder = shutil.copytree(tiny_chat_model, tmp_path / "weightless")
    for path in folder.iterdir():
        if path.suffix in (".safetensors", ".bin"):
            path.unlink()
    return folder


SMALL = ["--L", "6", "--counts", "1:5", "--pairs", "a/b", "--configs", "count", "--seeds", "0:3", "--quiet"]


@pytest.mark.parametrize("argv, words", [
    (["--ranks", "1,100000"], ["--ranks", "width"]),
    (["--locations", "99"], ["--locations"]),
    (["--seeds", "0", "--counts", "1,2"], ["pairs", "--per-count"]),
    (["--held-out", "1.5"], ["--held-out"]),
    (["--counts", "3"], ["--counts"]),
])
def test_bad_input_is_refused_in_one_line_before_the_weights_load(weightless, tmp_path, capsys, argv, words):
    out = tmp_path / "out"
    code, _, err = run_countlens(capsys, "llm", "das", "--model", str(weightless), *SMALL, *argv, "--out", str(out))
    assert_one_line_error(code, err, *words)
    assert "cannot load" not in err and not out.exists()


# ------------------------------------------------------------------------------------------ the organism


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    from countlens.core.threads import torch_threads
    from countlens.llm.organisms.experiment import OrganismConfig, run_organism

    folder = tmp_path_factory.mktemp("organism") / "tiny"
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        mp.setenv("COUNTLENS_CACHE", str(tmp_path_factory.mktemp("cache")))
        run_organism(OrganismConfig(**TINY), out=folder, reuse=True)
    return folder


@pytest.fixture(scope="module")
def searched(organism, tmp_path_factory):
    """DAS on the organism at its two locations (the embeddings; after its one, live, block), ranks 1, 2 and
    full (16), without the random-model control; saved and read back."""
    from countlens.core.threads import torch_threads
    from countlens.llm.das.experiment import DasConfig, DasResult, run_das
    from countlens.llm.prompts import PromptSettings

    prompts = PromptSettings(L=3, counts=[0, 1, 2, 3], per_count=2, pairs=[["a", "b"]], configs=["count", "tally"],
                             seeds=[0, 1, 2, 3])
    config = DasConfig(model=str(organism), prompts=prompts, ranks=[1, 2, 16], steps=60, random_model=False)
    with torch_threads(1):
        result = run_das(config)
    folder = tmp_path_factory.mktemp("das")
    result.save(folder)
    return config, result, DasResult.read(folder), folder


def _rows(result, index):
    return {r["rank"]: r for r in result.rows if r["index"] == index}


def test_organism_ground_truth(searched):
    _, result, _, _ = searched
    after, before = _rows(result, 1), _rows(result, 0)
    # after the last live block the boundary's residual alone decides the first answer token
    assert max(r["iia"] for r in after.values()) >= 0.95
    smallest = next(loc for loc in result.locations if loc["index"] == 1)["smallest_rank"]
    assert smallest is not None and smallest <= 4
    # before the first block with a live head the boundary's residual is the same in every prompt
    assert max(r["iia"] for r in before.values()) <= 0.05
    assert all(r["iia"] == r["iia_base"] and r["shift"] == pytest.approx(0.0, abs=1e-9) for r in before.values())
    # the check can fail: a random rank-1 subspace at the same location does not reach it
    assert after[1]["iia_random"] < 0.95
    assert after[16]["iia"] >= 0.95 and after[16]["shift"] > 0.8


def test_organism_verdicts_pass_here_and_fail_where_they_must(searched):
    from countlens.llm.das.experiment import das_locations, organism_verdicts

    _, result, _, _ = searched
    assert das_locations([[0, 1]], 1) == ([0], 1)
    assert das_locations([[1, 0], [2, 3]], 4) == ([0, 1], 3)
    rows = organism_verdicts(result, [[0, 1]], 1)
    assert [r["name"] for r in rows] == ["DAS after the live heads", "DAS before the live heads"]
    assert all(r["passed"] for r in rows), rows
    # a result whose subspaces are random ones (the random control's IIA at rank 1) fails the first check
    crippled = copy.deepcopy(result)
    for r in crippled.rows:
        r["iia"] = r["iia_random"] if r["rank"] == 1 else 0.0
    assert not organism_verdicts(crippled, [[0, 1]], 1)[0]["passed"]
    # and the second fails where the location before the live head is read as its full-rank patch would be
    # after it (location 1's rows standing in for location 0's)
    shifted = copy.deepcopy(result)
    after = {r["rank"]: r["iia"] for r in result.rows if r["index"] == 1}
    for r in shifted.rows:
        r["iia"] = after[r["rank"]] if r["index"] == 0 else r["iia"]
    assert not organism_verdicts(shifted, [[0, 1]], 1)[1]["passed"]
    with pytest.raises(ValueError):  # a result without the locations the checks need
        organism_verdicts(result, [[1, 1]], 2)


def test_full_rank_interchange_is_the_source_runs_own_first_token(searched, organism):
    """At full rank the interchange is boundary patching at the last location, so its IIA is the fraction of
    held-out pairs whose *source* prompt, run plainly, answers its own count's first token — computed here from
    plain forwards of the source prompts."""
    import torch

    from countlens.llm.answers import answer_token_ids
    from countlens.llm.das.experiment import _pair_set, plan_das
    from countlens.llm.models import ModelSpec

    config, result, _, _ = searched
    plan = plan_das(config)
    members = sorted({i for pair in plan.held_out for i in pair})
    pairs = _pair_set(plan, plan.held_out, members)
    loaded = ModelSpec(model=str(organism)).load(progress=False)
    right = []
    with torch.no_grad():
        for s in pairs.source:
            p = plan.prompts[members[s]]
            first = int(loaded.model(torch.tensor([p.ids])).logits[0, -1].argmax())
            right.append(first == answer_token_ids(loaded.tokenizer, p.n)[0])
    assert _rows(result, 1)[16]["iia"] == pytest.approx(float(np.mean(right)), abs=1e-9)


def test_saved_result_and_subspaces_read_back(searched):
    config, result, back, folder = searched
    assert (folder / "das.csv").read_text().splitlines()[0].startswith(
        "location,index,rank,iia,shift,iia_random,iia_probe,iia_mean_diff,angle_probe_deg")
    assert back.rows == result.rows and back.n_held_out_pairs == result.n_held_out_pairs
    assert set(back.subspaces) == {"embed", "blocks.0.hook_resid_post"} | {
        f"{name}:{k}" for name in ("embed", "blocks.0.hook_resid_post") for k in (1, 2, 16)}
    for name, basis in back.subspaces.items():
        assert basis.shape[0] == 16 and S.is_orthonormal(basis, 1e-4), name
        np.testing.assert_array_equal(basis, result.subspaces[name])
    last = _rows(result, 1)
    # the angle to the probe is that of the saved basis
    assert last[16]["angle_probe_deg"] == pytest.approx(0.0, abs=1e-3)  # full rank holds every direction
    assert 0.0 <= last[1]["angle_probe_deg"] <= 90.0
    from countlens.llm.das.figures import draw_das

    written = draw_das(back, folder)  # the figure redraws from the saved result alone
    assert {p.name for p in written} == {"das.png", "das.pdf"} and all(p.stat().st_size > 0 for p in written)
