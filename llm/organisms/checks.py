"""Ground truth: countlens's read-outs on an organism checked against the circuit planted in it
(:mod:`countlens.llm.organisms.experiment`). Each check runs an existing experiment on the organism folder
(as ``--model DIR``) and compares one number with what the construction guarantees:

- ``answers``: countlens's greedy answers (:func:`countlens.llm.answers.answer_prompts`) right on at least
  :data:`ACCURACY` of held-out prompts of every count;
- ``dead heads``: head ablation (Figure 12, :func:`countlens.llm.heads.experiment.run_heads`) of a head whose
  output projection is zero changes the answer's logit difference (mean + std over the ablated prompts) by at
  most :data:`ZERO` of the largest clean ``|LD|``: by construction it changes nothing, and what is measured is
  float32 rounding — the ablation passes batch the heads of a block together, a batch of another shape than
  the clean pass's, which moves an LD of a few nats by ~1e-6 nats;
- ``dead heads alike``: every zeroed head's ablation gives bit-identical LD changes (one distinct mean and
  std among them), so that rounding is the measurement's, not any head's;
- ``live heads first``: the heads whose ablation moves the logit difference most (mean ``|ld_change|``) are
  exactly the live ones;
- ``DLA dead heads`` / ``DLA live heads first``: direct logit attribution (Figure 14,
  :func:`countlens.llm.components.experiment.run_components`) on n against n − 1 gives a zeroed head a direct
  share of zero (float32 rounding aside: at most :data:`ZERO` of the largest |total|), and ranks the live
  heads first by mean |share|;
- ``boundary patching``: replacing the boundary's residual at the last location with the source prompt's
  (Figure 9a, :func:`countlens.llm.patching.experiment.run_patching`) makes the source count's first answer
  token the patched answer's first token on at least :data:`PATCHED` of pairs. Only the first token: the last
  location feeds only the boundary's unembedding, and the later answer tokens are decoded at later positions
  that read the (unpatched) prompt, so a two-digit answer's later digits follow the target's items;
- ``probe after the live heads`` / ``probe before the live heads``: ridge probes (Figure 7,
  :func:`countlens.probes.probe.run_probes`) on a capture of held-out prompts read the count at the boundary
  (test rounded accuracy at least :data:`PROBED`) at the first residual location after the first block with a
  live head, and not at any location before it (below :data:`PROBED`): there the boundary's residual is a
  function of the boundary token alone (no head before writes, and Llama's positions enter only attention).

A check that fails says so with its number; :func:`failed` lists them, and ``countlens organism check`` exits
1 on any.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, about
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.models import ModelSpec

ACCURACY = 0.99
ZERO = 1e-6  # relative to the largest clean |LD| (nats per nat)
PATCHED = 0.95
PROBED = 0.95
PROBE_ROWS = 240  # prompts captured for the probe checks (at least)


@dataclass
class OrganismChecksConfig(ExperimentConfig):
    """The ground-truth checks of the organism in the folder ``model`` (written by ``organism train``)."""

    model: str = ""

    def validate(self) -> OrganismChecksConfig:
        if not str(self.model).strip():
            raise ConfigError("model", "{model} must name an organism folder (written by organism train)")
        return self


@dataclass
class OrganismChecks(Result):
    """The ground-truth checks of one organism: per check its ``name``, the measured ``value``, the
    ``bound`` it is held to, how (``holds``: ``>=``, ``<=`` or ``==``), ``passed`` and a ``detail`` line."""

    FILE: ClassVar[str] = "checks.json"
    CSV: ClassVar[str] = "checks.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "checks"}
    COMMAND: ClassVar[str] = "countlens organism check"

    model: str
    live_heads: list[list[int]]
    checks: list[dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)

    def failed(self) -> list[dict[str, Any]]:
        return [c for c in self.checks if not c["passed"]]


def _check(name: str, value: Any, bound: Any, holds: str, detail: str) -> dict[str, Any]:
    passed = {">=": lambda: value >= bound, "<=": lambda: value <= bound, "<": lambda: value < bound,
              "==": lambda: value == bound}[holds]()
    return {"name": name, "value": value, "bound": bound, "holds": holds, "passed": bool(passed), "detail": detail}


def spread_pairs(L: int, k: int = 6) -> tuple[list[int], list[int]]:
    """``k`` source → target count pairs spread over ``0..L`` (each source unequal to its target)."""
    counts = np.unique(np.linspace(0, L, k).round().astype(int)).tolist()
    sources = counts
    targets = counts[::-1]
    keep = [(s, t) for s, t in zip(sources, targets, strict=True) if s != t]
    if not keep:
        keep = [(0, L)]
    return [s for s, _ in keep], [t for _, t in keep]


def answers_check(loaded, organism) -> dict[str, Any]:
    """``answers``: countlens's greedy accuracy on the organism's held-out prompts."""
    import torch

    from countlens.llm.answers import answer_prompts
    from countlens.llm.organisms.experiment import HELD_OUT_SEED, OrganismConfig, _settings
    from countlens.llm.prompts import build_prompts

    config = OrganismConfig(**organism.config)
    prompts = build_prompts(loaded.tokenizer, _settings(config, [HELD_OUT_SEED + j for j in
                                                                 range(config.held_out_seeds)]))
    with torch.inference_mode():
        answers = answer_prompts(loaded.model, loaded.tokenizer, prompts, batch_size=32)
    accuracy = answers.accuracy([p.n for p in prompts])
    return _check("answers", accuracy, ACCURACY, ">=", f"greedy accuracy on {len(prompts)} held-out prompts")


def heads_checks(model: ModelSpec, organism, loaded, seeds: list[int]) -> list[dict[str, Any]]:
    """``dead heads`` and ``live heads first`` from one run of Figure 12's head ablation."""
    from countlens.llm.heads.experiment import HeadsConfig, run_heads
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L = int(config["L"])
    prompts = PromptSettings(L=L, counts=list(range(1, L + 1)), per_count=1, pairs=config["pairs"],
                             configs=config["configs"][:1], seeds=seeds[:1])
    result = run_heads(HeadsConfig(model=model, prompts=prompts, ablate_prompts=min(16, L * len(config["pairs"]))),
                       loaded=loaded)
    change = {(r["layer"], r["head"]): (r["ld_change_mean"], r["ld_change_std"]) for r in result.heads}
    live = {tuple(h) for h in organism.live_heads}
    dead = [h for h in change if h not in live]
    worst = max((abs(change[h][0]) + change[h][1] for h in dead), default=0.0)
    ranked = sorted(change, key=lambda h: -abs(change[h][0]))[:len(live)]
    scale = max([1.0] + [abs(p["ld_clean"]) for p in result.prompts if p["ablated"]])
    ablated = sum(p["ablated"] for p in result.prompts)
    out = []
    if dead:
        out.append(_check("dead heads", float(worst / scale), ZERO, "<=",
                          f"largest |LD change| (mean + std) over {len(dead)} zeroed heads and {ablated} ablated "
                          f"prompts, over the largest clean |LD| ({scale:.3g} nats)"))
        out.append(_check("dead heads alike", len({change[h] for h in dead}), 1, "==",
                          f"distinct (mean, std) of the LD change among {len(dead)} zeroed heads"))
    out.append(_check("live heads first", sorted(map(list, ranked)), sorted(map(list, live)), "==",
                      f"the {len(live)} heads whose ablation moves the logit difference most"))
    return out


