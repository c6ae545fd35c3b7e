"""Capture the residual stream at the assistant boundary (and, on request, at every item), at every layer:
hooks, batching, backends.

Locations (docs/definitions.md §2, names from :mod:`countlens.core.locations`, hook sites from
:mod:`countlens.llm.hooks`): location 0 ``embed`` is the input to block 0 (token + position embeddings,
scaled where the architecture scales them); location ``l >= 1`` ``blocks.{l-1}.hook_resid_post`` is the raw
output of block ``l - 1`` (before any final norm: Hugging Face's last hidden state has the norm applied, so
block outputs are taken with hooks). Only each prompt's boundary row is kept, so memory is
``O(locations x batch x d)``; with ``positions="items"`` (:func:`kept_positions`) also the row of every item
token, from the same forward pass — one row per (prompt, position), each prompt's items in order and then its
boundary, with the columns of :func:`position_columns` — so memory is ``O(locations x rows x d)`` for a batch
and a shard holds its prompts' rows.

Two backends give the same vectors: ``hf`` (forward hooks on the decoder blocks, found generically) and
``transformer-lens`` (a ``TransformerBridge`` booted offline from the loaded model, which also records
``blocks.{i}.hook_resid_mid``, appended after the standard locations).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from countlens.core.locations import location_names
from countlens.llm.hooks import SITES, HookSet, find_blocks, hook_sites, n_blocks_of  # noqa: F401 (both re-exported)
from countlens.llm.models import LoadedModel
from countlens.llm.prompts import Prompt

BACKENDS = ("hf", "transformer-lens")
POSITIONS = ("boundary", "items")


class _StopForward(Exception):
    """Raised by the last needed hook to skip the blocks after it (early stop)."""


def pad_token_id(tokenizer) -> int:
    """The id that pads a batch: the tokenizer's pad token, else its EOS token, else 0 (padded positions
    are masked, or follow the boundary, so the choice never changes a boundary vector)."""
    if tokenizer.pad_token_id is not None:
        return tokenizer.pad_token_id
    return tokenizer.eos_token_id or 0


def location_names_of(locations: Sequence[int] | None, n_blocks: int) -> list[str]:
    """The names of the residual ``locations`` (indices; ``None``: all) of a model of ``n_blocks`` blocks."""
    names = location_names(n_blocks)
    return names if locations is None else [names[int(i)] for i in locations]


class BoundaryCapture:
    """Context manager: hooks that keep each prompt's boundary vector at the requested locations.

    >>> with BoundaryCapture(model, locations=[0, 1, 30]) as cap:
    ...     acts = cap.run(input_ids, attention_mask, boundary_index)   # (B, 3, d) float32 on CPU

    Given ``rows`` too, ``boundary_index`` is a flat list of positions, row ``rows[r]``'s position
    ``boundary_index[r]`` for every kept row ``r`` (e.g. every item of every prompt): (R, 3, d).

    ``locations`` are indices into :func:`countlens.core.locations.location_names` (``ConfigError("locations")``
    for one the model lacks). With ``early_stop`` the forward pass stops after the last block needed. Hooks
    are always removed on exit, also after an error and after a failure while entering.
    """

    def __init__(self, model, locations: Sequence[int] | None = None, early_stop: bool = True):
        self.model = model
        self.blocks = find_blocks(model)
        n_blocks = len(self.blocks)
        self.locations = list(range(n_blocks + 1)) if locations is None else [int(i) for i in locations]
        self.sites = hook_sites(self.locations, n_blocks)
        self.names = location_names_of(self.locations, n_blocks)
        self.early_stop = early_stop
        self._hooks = HookSet(self.blocks)
        self._index = None
        self._rows = None
        self._out: list[Any] = [None] * len(self.locations)

    def _store(self, slot: int, hidden) -> None:
        import torch

        rows = (torch.arange(hidden.shape[0], device=hidden.device) if self._rows is None
                else self._rows.to(hidden.device))
        self._out[slot] = hidden[rows, self._index.to(hidden.device)].detach().to("cpu", torch.float32)

    def _keeper(self, slot: int, stop: bool):
        def keep(hidden) -> None:
            self._store(slot, hidden)
            if stop:
                raise _StopForward
        return keep

    def __enter__(self) -> BoundaryCapture:
        last = max(self.locations)
        self._hooks.attach((site, self._keeper(slot, self.early_stop and loc == last))
                           for slot, (loc, site) in enumerate(zip(self.locations, self.sites, strict=True)))
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.remove()

    def run(self, input_ids, attention_mask, boundary_index, rows=None):
        """One forward pass; returns the boundary vectors (B, n_locations, d) as float32 CPU tensor.

        ``boundary_index`` (B,) is each row's boundary position (padding on either side is fine: position
        ids are computed from the attention mask, as ``generate`` does). With ``rows`` (R,), the vectors at
        the positions ``boundary_index`` (R,) of those batch rows: (R, n_locations, d).
        """
        self.expect(boundary_index, rows)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        try:
            self.model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                  use_cache=False)
        except _StopForward:
            pass
        return self.result()

    def expect(self, boundary_index, rows=None) -> None:
        """Arm the hooks for a forward pass the caller runs itself (``early_stop=False``; e.g. the prompt pass
        whose KV cache the model's answer is decoded from); :meth:`result` then returns the vectors (of the
        positions ``boundary_index`` of the batch rows ``rows``, where given)."""
        import torch

        self._index = torch.as_tensor(boundary_index, dtype=torch.long)
        self._rows = None if rows is None else torch.as_tensor(rows, dtype=torch.long)
        self._out = [None] * len(self.locations)

    def result(self):
        """The boundary vectors (B, n_locations, d) float32 CPU of the last forward pass."""
        import torch

        if any(o is None for o in self._out):
            raise RuntimeError("a capture hook did not fire; the model's blocks were not called in order")
        return torch.stack(self._out, dim=1)  # (B, n_locations, d)


def pad_batch(prompts: Sequence[Prompt], pad_id: int, padding_side: str = "right", device="cpu"):
    """(input_ids, attention_mask, boundary_index) tensors for a batch, padded on ``padding_side``."""
    import torch

    T = max(p.n_tokens for p in prompts)
    ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), T), dtype=torch.long)
    index = torch.empty(len(prompts), dtype=torch.long)
    for row, p in enumerate(prompts):
        start = 0 if padding_side == "right" else T - p.n_tokens
        ids[row, start:start + p.n_tokens] = torch.tensor(p.ids)
        mask[row, start:start + p.n_tokens] = 1
        index[row] = start + p.boundary_index
    return ids.to(device), mask.to(device), index


def kept_positions(prompt: Prompt, positions: str = "boundary") -> list[int]:
    """The token positions a capture keeps of ``prompt``: its boundary (``"boundary"``), or every item token in
    order and then the boundary (``"items"``; :meth:`~countlens.llm.prompts.Prompt.item_tokens`: items that
    share a token keep it once)."""
    if positions == "items" and prompt.first_item_index >= 0:
        return [*prompt.item_tokens()[0], prompt.boundary_index]
    return [prompt.boundary_index]


def gathered_rows(group: Sequence[Prompt], boundary_index, positions: str):
    """(batch rows, token positions) of every kept position of a padded batch, the prompts in order and each
    prompt's positions in :func:`kept_positions` order; ``boundary_index`` (B,) from :func:`pad_batch` gives
    each row's padding offset."""
    import torch

    rows, index = [], []
    for b, p in enumerate(group):
        start = int(boundary_index[b]) - p.boundary_index
        kept = kept_positions(p, positions)
        rows.extend([b] * len(kept))
        index.extend(start + k for k in kept)
    return torch.tensor(rows, dtype=torch.long), torch.tensor(index, dtype=torch.long)


