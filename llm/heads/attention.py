"""The heads that read the items (Figure 12): how much each attention head's query at the boundary (and at the
last item) attends to the target items, to the distractor items and to everything else; and what replacing a
head's output at the boundary by its mean over the prompt set does to the answer and to the probe's read-out.

**Attention mass.** For block ``b``, head ``h`` and a query position ``q`` (the boundary, or the last item),
the attention weights ``A[q, :]`` (softmax over the keys ``0..q``; pads get zero) are summed over the target
items' positions (``target``), the distractor items' (``distractor``) and every other position (``other``:
instruction, chat template, BOS and the query itself when it is not an item). The three sum to 1. They come
from the model's own eager attention (the weights each attention module returns when the model runs with
``attn_implementation="eager"``, read at the hook site ``attn_pattern`` of :mod:`countlens.llm.hooks`), so they
equal ``output_attentions=True``. A head's ``target excess`` on a
prompt with ``n >= 1`` targets and ``m >= 1`` distractors is ``target / (target + distractor) − n / (n + m)``:
0 for a head that spreads its item attention evenly over the items, > 0 for one that prefers the targets.

**Head ablation.** The input of block ``b``'s attention output projection holds the heads' outputs side by
side (:data:`countlens.llm.hooks.ATTENTION_OUTPUTS`); head ``h``'s slice at the boundary is replaced by its
mean over the prompt set's boundaries (a :class:`~countlens.llm.patching.edits.Setter` of the one patch
mechanism, :func:`head_setter`), and the forward continues. Only the boundary position is edited, so the
result is the head's direct contribution written at the boundary; later blocks can still read the items.
Because only the boundary changes and it is the last position, an ablated run shares every earlier position's
keys and values with the clean run: the prompt before its boundary runs once, and each ablation is one
single-token step from that cache, all heads of a block (times the prompts of a batch) in one batch of steps.

The scores use the one teacher-forced mechanism of :mod:`countlens.llm.answers`:
``LD = log p("n") − log p("n − 1")`` (each answer over all its tokens, no end-of-turn token), on the clean
prompt (``LD_clean``), its one-target-fewer twin (the same items, one target turned into the distractor:
``LD_corrupt``) and the ablated clean prompt (``LD_ablated``); ``normalised_ld = (LD_ablated − LD_corrupt) /
(LD_clean − LD_corrupt)`` is 1 where the ablation leaves the answer's count evidence as it was and 0 where it
removes as much as taking one target away (below 0: more; above 1: the head worked against the count); the
``effect`` is ``1 − normalised_ld``. Prompts where ``|LD_clean − LD_corrupt|`` is below
:data:`countlens.llm.answers.MIN_LD_GAP` are not normalised (their raw ``LD_ablated − LD_clean`` is kept).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from countlens.llm.boundary import PrefixBatch
from countlens.llm.capture.residuals import find_blocks, pad_batch
from countlens.llm.hooks import HookSet, HookSite, attention_pattern_site, hook_sites
from countlens.llm.patching.edits import Patch, Setter

QUERIES = ("boundary", "last_item")
KINDS = ("target", "distractor", "other")


# ----------------------------------------------------------------------------------------- numerics


def attention_masses(rows, target, distractor):
    """Attention mass to the targets, the distractors and the rest: rows (B, Q, H, T) attention weights of Q
    query positions, ``target`` / ``distractor`` (B, T) bool key masks -> (B, Q, H, 3) float64
    ``[target, distractor, other]``, ``other`` = the row's total minus both (the row sums to 1)."""
    import torch

    rows = rows.double()
    t = (rows * target[:, None, None, :].double()).sum(-1)  # (B, Q, H)
    d = (rows * distractor[:, None, None, :].double()).sum(-1)
    return torch.stack([t, d, rows.sum(-1) - t - d], dim=-1)


