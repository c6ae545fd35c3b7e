"""The capture experiment: a :class:`CaptureConfig` in, an activation folder and its
:class:`~countlens.core.capture.Capture` out.

:func:`plan_capture` does everything that needs only the tokenizer and the model's config — resolve the
model (hub revision included), build and check the prompts (chat template, items, boundary), resolve the
locations, check the context length — so a capture that cannot work is refused before any weights are
read; :func:`preflight_capture` is that check alone, and returns the plan for the run. :func:`run_capture` then
loads the weights and writes the folder shard by shard (``countlens.core.store``), resuming the shards an
interrupted run left: one lifecycle (:func:`capture_lifecycle`) whether the shards are captured here
(:class:`LocalShards`) or on a Ray cluster (:class:`~countlens.llm.capture.distributed.RayShards`).

The plan also knows the capture's size on disk before any weights load (:meth:`CapturePlan.disk_bytes`: rows
x locations x d x bytes, and the other columns): a capture the disk cannot hold is refused then
(:func:`check_disk`), and an items capture (``positions="items"``, one row per item and boundary) says its
size before it starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.capture import Capture, CaptureMeta
from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.fields import AtLeast, Nested, OneOf, check_fields
from countlens.core.io import free_bytes, provenance, size_text, write_json_atomic
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import config_record, result_provenance
from countlens.core.store import META, ActivationWriter, existing_capture, load_capture
from countlens.llm.answers import (
    ANSWER_TOKENS,
    answer_candidates,
    answering_runner,
    check_generation_prompt,
    checked_candidates,
)
from countlens.llm.capture.residuals import (
    BACKENDS,
    POSITIONS,
    capture_shard,
    context_length,
    hidden_size,
    kept_positions,
    length_sorted,
    model_facts,
    n_blocks_of,
    shard_runner,
)
from countlens.llm.hooks import residual_locations
from countlens.llm.models import (
    DEFAULT_MODEL,
    LoadedModel,
    ModelPool,
    ModelRef,
    ModelSpec,
    load_model,
    load_model_config,
    load_tokenizer,
    read_once,
)
from countlens.llm.prompts import (
    CANDIDATE_PAIRS,
    Prompt,
    PromptSettings,
    boundary_tokens,
    build_prompts,
    single_token_pairs,
)

ACTS_DTYPES = ("float32", "float16")
PADDING_SIDES = ("left", "right")
SHARD_ROWS = 256


@dataclass
class CaptureConfig(ExperimentConfig):
    """Everything that fixes a capture (docs/definitions.md §2); the command line's defaults are these.

    ``model``: which model, on which device, in which compute dtype (:class:`~countlens.llm.models.ModelSpec`);
    ``prompts``: the prompt set (:class:`~countlens.llm.prompts.PromptSettings`: ``len(counts) * per_count
    * len(pairs) * len(configs) * len(seeds)`` prompts of ``n + m <= L`` items). ``locations``: which
    residual locations to keep (names, indices incl. ``-1``, ranges ``0:5``, ``all``; ``None`` = all); the
    forward pass stops after the last one. ``acts_dtype`` is the stored dtype. Rows are written in shards of
    ``shard_rows`` prompts, the unit an interrupted run resumes from; ``batch_size`` and ``padding_side``
    change the vectors only by float rounding.

    ``positions``: ``"boundary"`` keeps each prompt's boundary row (one row per prompt); ``"items"`` keeps,
    from the same forward pass, also the row of every item token — one row per (prompt, position), each
    prompt's items in order and then its boundary, with the columns ``prompt_id``, ``position``,
    ``item_index``, ``is_target`` and ``running_count`` (:mod:`countlens.core.store`); a shard then holds its
    ``shard_rows`` prompts' rows, so lower ``shard_rows`` to bound the memory one shard takes.

    ``answers`` also records the model's own answer to every prompt (columns ``answer_text``, ``answer``,
    ``answer_logprob``; :mod:`countlens.llm.answers`), up to ``answer_tokens`` greedy tokens decoded from the
    capture's own prompt pass (its KV cache) — which is why answers are a capture option rather than a pass
    over an existing capture: they cost a few decode steps, not a second prompt pass — and the answer as a
    distribution over the counts ``min(counts)..max(counts)`` (``meta["answer_candidates"]``): every
    candidate's teacher-forced log-probability (``answer_logprobs``), the expected count (``answer_expected``)
    and the correct count's rank (``answer_rank``), scored from the same pass's logits and cache. The whole
    model then runs (no early stop) in left-padded batches. ``random_init`` captures a model of the same architecture
    and tokenizer with freshly initialised weights (seed ``init_seed``): the baseline a probe must beat.

    Every setting has one name wherever it is set: ``with_options`` sets the nested ones by name too
    (``config.with_options(device="cuda", counts=[1, 2])``), as the command line's dests do.
    """

    model: ModelSpec = field(default_factory=ModelSpec)
    prompts: PromptSettings = field(default_factory=PromptSettings)
    locations: str | None = None
    batch_size: int = 16
    backend: str = "hf"
    acts_dtype: str = "float32"
    padding_side: str = "right"
    shard_rows: int = SHARD_ROWS
    positions: str = "boundary"
    answers: bool = False
    answer_tokens: int = ANSWER_TOKENS
    random_init: bool = False
    init_seed: int = 0

    FIELDS: ClassVar[dict] = {"model": Nested(ModelSpec, "model"), "prompts": Nested(PromptSettings),
                              "batch_size": AtLeast(1), "backend": OneOf(BACKENDS), "acts_dtype": OneOf(ACTS_DTYPES),
                              "padding_side": OneOf(PADDING_SIDES), "shard_rows": AtLeast(1),
                              "positions": OneOf(POSITIONS), "answer_tokens": AtLeast(1)}

    def validate(self) -> CaptureConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built."""
        check_fields(self, self.FIELDS, assign=True)
        if self.answers and self.backend != "hf":
            raise ConfigError("answers", "{answers} needs {backend:hf} (the answer is decoded from the capture's "
                                         "own prompt pass)", also=("backend",))
        if self.positions == "items":
            self.prompts.require_items("an items capture (one row per item)")
        return self


