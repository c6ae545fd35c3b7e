"""Figure 9b, steering at the boundary: ``plot_steering(result)`` and ``draw_steering(result, folder)`` redraw
it from the result's JSON (``SteeringResult.read``); ``steering_view`` is its report view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.steering.experiment import SteeringResult

STEERING_STYLES = {"probe": dict(marker="o", color="C0"), "mean-diff": dict(marker="^", color="C1"),
                   "random": dict(marker="s", color="grey")}


def _values(rows, key) -> np.ndarray:
    return np.array([np.nan if r[key] is None else r[key] for r in rows], dtype=np.float64)


def _got(rows, key) -> np.ndarray:
    """Like :func:`_values`, NaN where a row lacks ``key`` (a result written before the key existed)."""
    return np.array([np.nan if r.get(key) is None else r[key] for r in rows], dtype=np.float64)


def steering_units_label(result: SteeringResult) -> str:
    """The x-axis label of Figure 9b: which units Δ is in, and how long a unit step is."""
    per = result.step_per_unit
    if result.units == "count":
        return f"Δ (count units: ‖step‖ = Δ·‖v‖, ‖v‖ = {per:.3g})" if per else "Δ (count units)"
    return f"Δ (probe read-out units: step Δ·w/‖w‖², ‖w‖ = {result.probe_norm:.3g})"


def plot_steering(result: SteeringResult):
    """Figure 9b: against the step Δ, for each direction (the probe, the mean-difference direction, the random
    control of the same norm), the mean shift of the model's greedy answer (left), of its expected count
    Σ k p(k) (middle) and of log p("n + Δ") (right). The dashed line is Δ itself: what the probe reads
    (read-out units) or Δ more items (count units)."""
    fig, axes = plt.subplots(1, 3, figsize=(12.0, 3.8))
    panels = (("mean_shift", "mean shift of the greedy answer"), ("mean_expected_shift", "mean shift of Σ k p(k)"),
              ("mean_logp_target_shift", "mean shift of log p(n + Δ) [nats]"))
    for ax, (key, label) in zip(axes, panels, strict=True):
        for name, curve in result.curves.items():
            if curve and key in curve[0]:
                ax.plot(_values(curve, "delta"), _values(curve, key), ms=4, label=f"{name} direction",
                        **STEERING_STYLES.get(name, {}))
        if key != "mean_logp_target_shift":
            deltas = _values(next(iter(result.curves.values()), []), "delta")
            ax.plot(deltas, deltas, ls="--", color="black", lw=0.8,
                    label="Δ more items" if result.units == "count" else "probe read-out (= Δ)")
        ax.axhline(0, color="grey", lw=0.6)
        ax.set_xlabel(steering_units_label(result), fontsize=8)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    widest = max((c.get("mean_relative_norm") or 0.0 for curve in result.curves.values() for c in curve), default=0.0)
    fig.suptitle(f"Steering at {result.location}: the largest step is {widest:.3g} of the boundary vector's norm",
                 fontsize=10)
    fig.tight_layout()
    return fig


def draw_steering(result: SteeringResult, folder: str | Path) -> list[Path]:
    """``fig9b_steering.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_steering(result), Path(folder) / "fig9b_steering")  # save_figure closes it


def steering_view(page: Page, s: Section) -> None:
    """Figure 9b's caption and per-step table; ``s.result`` is the :class:`SteeringResult` (its values are
    shown from its JSON)."""
    result: SteeringResult = s.result
    rel = s.rel
    if result.units == "count":
        units = ("In count units, every direction is scaled so that a step of Δ is Δ·‖v‖ long, v the "
                 "mean-difference direction (the least-squares slope of the count centroids on n, norm "
                 f"{page.v(rel, 'mean_diff_norm')}): as far as Δ more items move the boundary vector on average.")
    else:
        units = ("In the probe's read-out units, the step is Δ·w/‖w‖² along the validation-selected ridge probe w "
                 f"(native norm {page.v(rel, 'probe_norm')}), so the probe's read-out moves by exactly Δ; where "
                 "‖w‖ is large these steps are tiny (see the step's share of the boundary vector's norm below).")
    page.caption(
        f"At {page.v(rel, 'location')}, a step is added to the boundary vector and the forward continues. {units} "
        "The grey line is a random direction of the same norm. Each panel is a mean over the steered prompts: the "
        "shift of the greedy answer, of the expected count Σ k p(k) over the candidate counts (all answer tokens "
        "teacher-forced) and of log p(n + Δ). The model's clean accuracy on these prompts: "
        f"{page.v(rel, 'clean_accuracy')}; its mean expected count: {page.v_or_dash(rel, 'clean_expected')}.")
    keys = ("mean_shift", "mean_expected_shift", "mean_logp_target_shift", "mean_relative_norm", "readout_shift",
            "parsed")
    rows = [[page.k(rel, "curves", name), page.v(rel, "curves", name, j, "delta")]
            + [page.v_or_dash(rel, "curves", name, j, k) for k in keys]
            for name, curve in result.curves.items() for j in range(len(curve))]
    page.add("<details><summary>Per direction and step</summary>" + table(
        ["direction", "Δ", "greedy answer shift", "expected count shift", "shift of log p(n + Δ), nats",
         "‖step‖ / ‖boundary vector‖", "probe read-out shift", "answers parsed"], rows, left=1) + "</details>")


__all__ = ['steering_units_label', 'plot_steering', 'draw_steering', 'steering_view']
