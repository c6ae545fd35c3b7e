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
(:data:`TOY_VARIANT`), at the organism's width, with each of the toy's two read-outs (:func:`toy_rows`): the
paper's *regression* read-out (``toy``: ``B_min(L)``, :func:`countlens.toy.b_min`, beside the paper's claimed
rate, :data:`countlens.toy.CLAIMED`) and its *classification* read-out of ``L + 1`` classes
(``toy-classification``: :func:`countlens.toy.classification.classifier_construction`, every vector <= 1 at
every ``L``, its cost moved into a winning score gap that shrinks with ``L``, Figure 2c). The organisms answer
with one token of ``L + 1``: a classifier, so the classification row is the like-for-like one, and the
regression row is the rate the paper states.

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
  organism's ``B``, and which vector attains it (:func:`readout_metrics`: the parameter's name and row, and
  what it is, :func:`vector_role`);
- its classification read-out, as the toy's is measured (:func:`readout_metrics`): its class vectors' largest
  norm (the unembedding rows of the answers ``0..L``) and Figure 2c's smallest winning logit gap over the
  counts (per count the correct answer's logit minus the best other count's, least over the prompts:
  :func:`logit_gaps`, :func:`gap_by_count`);
- the **count manifold** of its centroids over every count 0..L (issue 44, docs/definitions.md §2.17;
  :func:`capture_manifold`): the toy variant whose curve ``h(n, 0)`` lies nearest in shape and its Procrustes
  distance, beside the distance to :data:`TOY_VARIANT`'s curve (the variant it is built like), and whether
  the shape stands above its shuffled-label floor.

