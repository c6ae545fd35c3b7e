"""Where the answer goes wrong: a :class:`DiagnosisConfig` (a lens result and a components result of the same
model and task) in, a :class:`DiagnosisResult` out (``diagnosis.json``, ``diagnosis.csv``). Nothing is run: it
reads the two results and sets them side by side.

- **Where the count is read.** Per location, the correct count's mean rank under the logit and the tuned
  lens next to the mean rank of the model's own first answer token (Figure 13's ``rank`` and
  ``answer_rank``); the location (and its fraction of depth, location / blocks) where a lens ranks the correct
  count best.
- **Who pushes the answer away.** The components (each block's attention and MLP write, each head) whose
  direct logit attribution (Figure 14, logit difference ``answer``: the correct count's first token against
  the model's own greedy first token) is most negative on average: they push toward the model's answer and
  away from the correct count.
- **The ablation that shows it.** For each of those the components result's mean-ablation (when it ablated
  it): the shift of the expected count over the candidates. A component is *shown* to move the answer away
  when removing it moves the expected count toward the correct count by at least :data:`SHOWN` of the mean
  error (n − expected count of the clean run, over the ablated prompts); the diagnosis names the first such
  among the top pushers, or says that no single component does.

What it cannot show: DLA is linear at the real run (the final norm's scale frozen), so a component that writes
nothing directly can still matter through later ones; the ablation replaces a write by its mean over the prompt
set, which is itself a choice; and a lens rank is a read-out, not a use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.fields import AtLeast, Text, check_fields
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.store import read_meta
from countlens.llm.components.experiment import ComponentsResult
from countlens.llm.lens.experiment import LensResult
from countlens.llm.tasks import DEFAULT_TASK

SHOWN = 0.25  # the share of the mean error an ablation must undo (toward the correct count) to show a component
LENSES = ("logit", "tuned")


@dataclass
class DiagnosisConfig(ExperimentConfig):
    """``lens``: a ``lens.json`` (or its folder) of ``countlens llm lens``; ``components``: a
    ``components.json`` (or its folder) of ``countlens llm components`` on the same model and task (the task of
    the capture the lens read, where that capture is still at its path); ``top``: how many
    pushing components to list."""

    lens: str = ""
    """a lens folder or lens.json (countlens llm lens)"""
    components: str = ""
    """a components folder or components.json (countlens llm components) of the same model"""
    top: int = 5
    """how many pushing components to list"""

    FIELDS: ClassVar[dict] = {"lens": Text("a lens folder (`countlens llm lens`)"),
                              "components": Text("a components folder (`countlens llm components`)"),
                              "top": AtLeast(1)}

    def validate(self) -> DiagnosisConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file)."""
        check_fields(self, self.FIELDS)
        return self


@dataclass
class DiagnosisResult(Result):
    """``locations`` (``diagnosis.csv``): per location its ``location`` label, ``index``, ``depth`` (index /
    blocks) and the mean ranks ``logit_rank``, ``tuned_rank`` (correct count) and ``logit_answer_rank``,
    ``tuned_answer_rank`` (the model's own first answer token). ``best``: where a lens ranks the correct count
    best (``lens``, ``location``, ``depth``, ``rank``). ``pushers``: the ``top`` components by most negative
    mean direct contribution to the ``answer`` logit difference (``layer``, ``kind``, ``head``, ``mean``,
    ``std`` in nats, ``prompts``) with their ablation where the components result has it
    (``expected_shift``, ``normalised_ld``; None otherwise). ``mean_error``: mean (n − clean expected count) over
    the ablated prompts; ``culprit``: the first pusher whose ablation undoes at least :data:`SHOWN` of it
    (None: no single component does), ``verdict`` its one line."""

    FILE: ClassVar[str] = "diagnosis.json"
    CSV: ClassVar[str] = "diagnosis.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "locations"}
    COMMAND: ClassVar[str] = "countlens llm diagnose"

    config: dict[str, Any]
    model: str
    n_blocks: int
    model_rank: float | None
    locations: list[dict[str, Any]]
    best: dict[str, Any] | None
    pushers: list[dict[str, Any]]
    mean_error: float | None
    culprit: dict[str, Any] | None
    verdict: str
    shown: float = SHOWN
    provenance: dict[str, Any] = field(default_factory=dict)


def lens_locations(lens: LensResult, n_blocks: int) -> list[dict[str, Any]]:
    """Per location of ``lens``: the correct count's and the model's answer's mean ranks under both lenses."""
    return [{"location": loc["label"], "index": int(loc["index"]), "depth": loc["index"] / n_blocks,
             **{f"{k}_rank": loc[k]["rank"] for k in LENSES},
             **{f"{k}_answer_rank": loc[k].get("answer_rank") for k in LENSES}} for loc in lens.locations]


