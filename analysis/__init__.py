"""Count geometry (SPEC §2), toy-vs-LLM comparison, and the one-command report.

Pure metrics (numpy only) are importable from here: ``effective_rank``, ``gap_ratio``, ``erank_ratio``,
``count_centroids``, ``adjacent_gaps``, ``pca_2d``, ``arc_angle``. Experiments: ``countlens.analysis.layerwise``
(Figures 5 and 6), ``countlens.analysis.compare`` (toy vs LLM), ``countlens.analysis.report`` (``reproduce``).
"""

from countlens.analysis.geometry import (  # noqa: F401
    adjacent_gaps,
    arc_angle,
    count_centroids,
    effective_rank,
    erank_ratio,
    gap_ratio,
    mean_gap,
    pca_2d,
)
