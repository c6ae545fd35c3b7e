"""The reduced-form loss and gradient equal the explicit model's, for every variant and read-out."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from countlens.toy import model
from countlens.toy.domain_loss import PairSet, loss_and_grad
from countlens.toy.model import READOUTS, VARIANTS, ToyConfig
from countlens.toy.train import loss_fn, split_domain
from tests.helpers.toy_reference import explicit_outputs, random_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _autograd(cfg, p, n, m, weight=None, kind="mse", beta=1.0, ce_scale=1.0):
    """Loss and gradient by autograd through ``model.forward`` over per-pair tensors (P,)."""
    leaves = {k: v.detach().clone().requires_grad_(True) for k, v in p.tensors().items()}
    out = model.forward(cfg, model.ToyParams(**leaves), n, m)
    w = torch.ones_like(n) if weight is None else torch.as_tensor(weight)
    if cfg.readout == "classification":
        per = torch.nn.functional.cross_entropy(ce_scale * out, n.long(), reduction="none")
        value = (w * per).sum() / w.sum()
    elif kind == "mse":
        value = (w * (out - n) ** 2).sum() / w.sum()
    else:
        value = (torch.logsumexp(beta * (out - n) ** 2 + torch.log(w), 0) - torch.log(w.sum())) / beta
    grads = torch.autograd.grad(value, list(leaves.values()))
    return float(value.detach()), dict(zip(leaves, grads, strict=True))


def _assert_grads_close(got, ref, rel=1e-9):
    assert got.keys() == ref.keys()
    scale = max(float(torch.linalg.vector_norm(g)) for g in ref.values())
    for k, g in ref.items():
        assert float(torch.linalg.vector_norm(got[k] - g)) <= rel * scale, k


@pytest.mark.parametrize("readout", READOUTS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_loss_and_gradient_equal_autograd_and_explicit_sequences(variant, readout):
    L = 9
    cfg = ToyConfig(variant, 5, L, readout=readout)
    p = random_params(cfg, seed=3)
    n, m = model.full_domain(L)
    value, grads = loss_and_grad(cfg, p, PairSet.full(L), ce_scale=1.7)
    ref_value, ref_grads = _autograd(cfg, p, n, m, ce_scale=1.7)
    assert value == pytest.approx(ref_value, rel=1e-9)
    _assert_grads_close(grads, ref_grads)
    # the value against attention run over explicit (shuffled) token sequences
    pairs = list(zip(n.long().tolist(), m.long().tolist(), strict=True))
    out = explicit_outputs(cfg, p, pairs)
    nn = n.numpy()
    if readout == "regression":
        explicit = np.mean((out - nn) ** 2)
    else:
        s = 1.7 * out
        top = s.max(1, keepdims=True)
        explicit = np.mean(np.log(np.exp(s - top).sum(1)) + top[:, 0] - s[np.arange(len(nn)), nn.astype(int)])
    assert value == pytest.approx(explicit, rel=1e-9)


@pytest.mark.parametrize("variant", VARIANTS)
def test_equals_the_trainers_loss_on_its_training_split(variant):
    L = 20
    for readout in READOUTS:
        cfg = ToyConfig(variant, 4, L, readout=readout)
        p = random_params(cfg, seed=5, scale=3.0)
        n, m = model.full_domain(L)
        idx, _ = split_domain(L, 0.2, seed=1)
        value, grads = loss_and_grad(cfg, p, PairSet.from_pairs(n[idx], m[idx]), ce_scale=2.0)
        leaves = {k: v.detach().clone().requires_grad_(True) for k, v in p.tensors().items()}
        ref = loss_fn(cfg, model.ToyParams(**leaves), n[idx], m[idx], ce_scale=2.0)
        ref_grads = dict(zip(leaves, torch.autograd.grad(ref, list(leaves.values())), strict=True))
        assert value == pytest.approx(float(ref.detach()), rel=1e-9)
        _assert_grads_close(grads, ref_grads)


@pytest.mark.parametrize("variant", ["softmax", "softmax-postln-bare", "softmax-postln-learned",
                                     "softmax-preln-learned"])
def test_large_norms_stay_finite_and_exact(variant):
    # norms of 1e4 give scores near 1e8: every softmax weight saturates somewhere on the domain
    L = 40
    cfg = ToyConfig(variant, 6, L)
    p = random_params(cfg, seed=11, scale=1e4)
    p.w = p.w * 1e-4
    assert p.max_norm() > 5e3
    n, m = model.full_domain(L)
    value, grads = loss_and_grad(cfg, p, PairSet.full(L))
    ref_value, ref_grads = _autograd(cfg, p, n, m)
    assert math.isfinite(value) and value == pytest.approx(ref_value, rel=1e-9)
    _assert_grads_close(grads, ref_grads)


def test_weights_duplicates_and_order_do_not_matter():
    cfg = ToyConfig("softmax-postln-learned", 4, 15, eps=1e-3)
    p = random_params(cfg, seed=2)
    rng = np.random.default_rng(0)
    n = rng.integers(0, 8, 60).astype(float)
    m = rng.integers(0, 8, 60).astype(float)
    w = rng.uniform(0.1, 2.0, 60)
    value, grads = loss_and_grad(cfg, p, PairSet.from_pairs(n, m, w), chunk=7)  # many small chunks
    ref_value, ref_grads = _autograd(cfg, p, torch.as_tensor(n), torch.as_tensor(m), weight=w)
    assert value == pytest.approx(ref_value, rel=1e-9)
    _assert_grads_close(grads, ref_grads)


@pytest.mark.parametrize("variant", ["softmax", "softmax-postln-learned", "linear"])
def test_smooth_max_error_loss(variant):
    L = 12
    cfg = ToyConfig(variant, 4, L)
    p = random_params(cfg, seed=4)
    n, m = model.full_domain(L)
    for beta in (0.5, 20.0):
        value, grads = loss_and_grad(cfg, p, PairSet.full(L), loss="max", beta=beta)
        ref_value, ref_grads = _autograd(cfg, p, n, m, kind="max", beta=beta)
        assert value == pytest.approx(ref_value, rel=1e-9)
        _assert_grads_close(grads, ref_grads)
    worst = float(((model.forward(cfg, p, n, m) - n) ** 2).max())
    assert loss_and_grad(cfg, p, PairSet.full(L), loss="max", beta=1e4)[0] == pytest.approx(worst, rel=1e-3)


def test_pair_set_layout():
    ps = PairSet.full(3)
    assert len(ps) == 10 and ps.n.tolist() == [0, 1, 2, 3] and ps.starts.tolist() == [0, 4, 7, 9, 10]
    n, m = ps.pairs()
    assert list(zip(n.tolist(), m.tolist(), strict=True)) == [(a, b) for a in range(4) for b in range(4 - a)]
    assert [c for c in ps.chunks(3)] == [(0, 1), (1, 2), (2, 4)]
