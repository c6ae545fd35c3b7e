"""Running-count probes (Figure 10): does the residual at item k carry the count so far, or nothing yet?
:class:`~countlens.probes.probe.ProbeConfig` with ``target="running_count"`` →
:func:`run_running_count` → :class:`RunningCountResult`. The protocol is docs/definitions.md §2, "Probes",
on the rows of an items capture (``countlens llm capture --positions items``).

Which rows: every row of the capture — each prompt's item rows and its boundary row. Rows of one prompt are
not independent (they share the prompt's items and the residual stream's history), so they are split **by
prompt**: :func:`countlens.probes.split_groups` splits the prompt ids train / validation / test with the
same fractions and seeds as Figure 7, and every row follows its prompt.

Where in the list: item k of a prompt with ``n + m`` items is at relative position ``k / (n + m)`` (0 = the
first item), in ``position_buckets`` equal buckets of [0, 1) (bucket ``floor(B k / (n + m))``); the
boundary rows form one more column. Per location, bucket and split seed, two probes are fitted exactly as
Figure 7's (:class:`countlens.probes.RidgePathProbe`: the α grid on the bucket's training rows, α selected
on its validation rows, scored on its test rows): one of the **running count** (targets among items
0..k; ``n`` at the boundary) and one of the **final count n** read at the same rows. A residual that
counts as it reads carries the running count at every bucket; one that holds nothing yet reads n only as far
as the running count predicts it. Beside each: the same probe family on the Hewitt–Liang control labels of
the same rows (:func:`countlens.probes.metrics.control_labels`; selectivity = accuracy − control accuracy),
and, per bucket, the majority baseline (the most frequent training label, scored on the test rows) and the
constant baseline's R² (the training mean: about 0).

What it cannot show: a probe reads what is *linearly decodable* at a position, not what the model uses; a
bucket holds different prompts at different list lengths, so the counts it sees depend on the prompt set;
and rounding accuracy near the start of a list is high for any read-out that says "0 or 1" (compare it with
the majority baseline).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np

from countlens.core.cache import CACHE_FOLDER, ResultCache
from countlens.core.capture import Capture, CaptureMeta, open_capture
from countlens.core.errors import ConfigError, about, literal
from countlens.core.locations import location_label, resolve_locations
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import blas_threads
from countlens.probes.metrics import control_labels, mae, native_norm, r2, rounded_accuracy
from countlens.probes.probe import SELECTION, ProbeConfig, seed_stat
from countlens.probes.ridge import RidgePathProbe
from countlens.probes.splits import split_groups

# What each probe reads at a row, in the order Figure 10 draws them.
RUNNING_TARGETS = ("running_count", "n")
TARGET_LABELS = {"running_count": "running count (targets so far)", "n": "final count n"}
# The item-row columns of an items capture that these probes need.
ITEM_COLUMNS = ("prompt_id", "item_index", "running_count")
BOUNDARY_LABEL = "boundary"
ROWS = ("item rows and boundary rows of an items capture, split by prompt (every row of a prompt in one "
        "split); one probe per location, relative-position bucket and split seed")


# ----------------------------------------------------------------------------------------------- inputs

@dataclass
class ItemData:
    """An items capture's rows: per row its prompt, item order and counts; activations read per location.

    ``bucket`` (rows,): the relative-position bucket of an item row (0..B-1) and ``B`` for a boundary row.
    """

    acts_dir: str
    meta: CaptureMeta
    locations: list[str]
    prompt_id: np.ndarray  # (rows,)
    item_index: np.ndarray  # (rows,) -1 on boundary rows
    running_count: np.ndarray  # (rows,) float64
    n: np.ndarray  # (rows,) float64
    m: np.ndarray  # (rows,) float64
    capture: Capture | None = None  # the capture the activations are read from (None: ``acts`` in memory)
    acts: np.ndarray | None = None  # (rows, n_locations, d), for data built in memory

    def X(self, index: int) -> np.ndarray:
        """The activations at one location as float64: (rows, d). :class:`ConfigError` about ``acts``
        when they hold NaN or inf."""
        if self.acts is not None:
            X = np.asarray(self.acts[:, index, :], dtype=np.float64)
        else:
            X = self.capture.acts(index)
        if not np.all(np.isfinite(X)):
            raise ConfigError("acts", f"{literal(self.acts_dir)}: activations hold NaN or inf at location "
                                      f"{index}; recapture them in float32")
        return X

    def target(self, name: str) -> np.ndarray:
        """The values a probe of ``name`` (:data:`RUNNING_TARGETS`) reads at each row: (rows,) float64."""
        return self.running_count if name == "running_count" else self.n

    def buckets(self, count: int) -> np.ndarray:
        """(rows,) int: ``floor(count · item_index / (n + m))`` for item rows, ``count`` for boundary rows."""
        items = (self.n + self.m).astype(np.int64)
        k = self.item_index.astype(np.int64)
        inside = k >= 0
        out = np.full(len(k), int(count), dtype=np.int64)
        out[inside] = (k[inside] * int(count)) // np.maximum(items[inside], 1)
        return np.minimum(out, int(count))


def load_item_data(acts: str | os.PathLike | Capture) -> ItemData:
    """The rows of an items capture (a folder or an opened :class:`~countlens.core.capture.Capture`) for the
    running-count probes. :class:`ConfigError` about ``target`` for a capture without item rows (a boundary
    capture), about ``acts`` for one without counts."""
    capture = open_capture(acts)
    acts_dir = capture.folder
    missing = [c for c in ("acts", "n", "m") if c not in capture.columns]
    if missing:
        raise ConfigError("acts", f"{{acts}} {literal(acts_dir)} has no {literal(', '.join(missing))} column; "
                                  "probes need a capture made by `countlens llm capture`")
    if not all(c in capture.columns for c in ITEM_COLUMNS):
        raise ConfigError("target", f"{{target}} running_count needs an items capture (one row per item: "
                                    f"`countlens llm capture --positions items`); {{acts}} {literal(acts_dir)} holds "
                                    "boundary rows only", also=("acts",))
    item_index = capture.column("item_index").astype(np.int64)
    if not np.any(item_index >= 0):
        raise ConfigError("target", f"{{target}} running_count: {{acts}} {literal(acts_dir)} holds no item rows "
                                    "(every prompt has 0 items); capture counts or distractors above 0",
                          also=("acts",))
    return ItemData(str(acts_dir), capture.meta, list(capture.meta.locations),
                    capture.column("prompt_id").astype(np.int64), item_index,
                    capture.column("running_count").astype(np.float64), capture.counts().astype(np.float64),
                    capture.column("m").astype(np.float64), capture=capture)


# ----------------------------------------------------------------------------------------------- result

@dataclass
class CellFit:
    """The validation-selected probe of one target in one bucket at one location, for one split seed."""

    seed: int
    alpha: float
    val_rounded_acc: float
    test_rounded_acc: float
    r2: float
    mae: float
    coef_norm: float  # native ℓ2 norm (activation coordinates)
    n_train: int
    n_val: int
    n_test: int
    control_test_rounded_acc: float | None = None
    selectivity: float | None = None  # test_rounded_acc - control_test_rounded_acc


@dataclass
class RunningCell:
    """One (bucket, target) at one location: a fit per split seed (none where a split of the bucket's rows
    is too small: 2 training rows, 1 validation and 1 test row at least)."""

    bucket: int
    target: str
    fits: list[CellFit]

    def stat(self, key: str) -> tuple[float, float, float]:
        """Mean, min and max of a :class:`CellFit` field over seeds (:func:`~countlens.probes.probe.seed_stat`:
        the seeds with a value; NaN without any)."""
        return seed_stat(self.fits, key)


@dataclass
class RunningLocation:
    name: str
    index: int
    cells: list[RunningCell]

    def cell(self, target: str, bucket: int) -> RunningCell:
        return next(c for c in self.cells if c.target == target and c.bucket == bucket)


@dataclass
class Baseline:
    """What a probe must beat in one bucket, for one target and split seed: the majority label of the
    training rows scored on the test rows, and the training mean's test R²."""

    target: str
    seed: int
    majority: float | None
    majority_test_rounded_acc: float | None
    constant_r2: float | None


