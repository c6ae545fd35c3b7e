"""Figure 9a, boundary activation patching: a :class:`PatchingConfig` in, a :class:`PatchingResult` out
(``patching.json`` and ``patching.csv``). The edits (one boundary vector replaced per prompt and location)
run on the boundary-step runner (:mod:`countlens.llm.boundary`,
:func:`~countlens.llm.boundary.boundary_scored_answers`): the target prompts before their boundary run once per
batch, then every (target, location) — and the clean run, the cell without a patch — is one row of a batched
one-token boundary step sharing that cache, the patch a :class:`~countlens.llm.patching.edits.Setter` at the
row's boundary; every candidate answer is teacher-forced and the greedy answer decoded (``answer_tokens`` steps)
from the step's cache. A patch at the boundary changes no earlier key or value, so this equals a whole prompt
pass per cell (:func:`~countlens.llm.patching.edits.scored_answers`, tests/unit/test_boundary_answers.py).

Beside the greedy answer (which a weak model leaves at "1" whatever is patched), every answer is scored as a
distribution over the candidate counts (docs/definitions.md §2, :mod:`countlens.llm.answers`): the normalised
logit difference ``(LD_patched − LD_target) / (LD_source − LD_target)`` with ``LD = log p("n_s") −
log p("n_t")`` (0: the target run's; 1: the source run's), and the shift of the expected count Σ k p(k). They
move where the greedy answer does not, so they show a weak model's boundary too; they cannot say that the model
would *answer* the source count (a rise of p("n_s") from 1e-4 to 1e-3 scores the same as one from 0.1 to 1).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError
from countlens.core.fields import AtLeast, Nested, Positive, check_fields
from countlens.core.locations import location_label, location_names
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.answers import (
    ANSWER_TOKENS,
    MIN_LD_GAP,
    answer_distribution,
    candidate_logprobs,
    checked_candidates,
    normalised_ld,
)
from countlens.llm.boundary import boundary_scored_answers
from countlens.llm.capture.residuals import (
    BoundaryCapture,
    context_length,
    n_blocks_of,
    pad_batch,
    pad_token_id,
)
from countlens.llm.hooks import residual_locations
from countlens.llm.models import (
    LoadedModel,
    ModelPool,
    ModelRef,
    ModelSpec,
    load_model_config,
    load_tokenizer,
)
from countlens.llm.patching.edits import logit_difference
from countlens.llm.prompts import DEFAULT_PAIRS, Prompt, PromptSettings, build_prompts

QUICK_LOCATIONS = "0:-1:2,-1"  # the quick preset's locations: every other one, and the last


def _patching_prompts() -> PromptSettings:
    """Figure 9a's quick prompt set: L = 64, one token pair, wording and seed (its counts: the default sources
    and targets)."""
    return PromptSettings(L=64, counts=[3, 6, 9, 12], per_count=1, pairs=[["a", "b"]], configs=["count"], seeds=[0])


# The prompt settings an older patching.json wrote flat, beside the sources and targets.
_FLAT_PROMPTS = ("L", "per_count", "pairs", "configs", "seeds", "template")


def _check_count_pairs(sources, targets, L: int) -> list[int]:
    """``ConfigError`` naming ``sources`` or ``targets`` unless they are equally long, non-empty, in ``0..L`` and
    pairwise different; returns the prompt set's counts (every source and target, sorted, once)."""
    if not sources or len(sources) != len(targets):
        raise ConfigError("sources", f"{{sources}} and {{targets}} must be equally long, non-empty count lists, "
                                     f"got {len(sources)} and {len(targets)}", also=("targets",))
    for name, counts in (("sources", sources), ("targets", targets)):
        counts = [int(c) for c in counts]
        if min(counts) < 0 or max(counts) > int(L):
            raise ConfigError(name, f"{{{name}}} must lie in 0..{L} (at most {{L}}), got "
                                    f"{min(counts)}..{max(counts)}", also=("L",))
    if any(int(s) == int(t) for s, t in zip(sources, targets, strict=True)):
        raise ConfigError("sources", "a source count equals its target count in {sources} and {targets}; a "
                                     "patch must change the count", also=("targets",))
    return sorted({int(c) for c in [*sources, *targets]})


