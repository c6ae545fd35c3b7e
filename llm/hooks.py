"""Hook sites: where a location of the residual stream is read or edited in a Hugging Face model, and the
TransformerLens name of the same place — one table for the capture, patching, steering and both backends.

A :class:`HookSite` is a module of the decoder and whether its hook sees the module's input (``"pre"``) or
its output (``"post"``). :data:`SITES` names the kinds of site; each turns an index into its hook site:

- ``resid``, the capture's locations (docs/definitions.md §2, names from :mod:`countlens.core.locations`):
  location 0 is the input of block 0 (``embed``; TransformerLens ``blocks.0.hook_resid_pre``), location
  ``l >= 1`` the raw output of block ``l - 1`` (``blocks.{l-1}.hook_resid_post``, before any final norm);
- ``resid_mid``, the residual stream between a block's attention and its MLP: no Hugging Face module
  outputs it, so only the TransformerLens backend reads it;
- ``attn_out:{architecture}`` and ``mlp_out:{architecture}``, what each block's attention and MLP add to
  its residual stream (:data:`COMPONENT_OUTPUTS`);
- ``attn_z:{architecture}``, the input of each block's attention output projection (the heads' outputs side
  by side, :data:`ATTENTION_OUTPUTS`), and ``attn_pattern:{architecture}``, the attention weights its parent
  module returns under eager attention (the second item of its output).

A new kind of site (a block's attention or MLP output, the final norm) is a new row of the table; every hook
countlens installs — a capture's read, a patch's write (:class:`countlens.llm.patching.edits.Setter`), a
head's attention weights — goes through it. :class:`HookSet` registers hooks on sites and removes every one
it registered on exit and on any failure, a failure partway through registering included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.locations import location_names, resolve_locations

# A hook's function: the hidden states (B, T, d) the site sees -> new hidden states, or None to leave them.
HookFn = Callable[[Any], Any]


@dataclass(frozen=True)
class HookSite:
    """One place to hook: ``module`` inside decoder block ``block`` (``""``: the block itself; ``None``: no
    Hugging Face module has it), hooked on its input (``"pre"``) or output (``"post"``); ``tl_name`` is the
    TransformerLens hook point of the same place; ``item``: the item of a tuple the hook sees (0: the hidden
    states; the attention weights are item 1 of an attention module's output)."""

    block: int
    module: str | None
    when: str
    tl_name: str
    item: int = 0  # which item of a tuple output (or of the positional inputs) the hook sees and may replace

    def module_of(self, blocks) -> Any:
        """The ``nn.Module`` of this site among the decoder ``blocks``."""
        if self.module is None:
            raise UsageError(f"{self.tl_name} has no Hugging Face module; only the transformer-lens backend "
                             "reads it")
        block = blocks[self.block]
        return block.get_submodule(self.module) if self.module else block


@dataclass(frozen=True)
class Site:
    """A kind of hook site: ``size(n_blocks)`` indices, index ``i`` at ``at(i)``."""

    name: str
    size: Callable[[int], int]
    at: Callable[[int], HookSite]


def _resid(location: int) -> HookSite:
    if location == 0:
        return HookSite(0, "", "pre", "blocks.0.hook_resid_pre")
    return HookSite(location - 1, "", "post", f"blocks.{location - 1}.hook_resid_post")


def _resid_mid(block: int) -> HookSite:
    return HookSite(block, None, "post", f"blocks.{block}.hook_resid_mid")


SITES: dict[str, Site] = {
    "resid": Site("resid", lambda n_blocks: n_blocks + 1, _resid),
    "resid_mid": Site("resid_mid", lambda n_blocks: n_blocks, _resid_mid),
}

# The attention output projection of each architecture (``config.model_type``, the text model's where nested),
# inside a decoder block. Its input holds the heads' outputs side by side, (B, T, n_heads * head_dim), head h in
# columns h * head_dim .. (h + 1) * head_dim (TransformerLens ``blocks.{b}.attn.hook_z``, flattened); its parent
# module is the block's attention, which returns (output, weights) under eager attention. Every row was checked
# on a tiny random model of its architecture (tests/unit/test_llm_heads.py); an architecture missing here cannot
# be read per head, and is refused before its weights load (:func:`attention_output_site`).
ATTENTION_OUTPUTS: dict[str, str] = {
    **dict.fromkeys(("llama", "mistral", "ministral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe",
                     "gemma", "gemma2", "gemma3_text", "phi3", "olmo", "olmo2", "olmo3", "granite", "smollm3",
                     "starcoder2", "cohere", "stablelm", "glm", "helium", "exaone4", "seed_oss", "arcee",
                     "apertus", "ernie4_5", "hunyuan_v1_dense"), "self_attn.o_proj"),
    "phi": "self_attn.dense", "gpt2": "attn.c_proj", "gpt_bigcode": "attn.c_proj", "gpt_neox": "attention.dense",
    "gptj": "attn.out_proj", "gpt_neo": "attn.attention.out_proj", "falcon": "self_attention.dense",
    "bloom": "self_attention.dense", "opt": "self_attn.out_proj",
}


def _attn_z(module: str) -> Callable[[int], HookSite]:
    def at(block: int) -> HookSite:
        return HookSite(block, module, "pre", f"blocks.{block}.attn.hook_z")
    return at


def _attn_pattern(module: str) -> Callable[[int], HookSite]:
    parent = module.rsplit(".", 1)[0]  # the projection's parent: the block's attention, returning (output, weights)

    def at(block: int) -> HookSite:
        return HookSite(block, parent, "post", f"blocks.{block}.attn.hook_pattern", item=1)
    return at


# two kinds of site per architecture: ``attn_z:{model_type}`` and ``attn_pattern:{model_type}``, index = block
for _arch, _module in ATTENTION_OUTPUTS.items():
    SITES[f"attn_z:{_arch}"] = Site(f"attn_z:{_arch}", lambda n_blocks: n_blocks, _attn_z(_module))
    SITES[f"attn_pattern:{_arch}"] = Site(f"attn_pattern:{_arch}", lambda n_blocks: n_blocks, _attn_pattern(_module))


# What each block adds to its residual stream (TransformerLens ``blocks.{b}.hook_attn_out`` / ``hook_mlp_out``):
# the module of each architecture whose output (item 0) is the attention's, and the MLP's, write — the
# attention module and the MLP where a block adds them as they are (pre-norm blocks, and the parallel blocks
# of GPT-NeoX / GPT-J), the norm after them where a block normalises them first (Gemma-2/3's and OLMo-2's
# ``post_attention_layernorm`` / ``post_feedforward_layernorm``). A block's input plus its two writes is its
# output; every row was checked on a tiny random model of its architecture (tests/unit/test_llm_components.py).
# An architecture missing here cannot be decomposed, and is refused before its weights load
# (:func:`component_output_sites`).
COMPONENT_OUTPUTS: dict[str, tuple[str, str]] = {
    **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "olmo", "smollm3", "starcoder2",
                     "helium"), ("self_attn", "mlp")),
    **dict.fromkeys(("gemma2", "gemma3_text", "olmo2"), ("post_attention_layernorm", "post_feedforward_layernorm")),
    "gpt2": ("attn", "mlp"), "gpt_neox": ("attention", "mlp"), "gptj": ("attn", "mlp"),
}


