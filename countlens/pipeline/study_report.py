"""The study's own figure and page: Figure 5's two curves of every model against relative depth
(``study.png``/``.pdf``) and ``index.html`` with the cross-model table (:data:`TABLE_COLUMNS`), linking each
model's report. Every number on the page is a span naming the ``study.json`` key it was read from."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from countlens.core.io import save_figure, write_text_atomic

STUDY_FILE = "study.json"
TABLE_FILE = "study.csv"
FIGURE_STEM = "study"

# The table's columns between the model and its report: (CSV header, key path in a ModelSummary).
TABLE_COLUMNS = (
    ("n_blocks", ("n_blocks",)),
    ("best_probe_accuracy", ("best_probe", "test_rounded_acc")),
    ("best_probe_location", ("best_probe", "location")),
    *((f"{ratio}_{where}", ("at_blocks", where, ratio)) for ratio in ("gap_ratio", "erank_ratio")
      for where in ("first", "middle", "last")),
    ("nearest_toy_variant", ("nearest_toy_variant",)),
    ("behaviour_accuracy", ("behaviour_accuracy",)),
)
TABLE_HEADER = ["model", *(name for name, _ in TABLE_COLUMNS), "report"]


def plot_study(result):
    """Figure 5's two curves (gap ratio solid, effective-rank ratio dashed) of every model against relative
    depth, one colour per model, log scale."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, m in enumerate(result.models):
        colour = colours[k % len(colours)]
        ax.plot(m.relative_depth, m.gap_ratio, "-o", ms=3, color=colour, label=f"{m.name}: gap ratio")
        ax.plot(m.relative_depth, m.erank_ratio, "--s", ms=3, color=colour, label=f"{m.name}: erank ratio")
    ax.axhline(1.0, color="0.6", lw=0.8)
    ax.set_yscale("log")
    ax.set_xlim(0, 1)
    ax.set_xlabel("relative depth (location / number of blocks)")
    ax.set_ylabel("high / low count window")
    ax.set_title("Figure 5 across models")
    ax.legend(fontsize=7, ncol=2 if len(result.models) > 3 else 1)
    fig.tight_layout()
    return fig


def draw_study(result, folder: str | Path) -> list[Path]:
    """Save :func:`plot_study` as ``study.png`` and ``study.pdf`` in ``folder``."""
    return save_figure(plot_study(result), Path(folder) / FIGURE_STEM)


def _cell(value: Any, json_key: str) -> str:
    """One table cell; a number is a ``<span class="v">`` naming the ``study.json`` key it was read from."""
    if value is None:
        return "—"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        return f'<span class="v" data-json="{STUDY_FILE}" data-key="{json_key}">{text}</span>'
    return html.escape(str(value))


def render_study_page(result) -> str:
    """The study's ``index.html``: the cross-model figure, the table, a link to each model's report."""
    rows = []
    for k, m in enumerate(result.models):
        cells = [f'<a href="{html.escape(m.report)}">{html.escape(m.name)}</a>'] + \
                [_cell(m.value(keys), ".".join(["models", str(k), *keys])) for _, keys in TABLE_COLUMNS]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h.replace('_', ' '))}</th>" for h in ["model", *TABLE_HEADER[1:-1]])
    versions = ", ".join(f"{k} {v}" for k, v in (result.provenance.get("versions") or {}).items())
    return "\n".join([
        "<!doctype html>", '<html><head><meta charset="utf-8"><title>countlens study</title>',
        "<style>body{font-family:sans-serif;max-width:72em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}td:first-child{text-align:left}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>countlens study: {len(result.models)} models</h1>",
        "<p>Each model's own report is linked from its name. Ratios are high / low count window (definitions "
        "in docs/definitions.md §2); first, middle and last are the locations after those blocks; the probe "
        "accuracy is the test rounded accuracy at the location chosen on validation; the nearest toy variant "
        "is the toy construction closest after the first block in (log gap ratio, log erank ratio); the "
        "behavioural accuracy is the share of prompts the model itself answered with the right count.</p>",
        f'<img src="{FIGURE_STEM}.png" alt="Figure 5 across models">',
        f"<table><tr>{header}</tr>", *rows, "</table>",
        *([f"<p>Tasks side by side: {links}.</p>"] if (links := ", ".join(
            f'<a href="{html.escape(p)}">{html.escape(p.split("/")[-2])}</a>' for p in result.tasks)) else []),
        f"<p>Table as CSV: <a href=\"{TABLE_FILE}\">{TABLE_FILE}</a>; all numbers with their settings: "
        f"<a href=\"{STUDY_FILE}\">{STUDY_FILE}</a>.</p>",
        f"<p><small>{html.escape(versions)}</small></p>", "</body></html>"])


def write_study_page(result, folder: str | Path) -> Path:
    """Write :func:`render_study_page` as ``folder/index.html`` atomically."""
    return write_text_atomic(Path(folder) / "index.html", render_study_page(result))


__all__ = ["STUDY_FILE", "TABLE_FILE", "TABLE_COLUMNS", "TABLE_HEADER", "plot_study", "draw_study",
           "render_study_page", "write_study_page"]
