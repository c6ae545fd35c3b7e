"""Ridge regression of the count on a representation, for a whole grid of α from one decomposition.

The ridge problem with an unpenalised intercept,

    min_{w, b}  ||y - X w - b||²  +  α ||w||²,

is solved on the centred design ``Xc = X - mean(X)``: ``w(α) = (Xcᵀ Xc + α I)⁻¹ Xcᵀ yc`` and
``b = mean(y) - mean(X) · w``. One decomposition of ``Xc`` serves every α (as scikit-learn's ``RidgeCV``
does). By default that is a Householder QR followed by a Golub–Kahan bidiagonalisation — the first half of a
thin SVD, with its precision — after which each α costs O(d) (Eldén's method); the thin SVD (and, for
n <= d, ``RidgeCV``'s eigendecomposition of the ``n × n`` Gram matrix) remain as ``solver="svd"`` /
``"gram"``. ``α = 0`` gives the minimum-norm least-squares solution (``numpy.linalg.lstsq``).

:class:`RidgeProbe` and :class:`RidgePathProbe` wrap this as scikit-learn estimators. By default they
standardise every dimension on the training rows first (residual streams have a few dimensions of very large
scale) and report ``coef_`` in the activations' own coordinates, so ``np.linalg.norm(coef_)`` is the probe's
*native* ℓ2 norm and ``predict(X) = X @ coef_ + intercept_``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, RegressorMixin

from countlens.probes import _lapack
from countlens.probes.metrics import rounded_accuracy
from countlens.probes.splits import split_rows

_EPS = np.finfo(np.float64).eps
DEFAULT_ALPHA_GRID = (1e-6, 1e4, 41)  # lo, hi, count: the validation-selected probes' α grid


def log_grid(lo: float, hi: float, count: int) -> tuple[float, ...]:
    """``count`` log-spaced values from ``lo`` to ``hi``, both included (lo, hi > 0)."""
    return tuple(np.logspace(np.log10(lo), np.log10(hi), int(count)).tolist())


DEFAULT_ALPHAS = log_grid(*DEFAULT_ALPHA_GRID)


def _check_alphas(alphas: Sequence[float] | np.ndarray | float) -> np.ndarray:
    alphas = np.atleast_1d(np.asarray(alphas, dtype=np.float64))
    if alphas.ndim != 1 or alphas.size == 0:
        raise ValueError("alphas must be a non-empty 1-D sequence of numbers")
    if not np.all(np.isfinite(alphas)) or np.any(alphas < 0):
        raise ValueError(f"alphas must be finite and >= 0, got {alphas.tolist()}")
    return alphas


def _solve_svd(Xc: np.ndarray, yc: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """Ridge coefficients (A, d) from the thin SVD ``Xc = U diag(s) Vᵀ``.

    ``w(α) = V diag(s / (s² + α)) Uᵀ yc``. At α = 0 singular values below ``eps · max(n, d) · s_max``
    (numpy's ``lstsq`` cut-off) are dropped, which gives the minimum-norm least-squares solution.
    """
    # Householder QR first (Xc = Q R), then the SVD of the small R = U_r diag(s) Vᵀ: the thin SVD of Xc is
    # Q U_r, s, Vᵀ, and Q is never formed — only Qᵀ yc is needed. This is what LAPACK's gesdd does for tall
    # matrices, minus building the (n, d) U, which is the cost saved.
    Qty, R = scipy.linalg.qr_multiply(Xc, yc[None, :], mode="right")  # (1, k), (k, d)
    return _svd_coefs(R, Qty[0], alphas, max(Xc.shape))


def _svd_coefs(R: np.ndarray, c: np.ndarray, alphas: np.ndarray, size: int) -> np.ndarray:
    """Ridge coefficients (A, d) of ``min ||R w - c||² + α ||w||²`` from the SVD of R (k, d); ``size`` is
    ``max(n, d)`` of the original design, for the α = 0 cut-off."""
    U_r, s, Vt = np.linalg.svd(R, full_matrices=False)  # (k, k), (k,), (k, d); k = min(n, d)
    Uty = U_r.T @ c  # (k,)
    cut = _EPS * size * (s[0] if s.size else 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = s[None, :] / (s[None, :] ** 2 + alphas[:, None])  # (A, k)
    zero = alphas == 0
    factors[zero] = np.where(s > cut, 1.0 / np.where(s > cut, s, 1.0), 0.0)[None, :]
    factors[~np.isfinite(factors)] = 0.0  # s = 0 with α > 0 contributes nothing
    return (factors * Uty[None, :]) @ Vt  # (A, d)


def _solve_bidiag(Xc: np.ndarray, yc: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """Ridge coefficients (A, d) by Eldén's method: a Householder QR, then a Golub–Kahan bidiagonalisation.

    n > d: one QR of ``[Xc | yc]`` gives ``Xc = Q R`` and ``c = Qᵀ yc`` together, and the problem becomes
    ``min ||R w - c||² + α ||w||²`` with R (d, d). n <= d: one Householder reflection drops the row that
    centring makes zero, then a QR of the remaining ``(n - 1, d)`` rows' transpose ``= Q₁ R₁`` gives
    ``w = Q₁ v`` with v solving ``min ||R₁ᵀ v - ŷ||² + α ||v||²`` (the ridge solution lies in the row space).
    Xc and yc must be column-centred (as :func:`ridge_path` passes them).
    Either way the square problem is solved for every α by :func:`_square_ridge`. All transformations are
    orthogonal, so the precision is that of the thin-SVD solver (neither ``XcᵀXc`` nor ``XcXcᵀ`` is formed).
    """
    n, d = Xc.shape
    size = max(n, d)
    if d == 0:
        return np.zeros((alphas.size, 0))
    if n > d:
        aug = np.empty((n, d + 1), order="F")  # [Xc | yc]
        aug[:, :d] = Xc
        aug[:, d] = yc
        qr, _ = _geqrf(aug)
        R = np.asfortranarray(np.triu(qr[:d, :d]))  # (d, d)
        return _square_ridge(R, np.array(qr[:d, d]), alphas, size)  # qr[:d, d] = first d entries of Qᵀ yc
    if n == 1:
        return np.zeros((alphas.size, d))  # one centred row is zero
    # Centring makes 1ᵀXc = 0: the reflection H (H 1/√n = e_n) zeroes the last row of H·Xc (and of H·yc), so
    # the problem is exactly the one on the first n - 1 rows, without the direction centring removed (which
    # would otherwise make every α = 0 solve take the rank-deficient route).
    u = np.full(n, 1.0 / np.sqrt(n))
    u[-1] -= 1.0
    scale = 2.0 / (u @ u)
    Xh = np.empty((d, n - 1), order="F")  # (H Xc)[:n-1]ᵀ
    Xh[:] = (Xc[:-1] - scale * np.outer(u[:-1], u @ Xc)).T
    yh = yc[:-1] - scale * u[:-1] * (u @ yc)  # (n - 1,)
    k = n - 1
    qr, tau = _geqrf(Xh)  # (H Xc)[:k]ᵀ (d, k) = Q₁ R₁
    M = np.asfortranarray(np.triu(qr[:k, :k]).T)  # R₁ᵀ (k, k)
    V = np.zeros((d, alphas.size), order="F")
    V[:k] = _square_ridge(M, yh, alphas, size).T  # (k, A)
    lwork = int(scipy.linalg.lapack.dormqr("L", "N", qr, tau, V, -1)[1][0])
    QV, _, info = scipy.linalg.lapack.dormqr("L", "N", qr, tau, V, max(lwork, 1), overwrite_c=True)
    if info != 0:
        raise RuntimeError(f"LAPACK dormqr failed (info = {info})")
    return QV.T  # (A, d) = (Q₁ V)ᵀ


def _geqrf(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Householder QR of a Fortran-ordered float64 ``a`` (overwritten), with LAPACK's optimal workspace
    (scipy's default minimal workspace runs the unblocked algorithm, which is slower)."""
    lwork = int(scipy.linalg.lapack.dgeqrf_lwork(*a.shape)[0])
    qr, tau, _, info = scipy.linalg.lapack.dgeqrf(a, lwork=max(lwork, 1), overwrite_a=True)
    if info != 0:
        raise RuntimeError(f"LAPACK dgeqrf failed (info = {info})")
    return qr, tau


def _square_ridge(M: np.ndarray, c: np.ndarray, alphas: np.ndarray, size: int) -> np.ndarray:
    """Coefficients (A, k) of ``min ||M v - c||² + α ||v||²`` for every α (A,); M (k, k) Fortran-ordered,
    overwritten; ``size`` = max(n, d) of the original design, for the α = 0 cut-off.

    One Golub–Kahan bidiagonalisation ``M = P_l B P_rᵀ`` (the first half of an SVD) turns every problem into
    ``min ||B z - P_lᵀ c||² + α ||z||²`` with ``v = P_r z``, solved in O(k) per α by :func:`_elden`
    (L. Eldén, BIT 17, 1977); the SVD's diagonalisation and its two (k, k) factors are never computed. At
    α = 0: back-substitution when B has full numerical rank (smallest singular value above
    ``eps · size · s_max``, numpy's ``lstsq`` cut-off), else the SVD of M for the minimum-norm solution.
    """
    k = M.shape[0]
    c = np.asarray(c, dtype=np.float64)
    zero = alphas == 0
    M0 = M.copy() if zero.any() else None
    diag, sup, tauq, taup = _lapack.gebrd(M)  # M now holds the reflectors
    f = _lapack.ormbr("Q", "T", M, tauq, np.array(c[:, None], order="F"))[:, 0]  # P_lᵀ c
    Z = np.zeros((k, alphas.size), order="F")
    if (~zero).any():
        Z[:, ~zero] = _elden(diag, sup, f, alphas[~zero])
    full_rank = False
    if zero.any():
        s = _lapack.bidiagonal_singular_values(diag, sup)
        full_rank = bool(s[-1] > _EPS * size * s[0])
        if full_rank:  # B z = f by back-substitution
            ab = np.vstack([np.concatenate([[0.0], sup]), diag])  # upper-banded storage
            Z[:, zero] = scipy.linalg.solve_banded((0, 1), ab, f)[:, None]
    coefs = _lapack.ormbr("P", "N", M, taup, Z).T  # (A, k) = (P_r Z)ᵀ
    if zero.any() and not full_rank:
        coefs[zero] = _svd_coefs(M0, c, np.zeros(1), size)[0]
    return coefs


def _elden(diag: np.ndarray, sup: np.ndarray, f: np.ndarray, alphas: np.ndarray) -> np.ndarray:
    """Solutions Z (d, A) of ``min ||B z - f||² + α ||z||²`` for every α > 0 (A,), B upper bidiagonal with
    diagonal ``diag`` (d,) and superdiagonal ``sup`` (d - 1,).

    Givens rotations reduce ``[B; √α I]`` to an upper bidiagonal R̃ column by column (Eldén 1977): row i of B
    absorbs the √α-row of column i, the fill it leaves in column i + 1 is rotated into the next √α-row; then
    back-substitution. Vectorised over α: O(d) numpy operations on arrays of length A.
    """
    d = diag.size
    mu = np.sqrt(alphas)  # (A,)
    sup = np.concatenate([sup, [0.0]])
    e = mu.copy()  # the √α-row's entry in the current column (grows as fill is rotated in)
    g = np.zeros_like(mu)  # that row's right-hand side
    r_diag, r_sup, rhs = np.empty((d, mu.size)), np.empty((d, mu.size)), np.empty((d, mu.size))
    for i in range(d):
        r = np.hypot(diag[i], e)  # > 0 since e >= √α > 0
        cos, sin = diag[i] / r, e / r
        r_diag[i] = r
        rhs[i] = cos * f[i] + sin * g
        g_rot = cos * g - sin * f[i]
        r_sup[i] = cos * sup[i]
        fill = sin * sup[i]  # the √α-row's entry in column i + 1 (up to sign) after the rotation
        e = np.hypot(fill, mu)  # rotate it into the next √α-row
        g = (-fill / e) * g_rot
    z = np.empty((d, mu.size))
    z[d - 1] = rhs[d - 1] / r_diag[d - 1]
    for i in range(d - 2, -1, -1):
        z[i] = (rhs[i] - r_sup[i] * z[i + 1]) / r_diag[i]
    return z


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

    Faster than the thin SVD for n >> d (one BLAS-3 product and a d × d eigh instead of a QR and an
    SVD), but forming ``XcᵀXc`` squares the condition number — the precision of
    ``sklearn.linear_model.Ridge``'s default Cholesky solver, not that of its SVD solver.
    """
    lam, V = np.linalg.eigh(Xc.T @ Xc)  # (d,), (d, d)
    Vty = V.T @ (Xc.T @ yc)  # (d,)
    cut = _EPS * max(Xc.shape) * max(lam[-1], 0.0)
    denom = lam[None, :] + alphas[:, None]  # (A, d)
    keep = np.where(alphas[:, None] == 0, lam[None, :] > cut, denom > 0)
    return np.where(keep, Vty[None, :] / np.where(keep, denom, 1.0), 0.0) @ V.T  # (A, d)


SOLVERS = ("auto", "bidiag", "svd", "gram", "covariance")


def ridge_path(X: np.ndarray, y: np.ndarray, alphas: Sequence[float] | np.ndarray,
               solver: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Ridge fits for every α from one decomposition of the centred design; intercept not penalised.

    X: (n, d) samples; y: (n,) targets; alphas: (A,) penalties >= 0 (0 = minimum-norm least squares).
    solver: ``"auto"`` = ``"bidiag"`` (a QR and a Golub–Kahan bidiagonalisation, then O(d) per α: the
    precision of the thin SVD at less cost; :func:`_solve_bidiag`), or where scipy's LAPACK does not
    export the routines it needs, the thin SVD when n > d and the eigendecomposition of the n × n Gram matrix
    otherwise (as ``RidgeCV`` chooses). Force ``"svd"`` (thin SVD, any shape), ``"gram"`` (squares the
    condition number) or ``"covariance"`` (eigendecomposition of the d × d ``XcᵀXc``: fastest for n >> d,
    squares the condition number).
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
        solver = "bidiag" if _lapack.available() else ("svd" if n > d else "gram")
    elif solver == "bidiag" and not _lapack.available():
        raise ValueError("solver='bidiag' needs LAPACK dgebrd/dormbr/dlasq1 from scipy.linalg.cython_lapack, "
                         "which this scipy does not export; use solver='svd'")
    solve = {"bidiag": _solve_bidiag, "svd": _solve_svd, "gram": _solve_eigen_gram,
             "covariance": _solve_eigen_covariance}[solver]
    coefs = solve(Xc, yc, alphas)  # (A, d)
    return coefs, y_mean - coefs @ x_mean


def standardisation(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean (d,) and population std (d,) of X; a (near-)constant dimension gets scale 1."""
    mean = X.mean(axis=0)
    scale = X.std(axis=0)
    tiny = scale <= 10 * _EPS * np.maximum(1.0, np.abs(mean))
    return mean, np.where(tiny, 1.0, scale)


class RidgePath(NamedTuple):
    """Probes for every α of a grid, in the inputs' own coordinates: ``X @ coefs[i] + intercepts[i]`` is
    the prediction of probe i. ``coefs`` (A, d), ``intercepts`` (A,), ``alphas`` (A,) the absolute
    penalties, ``alpha_rel`` (A,) the relative ridge coefficients (:func:`penalty_unit`)."""

    coefs: np.ndarray
    intercepts: np.ndarray
    alphas: np.ndarray
    alpha_rel: np.ndarray


def penalty_unit(Z: np.ndarray) -> float:
    """The unit of the *relative ridge coefficient* ``α_rel = α / unit``: the mean eigenvalue of ``ZcᵀZc``,
    ``||Zc||_F² / d``, for the design Z (n, d) the penalty acts on (standardised when the probe standardises)
    and Zc its column-centred rows. For standardised data with no constant dimension the unit is n, so
    ``α_rel = α / n_train``. This is the one definition (Figure 8's colour, the comparison's grid)."""
    Z = np.asarray(Z, dtype=np.float64)
    return float(np.sum((Z - Z.mean(axis=0)) ** 2)) / Z.shape[1]


def native_ridge_path(X: np.ndarray, y: np.ndarray, alphas: Sequence[float] | np.ndarray,
                      standardize: bool = True, relative: bool = False) -> RidgePath:
    """:func:`ridge_path` on standardised X (raw X with ``standardize=False``), mapped back to X's own
    coordinates. X: (n, d), y: (n,), alphas: (A,) absolute penalties, or relative ridge coefficients
    (:func:`penalty_unit`) with ``relative=True``.
    """
    X = np.asarray(X, dtype=np.float64)
    if standardize:
        mean, scale = standardisation(X)
    else:
        mean, scale = X.mean(axis=0), np.ones(X.shape[1])
    Z = (X - mean) / scale  # (n, d)
    given = _check_alphas(alphas)
    unit = penalty_unit(Z)
    if relative:
        absolute, alpha_rel = given * (unit if unit > 0 else 1.0), given
    else:
        absolute = given
        alpha_rel = given / unit if unit > 0 else np.full(len(given), np.inf)
    coefs_z, intercepts_z = ridge_path(Z, y, absolute)
    coefs = coefs_z / scale  # (A, d): ŷ = ((X - μ)/σ)·w_z + b_z = X·(w_z/σ) + b_z - μ·(w_z/σ)
    return RidgePath(coefs, intercepts_z - coefs @ mean, absolute, alpha_rel)


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
        path = native_ridge_path(X, y, [self.alpha], self.standardize)
        self.coef_, self.intercept_ = path.coefs[0], float(path.intercepts[0])
        self.alpha_, self.alpha_rel_ = float(self.alpha), float(path.alpha_rel[0])
        self.n_features_in_ = path.coefs.shape[1]
        return self

    def predict(self, X):
        return np.asarray(X, dtype=np.float64) @ self.coef_ + self.intercept_


class RidgePathProbe(RegressorMixin, BaseEstimator):
    """Ridge probe whose α is chosen from a grid on a validation split, the grid from one decomposition.

    This is the fit → select of every probe countlens reports (Figure 7, the comparison's probe norm):
    fit the whole α path on the training rows, select on the validation rows; the caller scores the
    selected probe on test rows it never showed the estimator.

    Parameters
    ----------
    alphas : sequence of penalties >= 0 (absolute, or relative ridge coefficients with ``relative=True``).
    selection : ``"validation"`` (highest validation rounded exact accuracy, ties broken by lower validation
        mean squared error) or ``"validation-mse"`` (lowest validation mean squared error).
    validation_fraction : share of the rows of ``fit(X, y)`` held out for selection when no explicit
        ``X_val, y_val`` are passed to ``fit`` (drawn by :func:`countlens.probes.split_rows`).
    random_state : seed of that split.
    refit : refit on all rows of ``fit`` at the selected α (as ``RidgeCV`` does); otherwise keep the probe
        fitted on the training part.
    standardize : as in :class:`RidgeProbe`.
    relative : ``alphas`` are relative ridge coefficients (multiples of :func:`penalty_unit` of the
        training design), so one grid serves data of any scale.

    Attributes
    ----------
    coef_, intercept_, alpha_ : the selected probe (native coordinates; ``alpha_`` absolute). coef_path_
    (A, d), intercept_path_ (A,): the probes fitted on the training part. alpha_path_ (A,): absolute
    penalties; alpha_rel_ (A,): relative ridge coefficients. val_rounded_acc_ (A,), val_mse_ (A,):
    validation scores per α; best_index_: the selected grid index; n_train_, n_val_: rows used.
    """

    def __init__(self, alphas=DEFAULT_ALPHAS, selection: str = "validation",
                 validation_fraction: float = 0.25, random_state: int = 0, refit: bool = True,
                 standardize: bool = True, relative: bool = False):
        self.alphas = alphas
        self.selection = selection
        self.validation_fraction = validation_fraction
        self.random_state = random_state
        self.refit = refit
        self.standardize = standardize
        self.relative = relative

    def fit(self, X, y, X_val=None, y_val=None):
        if self.selection not in ("validation", "validation-mse"):
            raise ValueError(f"selection must be 'validation' or 'validation-mse', got {self.selection!r}")
        X = np.asarray(X, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        if X_val is None:
            vf = float(self.validation_fraction)
            train, val, _ = split_rows(len(X), self.random_state, (1.0 - vf, vf, 0.0))
            X_fit, y_fit, X_val, y_val = X[train], y[train], X[val], y[val]
        else:
            X_fit, y_fit = X, y
            X_val, y_val = np.asarray(X_val, dtype=np.float64), np.asarray(y_val, dtype=np.float64)
        path = native_ridge_path(X_fit, y_fit, self.alphas, self.standardize, self.relative)
        pred = X_val @ path.coefs.T + path.intercepts  # (n_val, A)
        self.val_rounded_acc_ = np.array([rounded_accuracy(y_val, pred[:, i]) for i in range(pred.shape[1])])
        self.val_mse_ = np.mean((pred - y_val[:, None]) ** 2, axis=0)
        best = select_alpha(self.val_rounded_acc_, self.val_mse_, self.selection)
        self.alpha_, self.alpha_path_, self.alpha_rel_ = float(path.alphas[best]), path.alphas, path.alpha_rel
        self.best_index_ = best
        self.coef_path_, self.intercept_path_ = path.coefs, path.intercepts
        self.n_train_, self.n_val_ = len(y_fit), len(y_val)
        if self.refit and X_fit is not X:
            refit = native_ridge_path(X, y, [self.alpha_], self.standardize)
            self.coef_, self.intercept_ = refit.coefs[0], float(refit.intercepts[0])
        else:
            self.coef_, self.intercept_ = path.coefs[best], float(path.intercepts[best])
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
