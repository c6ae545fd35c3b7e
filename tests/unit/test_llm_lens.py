"""Figure 13's lenses and count directions: the output head of every family (the logit lens at the last
location is the model's own logits), the many-output ridge map against the project's ridge path, the
first-token read-out, the count slope and the angles, and ``run_lens`` on a tiny model — its files, round
trip, figure and refusals."""

import json
import shutil

import numpy as np
import pytest

from countlens.core.errors import ConfigError
from countlens.core.report import Page, Section
from countlens.core.store import read_meta
from countlens.llm import CaptureConfig, run_capture
from countlens.llm.lens.experiment import LensConfig, LensResult, run_lens
from countlens.llm.lens.figures import draw_lens, lens_view
from countlens.llm.lens.readout import (
    RidgeMap,
    abs_cosines,
    check_unembedding,
    count_slope,
    direction_cosines,
    first_token_readout,
    first_tokens,
    output_head,
    random_directions,
)
from countlens.probes.ridge import native_ridge_path
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_model_dir, tiny_models, write_probes  # noqa: F401
from tests.helpers.report_checks import check_report
from tests.helpers.tiny_models import TINY_ARCHS, tiny_config


def _tiny(arch: str, vocab: int = 64):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_config(arch, vocab, 1, 2, 0)).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(20.0)
    return model


