"""The organism's figure (its training curve and its held-out accuracy per count) and its report view."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, table

if TYPE_CHECKING:
    from countlens.llm.organisms.experiment import OrganismResult
    from countlens.llm.organisms.scaling import ScalingResult


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


def plot_scaling(result: ScalingResult):
    """Toy ↔ organism ↔ LLM. (a) Norms against L (log-log): each organism's largest parameter-vector norm
    (its B; a cross where it stayed below its target accuracy), its class vectors' largest norm and its
    exact-rounding probe norm per seed; the toy variant's regression B_min and its classifier construction's
    largest vector and class vectors; the LLM's probe norm at its largest count. (b) Figure 2c's smallest
    winning gap over the counts against L: the organisms' in logits (left axis; a negative gap is a prompt
    whose argmax over the counts is wrong), the toy classifier's in its scores (right axis, log). (c) Figure 5's
    gap and effective-rank ratios against L (organisms per seed, the LLM as a point). (d) Figure 6's PCA of the
    count centroids of the largest-L organism of the first seed and of the LLM (each scaled to its largest
    |coordinate|). (e) The count manifold's shape match against L (:func:`_plot_manifold`)."""
    fig, (a, g, b, c, m) = plt.subplots(1, 5, figsize=(23.5, 4.2))
    organisms = result.organisms()
    seeds = sorted({r["seed"] for r in organisms})
    for i, seed in enumerate(seeds):
        mine = sorted((r for r in organisms if r["seed"] == seed), key=lambda r: r["L"])
        first_miss = not any(not r["converged"] for r in organisms if r["seed"] in seeds[:i])
        _plot_seed(a, g, b, mine, first=i == 0, first_miss=first_miss)
    _plot_toy(a, g, result)
    _plot_llm(a, b, result)
    _label_norms(a, result)
    _label_gaps(g, result)
    _label_ratios(b)
    _plot_pca(fig, c, result)
    _plot_manifold(m, result)
    fig.suptitle(f"toy ↔ organism ↔ LLM ({result.norm_placement.split(':')[0]})")
    fig.tight_layout()
    return fig


def _plot_seed(a, g, b, mine: list[dict], first: bool, first_miss: bool) -> None:
    """One seed's organisms ``mine`` (sorted by L): their norms on ``a``, smallest logit gaps on ``g``, gap and
    effective-rank ratios on ``b``; labelled on the ``first`` seed (the crosses on the first seed with one)."""
    Ls = [r["L"] for r in mine]
    a.plot(Ls, [r["largest_parameter_norm"] for r in mine], "o-", color="tab:blue", alpha=0.8,
           label="organism B" if first else None)
    a.plot(Ls, [r["probe_norm"] if r["probe_norm"] is not None else float("nan") for r in mine], "s--",
           color="tab:green", alpha=0.8, label="organism probe norm (exact)" if first else None)
    if any(r.get("class_vector_norm") is not None for r in mine):
        a.plot(Ls, [r.get("class_vector_norm") or float("nan") for r in mine], "v:", color="tab:cyan",
               alpha=0.8, label="organism class vectors (answer rows)" if first else None)
        g.plot(Ls, [float("nan") if r.get("min_logit_gap") is None else r["min_logit_gap"] for r in mine],
               "o-", color="tab:blue", alpha=0.8, label="organism (logits)" if first else None)
    missed = [r for r in mine if not r["converged"]]
    a.plot([r["L"] for r in missed], [r["largest_parameter_norm"] for r in missed], "x", color="tab:red", ms=10,
           label="below target accuracy (not fitted)" if missed and first_miss else None)
    b.plot(Ls, [r["gap_ratio"] for r in mine], "o-", color="tab:purple", alpha=0.8,
           label="organism gap ratio" if first else None)
    b.plot(Ls, [r["erank_ratio"] for r in mine], "s--", color="tab:red", alpha=0.8,
           label="organism effective-rank ratio" if first else None)


