"""Figure 9b, steering at the boundary: a :class:`SteeringConfig` in (a capture folder, and the probes fitted
on it), a :class:`SteeringResult` out (``steering.json`` and ``steering.csv``).

A step is added to the boundary vector at one location and the forward continues; per step the model's greedy
answer and its answer distribution over the capture's count range (:func:`~countlens.llm.answers.answer_distribution`)
are compared with the clean run's. The cells (prompt × direction × Δ, and the clean run: the cell without a
step) run on the boundary-step runner (:func:`countlens.llm.boundary.boundary_scored_answers`): each batch of
prompts before its boundary once, then every cell one row of a batched one-token boundary step sharing that
cache, the step an ``add`` :class:`~countlens.llm.patching.edits.Setter` at the row's boundary, the candidates
teacher-forced and the greedy answer decoded from the step's cache — equal to a whole prompt pass per cell
(:func:`countlens.llm.patching.edits.scored_answers`), since no earlier key or value changes. Directions: the
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
from countlens.llm.boundary import boundary_scored_answers
from countlens.llm.capture.experiment import capture_model, capture_prompts, capture_spec
from countlens.llm.lens.readout import count_slope
from countlens.llm.models import LoadedModel, ModelPool, check_device
from countlens.llm.patching.edits import count_step, random_direction, steering_vector
from countlens.llm.patching.experiment import answer_shift, boundary_vectors, mean_or_none
from countlens.llm.prompts import PromptSettings, build_prompts

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
    """the capture to steer: its model and prompts, the capture the probes were fitted on and, in count units,
    the one v is fitted on"""
    probes: str = ""
    """probes.json written by `countlens probe --acts` on that capture (needed by {directions} probe)
    (default: none)"""
    location: str | None = None
    """the location to steer at: a name or index of the capture's locations (default: the probes' best)"""
    deltas: list[float] = field(default_factory=lambda: [-8.0, -4.0, 0.0, 4.0, 8.0])
    """steps delta, finite numbers, in {units}"""
    counts: list[int] = field(default_factory=lambda: [4, 8, 12, 16])
    max_prompts: int = 6
    """most prompts steered (spread over {counts})"""
    seed: int = 0
    """seed of the random control direction"""
    batch_size: int = 16
    answer_tokens: int = ANSWER_TOKENS
    device: str = "cpu"
    directions: list[str] = field(default_factory=lambda: ["probe"])
    """directions to steer along, comma-separated: probe (the ridge probe), mean-diff (the slope of the count
    centroids on n; needs {units} count); a random control is always added"""
    units: str = "readout"
    """readout: delta * w / |w|^2 (the probe reads delta more); count: delta * |v| along each direction (as
    far as delta more items)"""

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

@dataclass
class SteeringPlan:
    """A checked Figure 9b run before any weights are read: the capture's ``meta``; the steered ``location``
    and its index ``loc`` among the residual locations; the probe's ``w`` (d,) and the mean-difference ``v``
    (d,) (``None`` where not used); the capture's prompt settings with the steered counts; per direction the
    step ``rules`` and ``per_unit`` (:func:`step_rules`)."""

    meta: CaptureMeta
    location: str
    loc: int
    w: np.ndarray | None
    v: np.ndarray | None
    prompt_settings: PromptSettings
    rules: dict[str, Any]
    per_unit: float


def plan_steering(config: SteeringConfig) -> SteeringPlan:
    """Check ``config`` against the capture and the probes (no weights are read): the location, the counts,
    the directions."""
    from countlens.probes import ProbeResult

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
    counts = [int(c) for c in config.counts if int(c) in meta.counts]
    if not counts:
        raise ConfigError("counts", f"none of {{counts}} {list(config.counts)} is in the capture (its counts: "
                                    f"{meta.counts[0]}..{meta.counts[-1]})")
    prompt_settings = dataclasses.replace(capture_prompts(meta), counts=counts)
    v = mean_difference(capture, location) if config.units == "count" else None
    rules, per_unit = step_rules(config, w, v)
    return SteeringPlan(meta=meta, location=location, loc=location_names(n_blocks).index(location), w=w, v=v,
                        prompt_settings=prompt_settings, rules=rules, per_unit=per_unit)


@dataclass
class ScoredPass:
    """One set of cells: their greedy ``answers`` (:func:`~countlens.llm.boundary.boundary_scored_answers`) and their
    ``distribution`` over the candidates (:func:`~countlens.llm.answers.answer_distribution`)."""

    answers: Any
    distribution: Any


def steering_record(direction: str, delta: float, p, step_norm: float, boundary_norm: float, clean: ScoredPass,
                    i: int, steered: ScoredPass, r: int, candidates: list[int]) -> dict[str, Any]:
    """One record of :attr:`SteeringResult.rows`: prompt ``p`` (row ``i`` of the ``clean`` pass) steered along
    ``direction`` by ``delta`` (row ``r`` of the ``steered`` pass) with a step of norm ``step_norm`` on a
    boundary vector of norm ``boundary_norm``."""
    target = _target(p.n, delta, candidates)
    lp_clean = None if target is None else float(clean.answers.candidate_logprobs[i, target])
    lp_steered = None if target is None else float(steered.answers.candidate_logprobs[r, target])
    answer, clean_answer = steered.answers.answer[r], clean.answers.answer[i]
    expected, clean_expected = steered.distribution.expected[r], clean.distribution.expected[i]
    return {"direction": direction, "delta": delta, "seed": p.seed, "config": p.config, "pair": p.pair, "n": p.n,
            "clean_answer": clean_answer, "steered_answer_text": steered.answers.answer_text[r],
            "steered_answer": answer, "shift": answer_shift(answer, clean_answer), "step_norm": step_norm,
            "relative_norm": step_norm / float(boundary_norm), "clean_expected": float(clean_expected),
            "steered_expected": float(expected), "expected_shift": float(expected - clean_expected),
            "target": None if target is None else candidates[target], "clean_logp_target": lp_clean,
            "steered_logp_target": lp_steered, "logp_target_shift": None if target is None else lp_steered - lp_clean}


def curve_point(delta: float, step: np.ndarray, w: np.ndarray | None, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One point of a :attr:`SteeringResult.curves` curve: the means over the ``rows`` of one (direction, Δ)
    (:func:`steering_record`) stepped by ``step`` (d,); ``w``: the probe (``None`` without one)."""
    return {"delta": delta, "mean_shift": mean_or_none(r["shift"] for r in rows),
            "mean_answer": mean_or_none(r["steered_answer"] for r in rows),
            "parsed": sum(r["steered_answer"] is not None for r in rows),
            "readout_shift": None if w is None else float(w @ step), "step_norm": float(np.linalg.norm(step)),
            "mean_relative_norm": mean_or_none(r["relative_norm"] for r in rows),
            "mean_expected_shift": mean_or_none(r["expected_shift"] for r in rows),
            "mean_logp_target_shift": mean_or_none(r["logp_target_shift"] for r in rows)}