@dataclass
class CapturePlan:
    """A checked capture before any weights are read: where the model is, its tokenizer, the prompts
    (length-sorted), the location indices (``None`` = all), the resume key, the number of blocks, the
    residual width ``d``."""

    config: CaptureConfig
    ref: ModelRef
    tokenizer: Any
    prompts: list[Prompt]
    locations: list[int] | None
    key: dict[str, Any]
    n_blocks: int
    d: int = 0

    @property
    def candidates(self) -> list[int] | None:
        """The counts whose answers a capture with answers scores (:func:`~countlens.llm.answers.answer_candidates`)."""
        return answer_candidates(self.config.prompts.counts) if self.config.answers else None

    def n_locations(self) -> int:
        """The locations each row stores (the transformer-lens backend adds its ``hook_resid_mid`` ones)."""
        kept = list(range(self.n_blocks + 1)) if self.locations is None else self.locations
        return len(kept) + (max(1, max(kept)) if self.config.backend == "transformer-lens" else 0)

    def rows(self, prompts: list[Prompt] | None = None) -> int:
        """The rows ``prompts`` (default: all) take: one per prompt, or per kept position of an items capture."""
        return sum(len(kept_positions(p, self.config.positions)) for p in (self.prompts if prompts is None
                                                                          else prompts))

    def disk_bytes(self, prompts: list[Prompt] | None = None) -> tuple[int, int]:
        """(activation bytes, other columns' bytes) ``prompts`` (default: all) take on disk: rows x
        locations x d x bytes, and each row's prompt text and scalar columns (candidates with answers)."""
        prompts = self.prompts if prompts is None else prompts
        per_row = self.n_locations() * self.d * np.dtype(self.config.acts_dtype).itemsize
        scalar = 64 + (8 * (1 + len(self.candidates)) + 64 if self.config.answers else 0)
        acts = other = 0
        for p in prompts:
            k = len(kept_positions(p, self.config.positions))
            acts += k * per_row
            other += k * (len(p.prompt.encode("utf-8")) + scalar)
        return acts, other

    def shard_memory(self) -> int:
        """The bytes the largest shard's activations take in memory while it is captured (float32)."""
        return max(self.rows(shard) for shard in self.shards()) * self.n_locations() * self.d * 4

    def size_text(self, free: int | None = None) -> str:
        """One line: the capture's expected size on disk, its formula, the free space (``free`` bytes) and
        what one shard holds in memory."""
        acts, other = self.disk_bytes()
        text = (f"expected size on disk: {self.rows():,} rows ({len(self.prompts):,} prompts) x {self.n_locations()} "
                f"locations x {self.d} dims x {np.dtype(self.config.acts_dtype).itemsize} bytes = {size_text(acts)}"
                f" + {size_text(other)} of other columns")
        return (text + (f"; {size_text(free)} free" if free is not None else "")
                + f"; one shard of {self.config.shard_rows} prompts takes {size_text(self.shard_memory())} in memory")

    def meta(self, facts: dict[str, Any]) -> dict[str, Any]:
        """The capture's ``meta.json`` given the loaded model's :func:`~countlens.llm.capture.residuals.model_facts`."""
        c, settings = self.config, self.config.prompts
        extra: dict[str, Any] = {}
        if c.positions != "boundary":
            extra.update(positions=c.positions, n_prompt_rows=len(self.prompts))
        if c.answers:
            extra["answer_candidates"] = self.candidates
        return {
            **facts, "dtype": c.acts_dtype, "backend": c.backend, "settings": self.key,
            "token_pairs": settings.pairs, "task": settings.task,
            "configurations": {k: settings.counting_task().wordings[k] for k in settings.configs},
            "seeds": settings.seeds, "L": settings.L, "counts": settings.counts, "per_count": settings.per_count,
            "template": settings.template, "boundary": boundary_tokens(self.tokenizer, self.prompts[0]),
            "n_prompts": len(self.prompts), "shard_rows": c.shard_rows, "max_tokens": self.prompts[-1].n_tokens,
            "provenance": provenance({"settings": self.key, "batch_size": c.batch_size,
                                      "padding_side": c.padding_side, "device": c.model.device}),
            **extra,
        }

    def shards(self) -> list[list[Prompt]]:
        """The prompts in shards of ``shard_rows``, in the order they are written."""
        rows = self.config.shard_rows
        return [self.prompts[i:i + rows] for i in range(0, len(self.prompts), rows)]

    def shard_start(self, index: int) -> int:
        """The plan row (``prompt_id``) of shard ``index``'s first prompt."""
        return index * self.config.shard_rows


