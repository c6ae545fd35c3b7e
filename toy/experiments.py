"""Every toy table, figure and command as a config and a result (definitions: docs/definitions.md §1).

For each one: a validated, frozen ``...Config`` whose defaults are the reduced ("quick") sizes, with
``.paper()`` for the paper's; ``run_...(config, progress=..., cache=...)`` returning a result dataclass with
``to_dict`` / ``from_dict`` / ``save(path)`` (the JSON file, with provenance). Figures are drawn from the
results alone by :mod:`countlens.toy.figures`; :mod:`countlens.toy.cli` only parses flags into a config,
runs it and writes.

Training runs and Table 3's constructed cells are kept in a :class:`countlens.core.cache.ResultCache` as they
finish, so an interrupted experiment resumes where it stopped when rerun with the same settings. A diverged
run (NaN/inf) never contributes numbers: it is listed under ``diverged`` with its step. The paper trained for
20M/100M steps; ours are L-BFGS iterations, which converge in far fewer, and every result records them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from countlens.core.cache import ResultCache
from countlens.core.errors import UsageError
from countlens.core.io import provenance, read_json, write_json_atomic
from countlens.core.threads import one_thread, set_one_thread
from countlens.toy import budget
from countlens.toy.budget import (
    CLAIMED,
    TABLE3_B,
    TABLE3_PAPER,
    TABLE3_VARIANTS,
    LMax,
    fit_rates,
    l_cap,
    l_max,
)
from countlens.toy.check import full_domain_check
from countlens.toy.classification import arc_angle, classifier_construction, min_gap_by_count, storage_cost
from countlens.toy.constructions import best_construction, validate
from countlens.toy.model import DTYPE, VARIANTS, ToyConfig, ToyParams, boundary_representation, token_vectors
from countlens.toy.train import OPTIMIZERS, TrainConfig, TrainingDiverged, TrainResult, params_digest, train

RATES_L = (10, 30, 100, 300, 1000)  # `toy rates`' grid of L: all seven variants in under a minute
RATES_L_REPORT = (*RATES_L, 3000)  # the report's grid (both presets): one more decade for the slopes
PAPER_GRID = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)  # Table 3's attained lengths (paper)
QUICK_GRID = (10, 20, 50, 100, 200)  # the reduced attained grid: the quick column stops at 200


def _bar(total: int, desc: str, progress: bool):
    """A tqdm bar on stderr, or a silent one."""
    import sys

    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, file=sys.stderr, leave=False, disable=not progress)


def _ints(values: Any, name: str, minimum: int) -> tuple[int, ...]:
    """``values`` as a non-empty tuple of ints, each ``>= minimum`` (:class:`UsageError` otherwise)."""
    out = tuple(int(v) for v in (values if isinstance(values, (list, tuple)) else [values]))
    if not out:
        raise UsageError(f"{name} must not be empty")
    bad = [v for v in out if v < minimum]
    if bad:
        raise UsageError(f"{name} values must be >= {minimum}, got {bad[0]}")
    return out


def _positive(value: int, name: str) -> None:
    if int(value) < 1:
        raise UsageError(f"{name} must be a positive integer, got {value}")


def _need_d(d: int, variants: tuple[str, ...] = ("softmax-postln-bare",)) -> None:
    """``d`` large enough for every variant's construction (LayerNorm needs two centred directions)."""
    for v in variants:
        validate(v, 1, d)


class _Result:
    """``to_dict`` / ``from_dict`` / ``save`` for results whose JSON is their fields."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})

    def save(self, path: str | Path) -> Path:
        """Write the result's JSON (with provenance) to ``path``."""
        return write_json_atomic(path, self.to_dict())


def _provenance(config: Any) -> dict[str, Any]:
    return provenance(asdict(config))


# --- construct and check ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConstructConfig:
    """``toy construct``: explicit parameters of ``variant`` counting to ``L`` at dimension ``d``."""

    variant: str
    d: int
    L: int
    tau: float | None = None  # score scale; None: 1/sqrt(d)

    def __post_init__(self) -> None:
        validate(self.variant, self.L, self.d)


@dataclass
class ConstructResult:
    """A checked construction in the JSON parameter format that ``toy check --params``, the probes and the
    comparison read: the parameters, ``L``, ``free_scalars`` and ``check``."""

    params: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.params, "provenance": self.provenance}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConstructResult:
        rest = {k: v for k, v in data.items() if k != "provenance"}
        return cls(params=rest, provenance=data.get("provenance", {}))

    save = _Result.save

    def format(self) -> str:
        p, ch = self.params, self.params["check"]
        return (f"{p['variant']} d={p['d']} L={p['L']}: passed={ch['passed']} worst_error={ch['worst_error']:.6f} "
                f"at (n, m)={tuple(ch['worst_pair'])} max_norm={ch['max_norm']:.6g}")


def run_construct(config: ConstructConfig, progress: bool = False) -> ConstructResult:
    """The best construction found (:func:`~countlens.toy.constructions.best_construction`), checked."""
    c = config
    if c.variant == "softmax-preln-bare":
        bound, reason = budget.l_infeasible(c.d, c.tau)
        if c.L >= bound:
            raise UsageError(f"L={c.L} is infeasible for softmax-preln-bare at d={c.d}: {reason}")
    try:
        built = best_construction(c.variant, c.L, c.d, tau=c.tau)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return ConstructResult(built.to_dict(), provenance(
        {"variant": c.variant, "d": c.d, "L": c.L, "tau": built.cfg.tau}))


@dataclass(frozen=True)
class CheckConfig:
    """``toy check``: the full-domain check of a parameter file up to ``L``."""

    params: str  # a JSON parameter file (construct's or train's output)
    L: int

    def __post_init__(self) -> None:
        if int(self.L) < 1:
            raise UsageError(f"L must be >= 1, got {self.L}")


