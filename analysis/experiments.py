"""Analysis experiments, one config, run function and result each: :class:`GeometryConfig` →
:func:`run_geometry` → :class:`GeometryResult` (Figures 5 and 6) and :class:`CompareConfig` →
:func:`run_compare` → :class:`CompareResult` (toy vs LLM). Definitions: docs/definitions.md §2.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.analysis.compare import REL_ALPHAS, SPLIT_SEED, closest_toy, source_metrics
from countlens.analysis.geometry import (
    ARC_COUNTS,
    HIGH_WINDOW,
    LOW_WINDOW,
    PCA_COUNTS,
    window_rows,
    window_within,
)
from countlens.analysis.layerwise import (
    centroids_from_capture,
    compute_geometry,
    floor_specs,
    floor_summary,
    replicates_from_capture,
)
from countlens.analysis.noise import N_SHUFFLES, NOISE_SEED, Z_ABOVE
from countlens.core.capture import Capture, CaptureMeta, open_capture
from countlens.core.errors import ConfigError, UsageError, about
from countlens.core.fields import AtLeast, Optional, Window, check_fields
from countlens.core.io import read_json
from countlens.core.locations import default_pca_locations, location_label, resolve_locations
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.store import META
from countlens.probes import DEFAULT_FRACTIONS, SELECTION
from countlens.toy import COMPARE_CONSTRUCTIONS

# What each reported ratio is, stored beside the numbers so every page that shows one can name it.
GEOMETRY_DEFINITIONS = {
    "gap_ratio": "seed mean: mean adjacent-centroid gap in the high window over that in the low window, of "
                 "each seed's centroids, averaged over seeds (Figure 5; _min/_max = range over seeds)",
    "gap_ratio_pooled": "pooled: the same ratio of the centroids averaged over seeds first (as in the "
                        "toy-vs-LLM comparison)",
    "erank_ratio": "seed mean: effective rank (Roy & Vetterli) of the high window's centroids over the low "
                   "window's, per seed, averaged over seeds (Figure 5)",
    "erank_ratio_pooled": "pooled: the same ratio of the centroids averaged over seeds first",
    "pca": "PCA of the centroids averaged over seeds (Figure 6); count_order = |Spearman rho| between PC1 and "
           "the count, turn_angle = mean angle (degrees) between successive centroid steps",
    "floors": "noise floor of each quantity: the same quantity with the count labels shuffled among the prompts "
              "of each seed (shuffled_mean, shuffled_std, shuffled_min/max over n_shuffles shuffles), z = "
              "(value - shuffled_mean) / shuffled_std, above_floor = |z| >= z_above, p_value = two-sided "
              "permutation p; half_a, half_b = the quantity of two disjoint halves of the prompts of every "
              "(seed, count) cell (nan when a cell has one prompt)",
}
NOISE_NOTE = {"n_shuffles": N_SHUFFLES, "seed": NOISE_SEED, "z_above": Z_ABOVE, "noise_turn_angle": 120.0,
              "shuffled_within": "seed", "definition": "docs/definitions.md §2, Noise floor"}
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
    "floors": "noise floor of gap_ratio, erank_ratio and the PCA's count_order (|Spearman rho| of PC1 with the "
              "count): the quantity with the count labels shuffled among the rows of each seed (shuffled_mean, "
              "shuffled_std over n_shuffles), z = (value - shuffled_mean) / shuffled_std, above_floor = |z| >= 3; "
              "half_a, half_b = the quantity of two disjoint halves of every count's rows (nan: a count has one row)",
}


def _load(acts: str | os.PathLike | Capture) -> tuple[Capture, list[str]]:
    capture = open_capture(acts)
    locations = list(capture.meta.locations)
    if not locations:
        raise UsageError(f"{capture.folder}/meta.json names no locations")
    return capture, locations


# --------------------------------------------------------------------------------------- Figures 5-6

@dataclass
class GeometryConfig:
    """``countlens geometry``: ``low``, ``high`` and ``pca_counts`` are inclusive count windows
    (``pca_counts`` ``None`` = the paper's 1..100 within the counts the capture holds); ``pca_locations`` a
    location spec (``None`` = embeddings, after block 1, the middle block, the last block)."""

    acts: str
    """activation folder (countlens llm capture, or toy export; required)"""
    low: tuple[int, int] = LOW_WINDOW
    """low count window, inclusive"""
    high: tuple[int, int] = HIGH_WINDOW
    """high count window, inclusive"""
    pca_counts: tuple[int, int] | None = None
    """counts whose centroids enter the PCA"""
    pca_locations: str | None = None
    """locations for Figure 6, indices or names (default: embeddings, after block 1, middle block, last block)"""

    FIELDS: ClassVar[dict] = {"low": Window(), "high": Window(), "pca_counts": Optional(Window())}

    def __post_init__(self) -> None:
        self.acts = str(self.acts)
        check_fields(self, self.FIELDS, assign=True)


@dataclass
class GeometryResult(Result):
    """Per-location gap and effective-rank ratios (seed mean, range, per seed, pooled) and PCA of the
    centroids (``geometry.json``, with ``figure5.csv`` and ``figure6.csv``); :data:`GEOMETRY_DEFINITIONS`
    says which is which. ``pca_counts`` is the window the PCA used (a default resolved on the data)."""

    FILE: ClassVar[str] = "geometry.json"
    COMMAND: ClassVar[str] = "countlens geometry"

    locations: list[str]
    counts: list[int]
    seeds: list[int]
    low_window: list[int]
    high_window: list[int]
    pca_counts: list[int]
    per_location: list[dict[str, Any]]
    pca: list[dict[str, Any]]
    source: dict[str, Any] = field(default_factory=dict)
    noise: dict[str, Any] = field(default_factory=dict)
    floor_summary: dict[str, Any] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=lambda: dict(GEOMETRY_DEFINITIONS))
    provenance: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """The CSVs behind Figures 5 and 6, with each quantity's noise floor (empty where not computed)."""
        fig5_keys = ("gap_ratio", "erank_ratio")
        fig5 = [[r["index"], r["name"], r["gap_ratio"], r["gap_ratio_min"], r["gap_ratio_max"], r["erank_ratio"],
                 r["erank_ratio_min"], r["erank_ratio_max"], *_floor_cells(r, fig5_keys)] for r in self.per_location]
        fig6 = [[p["index"], p["name"], c, x, y] for p in self.pca
                for c, (x, y) in zip(p["counts"], p["coords"], strict=True)]
        pca_keys = ("count_order", "turn_angle")
        floors6 = [[p["index"], p["name"], *(p.get(k, "") for k in pca_keys), *_floor_cells(p, pca_keys)]
                   for p in self.pca]
        return {"figure5.csv": (["location", "name", "gap_ratio", "gap_ratio_min", "gap_ratio_max", "erank_ratio",
                                 "erank_ratio_min", "erank_ratio_max", *_floor_header(fig5_keys)], fig5),
                "figure6.csv": (["location", "name", "n", "pc1", "pc2"], fig6),
                "figure6_floors.csv": (["location", "name", *pca_keys, *_floor_header(pca_keys)], floors6)}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, "figure5.csv", "figure6.csv", "figure6_floors.csv")

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
        floors = ""
        if self.floor_summary:
            gap, rank = self.floor_summary["gap_ratio"], self.floor_summary["erank_ratio"]
            floors = (f"; above the shuffled-label floor: gap ratio at {gap['n_above']} of {gap['n']} locations, "
                      f"effective-rank ratio at {rank['n_above']} of {rank['n']}")
        return (f"geometry: {len(self.locations)} locations, {len(self.seeds)} seed(s), counts "
                f"{self.counts[0]}..{self.counts[-1]}; {best}{floors}"
                + (f"; counts do not move the representation at {', '.join(flat)} (ratios are nan)" if flat else ""))


