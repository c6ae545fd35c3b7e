"""The count manifold's figure and report view, drawn from a
:class:`~countlens.analysis.manifold_experiment.ManifoldResult` alone (no recomputation).

``plot_manifold``: per location, intrinsic dimension, turning angle, steps and out-of-plane fraction beside
their shuffled-label floors, the Procrustes distance to each toy variant, and the curve at the result's chosen
location in its top three principal components with the nearest toy curve aligned onto it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from countlens.core.io import save_figure
from countlens.core.locations import location_label
from countlens.core.report import Page, Section, location_cell, table


def _series(rows, *keys) -> np.ndarray:
    out = []
    for r in rows:
        for k in keys:
            r = r[k]
        out.append(np.nan if r is None else float(r))
    return np.array(out)


def _floor(rows, metric: str, windowed: bool = False) -> np.ndarray:
    return _series(rows, *(("windowed",) if windowed else ()), "floor", metric, "shuffled_mean")


def plot_manifold(result):
    """The manifold figure (see the module docstring). ``result``: a ManifoldResult."""
    import matplotlib.pyplot as plt

    rows = result.per_location
    x = _series(rows, "index")
    fig = plt.figure(figsize=(13.5, 7.0))
    grid = fig.add_gridspec(2, 3)
    dashed = {"ls": "--", "lw": 1}

    ax = fig.add_subplot(grid[0, 0])
    for key, colour, label in (("dims95", "tab:blue", "dims95"), ("participation_ratio", "tab:purple",
                                                                   "participation ratio")):
        ax.plot(x, _series(rows, key), color=colour, marker="o", ms=3, label=label)
        ax.plot(x, _floor(rows, key), color=colour, **dashed, label=f"{label}, shuffled labels")
    ax.set(title="(a) intrinsic dimension", xlabel="location", ylabel="dimensions")
    ax.legend(frameon=False, fontsize=7)

    ax = fig.add_subplot(grid[0, 1])
    for windowed, colour, label in ((False, "tab:red", "raw centroids"),
                                    (True, "tab:orange", f"windows of {result.window} counts")):
        src = ("windowed",) if windowed else ()
        mean, std = _series(rows, *src, "turn_mean_deg"), _series(rows, *src, "turn_std_deg")
        ax.plot(x, mean, color=colour, marker="o", ms=3, label=label)
        ax.fill_between(x, mean - std, mean + std, color=colour, alpha=0.15, lw=0)
        ax.plot(x, _floor(rows, "turn_mean_deg", windowed), color=colour, **dashed, label=f"{label}, shuffled")
    ax.axhline(120, color="0.4", lw=0.8, ls=":")
    ax.set(title="(b) turning angle between steps (mean ± std)", xlabel="location", ylabel="degrees", ylim=(0, 180))
    ax.legend(frameon=False, fontsize=7)

    ax = fig.add_subplot(grid[0, 2])
    for key, colour, label in (("step_cv", "tab:green", "step CV"), ("out_of_plane", "tab:brown", "out of plane"),
                               ("step_slope", "tab:gray", "step log-log slope")):
        ax.plot(x, _series(rows, key), color=colour, marker="o", ms=3, label=label)
        ax.plot(x, _floor(rows, key), color=colour, **dashed)
    ax.axhline(0, color="0.6", lw=0.6)
    ax.set(title="(c) steps and ripple (dashed: shuffled labels)", xlabel="location")
    ax.legend(frameon=False, fontsize=7)

    ax = fig.add_subplot(grid[1, 0:2])
    for v in result.variants:
        ax.plot(x, _series(rows, "procrustes", v), marker=".", ms=4, lw=1, label=v)
    ax.plot(x, _series(rows, "split_half_distance"), color="k", lw=1.5, label="between two halves of the prompts")
    ax.plot(x, _series(rows, "split_half_noise"), color="k", **dashed, label="the same, shuffled labels")
    ax.set(title="(d) Procrustes distance of the centroid curve to each toy variant's h(n, 0)", xlabel="location",
           ylabel="distance (0 = congruent)")
    ax.legend(frameon=False, fontsize=7, ncol=3)

    _plot_curve(fig.add_subplot(grid[1, 2], projection="3d"), result.curve)
    fig.suptitle(f"The count manifold, counts {result.counts[0]}..{result.counts[-1]}", fontsize=11)
    fig.tight_layout()
    return fig


def _plot_curve(ax, curve: dict) -> None:
    coords = np.asarray(curve["coords"], dtype=float)
    counts = np.asarray(curve["counts"], dtype=float)
    ax.plot(*coords.T, color="0.5", lw=0.8)
    sc = ax.scatter(*coords.T, c=counts, cmap="viridis", s=12, depthshade=False)
    if curve.get("toy_coords") is not None:
        toy = np.asarray(curve["toy_coords"], dtype=float)
        ax.plot(*toy.T, color="tab:red", lw=1.5, label=f"toy {curve['toy']} (aligned)")
        ax.legend(frameon=False, fontsize=7, loc="upper left")
    ax.figure.colorbar(sc, ax=ax, shrink=0.6, label="count")
    ax.set(title=f"(e) {location_label(curve['location'])}: top three PCs", xlabel="PC1", ylabel="PC2", zlabel="PC3")
    ax.title.set_fontsize(9)


def draw_manifold(result, folder: str | os.PathLike) -> list[Path]:
    """``manifold.png`` and ``manifold.pdf`` of a ManifoldResult in ``folder``."""
    return save_figure(plot_manifold(result), Path(folder) / "manifold")


def manifold_view(page: Page, s: Section) -> None:
    """The report's table of a ManifoldResult (``s.result``): every number a span of its JSON."""
    rel = s.rel
    rows = []
    for i in range(len(s.result.per_location)):
        loc = ("per_location", i)
        rows.append([
            location_cell(page, rel, *loc), page.v(rel, *loc, "dims95"), page.v(rel, *loc, "participation_ratio"),
            page.v(rel, *loc, "step_cv"), page.v(rel, *loc, "step_slope"),
            f"{page.v(rel, *loc, 'turn_mean_deg')} ± {page.v(rel, *loc, 'turn_std_deg')}",
            page.v(rel, *loc, "turn_noise_deg"), page.v(rel, *loc, "out_of_plane"),
            page.v(rel, *loc, "nearest_toy"),
            f"{page.v(rel, *loc, 'split_half_distance')} / {page.v(rel, *loc, 'split_half_noise')}",
            page.v(rel, *loc, "shape_above_floor"),
            f"{page.v(rel, *loc, 'windowed', 'turn_mean_deg')} ({page.v(rel, *loc, 'windowed', 'turn_noise_deg')})",
            page.v(rel, *loc, "windowed", "nearest_toy")])
    page.caption(
        f"Centroid curve c(n) over counts {page.v(rel, 'counts', 0)}–{page.v(rel, 'counts', len(s.result.counts) - 1)} "
        "at every location. Turning angles are in degrees: none on a ray or a segment, constant on an arc, and "
        "a hundred and twenty on average for independent noise on each centroid — so each is shown beside the same "
        "with the count labels shuffled (the noise floor). The shape stands above its floor where the curves of two "
        "halves of the prompts are nearer each other (Procrustes) than every shuffle's halves. Windowed: the curve "
        f"of means over {page.v(rel, 'window')} successive counts. The nearest toy variant is the smallest "
        "Procrustes distance to its checked construction's letter-free boundary curve at the same counts; those "
        "constructions are all nearly straight, so their distances to a noisy curve differ little (manifold.json "
        "holds every distance).")
    page.add(table(["location", "intrinsic dimension", "participation ratio", "step CV", "step slope", "turning (°)",
                    "shuffled turning (°)", "out of plane", "nearest toy", "split-half distance / shuffled",
                    "shape above floor", "windowed turning (shuffled)", "nearest toy, windowed"], rows))


__all__ = ["plot_manifold", "draw_manifold", "manifold_view"]
