"""Figure 2: what each read-out costs (regression against classification, trained and constructed) and how
far each variant counts within a budget (Table 3's attained and constructed columns) (docs/definitions.md §1)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, ClassVar

from countlens.core.cache import ResultCache
from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.fields import AtLeast, Ints, check_fields
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import TOY_THREADS
from countlens.toy import budget
from countlens.toy.budget import TABLE3_B
from countlens.toy.check import full_domain_check
from countlens.toy.classification import arc_angle, classifier_construction, min_gap_by_count, storage_cost
from countlens.toy.experiments.fields import need_dimension
from countlens.toy.experiments.table3 import Table3Config, Table3Result, run_table3
from countlens.toy.model import ToyConfig
from countlens.toy.runs import lr_given, run_cached
from countlens.toy.train import TrainConfig, TrainResult


@dataclass(frozen=True)
class Figure2Config:
    """Figure 2: both read-outs of ``variant`` trained by L-BFGS at each ``L`` (panels a–c, with the
    classifier construction beside them) and ``L_max`` under the caps ``B`` (panel d).

    Panel (d) is read from ``table3`` (a saved Table 3 result with its attained column) when given, else
    computed here with ``attained``'s training sizes. ``ce_scale``: the classifier's cross-entropy
    temperature (``None``: ``L``): an exact classifier's winning gaps are O(1/L²) at scores of O(1), so
    plain cross-entropy stalls (BENCHMARKS.md, "Findings worth knowing").
    """

    L: tuple[int, ...] = (10, 20, 50)
    """lengths for panels a-c"""
    seeds: tuple[int, ...] = (0,)
    """comma-separated seeds"""
    steps: int = 2000
    """L-BFGS steps per run"""
    d: int = 16
    """model dimension"""
    variant: str = "softmax-postln-learned"
    """the model variant"""
    B: tuple[float, ...] = (10.0, 30.0, 100.0)
    """caps for panel d"""
    ce_scale: float | None = None
    """classifier loss temperature (default: L)"""
    lr: float | None = None
    """L-BFGS initial step length (default: 1)"""
    table3: str | None = None
    """reuse a `countlens toy table3 --attained --json` result for panel d instead of training (default: train
    here)"""
    attained: Table3Config = field(default_factory=lambda: Table3Config(attained=True))

    FIELDS: ClassVar[dict] = {"L": Ints(minimum=1), "seeds": Ints(minimum=0), "steps": AtLeast(1)}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS, assign=True)
        ToyConfig(self.variant, self.d, 1)
        need_dimension(self.d)
        TrainConfig(steps=self.steps, **lr_given(self.lr), **({} if self.ce_scale is None else
                                                             {"ce_scale": self.ce_scale}))
        try:  # panel (d) at this figure's d and caps
            attained = replace(self.attained, d=self.d, B=self.B, attained=True)
        except ConfigError as exc:  # d and B are this config's own fields; the rest are attained's
            raise (exc if exc.field in ("d", "B") else exc.under("attained")) from None
        object.__setattr__(self, "attained", attained)
        object.__setattr__(self, "B", self.attained.B)

    @classmethod
    def paper(cls, **kw: Any) -> Figure2Config:
        return cls(**{"L": (10, 30, 100, 300, 1000), "seeds": (0, 1, 2), "steps": 10000, "B": TABLE3_B,
                      "attained": Table3Config.paper(attained=True), **kw})


@dataclass
class Figure2Result(Result):
    """What each read-out costs (panels a–c: trained runs, plus the classifier construction and the
    regression construction's ``B_min``) and how far each variant counts under a cap (panel d: attained and
    constructed ``L_max``)."""

    FILE: ClassVar[str] = "figure2.json"
    COMMAND: ClassVar[str] = "countlens toy figure2"

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
        try:
            variants = Table3Result.read(config.table3).variants
        except UsageError as exc:  # no such file, or not a Table 3 result
            raise ConfigError("table3", f"{{table3}} {literal(config.table3)}: {literal(exc)}") from None
        if not isinstance(variants, dict) or not all(isinstance(r, dict) and "B" in r for r in variants.values()):
            raise ConfigError("table3", f"{{table3}} {literal(config.table3)} is not a `countlens toy table3 --json` "
                                        "result (a variant without caps B)")
        return variants
    t3 = run_table3(config.attained, progress=progress, cache=cache)
    return {v: {k: row[k] for k in _PANEL_D_KEYS if k in row} for v, row in t3.variants.items()}


def _figure2_run(config: Figure2Config, L: int, readout: str, seed: int, cache: ResultCache,
                 progress: bool) -> dict[str, Any]:
    cfg = ToyConfig(config.variant, config.d, L, readout=readout)
    ce = float(L) if config.ce_scale is None else config.ce_scale
    tcfg = TrainConfig(optimizer="lbfgs", steps=config.steps, seed=seed, stop_when_passed=True,
                       ce_scale=ce if readout == "classification" else 1.0, **lr_given(config.lr))
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
                         provenance=result_provenance(c))



# Panel (d) of Figure 2 is Table 3's attained column: reuse it rather than train again.
declare(Experiment(
    "toy-figure2", "Figure 2", Figure2Config, run_figure2, Figure2Result, order=60, figure="countlens.toy.figures:draw_figure2", plot="countlens.toy.figures:plot_figure2",
    view="countlens.toy.figures:figure2_view", reads={"table3": "toy-table3"},
    presets={"quick": Figure2Config, "full": Figure2Config.paper,
             "test": partial(Figure2Config, d=4, L=(5, 10), seeds=(0,), steps=5)},
    options={"progress": True}, cache=True, threads=TOY_THREADS))


__all__ = ["Figure2Config", "Figure2Result", "run_figure2", "readout_norms"]