@dataclass
class PatchingConfig(ExperimentConfig):
    """Figure 9a: boundary activation patching. Pairs of prompts that differ only in count (same seed,
    wording, token pair and draw): target count ``targets[i]`` is patched with source count ``sources[i]`` at
    every location of ``locations`` (a spec for :func:`countlens.core.locations.resolve_locations`; default
    all), with ``model`` (:class:`~countlens.llm.models.ModelSpec`); each answer is at most
    ``answer_tokens`` greedy tokens; every candidate answer of the count range is also teacher-forced from the
    same prompt pass (``normalised_ld``, the expected count), pairs whose source and target logit
    differences are closer than ``min_gap`` nats left out of ``normalised_ld``. ``prompts``
    (:class:`~countlens.llm.prompts.PromptSettings`, nested as in every experiment): the prompt set holding every
    source and target prompt; its ``counts`` are the sources and targets (set from them). The default ``L = 64``
    keeps the prompts short: the experiment costs one prefix pass per batch of targets and one boundary-step
    row per pair and location, and small counts are where a 135M model answers at all."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompts: PromptSettings = field(default_factory=_patching_prompts)
    sources: list[int] = field(default_factory=lambda: [12, 9, 6, 3])
    """source counts n_s, one per target"""
    targets: list[int] = field(default_factory=lambda: [3, 6, 9, 12])
    """target counts n_t, the prompts that are patched"""
    locations: str | None = None
    batch_size: int = 16
    answer_tokens: int = ANSWER_TOKENS
    min_gap: float = MIN_LD_GAP

    FIELDS: ClassVar[dict] = {"model": Nested(ModelSpec, "model"), "prompts": Nested(PromptSettings),
                              "batch_size": AtLeast(1), "answer_tokens": AtLeast(1), "min_gap": Positive("nats")}

    def validate(self) -> PatchingConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built. The prompt set's counts are set from the sources and targets."""
        check_fields(self, self.FIELDS, assign=True)
        counts = _check_count_pairs(self.sources, self.targets, self.prompts.L)
        if list(self.prompts.counts) != counts:
            self.prompts = dataclasses.replace(self.prompts, counts=counts)
        return self

    def with_options(self, **values: Any) -> PatchingConfig:
        """A copy with the settings of ``values`` set by name (:func:`~countlens.core.options.with_options`); the
        prompt set's counts follow the sources and targets, checked against the new ``L`` first (so a source
        beyond it names ``sources``)."""
        if "counts" in values:
            raise ConfigError("counts", "the counts of boundary patching are its {sources} and {targets}; set "
                                        "those", also=("sources", "targets"))
        sources, targets = values.get("sources", self.sources), values.get("targets", self.targets)
        prompts = values.get("prompts", self.prompts)
        values["counts"] = _check_count_pairs(sources, targets, values.get("L", prompts.L))
        if isinstance(values.get("prompts"), PromptSettings):
            values["prompts"] = dataclasses.replace(values["prompts"], counts=values.pop("counts"))
        return super().with_options(**values)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PatchingConfig:
        """The config of a ``patching.json``'s ``config``; an older one, whose prompt settings lie flat
        (``L``, ``pairs``, ... beside ``sources``), reads too."""
        data = dict(data)
        flat = {k: data.pop(k) for k in _FLAT_PROMPTS if k in data}
        if flat:
            counts = sorted({int(c) for c in [*data.get("sources", []), *data.get("targets", [])]})
            data["prompts"] = {**flat, "counts": counts, **(data.get("prompts") or {})}
        return super().from_dict(data)


