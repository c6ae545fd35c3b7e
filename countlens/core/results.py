"""The one result contract: every experiment's result saves into a folder, reads back typed, and records
the config and versions that made it the same way.

A result is a dataclass that inherits :class:`Result`:

- ``FILE`` names its JSON file, ``COMMAND`` the command that writes it (for the error of a wrong file);
- :meth:`Result.save` ``(folder) -> list[Path]`` writes ``folder/FILE`` and any CSV tables
  (:meth:`Result.tables`) atomically; :meth:`Result.write` writes the JSON alone to any path (a ``--json``
  flag);
- :meth:`Result.to_dict` is the JSON document (its fields; a result may add derived keys), and
  :meth:`Result.from_dict` rebuilds the typed result from it, nested dataclasses and non-finite floats
  included (``"inf"`` in JSON is ``math.inf`` again), ignoring keys it does not know;
- the ``provenance`` field holds :func:`result_provenance` of the config that made it: the config's own
  fields (``dataclasses.asdict``), package versions, command line and time.

Rooms read each other's results through these typed objects (``ProbeResult.read(path)``), never by JSON
key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
import typing
from pathlib import Path
from typing import Any, ClassVar

from countlens.core.errors import UsageError
from countlens.core.io import provenance, read_json, to_jsonable, write_csv_atomic, write_json_atomic

_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def config_record(config: Any) -> dict[str, Any]:
    """A config as the JSON-able dict results record: a dataclass's fields (nested ones too), a dict as
    it is."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return to_jsonable(dataclasses.asdict(config))
    return to_jsonable(dict(config or {}))


def result_provenance(config: Any) -> dict[str, Any]:
    """The provenance block of a result made by ``config``: :func:`config_record`, versions, command, time."""
    return provenance(config_record(config))


def records_table(records: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """A CSV table (header, rows) of records sharing their keys: the first record's keys, a row per record."""
    header = list(records[0]) if records else []
    return header, [[r[k] for k in header] for r in records]


class Result:
    """Base of every result dataclass (see the module docstring). Subclasses set ``FILE`` and ``COMMAND``
    and may override :meth:`tables` (CSV files beside the JSON) and :meth:`to_dict` (derived keys)."""

    FILE: ClassVar[str] = "result.json"
    COMMAND: ClassVar[str] = "countlens"

    def to_dict(self) -> dict[str, Any]:
        """The JSON document: the dataclass fields."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Any):
        """The typed result from its JSON document; :class:`UsageError` naming the command that writes
        such a file when ``data`` is not one."""
        if not isinstance(data, dict):
            raise UsageError(f"not a {cls.FILE} written by `{cls.COMMAND}` (not a JSON object)")
        try:
            return build(cls, data)
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(f"not a {cls.FILE} written by `{cls.COMMAND}` ({exc})") from None

    RECORDS: ClassVar[dict[str, str]] = {}  # CSV file name -> the field holding its records (:func:`records_table`)

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """CSV files written beside the JSON: ``{file name: (header, rows)}``; by default one per
        :attr:`RECORDS` entry."""
        return {name: records_table(getattr(self, key)) for name, key in self.RECORDS.items()}

    @classmethod
    def file_names(cls) -> tuple[str, ...]:
        """The files :meth:`save` always writes (the JSON first)."""
        return (cls.FILE, *cls.RECORDS)

    def write(self, path: str | os.PathLike) -> Path:
        """Write the JSON document alone to ``path`` (atomically)."""
        return write_json_atomic(path, self.to_dict())

    def plot(self):
        """The experiment's main figure of this result, drawn from the result alone (a matplotlib figure; the
        plot function its experiment declares)."""
        from countlens.core.registry import plot_of

        return plot_of(type(self))(self)

    def save(self, folder: str | os.PathLike) -> list[Path]:
        """Write ``folder/FILE`` and the :meth:`tables` atomically; return the paths written."""
        folder = Path(folder)
        written = [self.write(folder / self.FILE)]
        for name, (header, rows) in self.tables().items():
            written.append(write_csv_atomic(folder / name, header, rows))
        return written

    @classmethod
    def read(cls, path: str | os.PathLike):
        """The result saved at ``path`` (a file, or a folder holding ``FILE``)."""
        path = Path(path)
        if path.is_dir():
            path = path / cls.FILE
        return cls.from_dict(read_json(path, f"{cls.FILE.removesuffix('.json')} file"))


# ---------------------------------------------------------------------------------------- typed rebuild


def build(cls: type, data: dict[str, Any]):
    """``cls(**fields)`` from a JSON object, each field rebuilt by its type annotation (nested dataclasses,
    lists and dicts of them, non-finite floats, paths); keys that are not fields are ignored, a missing
    field without a default raises ``KeyError``."""
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise KeyError(f"missing key {f.name!r}")
            continue
        kwargs[f.name] = _value(hints.get(f.name, Any), data[f.name])
    return cls(**kwargs)


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - an annotation that does not resolve: rebuild those fields as they are
        return {}


def _value(hint: Any, value: Any) -> Any:
    if value is None or hint is Any:
        return value
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        for member in members:  # a dataclass member takes a JSON object; otherwise the first that applies
            if isinstance(value, dict) and dataclasses.is_dataclass(member):
                return _value(member, value)
        return _value(members[0], value) if len(members) == 1 else _nonfinite(value)
    if dataclasses.is_dataclass(hint) and isinstance(value, dict):
        return hint.from_dict(value) if issubclass(hint, Result) else build(hint, value)
    if origin in (list, tuple) and isinstance(value, list):
        item = args[0] if args else Any
        out = [_value(item, v) for v in value]
        return tuple(out) if origin is tuple else out
    if origin is dict and isinstance(value, dict):
        item = args[1] if len(args) == 2 else Any
        return {k: _value(item, v) for k, v in value.items()}
    if hint is float:
        return _nonfinite(value)
    if hint is Path and isinstance(value, str):
        return Path(value)
    return value


def _nonfinite(value: Any) -> Any:
    return _NONFINITE.get(value, value) if isinstance(value, str) else value


__all__ = ["Result", "build", "config_record", "result_provenance"]
