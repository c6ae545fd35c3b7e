"""Training runs as the toy's experiments use them: one run, kept in a resumable cache, and the row a table
keeps of it.

A run is keyed by everything that fixes it (the model, the :class:`~countlens.toy.train.TrainConfig`, the
start), so an interrupted experiment resumes where it stopped when rerun with the same settings. A diverged
run (NaN/inf) never contributes numbers: it is kept, and reported, as ``{"diverged_at_step", "reason"}``
(a rerun diverges the same way).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np

from countlens.core.cache import ResultCache
from countlens.toy.model import ToyConfig, ToyParams
from countlens.toy.train import TrainConfig, TrainingDiverged, TrainResult, train


def model_key(cfg: ToyConfig) -> list[Any]:
    """The model fields a training run's cache key names."""
    return [cfg.variant, cfg.d, cfg.L, cfg.readout, cfg.tau, cfg.eps]


def run_cached(cfg: ToyConfig, tcfg: TrainConfig, cache: ResultCache, init: ToyParams | None = None,
               init_key: str | None = None, progress: bool = False) -> TrainResult | dict[str, Any]:
    """One training run, from ``cache`` if it finished before. Returns the :class:`TrainResult`, or
    ``{"diverged_at_step": s, "reason": ...}`` when it diverged. ``init_key`` names the start ``init``
    in the key (``None``: the seeded random start)."""
    key = {"cfg": model_key(cfg), "train": asdict(tcfg), "init": init_key}
    hit = cache.get(key)
    if hit is not None:
        return hit if "diverged_at_step" in hit else TrainResult.from_dict(hit)
    try:
        result = train(cfg, tcfg, init=init, progress=progress)
    except TrainingDiverged as exc:
        return cache.put(key, {"diverged_at_step": exc.step, "reason": exc.what})
    cache.put(key, result.to_dict())
    return result


def summary(values: list[float]) -> dict[str, float | None]:
    """``mean``, ``min`` and ``max`` of ``values`` (``None`` each when there are none)."""
    if not values:
        return {"mean": None, "min": None, "max": None}
    return {"mean": float(np.mean(values)), "min": float(np.min(values)), "max": float(np.max(values))}


def run_row(r: TrainResult) -> dict[str, Any]:
    """What a table keeps of one finished run."""
    return {"seed": r.train["seed"], "steps_run": r.steps_run, "test_exact_accuracy": r.test_exact_accuracy,
            "full_domain_worst_error": r.full_domain_worst_error, "worst_pair": r.worst_pair,
            "passed": r.passed, "max_norm": r.max_norm}


def lr_given(lr: float | None) -> dict[str, Any]:
    """``TrainConfig`` keywords for an experiment's ``lr`` field (``None``: the optimiser's default)."""
    return {} if lr is None else {"lr": lr}


__all__ = ["model_key", "run_cached", "summary", "run_row", "lr_given"]
