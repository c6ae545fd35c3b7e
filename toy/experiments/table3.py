"""Table 3: how far each variant counts under a per-vector cap ``B``, constructed (``L_max(B)``, verified)
and attained by training under the cap (:mod:`countlens.toy.attained`) (docs/definitions.md §1)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from countlens.core.cache import ResultCache
from countlens.core.errors import ConfigError
from countlens.core.fields import AtLeast, Ints, Numbers, check_fields
from countlens.core.pool import pool_map, workers_for
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import TOY_THREADS
from countlens.toy.attained import ATTAINED_ORDER, attained_columns
from countlens.toy.budget import TABLE3_B, TABLE3_PAPER, TABLE3_VARIANTS, LMax, l_max
from countlens.toy.experiments.fields import need_dimension, score_scale
from countlens.toy.train import TrainConfig

PAPER_GRID = (10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)  # Table 3's attained lengths (paper)
QUICK_GRID = (10, 20, 50, 100, 200)  # the reduced attained grid: the quick column stops at 200
QUICK_B = (10.0, 30.0, 100.0)  # the quick preset's caps (Figure 2's panel (d))

# Table 3's attained fields and the TrainConfig field each sets in every attained run.
_TRAIN_FIELDS = {"attained_steps": "steps", "attained_loss": "loss", "attained_parametrization": "parametrization",
                 "attained_working_set": "working_set", "attained_check_every": "log_every",
                 "attained_patience": "patience"}


@dataclass(frozen=True)
class Table3Config:
    """Table 3 at dimension ``d`` and caps ``B``: the constructed ``L_max(B)`` of each of
    :data:`~countlens.toy.budget.TABLE3_VARIANTS` and, with ``attained``, the longest length of
    ``attained_grid`` that training under the cap passes (``attained_seeds`` tried per length,
    ``attained_steps`` L-BFGS steps each). The reduced grid stops at 1,000; :meth:`paper` climbs the paper's
    grid to 10,000 with three seeds.

    Each attained run is working-set training (:mod:`countlens.toy.train`): the domain's edges plus
    ``attained_working_set`` random pairs, the full check every ``attained_check_every`` steps, the worst
    pairs added after each failure. ``attained_loss`` and ``attained_parametrization`` (see
    :class:`~countlens.toy.cap.PolarCoordinates`): the losses and parametrizations tried in turn at each
    length and seed until one passes, because no single one passes everywhere and each is needed somewhere.
    ``attained_patience``: a run stops once that many checks in a row missed its best worst error by less
    than 1 % (:class:`~countlens.toy.train.TrainConfig`), which ends runs stuck just above the rounding
    bound. The reduced sizes are the cheapest that gave the same attained values as longer runs.
    Measurements behind each choice: BENCHMARKS.md, "Table 3's attained column: what each setting buys".
    """

    d: int = 16
    """model dimension"""
    B: tuple[float, ...] = tuple(float(b) for b in TABLE3_B)
    """comma-separated caps"""
    tau: float | None = None  # None: 1/sqrt(d)
    """score scale (default: 1/sqrt(d))"""
    attained: bool = False
    """also train under each cap B and report the largest grid length that passes (a lower bound on L_max)"""
    attained_grid: tuple[int, ...] = (*QUICK_GRID, 500, 1000)
    """lengths to climb"""
    attained_seeds: tuple[int, ...] = (0,)
    """seeds tried per length"""
    attained_steps: int = 400
    """L-BFGS steps per run"""
    attained_loss: tuple[str, ...] = ("max", "mse")
    """comma-separated losses tried in turn per length (of mse, max; max: smooth max error)"""
    attained_parametrization: tuple[str, ...] = ("polar", "cartesian")
    """comma-separated parametrizations tried in turn per length and seed (of cartesian, polar; polar: each
    vector's log norm and direction)"""
    attained_working_set: int = 2048
    """random pairs in the initial working set, besides the domain's edges"""
    attained_check_every: int = 50
    """L-BFGS steps between full-domain checks (the working set grows after each failed one)"""
    attained_patience: int = 4
    """stop a run after this many checks in a row without lowering its best worst error by 1 % (0: never)"""

    FIELDS: ClassVar[dict] = {"B": Numbers(positive=True), "attained_grid": Ints(minimum=1),
                              "attained_seeds": Ints(minimum=0), "attained_steps": AtLeast(1)}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS, assign=True)
        need_dimension(self.d)
        score_scale(self.tau)
        object.__setattr__(self, "attained_grid", tuple(sorted(self.attained_grid)))
        for name, what in (("attained_loss", "loss"), ("attained_parametrization", "parametrization")):
            object.__setattr__(self, name, tuple(getattr(self, name)))
            if not getattr(self, name):
                raise ConfigError(name, f"{{{name}}} must name at least one {what}")
        for loss in self.attained_loss:
            for par in self.attained_parametrization:
                self.train_config(loss=loss, parametrization=par)  # validates every run's training config

    def train_config(self, **fields: Any) -> TrainConfig:
        """The training config of an attained run (``fields``: the rest of it), its errors about this
        config's own fields (``attained_working_set``, not ``working_set``)."""
        given = {train: getattr(self, own) for own, train in _TRAIN_FIELDS.items()
                 if train not in ("loss", "parametrization")}
        try:
            return TrainConfig(**{**given, **fields})
        except ConfigError as exc:
            own = {train: own for own, train in _TRAIN_FIELDS.items()}.get(exc.field)
            raise (exc if own is None else exc.under(own)) from None

    @classmethod
    def paper(cls, **kw: Any) -> Table3Config:
        return cls(**{"attained_grid": PAPER_GRID, "attained_seeds": (0, 1, 2), "attained_steps": 3000,
                      "attained_patience": 6, **kw})

    @property
    def score_scale(self) -> float:
        return 1.0 / math.sqrt(self.d) if self.tau is None else float(self.tau)