**Rates**: per seed the least-squares slope of ``log B`` on ``log L`` (:func:`countlens.toy.budget.fit_slope`,
the toy's own; and of the probe norm, the class-vector norm and the smallest logit gap) over the organisms
that reached their target accuracy, their mean and standard deviation over seeds; the toy's slopes over the
same ``L`` (regression ``B_min``; the classifier's largest vector, class vectors and smallest score gap); the
paper's exponent.

**The LLM column** (optional): the same geometry and probe norm on an existing capture (``llm_acts``, at
``llm_location``, default its last), its ``L`` the capture's largest count; a capture holds no weights, so
no ``B``.

What it can show: whether a trained stock transformer's boundary geometry and norms grow with L as the toy's
construction says its variant must. What it cannot: the organism's ``B`` counts every parameter vector (its
untrained token embeddings and its norm gains too), and training reaches *a* solution, not the cheapest one —
``B_min`` is a lower envelope the organism need not approach. Logit gaps and the toy's score gaps are in
different units (a trained model's logits against a construction scaled to norm 1), so only their trends in
``L`` compare.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

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
from countlens.llm.organisms.scaling_metrics import (  # the numerics, public here too
    CAPTURE_ROWS_PER_DIM,
    CAPTURE_SEEDS,
    NUMBER_TOKENS,
    answer_rows,
    attaining,
    boundary_geometry,
    boundary_target_excess,
    capture_manifold,
    capture_metrics,
    capture_seeds,
    counting_tokenizer,
    gap_by_count,
    logit_gaps,
    readout_metrics,
    spread,
    vector_role,
    windows,
)
from countlens.llm.prompts import CONFIGURATIONS, DEFAULT_PAIRS, PromptSettings

TOY_VARIANT = "softmax-preln-learned"
NORM_PLACEMENT = ("pre-norm: RMSNorm with a learned gain and no bias before attention and before the "
                  "unembedding (Llama's placement)")
LOCATION = "blocks.0.hook_resid_post"  # the boundary after the organism's one block
# The toy counts one token among one other with nothing around them: the organisms count the first default
# pair in one wording (a model of one block cannot learn from the wording which token is the target).
PAIR = DEFAULT_PAIRS[0]
WORDING = next(iter(CONFIGURATIONS))  # "count"
ROW_KEYS = ("kind", "label", "L", "seed", "location", "converged", "held_out_accuracy", "held_out_min_count",
            "steps", "train_seconds",
            "largest_parameter_norm", "b_parameter", "b_row", "b_vector", "class_vector_norm", "min_logit_gap",
            "min_gap_count", "argmax_accuracy", "probe_norm", "probe_best_acc", "target_excess", "gap_ratio",
            "erank_ratio",
            "endpoint_angle", "low", "high", "pca_explained", "manifold_nearest", "manifold_procrustes",
            "manifold_procrustes_toy", "manifold_above_floor")


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
    """lengths L to train at, like 10,30"""
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    """seeds per L, like 0,1"""
    width: int = 32
    """residual width"""
    # 3e-2 after a 300-step warm-up: the L = 30 organisms reach 100 % in 2,350-2,400 steps (seeds 0, 1); at 1e-2
    # after 50 they stopped at 98.4 / 96.8 % after 6,000 (the rate falls as 1 / step), and at 3e-2 or 5e-2 after
    # 50 seed 1 stalled at 3 % from the start (BENCHMARKS.md). L = 100 (the full preset) does not converge at it
    # (0.19 after 6,000 steps), nor at a constant 1e-2 (0.86 after 9,000 steps of 128 prompts): README
    lr: float = 3e-2
    warmup: int = 300
    decay: int = DECAY
    batch_size: int = 32
    max_steps: int = 3000
    """most training steps per organism; a rerun may raise it"""
    eval_every: int = 50
    target_accuracy: float = 0.99
    pairs: list[list[str]] = field(default_factory=lambda: [list(PAIR)])
    configs: list[str] = field(default_factory=lambda: [WORDING])
    tokenizer: str = DEFAULT_MODEL
    llm_acts: str | None = None
    """an existing capture folder for the LLM column (default: none)"""
    llm_location: str | None = None
    """the LLM capture's location, a name or index (default: its last)"""

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
    ``largest_parameter_norm`` (the organism's ``B``; the toy's ``B_min``, ``toy``, or its classifier
    construction's largest vector, ``toy-classification``), ``b_parameter`` / ``b_row`` / ``b_vector`` (the
    vector attaining it: organisms its parameter name, row (``None``: 1-D) and role; the toy its vectors' names),
    ``class_vector_norm`` (the classifiers' largest class vector), ``min_logit_gap`` / ``min_gap_count`` (the
    classifiers' smallest winning gap over the counts, logits or toy scores, and its count),
    ``argmax_accuracy`` (organisms: the captured prompts whose argmax over the counts is right),
    ``probe_norm`` (smallest native
    norm of an exactly rounding ridge probe; ``None`` where none), ``probe_best_acc``, ``target_excess``
    (organisms: the head's mean boundary target excess), ``gap_ratio``,
    ``erank_ratio``, ``endpoint_angle`` (rad), ``low`` / ``high`` (the windows), ``pca_explained`` (two
    ratios), ``manifold_nearest`` / ``manifold_procrustes`` / ``manifold_procrustes_toy`` /
    ``manifold_above_floor`` (organisms: the count manifold's nearest toy variant, its Procrustes distance, the
    distance to :data:`TOY_VARIANT`, whether the shape stands above its floor: :func:`capture_manifold`). ``pca``: per organism and LLM row (same order, ``label``) the centroids' PCA coordinates per count.
    ``gaps``: per organism and toy classifier (``label``, ``kind``, ``L``) the smallest winning gap per count
    ``0..L`` (Figure 2c). ``rates``: the log-log slopes (``organism_norm``, ``organism_probe_norm``,
    ``organism_class_vector_norm``, ``organism_gap``: per seed, mean, std; ``toy``: B_min's slope;
    ``toy_classification``, ``toy_classification_class_vector_norm``, ``toy_classification_gap``: the
    classifier construction's; ``paper``: the claimed exponent, ``paper_text`` as printed)."""

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
    gaps: list[dict[str, Any]] = field(default_factory=list)

    def organisms(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["kind"] == "organism"]


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
    readout = readout_metrics(out, prompts, L)
    if readout.pop("b_check") != organism.largest_parameter_norm:  # the folder holds the weights B was taken of
        raise RuntimeError(f"{out}: its largest parameter vector is not the B its training recorded")
    return {"kind": "organism", "label": f"organism L={L} seed={seed}", "L": L, "seed": seed, "location": LOCATION,
            "converged": organism.converged, "held_out_accuracy": organism.held_out_accuracy,
            "held_out_min_count": min(r["accuracy"] for r in organism.held_out),
            "steps": organism.steps, "train_seconds": organism.train_seconds,
            "largest_parameter_norm": organism.largest_parameter_norm, "target_excess": excess,
            **readout, **capture_metrics(acts, LOCATION, L),
            **capture_manifold(acts, LOCATION, config.width, TOY_VARIANT)}


def toy_rows(config: ScalingConfig) -> list[dict[str, Any]]:
    """The toy variant with the organism's placement (:data:`TOY_VARIANT`) at every ``L``, at ``d = width``,
    with each of its read-outs: ``toy`` the paper's regression read-out (``B_min``, the largest vector of its
    best checked construction, :func:`countlens.toy.budget.b_min_construction`), ``toy-classification`` its
    classification read-out of ``L + 1`` classes — the organisms' — as
    :func:`countlens.toy.classification.classifier_construction` builds it (every vector <= 1): its largest
    vector, its class vectors' ``max_k |u_k|``, and its smallest winning score gap over the counts
    (:func:`countlens.toy.classification.min_gap_by_count`, Figure 2c; ``gap_by_count`` per count). Which toy
    vectors attain the largest norm: ``b_parameter`` (:func:`attaining`)."""
    from countlens.toy import ToyConfig, b_min_construction, classifier_construction, min_gap_by_count

    rows = []
    for L in config.Ls:
        L, d = int(L), int(config.width)
        regression = b_min_construction(TOY_VARIANT, L, d)
        rows.append({"kind": "toy", "label": f"toy {TOY_VARIANT} regression L={L}", "L": L, "seed": None,
                     "largest_parameter_norm": float(regression.max_norm),
                     "b_parameter": attaining(regression.params.vector_norms())})
    for L in config.Ls:
        L, d = int(L), int(config.width)
        cfg = ToyConfig(TOY_VARIANT, d, L, readout="classification")
        params = classifier_construction(cfg)
        norms = params.vector_norms()
        gaps = min_gap_by_count(cfg, params)
        rows.append({"kind": "toy-classification", "label": f"toy {TOY_VARIANT} classification L={L}", "L": L,
                     "seed": None, "largest_parameter_norm": params.max_norm(), "b_parameter": attaining(norms),
                     "class_vector_norm": norms["U"], "min_logit_gap": float(gaps.min()),
                     "min_gap_count": int(gaps.argmin()), "gap_by_count": gaps.tolist()})
    return rows


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
    from countlens.toy import CLAIMED, fit_slope  # the project's one log-log slope (the toy's rate fits too)

    counting = [r for r in rows if r["kind"] == "organism" and r["converged"]]
    per_seed = {key: [fit_slope([r["L"] for r in counting if r["seed"] == s],
                                [r[key] for r in counting if r["seed"] == s])
                      for s in config.seeds]
                for key in ("largest_parameter_norm", "probe_norm", "class_vector_norm", "min_logit_gap")}

    def toy_slope(kind: str, key: str) -> float | None:
        toy = [r for r in rows if r["kind"] == kind]
        return fit_slope([r["L"] for r in toy], [r[key] for r in toy])

    text, exponent = CLAIMED[TOY_VARIANT]
    return {"organism_norm": spread(per_seed["largest_parameter_norm"]),
            "organism_probe_norm": spread(per_seed["probe_norm"]),
            "organism_class_vector_norm": spread(per_seed["class_vector_norm"]),
            "organism_gap": spread(per_seed["min_logit_gap"]),
            "toy": toy_slope("toy", "largest_parameter_norm"),
            "toy_classification": toy_slope("toy-classification", "largest_parameter_norm"),
            "toy_classification_class_vector_norm": toy_slope("toy-classification", "class_vector_norm"),
            "toy_classification_gap": toy_slope("toy-classification", "min_logit_gap"),
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
    gaps = [{"label": r["label"], "kind": r["kind"], "L": r["L"], "gap": r.pop("gap_by_count")}
            for r in rows if "gap_by_count" in r]
    rows = [{k: r.get(k) for k in ROW_KEYS} for r in rows]  # one table: every row every column
    return ScalingResult(asdict(config), NORM_PLACEMENT, TOY_VARIANT, LOCATION, rows, pca, rates(config, rows),
                         round(time.perf_counter() - started, 3), result_provenance(config), gaps)


# Sizes. quick: L = 10, 30, two seeds; full: L = 10, 30, 100, three seeds; test: L = 3, 4 of a width-16
# organism on one pair and two wordings, one seed (seconds each; at the first rate and warm-up, with which these
# tiny organisms converge within their 400 steps).
PRESETS = {"quick": ScalingConfig(),
           # L = 100 needs a constant rate and many prompts: at the quick recipe it reached 0.19 after 6,000 steps;
           # at 1e-2 held, 128 prompts a step, seeds 0, 1, 2 reached 0.990 each after 17,500 / 14,350 / 16,400
           # steps (L = 10 and 30 at 300-350 and 1,400-1,800 steps; docs/findings.md, 5 Dec 2026)
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


__all__ = ["TOY_VARIANT", "NORM_PLACEMENT", "LOCATION", "NUMBER_TOKENS", "CAPTURE_SEEDS", "CAPTURE_ROWS_PER_DIM",
           "ROW_KEYS", "ScalingConfig",
           "ScalingResult", "counting_tokenizer", "windows",
           "spread", "vector_role", "answer_rows", "logit_gaps", "gap_by_count", "readout_metrics", "attaining",
           "boundary_geometry", "capture_seeds", "boundary_target_excess", "capture_metrics", "capture_manifold",
           "organism_row",
           "toy_rows", "llm_row", "rates", "run_scaling", "PRESETS"]
