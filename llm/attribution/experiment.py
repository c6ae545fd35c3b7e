"""Figure 15, attribution patching checked against activation patching: an :class:`AttributionConfig` in, an
:class:`AttributionResult` out (``attribution.json``, and ``attribution.csv`` with one row per cell).

Each clean prompt has Figure 11's corrupted twin (:func:`countlens.llm.positions.experiment.corrupted_twin`: one
target turned into the distractor, ``n − 1`` targets, the same tokens elsewhere). ``direction`` says which run is
patched: ``noising`` patches the twin's activations into the clean run (the gradient at the clean run, as in
Kramár et al.), ``denoising`` the clean run's into the twin's (Figure 11's direction). The cells, in three
groups:

- ``resid``: the residual stream at a location and one position (Figure 11's cells: the locations of
  ``locations`` thinned by ``location_step``, the positions of ``positions``);
- ``component``: each block's attention write (``attn``) and MLP write (``mlp``) at one of those positions, and
  at every position of the prompt at once (``position`` empty);
- ``head``: each head's slice of its block's attention output projection input, at the boundary and at every
  position at once.

Every cell is scored twice on the same metric, the change of ``LD = log p("n") − log p("n − 1")`` (nats, every
answer token teacher-forced) from the patched run's base: by AtP (:mod:`countlens.llm.attribution.atp`: one forward
and one backward per pair for all cells) and by activation patching on the one patch mechanism
(:class:`countlens.llm.patching.replay.PositionPatcher`, from the base run's cache: one position per cell, or every
position at once from the first that differs). Per group the result
reports Spearman's ρ, the top-k overlap and the speed ratio (activation patching's time for the group over AtP's
time for every group). Cells whose source and base activations are equal (positions before the turned item, and at
the embeddings every other position) are exact zeros on both sides; they are written to the CSV and left out of
the agreement (``trivial``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError
from countlens.core.fields import AtLeast, Nested, OneOf, Positive, check_fields
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, records_table, result_provenance
from countlens.llm.answers import (
    MIN_LD_GAP,
    candidate_token_ids,
    checked_candidates,
    counts_with_previous,
    normalised_ld,
)
from countlens.llm.attribution.atp import agreement, atp_effects, gradient_pass
from countlens.llm.capture.residuals import context_length, find_blocks, n_blocks_of
from countlens.llm.components.experiment import component_sites
from countlens.llm.heads.experiment import ablated_layers, text_config
from countlens.llm.hooks import hook_sites, residual_locations
from countlens.llm.models import (
    LoadedModel,
    ModelPool,
    ModelRef,
    ModelSpec,
    load_model_config,
    load_tokenizer,
)
from countlens.llm.patching.edits import logit_difference
from countlens.llm.patching.replay import PositionPatcher
from countlens.llm.positions.experiment import (
    FLIPS,
    POSITION_SETS,
    PromptPair,
    check_twin_prompts,
    patched_positions,
    prompt_pairs,
    thinned,
)
from countlens.llm.prompts import PromptSettings

METHODS = ("atp",)  # attribution patching; AtP* (its query-key fix) is not implemented
DIRECTIONS = ("noising", "denoising")
GROUPS = ("resid", "component", "head")  # the kinds of cell the agreement is reported for
GROUP_OF = {"resid": "resid", "attn": "component", "mlp": "component", "head": "head"}
GROUP_LABELS = {"resid": "residual stream (location x position)", "component": "attention and MLP writes",
                "head": "attention heads"}


def _quick_prompts() -> PromptSettings:
    return PromptSettings(L=12, counts=[3, 6], per_count=1, pairs=[["a", "b"]], configs=["count"], seeds=[0])


@dataclass
class AttributionConfig(ExperimentConfig):
    """Figure 15. ``prompts``: the clean prompts (every count >= 1), each with its twin (``flip``: which target is
    turned); ``direction``: ``noising`` (the twin's activations into the clean run) or ``denoising`` (the clean
    run's into the twin's); ``positions`` (``all`` or ``items``), ``locations`` and ``location_step``: Figure 11's
    residual cells; ``layers``: the blocks whose attention and MLP writes and heads are cells (0-based, ranges
    ``0:5``, ``-1``; default all); ``method``: ``atp``; ``top_k``: the cells compared by the top-k overlap;
    ``batch_size``: patched runs per forward; pairs whose clean and twin logit differences are closer than
    ``min_gap`` nats are not normalised."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompts: PromptSettings = field(default_factory=_quick_prompts)
    flip: str = "last"
    """which target the twin turns into the distractor"""
    direction: str = "noising"
    """noising: the twin's activations into the clean run; denoising: the clean run's into the twin's (Figure
    11)"""
    positions: str = "all"
    """all: every position from the first item to the boundary; items: the items and the boundary"""
    locations: str | None = None
    location_step: int = 1
    """every k-th of {locations}, the last always"""
    layers: str | None = None
    """blocks whose attention and MLP writes and heads are cells: 0-based indices, -1, ranges like 0:5, or all
    (default: all)"""
    method: str = "atp"
    """atp: attribution patching, the first-order estimate at the base run"""
    top_k: int = 10
    """the top-k overlap compares the k cells of largest |effect| of each method"""
    batch_size: int = field(default=16, metadata={"identity": False})
    min_gap: float = MIN_LD_GAP
    """pairs whose clean and twin logit differences differ by less than this many nats are not normalised"""

    FIELDS: ClassVar[dict] = {"model": Nested(ModelSpec, "model"), "prompts": Nested(PromptSettings),
                              "flip": OneOf(FLIPS), "direction": OneOf(DIRECTIONS),
                              "positions": OneOf(POSITION_SETS), "location_step": AtLeast(1),
                              "method": OneOf(METHODS), "top_k": AtLeast(1), "batch_size": AtLeast(1),
                              "min_gap": Positive("nats")}

    def validate(self) -> AttributionConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file)."""
        check_fields(self, self.FIELDS, assign=True)
        check_twin_prompts(self.prompts, "attribution patching")
        return self


@dataclass
class AttributionPlan:
    """A checked Figure 15 run before any weights are read: the model's files and tokenizer, its architecture's
    hook-site kinds (``attn_out``, ``mlp_out``, ``attn_z``), its blocks and heads, the prompt pairs, the residual
    locations and the blocks whose components are cells."""

    config: AttributionConfig
    ref: ModelRef
    tokenizer: Any
    architecture: str
    sites: tuple[str, str, str]
    n_blocks: int
    n_heads: int
    pairs: list[PromptPair]
    locations: list[int]
    layers: list[int]


def plan_attribution(config: AttributionConfig, progress: bool = False,
                     pool: ModelPool | None = None) -> AttributionPlan:
    """Check ``config`` with the tokenizer and the model's config alone (no weights are read): the architecture's
    attention and MLP writes and attention output projection (``ConfigError("model")`` where the hook-site
    registry lacks them), the locations, the blocks (``ConfigError("layers")`` for a block the model lacks), the
    prompt pairs and the context length."""
    ref = config.model.resolve(progress, pool=pool)
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    text = text_config(model_config)
    architecture, (attn_out, mlp_out, attn_z) = component_sites(model_config)
    n_blocks = n_blocks_of(model_config)
    layers = ablated_layers(config.layers, n_blocks)
    locations = thinned(residual_locations(config.locations, n_blocks), int(config.location_step))
    answers = checked_candidates(tokenizer, counts_with_previous(config.prompts.counts), config.prompts.template)
    pairs = prompt_pairs(tokenizer, config)
    n_ctx = context_length(model_config)
    longest = max(len(c) for c in answers)
    needed = max(pp.clean.n_tokens for pp in pairs) + longest
    if n_ctx is not None and needed > n_ctx:
        raise ConfigError("L", f"the longest prompt and its answer take {needed} tokens but the model's context "
                               f"is {n_ctx}; lower {{L}}")
    return AttributionPlan(config, ref, tokenizer, architecture, (attn_out, mlp_out, attn_z), n_blocks,
                           int(text.num_attention_heads), pairs, locations, layers)


CSV_COLUMNS = ("pair_id", "n", "kind", "layer", "head", "position", "atp", "act", "atp_normalised",
               "act_normalised", "trivial")


@dataclass
class AttributionResult(Result):
    """Figure 15. ``cells`` (``attribution.csv``): one record per pair and cell — ``pair_id``, ``n`` (the clean
    count), ``kind`` (``resid``, ``attn``, ``mlp``, ``head``), ``layer`` (a residual location index for
    ``resid``, a 0-based block otherwise), ``head`` (empty unless a head), ``position`` (a token position; empty
    for every position at once), ``atp`` and ``act`` (AtP's estimate and activation patching's change of the
    logit difference from the patched run's base, nats), both normalised (``(LD − LD_twin) / (LD_clean −
    LD_twin)``: one the clean run, zero the twin's; empty for a pair too close to normalise) and ``trivial``
    (source and base equal: both exactly zero). ``pairs``: per pair its prompts' texts and the clean and twin
    logit differences (activation patching's runs and AtP's own forward). ``agreement``: per group of
    :data:`GROUPS` the agreement of the non-trivial cells (:func:`~countlens.llm.attribution.atp.agreement`),
    activation patching's seconds and the speed ratio; ``atp_seconds`` / ``act_seconds`` / ``speed_ratio``
    over every cell."""

    FILE: ClassVar[str] = "attribution.json"
    CSV: ClassVar[str] = "attribution.csv"
    COMMAND: ClassVar[str] = "countlens llm attribution"

    config: dict[str, Any]
    model: str
    architecture: str
    method: str
    direction: str
    n_layers: int
    n_heads: int
    locations: list[int]
    layers: list[int]
    pairs: list[dict[str, Any]]
    cells: list[dict[str, Any]]
    agreement: dict[str, Any] = field(default_factory=dict)
    atp_seconds: float = 0.0
    act_seconds: float = 0.0
    speed_ratio: float | None = None
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        return {self.CSV: records_table(self.cells)}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, cls.CSV)

    def values(self, group: str, trivial: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(atp, act)`` (N,) of the cells of ``group`` (:data:`GROUPS`), the trivial ones only with ``trivial``."""
        chosen = [c for c in self.cells if GROUP_OF[c["kind"]] == group and (trivial or not c["trivial"])]
        return (np.array([c["atp"] for c in chosen], dtype=np.float64),
                np.array([c["act"] for c in chosen], dtype=np.float64))


