"""Ground truth: countlens's read-outs on an organism checked against the circuit planted in it
(:mod:`countlens.llm.organisms.experiment`). Each check runs an existing experiment on the organism folder
(as ``--model DIR``) and compares one number with what the construction guarantees:

- ``answers``: countlens's greedy answers (:func:`countlens.llm.answers.answer_prompts`) right on at least
  :data:`ACCURACY` of held-out prompts of every count;
- ``dead heads``: head ablation (Figure 12, :func:`countlens.llm.heads.experiment.run_heads`) of a head whose
  output projection is zero changes the answer's logit difference (mean + std over the ablated prompts) by at
  most :data:`DEAD` nats, absolute. By construction it changes nothing; the check runs Figure 12 on a float64
  copy of the organism (:func:`exact_copy`), because in float32 the ablation passes — which batch a block's
  heads together, a batch of another shape than the clean pass's — move an LD of a few nats by float32
  rounding (~1e-6 nats, the size of the bound). In float64 that rounding is ~1e-15 relative, and what is
  left is the candidates' log-softmax, which countlens takes in float32 of (now equal) logits;
- ``dead heads alike``: every zeroed head's ablation gives bit-identical LD changes (one distinct mean and
  std among them), so any rounding is the measurement's, not any head's;
- ``item-reading head ablated``: every live head of the item-reading block — the block of the item-reading
  head, which of the live heads that attend from the boundary to the targets beyond their share (Figure 12's
  target excess) is the earliest block's with the most attention to them (``boundary_target_mean``;
  :func:`item_reading_head`, :func:`item_reading_block`) — removed together (their slices of the output
  projection zeroed, so they write nothing at any position) leaves countlens's greedy answers right on at most
  :data:`CHANCE_FACTOR` times chance (``1 / (L + 1)``: one prompt per count, pair and wording). Every live
  head of the block, not the one head: two live heads of one block may share the reading (an organism with
  live heads 1.0 and 1.2 only, ``organism train --L 20 --live-heads 1.0,1.2 --max-steps 1500``: 1.0 removed
  alone leaves 0.19 of the answers right, 1.2 alone 0.28, both 0.0, against chance 0.048 and a bound of
  0.095), and which of them reads what is learned, not planted. What the construction
  guarantees: where the block holds every live head of the organism (one live block: the test preset's
  organism, an organism planted in one late block, two heads sharing a block, an attention-only one), no
  head writes once they are removed, so every position's residual is a function of its own token (MLPs are
  position-wise, Llama's positions enter only attention), the boundary and every answer position read the
  same tokens in every prompt, and every prompt gets the same answer: exactly one count in ``L + 1`` is right
  (or none), at or below chance, whatever the organism learned — so the check fails only where countlens
  names another block than the one holding the live heads, or its greedy answers are not the model's. Where
  live heads of other blocks remain (the quick organism's 0.1 and 1.3: block 0 removed, 1.3 left), they
  could read the items themselves, and the bound holds the organism's learned circuit — that the later heads
  read what the item-reading block wrote (quick organism: 0.032) — not the construction; the detail names
  the heads left. Twice chance leaves room for a trace of the count that such a head reads from the tokens.
  The detail also gives Figure 12's own ablation of each head (its boundary output replaced by its mean,
  :func:`countlens.llm.heads.attention.ablated_scores`): the fraction of prompts whose answer distribution
  over whole answers (answer tokens and end-of-turn) still ranks the right count first. It is no check: at
  the boundary alone the ablation can be undone by a later live head reading what the removed one wrote at
  other positions (on the quick organism, head 1.3 reading 0.1's writes: 0.35);
- ``DLA dead heads`` / ``DLA live heads first``: direct logit attribution (Figure 14,
  :func:`countlens.llm.components.experiment.run_components`) on n against n − 1 gives a zeroed head a direct
  share of zero (float32 rounding aside: at most :data:`ZERO` of the largest |total|), and ranks the live
  heads first by mean |share|;
- ``boundary patching``: replacing the boundary's residual at the last location with the source prompt's
  (Figure 9a, :func:`countlens.llm.patching.experiment.run_patching`) makes the source count's first answer
  token the patched answer's first token on at least :data:`PATCHED` of pairs. Only the first token: the last
  location feeds only the boundary's unembedding, and the later answer tokens are decoded at later positions
  that read the (unpatched) prompt, so a two-digit answer's later digits follow the target's items;
- ``interchange after the live heads``: the same run (:func:`patching_checks`) at the location after the
  last block holding a live head, ``b1 + 1``: the patched answer's first token is the source prompt's own
  greedy first token on every pair (:data:`INTERCHANGED`). This is the construction's steering guarantee, the
  bound that replaces the linear steering slope's: at every location after ``b1`` no head moves anything (the
  live heads are all at or before ``b1``, every other head's output projection is zero, MLPs and norms are
  position-wise), so the boundary's residual at ``b1 + 1`` is all that its remaining computation reads, and
  replacing it with the source prompt's makes the boundary's next-token distribution the source run's
  exactly (float rounding of another batch shape aside, ~1e-7 of a logit gap): an interchange inside the
  learned representation, which holds whatever the organism learned, and whatever direction the count takes
  there. Greedy, first token only, for the reason above; the detail also gives the fraction whose first
  token is the source *count*'s (the organism's accuracy on the sources). It fails where countlens patches
  another location or position than it names, or where ``b1`` is not the last block that moves anything
  (live heads claimed in earlier blocks than the planted ones: then the heads of a later block read the
  target's items after the patch);
- ``position patching: flipped item before`` / ``boundary before`` / ``boundary after``: Figure 11
  (:func:`countlens.llm.positions.experiment.run_position_patching`, the last target flipped, the items and
  the boundary patched at every location, counts whose answers ``n`` and ``n − 1`` are one token each: a later
  answer token is decoded at a position that reads the prompt itself, so no boundary patch fixes it — the
  reason the boundary patching check reads only the first token) with ``b0`` the first block holding a live
  head and ``b1`` the last (``b0 <= l* <= b1`` for the item-reading head's block ``l*``; one-block organisms:
  all three equal).
  At every location up to and including ``b0`` (the residual entering block ``b0``) no head has moved
  anything, so every position's residual is a function of its own token: patching the flipped item's
  position turns the corrupted run into the clean one (mean normalised LD ``>=`` :data:`KEPT`), and the
  boundary's residual is the same in both runs (``<=`` :data:`LEAK`). At every location after ``b1`` no head
  moves anything more, and the boundary's residual alone decides the answer: patching it gives the clean
  run (``>=`` :data:`KEPT`). So the flipped item's effect sits at the item before the live heads' layers and
  at the boundary after them; between ``b0`` and ``b1`` the construction does not say where, and no check
  is made. Both bounds leave float32 rounding (a patched run replays the corrupted one) a margin of 1e-2;
- ``steering slope`` (reported, no bound; ``holds`` ``info``): count-unit steering (Figure 9b,
  :func:`countlens.llm.steering.experiment.run_steering`, ``units = count``) along the mean-difference
  direction, at the location after the item-reading head's block (where the probe reads the count): the
  least-squares slope of the expected count ``Σ k p(k)`` per unit Δ, over counts and steps that keep
  ``n + Δ`` inside the counts the organism saw, those written as one answer token (SmolLM2's tokenizer:
  0..9). Not a check: the construction does not make the count linearly steerable. A step of one unit is as
  long as one more item moves the boundary on average, but nothing planted says that moving along the
  centroids' mean difference moves the read-out: the count may sit on a curve, in the norm the final RMSNorm
  divides out, or along directions the mean difference misses. Organisms planted with live heads 1.0 and
  1.2 only, which answer every held-out prompt right, gave slopes of -0.002 (a least-squares count direction
  added there by hand: 0.011 per unit) and 0.30 after block 1 in two trainings, the quick organism 0.78. The
  bound the construction does give is the exact interchange above;
- ``AtP dead heads`` / ``AtP live heads first``: attribution patching (Figure 15,
  :func:`countlens.llm.attribution.experiment.run_attribution`) estimates zero for every zeroed head (the
  gradient through a zero slice of the output projection is exactly zero; at most :data:`DEAD` nats), and
  ranks the live heads first by mean |estimate|, as activation patching of the same cells does;
- ``probe after the live heads`` / ``probe before the live heads``: ridge probes (Figure 7,
  :func:`countlens.probes.probe.run_probes`) on a capture of held-out prompts read the count at the boundary
  (test rounded accuracy at least :data:`PROBED`) at the first residual location after the first block with a
  live head, and not at any location before it (below :data:`PROBED`): there the boundary's residual is a
  function of the boundary token alone (no head before writes, and Llama's positions enter only attention);
- ``DAS after the live heads`` / ``DAS before the live heads``: distributed alignment search (``countlens llm
  das``, :func:`countlens.llm.das.experiment.run_das`; :func:`~countlens.llm.organisms.location_checks.das_checks`)
  on held-out prompts of the counts written as one answer token, ranks 1, 2, 4 and the full width, at every
  location up to the first live block's input and after the last live block (``b0`` and ``b1`` as above). After
  ``b1`` the boundary's residual alone decides the first answer token, so the full-rank interchange (boundary
  patching) gives the source run's own first token, and the highest held-out IIA over the ranks is at least
  :data:`~countlens.llm.das.experiment.IIA_REACHED` (the detail names the smallest rank that reaches it: a
  finding, not a bound); up to ``b0``'s input the boundary's residual is the same vector in every prompt, the
  interchange adds nothing, and IIA stays at the base runs' own floor, at most
  :data:`~countlens.llm.das.experiment.DAS_LEAK`, at every rank.

A check that fails says so with its number; :func:`failed` lists them, and ``countlens organism check`` exits
1 on any.

**What is kept.** Given a ``keep`` folder (the ``organism-checks`` stage's own folder; ``organism check
--out``), every experiment result a check computes is kept there as its own stage writes it
(``keep/heads/heads.json``, ``keep/patching/patching.json``, ...; :class:`Kept`), with its captures, and a
rerun reuses them; Figure 10 (a capture at every item and the running-count probes) and Figure 13 (the
lenses) are run on the organism besides, for their figures only. :func:`countlens.llm.organisms.views.draw_checks`
draws every kept result with the figure its experiment declares: Figures 7 and 9–15 on a model that counts.
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
from countlens.llm.organisms.kept import KEPT_FILE, Kept, declared, organism_stamp  # noqa: F401 - re-exported
from countlens.llm.organisms.location_checks import (  # noqa: F401 - re-exported
    PROBE_ROWS,
    attribution_checks,
    das_checks,
    lens_run,
    one_token_counts,
    position_checks,
    probe_capture,
    probe_checks,
    running_count_run,
    steering_check,
    steering_window,
)
from countlens.llm.organisms.verdicts import (  # noqa: F401 - re-exported
    ACCURACY,
    CHANCE_FACTOR,
    DEAD,
    INFO,
    INTERCHANGED,
    KEPT,
    LEAK,
    PATCHED,
    PROBED,
    ZERO,
    ablation_verdict,
    attribution_verdicts,
    check_row,
    interchange_verdict,
    live_blocks,
    position_verdicts,
    steering_row,
    steering_slope,
)


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
    ``bound`` it is held to, how (``holds``: ``>=``, ``<=``, ``<``, ``==`` or ``in``), ``passed`` and a ``detail``
    line; a read-out reported with no bound has ``holds`` ``info`` and ``bound`` and ``passed`` None."""

    FILE: ClassVar[str] = "checks.json"
    CSV: ClassVar[str] = "checks.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "checks"}
    COMMAND: ClassVar[str] = "countlens organism check"

    model: str
    live_heads: list[list[int]]
    checks: list[dict[str, Any]]
    provenance: dict[str, Any] = field(default_factory=dict)
    # the experiment results the checks computed, kept in the checks' folder (:class:`Kept`): per experiment
    # its ``name`` (its folder there), ``title`` and ``file`` (the result file, relative to that folder)
    kept: list[dict[str, str]] = field(default_factory=list)

    def failed(self) -> list[dict[str, Any]]:
        """The checks that failed (a row reported with no bound, ``holds`` = ``info``, never fails)."""
        return [c for c in self.checks if c["passed"] is False]


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
    return check_row("answers", accuracy, ACCURACY, ">=", f"greedy accuracy on {len(prompts)} held-out prompts")


