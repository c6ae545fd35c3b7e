"""What a count probe is scored by: pure functions of targets and predictions (numpy, no I/O).

``round(ŷ)`` is ``floor(ŷ + 1/2)``, so "rounded exact" at a row is the same statement as the toy's
``|ŷ − n| < 1/2`` (an error of exactly one half counts as wrong).
"""

from __future__ import annotations

import numpy as np


def rounded_prediction(y_pred: np.ndarray) -> np.ndarray:
    """``floor(ŷ + 1/2)`` as float64, same shape as ``y_pred``."""
    return np.floor(np.asarray(y_pred, dtype=np.float64) + 0.5)


def rounded_accuracy(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Share of rows with ``round(ŷ) == n`` (rounded exact accuracy), in [0, 1]."""
    y_true = np.asarray(y_true, dtype=np.float64)
    return float(np.mean(rounded_prediction(y_pred) == y_true))


def r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Coefficient of determination ``1 − SS_res / SS_tot`` (as ``sklearn.metrics.r2_score``; a constant
    target gives 1.0 for a perfect prediction and 0.0 otherwise)."""
    y_true = np.asarray(y_true, dtype=np.float64)
    ss_res = float(np.sum((y_true - np.asarray(y_pred, dtype=np.float64)) ** 2))
    ss_tot = float(np.sum((y_true - y_true.mean()) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else 0.0
    return 1.0 - ss_res / ss_tot


def mae(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Mean absolute error, in counts."""
    return float(np.mean(np.abs(np.asarray(y_true, dtype=np.float64) - np.asarray(y_pred, dtype=np.float64))))


def count_bins(counts: np.ndarray, width: int = 10, start: int = 1) -> list[tuple[int, int]]:
    """Ten-count ranges ``[start, start+width-1], [start+width, ...]`` covering ``counts`` (inclusive bounds).

    Counts below ``start`` (the count 0 with the default) form one extra bin ``[min, start-1]`` in front.
    Only bins holding at least one count are returned, in ascending order.
    """
    counts = np.asarray(counts)
    bins = set()
    for n in np.unique(counts).astype(int):
        if n < start:
            bins.add((int(counts.min()), start - 1))
        else:
            lo = int(start + ((n - start) // width) * width)
            bins.add((lo, lo + width - 1))
    return sorted(bins)


def binned_accuracy(y_true: np.ndarray, y_pred: np.ndarray, bins: list[tuple[int, int]]) -> list[dict]:
    """Rounded exact accuracy within each count range ``(lo, hi)`` (inclusive).

    Returns one dict per bin: ``lo, hi, accuracy`` (``None`` when the bin holds no row) and ``rows``.
    """
    y_true = np.asarray(y_true, dtype=np.float64)
    hit = rounded_prediction(y_pred) == y_true
    out = []
    for lo, hi in bins:
        inside = (y_true >= lo) & (y_true <= hi)
        rows = int(inside.sum())
        out.append({"lo": int(lo), "hi": int(hi), "accuracy": float(hit[inside].mean()) if rows else None,
                    "rows": rows})
    return out


def control_labels(y: np.ndarray, seed: int) -> np.ndarray:
    """The Hewitt–Liang control task for counts: each distinct count of ``y`` mapped to a fixed random *other*
    count of ``y`` (a random cyclic derangement of the distinct counts, drawn with ``seed``), so the labels
    keep their frequencies but lose their order. (rows,) -> (rows,) float64; one distinct count maps to
    itself."""
    y = np.asarray(y, dtype=np.float64)
    values = np.unique(y)
    order = values[np.random.default_rng(seed).permutation(len(values))]
    image = dict(zip(order.tolist(), np.roll(order, -1).tolist(), strict=True))
    return np.array([image[v] for v in y.tolist()], dtype=np.float64)


def native_norm(coef: np.ndarray) -> float | np.ndarray:
    """ℓ2 norm of probe coefficients in the activations' own coordinates: (d,) -> float, (A, d) -> (A,).

    Coefficients fitted on standardised inputs must first be divided by the per-dimension scale (the
    estimators in :mod:`countlens.probes.ridge` already report them that way).
    """
    norms = np.linalg.norm(np.asarray(coef, dtype=np.float64), axis=-1)
    return float(norms) if np.ndim(norms) == 0 else norms