@dataclass
class PositionBucket:
    """A column of Figure 10: item rows at relative position ``lo <= k / (n + m) < hi``, or the boundary
    rows (``lo``, ``hi`` None)."""

    index: int
    label: str
    lo: float | None
    hi: float | None
    rows: int
    prompts: int
    baselines: list[Baseline]

    def stat(self, target: str, key: str = "majority_test_rounded_acc") -> float:
        values = [getattr(b, key) for b in self.baselines if b.target == target and getattr(b, key) is not None]
        return float(np.mean(values)) if values else float("nan")


_CELL_KEYS = ("test_rounded_acc", "val_rounded_acc", "r2", "control_test_rounded_acc", "selectivity")


@dataclass
class RunningCountResult(Result):
    """``countlens probe --target running_count``: running-count and final-count probes per location and
    relative-position bucket (``running_count.json``; ``running_count.csv`` one row per location, target,
    bucket and seed). ``config`` is the protocol as run (locations by name, the prompt split, buckets)."""

    FILE: ClassVar[str] = "running_count.json"
    COMMAND: ClassVar[str] = "countlens probe --target running_count"

    config: dict[str, Any]
    source: dict[str, Any]
    alphas: list[float]
    buckets: list[PositionBucket]
    locations: list[RunningLocation]
    provenance: dict[str, Any] = field(default_factory=dict)

    def item_buckets(self) -> list[PositionBucket]:
        return [b for b in self.buckets if b.lo is not None]

    def items_mean(self, loc: RunningLocation, target: str, key: str) -> float:
        """The mean over item buckets (not the boundary) of a cell's seed mean; NaN where none has fits."""
        values = [loc.cell(target, b.index).stat(key)[0] for b in self.item_buckets()]
        values = [v for v in values if np.isfinite(v)]
        return float(np.mean(values)) if values else float("nan")

    def best_location(self, target: str = "running_count") -> RunningLocation:
        """The location whose ``target`` probes have the highest validation rounded accuracy, averaged over
        the item buckets (test scores are not used)."""
        def key(loc):
            value = self.items_mean(loc, target, "val_rounded_acc")
            return (value if np.isfinite(value) else -np.inf, -loc.index)
        return max(self.locations, key=key)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for loc, summary in zip(out["locations"], self.locations, strict=True):
            for cell, typed in zip(loc["cells"], summary.cells, strict=True):
                for key in _CELL_KEYS:
                    cell[f"{key}_mean"], cell[f"{key}_min"], cell[f"{key}_max"] = map(_finite, typed.stat(key))
            loc["items_mean"] = {t: {k: _finite(self.items_mean(summary, t, k))
                                     for k in ("r2", "test_rounded_acc", "selectivity")} for t in RUNNING_TARGETS}
        for bucket, typed in zip(out["buckets"], self.buckets, strict=True):
            bucket["baseline_mean"] = {t: {"majority_test_rounded_acc": _finite(typed.stat(t)),
                                           "constant_r2": _finite(typed.stat(t, "constant_r2"))}
                                       for t in RUNNING_TARGETS}
        out["best_location"] = ({t: self.best_location(t).name for t in RUNNING_TARGETS} if self.locations
                                else None)
        return out

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """``running_count.csv``: one row per location, target, bucket and seed (with the bucket's baselines)."""
        header = ["location", "index", "target", "bucket", "position_lo", "position_hi", "seed", "alpha",
                  "val_rounded_acc", "test_rounded_acc", "r2", "mae", "coef_norm", "control_test_rounded_acc",
                  "selectivity", "majority_test_rounded_acc", "constant_r2", "n_train", "n_val", "n_test"]
        by_index = {b.index: b for b in self.buckets}
        rows = []
        for loc in self.locations:
            for cell in loc.cells:
                bucket = by_index[cell.bucket]
                base = {b.seed: b for b in bucket.baselines if b.target == cell.target}
                for f in cell.fits:
                    b = base.get(f.seed)
                    rows.append([loc.name, loc.index, cell.target, bucket.label, _g(bucket.lo), _g(bucket.hi), f.seed,
                                 f"{f.alpha:.6g}", f"{f.val_rounded_acc:.6f}", f"{f.test_rounded_acc:.6f}",
                                 f"{f.r2:.6f}", f"{f.mae:.6f}", f"{f.coef_norm:.6g}",
                                 _f(f.control_test_rounded_acc), _f(f.selectivity),
                                 _f(b.majority_test_rounded_acc if b else None), _f(b.constant_r2 if b else None),
                                 f.n_train, f.n_val, f.n_test])
        return {"running_count.csv": (header, rows)}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, "running_count.csv")

    def summary(self) -> str:
        """One console line: what was probed, and the best location's running-count R² over the items."""
        sizes = self.config.get("split_prompts") or {}
        best = self.best_location()
        return (f"running-count probes at {len(self.locations)} location(s) x {len(self.item_buckets())} position "
                f"bucket(s) + boundary x {len(self.config['seeds'])} seed(s) on {self.source['rows']} rows of "
                f"{self.source['prompts']} prompts (train/validation/test prompts {sizes.get('train')}/"
                f"{sizes.get('validation')}/{sizes.get('test')}); best by validation: {best.name} "
                f"({location_label(best.name)}; test R² over the items: running count "
                f"{self.items_mean(best, 'running_count', 'r2'):.3f}, final count n {self.items_mean(best, 'n', 'r2'):.3f})")