def _write(module: str, tl_name: str) -> Callable[[int], HookSite]:
    def at(block: int) -> HookSite:
        return HookSite(block, module, "post", f"blocks.{block}.{tl_name}")
    return at


# two kinds of site per architecture: ``attn_out:{model_type}`` and ``mlp_out:{model_type}``, index = block
for _arch, (_attn, _mlp) in COMPONENT_OUTPUTS.items():
    SITES[f"attn_out:{_arch}"] = Site(f"attn_out:{_arch}", lambda n_blocks: n_blocks, _write(_attn, "hook_attn_out"))
    SITES[f"mlp_out:{_arch}"] = Site(f"mlp_out:{_arch}", lambda n_blocks: n_blocks, _write(_mlp, "hook_mlp_out"))


def component_output_sites(model_type: str) -> tuple[str, str]:
    """The :data:`SITES` kinds ``(attn_out:{model_type}, mlp_out:{model_type})`` of what each block of
    architecture ``model_type`` adds to its residual stream; ``ConfigError("model")`` for an architecture the
    registry does not know."""
    if model_type not in COMPONENT_OUTPUTS:
        raise ConfigError("model", literal(f"the hook-site registry does not know where the attention and MLP "
                                           f"outputs of architecture {model_type!r} are (known: "
                                           f"{', '.join(sorted(COMPONENT_OUTPUTS))})")
                          + "; choose another {model}, or add its module paths to "
                            "countlens.llm.hooks.COMPONENT_OUTPUTS")
    return f"attn_out:{model_type}", f"mlp_out:{model_type}"


