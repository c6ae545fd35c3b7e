"""Constructions count rounding-exactly on the full domain, with the norms the theory predicts."""

import math

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError, UsageError
from countlens.toy.check import full_domain_check
from countlens.toy.constructions import (
    arc_shape,
    best_construction,
    chebyshev_fit,
    construct,
    directions,
    smallest_a,
)
from countlens.toy.model import DTYPE, ToyConfig, ToyParams, count_error, full_domain

SCALED = ("softmax", "softmax-postln-bare", "softmax-postln-learned", "softmax-preln-learned")


def brute_worst(variant, params, L, d):
    cfg = ToyConfig(variant, d, L)
    n, m = full_domain(L)
    with torch.no_grad():
        return float(count_error(cfg, params, n, m).max())


@pytest.mark.slow
@pytest.mark.parametrize("variant", SCALED + ("linear", "linear-preln-bare"))
def test_every_length_up_to_100(variant):
    for L in range(1, 101):
        c = best_construction(variant, L, 16, tune=False)
        assert c.check.passed, (variant, L, c.check.worst_error)
        if L in (1, 7, 50, 100):  # the checker's verdict, re-derived through the full model
            assert brute_worst(variant, c.params, L, 16) < 0.5


@pytest.mark.slow
def test_softmax_preln_bare_every_length_up_to_its_cap_at_d4():
    # d = 4: L_cap is 15 (see test_toy_budget); every shorter length must be constructible
    for L in range(1, 16):
        c = best_construction("softmax-preln-bare", L, 4, tune=False)
        assert c.check.passed
        assert brute_worst("softmax-preln-bare", c.params, L, 4) < 0.5


@pytest.mark.slow
@pytest.mark.parametrize("variant", SCALED)
def test_log_grid_up_to_3000(variant):
    for L in (150, 300, 700, 1500, 3000):
        c = best_construction(variant, L, 16)
        assert c.check.passed and c.check.worst_error < 0.5


def test_linear_variants_count_exactly_at_constant_norm():
    for variant, d in (("linear", 16), ("linear-preln-bare", 16), ("linear", 2), ("linear-preln-bare", 3)):
        norms = []
        for L in (5, 50, 500):
            c = best_construction(variant, L, d)
            assert c.check.worst_error < 1e-9  # exact, not just after rounding
            norms.append(c.max_norm)
        assert max(norms) == pytest.approx(min(norms))
    assert best_construction("linear-preln-bare", 10, 16).max_norm == pytest.approx(2 / 16)


def test_chebyshev_fit_matches_linear_program():
    from scipy.optimize import linprog

    n = np.arange(31, dtype=float)
    f = arc_shape(0.02, -0.4, n)
    K, b0, E = chebyshev_fit(f, n)
    # the same minimax problem as an LP in (K, b0, E)
    A = np.vstack([np.column_stack([f, np.ones_like(f), -np.ones_like(f)]),
                   np.column_stack([-f, -np.ones_like(f), -np.ones_like(f)])])
    res = linprog([0, 0, 1], A_ub=A, b_ub=np.concatenate([n, -n]), bounds=[(None, None)] * 2 + [(0, None)])
    assert E == pytest.approx(res.x[2], rel=1e-7, abs=1e-10)
    assert np.max(np.abs(K * f + b0 - n)) == pytest.approx(E, rel=1e-9)


def test_softmax_needs_a_of_order_L_squared():
    # continuous theory: the slice error is about L² / (8a), so a ≈ L² / 4 at error 1/2
    for L in (100, 400):
        a = smallest_a(L, 0.49)
        assert 0.2 * L * L < a < 0.3 * L * L


def test_directions_are_orthonormal_and_centred():
    for d in (3, 4, 16):
        v, u, t = directions(d)
        vecs = [x for x in (v, u, t) if x is not None]
        G = np.array([[a @ b for b in vecs] for a in vecs])
        np.testing.assert_allclose(G, np.eye(len(vecs)), atol=1e-12)
        for x in vecs:
            assert abs(x.sum()) < 1e-12


def test_construct_takes_free_scalars_and_rejects_unknown_ones():
    p = construct("softmax", 50, 16, phi=0.2)
    assert isinstance(p, ToyParams)
    assert full_domain_check(ToyConfig("softmax", 16, 50), p).passed
    with pytest.raises(UsageError):
        construct("softmax", 50, 16, kappa=0.1)
    with pytest.raises(ConfigError, match="d must be >= 3") as info:
        construct("softmax-postln-bare", 50, 2)
    assert info.value.field == "d"
    with pytest.raises(ConfigError, match="variant must be one of") as info:
        construct("nope", 50, 16)
    assert info.value.field == "variant"


def test_postln_distractors_are_invisible():
    """z_l = 0 in the post-LN constructions: adding distractors rescales o, which LN forgets."""
    c = best_construction("softmax-postln-learned", 40, 16)
    cfg = c.cfg
    n = torch.full((41,), 17.0, dtype=DTYPE)
    m = torch.arange(41, dtype=DTYPE).clamp(max=23)
    from countlens.toy.model import forward

    with torch.no_grad():
        y = forward(cfg, c.params, n, m)
    assert float(y.max() - y.min()) < 1e-9


def test_tuning_never_costs_norm():
    for variant in SCALED:
        tuned = best_construction(variant, 200, 16)
        plain = best_construction(variant, 200, 16, tune=False)
        assert tuned.max_norm <= plain.max_norm * (1 + 1e-6)
        assert math.isfinite(tuned.max_norm)
