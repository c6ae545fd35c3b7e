"""Probe experiments on an activation data set, one config, run function and result per figure:
:class:`ProbeConfig` → :func:`run_probes` → :class:`ProbeResult` (validation-selected probes per location,
Figure 7) and :class:`SweepConfig` → :func:`run_sweep` → :class:`SweepResult` (the regularisation–norm
sweep, Figure 8). The protocol is docs/definitions.md §2, "Probes".

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
import json
import os
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from countlens.core.cache import ResultCache
from countlens.core.errors import ConfigError, UsageError, about, literal
from countlens.core.locations import first_block_location, location_label, resolve_location, resolve_locations
from countlens.core.results import Result, result_provenance
from countlens.core.store import acts_array, capture_meta, column, load_capture
from countlens.core.threads import blas_threads
from countlens.probes.classifier import classifier_grid, fit_classifier_probe
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
    log_grid,
    native_ridge_path,
    ridge_path,
)
from countlens.probes.splits import DEFAULT_FRACTIONS, split_rows

# The sweep reaches further into strong penalties than the selection grid (DEFAULT_ALPHA_GRID, 1e-6..1e4):
# Figure 8 draws the whole trade-off, down to probes shrunk almost to zero norm, while selection never
# picks such probes.
DEFAULT_SWEEP_ALPHA_GRID = (1e-6, 1e6, 49)
DEFAULT_SWEEP_ALPHAS = log_grid(*DEFAULT_SWEEP_ALPHA_GRID)
DEFAULT_SEEDS = (0, 1, 2)
# One BLAS thread per location's decompositions: the decompositions are small, and other processes on a
# shared machine compete for the cores (bench/bench_probe_threads.py; BENCHMARKS.md has the timings).
DEFAULT_BLAS_THREADS = 1
SELECTION = "validation rounded accuracy, ties by validation MSE; scored on the test split"
BEHAVIOUR_DEFINITION = "exact accuracy of the model's greedy answer, parsed by countlens.llm.answers"
# What a probe reads: the count n (Figure 7), or the count so far at every item of an items capture (Figure 10).
TARGETS = ("n", "running_count")
DEFAULT_POSITION_BUCKETS = 10
# The share a count's prompts must reach for the model to count it (greedy accuracy, rank-1 rate).
CAPACITY_THRESHOLD = 0.5
CAPACITY_DEFINITION = ("the largest captured count n such that, at every captured count from the smallest "
                       "count >= 1 up to n, at least half the prompts are answered right (greedy: the parsed "
                       "answer equals n; rank 1: the correct count is the most likely candidate); null when "
                       "the smallest count already fails")
# The capture columns Figure 7 reads of the model's answer as a distribution over the candidate counts.
DISTRIBUTION_READ = ("answer_expected", "answer_rank")


# ----------------------------------------------------------------------------------------------- inputs

@dataclass
class ProbeData:
    """A capture's counts and activations. acts: (rows, n_locations, d) in the stored dtype."""

    acts_dir: str
    meta: dict[str, Any]
    locations: list[str]
    n: np.ndarray  # (rows,)
    acts: np.ndarray  # (rows, n_locations, d)
    answer: np.ndarray | None = None  # (rows,) the model's parsed answer (NaN: unparsed), if captured
    expected: np.ndarray | None = None  # (rows,) Σ k p(k) over the candidate counts, if captured
    rank: np.ndarray | None = None  # (rows,) rank of the correct count among the candidates (1 = best), if captured

    def X(self, index: int) -> np.ndarray:
        """The activations at one location as float64: (rows, d)."""
        return np.asarray(self.acts[:, index, :], dtype=np.float64)


def boundary_rows(ds):
    """The boundary rows of a capture: all rows, or those with ``item_index == -1`` in an items capture."""
    if "item_index" not in ds.column_names:
        return ds
    return ds.select(np.flatnonzero(column(ds, "item_index") < 0))


