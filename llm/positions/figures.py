"""Figure 11, patching over positions and layers: ``plot_position_patching(result)`` and
``draw_position_patching(result, folder)`` redraw from ``position_patching.json``
(``PositionPatchingResult.read``); at the bottom, its view in the report page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, location_cell, table

if TYPE_CHECKING:
    from countlens.llm.positions.experiment import PatchedPair, PositionPatchingResult

POSITION_CAPTION = ("One position is patched at a time: a cell near 0 can still matter when the other positions "
                    "carry the same information (they keep the corrupted run's).")


def _grid(rows) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in rows], dtype=np.float64)


def _example(result: PositionPatchingResult) -> PatchedPair | None:
    """The pair drawn cell by cell: of the normalised pairs (else of all) the one whose clean and corrupted logit
    differences are furthest apart."""
    pairs = [p for p in result.pairs if p.normalised] or result.pairs
    return max(pairs, key=lambda p: abs(p.ld_clean - p.ld_corrupt)) if pairs else None


def _heatmap(fig, ax, grid: np.ndarray, title: str, top: float = 1.0, label: str = "normalised LD"):
    colours = plt.get_cmap("RdBu_r").with_extremes(bad="0.85")
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", origin="lower", cmap=colours, vmin=-top,
                      vmax=top, interpolation="nearest")
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02, extend="both")
    bar.ax.tick_params(labelsize=6)
    bar.set_label(label, fontsize=7)
    ax.set_title(title, fontsize=8)
    ax.tick_params(labelsize=6)


def plot_position_patching(result: PositionPatchingResult):
    """Figure 11: the normalised logit difference (0 = the corrupted run, 1 = the clean run) per location (rows)
    after patching one position (columns): left, one prompt pair token by token (the flipped item marked);
    right, every normalised pair's mean per group of positions (items before the flipped one, the flipped
    item, items after it, the template tokens after the items, the boundary)."""
    from countlens.llm.positions.experiment import GROUP_LABELS, GROUPS

    fig, (left, right) = plt.subplots(1, 2, figsize=(12.0, 5.0), gridspec_kw={"width_ratios": [3, 1.3]})
    locs = result.locations
    example = _example(result)
    if example is not None:
        title = (f"n = {example.n_clean} vs {example.n_corrupt} ({example.pair}, {example.config}, seed "
                 f"{example.seed}): patched position")
        if example.normalised:
            _heatmap(fig, left, _grid(example.normalised_ld), title)
        else:  # too close to normalise: the raw shift, in nats, so a weak model's map still shows something
            shift = np.array(example.ld, dtype=np.float64) - example.ld_corrupt
            _heatmap(fig, left, shift, title + " (not normalisable: raw shift)",
                     float(np.abs(shift).max()) or 1.0, "LD − LD_corrupt [nats]")
        labels = [t.replace("\n", "\\n") for t in example.tokens]
        left.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
        flipped = example.positions.index(example.flipped_position)
        left.get_xticklabels()[flipped].set_color("C3")
        left.axvline(flipped, color="C3", lw=0.6, ls=":")
    summary = _grid([[loc[g] for g in GROUPS] for loc in result.summary])
    _heatmap(fig, right, summary, f"mean over {len(result.pairs) - result.n_unnormalised} normalised pairs")
    right.set_xticks(range(len(GROUPS)), [GROUP_LABELS[g] for g in GROUPS], rotation=60, ha="right", fontsize=6)
    for ax in (left, right):
        step = max(1, len(locs) // 12)
        ax.set_yticks(range(0, len(locs), step), [str(loc["index"]) for loc in locs[::step]])
        ax.set_ylabel("patched location (0 = embeddings, ℓ = after block ℓ)", fontsize=7)
    fig.suptitle(f"Patching over positions and layers: flip the {result.flip} target; normalised logit difference "
                 f"log p(n) − log p(n − 1) ({result.n_unnormalised} of {len(result.pairs)} pairs too close to "
                 "normalise)", fontsize=9)
    fig.text(0.5, 0.01, POSITION_CAPTION, ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.04, 1, 0.95))
    return fig


def draw_position_patching(result: PositionPatchingResult, folder: str | Path) -> list[Path]:
    """``fig11_position_patching.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_position_patching(result), Path(folder) / "fig11_position_patching")


# ----------------------------------------------------------------------- report view

def position_patching_view(page: Page, s: Section) -> None:
    """Figure 11's caption and per-location table of the group means; ``s.result`` is the
    :class:`PositionPatchingResult`."""
    from countlens.llm.positions.experiment import GROUP_LABELS, GROUPS

    result: PositionPatchingResult = s.result
    rel = s.rel
    page.caption(
        "Each clean prompt has a corrupted twin: the same items with one target (the "
        f"{page.v(rel, 'flip')} one) turned into the distractor, so the count drops by one. The clean run's residual "
        "at one location and one position replaces the corrupted run's and the forward continues; the score is "
        "the normalised logit difference between the clean count and one fewer, every answer token "
        "teacher-forced: zero is the corrupted run, one the clean run. At the embeddings only the changed item's "
        "own position matters; the location from which later positions and the boundary carry the change shows "
        "where the items' information has moved on. One position is patched at a time, so a cell near zero does "
        "not prove that a "
        "position is unused. Pairs whose two logit differences are too close to normalise: "
        f"{page.v(rel, 'n_unnormalised')} (listed in the result file); patched runs: {page.v(rel, 'runs')} for "
        f"{page.v(rel, 'cells')} cells (the others are the corrupted run itself).")
    if result.boundary_half is not None:
        page.caption("The first location where the boundary's mean reaches one half (the boundary alone carries "
                     f"at least half the flipped item's effect on the answer): "
                     f"{location_cell(page, rel, 'boundary_half')}.")
    rows = [[location_cell(page, rel, "summary", i)] + [page.v_or_dash(rel, "summary", i, g) for g in GROUPS]
            for i in range(len(result.summary))]
    page.add("<details><summary>Per location: mean normalised logit difference per group of positions</summary>"
             + table(["location", *(GROUP_LABELS[g] for g in GROUPS)], rows) + "</details>")


__all__ = ["POSITION_CAPTION", "plot_position_patching", "draw_position_patching", "position_patching_view"]
