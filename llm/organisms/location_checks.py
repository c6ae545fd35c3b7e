"""The organism's checks that read its residual stream location by location (the bounds and why they hold:
:mod:`countlens.llm.organisms.checks`): position patching (Figure 11), attribution patching (Figure 15), count
steering (Figure 9b, reported), the ridge probes (Figure 7) and distributed alignment search (DAS); and Figures 10
and 13, run on the organism for their figures only. Each runs one experiment on the organism (its result kept by
:class:`~countlens.llm.organisms.kept.Kept`) and turns its numbers into :func:`check_row` rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from countlens.llm.models import ModelSpec
from countlens.llm.organisms.kept import Kept
from countlens.llm.organisms.verdicts import (
    PROBED,
    attribution_verdicts,
    check_row,
    position_verdicts,
    steering_row,
)

PROBE_ROWS = 240  # prompts captured for the probe checks (at least)


def one_token_counts(tokenizer, L: int, template: str = "chat") -> list[int]:
    """The counts of ``0..L`` whose answer the tokenizer writes as one token (SmolLM2's: 0..9, numbers are
    written digit by digit). Among them no answer is a prefix of another, so a distribution over them is one
    over answers; over every count it is not (``"1"`` teacher-forced without end-of-turn takes the mass of
    ``"12"``)."""
    from countlens.llm.answers import candidate_token_ids

    ids = candidate_token_ids(tokenizer, list(range(int(L) + 1)), template)
    return [n for n, tokens in enumerate(ids) if len(tokens) == 1]


def position_checks(model: ModelSpec, organism, loaded, seeds: list[int], item_block: int | None = None,
                    kept: Kept | None = None) -> list[dict[str, Any]]:
    """The position-patching checks (:func:`position_verdicts`) from one run of Figure 11: up to three counts
    spread over those of ``1..L`` whose answers ``n`` and ``n − 1`` are one token each
    (:func:`one_token_counts`), with the first pair, wording and seed, the last target flipped, the items and
    the boundary patched at every location. One token: a later answer token is decoded at a position after the
    boundary that reads the prompt itself, so the boundary alone does not fix its log-probability."""
    from countlens.llm.positions.experiment import PositionPatchingConfig, run_position_patching
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L = int(config["L"])
    usable = [n for n in one_token_counts(loaded.tokenizer, L) if n >= 1 and n - 1 in one_token_counts(loaded.tokenizer, L)]
    counts = sorted({usable[i] for i in np.linspace(0, len(usable) - 1, 3).round().astype(int)})
    prompts = PromptSettings(L=L, counts=counts, per_count=1, pairs=config["pairs"][:1], configs=config["configs"][:1],
                             seeds=seeds[:1])
    positions = PositionPatchingConfig(model=model, prompts=prompts, flip="last", positions="items")
    result = (kept or Kept()).result("patching-positions", positions,
                                     lambda: run_position_patching(positions, loaded=loaded))
    return position_verdicts(result, organism.live_heads, item_block)


def attribution_checks(model: ModelSpec, organism, loaded, seeds: list[int], kept: Kept | None = None
                       ) -> list[dict[str, Any]]:
    """:func:`attribution_verdicts` of Figure 15 on the prompts of the position checks (counts whose answers are
    one token, the first pair, wording and seed), the twin's activations patched into the clean run."""
    from countlens.llm.attribution.experiment import AttributionConfig, run_attribution
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L = int(config["L"])
    single = one_token_counts(loaded.tokenizer, L)
    usable = [n for n in single if n >= 1 and n - 1 in single]
    counts = sorted({usable[i] for i in np.linspace(0, len(usable) - 1, 2).round().astype(int)})
    prompts = PromptSettings(L=L, counts=counts, per_count=1, pairs=config["pairs"][:1],
                             configs=config["configs"][:1], seeds=seeds[:1])
    attribution = AttributionConfig(model=model, prompts=prompts, positions="items")
    result = (kept or Kept()).result("attribution", attribution, lambda: run_attribution(attribution, loaded=loaded))
    return attribution_verdicts(result, organism.live_heads)


