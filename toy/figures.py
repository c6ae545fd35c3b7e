"""Figures 1–4, each drawn from its experiment's result alone (no recomputation).

``plot_figureN(result)`` takes the result of :mod:`countlens.toy.experiments` (or its JSON dict) and returns a
matplotlib Figure; ``draw_figureN(result, folder)`` saves it as ``figureN.png`` and ``figureN.pdf`` there and
returns the paths. At the bottom, the report views of the toy's stages: ``x_view(page, section)`` shows the
typed result ``section.result`` on the report page, every value a span of its JSON file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from countlens.core.io import save_figure
from countlens.core.report import Page, Section, finite, table
from countlens.toy.check import n_pairs
from countlens.toy.experiments import Figure4Config

_HEADS = {"regression": ("tab:blue", "regression"), "classification": ("tab:red", "classification")}


def _as_dict(result: Any) -> dict[str, Any]:
    return result if isinstance(result, dict) else result.to_dict()


def plot_figure1(result: Any) -> plt.Figure:
    """Boundary representations ``h(n, 0)``, four panels: (a) linear attention, equally spaced points on a
    ray; (b) softmax, compressed along the segment from ``z_b`` toward ``z_s``; (c) post-LN, the centred
    numerator mapped onto an arc of the sphere of radius sqrt(d); (d) bare pre-LN, a segment whose endpoints
    ``z_b, z_s`` lie on that sphere. Open circles mark the limiting endpoints (``n -> infinity``)."""
    r = _as_dict(result)
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.2))
    for ax, panel in zip(axes, r["panels"], strict=True):
        pts = np.asarray(panel["points"])
        if panel["sphere_radius"] is not None:
            t = np.linspace(0, 2 * np.pi, 400)
            ax.plot(panel["sphere_radius"] * np.cos(t), panel["sphere_radius"] * np.sin(t), ":", color="0.6", lw=1)
        sc = ax.scatter(pts[:, 0], pts[:, 1], c=np.arange(len(pts)), cmap="viridis", s=16, zorder=3)
        for lim in panel["limits"]:
            ax.scatter([lim[0]], [lim[1]], facecolors="none", edgecolors="k", s=60, zorder=4)
        ax.scatter([0], [0], marker="+", color="0.4")
        ax.set_title(panel["title"], fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel(f"$L$ = {panel['L']}, $B$ = {panel['max_norm']:.3g}", fontsize=8)
    fig.colorbar(sc, ax=axes, shrink=0.8, label="count $n$")
    fig.suptitle(f"Boundary representations $h(n, 0)$, $d$ = {r['d']}", fontsize=10)
    return fig


def _legend_below(ax: plt.Axes) -> None:
    """The axes' legend under it, outside the plotting area, so it hides no data point."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


def _panel_norms(ax: np.ndarray, r: dict[str, Any], runs: list[dict[str, Any]], cons: dict[str, Any]) -> None:
    """Panels (a) and (b) of Figure 2: the read-out norm and the arc angle against L, trained runs (points)
    and constructions (lines)."""
    names = {"regression": (r"$\|w\|$", r"$|b_0|$"), "classification": (r"$\max_k \|u_k\|$", r"$\max_k |c_k|$")}
    for head, (color, label) in _HEADS.items():
        mine = [x for x in runs if x["readout"] == head]
        if mine:
            vec, bias = names[head]
            ax[0].scatter([x["L"] for x in mine], [x["readout_norm"] for x in mine], color=color,
                          label=f"trained {label}: {vec}")
            ax[0].scatter([x["L"] for x in mine], [max(x["bias_norm"], 1e-12) for x in mine], color=color,
                          marker="x", label=f"trained {label}: {bias}")
            ax[1].scatter([x["L"] for x in mine], [x["arc_angle"] for x in mine], color=color, label=f"trained {label}")
    ax[0].plot(cons["L"], cons["max_norm"], "k:", label="classifier construction (largest vector, bounded)")
    reg = [(L, b) for L, b in zip(r["Ls"], r.get("regression_b_min") or [], strict=False) if b is not None]
    if reg:
        ax[0].plot(*zip(*reg, strict=True), color="gray", ls="--", label=r"regression construction $B_{\min}$")
    ax[0].set(xscale="log", yscale="log", xlabel="$L$", ylabel="norm", title="(a) read-out norm")
    ax[1].plot(cons["L"], cons["arc_angle"], "k:", label="classifier construction")
    ax[1].set(xscale="log", yscale="log", xlabel="$L$", ylabel="radians",
              title="(b) arc of $h(n, 0)$, $n = 0..L$")


