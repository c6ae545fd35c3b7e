"""The training experiments: Table 2, Table 3's "attained" column, and Figures 2, 3 and 4.

Each experiment composes :func:`countlens.toy.train.train` runs and returns one result dataclass that
serialises to JSON (``to_dict``) and carries what its figure needs, so a figure is redrawn from the JSON alone
(:mod:`countlens.toy.train_figures`). Sizes come in two presets: ``quick`` (the default, minutes on a laptop
core) and ``full`` (the paper's grid; the paper's 20M/100M steps are far beyond a CPU, so the step counts are
ours and recorded in every result). Every finished run is cached in a folder (``RunCache``), so an
interrupted experiment resumes where it stopped when rerun with the same settings.

A diverged run (NaN/inf) never contributes numbers: it is listed under ``diverged`` with its step.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from countlens.io import read_json, write_json_atomic
from countlens.toy.check import full_domain_check
from countlens.toy.classification import (
    arc_angle,
    classifier_construction,
    min_gap_by_count,
    storage_cost,
)
from countlens.toy.model import ToyConfig, ToyParams
from countlens.toy.train import TrainConfig, TrainingDiverged, TrainResult, train

# Theory rates of B_min(L) (SPEC §1, Table 1), used to normalise Figure 3's parameter scale.
RATE_EXPONENT = {"linear": 0.0, "linear-preln-bare": 0.0, "softmax": 1.0, "softmax-preln-learned": 1.0,
                 "softmax-postln-learned": 0.75, "softmax-postln-bare": 1.5}
TABLE3_VARIANTS = ("softmax", "softmax-postln-bare", "softmax-postln-learned")
# The grid of lengths the paper's attained column reports (Table 3).
PAPER_GRID = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


class RunCache:
    """Finished runs as JSON files in ``folder``, keyed by everything that determines them."""

    def __init__(self, folder: str | Path | None):
        self.folder = Path(folder) if folder is not None else None

    def _path(self, key: dict[str, Any]) -> Path | None:
        if self.folder is None:
            return None
        digest = hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:20]
        return self.folder / f"run-{digest}.json"

    def get(self, key: dict[str, Any]) -> dict[str, Any] | None:
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        data = read_json(path, "cached run")
        return data if data.get("key") == json.loads(json.dumps(key, default=str)) else None

    def put(self, key: dict[str, Any], value: dict[str, Any]) -> None:
        path = self._path(key)
        if path is not None:
            write_json_atomic(path, {"key": key, **value})


def run_cached(cfg: ToyConfig, tcfg: TrainConfig, cache: RunCache, init: ToyParams | None = None,
               init_key: str | None = None, progress: bool = False) -> TrainResult | dict[str, Any]:
    """One training run, from the cache if it finished before. Returns the TrainResult, or
    ``{"diverged_at_step": s, "reason": ...}`` when it diverged (cached too: a rerun diverges the same way)."""
    key = {"cfg": [cfg.variant, cfg.d, cfg.L, cfg.readout, cfg.tau, cfg.eps], "train": asdict(tcfg),
           "init": init_key}
    hit = cache.get(key)
    if hit is not None:
        hit.pop("key")
        return hit if "diverged_at_step" in hit else TrainResult.from_dict(hit)
    try:
        result = train(cfg, tcfg, init=init, progress=progress)
    except TrainingDiverged as exc:
        out = {"diverged_at_step": exc.step, "reason": exc.what}
        cache.put(key, out)
        return out
    cache.put(key, result.to_dict())
    return result


def _summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "min": None, "max": None}
    return {"mean": float(np.mean(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def _run_row(r: TrainResult) -> dict[str, Any]:
    return {"seed": r.train["seed"], "steps_run": r.steps_run, "test_exact_accuracy": r.test_exact_accuracy,
            "full_domain_worst_error": r.full_domain_worst_error, "worst_pair": r.worst_pair,
            "passed": r.passed, "max_norm": r.max_norm}


# --- Table 2 ---------------------------------------------------------------------------------------------


@dataclass
class Table2Result:
    """Softmax without LN: test exact accuracy and full-domain worst error, mean [min, max] over seeds."""

    variant: str
    optimizer: str
    rows: list[dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def format(self) -> str:
        """The table as text, in the paper's layout."""
        def cell(s: dict[str, float | None], fmt: str) -> str:
            if s["mean"] is None:
                return "n/a"
            return f"{s['mean']:{fmt}} [{s['min']:{fmt}}, {s['max']:{fmt}}]"

        lines = [f"{'d':>3} {'L':>5} {'steps':>7}  {'test exact accuracy':<28} full-domain worst error"]
        for r in self.rows:
            line = (f"{r['d']:>3} {r['L']:>5} {r['steps']:>7}  {cell(r['test_exact_accuracy'], '.4f'):<28} "
                    f"{cell(r['full_domain_worst_error'], '.3f')}")
            if r["diverged"]:
                line += f"  ({len(r['diverged'])} seed(s) diverged)"
            lines.append(line)
        return "\n".join(lines)


