"""Figure 1: the boundary representations ``h(n, 0)`` of four variants' checked constructions, each in the
plane that best holds them (docs/definitions.md §1)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch

from countlens.core.fields import AtLeast, check_fields
from countlens.core.registry import Experiment, declare
from countlens.core.results import Result, result_provenance
from countlens.core.threads import TOY_THREADS
from countlens.toy.budget import l_cap
from countlens.toy.constructions import best_construction
from countlens.toy.experiments.fields import need_dimension
from countlens.toy.model import DTYPE, boundary_representation, token_vectors

FIGURE1_PANELS = (
    ("linear", "(a) linear attention: a ray"),
    ("softmax", "(b) softmax, no LN: a compressed segment"),
    ("softmax-postln-bare", "(c) softmax, post-LN: an arc"),
    ("softmax-preln-bare", "(d) softmax, bare pre-LN: endpoints on a sphere"),
)


@dataclass(frozen=True)
class Figure1Config:
    """Figure 1: boundary representations ``h(n, 0)``, ``n = 0..L``, of each panel's checked construction
    (bare pre-LN at ``min(L, L_cap(d))``)."""

    d: int = 16
    """model dimension"""
    L: int = 20
    """largest count n drawn"""

    def __post_init__(self) -> None:
        need_dimension(self.d)
        check_fields(self, {"L": AtLeast(2)})


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
class Figure1Result(Result):
    """Four panels; each holds ``h(n, 0)`` in the plane that best holds its points (uncentred SVD, so the
    origin stays the origin and spheres stay circles) and its limiting endpoints (``n -> infinity``)."""

    FILE: ClassVar[str] = "figure1.json"
    COMMAND: ClassVar[str] = "countlens toy figure1"

    d: int
    panels: list[Figure1Panel]
    provenance: dict[str, Any] = field(default_factory=dict)


def _plane(vectors: np.ndarray) -> np.ndarray:
    """Top two right singular vectors of the (uncentred) rows: (d, 2)."""
    _, _, vt = np.linalg.svd(vectors, full_matrices=False)
    basis = vt[:2].T
    if basis.shape[1] < 2:
        basis = np.hstack([basis, np.zeros((basis.shape[0], 2 - basis.shape[1]))])
    return basis


def _figure1_panel(variant: str, title: str, d: int, L: int) -> Figure1Panel:
    try:
        c = best_construction(variant, L, d)
    except ValueError:  # bare pre-LN past its L_cap
        L = l_cap(d).l_cap
        c = best_construction(variant, L, d)
    cfg, p = c.cfg, c.params
    n = torch.arange(L + 1, dtype=DTYPE)
    with torch.no_grad():
        h = boundary_representation(cfg, p, n, torch.zeros_like(n)).numpy()  # (L+1, d)
        z = token_vectors(cfg, p).numpy()  # (3, d)
        limits = []
        if variant != "linear":  # n -> infinity: all attention on the counted token
            far = torch.tensor([1e12], dtype=DTYPE)
            limits.append(boundary_representation(cfg, p, far, torch.zeros_like(far)).numpy()[0])
    if variant == "softmax-preln-bare":
        limits.append(z[0])  # n = 0 end, also on the sphere
    basis = _plane(np.vstack([h] + [np.asarray(x)[None] for x in limits]))
    radius = math.sqrt(d) if variant in ("softmax-postln-bare", "softmax-preln-bare") else None
    return Figure1Panel(variant, title, L, (h @ basis).tolist(), [(np.asarray(x) @ basis).tolist() for x in limits],
                        radius, c.max_norm, c.check.worst_error)


def run_figure1(config: Figure1Config, progress: bool = False) -> Figure1Result:
    """The four panels of Figure 1 (see :data:`FIGURE1_PANELS`)."""
    panels = [_figure1_panel(v, title, config.d, config.L) for v, title in FIGURE1_PANELS]
    return Figure1Result(d=config.d, panels=panels, provenance=result_provenance(config))



declare(Experiment(
    "toy-figure1", "Figure 1", Figure1Config, run_figure1, Figure1Result, order=50, figure="countlens.toy.figures:draw_figure1", plot="countlens.toy.figures:plot_figure1",
    view="countlens.toy.figures:figure1_view", presets={"quick": Figure1Config(), "full": Figure1Config(), "test": Figure1Config(L=10)},
    options={"progress": True}, threads=TOY_THREADS))


__all__ = ["FIGURE1_PANELS", "Figure1Config", "Figure1Panel", "Figure1Result", "run_figure1"]
