"""Figure 12, the heads that read the items: a :class:`HeadsConfig` in, a :class:`HeadsResult` out
(``heads.json``, ``heads.csv`` with one row per head, ``heads_prompts.csv`` with one row per prompt).

Per block and head (:mod:`countlens.llm.heads.attention` defines every quantity): the attention mass from the boundary
and from the last item to the target items, the distractor items and everything else (mean and spread over
the prompts), and the target excess (a preference for the targets beyond their share of the items); then head
ablation — the head's output at the boundary replaced by its mean over the prompt set — scored by the
normalised logit difference against the prompt's one-target-fewer twin (the twin of Figure 11,
:func:`countlens.llm.positions.experiment.corrupted_twin`) and, given a ``probes.json`` fitted on a capture of
the same model, by the shift of the probe's read-out at its location.

What it can show: which heads look at the counted items (from the boundary, or from the end of the list), and
which heads' boundary outputs the answer and the probe's read-out depend on. What it cannot: attention mass is
not use (a head may attend to the targets and write nothing the answer reads); a mean ablation at the boundary
removes one head's direct write there, not its effect through other positions, and heads that duplicate each
other hide each other's effect; a weak model's normalised scores are about two answers it may rank low (the
raw ``ld_change`` is kept beside them).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, UsageError, about, literal
from countlens.core.fields import AtLeast, Nested, OneOf, check_fields
from countlens.core.locations import location_names, resolve_locations
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
from countlens.llm.capture.residuals import (
    context_length,
    find_blocks,
    hidden_size,
    n_blocks_of,
    pad_token_id,
)
from countlens.llm.heads.attention import (
    KINDS,
    QUERIES,
    Readout,
    ablated_scores,
    boundary_scores,
    head_masses,
    mean_std,
    target_excess,
)
from countlens.llm.hooks import attention_output_site, hook_sites
from countlens.llm.models import (
    LoadedModel,
    ModelPool,
    ModelRef,
    ModelSpec,
    load_model_config,
    load_tokenizer,
)
from countlens.llm.patching.edits import logit_difference
from countlens.llm.positions.experiment import FLIPS, corrupted_twin
from countlens.llm.prompts import Prompt, PromptSettings, arrangement, build_prompts


def _quick_prompts() -> PromptSettings:
    return PromptSettings(L=24, counts=list(range(1, 13)), per_count=1, configs=["count"], seeds=[0])


@dataclass
class HeadsConfig(ExperimentConfig):
    """Figure 12. ``prompts`` (:class:`~countlens.llm.prompts.PromptSettings`): the prompt set whose attention
    masses are measured and over whose boundaries each head's mean output is taken. Head ablation runs on at
    most ``ablate_prompts`` of them (spread over the set; counts >= 1, since each needs a twin with one target
    fewer, its ``flip`` target turned into the distractor: ``first``, ``middle`` or ``last``; 0 skips the
    ablation) in the blocks ``layers`` (0-based block indices, ranges like ``0:5``, ``-1``, or all: ``None``).
    ``probes``: a ``probes.json`` fitted on a capture of the same model, whose validation-selected probe at
    ``location`` (default its best location) is read in every clean, twin and ablated run. ``batch_size``
    prompts share a forward; an ablation step batches all heads of a block for those prompts.

    The defaults (L = 24, counts 1..12, the four default pairs, one wording and seed: 48 prompts; 8 ablated)
    keep the prompts short: the masses cost one forward per prompt, the ablation one single-token step per
    (head, prompt) after one forward per prompt."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompts: PromptSettings = field(default_factory=_quick_prompts)
    layers: str | None = None
    """blocks whose heads are ablated: 0-based indices, -1, ranges like 0:5, or all (default: all)"""
    ablate_prompts: int = 8
    """most prompts ablated, spread over the prompt set (0: attention masses only)"""
    flip: str = "last"
    """which target the twin turns into the distractor"""
    probes: str | None = None
    """probes.json fitted on a capture of the same model: its read-out is scored too (default: none)"""
    location: str | None = None
    """the probe location to read (default: the probes' best)"""
    batch_size: int = 8

    FIELDS: ClassVar[dict] = {"model": Nested(ModelSpec, "model"), "prompts": Nested(PromptSettings),
                              "ablate_prompts": AtLeast(0, " (0: no ablation)"), "flip": OneOf(FLIPS),
                              "batch_size": AtLeast(1)}

    def validate(self) -> HeadsConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built."""
        check_fields(self, self.FIELDS, assign=True)
        self.prompts.require_twins("the heads' attention to targets and their ablation")
        if max(int(c) for c in self.prompts.counts) < 1:
            raise ConfigError("counts", "{counts} must hold a count >= 1: with no target there is no attention to "
                                        "the targets to measure and no twin with one target fewer")
        if self.location is not None and not self.probes:
            raise ConfigError("location", "{location} names a probe location, but no {probes} file is given",
                              also=("probes",))
        return self


@dataclass
class ProbeRead:
    """The probe read at every run: its location (name and residual index), native coefficients, intercept."""

    location: str
    index: int
    coef: np.ndarray
    intercept: float


@dataclass
class HeadsPlan:
    """A checked Figure 12 run before any weights are read: the model's files and tokenizer, its architecture
    and attention-output hook site, its blocks and heads, the prompts and their items (``roles``: True for a
    target), the ablated prompts with their twins, the ablated blocks and the probe."""

    config: HeadsConfig
    ref: ModelRef
    tokenizer: Any
    architecture: str
    site: str
    n_blocks: int
    n_heads: int
    n_kv_heads: int
    d: int
    prompts: list[Prompt]
    roles: list[np.ndarray]
    ablated: list[int]
    twins: list[Any]  # countlens.llm.positions.experiment.PromptPair per ablated prompt
    layers: list[int]
    probe: ProbeRead | None


def text_config(config):
    """The text model's config of a ``transformers`` config (itself where not nested)."""
    return getattr(config, "text_config", None) or config


