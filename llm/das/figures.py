"""The causal count subspace's figure: ``plot_das(result)`` and ``draw_das(result, folder)`` redraw it from the
result's JSON (``DasResult.read``); ``das_view`` is its report view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.das.experiment import DasResult

CONTROLS = (("iia_random", "random subspace", dict(color="grey", ls="--")),
            ("iia_random_model", "DAS, random-init model", dict(color="C3", ls=":")))
DIRECTIONS = (("iia_probe", "probe direction", dict(color="C1", marker="^")),
              ("iia_mean_diff", "mean-difference direction", dict(color="C2", marker="v")))


def _column(rows, key) -> np.ndarray:
    return np.array([np.nan if r.get(key) is None else r[key] for r in rows], dtype=np.float64)


def plot_das(result: DasResult):
    """Against the location: the held-out IIA (left) and expected-count shift toward the source (right) of the
    learned subspace at each rank (solid), its random control of the same rank and DAS on the random-initialised
    model (dashed, dotted; the largest rank), the probe's and the mean difference's direction as rank-1
    subspaces, and (left) the base runs' IIA without any interchange."""
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 3.8))
    ranks = sorted({r["rank"] for r in result.rows})
    top = [r for r in result.rows if r["rank"] == ranks[-1]]
    x = _column(top, "index")
    for ax, key in zip(axes, ("iia", "shift"), strict=True):
        for i, k in enumerate(ranks):
            mine = [r for r in result.rows if r["rank"] == k]
            ax.plot(_column(mine, "index"), _column(mine, key), marker="o", ms=4, color=f"C{4 + i}",
                    label=f"DAS, rank {k}")
        controls = CONTROLS if key == "iia" else (("shift_random", "random subspace", CONTROLS[0][2]),
                                                  ("shift_random_model", "DAS, random-init model", CONTROLS[1][2]))
        for column, label, style in controls:
            values = _column(top, column)
            if np.isfinite(values).any():
                ax.plot(x, values, label=f"{label} (rank {ranks[-1]})", **style)
        per = [loc for loc in result.locations]
        for column, label, style in DIRECTIONS:
            name = column if key == "iia" else column.replace("iia", "shift")
            values = _column(per, name)
            if np.isfinite(values).any():
                ax.plot(_column(per, "index"), values, ms=4, label=label, **style)
        if key == "iia":
            ax.plot(x, _column(top, "iia_base"), color="black", lw=0.8, label="no interchange")
            ax.set_ylim(-0.03, 1.03)
            ax.set_ylabel("IIA (held-out pairs)")
        else:
            ax.axhline(0, color="grey", lw=0.6)
            ax.set_ylabel("shift: ΔE[n] / (n_s − n_b)")
        ax.set_xlabel("residual location (0 = embeddings)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"The causal count subspace of {result.model}: {result.n_held_out_pairs} held-out pairs",
                 fontsize=10)
    fig.tight_layout()
    return fig


def draw_das(result: DasResult, folder: str | Path) -> list[Path]:
    """``das.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_das(result), Path(folder) / "das")  # save_figure closes it


def das_view(page: Page, s: Section) -> None:
    """The caption and the per-(location, rank) table; ``s.result`` is the :class:`DasResult`."""
    rel = s.rel
    page.caption(
        "Distributed alignment search at the boundary: per location and rank k an orthonormal R (d × k) is learned "
        "so that h_base + R Rᵀ (h_source − h_base) makes the model answer the source prompt's count, on "
        f"{page.v(rel, 'n_train_pairs')} training pairs, and scored on {page.v(rel, 'n_held_out_pairs')} pairs "
        "built from held-out prompts. IIA: the intervened greedy first answer token is the source count's; shift: "
        "the expected count's move toward the source, (E[n | interchange] − E[n | base]) / (n_s − n_b). Controls "
        "on the same pairs: a random subspace of the same rank, the ridge probe's and the mean difference's "
        "directions as subspaces of rank one, DAS on the random-initialised model. The base runs answer their own "
        f"count's first token on {page.v(rel, 'clean_accuracy')} of the held-out prompts.")
    keys = ("iia", "shift", "iia_random", "iia_probe", "iia_mean_diff", "iia_random_model", "angle_probe_deg")
    rows = [[page.v(rel, "rows", i, "location"), page.v(rel, "rows", i, "rank")]
            + [page.v_or_dash(rel, "rows", i, k) for k in keys] for i in range(len(s.result.rows))]
    page.add("<details><summary>Per location and rank</summary>" + table(
        ["location", "rank", "IIA", "shift", "IIA random", "IIA probe", "IIA mean diff", "IIA random-init model",
         "angle to probe (°)"], rows, left=1) + "</details>")


__all__ = ["plot_das", "draw_das", "das_view"]
