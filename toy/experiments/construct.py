"""``toy construct`` and ``toy check``: explicit parameters of one variant, checked on the full domain, and
the full-domain check of any parameter file; and the constructions the toy-vs-LLM comparison reads
(docs/definitions.md §1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from countlens.core.errors import ConfigError, UsageError, about, literal
from countlens.core.fields import AtLeast, check_fields
from countlens.core.io import read_json
from countlens.core.pool import progress_bar
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import TOY_THREADS
from countlens.toy import budget
from countlens.toy.check import full_domain_check
from countlens.toy.constructions import best_construction, validate
from countlens.toy.experiments.fields import known_variants, score_scale
from countlens.toy.model import read_params


@dataclass(frozen=True)
class ConstructConfig:
    """``toy construct``: explicit parameters of ``variant`` counting to ``L`` at dimension ``d``."""

    variant: str
    """one of the seven variants: linear, linear-preln-bare, softmax, softmax-postln-bare,
    softmax-postln-learned, softmax-preln-learned, softmax-preln-bare"""
    d: int
    """model dimension"""
    L: int
    """maximum length: the domain is n, m >= 0, n + m <= L"""
    tau: float | None = None  # score scale; None: 1/sqrt(d)
    """score scale (default: 1/sqrt(d))"""

    def __post_init__(self) -> None:
        validate(self.variant, self.L, self.d)
        score_scale(self.tau)


@dataclass
class ConstructResult(Result):
    """A checked construction as a toy parameter file (:func:`~countlens.toy.model.read_params`): the
    parameters, ``L``, ``free_scalars`` and ``check``, at the top level of its JSON beside ``provenance``.
    ``toy check --params``, ``probe toy-acts`` and the comparison read it."""

    FILE: ClassVar[str] = "construct.json"
    COMMAND: ClassVar[str] = "countlens toy construct"

    params: dict[str, Any]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.params, "provenance": self.provenance}

    @classmethod
    def from_dict(cls, data: Any) -> ConstructResult:
        if not isinstance(data, dict):
            return super().from_dict(data)  # the contract's error
        read_params(data)  # a parameter file, or a UsageError saying what it lacks
        return cls(params={k: v for k, v in data.items() if k != "provenance"}, provenance=data.get("provenance", {}))

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
            raise ConfigError("L", f"{{L:{c.L}}} is infeasible for softmax-preln-bare at {{d:{c.d}}}: "
                                   f"{literal(reason)}", also=("d",))
    try:
        built = best_construction(c.variant, c.L, c.d, tau=c.tau)
    except ValueError as exc:  # bare pre-LN between its constructed and its proven bound
        raise UsageError(str(exc)) from None
    return ConstructResult(params=built.to_dict(), provenance=result_provenance(c))


@dataclass(frozen=True)
class CheckConfig:
    """``toy check``: the full-domain check of a parameter file up to ``L``."""

    params: str  # a toy parameter file (construct's or train's output, or a Table 3 attained entry)
    """JSON parameter file (as written by construct or train)"""
    L: int
    """maximum length to check"""

    def __post_init__(self) -> None:
        check_fields(self, {"L": AtLeast(1)})


@dataclass
class CheckFileResult(Result):
    """The check of one parameter file: :meth:`CheckResult.to_dict`'s keys, at the top level of its JSON,
    plus the model's ``variant``, ``d``, ``tau``."""

    FILE: ClassVar[str] = "check.json"
    COMMAND: ClassVar[str] = "countlens toy check"

    check: dict[str, Any]
    variant: str
    d: int
    tau: float
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**self.check, "variant": self.variant, "d": self.d, "tau": self.tau, "provenance": self.provenance}

    @classmethod
    def from_dict(cls, data: Any) -> CheckFileResult:
        if not isinstance(data, dict):
            return super().from_dict(data)  # the contract's error
        own = ("variant", "d", "tau", "provenance")
        return super().from_dict({**{k: data[k] for k in own if k in data},
                                  "check": {k: v for k, v in data.items() if k not in own}})

    def format(self) -> str:
        ch = self.check
        extra = f" min_gap={ch['min_gap']:.6g}" if ch.get("min_gap") is not None else ""
        return (f"{self.variant} d={self.d} L={ch['L']} ({ch['pairs']} pairs): passed={ch['passed']} "
                f"worst_error={ch['worst_error']:.6f} at (n, m)={tuple(ch['worst_pair'])} "
                f"max_norm={ch['max_norm']:.6g}{extra}")