def length_sorted(prompts: Sequence[Prompt]) -> list[Prompt]:
    """Prompts by token length (stable), so batches need little padding."""
    return sorted(prompts, key=lambda p: p.n_tokens)


def batches(prompts: Sequence[Prompt], batch_size: int) -> Iterable[list[int]]:
    """Index lists of consecutive batches of ``prompts`` (already length-sorted)."""
    for start in range(0, len(prompts), batch_size):
        yield list(range(start, min(start + batch_size, len(prompts))))


class TransformerLensCapture:
    """The ``transformer-lens`` backend: a ``TransformerBridge`` over the loaded model, same locations plus
    ``blocks.{i}.hook_resid_mid`` of each block up to the last one needed. Batches are right-padded and run
    without an attention mask, which is exact for a causal model: real tokens keep their positions and the
    boundary token never attends to the pads after it.

    Booting switches the model's attention to ``eager`` (TransformerLens needs it for its attention hooks).
    """

    def __init__(self, loaded: LoadedModel, locations: Sequence[int] | None = None):
        from transformer_lens.model_bridge import TransformerBridge

        n_blocks = len(find_blocks(loaded.model))
        self.locations = list(range(n_blocks + 1)) if locations is None else [int(i) for i in locations]
        sites = hook_sites(self.locations, n_blocks)
        self.n_stop = max(1, max(self.locations))
        self.mid_sites = [SITES["resid_mid"].at(i) for i in range(self.n_stop)]
        self.bridge = TransformerBridge.boot_transformers(
            loaded.location or loaded.model_id,
            hf_model=loaded.model, tokenizer=loaded.tokenizer, device=str(loaded.model.device),
            dtype=loaded.model.dtype)
        self.hook_names = [site.tl_name for site in sites + self.mid_sites]
        # the standard locations' names, then the hook_resid_mid ones this backend adds
        self.names = location_names_of(self.locations, n_blocks) + [site.tl_name for site in self.mid_sites]

    def run(self, input_ids, boundary_index, rows=None):
        """Right-padded batch (B, T) -> boundary vectors (B, n_locations + n_mid, d) float32 CPU (with
        ``rows`` (R,), the vectors at the positions ``boundary_index`` (R,) of those rows: (R, ..., d))."""
        import torch

        out: dict[str, Any] = {}
        index = torch.as_tensor(boundary_index, dtype=torch.long)
        picked = None if rows is None else torch.as_tensor(rows, dtype=torch.long)

        def keeper(name):
            # keyed by our name: the bridge may call the hook under its canonical alias (hook.name differs)
            def keep(tensor, hook):
                at = (torch.arange(tensor.shape[0], device=tensor.device) if picked is None
                      else picked.to(tensor.device))
                out[name] = tensor[at, index.to(tensor.device)].detach().to("cpu", torch.float32)
            return keep

        self.bridge.run_with_hooks(input_ids.to(self.bridge.cfg.device), return_type=None,
                                   fwd_hooks=[(name, keeper(name)) for name in self.hook_names],
                                   stop_at_layer=self.n_stop)
        return torch.stack([out[name] for name in self.hook_names], dim=1)