FLOOR_COLUMNS = ("shuffled_mean", "shuffled_std", "z", "above_floor", "half_a", "half_b")


def _floor_header(keys) -> list[str]:
    return [f"{k}_{c}" for k in keys for c in FLOOR_COLUMNS]


def _floor_cells(entry: dict[str, Any], keys) -> list[Any]:
    """A row's floor numbers (:data:`FLOOR_COLUMNS` of each of ``keys``), empty cells without floors."""
    floors = entry.get("floors") or {}
    return [floors[k][c] if k in floors else "" for k in keys for c in FLOOR_COLUMNS]


def run_geometry(config: GeometryConfig) -> GeometryResult:
    """Centroids of the capture at every location, Figure 5's ratios and Figure 6's PCA."""
    with about("acts"):
        capture, locations = _load(config.acts)
    with about("pca_locations"):
        pca_locations = None if config.pca_locations is None else resolve_locations(locations, config.pca_locations)
    cs = centroids_from_capture(capture)
    pca_counts = window_within(PCA_COUNTS, cs.counts) if config.pca_counts is None else config.pca_counts
    compute_geometry(cs, config.low, config.high, pca_counts, pca_locations)  # bad windows fail before the floors
    specs = floor_specs(config.low, config.high, pca_counts,
                        pca_locations if pca_locations is not None else default_pca_locations(len(locations)),
                        len(locations))
    replicates = replicates_from_capture(capture, specs, N_SHUFFLES, NOISE_SEED)
    per_location, pca = compute_geometry(cs, config.low, config.high, pca_counts, pca_locations, replicates)
    noise = {**NOISE_NOTE, "split_half": replicates[0].halves is not None,
             "prompts_per_count": {"min": int(cs.sizes[cs.sizes > 0].min()), "max": int(cs.sizes.max())}}
    source = {"acts": config.acts, "model": capture.meta.model_id, "rows": len(capture),
              "config_names": sorted(set(capture.column("config").tolist())),
              "pairs": sorted(set(capture.column("pair").tolist()))}
    return GeometryResult(locations=list(locations), counts=cs.counts.tolist(), seeds=cs.seeds.tolist(),
                          low_window=list(config.low), high_window=list(config.high),
                          pca_counts=list(pca_counts), per_location=per_location, pca=pca, source=source,
                          noise=noise, floor_summary=floor_summary(per_location, pca),
                          provenance=result_provenance(config))


