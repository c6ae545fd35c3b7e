"""ridge_path and the probe estimators against scikit-learn and numpy.linalg.lstsq."""

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.model_selection import cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from countlens.probes.metrics import rounded_accuracy
from countlens.probes.ridge import (
    RidgePathProbe,
    RidgeProbe,
    _solve_eigen_gram,
    _solve_svd,
    native_ridge_path,
    ridge_path,
)

ALPHAS = np.array([1e-6, 1e-3, 0.1, 1.0, 10.0, 1e3, 1e5])
# Shapes on both sides of n = d (n > d: thin SVD; n <= d: Gram eigendecomposition), square included.
SHAPES = [(40, 5), (200, 30), (31, 30), (30, 30), (30, 31), (12, 60), (3, 20), (2, 7)]


def _design(n, d, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * rng.uniform(0.2, 5.0, size=d) + rng.normal(size=d) * 3
    y = X @ rng.normal(size=d) + rng.normal(size=n) + 7.0
    return X, y


def _rel(a, b):
    return np.linalg.norm(np.asarray(a) - np.asarray(b)) / max(np.linalg.norm(b), 1e-300)


@pytest.mark.parametrize("n,d", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_ridge_path_matches_sklearn_ridge(n, d, seed):
    X, y = _design(n, d, seed)
    coefs, intercepts = ridge_path(X, y, ALPHAS)
    assert coefs.shape == (len(ALPHAS), d) and intercepts.shape == (len(ALPHAS),)
    for i, alpha in enumerate(ALPHAS):
        ref = Ridge(alpha=alpha, solver="svd").fit(X, y)
        assert _rel(coefs[i], ref.coef_) < 1e-8, (n, d, alpha)
        assert abs(intercepts[i] - ref.intercept_) <= 1e-8 * max(1.0, abs(ref.intercept_))


@pytest.mark.parametrize("n,d", [(200, 30), (40, 5), (12, 60), (3, 20)])
def test_ridge_path_matches_sklearn_default_solver(n, d):
    # Away from n = d the default (Cholesky) solver is accurate to 1e-8 too; at n = d its kernel-form solve
    # loses digits at small alpha, so the square shapes are checked against the SVD solver above.
    X, y = _design(n, d, 3)
    coefs, intercepts = ridge_path(X, y, ALPHAS[1:])
    for i, alpha in enumerate(ALPHAS[1:]):
        ref = Ridge(alpha=alpha).fit(X, y)
        assert _rel(coefs[i], ref.coef_) < 1e-8
        assert abs(intercepts[i] - ref.intercept_) <= 1e-8 * max(1.0, abs(ref.intercept_))


@pytest.mark.parametrize("n,d", SHAPES)
def test_alpha_zero_is_minimum_norm_least_squares(n, d):
    X, y = _design(n, d, 5)
    coefs, intercepts = ridge_path(X, y, [0.0])
    Xc, yc = X - X.mean(axis=0), y - y.mean()
    ref = np.linalg.lstsq(Xc, yc, rcond=None)[0]
    assert _rel(coefs[0], ref) < 1e-8
    assert abs(intercepts[0] - (y.mean() - X.mean(axis=0) @ ref)) < 1e-8 * max(1.0, abs(y.mean()))


@pytest.mark.parametrize("n", [50, 10])
def test_alpha_zero_rank_deficient_design_gives_minimum_norm(n):
    # Duplicated columns: infinitely many least-squares solutions; the minimum-norm one splits weight equally.
    rng = np.random.default_rng(2)
    base = rng.normal(size=(n, 4))
    X = np.hstack([base, base[:, :2]])  # (n, 6), rank 4
    y = base @ np.array([1.0, 2.0, -1.0, 0.5]) + 3.0
    coefs, _ = ridge_path(X, y, [0.0])
    ref = np.linalg.lstsq(X - X.mean(0), y - y.mean(), rcond=None)[0]
    assert _rel(coefs[0], ref) < 1e-8
    if n > 6:  # exact fit exists: weight on the duplicated pair is shared
        np.testing.assert_allclose(coefs[0][[0, 1]], coefs[0][[4, 5]], rtol=1e-8)


@pytest.mark.parametrize("n,d", [(60, 20), (20, 60)])
def test_both_solvers_agree(n, d):
    X, y = _design(n, d, 7)
    Xc, yc = X - X.mean(0), y - y.mean()
    alphas = np.array([0.0, 1e-4, 1.0, 100.0])
    np.testing.assert_allclose(_solve_svd(Xc, yc, alphas), _solve_eigen_gram(Xc, yc, alphas), rtol=1e-7, atol=1e-9)


# Each forced solver on the side it is meant for ("svd" works on both; the Gram and covariance forms square
# the condition number, so they are only accurate where their matrix is the small, full-rank one).
@pytest.mark.parametrize("solver,n,d", [("bidiag", 200, 30), ("bidiag", 12, 60), ("svd", 200, 30), ("svd", 12, 60), ("gram", 12, 60), ("gram", 30, 30),
                                        ("covariance", 200, 30), ("covariance", 40, 5)])
def test_forced_solvers_match_sklearn(solver, n, d):
    X, y = _design(n, d, 8)
    coefs, intercepts = ridge_path(X, y, np.concatenate([[0.0], ALPHAS]), solver=solver)
    Xc, yc = X - X.mean(0), y - y.mean()
    assert _rel(coefs[0], np.linalg.lstsq(Xc, yc, rcond=None)[0]) < 1e-8
    for i, alpha in enumerate(ALPHAS, start=1):
        ref = Ridge(alpha=alpha, solver="svd").fit(X, y)
        assert _rel(coefs[i], ref.coef_) < 1e-8 and abs(intercepts[i] - ref.intercept_) < 1e-8 * abs(ref.intercept_)
    with pytest.raises(ValueError):
        ridge_path(X, y, [1.0], solver="cholesky")


def test_ridge_path_rejects_bad_alphas_and_shapes():
    X, y = _design(10, 3, 0)
    for bad in ([-1.0], [np.nan], []):
        with pytest.raises(ValueError):
            ridge_path(X, y, bad)
    with pytest.raises(ValueError):
        ridge_path(X, y[:-1], [1.0])


def test_native_ridge_path_undoes_standardisation():
    X, y = _design(80, 6, 11)
    X[:, 2] = 4.0  # a constant dimension keeps scale 1 (as StandardScaler does)
    coefs, intercepts, _, alpha_rel = native_ridge_path(X, y, [0.5, 20.0], standardize=True)
    for i, alpha in enumerate([0.5, 20.0]):
        pipe = make_pipeline(StandardScaler(), Ridge(alpha=alpha, solver="svd")).fit(X, y)
        native = pipe[-1].coef_ / pipe[0].scale_
        assert _rel(coefs[i], native) < 1e-8
        np.testing.assert_allclose(X @ coefs[i] + intercepts[i], pipe.predict(X), rtol=1e-10, atol=1e-8)
    # relative alpha = alpha / mean eigenvalue of ZcᵀZc; 5 non-constant standardised columns of variance 1
    np.testing.assert_allclose(alpha_rel, np.array([0.5, 20.0]) / (80 * 5 / 6), rtol=1e-12)
    # relative=True takes the same grid as multiples of that unit
    rel = native_ridge_path(X, y, alpha_rel, standardize=True, relative=True)
    np.testing.assert_allclose(rel.alphas, [0.5, 20.0], rtol=1e-12)
    np.testing.assert_allclose(rel.coefs, coefs, rtol=1e-10)


def test_ridge_probe_is_a_sklearn_estimator():
    X, y = _design(60, 8, 4)
    probe = RidgeProbe(alpha=2.0, standardize=False).fit(X, y)
    ref = Ridge(alpha=2.0, solver="svd").fit(X, y)
    assert _rel(probe.coef_, ref.coef_) < 1e-8 and probe.alpha_ == 2.0
    assert probe.score(X, y) == pytest.approx(r2_score(y, ref.predict(X)), rel=1e-10)
    copy = clone(RidgeProbe(alpha=3.0))
    assert copy.get_params() == {"alpha": 3.0, "standardize": True} and not hasattr(copy, "coef_")
    scores = cross_val_score(make_pipeline(StandardScaler(), RidgeProbe(alpha=1.0)), X, y, cv=3)
    assert scores.shape == (3,) and np.all(scores > 0.5)


def test_ridge_path_probe_selects_like_a_loop_of_ridge_fits():
    rng = np.random.default_rng(9)
    n_rows, d = 300, 12
    counts = rng.integers(0, 40, size=n_rows).astype(float)
    X = np.outer(counts, rng.normal(size=d)) * 0.3 + rng.normal(size=(n_rows, d)) * 0.4
    X_fit, y_fit, X_val, y_val = X[:200], counts[:200], X[200:], counts[200:]
    alphas = np.logspace(-3, 4, 15)
    probe = RidgePathProbe(alphas=alphas, standardize=False).fit(X_fit, y_fit, X_val=X_val, y_val=y_val)
    # brute force: one sklearn fit per alpha, best validation rounded accuracy, ties by validation MSE
    scored = []
    for alpha in alphas:
        pred = Ridge(alpha=alpha, solver="svd").fit(X_fit, y_fit).predict(X_val)
        scored.append((-rounded_accuracy(y_val, pred), np.mean((pred - y_val) ** 2), alpha))
    best = min(scored)
    assert probe.alpha_ == best[2]
    assert probe.val_rounded_acc_.max() == pytest.approx(-best[0])
    ref = Ridge(alpha=best[2], solver="svd").fit(X_fit, y_fit)  # explicit validation data: no refit
    assert _rel(probe.coef_, ref.coef_) < 1e-8
    # internal split + refit on all rows at the selected alpha
    auto = RidgePathProbe(alphas=alphas, standardize=False, random_state=1).fit(X, counts)
    assert _rel(auto.coef_, Ridge(alpha=auto.alpha_, solver="svd").fit(X, counts).coef_) < 1e-8
    assert clone(auto).get_params()["random_state"] == 1
    with pytest.raises(ValueError):
        RidgePathProbe(selection="gcv").fit(X, counts)


# --- the default solver: QR + Golub–Kahan bidiagonalisation + Eldén's O(d) per α --------------------------

def test_lapack_bidiagonalisation_reconstructs_the_matrix():
    from countlens.probes import _lapack

    assert _lapack.available()  # the default solver must not silently fall back in our environment
    rng = np.random.default_rng(0)
    A = rng.normal(size=(9, 9))
    work = np.asfortranarray(A.copy())
    diag, sup, tauq, taup = _lapack.gebrd(work)
    B = np.diag(diag) + np.diag(sup, 1)
    Q = _lapack.ormbr("Q", "N", work, tauq, np.asfortranarray(np.eye(9)))
    P = _lapack.ormbr("P", "N", work, taup, np.asfortranarray(np.eye(9)))
    np.testing.assert_allclose(Q @ B @ P.T, A, atol=1e-12)
    np.testing.assert_allclose(Q.T @ Q, np.eye(9), atol=1e-13)
    np.testing.assert_allclose(_lapack.bidiagonal_singular_values(diag, sup), np.linalg.svd(A, compute_uv=False),
                               rtol=1e-12)


def test_elden_matches_the_stacked_least_squares_problem():
    from countlens.probes.ridge import _elden

    rng = np.random.default_rng(1)
    k = 12
    diag, sup, f = rng.normal(size=k), rng.normal(size=k - 1), rng.normal(size=k)
    diag[3] = 1e-9  # nearly singular B: the small-α solves must stay accurate
    B = np.diag(diag) + np.diag(sup, 1)
    alphas = np.array([1e-10, 1e-4, 1.0, 1e6])
    Z = _elden(diag, sup, f, alphas)
    for i, alpha in enumerate(alphas):  # min ||[B; √α I] z - [f; 0]|| by an independent dense solve
        stacked = np.vstack([B, np.sqrt(alpha) * np.eye(k)])
        ref = np.linalg.lstsq(stacked, np.concatenate([f, np.zeros(k)]), rcond=None)[0]
        assert _rel(Z[:, i], ref) < 1e-9, alpha


@pytest.mark.parametrize("n,d", SHAPES + [(1, 4), (5, 1), (577, 576)])
def test_bidiag_solver_matches_the_svd_solver(n, d):
    X, y = _design(n, d, 12)
    alphas = np.concatenate([[0.0], ALPHAS])
    bidiag, b_int = ridge_path(X, y, alphas, solver="bidiag")
    svd, s_int = ridge_path(X, y, alphas, solver="svd")
    for i in range(len(alphas)):
        assert _rel(bidiag[i], svd[i]) < 1e-9 or np.linalg.norm(bidiag[i] - svd[i]) < 1e-12, (n, d, alphas[i])
    np.testing.assert_allclose(b_int, s_int, rtol=1e-9, atol=1e-9)


def test_bidiag_solver_on_degenerate_designs():
    rng = np.random.default_rng(3)
    y = rng.normal(size=30)
    # a constant design (as at the embeddings location, where every prompt ends on the same token)
    coefs, intercepts = ridge_path(np.full((30, 8), 2.5), y, [0.0, 1e-3, 1.0])
    assert np.all(coefs == 0) and np.allclose(intercepts, y.mean())
    # rank-deficient with n > d at α = 0: minimum norm, like lstsq
    base = rng.normal(size=(30, 3))
    X = np.hstack([base, base @ rng.normal(size=(3, 4))])  # (30, 7), rank 3
    coefs, _ = ridge_path(X, y, [0.0, 1e-3], solver="bidiag")
    ref = np.linalg.lstsq(X - X.mean(0), y - y.mean(), rcond=None)[0]
    assert _rel(coefs[0], ref) < 1e-8
    # (at a tiny α > 0 the rounding-level singular values of the null space would make any solver's answer
    # rounding noise / α in those directions; at 1e-3 the answer is well defined)
    assert _rel(coefs[1], Ridge(alpha=1e-3, solver="svd").fit(X, y).coef_) < 1e-8


def test_bidiag_solver_keeps_precision_where_the_covariance_form_loses_it():
    # condition number ~1e7: forming XcᵀXc squares it (1e14); the orthogonal solvers do not
    rng = np.random.default_rng(4)
    n, d = 300, 20
    U, _ = np.linalg.qr(rng.normal(size=(n, d)))
    V, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X = (U * np.logspace(0, -7, d)) @ V.T
    y = X @ rng.normal(size=d) + 1e-3 * rng.normal(size=n)
    alphas = np.array([0.0, 1e-14, 1e-10])
    ref = [np.linalg.lstsq(X - X.mean(0), y - y.mean(), rcond=None)[0]]
    ref += [Ridge(alpha=a, solver="svd").fit(X, y).coef_ for a in alphas[1:]]
    bidiag, _ = ridge_path(X, y, alphas, solver="bidiag")
    cov, _ = ridge_path(X, y, alphas, solver="covariance")
    assert max(_rel(bidiag[i], ref[i]) for i in range(3)) < 1e-8
    assert max(_rel(cov[i], ref[i]) for i in range(3)) > 1e-6  # the reason it is not the default


def test_without_the_lapack_routines_auto_falls_back_to_svd_and_gram(monkeypatch):
    from countlens.probes import _lapack, ridge

    calls = []
    for name in ("_solve_svd", "_solve_eigen_gram"):
        original = getattr(ridge, name)
        monkeypatch.setattr(ridge, name, lambda *a, _f=original, _n=name: calls.append(_n) or _f(*a))
    monkeypatch.setattr(_lapack, "available", lambda: False)
    for n, d in [(40, 5), (5, 40)]:
        X, y = _design(n, d, 13)
        coefs, _ = ridge_path(X, y, ALPHAS)
        assert _rel(coefs[3], Ridge(alpha=ALPHAS[3], solver="svd").fit(X, y).coef_) < 1e-8
    assert calls == ["_solve_svd", "_solve_eigen_gram"]
    with pytest.raises(ValueError, match="solver='svd'"):
        ridge_path(X, y, ALPHAS, solver="bidiag")


def test_alpha_zero_with_fewer_samples_than_dimensions_needs_no_svd(monkeypatch):
    # centring always costs one rank when n <= d; the solver drops that direction exactly, so generic data
    # reach α = 0 by back-substitution, and only a truly rank-deficient design takes the SVD route
    from countlens.probes import ridge

    def no_svd(*args):
        raise AssertionError("SVD fallback used")

    X, y = _design(12, 60, 14)
    ref = np.linalg.lstsq(X - X.mean(0), y - y.mean(), rcond=None)[0]
    with monkeypatch.context() as patch:
        patch.setattr(ridge, "_svd_coefs", no_svd)
        coefs, _ = ridge_path(X, y, [0.0, 1.0], solver="bidiag")
    assert _rel(coefs[0], ref) < 1e-8
    X[5] = X[4]  # duplicated row: rank 10 after centring
    y[5] = y[4] + 1.0
    coefs, _ = ridge_path(X, y, [0.0], solver="bidiag")
    assert _rel(coefs[0], np.linalg.lstsq(X - X.mean(0), y - y.mean(), rcond=None)[0]) < 1e-8
    with monkeypatch.context() as patch:
        patch.setattr(ridge, "_svd_coefs", no_svd)
        with pytest.raises(AssertionError, match="SVD fallback"):
            ridge_path(X, y, [0.0], solver="bidiag")
