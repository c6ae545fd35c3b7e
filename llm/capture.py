"""Capture the residual stream at the assistant boundary, at every layer, into an activation folder.

Locations (SPEC §2): location 0 ``embed`` is the input to block 0 (token + position embeddings, scaled where
the architecture scales them); location ``l >= 1`` ``blocks.{l-1}.hook_resid_post`` is the raw output of block
``l - 1`` (before any final norm: Hugging Face's last hidden state has the norm applied, so block outputs are
taken with hooks). Only each prompt's boundary row is kept, so memory is ``O(locations x batch x d)``.

Two backends give the same vectors: ``hf`` (forward hooks on the decoder blocks, found generically) and
``transformer-lens`` (a ``TransformerBridge`` booted offline from the loaded model, which also records
``blocks.{i}.hook_resid_mid``, appended after the standard locations).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from countlens.llm.models import DEFAULT_MODEL, DEFAULT_MODEL_ID, LoadedModel, load_model
from countlens.llm.prompts import (
    CONFIGURATIONS,
    Prompt,
    PromptSettings,
    boundary_tokens,
    build_prompts,
)
from countlens.store import ActivationWriter, load_capture, read_meta
from countlens.errors import UsageError
from countlens.io import provenance, write_json_atomic

BACKENDS = ("hf", "transformer-lens")
ACTS_DTYPES = ("float32", "float16")
SHARD_ROWS = 256


class _StopForward(Exception):
    """Raised by the last needed hook to skip the blocks after it (early stop)."""


def location_names(n_blocks: int) -> list[str]:
    """``["embed", "blocks.0.hook_resid_post", ..., f"blocks.{n_blocks-1}.hook_resid_post"]``."""
    return ["embed"] + [f"blocks.{i}.hook_resid_post" for i in range(n_blocks)]


def find_blocks(model) -> Any:
    """The decoder blocks (an ``nn.ModuleList``) of a causal LM: Llama, Qwen2, Gemma, GPT-2, GPT-NeoX, ...

    The blocks are the ``ModuleList`` whose length is the config's number of layers; where several match,
    the shallowest one (``model.layers`` / ``transformer.h`` / ``gpt_neox.layers``) wins.
    """
    import torch.nn as nn

    n_layers = getattr(model.config, "num_hidden_layers", None)
    text_config = getattr(model.config, "text_config", None)
    if n_layers is None and text_config is not None:
        n_layers = getattr(text_config, "num_hidden_layers", None)
    found = [(name.count("."), name, mod) for name, mod in model.named_modules()
             if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and len(mod) > 0]
    if not found:
        raise UsageError(f"cannot find the decoder blocks of {type(model).__name__} (no ModuleList of "
                         f"{n_layers} layers); this architecture is not supported")
    return min(found, key=lambda t: (t[0], t[1]))[2]


def _hidden(output) -> Any:
    return output[0] if isinstance(output, (tuple, list)) else output


class BoundaryCapture:
    """Context manager: hooks that keep each prompt's boundary vector at the requested locations.

    >>> with BoundaryCapture(model, locations=[0, 1, 30]) as cap:
    ...     acts = cap.run(input_ids, attention_mask, boundary_index)   # (B, 3, d) float32 on CPU

    ``locations`` are indices into :func:`location_names`. With ``early_stop`` the forward pass stops after
    the last block needed. Hooks are always removed on exit, also after an error.
    """

    def __init__(self, model, locations: Sequence[int] | None = None, early_stop: bool = True):
        self.model = model
        self.blocks = find_blocks(model)
        n_blocks = len(self.blocks)
        self.locations = list(range(n_blocks + 1)) if locations is None else [int(i) for i in locations]
        if not self.locations or min(self.locations) < 0 or max(self.locations) > n_blocks:
            raise UsageError(f"--locations must lie in 0..{n_blocks} for a model with {n_blocks} blocks")
        self.early_stop = early_stop
        self._handles: list[Any] = []
        self._index = None
        self._out: list[Any] = [None] * len(self.locations)

    def _store(self, slot: int, hidden) -> None:
        import torch

        rows = torch.arange(hidden.shape[0], device=hidden.device)
        self._out[slot] = hidden[rows, self._index.to(hidden.device)].detach().to("cpu", torch.float32)

    def __enter__(self) -> BoundaryCapture:
        last = max(self.locations)
        for slot, loc in enumerate(self.locations):
            if loc == 0:
                def pre_hook(module, args, kwargs, slot=slot):
                    self._store(slot, args[0] if args else kwargs["hidden_states"])
                self._handles.append(self.blocks[0].register_forward_pre_hook(pre_hook, with_kwargs=True))
            else:
                def hook(module, args, output, slot=slot, loc=loc):
                    self._store(slot, _hidden(output))
                    if self.early_stop and loc == last:
                        raise _StopForward
                self._handles.append(self.blocks[loc - 1].register_forward_hook(hook))
        if self.early_stop and last == 0:
            def stop(module, args, kwargs):
                raise _StopForward
            self._handles.append(self.blocks[0].register_forward_pre_hook(stop, with_kwargs=True))
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def run(self, input_ids, attention_mask, boundary_index):
        """One forward pass; returns the boundary vectors (B, n_locations, d) as float32 CPU tensor.

        ``boundary_index`` (B,) is each row's boundary position (padding on either side is fine: position
        ids are computed from the attention mask, as ``generate`` does).
        """
        import torch

        self._index = torch.as_tensor(boundary_index, dtype=torch.long)
        self._out = [None] * len(self.locations)
        position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        try:
            self.model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                  use_cache=False)
        except _StopForward:
            pass
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


def length_sorted(prompts: Sequence[Prompt]) -> list[Prompt]:
    """Prompts by token length (stable), so batches need little padding."""
    return sorted(prompts, key=lambda p: p.n_tokens)


def batches(prompts: Sequence[Prompt], batch_size: int, same_length: bool = False) -> Iterable[list[int]]:
    """Index lists of consecutive batches of ``prompts`` (already length-sorted); ``same_length`` never mixes
    lengths (for backends that take no padding)."""
    start = 0
    while start < len(prompts):
        stop = min(start + batch_size, len(prompts))
        if same_length:
            stop = start + 1
            while stop < len(prompts) and stop - start < batch_size and \
                    prompts[stop].n_tokens == prompts[start].n_tokens:
                stop += 1
        yield list(range(start, stop))
        start = stop


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
        if not self.locations or min(self.locations) < 0 or max(self.locations) > n_blocks:
            raise UsageError(f"--locations must lie in 0..{n_blocks} for a model with {n_blocks} blocks")
        self.n_stop = max(1, max(self.locations))
        self.mid_blocks = list(range(self.n_stop))
        self.bridge = TransformerBridge.boot_transformers(
            loaded.model_id if not loaded.source.get("path") else loaded.source["path"],
            hf_model=loaded.model, tokenizer=loaded.tokenizer, device=str(loaded.model.device),
            dtype=loaded.model.dtype)
        self.hook_names = [("blocks.0.hook_resid_pre" if loc == 0 else f"blocks.{loc - 1}.hook_resid_post")
                           for loc in self.locations] + [f"blocks.{i}.hook_resid_mid" for i in self.mid_blocks]

    def extra_names(self) -> list[str]:
        return [f"blocks.{i}.hook_resid_mid" for i in self.mid_blocks]

    def run(self, input_ids, boundary_index):
        """Right-padded batch (B, T) -> boundary vectors (B, n_locations + n_mid, d) float32 CPU."""
        import torch

        out: dict[str, Any] = {}
        index = torch.as_tensor(boundary_index, dtype=torch.long)

        def keeper(name):
            # keyed by our name: the bridge may call the hook under its canonical alias (hook.name differs)
            def keep(tensor, hook):
                rows = torch.arange(tensor.shape[0], device=tensor.device)
                out[name] = tensor[rows, index.to(tensor.device)].detach().to("cpu", torch.float32)
            return keep

        self.bridge.run_with_hooks(input_ids.to(self.bridge.cfg.device), return_type=None,
                                   fwd_hooks=[(name, keeper(name)) for name in self.hook_names],
                                   stop_at_layer=self.n_stop)
        return torch.stack([out[name] for name in self.hook_names], dim=1)


def _settings_key(model: str, gguf_file: str | None, settings: PromptSettings, dtype: str, acts_dtype: str,
                  backend: str, locations: Sequence[int] | None, shard_rows: int) -> dict[str, Any]:
    """The resume key: everything that changes a row. Batch size and padding side do not (beyond float
    rounding), so a run may resume with another batch size."""
    spec = model
    if model != DEFAULT_MODEL or gguf_file:
        path = Path(model).expanduser()
        spec = str(path.resolve()) if path.exists() else model
    return {**settings.to_dict(), "model": spec, "gguf_file": gguf_file, "model_dtype": dtype,
            "dtype": acts_dtype, "backend": backend,
            "locations": "all" if locations is None else [int(i) for i in locations], "shard_rows": shard_rows}


def context_length(model) -> int | None:
    config = getattr(model.config, "text_config", None) or model.config
    for key in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def capture(model: str | LoadedModel = DEFAULT_MODEL, out_dir: str | Path = "capture", L: int = 256,
            counts: Iterable[int] = range(0, 101), per_count: int = 1, pairs: Sequence[Sequence[str]] | None = None,
            configs: Sequence[str] | None = None, seeds: Sequence[int] = (0, 1, 2), template: str = "chat",
            batch_size: int = 16, backend: str = "hf", locations: Sequence[int] | None = None,
            gguf_file: str | None = None, device: str = "cpu", dtype: str = "float32",
            acts_dtype: str = "float32", padding_side: str = "right", shard_rows: int = SHARD_ROWS,
            progress: bool = True) -> Path:
    """Capture the boundary residual stream of every prompt into ``out_dir``; returns ``out_dir``.

    ``model``: ``"default"`` (embedded SmolLM2-135M-Instruct), a folder, a ``.gguf`` file, a hub id, or an
    already :func:`load_model`-ed model. Prompts: ``len(counts) * per_count * len(pairs) * len(configs) *
    len(seeds)`` of them (see :mod:`countlens.llm.prompts`). ``locations`` (indices, default all) and early
    stop: only blocks up to the last requested one run. Rows are written in shards of ``shard_rows`` prompts
    (the unit of resumption). Resumes from finished shards of an interrupted run
    with the same settings; refuses a folder holding other settings (:class:`UsageError`).
    """
    import torch
    from tqdm.auto import tqdm

    if backend not in BACKENDS:
        raise UsageError(f"--backend must be hf or transformer-lens, got {backend!r}")
    if acts_dtype not in ACTS_DTYPES:
        raise UsageError(f"--acts-dtype must be float32 or float16, got {acts_dtype!r}")
    if padding_side not in ("left", "right"):
        raise UsageError(f"padding side must be left or right, got {padding_side!r}")
    if batch_size < 1:
        raise UsageError(f"--batch-size must be >= 1, got {batch_size}")
    if shard_rows < 1:
        raise UsageError(f"--shard-rows must be >= 1, got {shard_rows}")
    settings = PromptSettings(L=int(L), counts=[int(c) for c in counts], per_count=int(per_count),
                              pairs=[list(p) for p in pairs] if pairs is not None else PromptSettings().pairs,
                              configs=list(configs) if configs is not None else list(CONFIGURATIONS),
                              seeds=[int(s) for s in seeds], template=template).validate()
    name = model if isinstance(model, str) else model.model_id
    if name == DEFAULT_MODEL_ID:  # an already loaded default model resumes a `--model default` run
        name = DEFAULT_MODEL
    key = _settings_key(name, gguf_file, settings, dtype if isinstance(model, str) else model.dtype,
                        acts_dtype, backend, locations, shard_rows)
    out_dir = Path(out_dir)
    if (out_dir / "meta.json").exists():  # refuse another run's folder before the slow model load
        old = read_meta(out_dir)
        if old.get("settings") != key:
            raise UsageError(f"{out_dir} holds a capture made with other settings; choose another --out "
                             "folder or delete it")
        if old.get("complete") and _readable(out_dir):
            return out_dir
    elif out_dir.exists() and any(out_dir.iterdir()):
        raise UsageError(f"{out_dir} exists and is not a countlens capture; choose an empty --out folder")

    loaded = load_model(model, gguf_file, device, dtype, progress) if isinstance(model, str) else model
    tokenizer, hf_model = loaded.tokenizer, loaded.model
    prompts = length_sorted(build_prompts(tokenizer, settings))
    n_ctx = context_length(hf_model)
    longest = prompts[-1].n_tokens
    if n_ctx is not None and longest > n_ctx:
        raise UsageError(f"the longest prompt has {longest} tokens but the model's context is {n_ctx}; "
                         "lower --L")

    names, run_batch, same_length = _batch_runner(loaded, locations, backend, padding_side)
    d = int((getattr(hf_model.config, "text_config", None) or hf_model.config).hidden_size)
    meta = {
        "locations": names, "d": d, "dtype": acts_dtype, "model": loaded.model_id, "model_source": loaded.source,
        "model_dtype": loaded.dtype, "architecture": type(hf_model).__name__,
        "n_blocks": len(find_blocks(hf_model)), "backend": backend, "settings": key,
        "token_pairs": settings.pairs, "configurations": {c: CONFIGURATIONS[c] for c in settings.configs},
        "seeds": settings.seeds, "L": settings.L, "counts": settings.counts, "per_count": settings.per_count,
        "template": template, "boundary": boundary_tokens(tokenizer, prompts[0]), "n_prompts": len(prompts),
        "shard_rows": shard_rows, "max_tokens": longest,
        "provenance": provenance({"settings": key, "batch_size": batch_size, "padding_side": padding_side,
                                  "device": loaded.device}),
    }
    writer = ActivationWriter(out_dir, meta)
    shards = [prompts[i:i + shard_rows] for i in range(0, len(prompts), shard_rows)]
    done = writer.finished_shards()  # drops corrupted shards and temporary folders of an interrupted write
    if len(done & set(range(len(shards)))) < len(shards):
        # until every shard is back, the folder must not claim to be complete
        write_json_atomic(out_dir / "meta.json", {**writer.meta, "complete": False})
    started = time.perf_counter()
    bar = tqdm(total=len(prompts), initial=sum(len(shards[i]) for i in done if i < len(shards)),
               unit="prompt", desc="capture", disable=not progress, smoothing=0.1)
    try:
        with torch.inference_mode():
            for s, shard in enumerate(shards):
                if s in done:
                    continue
                acts = np.empty((len(shard), len(names), d), dtype=np.float32)
                for idx in batches(shard, batch_size, same_length=same_length):
                    acts[idx] = run_batch([shard[i] for i in idx])
                    bar.update(len(idx))
                writer.write_shard(s, _rows(shard, acts))
    finally:
        bar.close()
    writer.finish({"n_rows": len(prompts), "capture_seconds": round(time.perf_counter() - started, 3)})
    return out_dir


def _batch_runner(loaded: LoadedModel, locations: Sequence[int] | None, backend: str, padding_side: str):
    """(location names, ``run(prompts) -> (B, n_locations, d)`` array, whether batches must be unpadded)."""
    model, tokenizer = loaded.model, loaded.tokenizer
    n_blocks = len(find_blocks(model))
    names = location_names(n_blocks)
    if locations is not None:
        if not locations or any(not 0 <= int(i) <= n_blocks for i in locations):
            raise UsageError(f"--locations must lie in 0..{n_blocks} for a model with {n_blocks} blocks")
        names = [names[int(i)] for i in locations]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
    if backend == "transformer-lens":
        runner = TransformerLensCapture(loaded, locations)

        def run_tl(group: list[Prompt]) -> np.ndarray:
            # Right padding without a mask is exact for a causal model: every real token keeps its position,
            # and the boundary token never attends to the pads after it.
            ids, _, index = pad_batch(group, pad_id, "right")
            return runner.run(ids, index).numpy()
        return names + runner.extra_names(), run_tl, False

    hooks = BoundaryCapture(model, locations)
    device_in = model.get_input_embeddings().weight.device

    def run_hf(group: list[Prompt]) -> np.ndarray:
        ids, mask, index = pad_batch(group, pad_id, padding_side, device_in)
        with hooks as cap:
            return cap.run(ids, mask, index).numpy()
    return names, run_hf, False


def _rows(shard: Sequence[Prompt], acts: np.ndarray) -> dict[str, Any]:
    return {"acts": acts, "n": [p.n for p in shard], "m": [p.m for p in shard], "pair": [p.pair for p in shard],
            "config": [p.config for p in shard], "seed": [p.seed for p in shard],
            "prompt": [p.prompt for p in shard], "boundary_index": [p.boundary_index for p in shard],
            "n_tokens": [p.n_tokens for p in shard]}


def _readable(out_dir: Path) -> bool:
    """Whether a capture folder marked complete loads whole (every shard readable, every row present)."""
    try:
        load_capture(out_dir)
    except UsageError:
        return False
    return True
