"""The toy theory on a real architecture (issue 32, point 4): a :class:`ScalingConfig` in, a
:class:`ScalingResult` out (``organism_scaling.json`` and ``organism_scaling.csv``, one row per source).

**The organisms** are as close to the toy as a stock architecture allows: one block of one head, attention-only
(:class:`~countlens.llm.organisms.experiment.OrganismConfig` with ``layers = heads = 1``, ``attention_only``;
the MLP is Llama's with its weights frozen at zero), counting one target among one distractor token in one
wording by default (:data:`PAIR`, :data:`WORDING`: the toy counts one token among one other; and the boundary
of a one-block model cannot read from the instruction which token is the target, so each pair would need its
own target set), trained at every ``L`` of ``Ls`` for every seed of
``seeds`` (each through :func:`~countlens.llm.organisms.experiment.run_organism`: resumable in its own folder,
reused from the countlens cache). Every count is answered by **one token**, as in the toy's one read-out of
``L + 1`` classes: where some count has more than one, the organisms' tokenizer is ``tokenizer``'s with the
numbers ``10..999`` added as tokens (:func:`counting_tokenizer`; Llama-3's tokenizer writes them so too). Why: with SmolLM2's digit-by-digit
answers a one-head attention-only block cannot count past 9. Its boundary residual is the boundary token's
embedding plus a softmax average of per-token values, so its logits are, up to the positive softmax
denominator (which the final RMSNorm's scale invariance also drops), an affine function of the attention
weights summed per item (sum over items of a fixed vector per item and position); averaged over where the
targets stand, the logit gap between two tokens is linear in the count. The first answer token ``1`` (counts 1
and 10..19) would have to win at both ends of the counts 2..9 that must write ``2..9``, which a linear gap
cannot do (the quick organisms of the first version reached 0.21 to 0.96 of the held-out prompts). The norm
placement Llama imposes — RMSNorm with a learned gain and no bias
before attention and before the unembedding (pre-norm) — is the toy's ``softmax-preln-learned`` variant
(:data:`TOY_VARIANT`): the toy column is that variant's ``B_min(L)`` at the organism's width
(:func:`countlens.toy.b_min`), beside the paper's claimed rate (:data:`countlens.toy.CLAIMED`).

**Per organism**, on a capture of its held-out prompts (every count 0..L, pair and wording, seeds
:data:`~countlens.llm.organisms.experiment.HELD_OUT_SEED` on, as many as :func:`capture_seeds` asks: 20 rows
per residual dimension) at the boundary after its block:

- the boundary geometry of the analysis room (:mod:`countlens.analysis.geometry`): Figure 5's gap ratio and
  effective-rank ratio over the windows :func:`windows` (the paper's 1..10 and 91..100 at L = 100, scaled
  with L below), Figure 6's PCA of the count centroids 1..L, and the endpoint angle (rad) between the
  centroids of 1 and L;
- the probe norm that rounds exactly, as the comparison defines it (:func:`countlens.analysis.probe_norm_needed`):
  the smallest native ℓ2 norm on a ridge path whose validation rounded accuracy is 1 (``probe_norm``;
  ``None``: no α reached it), and the validation-selected probe's test rounded accuracy (``probe_best_acc``);
- how its one head reads the items: the mean over the held-out prompts with targets and distractors of its
  boundary query's **target excess** (:func:`countlens.llm.heads.attention.target_excess`, Figure 12's:
  ``target / (target + distractor) − n / (n + m)`` of its attention masses), 0 where it spreads its item
  attention evenly (the count then sits in the values alone, the distractors' included) and up to
  ``m / (n + m)`` where it attends to the targets only;
- its own largest parameter-vector norm (:func:`countlens.llm.organisms.train.largest_parameter_norm`): the
  organism's ``B``.

**Rates**: per seed the least-squares slope of ``log B`` on ``log L`` (and of the probe norm) over the organisms
that reached their target accuracy, their mean and standard deviation over seeds; the toy's slope over the same
``L``; the paper's exponent.

**The LLM column** (optional): the same geometry and probe norm on an existing capture (``llm_acts``, at
``llm_location``, default its last), its ``L`` the capture's largest count; a capture holds no weights, so
no ``B``.

What it can show: whether a trained stock transformer's boundary geometry and norms grow with L as the toy's
construction says its variant must. What it cannot: the organism's ``B`` counts every parameter vector (its
untrained token embeddings and its norm gains too), and training reaches *a* solution, not the cheapest one —
``B_min`` is a lower envelope the organism need not approach.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, about, literal
from countlens.core.fields import AtLeast, Ints, Positive, check_fields
from countlens.core.options import ExperimentConfig
from countlens.core.pool import pool_map, workers_for
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.llm.models import DEFAULT_MODEL
from countlens.llm.organisms.experiment import (
    DECAY,
    HELD_OUT_SEED,
    OrganismConfig,
    plan_organism,
    run_organism,
)
from countlens.llm.prompts import CONFIGURATIONS, DEFAULT_PAIRS, PromptSettings

TOY_VARIANT = "softmax-preln-learned"
NORM_PLACEMENT = ("pre-norm: RMSNorm with a learned gain and no bias before attention and before the "
                  "unembedding (Llama's placement)")
LOCATION = "blocks.0.hook_resid_post"  # the boundary after the organism's one block
# Held-out rows captured per organism: at least CAPTURE_SEEDS data seeds, and at least CAPTURE_ROWS_PER_DIM rows
# per residual dimension (capture_seeds), so the probe's 0.6 training share is 12 rows per coordinate. With two
# seeds alone an L = 10 organism gave 22 rows, 4 of them validation: whether some ridge fit "rounded exactly"
# came down to those 4 (L = 10 seed 0 once 0.39, then none on a rerun).
CAPTURE_SEEDS = 2
CAPTURE_ROWS_PER_DIM = 20
# The toy counts one token among one other with nothing around them: the organisms count the first default
# pair in one wording (a model of one block cannot learn from the wording which token is the target).
PAIR = DEFAULT_PAIRS[0]
WORDING = next(iter(CONFIGURATIONS))  # "count"
NUMBER_TOKENS = 1000  # counts below this are answered by one token each (counting_tokenizer)
ROW_KEYS = ("kind", "label", "L", "seed", "location", "converged", "held_out_accuracy", "held_out_min_count",
            "steps", "train_seconds",
            "largest_parameter_norm", "probe_norm", "probe_best_acc", "target_excess", "gap_ratio", "erank_ratio",
            "endpoint_angle", "low", "high", "pca_explained")


@dataclass
class ScalingConfig(ExperimentConfig):
    """The organisms of every ``L`` of ``Ls`` and seed of ``seeds``: one block of one head, attention-only, width
    ``width``, trained with ``lr`` after ``warmup`` steps of warm-up, ``batch_size``, at most ``max_steps`` steps
    (held-out checks every
    ``eval_every``) on ``pairs`` and ``configs`` with the tokenizer of ``tokenizer`` (its numbers below
    :data:`NUMBER_TOKENS` made one token each: :func:`counting_tokenizer`), to ``target_accuracy``.
    ``llm_acts``: an existing capture for the LLM column (optional), read at ``llm_location`` (a location name
    or index; default its last)."""

    Ls: list[int] = field(default_factory=lambda: [10, 30])
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    width: int = 32
    # 3e-2 after a 300-step warm-up: the L = 30 organisms reach 100 % in 2,350-2,400 steps (seeds 0, 1); at 1e-2
    # after 50 they stopped at 98.4 / 96.8 % after 6,000 (the rate falls as 1 / step), and at 3e-2 or 5e-2 after
    # 50 seed 1 stalled at 3 % from the start (BENCHMARKS.md). L = 100 (the full preset) does not converge at it
    # (0.19 after 6,000 steps), nor at a constant 1e-2 (0.86 after 9,000 steps of 128 prompts): README
    lr: float = 3e-2
    warmup: int = 300
    decay: int = DECAY
    batch_size: int = 32
    max_steps: int = 3000
    eval_every: int = 50
    target_accuracy: float = 0.99
    pairs: list[list[str]] = field(default_factory=lambda: [list(PAIR)])
    configs: list[str] = field(default_factory=lambda: [WORDING])
    tokenizer: str = DEFAULT_MODEL
    llm_acts: str | None = None
    llm_location: str | None = None

    FIELDS: ClassVar[dict] = {"Ls": Ints(minimum=1, distinct=True), "seeds": Ints(minimum=0, distinct=True),
                              "width": AtLeast(2), "lr": Positive(), "warmup": AtLeast(1), "decay": AtLeast(1),
                              "batch_size": AtLeast(1),
                              "max_steps": AtLeast(1), "eval_every": AtLeast(1), "target_accuracy": Positive()}

    def validate(self) -> ScalingConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no model)."""
        check_fields(self, self.FIELDS)
        if len(self.Ls) < 2:
            raise ConfigError("Ls", f"{{Ls}} needs at least two lengths to fit a rate, got {list(self.Ls)}")
        if min(self.Ls) < 3:
            raise ConfigError("Ls", f"{{Ls}} must be >= 3: the gap windows need three counts each, got {min(self.Ls)}")
        if max(self.Ls) >= NUMBER_TOKENS:
            raise ConfigError("Ls", f"{{Ls}} must be below {NUMBER_TOKENS}: every count is answered by one token, "
                                    f"and the numbers are tokens up to {NUMBER_TOKENS - 1}; got {max(self.Ls)}")
        if not self.seeds:
            raise ConfigError("seeds", "{seeds} must name at least one seed")
        for L in self.Ls:
            self.organism(L, self.seeds[0]).validate()  # width, pairs, configs: the organism's own checks
        if self.llm_acts is not None and not Path(self.llm_acts, "meta.json").is_file():
            raise ConfigError("llm_acts", "{llm_acts} must name a capture folder (with meta.json), got "
                                          + literal(repr(str(self.llm_acts))))
        if self.llm_location is not None and self.llm_acts is None:
            raise ConfigError("llm_location", "{llm_location} names a location of {llm_acts}, which is not given",
                              also=("llm_acts",))
        return self

    def organism(self, L: int, seed: int, tokenizer: str | None = None) -> OrganismConfig:
        """The :class:`OrganismConfig` of length ``L`` and seed ``seed``: one block, one head, attention-only,
        with the tokenizer ``tokenizer`` (:func:`counting_tokenizer`; ``None``: ``self.tokenizer``, for the
        checks that read no file)."""
        return OrganismConfig(L=int(L), layers=1, heads=1, width=self.width, attention_only=True, live_heads=None,
                              seed=int(seed), tokenizer=self.tokenizer if tokenizer is None else str(tokenizer), pairs=[list(p) for p in self.pairs],
                              configs=list(self.configs), lr=self.lr, warmup=self.warmup, decay=self.decay,
                              batch_size=self.batch_size,
                              max_steps=self.max_steps, eval_every=self.eval_every,
                              target_accuracy=self.target_accuracy)


