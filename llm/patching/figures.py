"""Figure 9a, boundary activation patching: ``plot_patching(result)`` and ``draw_patching(result, folder)``
redraw it from the result's JSON (``PatchingResult.read``); ``patching_view`` is its report view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, location_cell, table

if TYPE_CHECKING:
    from countlens.llm.patching.experiment import PatchingResult

PATCHING_CAPTION = ("Only the boundary position is patched: later blocks can still re-read the items, so a "
                    "location where the answer follows the source is where the count is committed.")


def _values(rows, key) -> np.ndarray:
    return np.array([np.nan if r[key] is None else r[key] for r in rows], dtype=np.float64)


def _got(rows, key) -> np.ndarray:
    """Like :func:`_values`, NaN where a row lacks ``key`` (a result written before the key existed)."""
    return np.array([np.nan if r.get(key) is None else r[key] for r in rows], dtype=np.float64)


def plot_patching(result: PatchingResult):
    """Figure 9a: per location, the movement toward the source count on a common scale (0 = the target's
    answer, 1 = the source's; left): the fraction of greedy answers equal to the source count, the mean greedy
    shift and the mean expected-count shift over ``n_s − n_t``, and the normalised logit difference; and the
    changes of log p(correct answer) and log p(source count) in nats (right)."""
    locs = result.locations
    idx = np.array([loc["index"] for loc in locs])
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.4, 3.8))
    for key, label, marker in (("moved_to_source", "greedy answer = source count", "o"),
                               ("mean_relative_shift", "greedy shift / (n_s − n_t)", "s"),
                               ("expected_relative_shift", "expected-count shift / (n_s − n_t)", "^"),
                               ("normalised_ld", "normalised LD, log p(n_s) − log p(n_t)", "D")):
        values = _got(locs, key)
        if np.isfinite(values).any():
            left.plot(idx, values, marker=marker, ms=3, label=label)
    left.axhline(0, color="grey", lw=0.8)
    left.axhline(1, color="grey", lw=0.6, ls=":")
    left.set_ylabel("toward the source (0 = target, 1 = source)")
    left.legend(fontsize=7)
    right.plot(idx, _got(locs, "logprob_change"), marker="o", ms=3, color="C3", label="log p(correct = n_t)")
    source = _got(locs, "logp_source_change")
    if np.isfinite(source).any():
        right.plot(idx, source, marker="s", ms=3, color="C2", label="log p(source count n_s)")
    right.axhline(0, color="grey", lw=0.8)
    right.set_ylabel("change after patching [nats]")
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.set_xlabel("patched location (0 = embeddings, ℓ = after block ℓ)")
        ax.grid(alpha=0.3)
    n_pairs = len(result.rows) // max(1, len(locs))
    skipped = f"; {result.n_unnormalised} too close to normalise" if result.n_unnormalised else ""
    fig.suptitle(f"Boundary activation patching, {n_pairs} prompt pairs{skipped} (clean accuracy "
                 f"{result.clean_accuracy:.2f})", fontsize=10)
    fig.text(0.5, 0.01, PATCHING_CAPTION, ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def draw_patching(result: PatchingResult, folder: str | Path) -> list[Path]:
    """``fig9a_patching.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_patching(result), Path(folder) / "fig9a_patching")  # save_figure closes it


PATCHING_COLUMNS = (("moved_to_source", "answers moved to the source"), ("mean_shift", "mean answer shift"),
                    ("mean_relative_shift", "shift / (source − target)"),
                    ("logprob_change", "change of log p(correct), nats"),
                    ("normalised_ld", "normalised logit difference"),
                    ("expected_shift", "expected count shift"),
                    ("expected_relative_shift", "expected shift / (source − target)"),
                    ("logp_source_change", "change of log p(source count), nats"), ("parsed", "answers parsed"))


def patching_view(page: Page, s: Section) -> None:
    """Figure 9a's caption and per-location table; ``s.result`` is the :class:`PatchingResult`."""
    result: PatchingResult = s.result
    rel = s.rel
    rows = [[location_cell(page, rel, "locations", i)]
            + [page.v_or_dash(rel, "locations", i, k) for k, _ in PATCHING_COLUMNS]
            for i in range(len(result.locations))]
    scored = page.has(rel, "clean_expected") and result.clean_expected is not None
    scores = (
        " Beside the greedy answer, which a weak model leaves unchanged, every candidate count is teacher-forced "
        "(all its answer tokens): the normalised logit difference between the source and the target count is "
        "zero for the target's own run and one for the source's, and the expected count is the mean of the "
        "candidates under the model's distribution over them (on the targets, before patching: "
        f"{page.v(rel, 'clean_expected')}). Pairs whose two logit differences are too close to normalise: "
        f"{page.v(rel, 'n_unnormalised')}." if scored else "")
    page.caption(
        "Each target prompt's boundary vector at one location is replaced by that of a prompt differing only in "
        "count (same seed, wording and token pair), and the forward continues. Only the boundary position is "
        "patched, so later blocks can still re-read the items: where answers follow the source is where the "
        f"count is committed. The model's clean accuracy on the targets: {page.v(rel, 'clean_accuracy')}." + scores)
    page.add("<details><summary>Per location</summary>" + table(
        ["location", *(label for _, label in PATCHING_COLUMNS)], rows) + "</details>")


__all__ = ['plot_patching', 'draw_patching', 'patching_view']