def components_checks(model: ModelSpec, organism, loaded, seeds: list[int]) -> list[dict[str, Any]]:
    """``DLA dead heads`` and ``DLA live heads first`` from one run of Figure 14's direct logit attribution
    (n against n − 1): a zeroed head writes nothing, so its direct share must be zero (up to float32
    rounding, relative to the largest |total|), and the heads with the largest mean |share| are the live ones."""
    from countlens.llm.components.experiment import ComponentsConfig, run_components
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L = int(config["L"])
    prompts = PromptSettings(L=L, counts=list(range(1, L + 1)), per_count=1, pairs=config["pairs"],
                             configs=config["configs"][:1], seeds=seeds[:1])
    result = run_components(ComponentsConfig(model=model, prompts=prompts, ablate_prompts=0), loaded=loaded)
    rows = [r for r in result.rows if r["target"] == "previous"]
    share: dict[tuple[int, int], list[float]] = {}
    for r in rows:
        if r["kind"] == "head":
            share.setdefault((int(r["layer"]), int(r["head"])), []).append(abs(float(r["contribution"])))
    live = {tuple(h) for h in organism.live_heads}
    scale = max([1.0] + [abs(float(r["total"])) for r in rows])
    dead = [h for h in share if h not in live]
    ranked = sorted(share, key=lambda h: -float(np.mean(share[h])))[:len(live)]
    out = []
    if dead:
        out.append(_check("DLA dead heads", float(max(max(share[h]) for h in dead) / scale), ZERO, "<=",
                          f"largest |direct share| of {len(dead)} zeroed heads on {len(rows) // max(1, len(share))}"
                          f" prompts (n vs n - 1), over the largest |total| ({scale:.3g} nats)"))
    out.append(_check("DLA live heads first", sorted(map(list, ranked)), sorted(map(list, live)), "==",
                      f"the {len(live)} heads with the largest mean |direct share| (n vs n - 1)"))
    return out


