"""Figure 8: the regularisation–norm sweep. :class:`SweepConfig` → :func:`run_sweep` → :class:`SweepResult`:
at one location, every α's probe of the path (fitted as Figure 7's, :mod:`countlens.probes.probe`) scored on
the test rows — no selection: it draws the trade-off, it does not pick a probe — and the unregularised one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import about
from countlens.core.locations import first_block_location, location_label, resolve_location
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import blas_threads
from countlens.probes.data import ProbeData, load_probe_data
from countlens.probes.metrics import (
    native_norm,
    rounded_accuracy,
)
from countlens.probes.probe import DEFAULT_BLAS_THREADS, DEFAULT_SEEDS, check_probe_fields
from countlens.probes.ridge import (
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
        check_probe_fields(self)


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
    return SweepResult(config=protocol, source=data.source(), location=data.locations[index],
                       location_index=int(index), seeds=per_seed, provenance=result_provenance(config))


declare(Experiment(
    "probe-sweep", "Figure 8: regularisation–norm sweep", SweepConfig, run_sweep, SweepResult, order=130,
    figure="countlens.probes.figures:draw_sweep", plot="countlens.probes.figures:plot_norm_sweep", view="countlens.probes.figures:sweep_view", reads={"acts": "capture"},
    presets={"quick": SweepConfig, "full": SweepConfig, "test": SweepConfig}))


__all__ = ["DEFAULT_SWEEP_ALPHA_GRID", "DEFAULT_SWEEP_ALPHAS", "SweepConfig", "SweepSeed", "SweepResult",
           "sweep_seed", "run_sweep"]
