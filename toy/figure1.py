"""Figure 1: boundary representations ``h(n, 0)`` on space-only inputs, four panels.

(a) linear attention: equally spaced points on a ray; (b) softmax: compressed along the segment from
``z_b`` toward ``z_s``; (c) post-LN: the centred numerator mapped onto an arc of the sphere of radius sqrt(d);
(d) bare pre-LN: a segment whose endpoints ``z_b, z_s`` lie on that sphere. Open circles mark the limiting
endpoints (``n -> infinity``). Each panel plots the checked construction of its variant at ``L`` in the plane
that best holds its points (uncentred SVD, so the origin stays the origin and spheres stay circles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from countlens.toy.budget import l_cap
from countlens.toy.constructions import best_construction
from countlens.toy.model import DTYPE, boundary_representation, token_vectors

PANELS = (
    ("linear", "(a) linear attention: a ray"),
    ("softmax", "(b) softmax, no LN: a compressed segment"),
    ("softmax-postln-bare", "(c) softmax, post-LN: an arc"),
    ("softmax-preln-bare", "(d) softmax, bare pre-LN: endpoints on a sphere"),
)


@dataclass
class Figure1Panel:
    variant: str
    title: str
    L: int
    points: list[list[float]]  # (L+1, 2): h(n, 0) projected, n = 0..L
    limits: list[list[float]]  # open circles: limiting endpoints, projected
    sphere_radius: float | None  # circle drawn for panels on the sphere |h| = sqrt(d)
    max_norm: float
    worst_error: float


@dataclass
class Figure1Result:
    d: int
    panels: list[Figure1Panel]

    def to_dict(self) -> dict:
        return {"d": self.d, "panels": [p.__dict__ for p in self.panels]}

    @classmethod
    def from_dict(cls, data: dict) -> Figure1Result:
        return cls(d=int(data["d"]), panels=[Figure1Panel(**p) for p in data["panels"]])


def _plane(vectors: np.ndarray) -> np.ndarray:
    """Top two right singular vectors of the (uncentred) rows: (d, 2)."""
    _, _, vt = np.linalg.svd(vectors, full_matrices=False)
    basis = vt[:2].T
    if basis.shape[1] < 2:
        basis = np.hstack([basis, np.zeros((basis.shape[0], 2 - basis.shape[1]))])
    return basis


def compute_figure1(d: int = 16, L: int = 20) -> Figure1Result:
    """The four panels at length ``L`` (bare pre-LN at ``min(L, L_cap(d))``)."""
    panels = []
    for variant, title in PANELS:
        Lv = L
        try:
            c = best_construction(variant, Lv, d)
        except ValueError:  # bare pre-LN past its L_cap
            Lv = l_cap(d).l_cap
            c = best_construction(variant, Lv, d)
        cfg, p = c.cfg, c.params
        n = torch.arange(Lv + 1, dtype=DTYPE)
        with torch.no_grad():
            h = boundary_representation(cfg, p, n, torch.zeros_like(n)).numpy()  # (L+1, d)
            z = token_vectors(cfg, p).numpy()  # (3, d)
        limits = []
        if variant != "linear":  # n -> infinity: all attention on the counted token
            far = torch.tensor([1e12], dtype=DTYPE)
            with torch.no_grad():
                limits.append(boundary_representation(cfg, p, far, torch.zeros_like(far)).numpy()[0])
        if variant == "softmax-preln-bare":
            limits.append(z[0])  # n = 0 end, also on the sphere
        stack = np.vstack([h] + [np.asarray(x)[None] for x in limits])
        basis = _plane(stack)
        radius = math.sqrt(d) if variant in ("softmax-postln-bare", "softmax-preln-bare") else None
        panels.append(Figure1Panel(variant, title, Lv, (h @ basis).tolist(),
                                   [(np.asarray(x) @ basis).tolist() for x in limits], radius,
                                   c.max_norm, c.check.worst_error))
    return Figure1Result(d=d, panels=panels)


def plot_figure1(result: Figure1Result):
    """Draw :class:`Figure1Result` (four panels); returns the matplotlib figure."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 4.2))
    for ax, panel in zip(axes, result.panels, strict=True):
        pts = np.asarray(panel.points)
        if panel.sphere_radius is not None:
            t = np.linspace(0, 2 * np.pi, 400)
            ax.plot(panel.sphere_radius * np.cos(t), panel.sphere_radius * np.sin(t), ":", color="0.6", lw=1)
        sc = ax.scatter(pts[:, 0], pts[:, 1], c=np.arange(len(pts)), cmap="viridis", s=16, zorder=3)
        for lim in panel.limits:
            ax.scatter([lim[0]], [lim[1]], facecolors="none", edgecolors="k", s=60, zorder=4)
        ax.scatter([0], [0], marker="+", color="0.4")
        ax.set_title(panel.title, fontsize=9)
        ax.set_aspect("equal", adjustable="datalim")
        ax.set_xlabel(f"L = {panel.L}, B = {panel.max_norm:.3g}", fontsize=8)
    fig.colorbar(sc, ax=axes, shrink=0.8, label="count n")
    fig.suptitle(f"Boundary representations h(n, 0), d = {result.d}", fontsize=10)
    return fig


__all__ = ["Figure1Result", "Figure1Panel", "compute_figure1", "plot_figure1", "PANELS"]