def ablated_layers(spec: str | None, n_blocks: int) -> list[int]:
    """Block indices of ``spec`` (indices incl. ``-1``, inclusive ranges, ``all``/``None``), sorted;
    ``ConfigError("layers")`` for a block the model lacks."""
    try:
        return sorted(resolve_locations([f"block {b}" for b in range(n_blocks)], spec))
    except UsageError as exc:
        raise ConfigError("layers", "{layers}: " + literal(str(exc).replace("location", "block"))) from None


def prompt_roles(prompts: list[Prompt], settings: PromptSettings) -> list[np.ndarray]:
    """Each prompt's items in order, True for a target: the prompt's own ``item_targets`` (every task), else its
    arrangement as :func:`~countlens.llm.prompts.build_prompts` drew it (the ``k``-th prompt of its count in
    its group)."""
    roles, seen = [], Counter()
    for p in prompts:
        if p.item_targets:
            roles.append(np.asarray(p.item_targets, dtype=bool))
            continue
        group = (p.seed, p.config, p.pair, p.n)
        items = arrangement(p.seed, p.n, seen[group], settings.L)
        seen[group] += 1
        if len(items) != p.n + p.m:
            raise RuntimeError("a prompt's items do not match its arrangement")
        roles.append(items == 1)
    return roles


def read_probe(path: str, location: str | None, ref: ModelRef, n_blocks: int, d: int) -> ProbeRead:
    """The validation-selected probe of ``probes.json`` at ``path`` (at ``location``; default its best,
    :func:`~countlens.llm.steering.experiment.chosen_probe`), checked against the model by the criterion of
    :func:`~countlens.llm.steering.experiment.probe_mismatch` without a capture's rows: ``ConfigError("probes")``
    for probes fitted on another model or width, at locations the model lacks, or without coefficients,
    ``ConfigError("location")`` for a location the probes lack."""
    from countlens.llm.steering.experiment import chosen_probe, probe_mismatch
    from countlens.probes import ProbeResult

    with about("probes"):
        probes = ProbeResult.read(path)
    mismatch = probe_mismatch(probes, ref.model_id, d, location_names(n_blocks))  # no capture: rows not checked
    if mismatch:
        raise ConfigError("probes", f"{{probes}} holds probes fitted on a capture of another model ({', '.join(mismatch)} "
                                    "differ); fit probes on a capture of this {model}", also=("model",))
    chosen = chosen_probe(probes, location)
    fit = chosen.fits[0]
    return ProbeRead(chosen.name, location_names(n_blocks).index(chosen.name), np.asarray(fit.coef, dtype=np.float64),
                     float(fit.intercept))