def context_length(config) -> int | None:
    """The longest input (tokens) a ``transformers`` config allows, if it says."""
    config = getattr(config, "text_config", None) or config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass
class ShardRunner:
    """A loaded model ready to capture prompts: ``run_batch(prompts) -> (R, n_locations, d)`` float32, at
    the locations ``names``, ``batch_size`` prompts per forward pass, one row per kept position
    (:func:`kept_positions` of ``positions``: R = B at the boundary). With ``columns`` (e.g. the model's own
    answers, :func:`countlens.llm.answers.answering_runner`), ``run_batch`` returns
    ``(acts, {column: per-prompt values})``."""

    names: list[str]
    run_batch: Callable[[list[Prompt]], Any]
    batch_size: int
    d: int
    columns: tuple[str, ...] = ()
    positions: str = "boundary"


def shard_runner(loaded: LoadedModel, locations: Sequence[int] | None, backend: str, padding_side: str,
                 batch_size: int, positions: str = "boundary") -> ShardRunner:
    """The :class:`ShardRunner` of ``backend`` (``hf`` or ``transformer-lens``) on ``loaded``, keeping the
    ``positions`` of each prompt (:func:`kept_positions`).

    ``locations``: indices into :func:`countlens.core.locations.location_names` (``None``: all).
    """
    model, tokenizer = loaded.model, loaded.tokenizer
    pad_id = pad_token_id(tokenizer)
    d = hidden_size(model.config)
    if backend == "transformer-lens":
        runner = TransformerLensCapture(loaded, locations)

        def run_tl(group: list[Prompt]) -> np.ndarray:
            # Right padding without a mask is exact for a causal model: every real token keeps its position,
            # and the boundary token never attends to the pads after it.
            ids, _, index = pad_batch(group, pad_id, "right")
            if positions == "boundary":
                return runner.run(ids, index).numpy()
            rows, at = gathered_rows(group, index, positions)
            return runner.run(ids, at, rows).numpy()
        return ShardRunner(runner.names, run_tl, batch_size, d, positions=positions)

    hooks = BoundaryCapture(model, locations)
    device_in = model.get_input_embeddings().weight.device

    def run_hf(group: list[Prompt]) -> np.ndarray:
        ids, mask, index = pad_batch(group, pad_id, padding_side, device_in)
        with hooks as cap:
            if positions == "boundary":
                return cap.run(ids, mask, index).numpy()
            rows, at = gathered_rows(group, index, positions)
            return cap.run(ids, mask, at, rows).numpy()
    return ShardRunner(hooks.names, run_hf, batch_size, d, positions=positions)


