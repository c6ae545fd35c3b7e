"""``file:PATH``: the user's own prompts, one record each, from a JSONL file, a CSV file or a folder saved by
``datasets`` (``Dataset.save_to_disk``); docs/tasks/README.md describes the format, docs/tasks/example.jsonl is
a complete example.

A record holds ``text`` (the user message) or ``messages`` (a chat: a list of ``{"role", "content"}``, the last
one the user's, which the count is about), its ``count``, and optionally ``spans`` (``[[start, end], ...]``,
characters ``[start, end)`` of its items in that message) and ``targets`` (one bool per span: which items are
counted; default all). The file is read and every record checked when the task is parsed, before any tokenizer:
a missing, empty or malformed file (the line named), a record without ``text`` or ``count``, spans outside the
text or overlapping, a ``count`` that disagrees with the target spans — each one line naming ``task``. Items
sit at their last token (rule ``whole``); an item the tokenizer merges with a neighbour is refused when the
prompts are built, naming the record.

The records are the prompts: the grid keeps those whose count is among the settings' ``counts`` (in count
order, the file's order within a count), under the first seed, the one wording ``file`` (the built-in
wordings ``configs`` names become it: they are not read; another name is refused), ``per_count`` 1; ``pairs``
and ``L`` (beyond bounding ``counts``) are not read. Without spans the item positions are unknown, so analyses that need them refuse the task
(:meth:`countlens.llm.prompts.PromptSettings.require_items`). No corrupted twin is defined.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from countlens.core.errors import ConfigError, literal
from countlens.llm.tasks.lists import CONFIGURATIONS
from countlens.llm.tasks.registry import Drawn, Instruction, Task, TaskOption, declare_task

FILE_WORDING = "file"
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Record:
    """One checked record: where it is (``line 7`` of a JSONL/CSV file, ``record 7`` of a saved data set),
    its :class:`~countlens.llm.tasks.Instruction` (spans sorted by start) and its ``count``."""

    where: str
    count: int
    instruction: Instruction
    located: bool


def _bad(path: str, where: str, why: str) -> ConfigError:
    return ConfigError("task", "{task}: " + literal(f"file {path}{' ' + where if where else ''}: {why}"))


def _int(value, what: str) -> int:
    """``value`` as a whole number (an int, or a string of digits from a CSV cell); ``ValueError`` otherwise."""
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
        raise ValueError(f"{what} must be a whole number, got {value!r}")
    if isinstance(value, str):
        value = value.strip()
        if not value.lstrip("-").isdigit():
            raise ValueError(f"{what} must be a whole number, got {value!r}")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a whole number, got {value!r}") from None


def _cell(value):
    """A CSV cell holding JSON (``spans``, ``targets``, ``messages``) as its value; other values unchanged."""
    if isinstance(value, str):
        if not value.strip():
            return None
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"is not JSON ({exc.msg})") from None
    return value


def _check_messages(messages) -> tuple[str, tuple]:
    """A record's ``messages`` (a list, or its JSON in a CSV cell): the last (the user's) message's text and the
    messages before it (the context); ``ValueError`` saying what is wrong."""
    try:
        messages = _cell(messages)
    except ValueError as exc:
        raise ValueError(f"messages {exc}") from None
    if (not isinstance(messages, list) or not messages
            or not all(isinstance(m, dict) and set(m) >= {"role", "content"} for m in messages)):
        raise ValueError("messages must be a non-empty list of {role, content} objects")
    bad = [m["role"] for m in messages if m["role"] not in ROLES or not isinstance(m["content"], str)]
    if bad:
        raise ValueError(f"a message's role must be one of {', '.join(ROLES)} and its content a string, got "
                         f"role {bad[0]!r}")
    if messages[-1]["role"] != "user":
        raise ValueError("the last message must be the user's (the count is about it and the model answers it)")
    return messages[-1]["content"], tuple({"role": m["role"], "content": m["content"]} for m in messages[:-1])


def check_record(raw: dict) -> tuple[int, Instruction, bool]:
    """One record's count, its :class:`~countlens.llm.tasks.Instruction` and whether it has spans;
    ``ValueError`` saying what is wrong."""
    if not isinstance(raw, dict):
        raise ValueError(f"a record is an object with text and count, got {type(raw).__name__}")
    text, messages = raw.get("text"), raw.get("messages")
    if (text is None) == (messages is None):
        raise ValueError("a record needs text or messages (one of them)" if text is None else
                         "a record holds text or messages, not both")
    context: tuple = ()
    if messages is not None:
        text, context = _check_messages(messages)
    if not isinstance(text, str) or not text:
        raise ValueError("text must be a non-empty string")
    if raw.get("count") is None or raw.get("count") == "":
        raise ValueError("a record needs count")
    count = _int(raw["count"], "count")
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    try:
        spans, targets = _cell(raw.get("spans")), _cell(raw.get("targets"))
    except ValueError as exc:
        raise ValueError(f"spans or targets {exc}") from None
    if spans is None:
        if targets is not None:
            raise ValueError("targets need spans (one bool per span)")
        return count, Instruction(text, np.zeros((0, 2), dtype=np.int64), np.zeros(0, dtype=bool), context), False
    if not isinstance(spans, list) or not all(isinstance(s, list) and len(s) == 2 for s in spans):
        raise ValueError("spans must be a list of [start, end] pairs")
    spans = np.array([[_int(a, "a span's start"), _int(b, "a span's end")] for a, b in spans],
                     dtype=np.int64).reshape(-1, 2)
    if targets is None:
        targets = [True] * len(spans)
    if not isinstance(targets, list) or len(targets) != len(spans) or not all(isinstance(t, bool) for t in targets):
        raise ValueError(f"targets must be a list of {len(spans)} bools (one per span), got {targets!r}")
    for (a, b) in spans.tolist():
        if not 0 <= a < b <= len(text):
            raise ValueError(f"span [{a}, {b}] lies outside the text (characters 0..{len(text)}) or is empty")
    order = np.argsort(spans[:, 0], kind="stable")
    spans, targets = spans[order], np.asarray(targets, dtype=bool)[order]
    overlap = np.flatnonzero(spans[1:, 0] < spans[:-1, 1])
    if len(overlap):
        i = int(overlap[0])
        raise ValueError(f"spans {spans[i].tolist()} and {spans[i + 1].tolist()} overlap")
    if int(targets.sum()) != count:
        raise ValueError(f"count {count} disagrees with its {int(targets.sum())} target spans")
    return count, Instruction(text, spans, targets, context), True


def _rows(path: Path, shown: str):
    """``(where, raw record)`` of every record of the file or folder at ``path``."""
    if path.is_dir():
        try:
            import datasets

            data = datasets.load_from_disk(str(path))
        except Exception as exc:  # noqa: BLE001 - datasets raises many kinds for a folder it cannot read
            raise _bad(shown, "", f"is not a folder saved by datasets ({str(exc).splitlines()[0][:160]})") from None
        if isinstance(data, datasets.DatasetDict):
            raise _bad(shown, "", f"holds the splits {', '.join(data)}; name one split's folder")
        for i, row in enumerate(data):
            yield f"record {i}", row
        return
    suffix = path.suffix.lower()
    if suffix not in (".jsonl", ".csv"):
        raise _bad(shown, "", "must be a .jsonl or .csv file or a folder saved by datasets")
    with path.open(encoding="utf-8", newline="" if suffix == ".csv" else None) as handle:
        if suffix == ".jsonl":
            for number, line in enumerate(handle, 1):
                if line.strip():
                    try:
                        yield f"line {number}", json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise _bad(shown, f"line {number}", f"is not JSON ({exc.msg} at column {exc.colno})") from None
            return
        reader = csv.DictReader(handle)
        if not reader.fieldnames:
            return
        for row in reader:
            if None in row or any(v is None for v in row.values()):
                raise _bad(shown, f"line {reader.line_num}", f"has not {len(reader.fieldnames)} cells (the header's)")
            yield f"line {reader.line_num}", row


_READ: dict[tuple, tuple[Record, ...]] = {}


def read_records(path: str) -> tuple[Record, ...]:
    """Every record of the file or folder ``path``, checked (see the module); a one-line
    :class:`ConfigError` naming ``task`` (and the line or record) otherwise. Read once per file version."""
    where = Path(os.path.expanduser(path))
    if not where.exists():
        raise _bad(path, "", "does not exist")
    stat = where.stat()
    key = (str(where.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _READ:
        records = []
        try:
            for at, raw in _rows(where, path):
                try:
                    count, instruction, located = check_record(dict(raw) if isinstance(raw, dict) else raw)
                except ValueError as exc:
                    raise _bad(path, at, str(exc)) from None
                records.append(Record(at, count, instruction, located))
        except (OSError, UnicodeDecodeError, csv.Error) as exc:
            raise _bad(path, "", f"does not read ({str(exc).splitlines()[0][:160]})") from None
        if not records:
            raise _bad(path, "", "holds no records")
        mixed = [r for r in records if r.located != records[0].located]
        if mixed:
            have, lack = (records[0], mixed[0]) if records[0].located else (mixed[0], records[0])
            raise _bad(path, lack.where, f"has no spans while {have.where} has; give spans for every record or none")
        _READ.clear()  # keep one file's records, the one in use
        _READ[key] = tuple(records)
    return _READ[key]


def _path(value, name: str) -> str:
    text = str(value).strip()
    if not text:
        raise ConfigError(name, f"{{{name}}} must name a .jsonl or .csv file or a folder saved by datasets "
                                "(file:PATH)")
    return text


@declare_task
class File(Task):
    """The user's own records: each its message, its count and (optionally) its items."""

    name = "file"
    order = 4
    summary = ("your own prompts from JSONL, CSV or a saved datasets folder (text or chat messages, count, "
               "optional item spans and targets; docs/tasks/README.md)")
    example = "file:docs/tasks/example.jsonl"
    options = (TaskOption("path", "", "the JSONL or CSV file or datasets folder", _path),)
    wordings = {FILE_WORDING: "{items}"}
    rule = "whole"
    seeded = False
    uses_L = False
    no_twin = "a record names no text to put in a target's place"

    def __init__(self, **given: str):
        if "path" not in given:
            raise ConfigError("task", "{task}: file needs its path, file:PATH")
        super().__init__(**given)
        self.records = read_records(self.values["path"])

    @property
    def text(self) -> str:
        return f"{self.name}:{self.values['path']}"

    @property
    def located(self) -> bool:
        return self.records[0].located

    def label(self) -> str:
        return FILE_WORDING

    def digest(self) -> str:
        """sha256 of every record's content (count, message, items): the capture's resume key holds it."""
        import hashlib
        import json

        def plain(value):
            return value.tolist() if hasattr(value, "tolist") else repr(value)
        content = [(r.count, r.located, vars(r.instruction)) for r in self.records]
        return hashlib.sha256(json.dumps(content, default=plain, sort_keys=True).encode()).hexdigest()

    def settle(self, settings) -> None:
        """The records hold their own wording, so the built-in wordings (any of them: each experiment has its
        own default) become the one wording ``file``; another name is refused, as is ``per_count`` above 1 and
        counts that keep no record."""
        if settings.configs and set(settings.configs) <= {*CONFIGURATIONS, FILE_WORDING}:
            settings.configs = [FILE_WORDING]
        else:
            raise ConfigError("configs", "{configs}: the task file writes its records' own messages (its one "
                                         "wording is file); leave {configs} at its default", also=("task",))
        if int(settings.per_count) != 1:
            raise ConfigError("per_count", "{per_count} must be 1 for the task file (each record is one prompt)",
                              also=("task",))
        if not any(r.count in set(settings.counts) for r in self.records):
            have = sorted({r.count for r in self.records})
            raise ConfigError("counts", "{counts} keep no record of the task's file (its counts: "
                                        + literal(", ".join(map(str, have[:12])) + (", ..." if len(have) > 12 else ""))
                                        + ")", also=("task",))

    def kept(self, settings) -> list[Record]:
        """The records whose count is among ``settings.counts``, in count order (the file's within a count)."""
        wanted = set(int(c) for c in settings.counts)
        return sorted((r for r in self.records if r.count in wanted), key=lambda r: r.count)

    def instruction(self, config, group, n, k, seed, L):
        return [r for r in self.records if r.count == n][k].instruction

    def grid(self, settings):
        seed, seen = settings.seeds[0], {}
        drawn = []
        for record in self.kept(settings):
            k = seen.get(record.count, 0)
            seen[record.count] = k + 1
            drawn.append(Drawn(record.count, seed, FILE_WORDING, FILE_WORDING, k, record.instruction,
                               f"in the file's {record.where}"))
        yield drawn

    def size(self, settings) -> int:
        return len(self.kept(settings))


__all__ = ["FILE_WORDING", "Record", "check_record", "read_records", "File"]
