"""Toy vs LLM: the same count-geometry metrics and probe cost on toy representations and an LLM capture
(docs/definitions.md §2).

Each *source* is one location of one data set (a toy variant's boundary representation ``h(n, m)``, or
an LLM capture at a residual location). Its centroids pool every row with the same count: over seeds,
and over distractor counts ``m`` — for a toy every admissible pair ``n + m <= L`` is one row, so a toy
centroid is the mean of ``h(n, m)`` over m, not the letter-free ``h(n, 0)`` of Figure 1. For each source:

- ``gap_ratio`` and ``erank_ratio``: the high/low window ratios of the **pooled** centroids (the
  ``gap_ratio_pooled`` of ``geometry.json``, not Figure 5's seed mean; a toy has one seed);
- ``arc_angle``: the *endpoint angle* (:func:`countlens.analysis.geometry.endpoint_angle`, rad, seen from
  the origin) between the centroids of the first and last count of the span ``arc_counts`` (default the
  paper's 1..100, within the counts every source holds) — not Figure 2b's arc angle;
- the probe, by the protocol of Figure 7 (:func:`countlens.probes.split_rows` 0.6 / 0.2 / 0.2, then
  :class:`countlens.probes.RidgePathProbe` selecting on validation), on the raw coordinates (the norm is
  the native one) over a grid of relative ridge coefficients (:data:`REL_ALPHAS`):
  ``probe_best_acc`` — test rounded accuracy of the validation-selected probe, ``probe_norm_at_best`` —
  its native ℓ2 norm; ``probe_norm`` — the smallest native norm on the path whose *validation* rounded
  accuracy is 1 (``None``: no α reached it), ``probe_norm_test_acc`` — that probe's test accuracy;
  ``n_train``, ``n_val``, ``n_test``. The ridge path is an upper bound on the smallest norm any exact
  linear read-out needs (ridge trades squared error, not worst error, for norm);
- ``readout_norm`` (toy rows): the ℓ2 norm of the parameter file's own read-out ``w``, which the
  full-domain check certifies (``readout_passed``) — the norm the toy actually pays;
- ``floors``: the noise floor (:mod:`countlens.analysis.noise`) of ``gap_ratio``, ``erank_ratio`` and the
  PCA's ``count_order``: the same quantity of the centroids with the count labels shuffled among the rows
  (within each seed), and of two split halves of the rows of every count (none where a count has one row).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from countlens.analysis.geometry import (
    ARC_COUNTS,
    HIGH_WINDOW,
    LOW_WINDOW,
    PCA_COUNTS,
    count_order,
    endpoint_angle,
    erank_ratio,
    gap_ratio,
    pca_2d,
    window_rows,
)
from countlens.analysis.layerwise import CentroidSet
from countlens.analysis.noise import (
    N_SHUFFLES,
    NOISE_SEED,
    NoiseFloor,
    shuffled_centroids,
    split_half_centroids,
)
from countlens.core.errors import UsageError
from countlens.core.threads import blas_threads
from countlens.probes import DEFAULT_FRACTIONS, RidgePathProbe, native_norm, rounded_accuracy, split_rows

# Relative ridge coefficients (countlens.probes.penalty_unit of the raw centred design). Exact toy read-outs
# need very weak regularisation (their norms grow with L), so the grid reaches far down; 0 is the
# minimum-norm fit.
REL_ALPHAS = np.concatenate([[0.0], np.logspace(-14, 2, 65)])
SPLIT_SEED = 0


def probe_norm_needed(X: np.ndarray, y: np.ndarray, seed: int = SPLIT_SEED, rel_alphas: np.ndarray = REL_ALPHAS,
                      fractions=DEFAULT_FRACTIONS) -> dict[str, Any]:
    """The probe cost of one source (see the module docstring). X: (rows, d) representations; y: (rows,)
    counts. Returns ``probe_norm`` (None if no α is exact on validation), ``probe_norm_test_acc``,
    ``probe_best_acc``, ``probe_norm_at_best``, ``n_train``, ``n_val``, ``n_test``."""
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    train, val, test = split_rows(len(y), seed, fractions)
    probe = RidgePathProbe(rel_alphas, standardize=False, relative=True, refit=False).fit(
        X[train], y[train], X[val], y[val])
    norms = native_norm(probe.coef_path_)  # (A,)
    exact = np.flatnonzero(probe.val_rounded_acc_ == 1.0)
    cheapest = int(exact[np.argmin(norms[exact])]) if exact.size else None
    test_acc = (rounded_accuracy(y[test], X[test] @ probe.coef_path_[cheapest] + probe.intercept_path_[cheapest])
                if cheapest is not None else None)
    return {
        "probe_norm": float(norms[cheapest]) if cheapest is not None else None,
        "probe_norm_test_acc": test_acc,
        "probe_best_acc": rounded_accuracy(y[test], probe.predict(X[test])),
        "probe_norm_at_best": float(native_norm(probe.coef_)),
        "n_train": int(len(train)), "n_val": int(len(val)), "n_test": int(len(test)),
    }


def source_metrics(cs: CentroidSet, location: int, X: np.ndarray, y: np.ndarray, low=LOW_WINDOW,
                   high=HIGH_WINDOW, arc_counts=ARC_COUNTS, pca_counts=PCA_COUNTS,
                   seed: int = SPLIT_SEED, groups: np.ndarray | None = None) -> dict[str, Any]:
    """All comparison metrics of one source: pooled centroids ``cs`` at ``location`` and the row-level
    representations ``X`` (rows, d) with counts ``y`` (rows,) for the probe and the noise floors (labels
    shuffled within ``groups`` (rows,), e.g. the seeds). A window ``cs`` cannot fill is a
    :class:`~countlens.core.errors.ConfigError` about its field."""
    with blas_threads(1):  # small matrices: BLAS threads only add overhead (BENCHMARKS.md)
        C = cs.pooled[:, location]  # (k, d)
        rows = window_rows(cs.counts, pca_counts, "pca_counts")
        for window, field in ((low, "low"), (high, "high"), (arc_counts, "arc_counts")):
            window_rows(cs.counts, window, field)  # named here; the metrics below take them as checked
        coords, explained = pca_2d(C[rows])
        return {
            "gap_ratio": gap_ratio(cs.counts, C, low, high),
            "erank_ratio": erank_ratio(cs.counts, C, low, high),
            "arc_angle": endpoint_angle(cs.counts, C, arc_counts),
            **probe_norm_needed(X, y, seed=seed),
            "pca": {"counts": cs.counts[rows].tolist(), "coords": coords.tolist(),
                    "explained_variance_ratio": explained.tolist(), "count_order": count_order(C[rows],
                                                                                         cs.counts[rows])},
            "floors": source_floors(cs.counts, C, X, y, low, high, pca_counts, groups),
        }


def source_floors(counts: np.ndarray, C: np.ndarray, X: np.ndarray, y: np.ndarray, low=LOW_WINDOW,
                  high=HIGH_WINDOW, pca_counts=PCA_COUNTS, groups: np.ndarray | None = None,
                  n_shuffles: int = N_SHUFFLES, noise_seed: int = NOISE_SEED) -> dict[str, dict[str, Any]]:
    """Noise floors of one source's ``gap_ratio``, ``erank_ratio`` and PCA ``count_order``: the values of its
    centroids ``C`` (k, d) at ``counts`` (k,) beside those of the centroids of its rows ``X`` (rows, d) with
    the labels ``y`` (rows,) shuffled (within ``groups``) and of two split halves
    (:meth:`countlens.analysis.noise.NoiseFloor.to_dict` each; halves nan where a count has one row)."""
    rows = window_rows(counts, pca_counts, "pca_counts")
    metrics = {"gap_ratio": lambda Cs, c: gap_ratio(c, Cs, low, high),
               "erank_ratio": lambda Cs, c: erank_ratio(c, Cs, low, high),
               "count_order": lambda Cs, c: count_order(Cs[rows], c[rows])}
    if not np.array_equal(np.unique(np.asarray(y)), counts):  # the shuffles' centroids are at the rows' counts
        raise UsageError("the rows' counts differ from the centroids'; pass the rows the centroids were made of")
    _, shuffled = shuffled_centroids(X, y, n_shuffles, noise_seed, groups)  # (R, k, d)
    try:
        halves = split_half_centroids(X, y, noise_seed, groups)[1:]
    except UsageError:  # a count with one row: no halves
        halves = None
    out = {}
    for key, f in metrics.items():
        floor = NoiseFloor(float(f(C, counts)), np.array([f(Cs, counts) for Cs in shuffled]))
        if halves is not None:
            floor.half_a, floor.half_b = float(f(halves[0], counts)), float(f(halves[1], counts))
        out[key] = floor.to_dict()
    return out


def closest_toy(rows: list[dict[str, Any]]) -> dict[str, str]:
    """For each LLM row, the label of the toy row nearest in (log gap ratio, log erank ratio) — which
    variant the model's geometry resembles; rows without finite positive ratios get no match."""
    toys = [r for r in rows if r["kind"] == "toy"]
    out = {}
    for r in rows:
        if r["kind"] != "llm" or not toys:
            continue
        best = min(toys, key=lambda t: _log_distance(r, t))
        if np.isfinite(_log_distance(r, best)):
            out[r["label"]] = best["label"]
    return out


def _log_distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    total = 0.0
    for key in ("gap_ratio", "erank_ratio"):
        va, vb = a.get(key), b.get(key)
        if va is None or vb is None:
            return float("inf")
        va, vb = float(va), float(vb)  # results read back from JSON hold "nan" as a string
        if not (np.isfinite(va) and np.isfinite(vb)) or va <= 0 or vb <= 0:
            return float("inf")
        total += (np.log(va) - np.log(vb)) ** 2
    return float(np.sqrt(total))


__all__ = ["REL_ALPHAS", "SPLIT_SEED", "probe_norm_needed", "source_metrics", "source_floors", "closest_toy"]