# ------------------------------------------------------------------------------------------ compare

@dataclass
class CompareConfig:
    """``countlens compare``: ``toy`` — toy parameter JSON files, folders of them, or toy activation
    folders; ``acts`` — the LLM capture; ``locations`` — an LLM location spec (``None`` = Figure 6's four);
    ``toy_L`` — the toy domain ``n + m <= L`` for parameter files (``None`` = the capture's largest count,
    so toy and LLM cover the same counts). ``arc_counts`` and ``pca_counts`` ``None`` = the paper's
    1..100 within the counts every source holds."""

    toy: tuple[str, ...]
    acts: str
    """LLM activation folder (countlens llm capture; required)"""
    locations: str | None = None
    """LLM locations to compare, indices or names (default: Figure 6's four)"""
    toy_L: int | None = None
    """toy domain n + m <= L for parameter files (default: the capture's largest count)"""
    arc_counts: tuple[int, int] | None = None
    """counts whose end points give the endpoint angle"""
    low: tuple[int, int] = LOW_WINDOW
    """low count window, inclusive"""
    high: tuple[int, int] = HIGH_WINDOW
    """high count window, inclusive"""
    pca_counts: tuple[int, int] | None = None
    """counts whose centroids enter the PCA"""

    FIELDS: ClassVar[dict] = {"toy_L": Optional(AtLeast(1)), "low": Window(), "high": Window(),
                              "arc_counts": Optional(Window()), "pca_counts": Optional(Window())}

    def __post_init__(self) -> None:
        if isinstance(self.toy, (str, os.PathLike)):  # one source
            self.toy = (self.toy,)
        self.toy = tuple(str(t) for t in self.toy)
        self.acts = str(self.acts)
        if not self.toy:
            raise ConfigError("toy", "{toy} must name at least one toy source")
        check_fields(self, self.FIELDS, assign=True)