def plan_heads(config: HeadsConfig, progress: bool = False, pool: ModelPool | None = None) -> HeadsPlan:
    """Check ``config`` with the tokenizer and the model's config alone (no weights are read): the architecture
    (its attention output projection must be in the hook-site registry), the blocks, the prompts, their twins,
    the context length (each prompt and its longest answer) and the probe file."""
    ref = config.model.resolve(progress, pool=pool)
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    text = text_config(model_config)
    architecture = str(getattr(text, "model_type", None) or getattr(model_config, "model_type", ""))
    site = attention_output_site(architecture)
    n_blocks = n_blocks_of(model_config)
    n_heads = int(text.num_attention_heads)
    n_kv_heads = int(getattr(text, "num_key_value_heads", None) or n_heads)
    d = hidden_size(model_config)
    layers = ablated_layers(config.layers, n_blocks)
    prompts = build_prompts(tokenizer, config.prompts)
    roles = prompt_roles(prompts, config.prompts)
    eligible = [i for i, p in enumerate(prompts) if p.n >= 1]
    count = min(int(config.ablate_prompts), len(eligible))
    ablated = [eligible[j] for j in np.unique(np.linspace(0, len(eligible) - 1, count).round().astype(int))] \
        if count else []
    seen, twins, k_of = Counter(), {}, {}
    for i, p in enumerate(prompts):
        group = (p.seed, p.config, p.pair, p.n)
        k_of[i] = seen[group]
        seen[group] += 1
    for i in ablated:
        twins[i] = corrupted_twin(tokenizer, prompts[i], k_of[i], config.prompts, config.flip)
    n_ctx = context_length(model_config)
    # the ablation scores n against n - 1: every such answer must be tokens of its own (as every read-out checks)
    answers = checked_candidates(tokenizer, counts_with_previous(config.prompts.counts), config.prompts.template)
    longest = max(len(c) for c in answers)
    needed = max(p.n_tokens for p in prompts) + longest - 1
    if n_ctx is not None and needed > n_ctx:
        raise ConfigError("L", f"the longest prompt and its answer take {needed} tokens but the model's context is "
                               f"{n_ctx}; lower {{L}}")
    probe = read_probe(config.probes, config.location, ref, n_blocks, d) if config.probes else None
    return HeadsPlan(config, ref, tokenizer, architecture, site, n_blocks, n_heads, n_kv_heads, d, prompts, roles,
                     ablated, [twins[i] for i in ablated], layers, probe)


