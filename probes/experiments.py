"""Probe experiments on an activation data set: validation-selected probes per location, and the
regularisation–norm sweep of Figure 8.

Which rows a probe sees: **every row of the capture** — all counts present, all distractor counts, token
pairs, prompt configurations and prompt seeds — split IID *by row* into train / validation / test with a
permutation drawn from the probe seed (default fractions 0.6 / 0.2 / 0.2). Rows with the same ``(n, m,
seed)`` but another pair or configuration are distinct prompts, so they are split independently. The probe
seeds (``--seeds``) are split seeds; "mean and range over seeds" in Figures 7 and 8 is over these splits.
For the toy every admissible ``(n, m)`` is one row.

Per location and seed the whole α grid is fitted on the training rows from one decomposition (standardised
inputs by default), α is chosen on the validation rows (:func:`countlens.probes.ridge.select_alpha`), and the
chosen probe is scored on the test rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from countlens.store import capture_meta, load_capture
from countlens.probes.metrics import binned_accuracy, count_bins, mae, native_norm, r2, rounded_accuracy
from countlens.probes.ridge import native_ridge_path, ridge_path, select_alpha, standardisation
from countlens.errors import UsageError
from countlens.io import provenance, read_json, write_json_atomic

DEFAULT_ALPHAS = "1e-6:1e4:41"
DEFAULT_SWEEP_ALPHAS = "1e-6:1e6:49"
DEFAULT_FRACTIONS = (0.6, 0.2, 0.2)


# ----------------------------------------------------------------------------------------------- inputs

def parse_alphas(text: str) -> np.ndarray:
    """``"1e-6:1e4:41"`` (41 log-spaced values, ends included) or ``"0,0.1,1"``; :class:`UsageError` on a
    negative, non-finite or malformed grid."""
    text = str(text).strip()
    try:
        if ":" in text:
            lo, hi, k = text.split(":")
            lo, hi, k = float(lo), float(hi), int(k)
            if lo <= 0 or hi <= 0 or k < 1:
                raise UsageError(f"--alphas {text!r}: a log grid lo:hi:count needs lo, hi > 0 and count >= 1 "
                                 "(add 0 with a comma list like 0,1e-3,1)")
            alphas = np.logspace(np.log10(lo), np.log10(hi), k)
        else:
            alphas = np.array([float(v) for v in text.split(",") if v.strip()])
    except ValueError:
        raise UsageError(f"--alphas must be lo:hi:count (log grid) or a comma list, got {text!r}") from None
    if alphas.size == 0:
        raise UsageError("--alphas must not be empty")
    if not np.all(np.isfinite(alphas)) or np.any(alphas < 0):
        raise UsageError(f"--alphas must be finite and >= 0, got {text!r}")
    return np.sort(alphas)


@dataclass
class ProbeData:
    """A capture's counts and activations. acts: (rows, n_locations, d) in the stored dtype."""

    acts_dir: str
    meta: dict[str, Any]
    locations: list[str]
    n: np.ndarray  # (rows,)
    acts: np.ndarray  # (rows, n_locations, d)

    def X(self, index: int) -> np.ndarray:
        """The activations at one location as float64: (rows, d)."""
        return np.asarray(self.acts[:, index, :], dtype=np.float64)


def load_probe_data(acts_dir: str | os.PathLike) -> ProbeData:
    """Load a capture (LLM or toy) for probing; :class:`UsageError` when it has no count column or holds
    NaN/inf activations."""
    ds = load_capture(acts_dir)
    meta = capture_meta(ds)
    if "n" not in ds.column_names or "acts" not in ds.column_names:
        raise UsageError(f"{acts_dir} has no 'n' (count) or 'acts' column; probes need a capture made by "
                         "`countlens llm capture` or `countlens probe toy-acts`")
    # datasets' numpy formatter casts floats to float32 unless told the dtype; toy captures are float64.
    dtype = np.dtype(meta.get("dtype") or "float32")
    acts = np.asarray(ds.with_format("numpy", dtype=dtype)["acts"])  # (rows, n_locations, d)
    n = np.asarray(ds["n"], dtype=np.float64)
    if acts.ndim != 3 or len(acts) != len(n):
        raise UsageError(f"{acts_dir}: acts has shape {acts.shape}; expected (rows, locations, d)")
    bad = ~np.isfinite(acts).all(axis=(0, 2))
    if bad.any():
        raise UsageError(f"{acts_dir}: activations hold NaN or inf at location(s) "
                         f"{', '.join(str(i) for i in np.flatnonzero(bad))}; recapture with --dtype float32")
    locations = list(meta.get("locations") or [str(i) for i in range(acts.shape[1])])
    return ProbeData(str(acts_dir), meta, locations, n, acts)