def table2(ds: list[int], Ls: list[int], seeds: list[int], steps: int | dict[int, int], optimizer: str = "lbfgs",
           variant: str = "softmax", cache: RunCache | None = None, progress: bool = False,
           **train_kw: Any) -> Table2Result:
    """Train ``variant`` (regression) at every ``(d, L)`` for each seed. ``steps``: one count, or per L."""
    cache = cache or RunCache(None)
    rows = []
    for d in ds:
        for L in Ls:
            n_steps = steps[L] if isinstance(steps, dict) else steps
            runs, diverged = [], []
            for seed in seeds:
                tcfg = TrainConfig(optimizer=optimizer, steps=n_steps, seed=seed, **train_kw)
                r = run_cached(ToyConfig(variant, d, L), tcfg, cache, progress=progress)
                if isinstance(r, dict):
                    diverged.append({"seed": seed, **r})
                else:
                    runs.append(_run_row(r))
            rows.append({"d": d, "L": L, "steps": n_steps, "seeds": seeds, "runs": runs, "diverged": diverged,
                         "test_exact_accuracy": _summary([r["test_exact_accuracy"] for r in runs]),
                         "full_domain_worst_error": _summary([r["full_domain_worst_error"] for r in runs])})
    return Table2Result(variant=variant, optimizer=optimizer, rows=rows)


# --- Table 3, attained column -----------------------------------------------------------------------------