def attention_output_site(model_type: str) -> str:
    """The :data:`SITES` kind of the attention output projection's input in architecture ``model_type``;
    ``ConfigError("model")`` for an architecture the registry does not know."""
    kind = f"attn_z:{model_type}"
    if kind not in SITES:
        raise ConfigError("model", literal(f"the hook-site registry does not know where the attention output "
                                           f"projection of architecture {model_type!r} is (known: "
                                           f"{', '.join(sorted(ATTENTION_OUTPUTS))})")
                          + "; choose another {model}, or add its module path to "
                            "countlens.llm.hooks.ATTENTION_OUTPUTS")
    return kind


def attention_pattern_site(model_type: str) -> str:
    """The :data:`SITES` kind of the attention weights (B, H, T, T) of architecture ``model_type`` (the item
    its attention module returns beside its output under eager attention); ``ConfigError("model")`` as
    :func:`attention_output_site`."""
    return "attn_pattern:" + attention_output_site(model_type).split(":", 1)[1]


def hook_sites(indices: Sequence[int], n_blocks: int, site: str = "resid") -> list[HookSite]:
    """The hook sites of ``indices`` (of the kind ``site``) in a model of ``n_blocks`` blocks;
    ``ConfigError("locations")`` for an empty list or an index the model lacks."""
    kind = SITES[site]
    top = kind.size(n_blocks) - 1
    indices = [int(i) for i in indices]
    if not indices or min(indices) < 0 or max(indices) > top:
        got = ", ".join(map(str, indices)) or "none"
        raise ConfigError("locations", f"{{locations}} must lie in 0..{top} for a model with {n_blocks} blocks, "
                                       f"got {got}")
    return [kind.at(i) for i in indices]


def residual_locations(spec: str | int | None, n_blocks: int) -> list[int]:
    """The residual location indices a spec names (:func:`countlens.core.locations.resolve_locations`:
    names, indices incl. ``-1``, ranges ``0:5``, ``all``), in the spec's order; ``ConfigError("locations")``
    for a location the model lacks."""
    try:
        return resolve_locations(location_names(n_blocks), spec)
    except UsageError as exc:
        raise ConfigError("locations", "{locations}: " + literal(str(exc))) from None


def _pre(fn: HookFn, item: int = 0):
    def hook(module, args, kwargs):
        new = fn(args[item] if len(args) > item else kwargs["hidden_states"])
        if new is None:
            return None
        if len(args) > item:
            return (*args[:item], new, *args[item + 1:]), kwargs
        return args, {**kwargs, "hidden_states": new}
    return hook


def _post(fn: HookFn, item: int = 0):
    def hook(module, args, output):
        tupled = isinstance(output, (tuple, list))
        if tupled:
            seen = output[item] if len(output) > item else None
        else:
            seen = output if item == 0 else None  # an output without the item: the hook sees None
        new = fn(seen)
        if new is None:
            return None
        return (*output[:item], new, *output[item + 1:]) if tupled else new
    return hook


def n_blocks_of(config) -> int:
    """The number of decoder blocks a ``transformers`` config declares (its text model's, if nested)."""
    text_config = getattr(config, "text_config", None) or config
    n = getattr(text_config, "num_hidden_layers", None)
    if not isinstance(n, int) or n < 1:
        raise UsageError(f"the model's config ({type(config).__name__}) declares no number of layers; "
                         "this architecture is not supported")
    return n


