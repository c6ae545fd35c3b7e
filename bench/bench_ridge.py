"""Benchmark: the whole-α ridge path from one decomposition vs what a user would otherwise run.

Per location, all α of the grid:
  ours  countlens.probes.ridge_path, default solver (one QR + one Golub–Kahan bidiagonalisation per
        location, then O(d) per α); also timed: solver="svd" (thin SVD) and solver="covariance"
  (a)   a loop of sklearn.linear_model.Ridge(alpha).fit, one per α (default solver)
  (b)   sklearn.linear_model.RidgeCV(alphas, store_cv_results=True) (one decomposition, but only the
        selected α's coefficients come back)
Coefficients are compared with (a) at every α and with (b) at RidgeCV's selected α (max relative ℓ2
difference). All three run in this one process, one after another, on the same arrays.

    python bench/bench_ridge.py                      # synthetic: 2,000 x 576 x 31 locations x 41 α
    python bench/bench_ridge.py --acts DIR           # a real capture (all its rows and locations)
    python bench/bench_ridge.py --acts DIR --rows 400   # its first 400 rows (n <= d: also times solver="gram")
    python bench/bench_ridge.py --locations 4        # quicker, fewer locations
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np
from record import this_command, write_row  # bench/ is on sys.path when run as a script
from sklearn.linear_model import Ridge, RidgeCV

from countlens.probes.data import load_probe_data
from countlens.probes.ridge import ridge_path


def synthetic(rows: int, dim: int, locations: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """LLM-shaped data: (locations, rows, dim) with a count direction, anisotropic noise and a few
    massive dimensions (as residual streams have), and counts 0..100."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(0, 101, size=rows).astype(np.float64)
    X = np.empty((locations, rows, dim))
    for loc in range(locations):
        scales = np.exp(rng.normal(size=dim))
        scales[rng.choice(dim, 3, replace=False)] *= 50.0
        X[loc] = rng.normal(size=(rows, dim)) * scales + np.outer(np.sqrt(counts), rng.normal(size=dim))
    return X, counts


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=None,
                        help="rows (synthetic, default 2000; with --acts: the first ROWS rows)")
    parser.add_argument("--dim", type=int, default=576)
    parser.add_argument("--locations", type=int, default=31)
    parser.add_argument("--alphas", default="1e-6:1e4:41", help="lo:hi:count log grid")
    parser.add_argument("--acts", default=None, help="a capture folder instead of synthetic data")
    parser.add_argument("--json", default=None, help="write the measurements here")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads for all three (default: as set)")
    args = parser.parse_args()
    if args.threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
    lo, hi, count = args.alphas.split(":")
    alphas = np.logspace(np.log10(float(lo)), np.log10(float(hi)), int(count))
    if args.acts:
        data = load_probe_data(args.acts)
        n_loc = min(args.locations, len(data.locations))
        rows = slice(None, args.rows)
        X = np.stack([data.X(i)[rows] for i in range(n_loc)])  # (locations, rows, d)
        y, source = data.n[rows], f"capture {args.acts}"
    else:
        X, y = synthetic(args.rows or 2000, args.dim, args.locations)
        source = "synthetic"
    n_loc, rows, dim = X.shape
    print(f"{source}: {rows} rows x {dim} dims x {n_loc} locations x {len(alphas)} alphas")

    def timed(label, fit):
        print(f"timing {label} ...", flush=True)
        t0 = time.perf_counter()
        result = [fit(loc) for loc in range(n_loc)]
        seconds = time.perf_counter() - t0
        print(f"  {seconds:.2f} s", flush=True)
        return result, seconds

    ours, t_ours = timed("ridge_path", lambda loc: ridge_path(X[loc], y, alphas))
    ours_svd, t_svd = timed("ridge_path(solver='svd')", lambda loc: ridge_path(X[loc], y, alphas, solver="svd"))
    ours_cov, t_cov = timed("ridge_path(solver='covariance')",
                            lambda loc: ridge_path(X[loc], y, alphas, solver="covariance"))
    ours_gram, t_gram = None, None
    if rows <= dim:  # the other one-decomposition choice there: RidgeCV's eigendecomposition of the Gram matrix
        ours_gram, t_gram = timed("ridge_path(solver='gram')",
                                  lambda loc: ridge_path(X[loc], y, alphas, solver="gram"))
    loop, t_loop = timed("the sklearn Ridge loop", lambda loc: [Ridge(alpha=a).fit(X[loc], y) for a in alphas])
    cv, t_cv = timed("RidgeCV", lambda loc: RidgeCV(alphas=alphas, store_cv_results=True).fit(X[loc], y))

    diff_loop = max(rel(ours[loc][0][i], loop[loc][i].coef_) for loc in range(n_loc) for i in range(len(alphas)))
    diff_cv = max(rel(ours[loc][0][int(np.flatnonzero(alphas == cv[loc].alpha_)[0])], cv[loc].coef_)
                  for loc in range(n_loc))
    diff_cov = max(rel(ours_cov[loc][0][i], loop[loc][i].coef_) for loc in range(n_loc) for i in range(len(alphas)))
    diff_ours_svd = max(rel(ours[loc][0][i], ours_svd[loc][0][i]) for loc in range(n_loc) for i in range(len(alphas)))
    # Ridge's default (Cholesky) solve loses digits at small α on ill-conditioned data; its SVD solver is the
    # accuracy reference there: compare at every location for the smallest, middle and largest α.
    picks = sorted({0, len(alphas) // 2, len(alphas) - 1})
    svd_ref = {(loc, i): Ridge(alpha=alphas[i], solver="svd").fit(X[loc], y).coef_ for loc in range(n_loc)
               for i in picks}
    diff_svd = max(rel(ours[loc][0][i], ref) for (loc, i), ref in svd_ref.items())
    diff_cov_svd = max(rel(ours_cov[loc][0][i], ref) for (loc, i), ref in svd_ref.items())
    diff_gram_svd = None if ours_gram is None else max(rel(ours_gram[loc][0][i], ref)
                                                       for (loc, i), ref in svd_ref.items())
    loop_vs_svd = max(rel(loop[loc][i].coef_, ref) for (loc, i), ref in svd_ref.items())  # the loop's own error
    by_alpha = [max(rel(ours[loc][0][i], loop[loc][i].coef_) for loc in range(n_loc)) for i in range(len(alphas))]
    out = {
        "source": source, "rows": rows, "dim": dim, "locations": n_loc, "alphas": len(alphas),
        "seconds": {"ridge_path": t_ours, "ridge_path_svd": t_svd, "ridge_path_covariance": t_cov,
                    "sklearn_ridge_loop": t_loop, "sklearn_ridgecv": t_cv},
        "speedup_vs_ridge_loop": t_loop / t_ours, "speedup_vs_ridgecv": t_cv / t_ours,
        "svd_speedup_vs_ridge_loop": t_loop / t_svd, "max_rel_coef_diff_default_vs_svd_solver": diff_ours_svd,
        "covariance_speedup_vs_ridge_loop": t_loop / t_cov,
        "max_rel_coef_diff_vs_ridge_loop": diff_loop, "max_rel_coef_diff_vs_ridgecv": diff_cv,
        "max_rel_coef_diff_vs_ridge_svd": diff_svd, "covariance_max_rel_coef_diff_vs_ridge_loop": diff_cov,
        "covariance_max_rel_coef_diff_vs_ridge_svd": diff_cov_svd,
        "ridge_loop_max_rel_coef_diff_vs_ridge_svd": loop_vs_svd,
        "gram_seconds": t_gram, "gram_max_rel_coef_diff_vs_ridge_svd": diff_gram_svd,
        "max_rel_coef_diff_vs_ridge_loop_by_alpha": dict(zip(map(float, alphas), by_alpha, strict=True)),
        "blas_threads": args.threads or "default",
        "machine": f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} cpus",
    }
    print(f"ridge_path          {t_ours:8.2f} s")
    print(f"sklearn Ridge loop  {t_loop:8.2f} s   ratio {t_loop / t_ours:6.1f}x   max rel coef diff {diff_loop:.1e}")
    print(f"sklearn RidgeCV     {t_cv:8.2f} s   ratio {t_cv / t_ours:6.1f}x   max rel coef diff {diff_cv:.1e} "
          "(at its selected alpha)")
    print(f"ridge_path(solver='svd')        {t_svd:8.2f} s   ratio vs loop {t_loop / t_svd:6.1f}x   "
          f"max rel coef diff vs default {diff_ours_svd:.1e}")
    print(f"ridge_path(solver='covariance') {t_cov:8.2f} s   ratio vs loop {t_loop / t_cov:6.1f}x   "
          f"max rel coef diff vs loop {diff_cov:.1e}")
    print(f"vs Ridge(solver='svd') at every location, alphas {[float(alphas[i]) for i in picks]}: max rel coef "
          f"diff {diff_svd:.1e} (ours), {diff_cov_svd:.1e} (covariance), {loop_vs_svd:.1e} (the Ridge loop)")
    if ours_gram is not None:
        print(f"ridge_path(solver='gram')       {t_gram:8.2f} s   ratio vs loop {t_loop / t_gram:6.1f}x   "
              f"max rel coef diff vs Ridge(solver='svd') {diff_gram_svd:.1e}")
    above = [float(a) for a, diff in zip(alphas, by_alpha, strict=True) if diff > 1e-8]
    print(f"alphas where ours and the Ridge loop differ by more than 1e-8: {above or 'none'}")
    what = (f"ridge path, {n_loc} locations × {len(alphas)} α ({rows:,} × {dim} "
            f"{'capture ' + str(args.acts) if args.acts else 'synthetic LLM-shaped data'})")
    write_row("bench_ridge", "path", what=what, countlens=f"`ridge_path`: one decomposition for every α, {t_ours:.2f} s",
              baseline=f"a loop of sklearn `Ridge` ({t_loop:.1f} s)", ratio=f"{t_loop / t_ours:.1f}×",
              note=f"BLAS threads: {args.threads or 'default'}; coefficients equal to {diff_loop:.0e}; "
                   f"{t_cv / t_ours:.1f}× `RidgeCV`", command=this_command())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