def steering_window(L: int) -> tuple[list[float], list[int]]:
    """The steps Δ (integers in ``[-D, D]``, ``D = max(1, L // 4)``) and the counts (spread over ``[D, L − D]``)
    of the steering check, so that ``n + Δ`` stays inside ``0..L`` (``L = 1``: count 0 and Δ = 0, 1)."""
    if int(L) < 2:
        return [0.0, 1.0], [0]
    D = max(1, int(L) // 4)
    deltas = (np.unique(np.linspace(-D, D, 5).round()) + 0.0).tolist()  # + 0.0: no -0.0
    counts = np.unique(np.linspace(D, max(D, int(L) - D), 4).round().astype(int)).tolist()
    return deltas, counts


def steering_check(model: ModelSpec, organism, loaded, seeds: list[int], item_block: int, kept: Kept
                   ) -> dict[str, Any]:
    """``steering slope``, reported with no bound (:func:`steering_row`), from one run of Figure 9b on a capture (``kept``'s
    ``capture-steering``; the result kept as ``steering``) of
    the counts the organism saw that are one answer token (:func:`one_token_counts`: the expected count is
    then over a distribution of whole answers), every pair and wording, two held-out seeds; steered at the
    location after the item-reading head's block ``item_block`` (where the probe reads the count), over the
    steps and counts of :func:`steering_window`."""
    from countlens.core.locations import location_names
    from countlens.llm.capture.experiment import CaptureConfig
    from countlens.llm.prompts import PromptSettings
    from countlens.llm.steering.experiment import SteeringConfig, run_steering

    config = organism.config
    L = int(config["L"])
    counts = one_token_counts(loaded.tokenizer, L)
    top = max(counts)
    prompts = PromptSettings(L=L, counts=counts, per_count=1, pairs=config["pairs"], configs=config["configs"],
                             seeds=seeds[:2])
    acts = kept.capture("capture-steering", CaptureConfig(model=model, prompts=prompts), loaded)
    deltas, steered = steering_window(top)
    location = location_names(organism.n_layers)[int(item_block) + 1]
    steering = SteeringConfig(acts=str(acts), location=location, directions=["mean-diff"], units="count",
                              deltas=deltas, counts=steered, max_prompts=8)
    return steering_row(kept.result("steering", steering, lambda: run_steering(steering, loaded=loaded)))


def probe_capture(model: ModelSpec, organism, loaded, kept: Kept) -> tuple[Path, int]:
    """The capture (``kept``'s ``capture``) of the probe checks: every count, pair and wording of at least
    :data:`PROBE_ROWS` held-out prompts, the boundary at every location; its folder and its prompts."""
    from countlens.llm.capture.experiment import CaptureConfig
    from countlens.llm.organisms.experiment import HELD_OUT_SEED
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L = int(config["L"])
    per_seed = (L + 1) * len(config["pairs"]) * len(config["configs"])
    seeds = [HELD_OUT_SEED + j for j in range(-(-PROBE_ROWS // per_seed))]
    prompts = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config["pairs"],
                             configs=config["configs"], seeds=seeds)
    return kept.capture("capture", CaptureConfig(model=model, prompts=prompts), loaded), len(seeds) * per_seed


def probe_checks(model: ModelSpec, organism, loaded, kept: Kept) -> list[dict[str, Any]]:
    """``probe after the live heads`` and ``probe before the live heads`` from one capture
    (:func:`probe_capture`) and one ridge probe per location (Figure 7; kept as ``probe``)."""
    from countlens.probes import ProbeConfig, run_probes

    acts, rows = probe_capture(model, organism, loaded, kept)
    probe = ProbeConfig(acts=str(acts), control=False)
    probes = kept.result("probe", probe, lambda: run_probes(probe))
    first = min(b for b, _ in organism.live_heads) + 1  # residual index after the first block with a live head
    accuracy = {p.index: p.stat("test_rounded_acc")[0] for p in probes.locations}
    before = max(accuracy[i] for i in accuracy if i < first)
    names = {p.index: p.name for p in probes.locations}
    return [check_row("probe after the live heads", float(accuracy[first]), PROBED, ">=",
                   f"test rounded accuracy at {names[first]}, {rows} held-out prompts"),
            check_row("probe before the live heads", float(before), PROBED, "<",
                   f"best test rounded accuracy at {', '.join(names[i] for i in sorted(names) if i < first)}")]


def running_count_run(model: ModelSpec, organism, loaded, seeds: list[int], kept: Kept):
    """Figure 10 on the organism (it checks nothing; kept for its figure): a capture at every item (``kept``'s
    ``capture-items``: counts ``0..L``, every pair and wording, the first held-out seed, every location) and the
    running-count probes on it (:func:`countlens.probes.running.run_running_count`, kept as ``probe-running``)."""
    from countlens.llm.capture.experiment import CaptureConfig
    from countlens.llm.prompts import PromptSettings
    from countlens.probes import ProbeConfig, run_running_count

    config = organism.config
    L = int(config["L"])
    prompts = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config["pairs"],
                             configs=config["configs"], seeds=seeds[:1])
    acts = kept.capture("capture-items", CaptureConfig(model=model, prompts=prompts, positions="items"), loaded)
    running = ProbeConfig(acts=str(acts), target="running_count")
    return kept.result("probe-running", running, lambda: run_running_count(running))


def lens_run(loaded, acts: Path, kept: Kept):
    """Figure 13 on the organism (it checks nothing; kept for its figure): the logit and tuned lenses
    (:func:`countlens.llm.lens.experiment.run_lens`) on the probe checks' capture ``acts`` with their kept
    probes, kept as ``lens``."""
    from countlens.llm.lens.experiment import LensConfig, run_lens
    from countlens.probes import ProbeResult

    lens = LensConfig(acts=str(acts), probes=str(kept.folder / "probe" / ProbeResult.FILE))
    return kept.result("lens", lens, lambda: run_lens(lens, loaded=loaded))


DAS_RANKS = (1, 2, 4)  # the learned ranks of the DAS checks (those below the organism's width), and full rank
DAS_PROMPTS = 8  # held-out prompts per count, at least, in the DAS checks' run (half train, half score)
# Quick sizes: 30 Adam steps of 8 pairs at a rate of 0.05, two sources per base prompt. On the quick organism
# (one thread) the run took 18 s of CPU with these against 36 s with DAS's defaults (60 steps of 16 at 0.02,
# three sources), rank 4 reaching an IIA of 0.957 after its last live block (the test preset's: rank 2, 1.0).
DAS_SIZES = {"steps": 30, "batch_size": 8, "lr": 0.05, "sources": 2}


def das_config(model: ModelSpec, organism, tokenizer, seeds: list[int]):
    """The :class:`~countlens.llm.das.experiment.DasConfig` of the DAS checks: the counts of ``0..L`` written as
    one answer token (:func:`one_token_counts`: the first token is then the whole answer, and every pair of
    them differs in it), every pair and wording of the organism, the fewest of its held-out ``seeds`` and
    prompts per seed that give :data:`DAS_PROMPTS` per count (quick organism: 12 wordings x pairs, one seed;
    the test preset's: 2, two seeds of two); at the locations of
    :func:`~countlens.llm.das.experiment.das_locations` (up to the first live block's input, and after the last
    live block); ranks :data:`DAS_RANKS` below the width and the full width ``d`` (there the interchange is
    boundary patching); at :data:`DAS_SIZES`, without the random-initialised model."""
    from countlens.llm.das.experiment import DasConfig, das_locations
    from countlens.llm.prompts import PromptSettings

    config = organism.config
    L, d = int(config["L"]), int(organism.d)
    wordings = len(config["pairs"]) * len(config["configs"])
    seeds = seeds[:-(-DAS_PROMPTS // wordings)]
    groups = wordings * len(seeds)
    prompts = PromptSettings(L=L, counts=one_token_counts(tokenizer, L), per_count=-(-DAS_PROMPTS // groups),
                             pairs=config["pairs"], configs=config["configs"], seeds=seeds)
    before, after = das_locations(organism.live_heads, organism.n_layers)
    return DasConfig(model=model, prompts=prompts, locations=",".join(map(str, [*before, after])),
                     ranks=sorted({*(k for k in DAS_RANKS if k < d), d}), random_model=False, **DAS_SIZES)


def das_checks(model: ModelSpec, organism, loaded, seeds: list[int], kept: Kept | None = None
               ) -> list[dict[str, Any]]:
    """``DAS after the live heads`` and ``DAS before the live heads``
    (:func:`~countlens.llm.das.experiment.organism_verdicts`) from one DAS run (:func:`das_config`; kept as
    ``das``): after the last live block the highest held-out IIA over the ranks reaches
    :data:`~countlens.llm.das.experiment.IIA_REACHED` (the detail names the smallest rank that does), and at
    every location up to the first live block's input it stays at most
    :data:`~countlens.llm.das.experiment.DAS_LEAK`."""
    from countlens.llm.das.experiment import organism_verdicts, run_das

    das = das_config(model, organism, loaded.tokenizer, seeds)
    result = (kept or Kept()).result("das", das, lambda: run_das(das, loaded=loaded))
    return organism_verdicts(result, organism.live_heads, organism.n_layers)


__all__ = ["PROBE_ROWS", "DAS_RANKS", "DAS_PROMPTS", "DAS_SIZES", "one_token_counts", "position_checks",
           "attribution_checks", "steering_window", "steering_check", "probe_capture", "probe_checks",
           "running_count_run", "lens_run", "das_config", "das_checks"]