def exact_copy(loaded):
    """A float64 copy of the loaded organism (:class:`~countlens.llm.models.LoadedModel`), for the checks whose
    bound is below float32 rounding; the organism itself is left as it is."""
    import copy
    import dataclasses

    from countlens.llm.hooks import guard_float64_masks

    model = copy.deepcopy(loaded.model).double().eval()
    guard_float64_masks(model)  # padded batches stay finite under eager attention (the heads' weights)
    return dataclasses.replace(loaded, model=model, dtype="float64")


def heads_run(model: ModelSpec, organism, loaded, seeds: list[int], kept: Kept | None = None,
              probes: Path | None = None):
    """Figure 12 (:func:`countlens.llm.heads.experiment.run_heads`) on the float64 copy of the organism
    (:func:`exact_copy`): counts 1..L, every pair, one wording and seed, up to 16 ablated prompts, one prompt
    per batch (left-padded: :func:`exact_copy` keeps them finite), with the probe read-out shift of ``probes`` (a ``probes.json`` of the organism) where given;
    kept in ``kept`` (:class:`Kept`) as ``heads``."""
    from countlens.llm.heads.experiment import HeadsConfig, run_heads
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L = int(config["L"])
    prompts = PromptSettings(L=L, counts=list(range(1, L + 1)), per_count=1, pairs=config["pairs"],
                             configs=config["configs"][:1], seeds=seeds[:1])
    heads = HeadsConfig(model=model, prompts=prompts, ablate_prompts=min(16, L * len(config["pairs"])),
                        probes=None if probes is None else str(probes))
    return (kept or Kept()).result("heads", heads, lambda: run_heads(heads, loaded=exact_copy(loaded)))


