"""Figure 9b, steering at the boundary: a :class:`SteeringConfig` in (a capture folder, and the probes fitted
on it), a :class:`SteeringResult` out (``steering.json`` and ``steering.csv``).

A step is added to the boundary vector at one location (:class:`countlens.llm.patching.edits.BoundaryEdit`) and
the forward continues; per step the model's greedy answer and its answer distribution over the capture's
count range, both from the same prompt pass (:func:`countlens.llm.patching.edits.scored_answers` /
:func:`~countlens.llm.answers.answer_distribution`), are compared with the clean run's. Directions: the
validation-selected ridge probe ``w`` (``probe``), the mean-difference direction ``v`` (``mean-diff``: the least-squares slope of the count
centroids on n, :func:`countlens.llm.lens.readout.count_slope`), and a random direction (the control). Units:

- ``readout`` (the default, the probe's read-out units): ``Δ · w / ‖w‖²``, so the probe reads exactly Δ
  more; the random control has the norm of the probe's step. On a model whose probe has a large norm
  (SmolLM2-135M: ‖w‖ ≈ 2,900 after block 1) these steps are tiny (Δ = 8 moves the vector by 0.003).
- ``count``: every direction ``u`` (probe, mean-difference, random) scaled to ``Δ · ‖v‖ · u / ‖u‖``: a step
  of Δ is as long as Δ more items move the vector on average, whatever the direction.

Every row records ``‖step‖ / ‖boundary vector‖`` (``relative_norm``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from countlens.core.capture import Capture, CaptureMeta, open_capture
from countlens.core.errors import ConfigError, UsageError, about, literal
from countlens.core.fields import AtLeast, Checked, Ints, Numbers, OneOf, check_fields
from countlens.core.locations import location_names, resolve_location
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.answers import ANSWER_TOKENS, answer_candidates, answer_distribution
from countlens.llm.capture.experiment import capture_model, capture_prompts, capture_spec
from countlens.llm.lens.readout import count_slope
from countlens.llm.models import LoadedModel, ModelPool, check_device
from countlens.llm.patching.edits import count_step, random_direction, scored_answers, steering_vector
from countlens.llm.patching.experiment import answer_shift, boundary_vectors, mean_or_none
from countlens.llm.prompts import build_prompts

if TYPE_CHECKING:  # imported where used: it brings scikit-learn, which a capture never needs
    from countlens.probes import ProbeResult

DIRECTIONS = ("probe", "mean-diff")
UNITS = ("readout", "count")
CONTROL = "random"


@dataclass
class SteeringConfig(ExperimentConfig):
    """Figure 9b: steering at the boundary, at location ``location`` (a name or index of the capture's
    locations; default the best location of ``probes``), along each of ``directions`` (``probe``: the
    validation-selected ridge probe of ``probes``, fitted on the capture ``acts``, in native coordinates;
    ``mean-diff``: the least-squares slope of the capture's count centroids on n) and a random direction
    (seed ``seed``, the control), for every Δ of ``deltas`` in ``units`` (``readout``: Δ·w/‖w‖², the probe's
    read-out moves by Δ — the probe only; ``count``: Δ·‖v‖ along each direction, as far as Δ more items move
    the vector). The prompts: the capture's own with counts ``counts`` (at most ``max_prompts``, spread over
    the counts). The model is the capture's own, on ``device``; each answer is at most ``answer_tokens``
    greedy tokens."""

    acts: str = ""
    probes: str = ""
    location: str | None = None
    deltas: list[float] = field(default_factory=lambda: [-8.0, -4.0, 0.0, 4.0, 8.0])
    counts: list[int] = field(default_factory=lambda: [4, 8, 12, 16])
    max_prompts: int = 6
    seed: int = 0
    batch_size: int = 16
    answer_tokens: int = ANSWER_TOKENS
    device: str = "cpu"
    directions: list[str] = field(default_factory=lambda: ["probe"])
    units: str = "readout"

    FIELDS: ClassVar[dict] = {"deltas": Numbers(), "counts": Ints(minimum=0), "max_prompts": AtLeast(1),
                              "batch_size": AtLeast(1), "answer_tokens": AtLeast(1), "device": Checked(check_device),
                              "units": OneOf(UNITS)}

    def validate(self) -> SteeringConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built."""
        check_fields(self, self.FIELDS)
        directions = list(self.directions)
        if not directions or any(d not in DIRECTIONS for d in directions) or len(set(directions)) < len(directions):
            raise ConfigError("directions", f"{{directions}} must list distinct directions among "
                                            f"{', '.join(DIRECTIONS)}, got " + literal(",".join(directions)))
        if self.units == "readout" and directions != ["probe"]:
            raise ConfigError("units", "{units:readout} (the default) moves the probe's read-out by delta, along "
                                       "the probe alone; steer along mean-diff with {units:count}",
                              also=("directions",))
        if "probe" in directions and not str(self.probes).strip():
            raise ConfigError("probes", "the probe direction needs {probes}, a probes.json fitted on {acts}; or "
                                        "steer along {directions:mean-diff}", also=("acts", "directions"))
        if not str(self.acts).strip():
            raise ConfigError("acts", "{acts} must name the capture to steer (its model, its prompts, and in "
                                      "{units:count} the mean-difference direction are fitted on it)",
                              also=("units",))
        if not str(self.probes).strip() and self.location is None:
            raise ConfigError("location", "name the location to steer at with {location} (without {probes} "
                                          "there is no best probe location)", also=("probes",))
        return self


