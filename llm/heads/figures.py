"""Figure 12, the heads that read the items: ``plot_heads(result)`` and ``draw_heads(result, folder)`` redraw
from ``heads.json`` (``HeadsResult.read``); at the bottom, its view in the report page."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.heads.experiment import HeadsResult

HEADS_CAPTION = ("Attention mass is not use: a head may look at the targets and write nothing the answer reads. "
                 "Ablation replaces one head's output at the boundary by its mean; other positions keep theirs.")

# (key, panel title, colour map, symmetric around 0)
_MASS_PANELS = (("target_mean", "→ targets", "viridis", False), ("distractor_mean", "→ distractors", "viridis", False),
                ("other_mean", "→ everything else", "viridis", False),
                ("target_excess_mean", "target excess", "RdBu_r", True))
_ABLATION_PANELS = (("effect_mean", "ablation effect (1 − normalised LD)", "RdBu_r", True),
                    ("ld_change_mean", "Δ LD, ablated − clean (nats)", "RdBu_r", True),
                    ("readout_shift_mean", "probe read-out shift (counts)", "RdBu_r", True))


def _heatmap(fig, ax, grid: np.ndarray, title: str, cmap: str, symmetric: bool, empty: str = "not measured") -> None:
    finite = grid[np.isfinite(grid)]
    if finite.size == 0:
        ax.text(0.5, 0.5, empty, ha="center", va="center", transform=ax.transAxes, fontsize=7, wrap=True)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(title, fontsize=8)
        return
    if symmetric:
        top = float(np.max(np.abs(finite))) or 1.0
        vmin, vmax = -top, top
    else:
        vmin, vmax = 0.0, max(float(finite.max()), 1e-12)
    colours = plt.get_cmap(cmap).with_extremes(bad="0.85")  # grey: heads that were not ablated
    image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", origin="lower", cmap=colours, vmin=vmin, vmax=vmax,
                      interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.08, pad=0.02).ax.tick_params(labelsize=6)
    ax.set_title(title, fontsize=8)
    ax.set_xlabel("head", fontsize=7)
    ax.set_ylabel("block (layer)", fontsize=7)
    ax.tick_params(labelsize=6)


def plot_heads(result: HeadsResult):
    """Figure 12: per block (rows of each map) and head (columns), the attention mass from the boundary (top
    row) and from the last item (middle row) to the targets, the distractors and everything else, and the
    target excess; bottom row: the effect of mean-ablating the head's boundary output on the answer's
    normalised logit difference, its raw change, and the probe's read-out."""
    fig, axes = plt.subplots(3, 4, figsize=(13.0, 10.5))
    for row, query, label in ((0, "boundary", "from the boundary"), (1, "last_item", "from the last item")):
        for col, (key, title, cmap, symmetric) in enumerate(_MASS_PANELS):
            _heatmap(fig, axes[row, col], result.grid(f"{query}_{key}"), f"{label} {title}", cmap, symmetric)
    ablated = [p for p in result.prompts if p["ablated"]]
    empty = {"effect_mean": "no ablated prompt normalises:\n|LD_clean − LD_twin| < "
                            f"{result.min_gap:g} nats on every one" if ablated else "no ablation",
             "readout_shift_mean": "no probe given" if not result.probe else "no ablation"}
    for col, (key, title, cmap, symmetric) in enumerate(_ABLATION_PANELS):
        if key == "readout_shift_mean" and result.probe:
            title = f"{title} at {result.probe['location']}"
        _heatmap(fig, axes[2, col], result.grid(key), title, cmap, symmetric, empty.get(key, "no ablation"))
    ax = axes[2, 3]
    ax.axis("off")
    lines = [result.model, f"{result.architecture}: {result.n_layers} blocks × {result.n_heads} heads "
             f"({result.n_kv_heads} key/value heads)", f"masses over {len(result.prompts)} prompts",
             f"ablation on {len(ablated)} prompts, {len(result.layers)} blocks" if ablated else "no ablation"]
    if ablated:
        gap = np.mean([abs(p["ld_clean"] - p["ld_corrupt"]) for p in ablated])
        lines += [f"{len(result.unnormalised)} of them too close to normalise",
                  f"mean |LD_clean − LD_twin|: {gap:.3g} nats"]
        if result.probe:
            drop = np.mean([p["readout_clean"] - p["readout_corrupt"] for p in ablated])
            lines.append(f"mean read-out drop, twin: {drop:.3g} counts")
    text = "\n".join(textwrap.fill(line, 44, subsequent_indent="  ") for line in lines)
    ax.text(0.0, 1.0, text, va="top", fontsize=7, transform=ax.transAxes)
    fig.suptitle("Figure 12: the heads that read the items", fontsize=11)
    fig.text(0.5, 0.005, HEADS_CAPTION, ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.02, 1, 0.98))
    return fig


def draw_heads(result: HeadsResult, folder: str | Path) -> list[Path]:
    """``fig12_heads.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_heads(result), Path(folder) / "fig12_heads")  # save_figure closes it


# ----------------------------------------------------------------------- report view

def _head_cell(page: Page, rel: str, i: int) -> str:
    return f"L{page.v(rel, 'heads', i, 'layer')}H{page.v(rel, 'heads', i, 'head')}"


def heads_view(page: Page, s: Section) -> None:
    """Figure 12's caption and the heads that stand out; ``s.result`` is the :class:`HeadsResult`."""
    result: HeadsResult = s.result
    rel = s.rel
    page.caption(
        "Per block and head, the attention mass from the boundary and from the last item to the target items, the "
        "distractor items and everything else (mean over prompts), and the target excess: the targets' share of "
        "the head's item attention minus their share of the items (zero for a head that spreads its attention "
        "evenly over the items). Head ablation replaces the head's output at the boundary by its mean over the "
        "prompt set and scores the answer's logit difference between the correct count and one fewer against the "
        "prompt's twin with one target turned into a distractor: the effect is zero where the answer does not "
        "change and one where it changes as much as removing a target. " + HEADS_CAPTION)
    mass = ["boundary_target_mean", "boundary_target_excess_mean", "last_item_target_mean",
            "last_item_target_excess_mean"]
    ablation = ["effect_mean", "n_normalised", "ld_change_mean", "readout_shift_mean"]
    header = ["head", "boundary → targets", "boundary target excess", "last item → targets",
              "last item target excess", "ablation effect", "prompts normalised", "Δ LD (nats)",
              "probe read-out shift"]

    def rows(indices):
        return [[_head_cell(page, rel, i)] + [page.v_or_dash(rel, "heads", i, k) for k in mass + ablation]
                for i in indices]

    page.add("<p>Heads that prefer the targets most, from the boundary:</p>"
             + table(header, rows(result.ranked("boundary_target_excess_mean"))))
    if result.layers:
        # by the normalised effect where prompts normalise, else by the largest drop of the raw LD
        top = result.ranked("effect_mean") or result.ranked("ld_change_mean", sign=-1.0)
        page.add("<p>Heads whose ablation moves the answer most:</p>" + table(header, rows(top)))
        if result.probe:
            page.add(f"<p>Heads whose ablation moves the probe's read-out at {page.v(rel, 'probe', 'location')} "
                     "most (in counts):</p>"
                     + table(header, rows(result.ranked("readout_shift_mean", sign=-1.0))))
        if result.unnormalised:
            page.caption(f"Prompts whose clean and twin logit differences are too close to normalise: "
                         f"{page.values(rel, 'unnormalised')} (their raw change is kept).")
