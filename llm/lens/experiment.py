"""Figure 13, lenses at the boundary: a :class:`LensConfig` in (a capture folder, and optionally the probes
fitted on it), a :class:`LensResult` out (``lens.json``, ``lens.csv`` and ``angles.csv``). The numerics are
in :mod:`countlens.llm.lens.readout`.

No prompt is run: the capture already holds every location's boundary vector, and the model's own
next-token logits at the boundary are its last location read through its final norm and unembedding. The
model is loaded for its head only (the final norm and the output embedding) — but where every candidate answer
begins with the same tokens (the plain template's space token before the digits, on tokenizers that write it
alone), the boundary's next token cannot tell the counts apart: the capture's prompts then run again with those
tokens appended, and every location is read at the last of them (:func:`prefixed_vectors`; ``read_at`` says
where)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from countlens.core.args import ints_text
from countlens.core.capture import Capture, CaptureMeta, open_capture
from countlens.core.errors import ConfigError, about, literal
from countlens.core.fields import AtLeast, Checked, Fractions, Ints, Numbers, Optional, Text, check_fields
from countlens.core.locations import location_label, location_names, resolve_locations
from countlens.core.options import ExperimentConfig
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import blas_threads, torch_threads
from countlens.llm.answers import candidate_token_ids
from countlens.llm.lens.readout import (
    FirstTokens,
    answer_rank,
    candidate_kl,
    check_unembedding,
    count_slope,
    direction_cosines,
    first_logits,
    first_tokens,
    fit_tuned_lens,
    output_head,
    random_baseline,
    random_directions,
    read_through,
    readout_summary,
)
from countlens.llm.models import LoadedModel, ModelPool, check_device, load_model_config, load_tokenizer

if TYPE_CHECKING:
    from countlens.probes import ProbeResult

LENSES = ("logit", "tuned")
TUNED_ALPHAS = tuple(np.logspace(-4, 2, 13).tolist())  # relative ridge coefficients (multiples of n_train)
PREFIXED_BATCH = 8  # prompts per pass where the lens runs them again with the answers' shared tokens appended
LENS_FRACTIONS = (0.6, 0.2, 0.2)  # the probes' train / validation / test split (countlens.probes.split_rows)


@dataclass
class LensConfig(ExperimentConfig):
    """Figure 13: the boundary vector of every location of the capture ``acts`` (``locations``: a spec for
    :func:`countlens.core.locations.resolve_locations` over the capture's locations; default all) read
    through the capture's model's final norm and unembedding (the logit lens) and through a tuned lens (an
    affine map to the last location, fitted by ridge on the training prompts at each relative α of
    ``alphas``, α chosen on the validation prompts; ``fractions`` and ``seed``: the probes' split rule), both
    scored on the test prompts. Candidate answers: the counts ``counts`` (default: the capture's count range).
    The count directions — the ridge probes of ``probes`` (optional: a ``probes.json`` fitted on this
    capture) and the mean-difference direction — are compared with the number tokens' unembedding rows,
    against ``baseline_directions`` random directions. The model's head runs on ``device``; the work uses
    at most ``threads`` torch and BLAS threads (``None``: the process's; on these small decompositions and
    matrix products extra threads mostly spin: on the busy 2-core machine one thread ran the quick preset's lens
    in 19 s, two in 106 s)."""

    acts: str = ""
    """a capture folder made by `countlens llm capture` (its model is recorded) with the last location"""
    probes: str | None = None
    """probes.json fitted on that capture: its probes are compared with the unembedding too (default: none)"""
    locations: str | None = None
    """the capture's locations to read: names, indices, ranges like 0:6, or all (default: all)"""
    counts: list[int] | None = None
    alphas: list[float] = field(default_factory=lambda: list(TUNED_ALPHAS))
    """the tuned lens's relative ridge penalties (multiples of the mean eigenvalue of the standardised
    design), comma-separated"""
    seed: int = 0
    """split seed"""
    fractions: list[float] = field(default_factory=lambda: list(LENS_FRACTIONS))
    """train,validation,test fractions"""
    baseline_directions: int = 1000
    """random directions of the angle baseline"""
    device: str = "cpu"
    threads: int | None = 1

    FIELDS: ClassVar[dict] = {"acts": Text("a capture folder (`countlens llm capture`)"),
                              "counts": Optional(Ints(minimum=0)), "alphas": Numbers(nonnegative=True),
                              "fractions": Fractions(), "baseline_directions": AtLeast(1),
                              "device": Checked(check_device), "threads": Optional(AtLeast(1))}

    def validate(self) -> LensConfig:
        """Raise :class:`ConfigError` naming the field of a config that cannot run (reads no file); runs when
        the config is built."""
        check_fields(self, self.FIELDS)
        return self


@dataclass
class LensResult(Result):
    """Per location (``locations``): ``logit`` and ``tuned``, the test prompts' read-out through each lens
    (:func:`countlens.llm.lens.readout.readout_summary`: ``logprob``, ``rank``, ``top1``, ``expected_corr``,
    ``expected_mae``, ``kl``, the mean KL from the model's own answer-start distribution, and ``answer_rank``,
    the mean rank of the model's own first answer token, :func:`~countlens.llm.lens.readout.answer_rank`; the tuned lens
    adds its ``alpha_rel`` and the validation KL per α, ``val_kl``); ``angles``: per count direction
    (``probe``, ``mean-diff``) and row set (``raw`` unembedding rows, ``folded`` through the final norm)
    :func:`~countlens.llm.lens.readout.direction_cosines` without the per-token cosines, and ``random``, the
    random baseline of each row set. ``model_readout``: the model's own read-out on the test prompts.
    ``rows`` (``lens.csv``): one record per (test prompt, location, lens); ``angle_rows`` (``angles.csv``):
    one per (location, direction, number token) with its signed cosines. ``read_at``: where the vectors were
    read — ``answer_position`` 0, the boundary (the capture's own vectors); ``j`` > 0 where every candidate answer
    begins with the same ``j`` tokens ``prefix`` (``prefix_text``), the vectors then those of the capture's
    prompts with the prefix appended, at its last token (:func:`prefixed_vectors`)."""

    FILE: ClassVar[str] = "lens.json"
    CSV: ClassVar[str] = "lens.csv"
    ANGLES_CSV: ClassVar[str] = "angles.csv"
    RECORDS: ClassVar[dict[str, str]] = {CSV: "rows", ANGLES_CSV: "angle_rows"}
    COMMAND: ClassVar[str] = "countlens llm lens"

    config: dict[str, Any]
    model: str
    candidates: list[int]
    single_token: list[int]
    number_tokens: list[dict[str, Any]]
    split: dict[str, int]
    model_readout: dict[str, Any]
    locations: list[dict[str, Any]]
    rows: list[dict[str, Any]]
    angle_rows: list[dict[str, Any]]
    read_at: dict[str, Any] = field(default_factory=lambda: {"answer_position": 0, "prefix": [], "prefix_text": ""})
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------------------- checks

def capture_settings(meta: CaptureMeta, field: str = "acts") -> CaptureMeta:
    """The metadata ``meta`` of a capture made by ``countlens llm capture``, checked to record its model;
    ``ConfigError(field)`` for a capture without (a toy export)."""
    if not meta.model_name:
        raise ConfigError(field, f"{{{field}}} records no model (a toy export?); a lens needs a capture made by "
                                 "`countlens llm capture`")
    return meta


def last_location(meta: CaptureMeta, field: str = "acts") -> int:
    """The index among the capture's locations of the last block's output; ``ConfigError(field)`` when the
    capture lacks it (captured with fewer ``--locations``)."""
    n_blocks = meta.n_blocks
    names = list(meta.locations)
    last = location_names(int(n_blocks))[-1] if n_blocks else None
    if last not in names:
        raise ConfigError(field, f"{{{field}}} lacks the last block's output ({literal(last)}): the lenses read "
                                 "towards it; capture every location (the default) or include -1")
    return names.index(last)


def candidate_counts(config: LensConfig, meta: CaptureMeta) -> tuple[list[int], str]:
    """The candidate counts and the field they come from: ``counts``, else the capture's count range."""
    counts = [int(c) for c in meta.counts]
    if config.counts is not None:
        chosen = sorted({int(c) for c in config.counts})
        missing = sorted(set(counts) - set(chosen))
        if missing:  # their rows would have no candidate to rank (rank 0) and would skew every mean
            raise ConfigError("counts", f"{{counts}} leaves out {len(missing)} of the capture's counts "
                                        f"({literal(ints_text(missing))}): every prompt's correct count must be a "
                                        "candidate answer; add them, or leave {counts} unset (the capture's range)")
        return chosen, "counts"
    return list(range(min(counts), max(counts) + 1)), "acts"


def preflight_lens(config: LensConfig, meta: CaptureMeta, pool: ModelPool | None = None) -> tuple[FirstTokens, Any]:
    """What can be checked before any weights load: the capture's model has an output embedding and the
    candidates' tokens lie within its vocabulary (the tokenizer and the config only). Returns the
    candidates' :class:`~countlens.llm.lens.readout.FirstTokens` and the tokenizer."""
    from countlens.llm.steering.experiment import capture_spec

    meta = capture_settings(meta)
    ref = capture_spec(meta, config.device).resolve(progress=False, pool=pool)
    tokenizer = load_tokenizer(ref, pool)
    model_config = load_model_config(ref, pool)
    check_unembedding(model_config)
    text = getattr(model_config, "text_config", None) or model_config
    counts, where = candidate_counts(config, meta)
    candidates = _candidates(tokenizer, counts, meta.template or "chat", where)
    return first_tokens(candidates, counts, int(getattr(text, "vocab_size", None) or 2 ** 62), where), tokenizer


def _candidates(tokenizer, counts, template, where):
    try:
        return candidate_token_ids(tokenizer, counts, template)
    except ValueError as exc:
        raise ConfigError(where, "{" + where + "}: " + literal(exc)) from None


def probe_coefficients(probes: ProbeResult, meta: CaptureMeta) -> dict[str, np.ndarray]:
    """Per location name the native coefficients of the first split seed's validation-selected probe of
    ``probes``, checked against the capture (:func:`countlens.llm.steering.experiment.check_probes`)."""
    from countlens.llm.steering.experiment import check_probes

    check_probes(probes, meta)
    return {loc.name: np.asarray(loc.fits[0].coef, dtype=np.float64) for loc in probes.locations
            if loc.fits and loc.fits[0].coef is not None}


def boundary_rows(capture: Capture) -> np.ndarray:
    """The rows of a capture that hold a boundary vector (all of them, but for an items capture's item rows)."""
    if "item_index" in capture.columns:
        return np.flatnonzero(capture.column("item_index") == -1)
    return np.arange(len(capture))


# ----------------------------------------------------------------------------------------- the run

def run_lens(config: LensConfig, *, loaded: LoadedModel | None = None, progress: bool = False,
             pool: ModelPool | None = None) -> LensResult:
    """Figure 13 on the capture ``config.acts`` with its own model (``loaded`` reuses it, already loaded).
    Everything a bad input can break is checked before the model loads."""
    with torch_threads(config.threads), blas_threads(config.threads):
        return _run_lens(config, loaded, progress, pool)


def lens_summary(r, model_test, n_test: np.ndarray, tokens: FirstTokens) -> dict[str, Any]:
    """One lens's entry at a location: the read-out ``r`` of the test prompts summarised
    (:func:`~countlens.llm.lens.readout.readout_summary`), its mean KL from the model's own first-token
    candidates' distribution ``model_test`` and the mean rank of the model's own first answer token."""
    return {**readout_summary(r, n_test, tokens),
            "kl": float(np.mean(candidate_kl(model_test.first_logits, r.first_logits))),
            "answer_rank": float(np.mean(answer_rank(model_test.first_logits, r.first_logits)))}


def lens_record(name: str, index: int, lens: str, r, j: int, row: int, n: int) -> dict[str, Any]:
    """One record of :attr:`LensResult.rows`: test prompt ``j`` (capture row ``row``, count ``n``) read by
    ``lens`` at location ``name`` (index ``index``), from its read-out ``r``."""
    return {"location": name, "location_index": index, "lens": lens, "row": int(row), "n": int(n),
            "logprob": float(r.logprob[j]), "rank": int(r.rank[j]),
            "expected": None if not np.isfinite(r.expected[j]) else float(r.expected[j])}


def _lens_location(config: LensConfig, head, tokens, acts: np.ndarray, n: np.ndarray, rows, parts, name: str,
                   i: int, last: int, model_reads, probes, random):
    """Location ``i`` (``name``) read by the logit and the tuned lens: ``(its summary entry, its test rows, its
    angle rows)``; ``acts`` (P, locations, d), ``parts`` the (train, val, test) split, ``model_reads`` the
    model's own read-out of the test and validation prompts (at ``last``)."""
    model_test, model_val = model_reads
    test = parts[2]
    entry = {"name": name, "index": i, "label": location_label(name)}
    logit = read_through(head, acts[test, i], tokens, n[test])
    tuned_fit = fit_tuned_lens(head, tokens, acts[:, i], acts[:, last], parts, list(config.alphas), model_val)
    tuned = read_through(head, tuned_fit.mapped, tokens, n[test])
    lens_rows = []
    for lens, r in (("logit", logit), ("tuned", tuned)):
        entry[lens] = lens_summary(r, model_test, n[test], tokens)
        lens_rows.extend(lens_record(name, i, lens, r, j, rows[t], n[t]) for j, t in enumerate(test))
    entry["tuned"].update(alpha_rel=tuned_fit.alpha_rel, val_kl=tuned_fit.val_kl)
    entry["angles"], mine = _angles(head, tokens, acts[:, i], n, probes.get(name) if probes else None, random)
    return entry, lens_rows, [{"location": name, "location_index": i, **r} for r in mine]


def _run_lens(config: LensConfig, loaded: LoadedModel | None, progress: bool, pool: ModelPool | None) -> LensResult:
    from countlens.llm.steering.experiment import capture_model
    from countlens.probes import ProbeResult, split_rows

    started = time.perf_counter()
    with about("acts"):
        capture = open_capture(config.acts)
    meta = capture_settings(capture.meta)
    names = list(meta.locations)
    last = last_location(meta)
    with about("locations"):
        chosen = resolve_locations(names, config.locations)
    probes = None
    if config.probes:
        with about("probes"):
            probes = probe_coefficients(ProbeResult.read(config.probes), meta)
    rows = boundary_rows(capture)
    parts = split_rows(len(rows), config.seed, tuple(config.fractions))  # ConfigError("fractions")
    tokens, tokenizer = preflight_lens(config, meta, pool)
    if loaded is None:
        loaded = capture_model(meta, config.device, progress, pool)
    head = output_head(loaded.model)
    counts, where = candidate_counts(config, meta)
    tokens = first_tokens(_candidates(loaded.tokenizer, counts, meta.template or "chat", where), counts,
                          head.vocab_size, where)
    subset = capture.select(rows) if len(rows) != len(capture) else capture
    n = subset.counts().astype(np.int64)
    if tokens.position:  # every answer begins with the same tokens: read after them, not at the boundary
        acts = prefixed_vectors(loaded, subset, tokens.prefix)
    else:
        acts = subset.all_acts(np.float32)  # (P, locations, d)
    train, val, test = parts
    model_test = read_through(head, acts[test, last], tokens, n[test])
    model_val = first_logits(head, acts[val, last], tokens)
    random = random_directions(config.baseline_directions, acts.shape[2], config.seed)
    locations, lens_rows, angle_rows = [], [], []
    for i in chosen:
        entry, mine, angles = _lens_location(config, head, tokens, acts, n, rows, parts, names[i], i, last,
                                             (model_test, model_val), probes, random)
        locations.append(entry)
        lens_rows.extend(mine)
        angle_rows.extend(angles)
    number_tokens = [{"id": int(t), "text": loaded.tokenizer.decode([int(t)])} for t in tokens.distinct]
    read_at = {"answer_position": tokens.position, "prefix": [int(t) for t in tokens.prefix],
               "prefix_text": loaded.tokenizer.decode(list(tokens.prefix))}
    for r in angle_rows:
        r["token_text"] = number_tokens[r["token"]]["text"]
        r["token"] = number_tokens[r["token"]]["id"]
    return LensResult(
        config=config.to_dict(), model=loaded.model_id, candidates=[int(k) for k in tokens.counts],
        single_token=[int(k) for k in tokens.counts[tokens.single]], number_tokens=number_tokens,
        split={"seed": int(config.seed), "n_train": len(train), "n_val": len(val), "n_test": len(test)},
        model_readout={**readout_summary(model_test, n[test], tokens), "kl": 0.0}, locations=locations,
        rows=lens_rows, angle_rows=angle_rows, read_at=read_at, seconds=round(time.perf_counter() - started, 3),
        provenance=result_provenance(config))


def prefixed_vectors(loaded: LoadedModel, capture: Capture, prefix, batch_size: int = PREFIXED_BATCH) -> np.ndarray:
    """(P, locations, d) float32: each of the capture's locations at the last token of ``prefix`` (the tokens
    every candidate answer begins with) appended to each of its boundary rows' prompts — the prompts rebuilt
    from its settings (:func:`countlens.llm.capture.experiment.capture_prompts`), ``batch_size`` left-padded at a
    time, matched to the rows by their text and count. ``ConfigError("acts")`` where a row's prompt is not among
    them."""
    import torch

    from countlens.llm.capture.experiment import capture_prompts
    from countlens.llm.capture.residuals import BoundaryCapture, pad_token_id
    from countlens.llm.prompts import build_prompts

    meta = capture.meta
    by_text = {(p.prompt, int(p.n)): p for p in build_prompts(loaded.tokenizer, capture_prompts(meta))}
    keys = list(zip((str(t) for t in capture.column("prompt")), (int(n) for n in capture.column("n")), strict=True))
    missing = [k for k in keys if k not in by_text]
    if missing:
        raise ConfigError("acts", "every candidate answer begins with the same tokens, so the lens reads after "
                                  f"them, but {len(missing)} of {{acts}}'s prompts are not among those rebuilt from "
                                  "its settings; capture again")
    prompts = [by_text[k] for k in keys]  # in the capture's row order
    names = location_names(int(meta.n_blocks))
    hooks = BoundaryCapture(loaded.model, [names.index(x) for x in meta.locations])
    pad_id = pad_token_id(loaded.tokenizer)
    device = loaded.model.get_input_embeddings().weight.device
    out = []
    with torch.inference_mode(), hooks:
        for start in range(0, len(prompts), batch_size):
            seqs = [list(p.ids) + list(prefix) for p in prompts[start:start + batch_size]]
            T = max(len(x) for x in seqs)
            ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
            mask = torch.zeros((len(seqs), T), dtype=torch.long)
            for r, x in enumerate(seqs):
                ids[r, T - len(x):], mask[r, T - len(x):] = torch.tensor(x), 1
            out.append(hooks.run(ids.to(device), mask.to(device), torch.full((len(seqs),), T - 1)).numpy())
    return np.concatenate(out)


def _angles(head, tokens: FirstTokens, acts: np.ndarray, n: np.ndarray, probe: np.ndarray | None,
            random: np.ndarray) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One location's angles (see :class:`LensResult`) and its rows for ``angles.csv`` (``token``: the
    number token's position in ``tokens.distinct``, replaced by its id by the caller)."""
    raw = head.weight[_as_index(tokens.distinct, head)].detach().double().cpu().numpy()  # (T, d)
    folded = head.folded_rows(acts.mean(axis=0), tokens.distinct)
    row_sets = {"raw": raw, "folded": folded}
    directions = {"probe": probe, "mean-diff": count_slope(acts, n) if len(np.unique(n)) >= 2 else None}
    out: dict[str, Any] = {"random": {k: random_baseline(random, rows) for k, rows in row_sets.items()}}
    rows: list[dict[str, Any]] = []
    for name, vector in directions.items():
        if vector is None or not np.any(vector):
            out[name] = None
            continue
        found = {k: direction_cosines(vector, r, random) for k, r in row_sets.items()}
        out[name] = {k: {key: v for key, v in f.items() if key != "cos"} for k, f in found.items()}
        rows.extend({"direction": name, "token": j, "cos_raw": float(found["raw"]["cos"][j]),
                     "cos_folded": float(found["folded"]["cos"][j])} for j in range(len(tokens.distinct)))
    return out, rows


def _as_index(ids, head):
    import torch

    return torch.as_tensor(np.asarray(ids), device=head.weight.device)



declare(Experiment(
    "lens", "Figure 13: lenses at the boundary", LensConfig, run_lens, LensResult, order=210, figure="countlens.llm.lens.figures:draw_lens", plot="countlens.llm.lens.figures:plot_lens",
    view="countlens.llm.lens.figures:lens_view", reads={"acts": "capture", "probes": "probe"},
    presets={"quick": LensConfig, "full": LensConfig, "test": partial(LensConfig, baseline_directions=50)},
    output=LensResult.FILE, inherits=("device",), uses_model=True, options={"progress": True}, study="where",
    cli="countlens.llm.lens.cli"))


__all__ = ["LENSES", "TUNED_ALPHAS", "LENS_FRACTIONS", "LensConfig", "LensResult", "capture_settings",
           "last_location", "candidate_counts", "preflight_lens", "PREFIXED_BATCH", "prefixed_vectors", "probe_coefficients", "boundary_rows", "run_lens",
           "lens_summary", "lens_record"]
