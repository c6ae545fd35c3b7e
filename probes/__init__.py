"""Ridge probes of the count on boundary vectors (SPEC §2 "Probes"), for LLM captures and toy representations.

Numerics: :func:`ridge_path` (every α from one decomposition), the estimators :class:`RidgeProbe` and
:class:`RidgePathProbe`, and the metrics. Experiments: :func:`run_probes` (validation-selected probes per
location, Figure 7), :func:`run_norm_sweep` (Figure 8). The probe norm a rounding-exact
count costs, on held-out rows, is :func:`countlens.analysis.compare.probe_norm_needed`. Figures live in :mod:`countlens.probes.figures` (imports matplotlib).
"""

from countlens.probes.experiments import (  # noqa: F401
    NormSweepResult,
    ProbeData,
    ProbeResult,
    first_block_location,
    load_probe_data,
    parse_alphas,
    resolve_locations,
    run_norm_sweep,
    run_probes,
    split_rows,
)
from countlens.probes.metrics import binned_accuracy, count_bins, mae, native_norm, r2, rounded_accuracy  # noqa: F401
from countlens.probes.ridge import RidgePathProbe, RidgeProbe, native_ridge_path, ridge_path, select_alpha  # noqa: F401