def best_read(locations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The location and lens that rank the correct count best (lowest mean rank; the earliest on ties)."""
    best = None
    for loc in locations:
        for k in LENSES:
            rank = loc[f"{k}_rank"]
            if rank is not None and (best is None or rank < best["rank"]):
                best = {"lens": k, "location": loc["location"], "index": loc["index"], "depth": loc["depth"],
                        "rank": rank}
    return best


def pushing_components(components: ComponentsResult, top: int) -> list[dict[str, Any]]:
    """The ``top`` components (attention and MLP writes, heads) by most negative mean direct contribution to the
    ``answer`` logit difference over the prompts that have it, with their ablation records."""
    ablation = {(a["layer"], a["kind"], a["head"]): a for a in components.ablation}
    candidates = []
    for kind in ("attn", "mlp", "head"):
        grid = components.contributions("answer", kind)  # (P, L) or (P, L, H)
        seen = np.isfinite(grid.reshape(len(grid), -1)[:, 0]) if grid.size else np.zeros(0, bool)
        if not seen.any():
            continue
        mean, std = grid[seen].mean(axis=0), grid[seen].std(axis=0)
        for where in np.ndindex(mean.shape):
            layer, head = int(where[0]), (int(where[1]) if kind == "head" else None)
            candidates.append({"layer": layer, "kind": kind, "head": head, "mean": float(mean[where]),
                               "std": float(std[where]), "prompts": int(seen.sum())})
    candidates.sort(key=lambda c: c["mean"])
    out = []
    for c in candidates[:top]:
        a = ablation.get((c["layer"], c["kind"], c["head"]))
        out.append({**c, "expected_shift": None if a is None else a["expected_shift_mean"],
                    "normalised_ld": None if a is None else a["normalised_ld_mean"]})
    return out


def mean_error(components: ComponentsResult) -> float | None:
    """Mean (n − the clean run's expected count) over the prompts the components result ablated."""
    errors = [p["n"] - p["expected_clean"] for p in components.prompts
              if p.get("ablated") and p.get("expected_clean") is not None]
    return float(np.mean(errors)) if errors else None


def culprit(pushers: list[dict[str, Any]], error: float | None, shown: float = SHOWN) -> dict[str, Any] | None:
    """The first pusher whose ablation moves the expected count toward the correct count by at least ``shown``
    of the mean ``error`` (same sign, |shift| ≥ shown · |error|); None when none does."""
    if error is None or error == 0:
        return None
    for p in pushers:
        shift = p["expected_shift"]
        if shift is not None and np.sign(shift) == np.sign(error) and abs(shift) >= shown * abs(error):
            return p
    return None


def component_name(c: dict[str, Any]) -> str:
    """``block 3 MLP``, ``block 3 attention``, ``block 3 head 5`` (blocks counted from one)."""
    what = {"attn": "attention", "mlp": "MLP"}.get(c["kind"], f"head {c['head']}")
    return f"block {c['layer'] + 1} {what}"


def _read(result_type, path: str, name: str, command: str):
    """``result_type`` read from ``path`` (a file or its folder); a one-line :class:`ConfigError` naming
    ``name`` where there is none or it is not one."""
    where = Path(path)
    if not (where / result_type.FILE if where.is_dir() else where).is_file():
        raise ConfigError(name, f"{{{name}}}: no {result_type.FILE} at {literal(str(path))}; run {command} first")
    try:
        return result_type.read(where)
    except UsageError as exc:
        raise ConfigError(name, f"{{{name}}}: {literal(str(exc))}") from None


def lens_task(lens: LensResult) -> str | None:
    """The counting task of the capture ``lens`` read (its ``meta.json``); ``None`` where it is no longer there."""
    try:
        return read_meta(lens.config.get("acts") or "")["settings"].get("task", DEFAULT_TASK)
    except (UsageError, OSError, KeyError, TypeError, AttributeError):
        return None


def run_diagnosis(config: DiagnosisConfig) -> DiagnosisResult:
    """Read ``config.lens`` and ``config.components`` and set them side by side (see the module)."""
    lens = _read(LensResult, config.lens, "lens", "countlens llm lens")
    components = _read(ComponentsResult, config.components, "components", "countlens llm components")
    if lens.model != components.model:
        raise ConfigError("components", f"{{components}} is of the model {literal(components.model)} but {{lens}} "
                                        f"of {literal(lens.model)}; give two results of the same model",
                          also=("lens",))
    mine, theirs = (components.config.get("prompts") or {}).get("task", DEFAULT_TASK), lens_task(lens)
    if theirs is not None and theirs != mine:
        raise ConfigError("components", f"{{components}} counts on the task {literal(mine)} but {{lens}} read a "
                                        f"capture of the task {literal(theirs)}; give two results of the same task",
                          also=("lens",))
    n_blocks = int(components.n_layers)
    locations = lens_locations(lens, n_blocks)
    best = best_read(locations)
    pushers = pushing_components(components, config.top)
    error = mean_error(components)
    found = culprit(pushers, error)
    if found is not None:
        verdict = (f"{component_name(found)} pushes the answer away from the correct count most among the "
                   f"components whose ablation shows it")
    elif error is None:
        verdict = "no prompt was ablated, so no component's effect is shown"
    else:
        verdict = "no single component's ablation moves the expected count toward the correct count enough"
    return DiagnosisResult(config=config.to_dict(), model=components.model, n_blocks=n_blocks,
                           model_rank=lens.model_readout.get("rank"), locations=locations, best=best,
                           pushers=pushers, mean_error=error, culprit=found, verdict=verdict, shown=SHOWN,
                           provenance=result_provenance(config))


declare(Experiment(
    "diagnosis", "Where the answer goes wrong", DiagnosisConfig, run_diagnosis, DiagnosisResult, order=215,
    figure="countlens.llm.diagnosis.figures:draw_diagnosis", plot="countlens.llm.diagnosis.figures:plot_diagnosis",
    view="countlens.llm.diagnosis.figures:diagnosis_view", reads={"lens": "lens", "components": "components"},
    presets={"quick": DiagnosisConfig, "full": DiagnosisConfig, "test": DiagnosisConfig}, study="where",
    cli="countlens.llm.diagnosis.cli"))


__all__ = ["SHOWN", "DiagnosisConfig", "DiagnosisResult", "lens_locations", "best_read", "pushing_components",
           "mean_error", "culprit", "component_name", "run_diagnosis"]
