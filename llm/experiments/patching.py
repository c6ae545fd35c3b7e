"""Figure 9a, boundary activation patching: a :class:`PatchingConfig` in, a :class:`PatchingResult` out
(``patching.json`` and ``patching.csv``). The edit itself is :class:`countlens.llm.patching.BoundaryEdit`."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError
from countlens.core.locations import location_label, location_names
from countlens.core.results import Result, result_provenance
from countlens.llm.answers import ANSWER_TOKENS, answer_prompts
from countlens.llm.capture import BoundaryCapture, find_blocks, pad_batch, pad_token_id
from countlens.llm.experiments.capture import check_positive
from countlens.llm.experiments.options import ExperimentConfig
from countlens.llm.hooks import residual_locations
from countlens.llm.models import LoadedModel, ModelSpec
from countlens.llm.patching import edited_answers
from countlens.llm.prompts import PromptSettings, build_prompts


@dataclass
class PatchingConfig(ExperimentConfig):
    """Figure 9a: boundary activation patching. Pairs of prompts that differ only in count (same seed,
    wording, token pair and draw): target count ``targets[i]`` is patched with source count ``sources[i]`` at
    every location of ``locations`` (a spec for :func:`countlens.core.locations.resolve_locations`; default
    all), with ``model`` (:class:`~countlens.llm.models.ModelSpec`); each answer is at most
    ``answer_tokens`` greedy tokens. The default ``L = 64`` keeps the prompts short: the experiment costs
    one prompt pass per pair and location, and small counts are where a 135M model answers at all."""

    model: ModelSpec = field(default_factory=ModelSpec)
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
    answer_tokens: int = ANSWER_TOKENS

    def validate(self) -> PatchingConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run."""
        self.model.validate()
        if not self.sources or len(self.sources) != len(self.targets):
            raise ConfigError("sources", f"{{sources}} and {{targets}} must be equally long, non-empty count lists, "
                                         f"got {len(self.sources)} and {len(self.targets)}", also=("targets",))
        if int(self.L) < 1:
            raise ConfigError("L", f"{{L}} must be >= 1, got {self.L}")
        for name in ("sources", "targets"):
            counts = [int(c) for c in getattr(self, name)]
            if min(counts) < 0 or max(counts) > int(self.L):
                raise ConfigError(name, f"{{{name}}} must lie in 0..{self.L} (at most {{L}}), got "
                                        f"{min(counts)}..{max(counts)}", also=("L",))
        if any(int(s) == int(t) for s, t in zip(self.sources, self.targets, strict=True)):
            raise ConfigError("sources", "a source count equals its target count in {sources} and {targets}; a "
                                         "patch must change the count", also=("targets",))
        check_positive(self, "batch_size", "answer_tokens")
        self.prompt_settings().validate()
        return self

    def prompt_settings(self) -> PromptSettings:
        """The prompt set holding every source and target prompt."""
        return PromptSettings(L=int(self.L), counts=sorted({int(c) for c in [*self.sources, *self.targets]}),
                              per_count=int(self.per_count), pairs=[list(p) for p in self.pairs],
                              configs=list(self.configs), seeds=[int(s) for s in self.seeds],
                              template=self.template)


class RowsCSV:
    """For a result whose ``rows`` (records sharing their keys) are also written as the CSV file ``CSV``:
    one row per record, the first record's keys as the header."""

    CSV: ClassVar[str] = "rows.csv"

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        rows = self.rows
        header = list(rows[0]) if rows else []
        return {self.CSV: (header, [[r[k] for k in header] for r in rows])}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        return (cls.FILE, cls.CSV)


@dataclass
class PatchingResult(RowsCSV, Result):
    """Per location (``locations``): ``moved_to_source`` (fraction of patched answers equal to ``n_s``),
    ``mean_shift`` (mean patched − clean parsed answer, over rows where both parse), ``mean_relative_shift``
    (the same divided by ``n_s − n_t``: 1 = all the way to the source), ``logprob_change`` (mean change of
    the target's correct-answer log-probability, nats), ``parsed`` (patched answers that parse).
    ``rows``: one record per (pair of prompts, location), also written as ``patching.csv``."""

    FILE: ClassVar[str] = "patching.json"
    CSV: ClassVar[str] = "patching.csv"
    COMMAND: ClassVar[str] = "countlens llm patch"

    config: dict[str, Any]
    model: str
    clean_accuracy: float
    locations: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)