def resolve_locations(names: list[str], spec: str | None) -> list[int]:
    """Location indices from ``"embed,blocks.0.hook_resid_post"``, ``"0,5,10"`` or ``"0:5"`` (all when
    ``spec`` is None); :class:`UsageError` naming the available ones for an unknown location."""
    if spec is None or str(spec).strip() in ("", "all"):
        return list(range(len(names)))
    out: list[int] = []
    for item in (s.strip() for s in str(spec).split(",") if s.strip()):
        parts = item.split(":")
        if item in names:
            found = [names.index(item)]
        elif len(parts) in (1, 2) and all(p.strip().isdigit() for p in parts):
            lo, hi = int(parts[0]), int(parts[-1])
            found = list(range(lo, hi + 1)) if hi < len(names) and lo <= hi else []
        else:
            found = []
        if not found:
            shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
            raise UsageError(f"location {item!r} does not exist in this capture; choose names or indices "
                             f"0..{len(names) - 1} ({shown})")
        out.extend(found)
    return list(dict.fromkeys(out))


def first_block_location(names: list[str]) -> int:
    """Figure 8's default location: the output of the first block (``blocks.0.hook_resid_post``), ``h``
    for toy representations, else location 1 (location 0 being the embedding)."""
    for name in ("blocks.0.hook_resid_post", "h"):
        if name in names:
            return names.index(name)
    return min(1, len(names) - 1)