def plan_capture(config: CaptureConfig, progress: bool = True, pool: ModelPool | None = None) -> CapturePlan:
    """Resolve and check ``config`` from the tokenizer and the model's config alone (no weights are read);
    in a run's model ``pool`` (``reproduce``, ``study``; without one, afresh) once per config, so the
    pre-load check and the run that follows it share one plan.

    Raises :class:`UsageError` (a :class:`ConfigError` naming the field where one is to blame) for an
    unknown model or revision, a missing chat template, items that are not one token each, a generation
    prompt that differs between prompts, locations the model lacks, or a prompt longer than the model's
    context.
    """
    key = json.dumps(config_record(config), sort_keys=True, default=str)
    plan = read_once("capture plan", key, lambda: _plan(config, progress, pool), pool)
    if plan.ref.announce != progress:  # a conversion the load makes is announced as this caller asks
        plan = dataclasses.replace(plan, ref=dataclasses.replace(plan.ref, announce=progress))
    return plan


def _plan(config: CaptureConfig, progress: bool, pool: ModelPool | None) -> CapturePlan:
    if config.positions == "items" and max(config.prompts.counts) == 0:
        raise ConfigError("positions", "{positions:items} follows the count over the items, but {counts} are all 0 "
                                       "(no prompt has a target); add counts above 0", also=("counts",))
    ref = config.model.resolve(progress, template=config.prompts.template, pool=pool)  # a GGUF's: its header's
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    n_blocks = n_blocks_of(model_config)
    locations = _location_indices(config.locations, n_blocks)
    if config.answers:
        check_generation_prompt(tokenizer, config.prompts.template)
    prompts = length_sorted(build_prompts(tokenizer, config.prompts))
    n_ctx, longest = context_length(model_config), prompts[-1].n_tokens
    if n_ctx is not None and longest > n_ctx:
        field, fix, also = _shorter(config.prompts)
        raise ConfigError(field, f"the longest prompt (count {prompts[-1].n}) has {longest} tokens but the model's "
                                 f"context is {n_ctx}; {fix}", also=also)
    if config.answers:
        _check_candidates(tokenizer, config, n_ctx, longest)
    if config.positions == "items" and all(p.first_item_index < 0 for p in prompts):
        raise ConfigError("positions", "{positions:items}: the prompts hold no items to keep; use "
                                       "{positions:boundary}")
    return CapturePlan(config, ref, tokenizer, prompts, locations, _settings_key(config, locations), n_blocks,
                       hidden_size(model_config))