@dataclass
class ScalingResult(Result):
    """One row per source (``rows``, also ``organism_scaling.csv``): ``kind`` (``organism``, ``toy``, ``llm``),
    ``L``, ``seed`` (organisms), ``converged``, ``held_out_accuracy`` (greedy answers right over the held-out
    prompts, every count 0..L equally often), ``held_out_min_count`` (the lowest of its per-count accuracies),
    ``steps``, ``train_seconds``,
    ``largest_parameter_norm`` (the organism's ``B``; the toy's ``B_min``), ``probe_norm`` (smallest native
    norm of an exactly rounding ridge probe; ``None`` where none), ``probe_best_acc``, ``target_excess``
    (organisms: the head's mean boundary target excess), ``gap_ratio``,
    ``erank_ratio``, ``endpoint_angle`` (rad), ``low`` / ``high`` (the windows), ``pca_explained`` (two
    ratios). ``pca``: per organism and LLM row (same order, ``label``) the centroids' PCA coordinates per count.
    ``rates``: the log-log slopes (``organism_norm``: per seed, mean, std; ``organism_probe_norm``: the same;
    ``toy``: B_min's slope; ``paper``: the claimed exponent, ``paper_text`` as printed)."""

    FILE: ClassVar[str] = "organism_scaling.json"
    CSV: ClassVar[str] = "organism_scaling.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "rows"}
    COMMAND: ClassVar[str] = "countlens organism scaling"

    config: dict[str, Any]
    norm_placement: str
    toy_variant: str
    location: str
    rows: list[dict[str, Any]]
    pca: list[dict[str, Any]]
    rates: dict[str, Any]
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)

    def organisms(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["kind"] == "organism"]


