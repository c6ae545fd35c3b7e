"""The full-domain checker: the O(1)-per-pair reduced form against the full model, chunking, classification."""

import math

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.toy.check import full_domain_check, n_pairs, reduced_form
from countlens.toy.model import DTYPE, VARIANTS, ToyConfig, count_error, full_domain, init_params
from tests.helpers.toy_reference import random_params  # random LN gain/bias and biases too


def brute_force(cfg, p, L):
    """Plain loop over pairs through the full d-dimensional model: (worst error, worst pair)."""
    n, m = full_domain(L)
    with torch.no_grad():
        err = count_error(cfg, p, n, m).numpy()
    k = int(np.argmax(err))
    return float(err[k]), (int(n[k]), int(m[k])), err


def counting_params(cfg, seed):
    """Random token vectors with the read-out fitted by least squares, so errors vary around 1/2."""
    p = random_params(cfg, seed, scale=3.0)
    n, m = full_domain(cfg.L)
    from countlens.toy.model import boundary_representation

    with torch.no_grad():
        h = boundary_representation(cfg, p, n, m)
        X = torch.cat([h, torch.ones(len(n), 1, dtype=DTYPE)], dim=1)
        sol = torch.linalg.lstsq(X, n.unsqueeze(1)).solution.squeeze(1)
    p.w, p.b0 = sol[:-1].clone(), sol[-1].clone()
    return p


@pytest.mark.parametrize("variant", VARIANTS)
def test_fast_path_equals_full_model(variant):
    for seed in range(3):
        cfg = ToyConfig(variant, d=7, L=37)
        p = counting_params(cfg, seed)
        want, pair, err = brute_force(cfg, p, 37)
        res = full_domain_check(cfg, p, chunk=97)  # many small chunks
        assert res.worst_error == pytest.approx(want, rel=1e-9, abs=1e-9)
        n, m = full_domain(37)
        at = int(np.flatnonzero((n.numpy() == res.worst_pair[0]) & (m.numpy() == res.worst_pair[1]))[0])
        assert err[at] == pytest.approx(want, rel=1e-9, abs=1e-9)
        assert res.passed == (want < 0.5)
        assert res.pairs == n_pairs(37) == len(err)


@pytest.mark.parametrize("variant", ["softmax-postln-bare", "softmax-postln-learned"])
def test_fast_path_with_layernorm_eps(variant):
    cfg = ToyConfig(variant, d=5, L=20, eps=0.3)
    p = counting_params(cfg, 4)
    want, _, _ = brute_force(cfg, p, 20)
    assert full_domain_check(cfg, p).worst_error == pytest.approx(want, rel=1e-9)


def test_chunk_size_does_not_change_the_answer():
    cfg = ToyConfig("softmax-postln-learned", d=6, L=120)
    p = counting_params(cfg, 1)
    results = {c: full_domain_check(cfg, p, chunk=c) for c in (1, 50, 1000, 1 << 20)}
    worst = {(r.worst_error, r.worst_pair) for r in results.values()}
    assert len(worst) == 1
    model = full_domain_check(cfg, p, method="model", chunk=333)
    assert model.worst_error == pytest.approx(results[1000].worst_error, rel=1e-9)


def test_huge_scores_do_not_overflow():
    """Scores of order 1e8 (norms 1e4): the m = 0 column and the rows stay finite and exact."""
    cfg = ToyConfig("softmax", d=4, L=30)
    p = init_params(cfg, seed=2, scale=1e4)
    res = full_domain_check(cfg, p)
    want, pair, _ = brute_force(cfg, p, 30)
    assert math.isfinite(res.worst_error)
    assert res.worst_error == pytest.approx(want, rel=1e-9)
    assert res.worst_pair == pair


def test_reduced_form_reproduces_readout():
    cfg = ToyConfig("softmax-postln-learned", d=5, L=9)
    p = counting_params(cfg, 0)
    rf = reduced_form(cfg, p)
    n, m = torch.tensor([4.0]), torch.tensor([3.0])
    z = torch.stack([p.x_b, p.x_s, p.x_l])
    from countlens.toy.model import forward, mixing_weights, token_vectors

    lam = mixing_weights(cfg, token_vectors(cfg, p), n.to(DTYPE), m.to(DTYPE)).numpy()[0]
    yhat = lam @ rf["q"] / math.sqrt(lam @ rf["G"] @ lam / cfg.d) + rf["const"]
    assert yhat == pytest.approx(float(forward(cfg, p, n.to(DTYPE), m.to(DTYPE))[0]), rel=1e-10)
    assert z.shape == (3, 5)


def test_classification_reports_smallest_gap():
    cfg = ToyConfig("softmax-postln-bare", d=6, L=12, readout="classification")
    p = random_params(cfg, 0)
    worst, pair, err = brute_force(cfg, p, 12)
    res = full_domain_check(cfg, p, chunk=7)
    assert res.worst_error == pytest.approx(worst)
    assert res.min_gap == pytest.approx(-worst)
    assert res.passed == (worst < 0)
    assert res.worst_pair == pair


def test_classifier_with_wrong_L_is_a_usage_error():
    cfg = ToyConfig("softmax", d=4, L=5, readout="classification")
    p = random_params(cfg, 0)
    with pytest.raises(ConfigError, match="check it at L=5") as info:
        full_domain_check(cfg, p, L=7)
    assert info.value.render(lambda f: "--" + f).endswith("check it at --L 5")


def test_norms_are_reported():
    cfg = ToyConfig("softmax-postln-learned", d=4, L=3)
    p = random_params(cfg, 0)
    res = full_domain_check(cfg, p)
    assert res.norms["x_b"] == pytest.approx(float(torch.linalg.vector_norm(p.x_b)))
    assert res.max_norm == pytest.approx(max(res.norms.values()))


def test_undefined_layernorm_fails_the_check():
    """Post-LN of a vector with no centred part is 0/0: reported as an infinite error, never as a pass."""
    cfg = ToyConfig("softmax-postln-bare", d=4, L=5)
    p = random_params(cfg, 0)
    p.x_b = torch.ones(4, dtype=DTYPE)  # constant vector: LN(o) undefined at n = m = 0
    for method in ("fast", "model"):
        res = full_domain_check(cfg, p, method=method)
        assert not res.passed and math.isinf(res.worst_error) and res.worst_pair == (0, 0)


@pytest.mark.parametrize("variant", VARIANTS)
def test_classification_fast_path_equals_model_path(variant):
    cfg = ToyConfig(variant, d=5, L=23, readout="classification")
    p = random_params(cfg, 2)
    fast = full_domain_check(cfg, p, chunk=200)  # blocks of a few pairs, rows split across blocks
    model = full_domain_check(cfg, p, method="model")
    assert fast.worst_error == pytest.approx(model.worst_error, rel=1e-9, abs=1e-12)
    assert fast.worst_pair == model.worst_pair
