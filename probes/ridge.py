"""Ridge regression of the count on a representation, for a whole grid of α from one decomposition.

The ridge problem with an unpenalised intercept,

    min_{w, b}  ||y - X w - b||²  +  α ||w||²,

is solved on the centred design ``Xc = X - mean(X)``: ``w(α) = (Xcᵀ Xc + α I)⁻¹ Xcᵀ yc`` and
``b = mean(y) - mean(X) · w``. One decomposition of ``Xc`` serves every α (as scikit-learn's ``RidgeCV``
does): a thin SVD when there are more samples than dimensions, an eigendecomposition of the ``n × n`` Gram
matrix otherwise. ``α = 0`` gives the minimum-norm least-squares solution (``numpy.linalg.lstsq``).

:class:`RidgeProbe` and :class:`RidgePathProbe` wrap this as scikit-learn estimators. By default they
standardise every dimension on the training rows first (residual streams have a few dimensions of very large
scale) and report ``coef_`` in the activations' own coordinates, so ``np.linalg.norm(coef_)`` is the probe's
*native* ℓ2 norm and ``predict(X) = X @ coef_ + intercept_``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, RegressorMixin

from countlens.probes.metrics import rounded_accuracy

_EPS = np.finfo(np.float64).eps
DEFAULT_ALPHAS = tuple(np.logspace(-6, 4, 41).tolist())


def _check_alphas(alphas: Sequence[float] | np.ndarray | float) -> np.ndarray:
    alphas = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if alphas.ndim != 1 or alphas.size == 0:
        raise ValueError("alphas must be a non-empty 1-D sequence of numbers")
    if not np.all(np.isfinite(alphas)) or np.any(alphas < 0):
        raise ValueError(f"alphas must be finite and >= 0, got {alphas.tolist()}")
    return alphas


def _solve_svd(Xc: np.ndarray, yc: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """Ridge coefficients (A, d) from the thin SVD ``Xc = U diag(s) Vᵀ``; used when n > d.

    ``w(α) = V diag(s / (s² + α)) Uᵀ yc``. At α = 0 singular values below ``eps · max(n, d) · s_max``
    (numpy's ``lstsq`` cut-off) are dropped, which gives the minimum-norm least-squares solution.
    """
    # Householder QR first (Xc = Q R), then the SVD of the small R = U_r diag(s) Vᵀ: the thin SVD of Xc is
    # Q U_r, s, Vᵀ, and Q is never formed — only Qᵀ yc is needed. This is what LAPACK's gesdd does for tall
    # matrices, minus building the (n, d) U; about twice as fast at 2,000 x 576.
    Qty, R = scipy.linalg.qr_multiply(Xc, yc[None, :], mode="right")  # (1, k), (k, d)
    U_r, s, Vt = np.linalg.svd(R, full_matrices=False)  # (k, k), (k,), (k, d); k = min(n, d)
    Uty = U_r.T @ Qty[0]  # (k,)
    cut = _EPS * max(Xc.shape) * (s[0] if s.size else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = s[None, :] / (s[None, :] ** 2 + alphas[:, None])  # (A, k)
    zero = alphas == 0
    factors[zero] = np.where(s > cut, 1.0 / np.where(s > cut, s, 1.0), 0.0)[None, :]
    factors[~np.isfinite(factors)] = 0.0  # s = 0 with α > 0 contributes nothing
    return (factors * Uty[None, :]) @ Vt  # (A, d)


def _solve_eigen_gram(Xc: np.ndarray, yc: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """Ridge coefficients (A, d) from ``Xc Xcᵀ = Q diag(λ) Qᵀ``; used when n <= d (the dual form).

    ``w(α) = Xcᵀ Q diag(1 / (λ + α)) Qᵀ yc``. At α = 0 eigenvalues below ``eps · max(n, d) · λ_max`` are
    treated as zero (the centred design always has one), which gives the minimum-norm solution.
    """
    lam, Q = np.linalg.eigh(Xc @ Xc.T)  # (n,), (n, n)
    Qty = Q.T @ yc  # (n,)
    cut = _EPS * max(Xc.shape) * max(lam[-1], 0.0)
    denom = lam[None, :] + alphas[:, None]  # (A, n)
    keep = np.where(alphas[:, None] == 0, lam[None, :] > cut, denom > 0)
    dual = np.where(keep, Qty[None, :] / np.where(keep, denom, 1.0), 0.0)  # (A, n)
    return (dual @ Q.T) @ Xc  # (A, d)


def _solve_eigen_covariance(Xc: np.ndarray, yc: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """Ridge coefficients (A, d) from ``Xcᵀ Xc = V diag(λ) Vᵀ`` (the d × d covariance); opt-in for n >> d.

    About twice as fast as the thin SVD at 2,000 x 576 (one BLAS-3 product and a d × d eigh instead of a
    QR and an SVD), but forming ``XcᵀXc`` squares the condition number — the precision of
    ``sklearn.linear_model.Ridge``'s default Cholesky solver, not that of its SVD solver.
    """
    lam, V = np.linalg.eigh(Xc.T @ Xc)  # (d,), (d, d)
    Vty = V.T @ (Xc.T @ yc)  # (d,)
    cut = _EPS * max(Xc.shape) * max(lam[-1], 0.0)
    denom = lam[None, :] + alphas[:, None]  # (A, d)
    keep = np.where(alphas[:, None] == 0, lam[None, :] > cut, denom > 0)
    return np.where(keep, Vty[None, :] / np.where(keep, denom, 1.0), 0.0) @ V.T  # (A, d)


SOLVERS = ("auto", "svd", "gram", "covariance")


def ridge_path(X: np.ndarray, y: np.ndarray, alphas: Sequence[float] | np.ndarray,
               solver: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Ridge fits for every α from one decomposition of the centred design; intercept not penalised.

    X: (n, d) samples; y: (n,) targets; alphas: (A,) penalties >= 0 (0 = minimum-norm least squares).
    solver: ``"auto"`` (thin SVD when n > d, eigendecomposition of the n × n Gram matrix otherwise, as
    ``RidgeCV`` chooses), or force ``"svd"``, ``"gram"``, or ``"covariance"`` (eigendecomposition of the
    d × d ``XcᵀXc``: faster for n >> d, squares the condition number).
    Returns ``coefs`` (A, d) and ``intercepts`` (A,), float64, such that ``X @ coefs[i] + intercepts[i]``
    equals ``sklearn.linear_model.Ridge(alpha=alphas[i]).fit(X, y).predict(X)``.
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if X.ndim != 2 or y.shape != (X.shape[0],) or X.shape[0] < 1:
        raise ValueError(f"X must be (n, d) and y (n,), got {X.shape} and {y.shape}")
    alphas = _check_alphas(alphas)
    x_mean = X.mean(axis=0)  # (d,)
    y_mean = y.mean()
    Xc, yc = X - x_mean, y - y_mean
    n, d = X.shape
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {', '.join(SOLVERS)}, got {solver!r}")
    if solver == "auto":
        solver = "svd" if n > d else "gram"
    solve = {"svd": _solve_svd, "gram": _solve_eigen_gram, "covariance": _solve_eigen_covariance}[solver]
    coefs = solve(Xc, yc, alphas)  # (A, d)
    return coefs, y_mean - coefs @ x_mean


def standardisation(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean (d,) and population std (d,) of X; a (near-)constant dimension gets scale 1."""
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    tiny = scale <= 10 * _EPS * np.maximum(1.0, np.abs(mean))
    return mean, np.where(tiny, 1.0, scale)


def native_ridge_path(X: np.ndarray, y: np.ndarray, alphas: Sequence[float] | np.ndarray,
                      standardize: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`ridge_path` on standardised X (raw X with ``standardize=False``), mapped back to X's own
    coordinates.

    Returns ``coefs`` (A, d) and ``intercepts`` (A,) with ``X @ coefs[i] + intercepts[i]`` the prediction,
    and ``alpha_rel`` (A,): each α divided by the mean eigenvalue of the centred (standardised) design's
    ``ZᵀZ``, i.e. ``α · d / ||Zc||_F²`` — the *relative ridge coefficient* of Figure 8 (α / n_train for
    standardised data with no constant dimension).
    """
    X = np.asarray(X, dtype=np.float64)
    if standardize:
        mean, scale = standardisation(X)
    else:
        mean, scale = X.mean(axis=0), np.ones(X.shape[1])
    Z = (X - mean) / scale  # (n, d)
    coefs_z, intercepts_z = ridge_path(Z, y, alphas)
    coefs = coefs_z / scale  # (A, d): ŷ = ((X - μ)/σ)·w_z + b_z = X·(w_z/σ) + b_z - μ·(w_z/σ)
    intercepts = intercepts_z - coefs @ mean
    mean_eig = float(np.sum((Z - Z.mean(axis=0)) ** 2)) / Z.shape[1]
    alpha_rel = _check_alphas(alphas) / mean_eig if mean_eig > 0 else np.full(len(coefs), np.inf)
    return coefs, intercepts, alpha_rel


class RidgeProbe(RegressorMixin, BaseEstimator):
    """Ridge regression probe at one α (intercept not penalised), optionally on standardised inputs.

    Parameters
    ----------
    alpha : float, penalty >= 0 (0 = minimum-norm least squares).
    standardize : bool, z-score every dimension on the training rows before fitting; ``coef_`` is always
        reported in the inputs' own coordinates.

    Attributes
    ----------
    coef_ : (d,) native coefficients; ``np.linalg.norm(coef_)`` is the native ℓ2 norm.
    intercept_ : float. alpha_ : float (= alpha).
    """

    def __init__(self, alpha: float = 1.0, standardize: bool = True):
        self.alpha = alpha
        self.standardize = standardize

    def fit(self, X, y):
        coefs, intercepts, alpha_rel = native_ridge_path(X, y, [self.alpha], self.standardize)
        self.coef_, self.intercept_ = coefs[0], float(intercepts[0])
        self.alpha_, self.alpha_rel_ = float(self.alpha), float(alpha_rel[0])
        self.n_features_in_ = coefs.shape[1]
        return self

    def predict(self, X):
        return np.asarray(X, dtype=np.float64) @ self.coef_ + self.intercept_


class RidgePathProbe(RegressorMixin, BaseEstimator):
    """Ridge probe whose α is chosen from a grid on a validation split, the grid from one decomposition.

    Parameters
    ----------
    alphas : sequence of penalties >= 0.
    selection : ``"validation"`` (highest validation rounded exact accuracy, ties broken by lower validation
        mean squared error) or ``"validation-mse"`` (lowest validation mean squared error).
    validation_fraction : share of the rows of ``fit(X, y)`` held out for selection when no explicit
        ``X_val, y_val`` are passed to ``fit``.
    random_state : seed of that split.
    refit : refit on all rows of ``fit`` at the selected α (as ``RidgeCV`` does); otherwise keep the probe
        fitted on the training part.
    standardize : as in :class:`RidgeProbe`.

    Attributes
    ----------
    coef_, intercept_, alpha_ : the selected probe (native coordinates). coef_path_ (A, d),
    intercept_path_ (A,): the probes fitted on the training part. alpha_rel_ (A,): relative ridge
    coefficients. val_rounded_acc_ (A,), val_mse_ (A,): validation scores per α.
    """

    def __init__(self, alphas=DEFAULT_ALPHAS, selection: str = "validation",
                 validation_fraction: float = 0.25, random_state: int = 0, refit: bool = True,
                 standardize: bool = True):
        self.alphas = alphas
        self.selection = selection
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.refit = refit
        self.standardize = standardize

    def fit(self, X, y, X_val=None, y_val=None):
        if self.selection not in ("validation", "validation-mse"):
            raise ValueError(f"selection must be 'validation' or 'validation-mse', got {self.selection!r}")
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X_val is None:
            n_val = int(round(self.validation_fraction * len(X)))
            if not 1 <= n_val <= len(X) - 2:
                raise ValueError(f"{len(X)} rows cannot be split with validation_fraction="
                                 f"{self.validation_fraction}")
            order = np.random.default_rng(self.random_state).permutation(len(X))
            X_fit, y_fit = X[order[n_val:]], y[order[n_val:]]
            X_val, y_val = X[order[:n_val]], y[order[:n_val]]
        else:
            X_fit, y_fit = X, y
            X_val, y_val = np.asarray(X_val, dtype=np.float64), np.asarray(y_val, dtype=np.float64)
        coefs, intercepts, alpha_rel = native_ridge_path(X_fit, y_fit, self.alphas, self.standardize)
        pred = X_val @ coefs.T + intercepts  # (n_val, A)
        self.val_rounded_acc_ = np.array([rounded_accuracy(y_val, pred[:, i]) for i in range(pred.shape[1])])
        self.val_mse_ = np.mean((pred - y_val[:, None]) ** 2, axis=0)
        best = select_alpha(self.val_rounded_acc_, self.val_mse_, self.selection)
        alphas = _check_alphas(self.alphas)
        self.alpha_, self.alpha_rel_ = float(alphas[best]), alpha_rel
        self.best_index_ = best
        self.coef_path_, self.intercept_path_ = coefs, intercepts
        if self.refit and X_fit is not X:
            c, b, _ = native_ridge_path(X, y, [self.alpha_], self.standardize)
            self.coef_, self.intercept_ = c[0], float(b[0])
        else:
            self.coef_, self.intercept_ = coefs[best], float(intercepts[best])
        self.n_features_in_ = X.shape[1]
        return self

    def predict(self, X):
        return np.asarray(X, dtype=np.float64) @ self.coef_ + self.intercept_


def select_alpha(val_rounded_acc: np.ndarray, val_mse: np.ndarray, selection: str = "validation") -> int:
    """Index of the selected α: best validation rounded accuracy, ties by lower MSE (``"validation"``),
    or lowest MSE (``"validation-mse"``). A remaining exact tie goes to the first grid index."""
    if selection == "validation-mse":
        return int(np.argmin(val_mse))
    return int(np.lexsort((val_mse, -np.asarray(val_rounded_acc)))[0])