# ------------------------------------------------------------------------------------------ the cells


def _atp_cells(gp, locations: list[int], layers: list[int], positions: list[int], head_dim: int) -> dict:
    """AtP's estimate of every cell of one pair: ``{(kind, layer, head, position): nats}``."""
    out: dict[tuple, float] = {}
    boundary = gp.base["resid"].shape[1] - 1
    resid = atp_effects(gp.base["resid"], gp.source["resid"], gp.grad["resid"])  # (locs, T)
    for j, loc in enumerate(locations):
        for p in positions:
            out[("resid", loc, None, p)] = float(resid[j, p])
    for kind in ("attn", "mlp"):
        eff = atp_effects(gp.base[kind], gp.source[kind], gp.grad[kind])  # (blocks, T)
        for j, b in enumerate(layers):
            for p in positions:
                out[(kind, b, None, p)] = float(eff[j, p])
            out[(kind, b, None, None)] = float(eff[j].sum())
    heads = atp_effects(gp.base["z"], gp.source["z"], gp.grad["z"], head_dim)  # (blocks, T, H)
    for j, b in enumerate(layers):
        for h in range(heads.shape[2]):
            out[("head", b, h, boundary)] = float(heads[j, boundary, h])
            out[("head", b, h, None)] = float(heads[j, :, h].sum())
    return out


