"""Toy vs LLM: the same count-geometry metrics and probe cost on toy representations and an LLM capture.

Each *source* is one location of one data set (a toy variant's boundary representation ``h(n, m)``, or
an LLM capture at a residual location). For each, on the count centroids pooled over seeds:

- ``gap_ratio`` and ``erank_ratio``: Figure 5's high/low window ratios;
- ``arc_angle``: the angle (rad, seen from the origin) between the centroids of the first and last count
  of the arc span (default 1..100) — Figure 2b's measure of how far apart a norm layer sees the counts;
- ``probe_norm``: the smallest native ℓ2 norm on the ridge path (one ridge fit per α, in the data's own
  coordinates, intercept free) whose rounded accuracy on a held-out IID split is 1 — the read-out norm
  needed for rounding-exact counting. ``None`` when no α reaches it; ``probe_best_acc`` and
  ``probe_norm_at_best`` then say how close the path came. The ridge path is an upper bound on the
  smallest norm any exact linear read-out needs (ridge trades squared error, not worst error, for norm):
  a construction's minimax read-out can count exactly where every least-squares probe misses a few pairs;
- ``readout_norm`` (toy rows): the ℓ2 norm of the parameter file's own read-out ``w``, which the
  full-domain check certifies (``readout_passed``) — the norm the toy actually pays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from countlens.analysis.geometry import (
    ARC_COUNTS,
    HIGH_WINDOW,
    LOW_WINDOW,
    PCA_COUNTS,
    arc_angle,
    erank_ratio,
    gap_ratio,
    pca_2d,
    window_rows,
)
from countlens.analysis.layerwise import CentroidSet, single_threaded_blas
from countlens.errors import UsageError

# Relative ridge coefficients: α / (mean eigenvalue of XcᵀXc). Exact toy read-outs need very weak
# regularisation (their norms grow with L), so the grid reaches far down; 0 is the minimum-norm fit.
REL_ALPHAS = np.concatenate([[0.0], np.logspace(-14, 2, 65)])
TEST_FRACTION = 0.2


def probe_norm_needed(X: np.ndarray, y: np.ndarray, seed: int = 0, rel_alphas: np.ndarray = REL_ALPHAS,
                      test_fraction: float = TEST_FRACTION) -> dict[str, Any]:
    """Smallest native probe norm reaching rounded-exact accuracy on a held-out split.

    X: (rows, d) representations; y: (rows,) counts. Returns ``probe_norm`` (None if never exact),
    ``probe_best_acc``, ``probe_norm_at_best``, ``n_train``, ``n_test``.
    """
    from countlens.probes.metrics import rounded_accuracy
    from countlens.probes.ridge import ridge_path

    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n_test = max(1, int(round(test_fraction * len(y))))
    if len(y) - n_test < 2:
        raise UsageError(f"a probe needs at least 3 rows, the data set has {len(y)}")
    order = np.random.default_rng(seed).permutation(len(y))
    test, train = order[:n_test], order[n_test:]
    Xc = X[train] - X[train].mean(axis=0)
    mean_eig = float(np.sum(Xc**2)) / X.shape[1]
    alphas = np.asarray(rel_alphas) * (mean_eig if mean_eig > 0 else 1.0)
    coefs, intercepts = ridge_path(X[train], y[train], alphas)  # (A, d), (A,)
    pred = X[test] @ coefs.T + intercepts  # (n_test, A)
    accs = np.array([rounded_accuracy(y[test], pred[:, a]) for a in range(len(alphas))])
    norms = np.linalg.norm(coefs, axis=1)
    exact = accs == 1.0
    best = int(np.argmax(accs))  # the first (weakest-regularised) α reaching the best accuracy
    return {
        "probe_norm": float(norms[exact].min()) if exact.any() else None,
        "probe_best_acc": float(accs[best]),
        "probe_norm_at_best": float(norms[best]),
        "n_train": int(len(train)), "n_test": int(n_test),
    }


def source_metrics(cs: CentroidSet, location: int, X: np.ndarray, y: np.ndarray, low=LOW_WINDOW,
                   high=HIGH_WINDOW, arc_counts=ARC_COUNTS, pca_counts=PCA_COUNTS, seed: int = 0) -> dict[str, Any]:
    """All comparison metrics of one source: pooled centroids ``cs`` at ``location`` and the row-level
    representations ``X`` (rows, d) with counts ``y`` (rows,) for the probe."""
    with single_threaded_blas():
        return _source_metrics(cs, location, X, y, low, high, arc_counts, pca_counts, seed)


def _source_metrics(cs, location, X, y, low, high, arc_counts, pca_counts, seed) -> dict[str, Any]:
    C = cs.pooled[:, location]  # (k, d)
    rows = window_rows(cs.counts, pca_counts, "PCA count range")
    coords, explained = pca_2d(C[rows])
    return {
        "gap_ratio": gap_ratio(cs.counts, C, low, high),
        "erank_ratio": erank_ratio(cs.counts, C, low, high),
        "arc_angle": arc_angle(cs.counts, C, arc_counts),
        **probe_norm_needed(X, y, seed=seed),
        "pca": {"counts": cs.counts[rows].tolist(), "coords": coords.tolist(),
                "explained_variance_ratio": explained.tolist()},
    }


@dataclass
class CompareResult:
    """One row per source (toy variants first, then LLM locations) with the four metrics and its PCA."""

    rows: list[dict[str, Any]]
    low_window: list[int]
    high_window: list[int]
    arc_counts: list[int]
    pca_counts: list[int]
    probe: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompareResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def closest_toy(self) -> dict[str, str]:
        """For each LLM row, the toy row nearest in (log gap ratio, log erank ratio) — which variant the
        model's geometry resembles."""
        toys = [r for r in self.rows if r["kind"] == "toy"]
        out = {}
        for r in self.rows:
            if r["kind"] != "llm" or not toys:
                continue
            best = min(toys, key=lambda t: _log_distance(r, t))
            if np.isfinite(_log_distance(r, best)):  # no finite ratios (e.g. the embeddings): no match
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


def table_rows(result: CompareResult) -> list[list[Any]]:
    """The comparison table: label, kind, gap ratio, erank ratio, arc angle, probe norm (or best accuracy)."""
    out = []
    for r in result.rows:
        probe = r["probe_norm"] if r["probe_norm"] is not None else f"not reached (best acc {r['probe_best_acc']:.3g})"
        out.append([r["label"], r["kind"], r["gap_ratio"], r["erank_ratio"], r["arc_angle"], probe])
    return out


__all__ = ["REL_ALPHAS", "probe_norm_needed", "source_metrics", "CompareResult", "table_rows"]
