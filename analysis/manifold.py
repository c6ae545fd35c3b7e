"""The count manifold: the shape of the centroid curve ``c(n)`` at one location, and how near it lies to each
toy variant's boundary curve (docs/definitions.md §2.17, "The count manifold").

Pure functions of arrays (the toy curves aside: :func:`toy_curves` builds the toy's checked constructions).
A *curve* is ``counts`` (k,) — sorted distinct counts — and ``C`` (k, d): row ``j`` the centroid of count
``counts[j]``. ``C0 = C - mean(C)``; ``σ`` its singular values.

- ``dims95`` — the smallest r whose top-r ``σ²`` hold ≥ 95 % of ``Σσ²`` (0 for a curve that does not move);
- ``participation_ratio`` — ``(Σσ²)² / Σσ⁴``;
- steps ``s_j = ‖c_{j+1} − c_j‖`` (k−1,); ``step_cv`` = population std / mean of the steps; ``step_slope`` =
  least-squares slope of ``log s_j`` on ``log counts[j]`` over the steps whose lower count is ≥ 1 (a step
  of 0 makes it nan);
- turning angles ``θ_j`` (k−2,), degrees, between successive steps ``Δ_j, Δ_{j+1}`` (nan where a step is 0):
  ``turn_mean_deg``, ``turn_std_deg`` (population std);
- ``out_of_plane`` — the fraction of ``Σσ²`` outside the top two principal directions;
- shape match — :func:`procrustes_distance` of two curves at the same counts, each centred and scaled to
  unit Frobenius norm, zero-padded to one width, ``min_Q ‖A − B Q‖_F`` over orthogonal ``Q`` (reflections
  allowed, no further scale): 0 for congruent shapes, at most 2.

Independent noise on every centroid turns successive steps by 120° on average (``Δ_j · Δ_{j+1} = −‖ε‖²``
against ``‖Δ‖² = 2‖ε‖²``), so a turning angle near 120° is noise: the experiment
(:mod:`countlens.analysis.manifold_experiment`) reports each metric beside its shuffled-label floor
(:mod:`countlens.analysis.noise`) and also on the curve of count windows (:func:`window_curve`), whose means
average the noise down while the steps between them grow.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np

from countlens.core.errors import UsageError

VARIANCE_FRACTION = 0.95
METRICS = ("dims95", "participation_ratio", "step_cv", "step_slope", "turn_mean_deg", "turn_std_deg",
           "out_of_plane")
TIE = 1e-9  # Procrustes distances closer than this are one shape (the linear variants are the same ray)


def _curve(C: np.ndarray) -> np.ndarray:
    C = np.asarray(C, dtype=np.float64)
    if C.ndim != 2:
        raise UsageError(f"a centroid curve is a 2-D array (counts, d), got shape {C.shape}")
    return C


def squared_singular_values(C: np.ndarray) -> np.ndarray:
    """``σ²`` of the centred curve ``C0`` (k, d), descending, (min(k, d),): the eigenvalues of the smaller
    Gram matrix (clipped at 0)."""
    C0 = _curve(C) - _curve(C).mean(axis=0)
    gram = C0 @ C0.T if C0.shape[0] <= C0.shape[1] else C0.T @ C0
    return np.clip(np.linalg.eigvalsh(gram)[::-1], 0.0, None)


def dims_for(C: np.ndarray, fraction: float = VARIANCE_FRACTION) -> int:
    """The smallest r whose top-r ``σ²`` of ``C0`` hold at least ``fraction`` of their sum (0: no spread)."""
    s2 = squared_singular_values(C)
    total = float(s2.sum())
    if total <= 0:
        return 0
    share = np.cumsum(s2) / total
    return int(np.searchsorted(share, fraction - 1e-12) + 1)  # 1e-12: a ray's one σ² holds "1 - ulp"


def participation_ratio(C: np.ndarray) -> float:
    """``(Σσ²)² / Σσ⁴`` of ``C0``: 1 on a line, 2 on a full circle sampled evenly; nan with no spread."""
    s2 = squared_singular_values(C)
    sum4 = float(np.sum(s2 ** 2))
    return float(np.sum(s2)) ** 2 / sum4 if sum4 > 0 else float("nan")


def out_of_plane(C: np.ndarray) -> float:
    """The fraction of ``‖C0‖²`` outside its best-fitting 2-plane (through the mean): ``1 − (σ₁² + σ₂²) / Σσ²``
    (nan with no spread)."""
    s2 = squared_singular_values(C)
    total = float(s2.sum())
    return float(max(0.0, 1.0 - float(s2[:2].sum()) / total)) if total > 0 else float("nan")


def curve_steps(C: np.ndarray) -> np.ndarray:
    """``‖c_{j+1} − c_j‖`` between successive rows of ``C`` (k, d): (k−1,)."""
    return np.linalg.norm(np.diff(_curve(C), axis=0), axis=1)


def step_cv(C: np.ndarray) -> float:
    """Population std over mean of the steps (0: equal steps; nan when every step is 0)."""
    s = curve_steps(C)
    mean = float(s.mean()) if s.size else 0.0
    return float(s.std()) / mean if mean > 0 else float("nan")


def step_slope(counts: np.ndarray, C: np.ndarray) -> float:
    """Least-squares slope of ``log s_j`` on ``log counts[j]`` over the steps whose lower count is ≥ 1 (0 for
    equal steps, −1 for ``c ∝ log n``); nan with fewer than two such steps or a step of 0."""
    counts = np.asarray(counts, dtype=np.float64)
    s = curve_steps(C)
    keep = counts[:-1] >= 1
    if keep.sum() < 2 or np.any(s[keep] <= 0):
        return float("nan")
    x, y = np.log(counts[:-1][keep]), np.log(s[keep])
    x = x - x.mean()
    return float(np.dot(x, y - y.mean()) / np.dot(x, x))


def turning_angles(C: np.ndarray) -> np.ndarray:
    """Angles (degrees) between successive steps, (k−2,); nan where either step is 0. Computed as
    ``2 atan2(‖â − b̂‖, ‖â + b̂‖)`` (Kahan), exact near 0° and 180° where ``arccos`` of the cosine is not."""
    D = np.diff(_curve(C), axis=0)
    norms = np.linalg.norm(D, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        U = D / norms
    a, b = U[:-1], U[1:]
    theta = 2.0 * np.arctan2(np.linalg.norm(a - b, axis=1), np.linalg.norm(a + b, axis=1))
    return np.degrees(np.where((norms[:-1, 0] > 0) & (norms[1:, 0] > 0), theta, np.nan))


def _nan_stat(x: np.ndarray, f) -> float:
    x = x[np.isfinite(x)]
    return float(f(x)) if x.size else float("nan")


def manifold_metrics(counts: np.ndarray, C: np.ndarray) -> dict[str, float]:
    """Every metric of :data:`METRICS` of one curve: ``counts`` (k,), ``C`` (k, d)."""
    theta = turning_angles(C)
    return {"dims95": dims_for(C), "participation_ratio": participation_ratio(C), "step_cv": step_cv(C),
            "step_slope": step_slope(counts, C), "turn_mean_deg": _nan_stat(theta, np.mean),
            "turn_std_deg": _nan_stat(theta, np.std), "out_of_plane": out_of_plane(C)}


def window_curve(counts: np.ndarray, C: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The curve of count windows: the mean count and mean centroid of each run of ``width`` successive rows
    (a trailing run shorter than ``width`` is dropped, so every window averages as many centroids):
    ``(k // width,)`` and ``(k // width, d)``. ``width`` 1 is the curve itself."""
    counts, C = np.asarray(counts, dtype=np.float64), _curve(C)
    k = (len(counts) // width) * width
    return (counts[:k].reshape(-1, width).mean(axis=1),
            C[:k].reshape(-1, width, C.shape[1]).mean(axis=1))


def principal_coordinates(C: np.ndarray) -> np.ndarray:
    """The centred curve scaled to unit Frobenius norm, in its own principal axes: ``U Σ`` of
    ``C0 / ‖C0‖_F`` (k, r) with r = min(k, d); an orthogonal change of coordinates of the normalised curve
    (columns in decreasing variance; each axis signed so the last row is ≥ 0). Zero for a curve without
    spread."""
    C0 = _curve(C) - _curve(C).mean(axis=0)
    norm = np.linalg.norm(C0)
    if norm == 0:
        return np.zeros((C0.shape[0], min(C0.shape)))
    U, S, _ = np.linalg.svd(C0 / norm, full_matrices=False)
    X = U * S
    return X * np.where(X[-1] < 0, -1.0, 1.0)


def procrustes_align(A: np.ndarray, B: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Orthogonal Procrustes of curve ``B`` onto curve ``A`` (same rows, any widths).

    Both are centred, scaled to unit Frobenius norm and written in their principal coordinates
    (:func:`principal_coordinates`: an orthogonal map each, which the free ``Q`` absorbs), zero-padded to one
    width ``w``. Returns the distance ``min_Q ‖X − Y Q‖_F``, ``X`` (k, w) — ``A`` in its principal
    coordinates — and ``Y Q`` (k, w), ``B`` aligned onto it (what a figure overlays); the distance is nan when
    either curve does not move (all its rows equal). Computing the residual
    (not ``sqrt(2 − 2 Σσ)``) keeps congruent shapes at round-off, not at 1e-8."""
    X, Y = principal_coordinates(A), principal_coordinates(B)
    if X.shape[0] != Y.shape[0]:
        raise UsageError(f"Procrustes needs two curves at the same counts, got {X.shape[0]} and {Y.shape[0]} rows")
    w = max(X.shape[1], Y.shape[1])
    if not (np.any(X) and np.any(Y)):  # a curve that does not move has no shape
        return float("nan"), np.pad(X, ((0, 0), (0, w - X.shape[1]))), np.pad(Y, ((0, 0), (0, w - Y.shape[1])))
    X = np.pad(X, ((0, 0), (0, w - X.shape[1])))
    Y = np.pad(Y, ((0, 0), (0, w - Y.shape[1])))
    U, _, Vt = np.linalg.svd(Y.T @ X)
    YQ = Y @ (U @ Vt)
    return float(np.linalg.norm(X - YQ)), X, YQ


def procrustes_distance(A: np.ndarray, B: np.ndarray) -> float:
    """The shape distance of curves ``A`` and ``B`` (k, dA) and (k, dB): see :func:`procrustes_align`."""
    return procrustes_align(A, B)[0]


def shape_match(C: np.ndarray, references: Mapping[str, np.ndarray]) -> dict[str, float]:
    """:func:`procrustes_distance` of curve ``C`` to each reference curve (same counts), by name."""
    return {name: procrustes_distance(C, R) for name, R in references.items()}


def nearest(distances: Mapping[str, float], tie: float = TIE) -> tuple[str | None, list[str]]:
    """The name with the smallest finite distance (the first of a tie, in the mapping's order) and every name
    within ``tie`` of it (shapes the distance cannot tell apart); ``(None, [])`` when none is finite."""
    finite = {k: v for k, v in distances.items() if np.isfinite(v)}
    if not finite:
        return None, []
    best = min(finite.values())
    ties = [k for k, v in finite.items() if v <= best + tie]
    return ties[0], ties


# ------------------------------------------------------------------------------------------ the toy's curves


@functools.lru_cache(maxsize=64)
def _construction(variant: str, L: int, d: int):
    """The checked construction of ``variant`` at ``(L, d)``, or at ``L_cap(d)`` for bare pre-LN past its cap
    (as Figure 1 draws it): (construction, the L it was built for)."""
    from countlens.toy import best_construction, l_cap

    try:
        return best_construction(variant, L, d), L
    except ValueError:  # softmax-preln-bare beyond the L its construction reaches
        cap = l_cap(d).l_cap
        return best_construction(variant, cap, d), cap


def toy_curves(counts: Sequence[int], variants: Sequence[str], d: int) -> tuple[dict[str, np.ndarray],
                                                                                dict[str, int]]:
    """Each variant's letter-free boundary curve ``h(n, 0)`` (Figure 1's) at ``counts``: its checked
    construction (:func:`countlens.toy.best_construction`) for ``L = max(counts)`` at width ``d``, evaluated
    at every count. Returns the curves ((k, d) each) and the ``L`` each was built for (bare pre-LN past its
    ``L_cap(d)``: built for ``L_cap`` and evaluated beyond, where it no longer counts exactly)."""
    import torch

    from countlens.toy import boundary_representation

    counts = [int(c) for c in counts]
    L = max(1, max(counts))
    n = torch.tensor(counts, dtype=torch.float64)
    curves, built = {}, {}
    for variant in variants:
        c, built[variant] = _construction(variant, L, int(d))
        with torch.no_grad():
            curves[variant] = boundary_representation(c.cfg, c.params, n, torch.zeros_like(n)).numpy()
    return curves, built


__all__ = ["VARIANCE_FRACTION", "METRICS", "TIE", "squared_singular_values", "dims_for", "participation_ratio",
           "out_of_plane", "curve_steps", "step_cv", "step_slope", "turning_angles", "manifold_metrics",
           "window_curve", "principal_coordinates", "procrustes_align", "procrustes_distance", "shape_match",
           "nearest", "toy_curves"]