def heads_checks(model: ModelSpec, organism, loaded, seeds: list[int], result=None) -> list[dict[str, Any]]:
    """``dead heads``, ``dead heads alike`` and ``live heads first`` from one run of Figure 12's head ablation
    (:func:`heads_run`, or its ``result`` already run)."""
    result = result if result is not None else heads_run(model, organism, loaded, seeds)
    change = {(r["layer"], r["head"]): (r["ld_change_mean"], r["ld_change_std"]) for r in result.heads}
    live = {tuple(h) for h in organism.live_heads}
    dead = [h for h in change if h not in live]
    worst = max((abs(change[h][0]) + change[h][1] for h in dead), default=0.0)
    ranked = sorted(change, key=lambda h: -abs(change[h][0]))[:len(live)]
    ablated = sum(p["ablated"] for p in result.prompts)
    out = []
    if dead:
        out.append(check_row("dead heads", float(worst), DEAD, "<=",
                          f"largest |LD change| in nats (mean + std) over {len(dead)} zeroed heads and {ablated} "
                          "ablated prompts, float64"))
        out.append(check_row("dead heads alike", len({change[h] for h in dead}), 1, "==",
                          f"distinct (mean, std) of the LD change among {len(dead)} zeroed heads"))
    out.append(check_row("live heads first", sorted(map(list, ranked)), sorted(map(list, live)), "==",
                      f"the {len(live)} heads whose ablation moves the logit difference most"))
    return out