def patching_check(model: ModelSpec, organism, loaded, seeds: list[int], tokenizer) -> dict[str, Any]:
    """``boundary patching``: the source's first answer token after patching the last location."""
    from countlens.llm.answers import answer_token_ids
    from countlens.llm.patching.experiment import PatchingConfig, run_patching

    config = organism.config
    sources, targets = spread_pairs(int(config["L"]))
    patching = PatchingConfig(model=model, locations="-1").with_options(
        L=int(config["L"]), sources=sources, targets=targets, pairs=config["pairs"], configs=config["configs"],
        seeds=seeds)
    result = run_patching(patching, loaded=loaded)
    first = [tokenizer(r["patched_answer_text"], add_special_tokens=False)["input_ids"][:1]
             == answer_token_ids(tokenizer, r["n_source"])[:1] for r in result.rows]
    return _check("boundary patching", float(np.mean(first)), PATCHED, ">=",
                  f"patched first answer token = the source count's, {len(first)} pairs at the last location")


def probe_checks(model: ModelSpec, organism, loaded, work: Path) -> list[dict[str, Any]]:
    """``probe after the live heads`` and ``probe before the live heads`` from one capture (into ``work``) and
    one ridge probe per location."""
    from countlens.llm.capture.experiment import CaptureConfig, run_capture
    from countlens.llm.organisms.experiment import HELD_OUT_SEED
    from countlens.llm.prompts import PromptSettings
    from countlens.probes import ProbeConfig, run_probes

    config = organism.config
    L = int(config["L"])
    per_seed = (L + 1) * len(config["pairs"]) * len(config["configs"])
    seeds = [HELD_OUT_SEED + j for j in range(-(-PROBE_ROWS // per_seed))]
    prompts = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config["pairs"],
                             configs=config["configs"], seeds=seeds)
    run_capture(CaptureConfig(model=model, prompts=prompts), work / "acts", loaded=loaded, progress=False)
    probes = run_probes(ProbeConfig(acts=str(work / "acts"), control=False))
    first = min(b for b, _ in organism.live_heads) + 1  # residual index after the first block with a live head
    accuracy = {p.index: p.stat("test_rounded_acc")[0] for p in probes.locations}
    before = max(accuracy[i] for i in accuracy if i < first)
    names = {p.index: p.name for p in probes.locations}
    return [_check("probe after the live heads", float(accuracy[first]), PROBED, ">=",
                   f"test rounded accuracy at {names[first]}, {len(seeds) * per_seed} held-out prompts"),
            _check("probe before the live heads", float(before), PROBED, "<",
                   f"best test rounded accuracy at {', '.join(names[i] for i in sorted(names) if i < first)}")]


def check_organism(folder: str | Path, work: str | Path | None = None, progress: bool = False) -> OrganismChecks:
    """Run every check on the organism in ``folder``, on prompts of its held-out data seeds (never trained on;
    its recorded accuracy is measured on them). ``work``: where the probe checks' capture is written (default:
    a temporary folder, removed after)."""
    import tempfile

    from countlens.llm.organisms.experiment import HELD_OUT_SEED, read_organism

    with about("model"):
        organism = read_organism(folder)
    seeds = [HELD_OUT_SEED + j for j in range(int(organism.config["held_out_seeds"]))]
    model = ModelSpec(model=str(folder))
    loaded = model.load(progress)
    checks = [answers_check(loaded, organism), *heads_checks(model, organism, loaded, seeds),
              *components_checks(model, organism, loaded, seeds),
              patching_check(model, organism, loaded, seeds, loaded.tokenizer)]
    with tempfile.TemporaryDirectory(prefix="countlens-organism-") as tmp:
        checks += probe_checks(model, organism, loaded, Path(work) if work is not None else Path(tmp))
    return OrganismChecks(str(folder), organism.live_heads, checks, result_provenance({"folder": str(folder),
                                                                                          "seeds": seeds}))


def run_checks(config: OrganismChecksConfig, *, progress: bool = False) -> OrganismChecks:
    """The experiment's run: :func:`check_organism` of ``config.model``."""
    return check_organism(config.model, progress=progress)


def checks_text(result: OrganismChecks) -> list[str]:
    """One line per check: PASS/FAIL, its name, value and bound."""
    return [f"{'PASS' if c['passed'] else 'FAIL'} {c['name']}: {c['value']} (must be {c['holds']} {c['bound']}; "
            f"{c['detail']})" for c in result.checks]


declare(Experiment(
    "organism-checks", "Ground truth: countlens's read-outs against the organism's planted circuit",
    OrganismChecksConfig, run_checks, OrganismChecks, order=910, reads={"model": "organism"},
    view="countlens.llm.organisms.figures:checks_view", options={"progress": True},
    presets={p: OrganismChecksConfig for p in ("quick", "full", "test")}))


__all__ = ["OrganismChecksConfig", "run_checks", "ACCURACY", "ZERO", "PATCHED", "OrganismChecks", "spread_pairs", "answers_check", "heads_checks",
           "components_checks", "patching_check", "probe_checks", "check_organism", "checks_text"]
