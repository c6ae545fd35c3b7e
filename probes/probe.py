"""Figure 7: validation-selected ridge probes per location. :class:`ProbeConfig` → :func:`run_probes` →
:class:`ProbeResult` (with the model's :class:`~countlens.probes.behaviour.Behaviour`); the sweep of Figure 8
is :mod:`countlens.probes.sweep`, its inputs :mod:`countlens.probes.data`. The protocol is
docs/definitions.md §2, "Probes".

Which rows a probe sees: **every row of the capture** — all counts present, all distractor counts, token
pairs, prompt configurations and prompt seeds — split IID *by row* into train / validation / test by
:func:`countlens.probes.split_rows` (default fractions 0.6 / 0.2 / 0.2). Rows with the same ``(n, m, seed)``
but another pair or configuration are distinct prompts, so they are split independently. The probe seeds
are split seeds; "mean and range over seeds" in Figures 7 and 8 is over these splits. For the toy every
admissible ``(n, m)`` is one row.

Per location and seed :class:`countlens.probes.RidgePathProbe` fits the whole α grid on the training rows
from one decomposition (standardised inputs by default) and selects α on the validation rows; the selected
probe is scored on the test rows. The sweep fits the same path and scores *every* α on the test rows (no
selection: it draws the trade-off, it does not pick a probe).

An items capture (``countlens llm capture --positions items``) holds, besides each prompt's boundary row, one
row per item token; these probes (and the sweep) read its boundary rows only, so they are Figures 7 and 8 of
the same prompts. ``ProbeConfig(target="running_count")`` asks for the probes of the count at every item
instead (Figure 10): :func:`countlens.probes.running.run_running_count`.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from countlens.core.cache import CACHE_FOLDER, ResultCache
from countlens.core.errors import ConfigError, about, literal
from countlens.core.fields import AtLeast, Fractions, Ints, Numbers, OneOf, Optional, check_fields
from countlens.core.locations import location_label, resolve_locations
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import blas_threads
from countlens.probes.behaviour import (
    Behaviour,
    behaviour_accuracy,
)
from countlens.probes.classifier import classifier_grid, fit_classifier_probe
from countlens.probes.data import ProbeData, load_probe_data
from countlens.probes.metrics import (
    binned_accuracy,
    control_labels,
    count_bins,
    mae,
    native_norm,
    r2,
    rounded_accuracy,
)
from countlens.probes.ridge import (
    DEFAULT_ALPHAS,
    RidgePathProbe,
)
from countlens.probes.splits import DEFAULT_FRACTIONS, split_rows

DEFAULT_SEEDS = (0, 1, 2)

# One BLAS thread per location's decompositions: the decompositions are small, and other processes on a
# shared machine compete for the cores (bench/bench_probe_threads.py; BENCHMARKS.md has the timings).
DEFAULT_BLAS_THREADS = 1

SELECTION = "validation rounded accuracy, ties by validation MSE; scored on the test split"

# What a probe reads: the count n (Figure 7), or the count so far at every item of an items capture (Figure 10).
TARGETS = ("n", "running_count")

DEFAULT_POSITION_BUCKETS = 10

# The fields both probe configs share; normalised (tuples) as they are checked.
COMMON_FIELDS = {"alphas": Numbers(nonnegative=True), "seeds": Ints(), "fractions": Fractions(),
                  "blas_threads": Optional(AtLeast(1))}


def check_probe_fields(config) -> None:
    """Check and normalise the fields both configs share (errors name the config fields)."""
    check_fields(config, COMMON_FIELDS, assign=True)
    config.alphas = tuple(sorted(config.alphas))
    split_rows(10**6, 0, config.fractions)  # the fractions themselves (sizes are checked against the data later)


@dataclass
class ProbeConfig:
    """``countlens probe``: validation-selected ridge probes per location (Figure 7).

    ``locations``: a spec for :func:`countlens.core.locations.resolve_locations` (``None`` = all); ``alphas``:
    absolute penalties on the (standardised) design; ``seeds``: split seeds; ``fractions``: train,
    validation, test; ``classifier_C``: with a value or a grid, also the multinomial classification
    read-out, its C chosen on validation; ``figure_locations``: the location specs Figure 7 draws
    (``None`` = the best by validation), which must be among the probed ones. ``control``: also fit the
    same probe family (same α grid and selection) on the Hewitt–Liang control task
    (:func:`countlens.probes.metrics.control_labels`, seed ``control_seed``); selectivity = test rounded
    accuracy on the counts − on the control labels.

    ``target``: ``"n"`` (the count, at the boundary: Figure 7, :func:`run_probes`) or ``"running_count"``
    (the count so far at every item of an items capture, in ``position_buckets`` buckets of relative position
    in the list, split by prompt: Figure 10, :func:`countlens.probes.running.run_running_count`; the
    classifier and ``figure_locations`` are Figure 7's and are refused there).
    """

    acts: str
    locations: str | None = None
    """names or indices, comma-separated, or a range like 0:10 (default: all)"""
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    """ridge penalties on the standardised design: lo:hi:count log grid or comma list"""
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    """split seeds, comma-separated"""
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
    """train,validation,test fractions"""
    standardize: bool = True
    bin_width: int = 10
    bin_start: int = 1
    classifier_C: tuple[float, ...] | None = None
    figure_locations: str | None = None
    """locations drawn in Figure 7 (default: the best by validation accuracy)"""
    blas_threads: int | None = DEFAULT_BLAS_THREADS
    """BLAS threads for each location's decompositions (BENCHMARKS.md measures why one)"""
    control: bool = True
    control_seed: int = 0
    target: str = "n"
    """what the probes read: n (the count, at the boundary: Figure 7) or running_count (the count so far at
    every item of an items capture: Figure 10)"""
    position_buckets: int = DEFAULT_POSITION_BUCKETS
    """with {target} running_count: buckets of relative position in the list, item k / (n + m)"""

    FIELDS: ClassVar[dict] = {"bin_width": AtLeast(1), "target": OneOf(TARGETS), "position_buckets": AtLeast(1)}

    def __post_init__(self) -> None:
        check_probe_fields(self)
        check_fields(self, self.FIELDS, assign=True)
        if self.classifier_C is not None:
            self.classifier_C = tuple(classifier_grid(self.classifier_C))
        if self.target == "running_count":
            for name in ("classifier_C", "figure_locations"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, f"{{{name}}} is Figure 7's (target n); the running-count probes "
                                            "(Figure 10) fit ridge probes only and draw every probed location",
                                      also=("target",))


@dataclass
class ProbeFit:
    """The validation-selected probe at one location for one split seed (scores in [0, 1], norms native)."""

    seed: int
    alpha: float
    alpha_rel: float
    val_rounded_acc: float
    test_rounded_acc: float
    r2: float
    mae: float
    coef_norm: float
    intercept: float
    binned: list[dict]  # test rounded accuracy per count range: lo, hi, accuracy, rows
    n_train: int
    n_val: int
    n_test: int
    val_rounded_acc_path: list[float]  # (A,) validation accuracy of every α
    coef_norm_path: list[float]  # (A,) native norm of every α's probe
    classifier: dict | None = None  # optional multinomial read-out (:func:`fit_classifier_probe`)
    coef: list[float] | None = None  # (d,) the selected probe's native coefficients: read-out = X @ coef + intercept
    control_test_rounded_acc: float | None = None  # the same protocol on the control task's labels
    selectivity: float | None = None  # test_rounded_acc - control_test_rounded_acc


@dataclass
class LocationProbes:
    name: str
    index: int
    fits: list[ProbeFit]

    def stat(self, key: str) -> tuple[float, float, float]:
        """Mean, min and max of a :class:`ProbeFit` field over seeds (:func:`seed_stat`)."""
        return seed_stat(self.fits, key)


def seed_stat(fits, key: str) -> tuple[float, float, float]:
    """Mean, min and max of the field ``key`` over ``fits`` (one fit per split seed), as floats. The NaN rule:
    a fit whose ``key`` is ``None`` or NaN is left out (the statistics of the seeds that have a value), and all
    three are NaN where no fit has one (or there is no fit). The one summary over seeds of every probe table
    (:class:`LocationProbes`, :class:`countlens.probes.running.RunningCell`)."""
    values = np.array([np.nan if getattr(f, key) is None else getattr(f, key) for f in fits], dtype=np.float64)
    if not len(values) or not np.any(np.isfinite(values)):
        return (np.nan, np.nan, np.nan)
    return float(np.nanmean(values)), float(np.nanmin(values)), float(np.nanmax(values))


@dataclass
class ProbeResult(Result):
    """``countlens probe``: validation-selected ridge probes per location and seed (``probes.json``, and
    ``probes.csv`` with one row per location and seed). ``config`` is the protocol as run: the probed
    locations by name, the split sizes, the selection rule and the control task."""

    FILE: ClassVar[str] = "probes.json"
    COMMAND: ClassVar[str] = "countlens probe"

    config: dict[str, Any]
    source: dict[str, Any]
    alphas: list[float]
    locations: list[LocationProbes]
    provenance: dict[str, Any] = field(default_factory=dict)
    behaviour: Behaviour | None = None  # when the capture holds the model's answers

    def best_location(self) -> LocationProbes:
        """The location with the highest mean *validation* rounded accuracy (test scores are not used)."""
        return max(self.locations, key=lambda loc: (loc.stat("val_rounded_acc")[0], -loc.index))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for loc, summary in zip(out["locations"], self.locations, strict=True):
            keys = ["test_rounded_acc", "val_rounded_acc", "r2", "coef_norm"]
            if all(f.selectivity is not None for f in summary.fits):
                keys += ["control_test_rounded_acc", "selectivity"]
            for key in keys:
                mean, lo, hi = summary.stat(key)
                loc[f"{key}_mean"], loc[f"{key}_min"], loc[f"{key}_max"] = mean, lo, hi
        out["best_location"] = self.best_location().name if self.locations else None
        return out

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """``probes.csv``: one row per location and seed."""
        header = ["location", "index", "seed", "alpha", "alpha_rel", "val_rounded_acc", "test_rounded_acc",
                  "r2", "mae", "coef_norm", "classifier_test_acc", "classifier_class_norm_max"]
        rows = []
        for loc in self.locations:
            for f in loc.fits:
                clf = ([f"{f.classifier['test_acc']:.6f}", f"{f.classifier['class_norm_max']:.6g}"]
                       if f.classifier else ["", ""])
                rows.append([loc.name, loc.index, f.seed, f"{f.alpha:.6g}", f"{f.alpha_rel:.6g}",
                             f"{f.val_rounded_acc:.6f}", f"{f.test_rounded_acc:.6f}", f"{f.r2:.6f}", f"{f.mae:.6f}",
                             f"{f.coef_norm:.6g}", *clf])
        return {"probes.csv": (header, rows)}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, "probes.csv")

    def summary(self) -> str:
        """One console line: what was probed and the validation-selected best location's test accuracy."""
        best = self.best_location()
        mean, lo, hi = best.stat("test_rounded_acc")
        sizes = self.config.get("split_sizes") or {}
        return (f"probed {len(self.locations)} location(s) x {len(self.config['seeds'])} seed(s) on "
                f"{self.source['rows']} rows (train/validation/test {sizes.get('train')}/"
                f"{sizes.get('validation')}/{sizes.get('test')}); best by validation: {best.name} "
                f"({location_label(best.name)}; test rounded accuracy {mean:.3f} [{lo:.3f}, {hi:.3f}])")


