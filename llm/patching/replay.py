"""Figure 11's patching over positions and layers (:class:`PositionPatcher`): the corrupted run reused, its
blocks below a patched location replayed, every patch written through the one mechanism of
:mod:`countlens.llm.patching.edits` (:class:`~countlens.llm.patching.edits.Setter`, :class:`~countlens.llm.patching.edits.Patch`)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Sequence

import numpy as np

from countlens.llm.answers import (
    score_candidates,
)
from countlens.llm.capture.residuals import find_blocks
from countlens.llm.hooks import HookSet, hook_sites

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
# thing experiments choose, for speed: a whole prompt pass (:func:`scored_answers`: the reference runner),
# the corrupted run replayed below the patched site (:class:`PositionPatcher`: Figure 11), or one boundary step
# from the prompt's cache (:mod:`countlens.llm.boundary`: boundary patching, steering, head ablation, components).
from countlens.llm.patching.edits import Patch, Setter

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

    from countlens.llm.answers import cached_forward

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
        logits, cache = cached_forward(model, ids, mask, positions, _full_cache(), last_only=True)
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
        return self._patched(location, positions, [head] * len(positions))

    def logprobs_heads(self, location: int, position: int, heads: Sequence[int]) -> np.ndarray:
        """(len(heads), K) log-probabilities of the candidates after patching one head's slice at ``position`` of
        per-head site ``location`` — head ``heads[r]`` in row ``r``: :meth:`logprobs` of each head, batched."""
        heads = [int(h) for h in heads]
        return self._patched(location, [int(position)] * len(heads), heads)

    def _patched(self, location: int, positions: list[int], heads: list[int | None]) -> np.ndarray:
        """Row ``j``: position ``positions[j]`` patched (head ``heads[j]``'s slice, or the whole vector for
        ``None``); unchanged cells are the corrupted run's scores, the rest run in batches by position."""
        if any(p < 0 or p >= self.T for p in positions):
            raise ValueError(f"positions must lie in 0..{self.T - 1}")
        whole = all(h is None for h in heads)
        if not whole and (self.site == "resid" or self.head_dim is None):
            raise ValueError("patching one head needs a per-head site and its head_dim")
        out = np.tile(self.corrupt, (len(positions), 1))
        todo = [j for j, (p, h) in enumerate(zip(positions, heads, strict=True))
                if not (self.skip_unchanged and self.unchanged(location, p, h))]
        todo.sort(key=lambda j: positions[j])
        run = self._cached if self.method == "cached" else self._naive
        for mine in self._batches(todo):
            out[mine] = run(location, [positions[j] for j in mine], None if whole else [heads[j] for j in mine])
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

        from countlens.llm.answers import cached_forward

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
                logits, cache = cached_forward(self.model, ids, torch.ones_like(ids), pos_ids, last_only=True)
            return self._score(logits, cache, rows)
        cache = _prefix_cache(self.cache, 1, start, rows)
        kept = self.resid[1, 1:, start:]
        keys = [layer.keys[1, :, start:] for layer in self.cache.layers]
        values = [layer.values[1, :, start:] for layer in self.cache.layers]
        with _replayed(self.blocks, replayed_blocks(self.sites[location]), cache, kept, keys, values, rows), patch:
            logits, cache = cached_forward(self.model, ids, mask, pos_ids, cache, last_only=True)
        return self._score(logits, cache, rows)

    def _batches(self, todo: list[int]):
        """Consecutive runs of ``todo`` (sorted by position), ``batch_size`` each: a cached batch runs every row
        from its first position on, so neighbouring positions waste few tokens (and few, larger matrix
        products beat many small ones)."""
        for start in range(0, len(todo), self.batch_size):
            yield todo[start:start + self.batch_size]

    def _setter(self, location: int, positions: list[int], head, shift: int = 0) -> Setter:
        """The clean values of ``positions`` written at ``positions - shift`` of a batch of one row each
        (``head``: ``None`` for the whole vector, one head for every row, or a list of one head per row)."""
        at = [p - shift for p in positions]
        if head is None:
            return Setter(self.sites[location], self._value(0, location, positions, None), positions=at)
        import torch

        heads = list(head) if isinstance(head, (list, tuple)) else [head] * len(at)
        value = torch.stack([self._value(0, location, p, h) for p, h in zip(positions, heads, strict=True)])
        return Setter(self.sites[location], value, positions=at, head=heads, width=self.head_dim)

    def _score(self, logits, cache, rows: int) -> np.ndarray:
        import torch

        device = logits.device
        mask = torch.ones((rows, self.T), dtype=self.ids.dtype, device=device)
        last = torch.full((rows, 1), self.T - 1, device=device)
        return score_candidates(self.model, logits, cache, mask, last, self.candidates)

    def _naive(self, location: int, positions: list[int], head=None) -> np.ndarray:
        import torch

        from countlens.llm.answers import cached_forward

        rows = len(positions)
        ids = self.ids[1:2].expand(rows, -1)
        mask = torch.ones_like(ids)
        pos_ids = torch.arange(self.T, device=ids.device)[None].expand(rows, -1)
        with Patch(self.model, [self._setter(location, positions, head)]):
            logits, cache = cached_forward(self.model, ids, mask, pos_ids, last_only=True)
        return self._score(logits, cache, rows)

    def _cached(self, location: int, positions: list[int], head=None) -> np.ndarray:
        import torch

        from countlens.llm.answers import cached_forward

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
            logits, cache = cached_forward(self.model, ids, mask, pos_ids, cache, last_only=True)
        return self._score(logits, cache, rows)