@dataclass
class CheckFileResult(_Result):
    """The check of one parameter file: :meth:`CheckResult.to_dict`'s keys plus the model's variant, d, tau."""

    check: dict[str, Any]
    variant: str
    d: int
    tau: float
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.check, "variant": self.variant, "d": self.d, "tau": self.tau, "provenance": self.provenance}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckFileResult:
        own = ("variant", "d", "tau", "provenance")
        return cls(check={k: v for k, v in data.items() if k not in own}, variant=data["variant"], d=data["d"],
                   tau=data["tau"], provenance=data.get("provenance", {}))

    def format(self) -> str:
        ch = self.check
        extra = f" min_gap={ch['min_gap']:.6g}" if ch.get("min_gap") is not None else ""
        return (f"{self.variant} d={self.d} L={ch['L']} ({ch['pairs']} pairs): passed={ch['passed']} "
                f"worst_error={ch['worst_error']:.6f} at (n, m)={tuple(ch['worst_pair'])} "
                f"max_norm={ch['max_norm']:.6g}{extra}")


def run_check(config: CheckConfig, progress: bool = False) -> CheckFileResult:
    """Read ``config.params`` and check it on every pair ``n + m <= L``."""
    cfg, params = ToyParams.from_dict(read_json(config.params, "parameter file"), L=config.L)
    res = full_domain_check(cfg, params, L=config.L)
    return CheckFileResult(res.to_dict(), cfg.variant, cfg.d, cfg.tau,
                           provenance({"params": str(config.params), "L": config.L}))


# --- Table 1: rates and L_cap ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RatesConfig:
    """Table 1, measured: ``B_min(L)`` of each variant's construction on a grid of ``L`` and the log-log slope.

    The defaults are ``toy rates``' (L up to 1,000); :meth:`paper` adds L = 3,000, the grid the report uses
    in every preset (the rates are cheap, and the slopes are asymptotic).
    """

    d: int = 16
    L: tuple[int, ...] = RATES_L
    variants: tuple[str, ...] = VARIANTS
    tau: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "L", _ints(self.L, "L", 1))
        object.__setattr__(self, "variants", tuple(self.variants))
        for v in self.variants:
            validate(v, 1, self.d)

    @classmethod
    def paper(cls, **kw: Any) -> RatesConfig:
        return cls(**{"L": RATES_L_REPORT, **kw})


@dataclass
class RatesResult(_Result):
    """Per variant: ``L``, ``b_min``, ``slope`` (and ``slope_L_ge_100``), ``claimed``, ``claimed_exponent``,
    ``worst_error``, ``free_scalars``."""

    d: int
    tau: float
    variants: dict[str, dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)

    def format(self) -> str:
        Ls = next(iter(self.variants.values()))["L"] if self.variants else []
        lines = [f"B_min(L) of the constructions, d={self.d}; slope of log B_min vs log L (claimed exponent)",
                 f"{'variant':24s} " + " ".join(f"{L:>10d}" for L in Ls) + "      slope  L>=100  claimed"]
        for v, fit in self.variants.items():
            slope = "-" if fit["slope"] is None else f"{fit['slope']:.3f}"
            tail = "-" if fit["slope_L_ge_100"] is None else f"{fit['slope_L_ge_100']:.3f}"
            lines.append(f"{v:24s} " + " ".join(f"{float(b):10.4g}" for b in fit["b_min"])
                         + f" {slope:>10s} {tail:>7s}  {fit['claimed']}")
        return "\n".join(lines)


def run_rates(config: RatesConfig, progress: bool = False) -> RatesResult:
    """:func:`~countlens.toy.budget.fit_rates` over ``config``'s grid."""
    c = config
    with _bar(len(c.L) * len(c.variants), "rates", progress) as bar:
        res = fit_rates(c.d, list(c.L), c.variants, tau=c.tau, progress=lambda v, L: bar.update(1))
    data = res.to_dict()
    return RatesResult(data["d"], data["tau"], data["variants"], provenance(
        {"d": c.d, "L": list(c.L), "variants": list(c.variants), "tau": res.tau}))


@dataclass(frozen=True)
class LcapConfig:
    """Table 1's ``L_cap(d)`` of ``softmax-preln-bare``, bracketed: constructed and proven infeasible."""

    d: tuple[int, ...] = (3, 4, 8, 16)
    tau: float | None = None  # None: 1/sqrt(d) per d

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", _ints(self.d, "d", 1))
        for d in self.d:
            validate("softmax-preln-bare", 1, d)


@dataclass
class LcapResult(_Result):
    """Aligned lists, one entry per ``d``: ``l_cap`` (longest verified construction), ``l_infeasible``
    (shortest provably impossible length), the norm and error at the cap, ``tau`` and the ``reason``."""

    d: list[int]
    l_cap: list[int | None]
    l_infeasible: list[int]
    b_min_at_cap: list[float | None]
    worst_error_at_cap: list[float | None]
    tau: list[float]
    reason: list[str]
    provenance: dict[str, Any] = field(default_factory=dict)

    def format(self) -> str:
        lines = []
        for d, cap, bound, why in zip(self.d, self.l_cap, self.l_infeasible, self.reason, strict=True):
            have = "not searched" if cap is None else f"{cap} (constructed, verified)"
            lines.append(f"d={d}: L_cap = {have}; L >= {bound} infeasible. Why finite: {why}")
        return "\n".join(lines)


