"""A GGUF file's cached conversions: what transformers makes from it — the fast tokenizer and config, and the
dequantised float32 weights — is made once and cached under :func:`cache_root` (``$COUNTLENS_CACHE``, else
``$XDG_CACHE_HOME/countlens``, else ``~/.cache/countlens``), keyed by the file's identity
(:class:`countlens.llm.gguf.GGUFCache`), and reused by every later command (``no_cache`` turns this off); the
embedded default is one such file.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path
from typing import Any

from countlens.core.io import size_text
from countlens.llm.gguf import TOKENIZER_PART, tokenizer_bytes, weights_bytes
from countlens.llm.models.quiet import _apply_quiet


def cache_root() -> Path:
    """The countlens cache folder: ``$COUNTLENS_CACHE``, else ``$XDG_CACHE_HOME/countlens``, else
    ``~/.cache/countlens``. GGUF conversions live in its ``gguf/`` folder (:mod:`countlens.llm.gguf`)."""
    own = os.environ.get("COUNTLENS_CACHE")
    if own:
        return Path(own).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "countlens"


def _gguf_part(ref: Any, part: str) -> Path | None:
    """The cached part ``part`` of ``ref``'s GGUF file, made now if missing; ``None`` where caching is off
    or there is no room (then the caller converts from the file, as without a cache)."""
    if ref.cache is None:
        return None
    name = Path(ref.kwargs["gguf_file"]).name
    if part == TOKENIZER_PART:
        return ref.cache.make(part, lambda folder: _convert_tokenizer(ref, folder), tokenizer_bytes(ref.header),
                              "the converted vocabulary", f"converting the vocabulary and config of {name} once",
                              ref.announce)
    need = weights_bytes(ref.header)
    return ref.cache.make(part, lambda folder: _dequantise(ref, folder), need, "the dequantised weights",
                          f"dequantising {name} to float32 once ({size_text(need)})", ref.announce)


def _convert_tokenizer(ref: Any, folder: Path) -> None:
    """transformers' fast tokenizer and config of the GGUF file, saved into ``folder``."""
    from transformers import AutoConfig, AutoTokenizer

    _apply_quiet()
    tokenizer = AutoTokenizer.from_pretrained(ref.location, **ref.kwargs)
    config = AutoConfig.from_pretrained(ref.location, **ref.kwargs)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    tokenizer.save_pretrained(str(folder))
    config.save_pretrained(str(folder))


def _tokenizer(ref: Any):
    """The GGUF file's tokenizer: from its converted part where cached, else converted now."""
    from transformers import AutoTokenizer

    folder = _gguf_part(ref, TOKENIZER_PART)
    if folder is not None:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    return AutoTokenizer.from_pretrained(ref.location, **ref.kwargs)


def _dequantise(ref: Any, folder: Path) -> None:
    """The GGUF file's weights dequantised to float32, with its tokenizer: a Hugging Face model folder."""
    import torch
    from transformers import AutoModelForCausalLM

    _apply_quiet()
    model = AutoModelForCausalLM.from_pretrained(ref.location, **ref.kwargs, dtype=torch.float32)
    _strip_quantizer(model)
    model.save_pretrained(str(folder))
    _tokenizer(ref).save_pretrained(str(folder))
    del model
    gc.collect()


def _strip_quantizer(model) -> None:
    """Forget a GGUF-loaded model's quantizer: left in place, ``save_pretrained`` writes a
    ``quantization_config`` and the copy would be "re-quantised" (and slow) on every load."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


__all__ = ["cache_root"]