@dataclass
class Table3Result(Result):
    """Per variant, aligned with ``B``: ``l_max`` (constructed, verified), its ``max_norm`` and
    ``worst_error``, ``paper_constr`` (the paper's value at d = 16) and, when trained, ``attained``,
    ``attained_next_failing`` (``None``: the grid ran out first, so ``attained`` is a bound from below),
    ``attained_next_failing_worst_error`` (the smallest full-domain worst error any seed reached there),
    ``attained_params`` (the passing parameters at ``attained``, a toy parameter file that
    ``countlens toy check`` reads; ``None`` where nothing passed) and ``attained_runs``;
    ``attained_config`` records the training sizes."""

    FILE: ClassVar[str] = "table3.json"
    COMMAND: ClassVar[str] = "countlens toy table3"

    d: int
    tau: float
    variants: dict[str, dict[str, Any]]
    attained_config: dict[str, Any] | None = None
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
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


def constructed_column(variant: str, cells: list[LMax], d: int) -> dict[str, Any]:
    """Table 3's "constr." column of ``variant`` (one cell per cap), beside the paper's at d = 16."""
    return {"B": [r.B for r in cells], "l_max": [r.L for r in cells], "max_norm": [r.max_norm for r in cells],
            "worst_error": [r.worst_error for r in cells],
            "paper_constr": _paper_column(variant, [r.B for r in cells], d)}


def _paper_column(variant: str, Bs: list[float], d: int) -> list[Any] | None:
    """The paper's constructed L at each cap of ``Bs`` (``None`` at a cap the paper's table lacks), or ``None``
    where the paper gives no column (another variant, or d != 16)."""
    if variant not in TABLE3_PAPER or d != 16:
        return None
    paper = dict(zip((float(b) for b in TABLE3_B), TABLE3_PAPER[variant], strict=True))
    return [paper.get(float(B)) for B in Bs]


def run_table3(config: Table3Config, progress: bool = False, cache: ResultCache | None = None,
               workers: int = 1) -> Table3Result:
    """The constructed column (each cell cached as it finishes) and, with ``config.attained``, the trained one.

    ``workers > 1`` searches the constructed cells and trains the variants' attained columns in that many
    processes (:func:`~countlens.core.pool.pool_map`); every cell and column is independent and seeded, so
    the table is the same, value for value, as with one.
    """
    c, cache, tau = config, cache or ResultCache(None), config.score_scale
    cells = [(v, B, c.d, tau, cache) for v in TABLE3_VARIANTS for B in c.B]
    found = iter(pool_map(_cached_l_max, cells, workers, "table3", progress))
    variants = {v: constructed_column(v, [next(found) for _ in c.B], c.d) for v in TABLE3_VARIANTS}
    attained_config = None
    if c.attained:
        order = sorted(variants, key=lambda v: ATTAINED_ORDER.index(v) if v in ATTAINED_ORDER else len(ATTAINED_ORDER))
        for v, column in attained_columns(order, c, cache, workers, progress).items():
            variants[v].update(column)
        attained_config = {"d": c.d, "grid": list(c.attained_grid), "seeds": list(c.attained_seeds),
                           "steps": c.attained_steps, "optimizer": "lbfgs",
                           "rechecked": "full_domain_check on the saved params", "loss": list(c.attained_loss),
                           "parametrization": list(c.attained_parametrization),
                           "working_set": c.attained_working_set, "check_every": c.attained_check_every,
                           "patience": c.attained_patience}
    return Table3Result(d=c.d, tau=tau, variants=variants, attained_config=attained_config,
                        provenance=result_provenance(c))



declare(Experiment(
    "toy-table3", "Table 3: capacity under a cap", Table3Config, run_table3, Table3Result, order=40,
    view="countlens.toy.figures:table3_view", output=Table3Result.FILE,
    # quick: the caps up to 100 (Figure 2's) and the climb to 200; the caps 300 and 1000 cost half of Table 3
    # (their constructions are checked up to L = 74,374, their climbs reach 1,000) and the climb's steps to
    # 500 and 1,000 another 24 and 30 s: all are the full preset's (BENCHMARKS.md)
    presets={"quick": Table3Config(B=QUICK_B, attained=True, attained_grid=QUICK_GRID),
             "full": Table3Config.paper(attained=True),
             "test": Table3Config(d=4, B=(10,), attained=True, attained_grid=(5, 10), attained_seeds=(0,),
                                  attained_steps=5)},
    options=lambda c: {"progress": True, "workers": workers_for(len(TABLE3_VARIANTS))},
    cache=True, threads=TOY_THREADS))


__all__ = ["PAPER_GRID", "QUICK_GRID", "QUICK_B", "Table3Config", "Table3Result", "run_table3", "l_max_cache_key",
           "constructed_column"]
