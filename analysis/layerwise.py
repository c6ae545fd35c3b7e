"""Layerwise geometry of a data set: count centroids per seed and location, Figure 5's ratios and
Figure 6's PCA (docs/definitions.md §2, "Geometry"). Pure functions of arrays, except that
:func:`centroids_from_capture` streams a capture through :meth:`countlens.core.capture.Capture.batches`.

Centroids follow the paper: per seed, the mean boundary vector over every prompt with count ``n`` (all
token pairs, prompt configurations and distractor counts pooled — with the balanced design of
``countlens llm capture``, equal prompts per pair, configuration, seed and count, this equals averaging
the per-pair means first). Two gap (and effective-rank) ratios follow, each named where it is shown:

- ``gap_ratio`` — **seed mean**: the ratio of each seed's centroids, averaged over seeds (range =
  min–max over seeds). Figure 5 draws this one.
- ``gap_ratio_pooled`` — **pooled**: the ratio of the centroids averaged over seeds first. The toy-vs-LLM
  comparison reports this one (a toy has one seed, where the two agree). Figure 6 draws pooled centroids.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from countlens.analysis.geometry import (
    HIGH_WINDOW,
    LOW_WINDOW,
    PCA_COUNTS,
    describe_counts,
    erank_ratio,
    gap_ratio,
    grouped_sums,
    mean_gap,
    pca_2d,
    window_rows,
    window_within,
)
from countlens.core.capture import Capture, open_capture
from countlens.core.errors import ConfigError, UsageError
from countlens.core.locations import default_pca_locations


@dataclass
class CentroidSet:
    """Count centroids of a data set at every location.

    ``counts`` (k,) sorted; ``seeds`` (S,); ``per_seed`` (S, k, n_locations, d) with NaN rows where a seed
    lacks a count; ``pooled`` (k, n_locations, d); ``sizes`` (S, k) prompts per cell.
    """

    locations: list[str]
    counts: np.ndarray
    seeds: np.ndarray
    per_seed: np.ndarray
    pooled: np.ndarray
    sizes: np.ndarray
    meta: dict[str, Any] = field(default_factory=dict)

    def seed_counts(self, s: int) -> np.ndarray:
        """The counts seed index ``s`` has."""
        return self.counts[self.sizes[s] > 0]

    def seed_centroids(self, s: int, location: int) -> np.ndarray:
        """(k_s, d) centroids of seed index ``s`` at one location, for :meth:`seed_counts`."""
        return self.per_seed[s, self.sizes[s] > 0, location]


def centroids_from_arrays(acts: np.ndarray, n: np.ndarray, seed: np.ndarray, locations: list[str]) -> CentroidSet:
    """Centroids from in-memory arrays: ``acts`` (rows, n_locations, d), ``n`` and ``seed`` (rows,)."""
    acc = _Accumulator()
    acc.add(np.asarray(acts), np.asarray(n), np.asarray(seed))
    return acc.result(locations)


def centroids_from_capture(capture: Capture | str | os.PathLike, batch_size: int = 128) -> CentroidSet:
    """Centroids of a capture (a folder or an opened :class:`~countlens.core.capture.Capture`) at each of
    its locations, streamed in batches in the stored dtype (summed in float64), so memory stays
    O(seeds × counts × locations × d) whatever the number of prompts."""
    capture = open_capture(capture)
    acc = _Accumulator()
    for batch in capture.batches(("acts", "n", "seed"), batch_size=batch_size):
        acc.add(batch["acts"], batch["n"], batch["seed"])
    return acc.result(list(capture.meta.locations))


class _Accumulator:
    """Running float64 sums per (seed, count)."""

    def __init__(self) -> None:
        self.sums: dict[tuple[int, int], np.ndarray] = {}
        self.sizes: dict[tuple[int, int], int] = {}

    def add(self, acts: np.ndarray, n: np.ndarray, seed: np.ndarray) -> None:
        acts = np.asarray(acts, dtype=np.float64)  # (rows, n_locations, d)
        if not np.all(np.isfinite(acts)):
            raise UsageError("the activations hold NaN or inf; recapture them with the model in float32 (the "
                             "capture's dtype)")
        keys = np.stack([np.asarray(seed, dtype=np.int64), np.asarray(n, dtype=np.int64)], axis=1)
        uniq, sums, sizes = grouped_sums(acts, keys)
        for j, (s, c) in enumerate(uniq):
            key = (int(s), int(c))
            if key in self.sums:
                self.sums[key] += sums[j]
                self.sizes[key] += int(sizes[j])
            else:
                self.sums[key], self.sizes[key] = sums[j], int(sizes[j])

    def result(self, locations: list[str]) -> CentroidSet:
        if not self.sums:
            raise UsageError("the data set has no rows")
        seeds = np.array(sorted({s for s, _ in self.sums}))
        counts = np.array(sorted({c for _, c in self.sums}))
        if len(counts) < 2:
            raise UsageError(f"the data set has one count only ({describe_counts(counts)}); geometry needs "
                             "several counts — capture with `countlens llm capture --counts 0:100`")
        shape = next(iter(self.sums.values())).shape
        if shape[0] != len(locations):
            raise UsageError(f"activations have {shape[0]} locations but the metadata names {len(locations)}")
        per_seed = np.full((len(seeds), len(counts)) + shape, np.nan)
        sizes = np.zeros((len(seeds), len(counts)), dtype=np.int64)
        s_index = {int(s): i for i, s in enumerate(seeds)}
        c_index = {int(c): i for i, c in enumerate(counts)}
        for (s, c), total in self.sums.items():
            per_seed[s_index[s], c_index[c]] = total / self.sizes[(s, c)]
            sizes[s_index[s], c_index[c]] = self.sizes[(s, c)]
        # Pooled centroid: mean over the seeds that have the count (each seed weighted equally).
        pooled = np.nanmean(per_seed, axis=0)
        return CentroidSet(list(locations), counts, seeds, per_seed, pooled, sizes)


def compute_geometry(cs: CentroidSet, low=LOW_WINDOW, high=HIGH_WINDOW, pca_counts=None,
                     pca_locations: list[int] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Figure 5's ratios at every location (per seed, seed mean and range, pooled) and Figure 6's PCA of
    the pooled centroids over ``pca_counts`` (default: :data:`~countlens.analysis.geometry.PCA_COUNTS` within
    the counts ``cs`` holds) at ``pca_locations`` (default: :func:`countlens.core.locations.default_pca_locations`).

    Returns ``per_location`` (one dict per location) and ``pca`` (one dict per PCA location: counts,
    coords (k, 2), explained-variance ratio (2,)).
    """
    from countlens.core.threads import blas_threads

    with blas_threads(1):  # every matrix is at most (counts x d): threads only add overhead (BENCHMARKS.md)
        return _compute_geometry(cs, low, high, pca_counts, pca_locations)


