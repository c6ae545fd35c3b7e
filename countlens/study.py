"""``countlens study``: the whole analysis over several models, then one comparison across them.

For each model, capture → probes → geometry → toy-vs-LLM comparison (→ the model's own answers and
patching, where asked) into ``OUT/models/<name>/``, with that model's own report (``index.html``). With
``--ray`` every model is one Ray task on its own GPU (or CPU slot); without it, the models run one after
another. A finished model leaves its summary in ``OUT/.study/`` (keyed by the model and every setting that
changes it), so a rerun recomputes only the models that did not finish.

Then the comparison across models: ``study.json`` and ``study.csv`` (one row per model: best
validation-selected probe accuracy and where, gap and effective-rank ratios after the first, middle and last
block, the nearest toy variant, behavioural accuracy where captured), ``study.png``/``.pdf`` (Figure 5's two
curves of every model against relative depth, location / number of blocks), and ``index.html`` linking each
model's report. Definitions: ``docs/definitions.md §2``.
"""

from __future__ import annotations

import html
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STUDY_FILE = "study.json"
TABLE_FILE = "study.csv"
FIGURE_STEM = "study"
MODELS_DIR = "models"
CACHE_DIR = ".study"
RETRIES = 2  # retries of a model's Ray task whose worker died; the model resumes from its finished stages

TABLE_HEADER = ["model", "n_blocks", "best_probe_accuracy", "best_probe_location",
                "gap_ratio_first", "gap_ratio_middle", "gap_ratio_last",
                "erank_ratio_first", "erank_ratio_middle", "erank_ratio_last",
                "nearest_toy_variant", "behaviour_accuracy", "report"]


def model_folder_names(models: list[str]) -> list[str]:
    """One folder name per model spec (``org/name`` → ``org--name``, a path → its last part), unique."""
    names: list[str] = []
    for spec in models:
        path = Path(spec).expanduser()
        base = path.name if path.exists() else spec.replace("/", "--")
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.") or "model"
        name, k = base, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names.append(name)
    return names


def block_positions(n_blocks: int) -> dict[str, int]:
    """The locations after the first, middle and last block (location ``l`` = output of block ``l``)."""
    return {"first": 1, "middle": max(1, round(n_blocks / 2)), "last": n_blocks}


@dataclass
class ModelSummary:
    """One model's row of the comparison, and its Figure 5 curves.

    ``relative_depth`` (L+1,) is location / number of blocks (0 = embeddings, 1 = after the last block);
    ``gap_ratio`` and ``erank_ratio`` (L+1,) are Figure 5's two curves at those locations (mean over
    seeds). ``best_probe`` holds the validation-selected location and its test rounded accuracy;
    ``at_blocks`` the two ratios after the first, middle and last block; ``behaviour_accuracy`` is the
    share of prompts the model answered correctly, ``None`` where answers were not captured.
    """

    model: str
    name: str
    n_blocks: int
    relative_depth: list[float]
    gap_ratio: list[float]
    erank_ratio: list[float]
    best_probe: dict[str, Any]
    at_blocks: dict[str, dict[str, Any]]
    nearest_toy_variant: str | None
    behaviour_accuracy: float | None
    report: str

    def table_row(self) -> list[Any]:
        b = self.at_blocks
        return [self.model, self.n_blocks, self.best_probe["test_rounded_acc"], self.best_probe["location"],
                b["first"]["gap_ratio"], b["middle"]["gap_ratio"], b["last"]["gap_ratio"],
                b["first"]["erank_ratio"], b["middle"]["erank_ratio"], b["last"]["erank_ratio"],
                self.nearest_toy_variant, self.behaviour_accuracy, self.report]


@dataclass
class StudyResult:
    """``countlens study``: one :class:`ModelSummary` per model, in the order asked, and the settings."""

    config: dict[str, Any]
    models: list[ModelSummary]
    provenance: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"config": self.config, "models": [asdict(m) for m in self.models], "provenance": self.provenance}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyResult:
        return cls(config=data["config"], models=[ModelSummary(**m) for m in data["models"]],
                   provenance=data.get("provenance", {}))

    def save(self, folder: str | Path) -> list[Path]:
        """``study.json`` (with provenance) and ``study.csv`` (one row per model) in ``folder``."""
        from countlens.io import provenance, write_csv_atomic, write_json_atomic

        folder = Path(folder)
        if not self.provenance:
            self.provenance = provenance(self.config)
        return [write_json_atomic(folder / STUDY_FILE, self.to_dict()),
                write_csv_atomic(folder / TABLE_FILE, TABLE_HEADER, [m.table_row() for m in self.models])]


# ---------------------------------------------------------------- the cross-model figure and page

def plot_study(result: StudyResult):
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


def draw_study(result: StudyResult, folder: str | Path) -> list[Path]:
    """Save :func:`plot_study` as ``study.png`` and ``study.pdf`` in ``folder``."""
    from countlens.io import save_figure

    return save_figure(plot_study(result), Path(folder) / FIGURE_STEM)


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3g}"
    return html.escape(str(value))


def render_study_page(result: StudyResult) -> str:
    """The study's ``index.html``: the cross-model figure, the table, a link to each model's report."""
    rows = []
    for m in result.models:
        cells = [f'<a href="{html.escape(m.report)}">{html.escape(m.name)}</a>'] + \
                [_cell(v) for v in m.table_row()[1:-1]]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    header = "".join(f"<th>{html.escape(h)}</th>" for h in ["model", *TABLE_HEADER[1:-1]])
    versions = ", ".join(f"{k} {v}" for k, v in (result.provenance.get("versions") or {}).items())
    return "\n".join([
        "<!doctype html>", '<html><head><meta charset="utf-8"><title>countlens study</title>',
        "<style>body{font-family:sans-serif;max-width:72em;margin:2em auto}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .5em;text-align:right}td:first-child{text-align:left}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>countlens study: {len(result.models)} models</h1>",
        "<p>Each model's own report is linked from its name. Ratios are high / low count window (definitions "
        "in docs/definitions.md §2); first, middle and last are the locations after those blocks; the probe "
        "accuracy is the test rounded accuracy at the location chosen on validation.</p>",
        f'<img src="{FIGURE_STEM}.png" alt="Figure 5 across models">',
        f"<table><tr>{header}</tr>", *rows, "</table>",
        f"<p>Table as CSV: <a href=\"{TABLE_FILE}\">{TABLE_FILE}</a>; all numbers with their settings: "
        f"<a href=\"{STUDY_FILE}\">{STUDY_FILE}</a>.</p>",
        f"<p><small>{html.escape(versions)}</small></p>", "</body></html>"])


def write_study_page(result: StudyResult, folder: str | Path) -> Path:
    from countlens.io import write_text_atomic

    return write_text_atomic(Path(folder) / "index.html", render_study_page(result))


__all__ = ["ModelSummary", "StudyResult", "model_folder_names", "block_positions", "plot_study", "draw_study",
           "render_study_page", "write_study_page"]