def _check_candidates(tokenizer, config: CaptureConfig, n_ctx: int | None, longest: int) -> None:
    """``ConfigError`` where a candidate answer encodes to no tokens or two encode alike
    (:func:`~countlens.llm.answers.checked_candidates`, the check every answer-scoring read-out makes), or where
    the longest prompt and the longest candidate answer do not fit the model's context together."""
    counts = answer_candidates(config.prompts.counts)
    ids = checked_candidates(tokenizer, counts, config.prompts.template, "counts")
    tokens = max(len(t) for t in ids)
    if n_ctx is not None and longest + tokens > n_ctx:
        field, fix, also = _shorter(config.prompts)
        raise ConfigError(field, f"the longest prompt ({longest} tokens) and the longest candidate answer "
                                 f"({tokens} tokens, of the counts {counts[0]}..{counts[-1]}) exceed the model's "
                                 f"context of {n_ctx} tokens; {fix}", also=also)


def _shorter(prompts: PromptSettings) -> tuple[str, str, tuple[str, ...]]:
    """The field that shortens the longest prompt in the task's own terms, the fix (a message part) and the
    other fields it names: ``L`` where the task's prompts grow with it, else the largest of the counts (a
    repeated word, a file's records)."""
    if prompts.counting_task().uses_L:
        return "L", "lower {L} or the largest of {counts}", ("counts",)
    return "counts", "lower the largest of {counts} (the prompts of {task} grow with their count)", ("task",)


def preflight_capture(config: CaptureConfig, out: str | Path | None = None, progress: bool = True,
                      pool: ModelPool | None = None) -> CapturePlan:
    """Every check of :func:`plan_capture`, and (given ``out``) that ``out`` is empty or holds this same
    capture and that its disk holds the capture (:func:`check_disk`); raises :class:`UsageError`, reads no
    weights, writes nothing. Returns the plan, for the run that follows (``run_capture(plan=...)``)."""
    plan = plan_capture(config, progress, pool)
    if out is not None:
        existing_capture(out, plan.key)
        check_disk(plan, out)
    return plan


