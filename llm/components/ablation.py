"""Component ablation at the assistant boundary (Figure 14's causal check), on the one patch mechanism
(:class:`countlens.llm.patching.edits.Setter` / :class:`~countlens.llm.patching.edits.Patch`).

A block's attention or MLP write (the ``attn_out`` / ``mlp_out`` hook sites) — or one head's slice of the
attention output projection's input (``attn_z``, :func:`countlens.llm.heads.attention.ablated_scores`) — is
replaced at the boundary by its mean over the prompt set, and the boundary step is run again from the
prompt's key/value cache (:class:`countlens.llm.heads.attention.PrefixBatch`): only the boundary's write
changes; other positions keep theirs. Scored from the candidates' teacher-forced log-probabilities by the
normalised logit difference of ``n`` against ``n − 1`` (against the prompt's twin with one target fewer) and by
the shift of the expected count.

Unlike direct logit attribution, the ablation also moves what later blocks read and the scale the final norm
reads everything with: a component that writes nothing directly can still move the answer here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from countlens.llm.heads.attention import PrefixBatch
from countlens.llm.hooks import HookSite
from countlens.llm.patching.edits import Patch, Setter


def boundary_write_setter(site: HookSite, values) -> Setter:
    """The :class:`Setter` of the boundary step (one token long, from the prompt's cache) that replaces the write
    at ``site`` by ``values``: (R, d) one per batch row, or (d,) the same for every row."""
    import torch

    values = torch.as_tensor(np.asarray(values, dtype=np.float32))
    if values.dim() == 1:
        return Setter(site, values)  # every row, every position: the step's one position is the boundary
    return Setter(site, values, positions=torch.full((len(values),), -1), rows=torch.arange(len(values)))


def patched_step_scores(model, prompts, candidates, setters_of: Callable[[list[int]], Sequence[Setter]],
                        pad_id: int, batch_size: int = 8, record=None) -> np.ndarray:
    """log p(candidate) (P, K) float64 of ``prompts`` with the boundary step run under one :class:`Patch` of the
    setters ``setters_of(batch prompt indices)`` (no setter: the clean boundary step). ``candidates[i]``:
    prompt i's K token lists. ``record(indices)`` (optional) returns a context manager also active during each
    batch's boundary step (e.g. a :class:`~countlens.llm.components.attribution.ComponentPass`)."""
    import contextlib

    out = np.zeros((len(prompts), len(candidates[0])), dtype=np.float64)
    for start in range(0, len(prompts), batch_size):
        idx = list(range(start, min(start + batch_size, len(prompts))))
        batch = PrefixBatch(model, [prompts[i] for i in idx], pad_id)
        with contextlib.ExitStack() as stack:
            if record is not None:
                stack.enter_context(record(idx))
            scores, _ = batch.step(list(range(len(idx))), [candidates[i] for i in idx],
                                   Patch(model, list(setters_of(idx))))
        out[idx] = scores
    return out


def ablated_component_scores(model, prompts, candidates, sites: Sequence[HookSite], means: np.ndarray, pad_id: int,
                             batch_size: int = 8, progress=None) -> np.ndarray:
    """log p(candidate) with one write replaced by its mean: (P, len(sites), K) float64; ``means`` (len(sites),
    d) the mean boundary write of each site over the prompt set. ``progress(k)`` after each site of each batch."""
    out = np.zeros((len(prompts), len(sites), len(candidates[0])), dtype=np.float64)
    for j, site in enumerate(sites):
        out[:, j] = patched_step_scores(model, prompts, candidates,
                                        lambda idx, site=site, j=j: [boundary_write_setter(site, means[j])],
                                        pad_id, batch_size)
        if progress is not None:
            progress(len(prompts))
    return out


def mean_std_count(values: np.ndarray) -> tuple[Any, Any, int]:
    """Mean, std and count over the finite entries of ``values`` (1-D); ``None`` for an empty set."""
    x = np.asarray(values, dtype=np.float64)
    x = x[np.isfinite(x)]
    if not x.size:
        return None, None, 0
    return float(x.mean()), float(x.std()), int(x.size)


__all__ = ["boundary_write_setter", "patched_step_scores", "ablated_component_scores", "mean_std_count"]
