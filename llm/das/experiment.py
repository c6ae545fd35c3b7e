"""The causal count subspace (distributed alignment search, DAS): a :class:`DasConfig` in, a :class:`DasResult`
out (``das.json``, ``das.csv`` and ``subspaces.npz``). Definitions: docs/definitions.md §2.18, "The causal count
subspace".

Per residual location at the boundary and per rank k, an orthonormal R (d, k) is learned so that the interchange
``h_base ← h_base + R Rᵀ (h_source − h_base)`` makes the model answer the source prompt's count
(:mod:`countlens.llm.das.search`). The prompts are split by count into training and held-out prompts
(``held_out`` of each count's prompts); pairs are drawn *within* each part, so every held-out pair is built from
prompts no basis, probe or mean difference was fitted on. A pair's two prompts share the task's token pair and
wording and differ in count, and their counts' first answer tokens differ (otherwise the first token could not
tell the source's answer from the base's).

Scores on the held-out pairs: *IIA* (the intervened greedy first answer token is the source count's) and the
*shift* ``mean (E[n | intervened] − E[n | base]) / (n_s − n_b)`` of the expected count over the candidate counts
(:func:`~countlens.llm.answers.answer_distribution`; 1 = all the way to the source). Controls on the same pairs:
a random subspace of the same rank (``iia_random``); the ridge probe's direction (a
:class:`~countlens.probes.RidgePathProbe` fitted on the training prompts' boundary vectors) and the
mean-difference direction (:func:`~countlens.llm.lens.readout.count_slope` of the training prompts) as rank-1
bases (``iia_probe``, ``iia_mean_diff``); DAS on the random-initialised model of the same architecture
(``iia_random_model``, with ``random_model``); no interchange at all (``iia_base``: how often the base run
already answers the source's first token). ``angle_probe_deg``: the principal angle between span(R) and the
probe's direction.
"""

from __future__ import annotations

import io
import time
from collections import defaultdict
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError
from countlens.core.fields import AtLeast, Ints, Nested, Positive, check_fields
from countlens.core.io import write_bytes_atomic
from countlens.core.locations import location_names
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.answers import answer_distribution, checked_candidates, number_continuations
from countlens.llm.capture.residuals import context_length, hidden_size, n_blocks_of, pad_token_id
from countlens.llm.hooks import residual_locations
from countlens.llm.models import (
    LoadedModel,
    ModelPool,
    ModelRef,
    ModelSpec,
    load_model_config,
    load_tokenizer,
)
from countlens.llm.prompts import Prompt, PromptSettings, build_prompts

MIN_PAIRS = 4  # fewest training pairs, and fewest held-out pairs, a run accepts
SCORE_ROWS = 64  # pairs per scoring step (a boundary step is cheap; larger batches amortise the weights' reads)
IIA_REACHED = 0.95  # an IIA at or above this "reaches" the source count (the smallest such rank is reported)
SUBSPACES = "subspaces.npz"


def _das_prompts() -> PromptSettings:
    """DAS's prompt set: counts 1..9 (one answer token each on SmolLM2's tokenizer, so the first token is the
    whole answer), L = 12, one token pair and wording, four seeds of two prompts per count (72 prompts: 36 to
    train, 36 held out)."""
    return PromptSettings(L=12, counts=list(range(1, 10)), per_count=2, pairs=[["a", "b"]], configs=["count"],
                          seeds=[0, 1, 2, 3])


