"""The count manifold per location against the toy's shapes: :class:`ManifoldConfig` →
:func:`run_manifold` → :class:`ManifoldResult` (``manifold.json``, ``manifold.csv``). Numerics in
:mod:`countlens.analysis.manifold`, noise floors in :mod:`countlens.analysis.noise`; definitions in
docs/definitions.md, "Count manifold".

Per location, from the boundary vectors of a capture (every prompt one row):

- the metrics of docs/definitions.md §2.17 on the raw centroids ``c(n)`` (mean over the prompts of count n, for every count
  present, in count order), and the Procrustes distance to each toy variant's letter-free curve ``h(n, 0)``
  at the same counts (its checked construction for ``L`` = the largest count), the nearest named;
- **the noise floor**: every metric again with the count labels shuffled among the prompts of each seed
  (``n_shuffles`` seeded permutations; ``turn_noise_deg`` is the shuffled mean turning angle), and on two
  disjoint halves of the prompts of every count; a metric stands above its floor when it lies outside the
  range of every shuffle (:attr:`countlens.analysis.noise.NoiseFloor.above`). The shape's split-half
  agreement is the Procrustes distance between the two halves' curves (``split_half_distance``), beside the
  same with shuffled labels (``split_half_noise``: shuffle mean); ``shape_above_floor``: below every shuffle;
- **over count windows**: the same metrics, floor and shape match on the curve of window means
  (``window`` successive counts each, :func:`countlens.analysis.manifold.window_curve`), where independent
  noise averages down by ``sqrt(window)`` while the steps grow ``window``-fold.

The figure shows the metrics per location beside their floors, and the curve at ``curve_location`` in its top
three principal components with the nearest toy curve aligned onto it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np

from countlens.analysis.geometry import describe_counts, window_rows
from countlens.analysis.manifold import (
    METRICS,
    manifold_metrics,
    nearest,
    principal_coordinates,
    procrustes_align,
    procrustes_distance,
    shape_match,
    toy_curves,
    window_curve,
)
from countlens.analysis.noise import (
    N_SHUFFLES,
    NOISE_SEED,
    NoiseFloor,
    centroids_of,
    shuffled_labels,
    split_half_centroids,
)
from countlens.core.capture import Capture, open_capture
from countlens.core.errors import ConfigError, about, literal
from countlens.core.fields import AtLeast, Checked, Optional, Text, Window, check_fields
from countlens.core.locations import location_label, resolve_location
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import blas_threads
from countlens.toy import VARIANTS

MANIFOLD_DEFINITIONS = {
    "centroids": "c(n): mean boundary vector over the prompts of count n, every count present, in count order",
    "dims95": "smallest r whose top-r squared singular values of the centred centroids hold >= 95 % of their sum",
    "participation_ratio": "(sum sigma^2)^2 / sum sigma^4 of the centred centroids",
    "step_cv": "std / mean of the steps ||c(n') - c(n)|| between successive counts",
    "step_slope": "least-squares slope of log step on log n (lower count n >= 1)",
    "turn_mean_deg": "mean angle (degrees) between successive steps; independent noise gives 120",
    "out_of_plane": "fraction of the centred centroids' squared norm outside their top-2 principal plane",
    "procrustes": "orthogonal Procrustes distance (reflections allowed; both curves centred, unit Frobenius norm, "
                  "zero-padded) to each toy variant's h(n, 0) at the same counts; 0 = congruent, at most 2",
    "turn_noise_deg": "turn_mean_deg with the count labels shuffled among each seed's prompts (shuffle mean)",
    "above_floor": "the value lies outside the range of every shuffle (p = 1/(n_shuffles + 1))",
    "split_half_distance": "Procrustes distance between the centroid curves of two disjoint halves of each "
                           "count's prompts; split_half_noise: the same with shuffled labels (shuffle mean)",
    "windowed": "the same on the curve of means over `window` successive counts (a short last run dropped)",
}


def _variants(value: Any) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    unknown = [v for v in names if v not in VARIANTS]
    if unknown or not names or len(set(names)) != len(names):
        raise ConfigError("variants", f"{{variants}} must be distinct toy variants out of {literal(', '.join(VARIANTS))}"
                                      f"; got {literal(', '.join(map(str, names)) or 'none')}")
    return names


@dataclass
class ManifoldConfig:
    """The count manifold of a capture against the toy's shapes (see the module docstring)."""

    acts: str
    """activation folder of the capture (countlens llm capture, or a toy export)"""
    variants: tuple[str, ...] = VARIANTS
    """toy variants whose boundary curves h(n, 0) the centroid curve is matched against"""
    toy_d: int = 16
    """width d of the toy constructions whose curves are matched (the Procrustes distance pads widths)"""
    counts: tuple[int, int] | None = None
    """inclusive count range lo:hi of the curve (default: every count the capture holds)"""
    window: int | None = None
    """counts per window of the windowed curve (its means average noise down; 1: the raw curve again; default:
    min(5, k // 6) for the curve's k counts, at least 1)"""
    n_shuffles: int = N_SHUFFLES
    """shuffles of the count labels behind each noise floor"""
    noise_seed: int = NOISE_SEED
    """seed of the label shuffles and of the split into halves"""
    curve_location: str | None = None
    """location whose curve the figure draws, name or index (default: the one whose two halves agree best,
    relative to shuffled labels)"""

    FIELDS: ClassVar[dict] = {"acts": Text("a capture folder"), "variants": Checked(_variants), "toy_d": AtLeast(3),
                              "counts": Optional(Window()), "window": Optional(AtLeast(1)), "n_shuffles": AtLeast(2),
                              "noise_seed": AtLeast(0), "curve_location": Optional(Text("a location"))}

    def __post_init__(self) -> None:
        self.acts = str(self.acts)
        self.variants = _variants(self.variants)
        check_fields(self, self.FIELDS, assign=True)