@dataclass
class SteeringResult(Result):
    """Per direction (``probe``, ``mean-diff``, and the control ``random``) and Δ (``curves``):
    ``mean_shift`` (mean steered − clean parsed answer over rows where both parse), ``mean_answer``,
    ``parsed``, ``readout_shift`` (the probe's read-out change; Δ along the probe in readout units;
    ``None`` without probes), ``step_norm`` (‖step‖), ``mean_relative_norm`` (‖step‖ / ‖boundary vector‖),
    ``mean_expected_shift`` (of Σ k p(k) over the candidates ``candidates``), ``mean_logp_target_shift``
    (of log p("n + Δ"), where n + Δ is a candidate). ``units``: ``readout`` or ``count``;
    ``step_per_unit``: ‖step‖ per unit of Δ (1/‖w‖, or ‖v‖ in count units); ``mean_diff_norm`` = ‖v‖;
    ``probe_norm`` = ‖w‖ (native; ``None`` without probes). ``rows``: one record per (prompt, direction,
    Δ), also written as ``steering.csv``."""

    FILE: ClassVar[str] = "steering.json"
    CSV: ClassVar[str] = "steering.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "rows"}
    COMMAND: ClassVar[str] = "countlens llm steer"

    config: dict[str, Any]
    model: str
    location: str
    probe_norm: float | None
    clean_accuracy: float
    curves: dict[str, list[dict[str, Any]]]
    rows: list[dict[str, Any]]
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)
    units: str = "readout"
    step_per_unit: float | None = None
    mean_diff_norm: float | None = None
    candidates: list[int] = field(default_factory=list)
    clean_expected: float | None = None


# ----------------------------------------------------------------------------------- inputs

def probe_mismatch(probes: ProbeResult, model: str, d: int, locations, rows=None) -> list[str]:
    """What differs between the capture ``probes`` were fitted on and a run: the one criterion every reader of
    a probe applies (steering, the lenses, head ablation). The probes fit when they were fitted on the run's
    ``model`` (its id) at its width ``d``, at locations all among the run's ``locations``, and — where the run
    reads a capture — on that capture's rows (``rows``: the row counts that match it, its rows or its
    prompts; ``None`` where the run reads no capture). Returns the names of what differs, in the order
    ``model``, ``locations``, ``rows``, ``width``; empty where they fit."""
    source, names = probes.source or {}, [loc.name for loc in probes.locations]
    return [what for what, ok in (
        ("model", source.get("model") == model),
        ("locations", bool(names) and set(names) <= set(locations)),
        ("rows", rows is None or source.get("rows") in tuple(rows)),
        ("width", source.get("d") == d)) if not ok]