def check_disk(plan: CapturePlan, out: str | Path, done: set[int] = frozenset()) -> int:
    """The free bytes at ``out``; a one-line ``ConfigError`` naming the fix where the shards still to write
    (all but ``done``) would not fit."""
    todo = [p for s, shard in enumerate(plan.shards()) if s not in done for p in shard]
    need = sum(plan.disk_bytes(todo))
    free = free_bytes(out)
    if need > free:
        smaller = "keep fewer {locations}" + (", store {acts_dtype:float16}" if plan.config.acts_dtype == "float32"
                                              else "")
        raise ConfigError("out", f"the capture needs about {size_text(need)} on disk but {literal(out)} has "
                                 f"{size_text(free)} free; {smaller}, capture fewer prompts (fewer {{counts}}, "
                                 "{seeds} or {pairs}) or choose another {out}",
                          also=("locations", "acts_dtype", "counts", "seeds", "pairs"))
    return free


# The capture stage's result is the capture itself (its folder, typed metadata, rows; the result contract).
CaptureResult = Capture


def capture_runner(plan: CapturePlan, loaded: LoadedModel | None = None, progress: bool = True,
                   pool: ModelPool | None = None):
    """(the model, the :class:`~countlens.llm.capture.residuals.ShardRunner` that captures its shards) for ``plan``:
    the one way a single process and each Ray worker (:mod:`countlens.llm.capture.distributed`) set up a capture.
    ``loaded`` reuses an already loaded model; otherwise the weights load (or are drawn, ``random_init``)."""
    config, spec = plan.config, plan.config.model
    if loaded is None and config.random_init:
        loaded = random_init_model(plan.ref, plan.tokenizer, config.init_seed, spec.device, spec.dtype)
    elif loaded is None:
        loaded = load_model(plan.ref, device=spec.device, dtype=spec.dtype, progress=progress,
                            tokenizer=plan.tokenizer, pool=pool)
    if config.answers:
        runner = answering_runner(loaded, plan.locations, config.batch_size, config.answer_tokens,
                                  config.prompts.template, plan.candidates, config.positions)
    else:
        runner = shard_runner(loaded, plan.locations, config.backend, config.padding_side, config.batch_size,
                              config.positions)
    return loaded, runner


def run_capture(config: CaptureConfig, out: str | Path, *, plan: CapturePlan | None = None,
                loaded: LoadedModel | None = None, shards=None, progress: bool = True,
                notify: Callable[[str], Any] | None = None, pool: ModelPool | None = None) -> Capture:
    """Capture the boundary residual stream of every prompt of ``config`` (and, with ``positions="items"``,
    of every item) into the folder ``out``; returns the :class:`~countlens.core.capture.Capture`.

    ``plan`` is ``config``'s :func:`plan_capture` when the caller already made it (it is made here
    otherwise, in ``pool``, the run's :class:`~countlens.llm.models.ModelPool`, which also loads the model
    once); ``loaded`` reuses a model already loaded from ``config.model``; ``shards`` captures the shards
    (default :class:`LocalShards`, in this process; :class:`~countlens.llm.capture.distributed.RayShards` on a
    Ray cluster: :func:`~countlens.llm.capture.distributed.run_capture_on_ray`). A finished capture with the
    same settings is returned as it is; an interrupted one resumes from its finished shards; a folder
    holding anything else, or a capture the disk cannot hold (:func:`check_disk`), is refused
    (:class:`UsageError`), all before the weights load. ``notify(line)`` is told an items capture's expected
    size on disk then.
    """
    if plan is None:
        plan = plan_capture(config, progress, pool)
    elif plan.config != config:
        raise ValueError("run_capture: the plan was made for another config")
    if shards is None:
        shards = LocalShards(loaded, progress, pool)
    return capture_lifecycle(plan, out, shards, progress, notify)