@dataclass
class AttainedResult:
    """Per variant and cap B: the largest grid length that passed the full-domain check after training
    under the cap (``attained``; 0 when even the smallest failed) and the next grid point, which failed
    (``attained_next_failing``; ``None`` when the grid ran out first, so the value is a bound from below)."""

    d: int
    grid: list[int]
    seeds: list[int]
    steps: int
    optimizer: str
    variants: dict[str, dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def attained_length(variant: str, B: float, d: int, grid: list[int], seeds: list[int], steps: int,
                    optimizer: str = "lbfgs", cache: RunCache | None = None, progress: bool = False,
                    **train_kw: Any) -> dict[str, Any]:
    """Climb ``grid`` at cap ``B``: train each length (every seed, until one passes; each seed starts from
    the previous length's passing solution, which the cap already holds); stop at the first length no seed
    passes. A regression solution does not depend on L, so a warm start is a valid initialisation.
    Each passing run is re-checked from its saved parameters with ``full_domain_check``."""
    cache = cache or RunCache(None)
    attained, next_failing, runs = 0, None, []
    warm: dict[int, tuple[ToyParams, str]] = {}
    for L in sorted(grid):
        passed_here = False
        for seed in seeds:
            init, init_key = warm.get(seed, (None, None))
            tcfg = TrainConfig(optimizer=optimizer, steps=steps, seed=seed, cap=B, stop_when_passed=True,
                               **train_kw)
            r = run_cached(ToyConfig(variant, d, L), tcfg, cache, init=init, init_key=init_key,
                           progress=progress)
            if isinstance(r, dict):
                runs.append({"L": L, "seed": seed, **r})
                continue
            recheck = full_domain_check(*ToyParams.from_dict(r.params, L=L))
            ok = bool(r.passed and recheck.passed and recheck.max_norm <= B * (1 + 1e-12))
            runs.append({"L": L, **_run_row(r), "recheck_passed": bool(recheck.passed),
                         "recheck_worst_error": recheck.worst_error})
            if ok:
                cfg, params = r.toy()
                warm[seed] = (params, f"{variant}/B={B}/L={L}/seed={seed}/{steps}")
                passed_here = True
                break
        if not passed_here:
            next_failing = L
            break
        attained = L
    return {"attained": attained, "next_failing": next_failing, "runs": runs}


def table3_attained(variants: list[str], Bs: list[float], d: int, grid: list[int], seeds: list[int], steps: int,
                    optimizer: str = "lbfgs", cache: RunCache | None = None, progress: bool = False,
                    **train_kw: Any) -> AttainedResult:
    """The attained column for every variant and cap (see :func:`attained_length`)."""
    out: dict[str, dict[str, Any]] = {}
    for v in variants:
        per_b = [attained_length(v, B, d, grid, seeds, steps, optimizer, cache, progress, **train_kw) for B in Bs]
        out[v] = {"B": list(Bs), "attained": [r["attained"] for r in per_b],
                  "attained_next_failing": [r["next_failing"] for r in per_b], "runs": [r["runs"] for r in per_b]}
    return AttainedResult(d=d, grid=sorted(grid), seeds=seeds, steps=steps, optimizer=optimizer, variants=out)


# --- Figure 2 ----------------------------------------------------------------------------------------------


@dataclass
class Figure2Result:
    """What each read-out costs (panels a–c, trained runs that pass, plus the classifier construction) and
    how far each variant counts under a cap (panel d: attained and constructed L_max)."""

    variant: str
    d: int
    Ls: list[int]
    runs: list[dict[str, Any]]
    construction: dict[str, Any]
    storage: list[dict[str, Any]]
    lmax: dict[str, Any]
    regression_b_min: list[float | None] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def readout_norms(r: TrainResult) -> tuple[float, float]:
    """(read-out vector norm, bias magnitude): ``|w|, |b0|`` or ``max_k |u_k|, max_k |c_k|``."""
    n = r.norms
    return (n["w"], n["b0"]) if r.readout == "regression" else (n["U"], n["c"])


def figure2(Ls: list[int], seeds: list[int], steps: int, d: int = 16, variant: str = "softmax-postln-learned",
            lmax: dict[str, Any] | None = None, ce_scale: float | None = None, cache: RunCache | None = None,
            progress: bool = False, **train_kw: Any) -> Figure2Result:
    """Train both heads at each L (every seed), measure norms, arc angles and gaps; add the classifier
    construction at the same Ls. ``lmax``: panel (d)'s data, ``{V: {"B", "attained", "l_max"}}``.

    ce_scale: the classifier's cross-entropy temperature (``None``: ``L``). With scores of O(1) the winning
    gaps of an exact classifier are O(1/L²), so plain cross-entropy stalls (measured: L = 50 fails after
    3,000 L-BFGS steps); scaling the loss by L lets it pass at L = 50 within ~2,000 steps."""
    cache = cache or RunCache(None)
    runs = []
    for L in Ls:
        for readout in ("regression", "classification"):
            for seed in seeds:
                cfg = ToyConfig(variant, d, L, readout=readout)
                scale = (float(L) if ce_scale is None else ce_scale) if readout == "classification" else 1.0
                tcfg = TrainConfig(optimizer="lbfgs", steps=steps, seed=seed, stop_when_passed=True,
                                   ce_scale=scale, **train_kw)
                r = run_cached(cfg, tcfg, cache, progress=progress)
                if isinstance(r, dict):
                    runs.append({"L": L, "readout": readout, "seed": seed, "passed": False, **r})
                    continue
                c, p = r.toy()
                vec, bias = readout_norms(r)
                row = {"L": L, "readout": readout, "seed": seed, "passed": r.passed, "steps_run": r.steps_run,
                       "readout_norm": vec, "bias_norm": bias, "max_norm": r.max_norm, "arc_angle": arc_angle(c, p)}
                if readout == "classification":
                    row["min_gap"] = min_gap_by_count(c, p).tolist()
                runs.append(row)
    cons = {"L": [], "max_norm": [], "readout_norm": [], "bias_norm": [], "arc_angle": [], "min_gap": [],
            "passed": []}
    for L in Ls:
        cfg = ToyConfig(variant, d, L, readout="classification")
        p = classifier_construction(cfg)
        norms = p.vector_norms()
        cons["L"].append(L)
        cons["max_norm"].append(p.max_norm())
        cons["readout_norm"].append(norms["U"])
        cons["bias_norm"].append(norms["c"])
        cons["arc_angle"].append(arc_angle(cfg, p))
        cons["min_gap"].append(min_gap_by_count(cfg, p).tolist())
        cons["passed"].append(bool(full_domain_check(cfg, p).passed))
    storage = [{"L": L, **storage_cost(d, L, ToyConfig(variant, d, L).ln_learned)} for L in Ls]
    from countlens.toy.budget import b_min  # the regression construction's norm, panel (a)'s reference

    reg_b = [b_min(variant, L, d) for L in Ls]
    return Figure2Result(variant=variant, d=d, Ls=list(Ls), runs=runs, construction=cons, storage=storage,
                         lmax=lmax or {}, regression_b_min=[b if b is not None and b < float("inf") else None
                                                            for b in reg_b])


# --- Figures 3 and 4 ---------------------------------------------------------------------------------------


@dataclass
class DynamicsResult:
    """Training logs of several runs (Figure 3: seeds; Figure 4: optimisers), with the theory rates used to
    normalise the parameter scale (``max_norm / L^rate``) and the score scale (``a / L^2``)."""

    figure: str
    variant: str
    d: int
    L: int
    runs: list[dict[str, Any]]
    param_rate: float
    score_rate: float = 2.0
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dynamics_run(cfg: ToyConfig, tcfg: TrainConfig, cache: RunCache, label: str, progress: bool) -> dict[str, Any]:
    r = run_cached(cfg, tcfg, cache, progress=progress)
    if isinstance(r, dict):
        return {"label": label, "seed": tcfg.seed, "optimizer": tcfg.optimizer, **r, "log": []}
    return {"label": label, "seed": tcfg.seed, "optimizer": tcfg.optimizer, **_run_row(r), "log": r.log}


def figure3(L: int, seeds: list[int], steps: int, d: int = 16, variant: str = "softmax", log_every: int = 5,
            cache: RunCache | None = None, progress: bool = False, **train_kw: Any) -> DynamicsResult:
    """L-BFGS training dynamics of ``variant`` (regression), one run per seed."""
    cache = cache or RunCache(None)
    cfg = ToyConfig(variant, d, L)
    runs = [_dynamics_run(cfg, TrainConfig(optimizer="lbfgs", steps=steps, seed=s, log_every=log_every, **train_kw),
                          cache, f"seed {s}", progress) for s in seeds]
    return DynamicsResult(figure="3", variant=variant, d=d, L=L, runs=runs,
                          param_rate=RATE_EXPONENT.get(variant, 1.0))


def figure4(L: int, steps: int, minibatch_steps: int, seed: int = 0, d: int = 16, variant: str = "softmax",
            batch_size: int = 1024, lr: float = 1e-2, log_every: int = 50, cache: RunCache | None = None,
            progress: bool = False) -> DynamicsResult:
    """Full-batch Adam vs mini-batch Adam (``batch_size``) on the same split and initialisation."""
    cache = cache or RunCache(None)
    cfg = ToyConfig(variant, d, L)
    full = TrainConfig(optimizer="adam", steps=steps, seed=seed, lr=lr, log_every=log_every)
    mini = replace(full, optimizer="adam-minibatch", steps=minibatch_steps, batch_size=batch_size)
    runs = [_dynamics_run(cfg, full, cache, "full-batch Adam", progress),
            _dynamics_run(cfg, mini, cache, f"mini-batch Adam ({batch_size})", progress)]
    return DynamicsResult(figure="4", variant=variant, d=d, L=L, runs=runs,
                          param_rate=RATE_EXPONENT.get(variant, 1.0))


__all__ = [
    "RATE_EXPONENT", "TABLE3_VARIANTS", "PAPER_GRID", "RunCache", "run_cached", "Table2Result", "table2",
    "AttainedResult", "attained_length", "table3_attained", "Figure2Result", "figure2", "readout_norms",
    "DynamicsResult", "figure3", "figure4",
]
