"""Load a resolved model and its tokenizer (:mod:`countlens.llm.models.resolve`) on a device, in a dtype.

The tokenizer and config are read without the weights, so a plan can check them before the slow load; a
GGUF file's are read from its cached conversion (:mod:`countlens.llm.models.cache`). Within a run's
:func:`~countlens.llm.models.pool.model_pool` each is read, and each model loaded, once.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.llm.gguf import TOKENIZER_PART, WEIGHTS_PART
from countlens.llm.models.cache import _gguf_part, cache_root
from countlens.llm.models.pool import ModelPool, read_once
from countlens.llm.models.quiet import _apply_quiet
from countlens.llm.models.resolve import DEFAULT_MODEL, ModelRef, resolve_model

DTYPES = ("float32", "float16", "bfloat16")
DEVICES = ("cpu", "cuda", "mps", "auto")


@dataclass
class LoadedModel:
    """A model ready for capture: ``model`` (eval mode), ``tokenizer``, and where it came from."""

    model: Any
    tokenizer: Any
    model_id: str
    location: str = ""  # the folder (or hub id) its files were read from
    source: dict[str, Any] = field(default_factory=dict)  # path / gguf sha256 / hub revision
    dtype: str = "float32"
    device: str = "cpu"

    def __post_init__(self) -> None:
        _TOKENIZERS[self.model] = self.tokenizer


# model -> the tokenizer it was loaded with (every LoadedModel, copies included), for the mechanisms that see
# only the model and need its vocabulary (the final-answer scoring of countlens.llm.answers)
_TOKENIZERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def tokenizer_of(model) -> Any:
    """The tokenizer ``model`` was loaded with (a :class:`LoadedModel` made of them), else ``None``."""
    return _TOKENIZERS.get(model)


def check_dtype(dtype: str) -> None:
    """``ConfigError("dtype")`` unless ``dtype`` is one of :data:`DTYPES`."""
    if dtype not in DTYPES:
        raise ConfigError("dtype", f"{{dtype}} must be one of {', '.join(DTYPES)}, got {literal(repr(dtype))}")


def check_device(device: str) -> None:
    """``ConfigError("device")`` unless ``device`` is one of :data:`DEVICES` or ``cuda:N`` (whether it is
    there is checked when a model loads: a Ray driver plans captures for GPUs it does not have)."""
    index = str(device).removeprefix("cuda:")
    if device not in DEVICES and not (str(device).startswith("cuda:") and index.isdigit()):
        raise ConfigError("device", f"{{device}} must be one of {', '.join(DEVICES)} (or cuda:N), got "
                                    f"{literal(repr(device))}")


def _torch_dtype(dtype: str):
    import torch

    check_dtype(dtype)
    return getattr(torch, dtype)


def _check_device(device: str) -> None:
    import torch

    check_device(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device", "{device:cuda} requested but no CUDA GPU is visible; use {device:cpu}")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise ConfigError("device", "{device:mps} requested but MPS is not available; use {device:cpu}")


def _hub_revision(model) -> str | None:
    return getattr(model.config, "_commit_hash", None)


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else exc.__class__.__name__


def _cannot_load(what: str, exc: Exception) -> ConfigError:
    return ConfigError("model", literal(f"cannot load {what} ({_first_line(exc)})") + "; set {model} to a model "
                                "folder, a .gguf file, a cached hub id, or default")


def _cached(kind: str, ref: ModelRef, make, pool: ModelPool | None):
    """``make()``, once per ``(kind, ref)`` in ``pool`` (:func:`~countlens.llm.models.pool.read_once`)."""
    return read_once(kind, ref.key(), make, pool)


def _from_pretrained(kind: str, ref: ModelRef, auto: str, what: str, pool: ModelPool | None):
    """``transformers.<auto>.from_pretrained`` of ``ref`` without its weights (a GGUF file's from its cached
    conversion), read once per ``pool`` and kept there under ``kind``; a read that fails is one error naming
    ``what``."""
    import transformers

    _apply_quiet()

    def read():
        cls = getattr(transformers, auto)
        try:
            folder = _gguf_part(ref, TOKENIZER_PART) if ref.header is not None else None
            if folder is not None:
                return cls.from_pretrained(str(folder), local_files_only=True)
            return cls.from_pretrained(ref.location, **ref.kwargs)
        except (OSError, ValueError) as exc:
            raise _cannot_load(what, exc) from None
    return _cached(kind, ref, read, pool)


def load_tokenizer(ref: ModelRef, pool: ModelPool | None = None):
    """The tokenizer of ``ref`` (no weights are read; a GGUF file's from its cached conversion)."""
    return _from_pretrained("tokenizer", ref, "AutoTokenizer", f"the tokenizer of model {ref.model_id!r}", pool)


def load_model_config(ref: ModelRef, pool: ModelPool | None = None):
    """The ``transformers`` config of ``ref`` (no weights are read; a GGUF file's from its cached
    conversion)."""
    return _from_pretrained("config", ref, "AutoConfig", f"model {ref.model_id!r}", pool)


def load_model(model: str | ModelRef = DEFAULT_MODEL, gguf_file: str | None = None, device: str = "cpu",
               dtype: str = "float32", progress: bool = True, revision: str | None = None,
               trust_remote_code: bool = False, tokenizer=None, no_cache: bool = False,
               pool: ModelPool | None = None) -> LoadedModel:
    """Load ``model`` (a name as in :func:`resolve_model`, or a resolved :class:`ModelRef`) for capture.

    A GGUF file loads from its cached float32 copy, made on first use (unless ``no_cache``, or the disk
    lacks room). ``device="auto"`` uses accelerate's device map (for models larger than one GPU). ``tokenizer``
    reuses an already loaded tokenizer of the same model. In ``pool`` (a
    :class:`~countlens.llm.models.pool.ModelPool`) each model is loaded once per device and dtype. Raises
    :class:`UsageError` for an unknown name or a missing file.
    """
    _torch_dtype(dtype)
    _check_device(device)
    ref = model if isinstance(model, ModelRef) else resolve_model(model, gguf_file, revision, trust_remote_code,
                                                                   progress, no_cache, pool=pool)
    key = (ref.key(), device, dtype)
    if pool is not None and key in pool.models:
        return pool.models[key]
    loaded = _load(ref, device, dtype, tokenizer if tokenizer is not None else load_tokenizer(ref, pool))
    if pool is not None:
        pool.models[key] = loaded
    return loaded


def _load(ref: ModelRef, device: str, dtype: str, tokenizer) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    _apply_quiet()
    kwargs: dict[str, Any] = {"dtype": _torch_dtype(dtype), **({"device_map": "auto"} if device == "auto" else {})}
    location, files = ref.location, ref.kwargs
    try:
        folder = _gguf_part(ref, WEIGHTS_PART) if ref.header is not None else None
        if folder is not None:
            location = str(folder)
            files = {"local_files_only": True, **({"trust_remote_code": True}
                                                  if ref.kwargs.get("trust_remote_code") else {})}
        hf_model = AutoModelForCausalLM.from_pretrained(location, **files, **kwargs)
    except (OSError, ValueError) as exc:
        raise _cannot_load(f"model {ref.model_id!r}", exc) from None
    if "gguf_file" in files:
        hf_model.hf_quantizer = None
    if device not in ("auto", "cpu"):
        hf_model = hf_model.to(device)
    hf_model.eval()
    source = dict(ref.source)
    if "hub_id" in source:
        source.setdefault("revision", _hub_revision(hf_model))
    source["trust_remote_code"] = bool(ref.kwargs.get("trust_remote_code"))
    return LoadedModel(model=hf_model, tokenizer=tokenizer, model_id=ref.model_id, location=location,
                       source=source, dtype=dtype, device=device)


def default_model_dir(progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """The float32 copy of the embedded SmolLM2 (a Hugging Face model folder in the GGUF cache), made on
    first use; returns (folder, source info)."""
    ref = resolve_model(DEFAULT_MODEL, progress=progress)
    folder = _gguf_part(ref, WEIGHTS_PART)
    if folder is None:
        raise UsageError(f"the float copy of the default model cannot be cached in {cache_root()} (no room); "
                         "free space or set COUNTLENS_CACHE to another folder")
    return folder, ref.source


__all__ = ["DTYPES", "DEVICES", "LoadedModel", "check_dtype", "check_device", "load_tokenizer", "load_model_config",
           "load_model", "default_model_dir"]
