"""The boundary-step runner: every intervention that writes at the boundary position alone, from the prompt's
key/value cache.

An edit at the boundary (the last position of a prompt) changes nothing before it: every earlier position's
keys and values are the clean run's. So a left-padded batch of prompts runs once up to (not including) its
boundary (:class:`PrefixBatch`), and each intervention is a one-token step from that cache: one row of a
batched step per (prompt, cell), all of a batch's cells in one forward, the candidates' tokens teacher-forced
after the step from its cache (:func:`~countlens.llm.answers.score_candidates`). The rows share the prefix
cache without copying it (:class:`SharedRowsLayer`): each layer keeps the prompts' keys and values once (B
rows) and only the rows' own later tokens per row; the keys and values a step's attention reads are assembled
for the layer being run only, so the memory a step holds grows with the rows times the tokens it feeds, not
with rows × prompt length × layers. A cache whose layers are not transformers' plain dynamic (full or
sliding-window) layers is copied per row instead (:func:`~countlens.llm.answers.select_cache_rows`), with one
note per model.

The cells are :class:`~countlens.llm.patching.edits.Setter` lists of the one patch mechanism that write at
position ``-1`` (the boundary) of their row, so a cell here equals the same cell of a whole prompt pass
(:func:`~countlens.llm.patching.edits.patched_prompt_logprobs`, :func:`~countlens.llm.patching.edits.
scored_answers`). Two read-outs: the candidates' log-probabilities alone (:func:`boundary_cell_scores`: head
ablation, the components' mean-ablation and twin patching), or those and the greedy answer
(:func:`boundary_cell_answers`, :func:`boundary_scored_answers`: Figure 9a's patching and Figure 9b's steering,
the clean run being the cell without a setter), decoded after the step by the loop a whole prompt pass decodes
with (:func:`~countlens.llm.answers.greedy_tokens`): each decode step appends the row's own token to its
:class:`SharedRowsLayer` (sliding layers slide past the shared prefix as transformers' do), the setters
inactive (they write the boundary step only, as a whole pass's edit writes the prompt pass only).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import sys
import weakref
from collections.abc import Sequence

import numpy as np

from countlens.llm.answers import (
    ANSWER_TOKENS,
    answer_token_ids,
    cached_forward,
    candidate_token_ids,
    greedy_tokens,
    number_continuations,
    parse_answer,
    score_candidates,
    select_cache_rows,
    stop_token_ids,
)
from countlens.llm.capture.residuals import find_blocks, pad_batch, pad_token_id
from countlens.llm.hooks import HookSet
from countlens.llm.patching.edits import Patch, ScoredAnswers, Setter, edit_setter, stacked_setters

_NOTED: weakref.WeakSet = weakref.WeakSet()  # models whose copied cache has been noted once


def _layer_classes():
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    return DynamicLayer, DynamicSlidingWindowLayer


class _SharedRows:
    """One layer of a KV cache whose R rows read the same B prompts' keys and values, kept once.

    ``shared_keys`` / ``shared_values`` (B, H, S, d): the prefix layer's tensors (never modified, never copied);
    ``rows`` (R,) long: each row's prompt; ``keys`` / ``values`` (R, H, s, d): each row's own later tokens (the
    boundary step's, then the candidates'). ``update`` returns the full (R, H, S + s + q, d) keys and values
    of the layer being run, made for that attention call only. ``window`` (a sliding-window layer's) keeps the
    last ``window − 1`` tokens visible, as transformers' ``DynamicSlidingWindowLayer``: the shared part is cut
    by a view, never copied."""

    def __init__(self, base, rows):
        import torch

        super().__init__()
        _, sliding = _layer_classes()
        self.shared_keys, self.shared_values = base.keys, base.values
        self.device = base.keys.device
        self.rows = torch.as_tensor(rows, dtype=torch.long, device=self.device)
        self.window = int(base.sliding_window) if isinstance(base, sliding) else None
        self.is_sliding = self.window is not None
        self.cumulative_length = int(base.get_seq_length())
        R = len(self.rows)
        self.keys = base.keys.new_empty((R, *base.keys.shape[1:-2], 0, base.keys.shape[-1]))
        self.values = base.values.new_empty((R, *base.values.shape[1:-2], 0, base.values.shape[-1]))
        self.is_initialized = True
        self._runs = None

    def _full(self, shared, own, new):
        """cat(shared[rows], own, new) along the sequence, the shared part written prompt by prompt (no
        (R, ..., S, d) gather made first)."""
        import torch

        S, o = shared.shape[-2], own.shape[-2]
        out = new.new_empty((*new.shape[:-2], S + o + new.shape[-2], new.shape[-1]))
        if S:
            if self._runs is None:  # (prompt, first row, end row) of each run of equal rows
                values, counts = torch.unique_consecutive(self.rows, return_counts=True)
                ends = counts.cumsum(0).tolist()
                self._runs = list(zip(values.tolist(), [0, *ends[:-1]], ends, strict=True))
            for b, first, end in self._runs:  # a broadcast copy per run: no gather made first
                out[first:end, ..., :S, :] = shared[b]
        out[..., S:S + o, :] = own
        out[..., S + o:, :] = new
        return out

    def update(self, key_states, value_states, *args, **kwargs):
        import torch

        self.cumulative_length += key_states.shape[-2]
        keys = self._full(self.shared_keys, self.keys, key_states)
        values = self._full(self.shared_values, self.values, value_states)
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        if self.window is not None:  # keep the last window − 1 tokens, as DynamicSlidingWindowLayer does
            keep = self.window - 1
            own = self.keys.shape[-2]
            if own >= keep:
                self.keys, self.values = self.keys[..., own - keep:, :], self.values[..., own - keep:, :]
                self.shared_keys = self.shared_keys[..., :0, :]
                self.shared_values = self.shared_values[..., :0, :]
            else:
                drop = max(0, self.shared_keys.shape[-2] - (keep - own))
                self.shared_keys = self.shared_keys[..., drop:, :]
                self.shared_values = self.shared_values[..., drop:, :]
        return keys, values

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        if self.window is None:
            return self.cumulative_length + query_length, 0
        offset = max(self.cumulative_length - self.window + 1, 0)
        if self.cumulative_length >= self.window:
            return self.window - 1 + query_length, offset
        return self.cumulative_length + query_length, offset

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_max_length(self) -> int:
        return -1 if self.window is None else self.window

    def batch_select_indices(self, indices) -> None:
        self.rows, self._runs = self.rows[indices], None
        self.keys, self.values = self.keys[indices, ...], self.values[indices, ...]

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.rows, self._runs = self.rows.repeat_interleave(repeats, dim=0), None
        self.keys = self.keys.repeat_interleave(repeats, dim=0)
        self.values = self.values.repeat_interleave(repeats, dim=0)

    def reorder_cache(self, beam_idx) -> None:
        self.batch_select_indices(beam_idx.to(self.device))

    def crop(self, tokens_to_remove: int) -> None:
        raise ValueError("a shared-rows cache is not cropped; run the step again from its prefix")


@functools.cache
def _shared_rows_class():
    """:class:`SharedRowsLayer`: :class:`_SharedRows` on transformers' ``DynamicLayer``, made on first use
    (transformers is imported then, not with this module)."""
    DynamicLayer, _ = _layer_classes()
    return type("SharedRowsLayer", (_SharedRows, DynamicLayer), {"__doc__": _SharedRows.__doc__,
                                                                "__module__": __name__})


def shares_rows(cache) -> bool:
    """Whether ``cache``'s rows can share its tensors (:class:`SharedRowsLayer`): a cache with a layer list
    of transformers' plain ``DynamicLayer`` / ``DynamicSlidingWindowLayer``, every layer filled, none recording
    its past."""
    layers = getattr(cache, "layers", None)
    return (isinstance(layers, list) and len(layers) > 0
            and all(type(layer) in _layer_classes() and layer.is_initialized and layer.keys is not None
                    and layer.keys.dim() == 4 and not getattr(layer, "record_past", False) for layer in layers))


def shared_cache_rows(cache, rows, model=None):
    """A KV cache holding the batch rows ``rows`` (R,) of ``cache`` (repeats allowed), ``cache`` left as it is:
    the rows share ``cache``'s tensors (:class:`SharedRowsLayer`) where :func:`shares_rows`, else a copy per
    row (:func:`~countlens.llm.answers.select_cache_rows`; noted once per ``model`` on stderr)."""
    if not shares_rows(cache):
        if model is not None and model not in _NOTED:
            _NOTED.add(model)
            print(f"note: the {type(cache).__name__} of this model cannot be shared by the boundary step's rows; "
                  "each row gets a copy of its prompt's cache (same results, more memory)", file=sys.stderr)
        return select_cache_rows(cache, rows)
    out = copy.copy(cache)
    layer_class = _shared_rows_class()
    out.layers = [layer_class(layer, rows) for layer in cache.layers]
    return out


class PrefixBatch:
    """A left-padded batch of prompts run up to (not including) its boundary: the KV cache of every earlier
    position, from which the boundary is one single-token step (clean or edited), the rows sharing it; the
    candidates are scored (:meth:`step`), and the greedy answer decoded (:meth:`answers`), from the step's
    cache. ``pad_id``: the pad token (left padding, and the token a finished answer is fed)."""

    def __init__(self, model, prompts, pad_id: int):
        device = model.get_input_embeddings().weight.device
        self.model, self.pad_id = model, int(pad_id)
        self.ids, self.mask, _ = pad_batch(prompts, pad_id, "left", device)
        self.positions = (self.mask.long().cumsum(-1) - 1).clamp(min=0)
        _, self.cache = cached_forward(model, self.ids[:, :-1], self.mask[:, :-1], self.positions[:, :-1], last_only=True)

    def boundary(self, rows, context=None, readout=None):
        """The boundary step of the rows ``rows`` (R,) under ``context``: ``(logits (R, V), the rows' cache, mask
        (R, T), boundary position ids (R, 1))``; hooks (``context``, ``readout``'s) active during it only;
        differentiable where the context's values are (DAS trains its basis through it)."""
        import torch

        rows = torch.as_tensor(rows, dtype=torch.long, device=self.ids.device)
        cache = shared_cache_rows(self.cache, rows, self.model)
        mask, last = self.mask[rows], self.positions[rows, -1:]
        with contextlib.ExitStack() as stack:
            if readout is not None:
                stack.enter_context(HookSet(find_blocks(self.model)).attach([(readout.site, readout.keep)]))
            if context is not None:
                stack.enter_context(context)
            logits, cache = cached_forward(self.model, self.ids[rows, -1:], mask, last, cache, last_only=True)
        return logits, cache, mask, last

    def step(self, rows, candidates, context=None, readout=None, continuation=None):
        """The boundary step of the batch rows ``rows`` (R,) (repeats allowed; the rows share the prefix cache,
        :func:`shared_cache_rows`) under ``context`` (hooks active during the step only): ``(log p(candidate)
        (R, K) float64, read-out (R,) or None)``; ``candidates``: one list of K token lists per row;
        ``readout``: a :class:`~countlens.llm.heads.attention.Readout` kept during the step; ``continuation``:
        :func:`~countlens.llm.answers.score_candidates`'."""
        logits, cache, mask, last = self.boundary(rows, context, readout)
        scores = score_candidates(self.model, logits, cache, mask, last, candidates, continuation=continuation)
        return scores, (None if readout is None else readout.values.copy())

    def answers(self, rows, candidates, stop_ids, answer_tokens: int, context=None, continuation=None):
        """:meth:`step` and the greedy answer of each row: ``(log p(candidate) (R, K) float64, per row the
        generated ids)``, both from the step's cache (the candidates first, then ``answer_tokens`` decode steps
        of :func:`~countlens.llm.answers.greedy_tokens`, the loop a whole prompt pass decodes with; the rows' own
        later tokens extend their :class:`SharedRowsLayer`, the prefix stays shared). ``context`` is active during
        the boundary step only, as a whole pass's edit is during the prompt pass only."""
        logits, cache, mask, last = self.boundary(rows, context)
        scores = score_candidates(self.model, logits, cache, mask, last, candidates, continuation=continuation)
        return scores, greedy_tokens(self.model, logits, cache, mask, last, stop_ids, answer_tokens, self.pad_id)


STEP_ROWS = 256  # rows (cells × prompts) of one boundary step (larger steps: larger matrix products)


def _boundary_only(setter: Setter) -> None:
    if setter.positions is None or bool((setter.positions != -1).any()):
        raise ValueError("a boundary step writes its boundary alone: give each setter positions=[-1] "
                         "(component_setter(..., 'boundary')), or run whole prompt passes")


def _cell_steps(model, prompts, cells, pad_id: int, batch_size: int, step_rows: int):
    """The boundary steps of every (prompt, cell): per step ``(batch, chunk, rows, patch)``: the prompts' batch
    (:class:`PrefixBatch`, ``batch_size`` prompts, run once), ``chunk`` the step's (prompt, cell) indices,
    ``rows`` each one's row of the batch, ``patch`` the :class:`Patch` writing each cell's setters into its own
    row (stacked, :func:`stacked_setters`); at most ``step_rows`` rows a step."""
    for prompt_cells in cells:
        for cell in prompt_cells:
            for setter in cell:
                _boundary_only(setter)
    for start in range(0, len(prompts), batch_size):
        idx = list(range(start, min(start + batch_size, len(prompts))))
        pairs = [(b, c) for b, i in enumerate(idx) for c in range(len(cells[i]))]
        if not pairs:
            continue
        batch = PrefixBatch(model, [prompts[i] for i in idx], pad_id)
        for first in range(0, len(pairs), int(step_rows)):
            chunk = pairs[first:first + int(step_rows)]
            setters = stacked_setters([dataclasses.replace(s, rows=[r]) for r, (b, c) in enumerate(chunk)
                                       for s in cells[idx[b]][c]])
            yield batch, [(idx[b], c) for b, c in chunk], [b for b, _ in chunk], Patch(model, setters)


def boundary_cell_scores(model, prompts, candidates, cells: Sequence[Sequence[Sequence[Setter]]], pad_id: int,
                         batch_size: int = 8, step_rows: int = STEP_ROWS, progress=None) -> list[np.ndarray]:
    """log p(candidate) of every cell of every prompt: a list of (len(cells[i]), K) float64, one per prompt.
    ``cells[i]``: prompt i's cells, each a list of :class:`Setter` s writing at position ``-1`` (the boundary;
    an empty cell is the clean run); ``candidates[i]``: prompt i's K token lists. Per batch of ``batch_size``
    prompts the prompt before its boundary runs once (:class:`PrefixBatch`); then each (prompt, cell) is one
    row of a boundary step of ``step_rows`` rows, a cell's setters written into its own row (as
    :func:`~countlens.llm.patching.edits.patched_prompt_logprobs` does in whole passes: equal cell by cell).
    ``progress(k)`` after each step of k rows."""
    out = [np.zeros((len(cells[i]), len(candidates[i]))) for i in range(len(prompts))]
    for batch, chunk, rows, patch in _cell_steps(model, prompts, cells, pad_id, batch_size, step_rows):
        scores, _ = batch.step(rows, [candidates[i] for i, _ in chunk], patch)
        for r, (i, c) in enumerate(chunk):
            out[i][c] = scores[r]
        if progress is not None:
            progress(len(chunk))
    return out


def boundary_cell_answers(model, prompts, candidates, cells: Sequence[Sequence[Sequence[Setter]]], pad_id: int,
                          stop_ids: set[int], answer_tokens: int, batch_size: int = 8,
                          step_rows: int = STEP_ROWS, continuation=None):
    """:func:`boundary_cell_scores` and every cell's greedy answer, both from its boundary step's cache
    (:meth:`PrefixBatch.answers`): ``(scores, tokens)``, ``scores[i]`` (len(cells[i]), K) float64 and
    ``tokens[i][c]`` the ids generated in prompt i's cell c (at most ``answer_tokens``, ``stop_ids`` ending
    one) — what a whole prompt pass per cell decodes (:func:`~countlens.llm.answers.answer_batch`)."""
    scores = [np.zeros((len(cells[i]), len(candidates[i]))) for i in range(len(prompts))]
    tokens: list[list[list[int]]] = [[[] for _ in cells[i]] for i in range(len(prompts))]
    for batch, chunk, rows, patch in _cell_steps(model, prompts, cells, pad_id, batch_size, step_rows):
        got, ids = batch.answers(rows, [candidates[i] for i, _ in chunk], stop_ids, answer_tokens, patch,
                                 continuation)
        for r, (i, c) in enumerate(chunk):
            scores[i][c], tokens[i][c] = got[r], ids[r]
    return scores, tokens


def boundary_scored_answers(model, tokenizer, prompts, counts: Sequence[int], edits, template: str = "chat",
                            batch_size: int = 16, answer_tokens: int = ANSWER_TOKENS,
                            step_rows: int = STEP_ROWS) -> ScoredAnswers:
    """:func:`~countlens.llm.patching.edits.scored_answers` of ``prompts * C`` with boundary ``edits`` (one per
    row: ``edits[c * P + i]`` prompt i's edit in cell c, ``(where, mode, vector)`` as
    :func:`~countlens.llm.patching.edits.boundary_edits` takes, or ``None``: the clean run), from the boundary
    step: each prompt's prefix once per batch of ``batch_size`` prompts, its C cells rows of one step, the
    candidates ``counts`` teacher-forced and the greedy answer decoded from the step's cache
    (:func:`boundary_cell_answers`). The same rows, in the same order, as the whole-pass runner."""
    P = len(prompts)
    if P == 0 or len(edits) % P:
        raise ValueError(f"give one edit per prompt and cell: {len(edits)} edits for {P} prompts")
    C = len(edits) // P
    blocks = len(find_blocks(model))
    cells = [[[] if edits[c * P + i] is None else [edit_setter(edits[c * P + i], blocks)] for c in range(C)]
             for i in range(P)]
    cands = candidate_token_ids(tokenizer, counts, template)
    rows = [[answer_token_ids(tokenizer, p.n, template), *cands] for p in prompts]
    scores, tokens = boundary_cell_answers(model, prompts, rows, cells, pad_token_id(tokenizer),
                                           stop_token_ids(model, tokenizer), answer_tokens, batch_size, step_rows,
                                           number_continuations(tokenizer))
    order = [(i, c) for c in range(C) for i in range(P)]
    texts = [tokenizer.decode(tokens[i][c], skip_special_tokens=True) for i, c in order]
    got = np.stack([scores[i][c] for i, c in order])
    return ScoredAnswers(texts, [parse_answer(t) for t in texts], got[:, 0].tolist(), [int(k) for k in counts],
                         got[:, 1:])


def __getattr__(name: str):
    if name == "SharedRowsLayer":
        return _shared_rows_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["shares_rows", "shared_cache_rows", "PrefixBatch", "STEP_ROWS",
           "boundary_cell_scores", "boundary_cell_answers", "boundary_scored_answers"]