@dataclass
class CompareResult(Result):
    """One row per source (toy variants first, then LLM locations) with the metrics and its PCA
    (``compare.json``, with ``compare.csv``); :data:`COMPARE_DEFINITIONS` says what each metric is. The
    windows and ``toy_L`` are those used (defaults resolved on the data)."""

    FILE: ClassVar[str] = "compare.json"
    COMMAND: ClassVar[str] = "countlens compare"

    rows: list[dict[str, Any]]
    low_window: list[int]
    high_window: list[int]
    arc_counts: list[int]
    pca_counts: list[int]
    probe: dict[str, Any] = field(default_factory=dict)
    noise: dict[str, Any] = field(default_factory=dict)
    definitions: dict[str, str] = field(default_factory=lambda: dict(COMPARE_DEFINITIONS))
    provenance: dict[str, Any] = field(default_factory=dict)
    toy_L: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "closest_toy": self.closest_toy()}

    def closest_toy(self) -> dict[str, str]:
        """For each LLM row, the toy row nearest in (log gap ratio, log erank ratio)."""
        return closest_toy(self.rows)

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """``compare.csv``: one line per source."""
        header = ["label", "kind", "location", "gap_ratio", "erank_ratio", "arc_angle", "probe_norm",
                  "probe_best_acc", "probe_norm_at_best", "readout_norm", "readout_passed"]
        keys = ("gap_ratio", "erank_ratio", "count_order")
        return {"compare.csv": (header + ["count_order", *_floor_header(keys)],
                                [[r.get(k) if r.get(k) is not None else "" for k in header]
                                 + [r.get("pca", {}).get("count_order", ""), *_floor_cells(r, keys)]
                                 for r in self.rows])}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, "compare.csv")


def run_compare(config: CompareConfig, work_dir: str | os.PathLike) -> CompareResult:
    """Every toy source and every LLM location of ``config``, measured alike. Toy parameter files are
    exported to ``work_dir/toy-acts/<stem>`` (a finished export is reused)."""
    work_dir = Path(work_dir)
    with about("acts"):
        capture, locations = _load(config.acts)
    with about("locations"):
        llm_locations = (resolve_locations(locations, config.locations) if config.locations is not None
                         else default_pca_locations(len(locations)))
    llm_cs = centroids_from_capture(capture)  # before the toy export: bad LLM input fails first
    for name in ("low", "high", "arc_counts", "pca_counts"):
        if getattr(config, name) is not None:  # a window the capture cannot fill, no toy domain fills
            window_rows(llm_cs.counts, getattr(config, name), name)
    toy_L = int(llm_cs.counts.max()) if config.toy_L is None else int(config.toy_L)
    toys = []
    with about("toy"):
        sources = _toy_sources(config.toy, toy_L, work_dir)
    for label, path, readout in sources:
        toy, tlocs = _load(path)
        toys.append((label, path, readout, toy, tlocs, centroids_from_capture(toy)))
    counts = [llm_cs.counts] + [t[-1].counts for t in toys]
    windows = {"low": config.low, "high": config.high,
               "arc_counts": window_within(ARC_COUNTS, *counts) if config.arc_counts is None else config.arc_counts,
               "pca_counts": window_within(PCA_COUNTS, *counts) if config.pca_counts is None else config.pca_counts}
    rows = []
    for label, path, readout, toy, tlocs, tcs in toys:
        li = len(tlocs) - 1  # the toy's read-out representation is its last location
        with _toy_domain(label, max(hi for _, hi in windows.values())):
            metrics = source_metrics(tcs, li, toy.acts(li), toy.counts(), **windows, groups=_seeds(toy))
        rows.append({"label": label, "kind": "toy", "source": str(path), "location": tlocs[li], **metrics,
                     **readout})
    model = capture.meta.model_id or "LLM"
    for li in llm_locations:
        metrics = source_metrics(llm_cs, li, capture.acts(li), capture.counts(), **windows, groups=_seeds(capture))
        rows.append({"label": f"LLM {location_label(locations[li])}", "kind": "llm", "source": config.acts,
                     "location": locations[li], "model": model, **metrics,
                     "readout_norm": None, "readout_passed": None})
    probe = {"rel_alphas": REL_ALPHAS.tolist(), "fractions": list(DEFAULT_FRACTIONS), "split_seed": SPLIT_SEED,
             "standardize": False, "selection": SELECTION,
             "criterion": "smallest native norm whose validation rounded accuracy == 1"}
    return CompareResult(rows=rows, low_window=list(windows["low"]), high_window=list(windows["high"]),
                         arc_counts=list(windows["arc_counts"]), pca_counts=list(windows["pca_counts"]), probe=probe,
                         noise=dict(NOISE_NOTE), provenance=result_provenance(config), toy_L=toy_L)


