"""The toy trainer: loss, projection, split, logged quantities, checkpoints, divergence, convergence."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError, UsageError
from countlens.toy import model
from countlens.toy.cap import PolarCoordinates, project_to_cap
from countlens.toy.domain_loss import PairSet, loss_and_grad
from countlens.toy.model import ToyConfig
from countlens.toy.train import (
    TrainConfig,
    Trainer,
    TrainingDiverged,
    exact_accuracy,
    log_score_scale,
    loss_fn,
    spacing_ratio,
    split_domain,
    train,
)
from tests.helpers.toy_reference import explicit_outputs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_split_is_disjoint_complete_and_seeded():
    tr, te = split_domain(12, 0.25, seed=4)
    P = 13 * 14 // 2
    assert len(te) == round(0.25 * P) and len(tr) + len(te) == P
    assert sorted(tr.tolist() + te.tolist()) == list(range(P))
    tr2, te2 = split_domain(12, 0.25, seed=4)
    assert torch.equal(te, te2) and not torch.equal(te, split_domain(12, 0.25, seed=5)[1])


def test_projection_caps_every_vector_and_keeps_directions():
    cfg = ToyConfig("softmax-postln-learned", 5, 6, readout="classification")
    p = model.init_params(cfg, seed=1, scale=10.0)
    p.c = torch.linspace(-20, 20, 7, dtype=torch.float64)
    before = {k: v.clone() for k, v in p.tensors().items()}
    project_to_cap(p, 3.0)
    for name, t in p.tensors().items():
        b = before[name]
        rows = t.reshape(-1, t.shape[-1]) if name == "U" else (t.reshape(-1, 1) if name == "c" else t.reshape(1, -1))
        rows_b = b.reshape(rows.shape)
        for r, rb in zip(rows, rows_b, strict=True):
            nb = float(torch.linalg.vector_norm(rb))
            assert float(torch.linalg.vector_norm(r)) <= 3.0 + 1e-12
            expected = rb if nb <= 3.0 else rb * (3.0 / nb)  # the closest point of the ball
            assert torch.allclose(r, expected, atol=1e-12)

    # the returned peak is the largest norm met before projecting (|entry| for c and scalars)
    peak = max(float(torch.linalg.vector_norm(b.reshape(-1, b.shape[-1]) if k == "U" else b.reshape(-1, 1)
                                             if k == "c" or b.dim() == 0 else b.reshape(1, -1), dim=1).max())
               for k, b in before.items())
    q = model.init_params(cfg, seed=1, scale=10.0)
    q.c = torch.linspace(-20, 20, 7, dtype=torch.float64)
    assert project_to_cap(q, 3.0) == pytest.approx(peak, rel=1e-15)


@pytest.mark.parametrize("readout", ["regression", "classification"])
def test_polar_gradients_match_autograd_through_the_model(readout):
    cfg = ToyConfig("softmax-postln-learned", 5, 6, readout=readout)
    p = model.init_params(cfg, seed=2, scale=2.0)
    p.beta = torch.linspace(-0.5, 0.7, 5, dtype=torch.float64)  # nonzero: every vector is polar
    if readout == "regression":
        p.b0 = torch.tensor(0.3, dtype=torch.float64)
    coords = PolarCoordinates(p)
    assert set(coords.rho) == {k for k in p.tensors() if k not in ("b0", "c")}
    n, m = model.full_domain(6)
    _, grads = loss_and_grad(cfg, p, PairSet.from_pairs(n.numpy(), m.numpy()))
    coords.set_grads(p, grads)
    # autograd from (rho, u) through v = exp(rho) u / |u| and the model's own forward pass
    rho = {k: r.detach().clone().requires_grad_(True) for k, r in coords.rho.items()}
    u = {k: t.detach().clone().requires_grad_(True) for k, t in coords.u.items()}
    values = {k: t.detach() for k, t in p.tensors().items()}
    values.update({k: torch.exp(rho[k]) * u[k] / torch.linalg.vector_norm(u[k], dim=-1, keepdim=True) for k in rho})
    loss_fn(cfg, model.ToyParams(**values), n, m).backward()
    for k in rho:
        assert torch.allclose(coords.rho[k].grad, rho[k].grad, rtol=1e-9, atol=1e-12), k
        assert torch.allclose(coords.u[k].grad, u[k].grad, rtol=1e-9, atol=1e-12), k


def test_polar_cap_is_the_same_projection():
    cfg = ToyConfig("softmax-postln-learned", 5, 6, readout="classification")
    p = model.init_params(cfg, seed=1, scale=10.0)
    p.c = torch.linspace(-20, 20, 7, dtype=torch.float64)
    q = p.detach()
    coords = PolarCoordinates(p, cap=3.0)
    assert coords.cartesian == ["beta", "c"]  # beta starts at exactly zero: it keeps its entries
    peak = coords.project(p)
    assert peak == pytest.approx(project_to_cap(q, 3.0), rel=1e-13)
    for k, t in p.tensors().items():
        assert torch.allclose(t, q.tensors()[k], rtol=1e-12, atol=1e-12), k


@pytest.mark.parametrize("parametrization", ["cartesian", "polar"])
def test_a_cap_that_never_acts_leaves_the_trajectory_bit_for_bit(parametrization):
    # peak_norm <= cap means no projection changed anything, so any cap >= peak_norm trains the same run
    cfg = ToyConfig("softmax", 4, 12)
    base = dict(optimizer="lbfgs", steps=30, seed=3, working_set=16, log_every=10, loss="max",
                parametrization=parametrization)
    wide = train(cfg, TrainConfig(cap=1e12, **base))  # polar: the line search's trial points count too
    assert wide.peak_norm is not None and wide.peak_norm < 1e12
    tight = train(cfg, TrainConfig(cap=wide.peak_norm * (1 + 1e-9), **base))
    assert tight.params == wide.params and tight.peak_norm == wide.peak_norm
    # and a cap below the norm the run ended at does act: the run cannot end there. (A cap below the peak
    # alone need not: under polar coordinates the peak can be a trial point the line search rejects either
    # way, its loss infinite uncapped and huge capped, and then the accepted steps are the same.)
    cap = wide.max_norm * 0.5
    acted = train(cfg, TrainConfig(cap=cap, **base))
    assert acted.peak_norm > cap and acted.max_norm <= cap * (1 + 1e-12) and acted.params != wide.params


def test_losses_match_explicit_attention():
    pairs = [(0, 0), (3, 1), (1, 4), (5, 0), (2, 2)]
    n = torch.tensor([a for a, _ in pairs], dtype=torch.float64)
    m = torch.tensor([b for _, b in pairs], dtype=torch.float64)
    for variant in ("softmax", "softmax-postln-learned", "linear"):
        cfg = ToyConfig(variant, 4, 6)
        p = model.init_params(cfg, seed=2)
        y = explicit_outputs(cfg, p, pairs)
        assert float(loss_fn(cfg, p, n, m)) == pytest.approx(np.mean((y - n.numpy()) ** 2), rel=1e-10)
        cfgc = ToyConfig(variant, 4, 6, readout="classification")
        pc = model.init_params(cfgc, seed=2)
        s = explicit_outputs(cfgc, pc, pairs)  # (P, 7)
        lse = np.log(np.exp(s - s.max(1, keepdims=True)).sum(1)) + s.max(1)
        ce = np.mean(lse - s[np.arange(len(pairs)), n.long().numpy()])
        assert float(loss_fn(cfgc, pc, n, m)) == pytest.approx(ce, rel=1e-10)
        s7 = 7.0 * s  # the loss temperature scales the scores inside the cross-entropy only
        lse7 = np.log(np.exp(s7 - s7.max(1, keepdims=True)).sum(1)) + s7.max(1)
        ce7 = np.mean(lse7 - s7[np.arange(len(pairs)), n.long().numpy()])
        assert float(loss_fn(cfgc, pc, n, m, ce_scale=7.0)) == pytest.approx(ce7, rel=1e-10)


def test_logged_quantities_match_direct_computation():
    cfg = ToyConfig("softmax-preln-learned", 6, 30)
    p = model.init_params(cfg, seed=7, scale=2.0)
    z = model.token_vectors(cfg, p).detach().numpy()
    assert log_score_scale(cfg, p) == pytest.approx(cfg.tau * (z[0] @ z[0] - z[0] @ z[1]), rel=1e-12)
    # spacing ratio by an explicit loop over counts, windows 1..3 and 27..29 (w = round(30/10) = 3)
    h = [model.boundary_representation(cfg, p, torch.tensor([float(k)], dtype=torch.float64),
                                       torch.zeros(1, dtype=torch.float64))[0].detach().numpy() for k in range(31)]
    gap = [np.linalg.norm(h[k + 1] - h[k]) for k in range(30)]
    assert spacing_ratio(cfg, p) == pytest.approx(np.mean(gap[27:30]) / np.mean(gap[1:4]), rel=1e-10)


def test_training_counts_exactly_at_tiny_L_and_reports_true_metrics():
    cfg = ToyConfig("softmax", 8, 12)
    r = train(cfg, TrainConfig(steps=200, seed=0, log_every=10, stop_when_passed=True))
    assert r.passed and r.stopped_early and r.steps_run < 200
    c, p = r.toy()
    n, m = model.full_domain(12)
    pairs = list(zip(n.long().tolist(), m.long().tolist(), strict=True))
    err = np.abs(explicit_outputs(c, p, pairs) - n.numpy())
    assert r.full_domain_worst_error == pytest.approx(err.max(), rel=1e-9)
    assert r.full_domain_worst_error < 0.5
    _, te = split_domain(12, 0.2, seed=0)
    assert r.test_exact_accuracy == pytest.approx(float(np.mean(err[te.numpy()] < 0.5)))
    assert r.max_norm == pytest.approx(max(p.vector_norms().values()))
    assert [e["step"] for e in r.log] == list(range(0, r.steps_run + 1, 10))


def test_cap_holds_at_every_logged_step():
    cfg = ToyConfig("softmax-postln-bare", 6, 10)
    r = train(cfg, TrainConfig(steps=30, seed=1, cap=2.5, log_every=3))
    assert all(e["max_norm"] <= 2.5 + 1e-12 for e in r.log)
    assert r.toy()[1].max_norm() <= 2.5 + 1e-12


def test_classification_training_runs_and_accuracy_is_argmax():
    cfg = ToyConfig("softmax", 6, 8, readout="classification")
    r = train(cfg, TrainConfig(steps=40, seed=0, log_every=20))
    c, p = r.toy()
    n, m = model.full_domain(8)
    scores = explicit_outputs(c, p, list(zip(n.long().tolist(), m.long().tolist(), strict=True)))  # (P, 9)
    _, te = split_domain(8, 0.2, seed=0)
    acc = np.mean(scores[te.numpy()].argmax(1) == n.numpy()[te.numpy()])
    assert r.test_exact_accuracy == pytest.approx(acc)
    assert exact_accuracy(c, p, n, m) == pytest.approx(np.mean(scores.argmax(1) == n.numpy()))


@pytest.mark.parametrize("optimizer, parametrization",
                         [("lbfgs", "cartesian"), ("adam-minibatch", "cartesian"), ("lbfgs", "polar")])
def test_resume_from_checkpoint_is_bit_exact(tmp_path, optimizer, parametrization):
    cfg = ToyConfig("softmax-postln-learned", 6, 10)
    kw = dict(optimizer=optimizer, seed=3, log_every=5, batch_size=16, parametrization=parametrization,
              cap=None if parametrization == "cartesian" else 1.5)
    straight = train(cfg, TrainConfig(steps=24, **kw))
    ck = tmp_path / "run.ckpt"
    first = train(cfg, TrainConfig(steps=11, **kw), checkpoint=ck, checkpoint_every=4)
    assert first.steps_run == 11 and ck.exists()
    resumed = train(cfg, TrainConfig(steps=24, **kw), checkpoint=ck, checkpoint_every=4)
    assert resumed.params == straight.params
    assert resumed.log[-1]["loss"] == straight.log[-1]["loss"]


def test_checkpoint_from_another_run_is_refused(tmp_path):
    ck = tmp_path / "run.ckpt"
    train(ToyConfig("softmax", 4, 6), TrainConfig(steps=3, seed=0), checkpoint=ck)
    with pytest.raises(UsageError, match="different run"):
        train(ToyConfig("softmax", 4, 7), TrainConfig(steps=3, seed=0), checkpoint=ck)
    ck.write_bytes(b"not a checkpoint")
    with pytest.raises(UsageError, match="cannot be read"):
        train(ToyConfig("softmax", 4, 6), TrainConfig(steps=3, seed=0), checkpoint=ck)


def test_divergence_is_reported_with_its_step():
    with pytest.raises(TrainingDiverged) as info:
        train(ToyConfig("softmax", 4, 6), TrainConfig(optimizer="adam", lr=1e200, steps=20, seed=0))
    text = str(info.value).lower()
    assert 1 <= info.value.step <= 20 and ("nan" in text or "inf" in text)


@pytest.mark.parametrize("kw", [
    {"steps": 0}, {"optimizer": "sgd"}, {"cap": 0.0}, {"cap": math.inf}, {"lr": -1.0}, {"batch_size": 0},
    {"test_fraction": 1.0}, {"log_every": 0}, {"ce_scale": 0.0}, {"init_scale": math.nan}, {"loss": "l1"},
    {"beta": 0.0}, {"working_set": -1}, {"grow": 0}, {"parametrization": "spherical"}, {"patience": -1},
])
def test_bad_train_config_is_an_error_of_its_field(kw):
    (field,) = kw
    with pytest.raises(ConfigError) as info:
        TrainConfig(**kw)
    assert info.value.field == field and str(info.value).startswith(f"{field} must")  # the field, never a flag


def test_trainer_refuses_a_domain_too_small_to_split():
    with pytest.raises(ConfigError, match="too few") as info:
        Trainer(ToyConfig("softmax", 4, 1), TrainConfig(test_fraction=0.9))
    assert info.value.field == "L"


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["softmax", "softmax-postln-learned"])
def test_done_criterion_regression_counts_at_L50_for_three_seeds(variant):
    """Training reaches rounding-exact counting: L-BFGS from random init, d = 16, L = 50, seeds 0, 1, 2."""
    for seed in range(3):
        r = train(ToyConfig(variant, 16, 50), TrainConfig(steps=1000, seed=seed, log_every=10,
                                                           stop_when_passed=True))
        assert r.passed and r.full_domain_worst_error < 0.5, (variant, seed, r.full_domain_worst_error)


def test_attained_climbs_reuse_only_runs_their_cap_never_touched():
    from countlens.toy.attained import attained_column, attained_length
    from countlens.toy.experiments import Table3Config

    c = Table3Config(d=4, B=(1e3, 1e4), attained=True, attained_grid=(4, 8), attained_seeds=(0,),
                     attained_steps=30, attained_check_every=10, attained_working_set=16)
    column = attained_column("softmax", c)
    small, big = column["attained_runs"]
    assert small and all("reused_from_cap" not in r for r in small)
    assert len(big) == len(small) and all(r["reused_from_cap"] == 1e3 for r in big)
    # a reused run is the run a fresh climb at that cap makes
    fresh = attained_length("softmax", 1e4, 4, [4, 8], [0], 30, losses=c.attained_loss,
                            parametrizations=c.attained_parametrization, working_set=16, log_every=10)["runs"]
    assert [{k: v for k, v in r.items() if k != "reused_from_cap"} for r in big] == fresh


def test_torch_threads_sets_and_restores_the_count():
    from countlens.core.threads import torch_threads

    before = torch.get_num_threads()
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before


def test_attained_columns_in_two_processes_equal_one():
    from countlens.core.cache import ResultCache
    from countlens.toy.attained import attained_columns
    from countlens.toy.experiments import Table3Config

    c = Table3Config(d=4, B=(3.0,), attained=True, attained_grid=(4, 8), attained_seeds=(0,), attained_steps=20,
                     attained_check_every=10, attained_working_set=16)
    names = ["softmax", "softmax-postln-bare"]
    one = attained_columns(names, c, ResultCache(None), workers=1)
    two = attained_columns(names, c, ResultCache(None), workers=2)
    assert one == two and set(one) == set(names)
    with pytest.raises(UsageError, match="workers"):
        attained_columns(names, c, ResultCache(None), workers=0)


def test_table2_in_two_processes_equals_one():
    from countlens.toy.experiments import Table2Config, run_table2

    c = Table2Config(d=(3,), L=(6, 8), seeds=(0, 1), steps=15)
    one, two = run_table2(c).to_dict(), run_table2(c, workers=2).to_dict()
    one.pop("provenance"), two.pop("provenance")
    assert one == two and len(one["rows"]) == 2


def test_table3_constructed_cells_in_two_processes_equal_one():
    from countlens.toy.experiments import Table3Config, run_table3

    c = Table3Config(d=4, B=(3.0, 10.0))
    one, two = run_table3(c).to_dict(), run_table3(c, workers=2).to_dict()
    one.pop("provenance"), two.pop("provenance")
    assert one == two and one["variants"]["softmax"]["l_max"][0] >= 1


def test_patience_stops_a_run_that_no_longer_improves():
    cfg = ToyConfig("softmax", 4, 12)
    tr = Trainer(cfg, TrainConfig(steps=100, patience=3, working_set=16, log_every=5))
    tr.log = [{"full_domain_worst_error": w} for w in (5.0, 2.0, 1.99, 1.985, 1.999)]
    assert tr.stalled()  # three checks since the best earlier 2.0, none 1 % below it
    tr.log[-2]["full_domain_worst_error"] = 1.97
    assert not tr.stalled()
    # a cap far too small to count: the worst error stays put and the run stops long before its steps
    r = train(cfg, TrainConfig(steps=400, seed=0, cap=0.05, patience=3, working_set=16, log_every=5, loss="max"))
    assert not r.passed and r.stopped_early and r.steps_run < 400
    worst = [e["full_domain_worst_error"] for e in r.log]
    assert min(worst[-3:]) > 0.99 * min(worst[:-3])
    assert TrainConfig(patience=3).trajectory_key() == TrainConfig().trajectory_key()