def load_probe_data(acts_dir: str | os.PathLike) -> ProbeData:
    """Load a capture (LLM or toy) for probing, in its stored dtype — of an items capture its boundary rows
    only; :class:`UsageError` when it has no count column or holds NaN/inf activations."""
    ds = load_capture(acts_dir)
    meta = capture_meta(ds)
    if "n" not in ds.column_names or "acts" not in ds.column_names:
        raise UsageError(f"{acts_dir} has no 'n' (count) or 'acts' column; probes need a capture made by "
                         "`countlens llm capture` or `countlens probe toy-acts`")
    ds = boundary_rows(ds)
    ds.info.description = json.dumps(meta)
    acts = acts_array(ds, dtype=np.dtype(meta.get("dtype") or "float32"))  # (rows, n_locations, d)
    n = column(ds, "n").astype(np.float64)
    if acts.ndim != 3 or len(acts) != len(n):
        raise UsageError(f"{acts_dir}: acts has shape {acts.shape}; expected (rows, locations, d)")
    bad = ~np.isfinite(acts).all(axis=(0, 2))
    if bad.any():
        raise UsageError(f"{acts_dir}: activations hold NaN or inf at location(s) "
                         f"{', '.join(str(i) for i in np.flatnonzero(bad))}; recapture with --dtype float32")
    locations = list(meta.get("locations") or [str(i) for i in range(acts.shape[1])])
    answer = expected = rank = None
    if "answer" in ds.column_names:
        answer = np.array([np.nan if a is None else a for a in ds["answer"]], dtype=np.float64)
    if all(name in ds.column_names for name in DISTRIBUTION_READ):
        expected = np.array([np.nan if v is None else v for v in ds["answer_expected"]], dtype=np.float64)
        rank = np.array([np.nan if v is None else v for v in ds["answer_rank"]], dtype=np.float64)
    return ProbeData(str(acts_dir), meta, locations, n, acts, answer, expected, rank)


def _numbers(config, name: str, kind: type) -> tuple:
    """The field ``name`` of ``config`` as a tuple of ``kind``; a :class:`ConfigError` when it is not."""
    try:
        return tuple(kind(v) for v in np.atleast_1d(np.asarray(getattr(config, name), dtype=object)))
    except (TypeError, ValueError):
        shown = repr(getattr(config, name)).replace("{", "{{").replace("}", "}}")
        raise ConfigError(name, f"{{{name}}} must be numbers, got {shown}") from None


def _check_common(config) -> None:
    """Normalise and check the fields both configs share (errors name the config fields)."""
    config.alphas = tuple(sorted(_numbers(config, "alphas", float)))
    config.seeds = _numbers(config, "seeds", int)
    config.fractions = _numbers(config, "fractions", float)
    values = np.asarray(config.alphas, dtype=np.float64)
    if values.size == 0:
        raise ConfigError("alphas", "{alphas} must not be empty")
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise ConfigError("alphas", f"{{alphas}} must be finite and >= 0, got {values.tolist()}")
    if not config.seeds:
        raise ConfigError("seeds", "{seeds} must not be empty")
    if config.blas_threads is not None and int(config.blas_threads) < 1:
        raise ConfigError("blas_threads", "{blas_threads} must be a positive number of threads (or the process "
                                          f"default), got {config.blas_threads}")
    if len(config.fractions) != 3 or config.fractions[2] <= 0:
        raise ConfigError("fractions", "{fractions} must be three train, validation, test fractions with test > 0, "
                                       f"got {list(config.fractions)}")
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
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
    standardize: bool = True
    bin_width: int = 10
    bin_start: int = 1
    classifier_C: tuple[float, ...] | None = None
    figure_locations: str | None = None
    blas_threads: int | None = DEFAULT_BLAS_THREADS
    control: bool = True
    control_seed: int = 0
    target: str = "n"
    position_buckets: int = DEFAULT_POSITION_BUCKETS

    def __post_init__(self) -> None:
        _check_common(self)
        if int(self.bin_width) < 1:
            raise ConfigError("bin_width", f"{{bin_width}} must be >= 1, got {self.bin_width}")
        if self.classifier_C is not None:
            self.classifier_C = tuple(classifier_grid(self.classifier_C))
        if self.target not in TARGETS:
            raise ConfigError("target", f"{{target}} must be one of {', '.join(TARGETS)}, got {literal(repr(self.target))}")
        try:
            buckets = int(self.position_buckets)
        except (TypeError, ValueError):
            buckets = 0
        if buckets < 1 or buckets != self.position_buckets:
            raise ConfigError("position_buckets", "{position_buckets} must be a whole number >= 1, got "
                                                  f"{literal(repr(self.position_buckets))}")
        self.position_buckets = buckets
        if self.target == "running_count":
            for name in ("classifier_C", "figure_locations"):
                if getattr(self, name) is not None:
                    raise ConfigError(name, f"{{{name}}} is Figure 7's (target n); the running-count probes "
                                            "(Figure 10) fit ridge probes only and draw every probed location",
                                      also=("target",))


