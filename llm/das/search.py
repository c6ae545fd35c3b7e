"""Distributed alignment search on a model: the interchange run at the boundary, a basis learned by gradient
descent through the frozen model, and its scores on held-out pairs (docs/definitions.md, "The causal count
subspace"; the numerics of the basis in :mod:`countlens.llm.das.subspace`).

Every run goes through the project's one boundary mechanism. Each prompt runs once up to (not including) its
boundary (:class:`countlens.llm.boundary.PrefixBatch`, the KV cache of every earlier position); a
boundary step is then one token through every block from that cache, its rows (pairs) sharing the prefix's
keys and values without copying them (:func:`~countlens.llm.boundary.shared_cache_rows`), and the interchange
is an ``add`` :func:`~countlens.llm.patching.edits.boundary_setter` at the location's hook site (a
:class:`~countlens.llm.patching.edits.Patch`), its value ``(h_source − h_base) R Rᵀ`` — differentiable in R, so
the same step trains R. Only the boundary position is edited (as in boundary patching): the items keep their
own vectors. The scores read the step's logits: the greedy first answer token (the argmax over the whole
vocabulary) and every candidate count's final-answer log-probability
(:func:`~countlens.llm.answers.score_candidates`, teacher-forced from the step's cache).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from countlens.llm.answers import score_candidates
from countlens.llm.boundary import PrefixBatch
from countlens.llm.capture.residuals import find_blocks
from countlens.llm.das.subspace import basis_of, interchange_step, orthonormal_module
from countlens.llm.hooks import HookSet, hook_sites
from countlens.llm.patching.edits import Patch, boundary_setter


@contextlib.contextmanager
def frozen(model):
    """The parameters of ``model`` excluded from autograd while the block runs (a basis is learned through the
    model, never the model itself); their flags restored after."""
    params = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in params:
            p.requires_grad_(False)
        yield model
    finally:
        for p in params:
            p.requires_grad_(True)


class BoundarySteps:
    """``prompts`` run once up to their boundary (one left-padded :class:`PrefixBatch`: memory
    O(prompts × tokens × blocks × kv width)); :meth:`logits` is a boundary step of any rows (repeats allowed)
    under a context, :meth:`vectors` the clean boundary vectors at residual locations."""

    def __init__(self, model, prompts, pad_id: int):
        import torch

        self.model = model
        self.n_blocks = len(find_blocks(model))
        with torch.no_grad():
            self.prefix = PrefixBatch(model, list(prompts), pad_id)

    def logits(self, rows: Sequence[int], context=None):
        """The boundary step of ``rows`` under ``context`` (a patch active during the step;
        :meth:`~countlens.llm.boundary.PrefixBatch.boundary`, the rows sharing the prefix cache): ``(logits
        (R, V) float32, the step's cache, its mask (R, T), the boundary's position ids (R, 1))``; differentiable
        where the context's values are."""
        return self.prefix.boundary(list(rows), context)

    def vectors(self, locations: Sequence[int], batch_size: int = 64):
        """(P, len(locations), d) float32 clean boundary vectors of every prompt at the residual ``locations``,
        read at the hook sites the interchange writes to."""
        import torch

        sites = hook_sites(list(locations), self.n_blocks)
        out = []
        P = self.prefix.ids.shape[0]
        with torch.no_grad():
            for start in range(0, P, batch_size):
                kept: list = [None] * len(sites)

                def keeper(slot, kept=kept):
                    def keep(hidden):
                        kept[slot] = hidden[:, -1].detach().float()
                    return keep

                with HookSet(find_blocks(self.model)).attach((s, keeper(i)) for i, s in enumerate(sites)):
                    self.logits(range(start, min(start + batch_size, P)))
                out.append(torch.stack(kept, dim=1))
        return torch.cat(out)

    def interchange(self, location: int, step):
        """The :class:`Patch` adding ``step`` (R, d) — :func:`~countlens.llm.das.subspace.interchange_step` of each
        row's pair — to the boundary vector at residual ``location`` of a step's R rows."""
        import torch

        [site] = hook_sites([int(location)], self.n_blocks)
        return Patch(self.model, [boundary_setter(site, torch.zeros(step.shape[0], dtype=torch.long), step, "add")])


