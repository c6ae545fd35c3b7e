"""Model organisms (countlens.llm.organisms): a tiny organism trained once per session, loaded as any Hugging
Face model; countlens's greedy answers against ``generate``; the planted zeros; resuming; refusals."""

from __future__ import annotations

import numpy as np
import pytest

from countlens.core.errors import ConfigError, UsageError
from countlens.llm.organisms import train as T
from countlens.llm.organisms.experiment import (
    CHECKPOINT,
    OrganismConfig,
    OrganismResult,
    answerable,
    held_out_correct,
    parse_live_heads,
    plan_organism,
    run_organism,
)

# L = 3 with one live head of two, MLPs: ~200 steps of a width-16 model (seconds). The full softmax, as the
# report's test preset (at L = 3 the task softmax takes twice the steps; test_the_task_softmax_... tests it).
TINY = dict(L=3, layers=1, heads=2, width=16, live_heads=[[0, 1]], pairs=[["a", "b"]], configs=["count", "tally"],
            lr=1e-2, batch_size=16, max_steps=400, eval_every=20, softmax="full")


@pytest.fixture(scope="module")
def organism(tmp_path_factory):
    """(folder, result) of the tiny organism, trained once (and kept in a cache of its own, ``CACHE``)."""
    from countlens.core.threads import torch_threads

    folder = tmp_path_factory.mktemp("organism") / "tiny"
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        mp.setenv("COUNTLENS_CACHE", str(cache))
        result = run_organism(OrganismConfig(**TINY), out=folder, reuse=True)
    CACHE.append(cache)
    return folder, result


CACHE: list = []


@pytest.fixture(scope="module")
def loaded(organism):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, _ = organism
    model = AutoModelForCausalLM.from_pretrained(str(folder))
    model.eval()
    return model, AutoTokenizer.from_pretrained(str(folder))


def test_the_tiny_organism_trains_to_the_target_and_says_so(organism):
    folder, result = organism
    assert result.converged and result.held_out_accuracy >= 0.99
    assert [r["n"] for r in result.held_out] == [0, 1, 2, 3]
    assert sum(r["prompts"] for r in result.held_out) == 4 * 1 * 2 * 2  # counts x pairs x wordings x seeds
    assert result.curve and result.curve[-1]["step"] == result.steps
    assert OrganismResult.read(folder).to_dict() == result.to_dict()
    assert not (folder / CHECKPOINT).exists()  # a finished organism keeps no checkpoint


def test_it_loads_as_a_stock_llama_with_the_chat_template(organism, loaded):
    model, tok = loaded
    assert type(model).__name__ == "LlamaForCausalLM"
    assert model.config.num_hidden_layers == 1 and model.config.num_attention_heads == 2
    assert tok.chat_template and tok.eos_token == "<|im_end|>"
    assert model.generation_config.eos_token_id == tok.eos_token_id


def test_countlens_greedy_answers_equal_generate_and_the_recorded_accuracy(organism, loaded):
    import torch

    from countlens.llm.answers import answer_prompts

    folder, result = organism
    model, tok = loaded
    plan = plan_organism(OrganismConfig(**TINY), folder.parent / "unused")
    generated = []
    with torch.inference_mode():
        answers = answer_prompts(model, tok, plan.held_out, batch_size=5)
        for p in plan.held_out:
            out = model.generate(torch.tensor([p.ids]), max_new_tokens=16, do_sample=False)
            generated.append(tok.decode(out[0, len(p.ids):], skip_special_tokens=True))
    assert answers.answer_text == generated
    right = np.array([a == p.n for a, p in zip(answers.answer, plan.held_out, strict=True)])
    assert right.mean() == pytest.approx(result.held_out_accuracy)
    # The training loop's one-forward accuracy is greedy decoding's.
    assert (held_out_correct(model, plan) == right).all()


def test_dead_heads_write_exactly_zero_and_live_ones_do_not(loaded):
    model, _ = loaded
    o = model.model.layers[0].self_attn.o_proj.weight.detach().numpy()  # (d, heads * head_dim)
    assert (o[:, 0:8] == 0).all()  # head 0.0 is dead
    assert np.abs(o[:, 8:16]).min(axis=0).max() > 0 and np.linalg.norm(o[:, 8:16]) > 0.1


def test_attention_only_keeps_every_mlp_weight_zero_through_training(tmp_path):
    config = OrganismConfig(**{**TINY, "attention_only": True, "max_steps": 6, "eval_every": 3})
    result = run_organism(config, out=tmp_path / "a")
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tmp_path / "a"))
    assert result.mlp_width == 0 and model.config.intermediate_size == 1
    for name in T.MLP_MODULES:
        assert (getattr(model.model.layers[0].mlp, name).weight == 0).all()
    assert (model.model.layers[0].self_attn.o_proj.weight[:, 0:8] == 0).all()


def test_an_interrupted_run_resumes_to_the_same_weights(tmp_path):
    from safetensors.numpy import load_file

    short = OrganismConfig(**{**TINY, "max_steps": 8, "eval_every": 4, "target_accuracy": 1.0})
    straight = run_organism(short, out=tmp_path / "straight")
    first = run_organism(OrganismConfig(**{**TINY, "max_steps": 4, "eval_every": 4, "target_accuracy": 1.0}),
                         out=tmp_path / "resumed")
    assert first.steps == 4 and (tmp_path / "resumed" / CHECKPOINT).is_file()
    resumed = run_organism(short, out=tmp_path / "resumed")
    assert resumed.steps == straight.steps == 8
    assert [c["step"] for c in resumed.curve] == [4, 8]
    a, b = (load_file(str(tmp_path / f / "model.safetensors")) for f in ("straight", "resumed"))
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    # A finished folder with the same settings is reused as it is.
    again = run_organism(short, out=tmp_path / "resumed")
    assert again.to_dict() == resumed.to_dict()


