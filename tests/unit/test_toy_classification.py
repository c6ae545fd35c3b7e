"""The classification read-out: bounded-norm construction, winning gaps, storage cost, arc angle."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.toy import model
from countlens.toy.check import full_domain_check
from countlens.toy.classification import (
    arc_angle,
    classifier_construction,
    classifier_norm_bound,
    min_gap_by_count,
    storage_cost,
)
from countlens.toy.model import VARIANTS, ToyConfig
from tests.helpers.toy_reference import explicit_attention

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("d", [3, 16])
def test_construction_counts_with_unit_norms(variant, d):
    for L in (1, 2, 7, 40):
        cfg = ToyConfig(variant, d, L, readout="classification")
        p = classifier_construction(cfg)
        check = full_domain_check(cfg, p)
        assert check.passed, (variant, d, L, check.worst_error, check.worst_pair)
        assert p.max_norm() <= classifier_norm_bound(cfg) + 1e-12


@pytest.mark.parametrize("variant", ["softmax", "softmax-postln-bare", "softmax-preln-bare", "linear"])
def test_construction_argmax_by_explicit_attention(variant):
    cfg = ToyConfig(variant, 5, 9, readout="classification")
    p = classifier_construction(cfg)
    for n, m in itertools.product(range(10), range(10)):
        if n + m <= 9:
            assert int(np.argmax(explicit_attention(cfg, p, n, m).numpy())) == n


def test_min_gap_by_count_matches_a_loop():
    cfg = ToyConfig("softmax-postln-learned", 4, 11, readout="classification")
    p = model.init_params(cfg, seed=5, scale=3.0)
    expected = []
    for n in range(12):
        gaps = []
        for m in range(12 - n):
            s = explicit_attention(cfg, p, n, m).numpy()
            gaps.append(s[n] - np.max(np.delete(s, n)))
        expected.append(min(gaps))
    got = min_gap_by_count(cfg, p, chunk=50)  # small chunks: several blocks
    assert np.allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_construction_gap_is_the_closed_form():
    """Softmax: gap λ_b / (L² s) at every pair, s the read-out's normalisation (its largest raw row norm);
    linear: the constant 1 / (L² s), with s = (1 + 2/L) / |c_L| read off the last class bias."""
    L = 30
    n, m = model.full_domain(L)
    k = torch.arange(L + 1, dtype=torch.float64) / L
    cfg = ToyConfig("linear", 8, L, readout="classification")
    p = classifier_construction(cfg)
    gap = model.winning_gap(model.forward(cfg, p, n, m), n)
    s = (1 + 2 / L) / abs(float(p.c[-1]))
    assert torch.allclose(gap, torch.full_like(gap, 1.0 / (L * L * s)), rtol=1e-8)

    cfg = ToyConfig("softmax", 8, L, readout="classification")
    p = classifier_construction(cfg)
    gap = model.winning_gap(model.forward(cfg, p, n, m), n)
    lam = model.mixing_weights(cfg, model.token_vectors(cfg, p), n, m)  # (P, 3)
    one = int(((n == 1) & (m == 0)).nonzero())
    a = float(lam[one, 0] / lam[one, 1])  # λ_b / λ_s at (1, 0) is a / 1
    s = max(1.0, float(torch.sqrt((2 * k * a / L) ** 2 + k**4).max()))
    assert torch.allclose(gap, lam[:, 0] / (L * L * s), rtol=1e-7)


def test_storage_cost_counts_the_tensors():
    d, L = 16, 40
    cfg = ToyConfig("softmax-postln-learned", d, L, readout="classification")
    p = classifier_construction(cfg)
    reg = model.init_params(ToyConfig("softmax-postln-learned", d, L))
    cost = storage_cost(d, L, ln_learned=True)
    assert cost["classification_readout"] == p.U.numel() + p.c.numel()
    assert cost["regression_readout"] == reg.w.numel() + reg.b0.numel()
    assert cost["classification_total"] == sum(t.numel() for t in p.tensors().values())
    assert cost["regression_total"] == sum(t.numel() for t in reg.tensors().values())


def test_arc_angle_is_the_largest_pairwise_angle():
    cfg = ToyConfig("softmax", 5, 15)
    p = model.init_params(cfg, seed=2, scale=2.0)
    n = torch.arange(16, dtype=torch.float64)
    o = model.attention_output(cfg, p, n, torch.zeros_like(n)).numpy()
    v = o - o.mean(1, keepdims=True)
    best = 0.0
    for i in range(16):
        for j in range(16):
            c = v[i] @ v[j] / (np.linalg.norm(v[i]) * np.linalg.norm(v[j]))
            best = max(best, float(np.arccos(np.clip(c, -1, 1))))
    assert arc_angle(cfg, p) == pytest.approx(best, abs=1e-7)


def test_construction_needs_three_dimensions():
    with pytest.raises(ConfigError, match="needs d >= 3") as info:
        classifier_construction(ToyConfig("softmax", 2, 5, readout="classification"))
    assert info.value.field == "d"
    with pytest.raises(ConfigError, match="classification readout") as info:
        min_gap_by_count(ToyConfig("softmax", 4, 5), model.init_params(ToyConfig("softmax", 4, 5)))
    assert info.value.field == "readout"


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["softmax", "softmax-postln-learned"])
def test_construction_passes_at_L1000_with_norms_at_most_one(variant):
    """The classifier construction counts at L = 1,000 with every vector's norm <= 1."""
    cfg = ToyConfig(variant, 16, 1000, readout="classification")
    p = classifier_construction(cfg)
    check = full_domain_check(cfg, p)
    assert check.passed and check.max_norm <= 1.0 + 1e-12
    assert check.min_gap > 0
