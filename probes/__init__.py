"""Ridge probes of the count on boundary vectors, for LLM captures and toy representations
(docs/definitions.md §2, "Probes").

Numerics: :func:`ridge_path` (every α from one decomposition), the estimators :class:`RidgeProbe` and
:class:`RidgePathProbe` (the fit → select every reported probe goes through), :func:`split_rows` (the one
train / validation / test split), :func:`penalty_unit` (the relative ridge coefficient's unit), the
metrics and the classification read-out :func:`fit_classifier_probe`. Experiments: :class:`ProbeConfig` →
:func:`run_probes` → :class:`ProbeResult` (Figure 7, with the model's :class:`Behaviour`),
:class:`SweepConfig` → :func:`run_sweep` → :class:`SweepResult` (Figure 8) and ``ProbeConfig(target=
"running_count")`` → :func:`run_running_count` → :class:`RunningCountResult` (Figure 10, the probes at every
item, split by prompt with :func:`split_groups`). Figures and report views live in :mod:`countlens.probes.figures` (imports
matplotlib).
"""

from countlens.probes.behaviour import Behaviour, counting_capacity  # noqa: F401
from countlens.probes.classifier import classifier_grid, fit_classifier_probe  # noqa: F401
from countlens.probes.data import ProbeData, load_probe_data  # noqa: F401
from countlens.probes.metrics import binned_accuracy, count_bins, mae, native_norm, r2, rounded_accuracy  # noqa: F401
from countlens.probes.probe import SELECTION, ProbeConfig, ProbeResult, run_probes  # noqa: F401
from countlens.probes.ridge import (  # noqa: F401
    DEFAULT_ALPHAS,
    RidgePath,
    RidgePathProbe,
    RidgeProbe,
    native_ridge_path,
    penalty_unit,
    ridge_path,
    select_alpha,
    standardisation,
)
from countlens.probes.running import RunningCountResult, load_item_data, run_running_count  # noqa: F401
from countlens.probes.splits import DEFAULT_FRACTIONS, split_groups, split_rows  # noqa: F401
from countlens.probes.sweep import DEFAULT_SWEEP_ALPHAS, SweepConfig, SweepResult, run_sweep  # noqa: F401

__all__ = [
    "Behaviour", "counting_capacity", "classifier_grid", "fit_classifier_probe", "ProbeData", "load_probe_data",
    "binned_accuracy", "count_bins", "mae", "native_norm", "r2", "rounded_accuracy", "SELECTION", "ProbeConfig",
    "ProbeResult", "run_probes", "DEFAULT_ALPHAS", "RidgePath", "RidgePathProbe", "RidgeProbe", "native_ridge_path",
    "penalty_unit", "ridge_path", "select_alpha", "standardisation", "RunningCountResult", "load_item_data",
    "run_running_count", "DEFAULT_FRACTIONS", "split_groups", "split_rows", "DEFAULT_SWEEP_ALPHAS", "SweepConfig",
    "SweepResult", "run_sweep",
]