def fit_probe(X: np.ndarray, y: np.ndarray, splits, alphas: np.ndarray, seed: int, standardize: bool = True,
              bins: list[tuple[int, int]] | None = None) -> ProbeFit:
    """:class:`RidgePathProbe` on the training rows, α selected on validation, the probe scored on test.
    X: (rows, d), y: (rows,); ``splits``: (train, validation, test) row indices."""
    train, val, test = splits
    probe = RidgePathProbe(alphas, standardize=standardize, refit=False).fit(X[train], y[train], X[val], y[val])
    best = probe.best_index_
    pred_test = probe.predict(X[test])  # (n_test,)
    return ProbeFit(
        seed=int(seed), alpha=probe.alpha_, alpha_rel=float(probe.alpha_rel_[best]),
        val_rounded_acc=float(probe.val_rounded_acc_[best]), test_rounded_acc=rounded_accuracy(y[test], pred_test),
        r2=r2(y[test], pred_test), mae=mae(y[test], pred_test), coef_norm=float(native_norm(probe.coef_)),
        intercept=probe.intercept_,
        binned=binned_accuracy(y[test], pred_test, bins if bins is not None else count_bins(y)),
        n_train=len(train), n_val=len(val), n_test=len(test),
        val_rounded_acc_path=probe.val_rounded_acc_.tolist(), coef_norm_path=native_norm(probe.coef_path_).tolist(),
        coef=np.asarray(probe.coef_, dtype=np.float64).tolist())


