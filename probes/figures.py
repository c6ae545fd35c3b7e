"""One plotting function per probe figure; each takes a result object and returns a matplotlib figure, so a
figure can be redrawn from its JSON (``ProbeResult.from_dict`` / ``SweepResult.from_dict`` /
``RunningCountResult.from_dict``). :func:`draw_probes`, :func:`draw_sweep` and :func:`draw_running_count`
save a result's figure files; the report views of the same results are at the bottom."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator, NullFormatter, ScalarFormatter

from countlens.core.io import save_figure
from countlens.core.locations import location_label
from countlens.core.report import Page, Section, location_cell, table
from countlens.probes.probe import ProbeResult
from countlens.probes.running import RUNNING_TARGETS, TARGET_LABELS, RunningCountResult
from countlens.probes.sweep import SweepResult

# Figure 8's colour, defined where it is drawn (countlens.probes.penalty_unit).
ALPHA_REL_LABEL = (r"$\log_{10}\,\alpha_{\mathrm{rel}}$, relative ridge coefficient" "\n"
                   r"$\alpha_{\mathrm{rel}} = \alpha\,d\,/\,\|Z_c\|_F^2$ (mean eigenvalue of $Z_c^\top Z_c$)")


def plot_binned_accuracy(result: ProbeResult, locations: list[str] | None = None):
    """Figure 7: test rounded exact accuracy of the validation-selected probe per ten-count range; line = mean
    over split seeds, shading = min–max. One line per location (default: the run's ``figure_locations``,
    else the best by validation accuracy). With the model's own answers in the capture, a black dashed line
    gives its zero-shot exact accuracy per range (all rows); with the control task, a right panel gives the
    selectivity per location (test accuracy on the counts − on the control labels). With the model's answer
    as a distribution over counts in the capture, a black dotted line gives the share of prompts whose
    correct count is the most likely candidate (rank 1), and a middle panel the expected count and the
    correct count's mean rank per range, with the counting capacity in its title
    (:class:`countlens.probes.Behaviour`)."""
    locations = locations or result.config.get("figure_locations")
    chosen = [loc for loc in result.locations if loc.name in locations] if locations else [result.best_location()]
    control = bool(result.locations) and all(f.selectivity is not None for loc in result.locations for f in loc.fits)
    distribution = result.behaviour is not None and result.behaviour.distribution
    widths = [3] + ([2] if distribution else []) + ([2] if control else [])
    fig, axes = plt.subplots(1, len(widths), figsize=(6.4 + 4.0 * (len(widths) - 1), 3.8), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    ax, *others = axes[0]
    middle = others.pop(0) if distribution else None
    right = others.pop(0) if control else None
    for loc in chosen:
        bins = loc.fits[0].binned
        centres = np.array([(b["lo"] + b["hi"]) / 2 for b in bins])
        acc = np.array([[np.nan if b["accuracy"] is None else b["accuracy"] for b in f.binned] for f in loc.fits])
        with warnings.catch_warnings():  # a range no seed's test split holds stays NaN: a gap in the line
            warnings.simplefilter("ignore", RuntimeWarning)
            mean, lo, hi = np.nanmean(acc, axis=0), np.nanmin(acc, axis=0), np.nanmax(acc, axis=0)
        line, = ax.plot(centres, mean, marker="o", ms=3, label=location_label(loc.name))
        ax.fill_between(centres, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
        ax.set_xticks(centres, [f"{b['lo']}–{b['hi']}" if b["hi"] > b["lo"] else f"{b['lo']}" for b in bins],
                      rotation=45, ha="right", fontsize=7)
    if result.behaviour is not None:
        bins = result.behaviour.binned
        ax.plot([(b["lo"] + b["hi"]) / 2 for b in bins],
                [np.nan if b["accuracy"] is None else b["accuracy"] for b in bins], ls="--", marker="x", ms=4,
                color="black", label="model's own answer (zero-shot)")
        if distribution:
            ax.plot([(b["lo"] + b["hi"]) / 2 for b in bins], [_nan(b.get("rank1")) for b in bins], ls=":", marker=".",
                    color="black", label="correct count most likely (rank 1)")
            _plot_distribution(middle, result)
    if control:
        _plot_selectivity(right, result)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("count range")
    ax.set_ylabel("test rounded exact accuracy\n(IID split by row)")
    seeds = len(chosen[0].fits) if chosen else 0
    fit = chosen[0].fits[0] if chosen else None
    sizes = f"; train/val/test {fit.n_train}/{fit.n_val}/{fit.n_test} rows" if fit else ""
    ax.set_title(f"Ridge probe, α selected on validation, scored on test (mean, range over {seeds} split "
                 f"seeds{sizes})", fontsize=8)
    ax.legend(fontsize=7, title="location", title_fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def location_number(name: str, index: int) -> int:
    """Where a location is drawn on a layerwise axis: ℓ of "after block ℓ" (0 for the embeddings), read from
    its name, so a capture of a subset of locations is drawn at the right blocks; other names at ``index``."""
    label = location_label(name)
    if label == "embeddings":
        return 0
    if label.startswith("after block ") and label.removeprefix("after block ").isdigit():
        return int(label.removeprefix("after block "))
    return int(index)


def _location_span(page: Page, rel: str, *keys) -> str:
    """:func:`countlens.core.report.location_cell` where the location's index is its ℓ (a capture of every
    location), else the location's name (a capture of a subset, whose index is not ℓ, or a toy's location)."""
    loc = page.get(rel, *keys)
    label = location_label(loc["name"])
    named = label == "embeddings" or label.startswith("after block ")  # not a toy's or another hook's name
    if named and location_number(loc["name"], loc["index"]) == loc["index"]:
        return location_cell(page, rel, *keys)
    return page.v(rel, *keys, "name")


def _nan(value) -> float:
    return np.nan if value is None else float(value)


def capacity_text(behaviour) -> str:
    """The counting capacity in words (:data:`countlens.probes.behaviour.CAPACITY_DEFINITION`)."""
    def one(value):
        if value is not None:
            return f"n ≤ {value}"
        return "none" if behaviour.capacity_from is None else f"below n = {behaviour.capacity_from}"
    text = f"counting capacity: greedy {one(behaviour.capacity)}"
    return text + (f", rank 1 {one(behaviour.rank1_capacity)}" if behaviour.distribution else "")


def _plot_distribution(ax, result: ProbeResult) -> None:
    """Figure 7's middle panel: per count range the model's expected count Σ k p(k) (mean over prompts)
    against the range's mean count, and the correct count's mean rank on a second axis."""
    bins = result.behaviour.binned
    centres = [(b["lo"] + b["hi"]) / 2 for b in bins]
    ticks = [f"{b['lo']}–{b['hi']}" if b["hi"] > b["lo"] else f"{b['lo']}" for b in bins]
    ax.plot(centres, [_nan(b.get("mean_count")) for b in bins], color="grey", lw=0.8, ls="--",
            label="mean count of the range (a perfect counter)")
    ax.plot(centres, [_nan(b.get("expected")) for b in bins], marker="o", ms=3, color="C2",
            label="expected count Σ k p(k)")
    ax.set_ylabel("count")
    ax.set_xticks(centres, ticks, rotation=45, ha="right", fontsize=7)
    ax.set_xlabel("count range")
    twin = ax.twinx()
    twin.plot(centres, [_nan(b.get("rank")) for b in bins], marker="s", ms=3, color="C4",
              label="mean rank of the correct count")
    twin.set_ylabel("rank of the correct count (1 = most likely)", color="C4", fontsize=8)
    twin.set_yscale("log")  # ranks 1..K; a log axis keeps rank 1 apart and the line apart from the counts
    ranks = [b["rank"] for b in bins if b.get("rank") is not None]
    twin.set_ylim(0.8, 1.5 * max(ranks + [2.0]))
    twin.yaxis.set_major_formatter(ScalarFormatter())
    twin.yaxis.set_minor_formatter(NullFormatter())
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=6, loc="upper left")
    ax.set_title(f"The model's answer over candidate counts\n({capacity_text(result.behaviour)})", fontsize=8)
    ax.grid(alpha=0.3)


def _plot_selectivity(ax, result: ProbeResult) -> None:
    """Per location: the probe's test accuracy, the control task's, and their difference (selectivity)."""
    idx = np.array([location_number(loc.name, loc.index) for loc in result.locations])
    for key, label, style in (("test_rounded_acc", "counts", dict(color="C0", marker="o")),
                              ("control_test_rounded_acc", "control task", dict(color="grey", marker="s")),
                              ("selectivity", "selectivity", dict(color="C3", marker="^"))):
        stats = np.array([loc.stat(key) for loc in result.locations])  # (locations, 3)
        ax.plot(idx, stats[:, 0], ms=3, label=label, **style)
        ax.fill_between(idx, stats[:, 1], stats[:, 2], color=style["color"], alpha=0.2, lw=0)
    ax.axhline(0, color="grey", lw=0.6)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("residual location (0 = embeddings, ℓ = after block ℓ)")
    ax.set_ylabel("test rounded accuracy / selectivity")
    ax.set_title("Hewitt–Liang control task per location", fontsize=8)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)


def plot_layerwise(result: ProbeResult):
    """Layerwise table as a plot: test rounded accuracy and R² per location (mean, min–max over seeds)."""
    idx = np.array([location_number(loc.name, loc.index) for loc in result.locations])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, label in zip(axes, ("test_rounded_acc", "r2"), ("test rounded exact accuracy", "test R²"), strict=True):
        stats = np.array([loc.stat(key) for loc in result.locations])  # (locations, 3)
        ax.plot(idx, stats[:, 0], marker="o", ms=3, color="C0", label="ridge (rounded)")
        ax.fill_between(idx, stats[:, 1], stats[:, 2], color="C0", alpha=0.2, lw=0)
        if key == "test_rounded_acc" and all(f.classifier for loc in result.locations for f in loc.fits):
            clf = np.array([[f.classifier["test_acc"] for f in loc.fits] for loc in result.locations])
            ax.plot(idx, clf.mean(axis=1), marker="s", ms=3, color="C1", label="multinomial classifier")
            ax.fill_between(idx, clf.min(axis=1), clf.max(axis=1), color="C1", alpha=0.2, lw=0)
            ax.legend(fontsize=7)
        names = [loc.name for loc in result.locations]
        if len(names) <= 6:  # few locations (the toy's attn_out, h): name them
            ax.set_xticks(idx, [location_label(n) for n in names], fontsize=7)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("residual location (0 = embeddings, ℓ = after block ℓ)" if "embed" in names else "location")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle("Ridge probes per residual location (α selected on validation, scored on test)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_norm_sweep(result: SweepResult):
    """Figure 8: each α's probe as a point (native ℓ2 norm, test rounded accuracy), colour = log10 of the
    relative ridge coefficient α_rel (:func:`countlens.probes.penalty_unit`); black stars = the
    unregularised probes, one per split seed."""
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    rel = np.concatenate([np.asarray(s.alpha_rel, dtype=np.float64) for s in result.seeds])
    norms = np.concatenate([np.asarray(s.coef_norm, dtype=np.float64) for s in result.seeds])
    acc = np.concatenate([np.asarray(s.heldout_rounded_acc, dtype=np.float64) for s in result.seeds])
    points = ax.scatter(norms, acc, c=np.log10(np.maximum(rel, 1e-300)), cmap="viridis", s=16, zorder=2)
    fig.colorbar(points, ax=ax).set_label(ALPHA_REL_LABEL, fontsize=7)
    ax.scatter([s.unregularised_norm for s in result.seeds], [s.unregularised_acc for s in result.seeds],
               marker="*", s=140, color="black", zorder=3,
               label=r"unregularised ($\alpha = 0$, min-norm least squares)")
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide when the norms span under a decade
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"native $\ell_2$ norm of the probe, $\|w\|_2$ (activation coordinates)")
    ax.set_ylabel("test rounded exact accuracy\n(every α, no selection)")
    ax.set_title(f"Regularisation–norm trade-off {location_label(result.location)} ({result.location})", fontsize=9)
    ax.legend(fontsize=7, loc="best")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


def plot_running_count(result: RunningCountResult):
    """Figure 10: heatmaps of location (rows; 0 = embeddings, ℓ = after block ℓ) × relative position in the
    list (columns: buckets of item k / (n + m), then the boundary), one row of panels per target (the running
    count, the final count n read at the same rows): test R², test rounded accuracy (with the majority
    baseline as the bottom row) and selectivity (accuracy − the control task's), each the mean over split
    seeds of probes fitted per cell, split by prompt. Empty cells had too few rows for a split."""
    locs = result.locations
    buckets = result.buckets
    names = [location_label(loc.name) for loc in locs]
    columns = [b.label for b in buckets]
    panels = (("r2", "test R²"), ("test_rounded_acc", "test rounded accuracy"), ("selectivity", "selectivity"))
    control = all(f.selectivity is not None for loc in locs for c in loc.cells for f in c.fits)
    panels = panels if control else panels[:2]
    height = 1.2 + 0.28 * (len(locs) + 1)
    fig, axes = plt.subplots(len(RUNNING_TARGETS), len(panels), squeeze=False,
                             figsize=(3.6 * len(panels) + 0.6, 2 * height + 0.6))
    cmap = plt.get_cmap("viridis").with_extremes(under="lightgrey", bad="white")  # grey: R² below 0
    for row, target in enumerate(RUNNING_TARGETS):
        for col, (key, label) in enumerate(panels):
            ax = axes[row][col]
            grid = np.array([[loc.cell(target, b.index).stat(key)[0] for b in buckets] for loc in locs])  # (L, B+1)
            ylabels = list(names)
            if key == "test_rounded_acc":  # the majority baseline as a last row
                grid = np.vstack([grid, [[b.stat(target) for b in buckets]]])
                ylabels.append("majority baseline")
            lo = -1.0 if key == "selectivity" else 0.0
            image = ax.imshow(np.ma.masked_invalid(grid), aspect="auto", cmap="coolwarm" if key == "selectivity" else cmap,
                              vmin=lo, vmax=1.0, interpolation="nearest")
            if key == "test_rounded_acc":
                ax.axhline(len(locs) - 0.5, color="white", lw=2)
            ax.axvline(len(buckets) - 1.5, color="white", lw=2)  # the boundary column
            ax.set_xticks(range(len(columns)), columns, rotation=60, ha="right", fontsize=6)
            ax.set_yticks(range(len(ylabels)), ylabels, fontsize=6)
            ax.set_title(f"{TARGET_LABELS[target]}: {label}", fontsize=8)
            if row == len(RUNNING_TARGETS) - 1:
                ax.set_xlabel("relative position in the list, item k / (n + m)", fontsize=7)
            fig.colorbar(image, ax=ax, fraction=0.046, pad=0.02, extend="min" if key == "r2" else "neither")
    seeds = len(result.config.get("seeds") or [])
    sizes = result.config.get("split_prompts") or {}
    fig.suptitle("Figure 10: ridge probes at every item, per location and position (α selected on validation, "
                 f"scored on test; mean over {seeds} split seeds; prompts train/val/test {sizes.get('train')}/"
                 f"{sizes.get('validation')}/{sizes.get('test')}, split by prompt)", fontsize=8)
    fig.tight_layout()
    return fig


def draw_running_count(result: RunningCountResult, folder: str | os.PathLike) -> list[Path]:
    """``fig10_running_count.png/.pdf`` in ``folder``."""
    return save_figure(plot_running_count(result), Path(folder) / "fig10_running_count")


def draw_probes(result: ProbeResult, folder: str | os.PathLike, locations: list[str] | None = None) -> list[Path]:
    """``fig7_binned_accuracy.png/.pdf`` (``locations`` drawn, default the best) and
    ``probes_layerwise.png/.pdf`` in ``folder``."""
    folder = Path(folder)
    return [*save_figure(plot_binned_accuracy(result, locations), folder / "fig7_binned_accuracy"),
            *save_figure(plot_layerwise(result), folder / "probes_layerwise")]


def draw_sweep(result: SweepResult, folder: str | os.PathLike) -> list[Path]:
    """``fig8_norm_sweep.png/.pdf`` in ``folder``."""
    return save_figure(plot_norm_sweep(result), Path(folder) / "fig8_norm_sweep")


# ----------------------------------------------------------------------- report views

def _fractions(page: Page, rel: str, config: dict) -> str:
    """The split a result's ``config`` block records, as value spans (empty when it records none)."""
    if "fractions" not in config:
        return ""
    sizes = (f"; rows {page.v(rel, 'config', 'split_sizes', 'train')} / "
             f"{page.v(rel, 'config', 'split_sizes', 'validation')} / {page.v(rel, 'config', 'split_sizes', 'test')}"
             if "test" in (config.get("split_sizes") or {}) else "")
    return (f" (train / validation / test fractions {page.v(rel, 'config', 'fractions', 0)} / "
            f"{page.v(rel, 'config', 'fractions', 1)} / {page.v(rel, 'config', 'fractions', 2)}{sizes})")


def probe_view(page: Page, s: Section) -> None:
    """The report's part for a :class:`ProbeResult` (``s.result``): protocol, best location, every fit."""
    rel, result = s.rel, s.result
    cols = ("alpha", "val_rounded_acc", "test_rounded_acc", "r2", "coef_norm", "control_test_rounded_acc",
            "selectivity")
    rows = []
    for i, loc in enumerate(result.locations):
        for j in range(len(loc.fits)):
            fit = ("locations", i, "fits", j)
            rows.append([_location_span(page, rel, "locations", i), page.v(rel, *fit, "seed")]
                        + [page.v_or_dash(rel, *fit, c) for c in cols])
    page.caption(
        "Protocol: per location and split seed, every α of the grid is fitted on the training rows, α is "
        f"selected by validation rounded accuracy and the selected probe is scored on the test rows"
        f"{_fractions(page, rel, result.config)}. "
        f"The α grid: {page.values(rel, 'alphas', limit=3)}. Figure 7 bins the test accuracy by count.")
    if result.locations:
        index = result.locations.index(result.best_location())
        page.add(f"<p>Best location by validation accuracy: {_location_span(page, rel, 'locations', index)} "
                 f"({page.v(rel, 'best_location')}).</p>")
    page.add("<details><summary>Selected probe per location and split seed</summary>"
             + table(["location", "split seed", "α", "validation rounded accuracy", "test rounded accuracy", "R²",
                      "native norm", "control-task test accuracy", "selectivity"], rows) + "</details>")
    if result.behaviour is not None:
        page.add("<p>The model's own greedy answer (parsed by one rule: exactly one number in the answer, else "
                 f"unparsed, counted wrong) is exact on {page.v(rel, 'behaviour', 'accuracy')} of the prompts "
                 f"({page.v(rel, 'behaviour', 'parsed')} parse); Figure 7 draws it per count range beside the "
                 "probe. Selectivity is the probe's test accuracy minus that of the same probe family, with α "
                 "selected the same way, on the Hewitt–Liang control task (each count mapped to a fixed random "
                 "other count).</p>")
        _capacity_view(page, rel, result.behaviour)


def _capacity(page: Page, rel: str, behaviour, key: str) -> str:
    """A capacity in words: up to n = value, or below the smallest count, as spans."""
    if getattr(behaviour, key) is not None:
        return f"every count up to {page.v(rel, 'behaviour', key)}"
    if behaviour.capacity_from is not None:
        return f"not even the smallest count, {page.v(rel, 'behaviour', 'capacity_from')}"
    return "no count of at least one (none was captured)"


def _capacity_view(page: Page, rel: str, behaviour) -> None:
    """The report's sentences on the model's counting capacity and its answer distribution."""
    text = ("<p>Counting capacity (the largest count n such that at every captured count from the smallest "
            "count of at least one up to n, at least half of the prompts are answered right): by the greedy "
            f"answer, {_capacity(page, rel, behaviour, 'capacity')}")
    if behaviour.distribution:
        text += (f"; by the teacher-forced answer distribution (the correct count is the most likely of the "
                 f"candidate counts), {_capacity(page, rel, behaviour, 'rank1_capacity')}. Over all prompts the "
                 f"correct count is the most likely candidate on {page.v(rel, 'behaviour', 'rank1')} of them, and "
                 f"the expected count Σ k p(k) is off by {page.v(rel, 'behaviour', 'expected_mae')} on average. "
                 "Figure 7's middle panel draws the expected count and the correct count's mean rank per count "
                 "range: on a model whose greedy answer is one number for every prompt they still show whether "
                 "its answer distribution moves with the count")
    page.add(text + ".</p>")


def sweep_view(page: Page, s: Section) -> None:
    """The report's caption for a :class:`SweepResult` (``s.result``)."""
    rel = s.rel
    page.caption(
        f"At {page.v(rel, 'location')}, one probe per α of the grid: its native Euclidean norm (in the "
        "activations' own coordinates) against its rounded accuracy on the held-out test rows, with no "
        f"selection{_fractions(page, rel, s.result.config)}. Colour is the relative ridge coefficient (α over the "
        "mean eigenvalue of the training design's Gram matrix); black stars are the unregularised "
        "(minimum-norm least-squares) probes, one per split seed.")


def running_count_view(page: Page, s: Section) -> None:
    """The report's part for a :class:`RunningCountResult` (``s.result``): protocol, the best location by
    validation, and per location the test R² of both targets over the items and at the boundary."""
    rel, result = s.rel, s.result
    page.caption(
        "Protocol: the capture holds, per prompt, the residual at every item and at the boundary. Rows of one "
        "prompt stay in one split (train / validation / test prompts "
        f"{page.v(rel, 'config', 'split_prompts', 'train')} / {page.v(rel, 'config', 'split_prompts', 'validation')} / "
        f"{page.v(rel, 'config', 'split_prompts', 'test')}). Item k of a prompt with n + m items is at relative "
        f"position k / (n + m), in {page.v(rel, 'config', 'position_buckets')} buckets; the boundary is one more "
        "column. Per location, bucket and split seed, ridge probes are fitted as in Figure 7 (α selected on "
        "validation, scored on test) for the running count (targets among the items so far) and for the final "
        "count n read at the same rows. Figure 10's bottom row of the accuracy panels is the majority baseline "
        "(the most frequent training label); selectivity is accuracy minus the Hewitt–Liang control task's.")
    if not result.locations:
        return
    best = result.locations.index(result.best_location())
    page.add(f"<p>Best location for the running count by validation accuracy over the items: "
             f"{_location_span(page, rel, 'locations', best)} ({page.v(rel, 'best_location', 'running_count')}). "
             "A residual that counts as it reads holds the running count at every position with R² near one, "
             "and the final count only as far as the count so far predicts it; a location that reads the final "
             "count well before the last item is reading something else (the list's length, say).</p>")
    boundary = result.buckets[-1].index
    rows = []
    for i, loc in enumerate(result.locations):
        cells = {(c.target, c.bucket): j for j, c in enumerate(loc.cells)}
        rows.append([_location_span(page, rel, "locations", i)]
                    + [page.v_or_dash(rel, "locations", i, "items_mean", t, k)
                       for t in RUNNING_TARGETS for k in ("r2", "test_rounded_acc")]
                    + [page.v_or_dash(rel, "locations", i, "cells", cells[t, boundary], "r2_mean") for t in RUNNING_TARGETS])
    page.add("<details><summary>Per location: test scores over the items (mean over buckets and seeds) and at "
             "the boundary</summary>"
             + table(["location", "running count R² (items)", "running count accuracy (items)",
                      "final count R² (items)", "final count accuracy (items)", "running count R² (boundary)",
                      "final count R² (boundary)"], rows) + "</details>")
    baseline = [[page.v(rel, "buckets", j, "label"),
                 page.v_or_dash(rel, "buckets", j, "rows"),
                 page.v_or_dash(rel, "buckets", j, "baseline_mean", "running_count", "majority_test_rounded_acc"),
                 page.v_or_dash(rel, "buckets", j, "baseline_mean", "n", "majority_test_rounded_acc")]
                for j in range(len(result.buckets))]
    page.add("<details><summary>Per position bucket: rows and the majority baseline</summary>"
             + table(["relative position", "rows", "majority accuracy, running count", "majority accuracy, final count"],
                     baseline) + "</details>")


__all__ = ["plot_binned_accuracy", "plot_layerwise", "plot_norm_sweep", "plot_running_count", "draw_probes", "draw_sweep",
           "draw_running_count", "capacity_text", "location_number", "probe_view", "sweep_view", "running_count_view"]