def find_blocks(model) -> Any:
    """The decoder blocks (an ``nn.ModuleList``) of a causal LM: Llama, Qwen2, Gemma, GPT-2, GPT-NeoX, ...

    The blocks are the ``ModuleList`` whose length is the config's number of layers; where several match,
    the shallowest one (``model.layers`` / ``transformer.h`` / ``gpt_neox.layers``) wins.
    """
    import torch.nn as nn

    n_layers = n_blocks_of(model.config)
    found = [(name.count("."), name, mod) for name, mod in model.named_modules()
             if isinstance(mod, nn.ModuleList) and len(mod) == n_layers and len(mod) > 0]
    if not found:
        raise UsageError(f"cannot find the decoder blocks of {type(model).__name__} (no ModuleList of "
                         f"{n_layers} layers); this architecture is not supported")
    return min(found, key=lambda t: (t[0], t[1]))[2]


# The most negative mask value that a float32 softmax keeps finite (below it, float64's own minimum turns
# into -inf in a float32 cast).
FLOAT32_MASK_MIN = -3.4028234663852886e38


def _finite_mask(module, args, kwargs):
    import torch

    mask = kwargs.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dtype == torch.float64:
        kwargs["attention_mask"] = mask.clamp(min=FLOAT32_MASK_MIN)
        return args, kwargs
    return None


def guard_float64_masks(model) -> None:
    """Make a float64 model's left-padded batches finite under eager attention. Eager attention (Gemma-2's
    only kind, and every family's inside :func:`~countlens.llm.heads.attention.eager_attention`) takes its
    softmax in float32: float64's mask minimum (−1.8e308) becomes −inf there, a padded query row that sees no
    key becomes NaN, and the NaN reaches every real row through the next layer's values (weight 0 × NaN).
    A forward pre-hook on each decoder block clamps a float64 ``attention_mask`` to float32's minimum, which
    the float32 softmax still turns into weight 0 for every masked key, so every real row is unchanged and
    the padded rows stay finite. Installed once per model (by the model loaders, for ``float64``); kept
    for the model's life."""
    if getattr(model, "_countlens_float64_masks", False):
        return
    for block in find_blocks(model):
        block.register_forward_pre_hook(_finite_mask, with_kwargs=True)
    model._countlens_float64_masks = True


class HookSet:
    """Hooks on the decoder ``blocks`` of one model. :meth:`attach` registers a batch of them — all or
    none: a failure partway removes those already registered — and :meth:`remove` (or leaving the ``with``
    block) removes every hook the set holds, also after an error.

    >>> with HookSet(blocks).attach([(hook_sites([3], n)[0], lambda h: h * 2)]):
    ...     model(input_ids)
    """

    def __init__(self, blocks):
        self.blocks = blocks
        self._handles: list[Any] = []

    def add(self, site: HookSite, fn: HookFn) -> None:
        """Hook ``fn`` on ``site``: it gets the hidden states the site sees and returns new ones or ``None``."""
        module = site.module_of(self.blocks)
        if site.when == "pre":
            handle = module.register_forward_pre_hook(_pre(fn, site.item), with_kwargs=True)
        else:
            handle = module.register_forward_hook(_post(fn, site.item))
        self._handles.append(handle)

    def attach(self, hooks: Iterable[tuple[HookSite, HookFn]]) -> HookSet:
        """:meth:`add` every ``(site, fn)`` of ``hooks``; on any failure remove them all and re-raise."""
        try:
            for site, fn in hooks:
                self.add(site, fn)
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        """Remove every hook this set registered."""
        while self._handles:
            self._handles.pop().remove()

    def __enter__(self) -> HookSet:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


__all__ = ["n_blocks_of", "find_blocks", "guard_float64_masks", "FLOAT32_MASK_MIN", "HookSite", "Site", "SITES",
           "ATTENTION_OUTPUTS", "COMPONENT_OUTPUTS", "attention_output_site",
           "attention_pattern_site", "component_output_sites", "hook_sites", "residual_locations", "HookSet"]
