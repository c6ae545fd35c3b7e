"""One plotting function per figure; each takes a result object and returns a matplotlib Figure.

Figures are redrawn from the JSON results without recomputing (``GeometryResult.from_dict`` etc.).
"""

from __future__ import annotations

import numpy as np


def _short(name: str) -> str:
    """``blocks.3.hook_resid_post`` -> ``block 3``; other names unchanged."""
    parts = name.split(".")
    if len(parts) >= 2 and parts[0] == "blocks" and parts[1].isdigit():
        return f"after block {int(parts[1]) + 1}"
    return name


def plot_figure5(result):
    """Figure 5: layerwise gap ratio (blue) and effective-rank ratio (red), seed mean with the seed range
    shaded, horizontal line at 1. ``result``: :class:`countlens.analysis.layerwise.GeometryResult`."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = result.per_location
    x = np.array([r["index"] for r in rows])
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for key, colour, label in (("gap_ratio", "tab:blue", "adjacent-centroid gap ratio"),
                               ("erank_ratio", "tab:red", "effective-rank ratio")):
        mean = np.array([r[key] for r in rows], dtype=float)
        lo = np.array([r[f"{key}_min"] for r in rows], dtype=float)
        hi = np.array([r[f"{key}_max"] for r in rows], dtype=float)
        ax.plot(x, mean, color=colour, marker="o", ms=3, label=label)
        ax.fill_between(x, lo, hi, color=colour, alpha=0.2, lw=0)
    ax.axhline(1.0, color="0.4", ls="--", lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    hw, lw = result.high_window, result.low_window
    ax.set_xlabel("residual location (0 = embeddings, ℓ = after block ℓ)")
    ax.set_ylabel(f"counts {hw[0]}–{hw[1]} / counts {lw[0]}–{lw[1]}")
    ax.set_title(f"Layerwise count geometry ({len(result.seeds)} seed(s): mean, range shaded)", fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    return fig


def plot_pca_panels(panels, titles, suptitle: str | None = None):
    """PCA scatter panels, colour = count, each panel its own basis and scale.

    ``panels``: list of dicts with ``counts`` (k,), ``coords`` (k, 2), ``explained_variance_ratio`` (2,).
    """
    import matplotlib.pyplot as plt

    k = len(panels)
    fig, axes = plt.subplots(1, k, figsize=(3.4 * k + 0.8, 3.3), squeeze=False, layout="constrained")
    vmin = min(min(p["counts"]) for p in panels)
    vmax = max(max(p["counts"]) for p in panels)
    sc = None
    for ax, panel, title in zip(axes[0], panels, titles, strict=True):
        coords = np.asarray(panel["coords"], dtype=float)
        ev = panel["explained_variance_ratio"]
        sc = ax.scatter(coords[:, 0], coords[:, 1], c=panel["counts"], cmap="viridis", vmin=vmin, vmax=vmax,
                        s=12)
        ax.plot(coords[:, 0], coords[:, 1], color="0.7", lw=0.3, alpha=0.6, zorder=0)
        if not np.any(coords):
            ax.text(0.5, 0.3, "all centroids equal:\nno count information here", transform=ax.transAxes,
                    ha="center", fontsize=8, color="0.3")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}%)", fontsize=8)
        ax.set_ylabel(f"PC2 ({100 * ev[1]:.0f}%)", fontsize=8)
        ax.tick_params(labelsize=7)
    fig.colorbar(sc, ax=list(axes[0]), label="count n", shrink=0.9)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


def plot_figure6(result):
    """Figure 6: PCA of the count centroids at (by default) four locations, colour = count."""
    titles = [_short(p["name"]) for p in result.pca]
    c = result.pca_counts
    return plot_pca_panels(result.pca, titles, f"PCA of count centroids, n = {c[0]}..{c[1]}")


def plot_compare(result):
    """Toy vs LLM: PCA of each source's centroids (top) and the four metrics side by side (bottom).

    ``result``: :class:`countlens.analysis.compare.CompareResult`.
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    rows = result.rows
    k = len(rows)
    fig = plt.figure(figsize=(max(2.6 * k, 10.5), 6.4))
    grid = fig.add_gridspec(2, 1, height_ratios=[1.0, 1.1], hspace=0.45)
    top, bottom = grid[0].subgridspec(1, k), grid[1].subgridspec(1, 4, wspace=0.3)
    c_lo = min(min(r["pca"]["counts"]) for r in rows)
    c_hi = max(max(r["pca"]["counts"]) for r in rows)
    for i, row in enumerate(rows):
        ax = fig.add_subplot(top[0, i])
        coords = np.asarray(row["pca"]["coords"], dtype=float)
        ax.scatter(coords[:, 0], coords[:, 1], c=row["pca"]["counts"], cmap="viridis", vmin=c_lo, vmax=c_hi, s=8)
        ax.plot(coords[:, 0], coords[:, 1], color="0.7", lw=0.5, zorder=0)
        ax.set_title(row["label"], fontsize=8, color="tab:orange" if row["kind"] == "toy" else "tab:purple")
        ax.set_xticks([])
        ax.set_yticks([])
    metrics = (("gap_ratio", "gap ratio (high/low)", False), ("erank_ratio", "eff.-rank ratio", False),
               ("arc_angle", "arc angle (rad)", True), ("probe_norm", "probe norm for exact", True))
    labels = [r["label"] for r in rows]
    colours = ["tab:orange" if r["kind"] == "toy" else "tab:purple" for r in rows]
    y = np.arange(k)
    for j, (key, title, log) in enumerate(metrics):
        ax = fig.add_subplot(bottom[0, j])
        vals = np.array([np.nan if r[key] is None else float(r[key]) for r in rows])
        shown = np.where(np.isfinite(vals), vals, 0.0)
        if log:
            shown = np.where(shown > 0, shown, np.nan)
        ax.barh(y, np.nan_to_num(shown, nan=0.0), color=colours)
        if key == "probe_norm":  # the toy's own (checked) read-out norm, for reference
            own = np.array([np.nan if r.get("readout_norm") is None else float(r["readout_norm"]) for r in rows])
            if np.any(np.isfinite(own)):
                ax.plot(own, y, "kx", ms=6, label="toy's own read-out")
                ax.legend(fontsize=6, frameon=False, loc="lower right")
        for yi, v in zip(y, vals, strict=True):
            if not np.isfinite(v):
                ax.text(0.01, yi, "not reached" if key == "probe_norm" else "n/a", va="center", fontsize=7,
                        transform=ax.get_yaxis_transform(), color="0.35")
        finite_any = np.any(np.isfinite(shown)) or (key == "probe_norm" and any(
            r.get("readout_norm") for r in rows))
        if log and finite_any:
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
        elif not finite_any:
            ax.set_xlim(0, 1)
            ax.set_xticks([])
        if key in ("gap_ratio", "erank_ratio"):
            ax.axvline(1.0, color="0.4", ls="--", lw=1)
        ax.set_yticks(y)
        ax.set_yticklabels(labels if j == 0 else [], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("Toy (orange) vs LLM (purple): count geometry and probe cost", fontsize=10)
    return fig


__all__ = ["plot_figure5", "plot_figure6", "plot_pca_panels", "plot_compare"]