def _plot_toy(a, g, result: ScalingResult) -> None:
    """The toy variant's rows: its regression B_min and classifier construction's norms on ``a``, the
    classifier's smallest score gap on a log axis to the right of ``g``."""
    toy = sorted((r for r in result.rows if r["kind"] == "toy"), key=lambda r: r["L"])
    a.plot([r["L"] for r in toy], [r["largest_parameter_norm"] for r in toy], "k^-",
           label=f"toy {result.toy_variant} regression B_min")
    classifier = sorted((r for r in result.rows if r["kind"] == "toy-classification"), key=lambda r: r["L"])
    if not classifier:
        return
    Ls = [r["L"] for r in classifier]
    a.plot(Ls, [r["largest_parameter_norm"] for r in classifier], "ks--", mfc="none",
           label="toy classifier construction: largest vector")
    a.plot(Ls, [r["class_vector_norm"] for r in classifier], "k:", label="toy classifier: class vectors")
    twin = g.twinx()
    twin.plot(Ls, [r["min_logit_gap"] for r in classifier], "s--", color="tab:gray", mfc="none",
              label="toy classifier (scores)")
    twin.set_yscale("log")
    twin.set_ylabel("toy classifier's smallest score gap")
    twin.legend(fontsize=7, loc="upper right")


def _plot_llm(a, b, result: ScalingResult) -> None:
    """The LLM column as points: its probe norm on ``a``, its gap and effective-rank ratios on ``b``."""
    for r in (r for r in result.rows if r["kind"] == "llm"):
        if r["probe_norm"] is not None:
            a.plot([r["L"]], [r["probe_norm"]], "D", color="tab:orange", label="LLM probe norm (exact)")
        b.plot([r["L"]], [r["gap_ratio"]], "D", color="tab:orange", label="LLM gap ratio")
        b.plot([r["L"]], [r["erank_ratio"]], "d", color="tab:brown", label="LLM effective-rank ratio")


def _label_norms(a, result: ScalingResult) -> None:
    """Panel (a)'s log-log axes, its title of the rates, its legend."""
    a.set_xscale("log")
    a.set_yscale("log")
    a.set_xlabel("L (largest count)")
    a.set_ylabel("norm")
    rate = result.rates["organism_norm"]
    a.set_title(f"B slope {_num(rate['mean'])} ± {_num(rate['std'])}; toy regression {_num(result.rates['toy'])}, "
                f"classifier {_num(result.rates.get('toy_classification'))}; paper {result.rates['paper_text']}",
                fontsize=9)
    a.legend(fontsize=7)


def _label_gaps(g, result: ScalingResult) -> None:
    """Panel (b)'s zero line, axes, title of the gap slopes and legend (where it drew something)."""
    g.axhline(0.0, color="tab:blue", lw=0.6, ls=":")
    g.set_xscale("log")
    g.set_xlabel("L (largest count)")
    g.set_ylabel("organism's smallest winning logit gap")
    gap = result.rates.get("organism_gap", {"mean": None})["mean"]
    toy_gap = result.rates.get("toy_classification_gap")
    g.set_title(f"gap slope: organisms {_num(gap)}; toy classifier {_num(toy_gap)}", fontsize=9)
    if g.get_legend_handles_labels()[0]:
        g.legend(fontsize=7, loc="upper left")


def _label_ratios(b) -> None:
    """Panel (c)'s line at ratio 1, axes and legend."""
    b.axhline(1.0, color="k", lw=0.6, ls=":")
    b.set_xscale("log")
    b.set_xlabel("L (largest count)")
    b.set_ylabel("ratio (high window / low window)")
    b.legend(fontsize=7)


def _plot_pca(fig, c, result: ScalingResult) -> None:
    """Panel (d): the PCA of the count centroids of the largest-L organism of the first seed and of the LLM,
    each scaled to its largest |coordinate|, coloured by count."""
    largest = max((r["L"] for r in result.organisms()), default=None)
    shown = [p for p in result.pca if p["kind"] == "organism" and p["label"].startswith(f"organism L={largest} ")][:1] \
        + [p for p in result.pca if p["kind"] == "llm"]
    for p, marker in zip(shown, ("o", "D"), strict=False):
        xy = np.asarray(p["coords"], dtype=np.float64)
        scale = np.abs(xy).max() or 1.0
        points = c.scatter(xy[:, 0] / scale, xy[:, 1] / scale, c=p["counts"], cmap="viridis", marker=marker, s=18,
                           label=p["label"])
    if shown:
        fig.colorbar(points, ax=c, label="count n")
        c.legend(fontsize=7)
    c.set_xlabel("PC1 (scaled)")
    c.set_ylabel("PC2 (scaled)")