@dataclass
class SweepConfig:
    """``countlens probe sweep``: every α's probe and the unregularised one at one location (Figure 8).

    ``location``: one name or index (``None`` = the output of the first block, ``h`` for the toy).
    """

    acts: str
    location: str | None = None
    alphas: tuple[float, ...] = DEFAULT_SWEEP_ALPHAS
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS
    standardize: bool = True
    blas_threads: int | None = DEFAULT_BLAS_THREADS

    def __post_init__(self) -> None:
        _check_common(self)


# --------------------------------------------------------------------------------- validation-selected

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
        """Mean, min and max of a :class:`ProbeFit` field over seeds (NaN where a fit lacks it)."""
        values = np.array([np.nan if getattr(f, key) is None else getattr(f, key) for f in self.fits],
                          dtype=np.float64)
        return float(values.mean()), float(values.min()), float(values.max())


@dataclass
class Behaviour:
    """The model's own zero-shot answers on every row of the capture: exact accuracy (parsed answer ==
    count, an unparsed answer counting as wrong) overall and per count range (the probes' bins), and the
    share of answers that parse.

    With the answer as a distribution over the candidate counts in the capture (``answer_expected``,
    ``answer_rank``; ``distribution`` true), also per bin and per count: ``mean_count`` (mean n),
    ``expected`` (mean expected count Σ k p(k)), ``rank`` (the correct count's mean rank, 1 = most likely)
    and ``rank1`` (share of prompts whose correct count is the most likely), and overall ``rank1`` and
    ``expected_mae`` (mean |expected count − n|). These stay informative where the greedy answer is the same
    number for every prompt. ``capacity`` and ``rank1_capacity``: the model's counting capacity
    (:data:`CAPACITY_DEFINITION`, threshold :data:`CAPACITY_THRESHOLD`) from the greedy accuracy and from the
    rank-1 rate per count, both over the captured counts from ``capacity_from`` on."""

    accuracy: float
    parsed: float
    rows: int
    binned: list[dict[str, Any]]  # lo, hi, accuracy (None: no row), rows [, mean_count, expected, rank, rank1]
    definition: str = BEHAVIOUR_DEFINITION
    per_count: list[dict[str, Any]] | None = None  # n, rows, accuracy [, mean_count, expected, rank, rank1]
    capacity_from: int | None = None  # the smallest captured count >= 1 (None: no such count)
    capacity: int | None = None
    distribution: bool = False
    rank1: float | None = None
    expected_mae: float | None = None
    rank1_capacity: int | None = None
    capacity_definition: str = CAPACITY_DEFINITION


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
    shown = None
    if config.figure_locations is not None:
        with about("figure_locations"):
            shown = [data.locations[i] for i in resolve_locations(data.locations, config.figure_locations)]
        missing = [name for name in shown if name not in probed]
        if missing:
            raise ConfigError("figure_locations", f"{{figure_locations}} {', '.join(missing)} not among the "
                                                  "probed locations ({locations})", also=("locations",))
    alphas = np.asarray(config.alphas, dtype=np.float64)
    splits = {s: split_rows(len(data.n), s, config.fractions) for s in config.seeds}
    bins = count_bins(data.n, config.bin_width, config.bin_start)
    protocol = {"acts": str(config.acts), "locations": probed,
                "alphas": alphas.tolist(), "seeds": list(config.seeds), "fractions": list(config.fractions),
                "standardize": config.standardize, "bin_width": config.bin_width, "bin_start": config.bin_start,
                "selection": SELECTION, "rows": "all rows, IID by row",
                "split_sizes": dict(zip(("train", "validation", "test"),
                                        map(len, splits[config.seeds[0]]), strict=True)),
                "classifier_C": None if config.classifier_C is None else list(config.classifier_C),
                "figure_locations": shown, "blas_threads": config.blas_threads,
                "control": ({"task": "Hewitt-Liang: each count mapped to a fixed random other count",
                             "seed": config.control_seed} if config.control else None)}
    # Keyed by the configuration and by what the capture holds, so a recapture into the same folder is
    # never mixed with old results.
    data_key = {"settings": data.meta.get("settings"), "rows": len(data.n), "n_sum": float(data.n.sum()),
                "shape": list(data.acts.shape)}
    run_key = {**{k: v for k, v in protocol.items()
                  if k not in ("acts", "locations", "figure_locations", "blas_threads")},
               "data": data_key}
    cache = ResultCache(resume_dir, "location")

    def fit_location(index: int) -> dict[str, Any]:
        X = data.X(index)
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

    results = []
    for index in tqdm(indices, desc="probe locations", disable=not progress):
        with blas_threads(config.blas_threads):
            saved = cache.get_or_run({**run_key, "location": index}, lambda index=index: fit_location(index))
        results.append(LocationProbes(saved["name"], int(saved["index"]), [ProbeFit(**f) for f in saved["fits"]]))
    cache.clear()
    return ProbeResult(protocol, _source(data), alphas.tolist(), results, result_provenance(config),
                       behaviour_accuracy(data.n, data.answer, bins, expected=data.expected, rank=data.rank))


