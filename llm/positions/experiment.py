"""Figure 11, patching over positions and layers: a :class:`PositionPatchingConfig` in, a
:class:`PositionPatchingResult` out (``position_patching.json`` and ``position_patching.csv``).

A clean prompt with ``n`` targets and its **corrupted twin** — the same items, one target (the first, middle or
last, ``flip``) replaced by the distractor, so ``n − 1`` targets and the same number of tokens — are run once
each; then, for every location ℓ and every position p from the first item to the boundary, the clean residual at
(ℓ, p) replaces the corrupted run's and the forward continues (:class:`countlens.llm.patching.replay.PositionPatcher`).
The score is the normalised logit difference (docs/definitions.md §2):

    LD = log p("n") − log p("n − 1"),   normalised_ld = (LD_patched − LD_corrupt) / (LD_clean − LD_corrupt),

each answer teacher-forced over all its tokens without an end-of-turn token
(:func:`countlens.llm.answers.score_candidates`), so 0 is the corrupted run and 1 the clean run. Pairs whose
``|LD_clean − LD_corrupt|`` is below ``min_gap`` are not normalised: their rows keep the raw logit differences,
``normalised_ld`` is empty, and the result lists them (``unnormalised``).

What it can show: where the information about the changed item sits — at the item's own position in early
layers, and from which layer on it has reached the positions after it (later items, the template tokens, the
boundary). What it cannot: a cell near 0 does not mean the model ignores that position (a patch of one position
may be undone by the others, which still carry the corrupted count), and a weak model's scores are about the
logit difference of two answers it may rank low.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, literal
from countlens.core.fields import AtLeast, Nested, OneOf, Positive, check_fields
from countlens.core.locations import location_label, location_names
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.answers import (
    MIN_LD_GAP,
    candidate_token_ids,
    checked_candidates,
    counts_with_previous,
    normalised_ld,
)
from countlens.llm.capture.residuals import context_length, n_blocks_of
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
from countlens.llm.patching.replay import PATCH_METHODS, PositionPatcher
from countlens.llm.prompts import (
    Prompt,
    PromptSettings,
    build_prompts,
    render,
)
from countlens.llm.tasks import encode, span_tokens

FLIPS = ("first", "middle", "last")
POSITION_SETS = ("all", "items")
# The summary's position groups, in the order the figure and the report show them.
GROUPS = ("before", "flipped", "after", "template", "boundary")
GROUP_LABELS = {"before": "items before the flipped one", "flipped": "the flipped item",
                "after": "items after it", "template": "template tokens after the items", "boundary": "the boundary"}


def _quick_prompts() -> PromptSettings:
    return PromptSettings(L=12, counts=[3, 6], per_count=1, pairs=[["a", "b"]], configs=["count"], seeds=[0])


@dataclass
class PositionPatchingConfig(ExperimentConfig):
    """Figure 11. ``prompts`` are the clean prompts (:class:`~countlens.llm.prompts.PromptSettings`; every count
    >= 1: a count of 0 has no target to turn); each one's corrupted twin turns its ``flip`` target (``first``,
    ``middle`` — the lower middle for an even count — or ``last``) into the distractor. ``positions``: ``all``
    (every token from the first item to the boundary) or ``items`` (the items and the boundary); ``locations``:
    a spec for :func:`countlens.core.locations.resolve_locations` (default all), of which every
    ``location_step``-th is patched, the last always (a model-independent way to halve the cost: ``2``).
    ``method`` ``cached`` reuses the
    corrupted run (:class:`~countlens.llm.patching.replay.PositionPatcher`), ``naive`` runs one whole forward per cell
    (the reference; same scores). ``batch_size`` patched runs share a forward. Pairs whose clean and corrupted
    logit differences are closer than ``min_gap`` nats are reported, not normalised.

    The defaults (L = 12, counts 3 and 6, one pair, wording and seed) keep the prompts short: the cost grows with
    locations x positions x the tokens after each position."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompts: PromptSettings = field(default_factory=_quick_prompts)
    flip: str = "last"
    """which target the corrupted twin turns into the distractor"""
    positions: str = "all"
    locations: str | None = None
    location_step: int = 1
    """patch every k-th of {locations}, the last always"""
    batch_size: int = field(default=16, metadata={"identity": False})
    method: str = field(default="cached", metadata={"identity": False})
    """cached: reuse the corrupted run's key/value cache and residuals (fast); naive: one whole forward per
    position and location (the reference; same scores)"""
    min_gap: float = MIN_LD_GAP
    """pairs whose two unpatched logit differences differ by less than this many nats are listed, not
    normalised"""

    FIELDS: ClassVar[dict] = {"model": Nested(ModelSpec, "model"), "prompts": Nested(PromptSettings),
                              "flip": OneOf(FLIPS), "positions": OneOf(POSITION_SETS), "location_step": AtLeast(1),
                              "batch_size": AtLeast(1), "method": OneOf(PATCH_METHODS), "min_gap": Positive("nats")}

    def validate(self) -> PositionPatchingConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built."""
        check_fields(self, self.FIELDS, assign=True)
        check_twin_prompts(self.prompts, "patching over positions")
        return self


def check_twin_prompts(prompts: PromptSettings, what: str) -> None:
    """``ConfigError`` where the prompts of ``prompts`` cannot each have a corrupted twin, which ``what`` (an
    analysis) needs: a task without twins, or a count below one (no target to turn into the distractor)."""
    prompts.require_twins(what)
    if min(int(c) for c in prompts.counts) < 1:
        raise ConfigError("counts", f"{{counts}} must be >= 1 for {literal(what)}: a prompt with no target has no "
                                    "target to turn into the distractor, so no corrupted twin")


@dataclass
class PromptPair:
    """A clean prompt, its corrupted twin, and which item was turned: item ``flipped_item`` (0-based among the
    items) at token ``flipped_position``."""

    clean: Prompt
    corrupt: Prompt
    flipped_item: int
    flipped_position: int


@dataclass
class PositionPatchingPlan:
    """A checked Figure 11 run before any weights are read: the model's files, its tokenizer, the prompt
    pairs, the location indices and the model's number of blocks."""

    config: PositionPatchingConfig
    ref: ModelRef
    tokenizer: Any
    pairs: list[PromptPair]
    locations: list[int]
    n_blocks: int