def _finite(value: float) -> float | None:
    """A derived mean as JSON shows it: None where there is none (NaN)."""
    return float(value) if np.isfinite(value) else None


def _f(value: float | None) -> str:
    return "" if value is None else f"{value:.6f}"


def _g(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


# ----------------------------------------------------------------------------------------------- fits

def fit_cell(X: np.ndarray, y: np.ndarray, split, alphas: np.ndarray, seed: int, standardize: bool = True,
             control: np.ndarray | None = None) -> CellFit:
    """Figure 7's fit → select → score on one cell's rows: :class:`RidgePathProbe` on the training rows, α
    selected on validation, scored on test; with ``control`` (rows,) the same on those labels. X: (rows, d),
    y: (rows,); ``split``: (train, validation, test) row indices."""
    train, val, test = split
    probe = RidgePathProbe(alphas, standardize=standardize, refit=False).fit(X[train], y[train], X[val], y[val])
    pred = probe.predict(X[test])  # (n_test,)
    fit = CellFit(seed=int(seed), alpha=probe.alpha_, val_rounded_acc=float(probe.val_rounded_acc_[probe.best_index_]),
                  test_rounded_acc=rounded_accuracy(y[test], pred), r2=r2(y[test], pred), mae=mae(y[test], pred),
                  coef_norm=float(native_norm(probe.coef_)), n_train=len(train), n_val=len(val), n_test=len(test))
    if control is not None:
        other = RidgePathProbe(alphas, standardize=standardize, refit=False).fit(X[train], control[train], X[val],
                                                                                 control[val])
        fit.control_test_rounded_acc = rounded_accuracy(control[test], other.predict(X[test]))
        fit.selectivity = fit.test_rounded_acc - fit.control_test_rounded_acc
    return fit


def majority_baseline(y: np.ndarray, split, target: str, seed: int) -> Baseline:
    """The most frequent training label (ties: the smallest) scored on the test rows, and the training mean's
    test R² (None where the split is empty)."""
    train, _, test = split
    if not len(train) or not len(test):
        return Baseline(target, int(seed), None, None, None)
    values, counts = np.unique(y[train], return_counts=True)
    majority = float(values[np.argmax(counts)])
    return Baseline(target, int(seed), majority, rounded_accuracy(y[test], np.full(len(test), majority)),
                    r2(y[test], np.full(len(test), float(y[train].mean()))))


def _usable(split) -> bool:
    train, val, test = split
    return len(train) >= 2 and len(val) >= 1 and len(test) >= 1


def position_buckets(data: ItemData, B: int, members: list[np.ndarray], cell_splits: dict, seeds) -> list[PositionBucket]:
    """The ``B`` relative-position buckets and the boundary (index ``B``): ``members[b]`` their row indices,
    ``cell_splits[seed, b]`` their (train, validation, test) rows, each with its baselines per target and seed."""
    labels = [f"{b / B:.2g}–{(b + 1) / B:.2g}" for b in range(B)] + [BOUNDARY_LABEL]
    return [PositionBucket(index=b, label=labels[b], lo=None if b == B else b / B, hi=None if b == B else (b + 1) / B,
                           rows=int(len(members[b])), prompts=int(len(np.unique(data.prompt_id[members[b]]))),
                           baselines=[majority_baseline(data.target(t), cell_splits[s, b], t, s)
                                      for t in RUNNING_TARGETS for s in seeds])
            for b in range(B + 1)]


def running_protocol(config: ProbeConfig, data: ItemData, indices: list[int], first) -> dict[str, Any]:
    """What a :class:`RunningCountResult` records as its ``config``: the probe settings, the position buckets,
    the selection, the baselines and the sizes of the first seed's split ``first`` ((train, validation, test)
    row indices)."""
    return {"acts": str(config.acts), "target": "running_count", "locations": [data.locations[i] for i in indices],
            "alphas": np.asarray(config.alphas, dtype=np.float64).tolist(), "seeds": list(config.seeds),
            "fractions": list(config.fractions), "standardize": config.standardize,
            "position_buckets": int(config.position_buckets),
            "position": "item k of a prompt with n + m items: bucket floor(B k / (n + m)); the boundary: "
                        "one more column",
            "selection": SELECTION, "rows": ROWS,
            "split_prompts": {name: int(len(np.unique(data.prompt_id[part])))
                              for name, part in zip(("train", "validation", "test"), first, strict=True)},
            "split_rows": dict(zip(("train", "validation", "test"), map(len, first), strict=True)),
            "blas_threads": config.blas_threads,
            "control": ({"task": "Hewitt-Liang: each value of the target mapped to a fixed random other value",
                         "seed": config.control_seed} if config.control else None),
            "baselines": "majority: the most frequent training label of the bucket, scored on its test rows; "
                         "constant: the training mean's test R²"}


def running_cache_key(protocol: dict[str, Any], data: ItemData) -> dict[str, Any]:
    """What a kept location must match to be reused: the ``protocol`` (less where the capture lies, the chosen
    locations and the threads) and a fingerprint of the capture's rows."""
    data_key = {"settings": data.meta.settings or None, "rows": len(data.n), "n_sum": float(data.n.sum()),
                "running_sum": float(data.running_count.sum()), "locations": list(data.locations)}
    return {**{k: v for k, v in protocol.items() if k not in ("acts", "locations", "blas_threads")}, "data": data_key}


def running_source(data: ItemData) -> dict[str, Any]:
    """What a :class:`RunningCountResult` records of the capture it was fitted on."""
    counts = np.unique(data.n).astype(int)
    return {"model": data.meta.model_id, "L": data.meta.L, "rows": int(len(data.n)),
            "item_rows": int(np.sum(data.item_index >= 0)), "prompts": int(len(np.unique(data.prompt_id))),
            "d": data.meta.d, "n_locations": len(data.locations), "count_min": int(counts.min()),
            "count_max": int(counts.max())}


def fit_running_location(data: ItemData, index: int, config: ProbeConfig, cell_splits: dict,
                         controls: dict[str, np.ndarray]) -> dict[str, Any]:
    """Every cell (bucket × target) of location ``index``: its fits over the seeds whose split is usable, as
    the dict of a :class:`RunningLocation` (what the cache keeps)."""
    X = data.X(index)
    alphas = np.asarray(config.alphas, dtype=np.float64)
    cells = []
    for b in range(int(config.position_buckets) + 1):
        for t in RUNNING_TARGETS:
            fits = [fit_cell(X, data.target(t), cell_splits[s, b], alphas, s, config.standardize, controls.get(t))
                    for s in config.seeds if _usable(cell_splits[s, b])]
            cells.append(RunningCell(b, t, fits))
    return dataclasses.asdict(RunningLocation(data.locations[index], index, cells))


def _running_location(saved: dict[str, Any]) -> RunningLocation:
    """A :class:`RunningLocation` from its kept dict (:func:`fit_running_location`)."""
    return RunningLocation(saved["name"], int(saved["index"]),
                           [RunningCell(int(c["bucket"]), c["target"], [CellFit(**f) for f in c["fits"]])
                            for c in saved["cells"]])


def run_running_count(config: ProbeConfig, data: ItemData | None = None, *,
                      resume_dir: str | os.PathLike | None = None, progress: bool = False) -> RunningCountResult:
    """Figure 10: at each location of ``config.locations``, for each relative-position bucket (and the
    boundary) and split seed, the validation-selected probes of the running count and of the final count
    n, with the control task and the baselines (see the module docstring). ``data``: the loaded capture
    (default: :func:`load_item_data` of ``config.acts``). Everything that can be refused (no item rows,
    unknown locations, too few prompts for the split) is refused before the first fit.

    With ``resume_dir`` every finished location is kept there and reused by a rerun with the same
    configuration on the same capture (as :func:`countlens.probes.run_probes`); the folder is removed once
    every location is done.
    """
    from tqdm.auto import tqdm

    if config.target != "running_count":
        raise ConfigError("target", f"{{target}} {literal(config.target)} is Figure 7's: run_probes reads it")
    if data is None:
        with about("acts"):
            data = load_item_data(config.acts)
    with about("locations"):
        indices = resolve_locations(data.locations, config.locations)
    B = int(config.position_buckets)
    bucket = data.buckets(B)  # (rows,)
    splits = {s: split_groups(data.prompt_id, s, config.fractions) for s in config.seeds}
    members = [np.flatnonzero(bucket == b) for b in range(B + 1)]
    # (seed, bucket) -> (train, validation, test) row indices of that bucket
    cell_splits = {(s, b): tuple(np.intersect1d(part, members[b]) for part in splits[s])
                   for s in config.seeds for b in range(B + 1)}
    controls = ({t: control_labels(data.target(t), config.control_seed) for t in RUNNING_TARGETS}
                if config.control else {})
    buckets = position_buckets(data, B, members, cell_splits, config.seeds)
    protocol = running_protocol(config, data, indices, splits[config.seeds[0]])
    run_key = running_cache_key(protocol, data)
    cache = ResultCache(resume_dir, "running-location")
    results = []
    for index in tqdm(indices, desc="running-count locations", disable=not progress):
        with blas_threads(config.blas_threads):
            saved = cache.get_or_run({**run_key, "location": index},
                                     lambda index=index: fit_running_location(data, index, config, cell_splits, controls))
        results.append(_running_location(saved))
    cache.clear()
    return RunningCountResult(config=protocol, source=running_source(data), alphas=list(protocol["alphas"]), buckets=buckets,
                              locations=results, provenance=result_provenance(config))


declare(Experiment(
    "probe-running", "Figure 10: the count at every item", ProbeConfig, run_running_count, RunningCountResult,
    order=180, figure="countlens.probes.figures:draw_running_count", plot="countlens.probes.figures:plot_running_count", view="countlens.probes.figures:running_count_view", reads={"acts": "capture-items"},
    presets={"quick": partial(ProbeConfig, target="running_count"),
             "full": partial(ProbeConfig, target="running_count"),
             "test": partial(ProbeConfig, target="running_count", position_buckets=4, seeds=(0,))},
    places={"resume_dir": CACHE_FOLDER}, options={"progress": True}, study="where"))


__all__ = ["RUNNING_TARGETS", "TARGET_LABELS", "ITEM_COLUMNS", "ItemData", "load_item_data", "CellFit", "RunningCell",
           "RunningLocation", "Baseline", "PositionBucket", "RunningCountResult", "fit_cell", "majority_baseline",
           "position_buckets", "running_protocol", "running_cache_key", "running_source", "fit_running_location",
           "run_running_count"]
