"""Component ablation and patching (Figure 14's causal check), on the one patch mechanism
(:class:`countlens.llm.patching.edits.Setter` / :class:`~countlens.llm.patching.edits.Patch`).

Two sources of the value written (``source``): ``mean`` (mean-ablation) and ``twin`` (patching: the prompt's
corrupted twin's own write, Figure 11's twin with one target turned into the distractor); two scopes (``scope``):
``boundary`` (the boundary position alone) and ``all`` (every position of the prompt at once). Both sources at
the boundary run from the prompt's key/value cache, one boundary step per component (the boundary-step runner of
:mod:`countlens.llm.boundary`: the mean-ablation below; the twin's writes by :func:`twin_boundary_scores`, the
twin's boundary writes recorded in one pass per twin, every component of a batch of prompts a row of one batched
step); at every position they run whole prompt passes (:func:`countlens.llm.patching.edits.patched_prompt_logprobs`),
one per component and prompt, batched. Every setter is built by :func:`component_setter`. The limits: writing every component (the embeddings, every attention
and MLP write) of the twin at every position is the twin's run, and writing nothing is the clean run.

The boundary mean-ablation:
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

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from countlens.llm.boundary import PrefixBatch
from countlens.llm.hooks import HookSite
from countlens.llm.patching.edits import Patch, Setter, patched_prompt_logprobs

SOURCES = ("mean", "twin")  # what a component's write is replaced by: its mean, or the twin's own write
SCOPES = ("boundary", "all")  # where: the boundary position alone, or every position of the prompt at once


def boundary_write_setter(site: HookSite, values) -> Setter:
    """The :class:`Setter` of the boundary step (one token long, from the prompt's cache) that replaces the write
    at ``site`` by ``values``: (R, d) one per batch row, or (d,) the same for every row."""
    import torch

    values = torch.as_tensor(np.asarray(values, dtype=np.float32))
    if values.dim() == 1:
        return Setter(site, values)  # every row, every position: the step's one position is the boundary
    return Setter(site, values, positions=torch.full((len(values),), -1), rows=torch.arange(len(values)))


@contextlib.contextmanager
def _step_context(model, idx, setters_of, record):
    """The recorder ``record(idx)`` (if any) and the :class:`Patch` of ``setters_of(idx)``, entered together."""
    with contextlib.ExitStack() as stack:
        if record is not None:
            stack.enter_context(record(idx))
        stack.enter_context(Patch(model, list(setters_of(idx))))
        yield


def patched_step_scores(model, prompts, candidates, setters_of: Callable[[list[int]], Sequence[Setter]],
                        pad_id: int, batch_size: int = 8, record=None) -> np.ndarray:
    """log p(candidate) (P, K) float64 of ``prompts`` with the boundary step run under one :class:`Patch` of the
    setters ``setters_of(batch prompt indices)`` (no setter: the clean boundary step). ``candidates[i]``:
    prompt i's K token lists. ``record(indices)`` (optional) returns a context manager also active during each
    batch's boundary step (e.g. a :class:`~countlens.llm.components.attribution.ComponentPass`)."""
    out = np.zeros((len(prompts), len(candidates[0])), dtype=np.float64)
    for start in range(0, len(prompts), batch_size):
        idx = list(range(start, min(start + batch_size, len(prompts))))
        batch = PrefixBatch(model, [prompts[i] for i in idx], pad_id)
        # the recorder and the patch during the boundary step only, not the candidates' feeds after it (their
        # forwards would overwrite what it recorded)
        scores, _ = batch.step(list(range(len(idx))), [candidates[i] for i in idx], _step_context(model, idx, setters_of,
                                                                                                  record))
        out[idx] = scores
    return out


def ablated_component_scores(model, prompts, candidates, sites: Sequence[HookSite], means: np.ndarray, pad_id: int,
                             batch_size: int = 8, progress=None) -> np.ndarray:
    """log p(candidate) with one write replaced by its mean: (P, len(sites), K) float64; ``means`` (len(sites),
    d) the mean boundary write of each site over the prompt set. Per batch of ``batch_size`` prompts the prompt
    before the boundary runs once; then one boundary step per site from that cache. ``progress(k)`` after each
    site of each batch."""
    out = np.zeros((len(prompts), len(sites), len(candidates[0])), dtype=np.float64)
    for start in range(0, len(prompts), batch_size):
        idx = list(range(start, min(start + batch_size, len(prompts))))
        batch = PrefixBatch(model, [prompts[i] for i in idx], pad_id)
        rows, cands = list(range(len(idx))), [candidates[i] for i in idx]
        for j, site in enumerate(sites):
            out[idx, j], _ = batch.step(rows, cands, Patch(model, [boundary_write_setter(site, means[j])]))
            if progress is not None:
                progress(len(idx))
    return out


def site_values(model, ids, sites: Sequence[HookSite]):
    """Every site's activation at every position of one unpadded prompt ``ids`` (T,): a tensor (len(sites), T, w)
    in the model's dtype, from one forward (hooks through :class:`~countlens.llm.hooks.HookSet`)."""
    import torch

    from countlens.llm.capture.residuals import find_blocks
    from countlens.llm.hooks import HookSet

    seen: dict[int, Any] = {}

    def keep(j):
        def fn(hidden):
            seen[j] = hidden[0].detach().clone()
        return fn
    device = model.get_input_embeddings().weight.device
    with torch.inference_mode(), HookSet(find_blocks(model)).attach((s, keep(j)) for j, s in enumerate(sites)):
        model(input_ids=torch.as_tensor([list(ids)], device=device), use_cache=False)
    return torch.stack([seen[j] for j in range(len(sites))])


def boundary_site_values(model, ids, site_lists: Sequence[Sequence[HookSite]]):
    """The activation at the last position (the boundary) of one unpadded prompt ``ids`` (T,) at every site of
    every list of ``site_lists``, from one forward: per list a tensor (len(sites), w) in the model's dtype."""
    import torch

    from countlens.llm.capture.residuals import find_blocks
    from countlens.llm.hooks import HookSet

    seen: dict[tuple[int, int], Any] = {}

    def keep(key):
        def fn(hidden):
            seen[key] = hidden[0, -1].detach().clone()
        return fn
    device = model.get_input_embeddings().weight.device
    hooks = [(s, keep((k, j))) for k, sites in enumerate(site_lists) for j, s in enumerate(sites)]
    with torch.inference_mode(), HookSet(find_blocks(model)).attach(hooks):
        model(input_ids=torch.as_tensor([list(ids)], device=device), use_cache=False)
    return [torch.stack([seen[(k, j)] for j in range(len(sites))]) for k, sites in enumerate(site_lists)]


def component_setter(site: HookSite, value, scope: str, head: int | None = None,
                     width: int | None = None) -> Setter:
    """The :class:`Setter` of one component of a whole prompt pass (one batch row, see
    :func:`~countlens.llm.patching.edits.patched_prompt_logprobs`): at ``site`` — all of its last axis, or with
    ``head`` the slice of that head (``width`` its size) — ``value`` is written at the boundary (``scope``
    ``boundary``: ``value`` (T, w) of which the last row, or (w,)) or at every position (``all``: (T, w) one per
    position, or (w,) the same everywhere)."""
    import torch

    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    value = torch.as_tensor(value)
    kw = {} if head is None else {"head": [int(head)], "width": int(width)}
    if scope == "boundary":
        return Setter(site, value[-1:] if value.dim() == 2 else value[None], positions=[-1], **kw)
    return Setter(site, value[None] if value.dim() == 2 else value, **kw)


def component_scores(model, ids, candidates, cells: Sequence[Sequence[Setter]], batch_size: int = 8) -> np.ndarray:
    """log p(candidate) (len(cells), K) float64 of the prompt ``ids`` run once per cell under its setters
    (:func:`component_setter`; an empty cell is the clean run)."""
    return patched_prompt_logprobs(model, ids, candidates, cells, batch_size)


def twin_boundary_scores(model, prompts, twins, candidates, sites: Sequence[HookSite], z_sites: Sequence[HookSite],
                         n_heads: int, pad_id: int, batch_size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Component patching from the twin at the boundary on the boundary-step runner: ``(writes (P, len(sites),
    K), heads (P, len(z_sites), n_heads, K))`` float64, log p(candidate) of each prompt with one of its twin's
    boundary writes — at a site of ``sites`` (all of its last axis), or one head's slice at a site of ``z_sites``
    (an attention output projection's input) — written at its boundary. Per twin one forward records every
    site's boundary value (:func:`boundary_site_values`); per batch of ``batch_size`` prompts the prompt before
    the boundary runs once and every (prompt, component) is a row of batched boundary steps
    (:func:`countlens.llm.boundary.boundary_cell_scores`). Equal cell by cell to
    :func:`component_scores` with ``component_setter(..., "boundary")`` (whole prompt passes)."""
    from countlens.llm.boundary import boundary_cell_scores

    cells = []
    for twin in twins:
        w_values, z_values = boundary_site_values(model, twin.ids, [sites, z_sites])
        hd = z_values.shape[-1] // n_heads
        mine = [[component_setter(site, w_values[j], "boundary")] for j, site in enumerate(sites)]
        mine += [[component_setter(site, z_values[j][h * hd:(h + 1) * hd], "boundary", h, hd)]
                 for j, site in enumerate(z_sites) for h in range(n_heads)]
        cells.append(mine)
    scores = boundary_cell_scores(model, prompts, candidates, cells, pad_id, batch_size)
    K = len(candidates[0])
    writes = np.stack([s[:len(sites)] for s in scores]).reshape(len(prompts), len(sites), K)
    heads = np.stack([s[len(sites):] for s in scores]).reshape(len(prompts), len(z_sites), n_heads, K)
    return writes, heads


__all__ = ["SOURCES", "SCOPES", "boundary_write_setter", "patched_step_scores", "ablated_component_scores",
           "site_values", "boundary_site_values", "component_setter", "component_scores", "twin_boundary_scores"]