def behaviour_accuracy(n: np.ndarray, answer: np.ndarray | None, bins, *, expected: np.ndarray | None = None,
                       rank: np.ndarray | None = None) -> Behaviour | None:
    """The model's zero-shot exact accuracy (parsed answer == count; NaN = unparsed = wrong) on every row,
    overall, per count range of ``bins`` and per count, with its counting capacity; with ``expected`` and
    ``rank`` (rows,) — the answer distribution's expected count and the correct count's rank, NaN or a rank
    < 1 where a row has none — also their means per bin and per count and the rank-1 capacity
    (:class:`Behaviour`). ``None`` without answers."""
    if answer is None:
        return None
    n = np.asarray(n, dtype=np.float64)
    hit = np.asarray(answer, dtype=np.float64) == n
    binned = binned_accuracy(n, np.where(np.isfinite(answer), answer, -1.0), bins)
    counts = np.unique(n)
    per_count = [{"n": int(k), "rows": int(np.sum(n == k)), "accuracy": float(hit[n == k].mean())} for k in counts]
    start = counts[counts >= 1]
    out = Behaviour(accuracy=float(hit.mean()), parsed=float(np.mean(np.isfinite(answer))), rows=int(len(n)),
                    binned=binned, per_count=per_count, capacity_from=int(start[0]) if len(start) else None,
                    capacity=counting_capacity(counts, [c["accuracy"] for c in per_count]))
    if expected is None or rank is None:
        return out
    expected = np.asarray(expected, dtype=np.float64)
    rank = np.asarray(rank, dtype=np.float64)
    rank = np.where(rank >= 1, rank, np.nan)  # a row whose correct count is no candidate has no rank
    rank1 = np.where(np.isfinite(rank), (rank == 1).astype(np.float64), np.nan)
    for entry, inside in [*((b, (n >= b["lo"]) & (n <= b["hi"])) for b in binned),
                          *((c, n == c["n"]) for c in per_count)]:
        entry.update(mean_count=_mean(n[inside]), expected=_mean(expected[inside]), rank=_mean(rank[inside]),
                     rank1=_mean(rank1[inside]))
    out.distribution = True
    out.rank1 = _mean(rank1)
    out.expected_mae = _mean(np.abs(expected - n))
    out.rank1_capacity = counting_capacity(counts, [c["rank1"] for c in per_count])
    return out


def counting_capacity(counts, rates) -> int | None:
    """The counting capacity (:data:`CAPACITY_DEFINITION`) from each captured count's rate of right answers:
    the last count before the first of ``counts`` >= 1 (ascending) whose rate is below
    :data:`CAPACITY_THRESHOLD` (a missing rate, None or NaN, fails); ``None`` when the first already fails or
    no count is >= 1."""
    capacity = None
    for k, rate in zip(counts, rates, strict=True):
        if k < 1:
            continue
        if rate is None or not np.isfinite(rate) or rate < CAPACITY_THRESHOLD:
            break
        capacity = int(k)
    return capacity


def _mean(values: np.ndarray) -> float | None:
    """The mean of the finite values, None when there is none."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else None


def _source(data: ProbeData) -> dict[str, Any]:
    counts = np.unique(data.n).astype(int)
    return {"model": data.meta.get("model"), "L": data.meta.get("L"), "rows": int(len(data.n)),
            "d": int(data.acts.shape[2]), "n_locations": len(data.locations),
            "count_min": int(counts.min()), "count_max": int(counts.max()), "n_counts": int(len(counts))}


# ----------------------------------------------------------------------------------------- Figure 8

@dataclass
class SweepSeed:
    """One split seed's probes along the α grid, plus its unregularised probe."""

    seed: int
    alphas: list[float]  # (A,)
    alpha_rel: list[float]  # (A,) relative ridge coefficients (countlens.probes.penalty_unit)
    coef_norm: list[float]  # (A,) native ℓ2 norms
    heldout_rounded_acc: list[float]  # (A,) on the test rows, every α (no selection)
    unregularised_norm: float  # α = 0: minimum-norm least squares in the activations' own coordinates
    unregularised_acc: float


