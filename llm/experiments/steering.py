"""Figure 9b, steering along the probe: a :class:`SteeringConfig` in (a capture folder and the probes fitted
on it), a :class:`SteeringResult` out (``steering.json`` and ``steering.csv``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from countlens.core.errors import ConfigError, UsageError, about, literal
from countlens.core.locations import resolve_location
from countlens.core.results import Result, result_provenance
from countlens.core.store import read_meta
from countlens.llm.answers import ANSWER_TOKENS, answer_prompts
from countlens.llm.experiments.capture import check_positive, random_init_model
from countlens.llm.experiments.options import ExperimentConfig
from countlens.llm.experiments.patching import RowsCSV, answer_shift, mean_or_none
from countlens.llm.models import LoadedModel, ModelSpec, check_device, load_tokenizer
from countlens.llm.patching import edited_answers, random_direction, steering_vector
from countlens.llm.prompts import PromptSettings, build_prompts

if TYPE_CHECKING:  # imported where used: it brings scikit-learn, which a capture never needs
    from countlens.probes.experiments import ProbeResult


@dataclass
class SteeringConfig(ExperimentConfig):
    """Figure 9b: steering along the probe. ``Δ · w / ‖w‖²`` is added at the boundary at the probe's location
    (``w``: the validation-selected ridge probe of ``probes``, fitted on the capture ``acts``, in native
    coordinates), for every Δ of ``deltas``, on the capture's prompts with counts ``counts`` (at most
    ``max_prompts``, spread over the counts); control: a random direction of the same norm (seed ``seed``).
    ``location``: a location name or index of the probe file (default its best location). The model is the
    capture's own, on ``device``; each answer is at most ``answer_tokens`` greedy tokens."""

    acts: str = ""
    probes: str = ""
    location: str | None = None
    deltas: list[float] = field(default_factory=lambda: [-8.0, -4.0, 0.0, 4.0, 8.0])
    counts: list[int] = field(default_factory=lambda: [4, 8, 12, 16])
    max_prompts: int = 6
    seed: int = 0
    batch_size: int = 16
    answer_tokens: int = ANSWER_TOKENS
    device: str = "cpu"

    def validate(self) -> SteeringConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run."""
        deltas = np.asarray(self.deltas, dtype=np.float64)
        if deltas.size == 0 or not np.all(np.isfinite(deltas)):
            raise ConfigError("deltas", "{deltas} must be a non-empty list of finite numbers, got "
                                        + literal(list(self.deltas)))
        if not self.counts or min(int(c) for c in self.counts) < 0:
            raise ConfigError("counts", f"{{counts}} must be a non-empty list of counts >= 0, got {list(self.counts)}")
        check_positive(self, "max_prompts", "batch_size", "answer_tokens")
        check_device(self.device)
        return self


@dataclass
class SteeringResult(RowsCSV, Result):
    """Per direction (``probe``, ``random``) and Δ (``curves``): ``mean_shift`` (mean steered − clean parsed
    answer over rows where both parse), ``mean_answer``, ``parsed``; ``probe_norm`` = ‖w‖ (native),
    ``readout_shift`` = the probe's read-out change per Δ (equal to Δ by construction). ``rows``: one record
    per (prompt, direction, Δ), also written as ``steering.csv``."""

    FILE: ClassVar[str] = "steering.json"
    CSV: ClassVar[str] = "steering.csv"
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


def probe_direction(probes: ProbeResult, meta: dict[str, Any], location: str | None) -> tuple[str, np.ndarray]:
    """(location name, native coefficients ``w`` (d,)) of the validation-selected probe of ``probes`` at
    ``location`` (default: its best location), checked against the capture's ``meta``;
    ``ConfigError("probes")`` for probes fitted on another capture (other model, locations, rows or width)
    or without coefficients, ``ConfigError("location")`` for a location the probes lack."""
    source, names = probes.source or {}, [loc.name for loc in probes.locations]
    mismatch = [what for what, ok in (
        ("model", source.get("model") == meta.get("model")),
        ("locations", bool(names) and set(names) <= set(meta.get("locations") or [])),
        ("rows", source.get("rows") in (meta.get("n_rows"), meta.get("n_prompts"))),
        ("width", source.get("d") == meta.get("d"))) if not ok]
    if mismatch:
        raise ConfigError("probes", f"{{probes}} holds probes fitted on another capture ({', '.join(mismatch)} "
                                    "differ); fit probes on this capture (`countlens probe` on {acts})",
                          also=("acts",))
    if location is None:
        chosen = probes.best_location()
    else:
        try:
            chosen = probes.locations[resolve_location(names, location)]
        except UsageError as exc:
            raise ConfigError("location", "{location}: " + literal(str(exc))) from None
    if not chosen.fits or chosen.fits[0].coef is None:
        raise ConfigError("probes", "{probes} holds no probe coefficients; refit it with `countlens probe`")
    return chosen.name, np.asarray(chosen.fits[0].coef, dtype=np.float64)


def capture_model(settings: dict[str, Any], device: str = "cpu", progress: bool = False) -> LoadedModel:
    """The model a capture ran, from its recorded settings (``meta["settings"]``), random-initialised again
    where the capture was."""
    spec = ModelSpec(model=settings["model"], gguf_file=settings.get("gguf_file"), revision=settings.get("revision"),
                     trust_remote_code=bool(settings.get("trust_remote_code")), device=device,
                     dtype=settings.get("model_dtype", "float32"))
    if "random_init_seed" in settings:
        ref = spec.resolve(progress)
        return random_init_model(ref, load_tokenizer(ref), settings["random_init_seed"], spec.device, spec.dtype)
    return spec.load(progress)


def run_steering(config: SteeringConfig, *, loaded: LoadedModel | None = None,
                 progress: bool = False) -> SteeringResult:
    """Figure 9b on the capture's own prompts (rebuilt from its recorded settings) with the capture's model
    (``loaded`` reuses it, already loaded)."""
    import torch

    from countlens.probes.experiments import ProbeResult

    config.validate()
    started = time.perf_counter()
    with about("acts"):
        meta = read_meta(config.acts)
    with about("probes"):
        probes = ProbeResult.read(config.probes)
    location, w = probe_direction(probes, meta, config.location)
    settings = meta["settings"]
    counts = [int(c) for c in config.counts if int(c) in settings["counts"]]
    if not counts:
        raise ConfigError("counts", f"none of {{counts}} {list(config.counts)} is in the capture (its counts: "
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
        clean = answer_prompts(model, tok, prompts, settings["template"], config.batch_size, config.answer_tokens)
        # ‖random‖ = ‖w‖, so each step is Δ · direction / ‖w‖²
        edits = [(loc, "add", steering_vector(directions[d], delta)) for d, delta in groups for _ in prompts]
        steered = edited_answers(model, tok, prompts * len(groups), edits, settings["template"],
                                 config.batch_size, config.answer_tokens)
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[dict[str, Any]]] = {d: [] for d in directions}
    for g, (d, delta) in enumerate(groups):
        mine = []
        for i, p in enumerate(prompts):
            r = g * len(prompts) + i
            mine.append({"direction": d, "delta": delta, "seed": p.seed, "config": p.config, "pair": p.pair,
                         "n": p.n, "clean_answer": clean.answer[i], "steered_answer_text": steered.answer_text[r],
                         "steered_answer": steered.answer[r], "shift": answer_shift(steered.answer[r], clean.answer[i])})
        rows.extend(mine)
        curves[d].append({"delta": delta, "mean_shift": mean_or_none(r["shift"] for r in mine),
                          "mean_answer": mean_or_none(r["steered_answer"] for r in mine),
                          "parsed": sum(r["steered_answer"] is not None for r in mine),
                          "readout_shift": float(w @ steering_vector(directions[d], delta))})
    return SteeringResult(config.to_dict(), loaded.model_id, location, float(np.linalg.norm(w)),
                          clean.accuracy([p.n for p in prompts]), curves, rows,
                          round(time.perf_counter() - started, 3), result_provenance(config))


__all__ = ["SteeringConfig", "SteeringResult", "probe_direction", "capture_model", "run_steering"]