def run_lcap(config: LcapConfig, progress: bool = False) -> LcapResult:
    """:func:`~countlens.toy.budget.l_cap` at each ``d``."""
    rows = []
    with _bar(len(config.d), "lcap", progress) as bar:
        for d in config.d:
            rows.append(l_cap(d, tau=config.tau))
            bar.update(1)
    return LcapResult(
        d=list(config.d), l_cap=[r.l_cap for r in rows], l_infeasible=[r.l_infeasible for r in rows],
        b_min_at_cap=[r.b_min_at_cap for r in rows], worst_error_at_cap=[r.worst_error_at_cap for r in rows],
        tau=[r.tau for r in rows], reason=[r.reason for r in rows],
        provenance=provenance({"d": list(config.d), "tau": config.tau}))


# --- training runs, cached -------------------------------------------------------------------------------


def _cfg_key(cfg: ToyConfig) -> list[Any]:
    """The model fields a training run's cache keys name."""
    return [cfg.variant, cfg.d, cfg.L, cfg.readout, cfg.tau, cfg.eps]


def run_cached(cfg: ToyConfig, tcfg: TrainConfig, cache: ResultCache, init: ToyParams | None = None,
               init_key: str | None = None, progress: bool = False) -> TrainResult | dict[str, Any]:
    """One training run, from the cache if it finished before. Returns the TrainResult, or
    ``{"diverged_at_step": s, "reason": ...}`` when it diverged (cached too: a rerun diverges the same way)."""
    key = {"cfg": _cfg_key(cfg), "train": asdict(tcfg),
           "init": init_key}
    hit = cache.get(key)
    if hit is not None:
        return hit if "diverged_at_step" in hit else TrainResult.from_dict(hit)
    try:
        result = train(cfg, tcfg, init=init, progress=progress)
    except TrainingDiverged as exc:
        return cache.put(key, {"diverged_at_step": exc.step, "reason": exc.what})
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


def _train_kw(lr: float | None) -> dict[str, Any]:
    return {} if lr is None else {"lr": lr}


# --- Table 2 ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table2Config:
    """Table 2: ``variant`` (softmax, no LN) trained by ``optimizer`` at every ``(d, L)`` for each seed.

    The paper's grid at reduced ``steps``; :meth:`paper` gives 5,000 steps per run. ``init_scale``: the
    initial vectors' norm. At 1, seed 0 of d = 4, L = 500 falls into a basin that ignores the boundary token
    (log score scale -26, test accuracy 0.014 after 3,000 steps); at 0.1 every seed learns to count. After
    300 L-BFGS steps two of the three d = 16, L = 500 seeds still missed (test accuracy 0.95 and 0.93,
    worst error 1.5–1.7); after 600 every row's mean test accuracy is >= 0.997 and its mean worst error
    <= 0.30 (the paper: 0.97–0.98 and 0.79–0.83), hence 600 (measured, BENCHMARKS.md).
    """

    d: tuple[int, ...] = (4, 16)
    L: tuple[int, ...] = (250, 500)
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 600
    optimizer: str = "lbfgs"
    lr: float | None = None  # None: the optimiser's default (L-BFGS 1, Adam 1e-2)
    variant: str = "softmax"
    init_scale: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "d", _ints(self.d, "d", 1))
        object.__setattr__(self, "L", _ints(self.L, "L", 1))
        object.__setattr__(self, "seeds", _ints(self.seeds, "seeds", 0))
        _positive(self.steps, "steps")
        if self.optimizer not in OPTIMIZERS:
            raise UsageError(f"unknown optimizer {self.optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")

    @classmethod
    def paper(cls, **kw: Any) -> Table2Config:
        return cls(**{"steps": 5000, **kw})


@dataclass
class Table2Result(_Result):
    """Softmax without LN: test exact accuracy and full-domain worst error, mean [min, max] over seeds."""

    variant: str
    optimizer: str
    rows: list[dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)

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


def run_table2(config: Table2Config, progress: bool = False, cache: ResultCache | None = None,
               workers: int = 1) -> Table2Result:
    """Train every ``(d, L, seed)`` of ``config`` (regression read-out); ``workers``: processes training
    runs side by side (:func:`pool_map`; the table is the same with any number)."""
    c, cache = config, cache or ResultCache(None)
    inner = progress and int(workers) == 1  # one process: each run's own progress bar
    jobs = [(ToyConfig(c.variant, d, L), TrainConfig(optimizer=c.optimizer, steps=c.steps, seed=seed,
                                                      init_scale=c.init_scale, **_train_kw(c.lr)),
             cache, None, None, inner) for d in c.d for L in c.L for seed in c.seeds]
    results = iter(pool_map(run_cached, jobs, workers, "table2", progress and not inner))
    rows = []
    for d in c.d:
        for L in c.L:
            runs, diverged = [], []
            for seed in c.seeds:
                r = next(results)
                if isinstance(r, dict):
                    diverged.append({"seed": seed, **r})
                else:
                    runs.append(_run_row(r))
            rows.append({"d": d, "L": L, "steps": c.steps, "seeds": list(c.seeds), "runs": runs,
                         "diverged": diverged,
                         "test_exact_accuracy": _summary([r["test_exact_accuracy"] for r in runs]),
                         "full_domain_worst_error": _summary([r["full_domain_worst_error"] for r in runs])})
    return Table2Result(variant=c.variant, optimizer=c.optimizer, rows=rows, provenance=_provenance(c))