def test_the_task_softmax_is_the_cross_entropy_over_the_tasks_tokens_and_leaves_the_rest_untouched(tmp_path):
    import torch
    from safetensors.numpy import load_file

    config = OrganismConfig(**{**TINY, "max_steps": 3, "eval_every": 3, "softmax": "task"})
    plan = plan_organism(config, tmp_path / "unused")
    tokens = {t for p in plan.held_out for t in p.ids} | {t for a in plan.answers.values() for t in a}
    assert plan.vocab.tolist() == sorted(tokens | {plan.shape.eos})
    model = T.build_model(plan.shape, config.live(), config.seed)
    prompts = plan.held_out[:6]
    batch = T.sequences([p.ids for p in prompts], [plan.answers[p.n] for p in prompts], plan.shape.eos,
                        plan.shape.pad)
    ids, mask, rows, cols, targets = batch
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[rows, cols].double()  # (N, V), the full head
        cols_of = {int(t): j for j, t in enumerate(plan.vocab)}
        restricted = torch.log_softmax(logits[:, plan.vocab], dim=-1)
        want = -np.mean([float(restricted[i, cols_of[int(t)]]) for i, t in enumerate(targets)])
        full = -np.mean([float(torch.log_softmax(logits[i], -1)[t]) for i, t in enumerate(targets)])
        assert float(T.answer_loss(model, batch, plan.vocab)) == pytest.approx(want, rel=1e-5)
        assert float(T.answer_loss(model, batch)) == pytest.approx(full, rel=1e-5)
        assert want < full  # fewer tokens to share the probability with
        with pytest.raises(ValueError, match="outside"):
            T.answer_loss(model, batch, plan.vocab[plan.vocab != plan.shape.eos])
    # Trained with it, the embedding rows of every other token are never touched.
    run_organism(config, out=tmp_path / "o")
    trained = load_file(str(tmp_path / "o" / "model.safetensors"))["model.embed_tokens.weight"]
    initial = model.model.embed_tokens.weight.detach().numpy()
    others = np.setdiff1d(np.arange(len(initial)), plan.vocab.numpy())
    assert np.array_equal(trained[others], initial[others])
    assert not np.array_equal(trained[plan.vocab.numpy()], initial[plan.vocab.numpy()])


def test_live_heads_parse_and_are_checked_against_the_shape():
    assert parse_live_heads("0.1,1.3") == [[0, 1], [1, 3]] and parse_live_heads(None) is None
    with pytest.raises(ConfigError, match="block.head"):
        parse_live_heads("0-1")
    with pytest.raises(ConfigError) as err:
        OrganismConfig(layers=2, heads=4, live_heads=[[2, 0]])
    assert err.value.field == "live_heads"
    with pytest.raises(ConfigError) as err:
        OrganismConfig(heads=4, live_heads=[[0, 4]])
    assert err.value.field == "live_heads"


def test_the_learning_rate_warms_up_over_its_steps_then_falls_as_one_over_the_step():
    from countlens.llm.organisms.experiment import DECAY, learning_rate

    for warmup in (1, 50, 300):
        rates = [learning_rate(0.03, step, warmup) for step in range(4 * DECAY)]
        assert rates[0] == pytest.approx(0.03 / warmup)  # step 0 is the first of the warm-up
        assert rates[warmup - 1] == pytest.approx(0.03 * min(1.0, DECAY / (warmup - 1)) if warmup > DECAY else 0.03)
        assert rates[-1] == pytest.approx(0.03 * DECAY / (4 * DECAY - 1))
        assert all(b <= a for a, b in zip(rates[max(warmup, DECAY):-1], rates[max(warmup, DECAY) + 1:], strict=True))
    with pytest.raises(ConfigError) as err:
        OrganismConfig(warmup=0)
    assert err.value.field == "warmup"
    # decay: the step from which the rate falls; beyond the last step the rate stays at its peak
    assert [learning_rate(0.01, s, 300, 1000) for s in (299, 999, 1000, 4000)] == pytest.approx(
        [0.01, 0.01, 0.01, 0.01 * 1000 / 4000])
    assert {learning_rate(0.01, s, 300, 10**9) for s in range(299, 20_000, 997)} == {0.01}
    assert OrganismConfig().decay == DECAY
    with pytest.raises(ConfigError) as err:
        OrganismConfig(decay=0)
    assert err.value.field == "decay"


def test_width_must_divide_into_even_heads():
    with pytest.raises(ConfigError) as err:
        OrganismConfig(width=30, heads=4)
    assert err.value.field == "width"
    with pytest.raises(ConfigError) as err:
        OrganismConfig(width=12, heads=4)  # head size 3: rotary positions need it even
    assert err.value.field == "width"


def test_an_answer_the_tokenizer_cannot_write_is_refused():
    class Digits:  # writes 0..9 as one token each and has no token for a two-digit count's "1" + "0"
        eos_token_id = 99

        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [int(text)] if len(text) == 1 else [0]}

        def decode(self, ids):
            return "".join(str(i) for i in ids)

    answerable(Digits(), 9)
    with pytest.raises(ConfigError) as err:
        answerable(Digits(), 12)
    assert err.value.field == "L" and "count 10" in str(err.value)


