"""The toy model on count pairs equals explicit attention over real, shuffled token sequences (docs/definitions.md §1)."""

import math

import numpy as np
import pytest
import torch

from countlens.core.errors import ConfigError
from countlens.toy.model import (
    DTYPE,
    VARIANTS,
    ToyConfig,
    count_error,
    forward,
    full_domain,
    layer_norm,
    winning_gap,
)
from tests.helpers.toy_reference import explicit_attention, random_params

PAIRS = [(0, 0), (1, 0), (0, 1), (3, 2), (7, 0), (0, 7), (5, 5), (12, 3)]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("readout", ["regression", "classification"])
def test_pairs_equal_explicit_sequences(variant, readout):
    rng = np.random.default_rng(0)
    for seed in range(3):
        cfg = ToyConfig(variant, d=6, L=15, readout=readout)
        p = random_params(cfg, seed)
        n = torch.tensor([a for a, _ in PAIRS], dtype=DTYPE)
        m = torch.tensor([b for _, b in PAIRS], dtype=DTYPE)
        fast = forward(cfg, p, n, m)
        for i, (a, b) in enumerate(PAIRS):
            want = explicit_attention(cfg, p, a, b, rng)
            torch.testing.assert_close(fast[i], want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("variant", ["softmax", "softmax-postln-learned", "softmax-preln-learned"])
def test_large_norms_stay_exact(variant):
    """Norms near 1e4 give scores near 1e8; the count-pair form must still match explicit attention."""
    rng = np.random.default_rng(1)
    cfg = ToyConfig(variant, d=5, L=40)
    p = random_params(cfg, seed=3, scale=1e4)
    n = torch.tensor([0.0, 1.0, 17.0, 3.0, 40.0], dtype=DTYPE)
    m = torch.tensor([0.0, 9.0, 2.0, 30.0, 0.0], dtype=DTYPE)
    out = forward(cfg, p, n, m)
    assert torch.all(torch.isfinite(out))
    for i in range(len(n)):
        want = explicit_attention(cfg, p, int(n[i]), int(m[i]), rng)
        torch.testing.assert_close(out[i], want, rtol=1e-9, atol=1e-6 * float(want.abs()) + 1e-9)


def test_full_domain_enumerates_each_pair_once():
    n, m = full_domain(7)
    pairs = set(zip(n.tolist(), m.tolist(), strict=True))
    assert len(pairs) == len(n) == 8 * 9 // 2
    assert pairs == {(a, b) for a in range(8) for b in range(8) if a + b <= 7}


def test_layer_norm_matches_definition():
    v = torch.tensor([[1.0, 2.0, 4.0, 9.0]], dtype=DTYPE)
    mu, sd = 4.0, math.sqrt(((1 - 4) ** 2 + (2 - 4) ** 2 + 0 + 25) / 4)
    torch.testing.assert_close(layer_norm(v), (v - mu) / sd)


def test_count_error_and_winning_gap():
    cfg = ToyConfig("linear", d=4, L=3, readout="classification")
    p = random_params(cfg, 0)
    n, m = full_domain(3)
    scores = forward(cfg, p, n, m)
    gap = winning_gap(scores, n)
    for i in range(len(n)):
        s = scores[i].clone()
        true = float(s[int(n[i])])
        s[int(n[i])] = -math.inf
        assert float(gap[i]) == pytest.approx(true - float(s.max()))
    torch.testing.assert_close(count_error(cfg, p, n, m), -gap)


@pytest.mark.parametrize("kw, field", [
    ({"variant": "softmax-postln"}, "variant"), ({"L": 0}, "L"), ({"d": 0}, "d"), ({"readout": "ranking"}, "readout"),
    ({"tau": -1.0}, "tau"), ({"eps": -1e-3}, "eps"),
])
def test_bad_config_is_an_error_of_its_field(kw, field):
    with pytest.raises(ConfigError) as info:
        ToyConfig(**{"variant": "softmax", "d": 4, "L": 3, **kw})
    assert info.value.field == field and str(info.value).startswith(f"{field} must")