def split_rows(n_rows: int, seed: int, fractions=DEFAULT_FRACTIONS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IID train / validation / test row indices from a permutation drawn with ``seed``.

    Validation and test get ``round(fraction · rows)`` rows each, training the rest. :class:`UsageError`
    when a split would have too few rows (training needs 2, validation and test 1 each).
    """
    f_train, f_val, f_test = (float(f) for f in fractions)
    if min(f_train, f_val, f_test) <= 0 or abs(f_train + f_val + f_test - 1) > 1e-9:
        raise UsageError(f"--split fractions must be three positive numbers summing to 1, got {fractions}")
    n_val, n_test = int(round(f_val * n_rows)), int(round(f_test * n_rows))
    n_train = n_rows - n_val - n_test
    if n_train < 2 or n_val < 1 or n_test < 1:
        need = int(np.ceil(max(2 / f_train, 1 / f_val, 1 / f_test)))
        raise UsageError(f"the capture has {n_rows} rows; a {f_train:g}/{f_val:g}/{f_test:g} train/validation/"
                         f"test split needs at least {need}; capture more prompts")
    order = np.random.default_rng(seed).permutation(n_rows)
    return np.sort(order[n_val + n_test:]), np.sort(order[:n_val]), np.sort(order[n_val:n_val + n_test])


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


@dataclass
class LocationProbes:
    name: str
    index: int
    fits: list[ProbeFit]

    def stat(self, key: str) -> tuple[float, float, float]:
        """Mean, min and max of a :class:`ProbeFit` field over seeds."""
        values = np.array([getattr(f, key) for f in self.fits], dtype=np.float64)
        return float(values.mean()), float(values.min()), float(values.max())


@dataclass
class ProbeResult:
    """``countlens probe``: validation-selected ridge probes per location and seed (``probes.json``)."""

    config: dict[str, Any]
    source: dict[str, Any]
    alphas: list[float]
    locations: list[LocationProbes]
    provenance: dict[str, Any] = field(default_factory=dict)

    def best_location(self) -> LocationProbes:
        """The location with the highest mean *validation* rounded accuracy (test scores are not used)."""
        return max(self.locations, key=lambda loc: (loc.stat("val_rounded_acc")[0], -loc.index))

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for loc, summary in zip(out["locations"], self.locations, strict=True):
            for key in ("test_rounded_acc", "val_rounded_acc", "r2", "coef_norm"):
                mean, lo, hi = summary.stat(key)
                loc[f"{key}_mean"], loc[f"{key}_min"], loc[f"{key}_max"] = mean, lo, hi
        out["best_location"] = self.best_location().name if self.locations else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        fit_keys = {f.name for f in dataclasses.fields(ProbeFit)}
        try:
            locations = [LocationProbes(loc["name"], int(loc["index"]),
                                        [ProbeFit(**{k: v for k, v in f.items() if k in fit_keys})
                                         for f in loc["fits"]]) for loc in data["locations"]]
            return cls(data["config"], data["source"], list(data["alphas"]), locations,
                       data.get("provenance", {}))
        except (KeyError, TypeError) as exc:
            raise UsageError(f"not a probes.json written by `countlens probe` ({exc})") from None


def fit_probe(X: np.ndarray, y: np.ndarray, splits, alphas: np.ndarray, seed: int, standardize: bool = True,
              bins: list[tuple[int, int]] | None = None) -> ProbeFit:
    """Fit the α path on the training rows, select α on validation, score on test. X: (rows, d), y: (rows,)."""
    train, val, test = splits
    coefs, intercepts, alpha_rel = native_ridge_path(X[train], y[train], alphas, standardize)  # (A, d), (A,)
    pred_val = X[val] @ coefs.T + intercepts  # (n_val, A)
    val_acc = np.array([rounded_accuracy(y[val], pred_val[:, i]) for i in range(len(alphas))])
    best = select_alpha(val_acc, np.mean((pred_val - y[val, None]) ** 2, axis=0))
    pred_test = X[test] @ coefs[best] + intercepts[best]  # (n_test,)
    return ProbeFit(
        seed=int(seed), alpha=float(alphas[best]), alpha_rel=float(alpha_rel[best]),
        val_rounded_acc=float(val_acc[best]), test_rounded_acc=rounded_accuracy(y[test], pred_test),
        r2=r2(y[test], pred_test), mae=mae(y[test], pred_test), coef_norm=float(native_norm(coefs[best])),
        intercept=float(intercepts[best]),
        binned=binned_accuracy(y[test], pred_test, bins if bins is not None else count_bins(y)),
        n_train=len(train), n_val=len(val), n_test=len(test),
        val_rounded_acc_path=val_acc.tolist(), coef_norm_path=native_norm(coefs).tolist())


def fit_classifier_probe(X: np.ndarray, y: np.ndarray, splits, C: float | Sequence[float] = 1.0,
                         standardize: bool = True, max_iter: int = 1000) -> dict[str, Any]:
    """The classification read-out the paper compares in the toy: multinomial logistic regression over the
    counts seen in training (``sklearn.linear_model.LogisticRegression``, L2 penalty with inverse strength
    ``C``, lbfgs), on standardised inputs. X: (rows, d), y: (rows,) integer counts.

    ``C`` may be a grid: one classifier per value on the training rows, the one with the highest validation
    accuracy kept (ties: the smaller C, i.e. the stronger penalty), as α is chosen for the ridge probe.
    Returns the selected ``C``, the grid and its validation accuracies (``C_grid``, ``val_acc_path``),
    validation and test accuracy (argmax over classes; a count absent from training is always wrong), the
    largest native ℓ2 norm of a class vector ``u_k`` and the largest ``|c_k|`` (both in the activations' own
    coordinates), the number of classes and whether lbfgs converged.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression

    grid = classifier_grid(C)
    if not grid or not all(np.isfinite(c) and c > 0 for c in grid):
        raise ValueError(f"classifier C values must be finite and > 0, got {C}")
    train, val, test = splits
    mean, scale = standardisation(X[train]) if standardize else (np.zeros(X.shape[1]), np.ones(X.shape[1]))

    def accuracy(rows: np.ndarray, classes: np.ndarray, U: np.ndarray, c: np.ndarray) -> float:
        return float(np.mean(classes[np.argmax(X[rows] @ U.T + c, axis=1)] == y[rows]))

    fitted = []  # (validation accuracy, C, classifier, U, c) per C
    for c_value in grid:
        clf = LogisticRegression(C=c_value, max_iter=max_iter)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # reported as "converged" instead
            clf.fit((X[train] - mean) / scale, y[train].astype(int))
        U = clf.coef_ / scale  # (classes, d): scores = X @ U.T + c in native coordinates
        c = clf.intercept_ - U @ mean  # (classes,)
        if len(clf.classes_) == 2:  # sklearn stores one vector for two classes; scores are ±half of it
            U, c = np.vstack([-U[0] / 2, U[0] / 2]), np.array([-c[0] / 2, c[0] / 2])
        fitted.append((accuracy(val, clf.classes_, U, c), c_value, clf, U, c))
    val_path = [f[0] for f in fitted]
    val_acc, c_value, clf, U, c = fitted[int(np.argmax(val_path))]  # first maximum = smallest C among ties
    return {"C": c_value, "C_grid": grid, "val_acc_path": val_path, "val_acc": val_acc,
            "test_acc": accuracy(test, clf.classes_, U, c),
            "class_norm_max": float(np.linalg.norm(U, axis=1).max()), "bias_abs_max": float(np.abs(c).max()),
            "classes": int(len(clf.classes_)), "converged": bool(np.all(clf.n_iter_ < max_iter))}


def classifier_grid(C: float | Sequence[float]) -> list[float]:
    """The classifier's C values as one sorted list without repeats (one value or a grid)."""
    return sorted({float(c) for c in np.atleast_1d(C)})


def _config_key(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def run_probes(data: ProbeData, location_indices: list[int], alphas: np.ndarray, seeds: list[int],
               fractions=DEFAULT_FRACTIONS, standardize: bool = True, bin_width: int = 10, bin_start: int = 1,
               classifier_C: float | Sequence[float] | None = None, partial_dir: str | os.PathLike | None = None,
               progress: bool = False) -> ProbeResult:
    """Validation-selected probes at each location for each split seed; with ``classifier_C`` (one value or
    a grid selected on validation) also the multinomial classification read-out (:func:`fit_classifier_probe`)
    on the same splits.

    With ``partial_dir`` every finished location is saved there (atomically) and reused by a rerun with the
    same configuration, so an interrupted run resumes.
    """
    from tqdm.auto import tqdm

    alphas = np.asarray(alphas, dtype=np.float64)
    splits = {s: split_rows(len(data.n), s, fractions) for s in seeds}
    bins = count_bins(data.n, bin_width, bin_start)
    config = {"acts": str(data.acts_dir), "locations": [data.locations[i] for i in location_indices],
              "alphas": alphas.tolist(), "seeds": [int(s) for s in seeds], "fractions": list(fractions),
              "standardize": bool(standardize), "bin_width": bin_width, "bin_start": bin_start,
              "selection": "validation rounded accuracy, ties by validation MSE", "rows": "all rows, IID by row",
              "classifier_C": None if classifier_C is None else classifier_grid(classifier_C)}
    # The partial results are keyed by the configuration and by what the capture holds, so a recapture into
    # the same folder is never mixed with old results.
    data_key = {"settings": data.meta.get("settings"), "rows": len(data.n), "n_sum": float(data.n.sum()),
                "shape": list(data.acts.shape)}
    key = _config_key({**{k: v for k, v in config.items() if k != "locations"}, "data": data_key})
    results = []
    for index in tqdm(location_indices, desc="probe locations", disable=not progress):
        cached = Path(partial_dir) / f"location_{index:03d}_{key}.json" if partial_dir else None
        if cached is not None and cached.is_file():
            saved = read_json(cached, "partial probe result")
            results.append(LocationProbes(saved["name"], saved["index"], [ProbeFit(**f) for f in saved["fits"]]))
            continue
        X = data.X(index)
        fits = [fit_probe(X, data.n, splits[s], alphas, s, standardize, bins) for s in seeds]
        if classifier_C is not None:
            for fit, s in zip(fits, seeds, strict=True):
                fit.classifier = fit_classifier_probe(X, data.n, splits[s], classifier_C, standardize)
        loc = LocationProbes(data.locations[index], index, fits)
        if cached is not None:
            write_json_atomic(cached, loc)
        results.append(loc)
    source = _source(data)
    return ProbeResult(config, source, alphas.tolist(), results, provenance(config))


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
    alpha_rel: list[float]  # (A,) relative ridge coefficients
    coef_norm: list[float]  # (A,) native ℓ2 norms
    heldout_rounded_acc: list[float]  # (A,) on the test rows
    unregularised_norm: float  # α = 0: minimum-norm least squares in the activations' own coordinates
    unregularised_acc: float


@dataclass
class NormSweepResult:
    """``countlens probe sweep``: native norm vs held-out rounded accuracy along the α grid (Figure 8)."""

    config: dict[str, Any]
    source: dict[str, Any]
    location: str
    location_index: int
    seeds: list[SweepSeed]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NormSweepResult:
        try:
            return cls(data["config"], data["source"], data["location"], int(data["location_index"]),
                       [SweepSeed(**s) for s in data["seeds"]], data.get("provenance", {}))
        except (KeyError, TypeError) as exc:
            raise UsageError(f"not a sweep.json written by `countlens probe sweep` ({exc})") from None


def sweep_seed(X: np.ndarray, y: np.ndarray, splits, alphas: np.ndarray, seed: int,
               standardize: bool = True) -> SweepSeed:
    """Probes for every α on the training rows, scored on the held-out (test) rows. X: (rows, d)."""
    train, _, test = splits
    coefs, intercepts, alpha_rel = native_ridge_path(X[train], y[train], alphas, standardize)  # (A, d)
    pred = X[test] @ coefs.T + intercepts  # (n_test, A)
    # The unregularised probe is the minimum-norm solution in the activations' own coordinates, so it is
    # fitted without standardisation (the two coincide whenever the training design has full column rank).
    w0, b0 = ridge_path(X[train], y[train], [0.0])
    return SweepSeed(
        seed=int(seed), alphas=np.asarray(alphas, dtype=np.float64).tolist(), alpha_rel=alpha_rel.tolist(),
        coef_norm=native_norm(coefs).tolist(),
        heldout_rounded_acc=[rounded_accuracy(y[test], pred[:, i]) for i in range(len(alphas))],
        unregularised_norm=float(native_norm(w0[0])), unregularised_acc=rounded_accuracy(y[test], X[test] @ w0[0] + b0[0]))


def run_norm_sweep(data: ProbeData, location_index: int, alphas: np.ndarray, seeds: list[int],
                   fractions=DEFAULT_FRACTIONS, standardize: bool = True) -> NormSweepResult:
    """Figure 8 at one location: every α's probe and the unregularised one, for each split seed."""
    X = data.X(location_index)
    alphas = np.asarray(alphas, dtype=np.float64)
    config = {"acts": str(data.acts_dir), "location": data.locations[location_index], "alphas": alphas.tolist(),
              "seeds": [int(s) for s in seeds], "fractions": list(fractions), "standardize": bool(standardize),
              "heldout": "test split", "rows": "all rows, IID by row"}
    per_seed = [sweep_seed(X, data.n, split_rows(len(data.n), s, fractions), alphas, s, standardize) for s in seeds]
    return NormSweepResult(config, _source(data), data.locations[location_index], int(location_index), per_seed,
                           provenance(config))