def control_accuracy(X: np.ndarray, y: np.ndarray, splits, alphas: np.ndarray, control_seed: int,
                     standardize: bool = True) -> float:
    """Test rounded accuracy of the validation-selected probe on the Hewitt–Liang control labels of ``y``
    (same splits, α grid and selection as :func:`fit_probe`). X: (rows, d)."""
    train, val, test = splits
    labels = control_labels(y, control_seed)
    probe = RidgePathProbe(alphas, standardize=standardize, refit=False).fit(X[train], labels[train], X[val],
                                                                             labels[val])
    return rounded_accuracy(labels[test], probe.predict(X[test]))


def shown_locations(config: ProbeConfig, data: ProbeData, probed: list[str]) -> list[str] | None:
    """The locations Figure 7 shows (``config.figure_locations``, all among the ``probed``), ``None`` for the
    default; ``ConfigError("figure_locations")`` for one not probed."""
    if config.figure_locations is None:
        return None
    with about("figure_locations"):
        shown = [data.locations[i] for i in resolve_locations(data.locations, config.figure_locations)]
    missing = [name for name in shown if name not in probed]
    if missing:
        raise ConfigError("figure_locations", f"{{figure_locations}} {', '.join(missing)} not among the "
                                              "probed locations ({locations})", also=("locations",))
    return shown