def _act_cells(model, plan: AttributionPlan, base_ids, source_ids, candidates, positions: list[int], head_dim: int,
               batch_size: int, seconds: dict[str, float]) -> tuple[dict, dict, np.ndarray, np.ndarray]:
    """Activation patching of every cell of one pair: ``({cell: log-probabilities (2,)}, {cell: trivial},
    the base run's and the source run's log-probabilities (2,) each)``; adds each group's seconds to
    ``seconds``."""
    attn_out, mlp_out, attn_z = plan.sites
    T = len(base_ids)
    out: dict[tuple, np.ndarray] = {}
    trivial: dict[tuple, bool] = {}

    def positions_patcher(site: str, **kw) -> PositionPatcher:
        return PositionPatcher(model, source_ids, base_ids, candidates, "cached", batch_size, site=site, **kw)

    started = time.perf_counter()
    resid = positions_patcher("resid")
    for loc in plan.locations:
        for p, lp in zip(positions, resid.logprobs(loc, positions), strict=True):
            out[("resid", loc, None, p)] = lp
            trivial[("resid", loc, None, p)] = resid.unchanged(loc, p)
    base, source = resid.corrupt, resid.clean  # PositionPatcher's "corrupt" is the run patched, "clean" the source
    seconds["resid"] += time.perf_counter() - started

    started = time.perf_counter()
    for kind, site in (("attn", attn_out), ("mlp", mlp_out)):
        patcher = positions_patcher(site)
        for b in plan.layers:
            for p, lp in zip(positions, patcher.logprobs(b, positions), strict=True):
                out[(kind, b, None, p)] = lp
                trivial[(kind, b, None, p)] = patcher.unchanged(b, p)
            out[(kind, b, None, None)] = patcher.logprobs_every_position(b)[0]
            trivial[(kind, b, None, None)] = patcher.first_change(b) is None
    seconds["component"] += time.perf_counter() - started

    started = time.perf_counter()
    heads = positions_patcher(attn_z, head_dim=head_dim)
    for b in plan.layers:
        every = heads.logprobs_every_position(b, range(plan.n_heads))  # (H, 2)
        boundary = heads.logprobs_heads(b, T - 1, range(plan.n_heads))  # (H, 2)
        for h in range(plan.n_heads):
            out[("head", b, h, T - 1)] = boundary[h]
            trivial[("head", b, h, T - 1)] = heads.unchanged(b, T - 1, h)
            out[("head", b, h, None)] = every[h]
            trivial[("head", b, h, None)] = heads.first_change(b, h) is None
    seconds["head"] += time.perf_counter() - started
    return out, trivial, base, source


