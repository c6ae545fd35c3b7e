"""The building blocks of the report page (``OUT/index.html``): value spans read from result files, tables,
captions, and the :class:`Page` every room's report view writes into.

Every value shown is a ``<span class="v" data-json=FILE data-key=[...]>`` read from ``FILE`` at that key
path (formatted by :func:`format_value`); a ratio of two values is a ``<span class="q">`` naming both key
paths (``data-key`` over ``data-over``); a key shown as a label is a ``<span class="k">``. All other text is
fixed prose with no digits other than figure and table numbers. A room's view is
``view(page, section)``: ``section.result`` is its stage's typed result (read back with ``from_dict``),
``section.rel`` the result file the spans point into. The page itself (header, stage list, configuration)
is assembled by the pipeline (:mod:`countlens.pipeline.report`).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

REPORT_FILE = "reproduce.json"
STAGE_FILE = "stage.json"

def format_value(value: Any) -> str:
    """How a JSON value is shown: floats to 4 significant digits, None as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def lookup(obj: Any, keys: list) -> Any:
    """``obj[k0][k1]...``; raises ``KeyError`` or ``IndexError`` if the path is absent."""
    for k in keys:
        obj = obj[k]
    return obj


class StageLike(Protocol):
    """What the page needs of a stage (:class:`countlens.pipeline.stages.Stage`)."""

    name: str
    title: str
    result_type: Any  # a countlens.core.results.Result class: its FILE is the stage's result file
    view: Callable[[Page, Section], None] | None


@dataclass
class Section:
    """One stage's part of the page: its result file ``rel`` (relative to OUT) and the typed ``result`` read
    back from it (``from_dict``); a view iterates the result and shows values as spans of ``rel``."""

    stage: StageLike
    rel: str
    result: Any


class Page:
    """The page being written: JSON files read once, value spans, and the HTML parts in order."""

    def __init__(self, out: Path):
        self.out = out
        self.cache: dict[str, Any] = {}
        self.parts: list[str] = []

    def load(self, rel: str) -> Any | None:
        if rel not in self.cache:
            path = self.out / rel
            try:
                self.cache[rel] = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.cache[rel] = None
        return self.cache[rel]

    def has(self, rel: str, *keys) -> bool:
        try:
            lookup(self.load(rel), list(keys))
        except (KeyError, IndexError, TypeError):
            return False
        return True

    def get(self, rel: str, *keys, default: Any = None) -> Any:
        return lookup(self.load(rel), list(keys)) if self.has(rel, *keys) else default

    def v(self, rel: str, *keys) -> str:
        """A value span: the value at ``keys`` in JSON file ``rel``."""
        value = lookup(self.load(rel), list(keys))
        return (f'<span class="v" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(list(keys)))}">'
                f"{html.escape(format_value(value))}</span>")

    def v_or_dash(self, rel: str, *keys) -> str:
        return self.v(rel, *keys) if self.has(rel, *keys) else "—"

    def q(self, rel: str, keys: list, over: list) -> str:
        """A ratio span: the value at ``keys`` over the value at ``over``, both in ``rel``."""
        ratio = float(lookup(self.load(rel), keys)) / float(lookup(self.load(rel), over))
        return (f'<span class="q" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(keys))}" '
                f'data-over="{html.escape(json.dumps(over))}">{html.escape(format_value(ratio))}</span>')

    def k(self, rel: str, *keys) -> str:
        """A key-label span: the last key of the path (a dict key in ``rel``)."""
        return (f'<span class="k" data-json="{html.escape(rel)}" data-key="{html.escape(json.dumps(list(keys)))}">'
                f"{html.escape(str(keys[-1]))}</span>")

    def values(self, rel: str, *keys, limit: int = 12) -> str:
        """A list value as spans: all of a short list, the first ones and the last of a long one."""
        items = self.get(rel, *keys, default=[])
        if len(items) <= limit:
            return ", ".join(self.v(rel, *keys, i) for i in range(len(items)))
        return (", ".join(self.v(rel, *keys, i) for i in range(limit - 1)) + ", …, "
                + self.v(rel, *keys, len(items) - 1))

    def add(self, text: str) -> None:
        self.parts.append(text)

    def caption(self, text: str) -> None:
        self.add(f'<p class="caption">{text}</p>')

    def preset_phrase(self) -> str:
        """``preset quick`` (a span of the report file): the sizes every table is limited by."""
        return f"preset {self.v(REPORT_FILE, 'preset')}"

    def preset(self) -> str | None:
        """The report's size preset (``quick``, ``full``, ``test``)."""
        return self.get(REPORT_FILE, "preset")


def table(header: list[str], rows: list[list[str]], left: int | tuple[int, ...] = 1) -> str:
    """An HTML table in its own scroll box; cells are rendered HTML; the first ``left`` columns (or those
    listed) align left."""
    lefts = set(range(left)) if isinstance(left, int) else set(left)
    head = "".join(f'<th class="{"l" if i in lefts else ""}">{h}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td class="{"l" if i in lefts else ""}">{c}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f'<div class="scroll"><table><tr>{head}</tr>{body}</table></div>'


def is_scalar(x: Any) -> bool:
    return x is None or isinstance(x, (int, float, str, bool))


def _generic(page: Page, rel: str, obj: Any, path: list, rows: list, depth: int = 0) -> None:
    """Flatten a JSON object into (key path, value) rows; lists of scalars on one row."""
    if len(rows) >= 80 or depth > 5:
        return
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key == "provenance" and depth == 0:
                continue
            _generic(page, rel, value, path + [key], rows, depth + 1)
    elif isinstance(obj, list) and obj and all(is_scalar(x) for x in obj):
        rows.append([_path_label(page, rel, path), page.values(rel, *path)])
    elif isinstance(obj, list):
        for i, value in enumerate(obj[:12]):
            _generic(page, rel, value, path + [i], rows, depth + 1)
    elif is_scalar(obj):
        rows.append([_path_label(page, rel, path), page.v(rel, *path)])


def _path_label(page: Page, rel: str, path: list) -> str:
    return " / ".join(page.k(rel, *path[:i + 1]) if isinstance(key, str) else "·" for i, key in enumerate(path))


def generic_table(page: Page, rel: str) -> str:
    """Every key of a JSON file and its value (the fallback for a result no view knows)."""
    rows: list = []
    _generic(page, rel, page.load(rel), [], rows)
    return table(["key", "value"], rows) if rows else ""


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def location_cell(page: Page, rel: str, *keys) -> str:
    """'embeddings' for the embeddings, 'after block ℓ' (ℓ a span of the location's index) where the location
    at that index is the output of block ℓ, else the location's name (a capture of some locations only)."""
    index, name = page.get(rel, *keys, "index"), page.get(rel, *keys, "name")
    if index == 0 and name in (None, "embed"):
        return "embeddings"
    if index is not None and name in (None, f"blocks.{int(index) - 1}.hook_resid_post"):
        return f"after block {page.v(rel, *keys, 'index')}"
    return page.v(rel, *keys, "name") if name is not None else page.v(rel, *keys, "index")


__all__ = ["REPORT_FILE", "STAGE_FILE", "Page", "Section", "StageLike", "format_value", "lookup", "table",
           "generic_table", "finite", "location_cell", "is_scalar"]