def test_a_folder_holding_something_else_is_refused_and_left_alone(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="something other than an organism"):
        plan_organism(OrganismConfig(**TINY), tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_an_organism_with_other_settings_is_refused(organism):
    folder, _ = organism
    with pytest.raises(UsageError, match="other settings"):
        plan_organism(OrganismConfig(**{**TINY, "seed": 1}), folder)


CHECK_NAMES = {"answers", "dead heads", "dead heads alike", "live heads first", "item-reading head ablated",
               "DLA dead heads", "DLA live heads first", "boundary patching", "position patching: flipped item before",
               "position patching: boundary before", "position patching: boundary after",
               "probe after the live heads", "probe before the live heads", "steering slope", "AtP dead heads",
               "AtP live heads first", "interchange after the live heads", "DAS after the live heads",
               "DAS before the live heads"}


@pytest.fixture(scope="module")
def kept_checks(organism, tmp_path_factory):
    """(folder, result): :func:`check_organism` of the tiny organism, run once, its experiments kept in folder."""
    from countlens.core.threads import torch_threads
    from countlens.llm.organisms.checks import check_organism

    keep = tmp_path_factory.mktemp("checks")
    with torch_threads(1):
        return keep, check_organism(organism[0], keep=keep)


@pytest.fixture(scope="module")
def checked(kept_checks):
    return kept_checks[1]


def test_every_ground_truth_check_passes_on_the_organism(checked):
    from countlens.llm.organisms.checks import DEAD, ZERO

    by_name = {c["name"]: c for c in checked.checks}
    assert set(by_name) == CHECK_NAMES
    assert checked.failed() == [], checked.checks
    # the steering slope is reported with no bound; every other row is a verdict, and each one passed
    assert [c["name"] for c in checked.checks if c["holds"] == "info"] == ["steering slope"]
    assert by_name["steering slope"]["passed"] is None and by_name["steering slope"]["bound"] is None
    assert all(c["passed"] is True for c in checked.checks if c["holds"] != "info")
    # after the last live block the patched boundary answers as the source prompt does, on every pair
    assert by_name["interchange after the live heads"]["value"] == 1.0
    # float64 makes a zeroed head's ablation exact: the absolute bound holds with nothing to spare
    assert by_name["dead heads"]["value"] == 0.0 <= DEAD and by_name["live heads first"]["value"] == [[0, 1]]
    assert by_name["DLA dead heads"]["value"] <= ZERO and by_name["DLA live heads first"]["value"] == [[0, 1]]
    # one block, one live head: ablating it leaves every boundary alike, so exactly one count in L + 1 is right
    assert by_name["item-reading head ablated"]["value"] == pytest.approx(1 / 4)
    # before the live block every residual is its own token's; after it the boundary alone answers
    assert by_name["position patching: boundary before"]["value"] == 0.0
    assert by_name["position patching: flipped item before"]["value"] == pytest.approx(1.0, abs=1e-5)
    assert by_name["position patching: boundary after"]["value"] == pytest.approx(1.0, abs=1e-5)
    # AtP: the gradient through a zeroed head's slice of the output projection is exactly zero
    assert by_name["AtP dead heads"]["value"] == 0.0 and by_name["AtP live heads first"]["value"] is True


def test_the_item_reading_ablation_fails_on_a_head_that_does_not_read(organism, loaded):
    from countlens.llm.models import LoadedModel
    from countlens.llm.organisms.checks import (
        CHANCE_FACTOR,
        ablated_ranking,
        ablation_verdict,
        removed_accuracy,
    )
    from countlens.llm.organisms.experiment import HELD_OUT_SEED

    folder, result = organism
    model, tok = loaded
    spec = LoadedModel(model, tok, str(folder))
    # the live head removed: one answer for every prompt of a wording, right on one count in four
    assert removed_accuracy(result, spec, [HELD_OUT_SEED], (0, 1)) == (0.25, 8)
    assert removed_accuracy(result, spec, [HELD_OUT_SEED], [(0, 1)]) == (0.25, 8)  # one head or a list
    assert ablated_ranking(result, spec, [HELD_OUT_SEED], (0, 1)) == (1.0, [0.25], 4)
    # the zeroed head 0.0 claimed as the item reader: removing it leaves the count, so the check fails
    kept, prompts = removed_accuracy(result, spec, [HELD_OUT_SEED], (0, 0))
    assert kept == 1.0
    verdict = ablation_verdict(kept, [1.0], 3, [(0, 0)], prompts, [[0, 0]])
    assert not verdict["passed"] and verdict["bound"] == CHANCE_FACTOR / 4
    passed = ablation_verdict(0.25, [0.25], 3, [(0, 1)], prompts, [[0, 1]])
    assert passed["passed"] and "every live head" in passed["detail"]


KEPT = {"probe": "probes.json", "patching": "patching.json", "steering": "steering.json",
        "probe-running": "running_count.json", "patching-positions": "position_patching.json", "heads": "heads.json",
        "components": "components.json", "attribution": "attribution.json", "lens": "lens.json", "das": "das.json"}


def test_the_checks_keep_each_experiment_they_ran_and_its_numbers_are_the_checks(kept_checks):
    import json

    from countlens.llm.organisms.checks import KEPT_FILE

    folder, checked = kept_checks
    assert {k["name"]: k["file"] for k in checked.kept} == KEPT
    assert all((folder / name / file).is_file() and (folder / name / KEPT_FILE).is_file()
               for name, file in KEPT.items())
    assert (folder / "capture-items" / "acts").is_dir()  # Figure 10's capture at every item, kept
    by_name = {c["name"]: c for c in checked.checks}
    # read back from the kept files as plain JSON: the probe at the first location after the live block (index
    # 1: the residual after block 0), its test rounded accuracy averaged over split seeds, is the check's value
    probes = json.loads((folder / "probe" / "probes.json").read_text())
    after = next(p for p in probes["locations"] if p["index"] == 1)
    assert np.mean([f["test_rounded_acc"] for f in after["fits"]]) == pytest.approx(
        by_name["probe after the live heads"]["value"], abs=1e-12)
    # ... and the zeroed head's ablation in the kept Figure 12 is the check's (exactly zero, float64)
    heads = json.loads((folder / "heads" / "heads.json").read_text())["heads"]
    dead = [abs(h["ld_change_mean"]) + h["ld_change_std"] for h in heads if [h["layer"], h["head"]] != [0, 1]]
    assert max(dead) == by_name["dead heads"]["value"] == 0.0


def test_a_kept_result_is_reused_only_for_the_same_organism(organism, kept_checks, monkeypatch):
    from countlens.llm.heads import experiment as heads_experiment
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms import checks
    from countlens.llm.organisms.checks import Kept, heads_run, organism_stamp
    from countlens.llm.organisms.experiment import HELD_OUT_SEED

    folder, _ = kept_checks
    org_folder, result = organism
    spec = ModelSpec(model=str(org_folder))

    def not_again(*args, **kwargs):
        raise AssertionError("recomputed a kept result")
    monkeypatch.setattr(heads_experiment, "run_heads", not_again)
    monkeypatch.setattr(checks, "exact_copy", lambda loaded: loaded)  # no model here: the run itself must not start
    seeds = [HELD_OUT_SEED + j for j in range(int(result.config["held_out_seeds"]))]
    stamp = (folder / "heads" / "heads.json").stat().st_mtime_ns
    probes = folder / "probe" / "probes.json"  # the kept Figure 12 reads the kept probes
    again = heads_run(spec, result, None, seeds, Kept(folder, organism_stamp(result)), probes)
    assert again.to_dict() == heads_experiment.HeadsResult.read(folder / "heads").to_dict()
    assert (folder / "heads" / "heads.json").stat().st_mtime_ns == stamp
    with pytest.raises(AssertionError, match="recomputed"):  # another organism's: computed afresh
        heads_run(spec, result, None, seeds, Kept(folder, {**organism_stamp(result), "steps": -1}), probes)


def test_the_kept_results_draw_their_stages_figures_and_the_view_shows_them(kept_checks, tmp_path):
    import dataclasses
    import shutil

    from countlens.core.report import Page, Section
    from countlens.llm.organisms.views import checks_view, draw_checks
    from tests.helpers.report_checks import check_report

    folder, checked = kept_checks
    # one of the figures (drawing is the slow part): Figure 12, by the heads stage's own figure code
    out = tmp_path / "organism-checks"
    shutil.copytree(folder / "heads", out / "heads")
    some = dataclasses.replace(checked, kept=[k for k in checked.kept if k["name"] == "heads"])
    assert {p.relative_to(out).as_posix() for p in draw_checks(some, out)} == {
        "heads/fig12_heads.png", "heads/fig12_heads.pdf"}
    checked.save(out)
    page = Page(tmp_path)
    checks_view(page, Section(None, "organism-checks/checks.json", checked))
    html = "".join(page.parts)
    parser = check_report(tmp_path, html)  # every number a span of checks.json, none in free text
    assert "organism-checks/heads/heads.json" in parser.links
    assert {text for _, keys, text in parser.values if keys[0] == "kept" and keys[-1] == "title"} == {
        k["title"] for k in checked.kept}


def _summary(flipped_before, boundary_before, boundary_after):
    """A doctored Figure 11 result of a one-block model (locations embed and blocks.0) with one normalised pair."""
    from types import SimpleNamespace

    rows = [{"name": "embed", "index": 0, "flipped": flipped_before, "boundary": boundary_before},
            {"name": "blocks.0.hook_resid_post", "index": 1, "flipped": 0.0, "boundary": boundary_after}]
    return SimpleNamespace(summary=rows, pairs=[SimpleNamespace(normalised=True)])


@pytest.mark.parametrize("numbers, fails", [
    ((1.0, 0.0, 1.0), set()),
    ((0.6, 0.0, 1.0), {"position patching: flipped item before"}),  # the item's effect already left it
    ((1.0, 0.3, 1.0), {"position patching: boundary before"}),  # a head before the live ones moved it
    ((1.0, 0.0, 0.7), {"position patching: boundary after"}),  # a head after the live ones still moves it
    ((None, None, None), {"position patching: flipped item before", "position patching: boundary before",
                          "position patching: boundary after"}),  # no normalised pair: nothing to pass on
])
def test_the_position_checks_fail_where_the_numbers_do(numbers, fails):
    from countlens.llm.organisms.checks import position_verdicts

    checks = position_verdicts(_summary(*numbers), [[0, 1]])
    assert {c["name"] for c in checks if not c["passed"]} == fails


def _attribution(cells, rho=0.9):
    from types import SimpleNamespace

    return SimpleNamespace(cells=[{"kind": "head", "layer": b, "head": h, "atp": a, "act": c} for b, h, a, c in cells],
                           agreement={"head": {"spearman": rho}})


@pytest.mark.parametrize("cells, fails", [
    ([(0, 1, 2.0, 2.1), (0, 0, 0.0, 0.0), (0, 2, 0.0, 1e-9)], set()),
    ([(0, 1, 2.0, 2.1), (0, 0, 1e-3, 0.0)], {"AtP dead heads"}),  # a zeroed head with an estimate
    ([(0, 1, 0.1, 2.1), (0, 0, 0.5, 0.0)], {"AtP dead heads", "AtP live heads first"}),  # AtP ranks it first
    ([(0, 1, 2.0, 0.1), (0, 0, 0.0, 0.5)], {"AtP live heads first"}),  # activation patching disagrees
])
def test_the_attribution_checks_fail_where_the_numbers_do(cells, fails):
    from countlens.llm.organisms.checks import attribution_verdicts

    checks = attribution_verdicts(_attribution(cells), [[0, 1]])
    assert {c["name"] for c in checks if not c["passed"]} == fails


@pytest.mark.parametrize("shifts", [[-1.0, 0.0, 1.0], [-0.4, 0.0, 0.4], [0.0, 0.0, 0.0], [None, 0.0, None]])
def test_the_steering_slope_is_reported_with_no_bound(shifts):
    from types import SimpleNamespace

    from countlens.llm.organisms.checks import OrganismChecks, checks_text, steering_row, steering_slope

    curves = [{"delta": d, "mean_expected_shift": y} for d, y in zip([-1.0, 0.0, 1.0], shifts, strict=True)]
    result = SimpleNamespace(curves={"mean-diff": curves}, location="blocks.0.hook_resid_post",
                             config={"counts": [1, 2]})
    row = steering_row(result)
    assert row["holds"] == "info" and row["bound"] is None and row["passed"] is None
    if shifts[0] is not None:
        assert row["value"] == steering_slope(result) == pytest.approx(shifts[2])
    else:
        assert np.isnan(row["value"])
    checks = OrganismChecks("m", [[0, 1]], [row])
    assert checks.failed() == [] and checks_text(checks)[0].startswith("INFO steering slope:")


@pytest.mark.parametrize("agree, passed", [
    ([True] * 6, True), ([True] * 5 + [False], False), ([], False),
])
def test_the_interchange_check_holds_every_pair_to_the_source_prompts_answer(agree, passed):
    from countlens.llm.organisms.checks import INTERCHANGED, interchange_verdict

    row = interchange_verdict(agree, [True] * len(agree), "blocks.1.hook_resid_post", [[0, 1], [1, 0]])
    assert row["passed"] is passed and row["bound"] == INTERCHANGED == 1.0
    assert "after the last live block 1" in row["detail"]


def test_the_steering_window_keeps_every_step_inside_the_counts_seen():
    from countlens.llm.organisms.checks import steering_window

    for L in (1, 3, 10, 30, 100):
        deltas, counts = steering_window(L)
        assert 0.0 in deltas and len(deltas) >= 2 and len(counts) >= 1
        assert all(0 <= n + d <= L for n in counts for d in deltas), L


def test_the_head_checks_fail_where_the_circuit_is_not_what_is_claimed(organism, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.checks import components_checks, heads_checks
    from countlens.llm.organisms.experiment import HELD_OUT_SEED, read_organism

    folder, _ = organism
    claimed = read_organism(folder)
    claimed.live_heads = [[0, 0]]  # the zeroed head claimed live: it cannot rank first
    spec = ModelSpec(model=str(folder))
    checks = {c["name"]: c for c in heads_checks(spec, claimed, spec.load(False), [HELD_OUT_SEED])}
    assert not checks["live heads first"]["passed"]
    # A "dead" head that writes after all: its ablation moves the logit difference.
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    weights = load_file(str(broken / "model.safetensors"))
    key = "model.layers.0.self_attn.o_proj.weight"
    weights[key][:, 0:8] = weights[key][:, 8:16]
    save_file(weights, str(broken / "model.safetensors"), metadata={"format": "pt"})
    spec = ModelSpec(model=str(broken))
    checks = {c["name"]: c for c in heads_checks(spec, read_organism(broken), spec.load(False), [HELD_OUT_SEED])}
    assert not checks["dead heads"]["passed"] and checks["dead heads"]["value"] > 1e-3
    # ... and its direct logit attribution is no longer zero
    checks = {c["name"]: c for c in components_checks(spec, read_organism(broken), spec.load(False), [HELD_OUT_SEED])}
    assert not checks["DLA dead heads"]["passed"] and checks["DLA dead heads"]["value"] > 1e-3


def test_a_finished_organism_is_reused_from_the_cache(organism, tmp_path, monkeypatch):
    from countlens.llm.organisms.experiment import cached_folder

    folder, result = organism
    monkeypatch.setenv("COUNTLENS_CACHE", str(CACHE[0]))
    assert (cached_folder(OrganismConfig(**TINY)) / "model.safetensors").read_bytes() == \
        (folder / "model.safetensors").read_bytes()
    again = run_organism(OrganismConfig(**TINY), out=tmp_path / "copy", reuse=True)
    assert again.steps == result.steps and again.held_out == result.held_out and again.folder == str(tmp_path / "copy")
    assert (tmp_path / "copy" / "model.safetensors").read_bytes() == (folder / "model.safetensors").read_bytes()
    # Other settings are not served the cached organism.
    other = run_organism(OrganismConfig(**{**TINY, "seed": 5, "max_steps": 2, "eval_every": 2}), out=tmp_path / "o",
                         reuse=True)
    assert other.steps == 2 and not other.converged


# ------------------------------------------------------------------------------------- toy <-> organism scaling

def test_the_scaling_windows_are_the_papers_at_L_100_and_scale_below():
    from countlens.llm.organisms.scaling import windows

    assert windows(100) == ((1, 10), (91, 100))
    assert windows(10) == ((1, 3), (8, 10)) and windows(30) == ((1, 3), (28, 30))


def test_the_loglog_slope_and_its_spread():
    from countlens.llm.organisms.scaling import spread
    from countlens.toy.budget import fit_slope  # the one log-log slope, the toy's (test_organism_scaling.py)

    L = [10, 30, 100]
    assert fit_slope(L, [2.0 * x**0.75 for x in L]) == pytest.approx(0.75)
    assert fit_slope(L, [None, 5.0, float("inf")]) is None  # one finite point: no slope
    assert spread([1.0, 0.5, None]) == {"per_seed": [1.0, 0.5, None], "mean": 0.75, "std": 0.25}


def test_the_boundary_geometry_of_an_arc_and_of_a_line():
    from countlens.llm.organisms.scaling import boundary_geometry

    L, step = 12, 0.1
    n = np.repeat(np.arange(L + 1), 3)  # three rows per count, all at their centroid
    arc = np.stack([np.cos(step * n), np.sin(step * n), np.zeros_like(n, dtype=float)], axis=1)
    g = boundary_geometry(arc, n, L)
    assert g["gap_ratio"] == pytest.approx(1.0)  # equal chords everywhere
    assert g["endpoint_angle"] == pytest.approx(step * (L - 1))  # from count 1 to count L, seen from the origin
    assert g["erank_ratio"] == pytest.approx(1.0)  # congruent windows
    assert g["pca"]["counts"] == list(range(1, L + 1)) and sum(g["pca_explained"]) == pytest.approx(1.0)
    line = np.outer(n, [1.0, 2.0, 0.0]) + [0.0, 0.0, 1.0]
    g = boundary_geometry(line, n, L)
    assert g["gap_ratio"] == pytest.approx(1.0) and g["pca_explained"][0] == pytest.approx(1.0)


def test_the_exact_probe_norm_is_that_of_the_read_out_that_rounds():
    # the comparison's definition, which scaling uses
    from countlens.analysis import probe_norm_needed as probe_norm_exact

    rng = np.random.default_rng(0)
    n = np.repeat(np.arange(21), 10).astype(float)
    a = 4.0  # the count written as n * a along one axis: the exact read-out has norm 1 / a
    X = np.column_stack([a * n, rng.normal(size=(len(n), 3))])
    got = probe_norm_exact(X, n)
    # ridge may shrink the read-out as long as every validation row still rounds: at most by 1 / (L/2)
    assert (1 - 1 / 10) / a - 1e-9 <= got["probe_norm"] <= 1 / a + 1e-9 and got["probe_best_acc"] == 1.0
    assert probe_norm_exact(rng.normal(size=(len(n), 4)), n)["probe_norm"] is None  # nothing to read


def test_the_scaling_capture_holds_twenty_rows_per_dimension_and_at_least_two_seeds():
    from countlens.llm.organisms.scaling import CAPTURE_ROWS_PER_DIM, CAPTURE_SEEDS, capture_seeds

    for L, width, pairs, configs in [(10, 32, 1, 1), (30, 32, 1, 1), (100, 32, 1, 1), (4, 16, 1, 2), (999, 8, 2, 3)]:
        per_seed = (L + 1) * pairs * configs
        seeds = capture_seeds(L, width, pairs, configs)
        fewest = next(s for s in range(1, 10_000) if s * per_seed >= CAPTURE_ROWS_PER_DIM * width)
        assert seeds == max(CAPTURE_SEEDS, fewest)
    assert capture_seeds(10, 32) == 59 and capture_seeds(100, 32) == 7 and capture_seeds(999, 8) == 2


@pytest.mark.parametrize("change, field", [
    ({"Ls": [10]}, "Ls"), ({"Ls": [2, 10]}, "Ls"), ({"Ls": [10, 10]}, "Ls"), ({"Ls": [10, 1000]}, "Ls"),
    ({"seeds": []}, "seeds"),
    ({"width": 15}, "width"), ({"llm_acts": "/nonexistent"}, "llm_acts"), ({"llm_location": "-1"}, "llm_location"),
    ({"pairs": [["a", "a"]]}, "pairs"),
])
def test_a_bad_scaling_config_names_its_field(change, field):
    from countlens.llm.organisms.scaling import ScalingConfig

    with pytest.raises(ConfigError) as err:
        ScalingConfig(**change).validate()
    assert err.value.field == field


SCALING_TEST = dict(Ls=[3, 4], seeds=[0], width=16, pairs=[["a", "b"]], configs=["count", "tally"], lr=1e-2,
                    warmup=50, batch_size=16, max_steps=400, eval_every=20)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """(folder, result) of the scaling experiment at the test preset's sizes, run once (its own cache)."""
    from countlens.core.threads import torch_threads
    from countlens.llm.organisms.scaling import ScalingConfig, run_scaling

    folder = tmp_path_factory.mktemp("scaling") / "s"
    with pytest.MonkeyPatch.context() as mp, torch_threads(1):
        mp.setenv("COUNTLENS_CACHE", str(tmp_path_factory.mktemp("scaling-cache")))
        result = run_scaling(ScalingConfig(**SCALING_TEST), out=folder)
    return folder, result


def test_the_scaling_preset_is_the_tests():
    from countlens.llm.organisms.scaling import PRESETS, ScalingConfig

    assert PRESETS["test"] == ScalingConfig(**SCALING_TEST)
    assert PRESETS["quick"].Ls == [10, 30] and len(PRESETS["quick"].seeds) == 2
    assert PRESETS["full"].Ls == [10, 30, 100]


def test_scaling_trains_one_head_organisms_and_sets_them_beside_the_toy(scaled):
    from countlens.llm.organisms.experiment import read_organism
    from countlens.llm.organisms.scaling import TOY_VARIANT, ScalingConfig, ScalingResult, rates
    from countlens.toy import b_min
    from countlens.toy.budget import fit_slope as loglog_slope

    folder, result = scaled
    organisms = result.organisms()
    assert [(r["L"], r["seed"]) for r in organisms] == [(3, 0), (4, 0)]
    for r in organisms:
        own = read_organism(folder / f"L{r['L']}-seed0")
        assert (own.n_layers, own.n_heads, own.mlp_width) == (1, 1, 0) and own.converged
        assert r["largest_parameter_norm"] == own.largest_parameter_norm
        assert r["held_out_min_count"] == min(h["accuracy"] for h in own.held_out)
        # a linear read-out need not round these organisms' count exactly (definitions §3.4); whether one does at
        # L = 3, 4 depends on the CPU's training path, so only the cost's form is asserted here
        assert (r["probe_norm"] is None or r["probe_norm"] > 0) and 0 <= r["probe_best_acc"] <= 1
        assert np.isfinite(r["gap_ratio"]) and np.isfinite(r["erank_ratio"]) and 0 <= r["endpoint_angle"] <= np.pi
    toy = [r for r in result.rows if r["kind"] == "toy"]
    assert [r["largest_parameter_norm"] for r in toy] == [b_min(TOY_VARIANT, L, 16) for L in (3, 4)]
    assert result.rates["toy"] == pytest.approx(loglog_slope([3, 4], [r["largest_parameter_norm"] for r in toy]))
    assert result.rates["organism_norm"]["per_seed"] == [
        pytest.approx(loglog_slope([3, 4], [r["largest_parameter_norm"] for r in organisms]))]
    assert result.rates["paper"] == 1.0 and "RMSNorm" in result.norm_placement
    # an organism that does not count is left out of its seed's fit
    failed = [dict(r, converged=False) if r["L"] == 4 and r["kind"] == "organism" else r for r in result.rows]
    assert rates(ScalingConfig(**SCALING_TEST), failed)["organism_norm"]["per_seed"] == [None]
    assert [p["label"] for p in result.pca] == [r["label"] for r in organisms]
    result.save(folder)
    assert ScalingResult.read(folder).to_dict() == result.to_dict()
    assert (folder / "organism_scaling.csv").read_text().count("\n") == len(result.rows) + 1


def test_the_scaling_target_excess_is_the_heads_boundary_attention_read_from_output_attentions(scaled):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from countlens.llm.organisms.experiment import HELD_OUT_SEED
    from countlens.llm.organisms.scaling import capture_seeds
    from countlens.llm.prompts import PromptSettings, build_prompts

    folder, result = scaled
    config = SCALING_TEST
    for row in result.organisms():
        L, out = row["L"], folder / f"L{row['L']}-seed0"
        seeds = capture_seeds(L, config["width"], len(config["pairs"]), len(config["configs"]))
        settings = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config["pairs"],
                                  configs=config["configs"], seeds=[HELD_OUT_SEED + j for j in range(seeds)])
        prompts = build_prompts(AutoTokenizer.from_pretrained(out), settings)
        model = AutoModelForCausalLM.from_pretrained(out, attn_implementation="eager").eval()
        excess = []
        for p in prompts:
            if p.n == 0 or p.m == 0:
                continue
            with torch.no_grad():
                weights = model(torch.tensor([p.ids]), output_attentions=True).attentions[0][0, 0, -1].double()
            items = np.array(p.item_indices)
            roles = np.array(p.item_targets)
            t, d = float(weights[items[roles]].sum()), float(weights[items[~roles]].sum())
            excess.append(t / (t + d) - p.n / (p.n + p.m))
        assert row["target_excess"] == pytest.approx(np.mean(excess), abs=1e-6)
    assert all(r["target_excess"] is None for r in result.rows if r["kind"] == "toy")


def test_the_scaling_names_the_vector_that_attains_B_and_its_class_vectors(scaled):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, result = scaled
    for row in result.organisms():
        out = folder / f"L{row['L']}-seed0"
        model = AutoModelForCausalLM.from_pretrained(out)
        found = (None, None, -1.0)  # a brute loop over every parameter's rows (a 1-D parameter is one vector)
        for name, p in model.named_parameters():
            vectors = p.detach().reshape(-1, p.shape[-1]) if p.dim() > 1 else p.detach().reshape(1, -1)
            for i, v in enumerate(vectors):
                if float(v.norm()) > found[2]:
                    found = (name, i if p.dim() > 1 else None, float(v.norm()))
        assert (row["b_parameter"], row["b_row"]) == found[:2] and row["largest_parameter_norm"] == found[2]
        assert row["b_vector"]
        tokenizer = AutoTokenizer.from_pretrained(out)
        answers = [tokenizer.encode(str(k), add_special_tokens=False) for k in range(row["L"] + 1)]
        assert all(len(a) == 1 for a in answers)
        unembed = model.get_output_embeddings().weight.detach()
        assert row["class_vector_norm"] == pytest.approx(max(float(unembed[a[0]].norm()) for a in answers), rel=1e-6)


def test_the_scaling_logit_gap_is_figure_2c_on_plain_forwards(scaled):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from countlens.llm.organisms.experiment import HELD_OUT_SEED
    from countlens.llm.organisms.scaling import capture_seeds
    from countlens.llm.prompts import PromptSettings, build_prompts

    folder, result = scaled
    config = SCALING_TEST
    gaps = {g["label"]: g for g in result.gaps}
    for row in result.organisms():
        L, out = row["L"], folder / f"L{row['L']}-seed0"
        seeds = capture_seeds(L, config["width"], len(config["pairs"]), len(config["configs"]))
        settings = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config["pairs"],
                                  configs=config["configs"], seeds=[HELD_OUT_SEED + j for j in range(seeds)])
        tokenizer = AutoTokenizer.from_pretrained(out)
        model = AutoModelForCausalLM.from_pretrained(out).eval()
        answers = [tokenizer.encode(str(k), add_special_tokens=False)[0] for k in range(L + 1)]
        least, right, total = {}, 0, 0
        for p in build_prompts(tokenizer, settings):  # one prompt at a time: no padding
            with torch.no_grad():
                logits = model(torch.tensor([p.ids])).logits[0, -1].double()
            counts = [float(logits[a]) for a in answers]
            gap = counts[p.n] - max(c for k, c in enumerate(counts) if k != p.n)
            least[p.n] = min(least.get(p.n, np.inf), gap)
            right, total = right + (gap > 0), total + 1
        per_count = [least[k] for k in range(L + 1)]
        assert gaps[row["label"]]["gap"] == pytest.approx(per_count, abs=1e-4)
        assert row["min_logit_gap"] == pytest.approx(min(per_count), abs=1e-4)
        assert row["min_gap_count"] == int(np.argmin(per_count))
        assert row["argmax_accuracy"] == pytest.approx(right / total)
    toy = [g for g in result.gaps if g["kind"] == "toy-classification"]
    assert [g["L"] for g in toy] == [3, 4] and all(min(g["gap"]) > 0 for g in toy)  # the construction counts
    assert result.rates["toy_classification"] == pytest.approx(0.0, abs=1e-12)  # every vector <= 1 at every L