def summarise_agreement(cells: list[dict[str, Any]], top_k: int, atp_seconds: float,
                        act_seconds: dict[str, float]) -> dict[str, Any]:
    """Per group of :data:`GROUPS`: :func:`~countlens.llm.attribution.atp.agreement` of its non-trivial cells,
    its number of trivial cells, activation patching's seconds and the speed ratio over AtP's seconds (AtP's
    one pass estimates every group at once, so each group is charged all of it)."""
    out = {}
    for group in GROUPS:
        chosen = [c for c in cells if GROUP_OF[c["kind"]] == group]
        kept = [c for c in chosen if not c["trivial"]]
        stats = agreement(np.array([c["atp"] for c in kept]), np.array([c["act"] for c in kept]), top_k)
        out[group] = {**stats, "trivial": len(chosen) - len(kept), "act_seconds": act_seconds[group],
                      "speed_ratio": act_seconds[group] / atp_seconds if atp_seconds > 0 else None}
    return out


def cell_record(pair_id: int, n: int, key: tuple, atp: float, act: float, normalised: np.ndarray,
                trivial: bool) -> dict[str, Any]:
    """One record of :attr:`AttributionResult.cells`: the cell ``key`` (kind, layer, head, position) of pair
    ``pair_id`` (clean count ``n``), AtP's estimate ``atp`` and activation patching's change ``act`` (nats),
    ``normalised`` (2,) the two normalised (NaN: the pair is too close to normalise)."""
    kind, layer, head, position = key
    return {"pair_id": pair_id, "n": n, "kind": kind, "layer": layer, "head": head, "position": position,
            "atp": atp, "act": act,
            "atp_normalised": float(normalised[0]) if np.isfinite(normalised[0]) else None,
            "act_normalised": float(normalised[1]) if np.isfinite(normalised[1]) else None,
            "trivial": trivial}


def pair_record(pair_id: int, pp, ld_clean: float, ld_twin: float, ld_base_atp: float,
                positions: list[int]) -> dict[str, Any]:
    """One record of :attr:`AttributionResult.pairs`: the pair ``pp`` (clean prompt and twin), its clean and
    twin logit differences from activation patching's runs and the base's from AtP's own forward (nats), and
    the patched ``positions``."""
    return {"pair_id": pair_id, "n": pp.clean.n, "clean": pp.clean.prompt, "twin": pp.corrupt.prompt,
            "flipped_position": pp.flipped_position, "boundary_index": pp.clean.boundary_index,
            "ld_clean": ld_clean, "ld_twin": ld_twin, "ld_base_atp": ld_base_atp, "positions": positions}