# --- Table 3 ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table3Config:
    """Table 3 at dimension ``d`` and caps ``B``: the constructed ``L_max(B)`` of each of
    :data:`~countlens.toy.budget.TABLE3_VARIANTS` and, with ``attained``, the longest length of
    ``attained_grid`` that training under the cap passes (``attained_seeds`` tried per length,
    ``attained_steps`` L-BFGS steps each). The reduced grid stops at 1,000; :meth:`paper` climbs the paper's
    grid to 10,000 with three seeds.

    Each attained run is working-set training (:mod:`countlens.toy.train`): the domain's edges plus
    ``attained_working_set`` random pairs, the full check every ``attained_check_every`` steps, the worst
    pairs added after each failure. ``attained_loss``: the losses tried in turn at each length (per seed)
    until one passes. Neither wins everywhere (measured, d = 16, 1,000 steps per length): under B = 30
    softmax-postln-learned reached L = 500 with the smooth max error and not with MSE, while softmax under
    B = 1000 reached 1,000 with MSE and stopped at 500 with the max; so both are tried, max first.
    ``attained_parametrization``: what the optimiser moves (see :class:`~countlens.toy.train.PolarCoordinates`),
    tried in turn per seed, each with every loss. Of the reduced table's 69 passing runs (one seed), 63 were
    polar with the smooth max, 4 Cartesian with the max, 1 Cartesian with MSE, 1 polar with MSE; each of the
    last six is a length the climb would not have passed otherwise; and :meth:`paper` with the smooth max alone
    (three seeds) stopped learned post-LN at 200 under B = 30 (worst error 1.22 at 500). ``attained_patience``: a run stops once that
    many checks in a row missed its best worst error by less than 1 % (:class:`~countlens.toy.train.TrainConfig`;
    :meth:`paper`: 6). The reduced table's 400 steps and patience 4 gave the same attained values as 500 and 6
    in 320 s instead of 449 s (measured, BENCHMARKS.md).
    """

    d: int = 16
    B: tuple[float, ...] = tuple(float(b) for b in TABLE3_B)
    tau: float | None = None  # None: 1/sqrt(d)
    attained: bool = False
    attained_grid: tuple[int, ...] = (*QUICK_GRID, 500, 1000)
    attained_seeds: tuple[int, ...] = (0,)
    attained_steps: int = 400
    attained_loss: tuple[str, ...] = ("max", "mse")
    attained_parametrization: tuple[str, ...] = ("polar", "cartesian")
    attained_working_set: int = 2048
    attained_check_every: int = 50
    attained_patience: int = 4

    def __post_init__(self) -> None:
        B = tuple(float(b) for b in self.B)
        if not B:
            raise UsageError("B must not be empty")
        if min(B) <= 0:
            raise UsageError(f"B values must be positive, got {min(B):g}")
        object.__setattr__(self, "B", B)
        _need_d(self.d)
        object.__setattr__(self, "attained_grid", tuple(sorted(_ints(self.attained_grid, "attained_grid", 1))))
        object.__setattr__(self, "attained_seeds", _ints(self.attained_seeds, "attained_seeds", 0))
        _positive(self.attained_steps, "attained_steps")
        _positive(self.attained_check_every, "attained_check_every")
        if int(self.attained_patience) < 0:
            raise UsageError(f"attained_patience must be >= 0 checks, got {self.attained_patience}")
        object.__setattr__(self, "attained_loss", tuple(self.attained_loss))
        if not self.attained_loss:
            raise UsageError("attained_loss must name at least one loss")
        object.__setattr__(self, "attained_parametrization", tuple(self.attained_parametrization))
        if not self.attained_parametrization:
            raise UsageError("attained_parametrization must name at least one parametrization")
        for loss in self.attained_loss:
            for par in self.attained_parametrization:
                TrainConfig(loss=loss, working_set=self.attained_working_set, parametrization=par)  # validates

    @classmethod
    def paper(cls, **kw: Any) -> Table3Config:
        return cls(**{"attained_grid": PAPER_GRID, "attained_seeds": (0, 1, 2), "attained_steps": 3000,
                      "attained_patience": 6, **kw})

    @property
    def score_scale(self) -> float:
        return 1.0 / math.sqrt(self.d) if self.tau is None else float(self.tau)


@dataclass
class Table3Result(_Result):
    """Per variant, aligned with ``B``: ``l_max`` (constructed, verified), its ``max_norm`` and
    ``worst_error``, ``paper_constr`` (the paper's value at d = 16) and, when trained, ``attained``,
    ``attained_next_failing`` (``None``: the grid ran out first, so ``attained`` is a bound from below),
    ``attained_next_failing_worst_error`` (the smallest full-domain worst error any seed reached there),
    ``attained_params`` (the passing parameters at ``attained``, in the parameter-file format that
    ``countlens toy check`` reads; ``None`` where nothing passed) and ``attained_runs``;
    ``attained_config`` records the training sizes."""

    d: int
    tau: float
    variants: dict[str, dict[str, Any]]
    attained_config: dict[str, Any] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.attained_config is None:
            del out["attained_config"]
        return out

    def format(self) -> str:
        """The constructed columns (the paper's in brackets, at d = 16), then the attained ones if trained."""
        variants = list(self.variants)
        lines = [f"Table 3, constructed L_max(B) at d={self.d} (paper's constr. in brackets)",
                 f"{'B':>8s} " + " ".join(f"{v:>28s}" for v in variants)]
        Bs = next(iter(self.variants.values()))["B"] if variants else []
        for i, B in enumerate(Bs):
            cells = []
            for v in variants:
                L = float(self.variants[v]["l_max"][i])
                paper = TABLE3_PAPER.get(v)
                ref = (f" [{paper[TABLE3_B.index(int(B))]}]" if paper and self.d == 16 and float(B).is_integer()
                       and int(B) in TABLE3_B else "")
                cells.append(f"{'inf' if math.isinf(L) else int(L)}{ref}".rjust(28))
            lines.append(f"{B:8g} " + " ".join(cells))
        for v, row in self.variants.items():
            if "attained" not in row:
                continue
            lines.append(f"{v}:  {'B':>6} {'attained':>9} {'next fails':>10} {'its worst error':>15} {'constr.':>8}")
            for i, B in enumerate(row["B"]):
                nxt = row["attained_next_failing"][i]
                worst = (row.get("attained_next_failing_worst_error") or [None] * len(row["B"]))[i]
                lines.append(f"{'':{len(v) + 2}} {B:>6g} {row['attained'][i]:>9} {str(nxt if nxt else '-'):>10} "
                             f"{'-' if worst is None else format(worst, '.4g'):>15} {str(row['l_max'][i]):>8}")
        return "\n".join(lines)


