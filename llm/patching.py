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
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from countlens.llm.answers import ANSWER_TOKENS, Answers, answer_prompts
from countlens.llm.capture import find_blocks
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


def random_direction(w: np.ndarray, seed: int) -> np.ndarray:
    """A direction drawn uniformly on the sphere of radius ``‖w‖`` (the steering control), seeded."""
    w = np.asarray(w, dtype=np.float64)
    u = np.random.default_rng([seed, w.size]).standard_normal(w.shape)
    return u * (np.linalg.norm(w) / np.linalg.norm(u))


def edited_answers(model, tokenizer, prompts, edits, template: str = "chat", batch_size: int = 16,
                   answer_tokens: int = ANSWER_TOKENS) -> Answers:
    """The model's answers to ``prompts`` with one boundary edit each, batched across edits.

    ``edits[i] = (location, mode, vector)``: ``mode`` ``"replace"`` or ``"add"``, ``vector`` (d,) for
    prompt ``i``. Rows of a batch that share a location and mode share one :class:`BoundaryEdit`.
    """
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

    return answer_prompts(model, tokenizer, prompts, template, batch_size, answer_tokens, context=context)
