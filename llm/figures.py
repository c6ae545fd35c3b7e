"""Figure 9: does the model use what the probe reads? One ``plot_...(result)`` per panel and ``draw_...`` to
save it; both redraw from the result's JSON (``PatchingResult.read`` / ``SteeringResult.read``). At the
bottom, each result's view in the report page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, location_cell, table

if TYPE_CHECKING:
    from countlens.llm.experiments import PatchingResult, SteeringResult

PATCHING_CAPTION = ("Only the boundary position is patched: later blocks can still re-read the items, so a "
                    "location where the answer follows the source is where the count is committed.")


def _values(rows, key) -> np.ndarray:
    return np.array([np.nan if r[key] is None else r[key] for r in rows], dtype=np.float64)


def plot_patching(result: PatchingResult):
    """Figure 9a: per location, the fraction of patched answers that move to the source count and the mean
    relative shift (left), and the change of the correct answer's log-probability (right)."""
    locs = result.locations
    idx = np.array([loc["index"] for loc in locs])
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.6))
    left.plot(idx, _values(locs, "moved_to_source"), marker="o", ms=3, label="answer = source count")
    left.plot(idx, _values(locs, "mean_relative_shift"), marker="s", ms=3,
              label="mean shift / (n_s − n_t)")
    left.axhline(0, color="grey", lw=0.8)
    left.set_ylabel("fraction / relative shift")
    left.legend(fontsize=7)
    right.plot(idx, _values(locs, "logprob_change"), marker="o", ms=3, color="C3")
    right.axhline(0, color="grey", lw=0.8)
    right.set_ylabel("Δ log p(correct answer) [nats]")
    for ax in (left, right):
        ax.set_xlabel("patched location (0 = embeddings, ℓ = after block ℓ)")
        ax.grid(alpha=0.3)
    n_pairs = len(result.rows) // max(1, len(locs))
    fig.suptitle(f"Boundary activation patching, {n_pairs} prompt pairs (clean accuracy "
                 f"{result.clean_accuracy:.2f})", fontsize=10)
    fig.text(0.5, 0.01, PATCHING_CAPTION, ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return fig


def plot_steering(result: SteeringResult):
    """Figure 9b: the model's mean answer shift against the step Δ along the probe (the probe's read-out moves
    by exactly Δ, dashed), and along a random direction of the same norm (the control)."""
    fig, ax = plt.subplots(figsize=(5.6, 4.0))
    for name, style in (("probe", dict(marker="o", color="C0")), ("random", dict(marker="s", color="grey"))):
        curve = result.curves.get(name) or []
        ax.plot(_values(curve, "delta"), _values(curve, "mean_shift"), ms=4, label=f"{name} direction", **style)
    deltas = _values(result.curves.get("probe") or [], "delta")
    if deltas.size:
        ax.plot(deltas, deltas, ls="--", color="black", lw=0.8, label="probe read-out (= Δ)")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("Δ (probe read-out shift)")
    ax.set_ylabel("mean shift of the model's answer")
    ax.set_title(f"Steering at {result.location} (‖w‖ = {result.probe_norm:.3g})", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def draw_patching(result: PatchingResult, folder: str | Path) -> list[Path]:
    """``fig9a_patching.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_patching(result), Path(folder) / "fig9a_patching")  # save_figure closes it


def draw_steering(result: SteeringResult, folder: str | Path) -> list[Path]:
    """``fig9b_steering.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_steering(result), Path(folder) / "fig9b_steering")  # save_figure closes it


# ----------------------------------------------------------------------- report views

def patching_view(page: Page, s: Section) -> None:
    """Figure 9a's caption and per-location table; ``s.result`` is the :class:`PatchingResult`."""
    result: PatchingResult = s.result
    rel = s.rel
    rows = [[location_cell(page, rel, "locations", i)]
            + [page.v_or_dash(rel, "locations", i, k) for k in ("moved_to_source", "mean_shift", "mean_relative_shift",
                                                              "logprob_change", "parsed")]
            for i in range(len(result.locations))]
    page.caption(
        "Each target prompt's boundary vector at one location is replaced by that of a prompt differing only in "
        "count (same seed, wording and token pair), and the forward continues. Only the boundary position is "
        "patched, so later blocks can still re-read the items: where answers follow the source is where the "
        f"count is committed. The model's clean accuracy on the targets: {page.v(rel, 'clean_accuracy')}.")
    page.add("<details><summary>Per location</summary>" + table(
        ["location", "answers moved to the source", "mean answer shift", "shift / (source − target)",
         "change of log p(correct), nats", "answers parsed"], rows) + "</details>")


def steering_view(page: Page, s: Section) -> None:
    """Figure 9b's caption; ``s.result`` is the :class:`SteeringResult` (its values are shown from its JSON)."""
    rel = s.rel
    page.caption(
        f"At {page.v(rel, 'location')}, Δ·w/‖w‖² along the validation-selected ridge probe "
        f"w (native norm {page.v(rel, 'probe_norm')}) is added to the boundary vector, so the probe's read-out "
        "moves by exactly Δ; the grey line is a random direction of the same norm. The curve is the model's mean "
        f"answer shift; its clean accuracy on these prompts: {page.v(rel, 'clean_accuracy')}.")
