"""Figure 13: lenses at the boundary, and how the count directions line up with the number tokens'
unembedding. ``plot_lens(result)`` / ``draw_lens(result, folder)`` redraw from ``lens.json``
(``LensResult.read``); :func:`lens_view` is the result's view in the report page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, location_cell, table

if TYPE_CHECKING:
    from countlens.llm.lens.experiment import LensResult

LENS_STYLES = {"logit": dict(color="C0", marker="o", label="logit lens"),
               "tuned": dict(color="C2", marker="s", label="tuned lens")}
DIRECTION_STYLES = {"probe": dict(color="C0", marker="o"), "mean-diff": dict(color="C1", marker="^")}


def _get(entry, *keys) -> float:
    for k in keys:
        if entry is None:
            return np.nan
        entry = entry.get(k)
    return np.nan if entry is None else float(entry)


def plot_lens(result: LensResult):
    """Figure 13: per location, (a) log p(the correct count's first token) and (b) the correlation of the
    expected count with the true count, through the logit lens and the tuned lens (dotted: the model's own
    read-out); (c) the largest |cos| between a count direction and the number tokens' unembedding rows
    (solid: raw rows; dotted: through the final norm), the grey band the random directions' median
    to 95th percentile of the largest |cos|."""
    locs = result.locations
    idx = np.array([loc["index"] for loc in locs])
    fig, axes = plt.subplots(1, 3, figsize=(13.0, 3.9))
    for ax, key, label in ((axes[0], "logprob", "log p(correct first token) [nats]"),
                           (axes[1], "expected_corr", "corr(expected count, n)")):
        for lens, style in LENS_STYLES.items():
            ax.plot(idx, [_get(loc, lens, key) for loc in locs], ms=3, **style)
        own = result.model_readout.get(key)
        if own is not None:
            ax.axhline(own, color="black", ls=":", lw=1, label="the model's own")
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    ax = axes[2]
    for rows, ls in (("raw", "-"), ("folded", ":")):
        lo = [_get(loc, "angles", "random", rows, "max_p50") for loc in locs]
        hi = [_get(loc, "angles", "random", rows, "max_p95") for loc in locs]
        if rows == "raw":
            ax.fill_between(idx, lo, hi, color="grey", alpha=0.25, label="random (median–95th pct.)")
        for name, style in DIRECTION_STYLES.items():
            values = [_get(loc, "angles", name, rows, "max_abs") for loc in locs]
            if np.all(np.isnan(values)):
                continue
            ax.plot(idx, values, ls=ls, ms=3, label=f"{name} ({'raw rows' if rows == 'raw' else 'through the norm'})",
                    **style)
    ax.set_ylabel("largest |cos| with a number token's row")
    ax.legend(fontsize=6)
    for a in axes:
        a.set_xlabel("location (0 = embeddings, ℓ = after block ℓ)")
        a.grid(alpha=0.3)
    split = result.split
    fig.suptitle(f"Lenses at the boundary: {split.get('n_test')} test prompts (tuned lens fitted on "
                 f"{split.get('n_train')}); {len(result.number_tokens)} number tokens", fontsize=10)
    fig.tight_layout()
    return fig


def draw_lens(result: LensResult, folder: str | Path) -> list[Path]:
    """``fig13_lens.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_lens(result), Path(folder) / "fig13_lens")  # save_figure closes it


# ----------------------------------------------------------------------- report view

def lens_view(page: Page, s: Section) -> None:
    """Figure 13's caption and per-location table; ``s.result`` is the :class:`LensResult`."""
    result: LensResult = s.result
    rel = s.rel
    page.caption(
        "Each location's boundary vector is read as if it were the last block's output: through the model's own "
        "final norm and unembedding (the logit lens), and through a tuned lens, an affine map to the last location "
        "fitted by ridge on the training prompts (α chosen on the validation prompts by how closely the lens "
        "reproduces the model's own answer-start distribution). Scored on "
        f"{page.v(rel, 'split', 'n_test')} test prompts: the log-probability of the correct count's first token, "
        "its rank among the candidates' first tokens, and the correlation of the expected count over the "
        f"single-token candidates with the true count. The model's own read-out: log p "
        f"{page.v_or_dash(rel, 'model_readout', 'logprob')}, correlation "
        f"{page.v_or_dash(rel, 'model_readout', 'expected_corr')}. The boundary's next token says only how the "
        "answer starts: in a vocabulary that writes numbers digit by digit it reads the first digit. The count "
        "directions (the ridge probe, and the mean-difference direction: the slope of the count centroids on n) "
        "are compared with the number tokens' unembedding rows; random directions give the baseline, and the "
        "share of random directions at least as aligned is shown beside each.")
    keys = [("logit", "logprob"), ("tuned", "logprob"), ("logit", "rank"), ("tuned", "rank"),
            ("logit", "expected_corr"), ("tuned", "expected_corr"), ("tuned", "alpha_rel")]
    rows = []
    for i in range(len(result.locations)):
        cells = [location_cell(page, rel, "locations", i)] + [page.v_or_dash(rel, "locations", i, *k) for k in keys]
        for name in ("probe", "mean-diff"):
            cells += [page.v_or_dash(rel, "locations", i, "angles", name, "raw", "max_abs"),
                      page.v_or_dash(rel, "locations", i, "angles", name, "raw", "beyond_random")]
        cells.append(page.v_or_dash(rel, "locations", i, "angles", "random", "raw", "max_p95"))
        rows.append(cells)
    page.add("<details><summary>Per location</summary>" + table(
        ["location", "log p, logit lens", "log p, tuned lens", "rank, logit lens", "rank, tuned lens",
         "corr(expected, n), logit lens", "corr(expected, n), tuned lens", "tuned lens α (relative)",
         "probe: largest |cos|", "probe: share of random at least as aligned", "mean-diff: largest |cos|",
         "mean-diff: share of random at least as aligned", "random: largest |cos| a twentieth of random directions exceed"], rows)
        + "</details>")


__all__ = ["plot_lens", "draw_lens", "lens_view"]