def _panel_gaps(ax, r: dict[str, Any], runs: list[dict[str, Any]], cons: dict[str, Any]) -> None:
    """Panel (c) of Figure 2: the smallest winning gap per count, per L, of the first trained classifier and
    of the construction."""
    cmap = plt.get_cmap("viridis")
    Ls = sorted(set(r["Ls"]))
    for i, L in enumerate(Ls):
        color = cmap(i / max(1, len(Ls) - 1))
        mine = [x for x in runs if x["readout"] == "classification" and x["L"] == L and "min_gap" in x]
        for x in mine[:1]:
            g = np.asarray(x["min_gap"], dtype=float)
            ax.plot(np.arange(len(g)), np.maximum(g, 1e-300), color=color, label=f"trained, $L$ = {L}")
        if L in cons["L"]:
            g = np.asarray(cons["min_gap"][cons["L"].index(L)], dtype=float)
            ax.plot(np.arange(len(g)), np.maximum(g, 1e-300), ":", color=color, label=f"construction, $L$ = {L}")
    ax.set(yscale="log", xlabel="count $n$", ylabel="min over $m$ of winning gap", title="(c) winning score gap")


def _panel_lmax(ax, r: dict[str, Any]) -> None:
    """Panel (d) of Figure 2: L_max under caps B per variant, attained (trained) and constructed."""
    markers = iter("osD^v")
    for v, row in (r.get("lmax") or {}).items():
        m = next(markers, "o")
        B = row["B"]
        line = None
        if "attained" in row:
            line = ax.plot(B, [max(a, 0.5) for a in row["attained"]], marker=m,
                           label=f"{v} attained (trained; up to the grid's end)")[0]
        if "l_max" in row:  # None (not computed) and inf (no finite limit) are left out
            pts = [(b, float(x)) for b, x in zip(B, row["l_max"], strict=True)
                   if x is not None and np.isfinite(float(x))]
            if pts:
                ax.plot(*zip(*pts, strict=True), ":", marker=m, mfc="none",
                        color=line.get_color() if line else None, label=f"{v} constr.")
    ax.set(xscale="log", yscale="log", xlabel="cap $B$", ylabel=r"$L_{\max}$", title="(d) length within a budget")


def plot_figure2(result: Any) -> plt.Figure:
    """(a) read-out norm vs L per head; (b) arc angle of h(n, 0) vs L; (c) smallest winning gap per count;
    (d) L_max under caps B, attained (trained) and constructed. Panels a–c show passing runs only.

    Points are trained runs, lines constructions: the trained classifier's class vectors grow with L, the
    classifier construction's stay bounded (every vector <= 1 at every L). Legends sit below their panels.
    """
    r = _as_dict(result)
    runs = [x for x in r["runs"] if x.get("passed")]
    cons = r["construction"]
    fig, ax = plt.subplots(1, 4, figsize=(18, 5.6))
    _panel_norms(ax, r, runs, cons)
    _panel_gaps(ax[2], r, runs, cons)
    _panel_lmax(ax[3], r)
    for a in ax:
        _legend_below(a)
    fig.suptitle(f"{r['variant']}, $d$ = {r['d']}: regression vs classification read-out. Points: trained runs "
                 "that pass (the trained classifier's class vectors grow with $L$); lines: constructions (the "
                 "classifier construction's vectors stay bounded, $\\leq 1$)", fontsize=10)
    fig.tight_layout()
    return fig


def _plot_logs(ax: np.ndarray, r: dict[str, Any], curves: list[Any]) -> None:
    """One line per run on each axis: ``curves[i](log entry)`` against the step."""
    for run in r["runs"]:
        log = run["log"]
        if log:
            step = [e["step"] for e in log]
            for a, value in zip(ax, curves, strict=True):
                a.plot(step, [value(e) for e in log], label=run["label"])