@dataclass
class PatchingResult(Result):
    """Per location (``locations``): ``moved_to_source`` (fraction of patched answers equal to ``n_s``),
    ``mean_shift`` (mean patched − clean parsed answer, over rows where both parse), ``mean_relative_shift``
    (the same divided by ``n_s − n_t``: 1 = all the way to the source), ``logprob_change`` (mean change of
    the target's correct-answer log-probability, nats), ``parsed`` (patched answers that parse); and the scores
    that do not need the greedy answer to move (docs/definitions.md §2): ``normalised_ld`` (mean over the
    normalised pairs of ``(LD_patched − LD_target) / (LD_source − LD_target)``, ``LD = log p("n_s") −
    log p("n_t")``, every answer token teacher-forced: 0 = the target run, 1 = the source run),
    ``expected_shift`` (mean shift of the expected count Σ k p(k) over the candidates ``candidates``),
    ``expected_relative_shift`` (the same divided by ``n_s − n_t``) and ``logp_source_change`` (mean change of
    log p("n_s")). ``unnormalised``: the pairs (``"seed/config/pair/n_s->n_t"``) whose
    ``|LD_source − LD_target|`` is below ``min_gap``: left out of ``normalised_ld``, never divided by.
    ``rows``: one record per (pair of prompts, location), also written as ``patching.csv``."""

    FILE: ClassVar[str] = "patching.json"
    CSV: ClassVar[str] = "patching.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "rows"}
    COMMAND: ClassVar[str] = "countlens llm patch"

    config: dict[str, Any]
    model: str
    clean_accuracy: float
    locations: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)
    candidates: list[int] = field(default_factory=list)
    clean_expected: float | None = None
    unnormalised: list[str] = field(default_factory=list)
    n_unnormalised: int = 0


def answer_shift(after: int | None, before: int | None) -> int | None:
    """``after - before`` of two parsed answers, ``None`` where either did not parse."""
    return None if after is None or before is None else after - before


def mean_or_none(values) -> float | None:
    """The mean of the values that are not ``None`` (nor NaN); ``None`` when none is left."""
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return float(np.mean(values)) if values else None


@dataclass
class PatchingPlan:
    """A checked Figure 9a run before any weights are read: the model's files, its tokenizer, the (source,
    target) prompt pairs, the location indices and the model's number of blocks."""

    config: PatchingConfig
    ref: ModelRef
    tokenizer: Any
    pairs: list[tuple[Prompt, Prompt]]
    locations: list[int]
    n_blocks: int


def plan_patching(config: PatchingConfig, progress: bool = False, pool: ModelPool | None = None) -> PatchingPlan:
    """Check ``config`` with the tokenizer and the model's config alone (no weights are read): the prompts
    (items one token each, the chat template), the candidate answers (:func:`~countlens.llm.answers.
    checked_candidates`), a source prompt for every target prompt, the locations, the context length."""
    ref = config.model.resolve(progress, pool=pool)
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    n_blocks = n_blocks_of(model_config)
    locations = residual_locations(config.locations, n_blocks)
    candidates = checked_candidates(tokenizer, patching_candidates(config), config.prompts.template, "sources")
    prompts, seen = {}, Counter()
    for p in build_prompts(tokenizer, config.prompts):
        group = (p.seed, p.config, p.pair, p.n)
        prompts[(*group, seen[group])] = p
        seen[group] += 1
    pairs = _count_pairs(config, prompts)
    n_ctx = context_length(model_config)
    longest = max(len(c) for c in candidates)
    needed = max(p.n_tokens for pair in pairs for p in pair) + max(longest, int(config.answer_tokens)) - 1
    if n_ctx is not None and needed > n_ctx:
        raise ConfigError("L", f"the longest prompt and its answer take {needed} tokens but the model's context "
                               f"is {n_ctx}; lower {{L}}")
    return PatchingPlan(config, ref, tokenizer, pairs, locations, n_blocks)


def _count_pairs(config: PatchingConfig, prompts: dict[tuple, Prompt]) -> list[tuple[Prompt, Prompt]]:
    """(source, target) prompt pairs: each target count's prompts with the source count's drawn alike (the
    same seed, wording, pair and draw index). ``ConfigError("sources")`` where a target count has no prompt or a
    source count fewer than it (a file task's records: a count's own number of them)."""
    have = Counter(key[3] for key in prompts)
    pairs = []
    for n_s, n_t in zip((int(c) for c in config.sources), (int(c) for c in config.targets), strict=True):
        mine = [(prompts.get((s, c, pr, n_s, k)), p) for (s, c, pr, n, k), p in prompts.items() if n == n_t]
        if not mine or any(source is None for source, _ in mine):
            raise ConfigError("sources", f"boundary patching pairs each prompt of a target count with a prompt of "
                                         f"its source count drawn alike, but {{task}} gives {have[n_t]} prompts of "
                                         f"count {n_t} and {have[n_s]} of count {n_s}; choose {{sources}} and "
                                         "{targets} so that each source count has at least as many prompts as its "
                                         "target", also=("targets", "task"))
        pairs += mine
    return pairs


