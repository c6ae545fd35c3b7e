"""The capture experiment: a :class:`CaptureConfig` in, an activation folder and its :class:`CaptureResult` out.

:func:`plan_capture` does everything that needs only the tokenizer and the model's config — resolve the
model (hub revision included), build and check the prompts (chat template, items, boundary), resolve the
locations, check the context length — so a capture that cannot work is refused before any weights are
read; :func:`preflight_capture` is that check alone. :func:`run_capture` then loads the weights and writes
the folder shard by shard (``countlens.core.store``), resuming the shards an interrupted run left.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import UsageError
from countlens.core.io import provenance, read_json, to_jsonable, write_csv_atomic, write_json_atomic
from countlens.core.locations import location_label, location_names, resolve_location, resolve_locations
from countlens.core.store import ActivationWriter, existing_capture, load_capture, read_meta
from countlens.llm.answers import ANSWER_TOKENS, answer_prompts, answering_runner, check_generation_prompt
from countlens.llm.capture import (
    BACKENDS,
    BoundaryCapture,
    capture_shard,
    context_length,
    find_blocks,
    length_sorted,
    model_facts,
    n_blocks_of,
    pad_batch,
    shard_runner,
)
from countlens.llm.models import (
    DEFAULT_MODEL,
    DTYPES,
    LoadedModel,
    ModelRef,
    load_model,
    load_model_config,
    load_tokenizer,
    resolve_model,
)
from countlens.llm.patching import edited_answers, random_direction, steering_vector
from countlens.llm.prompts import (
    CANDIDATE_PAIRS,
    CONFIGURATIONS,
    DEFAULT_COUNTS,
    DEFAULT_L,
    DEFAULT_PAIRS,
    DEFAULT_SEEDS,
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
class CaptureConfig:
    """Everything that fixes a capture (docs/definitions.md §2); the command line's defaults are these.

    ``model``: ``"default"`` (the embedded SmolLM2-135M-Instruct), a folder, a ``.gguf`` file or a hub id;
    ``revision`` a hub branch, tag or commit. Prompts: ``len(counts) * per_count * len(pairs) *
    len(configs) * len(seeds)``, ``n + m <= L`` items each. ``locations``: which residual locations to keep
    (names, indices incl. ``-1``, ranges ``0:5``, ``all``; ``None`` = all); the forward pass stops after
    the last one. ``dtype`` is the model's compute dtype, ``acts_dtype`` the stored one. Rows are written
    in shards of ``shard_rows`` prompts, the unit an interrupted run resumes from; ``batch_size`` and
    ``padding_side`` change the vectors only by float rounding.

    ``answers`` also records the model's own answer to every prompt (columns ``answer_text``, ``answer``,
    ``answer_logprob``; :mod:`countlens.llm.answers`), up to ``answer_tokens`` greedy tokens decoded from the
    capture's own prompt pass (its KV cache) — which is why answers are a capture option rather than a pass
    over an existing capture: they cost a few decode steps, not a second prompt pass. The whole model then
    runs (no early stop) in left-padded batches. ``random_init`` captures a model of the same architecture
    and tokenizer with freshly initialised weights (seed ``init_seed``): the baseline a probe must beat.
    """

    model: str = DEFAULT_MODEL
    gguf_file: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    L: int = DEFAULT_L
    counts: list[int] = field(default_factory=lambda: list(DEFAULT_COUNTS))
    per_count: int = 1
    pairs: list[list[str]] = field(default_factory=lambda: [list(p) for p in DEFAULT_PAIRS])
    configs: list[str] = field(default_factory=lambda: list(CONFIGURATIONS))
    seeds: list[int] = field(default_factory=lambda: list(DEFAULT_SEEDS))
    template: str = "chat"
    locations: str | None = None
    batch_size: int = 16
    backend: str = "hf"
    device: str = "cpu"
    dtype: str = "float32"
    acts_dtype: str = "float32"
    padding_side: str = "right"
    shard_rows: int = SHARD_ROWS
    answers: bool = False
    answer_tokens: int = ANSWER_TOKENS
    random_init: bool = False
    init_seed: int = 0

    def prompt_settings(self) -> PromptSettings:
        return PromptSettings(L=int(self.L), counts=[int(c) for c in self.counts], per_count=int(self.per_count),
                              pairs=[list(p) for p in self.pairs], configs=list(self.configs),
                              seeds=[int(s) for s in self.seeds], template=self.template)

    def validate(self) -> CaptureConfig:
        """Raise :class:`UsageError` (worded with the field names) for a config that cannot run."""
        self.prompt_settings().validate()
        choices = {"backend": BACKENDS, "dtype": DTYPES, "acts_dtype": ACTS_DTYPES, "padding_side": PADDING_SIDES}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise UsageError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("batch_size", "shard_rows", "answer_tokens"):
            if int(getattr(self, name)) < 1:
                raise UsageError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.answers and self.backend != "hf":
            raise UsageError("answers need backend hf (the answer is decoded from the capture's own prompt pass)")
        return self

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaptureConfig:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


# Config field -> command-line flag, for wording this room's errors on the command line
# (``countlens.core.args.reword``); ``model`` is left out because the word also means the model itself.
FLAGS = {f.name: "--" + f.name.replace("_", "-") for f in fields(CaptureConfig) if f.name != "model"}
FLAGS['template="plain"'] = "--template plain"


@dataclass
class CapturePlan:
    """A checked capture before any weights are read: where the model is, its tokenizer, the prompts
    (length-sorted), the location indices (``None`` = all), the resume key and the context length."""

    config: CaptureConfig
    ref: ModelRef
    tokenizer: Any
    prompts: list[Prompt]
    locations: list[int] | None
    key: dict[str, Any]
    n_blocks: int

    def meta(self, facts: dict[str, Any]) -> dict[str, Any]:
        """The capture's ``meta.json`` given the loaded model's :func:`~countlens.llm.capture.model_facts`."""
        c, settings = self.config, self.config.prompt_settings()
        return {
            **facts, "dtype": c.acts_dtype, "backend": c.backend, "settings": self.key,
            "token_pairs": settings.pairs, "configurations": {k: CONFIGURATIONS[k] for k in settings.configs},
            "seeds": settings.seeds, "L": settings.L, "counts": settings.counts, "per_count": settings.per_count,
            "template": settings.template, "boundary": boundary_tokens(self.tokenizer, self.prompts[0]),
            "n_prompts": len(self.prompts), "shard_rows": c.shard_rows, "max_tokens": self.prompts[-1].n_tokens,
            "provenance": provenance({"settings": self.key, "batch_size": c.batch_size,
                                      "padding_side": c.padding_side, "device": c.device}),
        }

    def shards(self) -> list[list[Prompt]]:
        """The prompts in shards of ``shard_rows``, in the order they are written."""
        rows = self.config.shard_rows
        return [self.prompts[i:i + rows] for i in range(0, len(self.prompts), rows)]


def plan_capture(config: CaptureConfig, progress: bool = True) -> CapturePlan:
    """Resolve and check ``config`` from the tokenizer and the model's config alone (no weights are read).

    Raises :class:`UsageError` for an unknown model or revision, a missing chat template, items that are
    not one token each, a generation prompt that differs between prompts, locations the model lacks, or a
    prompt longer than the model's context.
    """
    config.validate()
    ref = resolve_model(config.model, config.gguf_file, config.revision, config.trust_remote_code, progress)
    tokenizer = load_tokenizer(ref)
    model_config = load_model_config(ref)
    n_blocks = n_blocks_of(model_config)
    locations = _location_indices(config.locations, n_blocks)
    if config.answers:
        check_generation_prompt(tokenizer, config.template)
    prompts = length_sorted(build_prompts(tokenizer, config.prompt_settings()))
    n_ctx, longest = context_length(model_config), prompts[-1].n_tokens
    if n_ctx is not None and longest > n_ctx:
        raise UsageError(f"the longest prompt has {longest} tokens but the model's context is {n_ctx}; lower L")
    return CapturePlan(config, ref, tokenizer, prompts, locations, _settings_key(config, locations), n_blocks)


def preflight_capture(config: CaptureConfig, out: str | Path | None = None, progress: bool = True) -> None:
    """Every check of :func:`plan_capture`, and (given ``out``) that ``out`` is empty or holds this same
    capture; raises :class:`UsageError`, reads no weights, writes nothing."""
    plan = plan_capture(config, progress)
    if out is not None:
        existing_capture(out, plan.key)


@dataclass
class CaptureResult:
    """A finished capture: its folder, its ``meta.json`` and its number of rows (prompts)."""

    folder: Path
    meta: dict[str, Any]
    n_rows: int

    def to_dict(self) -> dict[str, Any]:
        return {"folder": str(self.folder), "n_rows": self.n_rows, "meta": self.meta}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CaptureResult:
        return cls(Path(data["folder"]), data["meta"], int(data["n_rows"]))

    @classmethod
    def from_folder(cls, folder: str | Path) -> CaptureResult:
        meta = read_meta(folder)
        return cls(Path(folder), meta, int(meta.get("n_rows", meta.get("n_prompts", 0))))


def capture_runner(plan: CapturePlan, loaded: LoadedModel | None = None, progress: bool = True):
    """(the model, the :class:`~countlens.llm.capture.ShardRunner` that captures its shards) for ``plan``:
    the one way a single process and each Ray worker (:mod:`countlens.llm.distributed`) set up a capture.
    ``loaded`` reuses an already loaded model; otherwise the weights load (or are drawn, ``random_init``)."""
    config = plan.config
    if loaded is None and config.random_init:
        loaded = random_init_model(plan.ref, plan.tokenizer, config.init_seed, config.device, config.dtype)
    elif loaded is None:
        loaded = load_model(plan.ref, device=config.device, dtype=config.dtype, progress=progress,
                            tokenizer=plan.tokenizer)
    if config.answers:
        runner = answering_runner(loaded, plan.locations, config.batch_size, config.answer_tokens, config.template)
    else:
        runner = shard_runner(loaded, plan.locations, config.backend, config.padding_side, config.batch_size)
    return loaded, runner


def run_capture(config: CaptureConfig, out: str | Path, loaded: LoadedModel | None = None,
                progress: bool = True) -> CaptureResult:
    """Capture the boundary residual stream of every prompt of ``config`` into the folder ``out``.

    ``loaded`` reuses a model already loaded with :func:`~countlens.llm.models.load_model` from
    ``config.model``. A finished capture with the same settings is returned as it is; an interrupted one
    resumes from its finished shards; a folder holding anything else is refused (:class:`UsageError`),
    all before the weights load.
    """
    from tqdm.auto import tqdm

    plan = plan_capture(config, progress)
    out = Path(out)
    old = existing_capture(out, plan.key)
    if old is not None and old.get("complete") and capture_is_whole(out):
        return CaptureResult.from_folder(out)
    loaded, runner = capture_runner(plan, loaded, progress)
    writer = ActivationWriter(out, plan.meta(model_facts(loaded, runner.names)))
    shards = plan.shards()
    done = writer.finished_shards() & set(range(len(shards)))  # drops corrupted shards and temporary folders
    if len(done) < len(shards):
        # until every shard is back, the folder must not claim to be complete
        write_json_atomic(out / "meta.json", {**writer.meta, "complete": False})
    started = time.perf_counter()
    bar = tqdm(total=len(plan.prompts), initial=sum(len(shards[i]) for i in done), unit="prompt",
               desc="capture", disable=not progress, smoothing=0.1)
    try:
        for s, shard in enumerate(shards):
            if s not in done:
                writer.write_shard(s, capture_shard(runner, shard, bar.update))
    finally:
        bar.close()
    writer.finish({"n_rows": len(plan.prompts), "capture_seconds": round(time.perf_counter() - started, 3)})
    return CaptureResult.from_folder(out)


def find_pairs(config: CaptureConfig, candidates=CANDIDATE_PAIRS) -> dict[str, str | None]:
    """For each candidate pair, ``None`` if its items are one token each for ``config``'s model, wordings
    and template, else why not (only the tokenizer is loaded)."""
    config.prompt_settings().validate()
    ref = resolve_model(config.model, config.gguf_file, config.revision, config.trust_remote_code)
    return single_token_pairs(load_tokenizer(ref), candidates, config.configs, config.template)


def _location_indices(spec: str | None, n_blocks: int) -> list[int] | None:
    """Sorted location indices of ``spec`` for a model of ``n_blocks`` blocks; ``None`` for all."""
    if spec is None or str(spec).strip() in ("", "all"):
        return None
    try:
        return sorted(resolve_locations(location_names(n_blocks), spec))
    except UsageError as exc:
        raise UsageError(f"locations: {exc}") from None


def _settings_key(config: CaptureConfig, locations: list[int] | None) -> dict[str, Any]:
    """The resume key: everything that changes a row. Batch size and padding side do not (beyond float
    rounding), so a run may resume with another batch size."""
    spec = config.model
    if config.model != DEFAULT_MODEL or config.gguf_file:
        path = Path(config.model).expanduser()
        spec = str(path.resolve()) if path.exists() else config.model
    key = {**config.prompt_settings().to_dict(), "model": spec, "gguf_file": config.gguf_file,
           "model_dtype": config.dtype, "dtype": config.acts_dtype, "backend": config.backend,
           "locations": "all" if locations is None else locations, "shard_rows": config.shard_rows}
    if config.revision:
        key["revision"] = config.revision
    if config.trust_remote_code:
        key["trust_remote_code"] = True
    if config.answers:
        key["answer_tokens"] = int(config.answer_tokens)
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


def capture_is_whole(out_dir: Path) -> bool:
    """Whether a capture folder marked complete loads whole (every shard readable, every row present)."""
    try:
        load_capture(out_dir)
    except UsageError:
        return False
    return True



# ---------------------------------------------------------------------------------- Figure 9: behaviour

def _check_decoding(batch_size: int, max_new_tokens: int) -> None:
    for name, value in (("batch_size", batch_size), ("max_new_tokens", max_new_tokens)):
        if int(value) < 1:
            raise UsageError(f"{name} must be >= 1, got {value}")


@dataclass
class PatchingConfig:
    """Figure 9a: boundary activation patching. Pairs of prompts that differ only in count (same seed,
    wording, token pair and draw): target count ``targets[i]`` is patched with source count ``sources[i]`` at
    every location of ``locations`` (a spec for :func:`countlens.core.locations.resolve_locations`; default all).
    The default ``L = 64`` keeps the prompts short: the experiment costs one prompt pass per pair and
    location, and small counts are where a 135M model answers at all."""

    model: str = DEFAULT_MODEL
    gguf_file: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    L: int = 64
    sources: list[int] = field(default_factory=lambda: [12, 9, 6, 3])
    targets: list[int] = field(default_factory=lambda: [3, 6, 9, 12])
    per_count: int = 1
    pairs: list[list[str]] = field(default_factory=lambda: [["a", "b"]])
    configs: list[str] = field(default_factory=lambda: ["count"])
    seeds: list[int] = field(default_factory=lambda: [0])
    template: str = "chat"
    locations: str | None = None
    batch_size: int = 16
    max_new_tokens: int = ANSWER_TOKENS
    device: str = "cpu"
    dtype: str = "float32"

    def validate(self) -> PatchingConfig:
        if not self.sources or len(self.sources) != len(self.targets):
            raise UsageError(f"sources and targets must be equally long, non-empty count lists, got "
                             f"{len(self.sources)} and {len(self.targets)}")
        if any(int(s) == int(t) for s, t in zip(self.sources, self.targets, strict=True)):
            raise UsageError("a source count equals its target count; a patch must change the count")
        _check_decoding(self.batch_size, self.max_new_tokens)
        self.prompt_settings()
        return self

    def prompt_settings(self) -> PromptSettings:
        return PromptSettings(L=int(self.L), counts=sorted({int(c) for c in [*self.sources, *self.targets]}),
                              per_count=int(self.per_count), pairs=[list(p) for p in self.pairs],
                              configs=list(self.configs), seeds=[int(s) for s in self.seeds],
                              template=self.template).validate()


class _RowsResult:
    """What the two Figure 9 results share: ``to_dict``, ``from_dict`` (a one-line error naming the command
    that writes the file) and ``save(path)``: the JSON at ``path`` and beside it the same name in ``.csv``,
    one row per record of ``rows``."""

    FILE = ""
    COMMAND = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        return _from_dict(cls, data, cls.FILE, cls.COMMAND)

    def save(self, path: str | Path) -> list[Path]:
        return _save_rows(self, Path(path))


@dataclass
class PatchingResult(_RowsResult):
    """Per location (``locations``): ``moved_to_source`` (fraction of patched answers equal to ``n_s``),
    ``mean_shift`` (mean patched − clean parsed answer, over rows where both parse), ``mean_relative_shift``
    (the same divided by ``n_s − n_t``: 1 = all the way to the source), ``logprob_change`` (mean change of
    the target's correct-answer log-probability, nats), ``parsed`` (patched answers that parse).
    ``rows``: one record per (pair of prompts, location)."""

    FILE: ClassVar[str] = "patching.json"
    COMMAND: ClassVar[str] = "countlens llm patch"

    config: dict[str, Any]
    model: str
    clean_accuracy: float
    locations: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)



def _from_dict(cls, data: dict[str, Any], name: str, command: str):
    known = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise UsageError(f"not a {name} written by `{command}` ({exc})") from None


def _save_rows(result, path: Path) -> list[Path]:
    header = list(result.rows[0]) if result.rows else []
    return [write_json_atomic(path, result.to_dict()),
            write_csv_atomic(path.with_suffix(".csv"), header, [[r[k] for k in header] for r in result.rows])]


def _shift(after: int | None, before: int | None) -> int | None:
    return None if after is None or before is None else after - before


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def run_patching(config: PatchingConfig, loaded: LoadedModel | None = None, progress: bool = False) -> PatchingResult:
    """Figure 9a. One capture pass over the source prompts gives their boundary vectors; each (target,
    location) is then one patched prompt pass plus a few decode steps, batched across locations. Only the
    boundary position is patched (see :mod:`countlens.llm.patching`)."""
    import torch

    config.validate()
    started = time.perf_counter()
    loaded = loaded or load_model(config.model, config.gguf_file, config.device, config.dtype, progress,
                                  config.revision, config.trust_remote_code)
    model, tok = loaded.model, loaded.tokenizer
    names = location_names(len(find_blocks(model)))
    locs = resolve_locations(names, config.locations)
    prompts, seen = {}, Counter()
    for p in build_prompts(tok, config.prompt_settings()):
        group = (p.seed, p.config, p.pair, p.n)
        prompts[(*group, seen[group])] = p
        seen[group] += 1
    pairs = [(prompts[(s, c, pr, int(n_s), k)], p) for n_s, n_t in zip(config.sources, config.targets, strict=True)
             for (s, c, pr, n, k), p in prompts.items() if n == int(n_t)]
    targets = [t for _, t in pairs]
    with torch.inference_mode():
        vectors = boundary_vectors(model, tok, [s for s, _ in pairs], locs, config.batch_size)  # (P, locs, d)
        clean = answer_prompts(model, tok, targets, config.template, config.batch_size, config.max_new_tokens)
        edits = [(loc, "replace", vectors[i, j]) for j, loc in enumerate(locs) for i in range(len(pairs))]
        patched = edited_answers(model, tok, targets * len(locs), edits, config.template, config.batch_size,
                                 config.max_new_tokens)
    rows, per_location = [], []
    for j, loc in enumerate(locs):
        mine = []
        for i, (src, tgt) in enumerate(pairs):
            r = j * len(pairs) + i
            shift = _shift(patched.answer[r], clean.answer[i])
            mine.append({"location": names[loc], "location_index": loc, "seed": tgt.seed, "config": tgt.config,
                         "pair": tgt.pair, "n_source": src.n, "n_target": tgt.n,
                         "clean_answer_text": clean.answer_text[i], "clean_answer": clean.answer[i],
                         "patched_answer_text": patched.answer_text[r], "patched_answer": patched.answer[r],
                         "shift": shift, "relative_shift": None if shift is None else shift / (src.n - tgt.n),
                         "logprob_change": patched.answer_logprob[r] - clean.answer_logprob[i]})
        rows.extend(mine)
        per_location.append({"name": names[loc], "index": loc, "label": location_label(names[loc]),
                             "moved_to_source": float(np.mean([r["patched_answer"] == r["n_source"] for r in mine])),
                             "mean_shift": _mean(r["shift"] for r in mine),
                             "mean_relative_shift": _mean(r["relative_shift"] for r in mine),
                             "logprob_change": _mean(r["logprob_change"] for r in mine),
                             "parsed": sum(r["patched_answer"] is not None for r in mine)})
    cfg = to_jsonable(asdict(config))
    return PatchingResult(cfg, loaded.model_id, clean.accuracy([t.n for t in targets]), per_location, rows,
                          round(time.perf_counter() - started, 3), provenance(cfg))


def boundary_vectors(model, tokenizer, prompts, locations: list[int], batch_size: int = 16):
    """(P, len(locations), d) float32 boundary vectors of ``prompts`` (left-padded batches)."""
    import torch

    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    device = model.get_input_embeddings().weight.device
    out = []
    with BoundaryCapture(model, locations) as cap:
        for start in range(0, len(prompts), batch_size):
            ids, mask, index = pad_batch(prompts[start:start + batch_size], pad_id, "left", device)
            out.append(cap.run(ids, mask, index))
    return torch.cat(out)


@dataclass
class SteeringConfig:
    """Figure 9b: steering along the probe. ``Δ · w / ‖w‖²`` is added at the boundary at the probe's location
    (``w``: the validation-selected ridge probe of ``probes``, fitted on the capture ``acts``, in native
    coordinates), for every Δ of ``deltas``, on the capture's prompts with counts ``counts`` (at most
    ``max_prompts``, spread over the counts); control: a random direction of the same norm (seed ``seed``).
    ``location``: a location name or index of the probe file (default its best location)."""

    acts: str = ""
    probes: str = ""
    location: str | None = None
    deltas: list[float] = field(default_factory=lambda: [-8.0, -4.0, 0.0, 4.0, 8.0])
    counts: list[int] = field(default_factory=lambda: [4, 8, 12, 16])
    max_prompts: int = 6
    seed: int = 0
    batch_size: int = 16
    max_new_tokens: int = ANSWER_TOKENS
    device: str = "cpu"

    def validate(self) -> SteeringConfig:
        deltas = np.asarray(self.deltas, dtype=np.float64)
        if deltas.size == 0 or not np.all(np.isfinite(deltas)):
            raise UsageError(f"deltas must be a non-empty list of finite numbers, got {list(self.deltas)}")
        if not self.counts or min(int(c) for c in self.counts) < 0:
            raise UsageError(f"counts must be a non-empty list of counts >= 0, got {list(self.counts)}")
        if int(self.max_prompts) < 1:
            raise UsageError(f"max_prompts must be >= 1, got {self.max_prompts}")
        _check_decoding(self.batch_size, self.max_new_tokens)
        return self


@dataclass
class SteeringResult(_RowsResult):
    """Per direction (``probe``, ``random``) and Δ (``curves``): ``mean_shift`` (mean steered − clean parsed
    answer over rows where both parse), ``mean_answer``, ``parsed``; ``probe_norm`` = ‖w‖ (native),
    ``readout_shift`` = the probe's read-out change per Δ (equal to Δ by construction). ``rows``: one record
    per (prompt, direction, Δ)."""

    FILE: ClassVar[str] = "steering.json"
    COMMAND: ClassVar[str] = "countlens llm steer"

    config: dict[str, Any]
    model: str
    location: str
    probe_norm: float
    clean_accuracy: float
    curves: dict[str, list[dict[str, Any]]]
    rows: list[dict[str, Any]]
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)



def probe_direction(probes: dict[str, Any], meta: dict[str, Any], location: str | None) -> tuple[str, np.ndarray]:
    """(location name, native coefficients ``w`` (d,)) of the validation-selected probe of a ``probes.json``
    dict, checked against the capture's ``meta``; :class:`UsageError` for a probe file from another capture
    (other model, locations, rows or width) or one without coefficients."""
    source, names = probes.get("source") or {}, [loc.get("name") for loc in probes.get("locations") or []]
    mismatch = [what for what, ok in (
        ("model", source.get("model") == meta.get("model")),
        ("locations", bool(names) and set(names) <= set(meta.get("locations") or [])),
        ("rows", source.get("rows") in (meta.get("n_rows"), meta.get("n_prompts"))),
        ("width", source.get("d") == meta.get("d"))) if not ok]
    if mismatch:
        raise UsageError(f"the probe file was fitted on another capture ({', '.join(mismatch)} differ); "
                         "fit probes on this capture with `countlens probe --acts DIR`")
    name = probes.get("best_location") if location is None else names[resolve_location(names, location)]
    fits = next(loc for loc in probes["locations"] if loc["name"] == name)["fits"]
    if not fits or fits[0].get("coef") is None:
        raise UsageError("the probe file holds no probe coefficients; refit it with `countlens probe`")
    return name, np.asarray(fits[0]["coef"], dtype=np.float64)


def capture_model(settings: dict[str, Any], device: str = "cpu", progress: bool = False) -> LoadedModel:
    """The model a capture ran, from its recorded settings (``meta["settings"]``), random-initialised again
    where the capture was."""
    name, gguf, revision = settings["model"], settings.get("gguf_file"), settings.get("revision")
    trust, dtype = bool(settings.get("trust_remote_code")), settings.get("model_dtype", "float32")
    if "random_init_seed" in settings:
        ref = resolve_model(name, gguf, revision, trust, progress)
        return random_init_model(ref, load_tokenizer(ref), settings["random_init_seed"], device, dtype)
    return load_model(name, gguf, device, dtype, progress, revision, trust)


def run_steering(config: SteeringConfig, loaded: LoadedModel | None = None, progress: bool = False) -> SteeringResult:
    """Figure 9b on the capture's own prompts (rebuilt from its recorded settings) with the capture's model."""
    import torch

    config.validate()
    started = time.perf_counter()
    meta = read_meta(config.acts)
    location, w = probe_direction(read_json(config.probes, "probe file"), meta, config.location)
    settings = meta["settings"]
    counts = [int(c) for c in config.counts if int(c) in settings["counts"]]
    if not counts:
        raise UsageError(f"none of counts {list(config.counts)} is in the capture (its counts: "
                         f"{settings['counts'][0]}..{settings['counts'][-1]})")
    if loaded is None:
        loaded = capture_model(settings, config.device, progress)
    model, tok = loaded.model, loaded.tokenizer
    prompt_settings = PromptSettings(**{**{k: settings[k] for k in PromptSettings().to_dict()}, "counts": counts})
    prompts = build_prompts(tok, prompt_settings)
    prompts = [prompts[i] for i in np.linspace(0, len(prompts) - 1, min(config.max_prompts, len(prompts))).astype(int)]
    loc = meta["locations"].index(location)
    directions = {"probe": w, "random": random_direction(w, config.seed)}
    groups = [(d, float(delta)) for d in directions for delta in config.deltas]
    with torch.inference_mode():
        clean = answer_prompts(model, tok, prompts, settings["template"], config.batch_size, config.max_new_tokens)
        # ‖random‖ = ‖w‖, so each step is Δ · direction / ‖w‖²
        edits = [(loc, "add", steering_vector(directions[d], delta)) for d, delta in groups for _ in prompts]
        steered = edited_answers(model, tok, prompts * len(groups), edits, settings["template"],
                                 config.batch_size, config.max_new_tokens)
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, Any]]] = {d: [] for d in directions}
    for g, (d, delta) in enumerate(groups):
        mine = []
        for i, p in enumerate(prompts):
            r = g * len(prompts) + i
            mine.append({"direction": d, "delta": delta, "seed": p.seed, "config": p.config, "pair": p.pair,
                         "n": p.n, "clean_answer": clean.answer[i], "steered_answer_text": steered.answer_text[r],
                         "steered_answer": steered.answer[r], "shift": _shift(steered.answer[r], clean.answer[i])})
        rows.extend(mine)
        curves[d].append({"delta": delta, "mean_shift": _mean(r["shift"] for r in mine),
                          "mean_answer": _mean(r["steered_answer"] for r in mine),
                          "parsed": sum(r["steered_answer"] is not None for r in mine),
                          "readout_shift": float(w @ steering_vector(directions[d], delta))})
    cfg = to_jsonable(asdict(config))
    return SteeringResult(cfg, loaded.model_id, location, float(np.linalg.norm(w)),
                          clean.accuracy([p.n for p in prompts]), curves, rows,
                          round(time.perf_counter() - started, 3), provenance(cfg))


__all__ = ["ACTS_DTYPES", "PADDING_SIDES", "SHARD_ROWS", "CaptureConfig", "FLAGS", "CapturePlan", "plan_capture",
           "preflight_capture", "CaptureResult", "capture_runner", "run_capture", "find_pairs", "random_init_model",
           "PatchingConfig", "PatchingResult", "run_patching", "boundary_vectors", "SteeringConfig",
           "SteeringResult", "probe_direction", "capture_model", "run_steering"]