def l_max_cache_key(variant: str, B: float, d: int, tau: float) -> dict[str, Any]:
    """What keys one constructed cell of Table 3 in a :class:`~countlens.core.cache.ResultCache`."""
    return {"l_max": {"variant": variant, "B": float(B), "d": int(d), "tau": float(tau)}}


def _cached_l_max(variant: str, B: float, d: int, tau: float, cache: ResultCache) -> LMax:
    row = cache.get_or_run(l_max_cache_key(variant, B, d, tau), lambda: asdict(l_max(variant, B, d, tau)))
    return LMax(**{**row, "L": float(row["L"]) if isinstance(row["L"], str) else row["L"]})


# The order the attained columns go to the workers: learned post-LN (the longest climb at the paper's sizes),
# softmax (the longest in the reduced table), bare post-LN; two workers then finish near together in both.
_ATTAINED_ORDER = ("softmax-postln-learned", "softmax", "softmax-postln-bare")


def run_table3(config: Table3Config, progress: bool = False, cache: ResultCache | None = None,
               workers: int = 1) -> Table3Result:
    """The constructed column (each cell cached as it finishes) and, with ``config.attained``, the trained one.

    ``workers > 1`` searches the constructed cells and trains the variants' attained columns in that many
    processes (:func:`pool_map`); every cell and column is independent and seeded, so the table is the same,
    value for value, as with one.
    """
    c, cache, tau = config, cache or ResultCache(None), config.score_scale
    cells = [(v, B, c.d, tau, cache) for v in TABLE3_VARIANTS for B in c.B]
    found = iter(pool_map(_cached_l_max, cells, workers, "table3", progress))
    rows: dict[str, list[LMax]] = {v: [next(found) for _ in c.B] for v in TABLE3_VARIANTS}
    variants = budget.Table3Result(c.d, tau, rows).to_dict()["variants"]
    attained_config = None
    if c.attained:
        order = sorted(variants, key=lambda v: _ATTAINED_ORDER.index(v) if v in _ATTAINED_ORDER else len(_ATTAINED_ORDER))
        for v, column in attained_columns(order, c, cache, workers, progress).items():
            variants[v].update(column)
        attained_config = {"d": c.d, "grid": list(c.attained_grid), "seeds": list(c.attained_seeds),
                           "steps": c.attained_steps, "optimizer": "lbfgs",
                           "rechecked": "full_domain_check on the saved params", "loss": list(c.attained_loss),
                           "parametrization": list(c.attained_parametrization),
                           "working_set": c.attained_working_set, "check_every": c.attained_check_every,
                           "patience": c.attained_patience}
    return Table3Result(c.d, tau, variants, attained_config, _provenance(c))


def pool_map(func: Any, jobs: list[tuple[Any, ...]], workers: int = 1, desc: str = "", progress: bool = False) -> list[Any]:
    """``[func(*job) for job in jobs]``, in this process or, with ``workers > 1``, in that many fresh
    (spawned: no forked torch/OpenMP state) processes. Either way every job runs on one torch thread and one
    BLAS thread (:func:`countlens.core.threads.one_thread`; two workers with two BLAS threads each ran Table 2 twice
    as slowly as one process), so each independent, seeded job gives the same bits with any ``workers``.
    ``func`` must be a module-level function, and a script that calls this with ``workers > 1`` needs the
    usual ``if __name__ == "__main__":`` guard of spawned processes."""
    if int(workers) < 1:
        raise UsageError(f"workers must be >= 1, got {workers}")
    with _bar(len(jobs), desc, progress) as bar:
        if int(workers) == 1 or len(jobs) == 1:
            out = []
            with one_thread():
                for job in jobs:
                    out.append(func(*job))
                    bar.update(1)
            return out
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(min(int(workers), len(jobs)), mp_context=context, initializer=set_one_thread) as pool:
            futures = [pool.submit(func, *job) for job in jobs]
            out = []
            for future in futures:
                out.append(future.result())
                bar.update(1)
            return out


def attained_columns(names: list[str], config: Table3Config, cache: ResultCache, workers: int = 1,
                     progress: bool = False) -> dict[str, dict[str, list[Any]]]:
    """:func:`attained_column` of every variant in ``names`` (``workers``: see :func:`pool_map`), sharing
    ``cache``."""
    inner = progress and int(workers) == 1  # one process: the climbs' own progress bars
    columns = pool_map(attained_column, [(v, config, inner, cache) for v in names], workers, "table3 attained",
                       progress and not inner)
    return dict(zip(names, columns, strict=True))


def attained_column(variant: str, config: Table3Config, progress: bool = False,
                    cache: ResultCache | None = None) -> dict[str, list[Any]]:
    """Table 3's attained column of ``variant``, aligned with ``config.B``: ``attained``,
    ``attained_next_failing`` and ``attained_runs`` (see :func:`attained_length`)."""
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


def _shared_key(cfg: ToyConfig, tcfg: TrainConfig, init: ToyParams | None) -> str:
    """What fixes a capped run's trajectory while its cap never acts: all but the cap, and the start."""
    return json.dumps({"cfg": _cfg_key(cfg),
                       "train": {**asdict(tcfg), "cap": None},
                       "init": None if init is None else params_digest(init)}, sort_keys=True)


