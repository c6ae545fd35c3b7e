"""One plotting function per probe figure; each takes a result object and returns a matplotlib figure, so a
figure can be redrawn from its JSON (``ProbeResult.from_dict`` / ``SweepResult.from_dict``).
:func:`draw_probes` and :func:`draw_sweep` save a result's figure files."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator, NullFormatter

from countlens.core.io import save_figure
from countlens.core.locations import location_label
from countlens.core.report import Page, Section, location_cell, table
from countlens.probes.experiments import ProbeResult, SweepResult

# Figure 8's colour, defined where it is drawn (countlens.probes.penalty_unit).
ALPHA_REL_LABEL = (r"$\log_{10}\,\alpha_{\mathrm{rel}}$, relative ridge coefficient" "\n"
                   r"$\alpha_{\mathrm{rel}} = \alpha\,d\,/\,\|Z_c\|_F^2$ (mean eigenvalue of $Z_c^\top Z_c$)")


def plot_binned_accuracy(result: ProbeResult, locations: list[str] | None = None):
    """Figure 7: test rounded exact accuracy of the validation-selected probe per ten-count range; line = mean
    over split seeds, shading = min–max. One line per location (default: the run's ``figure_locations``,
    else the best by validation accuracy). With the model's own answers in the capture, a black dashed line
    gives its zero-shot exact accuracy per range (all rows); with the control task, a right panel gives the
    selectivity per location (test accuracy on the counts − on the control labels)."""
    locations = locations or result.config.get("figure_locations")
    chosen = [loc for loc in result.locations if loc.name in locations] if locations else [result.best_location()]
    control = bool(result.locations) and all(f.selectivity is not None for loc in result.locations for f in loc.fits)
    if control:
        fig, (ax, right) = plt.subplots(1, 2, figsize=(10.4, 3.8), gridspec_kw={"width_ratios": [3, 2]})
    else:
        fig, ax = plt.subplots(figsize=(6.4, 3.8))
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


def _plot_selectivity(ax, result: ProbeResult) -> None:
    """Per location: the probe's test accuracy, the control task's, and their difference (selectivity)."""
    idx = np.array([loc.index for loc in result.locations])
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
    idx = np.array([loc.index for loc in result.locations])
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
            rows.append([location_cell(page, rel, "locations", i), page.v(rel, *fit, "seed")]
                        + [page.v_or_dash(rel, *fit, c) for c in cols])
    page.caption(
        "Protocol: per location and split seed, every α of the grid is fitted on the training rows, α is "
        f"selected by validation rounded accuracy and the selected probe is scored on the test rows"
        f"{_fractions(page, rel, result.config)}. "
        f"The α grid: {page.values(rel, 'alphas', limit=3)}. Figure 7 bins the test accuracy by count.")
    if result.locations:
        index = result.locations.index(result.best_location())
        page.add(f"<p>Best location by validation accuracy: {location_cell(page, rel, 'locations', index)} "
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


def sweep_view(page: Page, s: Section) -> None:
    """The report's caption for a :class:`SweepResult` (``s.result``)."""
    rel = s.rel
    page.caption(
        f"At {page.v(rel, 'location')}, one probe per α of the grid: its native Euclidean norm (in the "
        "activations' own coordinates) against its rounded accuracy on the held-out test rows, with no "
        f"selection{_fractions(page, rel, s.result.config)}. Colour is the relative ridge coefficient (α over the "
        "mean eigenvalue of the training design's Gram matrix); black stars are the unregularised "
        "(minimum-norm least-squares) probes, one per split seed.")


__all__ = ["plot_binned_accuracy", "plot_layerwise", "plot_norm_sweep", "draw_probes", "draw_sweep", "probe_view",
           "sweep_view"]
