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

    def summary_rows(self) -> list[tuple[str, str]]:
        """The short summary a notebook shows (:meth:`_repr_markdown_`): ``(field, value)`` rows — each
        number, string or flag field as it is, each list or mapping as its length, a nested dataclass by its
        own first scalars (one level), the provenance left out — and ``summary`` first where the result has one."""
        rows: list[tuple[str, str]] = []
        own = getattr(self, "summary", None)
        if callable(own):
            rows.append(("summary", str(own())))
        for f in dataclasses.fields(self) if dataclasses.is_dataclass(self) else ():
            if f.name == "provenance":
                continue
            rows.extend(_summary_cells(f.name, getattr(self, f.name), nested=True))
        return rows

    def _repr_markdown_(self) -> str:
        """A short Markdown table of :meth:`summary_rows` (Jupyter shows it when a cell ends with a result)."""
        lines = [f"**{type(self).__name__}** (`{self.FILE}`, written by `{self.COMMAND}`)", "",
                 "| field | value |", "|---|---|"]
        lines += [f"| {k} | {_md_cell(v)} |" for k, v in self.summary_rows()]
        return "\n".join(lines) + "\n"

    def _repr_html_(self) -> str:
        """The same table as :meth:`_repr_markdown_`, as HTML."""
        import html

        cells = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>"
                        f"{html.escape(v)}</td></tr>" for k, v in self.summary_rows())
        return (f"<div><b>{html.escape(type(self).__name__)}</b> (<code>{html.escape(self.FILE)}</code>, "
                f"written by <code>{html.escape(self.COMMAND)}</code>)<table>{cells}</table></div>")


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


_SHORT = 120  # characters of one summary cell
_NESTED = 6  # rows of one nested dataclass


def _summary_cells(name: str, value: Any, nested: bool) -> list[tuple[str, str]]:
    """:meth:`Result.summary_rows` of one field."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, float, str, Path)):
        text = f"{value:.6g}" if isinstance(value, float) else str(value)
        return [(name, text if len(text) <= _SHORT else text[: _SHORT - 1] + "…")]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if not nested:
            return [(name, type(value).__name__)]
        cells = [cell for f in dataclasses.fields(value) if f.name not in ("record", "settings", "provenance")
                 for cell in _summary_cells(f"{name}.{f.name}", getattr(value, f.name), nested=False)]
        return cells if len(cells) <= _NESTED else [*cells[:_NESTED], (f"{name}.…", f"{len(cells) - _NESTED} more")]
    if isinstance(value, (list, tuple, dict)):
        kind = "entries" if isinstance(value, dict) else "items"
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, (int, float, str)) for v in value) \
                and len(value) <= 8:
            return [(name, ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in value))]
        return [(name, f"{len(value)} {kind}")]
    shape = getattr(value, "shape", None)
    return [(name, f"array of shape {tuple(shape)}" if shape is not None else type(value).__name__)]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _nonfinite(value: Any) -> Any:
    return _NONFINITE.get(value, value) if isinstance(value, str) else value


__all__ = ["Result", "build", "config_record", "result_provenance"]
