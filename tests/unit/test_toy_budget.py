"""B_min rates, L_max, L_cap of bare pre-LN, Table 3's constructed column."""

import math

import numpy as np
import pytest

from countlens.toy.budget import (
    b_min,
    fit_rates,
    fit_slope,
    l_cap,
    l_infeasible,
    l_max,
    preln_bare_needed_a,
)


def slice_lp_error(a: float, L: int) -> float:
    """min over (D, b0) of max_n |b0 + D n/(a+n) - n|, n = 0..L, by scipy's LP (independent of our fit)."""
    from scipy.optimize import linprog

    n = np.arange(L + 1, dtype=float)
    g = n / (a + n)
    one = np.ones_like(n)
    A = np.vstack([np.column_stack([g, one, -one]), np.column_stack([-g, -one, -one])])
    res = linprog([0, 0, 1], A_ub=A, b_ub=np.concatenate([n, -n]), bounds=[(None, None)] * 2 + [(0, None)])
    return float(res.x[2])


def test_fit_slope_recovers_power_law():
    L = np.array([10, 100, 1000])
    assert fit_slope(L, 3 * L**1.5) == pytest.approx(1.5)
    assert fit_slope(L, [1.0, math.inf, math.inf]) is None


@pytest.mark.slow
def test_slopes_over_100_to_3000_match_table1():
    res = fit_rates(16, [100, 300, 1000, 3000], variants=(
        "softmax", "softmax-postln-bare", "softmax-postln-learned", "softmax-preln-learned", "linear",
        "linear-preln-bare"))
    claimed = {"softmax": 1.0, "softmax-postln-bare": 1.5, "softmax-postln-learned": 0.75,
               "softmax-preln-learned": 1.0, "linear": 0.0, "linear-preln-bare": 0.0}
    for v, expo in claimed.items():
        fit = res.variants[v]
        assert abs(fit.slope - expo) < 0.1, (v, fit.slope, fit.b_min)
        assert all(e < 0.5 for e in fit.worst_error)


def test_rates_mark_bare_preln_infinite_past_its_cap():
    bare = fit_rates(4, [5, 20, 40], variants=("softmax-preln-bare",)).variants["softmax-preln-bare"]
    assert bare.slope is None and math.isfinite(bare.b_min[0]) and math.isinf(bare.b_min[1])


def test_b_min_grows_with_L():
    for v in ("softmax", "softmax-postln-learned"):
        bs = [b_min(v, L, 16) for L in (20, 80, 320)]
        assert bs[0] < bs[1] < bs[2]


def test_l_infeasible_bound_is_a_proof_on_the_letter_free_slice():
    for d in (3, 4):
        bound, reason = l_infeasible(d)
        A = math.exp(2 * d / math.sqrt(d))
        assert preln_bare_needed_a(bound) >= A > preln_bare_needed_a(bound - 1)
        assert "sphere" in reason and str(bound) in reason
        # independent: at L = bound no attention ratio a <= A fits the slice (LP per a on a dense grid)
        for a in np.geomspace(1.0, A, 60):
            assert slice_lp_error(a, bound) >= 0.5


def test_l_cap_brackets_tightly():
    for d, cap in ((3, 12), (4, 15)):
        res = l_cap(d)
        assert res.l_cap >= cap
        assert res.l_cap < res.l_infeasible <= res.l_cap + 3
        assert res.worst_error_at_cap < 0.5


def test_b_min_is_infinite_past_l_cap():
    bound, _ = l_infeasible(4)
    assert math.isinf(b_min("softmax-preln-bare", bound, 4))
    assert math.isfinite(b_min("softmax-preln-bare", bound - 2, 4))


def test_l_max_inverts_b_min():
    for v, B in (("softmax", 20.0), ("softmax-postln-bare", 12.0), ("softmax-postln-learned", 6.0)):
        res = l_max(v, B, 16)
        assert res.max_norm <= B and res.worst_error < 0.5
        assert b_min(v, int(res.L), 16) <= B
        assert b_min(v, int(res.L) + max(2, int(res.L) // 20), 16) > B  # a little longer no longer fits
    assert math.isinf(l_max("linear", 2.0, 16).L)
    assert l_max("linear", 1.0, 16).L == 0  # linear needs |b0| = 1 and a = d^(1/8) > 1


def test_softmax_beats_the_papers_construction_at_B_10():
    res = l_max("softmax", 10.0, 16)
    assert res.L >= 15 and res.max_norm <= 10 and res.worst_error < 0.5