@dataclass
class ManifoldResult(Result):
    """Per location (``name``, ``index``) the manifold metrics beside their floors and the shape match
    (``per_location``; one CSV row each), the counts, the ``L`` each toy curve was built for, and the figure's
    curve (``curve``: the chosen location's centroids in their top three principal coordinates and the nearest
    toy curve aligned onto them). :data:`MANIFOLD_DEFINITIONS` says what each number is."""

    FILE: ClassVar[str] = "manifold.json"
    COMMAND: ClassVar[str] = "countlens reproduce --stages manifold"

    locations: list[str]
    counts: list[int]
    variants: list[str]
    toy_L: dict[str, int]
    window: int
    per_location: list[dict[str, Any]]
    curve: dict[str, Any] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=lambda: dict(MANIFOLD_DEFINITIONS))
    provenance: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """``manifold.csv``: one row per location."""
        header = ["location", "index", *METRICS, "turn_noise_deg", "nearest_toy",
                  *(f"procrustes_{v}" for v in self.variants), "turn_above_floor", "split_half_distance",
                  "split_half_noise", "shape_above_floor", "turn_mean_deg_windowed", "turn_noise_deg_windowed",
                  "windowed_above_floor", "nearest_toy_windowed"]
        rows = []
        for r in self.per_location:
            w = r["windowed"]
            rows.append([r["name"], r["index"], *(r[m] for m in METRICS), r["turn_noise_deg"],
                         r["nearest_toy"] or "", *(r["procrustes"][v] for v in self.variants),
                         r["turn_above_floor"], r["split_half_distance"], r["split_half_noise"],
                         r["shape_above_floor"], w["turn_mean_deg"], w["turn_noise_deg"], w["turn_above_floor"],
                         w["nearest_toy"] or ""])
        return {"manifold.csv": (header, rows)}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, "manifold.csv")

    def summary(self) -> str:
        """One console line: where the shape stands above its floor and the nearest toy there."""
        above = [r for r in self.per_location if r["shape_above_floor"]]
        where = ", ".join(f"{location_label(r['name'])} ({r['nearest_toy']})" for r in above) or "nowhere"
        return (f"manifold: {len(self.per_location)} locations, counts {describe_counts(self.counts)}; the curve's "
                f"shape stands above its shuffled-label floor at {where}")


def _curve_counts(capture: Capture, window: tuple[int, int] | None) -> tuple[np.ndarray, np.ndarray]:
    """The capture's row counts (P,) and the rows of the curve's counts (a ConfigError about ``counts``)."""
    y = capture.counts().astype(np.int64)
    present = np.unique(y)
    if window is not None:
        window_rows(present, window, "counts")
        keep = (y >= window[0]) & (y <= window[1])
    else:
        keep = np.ones(len(y), dtype=bool)
    if len(np.unique(y[keep])) < 3:
        raise ConfigError("counts", f"a curve needs at least three counts (two steps to turn between); the capture "
                                    f"has counts {describe_counts(present)}: capture more counts or widen {{counts}}")
    return y, np.flatnonzero(keep)


