"""Where the answer goes wrong: ``plot_diagnosis(result)`` and ``draw_diagnosis(result, folder)`` redraw from
``diagnosis.json``; at the bottom, its view in the report page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.diagnosis.experiment import DiagnosisResult

FIGURE_STEM = "diagnosis"
CAVEAT = ("What each read-out can show: a lens rank says where the correct count is linearly readable as the "
          "answer token, not that the model uses it there; direct logit attribution is linear with the final "
          "norm's scale frozen at the real run, so a component that writes nothing directly can still matter "
          "through later ones; the ablation replaces a write by its mean over the prompt set and measures the "
          "whole effect, direct and indirect, on the few prompts ablated.")


def plot_diagnosis(result: DiagnosisResult):
    """Left: per relative depth, the mean rank of the correct count (solid) and of the model's own first answer
    token (dashed) under the logit and the tuned lens (log scale; 1 = read first). Right: the top pushing
    components' mean direct contribution to the correct-vs-answer logit difference (nats, bars with std) and,
    where ablated, the shift of the expected count (dots, right axis)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.0))
    depth = [r["depth"] for r in result.locations]
    for lens, colour in (("logit", "tab:blue"), ("tuned", "tab:orange")):
        left.plot(depth, [r[f"{lens}_rank"] for r in result.locations], "-o", ms=2.5, color=colour,
                  label=f"{lens} lens: correct count")
        left.plot(depth, [np.nan if r[f"{lens}_answer_rank"] is None else r[f"{lens}_answer_rank"]
                          for r in result.locations], "--", color=colour, label=f"{lens} lens: model's answer")
    if result.best:
        left.axvline(result.best["depth"], color="0.5", lw=0.8, ls=":")
    left.set(xlabel="relative depth (location / blocks)", ylabel="mean rank among the candidates", xlim=(0, 1),
             title="where the count is read")
    left.set_yscale("log")
    left.legend(fontsize=7)
    names = [_short(p) for p in result.pushers]
    x = np.arange(len(names))
    right.bar(x, [p["mean"] for p in result.pushers], yerr=[p["std"] for p in result.pushers], color="tab:red",
              error_kw={"lw": 0.6}, label="direct contribution")
    right.axhline(0, color="0.6", lw=0.8)
    right.set_xticks(x, names, rotation=30, fontsize=8)
    right.set(ylabel="correct − answer logit difference (nats)", title="components pushing toward the answer")
    shifts = [np.nan if p["expected_shift"] is None else p["expected_shift"] for p in result.pushers]
    if np.isfinite(shifts).any():
        twin = right.twinx()
        twin.plot(x, shifts, "ko", ms=4, label="ablated: expected count shift")
        twin.axhline(0, color="0.8", lw=0.6, ls=":")
        twin.set_ylabel("expected count shift when ablated")
        twin.legend(fontsize=7, loc="lower right")
    right.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return fig


def _short(p) -> str:
    what = {"attn": "attn", "mlp": "MLP"}.get(p["kind"], f"H{p['head']}")
    return f"L{p['layer'] + 1} {what}"


def draw_diagnosis(result: DiagnosisResult, folder: str | Path) -> list[Path]:
    """Save :func:`plot_diagnosis` as ``diagnosis.png`` and ``.pdf`` in ``folder``."""
    fig = plot_diagnosis(result)
    return save_figure(fig, Path(folder) / FIGURE_STEM)


def diagnosis_view(page: Page, s: Section) -> None:
    """The diagnosis in the report: where the count is read best, the verdict with its ablation, the pushing
    components and the caveats; ``s.result`` is the :class:`DiagnosisResult`."""
    result: DiagnosisResult = s.result
    rel = s.rel
    if result.best:
        page.add(f"<p>The correct count is read best at {page.v(rel, 'best', 'location')} (fraction of depth "
                 f"{page.v(rel, 'best', 'depth')}) by the {page.v(rel, 'best', 'lens')} lens, mean rank "
                 f"{page.v(rel, 'best', 'rank')}; the model's own read-out ranks it "
                 f"{page.v_or_dash(rel, 'model_rank')}.</p>")
    if result.culprit:
        page.add(f"<p><b>{page.v(rel, 'verdict')}</b>: ablating it shifts the expected count by "
                 f"{page.v(rel, 'culprit', 'expected_shift')} where the clean run's mean error is "
                 f"{page.v(rel, 'mean_error')} (shown when at least {page.v(rel, 'shown')} of the error is undone, "
                 "in its direction).</p>")
    else:
        page.add(f"<p><b>{page.v(rel, 'verdict')}</b> (mean error of the ablated prompts "
                 f"{page.v_or_dash(rel, 'mean_error')}; shown would need at least {page.v(rel, 'shown')} of it "
                 "undone).</p>")
    rows = [[page.v(rel, "pushers", i, "kind"), page.v(rel, "pushers", i, "layer"),
             page.v_or_dash(rel, "pushers", i, "head"), page.v(rel, "pushers", i, "mean"),
             page.v(rel, "pushers", i, "std"), page.v_or_dash(rel, "pushers", i, "expected_shift"),
             page.v_or_dash(rel, "pushers", i, "normalised_ld")] for i, p in enumerate(result.pushers)]
    page.add(table(["component", "block (from zero)", "head", "direct contribution (mean, nats)", "std",
                    "expected count shift when ablated", "normalised logit difference when ablated"], rows))
    page.caption("Components ordered by their mean direct contribution to the correct count's first token "
                 "against the model's own greedy first token: the most negative push the answer away from the "
                 "correct count. " + CAVEAT)


__all__ = ["plot_diagnosis", "draw_diagnosis", "diagnosis_view"]
