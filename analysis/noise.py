"""The noise floor of a centroid metric: its value with the count labels shuffled among prompts, and its
split-half agreement (docs/definitions.md §2, "Noise floor").

A metric of count centroids (a gap ratio, an effective-rank ratio, a PCA's count order) has a value even
when the representation holds no count at all: centroids that average few prompts carry the prompts' own
variation. Two references say how much of a value is count:

- **shuffled-label floor** — the metric of the centroids computed after permuting the count labels among
  the prompts (within each group, e.g. each seed, so the design stays balanced), over ``n_shuffles``
  seeded permutations. Same prompts, same group sizes, no count: what noise alone gives.
- **split-half agreement** — the metric of the centroids of two disjoint halves of the prompts of every
  count (and group); a value that is count agrees between the halves.

Shapes: ``X`` (P, d) per-prompt boundary vectors, ``y`` (P,) integer counts, ``groups`` (P,) optional
integer strata. Centroids ``C`` (k, d) for the sorted distinct counts ``counts`` (k,); a metric is any
``f(C, counts) -> float``. Pure functions of arrays; the label functions let a caller that streams a large
capture accumulate the shuffled centroids itself (:func:`countlens.analysis.geometry.grouped_sums`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from countlens.analysis.geometry import grouped_sums
from countlens.core.errors import UsageError

N_SHUFFLES = 20  # permutations per floor: the smallest two-sided p a value can reach is 1/21 < 0.05
NOISE_SEED = 0
# A value stands clear of its floor when it lies this many shuffled standard deviations from the shuffled
# mean (either side: a ratio far below noise's is as much count as one far above). Not "outside the range
# of the shuffles": with 20 shuffles pure noise lands outside their range 2/21 of the time.
Z_ABOVE = 3.0

Metric = Callable[[np.ndarray, np.ndarray], float]  # f(C (k, d), counts (k,)) -> float


def _strata(y: np.ndarray, groups: np.ndarray | None) -> list[np.ndarray]:
    """Row indices of each group (one group of every row when ``groups`` is None)."""
    if groups is None:
        return [np.arange(len(y))]
    groups = np.asarray(groups)
    if groups.shape != y.shape:
        raise UsageError(f"groups has shape {groups.shape} but the counts have {y.shape}; pass one group per prompt")
    return [np.flatnonzero(groups == g) for g in np.unique(groups)]


def shuffled_labels(y: np.ndarray, n_shuffles: int = N_SHUFFLES, seed: int = NOISE_SEED,
                    groups: np.ndarray | None = None) -> np.ndarray:
    """``n_shuffles`` seeded permutations of the count labels ``y`` (P,) among the prompts, each within its
    group: (n_shuffles, P). Every shuffle keeps the number of prompts per count (and per group and count)."""
    y = np.asarray(y)
    if n_shuffles < 1:
        raise UsageError(f"n_shuffles must be >= 1, got {n_shuffles}")
    rng = np.random.default_rng(seed)
    out = np.empty((n_shuffles, len(y)), dtype=y.dtype)
    for s in range(n_shuffles):
        out[s] = y
        for rows in _strata(y, groups):
            out[s, rows] = y[rows[rng.permutation(len(rows))]]
    return out


def split_half_labels(y: np.ndarray, seed: int = NOISE_SEED, groups: np.ndarray | None = None) -> np.ndarray:
    """A seeded split of the prompts of every count (within each group) into two disjoint halves of equal
    size: (P,) with 0 (half A), 1 (half B) or -1 (the odd prompt out of a cell, in neither half, so both
    halves average equally many prompts). Every cell needs at least two prompts."""
    y = np.asarray(y)
    rng = np.random.default_rng(seed)
    half = np.full(len(y), -1, dtype=np.int64)
    for rows in _strata(y, groups):
        for c in np.unique(y[rows]):
            cell = rows[y[rows] == c]
            if len(cell) < 2:
                raise UsageError(f"count {int(c)} has {len(cell)} prompt(s) in a group; a split-half needs at "
                                 "least two per count and group: capture more prompts per count")
            cell = cell[rng.permutation(len(cell))]
            m = len(cell) // 2
            half[cell[:m]], half[cell[m:2 * m]] = 0, 1
    return half


def centroids_of(X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean of ``X`` (P, d) per count ``y`` (P,): ``counts`` (k,), centroids (k, d) in float64."""
    counts, sums, sizes = grouped_sums(X, np.asarray(y))
    return counts, sums / sizes[:, None]