def run_check(config: CheckConfig, progress: bool = False) -> CheckFileResult:
    """Read ``config.params`` and check it on every pair ``n + m <= L``."""
    with about("params"):
        file = read_params(read_json(config.params, "parameter file"), L=config.L)
    res = full_domain_check(file.cfg, file.params, L=config.L)
    return CheckFileResult(check=res.to_dict(), variant=file.cfg.variant, d=file.cfg.d, tau=file.cfg.tau,
                           provenance=result_provenance(config))


@dataclass(frozen=True)
class ConstructionsConfig:
    """The constructions the toy-vs-LLM comparison (and Figure 5's compare stage) reads: one per variant of
    ``variants``, at dimension ``d`` and length ``L``."""

    variants: tuple[str, ...]
    d: int
    L: int
    tau: float | None = None  # score scale; None: 1/sqrt(d)

    def __post_init__(self) -> None:
        object.__setattr__(self, "variants", tuple(self.variants))
        if not self.variants:
            raise ConfigError("variants", "{variants} must name at least one variant")
        known_variants(self.variants, self.d)
        validate(self.variants[0], self.L, self.d)
        score_scale(self.tau)

    def configs(self) -> list[ConstructConfig]:
        """One :class:`ConstructConfig` per variant."""
        return [ConstructConfig(variant=v, d=self.d, L=self.L, tau=self.tau) for v in self.variants]


@dataclass
class ConstructionsResult(Result):
    """Every construction of a :class:`ConstructionsConfig`, in its order. :meth:`save` also writes each as
    its own parameter file ``<variant>.json``, as ``countlens toy construct --json`` writes it."""

    FILE: ClassVar[str] = "constructions.json"
    COMMAND: ClassVar[str] = "countlens reproduce (stage toy-construct)"

    constructions: list[ConstructResult]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"constructions": [c.to_dict() for c in self.constructions], "provenance": self.provenance}

    def save(self, folder: str | Path) -> list[Path]:
        written = super().save(folder)
        return written + [c.write(Path(folder) / f"{c.params['variant']}.json") for c in self.constructions]


def run_constructions(config: ConstructionsConfig, progress: bool = False) -> ConstructionsResult:
    """:func:`run_construct` of every variant."""
    built = []
    with progress_bar(len(config.variants), "constructions", progress) as bar:
        for one in config.configs():
            built.append(run_construct(one))
            bar.update(1)
    return ConstructionsResult(constructions=built, provenance=result_provenance(config))


# The variants the toy-vs-LLM comparison reads, constructed at the comparison's sizes.
COMPARE_VARIANTS = ("linear", "softmax", "softmax-postln-bare", "softmax-postln-learned")
COMPARE_CONSTRUCTIONS = {"quick": ConstructionsConfig(variants=COMPARE_VARIANTS, d=16, L=100),
                         "full": ConstructionsConfig(variants=COMPARE_VARIANTS, d=16, L=100),
                         "test": ConstructionsConfig(variants=COMPARE_VARIANTS, d=4, L=12)}

declare(Experiment(
    "toy-construct", "Toy constructions for the comparison", ConstructionsConfig, run_constructions,
    ConstructionsResult, order=90, output="", presets=COMPARE_CONSTRUCTIONS, options={"progress": True},
    threads=TOY_THREADS, study="model"))


__all__ = ["ConstructConfig", "ConstructResult", "run_construct", "CheckConfig", "CheckFileResult", "run_check",
           "ConstructionsConfig", "ConstructionsResult", "run_constructions"]