def _seeds(capture: Capture) -> np.ndarray | None:
    """The seed of every row (the strata the noise floors shuffle within), None without a seed column."""
    return capture.column("seed") if "seed" in capture.columns else None


@contextmanager
def _toy_domain(label: str, need: int) -> Iterator[None]:
    """A toy source's error, said as that source's and with the fix a larger toy domain gives."""
    try:
        yield
    except UsageError as exc:
        label = label.replace("{", "{{").replace("}", "}}")
        if isinstance(exc, ConfigError):
            template, field_name, also = exc.template, exc.field, (*exc.fields[1:], "toy_L")
        else:
            template, field_name, also = str(exc).replace("{", "{{").replace("}", "}}"), "toy_L", ()
        raise ConfigError(field_name, f"toy {label}: {template} (or pass {{toy_L}} >= {need})", also) from None


def _toy_sources(specs: tuple[str, ...], toy_L: int, work_dir: Path) -> list[tuple[str, Path, dict]]:
    """(label, activation folder, read-out info) for every toy source; parameter files are exported to
    ``work_dir/toy-acts/<stem>`` (reused when already there). In a folder, the JSON files that hold no toy
    parameters are skipped."""
    from countlens.toy import export_toy_activations, read_params

    sources: list[tuple[str, Path, dict]] = []
    files: list[tuple[Path, Any]] = []  # (path, its ParamsFile)
    for spec in specs:
        path = Path(spec)
        if path.is_dir() and (path / META).is_file():
            meta = Capture.from_folder(path).meta
            sources.append((_toy_label_from_meta(meta, path), path, _export_readout(meta)))
        elif path.is_dir():
            found = [(f, params) for f in sorted(path.glob("*.json"))
                     if (params := _params_or_none(f, toy_L)) is not None]
            if not found:
                raise UsageError(f"toy source {spec}: the folder holds no parameter JSON files and no meta.json")
            files.extend(found)
        elif path.is_file():
            data = read_json(path, "toy parameter file")
            try:
                files.append((path, read_params(data, L=toy_L)))
            except UsageError as exc:
                raise UsageError(f"toy source {path}: {exc}") from None
        else:
            raise UsageError(f"toy source {spec} does not exist; pass a parameter JSON from `countlens toy "
                             "construct`")
    for path, params in files:
        cfg = params.cfg
        label = f"{cfg.variant} ({path.stem})" if path.stem != cfg.variant else cfg.variant
        dest = work_dir / "toy-acts" / path.stem
        export_toy_activations(cfg, params.params, dest, L=toy_L, seed=0)  # reuses a finished export
        sources.append((label, dest, _toy_readout(params)))
    labels = [label for label, _, _ in sources]
    if len(set(labels)) != len(labels):
        sources = [(f"{label} [{i}]", p, info) for i, (label, p, info) in enumerate(sources)]
    return sources