class LocalShards:
    """Captures a plan's shards in this process, with one model (``loaded``, or loaded on :meth:`start`)."""

    def __init__(self, loaded: LoadedModel | None = None, progress: bool = True, pool: ModelPool | None = None):
        self.loaded, self.progress, self.pool, self.runner = loaded, progress, pool, None
        self.label = "capture"

    @contextlib.contextmanager
    def session(self, out: Path) -> Iterator[None]:
        yield

    def start(self, plan: CapturePlan, n_shards: int) -> dict[str, Any]:
        """Load the model; the capture's ``meta.json`` (:meth:`CapturePlan.meta`) from it."""
        self.loaded, self.runner = capture_runner(plan, self.loaded, self.progress, self.pool)
        return plan.meta(model_facts(self.loaded, self.runner.names))

    def capture(self, plan: CapturePlan, writer: ActivationWriter, todo: dict[int, list[Prompt]], update) -> None:
        for s in sorted(todo):
            writer.write_shard(s, capture_shard(self.runner, todo[s], update, plan.shard_start(s)))

    def result(self, capture: Capture, scheduled: list[int], wall_s: float) -> Capture:
        return capture


def capture_lifecycle(plan: CapturePlan, out: str | Path, shards, progress: bool = True,
                      notify: Callable[[str], Any] | None = None) -> Capture:
    """The one lifecycle of a capture, whoever captures its shards (``shards``: :class:`LocalShards`, or
    :class:`~countlens.llm.capture.distributed.RayShards`): refuse or resume the folder ``out``, check the disk,
    start the workers (the model loads), write ``meta.json`` unfinished, capture the missing shards, check
    that every one reads back, and mark the capture complete. A run refused before any work leaves no
    folder behind."""
    from tqdm.auto import tqdm

    out = Path(out)
    made = result_provenance(plan.config)
    old = existing_capture(out, plan.key)
    if old is not None and old.get("complete") and capture_is_whole(out):
        return shards.result(Capture.from_folder(out, made), [], 0.0)
    parts = plan.shards()
    done = ActivationWriter(out, old).finished_shards() & set(range(len(parts))) if old is not None else set()
    todo = {s: shard for s, shard in enumerate(parts) if s not in done}
    free = check_disk(plan, out, done)
    if notify is not None and plan.config.positions != "boundary":
        notify(plan.size_text(free))
    created = not out.exists()
    started = time.perf_counter()
    try:
        with shards.session(out):
            if todo:
                writer = ActivationWriter(out, shards.start(plan, len(todo)))
                # until every shard is back, the folder must not claim to be complete
                write_json_atomic(out / META, {**writer.meta, "complete": False})
                begun = time.perf_counter()
                with tqdm(total=len(plan.prompts), initial=len(plan.prompts) - sum(map(len, todo.values())),
                          unit="prompt", desc=shards.label, disable=not progress, smoothing=0.1) as bar:
                    shards.capture(plan, writer, todo, bar.update)
            else:  # every shard is there; only the completion mark was missing
                writer, begun = ActivationWriter(out, old), time.perf_counter()
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise
    missing = sorted(set(range(len(parts))) - writer.finished_shards())  # also drops killed writes' leftovers
    if missing:
        raise UsageError(f"shard(s) {', '.join(map(str, missing))} of {out} did not read back after capture; "
                         "rerun the same command to recompute them")
    writer.finish({"n_rows": plan.rows(), "capture_seconds": round(time.perf_counter() - begun, 3)})
    if not capture_is_whole(out):
        write_json_atomic(out / META, {**writer.meta, "complete": False})
        raise UsageError(f"{out} does not read back whole after capture; rerun the same command to resume")
    return shards.result(Capture.from_folder(out, made), sorted(todo), time.perf_counter() - started)


def find_pairs(config: CaptureConfig, candidates=CANDIDATE_PAIRS) -> dict[str, str | None]:
    """For each candidate pair, ``None`` if its items are one token each for ``config``'s model, wordings
    and template, else why not (only the tokenizer is loaded)."""
    tokenizer = load_tokenizer(config.model.resolve())
    return single_token_pairs(tokenizer, candidates, config.prompts.configs, config.prompts.template)