def attained_length(variant: str, B: float, d: int, grid: list[int], seeds: list[int], steps: int,
                    optimizer: str = "lbfgs", cache: ResultCache | None = None, progress: bool = False,
                    losses: tuple[str, ...] = ("mse",), parametrizations: tuple[str, ...] = ("cartesian",),
                    shared: dict[str, list[TrainResult]] | None = None, **train_kw: Any) -> dict[str, Any]:
    """Climb ``grid`` at cap ``B``: train each length (every seed, for each every parametrization of
    ``parametrizations`` and for each every loss of ``losses``, until one passes; every seed starts from
    the previous length's passing solution, which the cap already holds, and draws its own random pairs);
    stop at the first length no seed passes. A regression solution does not depend on L, so a warm start is a valid initialisation.
    Each passing run is re-checked from its saved parameters with ``full_domain_check``.
    ``shared`` (kept across the caps of one column): a run whose projection never acted (its ``peak_norm``
    at most its cap) is the run any cap ``>= peak_norm`` would make, bit for bit, so it is reused there
    instead of trained again (its row says ``reused_from_cap``).
    Returns ``{"attained", "next_failing", "next_failing_worst_error", "params", "runs"}`` (``params``: the
    passing parameters at ``attained``, ``None`` if nothing passed)."""
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
            key = _shared_key(cfg, tcfg, init)
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
            recheck = full_domain_check(*ToyParams.from_dict(r.params, L=L))
            ok = bool(r.passed and recheck.passed and recheck.max_norm <= B * (1 + 1e-12))
            runs.append({"L": L, **_run_row(r), "loss": loss, "parametrization": par,
                         "recheck_passed": bool(recheck.passed), "recheck_worst_error": recheck.worst_error, **reused})
            if ok:
                _, params = r.toy()
                warm = (params, f"{variant}/B={B}/L={L}/seed={seed}/{steps}")
                passed_here, params_at = True, r.params
                break
            if next_worst is None or recheck.worst_error < next_worst:
                next_worst = float(recheck.worst_error)
        if not passed_here:
            next_failing = L
            break
        attained, next_worst = L, None
    return {"attained": attained, "next_failing": next_failing, "next_failing_worst_error": next_worst,
            "params": params_at, "runs": runs}


# --- Figure 1 --------------------------------------------------------------------------------------------

FIGURE1_PANELS = (
    ("linear", "(a) linear attention: a ray"),
    ("softmax", "(b) softmax, no LN: a compressed segment"),
    ("softmax-postln-bare", "(c) softmax, post-LN: an arc"),
    ("softmax-preln-bare", "(d) softmax, bare pre-LN: endpoints on a sphere"),
)


@dataclass(frozen=True)
class Figure1Config:
    """Figure 1: boundary representations ``h(n, 0)``, ``n = 0..L``, of each panel's checked construction
    (bare pre-LN at ``min(L, L_cap(d))``)."""

    d: int = 16
    L: int = 20

    def __post_init__(self) -> None:
        _need_d(self.d)
        if int(self.L) < 2:
            raise UsageError(f"L must be >= 2, got {self.L}")


@dataclass
class Figure1Panel:
    variant: str
    title: str
    L: int
    points: list[list[float]]  # (L+1, 2): h(n, 0) projected, n = 0..L
    limits: list[list[float]]  # open circles: limiting endpoints, projected
    sphere_radius: float | None  # circle drawn for panels on the sphere |h| = sqrt(d)
    max_norm: float
    worst_error: float


@dataclass
class Figure1Result(_Result):
    """Four panels; each holds ``h(n, 0)`` in the plane that best holds its points (uncentred SVD, so the
    origin stays the origin and spheres stay circles) and its limiting endpoints (``n -> infinity``)."""

    d: int
    panels: list[Figure1Panel]
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Figure1Result:
        return cls(d=int(data["d"]), panels=[Figure1Panel(**p) for p in data["panels"]],
                   provenance=data.get("provenance", {}))


def _plane(vectors: np.ndarray) -> np.ndarray:
    """Top two right singular vectors of the (uncentred) rows: (d, 2)."""
    _, _, vt = np.linalg.svd(vectors, full_matrices=False)
    basis = vt[:2].T
    if basis.shape[1] < 2:
        basis = np.hstack([basis, np.zeros((basis.shape[0], 2 - basis.shape[1]))])
    return basis


def _figure1_panel(variant: str, title: str, d: int, L: int) -> Figure1Panel:
    try:
        c = best_construction(variant, L, d)
    except ValueError:  # bare pre-LN past its L_cap
        L = l_cap(d).l_cap
        c = best_construction(variant, L, d)
    cfg, p = c.cfg, c.params
    n = torch.arange(L + 1, dtype=DTYPE)
    with torch.no_grad():
        h = boundary_representation(cfg, p, n, torch.zeros_like(n)).numpy()  # (L+1, d)
        z = token_vectors(cfg, p).numpy()  # (3, d)
        limits = []
        if variant != "linear":  # n -> infinity: all attention on the counted token
            far = torch.tensor([1e12], dtype=DTYPE)
            limits.append(boundary_representation(cfg, p, far, torch.zeros_like(far)).numpy()[0])
    if variant == "softmax-preln-bare":
        limits.append(z[0])  # n = 0 end, also on the sphere
    basis = _plane(np.vstack([h] + [np.asarray(x)[None] for x in limits]))
    radius = math.sqrt(d) if variant in ("softmax-postln-bare", "softmax-preln-bare") else None
    return Figure1Panel(variant, title, L, (h @ basis).tolist(), [(np.asarray(x) @ basis).tolist() for x in limits],
                        radius, c.max_norm, c.check.worst_error)


def run_figure1(config: Figure1Config, progress: bool = False) -> Figure1Result:
    """The four panels of Figure 1 (see :data:`FIGURE1_PANELS`)."""
    panels = [_figure1_panel(v, title, config.d, config.L) for v, title in FIGURE1_PANELS]
    return Figure1Result(d=config.d, panels=panels, provenance=_provenance(config))