def _curve_row(counts: np.ndarray, C: np.ndarray, shuffled: np.ndarray, halves: tuple | None,
               references: dict[str, np.ndarray]) -> dict[str, Any]:
    """The metrics of one curve ``C`` (k, d) beside their floors (``shuffled`` (S, k, d), ``halves`` two (k, d)
    or None) and its Procrustes distance to each reference curve (k, d_ref)."""
    # each curve's metrics once (a NoiseFloor per metric from them: what evaluate_floor does, metric by metric)
    value, noise = manifold_metrics(counts, C), [manifold_metrics(counts, S) for S in shuffled]
    parts = [manifold_metrics(counts, H) for H in halves] if halves is not None else [{}, {}]
    floors = {m: NoiseFloor(float(value[m]), np.array([float(s[m]) for s in noise]),
                            float(parts[0].get(m, math.nan)), float(parts[1].get(m, math.nan))) for m in METRICS}
    distances = shape_match(C, references)
    best, ties = nearest(distances)
    return {**{m: floors[m].value for m in METRICS}, "dims95": int(value["dims95"]), "turn_noise_deg": floors["turn_mean_deg"].shuffled_mean,
            "turn_above_floor": floors["turn_mean_deg"].above, "floor": {m: f.to_dict() for m, f in floors.items()},
            "procrustes": distances, "nearest_toy": best, "nearest_ties": ties}


def _location_row(X: np.ndarray, y: np.ndarray, groups: np.ndarray, split_groups: np.ndarray | None,
                  n_shuffles: int, seed: int, width: int, toys: dict[str, np.ndarray],
                  toys_windowed: dict[str, np.ndarray]) -> tuple[dict[str, Any], np.ndarray]:
    """One location's row and its centroids (k, d): ``X`` (P, d) boundary vectors, ``y`` (P,) counts,
    ``groups`` (P,) the seeds the labels are shuffled within (``n_shuffles`` shuffles from ``seed``),
    ``split_groups`` those the halves are split within (None: across seeds; no split when some count has a
    single prompt), ``width`` the counts per window."""
    counts, C = centroids_of(X, y)
    shuffles = shuffled_labels(y, n_shuffles, seed, groups)
    shuffled = np.stack([centroids_of(X, lab)[1] for lab in shuffles])  # (S, k, d)
    can_split = split_groups is not None or _splittable(y, None)
    halves = split_half_centroids(X, y, seed, split_groups)[1:] if can_split else None
    row = _curve_row(counts, C, shuffled, halves, toys)

    def windows(curve: np.ndarray) -> np.ndarray:
        return window_curve(counts, curve, width)[1]

    wcounts = window_curve(counts, C, width)[0]
    row["windowed"] = _curve_row(wcounts, windows(C), np.stack([windows(S) for S in shuffled]),
                                 None if halves is None else tuple(windows(H) for H in halves), toys_windowed)
    if halves is not None:  # the shape's split-half agreement, beside the same with shuffled labels
        row["split_half_distance"] = procrustes_distance(*halves)
        noise = np.array([procrustes_distance(*split_half_centroids(X, lab, seed, split_groups)[1:])
                          for lab in shuffles])
        row["split_half_noise"] = float(np.nanmean(noise)) if np.any(np.isfinite(noise)) else math.nan
        row["shape_above_floor"] = bool(np.isfinite(row["split_half_distance"]) and np.all(np.isfinite(noise))
                                        and row["split_half_distance"] < noise.min())
    else:
        row.update(split_half_distance=math.nan, split_half_noise=math.nan, shape_above_floor=False)
    return row, C


