"""L_cap of bare pre-LN decided exactly: the whole-domain LP's certificate, re-derived independently."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from countlens.toy.budget import l_cap, l_infeasible, preln_bare_bound, preln_bare_lp


def _row(label, pair, lo):
    """The constraint a certificate term names, rebuilt from its label: coefficients of
    (β_b, αβ_s, γβ_l, α, γ) and the right-hand side, for ``ŷ = (β_b + nαβ_s + mγβ_l) / (1 + nα + mγ)``."""
    if pair is None:
        col = 3 if label.startswith("alpha") else 4
        coef = [Fraction(0)] * 5
        coef[col] = Fraction(-1 if ">=" in label else 1)
        return coef, (-lo if ">=" in label else Fraction(1))
    n, m = (Fraction(v) for v in pair)
    half = Fraction(1, 2)
    # ŷ - n < 1/2  <=>  β_b + nπ + mξ - n(1 + nα + mγ) < (1 + nα + mγ)/2, and n - ŷ < 1/2 likewise
    if label == "above":
        return [Fraction(1), n, m, -(n * n + n * half), -(n * m + m * half)], n + half
    return [Fraction(-1), -n, -m, n * n - n * half, n * m - m * half], half - n


@pytest.mark.parametrize("d, cap", [(3, 12), (4, 15), (8, 34), (16, 110)])
def test_lp_decides_l_cap_with_an_exact_certificate(d, cap):
    assert preln_bare_lp(cap, d).margin > 0  # the relaxation still counts at the constructed length
    proof = preln_bare_lp(cap + 1, d)
    assert proof.infeasible and proof.margin <= 0
    lo = Fraction(math.exp(-2.0 * (1.0 / math.sqrt(d)) * d) * (1.0 - 1e-9))  # as the LP widens its box
    combined, total, pair_weight = [Fraction(0)] * 5, Fraction(0), Fraction(0)
    for label, pair, y in proof.terms:
        assert y > 0
        coef, rhs = _row(label, pair, lo)
        combined = [a + y * c for a, c in zip(combined, coef, strict=True)]
        total += y * rhs
        pair_weight += y if pair is not None else 0
    # the combination cancels every unknown, so the strict constraints would give 0 < total < 0
    assert combined == [0] * 5 and pair_weight == 1 and total == proof.total < 0
    assert preln_bare_bound(d)[0] == cap + 1 <= l_infeasible(d)[0]


def test_l_cap_is_exact():
    res = l_cap(4)
    assert (res.l_cap, res.l_infeasible) == (15, 16)
    assert "LP over the mixing weights" in res.reason and "L = 16" in res.reason
    assert res.worst_error_at_cap < 0.5