def check_probes(probes: ProbeResult, meta: CaptureMeta) -> None:
    """``ConfigError("probes")`` for probes fitted on another capture than the one ``meta`` describes
    (:func:`probe_mismatch`: other model, locations, rows or width)."""
    mismatch = probe_mismatch(probes, meta.model_id, meta.d, meta.locations, (meta.n_rows, meta.n_prompts))
    if mismatch:
        raise ConfigError("probes", f"{{probes}} holds probes fitted on another capture ({', '.join(mismatch)} "
                                    "differ); fit probes on this capture (`countlens probe` on {acts})",
                          also=("acts",))


def chosen_probe(probes: ProbeResult, location: str | None):
    """The :class:`~countlens.probes.probe.LocationProbes` of ``probes`` at ``location`` (default: its
    best location, :meth:`~countlens.probes.probe.ProbeResult.best_location`), whose first fit holds the
    validation-selected probe's coefficients; ``ConfigError("location")`` for a location the probes lack,
    ``ConfigError("probes")`` for probes without coefficients."""
    names = [loc.name for loc in probes.locations]
    if location is None:
        chosen = probes.best_location()
    else:
        try:
            chosen = probes.locations[resolve_location(names, location)]
        except UsageError as exc:
            raise ConfigError("location", "{location}: " + literal(str(exc))) from None
    if not chosen.fits or chosen.fits[0].coef is None:
        raise ConfigError("probes", "{probes} holds no probe coefficients; refit it with `countlens probe`")
    return chosen


def probe_direction(probes: ProbeResult, meta: CaptureMeta, location: str | None) -> tuple[str, np.ndarray]:
    """(location name, native coefficients ``w`` (d,)) of the validation-selected probe of ``probes`` at
    ``location`` (default: its best location), checked against the capture's ``meta``;
    ``ConfigError("probes")`` for probes fitted on another capture (other model, locations, rows or width)
    or without coefficients, ``ConfigError("location")`` for a location the probes lack."""
    check_probes(probes, meta)
    chosen = chosen_probe(probes, location)
    return chosen.name, np.asarray(chosen.fits[0].coef, dtype=np.float64)


def steered_location(meta: CaptureMeta, location: str | int) -> str:
    """The capture location ``location`` names; ``ConfigError("location")`` for one the capture lacks or
    that is no residual location a step can be added at."""
    names = list(meta.locations)
    try:
        name = names[resolve_location(names, location)]
    except UsageError as exc:
        raise ConfigError("location", "{location}: " + literal(str(exc))) from None
    return name


def mean_difference(acts: str | Capture, location: str) -> np.ndarray:
    """The mean-difference direction ``v`` (d,) at ``location`` of the capture ``acts``: the least-squares
    slope of its count centroids on n (:func:`countlens.llm.lens.readout.count_slope`), from the boundary rows;
    ``ConfigError("acts")`` for a capture that cannot give one (unreadable, one count, centroids that do not
    move with n)."""
    with about("acts"):
        capture = open_capture(acts).boundary()
    n = capture.counts()
    if len(np.unique(n)) < 2:
        raise ConfigError("acts", "{units:count} and mean-diff fit the count direction on {acts}, which holds "
                                  f"one count ({int(n[0])}); capture at least two counts", also=("units",))
    v = count_slope(capture.acts(location), n)
    if not np.linalg.norm(v) > 0:
        raise ConfigError("acts", "{acts}: the count centroids do not move with n at " + literal(location)
                                  + "; steer at another {location}", also=("location",))
    return v