def _compute_geometry(cs: CentroidSet, low, high, pca_counts, pca_locations):
    pca_counts = window_within(PCA_COUNTS, cs.counts) if pca_counts is None else pca_counts
    low, high, pca_counts = tuple(map(int, low)), tuple(map(int, high)), tuple(map(int, pca_counts))
    for s in range(len(cs.seeds)):  # check every seed has the windows before computing anything
        seed_counts = cs.seed_counts(s)
        for window, name in ((low, "low"), (high, "high")):
            try:
                window_rows(seed_counts, window, name)
            except ConfigError as exc:
                raise ConfigError(exc.field, f"seed {int(cs.seeds[s])}: {exc.template}", exc.fields[1:]) from None
    pca_rows = window_rows(cs.counts, pca_counts, "pca_counts")
    per_location = []
    for li, name in enumerate(cs.locations):
        gaps, ranks = [], []
        for s in range(len(cs.seeds)):
            C = cs.seed_centroids(s, li)
            gaps.append(gap_ratio(cs.seed_counts(s), C, low, high))
            ranks.append(erank_ratio(cs.seed_counts(s), C, low, high))
        pooled = cs.pooled[:, li]
        per_location.append({
            "index": li, "name": name,
            "gap_ratio": float(np.mean(gaps)), "gap_ratio_min": float(np.min(gaps)),
            "gap_ratio_max": float(np.max(gaps)),
            "erank_ratio": float(np.mean(ranks)), "erank_ratio_min": float(np.min(ranks)),
            "erank_ratio_max": float(np.max(ranks)),
            "gap_ratio_per_seed": {str(int(s)): float(g) for s, g in zip(cs.seeds, gaps, strict=True)},
            "erank_ratio_per_seed": {str(int(s)): float(r) for s, r in zip(cs.seeds, ranks, strict=True)},
            "mean_gap_low": mean_gap(cs.counts, pooled, low), "mean_gap_high": mean_gap(cs.counts, pooled, high),
            "gap_ratio_pooled": gap_ratio(cs.counts, pooled, low, high),
            "erank_ratio_pooled": erank_ratio(cs.counts, pooled, low, high),
        })
    if pca_locations is None:
        pca_locations = default_pca_locations(len(cs.locations))
    pca = []
    for li in pca_locations:
        if not 0 <= li < len(cs.locations):
            raise ConfigError("pca_locations", f"{{pca_locations}}: location {li} does not exist; the data set has "
                                               f"locations 0..{len(cs.locations) - 1}")
        coords, explained = pca_2d(cs.pooled[pca_rows, li])
        pca.append({"index": li, "name": cs.locations[li], "counts": cs.counts[pca_rows].tolist(),
                    "coords": coords.tolist(), "explained_variance_ratio": explained.tolist()})
    return per_location, pca


__all__ = ["CentroidSet", "centroids_from_arrays", "centroids_from_capture", "compute_geometry"]
