"""The numerics of the norm-scaling comparison (:mod:`countlens.llm.organisms.scaling`): the organisms'
tokenizer with one token per count (:func:`counting_tokenizer`), the boundary geometry and probe cost of a
capture (:func:`capture_metrics`), how a one-head organism's head reads the items
(:func:`boundary_target_excess`) and how it reads its count out (:func:`readout_metrics`: which vector attains
its ``B``, its class vectors, Figure 2c's winning logit gaps). The module docstring of
:mod:`countlens.llm.organisms.scaling` says what each quantity is for."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from countlens.core.errors import ConfigError, about
from countlens.llm.prompts import PromptSettings

# Held-out rows captured per organism: at least CAPTURE_SEEDS data seeds, and at least CAPTURE_ROWS_PER_DIM rows
# per residual dimension (capture_seeds), so the probe's 0.6 training share is 12 rows per coordinate. With two
# seeds alone an L = 10 organism gave 22 rows, 4 of them validation: whether some ridge fit "rounded exactly"
# came down to those 4 (L = 10 seed 0 once 0.39, then none on a rerun).
CAPTURE_SEEDS = 2
CAPTURE_ROWS_PER_DIM = 20
NUMBER_TOKENS = 1000  # counts below this are answered by one token each (counting_tokenizer)


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


def capture_manifold(acts: str | Path, location: str, width: int, variant: str) -> dict[str, Any]:
    """The count manifold (docs/definitions.md §2.17; :func:`countlens.analysis.run_manifold` on the capture
    ``acts``, its toy curves at width ``max(3, width)``) at ``location``: ``manifold_nearest`` the toy variant
    whose boundary curve ``h(n, 0)`` lies nearest the centroid curve over every count, ``manifold_procrustes``
    its Procrustes distance (0 = congruent, at most 2), ``manifold_procrustes_toy`` the distance to ``variant``
    (the toy variant the organism is built like), ``manifold_above_floor`` whether the curve's shape stands
    above its shuffled-label floor (two halves of the prompts agree better than with any shuffle); ``None``
    (nearest) and nan where the curve does not move."""
    from countlens.analysis import ManifoldConfig, run_manifold

    result = run_manifold(ManifoldConfig(acts=str(acts), toy_d=max(3, int(width))))
    row = next(r for r in result.per_location if r["name"] == location)
    best = row["nearest_toy"]
    return {"manifold_nearest": best,
            "manifold_procrustes": float(row["procrustes"][best]) if best is not None else float("nan"),
            "manifold_procrustes_toy": float(row["procrustes"][variant]),
            "manifold_above_floor": bool(row["shape_above_floor"])}


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


def vector_role(name: str, row: int | None, tokenizer=None) -> str:
    """What the parameter vector ``(name, row)`` of a Llama organism is, in words: the final RMSNorm's gain
    (it multiplies every logit), the attention's RMSNorm gain, a token's embedding row (tied: also its
    unembedding row, its class vector; the token decoded with ``tokenizer``) or a projection's output row."""
    if name.endswith("model.norm.weight") or name == "norm.weight":
        return "the final RMSNorm's gain (multiplies every logit)"
    if name.endswith("input_layernorm.weight"):
        return "the attention's RMSNorm gain"
    if name.endswith("embed_tokens.weight") or name.endswith("lm_head.weight"):
        token = repr(tokenizer.decode([row])) if tokenizer is not None and row is not None else f"id {row}"
        return f"token {token}'s embedding row (tied: its unembedding row)"
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        if f".{proj}." in name:
            return f"{proj}'s output row {row}"
    return name if row is None else f"{name} row {row}"


def answer_rows(tokenizer, L: int) -> list[int]:
    """The token ids (L + 1,) that answer the counts ``0..L``, one token each (:func:`counting_tokenizer`):
    the organism's class vectors are their unembedding rows."""
    from countlens.llm.answers import answer_token_ids

    ids = [answer_token_ids(tokenizer, n) for n in range(int(L) + 1)]
    if any(len(i) != 1 for i in ids):
        raise ValueError(f"every count 0..{L} must be answered by one token (counting_tokenizer)")
    return [i[0] for i in ids]


