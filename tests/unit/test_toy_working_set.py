"""Working-set training: the edges and samples it starts from, the worst-pair scan it grows by, and that
"passed" is always the full-domain check's verdict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.toy import model
from countlens.toy.check import full_domain_check
from countlens.toy.domain_loss import PairSet, residuals, worst_pairs
from countlens.toy.model import ToyConfig
from countlens.toy.train import TrainConfig, Trainer, domain_edges, sample_pairs, train
from tests.helpers.toy_reference import explicit_outputs, random_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_edges_and_samples_lie_in_the_domain():
    n, m = domain_edges(7)
    pairs = set(zip(n.tolist(), m.tolist(), strict=True))
    assert len(pairs) == len(n) == 15 and (7.0, 0.0) in pairs and (0.0, 7.0) in pairs and (0.0, 0.0) in pairs
    assert all(b == 0 or a + b == 7 for a, b in pairs)
    n, m = sample_pairs(7, 20_000, np.random.default_rng(0))
    assert np.all(n >= 0) and np.all(m >= 0) and np.all(n + m <= 7)
    counts = np.bincount((n * 8 + m).astype(int), minlength=64)
    hit = counts[counts > 0]
    assert len(hit) == 36 and hit.min() > 0.6 * hit.mean()  # uniform over the 36 pairs


def test_worst_pairs_and_residuals_match_explicit_sequences():
    cfg = ToyConfig("softmax-postln-learned", 5, 25)
    p = random_params(cfg, seed=1)
    full = PairSet.full(25)
    n, m = full.pairs()
    err = np.abs(residuals(cfg, p, full))  # residuals are ŷ - n
    err_model = np.abs(model.forward(cfg, p, torch.as_tensor(n), torch.as_tensor(m)).detach().numpy() - n)
    assert err == pytest.approx(err_model, rel=1e-9, abs=1e-9)
    some = [(0, 0), (25, 0), (3, 22), (10, 4)]
    idx = [int(full.starts[a] + b) for a, b in some]
    assert err[idx] == pytest.approx(np.abs(explicit_outputs(cfg, p, some) - n[idx]), rel=1e-9)
    wn, wm, we, acc = worst_pairs(cfg, p, 25, 7, chunk=50)  # many small chunks
    assert we == pytest.approx(np.sort(err)[::-1][:7], rel=1e-12)
    assert np.all(np.abs(err[[int(full.starts[int(a)] + b) for a, b in zip(wn, wm, strict=True)]] - we) < 1e-12)
    assert acc == pytest.approx(np.mean(err < 0.5))
    check = full_domain_check(cfg, p)
    assert we[0] == pytest.approx(check.worst_error, rel=1e-9) and (int(wn[0]), int(wm[0])) == check.worst_pair


def test_working_set_training_passes_and_the_check_decides():
    cfg = ToyConfig("softmax", 8, 60)
    tcfg = TrainConfig(steps=600, seed=0, log_every=30, stop_when_passed=True, loss="max", working_set=64, grow=32)
    r = train(cfg, tcfg)
    sizes = [e["working_set"] for e in r.log]
    assert r.passed and sizes == sorted(sizes) and sizes[0] < 61 * 62 // 2
    c, p = r.toy()
    check = full_domain_check(c, p)
    assert check.passed and check.worst_error == pytest.approx(r.full_domain_worst_error, rel=1e-12)
    n, m = model.full_domain(60)
    assert r.test_exact_accuracy == 1.0  # the whole domain: it passed
    err = np.abs(model.forward(c, p, n, m).detach().numpy() - n.numpy())
    assert err.max() == pytest.approx(r.full_domain_worst_error, rel=1e-9)


def test_working_set_resumes_from_a_checkpoint(tmp_path):
    cfg = ToyConfig("softmax-postln-bare", 6, 40)
    tcfg = TrainConfig(steps=40, seed=2, log_every=10, cap=20.0, working_set=50, grow=16)
    whole = train(cfg, tcfg)
    ckpt = tmp_path / "run.ckpt"
    first = Trainer(cfg, TrainConfig(**{**tcfg.__dict__, "steps": 20}))
    first.run()
    from countlens.toy.train import save_checkpoint

    save_checkpoint(first, ckpt)
    resumed = train(cfg, tcfg, checkpoint=ckpt)
    assert resumed.log[-1]["working_set"] == whole.log[-1]["working_set"]
    assert resumed.full_domain_worst_error == pytest.approx(whole.full_domain_worst_error, rel=1e-9)


def test_working_set_and_max_loss_are_for_regression():
    cfg = ToyConfig("softmax", 4, 10, readout="classification")
    for kw in ({"working_set": 10}, {"loss": "max"}):
        with pytest.raises(ConfigError, match="regression readout") as info:
            Trainer(cfg, TrainConfig(**kw))
        assert info.value.fields == ("readout", "loss", "working_set")
    with pytest.raises(ConfigError, match="full-batch optimizer") as info:
        TrainConfig(optimizer="adam-minibatch", working_set=10)
    assert info.value.fields == ("working_set", "optimizer")