def _params_or_none(path: Path, toy_L: int):
    """The toy parameters a JSON file of a toy folder holds (:func:`countlens.toy.model.read_params`), or
    ``None`` for a file that holds none (other JSON files of the folder)."""
    from countlens.toy import read_params

    try:
        return read_params(read_json(path), L=toy_L)
    except UsageError:
        return None


def _toy_readout(params) -> dict:
    """The toy's own regression read-out norm ``|w|`` and whether its full-domain check passed, from a
    :class:`countlens.toy.model.ParamsFile`; None where the file has no ``w`` or no check."""
    w = params.params.w
    return {"readout_norm": float(np.linalg.norm(w.detach().cpu().numpy())) if w is not None else None,
            "readout_passed": params.passed}


def _export_readout(meta: CaptureMeta) -> dict:
    """:func:`_toy_readout` of the parameters a toy activation folder was exported from (its
    ``meta.json`` records them; it records no check), or no read-out for a folder without them."""
    from countlens.toy import read_params

    try:
        return _toy_readout(read_params(meta.params, L=meta.L))
    except UsageError:
        return {"readout_norm": None, "readout_passed": None}


def _toy_label_from_meta(meta: CaptureMeta, path: Path) -> str:
    return meta.variant or (meta.model_id if isinstance(meta.model_id, str) else None) or path.name



# Figure 5's windows (low and high count ranges) and Figure 6's PCA counts, at the paper's sizes and the suite's.
WINDOWS = {"low": (1, 10), "high": (91, 100), "pca_counts": (1, 100)}
TEST_WINDOWS = {"low": (1, 4), "high": (8, 11), "pca_counts": (1, 11)}


def _compare(preset: str, windows: dict[str, tuple[int, int]], arc_counts: tuple[int, int]):
    """The comparison at ``preset``: the toy constructed at the same size as ``toy-construct``'s preset."""
    def build(toy: str, acts: str) -> CompareConfig:
        return CompareConfig(toy=(toy,), acts=acts, toy_L=COMPARE_CONSTRUCTIONS[preset].L, arc_counts=arc_counts,
                             **windows)
    return build


declare(Experiment(
    "geometry", "Figures 5 and 6: layerwise geometry", GeometryConfig, run_geometry, GeometryResult, order=110,
    figure="countlens.analysis.figures:draw_geometry", plot="countlens.analysis.figures:plot_figure5", view="countlens.analysis.figures:geometry_view", reads={"acts": "capture"},
    presets={"quick": partial(GeometryConfig, **WINDOWS), "full": partial(GeometryConfig, **WINDOWS),
             "test": partial(GeometryConfig, **TEST_WINDOWS)}, study="model"))
declare(Experiment(
    "compare", "Toy vs LLM", CompareConfig, run_compare, CompareResult, order=140, figure="countlens.analysis.figures:draw_compare", plot="countlens.analysis.figures:plot_compare",
    view="countlens.analysis.figures:compare_view", reads={"toy": "toy-construct", "acts": "capture"},
    presets={"quick": _compare("quick", WINDOWS, (1, 100)), "full": _compare("full", WINDOWS, (1, 100)),
             "test": _compare("test", TEST_WINDOWS, (1, 11))},
    places={"work_dir": ""}, study="model"))


__all__ = ["GEOMETRY_DEFINITIONS", "COMPARE_DEFINITIONS", "GeometryConfig", "GeometryResult", "run_geometry",
           "CompareConfig", "CompareResult", "run_compare"]
