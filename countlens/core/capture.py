"""A capture as one typed object: its folder, its metadata record, its rows, its activations and counts.

:func:`open_capture` opens a capture folder (an LLM capture or a toy export, :mod:`countlens.core.store`) once;
every function that reads activations takes what it returns, or a folder it opens with it. The folder's
``meta.json`` is read into a :class:`CaptureMeta` (named fields; the file itself is kept as it is in
``record``), the rows are one memory-mapped ``datasets.Dataset``, and :meth:`Capture.acts` reads one
location as an array in one call.

A capture is also the capture stage's result (the one result contract, :mod:`countlens.core.results`):
``capture.json`` holds its folder, row count, ``meta.json`` and the provenance of the config that asked
for it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from countlens.core.errors import UsageError
from countlens.core.io import to_jsonable
from countlens.core.results import Result
from countlens.core.store import acts_array, column, iter_batches, load_capture, read_meta


@dataclass(frozen=True)
class CaptureMeta:
    """What a capture's ``meta.json`` says, by name.

    The model twice, as the file holds it: ``model_id`` is the model that ran (``meta["model"]``: the loaded
    model's name, ``"toy"`` for a toy export), ``model_name`` the model as it was asked for (the settings'
    ``model``: ``"default"``, a resolved path or a hub id; ``None`` for a toy export); with ``gguf_file``,
    ``revision``, ``trust_remote_code``, ``model_dtype`` and ``random_init_seed`` they rebuild it.
    ``locations`` (names) of width ``d`` stored in ``dtype``; ``n_blocks`` of the model; ``positions``
    (``"boundary"``: one row per prompt, ``"items"``: one per item and boundary); ``n_prompts`` and ``n_rows``
    (``None`` where the file does not say); the prompt settings ``L``, ``counts``, ``template``;
    ``answer_candidates`` of a capture with answers; ``params`` and ``variant`` of a toy export;
    ``complete`` once every shard is written, and ``capture_seconds`` the shards took (s).
    ``settings`` is the resume key (a capture resumes only with the same one) and ``record`` the whole file.
    """

    locations: tuple[str, ...] = ()
    d: int = 0
    dtype: str = "float32"
    model_id: str | None = None
    model_name: str | None = None
    gguf_file: str | None = None
    revision: str | None = None
    trust_remote_code: bool = False
    model_dtype: str = "float32"
    random_init_seed: int | None = None
    n_blocks: int | None = None
    positions: str = "boundary"
    n_prompts: int | None = None
    n_rows: int | None = None
    L: int | None = None
    counts: tuple[int, ...] | None = None
    template: str | None = None
    answer_candidates: tuple[int, ...] | None = None
    params: dict[str, Any] | None = field(default=None, repr=False)
    variant: str | None = None
    complete: bool = False
    capture_seconds: float | None = None
    settings: dict[str, Any] = field(default_factory=dict, repr=False)
    record: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> CaptureMeta:
        """The metadata of a ``meta.json`` document (any capture this package ever wrote: keys it lacks
        get their defaults)."""
        settings = record.get("settings") if isinstance(record.get("settings"), dict) else {}
        counts = record.get("counts", settings.get("counts"))
        candidates = record.get("answer_candidates")
        seed = settings.get("random_init_seed")
        return cls(
            locations=tuple(record.get("locations") or ()), d=int(record.get("d") or 0),
            dtype=str(record.get("dtype") or "float32"), model_id=record.get("model"),
            model_name=settings.get("model"), gguf_file=settings.get("gguf_file"),
            revision=settings.get("revision"), trust_remote_code=bool(settings.get("trust_remote_code")),
            model_dtype=str(settings.get("model_dtype", "float32")),
            random_init_seed=None if seed is None else int(seed),
            n_blocks=None if record.get("n_blocks") is None else int(record["n_blocks"]),
            positions=str(record.get("positions") or "boundary"),
            n_prompts=record.get("n_prompts"), n_rows=record.get("n_rows"), L=record.get("L"),
            counts=None if counts is None else tuple(int(c) for c in counts),
            template=record.get("template", settings.get("template")),
            answer_candidates=None if candidates is None else tuple(int(c) for c in candidates),
            params=record.get("params"), variant=record.get("variant") if isinstance(record.get("variant"), str)
            else None, complete=bool(record.get("complete")), capture_seconds=record.get("capture_seconds"),
            settings=dict(settings), record=dict(record))

    def to_dict(self) -> dict[str, Any]:
        """The ``meta.json`` document, as the file holds it."""
        return dict(self.record)

    def location_index(self, location: str | int) -> int:
        """The index among :attr:`locations` of a name or an index (negative ones count from the end)."""
        if isinstance(location, (int, np.integer)):
            return range(len(self.locations))[int(location)]
        return self.locations.index(location)


@dataclass
class Capture(Result):
    """A capture folder, opened (:func:`open_capture`).

    ``folder``; ``n_rows`` the rows the folder holds (one per prompt, or per prompt and position of an items
    capture; :attr:`CaptureMeta.n_prompts` counts the prompts); ``meta`` its :class:`CaptureMeta`;
    ``provenance`` that of the config that asked for it (``meta.json`` holds the capture's own). :attr:`rows`
    is the data set (read on first use), :meth:`acts` one location's activations, :meth:`counts` the count
    labels. :meth:`boundary` is the view of the boundary rows alone.
    """

    FILE: ClassVar[str] = "capture.json"
    COMMAND: ClassVar[str] = "countlens llm capture"

    folder: Path
    n_rows: int
    meta: CaptureMeta
    provenance: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_folder(cls, folder: str | os.PathLike, provenance: dict[str, Any] | None = None) -> Capture:
        """The capture in ``folder`` (its ``meta.json`` read now, its rows on first use)."""
        record = read_meta(folder)
        return cls(Path(folder), int(record.get("n_rows", record.get("n_prompts", 0))),
                   CaptureMeta.from_record(record), dict(provenance or {}))

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return to_jsonable({**data, "meta": self.meta.to_dict()})

    @classmethod
    def from_dict(cls, data: Any) -> Capture:
        if isinstance(data, dict) and isinstance(data.get("meta"), dict):
            data = {**data, "meta": CaptureMeta.from_record(data["meta"])}
        return super().from_dict(data)

    # ------------------------------------------------------------------------------ the rows

    @property
    def rows(self):
        """The rows as one ``datasets.Dataset`` (memory-mapped; :func:`countlens.core.store.load_capture`)."""
        if "_rows" not in self.__dict__:
            self.__dict__["_rows"] = load_capture(self.folder)
        return self.__dict__["_rows"]

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def columns(self) -> list[str]:
        """The rows' column names."""
        return list(self.rows.column_names)

    def column(self, name: str) -> np.ndarray:
        """One scalar column (``n``, ``m``, ``seed``, ...): (rows,)."""
        return column(self.rows, name)

    def counts(self) -> np.ndarray:
        """The count label ``n`` of every row: (rows,) int."""
        return self.column("n")

    def acts(self, location: str | int, dtype=np.float64) -> np.ndarray:
        """The activations at one location (a name or an index), widened to ``dtype``: (rows, d)."""
        return acts_array(self.rows, self.meta.location_index(location), dtype)

    def all_acts(self, dtype=None) -> np.ndarray:
        """The activations at every location, in ``dtype`` (default: the stored one): (rows, n_locations, d)."""
        return acts_array(self.rows, dtype=np.dtype(dtype or self.meta.dtype))

    def batches(self, columns=("acts", "n"), location: int | None = None, batch_size: int = 512):
        """The rows in batches: a dict of numpy arrays per batch, ``acts`` in the stored dtype
        (:func:`countlens.core.store.iter_batches`)."""
        return iter_batches(self.rows, columns, location, batch_size)

    def select(self, indices) -> Capture:
        """The view of rows ``indices`` (same folder and metadata)."""
        view = dataclasses.replace(self)
        view.__dict__["_rows"] = self.rows.select(np.asarray(indices))
        return view

    def boundary(self) -> Capture:
        """The boundary rows: every row, but an items capture's item rows (``item_index >= 0``)."""
        if "item_index" not in self.columns:
            return self
        return self.select(np.flatnonzero(self.column("item_index") < 0))


def open_capture(source: str | os.PathLike | Capture, rows: bool = True) -> Capture:
    """``source`` as a :class:`Capture`: a capture as it is, a folder opened — with ``rows`` its rows read
    now, so a folder that is no capture, an unfinished one or one missing a shard is a one-line
    :class:`UsageError` here (without, only ``meta.json`` is read now)."""
    if isinstance(source, Capture):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise UsageError(f"a capture is a folder or a Capture, got a {type(source).__name__}")
    capture = Capture.from_folder(source)
    if rows:
        capture.rows  # noqa: B018 - opening checks the folder whole
    return capture


__all__ = ["CaptureMeta", "Capture", "open_capture"]