@dataclass
class HeadsResult(Result):
    """Figure 12. ``heads``: one record per (block ``layer``, ``head``) — 0-based, TransformerLens's
    ``blocks.{layer}.attn``, shown as ``L{layer}H{head}`` — with its key/value head (``kv_head``: grouped-query
    attention shares one among ``n_heads / n_kv_heads`` heads); for each query (``boundary``, ``last_item``) and
    kind (``target``, ``distractor``, ``other``) the mean and std over prompts of the attention mass
    (``{query}_{kind}_mean`` / ``_std``) and of the target excess (``{query}_target_excess_mean`` / ``_std``);
    for an ablated head (``ablated``) the mean and std over the ablated prompts of ``normalised_ld`` (over the
    prompts that normalise, ``n_normalised``), ``effect_mean`` = 1 − the mean normalised LD, ``ld_change``
    (LD_ablated − LD_clean, nats, every ablated prompt) and, with a probe, ``readout_shift`` (the probe's
    read-out, ablated − clean, in counts; exactly 0 for blocks at or after the probe's location). ``prompts``:
    one record per prompt (its ``LD``s and read-outs where ablated). ``unnormalised``: the ablated prompts
    (indices into ``prompts``) whose |LD_clean − LD_corrupt| < ``min_gap``."""

    FILE: ClassVar[str] = "heads.json"
    CSV: ClassVar[str] = "heads.csv"
    PROMPTS_CSV: ClassVar[str] = "heads_prompts.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "heads", PROMPTS_CSV: "prompts"}
    COMMAND: ClassVar[str] = "countlens llm heads"

    config: dict[str, Any]
    model: str
    architecture: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    layers: list[int]
    heads: list[dict[str, Any]]
    prompts: list[dict[str, Any]]
    unnormalised: list[int]
    probe: dict[str, Any] | None = None
    min_gap: float = MIN_LD_GAP
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)

    def head(self, layer: int, head: int) -> dict[str, Any]:
        """The record of block ``layer``'s head ``head``."""
        return self.heads[int(layer) * self.n_heads + int(head)]

    def grid(self, key: str) -> np.ndarray:
        """``key`` of every head as a (n_layers, n_heads) float array (NaN where absent)."""
        values = [np.nan if r.get(key) is None else r[key] for r in self.heads]
        return np.asarray(values, dtype=np.float64).reshape(self.n_layers, self.n_heads)

    def ranked(self, key: str, top: int = 5, sign: float = 1.0) -> list[int]:
        """Indices into ``heads`` of the ``top`` heads with the largest finite ``sign * key``."""
        grid = sign * self.grid(key).ravel()
        order = [int(i) for i in np.argsort(-np.where(np.isfinite(grid), grid, -np.inf), kind="stable")]
        return [i for i in order if np.isfinite(grid[i])][:top]


def _num(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def _candidates(tokenizer, prompts: list[Prompt], template: str) -> list[list[list[int]]]:
    """Per prompt, the answer tokens of ``n`` and ``n − 1``."""
    return [candidate_token_ids(tokenizer, [p.n, p.n - 1], template) for p in prompts]


ABLATION_KEYS = ("normalised_ld", "ld_change", "readout_shift")


@dataclass
class AblationScores:
    """The ablated prompts' scores. ``ld_clean``, ``ld_corrupt`` (A,): log p("n") − log p("n − 1") of each
    ablated prompt and of its twin (nats); ``readout_clean``, ``readout_corrupt`` (A,): the probe's read-out
    there (counts; ``None`` without a probe); ``stats``: per ablated block, per quantity of
    :data:`ABLATION_KEYS`, its (mean, std, count) over the ablated prompts, each (H,)."""

    ld_clean: np.ndarray
    ld_corrupt: np.ndarray
    readout_clean: np.ndarray | None
    readout_corrupt: np.ndarray | None
    stats: dict[int, dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]]


def _probe_readout(plan: HeadsPlan) -> Readout | None:
    """The probe's read-out at the output of its block, ``None`` without a probe."""
    if plan.probe is None:
        return None
    [where] = hook_sites([plan.probe.index], plan.n_blocks)
    return Readout(where, plan.probe.coef, plan.probe.intercept)


def ablation_scores(model, tokenizer, plan: HeadsPlan, means: np.ndarray, readout: Readout | None,
                    progress: bool = False) -> AblationScores:
    """The clean, twin and ablated boundary steps of the plan's ablated prompts (``means`` (n_blocks,
    H * head_dim): each block's mean boundary output, written in place of one head's), scored as
    :class:`AblationScores`; a block at or after the probe's location cannot reach its read-out (shift 0)."""
    from tqdm.auto import tqdm

    pad_id, B, H = pad_token_id(tokenizer), int(plan.config.batch_size), plan.n_heads
    clean = [plan.prompts[i] for i in plan.ablated]
    cands = _candidates(tokenizer, clean, plan.config.prompts.template)
    s_clean, r_clean = boundary_scores(model, clean, cands, pad_id, B, readout)
    s_twin, r_twin = boundary_scores(model, [pp.corrupt for pp in plan.twins], cands, pad_id, B, readout)
    sites = hook_sites(plan.layers, plan.n_blocks, plan.site)
    with tqdm(total=len(clean) * len(sites) * H, unit="ablation", desc="heads", disable=not progress,
              smoothing=0.1) as bar:
        s_abl, r_abl = ablated_scores(model, clean, cands, sites, means, H, pad_id, B, readout, bar.update)
    ld_clean = logit_difference(s_clean, 0, 1)  # (A,) log p("n") − log p("n − 1")
    ld_twin = logit_difference(s_twin, 0, 1)
    ld_abl = logit_difference(s_abl, 0, 1)  # (A, len(layers), H)
    per_prompt = {"normalised_ld": normalised_ld(ld_abl, ld_clean[:, None, None], ld_twin[:, None, None]),
                  "ld_change": ld_abl - ld_clean[:, None, None]}
    if readout is not None:
        shift = r_abl - r_clean[:, None, None]
        shift[:, [j for j, b in enumerate(plan.layers) if b >= plan.probe.index]] = 0.0  # cannot reach it
        per_prompt["readout_shift"] = shift
    stats = {b: {key: mean_std(values[:, j]) for key, values in per_prompt.items()} for j, b in enumerate(plan.layers)}
    return AblationScores(ld_clean=ld_clean, ld_corrupt=ld_twin, readout_clean=r_clean, readout_corrupt=r_twin,
                          stats=stats)


