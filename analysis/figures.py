"""One plotting function per figure; each takes a result object and returns a matplotlib Figure, and
``draw_geometry`` / ``draw_compare`` save a result's figure files.

Figures are redrawn from the JSON results without recomputing (``GeometryResult.from_dict`` etc.).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from countlens.core.io import save_figure
from countlens.core.locations import location_label
from countlens.core.report import Page, Section, finite, location_cell, table


def plot_figure5(result):
    """Figure 5: layerwise gap ratio (blue) and effective-rank ratio (red), seed mean with the seed range
    shaded, horizontal line at 1. ``result``: :class:`countlens.analysis.experiments.GeometryResult`."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    rows = result.per_location
    x = np.array([r["index"] for r in rows])
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    z = float((getattr(result, "noise", None) or {}).get("z_above", 3.0))
    for key, colour, label in (("gap_ratio", "tab:blue", "adjacent-centroid gap ratio"),
                               ("erank_ratio", "tab:red", "effective-rank ratio")):
        label += " (per-seed centroids, mean over seeds)"
        mean = np.array([r[key] for r in rows], dtype=float)
        lo = np.array([r[f"{key}_min"] for r in rows], dtype=float)
        hi = np.array([r[f"{key}_max"] for r in rows], dtype=float)
        ax.plot(x, mean, color=colour, marker="o", ms=3, label=label)
        ax.fill_between(x, lo, hi, color=colour, alpha=0.2, lw=0)
        floors = [r.get("floors", {}).get(key) for r in rows]
        if any(f is not None for f in floors):
            fm = np.array([np.nan if f is None else float(f["shuffled_mean"]) for f in floors])
            fs = np.array([np.nan if f is None else float(f["shuffled_std"]) for f in floors])
            ax.plot(x, fm, color=colour, ls=":", lw=1, label=f"shuffled labels: mean ± {z:g} std")
            ax.fill_between(x, fm - z * fs, fm + z * fs, facecolor="none", edgecolor=colour, hatch="///",
                            alpha=0.35, lw=0)
            for half, marker in (("half_a", "1"), ("half_b", "2")):
                hv = np.array([np.nan if f is None else float(f[half]) for f in floors])
                if np.any(np.isfinite(hv)):
                    ax.plot(x, hv, ls="none", marker=marker, ms=5, color=colour, alpha=0.7,
                            label="split halves" if half == "half_a" else None)
    ax.axhline(1.0, color="0.4", ls="--", lw=1)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    hw, lw = result.high_window, result.low_window
    ax.set_xlabel("residual location (0 = embeddings, ℓ = after block ℓ)")
    ax.set_ylabel(f"ratio: counts ${hw[0]}$–${hw[1]}$ / counts ${lw[0]}$–${lw[1]}$")
    ax.set_title(f"Layerwise count geometry ({len(result.seeds)} seed(s): seed mean, range shaded)", fontsize=10)
    ax.legend(frameon=False, fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    fig.tight_layout()
    return fig


def floor_text(name: str, floor: dict | None, fmt: str = ".2f") -> str:
    """One line: a quantity, its shuffled-label floor, its halves and whether it stands above the floor."""
    if not floor:
        return ""
    value, m, sd = (float(floor[k]) for k in ("value", "shuffled_mean", "shuffled_std"))
    halves = (f"; halves {float(floor['half_a']):{fmt}}/{float(floor['half_b']):{fmt}}"
              if np.isfinite(float(floor["half_a"])) else "")
    verdict = "above floor" if floor["above_floor"] in (True, "True", "true") else "within floor"
    return f"{name} {value:{fmt}} (shuffled {m:{fmt}}±{sd:{fmt}}{halves}): {verdict}"


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
        floors = panel.get("floors") or {}
        lines = [floor_text("PC1 order |ρ|", floors.get("count_order")),
                 floor_text("turn (°)", floors.get("turn_angle"), ".0f")]
        if any(lines):  # below the axis label: what the panel's shape is worth against noise
            ax.annotate("\n".join(line for line in lines if line), (0.5, 0), xycoords="axes fraction",
                        xytext=(0, -30), textcoords="offset points", ha="center", va="top", fontsize=5.5,
                        color="0.2")
    fig.colorbar(sc, ax=list(axes[0]), label="count $n$", shrink=0.9)
    if suptitle:
        fig.suptitle(suptitle, fontsize=10)
    return fig


def plot_figure6(result):
    """Figure 6: PCA of the count centroids at (by default) four locations, colour = count."""
    titles = [location_label(p["name"]) for p in result.pca]
    c = result.pca_counts
    return plot_pca_panels(result.pca, titles, f"PCA of count centroids (pooled over seeds), $n = {c[0]}..{c[1]}$")


def plot_compare(result):
    """Toy vs LLM: PCA of each source's centroids (top, with axes and a shared count colour bar) and the
    four metrics side by side (bottom; linear scales, so exact zeros show as a marker on the axis).

    ``result``: :class:`countlens.analysis.experiments.CompareResult`.
    """
    import matplotlib.pyplot as plt

    rows = result.rows
    k = len(rows)
    fig = plt.figure(figsize=(max(2.6 * k, 11.5), 7.4), layout="constrained")
    top_fig, bottom_fig = fig.subfigures(2, 1, height_ratios=[1.0, 1.25])
    _compare_pca(top_fig, rows)
    metrics = _compare_metrics(result)
    alphas = [a for a in result.probe.get("rel_alphas", []) if a > 0]
    tried = (rf"$\alpha_{{\rm rel}}$ = 0 and {min(alphas):.0e}…{max(alphas):.0e}" if alphas
             else "the ridge path")
    metric_axes = bottom_fig.subplots(1, len(metrics))
    for ax, (key, title, xlabel) in zip(metric_axes, metrics, strict=True):
        _metric_panel(ax, key, rows, tried)
        ax.set_yticks(np.arange(k), [r["label"] for r in rows] if ax is metric_axes[0] else [], fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    bottom_fig.text(0.5, 0.0, "centroids pooled over seeds; a toy's centroid for count $n$ is the mean of "
                              "$h(n, m)$ over every $m$ with $n + m \\leq L$ (not the letter-free slice of "
                              "Figure 1); grey: the ratio with the count labels shuffled, mean ± 3 std",
                    ha="center", va="bottom", fontsize=7, color="0.3")
    fig.suptitle("Toy (orange) vs LLM (purple): count geometry and probe cost", fontsize=10)
    return fig


def _source_colour(row: dict) -> str:
    """A comparison source's colour: orange for a toy, purple for an LLM."""
    return "tab:orange" if row["kind"] == "toy" else "tab:purple"


def _compare_pca(top_fig, rows: list[dict]) -> None:
    """The top row of :func:`plot_compare`: each source's centroid PCA, one count colour scale over all."""
    c_lo = min(min(r["pca"]["counts"]) for r in rows)
    c_hi = max(max(r["pca"]["counts"]) for r in rows)
    pca_axes = top_fig.subplots(1, len(rows), squeeze=False)[0]
    sc = None
    for ax, row in zip(pca_axes, rows, strict=True):
        coords = np.asarray(row["pca"]["coords"], dtype=float)
        ev = row["pca"]["explained_variance_ratio"]
        sc = ax.scatter(coords[:, 0], coords[:, 1], c=row["pca"]["counts"], cmap="viridis", vmin=c_lo, vmax=c_hi,
                        s=8)
        ax.plot(coords[:, 0], coords[:, 1], color="0.7", lw=0.5, zorder=0)
        ax.set_title(row["label"], fontsize=8, color=_source_colour(row))
        order = floor_text("PC1 order |ρ|", (row.get("floors") or {}).get("count_order"))
        if order:
            ax.text(0.02, 0.98, order.replace(" (", "\n("), transform=ax.transAxes, va="top", fontsize=5,
                    color="0.2")
        ax.set_xlabel(f"PC1 ({100 * ev[0]:.0f}%)", fontsize=7)
        ax.set_ylabel(f"PC2 ({100 * ev[1]:.0f}%)", fontsize=7)
        ax.tick_params(labelsize=6)
    top_fig.colorbar(sc, ax=list(pca_axes), label="count $n$", shrink=0.9)


def _compare_metrics(result) -> tuple[tuple[str, str, str], ...]:
    """The bottom row's metrics: (row key, panel title, x label) each."""
    a0, a1 = result.arc_counts
    lo, hi = result.low_window, result.high_window
    return (("gap_ratio", "gap ratio (pooled)", rf"gap ratio: counts ${hi[0]}$–${hi[1]}$ / ${lo[0]}$–${lo[1]}$"),
            ("erank_ratio", "eff.-rank ratio (pooled)", "effective-rank ratio, high / low window"),
            ("arc_angle", "endpoint angle", rf"$\angle(c_{{{a0}}}, c_{{{a1}}})$ from the origin (rad)"),
            ("probe_norm", "probe norm for exact counting",
             r"native $\|w\|_2$ of the smallest ridge probe" "\n" r"exact on validation rows"))


def _metric_panel(ax, key: str, rows: list[dict], tried: str) -> None:
    """One metric ``key`` of every source as a horizontal bar (the first source on top): its value marked and
    written, a note where it is missing (``tried``: the ridge path, for an unreached probe norm), the toy's own
    read-out norm beside the probe norm, the shuffled-label floor beside a ratio."""
    y = np.arange(len(rows))
    vals = np.array([np.nan if r[key] is None else float(r[key]) for r in rows])
    finite = np.isfinite(vals)
    _metric_bars(ax, vals, y, [_source_colour(r) for r in rows])
    if key == "probe_norm":  # the toy's own (checked) read-out norm, for reference
        _own_readout(ax, rows, y)
    _missing_notes(ax, key, rows, finite, y, tried)
    if key in ("gap_ratio", "erank_ratio"):
        vals = _ratio_floors(ax, key, rows, y, vals)
    shown = np.concatenate([vals[np.isfinite(vals)], [0.0]])
    if key == "probe_norm":
        shown = np.concatenate([shown, [float(r["readout_norm"]) for r in rows if r.get("readout_norm")]])
    ax.set_xlim(0.0, float(np.max(shown)) * 1.2 or 1.0)
    ax.set_ylim(len(rows) - 0.5, -0.5)  # first row on top


def _metric_bars(ax, vals: np.ndarray, y: np.ndarray, colours: list[str]) -> None:
    """The finite values ``vals`` as bars at ``y``, each end marked (a zero stays visible) and written."""
    finite = np.isfinite(vals)
    ax.barh(y[finite], vals[finite], color=[c for c, f in zip(colours, finite, strict=True) if f], height=0.6)
    ax.scatter(vals[finite], y[finite], marker="|", s=120, color="black", zorder=3)  # a zero stays visible
    for yi, v in zip(y[finite], vals[finite], strict=True):
        ax.annotate("0" if v == 0 else f"{v:.3g}", (v, yi), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=6)
    ax.axvline(0.0, color="0.3", lw=0.8)


def _own_readout(ax, rows: list[dict], y: np.ndarray) -> None:
    """The toy's own (checked) read-out norm as crosses beside the probe norms, with a legend below."""
    own = np.array([np.nan if r.get("readout_norm") is None else float(r["readout_norm"]) for r in rows])
    if np.any(np.isfinite(own)):
        ax.plot(own, y, "kx", ms=6, label="toy's own read-out")
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.32), frameon=False)