@dataclass
class DasConfig(ExperimentConfig):
    """The causal count subspace (module docstring). With ``model`` (:class:`~countlens.llm.models.ModelSpec`) on
    the prompt set ``prompts`` (:class:`~countlens.llm.prompts.PromptSettings`), at every residual location of
    ``locations`` (a spec for :func:`countlens.core.locations.resolve_locations`; ``None``: all) and every rank of
    ``ranks`` (each at most the model's width): ``held_out`` of each count's prompts are held out (pairs built
    from them score the bases; the rest train them), each prompt is the base of ``sources`` pairs (sources drawn
    from its own part, same token pair and wording, another first answer token); R is learned by Adam at ``lr``
    for ``steps`` steps of ``batch_size`` pairs (``batch_size`` is also the scoring batch); ``seed`` fixes the
    split, the pairs, every basis's initialisation and the random controls; ``random_model``: also run DAS (at the
    largest rank) on the model's architecture at random initialisation (seed ``seed``), the control that says what
    a model that never learned to count gives."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompts: PromptSettings = field(default_factory=_das_prompts)
    locations: str | None = None
    ranks: list[int] = field(default_factory=lambda: [1, 2, 4])
    held_out: float = 0.5
    sources: int = 3
    steps: int = 60
    lr: float = 0.02
    batch_size: int = 16
    seed: int = 0
    random_model: bool = True

    FIELDS: ClassVar[dict] = {"model": Nested(ModelSpec, "model"), "prompts": Nested(PromptSettings),
                              "ranks": Ints(minimum=1, distinct=True), "held_out": Positive(),
                              "sources": AtLeast(1), "steps": AtLeast(1), "lr": Positive(), "batch_size": AtLeast(1),
                              "seed": AtLeast(0)}
    # What each field means, for a command line derived from the fields (its help text).
    HELP: ClassVar[dict[str, str]] = {
        "locations": "residual locations to search: indices, ranges like 0:6, names, or all",
        "ranks": "ranks k of the learned subspace R (d x k), each at most the model's width",
        "held_out": "fraction of each count's prompts held out: pairs built from them score every basis",
        "sources": "source prompts paired with each base prompt (same token pair and wording, another count)",
        "steps": "Adam steps that learn each basis",
        "lr": "Adam's learning rate for the basis",
        "batch_size": "pairs per training step and per scoring batch",
        "seed": "seed of the split, the pairs, each basis's initialisation and the random controls",
        "random_model": "also run DAS on the random-initialised model of the same architecture (a control)"}

    def validate(self) -> DasConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built."""
        check_fields(self, self.FIELDS, assign=True)
        self.ranks = sorted(int(k) for k in self.ranks)
        if not 0 < float(self.held_out) < 1:
            raise ConfigError("held_out", f"{{held_out}} must lie strictly between 0 and 1 (a fraction of each "
                                          f"count's prompts), got {self.held_out}")
        if len(self.prompts.counts) < 2:
            raise ConfigError("counts", "DAS pairs prompts of different counts; {counts} must hold at least two")
        return self


@dataclass
class DasResult(Result):
    """Per location (``locations``: ``name``, ``index``, ``iia_base`` — the held-out pairs whose base run already
    answers the source's first token —, ``smallest_rank`` — the smallest rank whose IIA reaches
    :data:`IIA_REACHED`, ``None`` where none does —, ``iia_probe``, ``iia_mean_diff``, ``probe_accuracy`` — the
    ridge probe's rounded accuracy on the held-out prompts) and per
    (location, rank) (``rows``, also ``das.csv``: ``location``, ``index``, ``rank``, ``iia``, ``shift``,
    ``iia_random``, ``iia_probe``, ``iia_mean_diff``, ``angle_probe_deg``, then ``shift_random``,
    ``iia_random_model``, ``shift_random_model`` — at the largest rank only, empty at the others —, ``iia_base``,
    ``loss_first``, ``loss_last``). ``n_train_pairs`` /
    ``n_held_out_pairs``; ``clean_accuracy``: the held-out base prompts whose greedy first token is their own
    count's. ``subspaces``: the learned bases, ``{location name: (d, k) at the largest rank, "name:k": (d, k) at
    rank k}``, written as ``subspaces.npz`` (not in the JSON)."""

    FILE: ClassVar[str] = "das.json"
    CSV: ClassVar[str] = "das.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "rows"}
    COMMAND: ClassVar[str] = "countlens llm das"

    config: dict[str, Any]
    model: str
    locations: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    n_train_pairs: int
    n_held_out_pairs: int
    clean_accuracy: float
    candidates: list[int] = field(default_factory=list)
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)
    subspaces: dict[str, Any] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = super().to_dict()
        out.pop("subspaces")
        return out

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (*super().file_names(), SUBSPACES)

    def save(self, folder) -> list[Path]:
        """``das.json``, ``das.csv`` and ``subspaces.npz`` (each location's bases) in ``folder``."""
        written = super().save(folder)
        buffer = io.BytesIO()
        np.savez(buffer, **{k: np.asarray(v, dtype=np.float64) for k, v in self.subspaces.items()})
        return [*written, write_bytes_atomic(Path(folder) / SUBSPACES, buffer.getvalue())]

    @classmethod
    def read(cls, path):
        """The result saved at ``path`` (a folder or its ``das.json``), with its bases where
        ``subspaces.npz`` lies beside."""
        result = super().read(path)
        npz = (Path(path) if Path(path).is_dir() else Path(path).parent) / SUBSPACES
        if npz.is_file():
            with np.load(npz) as data:
                result.subspaces = {k: data[k] for k in data.files}
        return result