def run_steering(config: SteeringConfig, *, loaded: LoadedModel | None = None,
                 progress: bool = False, pool: ModelPool | None = None) -> SteeringResult:
    """Figure 9b on the capture's own prompts (rebuilt from its recorded settings) with the capture's model
    (``loaded`` reuses it, already loaded). Bad input is refused before the model loads (:func:`plan_steering`)."""
    import torch

    started = time.perf_counter()
    plan = plan_steering(config)
    if loaded is None:
        loaded = capture_model(plan.meta, config.device, progress, pool)
    model, tok = loaded.model, loaded.tokenizer
    template, loc = plan.meta.template, plan.loc
    prompts = build_prompts(tok, plan.prompt_settings)
    prompts = [prompts[i] for i in np.linspace(0, len(prompts) - 1, min(config.max_prompts, len(prompts))).astype(int)]
    groups = [(d, float(delta)) for d in plan.rules for delta in config.deltas]
    steps = {(d, delta): plan.rules[d](delta) for d, delta in groups}
    candidates = answer_candidates(list(plan.meta.counts))
    truth = [p.n for p in prompts]
    P = len(prompts)
    with torch.inference_mode():  # answers and every candidate's log-probability from one boundary step's cache
        edits = [None] * P + [(loc, "add", steps[g]) for g in groups for _ in prompts]
        every = boundary_scored_answers(model, tok, prompts, candidates, edits, template, config.batch_size,
                                        config.answer_tokens)
        clean, steered = every.take(range(P)), every.take(range(P, len(edits)))
        norms = np.linalg.norm(boundary_vectors(model, tok, prompts, [loc], config.batch_size)[:, 0].numpy(), axis=1)
    clean = ScoredPass(clean, answer_distribution(clean.candidate_logprobs, candidates, truth))
    steered = ScoredPass(steered, answer_distribution(steered.candidate_logprobs, candidates, truth * len(groups)))
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, Any]]] = {d: [] for d in plan.rules}
    for g, (d, delta) in enumerate(groups):
        step_norm = float(np.linalg.norm(steps[(d, delta)]))
        mine = [steering_record(d, delta, p, step_norm, norms[i], clean, i, steered, g * len(prompts) + i, candidates)
                for i, p in enumerate(prompts)]
        rows.extend(mine)
        curves[d].append(curve_point(delta, steps[(d, delta)], plan.w, mine))
    return SteeringResult(
        config=config.to_dict(), model=loaded.model_id, location=plan.location,
        probe_norm=None if plan.w is None else float(np.linalg.norm(plan.w)),
        clean_accuracy=clean.answers.accuracy(truth), curves=curves, rows=rows,
        seconds=round(time.perf_counter() - started, 3), provenance=result_provenance(config), units=config.units,
        step_per_unit=plan.per_unit, mean_diff_norm=None if plan.v is None else float(np.linalg.norm(plan.v)),
        candidates=candidates, clean_expected=float(np.mean(clean.distribution.expected)))


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
           "SteeringPlan", "plan_steering", "ScoredPass", "steering_record", "curve_point", "run_steering"]