def capture_shard(runner: ShardRunner, shard: Sequence[Prompt], progress: Callable[[int], Any] | None = None,
                  first_id: int = 0) -> dict[str, Any]:
    """The store rows of one shard of (length-sorted) prompts: ``acts`` (rows, n_locations, d) float32 and
    the prompt columns, one row per prompt, or per kept position of an items runner (then with the
    :func:`position_columns`; ``first_id`` is the shard's first prompt's row in the plan). ``progress(k)`` is
    called after each batch of ``k`` prompts."""
    import torch

    sizes = [len(kept_positions(p, runner.positions)) for p in shard]
    start = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])  # each prompt's first row
    acts = np.empty((int(start[-1]), len(runner.names), runner.d), dtype=np.float32)
    columns: dict[str, list] = {name: [] for name in runner.columns}
    with torch.inference_mode():
        for idx in batches(shard, runner.batch_size):
            out = runner.run_batch([shard[i] for i in idx])
            if runner.columns:
                out, values = out
                for name in runner.columns:
                    for i, value in zip(idx, values[name], strict=True):
                        columns[name].extend([value] * sizes[i])
            acts[start[idx[0]]:start[idx[-1] + 1]] = out
            if progress is not None:
                progress(len(idx))
    if runner.positions == "boundary":
        return {**capture_rows(shard, acts), **columns}
    return {**capture_rows(shard, acts, sizes), **columns,
            **position_columns(shard, runner.positions, first_id)}


def position_columns(shard: Sequence[Prompt], positions: str, first_id: int = 0) -> dict[str, list]:
    """The :data:`~countlens.core.store.POSITION_COLUMNS` of the rows of ``shard`` (:func:`kept_positions`):
    ``prompt_id`` (``first_id`` + the prompt's index in the shard), ``position``, ``item_index`` (the item
    token's index among the prompt's item tokens; -1: the boundary), ``is_target`` (a counted item sits at the
    token; False on the boundary) and ``running_count`` (the counted items at tokens up to and including this
    one, per token; ``n`` on the boundary row). Raises ``RuntimeError`` where a prompt's targets do not add up
    to its ``n``."""
    out: dict[str, list] = {"prompt_id": [], "position": [], "item_index": [], "is_target": [], "running_count": []}
    for i, p in enumerate(shard):
        kept = kept_positions(p, positions)
        per_token = p.item_tokens()[1] if len(kept) > 1 else []
        running = np.cumsum(per_token, dtype=np.int64).tolist()
        if (running[-1] if running else 0) != p.n:
            raise RuntimeError(f"prompt {first_id + i} ({p.pair}, n={p.n}) has {running[-1] if running else 0} "
                               "targets among its items")
        out["prompt_id"].extend([first_id + i] * len(kept))
        out["position"].extend(kept)
        out["item_index"].extend([*range(len(kept) - 1), -1])
        out["is_target"].extend([*(c > 0 for c in per_token), False])
        out["running_count"].extend([*running, p.n])
    return out


def hidden_size(config) -> int:
    """The residual-stream width ``d`` a ``transformers`` config declares."""
    return int((getattr(config, "text_config", None) or config).hidden_size)


def model_facts(loaded: LoadedModel, names: list[str]) -> dict[str, Any]:
    """What a capture's ``meta.json`` records about the model it ran."""
    model = loaded.model
    return {"locations": names, "d": hidden_size(model.config), "model": loaded.model_id,
            "model_source": loaded.source, "model_dtype": loaded.dtype, "architecture": type(model).__name__,
            "n_blocks": len(find_blocks(model))}


def capture_rows(shard: Sequence[Prompt], acts: np.ndarray, sizes: Sequence[int] | None = None) -> dict[str, Any]:
    """The activation-store columns of ``shard``'s prompts beside their ``acts`` (rows, n_locations, d); with
    ``sizes``, prompt ``i``'s columns repeated on its ``sizes[i]`` rows."""
    if sizes is not None:
        shard = [p for p, k in zip(shard, sizes, strict=True) for _ in range(k)]
    return {"acts": acts, "n": [p.n for p in shard], "m": [p.m for p in shard], "pair": [p.pair for p in shard],
            "config": [p.config for p in shard], "seed": [p.seed for p in shard],
            "prompt": [p.prompt for p in shard], "boundary_index": [p.boundary_index for p in shard],
            "n_tokens": [p.n_tokens for p in shard],
            "first_item_index": [p.first_item_index for p in shard],
            "last_item_index": [p.last_item_index for p in shard]}
