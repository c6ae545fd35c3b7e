"""The norm-scaling comparison's read-out numerics (countlens.llm.organisms.scaling), without training: the one
log-log slope the toy and the organisms share, which vector attains B, Figure 2c's gap per count, the toy's
classification rows and the rates set beside them. The trained organisms' numbers are tested against plain
forwards in test_organisms.py (its ``scaled`` fixture)."""

from __future__ import annotations

import math

import numpy as np
import pytest


def test_the_toy_and_the_organisms_share_one_loglog_slope():
    import countlens.llm.organisms.scaling as scaling
    from countlens.toy.budget import fit_slope

    assert not hasattr(scaling, "loglog_slope")  # one definition, the toy's
    L = [10, 30, 100]
    assert fit_slope(L, [2.0 * x**0.75 for x in L]) == pytest.approx(0.75)
    assert fit_slope(np.array(L), np.array([3.0 * x**1.5 for x in L])) == pytest.approx(1.5)
    assert fit_slope(L, [None, 5.0, math.inf]) is None  # one usable point
    assert fit_slope(L, [None, 5.0, 7.0]) == pytest.approx(math.log(7 / 5) / math.log(10 / 3))
    assert fit_slope([10, 10, 30], [1.0, 2.0, None]) is None  # points at one L only
    assert fit_slope(L, [-1.0, 0.0, 2.0]) is None  # non-positive values have no logarithm


def test_the_gap_per_count_is_the_least_over_its_prompts():
    from countlens.llm.organisms.scaling import gap_by_count

    gaps = np.array([0.5, -0.25, 2.0, 1.0, 3.0])
    n = np.array([0, 0, 1, 1, 3])
    got = gap_by_count(gaps, n, 3)
    assert got[:2].tolist() == [-0.25, 1.0] and np.isnan(got[2]) and got[3] == 3.0


def test_the_vector_attaining_B_is_named_by_its_role_and_the_toys_by_every_tied_vector():
    from countlens.llm.organisms.scaling import attaining, vector_role

    assert "final RMSNorm" in vector_role("model.norm.weight", None)
    assert "attention's RMSNorm" in vector_role("model.layers.0.input_layernorm.weight", None)
    assert vector_role("model.embed_tokens.weight", 7) == "token id 7's embedding row (tied: its unembedding row)"
    assert vector_role("model.layers.0.self_attn.v_proj.weight", 3) == "v_proj's output row 3"
    assert attaining({"x_b": 1.0, "w": 4.5, "gamma": 4.5 * (1 - 1e-12), "beta": 0.7}) == "w, gamma"


def test_the_toy_rows_set_both_read_outs_at_each_L():
    import torch

    from countlens.llm.organisms.scaling import TOY_VARIANT, ScalingConfig, toy_rows
    from countlens.toy import ToyConfig, b_min, classifier_construction
    from countlens.toy.model import forward, full_domain

    config = ScalingConfig(Ls=[3, 5], seeds=[0], width=8)
    rows = toy_rows(config)
    assert [(r["kind"], r["L"]) for r in rows] == [("toy", 3), ("toy", 5), ("toy-classification", 3),
                                                   ("toy-classification", 5)]
    for r in rows:
        if r["kind"] == "toy":
            assert r["largest_parameter_norm"] == b_min(TOY_VARIANT, r["L"], 8)
            continue
        L = r["L"]
        cfg = ToyConfig(TOY_VARIANT, 8, L, readout="classification")
        p = classifier_construction(cfg)
        # the largest vector by a brute loop over every vector (U's rows, c's entries)
        vectors = [p.x_b, p.x_s, p.x_l, p.gamma, p.beta, *p.U, *p.c.reshape(-1, 1)]
        assert r["largest_parameter_norm"] == pytest.approx(max(float(torch.linalg.vector_norm(v)) for v in vectors))
        assert r["class_vector_norm"] == pytest.approx(max(float(torch.linalg.vector_norm(u)) for u in p.U))
        assert r["largest_parameter_norm"] <= 1.0 + 1e-12  # the construction's bound at every L
        # Figure 2c: per count the true score minus the best other, least over the letters m
        n, m = full_domain(L)
        scores = forward(cfg, p, n, m).numpy()
        per_count = {}
        for row, k in zip(scores, n.long().tolist(), strict=True):
            gap = row[k] - max(row[j] for j in range(L + 1) if j != k)
            per_count[k] = min(per_count.get(k, math.inf), gap)
        low = min(per_count, key=per_count.get)
        assert r["min_logit_gap"] == pytest.approx(per_count[low], rel=1e-9) and r["min_gap_count"] == low
        assert r["gap_by_count"] == pytest.approx([per_count[k] for k in range(L + 1)], rel=1e-9)