def item_reading_head(result, live_heads) -> tuple[int, int]:
    """The live head (block, head) that first reads the targets from the boundary in a Figure 12 ``result``
    (:class:`~countlens.llm.heads.experiment.HeadsResult`): of the live heads that attend from the boundary to
    the targets more than to their share of the items (``boundary_target_excess_mean`` > 0), those of the
    earliest block, the one with the largest mass to the targets (``boundary_target_mean``); with no such head,
    the live head with the largest mass. Earliest, because the first reader is the one that moves the items'
    identity to the boundary; a later live head attending to the targets reads positions that head's block has
    already written (on organisms trained with 32 prompts a step, head 1.3 draws more boundary mass to the
    targets than 0.1, yet removing it leaves the answers right)."""
    heads = [tuple(map(int, h)) for h in live_heads]
    reading = [h for h in heads if (result.head(*h)["boundary_target_excess_mean"] or 0.0) > 0.0]
    if reading:
        first = min(b for b, _ in reading)
        heads = [h for h in reading if h[0] == first]
    return max(heads, key=lambda h: result.head(*h)["boundary_target_mean"])


def item_reading_block(result, live_heads) -> list[tuple[int, int]]:
    """Every live head (block, head) of the item-reading head's block (:func:`item_reading_head` of the Figure
    12 ``result``), sorted: the heads the ``item-reading head ablated`` check removes together."""
    block = item_reading_head(result, live_heads)[0]
    return sorted(tuple(map(int, h)) for h in live_heads if int(h[0]) == block)


