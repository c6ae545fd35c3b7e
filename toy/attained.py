"""Table 3's attained column: the longest length of a grid that training under a cap ``B`` passes, climbed
from the shortest (docs/definitions.md §1).

Each length is trained for every seed, for each every parametrization and for each every loss, until one
run passes; every run starts from the previous length's passing solution (a regression solution does not
depend on L, so it is a valid start, and the cap already holds it), and the climb stops at the first length
no run passes. A passing run is re-checked from its saved parameters by the full-domain check, and the
parameters at the attained length are kept in the parameter-file schema. Runs are cached
(:func:`countlens.toy.runs.run_cached`), and a run whose cap never acted is reused at every larger cap.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from countlens.core.cache import ResultCache
from countlens.core.pool import pool_map
from countlens.toy.check import full_domain_check
from countlens.toy.model import ToyConfig, ToyParams, read_params
from countlens.toy.runs import model_key, run_cached, run_row
from countlens.toy.train import TrainConfig, TrainResult, params_digest

# The order the attained columns go to the workers: learned post-LN (the longest climb at the paper's sizes),
# softmax (the longest in the reduced table), bare post-LN; two workers then finish near together in both.
ATTAINED_ORDER = ("softmax-postln-learned", "softmax", "softmax-postln-bare")


def attained_columns(names: list[str], config: Any, cache: ResultCache, workers: int = 1,
                     progress: bool = False) -> dict[str, dict[str, list[Any]]]:
    """:func:`attained_column` of every variant in ``names`` (``config``: a Table 3 config), in ``workers`` processes
    (:func:`~countlens.core.pool.pool_map`; the columns are the same with any number), sharing ``cache``."""
    inner = progress and int(workers) == 1  # one process: the climbs' own progress bars
    columns = pool_map(attained_column, [(v, config, inner, cache) for v in names], workers, "table3 attained",
                       progress and not inner)
    return dict(zip(names, columns, strict=True))


def attained_column(variant: str, config: Any, progress: bool = False,
                    cache: ResultCache | None = None) -> dict[str, list[Any]]:
    """Table 3's attained column of ``variant`` at ``config``'s ``d``, caps ``B`` and ``attained_*`` sizes,
    aligned with ``config.B``: ``attained``, ``attained_next_failing``, ``attained_next_failing_worst_error``,
    ``attained_params`` and ``attained_runs`` (see :func:`attained_length`)."""
    c = config
    kw = {"working_set": c.attained_working_set, "log_every": c.attained_check_every, "patience": c.attained_patience}
    shared: dict[str, list[TrainResult]] = {}  # runs the cap never acted on, reused by the other caps
    climbs = [attained_length(variant, B, c.d, list(c.attained_grid), list(c.attained_seeds), c.attained_steps,
                              cache=cache, progress=progress, losses=c.attained_loss,
                              parametrizations=c.attained_parametrization, shared=shared, **kw)
              for B in c.B]
    return {"attained": [r["attained"] for r in climbs], "attained_next_failing": [r["next_failing"] for r in climbs],
            "attained_next_failing_worst_error": [r["next_failing_worst_error"] for r in climbs],
            "attained_params": [r["params"] for r in climbs], "attained_runs": [r["runs"] for r in climbs]}


def shared_run_key(cfg: ToyConfig, tcfg: TrainConfig, init: ToyParams | None) -> str:
    """What fixes a capped run's trajectory while its cap never acts: all but the cap, and the start."""
    return json.dumps({"cfg": model_key(cfg),
                       "train": {**asdict(tcfg), "cap": None},
                       "init": None if init is None else params_digest(init)}, sort_keys=True)


def attained_length(variant: str, B: float, d: int, grid: list[int], seeds: list[int], steps: int,
                    optimizer: str = "lbfgs", cache: ResultCache | None = None, progress: bool = False,
                    losses: tuple[str, ...] = ("mse",), parametrizations: tuple[str, ...] = ("cartesian",),
                    shared: dict[str, list[TrainResult]] | None = None, **train_kw: Any) -> dict[str, Any]:
    """Climb ``grid`` at cap ``B`` (see the module docstring); ``train_kw``: further
    :class:`~countlens.toy.train.TrainConfig` fields of every run.

    ``shared`` (kept across the caps of one column): a run whose projection never acted (its ``peak_norm``
    at most its cap) is the run any cap ``>= peak_norm`` would make, bit for bit, so it is reused there
    instead of trained again (its row says ``reused_from_cap``).
    Returns ``{"attained", "next_failing", "next_failing_worst_error", "params", "runs"}`` (``params``: the
    passing parameters at ``attained`` with the re-check as their ``check``, a toy parameter file; ``None``
    if nothing passed)."""
    cache = cache or ResultCache(None)
    attained, next_failing, next_worst, params_at, runs = 0, None, None, None, []
    warm: tuple[ToyParams | None, str | None] = (None, None)
    for L in sorted(grid):
        passed_here = False
        for seed, par, loss in ((s, q, k) for s in seeds for q in parametrizations for k in losses):
            init, init_key = warm
            tcfg = TrainConfig(optimizer=optimizer, steps=steps, seed=seed, cap=B, stop_when_passed=True,
                               loss=loss, parametrization=par, **train_kw)
            cfg = ToyConfig(variant, d, L)
            key = shared_run_key(cfg, tcfg, init)
            r = next((s for s in (shared or {}).get(key, []) if s.peak_norm <= B), None)
            reused = {} if r is None else {"reused_from_cap": r.train["cap"]}
            if r is None:
                r = run_cached(cfg, tcfg, cache, init=init, init_key=init_key, progress=progress)
                if shared is not None and isinstance(r, TrainResult) and r.peak_norm is not None \
                        and r.peak_norm <= B:
                    shared.setdefault(key, []).append(r)
            if isinstance(r, dict):
                runs.append({"L": L, "seed": seed, **r})
                continue
            saved = read_params(r.params, L=L)  # the re-check reads what the table keeps
            recheck = full_domain_check(saved.cfg, saved.params)
            ok = bool(r.passed and recheck.passed and recheck.max_norm <= B * (1 + 1e-12))
            runs.append({"L": L, **run_row(r), "loss": loss, "parametrization": par,
                         "recheck_passed": bool(recheck.passed), "recheck_worst_error": recheck.worst_error, **reused})
            if ok:
                warm = (saved.params, f"{variant}/B={B}/L={L}/seed={seed}/{steps}")
                check = {k: v for k, v in recheck.to_dict().items() if k not in ("readout", "min_gap")}
                passed_here, params_at = True, {**r.params, "check": check}  # a parameter file and its certificate
                break
            if next_worst is None or recheck.worst_error < next_worst:
                next_worst = float(recheck.worst_error)
        if not passed_here:
            next_failing = L
            break
        attained, next_worst = L, None
    return {"attained": attained, "next_failing": next_failing, "next_failing_worst_error": next_worst,
            "params": params_at, "runs": runs}


__all__ = ["ATTAINED_ORDER", "attained_columns", "attained_column", "attained_length", "shared_run_key"]