def answer_shift(after: int | None, before: int | None) -> int | None:
    """``after - before`` of two parsed answers, ``None`` where either did not parse."""
    return None if after is None or before is None else after - before


def mean_or_none(values) -> float | None:
    """The mean of the values that are not ``None``; ``None`` when none is left."""
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def run_patching(config: PatchingConfig, *, loaded: LoadedModel | None = None,
                 progress: bool = False) -> PatchingResult:
    """Figure 9a. One capture pass over the source prompts gives their boundary vectors; each (target,
    location) is then one patched prompt pass plus a few decode steps, batched across locations. Only the
    boundary position is patched (see :mod:`countlens.llm.patching`). ``loaded`` reuses a model already
    loaded from ``config.model``."""
    import torch

    config.validate()
    started = time.perf_counter()
    loaded = loaded or config.model.load(progress)
    model, tok = loaded.model, loaded.tokenizer
    n_blocks = len(find_blocks(model))
    names = location_names(n_blocks)
    locs = residual_locations(config.locations, n_blocks)
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
        clean = answer_prompts(model, tok, targets, config.template, config.batch_size, config.answer_tokens)
        edits = [(loc, "replace", vectors[i, j]) for j, loc in enumerate(locs) for i in range(len(pairs))]
        patched = edited_answers(model, tok, targets * len(locs), edits, config.template, config.batch_size,
                                 config.answer_tokens)
    rows, per_location = [], []
    for j, loc in enumerate(locs):
        mine = []
        for i, (src, tgt) in enumerate(pairs):
            r = j * len(pairs) + i
            shift = answer_shift(patched.answer[r], clean.answer[i])
            mine.append({"location": names[loc], "location_index": loc, "seed": tgt.seed, "config": tgt.config,
                         "pair": tgt.pair, "n_source": src.n, "n_target": tgt.n,
                         "clean_answer_text": clean.answer_text[i], "clean_answer": clean.answer[i],
                         "patched_answer_text": patched.answer_text[r], "patched_answer": patched.answer[r],
                         "shift": shift, "relative_shift": None if shift is None else shift / (src.n - tgt.n),
                         "logprob_change": patched.answer_logprob[r] - clean.answer_logprob[i]})
        rows.extend(mine)
        per_location.append({"name": names[loc], "index": loc, "label": location_label(names[loc]),
                             "moved_to_source": float(np.mean([r["patched_answer"] == r["n_source"] for r in mine])),
                             "mean_shift": mean_or_none(r["shift"] for r in mine),
                             "mean_relative_shift": mean_or_none(r["relative_shift"] for r in mine),
                             "logprob_change": mean_or_none(r["logprob_change"] for r in mine),
                             "parsed": sum(r["patched_answer"] is not None for r in mine)})
    return PatchingResult(config.to_dict(), loaded.model_id, clean.accuracy([t.n for t in targets]), per_location,
                          rows, round(time.perf_counter() - started, 3), result_provenance(config))


def boundary_vectors(model, tokenizer, prompts, locations: list[int], batch_size: int = 16):
    """(P, len(locations), d) float32 boundary vectors of ``prompts`` (left-padded batches)."""
    import torch

    pad_id = pad_token_id(tokenizer)
    device = model.get_input_embeddings().weight.device
    out = []
    with BoundaryCapture(model, locations) as cap:
        for start in range(0, len(prompts), batch_size):
            ids, mask, index = pad_batch(prompts[start:start + batch_size], pad_id, "left", device)
            out.append(cap.run(ids, mask, index))
    return torch.cat(out)


__all__ = ["PatchingConfig", "RowsCSV", "PatchingResult", "run_patching", "boundary_vectors", "answer_shift",
           "mean_or_none"]