def _heads_list(heads) -> list[tuple[int, int]]:
    """``heads`` as a list of (block, head): one (block, head) pair or a sequence of them."""
    heads = list(heads)
    return [tuple(map(int, heads))] if heads and np.isscalar(heads[0]) else [tuple(map(int, h)) for h in heads]


def removed_accuracy(organism, loaded, seeds: list[int], heads) -> tuple[float, int]:
    """Greedy accuracy (:func:`countlens.llm.answers.answer_prompts`) of a copy of the organism whose ``heads``
    (one (block, head) or a list of them, removed together) have their slices of the attention output
    projection zeroed, on one prompt per count, pair and wording of the first of ``seeds``; and the number of
    prompts."""
    import copy
    import dataclasses

    import torch

    from countlens.llm.answers import answer_prompts
    from countlens.llm.organisms.train import head_columns
    from countlens.llm.prompts import PromptSettings, build_prompts

    config = organism.config
    L = int(config["L"])
    prompts = build_prompts(loaded.tokenizer, PromptSettings(L=L, counts=list(range(L + 1)), per_count=1,
                                                             pairs=config["pairs"], configs=config["configs"],
                                                             seeds=seeds[:1]))
    copied = dataclasses.replace(loaded, model=copy.deepcopy(loaded.model))  # a LoadedModel: its tokenizer known
    with torch.inference_mode():
        for block, head in _heads_list(heads):
            copied.model.model.layers[block].self_attn.o_proj.weight[:, head_columns(head, organism.head_dim)] = 0.0
        answers = answer_prompts(copied.model, copied.tokenizer, prompts, batch_size=32)
    return float(answers.accuracy([p.n for p in prompts])), len(prompts)