def _mean_std_columns(name: str, mean, std) -> dict[str, float | None]:
    """``{name}_mean`` and ``{name}_std`` of a record (``None`` where absent or not finite)."""
    return {f"{name}_mean": None if mean is None else _num(mean), f"{name}_std": None if std is None else _num(std)}


def head_record(layer: int, head: int, kv_head: int, mass: tuple[np.ndarray, np.ndarray],
                excess: tuple[np.ndarray, np.ndarray], stats: dict[str, tuple] | None) -> dict[str, Any]:
    """One record of :attr:`HeadsResult.heads`: ``mass`` (mean, std) of the head's attention masses over the
    prompts, each (Q, 3) (:data:`QUERIES` × :data:`KINDS`); ``excess`` (mean, std) of its target excess, each
    (Q,); ``stats``: its block's ablation statistics (:attr:`AblationScores.stats`), ``None`` where the block
    was not ablated."""
    row: dict[str, Any] = {"layer": layer, "head": head, "kv_head": kv_head}
    for q, query in enumerate(QUERIES):
        for k, kind in enumerate(KINDS):
            row.update(_mean_std_columns(f"{query}_{kind}", mass[0][q, k], mass[1][q, k]))
        row.update(_mean_std_columns(f"{query}_target_excess", excess[0][q], excess[1][q]))
    row["ablated"] = stats is not None
    for key in ABLATION_KEYS:
        mean, std, count = stats[key] if stats is not None and key in stats else (None, None, None)
        row.update(_mean_std_columns(key, None if mean is None else mean[head], None if std is None else std[head]))
        if key == "normalised_ld":
            row["n_normalised"] = None if count is None else int(count[head])
            row["effect_mean"] = None if row["normalised_ld_mean"] is None else 1.0 - row["normalised_ld_mean"]
    return row


def prompt_record(index: int, p: Prompt, scores: AblationScores | None = None, a: int | None = None,
                  flipped_position: int | None = None) -> dict[str, Any]:
    """One record of :attr:`HeadsResult.prompts`: prompt ``index`` and, where it was ablated (``a``: its row
    in ``scores``; ``flipped_position``: the item its twin flips), its and its twin's LD and read-outs."""
    ablated = a is not None
    readout = ablated and scores.readout_clean is not None
    return {"index": index, "seed": p.seed, "config": p.config, "pair": p.pair, "n": p.n, "m": p.m,
            "n_tokens": p.n_tokens, "first_item_index": p.first_item_index, "last_item_index": p.last_item_index,
            "ablated": ablated, "flipped_position": flipped_position if ablated else None,
            "ld_clean": _num(scores.ld_clean[a]) if ablated else None,
            "ld_corrupt": _num(scores.ld_corrupt[a]) if ablated else None,
            "normalised": bool(abs(scores.ld_clean[a] - scores.ld_corrupt[a]) >= MIN_LD_GAP) if ablated else None,
            "readout_clean": _num(scores.readout_clean[a]) if readout else None,
            "readout_corrupt": _num(scores.readout_corrupt[a]) if readout else None}


