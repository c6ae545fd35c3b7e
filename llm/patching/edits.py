"""The one patch mechanism (a :class:`Setter` says what to write where, a :class:`Patch` holds setters during a
forward, a metric scores the patched run) and the causal tests at the assistant boundary built on it: activation
patching and steering along a probe (docs/definitions.md §2), and patching over positions and layers.

Boundary patching and steering edit one residual vector per prompt — the boundary position's, at one
location — during the prompt pass, and let the forward continue. Location 0 is the input to block 0, location
``l >= 1`` the output of block ``l - 1`` (the capture's locations, at the hook sites of
:mod:`countlens.llm.hooks`). **Only the boundary position is edited**: the items' positions keep their
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
from typing import Any

import numpy as np

from countlens.llm.answers import (
    ANSWER_TOKENS,
    Answers,
    answer_batch,
    answer_distribution,
    answer_prompts,
    answer_token_ids,
    candidate_token_ids,
    parse_answer,
    score_candidates,
    stop_token_ids,
)
from countlens.llm.capture.residuals import find_blocks, pad_batch, pad_token_id
from countlens.llm.hooks import HookSet, HookSite, hook_sites

# ------------------------------------------------------------------------ the one patch mechanism
#
# Every causal experiment writes into a forward the same way (TransformerLens's ``generic_activation_patch``,
# split as ``patch_setter`` and ``patching_metric``): a :class:`Setter` says what to write where — a hook site of
# :mod:`countlens.llm.hooks` (a residual location, the heads' outputs at a block's attention output projection),
# which batch rows and token positions, which slice of the last axis (one head's, or all of it), and the value
# (a replacement — another run's activation, a mean or zeros — or a step added) —; a :class:`Patch` holds setters
# active during every forward it spans, every hook through :class:`~countlens.llm.hooks.HookSet`; a metric scores
# the patched run from its candidates' teacher-forced log-probabilities (:func:`logit_difference`,
# :func:`expected_count`, :func:`~countlens.llm.answers.normalised_ld`). How the patched forward runs is the one
# thing experiments choose, for speed: a whole prompt pass (:func:`scored_answers`: boundary patching, steering),
# the corrupted run replayed below the patched site (:class:`PositionPatcher`: Figure 11), or one boundary step
# from the prompt's cache (:func:`countlens.llm.heads.attention.ablated_scores`: head ablation).

SETTER_MODES = ("replace", "add")


@dataclass
class Setter:
    """What to write where. At hook site ``site``, in batch rows ``rows`` ((R,), ``None``: every row, R = B),
    at token ``positions`` ((R,) one per row, negative from the end; ``None``: every position), into the last
    axis — all of it, or with ``head`` ((R,) one per row) the slice ``head * width .. (head + 1) * width`` —
    ``value`` is written: replaced (``mode="replace"``; a mean or zero ablation is a replacement by the mean or by
    zeros) or added (``"add"``). ``value``: (R, w) one per row or (w,) for all; with ``positions=None`` also
    (R, T, w). A forward whose sequence does not reach the positions (a decode step one token long after a
    prompt pass; or, with ``positions=None``, a length other than the value's T) is left alone."""

    site: Any
    value: Any
    positions: Any = None
    rows: Any = None
    mode: str = "replace"
    head: Any = None
    width: int | None = None

    def __post_init__(self):
        import torch

        if self.mode not in SETTER_MODES:
            raise ValueError(f"mode must be one of {SETTER_MODES}, got {self.mode!r}")
        if (self.head is None) != (self.width is None):
            raise ValueError("give a head's width with its head, and neither for the whole vector")
        self.value = torch.as_tensor(self.value)
        self.positions = None if self.positions is None else torch.as_tensor(self.positions, dtype=torch.long)
        self.rows = None if self.rows is None else torch.as_tensor(self.rows, dtype=torch.long)
        self.head = None if self.head is None else torch.as_tensor(self.head, dtype=torch.long)

    def reaches(self, hidden) -> bool:
        """Whether a forward whose site sees ``hidden`` (B, T, ...) is one this setter writes into."""
        if self.positions is None:
            return self.value.dim() < 3 or self.value.shape[1] == hidden.shape[1]
        return len(self.positions) > 0 and hidden.shape[1] > int(self.positions.max())

    def write(self, hidden):
        """``hidden`` (B, T, D) with the setter applied: a new tensor (the input is not modified), or
        ``hidden`` itself where the forward is not reached."""
        import torch

        if not self.reaches(hidden):
            return hidden
        B, T, D = hidden.shape
        device = hidden.device
        rows = torch.arange(B, device=device) if self.rows is None else self.rows.to(device)
        width = D if self.width is None else int(self.width)
        heads = torch.zeros_like(rows) if self.head is None else self.head.to(device)
        value = self.value.to(device, hidden.dtype)
        out = hidden.clone(memory_format=torch.contiguous_format)
        view = out.view(B, T, D // width, width)  # (B, T, units, width): one unit, or the heads side by side
        if self.positions is None:
            where = (rows, slice(None), heads)  # -> (R, T, width)
            if value.dim() == 2:
                value = value[:, None]
        else:
            where = (rows, self.positions.to(device), heads)  # -> (R, width)
        view[where] = value if self.mode == "replace" else view[where] + value
        return out


class Patch:
    """Context manager: the :class:`Setter` s ``setters`` active during every forward it spans, each one hook
    registered through :class:`~countlens.llm.hooks.HookSet` on the decoder blocks of ``model`` (in order; all
    or none: a setter that fails to hook removes those before it), all removed on exit, also after an error.

    >>> with Patch(model, [Setter(site, value, positions=index)]):
    ...     model(input_ids, attention_mask=mask)
    """

    def __init__(self, model, setters: Sequence[Setter]):
        self.setters = list(setters)
        self._hooks = HookSet(find_blocks(model))

    def __enter__(self) -> Patch:
        self._hooks.attach((s.site, s.write) for s in self.setters)
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.remove()


def boundary_setter(site, boundary_index, value, mode: str = "replace", rows: Sequence[int] | None = None) -> Setter:
    """A :class:`Setter` of the boundary vector at ``site``: ``boundary_index`` (B,) positions of every batch row;
    ``rows`` (optional) restricts it to those rows, ``value`` then holding one vector per listed row."""
    import torch

    index = torch.as_tensor(boundary_index, dtype=torch.long)
    rows = torch.arange(len(index)) if rows is None else torch.as_tensor(list(rows), dtype=torch.long)
    return Setter(site, value, positions=index[rows], rows=rows, mode=mode)


class BoundaryEdit(Patch):
    """Context manager: edit the boundary vector at residual ``location`` during every forward it spans (one
    :class:`Setter`, :func:`boundary_setter`).

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
        if (replace is None) == (add is None):
            raise ValueError("give exactly one of replace or add")
        self.location = int(location)
        [self.site] = hook_sites([self.location], len(find_blocks(model)))
        mode = "replace" if replace is not None else "add"
        self.setter = boundary_setter(self.site, boundary_index, replace if add is None else add, mode, rows)
        super().__init__(model, [self.setter])

    def edit(self, hidden):
        """``hidden`` (B, T, d) with the edit applied (a new tensor; the input is not modified)."""
        return self.setter.write(hidden)


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
    :func:`~countlens.llm.answers.candidate_logprobs`): the boundary edits ``edits[r] = (where, mode, vector)``
    of its rows ``rows`` — ``where`` a residual location index or a :class:`~countlens.llm.hooks.HookSite`,
    ``mode`` ``"replace"`` or ``"add"``, ``vector`` (w,) — as one :class:`Patch`; rows of a batch that share a
    site and mode share one :class:`Setter`."""
    import torch

    blocks = find_blocks(model)

    def context(rows, index):
        groups: dict[tuple[Any, str], list[int]] = {}
        for b, r in enumerate(rows):
            where = edits[r][0]
            groups.setdefault((where if isinstance(where, HookSite) else int(where), edits[r][1]), []).append(b)
        setters = []
        for (where, mode), mine in groups.items():
            site = where if isinstance(where, HookSite) else hook_sites([where], len(blocks))[0]
            value = torch.stack([torch.as_tensor(edits[rows[b]][2], dtype=torch.float32) for b in mine])
            setters.append(boundary_setter(site, index, value, mode, mine))
        return Patch(model, setters)

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


def patched_prompt_logprobs(model, ids, candidates, cells: Sequence[Sequence[Setter]],
                            batch_size: int = 16) -> np.ndarray:
    """log p(candidate) (len(cells), K) float64 of one unpadded prompt ``ids`` (T,) run once per cell under that
    cell's setters (each written into its own batch row: a setter's ``rows`` is set to the cell's row, so a
    setter for "every row" — value (w,) or (1, T, w) with ``positions=None`` — is one cell's), the candidates
    (K token lists) teacher-forced after the prompt from its cache with no setter active: a whole prompt pass per
    cell, ``batch_size`` cells per forward (the reference runner; :class:`PositionPatcher` is the fast one for
    one position per cell). A cell with no setter is the unpatched run."""
    import dataclasses

    import torch

    from countlens.llm.answers import _forward

    device = model.get_input_embeddings().weight.device
    ids = torch.as_tensor(list(ids), device=device)[None]  # (1, T)
    T = ids.shape[1]
    out = np.zeros((len(cells), len(candidates)), dtype=np.float64)
    for start in range(0, len(cells), int(batch_size)):
        mine = list(range(start, min(start + int(batch_size), len(cells))))
        rows = len(mine)
        batch = ids.expand(rows, -1)
        mask = torch.ones_like(batch)
        positions = torch.arange(T, device=device)[None].expand(rows, -1)
        setters = [dataclasses.replace(s, rows=[r]) for r, c in enumerate(mine) for s in cells[c]]
        with Patch(model, setters):
            logits, cache = _forward(model, batch, mask, positions, last_only=True)
        last = torch.full((rows, 1), T - 1, device=device)
        out[mine] = score_candidates(model, logits, cache, mask, last, [list(c) for c in candidates])
    return out


# ------------------------------------------------------------------------------------------- metrics
#
# What a patched run is scored by: functions of its candidates' teacher-forced log-probabilities (K candidate
# answers, :func:`~countlens.llm.answers.score_candidates`), so every runner above feeds every metric.


def logit_difference(logprobs: np.ndarray, a, b) -> np.ndarray:
    """``log p(a) − log p(b)`` in nats: ``logprobs`` (..., K) candidates' log-probabilities, ``a`` and ``b``
    candidate columns — two ints, or one column per row ((R,) each, ``logprobs`` (R, K)) -> (...,)."""
    lp = np.asarray(logprobs, dtype=np.float64)
    if np.ndim(a) == 0 and np.ndim(b) == 0:
        return lp[..., int(a)] - lp[..., int(b)]
    rows = np.arange(lp.shape[0])
    return lp[rows, np.asarray(a, dtype=np.int64)] - lp[rows, np.asarray(b, dtype=np.int64)]


def expected_count(logprobs: np.ndarray, counts: Sequence[int]) -> np.ndarray:
    """Σ k p(k) per row (R,) of candidate log-probabilities (R, K) for the candidate counts ``counts`` (K,)
    (:func:`~countlens.llm.answers.answer_distribution`'s ``expected``)."""
    return answer_distribution(logprobs, counts).expected


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


def residual_runs(model, ids, site: str | None = None):
    """One forward of the unpadded rows ``ids`` (R, T) keeping every location's residual at every position.

    Returns ``(resid, logits, cache)``: ``resid`` (R, n_blocks + 1, T, d) in the model's dtype (the hook sites of
    :mod:`countlens.llm.hooks`), ``logits`` (R, V) float32 at the last position, ``cache`` the run's KV cache
    with full-length layers (:func:`_full_cache`). With ``site`` (a kind of :data:`countlens.llm.hooks.SITES`
    other than ``resid``) a fourth item: the activations at every site of that kind, (R, n_sites, T, w)."""
    import torch

    from countlens.llm.answers import _forward

    blocks, sites = _location_sites(model)
    extra = [] if site in (None, "resid") else hook_sites(range(len(blocks)), len(blocks), site)
    out: list = [None] * (len(sites) + len(extra))

    def keeper(slot):
        def keep(hidden):
            out[slot] = hidden.detach()
        return keep

    T = ids.shape[1]
    mask = torch.ones_like(ids)
    positions = torch.arange(T, device=ids.device)[None].expand(ids.shape[0], T)
    with HookSet(blocks).attach((s, keeper(i)) for i, s in enumerate([*sites, *extra])):
        logits, cache = _forward(model, ids, mask, positions, _full_cache(), last_only=True)
    if any(o is None for o in out):
        raise RuntimeError("a hook did not fire; the model's blocks were not called in order")
    device = out[0].device
    resid = torch.stack([o.to(device) for o in out[:len(sites)]], dim=1)
    if site in (None, "resid"):
        return resid, logits, cache
    return resid, logits, cache, torch.stack([o.to(device) for o in out[len(sites):]], dim=1)


def replayed_blocks(site) -> int:
    """How many blocks below hook site ``site`` a cached patched run replays: every block whose output does
    not depend on the site (a block's own output hook still fires on its replayed output)."""
    return site.block + 1 if site.module == "" and site.when == "post" else site.block


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
    """Patch one clean prompt's activation into its corrupted twin at (site, position) cells, scoring
    candidate answers from each patched run (all tokens teacher-forced, :func:`~countlens.llm.answers.
    score_candidates`).

    ``clean_ids``, ``corrupt_ids``: (T,) token ids of the same length (one prompt each, no padding);
    ``candidates``: K token-id lists. ``site``: the kind of hook site patched (:data:`countlens.llm.hooks.SITES`;
    ``resid``, the default, indexes the residual locations; ``attn_z:{arch}`` the blocks' heads, one head at a
    time with ``head_dim``). :attr:`clean` and :attr:`corrupt` are the unpatched runs' (K,) log-probabilities;
    :meth:`logprobs` the patched runs'. ``method``: ``"cached"`` (the corrupted run's cache and residuals
    reused, see above) or ``"naive"`` (one whole forward of the corrupted prompt per cell, the same
    :class:`Setter`; the reference). ``batch_size`` patched runs share a forward. With ``skip_unchanged`` a
    cell whose clean value equals the corrupted one exactly (every position before the changed token; at the
    embeddings every other position) is the corrupted run itself, and is not run.
    """

    def __init__(self, model, clean_ids, corrupt_ids, candidates, method: str = "cached", batch_size: int = 16,
                 skip_unchanged: bool = True, site: str = "resid", head_dim: int | None = None):
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
        self.site, self.head_dim = site, head_dim
        self.T = ids.shape[1]
        runs = residual_runs(model, ids, site)
        self.resid, logits, cache = runs[:3]  # (2, N+1, T, d)
        self.values = self.resid if len(runs) == 3 else runs[3]  # (2, n_sites, T, w): what a cell writes
        if len(runs) > 3:
            self.sites = hook_sites(range(len(self.blocks)), len(self.blocks), site)
        if method == "cached" and not isinstance(getattr(cache, "layers", None), list):
            self.method = "naive"  # an old transformers cache without per-layer objects: no reuse
        mask = torch.ones_like(ids)
        last = torch.full((2, 1), self.T - 1, device=device)
        both = score_candidates(model, logits, cache, mask, last, self.candidates)
        self.clean, self.corrupt = both[0], both[1]
        self.cache = cache
        self.runs = 0  # patched forwards actually run (batches x rows)

    def _value(self, run: int, index: int, positions, head: int | None):
        value = self.values[run, index, positions]  # (..., w)
        if head is None:
            return value
        return value[..., head * self.head_dim:(head + 1) * self.head_dim]

    def unchanged(self, location: int, position: int, head: int | None = None) -> bool:
        """Whether the clean and corrupted values at (site ``location``, position) are equal (the patch is a
        no-op)."""
        import torch

        return bool(torch.equal(self._value(0, location, position, head), self._value(1, location, position, head)))

    def logprobs(self, location: int, positions, head: int | None = None) -> np.ndarray:
        """(len(positions), K) log-probabilities of the candidates after patching each position at site
        ``location`` (a residual location, or a block for a per-block site; ``head``: one head's slice)."""
        positions = [int(p) for p in positions]
        if any(p < 0 or p >= self.T for p in positions):
            raise ValueError(f"positions must lie in 0..{self.T - 1}")
        if head is not None and (self.site == "resid" or self.head_dim is None):
            raise ValueError("patching one head needs a per-head site and its head_dim")
        out = np.zeros((len(positions), len(self.candidates)))
        todo = []
        for j, p in enumerate(positions):
            if self.skip_unchanged and self.unchanged(location, p, head):
                out[j] = self.corrupt
            else:
                todo.append(j)
        todo.sort(key=lambda j: positions[j])
        run = self._cached if self.method == "cached" else self._naive
        for mine in self._batches(todo):
            out[mine] = run(location, [positions[j] for j in mine], head)
            self.runs += len(mine)
        return out

    def first_change(self, location: int, head: int | None = None) -> int | None:
        """The first position whose clean and corrupted values at site ``location`` differ (``head``: in that head's
        slice), or ``None`` where none does."""
        import torch

        a, b = self._value(0, location, slice(None), head), self._value(1, location, slice(None), head)  # (T, w)
        differ = torch.nonzero((a != b).any(dim=-1)).flatten()
        return int(differ[0]) if len(differ) else None

    def logprobs_every_position(self, location: int, heads: Sequence[int | None] = (None,)) -> np.ndarray:
        """(len(heads), K) log-probabilities of the candidates after patching every position at site ``location``
        at once — the whole vector (``None``) or one head's slice per row of ``heads``. Positions before the first
        that differs (:meth:`first_change`) hold equal values, so the cached method patches from there on only,
        from the corrupted run's cache below it (the naive one runs the whole prompt); with no position that
        differs the rows are the corrupted run."""
        heads = list(heads)
        if any(h is None for h in heads) and any(h is not None for h in heads):
            raise ValueError("heads must be all None (the whole vector) or all head indices")
        if any(h is not None for h in heads) and (self.site == "resid" or self.head_dim is None):
            raise ValueError("patching one head needs a per-head site and its head_dim")
        starts = [self.first_change(location, h) for h in heads]
        out = np.tile(self.corrupt, (len(heads), 1))
        todo = [j for j, start in enumerate(starts) if start is not None]
        if not todo:
            return out
        start = 0 if self.method == "naive" else min(starts[j] for j in todo)
        for mine in self._batches(todo):
            out[mine] = self._from(location, start, [heads[j] for j in mine])
            self.runs += len(mine)
        return out

    def _from(self, location: int, start: int, heads: list[int | None]) -> np.ndarray:
        """Rows patched at every position from ``start`` on (``heads``: one per row, or ``None`` each)."""
        import torch

        from countlens.llm.answers import _forward

        rows = len(heads)
        ids = self.ids[1:2, start:].expand(rows, -1)  # the corrupted tokens from ``start`` on
        mask = torch.ones((rows, self.T), dtype=ids.dtype, device=ids.device)
        pos_ids = torch.arange(start, self.T, device=ids.device)[None].expand(rows, -1)
        whole = heads[0] is None
        value = torch.stack([self._value(0, location, slice(start, None), h) for h in heads])  # (rows, T', w)
        kw = {} if whole else {"head": heads, "width": self.head_dim}
        patch = Patch(self.model, [Setter(self.sites[location], value, **kw)])
        if start == 0:
            with patch:
                logits, cache = _forward(self.model, ids, torch.ones_like(ids), pos_ids, last_only=True)
            return self._score(logits, cache, rows)
        cache = _prefix_cache(self.cache, 1, start, rows)
        kept = self.resid[1, 1:, start:]
        keys = [layer.keys[1, :, start:] for layer in self.cache.layers]
        values = [layer.values[1, :, start:] for layer in self.cache.layers]
        with _replayed(self.blocks, replayed_blocks(self.sites[location]), cache, kept, keys, values, rows), patch:
            logits, cache = _forward(self.model, ids, mask, pos_ids, cache, last_only=True)
        return self._score(logits, cache, rows)

    def _batches(self, todo: list[int]):
        """Consecutive runs of ``todo`` (sorted by position), ``batch_size`` each: a cached batch runs every row
        from its first position on, so neighbouring positions waste few tokens (and few, larger matrix
        products beat many small ones)."""
        for start in range(0, len(todo), self.batch_size):
            yield todo[start:start + self.batch_size]

    def _setter(self, location: int, positions: list[int], head: int | None, shift: int = 0) -> Setter:
        """The clean values of ``positions`` written at ``positions - shift`` of a batch of one row each."""
        value = self._value(0, location, positions, head)  # (rows, w)
        at = [p - shift for p in positions]
        if head is None:
            return Setter(self.sites[location], value, positions=at)
        return Setter(self.sites[location], value, positions=at, head=[head] * len(at), width=self.head_dim)

    def _score(self, logits, cache, rows: int) -> np.ndarray:
        import torch

        device = logits.device
        mask = torch.ones((rows, self.T), dtype=self.ids.dtype, device=device)
        last = torch.full((rows, 1), self.T - 1, device=device)
        return score_candidates(self.model, logits, cache, mask, last, self.candidates)

    def _naive(self, location: int, positions: list[int], head: int | None = None) -> np.ndarray:
        import torch

        from countlens.llm.answers import _forward

        rows = len(positions)
        ids = self.ids[1:2].expand(rows, -1)
        mask = torch.ones_like(ids)
        pos_ids = torch.arange(self.T, device=ids.device)[None].expand(rows, -1)
        with Patch(self.model, [self._setter(location, positions, head)]):
            logits, cache = _forward(self.model, ids, mask, pos_ids, last_only=True)
        return self._score(logits, cache, rows)

    def _cached(self, location: int, positions: list[int], head: int | None = None) -> np.ndarray:
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
        patch = Patch(self.model, [self._setter(location, positions, head, shift=start)])
        with _replayed(self.blocks, replayed_blocks(self.sites[location]), cache, kept, keys, values, rows), patch:
            logits, cache = _forward(self.model, ids, mask, pos_ids, cache, last_only=True)
        return self._score(logits, cache, rows)