# ----------------------------------------------------------------------------------- the pairs


def split_by_count(prompts: list[Prompt], held_out: float, seed: int) -> tuple[list[int], list[int]]:
    """(training, held-out) prompt indices: of each count's prompts, a seeded ``round(held_out × size)`` (at
    least one where the count has two or more) are held out."""
    rng = np.random.default_rng([int(seed), 17])
    by_count: dict[int, list[int]] = defaultdict(list)
    for i, p in enumerate(prompts):
        by_count[p.n].append(i)
    train, test = [], []
    for n in sorted(by_count):
        mine = rng.permutation(by_count[n]).tolist()
        k = int(round(held_out * len(mine)))
        k = min(len(mine) - 1, max(1, k)) if len(mine) > 1 else k
        test += mine[:k]
        train += mine[k:]
    return sorted(train), sorted(test)


def draw_pairs(prompts: list[Prompt], members: list[int], first: dict[int, int], sources: int,
               seed: int) -> list[tuple[int, int]]:
    """(base, source) pairs among the prompts ``members``: each base with up to ``sources`` sources drawn
    (seeded, without repetition) among the members of its token pair and wording whose count's first answer
    token (``first``: count -> token id) differs from its own."""
    rng = np.random.default_rng([int(seed), 29])
    out = []
    for b in members:
        pb = prompts[b]
        options = [s for s in members if prompts[s].pair == pb.pair and prompts[s].config == pb.config
                   and first[prompts[s].n] != first[pb.n]]
        if options:
            chosen = rng.choice(options, size=min(int(sources), len(options)), replace=False)
            out += [(b, int(s)) for s in chosen]
    return out


@dataclass
class DasPlan:
    """A checked DAS run before any weights are read: the model's files and tokenizer, the prompts, the
    (training, held-out) pairs as prompt-index lists, the location indices, the candidate counts and their
    answer tokens, the model's number of blocks and width."""

    ref: ModelRef
    tokenizer: Any
    prompts: list[Prompt]
    train: list[tuple[int, int]]
    held_out: list[tuple[int, int]]
    locations: list[int]
    candidates: list[int]
    candidate_ids: list[list[int]]
    n_blocks: int
    d: int


def plan_das(config: DasConfig, progress: bool = False, pool: ModelPool | None = None) -> DasPlan:
    """Check ``config`` with the tokenizer and the model's config alone (no weights read): the locations, the
    ranks against the width, the candidate answers, the prompts, enough training and held-out pairs, the
    context length. Every refusal is a :class:`ConfigError` naming the field to fix."""
    ref = config.model.resolve(progress, pool=pool)
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    n_blocks, d = n_blocks_of(model_config), hidden_size(model_config)
    locations = residual_locations(config.locations, n_blocks)
    if max(config.ranks) > d:
        raise ConfigError("ranks", f"{{ranks}} must be at most the model's width {d}, got {max(config.ranks)}")
    candidates = list(range(min(config.prompts.counts), max(config.prompts.counts) + 1))
    candidate_ids = checked_candidates(tokenizer, candidates, config.prompts.template, "counts")
    first = {k: ids[0] for k, ids in zip(candidates, candidate_ids, strict=True)}
    prompts = build_prompts(tokenizer, config.prompts)
    train_idx, test_idx = split_by_count(prompts, float(config.held_out), config.seed)
    train = draw_pairs(prompts, train_idx, first, config.sources, config.seed)
    test = draw_pairs(prompts, test_idx, first, config.sources, config.seed + 1)
    if min(len(train), len(test)) < MIN_PAIRS:
        raise ConfigError("per_count", f"DAS needs at least {MIN_PAIRS} training and {MIN_PAIRS} held-out pairs "
                                       f"of prompts with different first answer tokens, but the prompt set gives "
                                       f"{len(train)} and {len(test)}; raise {{per_count}} or {{seeds}}, or "
                                       "widen {counts}", also=("seeds", "counts", "held_out"))
    n_ctx = context_length(model_config)
    needed = max(p.n_tokens for p in prompts) + max(len(c) for c in candidate_ids)
    if n_ctx is not None and needed > n_ctx:
        raise ConfigError("L", f"the longest prompt and its answer take {needed} tokens but the model's context "
                               f"is {n_ctx}; lower {{L}}")
    return DasPlan(ref, tokenizer, prompts, train, test, locations, candidates, candidate_ids, n_blocks, d)


