"""The one patch mechanism (a :class:`Setter` says what to write where, a :class:`Patch` holds setters during a
forward, a metric scores the patched run) and the causal tests at the assistant boundary built on it: activation
patching and steering along a probe (docs/definitions.md §2), and patching over positions and layers.

Boundary patching and steering edit one residual vector per prompt — the boundary position's, at one
location — and let the forward continue. They run on the boundary-step runner (:mod:`countlens.llm.boundary`):
an edit at the boundary changes no earlier key or value, so each prompt's prefix runs once and each edit is one
row of a batched one-token step from it, an :func:`edit_setter` writing position ``-1`` of its row; the whole
prompt pass per edit (:func:`boundary_edits` during :func:`scored_answers`) stays as the reference the tests
compare it with, and for callers that read the answers of a few edited prompts. Location 0 is the input to
block 0, location ``l >= 1`` the output of block ``l - 1`` (the capture's locations, at the hook sites of
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
- Patching over positions and layers (Figure 11, :class:`~countlens.llm.patching.replay.PositionPatcher`): one position of any token, not
  only the boundary — a clean prompt's residual at (ℓ, p) replaces its corrupted twin's, computed from the
  corrupted run's key/value cache and residuals rather than a whole forward per cell (see below).
"""

from __future__ import annotations

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
    number_continuations,
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
# thing experiments choose, for speed: a whole prompt pass (:func:`scored_answers`, :func:`patched_prompt_logprobs`:
# the reference runners, and ``--scope all``), the corrupted run replayed below the patched site
# (:class:`~countlens.llm.patching.replay.PositionPatcher`: Figure 11), or one boundary step from the prompt's
# cache, the cells rows of one batched step sharing it, the answers scored and decoded from the step's cache
# (:mod:`countlens.llm.boundary`: Figure 9a's patching, Figure 9b's steering, head ablation, the components'
# mean-ablation and twin patching at the boundary).

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


def stacked_setters(setters: Sequence[Setter]) -> list[Setter]:
    """``setters`` (each with its ``rows`` and ``positions`` given, one value per row) as few :class:`Setter` s
    as write the same: those of one site, mode, slice width and positions-per-row form merged into one, their
    rows, positions, heads and values stacked (a batch of one-row cells in a handful of hooks instead of one per
    cell). Setters that write the same place of the same row are kept apart, in order (the later wins, as with
    one hook each)."""
    import torch

    groups: dict[tuple, list[Setter]] = {}
    out: list[Setter] = []
    for s in setters:
        if s.rows is None or s.positions is None:
            out.append(s)
            continue
        key = (s.site, s.mode, s.width, s.head is None)
        groups.setdefault(key, []).append(s)
    for group in groups.values():
        batches: list[list[Setter]] = []
        for s in group:  # a setter whose (row, position, head) is taken opens a new batch
            mine = {(int(r), int(p), None if s.head is None else int(h)) for r, p, h in
                    zip(s.rows, s.positions.expand(len(s.rows)),
                        s.head.expand(len(s.rows)) if s.head is not None else [None] * len(s.rows), strict=True)}
            for batch in batches:
                if not mine & batch[0]:
                    batch[0] |= mine
                    batch.append(s)
                    break
            else:
                batches.append([mine, s])
        for _, *members in batches:
            first = members[0]
            n = [len(s.rows) for s in members]
            value = torch.cat([s.value.reshape(1, -1).expand(k, -1) if s.value.dim() == 1 else s.value
                               for s, k in zip(members, n, strict=True)])
            out.append(Setter(first.site, value,
                              positions=torch.cat([s.positions.expand(k) for s, k in zip(members, n, strict=True)]),
                              rows=torch.cat([s.rows for s in members]), mode=first.mode,
                              head=None if first.head is None else torch.cat(
                                  [s.head.expand(k) for s, k in zip(members, n, strict=True)]),
                              width=first.width))
    return out


def boundary_setter(site, boundary_index, value, mode: str = "replace", rows: Sequence[int] | None = None) -> Setter:
    """A :class:`Setter` of the boundary vector at ``site``: ``boundary_index`` (B,) positions of every batch row;
    ``rows`` (optional) restricts it to those rows, ``value`` then holding one vector per listed row."""
    import torch

    index = torch.as_tensor(boundary_index, dtype=torch.long)
    rows = torch.arange(len(index)) if rows is None else torch.as_tensor(list(rows), dtype=torch.long)
    return Setter(site, value, positions=index[rows], rows=rows, mode=mode)


class BoundaryEdit(Patch):
    """Context manager: edit the boundary vector at residual ``location`` during every forward it spans (one
    :class:`Setter`, :func:`boundary_setter`): the one-edit form for a notebook or a test. The experiments
    batch one edit per prompt with :func:`boundary_edits` instead (the same setter).

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


def edit_site(where, n_blocks: int) -> HookSite:
    """The hook site of an edit's ``where``: a :class:`~countlens.llm.hooks.HookSite` as it is, or a residual
    location index of a model of ``n_blocks`` blocks."""
    return where if isinstance(where, HookSite) else hook_sites([int(where)], n_blocks)[0]


def edit_setter(edit, n_blocks: int) -> Setter:
    """The :class:`Setter` of one boundary edit ``(where, mode, vector)`` (:func:`boundary_edits`' form) at the
    boundary of a boundary step's row (``positions=[-1]``, :mod:`countlens.llm.boundary`), the vector as
    float32 as :func:`boundary_edits` writes it (then cast to the model's dtype)."""
    import torch

    where, mode, vector = edit
    return Setter(edit_site(where, n_blocks), torch.as_tensor(vector, dtype=torch.float32), positions=[-1],
                  mode=mode)


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
            site = edit_site(where, len(blocks))
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

    def take(self, rows) -> ScoredAnswers:
        """The rows ``rows`` (index list) of these answers, in that order."""
        rows = list(rows)
        return ScoredAnswers([self.answer_text[r] for r in rows], [self.answer[r] for r in rows],
                             [self.answer_logprob[r] for r in rows], self.counts, self.candidate_logprobs[rows])


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
                           None if context is None else context(rows, index), candidates=candidates,
                           continuation=number_continuations(tokenizer))
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
    cell, ``batch_size`` cells per forward (the reference runner; :class:`~countlens.llm.patching.replay.PositionPatcher` is the fast one for
    one position per cell). A cell with no setter is the unpatched run."""
    import dataclasses

    import torch

    from countlens.llm.answers import cached_forward

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
            logits, cache = cached_forward(model, batch, mask, positions, last_only=True)
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
