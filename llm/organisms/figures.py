"""The organism's figure (its training curve and its held-out accuracy per count) and its report view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.organisms.experiment import OrganismResult


def plot_organism(result: OrganismResult):
    """Left: training loss (nats per answer token) and held-out teacher-forced accuracy against the step;
    right: countlens's greedy accuracy on the held-out prompts of each count."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    steps = [c["step"] for c in result.curve]
    a.plot(steps, [c["loss"] for c in result.curve], color="tab:blue", label="training loss")
    a.set_xlabel("step")
    a.set_ylabel("loss (nats / answer token)", color="tab:blue")
    a.set_yscale("log")
    twin = a.twinx()
    twin.plot(steps, [c["held_out_accuracy"] for c in result.curve], color="tab:orange", label="held-out accuracy")
    twin.set_ylim(0, 1.02)
    twin.set_ylabel("held-out accuracy", color="tab:orange")
    b.bar([r["n"] for r in result.held_out], [r["accuracy"] for r in result.held_out], color="tab:green")
    b.axhline(result.config.get("target_accuracy", 0.99), color="k", lw=0.8, ls="--")
    b.set_ylim(0, 1.02)
    b.set_xlabel("count n")
    b.set_ylabel("greedy accuracy (held out)")
    fig.suptitle(f"organism: {result.n_layers} blocks x {result.n_heads} heads, width {result.d}, "
                 f"L = {result.config['L']}")
    fig.tight_layout()
    return fig


def draw_organism(result: OrganismResult, folder: str | Path) -> list[Path]:
    """``organism.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_organism(result), Path(folder) / "organism")


def organism_view(page: Page, s: Section) -> None:
    """The organism's shape, training and held-out accuracy; ``s.result`` is the :class:`OrganismResult`."""
    rel = s.rel
    page.caption(
        "A model organism: a stock Llama chat model (the embedded model's tokenizer and chat template) trained by "
        "countlens on its own counting prompts, the loss on the answer tokens only, until its greedy answers are "
        "right on held-out prompts (other seeds) of every count. Heads not listed as live have their output "
        "projection held at exactly zero, so only the live heads move information between positions: a circuit "
        "known by construction, against which `countlens organism check` tests the read-outs.")
    header = ["blocks", "heads", "width", "MLP width", "live heads", "steps", "converged", "held-out accuracy",
              "largest parameter norm", "training (s)"]
    row = [page.v(rel, "n_layers"), page.v(rel, "n_heads"), page.v(rel, "d"), page.v(rel, "mlp_width"),
           page.values(rel, "live_heads"), page.v(rel, "steps"), page.v(rel, "converged"),
           page.v(rel, "held_out_accuracy"), page.v(rel, "largest_parameter_norm"), page.v(rel, "train_seconds")]
    page.add(table(header, [row], left=0))


def checks_view(page: Page, s: Section) -> None:
    """One row per ground-truth check; ``s.result`` is the :class:`~countlens.llm.organisms.checks.OrganismChecks`."""
    rel = s.rel
    page.caption(
        "Each check runs a countlens experiment on the organism's held-out prompts and holds one number to what "
        "the planted circuit guarantees (countlens.llm.organisms.checks says why each bound holds by "
        "construction); a failed check is a defect of the read-out, or an organism that did not learn.")
    rows = [[page.v(rel, "checks", i, "name"), page.v(rel, "checks", i, "value"), page.v(rel, "checks", i, "holds"),
             page.v(rel, "checks", i, "bound"), page.v(rel, "checks", i, "passed"), page.v(rel, "checks", i, "detail")]
            for i in range(len(s.result.checks))]
    page.add(table(["check", "value", "must be", "bound", "passed", "on"], rows))


__all__ = ["plot_organism", "draw_organism", "organism_view", "checks_view"]