def _location_indices(spec: str | None, n_blocks: int) -> list[int] | None:
    """Sorted location indices of ``spec`` for a model of ``n_blocks`` blocks; ``None`` for all."""
    if spec is None or str(spec).strip() in ("", "all"):
        return None
    return sorted(residual_locations(spec, n_blocks))


def _settings_key(config: CaptureConfig, locations: list[int] | None) -> dict[str, Any]:
    """The resume key: everything that changes a row. Batch size and padding side do not (beyond float
    rounding), so a run may resume with another batch size."""
    spec = config.model
    name = spec.model
    if spec.model != DEFAULT_MODEL or spec.gguf_file:
        path = Path(spec.model).expanduser()
        name = str(path.resolve()) if path.exists() else spec.model
    key = {**config.prompts.to_dict(), "model": name, "gguf_file": spec.gguf_file, "model_dtype": spec.dtype,
           "dtype": config.acts_dtype, "backend": config.backend,
           "locations": "all" if locations is None else locations, "shard_rows": config.shard_rows}
    if spec.revision:
        key["revision"] = spec.revision
    if spec.trust_remote_code:
        key["trust_remote_code"] = True
    if config.positions != "boundary":
        key["positions"] = config.positions
    if config.answers:
        key["answer_tokens"] = int(config.answer_tokens)
        # the answer as a distribution over these counts: a folder from before it was recorded does not resume
        key["answer_candidates"] = [min(config.prompts.counts), max(config.prompts.counts)]
    if config.random_init:
        key["random_init_seed"] = int(config.init_seed)
    return key