def patching_candidates(config: PatchingConfig) -> list[int]:
    """The candidate answers of Figure 9a's distributions: every count of the prompt set's range
    ``min..max`` of the sources and targets."""
    counts = [int(c) for c in [*config.sources, *config.targets]]
    return list(range(min(counts), max(counts) + 1))


@dataclass
class PatchingScores:
    """Every pass of a Figure 9a run over its P (source, target) pairs: the target prompts' ``clean`` and
    ``patched`` answers (:func:`~countlens.llm.boundary.boundary_scored_answers`; patched row ``j * P + i`` is
    pair i patched at location j), the sources' candidate log-probabilities ``lp_source`` (P, K), the answer
    distributions over ``candidates`` of the three (``dist_target``, ``dist_source``, ``dist_patched``), and
    ``ld_target``, ``ld_source`` (P,): log p("n_s") − log p("n_t") of the target and the source runs (nats)."""

    candidates: list[int]
    n_source: np.ndarray
    n_target: np.ndarray
    clean: Any
    patched: Any
    lp_source: np.ndarray
    dist_target: Any
    dist_source: Any
    dist_patched: Any
    ld_target: np.ndarray = field(init=False)
    ld_source: np.ndarray = field(init=False)

    def __post_init__(self):
        every = np.arange(len(self.n_source))
        self.ld_target = self.ld(self.clean.candidate_logprobs, every)
        self.ld_source = self.ld(self.lp_source, every)

    def column(self, count: int) -> int:
        """The candidate column of the answer ``count``."""
        return self.candidates.index(count)

    def ld(self, lp: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """log p("n_s") − log p("n_t") of each pair's row ``rows`` (P,) of the log-probabilities ``lp``."""
        return logit_difference(lp[rows], [self.column(k) for k in self.n_source],
                                [self.column(k) for k in self.n_target])


def source_pass(model, tokenizer, sources, locations: list[int], candidates: list[int], template: str,
                batch_size: int):
    """The source prompts' boundary vectors at ``locations`` ((P, locations, d) float32, as
    :func:`boundary_vectors`) and their candidates' log-probabilities ((P, K),
    :func:`~countlens.llm.answers.candidate_logprobs`), from one prompt pass per batch (the capture's hooks
    active during it)."""
    import contextlib

    import torch

    capture, vectors = BoundaryCapture(model, locations, early_stop=False), []

    @contextlib.contextmanager
    def keep(rows, index):
        capture.expect(index)
        with capture:
            yield
        vectors.append(capture.result())

    lp = candidate_logprobs(model, tokenizer, sources, candidates, template, batch_size, context=keep)
    return torch.cat(vectors), lp


def patching_scores(model, tokenizer, plan: PatchingPlan) -> PatchingScores:
    """One pass over the source prompts for their boundary vectors and their candidates' scores
    (:func:`source_pass`); then per batch of targets their prefix once and one boundary step whose rows are
    every (target, cell), the clean run the cell without a patch
    (:func:`~countlens.llm.boundary.boundary_scored_answers`); scored as :class:`PatchingScores`."""
    import torch

    config, locs, pairs = plan.config, plan.locations, plan.pairs
    sources, targets = [s for s, _ in pairs], [t for _, t in pairs]
    candidates = patching_candidates(config)
    template = config.prompts.template
    P = len(pairs)
    with torch.inference_mode():
        vectors, lp_source = source_pass(model, tokenizer, sources, locs, candidates, template, config.batch_size)
        edits = [None] * P + [(loc, "replace", vectors[i, j]) for j, loc in enumerate(locs) for i in range(P)]
        every = boundary_scored_answers(model, tokenizer, targets, candidates, edits, template, config.batch_size,
                                        config.answer_tokens)
        clean, patched = every.take(range(P)), every.take(range(P, len(edits)))
    n_s = np.array([s.n for s in sources])
    n_t = np.array([t.n for t in targets])
    return PatchingScores(
        candidates=candidates, n_source=n_s, n_target=n_t, clean=clean, patched=patched, lp_source=lp_source,
        dist_target=answer_distribution(clean.candidate_logprobs, candidates, n_t),
        dist_source=answer_distribution(lp_source, candidates, n_s),
        dist_patched=answer_distribution(patched.candidate_logprobs, candidates, np.tile(n_t, len(locs))))


def patching_record(s: PatchingScores, name: str, loc: int, src: Prompt, tgt: Prompt, i: int, r: int,
                    ld_patched: float, normalised: float) -> dict[str, Any]:
    """One record of :attr:`PatchingResult.rows`: pair ``i`` (``src``, ``tgt``) patched at location ``name``
    (index ``loc``; row ``r`` of the patched pass), its LD ``ld_patched`` and normalised LD."""
    clean, patched, lp_target, lp_patched = s.clean, s.patched, s.clean.candidate_logprobs, s.patched.candidate_logprobs
    shift = answer_shift(patched.answer[r], clean.answer[i])
    expected_shift = float(s.dist_patched.expected[r] - s.dist_target.expected[i])
    source = s.column(src.n)
    return {"location": name, "location_index": loc, "seed": tgt.seed, "config": tgt.config,
            "pair": tgt.pair, "n_source": src.n, "n_target": tgt.n,
            "clean_answer_text": clean.answer_text[i], "clean_answer": clean.answer[i],
            "patched_answer_text": patched.answer_text[r], "patched_answer": patched.answer[r],
            "shift": shift, "relative_shift": None if shift is None else shift / (src.n - tgt.n),
            "logprob_change": patched.answer_logprob[r] - clean.answer_logprob[i],
            "ld_target": float(s.ld_target[i]), "ld_source": float(s.ld_source[i]), "ld_patched": float(ld_patched),
            "normalised_ld": float(normalised) if np.isfinite(normalised) else None,
            "expected_target": float(s.dist_target.expected[i]),
            "expected_source": float(s.dist_source.expected[i]),
            "expected_patched": float(s.dist_patched.expected[r]), "expected_shift": expected_shift,
            "expected_relative_shift": expected_shift / (src.n - tgt.n),
            "logp_source_change": float(lp_patched[r, source] - lp_target[i, source]),
            "rank_target": int(s.dist_target.rank[i]), "rank_patched": int(s.dist_patched.rank[r])}


def location_record(name: str, loc: int, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One record of :attr:`PatchingResult.locations`: the means over the ``rows`` patched at location ``name``
    (index ``loc``; :func:`patching_record`)."""
    return {"name": name, "index": loc, "label": location_label(name),
            "moved_to_source": float(np.mean([r["patched_answer"] == r["n_source"] for r in rows])),
            "mean_shift": mean_or_none(r["shift"] for r in rows),
            "mean_relative_shift": mean_or_none(r["relative_shift"] for r in rows),
            "logprob_change": mean_or_none(r["logprob_change"] for r in rows),
            "parsed": sum(r["patched_answer"] is not None for r in rows),
            "normalised_ld": mean_or_none(r["normalised_ld"] for r in rows),
            "expected_shift": mean_or_none(r["expected_shift"] for r in rows),
            "expected_relative_shift": mean_or_none(r["expected_relative_shift"] for r in rows),
            "logp_source_change": mean_or_none(r["logp_source_change"] for r in rows)}


def run_patching(config: PatchingConfig, *, loaded: LoadedModel | None = None, progress: bool = False,
                 pool: ModelPool | None = None) -> PatchingResult:
    """Figure 9a. One pass over the source prompts gives their boundary vectors and their candidates' scores
    (:func:`source_pass`); each (target, location) is then one row of a boundary step from the targets' prefix
    cache, from whose logits and cache every candidate answer is teacher-forced and the greedy answer decoded
    (:func:`~countlens.llm.boundary.boundary_scored_answers`). Only the boundary position is patched
    (see :mod:`countlens.llm.patching.edits`). Bad input is refused before the weights load (:func:`plan_patching`);
    ``loaded`` reuses a model already loaded from ``config.model``; in ``pool`` (a run's
    :class:`~countlens.llm.models.ModelPool`) the model is resolved and read once."""
    plan = plan_patching(config, progress, pool)
    started = time.perf_counter()
    loaded = loaded or config.model.load(progress, tokenizer=plan.tokenizer, pool=pool)
    names = location_names(plan.n_blocks)
    pairs, P = plan.pairs, len(plan.pairs)
    s = patching_scores(loaded.model, loaded.tokenizer, plan)
    rows, per_location = [], []
    for j, loc in enumerate(plan.locations):
        ld_patched = s.ld(s.patched.candidate_logprobs, j * P + np.arange(P))
        score = normalised_ld(ld_patched, s.ld_source, s.ld_target, float(config.min_gap))
        mine = [patching_record(s, names[loc], loc, src, tgt, i, j * P + i, ld_patched[i], score[i])
                for i, (src, tgt) in enumerate(pairs)]
        rows.extend(mine)
        per_location.append(location_record(names[loc], loc, mine))
    gap_ok = np.abs(s.ld_source - s.ld_target) >= float(config.min_gap)
    unnormalised = [f"{t.seed}/{t.config}/{t.pair}/{src.n}->{t.n}" for (src, t), ok in zip(pairs, gap_ok, strict=True)
                    if not ok]
    return PatchingResult(
        config=config.to_dict(), model=loaded.model_id, clean_accuracy=s.clean.accuracy([t.n for _, t in pairs]),
        locations=per_location, rows=rows, seconds=round(time.perf_counter() - started, 3),
        provenance=result_provenance(config), candidates=s.candidates,
        clean_expected=float(np.mean(s.dist_target.expected)), unnormalised=unnormalised,
        n_unnormalised=len(unnormalised))


def boundary_vectors(model, tokenizer, prompts, locations: list[int], batch_size: int = 16):
    """(P, len(locations), d) float32 boundary vectors of ``prompts`` (left-padded batches)."""
    import torch

    pad_id = pad_token_id(tokenizer)
    device = model.get_input_embeddings().weight.device
    out = []
    with BoundaryCapture(model, locations) as cap:
        for start in range(0, len(prompts), batch_size):
            ids, mask, index = pad_batch(prompts[start:start + batch_size], pad_id, "left", device)
            out.append(cap.run(ids, mask, index))
    return torch.cat(out)



declare(Experiment(
    "patching", "Figure 9a: boundary activation patching", PatchingConfig, run_patching, PatchingResult, order=150,
    figure="countlens.llm.patching.figures:draw_patching", plot="countlens.llm.patching.figures:plot_patching", view="countlens.llm.patching.figures:patching_view",
    # quick: every other location and the last (16 of SmolLM2's 31): when each location was one prompt pass per
    # pair (before the boundary-step runner), the 31 took 49 s of make demo (BENCHMARKS.md)
    presets={"quick": PatchingConfig(locations=QUICK_LOCATIONS),
             # Every token pair and wording, three seeds, counts across the range.
             "full": PatchingConfig().with_options(L=256, sources=[40, 30, 20, 10, 5, 3],
                                                   targets=[3, 5, 10, 20, 30, 40],
                                                   pairs=[list(p) for p in DEFAULT_PAIRS],
                                                   configs=PromptSettings().configs, seeds=[0, 1, 2]),
             "test": PatchingConfig().with_options(L=16, sources=[9, 3], targets=[3, 9], answer_tokens=3)},
    inherits=("model", "template", "task"), uses_model=True, options={"progress": True}, study="patching",
    cli="countlens.llm.patching.cli"))


__all__ = ["PatchingConfig", "PatchingResult", "PatchingPlan", "plan_patching", "patching_candidates",
           "run_patching", "boundary_vectors", "source_pass", "answer_shift", "mean_or_none", "PatchingScores",
           "patching_scores",
           "patching_record", "location_record"]
