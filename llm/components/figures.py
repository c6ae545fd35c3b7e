"""Figure 14, which component writes the answer: ``plot_components(result)`` and ``draw_components(result,
folder)`` redraw from ``components.json`` (``ComponentsResult.read``); at the bottom, its view in the report
page."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.components.experiment import ComponentsResult

COMPONENTS_CAPTION = ("Direct logit attribution is linear at the real run: each write is read through the final "
                      "norm with its scale frozen there. A component that writes nothing directly can still matter "
                      "through later ones.")
_TARGET_TITLES = {"answer": "correct count vs the model's answer (first tokens)",
                  "previous": "n vs the count below it (first tokens)"}


def plot_components(result: ComponentsResult):
    """Figure 14: per target logit difference (rows), the direct contribution of each block's attention and MLP
    write (mean over prompts, bars the std; left) and the heads with the largest mean contribution (right), in
    nats; a dashed line marks the mean real logit difference."""
    targets = [t for t in ("answer", "previous") if t in result.summary]
    fig, axes = plt.subplots(max(1, len(targets)), 2, figsize=(11.0, 3.4 * max(1, len(targets))), squeeze=False)
    for row, target in enumerate(targets):
        s = result.summary[target]
        ax = axes[row, 0]
        layers = np.array([r["layer"] for r in s["layers"]])
        for offset, kind, colour in ((-0.2, "attn", "tab:blue"), (0.2, "mlp", "tab:orange")):
            ax.bar(layers + offset, [r[f"{kind}_mean"] for r in s["layers"]], width=0.4, color=colour,
                   yerr=[r[f"{kind}_std"] for r in s["layers"]], error_kw={"lw": 0.6}, label=kind)
        if s.get("embed_mean") is not None:
            ax.bar([-1], [s["embed_mean"]], width=0.4, color="0.5", label="embed")
        ax.axhline(0.0, color="black", lw=0.5)
        ax.axhline(s["total_mean"], color="tab:red", ls="--", lw=0.8, label="real logit difference (mean)")
        ax.set_xlabel("block (layer); −1 = the embeddings")
        ax.set_ylabel("direct contribution (nats)")
        ax.set_title(f"{_TARGET_TITLES[target]}: {s['prompts']} prompts", fontsize=9)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
        ax = axes[row, 1]
        heads = s["heads"]
        if heads:
            y = np.arange(len(heads))[::-1]
            ax.barh(y, [h["mean"] for h in heads], xerr=[h["std"] for h in heads], color="tab:green",
                    error_kw={"lw": 0.6})
            ax.set_yticks(y, [f"L{h['layer']}H{h['head']}" for h in heads], fontsize=7)
            ax.axvline(0.0, color="black", lw=0.5)
        ax.set_xlabel("direct contribution (nats)")
        ax.set_title("heads with the largest mean contribution", fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(f"Figure 14: which component writes the answer ({result.model})", fontsize=10)
    fig.text(0.5, 0.005, COMPONENTS_CAPTION, ha="center", fontsize=7, wrap=True)
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    return fig


def draw_components(result: ComponentsResult, folder: str | Path) -> list[Path]:
    """``fig14_components.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_components(result), Path(folder) / "fig14_components")  # save_figure closes it


# ----------------------------------------------------------------------- report view

def components_view(page: Page, s: Section) -> None:
    """Figure 14's caption and, per logit difference, the blocks and heads that write it most directly;
    ``s.result`` is the :class:`ComponentsResult`."""
    result: ComponentsResult = s.result
    rel = s.rel
    page.caption(
        "The last block's output at the boundary is the embeddings plus every block's attention and MLP write; "
        "each write, and each head's share of its block's attention write, is read through the final norm (its "
        "scale frozen at the real residual) and the unembedding, and scored on two logit differences of the "
        "boundary's next token: the correct count's first token against the model's own greedy first token "
        "(zero on a prompt the model answers right), and n's against the count below it. The writes and the read-out's "
        "constant sum to the model's own logit difference. " + COMPONENTS_CAPTION)
    for target, summary in result.summary.items():
        layers = sorted(range(len(summary["layers"])), key=lambda b: -max(abs(summary["layers"][b]["attn_mean"]),
                                                                          abs(summary["layers"][b]["mlp_mean"])))[:5]
        rows = [[page.v(rel, "summary", target, "layers", b, "layer")]
                + [page.v(rel, "summary", target, "layers", b, k) for k in ("attn_mean", "attn_std", "mlp_mean",
                                                                            "mlp_std")] for b in layers]
        heads = [[f"L{page.v(rel, 'summary', target, 'heads', i, 'layer')}"
                  f"H{page.v(rel, 'summary', target, 'heads', i, 'head')}",
                  page.v(rel, "summary", target, "heads", i, "mean"), page.v(rel, "summary", target, "heads", i, "std")]
                 for i in range(min(5, len(summary["heads"])))]
        page.add(f"<p>{_TARGET_TITLES[target]}: mean real logit difference "
                 f"{page.v(rel, 'summary', target, 'total_mean')} nats over "
                 f"{page.v(rel, 'summary', target, 'prompts')} prompts; the embeddings write "
                 f"{page.v_or_dash(rel, 'summary', target, 'embed_mean')}.</p>"
                 + table(["block", "attention (mean)", "attention (std)", "MLP (mean)", "MLP (std)"], rows)
                 + table(["head", "mean", "std"], heads))


__all__ = ["plot_components", "draw_components", "components_view"]