def target_excess(masses: np.ndarray, n: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``target / (target + distractor) − n / (n + m)`` per prompt: masses (P, ..., 3), n and m (P,) -> (P, ...),
    NaN where a prompt lacks targets or distractors (no preference to measure)."""
    t, d = masses[..., 0], masses[..., 1]
    n, m = (np.asarray(x, dtype=np.float64).reshape((-1,) + (1,) * (t.ndim - 1)) for x in (n, m))
    share = t / np.where(t + d > 0, t + d, np.nan)
    return np.where((n >= 1) & (m >= 1), share - n / np.maximum(n + m, 1), np.nan)


def mean_std(values: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """NaN-skipping mean and population std over ``axis``, and how many values each used: ``values``
    (N, ...) -> three arrays of the shape without ``axis`` (NaN mean and std where no value is finite). The one
    mean/std of the heads' and the components' records."""
    values = np.asarray(values, dtype=np.float64)
    count = np.sum(np.isfinite(values), axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        total = np.nansum(values, axis=axis)
        mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        dev = np.where(np.isfinite(values), values - np.expand_dims(mean, axis), 0.0)
        std = np.where(count > 0, np.sqrt(np.sum(dev ** 2, axis=axis) / np.maximum(count, 1)), np.nan)
    return mean, std, count


def item_masks(prompts, roles: Sequence[np.ndarray], T: int) -> tuple[Any, Any]:
    """(target, distractor) (B, T) bool key masks of left-padded ``prompts`` of width ``T``; ``roles[i]``:
    prompt i's items in order, True for a target. An item is its token (``item_indices``: for an item of
    several tokens its last; without them the items are the tokens ``first_item_index..last_item_index``); a
    token that holds a target (letters sharing a token) is a target token, never also a distractor."""
    import torch

    target = torch.zeros((len(prompts), T), dtype=torch.bool)
    distractor = torch.zeros_like(target)
    for b, (p, role) in enumerate(zip(prompts, roles, strict=True)):
        if len(role):
            kind = np.asarray(role, dtype=bool)
            at = (np.asarray(p.item_indices) if p.item_indices
                  else np.arange(p.first_item_index, p.last_item_index + 1)) + (T - p.n_tokens)
            target[b, torch.as_tensor(at[kind])] = True
            distractor[b, torch.as_tensor(np.setdiff1d(at[~kind], at[kind]))] = True
    return target, distractor


# ------------------------------------------------------------------------------------ attention pass


@contextlib.contextmanager
def eager_attention(model):
    """Run ``model`` with eager attention inside the block (its attention modules then return their weights);
    its own implementation is restored on exit."""
    before = model.config._attn_implementation
    if before == "eager":
        yield model
        return
    model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        model.set_attn_implementation(before)


class AttentionPass:
    """Context manager: per block, the attention masses of the boundary's and the last item's queries and
    the heads' outputs at the boundary (the attention output projection's input, ``site``), from one eager
    forward of a left-padded batch.

    >>> with AttentionPass(model, "attn_z:llama") as rec:
    ...     masses, z = rec.run(ids, mask, queries, target, distractor)   # (B, L, Q, H, 3), (B, L, H * hd)
    """

    def __init__(self, model, site: str):
        self.model = model
        self.blocks = find_blocks(model)
        blocks = range(len(self.blocks))
        self.sites = hook_sites(blocks, len(self.blocks), site)
        # the attention weights: item 1 of the output of the projection's parent, the block's attention
        self.patterns = hook_sites(blocks, len(self.blocks), attention_pattern_site(site.split(":", 1)[1]))
        self._hooks = HookSet(self.blocks)
        self._eager = None

    def _weights_hook(self, block: int):
        import torch

        def hook(weights):
            if weights is None or weights.dim() != 4:
                raise RuntimeError(f"block {block}'s attention returned no weights under eager attention")
            B = weights.shape[0]
            rows = weights[torch.arange(B, device=weights.device)[:, None], :, self._queries.to(weights.device)]
            # rows: (B, Q, H, T), the query rows of every head
            self._masses[block] = attention_masses(rows, self._target.to(rows.device),
                                                   self._distractor.to(rows.device)).cpu()
        return hook

    def _z_hook(self, block: int):
        import torch

        def keep(z):
            self._z[block] = z[:, -1].detach().to("cpu", torch.float32)
        return keep

    def __enter__(self) -> AttentionPass:
        self._eager = eager_attention(self.model)
        self._eager.__enter__()
        try:
            self._hooks.attach([*((site, self._z_hook(b)) for b, site in enumerate(self.sites)),
                                *((site, self._weights_hook(b)) for b, site in enumerate(self.patterns))])
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.remove()
        if self._eager is not None:
            self._eager.__exit__(None, None, None)
            self._eager = None

    def run(self, ids, mask, queries, target, distractor):
        """One forward of a left-padded batch (the boundary is the last position): ``queries`` (B, Q) query
        positions, ``target`` / ``distractor`` (B, T) key masks -> masses (B, n_blocks, Q, H, 3) float64 and
        the heads' boundary outputs (B, n_blocks, H * head_dim) float32, on the CPU."""
        import torch

        self._queries, self._target, self._distractor = queries, target, distractor
        self._masses: list[Any] = [None] * len(self.blocks)
        self._z: list[Any] = [None] * len(self.blocks)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        self.model.base_model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
        if any(x is None for x in self._masses + self._z):
            raise RuntimeError("an attention hook did not fire; the model's blocks were not called in order")
        return torch.stack(self._masses, dim=1), torch.stack(self._z, dim=1)