def _organism(L, seed, B, gap, converged=True, class_norm=1.0):
    return {"kind": "organism", "L": L, "seed": seed, "converged": converged, "largest_parameter_norm": B,
            "probe_norm": None, "class_vector_norm": class_norm, "min_logit_gap": gap}


def test_the_rates_fit_every_read_out_with_the_one_slope():
    from countlens.llm.organisms.scaling import ScalingConfig, rates
    from countlens.toy.budget import fit_slope

    config = ScalingConfig(Ls=[10, 30], seeds=[0, 1])
    rows = [_organism(10, 0, 10.0, 2.0), _organism(30, 0, 30.0, 1.0, class_norm=3.0),
            _organism(10, 1, 9.0, 2.0), _organism(30, 1, 40.0, -0.5),  # seed 1's gap: no logarithm at L = 30
            {"kind": "toy", "L": 10, "largest_parameter_norm": 5.0}, {"kind": "toy", "L": 30, "largest_parameter_norm": 14.0},
            {"kind": "toy-classification", "L": 10, "largest_parameter_norm": 1.0, "class_vector_norm": 0.9,
             "min_logit_gap": 1e-3},
            {"kind": "toy-classification", "L": 30, "largest_parameter_norm": 1.0, "class_vector_norm": 0.8,
             "min_logit_gap": 4e-5}]
    got = rates(config, rows)
    assert got["organism_norm"]["per_seed"] == [pytest.approx(1.0), pytest.approx(math.log(40 / 9) / math.log(3))]
    assert got["organism_gap"]["per_seed"] == [pytest.approx(-math.log(2) / math.log(3)), None]
    assert got["organism_class_vector_norm"]["per_seed"] == [pytest.approx(1.0), pytest.approx(0.0)]
    assert got["toy"] == pytest.approx(fit_slope([10, 30], [5.0, 14.0]))
    assert got["toy_classification"] == pytest.approx(0.0, abs=1e-12)
    assert got["toy_classification_class_vector_norm"] == pytest.approx(math.log(0.8 / 0.9) / math.log(3))
    assert got["toy_classification_gap"] == pytest.approx(math.log(4e-5 / 1e-3) / math.log(3))


@pytest.fixture(scope="module")
def scaled_result(test_preset_report):
    """The real ``organism scaling`` result of the session's ``reproduce --preset test`` report (its stage
    ``organism-scaling``: two one-head organisms trained at the test preset), read back as saved."""
    from countlens.llm.organisms.scaling import ScalingResult

    out, code = test_preset_report
    assert code == 0
    return ScalingResult.read(out / "organism-scaling")


def test_the_scaling_figure_plots_the_manifold_columns(scaled_result):
    """Panel (e) draws each organism's manifold columns as the result holds them: the distance to the nearest
    variant (named beside its point) and to the toy variant per L, a ring where the shape is below its floor."""
    import dataclasses

    import matplotlib.pyplot as plt

    from countlens.llm.organisms.figures import plot_scaling

    organisms = scaled_result.organisms()
    assert organisms and all(r["manifold_nearest"] is not None for r in organisms)
    # the result as trained, and with its floor verdicts turned over (so the ring is drawn either way)
    flipped = [dict(r, manifold_above_floor=not r["manifold_above_floor"]) if r["kind"] == "organism" else r
               for r in scaled_result.rows]
    for result in (scaled_result, dataclasses.replace(scaled_result, rows=flipped)):
        fig = plot_scaling(result)
        try:
            m = next(ax for ax in fig.axes if ax.get_title() == "count manifold: nearest toy shape")
            lines = {ln.get_label(): ln for ln in m.get_lines()}
            mine = sorted(result.organisms(), key=lambda r: (r["seed"], r["L"]))  # the test preset: one seed
            assert np.array_equal(lines["organism: to its nearest toy variant"].get_xydata(),
                                  [[r["L"], r["manifold_procrustes"]] for r in mine])
            assert np.array_equal(lines[f"organism: to {result.toy_variant}"].get_xydata(),
                                  [[r["L"], r["manifold_procrustes_toy"]] for r in mine])
            assert [t.get_text() for t in m.texts] == [r["manifold_nearest"] for r in mine]
            assert [tuple(t.xy) for t in m.texts] == [(r["L"], r["manifold_procrustes"]) for r in mine]
            below = [[r["L"], r["manifold_procrustes"]] for r in mine if not r["manifold_above_floor"]]
            ring = lines.get("shape below its floor")
            assert (ring is None and not below) or np.array_equal(ring.get_xydata(), below)
        finally:
            plt.close(fig)