def random_init_model(ref: ModelRef, tokenizer, seed: int, device: str = "cpu", dtype: str = "float32") -> LoadedModel:
    """The architecture of ``ref`` (its config, no weights read) with the weights its own initialisation
    draws under ``torch.manual_seed(seed)``, and ``ref``'s tokenizer: a probe baseline."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(int(seed))
    model = AutoModelForCausalLM.from_config(load_model_config(ref), dtype=getattr(torch, dtype),
                                             trust_remote_code=bool(ref.kwargs.get("trust_remote_code")))
    if device not in ("cpu", "auto"):
        model = model.to(device)
    model.eval()
    return LoadedModel(model=model, tokenizer=tokenizer, model_id=f"{ref.model_id} (random init, seed {int(seed)})",
                       location=ref.location, source={**ref.source, "random_init_seed": int(seed)}, dtype=dtype,
                       device=device)


def capture_spec(meta: CaptureMeta, device: str = "cpu") -> ModelSpec:
    """The :class:`~countlens.llm.models.ModelSpec` of the model a capture ran (its metadata ``meta``), on
    ``device``."""
    return ModelSpec(model=meta.model_name, gguf_file=meta.gguf_file, revision=meta.revision,
                     trust_remote_code=meta.trust_remote_code, device=device, dtype=meta.model_dtype)


def capture_model(meta: CaptureMeta, device: str = "cpu", progress: bool = False,
                  pool: ModelPool | None = None) -> LoadedModel:
    """The model a capture ran (its metadata ``meta``), random-initialised again where the capture was;
    in ``pool`` resolved, read and loaded once."""
    spec = capture_spec(meta, device)
    if meta.random_init_seed is not None:
        ref = spec.resolve(progress, pool=pool)
        return random_init_model(ref, load_tokenizer(ref, pool), meta.random_init_seed, spec.device, spec.dtype)
    return spec.load(progress, pool=pool)


def capture_prompts(meta: CaptureMeta) -> PromptSettings:
    """The prompt settings a capture was made with (its recorded resume key). A capture of a task that reads
    its prompts from a file (``file:``) recorded the records' digest: ``ConfigError`` naming ``acts`` where the
    file no longer holds those records, since prompts rebuilt from it would not be the captured ones."""
    settings = PromptSettings(**{k: meta.settings[k] for k in (*PromptSettings().to_dict(), "task")
                                 if k in meta.settings})
    recorded = meta.settings.get("task_digest")
    if recorded is not None and settings.counting_task().digest() != recorded:
        raise ConfigError("acts", f"{{acts}} was captured from the records of {literal(settings.task)}, which have "
                                  "changed since; capture again from the file as it is now")
    return settings


def capture_is_whole(out_dir: Path) -> bool:
    """Whether a capture folder marked complete loads whole (every shard readable, every row present)."""
    try:
        load_capture(out_dir)
    except UsageError:
        return False
    return True


# Every 4th location from the embeddings, and the last: a spec that fits any depth (SmolLM2-135M: 9 of 31).
ITEM_LOCATIONS = "0:-1:4,-1"

declare(Experiment(
    "capture", "Capture: assistant-boundary residual stream", CaptureConfig, run_capture, CaptureResult, order=100,
    presets={
        # Two of the four token pairs (one of letters, one of words; Figure 5 averages the pairs it has), one
        # wording and one seed: 202 prompts, each with the model's own answer (Figure 7's behaviour line). All
        # four pairs (404 prompts) took 222-503 s of make demo's 15 minutes, over its budget once the
        # organism, Figures 14-15 and the tasks joined it (BENCHMARKS.md); --full keeps all four.
        "quick": CaptureConfig(prompts=PromptSettings(L=256, counts=list(range(0, 101)), per_count=1, seeds=[0],
                                                      pairs=[["a", "b"], ["cat", "dog"]], configs=["count"]),
                               answers=True),
        # All four token pairs and every wording, three seeds (3,636 prompts).
        "full": CaptureConfig(prompts=PromptSettings(L=256, counts=list(range(0, 101)), per_count=1,
                                                     seeds=[0, 1, 2]), answers=True),
        "test": CaptureConfig(prompts=PromptSettings(L=16, counts=list(range(0, 13)), per_count=1, seeds=[0, 1],
                                                     pairs=[["a", "b"]], configs=["count"]),
                              answers=True, answer_tokens=3)},
    output="acts", places={"out": "acts"}, options={"progress": True},
    uses_model=lambda config: not config.random_init, study="model", cli="countlens.llm.capture.cli"))

declare(Experiment(
    "capture-items", "Capture at every item", CaptureConfig, run_capture, CaptureResult, order=170,
    presets={
        # Short lists (L = 24: every count 0..24 once per token pair), so every item is a row: 100 prompts,
        # 1,300 rows.
        "quick": CaptureConfig(prompts=PromptSettings(L=24, counts=list(range(0, 25)), per_count=1, seeds=[0],
                                                      configs=["count"]), locations=ITEM_LOCATIONS, positions="items"),
        # Lists to 64 items (260 prompts, ~8,700 rows at every 2nd location).
        "full": CaptureConfig(prompts=PromptSettings(L=64, counts=list(range(0, 65)), per_count=1, seeds=[0],
                                                     configs=["count"]),
                              locations="0:-1:2,-1", positions="items", shard_rows=64),
        "test": CaptureConfig(prompts=PromptSettings(L=8, counts=list(range(0, 9)), per_count=1, seeds=[0, 1],
                                                     pairs=[["a", "b"]], configs=["count"]),
                              locations=ITEM_LOCATIONS, positions="items")},
    output="acts", places={"out": "acts"}, options={"progress": True}, inherits=("model", "template", "batch_size", "task"),
    uses_model=True, study="where"))


__all__ = ["ACTS_DTYPES", "PADDING_SIDES", "SHARD_ROWS", "CaptureConfig", "CapturePlan",
           "plan_capture", "preflight_capture", "check_disk", "CaptureResult",
           "capture_runner", "run_capture", "LocalShards", "capture_lifecycle", "find_pairs", "capture_spec",
           "capture_model", "capture_prompts", "random_init_model", "capture_is_whole"]