def head_masses(model, prompts, roles: Sequence[np.ndarray], site: str, pad_id: int, batch_size: int = 8):
    """Every head's attention masses on ``prompts`` (``roles[i]``: prompt i's items, True for a target) and
    its mean boundary output: ``(masses (P, n_blocks, Q, H, 3) float64, means (n_blocks, H * head_dim)
    float64)``; queries :data:`QUERIES` (the last-item query of a prompt without items is NaN). One eager
    forward per left-padded batch of ``batch_size`` prompts."""
    import torch

    device = model.get_input_embeddings().weight.device
    masses, z_sum = [], None
    with AttentionPass(model, site) as rec:
        for start in range(0, len(prompts), batch_size):
            group = list(prompts[start:start + batch_size])
            ids, mask, _ = pad_batch(group, pad_id, "left", device)
            T = ids.shape[1]
            last = [T - p.n_tokens + p.last_item_index if p.last_item_index >= 0 else T - 1 for p in group]
            queries = torch.tensor([[T - 1, q] for q in last], dtype=torch.long)  # (B, Q)
            target, distractor = item_masks(group, roles[start:start + len(group)], T)
            got, z = rec.run(ids, mask, queries, target, distractor)
            got = got.numpy()
            got[[b for b, p in enumerate(group) if p.last_item_index < 0], :, 1] = np.nan
            masses.append(got)
            z_sum = z.double().sum(0) if z_sum is None else z_sum + z.double().sum(0)
    return np.concatenate(masses), (z_sum / len(prompts)).numpy()


# ------------------------------------------------------------------------------------------ ablation


def head_setter(site: HookSite | None, heads, values, head_dim: int) -> Setter:
    """The :class:`~countlens.llm.patching.edits.Setter` of head ablation at ``site`` (an attention output
    projection's input): head ``heads[r]``'s slice at the last position of batch row ``r`` replaced by
    ``values[r]`` (R, head_dim); rows with ``heads[r] < 0`` are left alone."""
    import torch

    heads = torch.as_tensor(heads)
    rows = torch.nonzero(heads >= 0).flatten()
    return Setter(site, torch.as_tensor(values)[rows], positions=torch.full((len(rows),), -1), rows=rows,
                  head=heads[rows], width=head_dim)


def head_replacement(z, heads, values, head_dim: int):
    """``z`` (R, T, H * head_dim) with head ``heads[r]``'s slice at the last position of row ``r`` replaced by
    ``values[r]`` (R, head_dim); rows with ``heads[r] < 0`` are left alone (:func:`head_setter`)."""
    return head_setter(None, heads, values, head_dim).write(z)


class HeadAblation(Patch):
    """Context manager: in block ``site.block``, replace head ``heads[r]``'s output at the last position (the
    boundary of a left-padded batch) of batch row ``r`` by ``values[r]`` (R, head_dim), at the input of the
    attention output projection ``site``; ``heads[r] = -1`` leaves row ``r`` alone (one :func:`head_setter`).
    Edits every forward it spans (so score candidates after leaving it); hooks are removed on exit.

    >>> with HeadAblation(model, site, heads, values, head_dim):
    ...     model(input_ids, attention_mask=mask)
    """

    def __init__(self, model, site: HookSite, heads, values, head_dim: int):
        super().__init__(model, [head_setter(site, heads, values, head_dim)])