def logit_gaps(model, prompts, answer_ids: list[int], pad_id: int, batch_size: int = 64) -> np.ndarray:
    """The **winning logit gap** of each of ``prompts`` at its boundary (the first answer position) in the
    organism ``model``: the logit of its count's answer token minus the largest logit of another count's
    (``answer_ids``: the answers of ``0..L``), as the toy's :func:`countlens.toy.model.winning_gap` defines it
    for class scores. (P,) float64, in logits (nats); positive iff the argmax over the counts is right."""
    import torch

    from countlens.llm.capture.residuals import pad_batch
    from countlens.toy import winning_gap

    columns = torch.tensor(answer_ids, dtype=torch.long)
    out = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(prompts), batch_size):
            group = prompts[start:start + batch_size]
            ids, mask, index = pad_batch(group, pad_id, "right")  # causal: right padding leaves each row's logits
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, d), final norm
            logits = model.lm_head(hidden[torch.arange(len(group)), index])[:, columns]  # (B, L + 1)
            out.append(winning_gap(logits.double(), torch.tensor([p.n for p in group])).numpy())
    return np.concatenate(out) if out else np.zeros(0)


def gap_by_count(gaps: np.ndarray, n: np.ndarray, L: int) -> np.ndarray:
    """Figure 2c's quantity: per count ``0..L`` the smallest of the prompts' gaps ``gaps`` (P,) whose count
    ``n`` (P,) it is; (L + 1,), ``nan`` for a count without a prompt."""
    out = np.full(int(L) + 1, np.inf)
    np.minimum.at(out, np.asarray(n, dtype=np.int64), np.asarray(gaps, dtype=np.float64))
    out[np.isinf(out)] = np.nan
    return out


def readout_metrics(folder: str | Path, settings: PromptSettings, L: int) -> dict[str, Any]:
    """How the one-block organism of ``folder`` reads its count out, on ``settings``' prompts:

    - ``b_parameter`` / ``b_row`` / ``b_vector``: which parameter vector attains its ``B``
      (:func:`~countlens.llm.organisms.train.largest_parameter_vector`: the parameter's name, the row of a
      matrix or ``None``, :func:`vector_role` in words) and ``b_check`` its norm, recomputed from the folder;
    - ``class_vector_norm``: the largest norm of its class vectors, the unembedding rows of the answers
      ``0..L`` (:func:`answer_rows`), the toy classifier's ``max_k |u_k|``;
    - ``min_logit_gap`` (logits) and ``min_gap_count``: the smallest of :func:`gap_by_count` over the counts
      and the count where it falls, Figure 2c's minimum; ``gap_by_count`` the whole (L + 1,) list;
      ``argmax_accuracy``: the share of the prompts whose gap is positive (their argmax over the counts is
      right; the organism's held-out accuracy is taken on fewer prompts, its own held-out set)."""
    import torch

    from countlens.llm.capture.residuals import pad_token_id
    from countlens.llm.models import load_model
    from countlens.llm.organisms.train import largest_parameter_vector
    from countlens.llm.prompts import build_prompts

    loaded = load_model(str(folder), progress=False)
    name, row, norm = largest_parameter_vector(loaded.model)
    answers = answer_rows(loaded.tokenizer, L)
    with torch.no_grad():
        class_norm = float(loaded.model.lm_head.weight[answers].norm(dim=-1).max())
    prompts = build_prompts(loaded.tokenizer, settings)
    each = logit_gaps(loaded.model, prompts, answers, pad_token_id(loaded.tokenizer))  # (P,)
    gaps = gap_by_count(each, np.array([p.n for p in prompts]), L)  # (L + 1,)
    low = int(np.nanargmin(gaps))
    return {"b_parameter": name, "b_row": row, "b_vector": vector_role(name, row, loaded.tokenizer),
            "b_check": norm, "class_vector_norm": class_norm, "min_logit_gap": float(gaps[low]),
            "min_gap_count": low, "argmax_accuracy": float((each > 0).mean()),
            "gap_by_count": [None if np.isnan(g) else float(g) for g in gaps]}


def attaining(norms: dict[str, float]) -> str:
    """The names of the toy's vectors (:meth:`countlens.toy.model.ToyParams.vector_norms`) whose norm is the
    largest (to 1e-9 relative; a construction often sets several to one scale), comma-separated."""
    top = max(norms.values())
    return ", ".join(k for k, v in norms.items() if v >= top * (1 - 1e-9))


__all__ = ["NUMBER_TOKENS", "CAPTURE_SEEDS", "CAPTURE_ROWS_PER_DIM", "counting_tokenizer", "windows", "spread",
           "boundary_geometry", "capture_seeds", "capture_metrics", "capture_manifold", "boundary_target_excess",
           "vector_role", "answer_rows", "logit_gaps", "gap_by_count", "readout_metrics", "attaining"]
