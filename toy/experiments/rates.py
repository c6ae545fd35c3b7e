"""Table 1, measured: ``B_min(L)`` of each variant's construction and its log-log slope (``toy rates``), and
``L_cap(d)`` of bare pre-LN, bracketed (``toy lcap``) (docs/definitions.md §1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from countlens.core.fields import Ints, check_fields
from countlens.core.pool import progress_bar
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import TOY_THREADS
from countlens.toy.budget import RateFit, fit_rates, l_cap
from countlens.toy.constructions import validate
from countlens.toy.experiments.fields import known_variants, score_scale
from countlens.toy.model import VARIANTS

RATES_L = (10, 30, 100, 300, 1000)  # `toy rates`' grid of L: all seven variants in under a minute
RATES_L_REPORT = (*RATES_L, 3000)  # the report's grid (both presets): one more decade for the slopes


@dataclass(frozen=True)
class RatesConfig:
    """Table 1, measured: ``B_min(L)`` of each variant's construction on a grid of ``L`` and the log-log slope.

    The defaults are ``toy rates``' (L up to 1,000); :meth:`paper` adds L = 3,000, the grid the report uses
    in every preset (the rates are cheap, and the slopes are asymptotic).
    """

    d: int = 16
    """model dimension"""
    L: tuple[int, ...] = RATES_L
    """comma-separated lengths; the report adds L = 3000"""
    variants: tuple[str, ...] = VARIANTS
    """comma-separated variants (default: all seven)"""
    tau: float | None = None
    """score scale (default: 1/sqrt(d))"""

    def __post_init__(self) -> None:
        check_fields(self, {"L": Ints(minimum=1)}, assign=True)
        object.__setattr__(self, "variants", tuple(self.variants))
        known_variants(self.variants, self.d)
        score_scale(self.tau)

    @classmethod
    def paper(cls, **kw: Any) -> RatesConfig:
        return cls(**{"L": RATES_L_REPORT, **kw})


@dataclass
class RatesResult(Result):
    """Per variant, a :class:`~countlens.toy.budget.RateFit`: ``L``, ``b_min``, ``slope`` (and
    ``slope_L_ge_100``), ``claimed``, ``claimed_exponent``, ``worst_error``, ``free_scalars``."""

    FILE: ClassVar[str] = "rates.json"
    COMMAND: ClassVar[str] = "countlens toy rates"

    d: int
    tau: float
    variants: dict[str, RateFit]
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any) -> RatesResult:
        if isinstance(data, dict) and isinstance(data.get("variants"), dict):  # each fit's variant is its key
            data = {**data, "variants": {v: {**fit, "variant": v} if isinstance(fit, dict) else fit
                                         for v, fit in data["variants"].items()}}
        return super().from_dict(data)

    def format(self) -> str:
        Ls = next(iter(self.variants.values())).L if self.variants else []
        lines = [f"B_min(L) of the constructions, d={self.d}; slope of log B_min vs log L (claimed exponent)",
                 f"{'variant':24s} " + " ".join(f"{L:>10d}" for L in Ls) + "      slope  L>=100  claimed"]
        for v, fit in self.variants.items():
            slope = "-" if fit.slope is None else f"{fit.slope:.3f}"
            tail = "-" if fit.slope_L_ge_100 is None else f"{fit.slope_L_ge_100:.3f}"
            lines.append(f"{v:24s} " + " ".join(f"{float(b):10.4g}" for b in fit.b_min)
                         + f" {slope:>10s} {tail:>7s}  {fit.claimed}")
        return "\n".join(lines)


def run_rates(config: RatesConfig, progress: bool = False) -> RatesResult:
    """:func:`~countlens.toy.budget.fit_rates` over ``config``'s grid."""
    c = config
    with progress_bar(len(c.L) * len(c.variants), "rates", progress) as bar:
        fits = fit_rates(c.d, list(c.L), c.variants, tau=c.tau, progress=lambda v, L: bar.update(1))
    return RatesResult(d=fits.d, tau=fits.tau, variants=fits.variants, provenance=result_provenance(c))


@dataclass(frozen=True)
class LcapConfig:
    """Table 1's ``L_cap(d)`` of ``softmax-preln-bare``, bracketed: constructed and proven infeasible."""

    d: tuple[int, ...] = (3, 4, 8, 16)
    """comma-separated dimensions"""
    tau: float | None = None  # None: 1/sqrt(d) per d
    """score scale (default: 1/sqrt(d) per d)"""

    def __post_init__(self) -> None:
        check_fields(self, {"d": Ints(minimum=1)}, assign=True)
        for d in self.d:
            validate("softmax-preln-bare", 1, d)
        score_scale(self.tau)


@dataclass
class LcapResult(Result):
    """Aligned lists, one entry per ``d``: ``l_cap`` (longest verified construction), ``l_infeasible``
    (shortest provably impossible length), the norm and error at the cap, ``tau`` and the ``reason``."""

    FILE: ClassVar[str] = "lcap.json"
    COMMAND: ClassVar[str] = "countlens toy lcap"

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
    with progress_bar(len(config.d), "lcap", progress) as bar:
        for d in config.d:
            rows.append(l_cap(d, tau=config.tau))
            bar.update(1)
    return LcapResult(
        d=list(config.d), l_cap=[r.l_cap for r in rows], l_infeasible=[r.l_infeasible for r in rows],
        b_min_at_cap=[r.b_min_at_cap for r in rows], worst_error_at_cap=[r.worst_error_at_cap for r in rows],
        tau=[r.tau for r in rows], reason=[r.reason for r in rows], provenance=result_provenance(config))



declare(Experiment(
    "toy-rates", "Table 1: B_min rates", RatesConfig, run_rates, RatesResult, order=10, view="countlens.toy.figures:rates_view",
    presets={"quick": RatesConfig.paper(), "full": RatesConfig.paper(), "test": RatesConfig(d=4, L=(10, 30))},
    options={"progress": True}, threads=TOY_THREADS))
declare(Experiment(
    "toy-lcap", "Table 1: L_cap of bare pre-LN", LcapConfig, run_lcap, LcapResult, order=20, view="countlens.toy.figures:lcap_view",
    presets={"quick": LcapConfig(), "full": LcapConfig(), "test": LcapConfig(d=(3, 4))},
    options={"progress": True}, threads=TOY_THREADS))


__all__ = ["RATES_L", "RATES_L_REPORT", "RatesConfig", "RatesResult", "run_rates", "LcapConfig", "LcapResult",
           "run_lcap"]