def test_the_scaling_manifold_columns_are_the_manifold_of_the_organisms_capture(scaled, tmp_path):
    """Issue 44 point 3: each organism's count-manifold columns equal the manifold experiment run on the same
    held-out capture, and its Procrustes distances equal a direct call on the capture's centroids."""
    from countlens.analysis import ManifoldConfig, procrustes_distance, run_manifold, toy_curves
    from countlens.core.capture import open_capture
    from countlens.core.threads import torch_threads
    from countlens.llm.capture.experiment import CaptureConfig, run_capture
    from countlens.llm.models import ModelSpec
    from countlens.llm.organisms.experiment import HELD_OUT_SEED
    from countlens.llm.organisms.scaling import LOCATION, TOY_VARIANT, capture_seeds
    from countlens.llm.prompts import PromptSettings
    from countlens.toy import VARIANTS

    folder, result = scaled
    config = SCALING_TEST
    for row in result.organisms():
        L, out = row["L"], folder / f"L{row['L']}-seed0"
        seeds = capture_seeds(L, config["width"], len(config["pairs"]), len(config["configs"]))
        settings = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config["pairs"],
                                  configs=config["configs"], seeds=[HELD_OUT_SEED + j for j in range(seeds)])
        acts = tmp_path / f"acts-L{L}"
        with torch_threads(1):
            run_capture(CaptureConfig(model=ModelSpec(model=str(out)), prompts=settings), acts, progress=False)
        mine = next(r for r in run_manifold(ManifoldConfig(acts=str(acts), toy_d=config["width"])).per_location
                    if r["name"] == LOCATION)
        assert row["manifold_nearest"] == mine["nearest_toy"] in VARIANTS
        assert row["manifold_procrustes"] == pytest.approx(mine["procrustes"][mine["nearest_toy"]], abs=1e-9)
        assert row["manifold_above_floor"] == mine["shape_above_floor"]
        capture = open_capture(acts).boundary()  # by hand: centroids per count, then the toy's curves
        X, n = capture.acts(LOCATION).astype(np.float64), capture.counts()
        counts = np.unique(n)
        C = np.stack([X[n == c].mean(axis=0) for c in counts])
        curves, _ = toy_curves(counts, VARIANTS, config["width"])
        direct = {v: procrustes_distance(C, curves[v]) for v in VARIANTS}
        assert row["manifold_procrustes_toy"] == pytest.approx(direct[TOY_VARIANT], abs=1e-6)
        assert row["manifold_procrustes"] == pytest.approx(min(direct.values()), abs=1e-6)
        assert 0 <= row["manifold_procrustes"] <= row["manifold_procrustes_toy"] <= 2
    assert all(r["manifold_nearest"] is None for r in result.rows if r["kind"] != "organism")
    result.save(folder)
    header = (folder / "organism_scaling.csv").read_text().splitlines()[0].split(",")
    assert {"manifold_nearest", "manifold_procrustes", "manifold_procrustes_toy"} <= set(header)