class Readout:
    """A linear read-out ``x @ coef + intercept`` of the residual at ``site`` (a probe), recorded at the last
    position of every forward while its hook is attached."""

    def __init__(self, site: HookSite, coef: np.ndarray, intercept: float):
        self.site, self.coef, self.intercept = site, np.asarray(coef, dtype=np.float64), float(intercept)
        self.values: np.ndarray | None = None

    def keep(self, hidden) -> None:
        x = hidden[:, -1].detach().double().cpu().numpy()  # (R, d)
        self.values = x @ self.coef + self.intercept


def boundary_scores(model, prompts, candidates, pad_id: int, batch_size: int = 8,
                    readout: Readout | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """Clean log p(candidate) (P, K) and the read-out (P,) of ``prompts`` (``candidates[i]``: prompt i's K token
    lists), each boundary one step from its prefix's cache (the same path as the ablated runs)."""
    out = np.zeros((len(prompts), len(candidates[0])), dtype=np.float64)
    read = np.zeros(len(prompts)) if readout is not None else None
    for start in range(0, len(prompts), batch_size):
        idx = list(range(start, min(start + batch_size, len(prompts))))
        batch = PrefixBatch(model, [prompts[i] for i in idx], pad_id)
        scores, values = batch.step(list(range(len(idx))), [candidates[i] for i in idx], readout=readout)
        out[idx] = scores
        if read is not None:
            read[idx] = values
    return out, read


def ablated_scores(model, prompts, candidates, sites: Sequence[HookSite], means, n_heads: int, pad_id: int,
                   batch_size: int = 8, readout: Readout | None = None, progress=None,
                   heads: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """log p(candidate) with one head's boundary output replaced by ``means``: (P, len(sites), H, K) float64,
    and the read-out (P, len(sites), H) (None without ``readout``); with ``heads``, only those heads of each
    block are ablated, H = len(heads) in that order.

    ``sites``: the attention-output hook sites of the ablated blocks; ``means`` (n_blocks, H * head_dim): each
    block's mean boundary output over the prompt set. Per batch of ``batch_size`` prompts the prompt before
    the boundary runs once; then, per block, all its heads times the batch's prompts are one batch of
    single-token steps. ``progress(k)`` is called after each block of each batch (k steps)."""
    import torch

    means = torch.as_tensor(means)
    head_dim = means.shape[-1] // n_heads
    chosen = torch.arange(n_heads) if heads is None else torch.as_tensor(list(heads), dtype=torch.long)
    H = len(chosen)
    K = len(candidates[0])
    out = np.zeros((len(prompts), len(sites), H, K), dtype=np.float64)
    read = np.zeros((len(prompts), len(sites), H)) if readout is not None else None
    for start in range(0, len(prompts), batch_size):
        idx = list(range(start, min(start + batch_size, len(prompts))))
        batch = PrefixBatch(model, [prompts[i] for i in idx], pad_id)
        rows = [b for b in range(len(idx)) for _ in range(H)]  # (B * H,) prompt-major
        row_heads = chosen.repeat(len(idx))  # (B * H,)
        row_candidates = [candidates[idx[b]] for b in rows]
        for j, site in enumerate(sites):
            values = means[site.block].view(n_heads, head_dim)[row_heads]  # (B * H, hd)
            context = HeadAblation(model, site, row_heads, values, head_dim)
            scores, values_read = batch.step(rows, row_candidates, context, readout)
            out[idx, j] = scores.reshape(len(idx), H, K)
            if read is not None:
                read[idx, j] = values_read.reshape(len(idx), H)
            if progress is not None:
                progress(len(rows))
    return out, read


__all__ = ["QUERIES", "KINDS", "attention_masses", "target_excess", "mean_std", "item_masks", "eager_attention",
           "AttentionPass", "head_masses", "head_setter", "head_replacement", "HeadAblation", "Readout", "PrefixBatch",
           "boundary_scores", "ablated_scores"]