def _plot_manifold(m, result: ScalingResult) -> None:
    """Panel (e): per seed against L, each organism's count-manifold Procrustes distance (0 = congruent, at
    most 2) to its nearest toy variant (``manifold_procrustes``, its name written beside the point:
    ``manifold_nearest``) and to the toy variant it is built like (``manifold_procrustes_toy``); a red ring
    round a point whose shape stands below its floor (``manifold_above_floor`` false)."""
    organisms = [r for r in result.organisms() if r.get("manifold_procrustes") is not None]
    for i, seed in enumerate(sorted({r["seed"] for r in organisms})):
        mine = sorted((r for r in organisms if r["seed"] == seed), key=lambda r: r["L"])
        Ls = [r["L"] for r in mine]
        m.plot(Ls, [_nan(r["manifold_procrustes"]) for r in mine], "o-", color="tab:blue", alpha=0.8,
               label="organism: to its nearest toy variant" if i == 0 else None)
        m.plot(Ls, [_nan(r["manifold_procrustes_toy"]) for r in mine], "s--", color="tab:gray", alpha=0.8,
               label=f"organism: to {result.toy_variant}" if i == 0 else None)
        for r in mine:
            m.annotate(r["manifold_nearest"] or "none", (r["L"], _nan(r["manifold_procrustes"])), fontsize=6,
                       xytext=(3, 3), textcoords="offset points")
    below = [r for r in organisms if r.get("manifold_above_floor") is False]
    m.plot([r["L"] for r in below], [_nan(r["manifold_procrustes"]) for r in below], "o", mfc="none",
           color="tab:red", ms=11, label="shape below its floor" if below else None)
    m.set_xscale("log")
    m.set_xlabel("L (largest count)")
    m.set_ylabel("Procrustes distance (0 = congruent)")
    m.set_title("count manifold: nearest toy shape", fontsize=9)
    if m.get_legend_handles_labels()[0]:
        m.legend(fontsize=7)


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def _num(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def draw_scaling(result: ScalingResult, folder: str | Path) -> list[Path]:
    """``organism_scaling.png`` / ``.pdf`` in ``folder``."""
    return save_figure(plot_scaling(result), Path(folder) / "organism_scaling")


def scaling_view(page: Page, s: Section) -> None:
    """The toy ↔ organism ↔ LLM table and rates; ``s.result`` is the :class:`ScalingResult`."""
    rel = s.rel
    page.caption(
        "Organisms as close to the toy as a stock architecture allows: one block of one attention head, no MLP, "
        "Llama's norm placement (" + page.v(rel, "norm_placement") + "), trained at each L and seed. Beside them "
        "the toy variant with the same placement (" + page.v(rel, "toy_variant") + "), its smallest per-vector "
        "norm that counts exactly, and, where a capture is given, an LLM. Geometry is at the boundary after the "
        "block; the probe norm is the smallest native norm on a ridge path whose probe rounds every validation "
        "row right. An organism's norm counts every parameter vector, its untrained token embeddings and norm "
        "gains too, and training finds a solution, not the cheapest: the toy's value is a floor. Where no ridge "
        "fit rounds every validation row (a dash), the probe's best test accuracy says how close a linear read-out "
        "comes: after one attention block the residual holds the count divided by the softmax's denominator, so a "
        "linear read-out of the count is curved, while the organism's own answer, an argmax, does not see that "
        "denominator. The head's target excess (as in the heads figure, at the boundary, averaged over the prompts) is zero "
        "where the head spreads its attention evenly over the items, so that the count is carried by the value "
        "vectors, and positive where it prefers the targets. The count manifold's columns (as the manifold "
        "stage measures it) name the toy variant whose boundary curve lies nearest the organism's centroid curve "
        "in shape, its Procrustes distance (zero: congruent), the distance to the toy variant the organism is "
        "built like, and whether two halves of the prompts agree on the shape better than shuffled counts do.")
    keys = ["kind", "L", "seed", "converged", "held_out_accuracy", "held_out_min_count", "largest_parameter_norm",
            "probe_norm", "probe_best_acc", "target_excess", "gap_ratio", "erank_ratio", "endpoint_angle",
            "manifold_nearest", "manifold_procrustes", "manifold_procrustes_toy", "manifold_above_floor"]
    header = ["source", "L", "seed", "converged", "held-out accuracy", "lowest per-count accuracy",
              "largest parameter norm (B)",
              "probe norm (exact)", "probe's best test rounded accuracy", "head's target excess", "gap ratio", "effective-rank ratio", "endpoint angle (rad)",
              "nearest toy shape (count manifold)", "its Procrustes distance",
              "Procrustes distance to the toy variant", "shape above its floor"]

    def cell(*keys) -> str:  # a value span, or a dash where the value is absent or null
        return page.v(rel, *keys) if page.get(rel, *keys) is not None else "—"
    rows = [[cell("rows", i, k) for k in keys] for i in range(len(s.result.rows))]
    page.add(table(header, rows, left=1))
    page.caption(_readout_caption(s.result))
    readout = ["kind", "L", "seed", "largest_parameter_norm", "b_vector", "b_parameter", "b_row",
               "class_vector_norm", "min_logit_gap", "min_gap_count", "argmax_accuracy"]
    shown = [i for i, r in enumerate(s.result.rows) if r["kind"] in ("organism", "toy", "toy-classification")]
    page.add(table(["source", "L", "seed", "B (largest vector norm)", "B is", "parameter", "row",
                    "largest class vector", "smallest winning gap", "at count", "argmax over the counts right"],
                   [[cell("rows", i, k) for k in readout] for i in shown], left=(0, 4, 5)))

    def rate(key: str) -> list[str]:
        if not page.get(rel, "rates", key):  # an older result without this rate
            return ["—", "—"]
        return [cell("rates", key, "mean"), cell("rates", key, "std")]

    def toy(key: str) -> list[str]:
        return [cell("rates", key), "—"]
    page.add(table(["rate (log-log slope against L)", "mean over seeds", "std over seeds"],
                   [["organism B", *rate("organism_norm")],
                    ["organism probe norm", *rate("organism_probe_norm")],
                    ["organism largest class vector", *rate("organism_class_vector_norm")],
                    ["organism smallest winning logit gap", *rate("organism_gap")],
                    ["toy regression B_min", *toy("toy")],
                    ["toy classifier: largest vector", *toy("toy_classification")],
                    ["toy classifier: largest class vector", *toy("toy_classification_class_vector_norm")],
                    ["toy classifier: smallest winning score gap", *toy("toy_classification_gap")],
                    ["paper's claimed rate (regression)", cell("rates", "paper_text"), "—"]], left=1))


def _readout_caption(result: ScalingResult) -> str:
    """Which toy row each organism's norm scaling matches, and why (words only: the numbers are the tables')."""
    organisms = result.organisms()
    gain = [r for r in organisms if (r.get("b_parameter") or "").endswith("model.norm.weight")]
    head = (
        "Like with like. The organisms answer every count with one token, one class per count from zero to L: a "
        "classification read-out, so "
        "the like-for-like toy row is the classification one (toy-classification: the toy's classifier "
        "construction in the same variant, every vector at most one at every L), not the regression row whose "
        "B_min carries the paper's stated rate. The regression read-out is one vector that must tell neighbouring "
        "counts apart in a representation that compresses them; a classifier has a class vector per count, and "
        "the toy shows its cost moving out of the norms into the smallest winning score gap, which shrinks with "
        "L. The smallest winning gap is the paper's classifier quantity: per count the correct answer's score "
        "(the organism's logit) minus the best other count's, least over the prompts, then least over the "
        "counts; a negative one is a prompt whose argmax over the counts is wrong (its share is the last "
        "column). Logits and the toy's unit-norm scores are in different units: compare their trends in L. ")
    if organisms and len(gain) == len(organisms):
        return head + (
            "Every organism here attains its B with its final RMSNorm's gain, the one vector that multiplies every "
            "logit, its class vectors (the answers' unembedding rows) well below it: the organism's form of the one "
            "positive factor that the toy's classifier divides all its scores by to keep every vector at most one "
            "(a factor that moves no argmax, only the gap). Trained by cross-entropy "
            "until its held-out answers are right, with no bound on any norm, an organism's smallest winning gap is "
            "wherever training stopped (near zero, negative where a captured prompt is wrong: the last column), "
            "while the gain that sets the size of every logit gap grows with L instead of staying at most one. So "
            "each organism's scaling matches the classification row with the cost moved back "
            "into a norm: its B is the price of a held logit gap, and its slope is to be read beside the "
            "classifier's gap slope, not as a measurement of the regression row's rate, however close the two "
            "numbers are. The toy's own classifier trained the same way (cross-entropy, no cap: the trained points "
            "of the toy's read-out figure) grows its vectors with L too.")
    return head + (
        "An organism whose B is its final RMSNorm's gain pays for its logit gap in the scale of its read-out (the "
        "classification row's cost moved into a norm); one whose B is a token's row or a projection's pays in a "
        "vector that the classifier construction holds at most one, so its B says where its training went, and "
        "the regression row is still not its like.")


__all__ = ["plot_organism", "draw_organism", "organism_view", "plot_scaling", "draw_scaling",
           "scaling_view"]