@dataclass
class SweepResult(Result):
    """``countlens probe sweep``: native norm vs held-out rounded accuracy along the α grid (Figure 8,
    ``sweep.json``). ``config`` is the protocol as run (the location by name, the held-out split)."""

    FILE: ClassVar[str] = "sweep.json"
    COMMAND: ClassVar[str] = "countlens probe sweep"

    config: dict[str, Any]
    source: dict[str, Any]
    location: str
    location_index: int
    seeds: list[SweepSeed]
    provenance: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        stars = ", ".join(f"{s.unregularised_norm:.3g} (acc {s.unregularised_acc:.3f})" for s in self.seeds)
        return (f"swept {len(self.seeds[0].alphas)} alphas x {len(self.seeds)} seed(s) at {self.location} "
                f"({location_label(self.location)}); unregularised norms: {stars}")


def sweep_seed(X: np.ndarray, y: np.ndarray, splits, alphas: np.ndarray, seed: int,
               standardize: bool = True) -> SweepSeed:
    """Probes for every α on the training rows, scored on the held-out (test) rows. X: (rows, d)."""
    train, _, test = splits
    path = native_ridge_path(X[train], y[train], alphas, standardize)  # (A, d), (A,)
    pred = X[test] @ path.coefs.T + path.intercepts  # (n_test, A)
    # The unregularised probe is the minimum-norm solution in the activations' own coordinates, so it is
    # fitted without standardisation (the two coincide whenever the training design has full column rank).
    w0, b0 = ridge_path(X[train], y[train], [0.0])
    return SweepSeed(
        seed=int(seed), alphas=path.alphas.tolist(), alpha_rel=path.alpha_rel.tolist(),
        coef_norm=native_norm(path.coefs).tolist(),
        heldout_rounded_acc=[rounded_accuracy(y[test], pred[:, i]) for i in range(len(alphas))],
        unregularised_norm=float(native_norm(w0[0])),
        unregularised_acc=rounded_accuracy(y[test], X[test] @ w0[0] + b0[0]))


def run_sweep(config: SweepConfig, data: ProbeData | None = None) -> SweepResult:
    """Figure 8 at one location: every α's probe and the unregularised one, for each split seed."""
    if data is None:
        with about("acts"):
            data = load_probe_data(config.acts)
    with about("location"):
        index = (first_block_location(data.locations) if config.location is None
                 else resolve_location(data.locations, config.location))
    X = data.X(index)
    alphas = np.asarray(config.alphas, dtype=np.float64)
    protocol = {"acts": str(config.acts), "location": data.locations[index], "alphas": alphas.tolist(),
                "seeds": list(config.seeds), "fractions": list(config.fractions), "standardize": config.standardize,
                "heldout": "test split", "rows": "all rows, IID by row", "blas_threads": config.blas_threads}
    with blas_threads(config.blas_threads):
        per_seed = [sweep_seed(X, data.n, split_rows(len(data.n), s, config.fractions), alphas, s,
                               config.standardize) for s in config.seeds]
    return SweepResult(protocol, _source(data), data.locations[index], int(index), per_seed,
                       result_provenance(config))


__all__ = ["DEFAULT_BLAS_THREADS", "DEFAULT_SEEDS", "DEFAULT_SWEEP_ALPHA_GRID", "DEFAULT_SWEEP_ALPHAS", "SELECTION",
           "ProbeData", "load_probe_data", "ProbeConfig", "SweepConfig", "ProbeFit", "LocationProbes",
           "Behaviour", "ProbeResult", "fit_probe", "control_accuracy", "run_probes", "behaviour_accuracy",
           "counting_capacity", "boundary_rows", "TARGETS", "CAPACITY_THRESHOLD", "CAPACITY_DEFINITION",
           "DEFAULT_POSITION_BUCKETS",
           "SweepSeed", "SweepResult", "sweep_seed", "run_sweep"]