def plot_figure3(result: Any) -> plt.Figure:
    """Per seed vs step: held-out exact accuracy, max norm / L^rate, score scale a / L², spacing ratio."""
    r = _as_dict(result)
    L, rate, score = r["L"], r["param_rate"], r["score_rate"]
    fig, ax = plt.subplots(1, 4, figsize=(18, 3.8))
    fig.suptitle(f"Figure 3: {r['variant']}, $d$ = {r['d']}, $L$ = {L}, L-BFGS, one line per seed")
    _plot_logs(ax, r, [lambda e: e["test_exact_accuracy"], lambda e: e["max_norm"] / L ** rate,
                       lambda e: np.exp(e["log_score_scale"] - score * np.log(L)), lambda e: e["spacing_ratio"]])
    ax[0].set(xlabel="step", ylabel="held-out exact accuracy", ylim=(0, 1.02))
    ax[1].set(xlabel="step", ylabel=f"max norm / $L^{{{rate:g}}}$", yscale="log")
    ax[2].set(xlabel="step", ylabel=f"score scale $a / L^{{{score:g}}}$", yscale="log")
    ax[3].set(xlabel="step", ylabel="adjacent spacing, high / low counts")
    ax[3].axhline(1.0, color="gray", lw=0.8)
    ax[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def figure4_caption(result: Any) -> str:
    """Figure 4's title: the L it ran at (and whether the quick preset reduced it from the paper's) and why
    the two runs take different numbers of updates."""
    r = _as_dict(result)
    L, paper_L = r["L"], Figure4Config.paper().L
    cfg = r.get("provenance", {}).get("config", {})
    reduced = f" (reduced from the paper's {paper_L} by the quick preset)" if L < paper_L else ""
    counts = "" if "steps" not in cfg else (f"Full-batch Adam: {cfg['steps']:,} updates; mini-batch Adam "
                                            f"(batch {cfg['batch_size']:,}): {cfg['minibatch_steps']:,}. ")
    return (f"Figure 4: {r['variant']}, $d$ = {r['d']}, $L$ = {L}{reduced}\n{counts}The mini-batch run gets more "
            f"updates, as in the paper: each of its updates sees one batch, a full-batch update all training pairs "
            f"(80% of the {n_pairs(L):,} pairs).")


def plot_figure4(result: Any) -> plt.Figure:
    """Full-batch vs mini-batch Adam vs update: training loss, held-out exact accuracy, full-domain worst error;
    the title is :func:`figure4_caption`."""
    r = _as_dict(result)
    fig, ax = plt.subplots(1, 3, figsize=(13.5, 4.2))
    fig.suptitle(figure4_caption(r), fontsize=9, wrap=True)
    _plot_logs(ax, r, [lambda e: e["loss"], lambda e: e["test_exact_accuracy"], lambda e: e["full_domain_worst_error"]])
    ax[0].set(xlabel="update", ylabel="training loss (MSE)", yscale="log")
    ax[1].set(xlabel="update", ylabel="held-out exact accuracy", ylim=(0, 1.02))
    ax[2].set(xlabel="update", ylabel="full-domain worst error", yscale="log")
    ax[2].axhline(0.5, color="gray", lw=0.8, ls="--", label="rounding threshold 1/2")
    for a in ax:
        a.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _draw(fig: plt.Figure, folder: str | Path, name: str) -> list[Path]:
    return save_figure(fig, Path(folder) / name)  # closes the figure


def draw_figure1(result: Any, folder: str | Path) -> list[Path]:
    """``figure1.png`` and ``figure1.pdf`` in ``folder``."""
    return _draw(plot_figure1(result), folder, "figure1")


def draw_figure2(result: Any, folder: str | Path) -> list[Path]:
    """``figure2.png`` and ``figure2.pdf`` in ``folder``."""
    return _draw(plot_figure2(result), folder, "figure2")


def draw_figure3(result: Any, folder: str | Path) -> list[Path]:
    """``figure3.png`` and ``figure3.pdf`` in ``folder``."""
    return _draw(plot_figure3(result), folder, "figure3")


def draw_figure4(result: Any, folder: str | Path) -> list[Path]:
    """``figure4.png`` and ``figure4.pdf`` in ``folder``."""
    return _draw(plot_figure4(result), folder, "figure4")


# ----------------------------------------------------------------------- report views

def rates_view(page: Page, s: Section) -> None:
    """Table 1, rates: one row per variant, one column per length of the grid."""
    rel, variants = s.rel, s.result.variants  # RatesResult
    where: dict[Any, tuple[str, int]] = {}
    for name, fit in variants.items():
        for i, L in enumerate(fit.L):
            where.setdefault(L, (name, i))
    Ls = sorted(where, key=float)
    header = ["variant", "claimed exponent", "fitted slope, whole grid", "fitted slope, large lengths"] + [
        "B_min at L = " + page.v(rel, "variants", where[L][0], "L", where[L][1]) for L in Ls]
    rows = []
    for name, fit in variants.items():
        index = {L: i for i, L in enumerate(fit.L)}
        rows.append([page.k(rel, "variants", name), page.v_or_dash(rel, "variants", name, "claimed"),
                     page.v_or_dash(rel, "variants", name, "slope"),
                     page.v_or_dash(rel, "variants", name, "slope_L_ge_100"),
                     *[page.v_or_dash(rel, "variants", name, "b_min", index[L]) if L in index else "—"
                       for L in Ls]])
    page.add(table(header, rows))
    page.caption(
        f"Limited by the grid of lengths in the header (d = {page.v_or_dash(rel, 'd')}, τ = "
        f"{page.v_or_dash(rel, 'tau')}, {page.preset_phrase()}). Each B_min is the largest vector norm of the "
        "variant's checked construction, an upper bound on the true B_min. The slopes are least-squares fits of "
        "log B_min on log L, over the whole grid and over its lengths from a hundred on (a dash where the grid "
        "has fewer than two); the claimed rates are asymptotic, and small lengths bend the post-LN fits. "
        "Bare pre-LN is infinite past L_cap (below).")


def lcap_view(page: Page, s: Section) -> None:
    """Table 1, L_cap(d) of bare pre-LN, with the lengths the search leaves undecided."""
    rel, r = s.rel, s.result  # LcapResult
    rows = []
    for i in range(len(r.d)):
        closed = i >= len(r.l_infeasible) or (r.l_cap[i] is not None and r.l_infeasible[i] == r.l_cap[i] + 1)
        undecided = "none" if closed else f"above {page.v(rel, 'l_cap', i)}, below {page.v(rel, 'l_infeasible', i)}"
        rows.append([page.v(rel, "d", i), page.v_or_dash(rel, "tau", i), page.v(rel, "l_cap", i),
                     page.v_or_dash(rel, "l_infeasible", i), undecided, page.v_or_dash(rel, "b_min_at_cap", i),
                     page.v_or_dash(rel, "worst_error_at_cap", i)])
    page.add(table(["dimension d", "τ", "L_cap: longest constructed", "shortest provably infeasible L",
                    "undecided lengths", "B_min at L_cap", "worst error at L_cap"], rows, left=0))
    page.caption(
        "Bare pre-LN puts every token on a sphere, so its attention scores are bounded and some finite length "
        "cannot be counted at any norm. L_cap is the longest length the construction search passed; the bound "
        "proves every length from the infeasible one on impossible. Lengths in between are undecided: the "
        "search found no construction and the bound does not exclude one.")


# ------------------------------------------------------------------------------------------- Table 2


def table2_view(page: Page, s: Section) -> None:
    """Table 2 in the paper's layout: mean [min, max] over seeds."""
    rel = s.rel

    def cell(i: int, key: str) -> str:
        return (f"{page.v(rel, 'rows', i, key, 'mean')} [{page.v(rel, 'rows', i, key, 'min')}, "
                f"{page.v(rel, 'rows', i, key, 'max')}]")

    rows = [[page.v(rel, "rows", i, "d"), page.v(rel, "rows", i, "L"), page.v(rel, "rows", i, "steps"),
             page.values(rel, "rows", i, "seeds"), cell(i, "test_exact_accuracy"), cell(i, "full_domain_worst_error")]
            for i in range(len(s.result.rows))]  # Table2Result
    page.add(table(["dimension d", "maximum count L", "steps", "seeds", "test exact accuracy, mean [min, max]",
                    "full-domain worst error, mean [min, max]"], rows, left=0))
    page.caption(
        f"Limited by the steps column ({page.preset_phrase()}; optimiser {page.v_or_dash(rel, 'optimizer')}): "
        "the paper trained tens of millions of steps, so these runs can stop short of rounding-exact counting "
        "(worst error below one half). Test exact accuracy is on held-out pairs of the domain.")


# ------------------------------------------------------------------------------------------- Table 3


def table3_view(page: Page, s: Section) -> None:
    """Table 3: per variant and cap, constructed and attained L_max, beside the paper's constructed value."""
    rel, result = s.rel, s.result  # Table3Result
    ratios: list[tuple[float, str]] = []
    rows = []
    for name, entry in result.variants.items():
        base = ["variants", name]
        paper = entry.get("paper_constr")
        for i in range(len(entry.get("B", []))):
            ours_vs_paper = "—"
            if isinstance(paper, list) and i < len(paper) and finite(paper[i]) and paper[i] > 0:
                ours_vs_paper = page.q(rel, base + ["l_max", i], base + ["paper_constr", i])
                ratios.append((entry["l_max"][i] / paper[i], ours_vs_paper))
            rows.append([page.k(rel, *base) if i == 0 else "", page.v(rel, *base, "B", i),
                         page.v_or_dash(rel, *base, "l_max", i),
                         page.v_or_dash(rel, *base, "paper_constr", i) if isinstance(paper, list) else "—",
                         ours_vs_paper, page.v_or_dash(rel, *base, "attained", i),
                         page.v_or_dash(rel, *base, "attained_next_failing", i),
                         page.v_or_dash(rel, *base, "max_norm", i), page.v_or_dash(rel, *base, "worst_error", i)])
    page.add(table(["variant", "cap B", "constructed L_max (ours)", "constructed L_max (paper)", "ours over paper's",
                    "attained L_max (trained)", "next grid length (failed)", "largest norm of our construction",
                    "its worst error"], rows))
    grid = (result.provenance.get("config") or {}).get("attained_grid")
    limit = (f" the training grid ({page.values(rel, 'provenance', 'config', 'attained_grid')})"
             if isinstance(grid, list) and grid else " the training grid")
    page.caption(
        f"The attained column is the longest length of{limit} that training under the cap passed, so it "
        f"stops at the grid's end ({page.preset_phrase()}; the full preset uses the paper's grid); a dash "
        "in the next column means no longer grid length was tried. The constructed columns are the longest "
        "integer L each checked construction passes at that cap; the paper's are given at d = sixteen only.")
    if ratios:
        lo, hi = min(ratios), max(ratios)
        page.caption(
            f"Our constructions guarantee {lo[1]} to {hi[1]} times the paper's constructed length at the same "
            "cap. They gain by fitting the read-out by a minimax (Chebyshev) fit on the letter-free slice, "
            "searching the few free scalars of each family, and spending the whole error budget of one half "
            "that the full-domain check allows, instead of the analytic margins of the paper's constructions.")


# ------------------------------------------------------------------------------------------- toy figures


def figure1_view(page: Page, s: Section) -> None:
    L = page.v(s.rel, "panels", 0, "L") if s.result.panels else "L"  # Figure1Result
    page.caption(
        f"Boundary representations h(n, m) on the letter-free slice (no distractors), n from zero to {L}, "
        "projected to two dimensions, one panel per variant: linear attention puts the counts equally spaced "
        "on a ray, softmax compresses them along a segment, post-LN maps them onto an arc, bare pre-LN pins "
        "the segment's endpoints to a sphere. Open circles mark limiting endpoints.")


def figure2_view(page: Page, s: Section) -> None:
    rel = s.rel
    Ls = page.values(rel, "Ls")  # Figure2Result.Ls
    page.caption(
        f"What each read-out costs, at L = {Ls} (d = {page.v_or_dash(rel, 'd')}, {page.preset_phrase()}). "
        "(a) Read-out norm against L. Which is which: the constructions' regression read-out grows with L while "
        "the constructed classifier's class vectors and biases stay bounded; the trained heads are not "
        "norm-minimal, and a trained classifier's class vectors can grow with L too. "
        "(b) Arc angle of the count representations on the letter-free slice (largest angle between two "
        "mean-centred attention outputs): regression squeezes the counts onto a tiny arc, the classifier "
        "spreads them. (c) The classifier's smallest winning score gap per count. "
        "(d) L_max under each cap: the constructions' lines, the attained points from Table 3.")


def figure3_view(page: Page, s: Section) -> None:
    rel = s.rel
    page.caption(
        f"Training dynamics of {page.v_or_dash(rel, 'variant')} at d = {page.v_or_dash(rel, 'd')}, L = "
        f"{page.v_or_dash(rel, 'L')} over the seeds shown ({page.preset_phrase()}): held-out exact accuracy, "
        "parameter and score scales divided by the theory's rate, and the adjacent-spacing ratio of high over "
        "low counts.")


def figure4_view(page: Page, s: Section) -> None:
    rel = s.rel
    steps = "; ".join(f"{page.v(rel, 'runs', i, 'label')}: {page.v(rel, 'runs', i, 'steps_run')} updates"
                      for i, run in enumerate(s.result.runs) if "steps_run" in run)  # Figure4Result
    shrunk = ("" if page.preset() == "full" else
              " This preset shrinks L below the paper's (the full preset uses the paper's length and steps).")
    page.caption(
        f"Mini-batch Adam against full-batch Adam on the same split and initialisation at d = "
        f"{page.v_or_dash(rel, 'd')}, L = {page.v_or_dash(rel, 'L')} ({page.preset_phrase()}).{shrunk} "
        f"Updates run: {steps}. A mini-batch update sees only a batch of the domain's pairs, so it is given "
        "more updates than full batch for a comparable number of pairs seen.")


__all__ = ["plot_figure1", "plot_figure2", "plot_figure3", "plot_figure4", "draw_figure1", "draw_figure2",
           "draw_figure3", "draw_figure4", "figure4_caption", "rates_view", "lcap_view", "table2_view", "table3_view",
           "figure1_view", "figure2_view", "figure3_view", "figure4_view"]