# ------------------------------------------------------------------------------------------ numerics

def counting_tokenizer(name: str, L: int, progress: bool = False) -> str:
    """The organisms' tokenizer: ``name`` (as ``--model`` takes it) itself where it writes every count
    ``0..L`` as one token already, else a folder of its tokenizer and chat template with the numbers
    ``10 .. NUMBER_TOKENS - 1`` added as tokens, so that every count is answered by one token (see the module
    docstring). The folder is made once into ``cache_root()/tokenizers/numbers-<digest>`` (a staging folder
    renamed into place) and reused."""
    from countlens.llm.answers import answer_token_ids
    from countlens.llm.models import cache_root, load_tokenizer, resolve_model

    try:
        with about("tokenizer"):
            ref = resolve_model(name, progress=progress)
    except ConfigError as exc:  # resolve_model words its errors about a `model`: here it is the tokenizer's
        raise exc.under("tokenizer") if exc.field == "model" else exc from None
    tokenizer = load_tokenizer(ref)
    if all(len(answer_token_ids(tokenizer, n)) == 1 for n in range(int(L) + 1)):
        return name
    key = hashlib.sha256(json.dumps([ref.model_id, NUMBER_TOKENS]).encode()).hexdigest()[:16]
    folder = cache_root() / "tokenizers" / f"numbers-{key}"
    if (folder / "tokenizer_config.json").is_file():
        return str(folder)
    tokenizer.add_tokens([str(n) for n in range(10, NUMBER_TOKENS)])
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tokenizer-", dir=folder.parent))
    tokenizer.save_pretrained(str(staging))
    try:
        os.replace(staging, folder)
    except OSError:  # another run made it first
        shutil.rmtree(staging, ignore_errors=True)
    return str(folder)