def default_window(k: int) -> int:
    """The window width an unset ``window`` takes for a curve of ``k`` counts: ``min(5, k // 6)``, at least 1
    (5 over the paper's 101 counts; at least six windows on a short curve)."""
    return max(1, min(5, k // 6))


def _splittable(y: np.ndarray, groups: np.ndarray | None) -> bool:
    """Whether every count (within each group) has at least two prompts, as a split into halves needs."""
    keys = y if groups is None else np.stack([groups, y], axis=1)
    _, sizes = np.unique(keys, axis=0, return_counts=True)
    return bool(sizes.min() >= 2)


def _curve_panel(name: str, index: int, counts: np.ndarray, C: np.ndarray, variant: str | None,
                 toy: np.ndarray | None) -> dict[str, Any]:
    """The figure's curve: the centroids in their top three principal coordinates (normalised curve) and the
    nearest toy curve aligned onto it by the Procrustes rotation."""
    if toy is None:
        X, YQ = principal_coordinates(C), None
    else:
        _, X, YQ = procrustes_align(C, toy)
    pad = max(0, 3 - X.shape[1])
    coords = np.pad(X, ((0, 0), (0, pad)))[:, :3]
    return {"location": name, "index": index, "counts": counts.tolist(), "coords": coords.tolist(),
            "toy": variant, "toy_coords": None if YQ is None else np.pad(YQ, ((0, 0), (0, pad)))[:, :3].tolist()}


def run_manifold(config: ManifoldConfig) -> ManifoldResult:
    """The manifold metrics, floors and shape match at every location of the capture (module docstring)."""
    with about("acts"):
        capture = open_capture(config.acts).boundary()  # an items capture: its boundary rows
    locations = list(capture.meta.locations)
    if not locations:
        raise ConfigError("acts", f"{{acts}}: {literal(capture.folder)}/meta.json names no locations")
    y_all, rows = _curve_counts(capture, config.counts)
    y = y_all[rows]
    counts = np.unique(y)
    width = default_window(len(counts)) if config.window is None else config.window
    if len(counts) // width < 3:
        raise ConfigError("window", f"{{window:{width}}} leaves {len(counts) // width} window(s) of the "
                                    f"{len(counts)} counts; a curve needs three: choose {{window}} <= "
                                    f"{len(counts) // 3}", also=("counts",))
    chosen = None
    if config.curve_location is not None:
        with about("curve_location"):
            chosen = resolve_location(locations, config.curve_location)
    seeds = (np.asarray(capture.column("seed"), dtype=np.int64)[rows] if "seed" in capture.columns
             else np.zeros(len(rows), dtype=np.int64))
    split_groups = seeds if _splittable(y, seeds) else None
    toys, toy_L = toy_curves(counts, config.variants, config.toy_d)
    toys_windowed = {v: window_curve(counts, T, width)[1] for v, T in toys.items()}
    per_location, centroids = [], []
    with blas_threads(1):  # (counts x d) matrices: threads only add overhead (BENCHMARKS.md)
        for li, name in enumerate(locations):
            X = capture.acts(li)[rows]
            row, C = _location_row(X, y, seeds, split_groups, config.n_shuffles, config.noise_seed, width, toys,
                                   toys_windowed)
            per_location.append({"name": name, "index": li, **row})
            centroids.append(C)
    if chosen is None:
        chosen = _best_location(per_location)
    r = per_location[chosen]
    curve = _curve_panel(r["name"], chosen, counts, centroids[chosen], r["nearest_toy"],
                         toys.get(r["nearest_toy"]) if r["nearest_toy"] else None)
    source = {"acts": config.acts, "model": capture.meta.model_id, "rows": int(len(rows)),
              "seeds": sorted(int(s) for s in set(seeds.tolist())),
              "split_half_within_seeds": split_groups is not None}
    return ManifoldResult(locations=locations, counts=counts.tolist(), variants=list(config.variants), toy_L=toy_L,
                          window=width, per_location=per_location, curve=curve, source=source,
                          provenance=result_provenance(config))


def _best_location(per_location: list[dict[str, Any]]) -> int:
    """The location whose two halves agree best relative to shuffled labels (lowest ``split_half_distance /
    split_half_noise``); the last location where no split was possible."""
    scored = [(r["split_half_distance"] / r["split_half_noise"], r["index"]) for r in per_location
              if np.isfinite(r["split_half_distance"]) and r["split_half_noise"] > 0]
    return min(scored)[1] if scored else per_location[-1]["index"]


declare(Experiment(
    "manifold", "The count manifold against the toy's shapes", ManifoldConfig, run_manifold, ManifoldResult,
    order=115, figure="countlens.analysis.manifold_figures:draw_manifold",
    plot="countlens.analysis.manifold_figures:plot_manifold", view="countlens.analysis.manifold_figures:manifold_view",
    reads={"acts": "capture"},
    presets={"quick": ManifoldConfig, "full": ManifoldConfig, "test": partial(ManifoldConfig, toy_d=4)},
    study="model"))


__all__ = ["MANIFOLD_DEFINITIONS", "ManifoldConfig", "ManifoldResult", "run_manifold", "default_window"]