@pytest.mark.parametrize("arch", TINY_ARCHS)
def test_the_logit_lens_at_the_last_location_is_the_models_own_logits(arch):
    import torch

    from countlens.llm.capture.residuals import BoundaryCapture, find_blocks

    model = _tiny(arch)
    ids = torch.randint(3, 64, (3, 12))
    mask = torch.ones_like(ids)
    last = len(find_blocks(model))
    with torch.inference_mode():
        with BoundaryCapture(model, [last], early_stop=False) as cap:
            h = cap.run(ids, mask, torch.full((3,), 11))[:, 0]  # (3, d): the last block's raw output
        own = model(input_ids=ids, attention_mask=mask).logits[:, -1].float()
        lens = output_head(model).logits(h)
        some = output_head(model).logits(h, [5, 7, 9])
    np.testing.assert_allclose(lens.numpy(), own.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(some.numpy(), own[:, [5, 7, 9]].numpy(), rtol=1e-4, atol=1e-4)


def test_gemma2_soft_caps_its_logits_and_the_head_does_too():
    head = output_head(_tiny("gemma2"))
    assert head.softcap == pytest.approx(30.0)


def test_folded_rows_are_the_gradient_of_each_tokens_logit_through_the_final_norm():
    import torch

    model = _tiny("llama")
    head = output_head(model)
    center = np.random.default_rng(0).standard_normal(32) * 5
    folded = head.folded_rows(center, [4, 9])
    x = torch.tensor(center, dtype=torch.float32, requires_grad=True)
    for row, t in zip(folded, (4, 9), strict=True):
        (head.weight[t].detach() @ head.norm(x[None])[0]).backward()
        np.testing.assert_allclose(row, x.grad.numpy(), rtol=1e-4, atol=1e-6)
        x.grad = None
    assert abs(folded[0] @ center) < 1e-3 * np.linalg.norm(folded[0]) * np.linalg.norm(center)  # scale-invariant


def test_a_checkpoint_without_its_head_is_refused_from_its_config():
    from transformers import LlamaConfig

    base = LlamaConfig(architectures=["LlamaModel"], tie_word_embeddings=False)
    with pytest.raises(ConfigError, match="without an output embedding") as caught:
        check_unembedding(base)
    assert caught.value.field == "acts"
    check_unembedding(LlamaConfig(architectures=["LlamaModel"], tie_word_embeddings=True))  # tied: it has one
    check_unembedding(LlamaConfig(architectures=["LlamaForCausalLM"], tie_word_embeddings=False))


@pytest.mark.parametrize("alpha", [0.0, 1e-3, 0.1, 10.0])
def test_the_ridge_map_is_the_projects_ridge_path_for_every_output(alpha):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((40, 12)) * np.linspace(0.1, 30, 12)
    Y = X @ rng.standard_normal((12, 5)) + rng.standard_normal((40, 5))
    fit = RidgeMap(X, Y)
    new = rng.standard_normal((7, 12))
    W, b = fit.coef(alpha)
    for j in range(Y.shape[1]):
        path = native_ridge_path(X, Y[:, j], [alpha], relative=True, standardize=True)
        np.testing.assert_allclose(fit.predict(new, alpha)[:, j], new @ path.coefs[0] + path.intercepts[0],
                                   rtol=1e-7, atol=1e-7)
        np.testing.assert_allclose(new @ W[:, j] + b[j], new @ path.coefs[0] + path.intercepts[0], rtol=1e-7,
                                   atol=1e-7)


def test_the_count_slope_weights_each_count_once():
    rng = np.random.default_rng(2)
    v, a = rng.standard_normal(6), rng.standard_normal(6)
    n = np.array([0] * 9 + [1, 2, 3, 4] * 2)  # count 0 has many more rows: it must not weigh more
    acts = a + n[:, None] * v
    np.testing.assert_allclose(count_slope(acts, n), v, atol=1e-12)
    with pytest.raises(ValueError, match="two distinct counts"):
        count_slope(acts[:3], n[:3])


def test_first_tokens_and_their_readout():
    candidates = [[10], [11], [11, 10], [12, 10]]  # "0", "1", "10", "20" in a digit-splitting vocabulary
    tokens = first_tokens(candidates, [0, 1, 10, 20], vocab_size=16)
    assert tokens.distinct.tolist() == [10, 11, 12] and tokens.single.tolist() == [True, True, False, False]
    import torch

    logits = torch.full((2, 16), -5.0)
    logits[0, 10], logits[0, 11], logits[0, 12] = 2.0, 1.0, 0.0
    logits[1, 12] = 3.0
    r = first_token_readout(logits, tokens, [10, 0])
    lse = torch.logsumexp(logits, dim=-1).numpy()
    np.testing.assert_allclose(r.logprob, [1.0 - lse[0], -5.0 - lse[1]], rtol=1e-6)
    assert r.rank.tolist() == [2, 2]  # "10" starts with "1": second after "0"; row 1: "0" after "2"
    p = np.exp([2.0, 1.0]) / np.exp([2.0, 1.0]).sum()
    np.testing.assert_allclose(r.expected[0], p[1], rtol=1e-9)
    with pytest.raises(ConfigError, match="beyond the model's 12 output rows") as caught:
        first_tokens(candidates, [0, 1, 10, 20], vocab_size=12)
    assert caught.value.field == "counts"
    # answers sharing their first token are read after it (issue 46 point 7); refused only where no one token
    # tells them apart (tests/unit/test_shared_first_token.py)
    shared = first_tokens([[3, 10], [3, 11, 10]], [0, 1], vocab_size=16, field="acts")
    assert (shared.position, shared.prefix, shared.first.tolist(), shared.single.tolist()) == (1, (3,), [10, 11],
                                                                                             [True, False])
    with pytest.raises(ConfigError, match="ends where the others go on"):
        first_tokens([[3], [3, 11]], [0, 1], vocab_size=16, field="acts")


def test_angles_against_the_random_baseline():
    rows = np.eye(8)[:3]
    random = random_directions(500, 8, seed=0)
    assert np.allclose(np.linalg.norm(random, axis=1), 1)
    aligned = direction_cosines(np.eye(8)[1] * 7, rows, random)
    assert aligned["max_abs"] == pytest.approx(1.0) and aligned["beyond_random"] == 0.0
    orthogonal = direction_cosines(np.eye(8)[6], rows, random)
    assert orthogonal["max_abs"] == 0.0 and orthogonal["beyond_random"] == 1.0
    assert abs_cosines(np.zeros((1, 8)), rows).tolist() == [[0.0, 0.0, 0.0]]


# ----------------------------------------------------------------------------------- run_lens


@pytest.fixture(scope="module")
def capture_dir(tiny_model_dir, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("lens") / "acts"
    config = CaptureConfig().with_options(model=str(tiny_model_dir), L=16, counts=list(range(17)), per_count=2,
                                          pairs=[["a", "b"]], configs=["count"], seeds=[0])
    run_capture(config, out, progress=False)
    return out


def test_run_lens_result_files_round_trip_and_figure(capture_dir, tmp_path):
    meta = read_meta(capture_dir)
    write_probes(tmp_path / "probes.json", meta)
    result = run_lens(LensConfig(acts=str(capture_dir), probes=str(tmp_path / "probes.json"), baseline_directions=50))
    assert [loc["index"] for loc in result.locations] == [0, 1, 2]
    assert result.candidates == list(range(17)) and result.single_token == list(range(10))
    assert [t["text"] for t in result.number_tokens] == [str(k) for k in range(10)]
    assert result.split == {"seed": 0, "n_train": 20, "n_val": 7, "n_test": 7}
    last = result.locations[-1]
    for key in ("logprob", "rank", "top1", "expected_corr", "expected_mae"):  # the last location is the model
        assert last["logit"][key] == pytest.approx(result.model_readout[key], abs=1e-6)
    assert last["logit"]["kl"] == pytest.approx(0.0, abs=1e-9)
    assert last["tuned"]["kl"] < 1e-3  # mapping the last location to itself: (nearly) the identity
    assert result.locations[0]["angles"]["mean-diff"] is None  # every prompt's embedding is the same token's
    assert result.locations[1]["angles"]["probe"]["raw"]["max_abs"] <= 1.0
    assert len(result.rows) == 3 * 2 * 7 and {r["lens"] for r in result.rows} == {"logit", "tuned"}
    assert len(result.angle_rows) == 2 * 2 * 10 + 10  # probe at every location, mean-diff after the embeddings
    files = result.save(tmp_path / "out")
    assert [f.name for f in files] == ["lens.json", "lens.csv", "angles.csv"] == list(LensResult.file_names())
    again = LensResult.read(tmp_path / "out")
    assert again == result == LensResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert {p.name for p in draw_lens(again, tmp_path)} == {"fig13_lens.png", "fig13_lens.pdf"}
    page = Page(tmp_path)
    lens_view(page, Section(None, "out/lens.json", again))
    check_report(tmp_path, "".join(page.parts))


@pytest.mark.parametrize(("settings", "field"), [
    ({"acts": ""}, "acts"), ({"alphas": []}, "alphas"), ({"alphas": [-1.0]}, "alphas"), ({"counts": [-2]}, "counts"),
    ({"fractions": [0.5, 0.5]}, "fractions"), ({"baseline_directions": 0}, "baseline_directions"),
    ({"threads": 0}, "threads"), ({"device": "gpu"}, "device")])
def test_lens_config_errors_name_their_field(settings, field):
    with pytest.raises(ConfigError) as caught:
        LensConfig(**{"acts": "a", **settings}).validate()
    assert caught.value.field == field


def _edited_capture(capture_dir, tmp_path, **changes):
    """A copy of the capture whose meta.json has ``changes`` (``model`` in its recorded settings, the others
    at the top level)."""
    out = tmp_path / "acts"
    shutil.copytree(capture_dir, out)
    meta = json.loads((out / "meta.json").read_text())
    for key, value in changes.items():
        (meta["settings"] if key == "model" else meta)[key] = value
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def test_a_lens_refuses_bad_input_before_the_model_loads(capture_dir, tiny_model_dir, tmp_path, monkeypatch):  # noqa: F811
    import countlens.llm.steering.experiment as steering

    monkeypatch.setattr(steering, "capture_model", lambda *a, **k: pytest.fail("the model loaded"))
    headless = tmp_path / "headless"
    shutil.copytree(tiny_model_dir, headless)
    config = json.loads((headless / "config.json").read_text())
    (headless / "config.json").write_text(json.dumps({**config, "architectures": ["LlamaModel"],
                                                      "tie_word_embeddings": False}))
    small = tmp_path / "small-vocabulary"
    shutil.copytree(tiny_model_dir, small)
    (small / "config.json").write_text(json.dumps({**config, "vocab_size": 30}))  # the digits' ids are 32..41
    cases = [(dict(model=str(headless)), {}, "acts", "without an output embedding"),
             (dict(model=str(small)), {}, "acts", "beyond the model's 30 output rows"),
             (dict(locations=read_meta(capture_dir)["locations"][:2]), {}, "acts", "lacks the last block"),
             ({}, dict(locations="7"), "locations", "does not exist"),
             ({}, dict(fractions=[0.98, 0.01, 0.01]), "fractions", "needs at least")]
    for i, (meta_changes, settings, field, words) in enumerate(cases):
        acts = _edited_capture(capture_dir, tmp_path / str(i), **meta_changes)
        with pytest.raises(ConfigError, match=words) as caught:
            run_lens(LensConfig(acts=str(acts), **settings))
        assert caught.value.field == field, (field, str(caught.value))
