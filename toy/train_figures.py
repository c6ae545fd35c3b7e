"""Figures 2, 3 and 4, each drawn from its experiment's result alone (no recomputation).

Every function takes the result dataclass of :mod:`countlens.toy.experiments` (or its JSON dict) and returns
a matplotlib Figure; the CLI saves it with :func:`countlens.io.save_figure`.
"""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import numpy as np

_HEADS = {"regression": ("tab:blue", "regression"), "classification": ("tab:red", "classification")}


def _as_dict(result: Any) -> dict[str, Any]:
    return result if isinstance(result, dict) else result.to_dict()


def plot_figure2(result: Any) -> plt.Figure:
    """(a) read-out norm vs L per head; (b) arc angle of h(n, 0) vs L; (c) smallest winning gap per count;
    (d) L_max under caps B, attained (trained) and constructed. Panels a–c show passing runs only."""
    r = _as_dict(result)
    runs = [x for x in r["runs"] if x.get("passed")]
    cons = r["construction"]
    fig, ax = plt.subplots(1, 4, figsize=(18, 4.2))

    for head, (color, label) in _HEADS.items():
        mine = [x for x in runs if x["readout"] == head]
        if mine:
            ax[0].scatter([x["L"] for x in mine], [x["readout_norm"] for x in mine], color=color,
                          label=f"{label}: {'|w|' if head == 'regression' else 'max |u_k|'}")
            ax[0].scatter([x["L"] for x in mine], [max(x["bias_norm"], 1e-12) for x in mine], color=color,
                          marker="x", label=f"{label}: {'|b0|' if head == 'regression' else 'max |c_k|'}")
            ax[1].scatter([x["L"] for x in mine], [x["arc_angle"] for x in mine], color=color, label=label)
    ax[0].plot(cons["L"], cons["max_norm"], "k:", label="classifier construction (all vectors)")
    reg = [(L, b) for L, b in zip(r["Ls"], r.get("regression_b_min") or [], strict=False) if b is not None]
    if reg:
        ax[0].plot(*zip(*reg, strict=True), color="gray", ls="--", label="regression construction B_min")
    ax[0].set(xscale="log", yscale="log", xlabel="L", ylabel="norm", title="(a) read-out norm")
    ax[1].plot(cons["L"], cons["arc_angle"], "k:", label="classifier construction")
    ax[1].set(xscale="log", yscale="log", xlabel="L", ylabel="radians", title="(b) arc of h(n, 0), n = 0..L")

    cmap = plt.get_cmap("viridis")
    Ls = sorted(set(r["Ls"]))
    for i, L in enumerate(Ls):
        color = cmap(i / max(1, len(Ls) - 1))
        mine = [x for x in runs if x["readout"] == "classification" and x["L"] == L and "min_gap" in x]
        for x in mine[:1]:
            g = np.asarray(x["min_gap"], dtype=float)
            ax[2].plot(np.arange(len(g)), np.maximum(g, 1e-300), color=color, label=f"trained, L={L}")
        if L in cons["L"]:
            g = np.asarray(cons["min_gap"][cons["L"].index(L)], dtype=float)
            ax[2].plot(np.arange(len(g)), np.maximum(g, 1e-300), ":", color=color, label=f"construction, L={L}")
    ax[2].set(yscale="log", xlabel="count n", ylabel="min over m of winning gap", title="(c) winning score gap")

    markers = iter("osD^v")
    for v, row in (r.get("lmax") or {}).items():
        m = next(markers, "o")
        B = row["B"]
        line = None
        if "attained" in row:
            line = ax[3].plot(B, [max(a, 0.5) for a in row["attained"]], marker=m, label=f"{v} attained")[0]
        if "l_max" in row:  # None (not computed) and inf (no finite limit) are left out
            pts = [(b, float(x)) for b, x in zip(B, row["l_max"], strict=True)
                   if x is not None and np.isfinite(float(x))]
            if pts:
                ax[3].plot(*zip(*pts, strict=True), ":", marker=m, mfc="none",
                           color=line.get_color() if line else None, label=f"{v} constr.")
    ax[3].set(xscale="log", yscale="log", xlabel="cap B", ylabel="L_max", title="(d) length within a budget")
    for a in ax:
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.suptitle(f"{r['variant']}, d={r['d']}: regression vs classification read-out")
    fig.tight_layout()
    return fig


def _dynamics_axes(r: dict[str, Any], ncols: int) -> tuple[plt.Figure, np.ndarray]:
    fig, ax = plt.subplots(1, ncols, figsize=(4.5 * ncols, 3.8))
    fig.suptitle(f"Figure {r['figure']}: {r['variant']}, d={r['d']}, L={r['L']}")
    return fig, ax


def plot_figure3(result: Any) -> plt.Figure:
    """Per seed vs step: held-out exact accuracy, max norm / L^rate, score scale a / L², spacing ratio."""
    r = _as_dict(result)
    L = r["L"]
    fig, ax = _dynamics_axes(r, 4)
    for run in r["runs"]:
        log = run["log"]
        if not log:
            continue
        step = [e["step"] for e in log]
        ax[0].plot(step, [e["test_exact_accuracy"] for e in log], label=run["label"])
        ax[1].plot(step, [e["max_norm"] / L ** r["param_rate"] for e in log], label=run["label"])
        ax[2].plot(step, [np.exp(e["log_score_scale"] - r["score_rate"] * np.log(L)) for e in log],
                   label=run["label"])
        ax[3].plot(step, [e["spacing_ratio"] for e in log], label=run["label"])
    ax[0].set(xlabel="step", ylabel="held-out exact accuracy", ylim=(0, 1.02))
    ax[1].set(xlabel="step", ylabel=f"max norm / L^{r['param_rate']:g}", yscale="log")
    ax[2].set(xlabel="step", ylabel=f"score scale a / L^{r['score_rate']:g}", yscale="log")
    ax[3].set(xlabel="step", ylabel="adjacent spacing, high / low counts")
    ax[3].axhline(1.0, color="gray", lw=0.8)
    ax[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_figure4(result: Any) -> plt.Figure:
    """Full-batch vs mini-batch Adam vs step: training loss, held-out exact accuracy, full-domain worst error."""
    r = _as_dict(result)
    fig, ax = _dynamics_axes(r, 3)
    for run in r["runs"]:
        log = run["log"]
        if not log:
            continue
        step = [e["step"] for e in log]
        ax[0].plot(step, [e["loss"] for e in log], label=run["label"])
        ax[1].plot(step, [e["test_exact_accuracy"] for e in log], label=run["label"])
        ax[2].plot(step, [e["full_domain_worst_error"] for e in log], label=run["label"])
    ax[0].set(xlabel="update", ylabel="training loss (MSE)", yscale="log")
    ax[1].set(xlabel="update", ylabel="held-out exact accuracy", ylim=(0, 1.02))
    ax[2].set(xlabel="update", ylabel="full-domain worst error", yscale="log")
    ax[2].axhline(0.5, color="gray", lw=0.8, ls="--", label="rounding threshold 1/2")
    for a in ax:
        a.legend(fontsize=8)
    fig.tight_layout()
    return fig


__all__ = ["plot_figure2", "plot_figure3", "plot_figure4"]