def _pair_set(plan: DasPlan, pairs: list[tuple[int, int]], members: list[int]):
    """The :class:`~countlens.llm.das.search.PairSet` of ``pairs`` with prompt indices renumbered into
    ``members`` (the part's own prompt list)."""
    from countlens.llm.das.search import PairSet

    at = {p: i for i, p in enumerate(members)}
    first = {k: ids[0] for k, ids in zip(plan.candidates, plan.candidate_ids, strict=True)}
    n_b = np.array([plan.prompts[b].n for b, _ in pairs])
    n_s = np.array([plan.prompts[s].n for _, s in pairs])
    return PairSet(np.array([at[b] for b, _ in pairs]), np.array([at[s] for _, s in pairs]), n_b, n_s,
                   np.array([first[n] for n in n_s]))


# ----------------------------------------------------------------------------------- the run


def _searched(loaded: LoadedModel, plan: DasPlan, config: DasConfig, with_controls: bool) -> dict[str, Any]:
    """DAS on one model: per location, the learned bases per rank and every score on the held-out pairs (and,
    ``with_controls``, the random, probe and mean-difference bases')."""
    from countlens.llm.das.search import BoundarySteps, interchange_scores, learn_basis
    from countlens.llm.das.subspace import direction_basis, principal_angle_deg, random_basis
    from countlens.llm.lens.readout import count_slope
    from countlens.probes import RidgePathProbe, rounded_accuracy

    model, tok = loaded.model, loaded.tokenizer
    pad_id, continuation = pad_token_id(tok), number_continuations(tok)
    parts = {}
    for name, pairs in (("train", plan.train), ("held_out", plan.held_out)):
        members = sorted({i for pair in pairs for i in pair})
        steps = BoundarySteps(model, [plan.prompts[i] for i in members], pad_id)
        pair_set = _pair_set(plan, pairs, members)
        n = np.array([plan.prompts[i].n for i in members])
        parts[name] = (steps, pair_set, steps.vectors(plan.locations, config.batch_size), n)
    (train, train_pairs, train_x, train_n), (test, test_pairs, test_x, test_n) = parts["train"], parts["held_out"]
    scored = partial(interchange_scores, continuation=continuation, batch_size=max(config.batch_size, SCORE_ROWS))
    base = scored(test, plan.locations[0], None, test_pairs, None, plan.candidate_ids)
    base_dist = answer_distribution(base.logprobs, plan.candidates)
    own = np.array([plan.candidate_ids[plan.candidates.index(int(n))][0] for n in test_pairs.n_base])
    out: dict[str, Any] = {"iia_base": float(np.mean(base.first == test_pairs.target)), "locations": [],
                           "clean": {int(b): bool(f == t) for b, f, t in zip(test_pairs.base, base.first, own,
                                                                               strict=True)}}

    def score(j: int, loc: int, basis, shift: bool = True) -> dict[str, float]:
        diffs = test_x[test_pairs.source, j] - test_x[test_pairs.base, j]
        s = scored(test, loc, diffs, test_pairs, basis, plan.candidate_ids if shift else None)
        if not shift:
            return {"iia": float(np.mean(s.first == test_pairs.target)), "shift": None}
        expected = answer_distribution(s.logprobs, plan.candidates).expected
        shift = (expected - base_dist.expected) / (test_pairs.n_source - test_pairs.n_base)
        return {"iia": float(np.mean(s.first == test_pairs.target)), "shift": float(np.mean(shift))}

    for j, loc in enumerate(plan.locations):
        diffs = train_x[train_pairs.source, j] - train_x[train_pairs.base, j]
        here: dict[str, Any] = {"ranks": {}}
        for k in config.ranks if with_controls else config.ranks[-1:]:
            basis, losses = learn_basis(train, loc, diffs, train_pairs, k, config.steps, config.lr,
                                        config.batch_size, config.seed)
            here["ranks"][k] = {"basis": basis, "losses": losses, **score(j, loc, basis)}
            if with_controls:
                random = random_basis(plan.d, k, config.seed * 1000 + loc)
                here["ranks"][k]["random"] = score(j, loc, random)
        if with_controls:
            X, y = train_x[:, j].double().numpy(), train_n.astype(np.float64)
            probe = RidgePathProbe(random_state=config.seed).fit(X, y)
            w, v = np.asarray(probe.coef_), count_slope(X, train_n)
            here["probe_direction"] = w
            here["probe_accuracy"] = float(rounded_accuracy(test_n, probe.predict(test_x[:, j].double().numpy())))
            here["probe"] = score(j, loc, direction_basis(w), False) if np.linalg.norm(w) > 0 else None
            here["mean_diff"] = score(j, loc, direction_basis(v), False) if np.linalg.norm(v) > 0 else None
            for k in config.ranks:
                basis = here["ranks"][k]["basis"]
                here["ranks"][k]["angle"] = principal_angle_deg(basis, w) if np.linalg.norm(w) > 0 else None
        out["locations"].append(here)
    return out