def flipped_item(items: np.ndarray, flip: str) -> int:
    """The index (among the items) of the target ``flip`` turns: the first, middle (lower) or last target."""
    targets = np.flatnonzero(np.asarray(items) == 1)
    return int(targets[{"first": 0, "middle": (len(targets) - 1) // 2, "last": len(targets) - 1}[flip]])


def corrupted_twin(tokenizer, prompt: Prompt, k: int, settings: PromptSettings, flip: str) -> PromptPair:
    """``prompt`` (the ``k``-th of its count in its group) and its twin with the ``flip`` target no longer counted
    (its task's :meth:`~countlens.llm.tasks.Task.twin`: for ``lists`` the target turned into the distractor),
    rendered and tokenized as the prompt was; the first candidate twin whose tokens differ only inside the
    turned item is kept. ``ConfigError`` (``pairs`` for ``lists``, else ``task``) when every candidate changes
    the prompt's other tokens or its length."""
    task = settings.counting_task()
    clean, j, candidates = task.twin(prompt.config, prompt.pair, prompt.n, k, prompt.seed, settings, flip)
    if len(clean.targets) != prompt.n + prompt.m:
        raise RuntimeError("the prompt's items do not match its arrangement")
    position = prompt.item_indices[j] if prompt.item_indices else prompt.first_item_index + j
    allowed = {position}
    if task.rule != "own":  # an item of several tokens (or sharing one) may change in every token it touches
        text, special, start = render(tokenizer, clean.text, settings.template, clean.context)
        region = np.array([task.twin_region(clean, j)]) + start
        first, last = span_tokens(encode(tokenizer, [text], special)[1][0], region)
        allowed = set(range(int(first[0]), int(last[0]) + 1))
    for twin in candidates:
        text, special, _ = render(tokenizer, twin.text, settings.template, twin.context)
        ids = list(tokenizer(text, add_special_tokens=special)["input_ids"])
        differ = None
        if len(ids) == prompt.n_tokens:
            differ = {i for i, (a, b) in enumerate(zip(prompt.ids, ids, strict=True)) if a != b}
        if differ and differ <= allowed:
            corrupt = Prompt(n=prompt.n - 1, m=prompt.m + 1, pair=prompt.pair, config=prompt.config,
                             seed=prompt.seed, prompt=text, ids=ids, first_item_index=prompt.first_item_index,
                             last_item_index=prompt.last_item_index, item_indices=prompt.item_indices,
                             item_targets=tuple(bool(t) for t in twin.targets))
            return PromptPair(prompt, corrupt, j, position)
    where = f"n={prompt.n}, config {prompt.config}, seed {prompt.seed}"
    if task.uses_pairs:
        raise ConfigError("pairs", literal(f"turning a target of pair {prompt.pair} into its distractor changes "
                                           f"the prompt's other tokens ({where})") + "; choose other {pairs}")
    a, b = task.twin_region(clean, j)
    raise ConfigError("task", "{task}: " + literal(
        f"no corrupted twin of the same tokens: every replacement of item {j} {clean.text[a:b]!r} (characters "
        f"{a}..{b} of the message; tried {len(candidates)}) changes the prompt's other tokens or its length "
        f"({where}{', ' + prompt.pair if prompt.pair else ''})") + "; choose other options of {task}, or seeds")


def prompt_pairs(tokenizer, config: PositionPatchingConfig) -> list[PromptPair]:
    """Every clean prompt of ``config.prompts`` with its corrupted twin, in the prompt set's order."""
    pairs, seen = [], Counter()
    for p in build_prompts(tokenizer, config.prompts):
        group = (p.seed, p.config, p.pair, p.n)
        pairs.append(corrupted_twin(tokenizer, p, seen[group], config.prompts, config.flip))
        seen[group] += 1
    return pairs


def plan_position_patching(config: PositionPatchingConfig, progress: bool = False,
                           pool: ModelPool | None = None) -> PositionPatchingPlan:
    """Check ``config`` with the tokenizer and the model's config alone (no weights are read): the prompts and
    their twins, the locations, the context length (each prompt plus its longest answer)."""
    ref = config.model.resolve(progress, pool=pool)
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    n_blocks = n_blocks_of(model_config)
    locations = thinned(residual_locations(config.locations, n_blocks), int(config.location_step))
    answers = checked_candidates(tokenizer, counts_with_previous(config.prompts.counts), config.prompts.template)
    pairs = prompt_pairs(tokenizer, config)
    n_ctx = context_length(model_config)
    longest = max(len(c) for c in answers)
    needed = max(pp.clean.n_tokens for pp in pairs) + longest - 1
    if n_ctx is not None and needed > n_ctx:
        raise ConfigError("L", f"the longest prompt and its answer take {needed} tokens but the model's context "
                               f"is {n_ctx}; lower {{L}}")
    return PositionPatchingPlan(config, ref, tokenizer, pairs, locations, n_blocks)


def thinned(locations: list[int], step: int) -> list[int]:
    """Every ``step``-th of ``locations`` from the first, and the last one always."""
    kept = locations[::step]
    return kept if kept[-1] == locations[-1] else [*kept, locations[-1]]


def patched_positions(pair: PromptPair, positions: str) -> list[int]:
    """The token positions patched: from the first item to the boundary (``all``), or the items and the
    boundary (``items``)."""
    clean = pair.clean
    if positions == "items":
        return [*range(clean.first_item_index, clean.last_item_index + 1), clean.boundary_index]
    return list(range(clean.first_item_index, clean.boundary_index + 1))


@dataclass
class PatchedPair:
    """One prompt pair's scores. ``positions`` (P,) the patched token positions and ``tokens`` their text;
    ``ld`` (locations x P) the patched runs' logit differences ``log p("n") − log p("n − 1")`` in nats;
    ``normalised_ld`` the same normalised (``None`` everywhere for a pair too close to normalise, see
    ``normalised``); ``ld_clean`` / ``ld_corrupt`` the unpatched runs'."""

    seed: int
    config: str
    pair: str
    n_clean: int
    n_corrupt: int
    flipped_item: int
    flipped_position: int
    first_item_index: int
    last_item_index: int
    boundary_index: int
    positions: list[int]
    tokens: list[str]
    ld_clean: float
    ld_corrupt: float
    normalised: bool
    ld: list[list[float]]
    normalised_ld: list[list[float | None]]

    def item_index(self, position: int) -> int:
        """The item's 0-based order at ``position``; -1 for a token that is no item (the boundary, the template)."""
        return position - self.first_item_index if self.first_item_index <= position <= self.last_item_index else -1

    def group(self, position: int) -> str:
        """Which of :data:`GROUPS` ``position`` belongs to."""
        if position == self.boundary_index:
            return "boundary"
        if position > self.last_item_index:
            return "template"
        if position == self.flipped_position:
            return "flipped"
        return "before" if position < self.flipped_position else "after"


CSV_COLUMNS = ("pair_id", "seed", "config", "pair", "n_clean", "n_corrupt", "flipped_item", "flipped_position",
               "location", "location_index", "position", "item_index", "group", "token", "ld_patched", "ld_clean",
               "ld_corrupt", "normalised_ld")


@dataclass
class PositionPatchingResult(Result):
    """Figure 11. ``locations``: the patched locations (name, index, label); ``pairs``: per prompt pair its
    :class:`PatchedPair`; ``summary``: per location the mean ``normalised_ld`` over the normalised pairs within
    each of :data:`GROUPS` (``None`` where no cell falls in a group); ``unnormalised``: the pairs whose
    ``|LD_clean − LD_corrupt| < min_gap`` (``"seed/config/pair/n"``), not averaged; ``runs``: patched forwards
    run (cells whose clean and corrupted vectors are equal are not run: they are the corrupted run);
    ``cells``: every (pair, location, position) scored; ``boundary_half``: the first location (name, index,
    label) whose boundary mean reaches one half — from there the boundary carries at least half the flipped
    item's effect on the answer — or ``None``. The CSV holds one row per cell."""

    FILE: ClassVar[str] = "position_patching.json"
    CSV: ClassVar[str] = "position_patching.csv"
    COMMAND: ClassVar[str] = "countlens llm patch --positions all"

    config: dict[str, Any]
    model: str
    flip: str
    locations: list[dict[str, Any]]
    pairs: list[PatchedPair]
    summary: list[dict[str, Any]]
    unnormalised: list[str]
    n_unnormalised: int
    cells: int
    runs: int
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)
    boundary_half: dict[str, Any] | None = None

    def rows(self) -> list[list[Any]]:
        """The CSV rows (:data:`CSV_COLUMNS`), one per (pair, location, position)."""
        out = []
        for i, p in enumerate(self.pairs):
            for j, loc in enumerate(self.locations):
                for k, position in enumerate(p.positions):
                    out.append([i, p.seed, p.config, p.pair, p.n_clean, p.n_corrupt, p.flipped_item,
                                p.flipped_position, loc["name"], loc["index"], position, p.item_index(position),
                                p.group(position), p.tokens[k], p.ld[j][k], p.ld_clean, p.ld_corrupt,
                                p.normalised_ld[j][k]])
        return out

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        return {self.CSV: (list(CSV_COLUMNS), self.rows())}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, cls.CSV)


def pair_name(pair: PatchedPair | PromptPair) -> str:
    """``"seed/config/pair/n"``: how the result names a prompt pair."""
    if isinstance(pair, PromptPair):
        c = pair.clean
        return f"{c.seed}/{c.config}/{c.pair}/{c.n}"
    return f"{pair.seed}/{pair.config}/{pair.pair}/{pair.n_clean}"


def summarise(pairs: list[PatchedPair], locations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per location, the mean ``normalised_ld`` of each :data:`GROUPS` over the normalised pairs' cells."""
    out = []
    for j, loc in enumerate(locations):
        values: dict[str, list[float]] = {g: [] for g in GROUPS}
        for p in pairs:
            if not p.normalised:
                continue
            for k, position in enumerate(p.positions):
                values[p.group(position)].append(p.normalised_ld[j][k])
        out.append({**loc, **{g: float(np.mean(v)) if v else None for g, v in values.items()}})
    return out


def run_position_patching(config: PositionPatchingConfig, *, loaded: LoadedModel | None = None,
                          progress: bool = False, pool: ModelPool | None = None) -> PositionPatchingResult:
    """Figure 11: every pair of :func:`prompt_pairs`, patched at every location and position (see the module
    docstring). Bad input is refused before the weights load (:func:`plan_position_patching`); ``loaded`` reuses
    a model already loaded from ``config.model``."""
    import torch

    plan = plan_position_patching(config, progress, pool)
    started = time.perf_counter()
    loaded = loaded or config.model.load(progress, tokenizer=plan.tokenizer, pool=pool)
    model, tok = loaded.model, loaded.tokenizer
    names = location_names(plan.n_blocks)
    locations = [{"name": names[i], "index": i, "label": location_label(names[i])} for i in plan.locations]
    template = config.prompts.template
    results, runs = [], 0
    with torch.inference_mode():
        for pp in plan.pairs:
            n = pp.clean.n
            candidates = candidate_token_ids(tok, [n, n - 1], template)
            patcher = PositionPatcher(model, pp.clean.ids, pp.corrupt.ids, candidates, config.method,
                                      config.batch_size)
            positions = patched_positions(pp, config.positions)
            logp = np.stack([patcher.logprobs(loc, positions) for loc in plan.locations])  # (locs, P, 2)
            runs += patcher.runs
            ld = logit_difference(logp, 0, 1)  # log p("n") − log p("n − 1")
            ld_clean = float(logit_difference(patcher.clean, 0, 1))
            ld_corrupt = float(logit_difference(patcher.corrupt, 0, 1))
            score = normalised_ld(ld, ld_clean, ld_corrupt, float(config.min_gap))
            ok = bool(np.isfinite(score).all())
            c = pp.clean
            results.append(PatchedPair(
                c.seed, c.config, c.pair, n, n - 1, pp.flipped_item, pp.flipped_position, c.first_item_index,
                c.last_item_index, c.boundary_index, positions, [tok.decode([c.ids[p]]) for p in positions],
                ld_clean, ld_corrupt, ok, ld.tolist(),
                [[float(v) if np.isfinite(v) else None for v in row] for row in score]))
    unnormalised = [pair_name(p) for p in results if not p.normalised]
    summary = summarise(results, locations)
    half = next(({k: loc[k] for k in ("name", "index", "label")} for loc in summary
                 if loc["boundary"] is not None and loc["boundary"] >= 0.5), None)
    return PositionPatchingResult(config=config.to_dict(), model=loaded.model_id, flip=config.flip,
                                  locations=locations, pairs=results, summary=summary,
                                  unnormalised=unnormalised, n_unnormalised=len(unnormalised),
                                  cells=sum(len(p.positions) for p in results) * len(locations), runs=runs,
                                  seconds=round(time.perf_counter() - started, 3),
                                  provenance=result_provenance(config), boundary_half=half)



declare(Experiment(
    "patching-positions", "Figure 11: patching over positions and layers", PositionPatchingConfig,
    run_position_patching, PositionPatchingResult, order=190, figure="countlens.llm.positions.figures:draw_position_patching", plot="countlens.llm.positions.figures:plot_position_patching",
    view="countlens.llm.positions.figures:position_patching_view",
    presets={"quick": PositionPatchingConfig(location_step=2),
             # Four counts with every pair.
             "full": PositionPatchingConfig(prompts=PromptSettings(L=24, counts=[3, 6, 9, 12], per_count=1,
                                                                   seeds=[0], configs=["count"])),
             "test": PositionPatchingConfig(prompts=PromptSettings(L=6, counts=[3], per_count=1, pairs=[["a", "b"]],
                                                                   configs=["count"], seeds=[0]))},
    inherits=("model", "template", "task"), uses_model=True, options={"progress": True}, study="where"))


__all__ = ["check_twin_prompts", "FLIPS", "POSITION_SETS", "GROUPS", "GROUP_LABELS", "PositionPatchingConfig", "PromptPair",
           "PositionPatchingPlan", "PatchedPair", "PositionPatchingResult", "CSV_COLUMNS", "flipped_item",
           "corrupted_twin", "prompt_pairs", "plan_position_patching", "thinned", "patched_positions", "summarise",
           "pair_name", "run_position_patching"]
