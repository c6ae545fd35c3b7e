"""Causal tests at the assistant boundary: activation patching and steering along a probe (docs/definitions.md §2).

Both edit one residual vector per prompt — the boundary position's, at one location — during the prompt pass,
and let the forward continue. Location 0 is the input to block 0, location ``l >= 1`` the output of block
``l - 1`` (the capture's locations, at the hook sites of :mod:`countlens.llm.hooks`). **Only the boundary
position is edited**: the items' positions keep their
own vectors, so later blocks can re-read the items through attention. A patch that moves the answer at
location ℓ therefore shows that the count is *committed* at the boundary by ℓ; one that does not may still
mean the count is re-derived later.

- Patching: the target prompt's boundary vector at ℓ is replaced by a source prompt's (same seed, wording and
  pair; count ``n_s`` instead of ``n_t``).
- Steering: ``Δ · w / ‖w‖²`` is added at ℓ, ``w`` the probe's coefficients in native coordinates, so the
  probe's own read-out moves by exactly ``Δ``; a random direction ``u`` with ``‖u‖ = ‖w‖`` is the control.
  In count units (:func:`count_step`) any direction is scaled to ``Δ · ‖v‖``, ``v`` the mean-difference
  direction (the slope of the count centroids on n): as far as Δ more items move the vector on average.
- Patching over positions and layers (Figure 11, :class:`PositionPatcher`): one position of any token, not
  only the boundary — a clean prompt's residual at (ℓ, p) replaces its corrupted twin's, computed from the
  corrupted run's key/value cache and residuals rather than a whole forward per cell (see below).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from countlens.llm.answers import (
    ANSWER_TOKENS,
    Answers,
    answer_batch,
    answer_prompts,
    answer_token_ids,
    candidate_token_ids,
    parse_answer,
    score_candidates,
    stop_token_ids,
)
from countlens.llm.capture.residuals import find_blocks, pad_batch, pad_token_id
from countlens.llm.hooks import HookSet, hook_sites


class BoundaryEdit:
    """Context manager: edit the boundary vector at ``location`` during every forward it spans.

    >>> with BoundaryEdit(model, location=5, boundary_index=index, replace=vectors):   # vectors (B, d)
    ...     model(input_ids, attention_mask=mask)

    ``boundary_index``: (B,) positions. ``replace`` (B, d) sets the boundary vector of each row; ``add``
    ((d,) or (B, d)) adds to it. ``rows`` (optional index list) restricts the edit to those batch rows; then
    ``replace``/``add`` hold one vector per listed row. Edits apply to sequences longer than the boundary
    position only (so a decode step, one token long, is never edited). A location the model lacks is a
    ``ConfigError("locations")``. Hooks are always removed on exit.
    """

    def __init__(self, model, location: int, boundary_index, replace=None, add=None,
                 rows: Sequence[int] | None = None):
        import torch

        if (replace is None) == (add is None):
            raise ValueError("give exactly one of replace or add")
        self.blocks = find_blocks(model)
        self.location = int(location)
        [self.site] = hook_sites([self.location], len(self.blocks))
        index = torch.as_tensor(boundary_index, dtype=torch.long)
        self.rows = torch.arange(len(index)) if rows is None else torch.as_tensor(list(rows), dtype=torch.long)
        self.index = index[self.rows]
        self.value = torch.as_tensor(replace if replace is not None else add)
        self.mode = "replace" if replace is not None else "add"
        self._hooks = HookSet(self.blocks)

    def edit(self, hidden):
        """``hidden`` (B, T, d) with the edit applied (a new tensor; the input is not modified)."""
        if hidden.shape[1] <= int(self.index.max()):
            return hidden
        rows, index = self.rows.to(hidden.device), self.index.to(hidden.device)
        value = self.value.to(hidden.device, hidden.dtype)
        out = hidden.clone()
        out[rows, index] = value if self.mode == "replace" else out[rows, index] + value
        return out

    def __enter__(self) -> BoundaryEdit:
        self._hooks.attach([(self.site, self.edit)])
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.remove()


def steering_vector(w: np.ndarray, delta: float) -> np.ndarray:
    """``Δ · w / ‖w‖²`` (d,): the probe ``w · x + b`` reads exactly ``Δ`` more on ``x`` plus it."""
    w = np.asarray(w, dtype=np.float64)
    norm2 = float(w @ w)
    if not norm2 > 0:
        raise ValueError("the probe direction is zero")
    return delta * w / norm2


def count_step(u: np.ndarray, delta: float, length: float) -> np.ndarray:
    """``Δ · length · u / ‖u‖`` (d,): a step of ``length`` per unit of Δ along ``u`` (steering in count units:
    ``length = ‖v‖``, the mean-difference direction's norm, so Δ = 1 moves as far as one more item)."""
    u = np.asarray(u, dtype=np.float64)
    norm = float(np.linalg.norm(u))
    if not norm > 0:
        raise ValueError("the steering direction is zero")
    return delta * float(length) * u / norm


def random_direction(w: np.ndarray, seed: int) -> np.ndarray:
    """A direction drawn uniformly on the sphere of radius ``‖w‖`` (the steering control), seeded."""
    w = np.asarray(w, dtype=np.float64)
    u = np.random.default_rng([seed, w.size]).standard_normal(w.shape)
    return u * (np.linalg.norm(w) / np.linalg.norm(u))


def boundary_edits(model, edits):
    """``context(rows, boundary_index)`` for one batch of prompts (:func:`~countlens.llm.answers.answer_prompts`,
    :func:`~countlens.llm.answers.candidate_logprobs`): the boundary edits ``edits[r] = (location, mode,
    vector)`` of its rows ``rows``, ``mode`` ``"replace"`` or ``"add"``, ``vector`` (d,). Rows of a batch that
    share a location and mode share one :class:`BoundaryEdit`."""
    import torch

    def context(rows, index):
        groups: dict[tuple[int, str], list[int]] = {}
        for b, r in enumerate(rows):
            groups.setdefault((int(edits[r][0]), edits[r][1]), []).append(b)
        with contextlib.ExitStack() as stack:  # a failure while entering one edit exits those entered
            for (location, mode), mine in groups.items():
                value = torch.stack([torch.as_tensor(edits[rows[b]][2], dtype=torch.float32) for b in mine])
                stack.enter_context(BoundaryEdit(model, location, index, rows=mine, **{mode: value}))
            return stack.pop_all()

    return context


def edited_answers(model, tokenizer, prompts, edits, template: str = "chat", batch_size: int = 16,
                   answer_tokens: int = ANSWER_TOKENS) -> Answers:
    """The model's answers to ``prompts`` with one boundary edit each (:func:`boundary_edits`), batched across
    edits."""
    return answer_prompts(model, tokenizer, prompts, template, batch_size, answer_tokens,
                          context=boundary_edits(model, edits))


@dataclass
class ScoredAnswers(Answers):
    """:class:`~countlens.llm.answers.Answers` and, from the same prompt pass, every candidate count's
    teacher-forced log-probability: ``candidate_logprobs`` (P, K), in the order of ``counts``."""

    counts: list[int]
    candidate_logprobs: np.ndarray


def scored_answers(model, tokenizer, prompts, counts: Sequence[int], template: str = "chat", batch_size: int = 16,
                   answer_tokens: int = ANSWER_TOKENS, edits=None) -> ScoredAnswers:
    """The greedy answers to ``prompts`` and the log-probability of each candidate answer ``counts`` (every
    token teacher-forced, no end-of-turn token), both from one prompt pass per batch
    (:func:`~countlens.llm.answers.answer_batch` with its ``candidates``); ``edits`` (optional, one per prompt,
    :func:`boundary_edits`) are active during the prompt pass. The same answers as
    :func:`~countlens.llm.answers.answer_prompts` plus the scores of :func:`~countlens.llm.answers.
    candidate_logprobs`, at the cost of one pass instead of two."""
    pad_id, stop = pad_token_id(tokenizer), stop_token_ids(model, tokenizer)
    device = model.get_input_embeddings().weight.device
    candidates = candidate_token_ids(tokenizer, counts, template)
    context = None if edits is None else boundary_edits(model, edits)
    texts, logprob = [""] * len(prompts), np.zeros(len(prompts))
    scores = np.zeros((len(prompts), len(candidates)))
    for start in range(0, len(prompts), batch_size):
        rows = list(range(start, min(start + batch_size, len(prompts))))
        ids, mask, index = pad_batch([prompts[i] for i in rows], pad_id, "left", device)
        correct = [answer_token_ids(tokenizer, prompts[i].n, template) for i in rows]
        out = answer_batch(model, ids, mask, correct, stop, answer_tokens, pad_id,
                           None if context is None else context(rows, index), candidates=candidates)
        for i, text in zip(rows, out.texts(tokenizer), strict=True):
            texts[i] = text
        logprob[rows], scores[rows] = out.logprob, out.candidates
    return ScoredAnswers(texts, [parse_answer(t) for t in texts], logprob.tolist(), [int(k) for k in counts],
                         scores)


# ------------------------------------------------------------------ patching over positions and layers
#
# Figure 11: the clean run's residual at (location ℓ, position p) replaces the corrupted run's, and the forward
# continues. The patched run equals the corrupted run below ℓ at every position, and at positions before p
# everywhere (the model is causal), so a patch at (ℓ, p) is computed from the corrupted run: its key/value cache
# up to p - 1, its residual at ℓ for the positions from p on (p's own replaced), and blocks ℓ.. run over those
# positions only. Blocks below ℓ are not run at all: each is replayed (its stored output returned, its stored keys
# and values appended to the cache), so the patched run's cache is whole for teacher-forcing multi-token answers.

PATCH_METHODS = ("cached", "naive")


def _location_sites(model) -> tuple[object, list]:
    blocks = find_blocks(model)
    return blocks, hook_sites(list(range(len(blocks) + 1)), len(blocks))


def _full_cache():
    """An empty KV cache of full-length layers (``DynamicCache()`` without a config: no sliding-window layer,
    so every position's keys and values stay; the masks still apply each layer's window)."""
    from transformers import DynamicCache

    return DynamicCache()


def residual_runs(model, ids):
    """One forward of the unpadded rows ``ids`` (R, T) keeping every location's residual at every position.

    Returns ``(resid, logits, cache)``: ``resid`` (R, n_blocks + 1, T, d) in the model's dtype (the hook sites of
    :mod:`countlens.llm.hooks`), ``logits`` (R, V) float32 at the last position, ``cache`` the run's KV cache
    with full-length layers (:func:`_full_cache`)."""
    import torch

    from countlens.llm.answers import _forward

    blocks, sites = _location_sites(model)
    out: list = [None] * len(sites)

    def keeper(slot):
        def keep(hidden):
            out[slot] = hidden.detach()
        return keep

    T = ids.shape[1]
    mask = torch.ones_like(ids)
    positions = torch.arange(T, device=ids.device)[None].expand(ids.shape[0], T)
    with HookSet(blocks).attach((site, keeper(i)) for i, site in enumerate(sites)):
        logits, cache = _forward(model, ids, mask, positions, _full_cache(), last_only=True)
    if any(o is None for o in out):
        raise RuntimeError("a hook did not fire; the model's blocks were not called in order")
    device = out[0].device
    return torch.stack([o.to(device) for o in out], dim=1), logits, cache


def _prefix_cache(cache, row: int, length: int, rows: int):
    """A cache holding batch row ``row`` of ``cache``'s first ``length`` positions, repeated ``rows`` times
    (``cache`` is left as it is)."""
    out = copy.copy(cache)
    out.layers = []
    for layer in cache.layers:
        new = copy.copy(layer)
        new.keys = layer.keys[row:row + 1, :, :length].expand(rows, -1, -1, -1)  # the first update copies
        new.values = layer.values[row:row + 1, :, :length].expand(rows, -1, -1, -1)
        out.layers.append(new)
    return out


@contextlib.contextmanager
def _replayed(blocks, n: int, cache, outputs, keys, values, rows: int):
    """Blocks ``0..n-1`` replaced by their stored run: block ``i`` returns ``outputs[i]`` (T', d) for every row
    and appends ``keys[i]`` / ``values[i]`` (H, T', hd) to ``cache``'s layer ``i``. Hooks on the blocks still
    fire (the module's ``forward`` is replaced, not the module); restored on exit."""
    def replay(i):
        def forward(hidden_states, *args, **kwargs):
            layer = cache.layers[i]
            layer.update(keys[i][None].expand(rows, -1, -1, -1), values[i][None].expand(rows, -1, -1, -1))
            return outputs[i].to(hidden_states.device)[None].expand(rows, -1, -1).clone()
        return forward

    own = [blocks[i].__dict__.get("forward") for i in range(n)]  # a wrapper set on the instance (accelerate's)
    try:
        for i in range(n):
            blocks[i].forward = replay(i)
        yield
    finally:
        for i in range(n):
            if own[i] is None:
                blocks[i].__dict__.pop("forward", None)
            else:
                blocks[i].forward = own[i]


class PositionPatcher:
    """Patch one clean prompt's residual into its corrupted twin at (location, position) cells, scoring
    candidate answers from each patched run (all tokens teacher-forced, :func:`~countlens.llm.answers.
    score_candidates`).

    ``clean_ids``, ``corrupt_ids``: (T,) token ids of the same length (one prompt each, no padding);
    ``candidates``: K token-id lists. :attr:`clean` and :attr:`corrupt` are the unpatched runs' (K,)
    log-probabilities; :meth:`logprobs` the patched runs'. ``method``: ``"cached"`` (the corrupted run's cache
    and residuals reused, see above) or ``"naive"`` (one whole forward of the corrupted prompt per cell, the
    edit a :class:`BoundaryEdit` at that position; the reference). ``batch_size`` patched runs share a forward.
    With ``skip_unchanged`` a cell whose clean vector equals the corrupted one exactly (every position before
    the changed token; at the embeddings every other position) is the corrupted run itself, and is not run.
    """

    def __init__(self, model, clean_ids, corrupt_ids, candidates, method: str = "cached", batch_size: int = 16,
                 skip_unchanged: bool = True):
        import torch

        if method not in PATCH_METHODS:
            raise ValueError(f"method must be one of {PATCH_METHODS}, got {method!r}")
        device = model.get_input_embeddings().weight.device
        ids = torch.stack([torch.as_tensor(clean_ids), torch.as_tensor(corrupt_ids)]).to(device)  # (2, T)
        if ids.shape[1] < 1:
            raise ValueError("the prompts are empty")
        self.model, self.ids, self.candidates = model, ids, [list(c) for c in candidates]
        self.method, self.batch_size, self.skip_unchanged = method, int(batch_size), skip_unchanged
        self.blocks, self.sites = _location_sites(model)
        self.T = ids.shape[1]
        self.resid, logits, cache = residual_runs(model, ids)  # (2, N+1, T, d)
        if method == "cached" and not isinstance(getattr(cache, "layers", None), list):
            self.method = "naive"  # an old transformers cache without per-layer objects: no reuse
        mask = torch.ones_like(ids)
        last = torch.full((2, 1), self.T - 1, device=device)
        both = score_candidates(model, logits, cache, mask, last, self.candidates)
        self.clean, self.corrupt = both[0], both[1]
        self.cache = cache
        self.runs = 0  # patched forwards actually run (batches x rows)

    def unchanged(self, location: int, position: int) -> bool:
        """Whether the clean and corrupted residuals at (location, position) are equal (the patch is a no-op)."""
        import torch

        return bool(torch.equal(self.resid[0, location, position], self.resid[1, location, position]))

    def logprobs(self, location: int, positions) -> np.ndarray:
        """(len(positions), K) log-probabilities of the candidates after patching each position at ``location``."""
        positions = [int(p) for p in positions]
        if any(p < 0 or p >= self.T for p in positions):
            raise ValueError(f"positions must lie in 0..{self.T - 1}")
        out = np.zeros((len(positions), len(self.candidates)))
        todo = []
        for j, p in enumerate(positions):
            if self.skip_unchanged and self.unchanged(location, p):
                out[j] = self.corrupt
            else:
                todo.append(j)
        todo.sort(key=lambda j: positions[j])
        run = self._cached if self.method == "cached" else self._naive
        for mine in self._batches(todo):
            out[mine] = run(location, [positions[j] for j in mine])
            self.runs += len(mine)
        return out

    def _batches(self, todo: list[int]):
        """Consecutive runs of ``todo`` (sorted by position), ``batch_size`` each: a cached batch runs every row
        from its first position on, so neighbouring positions waste few tokens (and few, larger matrix
        products beat many small ones)."""
        for start in range(0, len(todo), self.batch_size):
            yield todo[start:start + self.batch_size]

    def _score(self, logits, cache, rows: int) -> np.ndarray:
        import torch

        device = logits.device
        mask = torch.ones((rows, self.T), dtype=self.ids.dtype, device=device)
        last = torch.full((rows, 1), self.T - 1, device=device)
        return score_candidates(self.model, logits, cache, mask, last, self.candidates)

    def _naive(self, location: int, positions: list[int]) -> np.ndarray:
        import torch

        from countlens.llm.answers import _forward

        rows = len(positions)
        ids = self.ids[1:2].expand(rows, -1)
        mask = torch.ones_like(ids)
        pos_ids = torch.arange(self.T, device=ids.device)[None].expand(rows, -1)
        value = self.resid[0, location, positions]  # (rows, d)
        with BoundaryEdit(self.model, location, torch.tensor(positions), replace=value):
            logits, cache = _forward(self.model, ids, mask, pos_ids, last_only=True)
        return self._score(logits, cache, rows)

    def _cached(self, location: int, positions: list[int]) -> np.ndarray:
        import torch

        from countlens.llm.answers import _forward

        rows, start = len(positions), min(positions)
        ids = self.ids[1:2, start:].expand(rows, -1)  # the corrupted tokens from the first patched position on
        mask = torch.ones((rows, self.T), dtype=ids.dtype, device=ids.device)
        pos_ids = torch.arange(start, self.T, device=ids.device)[None].expand(rows, -1)
        cache = _prefix_cache(self.cache, 1, start, rows)
        kept = self.resid[1, 1:, start:]  # (N, T', d): block i's stored output
        keys = [layer.keys[1, :, start:] for layer in self.cache.layers]
        values = [layer.values[1, :, start:] for layer in self.cache.layers]
        value = self.resid[0, location, positions]  # (rows, d)
        edit = BoundaryEdit(self.model, location, torch.tensor(positions) - start, replace=value)
        with _replayed(self.blocks, location, cache, kept, keys, values, rows), edit:
            logits, cache = _forward(self.model, ids, mask, pos_ids, cache, last_only=True)
        return self._score(logits, cache, rows)