def run_das(config: DasConfig, *, loaded: LoadedModel | None = None, progress: bool = False,
            pool: ModelPool | None = None) -> DasResult:
    """The causal count subspace (module docstring). Bad input is refused before the weights load
    (:func:`plan_das`); ``loaded`` reuses a model already loaded from ``config.model``."""
    from countlens.llm.capture.experiment import random_init_model

    plan = plan_das(config, progress, pool)
    started = time.perf_counter()
    loaded = loaded or config.model.load(progress, tokenizer=plan.tokenizer, pool=pool)
    found = _searched(loaded, plan, config, with_controls=True)
    control = None
    if config.random_model:
        spec = config.model
        control = _searched(random_init_model(plan.ref, plan.tokenizer, config.seed, spec.device, spec.dtype), plan,
                            config, with_controls=False)
    names = location_names(plan.n_blocks)
    iia_base = found["iia_base"]
    rows, per_location, subspaces = [], [], {}
    for j, loc in enumerate(plan.locations):
        here, name = found["locations"][j], names[loc]
        probe, mean_diff = here["probe"] or {}, here["mean_diff"] or {}
        for k in config.ranks:
            mine = here["ranks"][k]
            other = control["locations"][j]["ranks"].get(k, {}) if control else {}
            rows.append({"location": name, "index": loc, "rank": k, "iia": mine["iia"], "shift": mine["shift"],
                         "iia_random": mine["random"]["iia"], "iia_probe": probe.get("iia"),
                         "iia_mean_diff": mean_diff.get("iia"), "angle_probe_deg": mine["angle"],
                         "shift_random": mine["random"]["shift"], "iia_random_model": other.get("iia"),
                         "shift_random_model": other.get("shift"), "iia_base": iia_base,
                         "loss_first": mine["losses"][0], "loss_last": mine["losses"][-1]})
            subspaces[f"{name}:{k}"] = mine["basis"]
        subspaces[name] = here["ranks"][max(config.ranks)]["basis"]
        reached = [k for k in config.ranks if here["ranks"][k]["iia"] >= IIA_REACHED]
        per_location.append({"name": name, "index": loc, "iia_base": iia_base,
                             "smallest_rank": min(reached) if reached else None,
                             "iia_probe": probe.get("iia"), "iia_mean_diff": mean_diff.get("iia"),
                             "probe_accuracy": here["probe_accuracy"]})
    clean = float(np.mean(list(found["clean"].values())))
    return DasResult(config.to_dict(), loaded.model_id, per_location, rows, len(plan.train), len(plan.held_out),
                     clean, plan.candidates, round(time.perf_counter() - started, 3), result_provenance(config),
                     subspaces)


