"""The model part of every config that runs one: :class:`ModelSpec`."""

from __future__ import annotations

from dataclasses import dataclass, field

from countlens.core.errors import ConfigError
from countlens.llm.models.load import LoadedModel, check_device, check_dtype, load_model
from countlens.llm.models.pool import ModelPool
from countlens.llm.models.resolve import DEFAULT_MODEL, ModelRef, resolve_model


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

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> ModelSpec:
        """:class:`ConfigError` naming the field of a spec that cannot run (reads no file); runs when built."""
        if not str(self.model).strip():
            raise ConfigError("model", "{model} must name a model: a folder, a .gguf file, a hub id, or default")
        check_device(self.device)
        check_dtype(self.dtype)
        return self

    def resolve(self, progress: bool = True, template: str | None = None, pool: ModelPool | None = None) -> ModelRef:
        """Where the model's files are (:func:`resolve_model`, once in ``pool``; no weights are read); given
        the prompt ``template``, a GGUF file without a chat template is refused for ``"chat"`` from its header."""
        return resolve_model(self.model, self.gguf_file, self.revision, self.trust_remote_code, progress,
                             self.no_cache, template, pool=pool)

    def load(self, progress: bool = True, tokenizer=None, pool: ModelPool | None = None) -> LoadedModel:
        """The model loaded on ``device`` in ``dtype`` (:func:`load_model`, once in ``pool``); ``tokenizer``
        reuses a loaded one."""
        return load_model(self.model, self.gguf_file, self.device, self.dtype, progress, self.revision,
                          self.trust_remote_code, tokenizer, self.no_cache, pool=pool)


__all__ = ["ModelSpec"]