def _missing_notes(ax, key: str, rows: list[dict], finite: np.ndarray, y: np.ndarray, tried: str) -> None:
    """``n/a`` where a source has no value; for the probe norm, the path tried and the best test accuracy."""
    for yi, row, ok in zip(y, rows, finite, strict=True):
        if ok:
            continue
        text = "n/a"
        if key == "probe_norm":
            text = f"not reached: {tried}\nbest test acc {float(row['probe_best_acc']):.3g}"
        ax.text(0.02, yi, text, va="center", fontsize=6, transform=ax.get_yaxis_transform(), color="0.3")


def _ratio_floors(ax, key: str, rows: list[dict], y: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """A ratio's line at 1 and each source's shuffled-label floor (mean ± 3 std, grey) just below its bar;
    ``vals`` with each floor's upper end appended (the panel's x range must hold them)."""
    ax.axvline(1.0, color="0.4", ls="--", lw=1)
    for yi, row in zip(y, rows, strict=True):
        f = (row.get("floors") or {}).get(key)
        if f is not None and np.isfinite(float(f["shuffled_mean"])):
            m, sd = float(f["shuffled_mean"]), float(f["shuffled_std"])
            ax.errorbar(m, yi + 0.3, xerr=3 * sd if np.isfinite(sd) else None, fmt="o", ms=2.5,
                        color="0.35", lw=0.8, capsize=2, zorder=4)
            vals = np.append(vals, m + 3 * sd if np.isfinite(sd) else m)
    return vals


def draw_geometry(result, folder: str | os.PathLike) -> list[Path]:
    """``figure5.png/.pdf`` and ``figure6.png/.pdf`` of a :class:`GeometryResult` in ``folder``."""
    folder = Path(folder)
    return [*save_figure(plot_figure5(result), folder / "figure5"), *save_figure(plot_figure6(result), folder / "figure6")]


def draw_compare(result, folder: str | os.PathLike) -> list[Path]:
    """``compare.png/.pdf`` of a :class:`CompareResult` in ``folder``."""
    return save_figure(plot_compare(result), Path(folder) / "compare")


# ----------------------------------------------------------------------- report views

def _floor_cell(page: Page, rel: str, *keys) -> str:
    """A floor as one cell: shuffled mean ± std, z, above or not, and the split halves (spans of ``rel``)."""
    if not page.has(rel, *keys, "shuffled_mean"):
        return "—"
    halves = (f"; halves {page.v(rel, *keys, 'half_a')} / {page.v(rel, *keys, 'half_b')}"
              if finite(page.get(rel, *keys, "half_a")) else "")
    return (f"{page.v(rel, *keys, 'shuffled_mean')} ± {page.v(rel, *keys, 'shuffled_std')} (z "
            f"{page.v(rel, *keys, 'z')}, above: {page.v(rel, *keys, 'above_floor')}){halves}")


def _floor_sentence(page: Page, rel: str, key: str, what: str) -> str:
    """``what`` stands above its floor at N of M locations (names), from ``floor_summary``."""
    if not page.has(rel, "floor_summary", key, "n_above"):
        return ""
    where = page.values(rel, "floor_summary", key, "above", limit=8)
    return (f"{what} stands above its shuffled-label floor (|z| ≥ {page.v(rel, 'floor_summary', key, 'z_above')}) "
            f"at {page.v(rel, 'floor_summary', key, 'n_above')} of {page.v(rel, 'floor_summary', key, 'n')} "
            f"locations{': ' + where if where else ''}. ")


def geometry_view(page: Page, s: Section) -> None:
    """The report's table for a :class:`~countlens.analysis.experiments.GeometryResult` (``s.result``)."""
    rel = s.rel
    rows = []
    for i in range(len(s.result.per_location)):
        loc = ("per_location", i)
        rows.append([location_cell(page, rel, *loc), page.v(rel, *loc, "name"), page.v(rel, *loc, "gap_ratio"),
                     f"{page.v(rel, *loc, 'gap_ratio_min')} – {page.v(rel, *loc, 'gap_ratio_max')}",
                     _floor_cell(page, rel, *loc, "floors", "gap_ratio"),
                     page.v_or_dash(rel, *loc, "gap_ratio_pooled"), page.v(rel, *loc, "erank_ratio"),
                     f"{page.v(rel, *loc, 'erank_ratio_min')} – {page.v(rel, *loc, 'erank_ratio_max')}",
                     _floor_cell(page, rel, *loc, "floors", "erank_ratio"),
                     page.v_or_dash(rel, *loc, "erank_ratio_pooled")])
    page.caption(
        f"High window {page.v(rel, 'high_window', 0)}–{page.v(rel, 'high_window', 1)} over low window "
        f"{page.v(rel, 'low_window', 0)}–{page.v(rel, 'low_window', 1)}; PCA over counts "
        f"{page.v(rel, 'pca_counts', 0)}–{page.v(rel, 'pca_counts', 1)}; seeds {page.values(rel, 'seeds')}. "
        "Figure 5's lines are the seed-mean ratios (the ratio per seed, then the mean; the seed range shaded). "
        "The pooled ratios (centroids over all seeds, one ratio) are what the toy-vs-LLM comparison uses; the "
        "two differ because a mean of ratios is not a ratio of means. At the embeddings every prompt's "
        "boundary token is the same, so there is no geometry (nan).")
    if page.has(rel, "floor_summary"):
        page.caption(
            "Noise floor: each ratio beside the same ratio with the count labels shuffled among the prompts of "
            f"each seed ({page.v(rel, 'noise', 'n_shuffles')} shuffles: mean ± std, z = (value − mean) / std; "
            f"Figure 5 hatches mean ± {page.v(rel, 'noise', 'z_above')} std) and of two disjoint halves of every count's prompts ("
            f"{page.v(rel, 'noise', 'prompts_per_count', 'min')}–{page.v(rel, 'noise', 'prompts_per_count', 'max')} "
            "prompts per seed and count here). "
            + _floor_sentence(page, rel, "gap_ratio", "The gap ratio (seed mean)")
            + _floor_sentence(page, rel, "erank_ratio", "The effective-rank ratio (seed mean)")
            + "Where a ratio stays within its floor, its centroids' gaps are those of the prompts' own variation, "
            "not of the count; a ratio above its floor says the count (or anything that varies with it, such as "
            "the prompt's length or its noise level) moves the centroids, not that the geometry is the paper's.")
        page.caption(
            "Figure 6 (PCA of the centroids over the PCA counts): "
            + _floor_sentence(page, rel, "count_order", "How well the first principal axis orders the counts "
                                                         "(|Spearman ρ|)")
            + _floor_sentence(page, rel, "turn_angle", "The mean turn between successive centroid steps")
            + f"Independent noise turns by {page.v(rel, 'noise', 'noise_turn_angle')}° per step and orders the "
            "counts by chance only; a panel whose order and turn stay within their floors draws noise, whatever "
            "its shape.")
        pca_rows = [[location_cell(page, rel, "pca", i), page.v(rel, "pca", i, "name"),
                     page.v(rel, "pca", i, "count_order"), _floor_cell(page, rel, "pca", i, "floors", "count_order"),
                     page.v(rel, "pca", i, "turn_angle"), _floor_cell(page, rel, "pca", i, "floors", "turn_angle")]
                    for i in range(len(s.result.pca)) if page.has(rel, "pca", i, "floors")]
    else:
        pca_rows = []
    page.add(table(["location", "name", "gap ratio, seed-mean", "seed range", "its shuffled-label floor",
                    "gap ratio, pooled", "effective-rank ratio, seed-mean", "seed range",
                    "its shuffled-label floor", "effective-rank ratio, pooled"], rows, left=2))
    if pca_rows:
        page.add(table(["PCA location", "name", "count order along the first principal axis, |ρ|", "its floor",
                        "turn angle (°)",
                        "its floor"], pca_rows, left=2))


def compare_view(page: Page, s: Section) -> None:
    """The report's table for a :class:`~countlens.analysis.experiments.CompareResult` (``s.result``)."""
    rel = s.rel
    rows = [_compare_cells(page, rel, i, r) for i, r in enumerate(s.result.rows)]
    page.add(table(["source", "kind", "gap ratio, pooled", "its shuffled-label floor", "effective-rank ratio, pooled",
                    "its shuffled-label floor", "PCA: count order along the first axis, |ρ|",
                    "its shuffled-label floor",
                    "endpoint angle (rad)",
                    "probe test accuracy (validation-selected α)", "its native norm",
                    "smallest native norm exact on validation rows", "toy's own read-out norm"], rows, left=2))
    _compare_captions(page, rel)
    _compare_floors(page, rel, s.result.rows)
    closest = "".join(f"<li>{page.k(rel, 'closest_toy', k)} resembles toy {page.v(rel, 'closest_toy', k)}</li>"
                      for k in s.result.closest_toy())
    if closest:
        page.add(f"<p>Nearest toy by gap and effective-rank ratios:</p><ul>{closest}</ul>")


def _compare_cells(page: Page, rel: str, i: int, r: dict) -> list[str]:
    """The table cells of the comparison's source ``i`` (``r``: its row)."""
    row = ("rows", i)
    if r.get("probe_norm") is not None:
        probe = (f"{page.v(rel, *row, 'probe_norm')} (test accuracy "
                 f"{page.v_or_dash(rel, *row, 'probe_norm_test_acc')})")
    else:
        probe = "not reached on the grid"
    own = (f"{page.v(rel, *row, 'readout_norm')} (passes the check: {page.v_or_dash(rel, *row, 'readout_passed')})"
           if r.get("readout_norm") is not None else "—")
    return [page.v(rel, *row, "label"), page.v(rel, *row, "kind"), page.v(rel, *row, "gap_ratio"),
            _floor_cell(page, rel, *row, "floors", "gap_ratio"),
            page.v(rel, *row, "erank_ratio"), _floor_cell(page, rel, *row, "floors", "erank_ratio"),
            page.v_or_dash(rel, *row, "pca", "count_order"),
            _floor_cell(page, rel, *row, "floors", "count_order"), page.v(rel, *row, "arc_angle"),
            page.v_or_dash(rel, *row, "probe_best_acc"), page.v_or_dash(rel, *row, "probe_norm_at_best"),
            probe, own]


def _compare_captions(page: Page, rel: str) -> None:
    """What the comparison's ratios, endpoint angle and probes are, and why the toy's panels differ from
    Figure 1's."""
    fractions = (f" (train / validation / test {page.v(rel, 'probe', 'fractions', 0)} / "
                 f"{page.v(rel, 'probe', 'fractions', 1)} / {page.v(rel, 'probe', 'fractions', 2)}, split seed "
                 f"{page.v(rel, 'probe', 'split_seed')})" if page.has(rel, "probe", "fractions") else "")
    page.caption(
        "Ratios here are pooled over seeds (centroids over all seeds), not Figure 5's seed-mean. The endpoint "
        "angle is seen from the origin between the centroids of the first and last count of the span "
        f"{page.values(rel, 'arc_counts')}, not Figure 2(b)'s arc angle. Probes: one ridge path per source"
        f"{fractions}, relative ridge coefficients {page.values(rel, 'probe', 'rel_alphas', limit=3)}; the "
        "accuracy column is the validation-selected probe scored on the test rows; the norm column is the "
        "smallest norm on the path whose probe counts rounding-exactly on the validation rows, “not reached” "
        "when no coefficient of the grid gets there. The toy's own read-out is the construction's, certified "
        "by the full-domain check.")
    page.caption(
        "The toy centroids average h(n, m) over every distractor count m, as the LLM's average over prompts, so "
        "the toy panels need not look like Figure 1's letter-free slice (linear and softmax zig-zag where the "
        "distractors move the centroid); the learned post-LN construction reads its arc through a gain with "
        "one non-zero coordinate, so its h lies on a line (endpoint angle zero).")


def _compare_floors(page: Page, rel: str, rows: list[dict]) -> None:
    """Per source (``rows``: the comparison's), whether each ratio and the PCA count order stand above their
    shuffled-label floors, with what a floor says (nothing where no source has floors)."""
    verdicts = []
    for i, r in enumerate(rows):
        floors = r.get("floors") or {}
        if not floors:
            continue
        parts = [f"{name} {'above' if floors[key]['above_floor'] else 'within'} its floor (z "
                 f"{page.v(rel, 'rows', i, 'floors', key, 'z')})"
                 for key, name in (("gap_ratio", "gap ratio"), ("erank_ratio", "effective-rank ratio"),
                                   ("count_order", "count order")) if key in floors]
        verdicts.append(f"<li>{page.v(rel, 'rows', i, 'label')}: {', '.join(parts)}</li>")
    if verdicts:
        page.caption(
            "Noise floor: each source's ratios and PCA count order beside the same quantity with the count labels "
            "shuffled among its rows (within each seed; mean ± std over "
            f"{page.v_or_dash(rel, 'noise', 'n_shuffles')} shuffles) and of two disjoint halves of every count's "
            f"rows; a value stands above its floor when |z| ≥ {page.v_or_dash(rel, 'noise', 'z_above')}. A toy's rows are its (n, m) pairs, exact and "
            "noise-free, so its floor only says what a count-blind centroid set of the same sizes would give; "
            "an LLM value within its floor is the prompts' variation, and its match to a toy says nothing.")
        page.add(f"<ul>{''.join(verdicts)}</ul>")


__all__ = ["plot_figure5", "plot_figure6", "floor_text", "plot_pca_panels", "plot_compare", "draw_geometry", "draw_compare",
           "geometry_view", "compare_view"]