def ablated_ranking(organism, loaded, seeds: list[int], heads, batch_size: int = 8
                    ) -> tuple[float, list[float], int]:
    """(clean, ablated) fraction of prompts whose answer distribution over every count ``0..L`` (all answer
    tokens and the end-of-turn token teacher-forced) ranks the right count first, the ablated one per head of
    ``heads`` (one (block, head) or a list of them, all of one block; each ablated alone) with the head
    replaced at the boundary by its mean over the prompts (Figure 12's ablation), in the order of ``heads``;
    and the number of prompts: one per count and pair, one wording, the first of ``seeds``."""
    import torch

    from countlens.llm.answers import candidate_token_ids
    from countlens.llm.capture.residuals import pad_token_id
    from countlens.llm.heads.attention import ablated_scores, boundary_scores, head_masses
    from countlens.llm.heads.experiment import prompt_roles
    from countlens.llm.hooks import attention_output_site, hook_sites
    from countlens.llm.prompts import PromptSettings, build_prompts

    heads = _heads_list(heads)
    if len({b for b, _ in heads}) != 1:
        raise ValueError(f"ablated_ranking takes heads of one block, got {heads}")
    config = organism.config
    L = int(config["L"])
    settings = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config["pairs"],
                              configs=config["configs"][:1], seeds=seeds[:1])
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, settings)
    pad = pad_token_id(tok)
    site = attention_output_site(model.config.model_type)
    # Each count's answer tokens and the end-of-turn token (count k: column k), so that no candidate is a prefix
    # of another ("1" would take the mass of "12") and the ranking is of whole answers, as greedy decoding's.
    whole = [ids + [int(tok.eos_token_id)] for ids in candidate_token_ids(tok, list(range(L + 1)), settings.template)]
    candidates = [whole] * len(prompts)
    n = np.array([p.n for p in prompts])
    with torch.inference_mode():
        _, means = head_masses(model, prompts, prompt_roles(prompts, settings), site, pad, batch_size)
        clean, _ = boundary_scores(model, prompts, candidates, pad, batch_size)  # (P, K)
        sites = hook_sites([heads[0][0]], organism.n_layers, site)
        ablated, _ = ablated_scores(model, prompts, candidates, sites, means, organism.n_heads, pad, batch_size,
                                    heads=[h for _, h in heads])
    right_clean = float(np.mean(clean.argmax(-1) == n))
    right_ablated = [float(np.mean(ablated[:, 0, j].argmax(-1) == n)) for j in range(len(heads))]  # (P, 1, H, K)
    return right_clean, right_ablated, len(prompts)


def item_ablation_check(organism, loaded, seeds: list[int], heads) -> dict[str, Any]:
    """``item-reading head ablated``: :func:`removed_accuracy` of every live head of the item-reading block of
    the Figure 12 run ``heads`` (:func:`item_reading_block`), removed together (and, reported,
    :func:`ablated_ranking` of each)."""
    block = item_reading_block(heads, organism.live_heads)
    removed, prompts = removed_accuracy(organism, loaded, seeds, block)
    _, boundary, _ = ablated_ranking(organism, loaded, seeds, block)
    return ablation_verdict(removed, boundary, int(organism.config["L"]), block, prompts, organism.live_heads)


def components_checks(model: ModelSpec, organism, loaded, seeds: list[int], kept: Kept | None = None
                      ) -> list[dict[str, Any]]:
    """``DLA dead heads`` and ``DLA live heads first`` from one run of Figure 14's direct logit attribution
    (n against n − 1): a zeroed head writes nothing, so its direct share must be zero (up to float32
    rounding, relative to the largest |total|), and the heads with the largest mean |share| are the live ones."""
    from countlens.llm.components.experiment import ComponentsConfig, run_components
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L = int(config["L"])
    prompts = PromptSettings(L=L, counts=list(range(1, L + 1)), per_count=1, pairs=config["pairs"],
                             configs=config["configs"][:1], seeds=seeds[:1])
    components = ComponentsConfig(model=model, prompts=prompts, ablate_prompts=0)
    result = (kept or Kept()).result("components", components, lambda: run_components(components, loaded=loaded))
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
        out.append(check_row("DLA dead heads", float(max(max(share[h]) for h in dead) / scale), ZERO, "<=",
                          f"largest |direct share| of {len(dead)} zeroed heads on {len(rows) // max(1, len(share))}"
                          f" prompts (n vs n - 1), over the largest |total| ({scale:.3g} nats)"))
    out.append(check_row("DLA live heads first", sorted(map(list, ranked)), sorted(map(list, live)), "==",
                      f"the {len(live)} heads with the largest mean |direct share| (n vs n - 1)"))
    return out