@dataclass
class PairSet:
    """(base, source) pairs of one prompt set: ``base``, ``source`` (N,) prompt indices, ``n_base``, ``n_source``
    (N,) their counts, ``target`` (N,) the source count's first answer token id."""

    base: np.ndarray
    source: np.ndarray
    n_base: np.ndarray
    n_source: np.ndarray
    target: np.ndarray

    def __len__(self) -> int:
        return len(self.base)


def learn_basis(steps: BoundarySteps, location: int, diffs, pairs: PairSet, rank: int, n_steps: int, lr: float,
                batch_size: int, seed: int) -> tuple[np.ndarray, list[float]]:
    """DAS at residual ``location``: R (d, ``rank``) learned by Adam (``lr``, ``n_steps`` steps of ``batch_size``
    pairs, each epoch a fresh seeded order) minimising the cross-entropy of the source count's first answer token
    (over the whole vocabulary) under the interchange; ``diffs`` (N, d) the pairs' ``h_source − h_base`` at the
    location. Returns R (float64, orthonormal columns) and the loss of every step (nats)."""
    import torch

    torch.manual_seed(int(seed))
    module = orthonormal_module(diffs.shape[1], rank, seed)
    optimiser = torch.optim.Adam(module.parameters(), lr=float(lr))
    target = torch.as_tensor(pairs.target, dtype=torch.long)
    rng = np.random.default_rng([int(seed), int(location), int(rank)])
    order, losses = np.array([], dtype=np.int64), []
    with frozen(steps.model):
        for _ in range(int(n_steps)):
            if len(order) < min(batch_size, len(pairs)):
                order = np.concatenate([order, rng.permutation(len(pairs))])
            batch, order = order[:batch_size], order[batch_size:]
            step = interchange_step(0.0, diffs[batch], basis_of(module))  # (B, d): (h_s − h_b) R Rᵀ
            logits, *_ = steps.logits(pairs.base[batch], steps.interchange(location, step))
            loss = torch.nn.functional.cross_entropy(logits, target[batch])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            losses.append(loss.item())
    with torch.no_grad():
        return basis_of(module).double().numpy().copy(), losses


@dataclass
class Scores:
    """A basis scored on pairs: ``first`` (N,) the intervened greedy first token, ``logprobs`` (N, K) every
    candidate count's final-answer log-probability (nats)."""

    first: np.ndarray
    logprobs: np.ndarray


def interchange_scores(steps: BoundarySteps, location: int, diffs, pairs: PairSet, basis: np.ndarray | None,
                       candidates: list[list[int]] | None, continuation, batch_size: int) -> Scores:
    """:class:`Scores` of ``pairs`` under the interchange with ``basis`` (d, k) at residual ``location``
    (``None``: the base runs, no interchange); ``candidates`` the K candidate counts' answer tokens (``None``:
    the greedy first token alone, ``logprobs`` (N, 0) — the controls' IIA, at a third of the cost), ``continuation``
    the ids of the tokens that continue a number (:func:`~countlens.llm.answers.number_continuations`)."""
    import torch

    first = np.zeros(len(pairs), dtype=np.int64)
    logprobs = np.zeros((len(pairs), len(candidates or ())), dtype=np.float64)
    R = None if basis is None else torch.as_tensor(basis, dtype=torch.float32)
    with torch.no_grad():
        for start in range(0, len(pairs), batch_size):
            batch = np.arange(start, min(start + batch_size, len(pairs)))
            context = None if R is None else steps.interchange(location, interchange_step(0.0, diffs[batch], R))
            logits, cache, mask, last = steps.logits(pairs.base[batch], context)
            first[batch] = logits.argmax(-1).cpu().numpy()
            if candidates:
                logprobs[batch] = score_candidates(steps.model, logits, cache, mask, last, candidates,
                                                   continuation=continuation)
    return Scores(first, logprobs)


__all__ = ["frozen", "BoundarySteps", "PairSet", "learn_basis", "Scores", "interchange_scores"]
