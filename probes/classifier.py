"""The classification read-out of a count: multinomial logistic regression over the counts, beside the ridge
probe (docs/definitions.md §2, "Probes"). Numerics: pure functions of arrays, errors naming the config field
they are about (``classifier_C``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from countlens.core.errors import ConfigError
from countlens.probes.ridge import standardisation


def classifier_grid(C: float | Sequence[float]) -> list[float]:
    """The classifier's C values as one sorted list without repeats (one value or a grid); a
    :class:`ConfigError` about ``classifier_C`` unless every value is finite and > 0."""
    grid = sorted({float(c) for c in np.atleast_1d(C)})
    if not grid or not all(math.isfinite(c) and c > 0 for c in grid):
        raise ConfigError("classifier_C", f"{{classifier_C}} values must be finite and > 0, got {grid}")
    return grid


def fit_classifier_probe(X: np.ndarray, y: np.ndarray, splits, C: float | Sequence[float] = 1.0,
                         standardize: bool = True, max_iter: int = 1000) -> dict[str, Any]:
    """The classification read-out the paper compares in the toy: multinomial logistic regression over the
    counts seen in training (``sklearn.linear_model.LogisticRegression``, L2 penalty with inverse strength
    ``C``, lbfgs), on standardised inputs. X: (rows, d), y: (rows,) integer counts; ``splits``: (train,
    validation, test) row indices.

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


__all__ = ["classifier_grid", "fit_classifier_probe"]