def first_token(tokenizer, text: str) -> list[int]:
    """The first token of ``text`` as the tokenizer writes it (empty for an empty text)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"][:1]


def patching_checks(model: ModelSpec, organism, loaded, seeds: list[int], tokenizer, kept: Kept | None = None
                    ) -> list[dict[str, Any]]:
    """``boundary patching`` and ``interchange after the live heads`` from one run of Figure 9a (kept as
    ``patching``) on the pairs of :func:`spread_pairs` (each source count is also a target, so each source
    prompt's own greedy answer is in the run), every pair, wording and seed, at the last location and at the
    location after the last block holding a live head (one location where they are the same):
    ``boundary patching``, the source count's first answer token as the patched answer's first token at the
    last location (``>=`` :data:`PATCHED`); ``interchange after the live heads`` (:func:`interchange_verdict`),
    the source prompt's own greedy first token as the patched one after the last live block (on every pair)."""
    from countlens.core.locations import location_names
    from countlens.llm.answers import answer_token_ids
    from countlens.llm.patching.experiment import PatchingConfig, run_patching

    config = organism.config
    sources, targets = spread_pairs(int(config["L"]))
    after = live_blocks(organism.live_heads)[1] + 1  # the residual after the last block with a live head
    last = int(organism.n_layers)
    locations = ",".join(map(str, sorted({after, last})))
    patching = PatchingConfig(model=model, locations=locations).with_options(
        L=int(config["L"]), sources=sources, targets=targets, pairs=config["pairs"], configs=config["configs"],
        seeds=seeds)
    result = (kept or Kept()).result("patching", patching, lambda: run_patching(patching, loaded=loaded))
    at_last = [r for r in result.rows if int(r["location_index"]) == last]
    first = [first_token(tokenizer, r["patched_answer_text"]) == answer_token_ids(tokenizer, r["n_source"])[:1]
             for r in at_last]
    # each prompt's own clean greedy answer: (seed, wording, pair, count) names one prompt of the pairs' set
    own = {(r["seed"], r["config"], r["pair"], r["n_target"]): r["clean_answer_text"] for r in result.rows}
    at_after = [r for r in result.rows if int(r["location_index"]) == after]
    agree = [first_token(tokenizer, r["patched_answer_text"])
             == first_token(tokenizer, own[(r["seed"], r["config"], r["pair"], r["n_source"])]) for r in at_after]
    counted = [first_token(tokenizer, r["patched_answer_text"]) == answer_token_ids(tokenizer, r["n_source"])[:1]
               for r in at_after]
    return [check_row("boundary patching", float(np.mean(first)), PATCHED, ">=",
                      f"patched first answer token = the source count's, {len(first)} pairs at the last location"),
            interchange_verdict(agree, counted, location_names(last)[after], organism.live_heads)]


def check_organism(folder: str | Path, keep: str | Path | None = None, progress: bool = False) -> OrganismChecks:
    """Run every check on the organism in ``folder``, on prompts of its held-out data seeds (never trained on;
    its recorded accuracy is measured on them). ``keep``: the folder where every experiment's result and
    capture is kept (:class:`Kept`: ``keep/heads/heads.json``, ...; a rerun reuses them), with Figure 10
    and Figure 13 on the organism besides (:func:`running_count_run`, :func:`lens_run`); ``None``: the
    captures go to a temporary folder, removed after, and nothing is kept."""
    import tempfile

    from countlens.llm.organisms.experiment import HELD_OUT_SEED, read_organism
    from countlens.probes import ProbeResult

    with about("model"):
        organism = read_organism(folder)
    seeds = [HELD_OUT_SEED + j for j in range(int(organism.config["held_out_seeds"]))]
    model = ModelSpec(model=str(folder))
    loaded = model.load(progress)
    with tempfile.TemporaryDirectory(prefix="countlens-organism-") as tmp:
        kept = Kept(None if keep is None else Path(keep), organism_stamp(organism), Path(tmp))
        probed = probe_checks(model, organism, loaded, kept)  # first: a kept Figure 12 shows its probe's shift
        probes = None if kept.folder is None else kept.folder / "probe" / ProbeResult.FILE
        heads = heads_run(model, organism, loaded, seeds, kept, probes)
        item = item_reading_head(heads, organism.live_heads)
        checks = [answers_check(loaded, organism), *heads_checks(model, organism, loaded, seeds, heads),
                  item_ablation_check(organism, loaded, seeds, heads),
                  *components_checks(model, organism, loaded, seeds, kept),
                  *patching_checks(model, organism, loaded, seeds, loaded.tokenizer, kept),
                  *position_checks(model, organism, loaded, seeds, item[0], kept),
                  *attribution_checks(model, organism, loaded, seeds, kept),
                  *probed,
                  *das_checks(model, organism, loaded, seeds, kept),
                  steering_check(model, organism, loaded, seeds, item[0], kept)]
        if kept.folder is not None:
            running_count_run(model, organism, loaded, seeds, kept)
            lens_run(loaded, probe_capture(model, organism, loaded, kept)[0], kept)
    return OrganismChecks(str(folder), organism.live_heads, checks, result_provenance({"folder": str(folder),
                                                                                          "seeds": seeds}),
                          kept=kept.record())


def run_checks(config: OrganismChecksConfig, *, progress: bool = False, keep: str | Path | None = None
               ) -> OrganismChecks:
    """The experiment's run: :func:`check_organism` of ``config.model``, its experiments kept in ``keep``."""
    return check_organism(config.model, keep=keep, progress=progress)


def checks_text(result: OrganismChecks) -> list[str]:
    """One line per check: PASS/FAIL, its name, value and bound; INFO and no bound for a read-out reported
    with none."""
    return [f"INFO {c['name']}: {c['value']} (no bound; {c['detail']})" if c["holds"] == INFO else
            f"{'PASS' if c['passed'] else 'FAIL'} {c['name']}: {c['value']} (must be {c['holds']} {c['bound']}; "
            f"{c['detail']})" for c in result.checks]


declare(Experiment(
    "organism-checks", "Ground truth: countlens's read-outs against the organism's planted circuit",
    OrganismChecksConfig, run_checks, OrganismChecks, order=910, reads={"model": "organism"},
    figure="countlens.llm.organisms.views:draw_checks", view="countlens.llm.organisms.views:checks_view",
    options={"progress": True}, places={"keep": ""},  # each experiment's result in OUT/organism-checks/<experiment>/
    # One torch thread: at width 64 a second thread only spins; on the busy 2-core machine the answers check
    # took 3 s on one thread and 28-39 s on two (CPU 2.9 s against 24-26 s).
    threads=1,
    presets={p: OrganismChecksConfig for p in ("quick", "full", "test")}))


__all__ = ["attribution_verdicts", "attribution_checks", "OrganismChecksConfig", "run_checks", "ACCURACY", "ZERO",
           "DEAD", "CHANCE_FACTOR", "KEPT", "LEAK", "INFO", "INTERCHANGED", "PATCHED", "PROBED", "OrganismChecks",
           "spread_pairs", "answers_check", "exact_copy", "heads_run", "heads_checks", "item_reading_head",
           "item_reading_block", "ablation_verdict", "removed_accuracy", "ablated_ranking", "item_ablation_check",
           "components_checks", "first_token", "patching_checks", "interchange_verdict", "live_blocks",
           "position_verdicts", "position_checks", "one_token_counts", "steering_slope", "steering_row",
           "steering_window", "steering_check", "probe_checks", "check_organism", "checks_text", "KEPT_FILE",
           "declared", "Kept", "probe_capture", "running_count_run", "lens_run", "organism_stamp", "das_checks",
           "PROBE_ROWS"]