def run_attribution(config: AttributionConfig, *, loaded: LoadedModel | None = None, progress: bool = False,
                    pool: ModelPool | None = None) -> AttributionResult:
    """Figure 15 (see the module docstring): per prompt pair AtP's one forward and one backward, then activation
    patching of the same cells; bad input is refused before the weights load (:func:`plan_attribution`)."""
    import torch
    from tqdm.auto import tqdm

    started = time.perf_counter()
    plan = plan_attribution(config, progress, pool)
    loaded = loaded or config.model.load(progress, tokenizer=plan.tokenizer, pool=pool)
    model, tok = loaded.model, loaded.tokenizer
    L = len(find_blocks(model))
    if L != plan.n_blocks:
        raise RuntimeError("the loaded model's blocks differ from its config's")
    attn_out, mlp_out, attn_z = plan.sites
    sites = {"resid": hook_sites(plan.locations, L), "attn": hook_sites(plan.layers, L, attn_out),
             "mlp": hook_sites(plan.layers, L, mlp_out), "z": hook_sites(plan.layers, L, attn_z)}
    atp_seconds, act_seconds = 0.0, dict.fromkeys(GROUPS, 0.0)
    cells: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    for i, pp in enumerate(tqdm(plan.pairs, desc="attribution", unit="pair", disable=not progress)):
        n = pp.clean.n
        base, source = (pp.clean, pp.corrupt) if config.direction == "noising" else (pp.corrupt, pp.clean)
        candidates = candidate_token_ids(tok, [n, n - 1], config.prompts.template)
        positions = patched_positions(pp, config.positions)
        t0 = time.perf_counter()
        gp = gradient_pass(model, base.ids, source.ids, candidates, sites)
        head_dim = gp.base["z"].shape[-1] // plan.n_heads
        estimates = _atp_cells(gp, plan.locations, plan.layers, positions, head_dim)
        atp_seconds += time.perf_counter() - t0
        with torch.inference_mode():
            patched, trivial, base_lp, source_lp = _act_cells(model, plan, base.ids, source.ids, candidates,
                                                              positions, head_dim, int(config.batch_size), act_seconds)
        ld_base, ld_source = float(logit_difference(base_lp, 0, 1)), float(logit_difference(source_lp, 0, 1))
        ld_clean, ld_twin = (ld_base, ld_source) if config.direction == "noising" else (ld_source, ld_base)
        for key, est in estimates.items():
            act = float(logit_difference(patched[key], 0, 1)) - ld_base
            norm = normalised_ld(np.array([ld_base + est, ld_base + act]), ld_clean, ld_twin, float(config.min_gap))
            cells.append(cell_record(i, n, key, est, act, norm, bool(trivial[key])))
        pairs.append(pair_record(i, pp, ld_clean, ld_twin, gp.ld, positions))
    act_total = float(sum(act_seconds.values()))
    result = AttributionResult(
        config=config.to_dict(), model=loaded.model_id, architecture=plan.architecture, method=config.method,
        direction=config.direction, n_layers=plan.n_blocks, n_heads=plan.n_heads, locations=plan.locations,
        layers=plan.layers, pairs=pairs, cells=cells,
        agreement=summarise_agreement(cells, int(config.top_k), atp_seconds, act_seconds), atp_seconds=atp_seconds,
        act_seconds=act_total, speed_ratio=act_total / atp_seconds if atp_seconds > 0 else None,
        provenance=result_provenance(config))
    result.seconds = round(time.perf_counter() - started, 3)
    return result


declare(Experiment(
    "attribution", "Figure 15: attribution patching against activation patching", AttributionConfig,
    run_attribution, AttributionResult, order=207, figure="countlens.llm.attribution.figures:draw_attribution",
    plot="countlens.llm.attribution.figures:plot_attribution",
    view="countlens.llm.attribution.figures:attribution_view",
    # quick: Figure 11's quick pairs (counts 3 and 6, L = 12) with every other location
    presets={"quick": AttributionConfig(location_step=2),
             "full": AttributionConfig(prompts=PromptSettings(L=24, counts=[3, 6, 9, 12], per_count=1, seeds=[0],
                                                              configs=["count"])),
             "test": AttributionConfig(prompts=PromptSettings(L=6, counts=[3], per_count=1, pairs=[["a", "b"]],
                                                              configs=["count"], seeds=[0]), positions="items")},
    inherits=("model", "template", "task"), uses_model=True, options={"progress": True}, study="where",
    cli="countlens.llm.attribution.cli"))


__all__ = ["METHODS", "DIRECTIONS", "GROUPS", "GROUP_OF", "GROUP_LABELS", "CSV_COLUMNS", "AttributionConfig",
           "AttributionPlan", "AttributionResult", "plan_attribution", "summarise_agreement", "cell_record",
           "pair_record", "run_attribution"]
