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

Each ratio, and Figure 6's count order and turn angle, is shown beside its *noise floor*
(:mod:`countlens.analysis.noise`): the same quantity of the centroids with the count labels shuffled among
the prompts of each seed, and of two disjoint halves of the prompts of every (seed, count) cell. The
replicate centroids are streamed like the centroids (:func:`replicates_from_capture`), only at the counts
and locations a figure needs.
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
    count_order,
    describe_counts,
    erank_ratio,
    gap_ratio,
    grouped_sums,
    mean_gap,
    pca_2d,
    turn_angle,
    window_rows,
    window_within,
)
from countlens.analysis.noise import (
    N_SHUFFLES,
    NOISE_SEED,
    Z_ABOVE,
    NoiseFloor,
    shuffled_labels,
    split_half_labels,
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
                     pca_locations: list[int] | None = None,
                     replicates: list[ReplicateCentroids] | None = None
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Figure 5's ratios at every location (per seed, seed mean and range, pooled) and Figure 6's PCA of
    the pooled centroids over ``pca_counts`` (default: :data:`~countlens.analysis.geometry.PCA_COUNTS` within
    the counts ``cs`` holds) at ``pca_locations`` (default: :func:`countlens.core.locations.default_pca_locations`).

    Returns ``per_location`` (one dict per location) and ``pca`` (one dict per PCA location: counts,
    coords (k, 2), explained-variance ratio (2,), count order and turn angle). With ``replicates`` (the two
    sets :func:`replicates_from_capture` or :func:`replicates_from_arrays` give for :func:`floor_specs` of
    the same windows), each quantity also gets its noise floor under ``floors``
    (:meth:`countlens.analysis.noise.NoiseFloor.to_dict`).
    """
    from countlens.core.threads import blas_threads

    with blas_threads(1):  # every matrix is at most (counts x d): threads only add overhead (BENCHMARKS.md)
        return _compute_geometry(cs, low, high, pca_counts, pca_locations, replicates)


def _compute_geometry(cs: CentroidSet, low, high, pca_counts, pca_locations, replicates=None):
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
        per_location.append(row := {
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
        if replicates is not None:
            row["floors"] = _ratio_floors(row, replicates[0], li, low, high)
    if pca_locations is None:
        pca_locations = default_pca_locations(len(cs.locations))
    pca = []
    for li in pca_locations:
        if not 0 <= li < len(cs.locations):
            raise ConfigError("pca_locations", f"{{pca_locations}}: location {li} does not exist; the data set has "
                                               f"locations 0..{len(cs.locations) - 1}")
        C = cs.pooled[pca_rows, li]
        coords, explained = pca_2d(C)
        counts = cs.counts[pca_rows]
        entry = {"index": li, "name": cs.locations[li], "counts": counts.tolist(), "coords": coords.tolist(),
                 "explained_variance_ratio": explained.tolist(), "count_order": count_order(C, counts),
                 "turn_angle": turn_angle(C)}
        if replicates is not None:
            entry["floors"] = _pca_floors(entry, replicates[1], li, counts)
        pca.append(entry)
    return per_location, pca


# ------------------------------------------------------------------------------------------ noise floors

@dataclass
class ReplicateCentroids:
    """Centroids of the same rows under other count labels (:mod:`countlens.analysis.noise`), at the counts
    ``counts`` (k,) and location indices ``locations`` (n_loc,) only.

    ``shuffled`` (R, S, k, n_loc, d): per seed, with the labels shuffled among the seed's rows (R shuffles);
    ``halves`` (2, S, k, n_loc, d): the two split halves of every (seed, count) cell, or None when a cell
    has fewer than two rows. NaN rows where a seed lacks a count. ``seeds`` (S,) sorted.
    """

    counts: np.ndarray
    locations: list[int]
    seeds: np.ndarray
    shuffled: np.ndarray
    halves: np.ndarray | None
    n_shuffles: int = N_SHUFFLES
    noise_seed: int = NOISE_SEED


def floor_specs(low, high, pca_counts, pca_locations: list[int], n_locations: int
                ) -> list[tuple[np.ndarray, list[int]]]:
    """What the floors of :func:`compute_geometry` need: the windows' counts at every location (Figure 5)
    and the PCA counts at the PCA locations (Figure 6), as ``(counts, location indices)``."""
    window = sorted(set(range(int(low[0]), int(low[1]) + 1)) | set(range(int(high[0]), int(high[1]) + 1)))
    return [(np.array(window), list(range(n_locations))),
            (np.arange(int(pca_counts[0]), int(pca_counts[1]) + 1), [int(li) for li in pca_locations])]


def replicates_from_arrays(acts: np.ndarray, n: np.ndarray, seed: np.ndarray, specs,
                           n_shuffles: int = N_SHUFFLES, noise_seed: int = NOISE_SEED) -> list[ReplicateCentroids]:
    """:class:`ReplicateCentroids` of in-memory ``acts`` (rows, n_locations, d), ``n``, ``seed`` (rows,) for
    each ``(counts, locations)`` of ``specs``."""
    return _replicates([np.asarray(acts)], np.asarray(n), np.asarray(seed), specs, n_shuffles, noise_seed)


def replicates_from_capture(capture: Capture | str | os.PathLike, specs, n_shuffles: int = N_SHUFFLES,
                            noise_seed: int = NOISE_SEED, batch_size: int = 128) -> list[ReplicateCentroids]:
    """:class:`ReplicateCentroids` of a capture, streamed in batches (one pass for every spec)."""
    capture = open_capture(capture)
    n, seed = capture.column("n"), capture.column("seed")
    batches = (b["acts"] for b in capture.batches(("acts",), batch_size=batch_size))
    return _replicates(batches, n, seed, specs, n_shuffles, noise_seed)


def _replicates(batches, n, seed, specs, n_shuffles, noise_seed) -> list[ReplicateCentroids]:
    n, seed = np.asarray(n, dtype=np.int64), np.asarray(seed, dtype=np.int64)
    labels = shuffled_labels(n, n_shuffles, noise_seed, groups=seed)  # (R, rows)
    try:
        half = split_half_labels(n, noise_seed, groups=seed)
    except UsageError:  # one row per (seed, count): no halves to compare
        half = None
    if half is not None:
        labels = np.concatenate([labels, np.where(half == 0, n, -1)[None], np.where(half == 1, n, -1)[None]])
    seeds = np.unique(seed)
    s_index = np.searchsorted(seeds, seed)  # (rows,)
    specs = [(np.asarray(c, dtype=np.int64), list(locs)) for c, locs in specs]
    sums: list[np.ndarray | None] = [None] * len(specs)
    sizes = [np.zeros((len(labels), len(seeds) * len(c)), dtype=np.int64) for c, _ in specs]
    start = 0
    for acts in batches:
        acts = np.asarray(acts, dtype=np.float64)  # (B, n_locations, d)
        rows = slice(start, start + len(acts))
        start += len(acts)
        for i, (counts, locs) in enumerate(specs):
            sub = acts[:, locs]  # (B, n_loc, d)
            if sums[i] is None:
                sums[i] = np.zeros((len(labels), len(seeds) * len(counts)) + sub.shape[1:])
            for r, lab in enumerate(labels[:, rows]):
                ci = np.minimum(np.searchsorted(counts, lab), len(counts) - 1)
                keep = counts[ci] == lab  # rows whose (replicate) label is a needed count
                if not keep.any():
                    continue
                cells, total, size = grouped_sums(sub[keep], s_index[rows][keep] * len(counts) + ci[keep])
                sums[i][r, cells] += total
                sizes[i][r, cells] += size
    out = []
    for (counts, locs), total, size in zip(specs, sums, sizes, strict=True):
        with np.errstate(invalid="ignore", divide="ignore"):
            C = total / size.reshape(size.shape + (1,) * (total.ndim - 2))  # empty cells: nan
        C = C.reshape((len(labels), len(seeds), len(counts)) + total.shape[2:])
        out.append(ReplicateCentroids(counts, locs, seeds, C[:n_shuffles], C[n_shuffles:] if half is not None
                                      else None, n_shuffles, noise_seed))
    return out


def _seed_ratios(Cs: np.ndarray, counts: np.ndarray, low, high) -> dict[str, float]:
    """The four ratios of per-seed centroids ``Cs`` (S, k, d) at ``counts`` (k,): seed means and pooled."""
    gaps = [gap_ratio(counts, C, low, high) for C in Cs]
    ranks = [erank_ratio(counts, C, low, high) for C in Cs]
    pooled = np.nanmean(Cs, axis=0)
    return {"gap_ratio": float(np.mean(gaps)), "erank_ratio": float(np.mean(ranks)),
            "gap_ratio_pooled": gap_ratio(counts, pooled, low, high),
            "erank_ratio_pooled": erank_ratio(counts, pooled, low, high)}


def _ratio_floors(row: dict[str, Any], rep: ReplicateCentroids, li: int, low, high) -> dict[str, dict]:
    j = rep.locations.index(li)
    shuffled = [_seed_ratios(Cr[:, :, j], rep.counts, low, high) for Cr in rep.shuffled]
    halves = [_seed_ratios(Ch[:, :, j], rep.counts, low, high) for Ch in rep.halves] if rep.halves is not None else None
    return {key: _floor(row[key], [v[key] for v in shuffled], halves and [h[key] for h in halves])
            for key in ("gap_ratio", "erank_ratio", "gap_ratio_pooled", "erank_ratio_pooled")}


def _pca_floors(entry: dict[str, Any], rep: ReplicateCentroids, li: int, counts: np.ndarray) -> dict[str, dict]:
    j = rep.locations.index(li)

    def metrics(Cs):  # (S, k, d) per seed: Figure 6 draws the seeds' pooled centroids
        C = np.nanmean(Cs, axis=0)
        return {"count_order": count_order(C, counts), "turn_angle": turn_angle(C)}

    shuffled = [metrics(Cr[:, :, j]) for Cr in rep.shuffled]
    halves = [metrics(Ch[:, :, j]) for Ch in rep.halves] if rep.halves is not None else None
    return {key: _floor(entry[key], [v[key] for v in shuffled], halves and [h[key] for h in halves])
            for key in ("count_order", "turn_angle")}


def _floor(value: float, shuffled: list[float], halves: list[float] | None) -> dict[str, Any]:
    nan = float("nan")
    return NoiseFloor(float(value), np.asarray(shuffled, dtype=np.float64),
                      *(halves if halves is not None else (nan, nan))).to_dict()


def floor_summary(per_location: list[dict[str, Any]], pca: list[dict[str, Any]]) -> dict[str, Any]:
    """For each quantity with a floor: the locations (names) where it stands clear of its floor
    (``|z| >= Z_ABOVE``), how many, and of how many with a finite value."""
    out: dict[str, Any] = {}
    for entries, keys in ((per_location, ("gap_ratio", "erank_ratio", "gap_ratio_pooled", "erank_ratio_pooled")),
                          (pca, ("count_order", "turn_angle"))):
        for key in keys:
            rows = [e for e in entries if "floors" in e and np.isfinite(e["floors"][key]["z"])]
            above = [e["name"] for e in rows if e["floors"][key]["above_floor"]]
            out[key] = {"above": above, "n_above": len(above), "n": len(rows), "z_above": Z_ABOVE}
    return out


__all__ = ["CentroidSet", "centroids_from_arrays", "centroids_from_capture", "compute_geometry", "ReplicateCentroids",
           "floor_specs", "replicates_from_arrays", "replicates_from_capture", "floor_summary"]
