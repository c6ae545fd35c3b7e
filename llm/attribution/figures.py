"""Figure 15, attribution patching against activation patching: ``plot_attribution(result)`` and
``draw_attribution(result, folder)`` redraw from ``attribution.json`` (``AttributionResult.read``); at the bottom,
its view in the report page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.attribution.experiment import AttributionResult

ATTRIBUTION_CAPTION = ("AtP is the first-order estimate at the patched run's base: exact where the metric is "
                       "linear in the activation, off where a patch saturates a softmax or later components undo "
                       "it. Cells whose two activations are equal are exact zeros on both sides and left out.")


def plot_attribution(result: AttributionResult):
    """Figure 15: per group of cells (residual positions, attention/MLP writes, heads; panels), AtP's estimate
    (y) against activation patching's change (x) of the logit difference in nats (attention and MLP writes, and
    heads at the boundary and at every position, in their own colours), the line y = x, Spearman's ρ and the
    top-k overlap in each title; trivial cells are not drawn."""
    from countlens.llm.attribution.experiment import GROUP_LABELS, GROUPS

    fig, axes = plt.subplots(1, len(GROUPS), figsize=(4.2 * len(GROUPS), 4.0), squeeze=False)
    for ax, group in zip(axes[0], GROUPS, strict=True):
        atp, act = result.values(group)
        a = result.agreement.get(group, {})
        for label, colour, chosen in _series(result, group):
            ax.scatter([c["act"] for c in chosen], [c["atp"] for c in chosen], s=8, alpha=0.6, color=colour,
                       label=label)
        if atp.size:
            low, high = float(min(act.min(), atp.min())), float(max(act.max(), atp.max()))
            pad = 0.05 * (high - low or 1.0)
            ax.plot([low - pad, high + pad], [low - pad, high + pad], color="black", lw=0.7, label="y = x")
            ax.legend(fontsize=7)
        rho = "n/a" if a.get("spearman") is None else f"{a['spearman']:.2f}"
        overlap = "n/a" if a.get("top_k_overlap") is None else f"{a['top_k_overlap']:.2f}"
        ratio = "n/a" if a.get("speed_ratio") is None else f"{a['speed_ratio']:.1f}x"
        ax.set_title(f"{GROUP_LABELS[group]}\nρ {rho}, top-{a.get('top_k', 0)} overlap {overlap}, {ratio} faster",
                     fontsize=8)
        ax.set_xlabel("activation patching: ΔLD (nats)")
        ax.set_ylabel("AtP estimate: ΔLD (nats)")
        ax.axhline(0.0, color="0.7", lw=0.5)
        ax.axvline(0.0, color="0.7", lw=0.5)
        ax.grid(alpha=0.3)
    fig.suptitle(f"Figure 15: attribution patching against activation patching ({result.model}, "
                 f"{result.direction})", fontsize=10)
    fig.text(0.5, 0.005, ATTRIBUTION_CAPTION, ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.05, 1, 0.95))
    return fig


def _series(result: AttributionResult, group: str) -> list[tuple[str, str, list]]:
    """The non-trivial cells of ``group`` split for colour: the residual's cells, attention vs MLP writes, heads
    at the boundary vs at every position."""
    from countlens.llm.attribution.experiment import GROUP_OF

    cells = [c for c in result.cells if GROUP_OF[c["kind"]] == group and not c["trivial"]]
    if group == "resid":
        return [("location x position", "tab:blue", cells)]
    if group == "component":
        return [(kind, colour, [c for c in cells if c["kind"] == kind])
                for kind, colour in (("attn", "tab:blue"), ("mlp", "tab:orange"))]
    return [("at the boundary", "tab:green", [c for c in cells if c["position"] is not None]),
            ("every position", "tab:purple", [c for c in cells if c["position"] is None])]


def draw_attribution(result: AttributionResult, folder: str | Path) -> list[Path]:
    """``fig15_attribution.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_attribution(result), Path(folder) / "fig15_attribution")


# ----------------------------------------------------------------------- report view

def attribution_view(page: Page, s: Section) -> None:
    """Figure 15's caption and, per group of cells, the agreement and the speed ratio; ``s.result`` is the
    :class:`AttributionResult`."""
    from countlens.llm.attribution.experiment import GROUP_LABELS, GROUPS

    rel = s.rel
    page.caption(
        "Each clean prompt has a twin with one target turned into the distractor; a patch writes one run's "
        f"activation into the other run (direction: {page.v(rel, 'direction')}) and changes the logit difference "
        "between the count and one fewer, every answer token teacher-forced. Attribution patching estimates every "
        "patch at once from one forward and one backward per pair, as the activation difference times the "
        "metric's gradient at the patched run; the same run patches every cell. Per group of cells: Spearman's "
        "rank correlation and the overlap of the cells each method ranks highest, over the cells whose two "
        "activations differ, and how many times longer activation patching took than the whole AtP pass "
        f"(AtP: {page.v(rel, 'atp_seconds')} s, activation patching: {page.v(rel, 'act_seconds')} s). "
        + ATTRIBUTION_CAPTION)
    rows = [[GROUP_LABELS[g], page.v(rel, "agreement", g, "cells"), page.v(rel, "agreement", g, "trivial"),
             page.v_or_dash(rel, "agreement", g, "spearman"), page.v(rel, "agreement", g, "top_k"),
             page.v_or_dash(rel, "agreement", g, "top_k_overlap"), page.v_or_dash(rel, "agreement", g, "max_abs_error"),
             page.v_or_dash(rel, "agreement", g, "speed_ratio")] for g in GROUPS]
    page.add(table(["cells", "compared", "trivial", "Spearman ρ", "k", "top-k overlap", "largest error (nats)",
                    "speed ratio"], rows))


__all__ = ["ATTRIBUTION_CAPTION", "plot_attribution", "draw_attribution", "attribution_view"]