def probe_protocol(config: ProbeConfig, probed: list[str], shown: list[str] | None, first) -> dict[str, Any]:
    """What a :class:`ProbeResult` records as its ``config``: the probe settings, the selection and the sizes
    of the first seed's split ``first`` ((train, validation, test) row indices)."""
    return {"acts": str(config.acts), "locations": probed,
            "alphas": np.asarray(config.alphas, dtype=np.float64).tolist(), "seeds": list(config.seeds),
            "fractions": list(config.fractions), "standardize": config.standardize, "bin_width": config.bin_width,
            "bin_start": config.bin_start, "selection": SELECTION, "rows": "all rows, IID by row",
            "split_sizes": dict(zip(("train", "validation", "test"), map(len, first), strict=True)),
            "classifier_C": None if config.classifier_C is None else list(config.classifier_C),
            "figure_locations": shown, "blas_threads": config.blas_threads,
            "control": ({"task": "Hewitt-Liang: each count mapped to a fixed random other count",
                         "seed": config.control_seed} if config.control else None)}


def probe_cache_key(protocol: dict[str, Any], data: ProbeData) -> dict[str, Any]:
    """What a kept location must match to be reused: the ``protocol`` (less where the capture lies, the chosen
    and shown locations and the threads) and what the capture holds, so that a recapture into the same folder
    is never mixed with old results."""
    data_key = {"settings": data.meta.settings or None, "rows": len(data.n), "n_sum": float(data.n.sum()),
                "shape": list(data.acts.shape)}
    return {**{k: v for k, v in protocol.items() if k not in ("acts", "locations", "figure_locations", "blas_threads")},
            "data": data_key}