def step_rules(config: SteeringConfig, w: np.ndarray | None, v: np.ndarray | None) -> dict[str, Any]:
    """Per direction (and the control ``random``) the step for a Δ: ``rules[name](delta) -> (d,)``, and
    ``per_unit``, ‖step‖ per unit of Δ."""
    if config.units == "readout":  # the probe's read-out units: Δ·w/‖w‖², the control of the same norm
        random = random_direction(w, config.seed)
        return {"probe": lambda delta: steering_vector(w, delta),
                CONTROL: lambda delta: steering_vector(random, delta)}, 1.0 / float(np.linalg.norm(w))
    length = float(np.linalg.norm(v))
    vectors = {"probe": w, "mean-diff": v}
    rules = {d: (lambda u: lambda delta: count_step(u, delta, length))(vectors[d]) for d in config.directions}
    random = random_direction(v, config.seed)
    rules[CONTROL] = lambda delta: count_step(random, delta, length)
    return rules, length


# ----------------------------------------------------------------------------------- the run

def run_steering(config: SteeringConfig, *, loaded: LoadedModel | None = None,
                 progress: bool = False, pool: ModelPool | None = None) -> SteeringResult:
    """Figure 9b on the capture's own prompts (rebuilt from its recorded settings) with the capture's model
    (``loaded`` reuses it, already loaded). Bad input is refused before the model loads."""
    import torch

    from countlens.probes import ProbeResult

    started = time.perf_counter()
    with about("acts"):
        capture = open_capture(config.acts, rows=False)
    meta = capture.meta
    w = None
    if str(config.probes).strip():
        with about("probes"):
            probes = ProbeResult.read(config.probes)
        location, w = probe_direction(probes, meta, config.location)
    else:
        location = steered_location(meta, config.location)
    n_blocks = int(meta.n_blocks or len(meta.locations) - 1)
    if location not in location_names(n_blocks):
        raise ConfigError("location", f"{{location}}: {literal(location)} is no residual location of the model "
                                      "(embed or blocks.N.hook_resid_post); choose one")
    loc = location_names(n_blocks).index(location)
    counts = [int(c) for c in config.counts if int(c) in meta.counts]
    if not counts:
        raise ConfigError("counts", f"none of {{counts}} {list(config.counts)} is in the capture (its counts: "
                                    f"{meta.counts[0]}..{meta.counts[-1]})")
    prompt_settings = dataclasses.replace(capture_prompts(meta), counts=counts)  # before the weights load
    v = mean_difference(capture, location) if config.units == "count" else None
    rules, per_unit = step_rules(config, w, v)
    if loaded is None:
        loaded = capture_model(meta, config.device, progress, pool)
    model, tok = loaded.model, loaded.tokenizer
    template = meta.template
    prompts = build_prompts(tok, prompt_settings)
    prompts = [prompts[i] for i in np.linspace(0, len(prompts) - 1, min(config.max_prompts, len(prompts))).astype(int)]
    groups = [(d, float(delta)) for d in rules for delta in config.deltas]
    steps = {(d, delta): rules[d](delta) for d, delta in groups}
    candidates = answer_candidates(list(meta.counts))
    truth = [p.n for p in prompts]
    with torch.inference_mode():  # answers and every candidate's log-probability from one prompt pass
        clean = scored_answers(model, tok, prompts, candidates, template, config.batch_size, config.answer_tokens)
        edits = [(loc, "add", steps[g]) for g in groups for _ in prompts]
        steered = scored_answers(model, tok, prompts * len(groups), candidates, template, config.batch_size,
                                 config.answer_tokens, edits=edits)
        norms = np.linalg.norm(boundary_vectors(model, tok, prompts, [loc], config.batch_size)[:, 0].numpy(), axis=1)
    clean_lp, steered_lp = clean.candidate_logprobs, steered.candidate_logprobs
    clean_dist = answer_distribution(clean_lp, candidates, truth)
    steered_dist = answer_distribution(steered_lp, candidates, truth * len(groups))
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, Any]]] = {d: [] for d in rules}
    for g, (d, delta) in enumerate(groups):
        step = steps[(d, delta)]
        step_norm = float(np.linalg.norm(step))
        mine = []
        for i, p in enumerate(prompts):
            r = g * len(prompts) + i
            target = _target(p.n, delta, candidates)
            lp_clean = None if target is None else float(clean_lp[i, target])
            lp_steered = None if target is None else float(steered_lp[r, target])
            mine.append({"direction": d, "delta": delta, "seed": p.seed, "config": p.config, "pair": p.pair,
                         "n": p.n, "clean_answer": clean.answer[i], "steered_answer_text": steered.answer_text[r],
                         "steered_answer": steered.answer[r], "shift": answer_shift(steered.answer[r], clean.answer[i]),
                         "step_norm": step_norm, "relative_norm": step_norm / float(norms[i]),
                         "clean_expected": float(clean_dist.expected[i]),
                         "steered_expected": float(steered_dist.expected[r]),
                         "expected_shift": float(steered_dist.expected[r] - clean_dist.expected[i]),
                         "target": None if target is None else candidates[target], "clean_logp_target": lp_clean,
                         "steered_logp_target": lp_steered,
                         "logp_target_shift": None if target is None else lp_steered - lp_clean})
        rows.extend(mine)
        curves[d].append({"delta": delta, "mean_shift": mean_or_none(r["shift"] for r in mine),
                          "mean_answer": mean_or_none(r["steered_answer"] for r in mine),
                          "parsed": sum(r["steered_answer"] is not None for r in mine),
                          "readout_shift": None if w is None else float(w @ step),
                          "step_norm": step_norm, "mean_relative_norm": mean_or_none(r["relative_norm"] for r in mine),
                          "mean_expected_shift": mean_or_none(r["expected_shift"] for r in mine),
                          "mean_logp_target_shift": mean_or_none(r["logp_target_shift"] for r in mine)})
    return SteeringResult(config.to_dict(), loaded.model_id, location,
                          None if w is None else float(np.linalg.norm(w)), clean.accuracy(truth), curves, rows,
                          round(time.perf_counter() - started, 3), result_provenance(config), config.units, per_unit,
                          None if v is None else float(np.linalg.norm(v)), candidates,
                          float(np.mean(clean_dist.expected)))


