"""Figure 14, which component writes the answer: a :class:`ComponentsConfig` in, a :class:`ComponentsResult`
out (``components.json`` with the prompts' texts and answers, ``components.csv`` with one row per prompt,
logit difference and component).

Per prompt, one prompt pass records every write to the boundary's residual stream (the embeddings, each
block's attention and MLP write, each head's share of its block's attention write;
:mod:`countlens.llm.components.attribution` defines them) while the model answers greedily from the same pass
(:func:`countlens.llm.answers.answer_batch`). Each write is read through the final norm with its scale frozen at
the real residual and through the unembedding, and scored on two logit differences, each read at the first
answer position where its two answers differ (:func:`countlens.llm.answers.divergence`; 0 = the boundary's next
token): ``answer``, the correct count's token against the model's own greedy token where the greedy answer first
departs from the correct one (zero where it never does), and ``previous``, the count ``n``'s token against
``n − 1``'s (prompts with ``n >= 1``). Answers that share their first tokens — "11" and "10" on a tokenizer that
writes digits one by one, or every answer under the plain template where the leading space is a token of its
own — are read after those tokens: one more pass of the prompt with the shared tokens appended (teacher-forced)
records the writes at that position; the position read is recorded (``answer_position``,
``previous_position``). The embeddings, the attention and MLP writes and the constant of the read-out (``bias``, a
LayerNorm's shift or an unembedding bias; absent where the model has none) sum to the model's own logit
difference (``total``); the heads split their block's attention write (minus the projection's bias).

What it can show: which blocks and heads write the direction that separates the model's answer from the
correct one, at the boundary, directly. What it cannot: it is linear at the real run's point — a component
that writes nothing directly can still matter through later ones, and removing one changes the scale the
others are read with (the ablation of Figure 11's patch mechanism measures that).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError
from countlens.core.fields import AtLeast, Nested, OneOf, check_fields
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.answers import (
    ANSWER_TOKENS,
    MIN_LD_GAP,
    answer_batch,
    answer_token_ids,
    candidate_token_ids,
    checked_candidates,
    counts_with_previous,
    divergence,
    normalised_ld,
    number_continuations,
    parse_answer,
    stop_token_ids,
)
from countlens.llm.capture.residuals import context_length, find_blocks, n_blocks_of, pad_batch, pad_token_id
from countlens.llm.components.ablation import (
    SCOPES,
    SOURCES,
    ablated_component_scores,
    component_scores,
    component_setter,
    patched_step_scores,
    site_values,
    twin_boundary_scores,
)
from countlens.llm.components.attribution import ComponentPass, boundary_writes, frozen_norm
from countlens.llm.components.reads import AnswerRead, answer_reads, answer_rows
from countlens.llm.heads.attention import ablated_scores, mean_std
from countlens.llm.heads.experiment import ablated_layers, text_config
from countlens.llm.hooks import attention_output_site, component_output_sites, hook_sites
from countlens.llm.lens.readout import check_unembedding, output_head
from countlens.llm.models import (
    LoadedModel,
    ModelPool,
    ModelRef,
    ModelSpec,
    load_model_config,
    load_tokenizer,
)
from countlens.llm.patching.edits import expected_count, logit_difference
from countlens.llm.positions.experiment import FLIPS, corrupted_twin
from countlens.llm.prompts import Prompt, PromptSettings, build_prompts

TARGETS = ("answer", "previous")  # the logit differences scored: correct vs the model's answer; n vs n − 1
KINDS = ("embed", "attn", "mlp", "head", "bias")


def _default_prompts() -> PromptSettings:
    """The default prompt set (L = 24, counts 1..12, two prompts per count and pair, one wording and seed: 96
    prompts); the quick preset takes one prompt per count and pair of it."""
    return PromptSettings(L=24, counts=list(range(1, 13)), per_count=2, configs=["count"], seeds=[0])


@dataclass
class ComponentsConfig(ExperimentConfig):
    """Figure 14. ``prompts`` (:class:`~countlens.llm.prompts.PromptSettings`): the prompt set whose boundary
    is decomposed, ``batch_size`` left-padded prompts per prompt pass (each answered greedily from its own
    pass, as a capture with ``--answers`` does). The ablation (:mod:`countlens.llm.components.ablation`) runs
    on at most ``ablate_prompts`` of them (spread over the set; counts >= 1, each scored against its twin with
    its ``flip`` target turned into the distractor: ``first``, ``middle`` or ``last``; 0 skips it): every
    block's attention and MLP write and every head's output at the boundary, each replaced by its mean over
    the prompt set. ``source`` ``twin`` patches the twin's own write instead (:mod:`~countlens.llm.components.
    ablation`); ``scope`` ``all`` writes at every position of the prompt at once (the mean then over every
    position of the ablated prompts); ``layers`` the blocks ablated (0-based, ranges ``0:5``, ``-1``; default
    all).

    The defaults (L = 24, counts 1..12, two prompts per count and pair, one wording and seed: 96 prompts; 8
    ablated) cost one prompt pass and the greedy answer's decode steps per prompt, then one boundary step per
    ablated prompt and component."""

    model: ModelSpec = field(default_factory=ModelSpec)
    prompts: PromptSettings = field(default_factory=_default_prompts)
    batch_size: int = 8
    ablate_prompts: int = 8
    """most prompts on which every block's attention and MLP write and every head is mean-ablated at the
    boundary (0: attribution only)"""
    flip: str = "last"
    """which target the ablation's twin turns into the distractor"""
    source: str = "mean"
    """what an ablated component's write is replaced by: mean (its mean) or twin (the twin's own write:
    patching)"""
    scope: str = "boundary"
    """where: at the boundary alone, or at every position of the prompt at once (all)"""
    layers: str | None = None
    """blocks whose attention and MLP writes and heads are ablated: 0-based indices, -1, ranges like 0:5, or
    all (default: all)"""

    FIELDS: ClassVar[dict] = {"model": Nested(ModelSpec, "model"), "prompts": Nested(PromptSettings),
                              "batch_size": AtLeast(1), "ablate_prompts": AtLeast(0, " (0: no ablation)"),
                              "flip": OneOf(FLIPS), "source": OneOf(SOURCES), "scope": OneOf(SCOPES)}

    def validate(self) -> ComponentsConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built."""
        check_fields(self, self.FIELDS, assign=True)
        if self.ablate_prompts and max(int(c) for c in self.prompts.counts) < 1:
            raise ConfigError("ablate_prompts", "the ablation scores n against n − 1 and needs {counts} >= 1; "
                                                "give such counts or set {ablate_prompts} to 0",
                              also=("counts",))
        if self.ablate_prompts:
            try:
                self.prompts.require_twins("the components' ablation (scored against each prompt's twin)")
            except ConfigError as exc:
                raise ConfigError("ablate_prompts", exc.template + "; or set {ablate_prompts} to 0 for the direct "
                                  "logit attribution alone", also=exc.fields) from None
        return self


@dataclass
class ComponentsPlan:
    """A checked Figure 14 run before any weights are read: the model's files and tokenizer, its architecture
    and hook sites (attention and MLP writes, the heads' projection input), its blocks and heads, the prompts
    and each one's answer tokens (``correct``: the count's; ``previous``: ``n − 1``'s, ``None`` for ``n = 0`` and
    where one of the two answers begins the other, :func:`~countlens.llm.answers.divergence`). Answers sharing
    their first tokens (``"11"`` and ``"10"`` on a tokenizer that writes digits one by one, or a space token
    before every answer under the plain template) are read where they first differ
    (:func:`answer_reads`)."""

    config: ComponentsConfig
    ref: ModelRef
    tokenizer: Any
    architecture: str
    sites: tuple[str, str, str]  # attn_out, mlp_out, attn_z
    n_blocks: int
    n_heads: int
    prompts: list[Prompt]
    correct: list[tuple[int, ...]]
    previous: list[tuple[int, ...] | None]
    ablated: list[int]
    twins: list[Prompt]
    layers: list[int] = field(default_factory=list)


def component_sites(model_config) -> tuple[str, tuple[str, str, str]]:
    """The architecture of ``model_config`` (its text model's) and its hook-site kinds: the attention and MLP
    writes and the attention output projection's input (``ConfigError`` naming ``model`` where the hook-site
    registry lacks one)."""
    text = text_config(model_config)
    architecture = str(getattr(text, "model_type", None) or getattr(model_config, "model_type", ""))
    return architecture, (*component_output_sites(architecture), attention_output_site(architecture))


def plan_components(config: ComponentsConfig, progress: bool = False,
                    pool: ModelPool | None = None) -> ComponentsPlan:
    """Check ``config`` with the tokenizer and the model's config alone (no weights are read): the architecture
    (its attention and MLP writes and its attention output projection must be in the hook-site registry), the
    output embedding, the prompts and the context length (each prompt and its greedy answer)."""
    ref = config.model.resolve(progress, pool=pool)
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    text = text_config(model_config)
    architecture, (attn_out, mlp_out, attn_z) = component_sites(model_config)
    check_unembedding(model_config, "model")
    n_blocks = n_blocks_of(model_config)
    layers = ablated_layers(config.layers, n_blocks)
    n_heads = int(text.num_attention_heads)
    prompts = build_prompts(tokenizer, config.prompts)
    n_ctx = context_length(model_config)
    needed = max(p.n_tokens for p in prompts) + ANSWER_TOKENS
    if n_ctx is not None and needed > n_ctx:
        raise ConfigError("L", f"the longest prompt and its answer take {needed} tokens but the model's context is "
                               f"{n_ctx}; lower {{L}}")
    counts = counts_with_previous({p.n for p in prompts})
    answers = {k: tuple(c) for k, c in zip(counts, checked_candidates(tokenizer, counts, config.prompts.template),
                                           strict=True)}
    eligible = [i for i, p in enumerate(prompts) if p.n >= 1]
    count = min(int(config.ablate_prompts), len(eligible))
    ablated = [eligible[j] for j in np.unique(np.linspace(0, len(eligible) - 1, count).round().astype(int))] \
        if count else []
    seen, k_of = Counter(), {}
    for i, p in enumerate(prompts):
        k_of[i] = seen[(p.seed, p.config, p.pair, p.n)]
        seen[(p.seed, p.config, p.pair, p.n)] += 1
    twins = [corrupted_twin(tokenizer, prompts[i], k_of[i], config.prompts, config.flip).corrupt for i in ablated]
    previous = [answers[p.n - 1] if p.n >= 1 and divergence([answers[p.n], answers[p.n - 1]]).readable else None
                for p in prompts]
    return ComponentsPlan(config, ref, tokenizer, architecture, (attn_out, mlp_out, attn_z), n_blocks, n_heads,
                          prompts, [answers[p.n] for p in prompts], previous, ablated, twins, layers)


@dataclass
class ComponentsResult(Result):
    """Figure 14. ``rows`` (``components.csv``): one record per prompt (``prompt_id``: its index in
    ``prompts``, ``n``), logit difference (``target``: ``answer`` — the correct count's token against the model's
    greedy token where the greedy answer first departs from the correct one — or ``previous`` — ``n``'s token
    against ``n − 1``'s where the two answers first differ; each read at that answer position, the answer's
    tokens before it teacher-forced) and component (``layer``:
    0-based block, empty for ``embed`` and ``bias``; ``kind``: ``embed``, ``attn``, ``mlp``, ``head``, ``bias``;
    ``head``: empty unless a head), its direct contribution in nats and the model's real logit difference
    (``total``). The ``embed``, ``attn``, ``mlp`` and ``bias`` rows of one prompt and target sum to its
    ``total``; the ``head`` rows of a block sum to its ``attn`` row minus the projection's bias. ``prompts``:
    one record per prompt (its text, the greedy answer, the tokens compared, ``correct_token`` against
    ``answer_token`` and against ``previous_token``, and the answer positions they were read at,
    ``answer_position`` and ``previous_position``: 0 the boundary's next token, ``j`` after the answer's first
    ``j`` tokens; no ``answer`` — ``answer_position`` and ``ld_answer`` empty — where the greedy answer begins
    with the whole correct one and goes on with a digit, "12" for "1": no one token stands for the correct
    answer there). ``summary``: per target the
    number of prompts, the mean ``total``, the ``embed`` and ``bias`` means, per block the mean and std over
    prompts of its ``attn`` and ``mlp`` contributions (``layers``), and the ``heads`` with the largest
    |mean contribution| (:meth:`top_heads`). ``ablation`` (``ablation.csv``): one record per ablated
    component (``layer``, ``kind`` ``attn``, ``mlp`` or ``head``, ``head``) with the mean and std over the
    ablated prompts of ``normalised_ld`` (n against n − 1, 1 = the clean run, 0 = the twin's; over the prompts
    that normalise, ``n_normalised``), ``ld_change`` (ablated − clean, nats) and ``expected_shift`` (the
    expected count over the candidates ``ablation_counts``, ablated − clean). What replaced each component's
    write, and where, is the config's ``source`` (``mean`` or the ``twin``'s own write) and ``scope``
    (``boundary`` or ``all`` positions)."""

    FILE: ClassVar[str] = "components.json"
    CSV: ClassVar[str] = "components.csv"
    ABLATION_CSV: ClassVar[str] = "ablation.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "rows", ABLATION_CSV: "ablation"}
    COMMAND: ClassVar[str] = "countlens llm components"

    config: dict[str, Any]
    model: str
    architecture: str
    n_layers: int
    n_heads: int
    prompts: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    summary: dict[str, Any] = field(default_factory=dict)
    ablation: list[dict[str, Any]] = field(default_factory=list)
    ablation_counts: list[int] = field(default_factory=list)
    min_gap: float = MIN_LD_GAP
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)

    def contributions(self, target: str, kind: str) -> np.ndarray:
        """(prompts, n_layers) of ``kind`` ``attn`` or ``mlp``, (prompts, n_layers, n_heads) of ``head``, or
        (prompts,) of ``embed`` / ``bias``: the contributions to ``target`` (NaN for prompts without it)."""
        shape = {"head": (self.n_layers, self.n_heads), "attn": (self.n_layers,), "mlp": (self.n_layers,)}
        out = np.full((len(self.prompts), *shape.get(kind, ())), np.nan)
        for r in self.rows:
            if r["target"] != target or r["kind"] != kind:
                continue
            where = (r["prompt_id"],) + (() if r["layer"] is None else (r["layer"],)) + \
                (() if r["head"] is None else (r["head"],))
            out[where] = r["contribution"]
        return out

    def top_heads(self, target: str, top: int = 10) -> list[tuple[int, int, float, float]]:
        """The ``top`` heads by |mean contribution| to ``target`` over the prompts that have it:
        ``(layer, head, mean, std)``."""
        grid = self.contributions(target, "head")
        seen = np.isfinite(grid[:, 0, 0]) if grid.size else np.zeros(0, dtype=bool)
        if not seen.any():
            return []
        mean, std = grid[seen].mean(axis=0), grid[seen].std(axis=0)
        order = np.argsort(-np.abs(mean).ravel(), kind="stable")[:top]
        return [(int(i // self.n_heads), int(i % self.n_heads), float(mean.flat[i]), float(std.flat[i]))
                for i in order]

    def summarised(self, top: int = 10) -> dict[str, Any]:
        """The :attr:`summary` of :attr:`rows` (see the class docstring)."""
        out = {}
        for target in TARGETS:
            totals = np.array([p[f"ld_{target}"] for p in self.prompts if p[f"ld_{target}"] is not None], float)
            if not totals.size:
                continue
            stats = {kind: self.contributions(target, kind) for kind in ("embed", "bias", "attn", "mlp")}
            seen = np.isfinite(stats["embed"])

            def mean(x):
                x = x[np.isfinite(x)]
                return float(x.mean()) if x.size else None
            out[target] = {
                "prompts": int(seen.sum()), "total_mean": float(totals.mean()), "embed_mean": mean(stats["embed"]),
                "bias_mean": mean(stats["bias"]),
                "layers": [{"layer": b, "attn_mean": float(stats["attn"][seen, b].mean()),
                            "attn_std": float(stats["attn"][seen, b].std()),
                            "mlp_mean": float(stats["mlp"][seen, b].mean()),
                            "mlp_std": float(stats["mlp"][seen, b].std())} for b in range(self.n_layers)],
                "heads": [{"layer": b, "head": h, "mean": m, "std": sd} for b, h, m, sd in self.top_heads(target, top)]}
        return out


def _whole_pass_scores(plan: ComponentsPlan, model, clean: list[Prompt], cands, write_means: np.ndarray,
                       z_means: np.ndarray, B: int) -> tuple[np.ndarray, np.ndarray]:
    """Patched scores from whole prompt passes (:func:`~countlens.llm.components.ablation.component_scores`):
    ``(writes (A, 2 · len(layers), K) — attn, mlp of each block in turn —, heads (A, len(layers), H, K))``. The
    value written: the twin's own write (``source`` ``twin``), or the mean (``mean``: ``write_means`` (2L, d) and
    ``z_means`` (L, H · hd) at the boundary; at every position the mean over every position of the ablated
    prompts, :func:`_position_means`), at the boundary or at every position (``scope``)."""
    L, H, layers = plan.n_blocks, plan.n_heads, plan.layers
    attn_out, mlp_out, attn_z = plan.sites
    sites = [s for b in layers for s in (hook_sites([b], L, attn_out)[0], hook_sites([b], L, mlp_out)[0])]
    z_sites = hook_sites(layers, L, attn_z)
    source, scope = plan.config.source, plan.config.scope
    if source == "mean" and scope == "all":
        write_means, z_means = _position_means(model, clean, sites, z_sites)
    elif source == "mean":
        write_means = np.stack([write_means[2 * b + k] for b in layers for k in (0, 1)])
        z_means = z_means[layers]
    hd = z_means.shape[-1] // H if source == "mean" else None
    writes = np.zeros((len(clean), len(sites), len(cands[0])))
    heads = np.zeros((len(clean), len(layers), H, len(cands[0])))
    for a, prompt in enumerate(clean):
        if source == "twin":
            w_values = site_values(model, plan.twins[a].ids, sites)  # (2 · len(layers), T, d)
            z_values = site_values(model, plan.twins[a].ids, z_sites)  # (len(layers), T, H · hd)
            hd = z_values.shape[-1] // H
        else:
            w_values, z_values = write_means, z_means  # (2 · len(layers), d), (len(layers), H · hd)
        cells = [[component_setter(site, w_values[j], scope)] for j, site in enumerate(sites)]
        cells += [[component_setter(site, z_values[j][..., h * hd:(h + 1) * hd], scope, h, hd)]
                  for j, site in enumerate(z_sites) for h in range(H)]
        scores = component_scores(model, prompt.ids, cands[a], cells, B)
        writes[a] = scores[:len(sites)]
        heads[a] = scores[len(sites):].reshape(len(layers), H, -1)
    return writes, heads


def _position_means(model, prompts: list[Prompt], sites, z_sites) -> tuple[np.ndarray, np.ndarray]:
    """The mean of each site's activation over every position of ``prompts``: ``(writes (len(sites), d), heads'
    inputs (len(z_sites), H · hd))`` float64."""
    total, z_total, tokens = 0.0, 0.0, 0
    for p in prompts:
        total = total + site_values(model, p.ids, sites).double().sum(dim=1).cpu().numpy()
        z_total = z_total + site_values(model, p.ids, z_sites).double().sum(dim=1).cpu().numpy()
        tokens += p.n_tokens
    return total / tokens, z_total / tokens


def _ablate(plan: ComponentsPlan, model, tok, write_means: np.ndarray, z_means: np.ndarray, pad_id: int, B: int,
            records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """The ablation records (see :class:`ComponentsResult`) and candidate counts; adds each ablated prompt's
    clean and twin scores to its record in ``records``. At the boundary both sources run from each prompt's
    key/value cache (one boundary step per component, :mod:`countlens.llm.boundary`); at every position
    (``scope`` ``all``) whole prompt passes."""
    L, H, layers = plan.n_blocks, plan.n_heads, plan.layers
    clean = [plan.prompts[i] for i in plan.ablated]
    n = np.array([p.n for p in clean])
    counts = list(range(max(0, int(n.min()) - 1), int(max(p.n for p in plan.prompts)) + 1))
    cands = [candidate_token_ids(tok, counts, plan.config.prompts.template)] * len(clean)
    at, before = n - counts[0], n - 1 - counts[0]  # (A,) candidate columns of n and n − 1
    s_clean = patched_step_scores(model, clean, cands, lambda idx: [], pad_id, B)  # (A, K)
    s_twin = patched_step_scores(model, plan.twins, cands, lambda idx: [], pad_id, B)
    attn_out, mlp_out, attn_z = plan.sites
    if plan.config.source == "mean" and plan.config.scope == "boundary":
        sites = [s for b in layers for s in (hook_sites([b], L, attn_out)[0], hook_sites([b], L, mlp_out)[0])]
        rows = [2 * b + k for b in layers for k in (0, 1)]
        s_writes = ablated_component_scores(model, clean, cands, sites, write_means[rows], pad_id, B)  # (A, 2B', K)
        s_heads, _ = ablated_scores(model, clean, cands, hook_sites(layers, L, attn_z), z_means, H, pad_id, B)
    elif plan.config.scope == "boundary":  # the twin's writes at the boundary: the boundary-step runner too
        sites = [s for b in layers for s in (hook_sites([b], L, attn_out)[0], hook_sites([b], L, mlp_out)[0])]
        twins = [plan.twins[a] for a in range(len(clean))]
        s_writes, s_heads = twin_boundary_scores(model, clean, twins, cands, sites, hook_sites(layers, L, attn_z),
                                                 H, pad_id, B)
    else:
        s_writes, s_heads = _whole_pass_scores(plan, model, clean, cands, write_means, z_means, B)
    ld_clean, ld_twin = logit_difference(s_clean, at, before), logit_difference(s_twin, at, before)
    e_clean = expected_count(s_clean, counts)
    out = []

    def summary(values):  # (mean, std, count) over the prompts with a value; None, None, 0 where none has one
        mean, std, count = mean_std(values)
        return (float(mean), float(std), int(count)) if count else (None, None, 0)

    def record(layer, kind, head, scores):  # scores (A, K)
        ld = logit_difference(scores, at, before)
        norm, change, shift = (summary(x) for x in (normalised_ld(ld, ld_clean, ld_twin), ld - ld_clean,
                                                    expected_count(scores, counts) - e_clean))
        out.append({"layer": layer, "kind": kind, "head": head, "normalised_ld_mean": norm[0],
                    "normalised_ld_std": norm[1], "n_normalised": norm[2], "ld_change_mean": change[0],
                    "ld_change_std": change[1], "expected_shift_mean": shift[0], "expected_shift_std": shift[1]})
    for j, b in enumerate(layers):
        record(b, "attn", None, s_writes[:, 2 * j])
        record(b, "mlp", None, s_writes[:, 2 * j + 1])
        for h in range(H):
            record(b, "head", h, s_heads[:, j, h])
    for a, i in enumerate(plan.ablated):
        records[i].update(ablated=True, ablation_ld_clean=float(ld_clean[a]), ablation_ld_twin=float(ld_twin[a]),
                          expected_clean=float(e_clean[a]))
    return out, counts


def _prompt_record(plan: ComponentsPlan, tok, i: int, p: Prompt, text: str,
                   seen: dict[str, tuple[AnswerRead, tuple[int, int, float]]]) -> dict[str, Any]:
    """Prompt ``i``'s record (``prompts.csv``): the prompt, the model's answer ``text``, and per read of ``seen``
    (target -> (read, (token a, token b, the model's logit difference))) the tokens compared, the answer position
    read and the logit difference; the ablation's columns empty until :func:`_ablate` fills them."""
    ans, prev = seen.get("answer"), seen.get("previous")
    return {"prompt_id": i, "n": p.n, "m": p.m, "pair": p.pair, "config": p.config, "seed": p.seed, "text": p.prompt,
            "answer_text": text, "answer": parse_answer(text),
            "correct_token": tok.decode([plan.correct[i][0] if ans is None else ans[1][0]]),
            "answer_token": None if ans is None else tok.decode([ans[1][1]]),
            "answer_position": None if ans is None else ans[0].position,
            "previous_token": None if prev is None else tok.decode([prev[1][1]]),
            "previous_position": None if prev is None else prev[0].position,
            "ld_answer": None if ans is None else ans[1][2], "ld_previous": None if prev is None else prev[1][2],
            "ablated": False, "ablation_ld_clean": None, "ablation_ld_twin": None, "expected_clean": None}


def run_components(config: ComponentsConfig, *, loaded: LoadedModel | None = None, progress: bool = False,
                   pool: ModelPool | None = None) -> ComponentsResult:
    """Figure 14 (:mod:`countlens.llm.components.attribution`): per left-padded batch one prompt pass that
    records every write at the boundary, the greedy answer decoded from its cache, and the writes read through
    the frozen final norm and the unembedding. ``loaded`` reuses a model already loaded from
    ``config.model``."""
    import torch
    from tqdm.auto import tqdm

    started = time.perf_counter()
    plan = plan_components(config, progress, pool)
    loaded = loaded or config.model.load(progress, tokenizer=plan.tokenizer, pool=pool)
    model, tok = loaded.model, loaded.tokenizer
    if len(find_blocks(model)) != plan.n_blocks:
        raise RuntimeError("the loaded model's blocks differ from its config's")
    head = output_head(model, "model")
    pad_id, stop = pad_token_id(tok), stop_token_ids(model, tok)
    continuation = frozenset(int(t) for t in number_continuations(tok))
    device = model.get_input_embeddings().weight.device
    template, B = config.prompts.template, int(config.batch_size)
    rows: list[dict[str, Any]] = []
    records: list[dict[str, Any]] = []
    write_sum, z_sum = 0.0, 0.0
    with torch.inference_mode(), tqdm(total=len(plan.prompts), unit="prompt", desc="components",
                                      disable=not progress) as bar:
        for start in range(0, len(plan.prompts), B):
            ids = list(range(start, min(start + B, len(plan.prompts))))
            group = [plan.prompts[i] for i in ids]
            batch, mask, _ = pad_batch(group, pad_id, "left", device)
            rec = ComponentPass(model, *plan.sites)
            out = answer_batch(model, batch, mask, [answer_token_ids(tok, p.n, template) for p in group], stop,
                               ANSWER_TOKENS, pad_id, prompt_context=rec,
                               continuation=np.array(sorted(continuation), dtype=np.int64))
            writes = boundary_writes(model, rec, plan.n_heads)
            write_sum = write_sum + writes.writes.sum(axis=0)  # (1 + 2L, d)
            z_sum = z_sum + rec.z.double().sum(dim=0).cpu().numpy()  # (L, H * hd)
            logits = head.logits(rec.last).double().cpu().numpy()  # (N, V): the model's own boundary logits
            frozen = frozen_norm(head.norm, rec.last)
            reads = [(j, r) for j, i in enumerate(ids) for r in answer_reads(plan, i, out.tokens[j], continuation)]
            got, compared = answer_rows(plan, model, reads, writes, logits, head, frozen, pad_id, B)
            rows.extend(got)
            for i, p, text in zip(ids, group, out.texts(tok), strict=True):
                seen = {r.target: (r, compared[(i, r.target)]) for _, r in reads if r.prompt_id == i}
                records.append(_prompt_record(plan, tok, i, p, text, seen))
            bar.update(len(ids))
        P = len(plan.prompts)
        ablation, counts = _ablate(plan, model, tok, write_sum[1:] / P, z_sum / P, pad_id, B, records) \
            if plan.ablated else ([], [])
    result = ComponentsResult(config=config.to_dict(), model=loaded.model_id, architecture=plan.architecture,
                              n_layers=plan.n_blocks, n_heads=plan.n_heads, prompts=records, rows=rows,
                              ablation=ablation, ablation_counts=counts, provenance=result_provenance(config))
    result.summary = result.summarised()
    result.seconds = round(time.perf_counter() - started, 3)
    return result


declare(Experiment(
    "components", "Figure 14: which component writes the answer", ComponentsConfig, run_components,
    ComponentsResult, order=205, output=ComponentsResult.FILE, figure="countlens.llm.components.figures:draw_components",
    plot="countlens.llm.components.figures:plot_components", view="countlens.llm.components.figures:components_view",
    # quick: half the default prompt set (48 prompts, one per count and pair) and 2 ablated prompts, so that
    # make demo stays inside its budget (the defaults took 178 s of it on 2 busy cores; the ablation of 4 prompts
    # 37 of its 61 s; see BENCHMARKS.md)
    presets={"quick": partial(ComponentsConfig, prompts=PromptSettings(L=24, counts=list(range(1, 13)), per_count=1,
                                                                      configs=["count"], seeds=[0]), ablate_prompts=2),
             # 240 prompts: counts 1..24, two per count, the default pairs of one wording and seed
             "full": partial(ComponentsConfig, prompts=PromptSettings(L=24, counts=list(range(1, 25)), per_count=2,
                                                                     seeds=[0], configs=["count"])),
             "test": partial(ComponentsConfig, prompts=PromptSettings(L=8, counts=[0, 2, 5], per_count=1,
                                                                     pairs=[["a", "b"]], configs=["count"],
                                                                     seeds=[0]), ablate_prompts=2)},
    inherits=("model", "template", "task"), uses_model=True, options={"progress": True}, study="where",
    cli="countlens.llm.components.cli"))


__all__ = ["component_sites", "TARGETS", "KINDS", "ComponentsConfig", "ComponentsPlan", "ComponentsResult", "plan_components", "AnswerRead", "answer_reads",
           "run_components"]
