"""Count geometry (docs/definitions.md §2) and the toy-vs-LLM comparison.

Numerics (numpy only): ``effective_rank``, ``gap_ratio``, ``erank_ratio``, ``count_centroids``,
``adjacent_gaps``, ``pca_2d``, ``endpoint_angle`` (:mod:`countlens.analysis.geometry`), the centroid sets
and Figure 5/6 computation (:mod:`countlens.analysis.layerwise`) and the comparison's metrics
(:mod:`countlens.analysis.compare`). Experiments: :class:`GeometryConfig` → :func:`run_geometry` →
:class:`GeometryResult` (Figures 5 and 6) and :class:`CompareConfig` → :func:`run_compare` →
:class:`CompareResult` (toy vs LLM), in :mod:`countlens.analysis.experiments`; figures and report views in
:mod:`countlens.analysis.figures` (imports matplotlib). The count manifold (§2.17): numerics in
:mod:`countlens.analysis.manifold`, :class:`ManifoldConfig` → :func:`run_manifold` → :class:`ManifoldResult` in
:mod:`countlens.analysis.manifold_experiment`, its figure in :mod:`countlens.analysis.manifold_figures`.
"""

from countlens.analysis.compare import probe_norm_needed  # noqa: F401
from countlens.analysis.experiments import (  # noqa: F401
    CompareConfig,
    CompareResult,
    GeometryConfig,
    GeometryResult,
    run_compare,
    run_geometry,
)
from countlens.analysis.geometry import (  # noqa: F401
    adjacent_gaps,
    count_centroids,
    effective_rank,
    endpoint_angle,
    erank_ratio,
    gap_ratio,
    mean_gap,
    pca_2d,
)
from countlens.analysis.manifold import manifold_metrics, procrustes_distance, toy_curves  # noqa: F401
from countlens.analysis.manifold_experiment import ManifoldConfig, ManifoldResult, run_manifold  # noqa: F401

__all__ = [
    "CompareConfig", "CompareResult", "GeometryConfig", "GeometryResult", "run_compare", "run_geometry",
    "adjacent_gaps", "count_centroids", "effective_rank", "endpoint_angle", "erank_ratio", "gap_ratio", "mean_gap",
    "pca_2d", "probe_norm_needed", "ManifoldConfig", "ManifoldResult", "run_manifold", "manifold_metrics",
    "procrustes_distance", "toy_curves",
]
