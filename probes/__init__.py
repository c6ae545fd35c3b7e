"""Ridge probes of the count on boundary vectors, for LLM captures and toy representations
(docs/definitions.md §2, "Probes").

Numerics: :func:`ridge_path` (every α from one decomposition), the estimators :class:`RidgeProbe` and
:class:`RidgePathProbe` (the fit → select every reported probe goes through), :func:`split_rows` (the one
train / validation / test split), :func:`penalty_unit` (the relative ridge coefficient's unit), the
metrics and the classification read-out :func:`fit_classifier_probe`. Experiments: :class:`ProbeConfig` →
:func:`run_probes` → :class:`ProbeResult` (Figure 7) and :class:`SweepConfig` → :func:`run_sweep` →
:class:`SweepResult` (Figure 8). Figures and report views live in :mod:`countlens.probes.figures` (imports
matplotlib).
"""

from countlens.probes.classifier import classifier_grid, fit_classifier_probe  # noqa: F401
from countlens.probes.experiments import (  # noqa: F401
    DEFAULT_SWEEP_ALPHAS,
    Behaviour,
    ProbeConfig,
    ProbeData,
    ProbeResult,
    SweepConfig,
    SweepResult,
    load_probe_data,
    run_probes,
    run_sweep,
)
from countlens.probes.metrics import binned_accuracy, count_bins, mae, native_norm, r2, rounded_accuracy  # noqa: F401
from countlens.probes.ridge import (  # noqa: F401
    DEFAULT_ALPHAS,
    RidgePath,
    RidgePathProbe,
    RidgeProbe,
    native_ridge_path,
    penalty_unit,
    ridge_path,
    select_alpha,
)
from countlens.probes.splits import DEFAULT_FRACTIONS, split_rows  # noqa: F401