def fit_location_probes(data: ProbeData, index: int, config: ProbeConfig, splits: dict, bins) -> dict[str, Any]:
    """The probes of location ``index``, one per split seed (``splits[seed]``: (train, validation, test) row
    indices; ``bins``: the count bins of the binned accuracy), with the classifier and the control task where
    ``config`` asks, as the dict of a :class:`LocationProbes` (what the cache keeps)."""
    X = data.X(index)
    alphas = np.asarray(config.alphas, dtype=np.float64)
    fits = [fit_probe(X, data.n, splits[s], alphas, s, config.standardize, bins) for s in config.seeds]
    if config.classifier_C is not None:
        for fit, s in zip(fits, config.seeds, strict=True):
            fit.classifier = fit_classifier_probe(X, data.n, splits[s], config.classifier_C, config.standardize)
    if config.control:
        for fit, s in zip(fits, config.seeds, strict=True):
            fit.control_test_rounded_acc = control_accuracy(X, data.n, splits[s], alphas, config.control_seed,
                                                            config.standardize)
            fit.selectivity = fit.test_rounded_acc - fit.control_test_rounded_acc
    return dataclasses.asdict(LocationProbes(data.locations[index], index, fits))


def run_probes(config: ProbeConfig, data: ProbeData | None = None, *,
               resume_dir: str | os.PathLike | None = None, progress: bool = False) -> ProbeResult:
    """Validation-selected probes at each location of ``config.locations`` for each split seed; with
    ``config.classifier_C`` also the multinomial classification read-out
    (:func:`countlens.probes.classifier.fit_classifier_probe`) on the same splits. ``data``: the loaded
    capture (default: :func:`load_probe_data` of ``config.acts``).

    With ``resume_dir`` every finished location is kept there (a :class:`countlens.core.cache.ResultCache`) and
    reused by a rerun with the same configuration on the same capture, so an interrupted run resumes; the
    folder is removed once every location is done.
    """
    from tqdm.auto import tqdm

    if config.target != "n":
        raise ConfigError("target", f"{{target}} {literal(config.target)} is run by "
                                    "countlens.probes.running.run_running_count (Figure 10); run_probes reads n")
    if data is None:
        with about("acts"):
            data = load_probe_data(config.acts)
    with about("locations"):
        indices = resolve_locations(data.locations, config.locations)
    probed = [data.locations[i] for i in indices]
    shown = shown_locations(config, data, probed)
    splits = {s: split_rows(len(data.n), s, config.fractions) for s in config.seeds}
    bins = count_bins(data.n, config.bin_width, config.bin_start)
    protocol = probe_protocol(config, probed, shown, splits[config.seeds[0]])
    run_key = probe_cache_key(protocol, data)
    cache = ResultCache(resume_dir, "location")
    results = []
    for index in tqdm(indices, desc="probe locations", disable=not progress):
        with blas_threads(config.blas_threads):
            saved = cache.get_or_run({**run_key, "location": index},
                                     lambda index=index: fit_location_probes(data, index, config, splits, bins))
        results.append(LocationProbes(saved["name"], int(saved["index"]), [ProbeFit(**f) for f in saved["fits"]]))
    cache.clear()
    return ProbeResult(config=protocol, source=data.source(), alphas=list(protocol["alphas"]), locations=results,
                       provenance=result_provenance(config),
                       behaviour=behaviour_accuracy(data.n, data.answer, bins, expected=data.expected, rank=data.rank))


declare(Experiment(
    "probe", "Figure 7: ridge probes per location", ProbeConfig, run_probes, ProbeResult, order=120,
    figure="countlens.probes.figures:draw_probes", plot="countlens.probes.figures:plot_binned_accuracy", view="countlens.probes.figures:probe_view", reads={"acts": "capture"}, output=ProbeResult.FILE,
    presets={"quick": ProbeConfig, "full": ProbeConfig, "test": ProbeConfig},
    places={"resume_dir": CACHE_FOLDER}, options={"progress": True}, study="model"))


__all__ = ["DEFAULT_SEEDS", "DEFAULT_BLAS_THREADS", "SELECTION", "TARGETS", "DEFAULT_POSITION_BUCKETS",
           "ProbeConfig", "ProbeFit", "LocationProbes", "seed_stat", "ProbeResult", "fit_probe",
           "control_accuracy", "run_probes", "check_probe_fields", "COMMON_FIELDS", "shown_locations",
           "probe_protocol", "probe_cache_key", "fit_location_probes"]
