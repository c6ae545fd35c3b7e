"""Figures 3 and 4: training dynamics, logged along the way. Figure 3: L-BFGS from several seeds; Figure 4:
full-batch against mini-batch Adam from one start (docs/definitions.md §1)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from countlens.core.cache import ResultCache
from countlens.core.fields import AtLeast, Ints, Positive, check_fields
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import TOY_THREADS
from countlens.toy.budget import CLAIMED
from countlens.toy.model import ToyConfig
from countlens.toy.runs import lr_given, run_cached, run_row
from countlens.toy.train import TrainConfig


@dataclass(frozen=True)
class Figure3Config:
    """Figure 3: L-BFGS training dynamics of ``variant`` (regression), one run per seed, logged ~50 times."""

    L: int = 50
    """maximum length"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """comma-separated seeds"""
    steps: int = 150
    """L-BFGS steps per run"""
    d: int = 16
    """model dimension"""
    variant: str = "softmax"
    """the model variant"""
    lr: float | None = None
    """L-BFGS initial step length (default: 1)"""

    FIELDS: ClassVar[dict] = {"L": AtLeast(1), "seeds": Ints(minimum=0), "steps": AtLeast(1)}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS, assign=True)
        ToyConfig(self.variant, self.d, self.L)
        TrainConfig(steps=self.steps, **lr_given(self.lr))

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
    """maximum length"""
    steps: int = 1000
    """full-batch Adam updates"""
    minibatch_steps: int = 2000
    """mini-batch Adam updates"""
    batch_size: int = 1024
    """pairs per mini-batch"""
    lr: float = 1e-2
    """Adam learning rate"""
    seed: int = 0
    """initialisation and split seed"""
    d: int = 16
    """model dimension"""
    variant: str = "softmax"
    """the model variant"""

    FIELDS: ClassVar[dict] = {"L": AtLeast(1), "steps": AtLeast(1), "minibatch_steps": AtLeast(1),
                              "batch_size": AtLeast(1), "lr": Positive()}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS, assign=True)
        ToyConfig(self.variant, self.d, self.L)

    @classmethod
    def paper(cls, **kw: Any) -> Figure4Config:
        return cls(**{"L": 250, "steps": 20000, "minibatch_steps": 60000, **kw})


@dataclass
class DynamicsResult(Result):
    """Training logs of several runs (Figure 3: seeds; Figure 4: optimisers), with the theory rates used to
    normalise the parameter scale (``max_norm / L^rate``) and the score scale (``a / L^2``). Each run: its
    ``label``, ``seed``, ``optimizer``, final metrics and ``log`` (empty for a run that diverged)."""

    figure: str
    variant: str
    d: int
    L: int
    runs: list[dict[str, Any]]
    param_rate: float
    score_rate: float = 2.0
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass
class Figure3Result(DynamicsResult):
    """Figure 3's runs: one L-BFGS run per seed."""

    FILE: ClassVar[str] = "figure3.json"
    COMMAND: ClassVar[str] = "countlens toy figure3"


@dataclass
class Figure4Result(DynamicsResult):
    """Figure 4's runs: full-batch Adam, then mini-batch Adam."""

    FILE: ClassVar[str] = "figure4.json"
    COMMAND: ClassVar[str] = "countlens toy figure4"


def _dynamics_run(cfg: ToyConfig, tcfg: TrainConfig, cache: ResultCache, label: str, progress: bool) -> dict[str, Any]:
    r = run_cached(cfg, tcfg, cache, progress=progress)
    if isinstance(r, dict):
        return {"label": label, "seed": tcfg.seed, "optimizer": tcfg.optimizer, **r, "log": []}
    return {"label": label, "seed": tcfg.seed, "optimizer": tcfg.optimizer, **run_row(r), "log": r.log}


def _param_rate(variant: str) -> float:
    """Table 1's claimed exponent of ``B_min(L)``; 1 for bare pre-LN, which has none (its B_min is infinite)."""
    rate = CLAIMED[variant][1]
    return 1.0 if rate is None else rate


def run_figure3(config: Figure3Config, progress: bool = False, cache: ResultCache | None = None) -> Figure3Result:
    """One L-BFGS run per seed of ``config.variant`` (regression), logged every ``max(1, steps // 50)`` steps."""
    c, cache = config, cache or ResultCache(None)
    cfg = ToyConfig(c.variant, c.d, c.L)
    runs = [_dynamics_run(cfg, TrainConfig(optimizer="lbfgs", steps=c.steps, seed=s, log_every=max(1, c.steps // 50),
                                           **lr_given(c.lr)), cache, f"seed {s}", progress) for s in c.seeds]
    return Figure3Result(figure="3", variant=c.variant, d=c.d, L=c.L, runs=runs, param_rate=_param_rate(c.variant),
                         provenance=result_provenance(c))


def run_figure4(config: Figure4Config, progress: bool = False, cache: ResultCache | None = None) -> Figure4Result:
    """Full-batch Adam vs mini-batch Adam on the same split and initialisation."""
    c, cache = config, cache or ResultCache(None)
    cfg = ToyConfig(c.variant, c.d, c.L)
    full = TrainConfig(optimizer="adam", steps=c.steps, seed=c.seed, lr=c.lr,
                       log_every=max(1, max(c.steps, c.minibatch_steps) // 100))
    mini = replace(full, optimizer="adam-minibatch", steps=c.minibatch_steps, batch_size=c.batch_size)
    runs = [_dynamics_run(cfg, full, cache, "full-batch Adam", progress),
            _dynamics_run(cfg, mini, cache, f"mini-batch Adam ({c.batch_size})", progress)]
    return Figure4Result(figure="4", variant=c.variant, d=c.d, L=c.L, runs=runs, param_rate=_param_rate(c.variant),
                         provenance=result_provenance(c))



declare(Experiment(
    "toy-figure3", "Figure 3", Figure3Config, run_figure3, Figure3Result, order=70, figure="countlens.toy.figures:draw_figure3", plot="countlens.toy.figures:plot_figure3",
    view="countlens.toy.figures:figure3_view", presets={"quick": Figure3Config(), "full": Figure3Config.paper(),
                                "test": Figure3Config(d=4, L=10, seeds=(0,), steps=5)},
    options={"progress": True}, cache=True, threads=TOY_THREADS))
declare(Experiment(
    "toy-figure4", "Figure 4", Figure4Config, run_figure4, Figure4Result, order=80, figure="countlens.toy.figures:draw_figure4", plot="countlens.toy.figures:plot_figure4",
    view="countlens.toy.figures:figure4_view", presets={"quick": Figure4Config(), "full": Figure4Config.paper(),
                                "test": Figure4Config(d=4, L=10, steps=5, minibatch_steps=5, batch_size=16)},
    options={"progress": True}, cache=True, threads=TOY_THREADS))


__all__ = ["Figure3Config", "Figure4Config", "DynamicsResult", "Figure3Result", "Figure4Result", "run_figure3",
           "run_figure4"]