def windows(L: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """Figure 5's low and high count windows at length ``L``: ``w = max(3, L // 10)`` counts each,
    ``(1, w)`` and ``(L − w + 1, L)`` — the paper's 1..10 and 91..100 at L = 100."""
    w = max(3, int(L) // 10)
    return (1, w), (int(L) - w + 1, int(L))


def loglog_slope(L, values) -> float | None:
    """Least-squares slope of ``log values`` on ``log L`` over the finite positive values (None if < 2)."""
    L, values = np.asarray(L, dtype=np.float64), np.asarray([np.nan if v is None else v for v in values],
                                                             dtype=np.float64)
    keep = np.isfinite(values) & (values > 0)
    if keep.sum() < 2 or len(np.unique(L[keep])) < 2:
        return None
    return float(np.polyfit(np.log(L[keep]), np.log(values[keep]), 1)[0])


def spread(slopes: list[float | None]) -> dict[str, Any]:
    """Per-seed slopes, their mean and standard deviation (ddof 0; ``None`` without a finite slope)."""
    finite = [s for s in slopes if s is not None]
    return {"per_seed": slopes, "mean": float(np.mean(finite)) if finite else None,
            "std": float(np.std(finite)) if finite else None}


def boundary_geometry(X: np.ndarray, n: np.ndarray, L: int) -> dict[str, Any]:
    """The analysis room's geometry of boundary vectors ``X`` (rows, d) with counts ``n`` (rows,): gap and
    effective-rank ratios over :func:`windows`, the endpoint angle between counts 1 and ``L``, the PCA of the
    centroids of counts 1..L (``counts``, ``coords`` (k, 2), ``explained`` (2,))."""
    from countlens.analysis import count_centroids, endpoint_angle, erank_ratio, gap_ratio, pca_2d

    counts, C = count_centroids(np.asarray(X, dtype=np.float64), np.asarray(n))
    low, high = windows(L)
    keep = (counts >= 1) & (counts <= L)
    coords, explained = pca_2d(C[keep])
    return {"gap_ratio": gap_ratio(counts, C, low, high), "erank_ratio": erank_ratio(counts, C, low, high),
            "endpoint_angle": endpoint_angle(counts, C, (1, int(L))), "low": list(low), "high": list(high),
            "pca_explained": explained.tolist(),
            "pca": {"counts": counts[keep].tolist(), "coords": coords.tolist()}}


def capture_seeds(L: int, width: int, pairs: int = 1, configs: int = 1) -> int:
    """Held-out data seeds captured per organism of length ``L`` and width ``width`` (each seed gives
    ``(L + 1) * pairs * configs`` boundary rows): at least :data:`CAPTURE_SEEDS`, and enough for
    :data:`CAPTURE_ROWS_PER_DIM` rows per dimension."""
    per_seed = (L + 1) * pairs * configs
    return max(CAPTURE_SEEDS, -(-CAPTURE_ROWS_PER_DIM * width // per_seed))


def capture_metrics(acts: str | Path, location: str, L: int) -> dict[str, Any]:
    """:func:`boundary_geometry` and the probe cost (:func:`countlens.analysis.probe_norm_needed`: the
    comparison's ``probe_norm`` and ``probe_best_acc``) of the boundary rows of the capture ``acts`` at
    ``location``."""
    from countlens.analysis import probe_norm_needed
    from countlens.core.capture import open_capture

    capture = open_capture(acts).boundary()
    X, n = capture.acts(location), capture.counts()
    probe = probe_norm_needed(X, n)
    return {**boundary_geometry(X, n, L), "probe_norm": probe["probe_norm"], "probe_best_acc": probe["probe_best_acc"]}


def boundary_target_excess(folder: str | Path, settings: PromptSettings, batch_size: int = 32) -> float | None:
    """The mean over ``settings``' prompts with targets and distractors of the boundary query's target excess
    (:func:`countlens.llm.heads.attention.target_excess`) in the one-block, one-head organism of ``folder``
    (``None`` where no prompt has both)."""
    import torch

    from countlens.llm.capture.residuals import pad_token_id
    from countlens.llm.heads.attention import head_masses, target_excess
    from countlens.llm.heads.experiment import prompt_roles
    from countlens.llm.hooks import attention_output_site
    from countlens.llm.models import load_model
    from countlens.llm.prompts import build_prompts

    loaded = load_model(str(folder), progress=False)
    prompts = build_prompts(loaded.tokenizer, settings)
    site = attention_output_site(loaded.model.config.model_type)
    with torch.inference_mode():
        masses, _ = head_masses(loaded.model, prompts, prompt_roles(prompts, settings), site,
                                pad_token_id(loaded.tokenizer), batch_size)  # (P, 1, Q, 1, 3)
    excess = target_excess(masses[:, 0, 0, 0], np.array([p.n for p in prompts]), np.array([p.m for p in prompts]))
    return float(np.nanmean(excess)) if np.isfinite(excess).any() else None


# ------------------------------------------------------------------------------------------ the run

def organism_row(config: ScalingConfig, L: int, seed: int, out: Path, work: Path, progress: bool,
                 tokenizer: str | None = None, position: int | None = None) -> dict[str, Any]:
    """Train (or resume, or reuse) the organism of ``(L, seed)`` with the tokenizer folder ``tokenizer``
    (:func:`counting_tokenizer`; ``None``: ``config.tokenizer``) in ``out``, capture its held-out prompts into
    ``work`` and measure it. ``position``: the terminal line of a worker's training bar
    (:func:`~countlens.llm.organisms.experiment.run_organism`)."""
    from countlens.llm.capture.experiment import CaptureConfig, run_capture
    from countlens.llm.models import ModelSpec

    organism = run_organism(config.organism(L, seed, tokenizer), out=out, progress=progress, reuse=True,
                            position=position)
    prompts = PromptSettings(L=L, counts=list(range(L + 1)), per_count=1, pairs=config.pairs, configs=config.configs,
                             seeds=[HELD_OUT_SEED + j for j in range(capture_seeds(L, config.width, len(config.pairs),
                                                                                   len(config.configs)))])
    acts = work / f"acts-L{L}-seed{seed}"
    run_capture(CaptureConfig(model=ModelSpec(model=str(out)), prompts=prompts), acts, progress=False)
    excess = boundary_target_excess(out, prompts)
    return {"kind": "organism", "label": f"organism L={L} seed={seed}", "L": L, "seed": seed, "location": LOCATION,
            "converged": organism.converged, "held_out_accuracy": organism.held_out_accuracy,
            "held_out_min_count": min(r["accuracy"] for r in organism.held_out),
            "steps": organism.steps, "train_seconds": organism.train_seconds,
            "largest_parameter_norm": organism.largest_parameter_norm, "target_excess": excess,
            **capture_metrics(acts, LOCATION, L)}


def toy_rows(config: ScalingConfig) -> list[dict[str, Any]]:
    """The toy variant with the organism's placement (:data:`TOY_VARIANT`) at every ``L``, at ``d = width``."""
    from countlens.toy import b_min

    return [{"kind": "toy", "label": f"toy {TOY_VARIANT} L={L}", "L": int(L), "seed": None,
             "largest_parameter_norm": float(b_min(TOY_VARIANT, int(L), int(config.width)))} for L in config.Ls]


def llm_row(config: ScalingConfig) -> dict[str, Any]:
    """The LLM column from the capture ``llm_acts`` at ``llm_location`` (default its last location)."""
    from countlens.core.capture import open_capture
    from countlens.core.locations import resolve_location

    with about("llm_acts"):
        meta = open_capture(config.llm_acts, rows=False).meta
    names = list(meta.locations)
    with about("llm_location"):
        location = names[resolve_location(names, config.llm_location if config.llm_location is not None else -1)]
    L = int(max(meta.counts))
    with about("llm_acts"):
        metrics = capture_metrics(config.llm_acts, location, L)
    return {"kind": "llm", "label": f"LLM {meta.model_id} at {location}", "L": L, "seed": None,
            "largest_parameter_norm": None, "location": location, **metrics}


def rates(config: ScalingConfig, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The log-log slopes of the organisms' ``B`` and probe norm per seed (with mean and std), and the toy's. An
    organism that did not reach its target accuracy is left out of its seed's fit (it is no counting solution);
    a seed with fewer than two counting organisms has no slope (``None``)."""
    from countlens.toy import CLAIMED

    counting = [r for r in rows if r["kind"] == "organism" and r["converged"]]
    per_seed = {key: [loglog_slope([r["L"] for r in counting if r["seed"] == s],
                                   [r[key] for r in counting if r["seed"] == s])
                      for s in config.seeds] for key in ("largest_parameter_norm", "probe_norm")}
    toy = [r for r in rows if r["kind"] == "toy"]
    text, exponent = CLAIMED[TOY_VARIANT]
    return {"organism_norm": spread(per_seed["largest_parameter_norm"]),
            "organism_probe_norm": spread(per_seed["probe_norm"]),
            "toy": loglog_slope([r["L"] for r in toy], [r["largest_parameter_norm"] for r in toy]),
            "paper": exponent, "paper_text": text}


def _worker_row(lines: Any, *job: Any) -> dict[str, Any]:
    """:func:`organism_row` in a worker process of :func:`run_scaling`, quiet but for its training bar, shown
    on a terminal line taken from the queue ``lines`` (``None``: no bar) for as long as it trains."""
    from countlens.llm.models import quiet_transformers

    quiet_transformers()
    if lines is None:
        return organism_row(*job)
    line = lines.get()
    try:
        return organism_row(*job, position=line)
    finally:
        lines.put(line)


def run_scaling(config: ScalingConfig, *, out: str | os.PathLike, progress: bool = False,
                workers: int = 1) -> ScalingResult:
    """Every organism of ``config`` trained (or resumed, or reused) in ``out/L{L}-seed{s}``, measured, and
    set beside the toy and the optional LLM capture. Every organism's settings, folder and tokenizer are
    checked (:func:`~countlens.llm.organisms.experiment.plan_organism`) before the first one trains.

    ``workers > 1`` trains and measures that many organisms side by side, each in its own process on one torch
    thread (:func:`countlens.core.pool.pool_map`), the largest ``L`` first; one thread trains the same organism
    bit for bit, so the result is that of ``workers = 1`` on one thread (timings aside)."""
    started = time.perf_counter()
    config.validate()
    workers = AtLeast(1)(workers, "workers")  # before any slow work
    out = Path(out)
    tokenizer = counting_tokenizer(config.tokenizer, max(config.Ls), progress)
    folders = {(L, s): out / f"L{L}-seed{s}" for L in config.Ls for s in config.seeds}
    for (L, s), folder in folders.items():
        try:
            with about("out"):
                plan_organism(config.organism(L, s, tokenizer), folder)
        except ConfigError as exc:  # an organism's field L is one of this config's Ls
            raise exc.under("Ls") if exc.field == "L" else exc from None
    if config.llm_acts is not None:
        llm = llm_row(config)  # a bad capture is refused before any training
    rows = []
    with tempfile.TemporaryDirectory(prefix="countlens-scaling-") as tmp:
        if workers == 1:  # here, on the caller's torch threads, with each organism's own progress bar
            for (L, s), folder in folders.items():
                rows.append(organism_row(config, int(L), int(s), folder, Path(tmp), progress, tokenizer))
        else:  # the longest (largest L) first, so that no worker is left with one long organism at the end
            order = sorted(folders, key=lambda key: -key[0])
            lines = None
            if progress:  # each worker's training bar on a line of its own, under the organisms' bar
                import multiprocessing

                manager = multiprocessing.get_context("spawn").Manager()
                lines = manager.Queue()
                for line in range(1, workers + 1):
                    lines.put(line)
            try:
                done = pool_map(_worker_row, [(lines, config, int(L), int(s), folders[L, s], Path(tmp), False,
                                               tokenizer) for L, s in order],
                                workers=workers, desc="organisms", progress=progress)
            finally:
                if lines is not None:
                    manager.shutdown()
            by_key = dict(zip(order, done, strict=True))
            rows = [by_key[key] for key in folders]
    rows += toy_rows(config)
    if config.llm_acts is not None:
        rows.append(llm)
    pca = [{"label": r["label"], "kind": r["kind"], **r.pop("pca")} for r in rows if "pca" in r]
    rows = [{k: r.get(k) for k in ROW_KEYS} for r in rows]  # one table: every row every column
    return ScalingResult(asdict(config), NORM_PLACEMENT, TOY_VARIANT, LOCATION, rows, pca, rates(config, rows),
                         round(time.perf_counter() - started, 3), result_provenance(config))


# Sizes. quick: L = 10, 30, two seeds; full: L = 10, 30, 100, three seeds; test: L = 3, 4 of a width-16
# organism on one pair and two wordings, one seed (seconds each; at the first rate and warm-up, with which these
# tiny organisms converge within their 400 steps).
PRESETS = {"quick": ScalingConfig(),
           # L = 100 needs a constant rate and many prompts: at the quick recipe it reached 0.19 after 6,000 steps;
           # at 1e-2 held, 128 prompts a step, seeds 0, 1, 2 reached 0.995 / 0.990 / 0.990 after 17,150 / 7,050 /
           # 20,200 steps (L = 10 and 30 at 300-350 and 1,400-1,900 steps), BENCHMARKS.md
           "full": ScalingConfig(Ls=[10, 30, 100], seeds=[0, 1, 2], lr=1e-2, warmup=300, decay=30_000,
                                 batch_size=128, max_steps=30_000),
           "test": ScalingConfig(Ls=[3, 4], seeds=[0], width=16, configs=["count", "tally"], batch_size=16,
                                 max_steps=400, eval_every=20, lr=1e-2, warmup=50)}

declare(Experiment(
    "organism-scaling", "The toy theory on a real architecture: one-head organisms against L", ScalingConfig,
    run_scaling, ScalingResult, order=920, places={"out": "organisms"},
    threads=1,  # width-32 organisms: a second torch thread mostly spins (the quick runs here used one each)
    figure="countlens.llm.organisms.figures:draw_scaling", plot="countlens.llm.organisms.figures:plot_scaling",
    # not in the quick report (make demo): its quick organisms take 6 minutes on one thread, which the demo's
    # 15 minutes cannot hold (README, BENCHMARKS.md)
    view="countlens.llm.organisms.figures:scaling_view",
    options=lambda c: {"progress": True, "workers": workers_for(len(c.Ls) * len(c.seeds))},
    presets={**PRESETS, "quick": None}))


__all__ = ["TOY_VARIANT", "NORM_PLACEMENT", "LOCATION", "NUMBER_TOKENS", "ROW_KEYS", "ScalingConfig",
           "ScalingResult", "counting_tokenizer", "windows",
           "loglog_slope", "spread", "boundary_geometry", "capture_seeds", "boundary_target_excess", "capture_metrics",
           "organism_row",
           "toy_rows", "llm_row", "rates", "run_scaling", "PRESETS"]
