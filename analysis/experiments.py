"""Analysis experiments, one config, run function and result each: :class:`GeometryConfig` →
:func:`run_geometry` → :class:`GeometryResult` (Figures 5 and 6) and :class:`CompareConfig` →
:func:`run_compare` → :class:`CompareResult` (toy vs LLM). Definitions: docs/definitions.md §2.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from countlens.analysis.compare import REL_ALPHAS, SPLIT_SEED, closest_toy, source_metrics
from countlens.analysis.geometry import ARC_COUNTS, HIGH_WINDOW, LOW_WINDOW, PCA_COUNTS
from countlens.analysis.layerwise import centroids_from_capture, compute_geometry
from countlens.core.errors import UsageError
from countlens.core.io import provenance, read_json, write_csv_atomic, write_json_atomic
from countlens.core.locations import default_pca_locations, location_label, resolve_locations
from countlens.core.store import acts_array, capture_meta, column, load_capture
from countlens.probes.splits import DEFAULT_FRACTIONS

# What each reported ratio is, stored beside the numbers so every page that shows one can name it.
GEOMETRY_DEFINITIONS = {
    "gap_ratio": "seed mean: mean adjacent-centroid gap in the high window over that in the low window, of "
                 "each seed's centroids, averaged over seeds (Figure 5; _min/_max = range over seeds)",
    "gap_ratio_pooled": "pooled: the same ratio of the centroids averaged over seeds first (as in the "
                        "toy-vs-LLM comparison)",
    "erank_ratio": "seed mean: effective rank (Roy & Vetterli) of the high window's centroids over the low "
                   "window's, per seed, averaged over seeds (Figure 5)",
    "erank_ratio_pooled": "pooled: the same ratio of the centroids averaged over seeds first",
    "pca": "PCA of the centroids averaged over seeds (Figure 6)",
}
COMPARE_DEFINITIONS = {
    "gap_ratio": "pooled: gap ratio of the centroids pooled over seeds and distractor counts (geometry.json's "
                 "gap_ratio_pooled, not Figure 5's seed mean)",
    "erank_ratio": "pooled: effective-rank ratio of the same centroids",
    "arc_angle": "endpoint angle: radians, seen from the origin, between the centroids of the first and last "
                 "count of arc_counts (not Figure 2b's arc angle)",
    "probe_best_acc": "test rounded accuracy of the ridge probe whose alpha was selected on validation",
    "probe_norm": "smallest native l2 norm on the ridge path whose validation rounded accuracy is 1 "
                  "(null: no alpha of the grid reached it); probe_norm_test_acc is its test accuracy",
    "toy_centroids": "a toy's centroid for count n is the mean of h(n, m) over every m with n + m <= L",
}


def _check_window(name: str, window) -> tuple[int, int]:
    lo, hi = (int(v) for v in window)
    if hi <= lo or lo < 0:
        raise UsageError(f"{name} must be lo:hi with 0 <= lo < hi, got {lo}:{hi}")
    return lo, hi


def _load(acts: str | os.PathLike):
    ds = load_capture(acts)
    meta = capture_meta(ds)
    locations = list(meta.get("locations") or [])
    if not locations:
        raise UsageError(f"{acts}/meta.json names no locations")
    return ds, meta, locations


# --------------------------------------------------------------------------------------- Figures 5-6

@dataclass
class GeometryConfig:
    """``countlens geometry``: windows are inclusive count ranges; ``pca_locations`` a location spec
    (``None`` = embeddings, after block 1, the middle block, the last block)."""

    acts: str
    low: tuple[int, int] = LOW_WINDOW
    high: tuple[int, int] = HIGH_WINDOW
    pca_counts: tuple[int, int] = PCA_COUNTS
    pca_locations: str | None = None

    def __post_init__(self) -> None:
        self.acts = str(self.acts)
        self.low, self.high = _check_window("low", self.low), _check_window("high", self.high)
        self.pca_counts = _check_window("pca_counts", self.pca_counts)


@dataclass
class GeometryResult:
    """Per-location gap and effective-rank ratios (seed mean, range, per seed, pooled) and PCA of the
    centroids (``geometry.json``); :data:`GEOMETRY_DEFINITIONS` says which is which."""

    locations: list[str]
    counts: list[int]
    seeds: list[int]
    low_window: list[int]
    high_window: list[int]
    pca_counts: list[int]
    per_location: list[dict[str, Any]]
    pca: list[dict[str, Any]]
    source: dict[str, Any] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=lambda: dict(GEOMETRY_DEFINITIONS))
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GeometryResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def save(self, folder: str | os.PathLike) -> list[Path]:
        """``geometry.json`` (with provenance) and the CSVs behind Figures 5 and 6."""
        folder = Path(folder)
        fig5 = [[r["index"], r["name"], r["gap_ratio"], r["gap_ratio_min"], r["gap_ratio_max"], r["erank_ratio"],
                 r["erank_ratio_min"], r["erank_ratio_max"]] for r in self.per_location]
        fig6 = [[p["index"], p["name"], c, x, y] for p in self.pca
                for c, (x, y) in zip(p["counts"], p["coords"], strict=True)]
        return [write_csv_atomic(folder / "figure5.csv", ["location", "name", "gap_ratio", "gap_ratio_min",
                                                          "gap_ratio_max", "erank_ratio", "erank_ratio_min",
                                                          "erank_ratio_max"], fig5),
                write_csv_atomic(folder / "figure6.csv", ["location", "name", "n", "pc1", "pc2"], fig6),
                write_json_atomic(folder / "geometry.json", self.to_dict())]

    def summary(self) -> str:
        """One console line: sizes, the largest seed-mean gap ratio and where counts do not move the vector."""
        finite = [r for r in self.per_location if math.isfinite(float(r["gap_ratio"]))]
        if finite:
            top = max(finite, key=lambda r: r["gap_ratio"])
            best = (f"largest gap ratio (seed mean) {top['gap_ratio']:.3g} {location_label(top['name'])} "
                    f"({top['name']})")
        else:
            best = "no finite gap ratio"
        flat = [location_label(r["name"]) for r in self.per_location if r["mean_gap_low"] == 0]
        return (f"geometry: {len(self.locations)} locations, {len(self.seeds)} seed(s), counts "
                f"{self.counts[0]}..{self.counts[-1]}; {best}"
                + (f"; counts do not move the representation at {', '.join(flat)} (ratios are nan)" if flat else ""))


def run_geometry(config: GeometryConfig) -> GeometryResult:
    """Centroids of the capture at every location, Figure 5's ratios and Figure 6's PCA."""
    ds, meta, locations = _load(config.acts)
    pca_locations = None if config.pca_locations is None else resolve_locations(locations, config.pca_locations)
    cs = centroids_from_capture(ds, locations)
    per_location, pca = compute_geometry(cs, config.low, config.high, config.pca_counts, pca_locations)
    recorded = {"acts": config.acts, "low": list(config.low), "high": list(config.high),
                "pca_counts": list(config.pca_counts), "pca_locations": pca_locations}
    source = {"acts": config.acts, "model": meta.get("model"), "rows": len(ds),
              "config_names": sorted(set(column(ds, "config").tolist())),
              "pairs": sorted(set(column(ds, "pair").tolist()))}
    return GeometryResult(locations=list(locations), counts=cs.counts.tolist(), seeds=cs.seeds.tolist(),
                          low_window=list(config.low), high_window=list(config.high),
                          pca_counts=list(config.pca_counts), per_location=per_location, pca=pca, source=source,
                          provenance=provenance(recorded))


# ------------------------------------------------------------------------------------------ compare

@dataclass
class CompareConfig:
    """``countlens compare``: ``toy`` — toy parameter JSON files, folders of them, or toy activation
    folders; ``acts`` — the LLM capture; ``locations`` — an LLM location spec (``None`` = Figure 6's four);
    ``toy_L`` — the toy domain ``n + m <= L`` for parameter files."""

    toy: tuple[str, ...]
    acts: str
    locations: str | None = None
    toy_L: int = 100
    arc_counts: tuple[int, int] = ARC_COUNTS
    low: tuple[int, int] = LOW_WINDOW
    high: tuple[int, int] = HIGH_WINDOW
    pca_counts: tuple[int, int] = PCA_COUNTS

    def __post_init__(self) -> None:
        self.toy = tuple(str(t) for t in self.toy)
        self.acts = str(self.acts)
        if not self.toy:
            raise UsageError("toy must name at least one toy source")
        if int(self.toy_L) < 1:
            raise UsageError(f"toy_L must be >= 1, got {self.toy_L}")
        self.low, self.high = _check_window("low", self.low), _check_window("high", self.high)
        self.arc_counts = _check_window("arc_counts", self.arc_counts)
        self.pca_counts = _check_window("pca_counts", self.pca_counts)


@dataclass
class CompareResult:
    """One row per source (toy variants first, then LLM locations) with the metrics and its PCA
    (``compare.json``); :data:`COMPARE_DEFINITIONS` says what each metric is."""

    rows: list[dict[str, Any]]
    low_window: list[int]
    high_window: list[int]
    arc_counts: list[int]
    pca_counts: list[int]
    probe: dict[str, Any] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=lambda: dict(COMPARE_DEFINITIONS))
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "closest_toy": self.closest_toy()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CompareResult:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def closest_toy(self) -> dict[str, str]:
        """For each LLM row, the toy row nearest in (log gap ratio, log erank ratio)."""
        return closest_toy(self.rows)

    def save(self, folder: str | os.PathLike) -> list[Path]:
        """``compare.json`` (with provenance) and ``compare.csv``."""
        folder = Path(folder)
        header = ["label", "kind", "location", "gap_ratio", "erank_ratio", "arc_angle", "probe_norm",
                  "probe_best_acc", "probe_norm_at_best", "readout_norm", "readout_passed"]
        rows = [[r.get(k) if r.get(k) is not None else "" for k in header] for r in self.rows]
        return [write_csv_atomic(folder / "compare.csv", header, rows),
                write_json_atomic(folder / "compare.json", self.to_dict())]


def run_compare(config: CompareConfig, work_dir: str | os.PathLike) -> CompareResult:
    """Every toy source and every LLM location of ``config``, measured alike. Toy parameter files are
    exported to ``work_dir/toy-acts/<stem>`` (a finished export is reused)."""
    work_dir = Path(work_dir)
    ds, meta, locations = _load(config.acts)
    llm_locations = (resolve_locations(locations, config.locations) if config.locations is not None
                     else default_pca_locations(len(locations)))
    llm_cs = centroids_from_capture(ds, locations)  # before the toy export: bad LLM input fails first
    toy = _toy_sources(config.toy, config.toy_L, work_dir)
    windows = {"low": config.low, "high": config.high, "arc_counts": config.arc_counts,
               "pca_counts": config.pca_counts}
    rows = []
    for label, path, readout in toy:
        tds, _, tlocs = _load(path)
        li = len(tlocs) - 1  # the toy's read-out representation is its last location
        try:
            metrics = source_metrics(centroids_from_capture(tds, tlocs), li, acts_array(tds, li),
                                     column(tds, "n"), **windows)
        except UsageError as exc:
            raise UsageError(f"toy {label}: {exc} (or pass toy_L >= {config.high[1]})") from None
        rows.append({"label": label, "kind": "toy", "source": str(path), "location": tlocs[li], **metrics,
                     **readout})
    model = meta.get("model") or "LLM"
    for li in llm_locations:
        metrics = source_metrics(llm_cs, li, acts_array(ds, li), column(ds, "n"), **windows)
        rows.append({"label": f"LLM {location_label(locations[li])}", "kind": "llm", "source": config.acts,
                     "location": locations[li], "model": model, **metrics,
                     "readout_norm": None, "readout_passed": None})
    recorded = {"toy": list(config.toy), "acts": config.acts, "toy_L": config.toy_L,
                **{k: list(v) for k, v in windows.items()}}
    probe = {"rel_alphas": REL_ALPHAS.tolist(), "fractions": list(DEFAULT_FRACTIONS), "split_seed": SPLIT_SEED,
             "standardize": False,
             "selection": "validation rounded accuracy, ties by validation MSE; scored on the test split",
             "criterion": "smallest native norm whose validation rounded accuracy == 1"}
    return CompareResult(rows=rows, low_window=list(config.low), high_window=list(config.high),
                         arc_counts=list(config.arc_counts), pca_counts=list(config.pca_counts), probe=probe,
                         provenance=provenance(recorded))


def _toy_sources(specs: tuple[str, ...], toy_L: int, work_dir: Path) -> list[tuple[str, Path, dict]]:
    """(label, activation folder, read-out info) for every toy source; parameter files are exported to
    ``work_dir/toy-acts/<stem>`` (reused when already there)."""
    from countlens.toy.export import export_toy_activations, toy_params_from_json

    sources: list[tuple[str, Path, dict]] = []
    files: list[Path] = []
    for spec in specs:
        path = Path(spec)
        if path.is_dir() and (path / "meta.json").is_file():
            meta = read_json(path / "meta.json", "toy activation metadata")
            sources.append((_toy_label_from_meta(meta, path), path, _toy_readout(meta)))
        elif path.is_dir():
            found = [f for f in sorted(path.glob("*.json")) if _is_toy_params(f)]
            if not found:
                raise UsageError(f"toy source {spec}: the folder holds no parameter JSON files and no meta.json")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise UsageError(f"toy source {spec} does not exist; pass a parameter JSON from `countlens toy "
                             "construct`")
    for path in files:
        data = read_json(path, "toy parameter file")
        try:
            cfg, params = toy_params_from_json(data, L=toy_L)
        except UsageError as exc:
            raise UsageError(f"toy source {path}: {exc}") from None
        label = f"{cfg.variant} ({path.stem})" if path.stem != cfg.variant else cfg.variant
        dest = work_dir / "toy-acts" / path.stem
        export_toy_activations(cfg, params, dest, L=toy_L, seed=0)  # reuses a finished export
        sources.append((label, dest, _toy_readout(data)))
    labels = [label for label, _, _ in sources]
    if len(set(labels)) != len(labels):
        sources = [(f"{label} [{i}]", p, info) for i, (label, p, info) in enumerate(sources)]
    return sources


def _is_toy_params(path: Path) -> bool:
    """Whether a JSON file in a toy folder holds toy parameters (other JSON files are skipped)."""
    try:
        data = read_json(path)
    except UsageError:
        return False
    return isinstance(data, dict) and ("x_b" in data or isinstance(data.get("params"), dict))


def _toy_readout(data: dict) -> dict:
    """The toy's own regression read-out norm ``|w|`` and whether its full-domain check passed, from a
    parameter JSON (``countlens toy construct``: ``check.passed``; ``toy train``: ``passed``) or an
    export's metadata; None where they are absent."""
    params = data.get("params") if isinstance(data.get("params"), dict) else data
    w = params.get("w")
    check = data.get("check") if isinstance(data.get("check"), dict) else {}
    passed = check.get("passed", data.get("passed"))
    return {"readout_norm": float(np.linalg.norm(np.asarray(w, dtype=float))) if w is not None else None,
            "readout_passed": passed if isinstance(passed, bool) else None}


def _toy_label_from_meta(meta: dict, path: Path) -> str:
    for key in ("variant", "config", "model"):
        if isinstance(meta.get(key), str):
            return meta[key]
    return path.name


__all__ = ["GEOMETRY_DEFINITIONS", "COMPARE_DEFINITIONS", "GeometryConfig", "GeometryResult", "run_geometry",
           "CompareConfig", "CompareResult", "run_compare"]
