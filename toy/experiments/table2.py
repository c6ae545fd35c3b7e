"""Table 2: softmax without LayerNorm trained from random initialisation at every ``(d, L)`` for each seed:
held-out exact accuracy and full-domain worst error (docs/definitions.md §1)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from countlens.core.cache import ResultCache
from countlens.core.fields import AtLeast, Ints, check_fields
from countlens.core.pool import pool_map, workers_for
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import TOY_THREADS
from countlens.toy.model import ToyConfig
from countlens.toy.runs import lr_given, run_cached, run_row, summary
from countlens.toy.train import TrainConfig


@dataclass(frozen=True)
class Table2Config:
    """Table 2: ``variant`` (softmax, no LN) trained by ``optimizer`` at every ``(d, L)`` for each seed.

    The paper's grid at reduced ``steps``; :meth:`paper` gives 5,000 steps per run. ``init_scale``: the
    initial vectors' norm; 0.1, because from norm 1 a seed can fall into a basin that ignores the boundary
    token. 600 steps: at 300 some rows still missed, at 600 every row counted (BENCHMARKS.md, "Table 2: steps
    and the initial scale").
    """

    d: tuple[int, ...] = (4, 16)
    """comma-separated dimensions"""
    L: tuple[int, ...] = (250, 500)
    """comma-separated lengths"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """comma-separated seeds"""
    steps: int = 600
    """optimiser steps per run"""
    optimizer: str = "lbfgs"
    """one of lbfgs, adam, adam-minibatch"""
    lr: float | None = None  # None: the optimiser's default (L-BFGS 1, Adam 1e-2)
    """learning rate (default: 1 for L-BFGS, 1e-2 for Adam)"""
    variant: str = "softmax"
    """the model variant"""
    init_scale: float = 0.1
    """norm of every initial vector (approximately)"""

    FIELDS: ClassVar[dict] = {"d": Ints(minimum=1), "L": Ints(minimum=1), "seeds": Ints(minimum=0), "steps": AtLeast(1)}

    def __post_init__(self) -> None:
        check_fields(self, self.FIELDS, assign=True)
        TrainConfig(optimizer=self.optimizer, steps=self.steps, init_scale=self.init_scale, **lr_given(self.lr))
        ToyConfig(self.variant, self.d[0], self.L[0])

    @classmethod
    def paper(cls, **kw: Any) -> Table2Config:
        return cls(**{"steps": 5000, **kw})


@dataclass
class Table2Result(Result):
    """Softmax without LN: test exact accuracy and full-domain worst error, mean [min, max] over seeds. One
    row per ``(d, L)``: ``d``, ``L``, ``steps``, ``seeds``, ``runs`` (one per seed that finished),
    ``diverged`` (the others, with their step) and the two summaries."""

    FILE: ClassVar[str] = "table2.json"
    COMMAND: ClassVar[str] = "countlens toy table2"

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
    runs side by side (:func:`~countlens.core.pool.pool_map`; the table is the same with any number)."""
    c, cache = config, cache or ResultCache(None)
    inner = progress and int(workers) == 1  # one process: each run's own progress bar
    jobs = [(ToyConfig(c.variant, d, L), TrainConfig(optimizer=c.optimizer, steps=c.steps, seed=seed,
                                                      init_scale=c.init_scale, **lr_given(c.lr)),
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
                    runs.append(run_row(r))
            rows.append({"d": d, "L": L, "steps": c.steps, "seeds": list(c.seeds), "runs": runs,
                         "diverged": diverged,
                         "test_exact_accuracy": summary([r["test_exact_accuracy"] for r in runs]),
                         "full_domain_worst_error": summary([r["full_domain_worst_error"] for r in runs])})
    return Table2Result(variant=c.variant, optimizer=c.optimizer, rows=rows, provenance=result_provenance(c))



declare(Experiment(
    "toy-table2", "Table 2: trained softmax", Table2Config, run_table2, Table2Result, order=30, view="countlens.toy.figures:table2_view",
    presets={"quick": Table2Config(), "full": Table2Config.paper(),
             "test": Table2Config(d=(4,), L=(10,), seeds=(0,), steps=5)},
    options=lambda c: {"progress": True, "workers": workers_for(len(c.d) * len(c.L) * len(c.seeds))},
    cache=True, threads=TOY_THREADS))


__all__ = ["Table2Config", "Table2Result", "run_table2"]