def run_heads(config: HeadsConfig, *, loaded: LoadedModel | None = None, progress: bool = False,
              pool: ModelPool | None = None) -> HeadsResult:
    """Figure 12 (:mod:`countlens.llm.heads.attention`): the masses from one eager forward per batch of prompts, then
    the clean, twin and ablated boundary steps of the ablated prompts. ``loaded`` reuses a model already loaded
    from ``config.model``."""
    import torch

    started = time.perf_counter()
    plan = plan_heads(config, progress, pool)
    loaded = loaded or config.model.load(progress, tokenizer=plan.tokenizer, pool=pool)
    model, tok = loaded.model, loaded.tokenizer
    if len(find_blocks(model)) != plan.n_blocks:
        raise RuntimeError("the loaded model's blocks differ from its config's")
    H = plan.n_heads
    readout = _probe_readout(plan)
    with torch.inference_mode():
        masses, means = head_masses(model, plan.prompts, plan.roles, plan.site, pad_token_id(tok),
                                    int(config.batch_size))  # (P, L, Q, H, 3), (L, H * head_dim)
        scores = ablation_scores(model, tok, plan, means, readout, progress) if plan.ablated else None
    excess = target_excess(masses, np.array([p.n for p in plan.prompts]), np.array([p.m for p in plan.prompts]))
    mass_mean, mass_std, _ = mean_std(masses)  # (L, Q, H, 3)
    ex_mean, ex_std, _ = mean_std(excess)  # (L, Q, H)
    stats = {} if scores is None else scores.stats
    group = max(1, H // plan.n_kv_heads)
    heads = [head_record(b, h, h // group, (mass_mean[b, :, h], mass_std[b, :, h]), (ex_mean[b, :, h], ex_std[b, :, h]),
                         stats.get(b)) for b in range(plan.n_blocks) for h in range(H)]
    at = {i: a for a, i in enumerate(plan.ablated)}
    prompt_rows = [prompt_record(i, p, scores, at.get(i), plan.twins[at[i]].flipped_position if i in at else None)
                   for i, p in enumerate(plan.prompts)]
    probe = None if plan.probe is None else {"file": str(config.probes), "location": plan.probe.location,
                                            "index": plan.probe.index}
    return HeadsResult(config=config.to_dict(), model=loaded.model_id, architecture=plan.architecture,
                       n_layers=plan.n_blocks, n_heads=H, n_kv_heads=plan.n_kv_heads, head_dim=int(means.shape[-1] // H),
                       layers=plan.layers if scores is not None else [], heads=heads, prompts=prompt_rows,
                       unnormalised=[r["index"] for r in prompt_rows if r["normalised"] is False], probe=probe,
                       min_gap=MIN_LD_GAP, seconds=round(time.perf_counter() - started, 3),
                       provenance=result_provenance(config))


declare(Experiment(
    "heads", "Figure 12: the heads that read the items", HeadsConfig, run_heads, HeadsResult, order=200,
    figure="countlens.llm.heads.figures:draw_heads", plot="countlens.llm.heads.figures:plot_heads", view="countlens.llm.heads.figures:heads_view", reads={"probes": "probe"},
    presets={"quick": HeadsConfig,
             # 96 prompts, 24 ablated.
             "full": partial(HeadsConfig, prompts=PromptSettings(L=24, counts=list(range(1, 25)), per_count=1,
                                                                 seeds=[0], configs=["count"]), ablate_prompts=24),
             "test": partial(HeadsConfig, prompts=PromptSettings(L=8, counts=[1, 3, 5], per_count=1, pairs=[["a", "b"]],
                                                                 configs=["count"], seeds=[0]), ablate_prompts=2)},
    inherits=("model", "template", "task"), uses_model=True, options={"progress": True}, study="where",
    cli="countlens.llm.heads.cli"))


__all__ = ["HeadsConfig", "HeadsPlan", "HeadsResult", "ProbeRead", "plan_heads", "run_heads", "read_probe",
           "prompt_roles", "ablated_layers", "AblationScores", "ablation_scores", "head_record", "prompt_record"]