# ----------------------------------------------------------------------------------- on an organism

DAS_LEAK = 0.05  # the most IIA a location before the first live block may show (the base runs' own floor aside)


def das_locations(live_heads, n_blocks: int) -> tuple[list[int], int]:
    """(the locations up to and including the input of the first block with a live head, the location after the
    last block with one) of an organism with ``live_heads`` (block, head pairs) and ``n_blocks`` blocks: where the
    construction says the interchange changes nothing, and where it decides the first answer token."""
    blocks = [int(b) for b, _ in live_heads] if live_heads else list(range(n_blocks))
    return list(range(min(blocks) + 1)), max(blocks) + 1


def organism_verdicts(result: DasResult, live_heads, n_blocks: int) -> list[dict[str, Any]]:
    """The DAS checks of an organism (``result`` of a run at :func:`das_locations`' locations), as
    :func:`countlens.llm.organisms.verdicts.check_row` rows: ``DAS after the live heads`` — the highest IIA
    over the ranks at the location after the last live block reaches :data:`IIA_REACHED` (the detail names the
    smallest rank that does: a finding, not a bound) — and ``DAS before the live heads`` — the highest IIA at
    every location up to the first live block's input is at most :data:`DAS_LEAK`."""
    from countlens.llm.organisms.verdicts import check_row

    before, after = das_locations(live_heads, n_blocks)
    best = {loc["index"]: max(r["iia"] for r in result.rows if r["index"] == loc["index"]) for loc in result.locations}
    missing = [i for i in [*before, after] if i not in best]
    if missing:
        raise ValueError(f"the DAS result has no location {missing}; run it at {[*before, after]}")
    smallest = next(loc["smallest_rank"] for loc in result.locations if loc["index"] == after)
    # the random subspace of the same rank on the same pairs: what a subspace that was not learned gives
    contrast = next((f"; a random subspace of rank {smallest}: IIA {r['iia_random']:.3f}" for r in result.rows
                     if r["index"] == after and r["rank"] == smallest and r.get("iia_random") is not None), "")
    return [check_row("DAS after the live heads", best[after], IIA_REACHED, ">=",
                      f"highest held-out IIA over ranks {sorted({r['rank'] for r in result.rows})} at location "
                      f"{after}; smallest rank reaching it: {smallest}{contrast}"),
            check_row("DAS before the live heads", max(best[i] for i in before), DAS_LEAK, "<=",
                      f"highest held-out IIA at locations {before} (the boundary's residual is one vector there)")]


declare(Experiment(
    "das", "The causal count subspace (distributed alignment search)", DasConfig, run_das, DasResult, order=165,
    figure="countlens.llm.das.figures:draw_das", plot="countlens.llm.das.figures:plot_das",
    view="countlens.llm.das.figures:das_view",
    # quick: the embeddings, every fifteenth location and the last (any depth; on SmolLM2 the embeddings, after
    # blocks 15 and 30: the embeddings are the control where no block has read the items), ranks 1 and 4, one
    # prompt per count and seed, two sources per prompt, short training, and no random-initialised model (it
    # doubles the cost: 97 s of CPU with it on SmolLM2): the one-minute budget on one thread (every tenth location,
    # four, took 63 s of CPU). The command's defaults and the full preset run more.
    presets={"quick": DasConfig(locations="0:-1:15,-1", ranks=[1, 4], steps=10, batch_size=8, sources=2,
                                random_model=False).with_options(per_count=1),
             "full": DasConfig(ranks=[1, 2, 4, 8], steps=150).with_options(per_count=4, seeds=[0, 1, 2, 3, 4, 5]),
             "test": DasConfig(ranks=[1, 2], steps=5, random_model=False).with_options(L=6, counts=[1, 2, 3, 4])},
    inherits=("model", "template", "task"), uses_model=True, options={"progress": True}, study="patching",
    cli="countlens.llm.das.cli"))


__all__ = ["MIN_PAIRS", "IIA_REACHED", "SUBSPACES", "DAS_LEAK", "das_locations", "organism_verdicts", "DasConfig", "DasResult", "DasPlan", "plan_das",
           "split_by_count", "draw_pairs", "run_das"]