def test_the_counting_tokenizer_writes_every_count_as_one_token(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    from countlens.llm.answers import answer_token_ids
    from countlens.llm.models import load_tokenizer, resolve_model
    from countlens.llm.organisms.scaling import counting_tokenizer

    monkeypatch.setenv("COUNTLENS_CACHE", str(tmp_path))
    assert counting_tokenizer("default", 9) == "default"  # SmolLM2 writes 0..9 as one token each already
    folder = counting_tokenizer("default", 10)
    assert folder.startswith(str(tmp_path)) and counting_tokenizer("default", 30) == folder  # made once
    saved = AutoTokenizer.from_pretrained(folder)
    assert [len(answer_token_ids(saved, n)) for n in (3, 10, 57, 999, 1000)] == [1, 1, 1, 1, 2]
    assert saved.decode(answer_token_ids(saved, 57)) == "57"
    base = load_tokenizer(resolve_model("default", progress=False))  # the same chat prompts, token for token
    chat = [{"role": "user", "content": 'Count how many times "a" appears. Sequence: a b a'}]
    assert saved.apply_chat_template(chat, add_generation_prompt=True) == base.apply_chat_template(
        chat, add_generation_prompt=True)


def test_the_scaling_view_shows_numbers_only_from_its_json(scaled):
    import re
    from types import SimpleNamespace

    from countlens.core.report import Page, Section
    from countlens.llm.organisms.figures import scaling_view

    folder, result = scaled
    result.save(folder)
    page = Page(folder)
    scaling_view(page, Section(SimpleNamespace(name="organism-scaling"), "organism_scaling.json", result))
    html = "".join(page.parts)
    assert html.count('class="v"') >= 2 * len(result.rows)
    free = re.sub(r'<span class="v"[^>]*>[^<]*</span>|<[^>]+>', "", html)
    assert not re.search(r"\d", free), free


def test_scaling_reuses_its_organisms_and_draws_its_figure(scaled, tmp_path):
    from countlens.core.threads import torch_threads
    from countlens.llm.organisms.figures import draw_scaling
    from countlens.llm.organisms.scaling import ScalingConfig, run_scaling

    folder, result = scaled
    stamp = (folder / "L3-seed0" / "model.safetensors").stat().st_mtime_ns
    with torch_threads(1):
        again = run_scaling(ScalingConfig(**SCALING_TEST), out=folder)
    assert (folder / "L3-seed0" / "model.safetensors").stat().st_mtime_ns == stamp  # not retrained
    assert again.rows == result.rows and again.rates == result.rates
    assert {p.name for p in draw_scaling(result, tmp_path)} == {"organism_scaling.png", "organism_scaling.pdf"}


def test_scaling_with_two_workers_trains_the_same_organisms(scaled, tmp_path, monkeypatch, capfd):
    from countlens.llm.organisms.scaling import ScalingConfig, run_scaling

    folder, result = scaled
    monkeypatch.setenv("COUNTLENS_CACHE", str(tmp_path / "cache"))  # trained anew, in the workers
    again = run_scaling(ScalingConfig(**SCALING_TEST), out=tmp_path / "s", workers=2, progress=True)
    shown = capfd.readouterr().err  # each worker's training bar, labelled, and no loading bar
    assert "organism L=3 seed=0" in shown and "organism L=4 seed=0" in shown and "organisms" in shown
    assert "Loading weights" not in shown
    assert [r["label"] for r in again.rows] == [r["label"] for r in result.rows]  # the order of Ls, not of work
    for mine, theirs in zip(again.rows, result.rows, strict=True):
        assert {k: v for k, v in mine.items() if k != "train_seconds"} == {
            k: v for k, v in theirs.items() if k != "train_seconds"}
    assert again.rates == result.rates
    with pytest.raises(ConfigError) as err:
        run_scaling(ScalingConfig(**SCALING_TEST), out=tmp_path / "t", workers=0)
    assert err.value.field == "workers" and not (tmp_path / "t").exists()


def test_scaling_refuses_an_organism_folder_holding_something_else_before_training(tmp_path):
    from countlens.llm.organisms.scaling import ScalingConfig, run_scaling

    (tmp_path / "L4-seed0").mkdir()
    (tmp_path / "L4-seed0" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as err:
        run_scaling(ScalingConfig(**SCALING_TEST), out=tmp_path)
    assert err.value.field == "out" and "something other than an organism" in str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["L4-seed0"]  # L3 was not trained first