# --- Figure 2 --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure2Config:
    """Figure 2: both read-outs of ``variant`` trained by L-BFGS at each ``L`` (panels a–c, with the
    classifier construction beside them) and ``L_max`` under the caps ``B`` (panel d).

    Panel (d) is read from ``table3`` (a saved Table 3 result with its attained column) when given, else
    computed here with ``attained``'s training sizes. ``ce_scale``: the classifier's cross-entropy
    temperature (``None``: ``L``). With scores of O(1) the winning gaps of an exact classifier are O(1/L²),
    so plain cross-entropy stalls (measured: L = 50 fails after 3,000 L-BFGS steps); scaling the loss by L
    lets it pass at L = 50 within ~2,000 steps.
    """

    L: tuple[int, ...] = (10, 20, 50)
    seeds: tuple[int, ...] = (0,)
    steps: int = 2000
    d: int = 16
    variant: str = "softmax-postln-learned"
    B: tuple[float, ...] = (10.0, 30.0, 100.0)
    ce_scale: float | None = None
    lr: float | None = None
    table3: str | None = None
    attained: Table3Config = field(default_factory=lambda: Table3Config(attained=True))

    def __post_init__(self) -> None:
        object.__setattr__(self, "L", _ints(self.L, "L", 1))
        object.__setattr__(self, "seeds", _ints(self.seeds, "seeds", 0))
        _positive(self.steps, "steps")
        ToyConfig(self.variant, self.d, 1)
        _need_d(self.d)
        object.__setattr__(self, "attained", replace(self.attained, d=self.d, B=self.B, attained=True))
        object.__setattr__(self, "B", self.attained.B)

    @classmethod
    def paper(cls, **kw: Any) -> Figure2Config:
        return cls(**{"L": (10, 30, 100, 300, 1000), "seeds": (0, 1, 2), "steps": 10000, "B": TABLE3_B,
                      "attained": Table3Config.paper(attained=True), **kw})


@dataclass
class Figure2Result(_Result):
    """What each read-out costs (panels a–c: trained runs, plus the classifier construction and the
    regression construction's ``B_min``) and how far each variant counts under a cap (panel d: attained and
    constructed ``L_max``)."""

    variant: str
    d: int
    Ls: list[int]
    runs: list[dict[str, Any]]
    construction: dict[str, Any]
    storage: list[dict[str, Any]]
    lmax: dict[str, Any]
    regression_b_min: list[float | None] = field(default_factory=list)
    provenance: dict[str, Any] = field(default_factory=dict)


def readout_norms(r: TrainResult) -> tuple[float, float]:
    """(read-out vector norm, bias magnitude): ``|w|, |b0|`` or ``max_k |u_k|, max_k |c_k|``."""
    n = r.norms
    return (n["w"], n["b0"]) if r.readout == "regression" else (n["U"], n["c"])


_PANEL_D_KEYS = ("B", "l_max", "max_norm", "worst_error", "paper_constr", "attained", "attained_next_failing")


def _panel_d(config: Figure2Config, progress: bool, cache: ResultCache) -> dict[str, Any]:
    if config.table3 is not None:
        data = read_json(config.table3, "table3 file")
        variants = data.get("variants") if isinstance(data, dict) else None
        if not isinstance(variants, dict) or not all(isinstance(r, dict) and "B" in r for r in variants.values()):
            raise UsageError(f"table3 file {config.table3} is not a `countlens toy table3 --json` result")
        return variants
    t3 = run_table3(config.attained, progress=progress, cache=cache)
    return {v: {k: row[k] for k in _PANEL_D_KEYS if k in row} for v, row in t3.variants.items()}


def _figure2_run(config: Figure2Config, L: int, readout: str, seed: int, cache: ResultCache,
                 progress: bool) -> dict[str, Any]:
    cfg = ToyConfig(config.variant, config.d, L, readout=readout)
    ce = float(L) if config.ce_scale is None else config.ce_scale
    tcfg = TrainConfig(optimizer="lbfgs", steps=config.steps, seed=seed, stop_when_passed=True,
                       ce_scale=ce if readout == "classification" else 1.0, **_train_kw(config.lr))
    r = run_cached(cfg, tcfg, cache, progress=progress)
    if isinstance(r, dict):
        return {"L": L, "readout": readout, "seed": seed, "passed": False, **r}
    c, p = r.toy()
    vec, bias = readout_norms(r)
    row = {"L": L, "readout": readout, "seed": seed, "passed": r.passed, "steps_run": r.steps_run,
           "readout_norm": vec, "bias_norm": bias, "max_norm": r.max_norm, "arc_angle": arc_angle(c, p)}
    if readout == "classification":
        row["min_gap"] = min_gap_by_count(c, p).tolist()
    return row


def _classifier_construction_rows(variant: str, d: int, Ls: tuple[int, ...]) -> dict[str, list[Any]]:
    cons: dict[str, list[Any]] = {k: [] for k in ("L", "max_norm", "readout_norm", "bias_norm", "arc_angle",
                                                  "min_gap", "passed")}
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
    return cons


def run_figure2(config: Figure2Config, progress: bool = False, cache: ResultCache | None = None) -> Figure2Result:
    """Train both heads at each L (every seed), measure norms, arc angles (Figure 2b's quantity,
    :func:`~countlens.toy.classification.arc_angle`) and gaps; add the classifier construction at the same
    Ls and panel (d)."""
    c, cache = config, cache or ResultCache(None)
    lmax = _panel_d(c, progress, cache)
    runs = [_figure2_run(c, L, readout, seed, cache, progress)
            for L in c.L for readout in ("regression", "classification") for seed in c.seeds]
    storage = [{"L": L, **storage_cost(c.d, L, ToyConfig(c.variant, c.d, L).ln_learned)} for L in c.L]
    reg_b = [budget.b_min(c.variant, L, c.d) for L in c.L]  # the regression construction's norm, panel (a)
    return Figure2Result(variant=c.variant, d=c.d, Ls=list(c.L), runs=runs,
                         construction=_classifier_construction_rows(c.variant, c.d, c.L), storage=storage,
                         lmax=lmax, regression_b_min=[b if b is not None and b < math.inf else None for b in reg_b],
                         provenance=_provenance(c))