def _target(n: int, delta: float, candidates: list[int]) -> int | None:
    """The index among ``candidates`` of ``n + Δ`` (an integer Δ only), ``None`` where it is no candidate."""
    if abs(delta - round(delta)) > 1e-9:
        return None
    k = int(n + round(delta))
    return k - candidates[0] if candidates[0] <= k <= candidates[-1] else None



# Count units (a step of 1 moves the vector as far as one more item does), along the probe and the
# mean-difference direction, each with its random control of the same norm.
_DIRECTIONS = {"units": "count", "directions": ["probe", "mean-diff"]}

declare(Experiment(
    "steering", "Figure 9b: steering along the probe and the mean difference", SteeringConfig, run_steering,
    SteeringResult, order=160, figure="countlens.llm.steering.figures:draw_steering", plot="countlens.llm.steering.figures:plot_steering", view="countlens.llm.steering.figures:steering_view", reads={"acts": "capture", "probes": "probe"},
    presets={"quick": partial(SteeringConfig, max_prompts=4, **_DIRECTIONS),
             "full": partial(SteeringConfig, counts=list(range(5, 51, 5)), max_prompts=40, **_DIRECTIONS),
             "test": partial(SteeringConfig, deltas=[-2.0, 0.0, 2.0], counts=[3, 6], max_prompts=2, answer_tokens=3,
                             **_DIRECTIONS)},
    inherits=("device",), uses_model=True, options={"progress": True}, study="patching",
    cli="countlens.llm.steering.cli"))


__all__ = ["DIRECTIONS", "UNITS", "CONTROL", "SteeringConfig", "SteeringResult", "probe_mismatch", "check_probes",
           "chosen_probe", "probe_direction",
           "capture_spec", "capture_model", "steered_location", "mean_difference", "step_rules",
           "run_steering"]