def shuffled_centroids(X: np.ndarray, y: np.ndarray, n_shuffles: int = N_SHUFFLES, seed: int = NOISE_SEED,
                       groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Centroids with the count labels shuffled among prompts: ``counts`` (k,), ``C`` (n_shuffles, k, d).

    ``X`` (P, d), ``y`` (P,); shuffle ``s`` uses row ``s`` of :func:`shuffled_labels` (same ``seed``)."""
    X = np.asarray(X)
    labels = shuffled_labels(y, n_shuffles, seed, groups)
    out = [centroids_of(X, lab) for lab in labels]
    return out[0][0], np.stack([c for _, c in out])


def split_half_centroids(X: np.ndarray, y: np.ndarray, seed: int = NOISE_SEED,
                         groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Centroids of two disjoint halves of the prompts of every count (:func:`split_half_labels`):
    ``counts`` (k,), ``A`` (k, d), ``B`` (k, d)."""
    X, y = np.asarray(X), np.asarray(y)
    half = split_half_labels(y, seed, groups)
    counts, A = centroids_of(X[half == 0], y[half == 0])
    _, B = centroids_of(X[half == 1], y[half == 1])
    return counts, A, B


@dataclass
class NoiseFloor:
    """A metric beside its noise floor. ``value``: on the true centroids; ``shuffled`` (n_shuffles,): on the
    shuffled-label centroids; ``half_a``, ``half_b``: on the two split halves (nan when not computed)."""

    value: float
    shuffled: np.ndarray
    half_a: float = float("nan")
    half_b: float = float("nan")

    @property
    def shuffled_mean(self) -> float:
        """Mean of the finite shuffled values (nan when none is finite)."""
        s = np.asarray(self.shuffled, dtype=np.float64)
        s = s[np.isfinite(s)]
        return float(s.mean()) if s.size else float("nan")

    @property
    def shuffled_std(self) -> float:
        """Sample standard deviation (ddof 1) of the finite shuffled values (nan for fewer than two)."""
        s = np.asarray(self.shuffled, dtype=np.float64)
        s = s[np.isfinite(s)]
        return float(s.std(ddof=1)) if s.size > 1 else float("nan")

    @property
    def p_value(self) -> float:
        """Two-sided permutation p: ``(1 + #{|f_s - m| >= |value - m|}) / (n_shuffles + 1)``, ``m`` the
        shuffled mean (nan for a non-finite value)."""
        if not math.isfinite(self.value):
            return float("nan")
        m = self.shuffled_mean
        dev = np.abs(np.asarray(self.shuffled) - m)
        hits = int(np.sum(~(dev < abs(self.value - m))))  # a nan shuffle counts against the value
        return (1 + hits) / (len(self.shuffled) + 1)

    @property
    def z(self) -> float:
        """``(value - shuffled mean) / shuffled std``: how many noise widths the value lies from noise."""
        m, sd = self.shuffled_mean, self.shuffled_std
        if not (math.isfinite(self.value) and math.isfinite(sd)):
            return float("nan")
        if sd == 0:
            return 0.0 if self.value == m else math.copysign(math.inf, self.value - m)
        return (self.value - m) / sd

    @property
    def above(self) -> bool:
        """Whether the value stands clear of its floor: ``|z| >= Z_ABOVE`` (3 shuffled std from the shuffled
        mean, either side)."""
        z = self.z
        return not math.isnan(z) and abs(z) >= Z_ABOVE

    def to_dict(self) -> dict:
        """JSON-ready numbers: value, shuffled mean/std/min/max, p, above, the halves."""
        s = np.asarray(self.shuffled, dtype=np.float64)
        s = s[np.isfinite(s)]
        return {"value": float(self.value), "shuffled_mean": self.shuffled_mean, "shuffled_std": self.shuffled_std,
                "shuffled_min": float(s.min()) if s.size else float("nan"),
                "shuffled_max": float(s.max()) if s.size else float("nan"),
                "n_shuffles": int(len(s)), "z": self.z, "p_value": self.p_value, "above_floor": self.above,
                "half_a": float(self.half_a), "half_b": float(self.half_b)}


def evaluate_floor(f: Metric, counts: np.ndarray, C: np.ndarray, shuffled: np.ndarray,
                   halves: tuple[np.ndarray, np.ndarray] | None = None) -> NoiseFloor:
    """``f`` on centroids ``C`` (k, d), on every shuffled set ``shuffled`` (n_shuffles, k, d) and on the
    split halves ``(A, B)`` (each (k, d)), all for the same ``counts`` (k,)."""
    value = float(f(C, counts))
    floor = np.array([float(f(Cs, counts)) for Cs in shuffled])
    if halves is None:
        return NoiseFloor(value, floor)
    return NoiseFloor(value, floor, float(f(halves[0], counts)), float(f(halves[1], counts)))


def noise_floor(f: Metric, X: np.ndarray, y: np.ndarray, n_shuffles: int = N_SHUFFLES, seed: int = NOISE_SEED,
                groups: np.ndarray | None = None, split_half: bool = True) -> NoiseFloor:
    """``f`` of the count centroids of ``X`` (P, d) by ``y`` (P,), beside the same ``f`` with the labels
    shuffled (``n_shuffles`` seeded permutations within ``groups``) and on two split halves (skipped when
    ``split_half`` is False, e.g. with one prompt per count)."""
    counts, C = centroids_of(X, y)
    _, shuffled = shuffled_centroids(X, y, n_shuffles, seed, groups)
    halves = split_half_centroids(X, y, seed, groups)[1:] if split_half else None
    return evaluate_floor(f, counts, C, shuffled, halves)


__all__ = ["N_SHUFFLES", "NOISE_SEED", "Z_ABOVE", "Metric", "NoiseFloor", "shuffled_labels", "split_half_labels", "centroids_of",
           "shuffled_centroids", "split_half_centroids", "evaluate_floor", "noise_floor"]