# --- Figures 3 and 4 -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure3Config:
    """Figure 3: L-BFGS training dynamics of ``variant`` (regression), one run per seed, logged ~50 times."""

    L: int = 50
    seeds: tuple[int, ...] = (0, 1, 2)
    steps: int = 150
    d: int = 16
    variant: str = "softmax"
    lr: float | None = None

    def __post_init__(self) -> None:
        _positive(self.L, "L")
        object.__setattr__(self, "seeds", _ints(self.seeds, "seeds", 0))
        _positive(self.steps, "steps")
        ToyConfig(self.variant, self.d, self.L)

    @classmethod
    def paper(cls, **kw: Any) -> Figure3Config:
        return cls(**{"L": 250, "steps": 3000, **kw})


@dataclass(frozen=True)
class Figure4Config:
    """Figure 4: full-batch Adam (``steps`` updates) vs mini-batch Adam (``minibatch_steps`` updates on
    batches of ``batch_size`` training pairs), same split and initialisation, logged ~100 times.

    The mini-batch run takes more updates, as in the paper: each of its updates sees one batch, not the
    whole training split, so at equal update counts it would have seen far fewer pairs.
    """

    L: int = 100
    steps: int = 1000
    minibatch_steps: int = 2000
    batch_size: int = 1024
    lr: float = 1e-2
    seed: int = 0
    d: int = 16
    variant: str = "softmax"

    def __post_init__(self) -> None:
        for name in ("L", "steps", "minibatch_steps", "batch_size"):
            _positive(getattr(self, name), name)
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise UsageError(f"lr must be a positive finite number, got {self.lr}")
        ToyConfig(self.variant, self.d, self.L)

    @classmethod
    def paper(cls, **kw: Any) -> Figure4Config:
        return cls(**{"L": 250, "steps": 20000, "minibatch_steps": 60000, **kw})


@dataclass
class DynamicsResult(_Result):
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


def _dynamics_run(cfg: ToyConfig, tcfg: TrainConfig, cache: ResultCache, label: str, progress: bool) -> dict[str, Any]:
    r = run_cached(cfg, tcfg, cache, progress=progress)
    if isinstance(r, dict):
        return {"label": label, "seed": tcfg.seed, "optimizer": tcfg.optimizer, **r, "log": []}
    return {"label": label, "seed": tcfg.seed, "optimizer": tcfg.optimizer, **_run_row(r), "log": r.log}


def _param_rate(variant: str) -> float:
    """Table 1's claimed exponent of ``B_min(L)``; 1 for bare pre-LN, which has none (its B_min is infinite)."""
    rate = CLAIMED[variant][1]
    return 1.0 if rate is None else rate


def run_figure3(config: Figure3Config, progress: bool = False, cache: ResultCache | None = None) -> DynamicsResult:
    """One L-BFGS run per seed of ``config.variant`` (regression), logged every ``max(1, steps // 50)`` steps."""
    c, cache = config, cache or ResultCache(None)
    cfg = ToyConfig(c.variant, c.d, c.L)
    runs = [_dynamics_run(cfg, TrainConfig(optimizer="lbfgs", steps=c.steps, seed=s, log_every=max(1, c.steps // 50),
                                           **_train_kw(c.lr)), cache, f"seed {s}", progress) for s in c.seeds]
    return DynamicsResult(figure="3", variant=c.variant, d=c.d, L=c.L, runs=runs, param_rate=_param_rate(c.variant),
                          provenance=_provenance(c))


def run_figure4(config: Figure4Config, progress: bool = False, cache: ResultCache | None = None) -> DynamicsResult:
    """Full-batch Adam vs mini-batch Adam on the same split and initialisation."""
    c, cache = config, cache or ResultCache(None)
    cfg = ToyConfig(c.variant, c.d, c.L)
    full = TrainConfig(optimizer="adam", steps=c.steps, seed=c.seed, lr=c.lr,
                       log_every=max(1, max(c.steps, c.minibatch_steps) // 100))
    mini = replace(full, optimizer="adam-minibatch", steps=c.minibatch_steps, batch_size=c.batch_size)
    runs = [_dynamics_run(cfg, full, cache, "full-batch Adam", progress),
            _dynamics_run(cfg, mini, cache, f"mini-batch Adam ({c.batch_size})", progress)]
    return DynamicsResult(figure="4", variant=c.variant, d=c.d, L=c.L, runs=runs, param_rate=_param_rate(c.variant),
                          provenance=_provenance(c))


__all__ = [
    "RATES_L", "RATES_L_REPORT", "PAPER_GRID", "QUICK_GRID", "FIGURE1_PANELS",
    "ConstructConfig", "ConstructResult", "run_construct", "CheckConfig", "CheckFileResult", "run_check",
    "RatesConfig", "RatesResult", "run_rates", "LcapConfig", "LcapResult", "run_lcap",
    "Table2Config", "Table2Result", "run_table2", "Table3Config", "Table3Result", "run_table3",
    "attained_column", "attained_length", "l_max_cache_key", "run_cached", "readout_norms",
    "Figure1Config", "Figure1Panel", "Figure1Result", "run_figure1", "Figure2Config", "Figure2Result", "run_figure2",
    "Figure3Config", "Figure4Config", "DynamicsResult", "run_figure3", "run_figure4",
]
