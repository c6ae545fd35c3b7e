"""Configs compose: set and read the fields of a config and of the configs it holds by their names.

A capture's config holds a :class:`~countlens.llm.models.ModelSpec` (``model``) and a
:class:`~countlens.llm.prompts.PromptSettings` (``prompts``); every field keeps one name wherever it is set
(the command line's dests, the pipeline's overrides), so ``device`` sets ``config.model.device`` and
``counts`` sets ``config.prompts.counts``. :class:`ExperimentConfig` gives every experiment's config that,
and its JSON round trip.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from countlens.core.io import to_jsonable
from countlens.core.results import build


def _nested(config: Any) -> list[str]:
    return [f.name for f in dataclasses.fields(config) if dataclasses.is_dataclass(getattr(config, f.name))]


def _owner(config: Any, name: str) -> str | None:
    """The field of ``config`` whose value holds the setting ``name``: ``""`` for ``config`` itself (a
    field that is not a nested config), the nested config's field, or ``None`` for no such setting."""
    direct = {f.name for f in dataclasses.fields(config)}
    nested = _nested(config)
    if name in direct and name not in nested:
        return ""
    for owner in nested:
        if _owner(getattr(config, owner), name) is not None:
            return owner
    return None


def option_value(config: Any, name: str) -> Any:
    """The value of the setting ``name`` in ``config`` or a config it holds (``option_value(c, "device")``
    is ``c.model.device``)."""
    owner = _owner(config, name)
    if owner is None:
        raise AttributeError(f"{type(config).__name__} has no setting {name!r}")
    return getattr(config, name) if owner == "" else option_value(getattr(config, owner), name)


def with_options(config: Any, **values: Any) -> Any:
    """A copy of the dataclass ``config`` with each setting of ``values`` set by name, in ``config`` or in
    a config it holds; a config value replaces a nested config whole (``model=ModelSpec(...)``), and the
    other settings then apply on top. ``TypeError`` for a name that is no setting."""
    whole = {k: v for k, v in values.items() if k in _nested(config) and dataclasses.is_dataclass(v)}
    config = dataclasses.replace(config, **whole)
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        if name in whole:
            continue
        owner = _owner(config, name)
        if owner is None:
            raise TypeError(f"{type(config).__name__} has no setting {name!r}")
        if owner == "":
            direct[name] = value
        else:
            nested.setdefault(owner, {})[name] = value
    for owner, mine in nested.items():
        direct[owner] = with_options(getattr(config, owner), **mine)
    return dataclasses.replace(config, **direct)


class ExperimentConfig:
    """Base of the llm room's experiment configs (dataclasses): settings set by name, nested ones included,
    and the JSON document (nested configs as objects) that rebuilds the typed config. A config is checked
    when it is built: ``__post_init__`` calls the subclass's ``validate()`` (its field rules,
    :mod:`countlens.core.fields`, and the checks across fields; no file is read)."""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self):
        """Raise :class:`~countlens.core.errors.ConfigError` naming the field of a config that cannot run."""
        return self

    def with_options(self, **values: Any):
        """A copy with the settings of ``values`` set by name (:func:`with_options`)."""
        return with_options(self, **values)

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: dict[str, Any]):
        return build(cls, data)


__all__ = ["option_value", "with_options", "ExperimentConfig"]
