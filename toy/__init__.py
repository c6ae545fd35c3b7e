"""The toy theory: one attention layer counting up to L, exactly and checkably (docs/definitions.md §1).

Numerics: ``model`` (the seven variants on count pairs, and the one reader of parameter files), ``check``
(the full-domain check), ``constructions`` (explicit parameters per variant), ``budget`` (b_min, l_max, rate
fits, L_cap), ``classification`` (the classifier read-out), ``train`` (training from random initialisation),
``runs`` (cached training runs), ``attained`` (Table 3's climb under a cap), ``export`` (representations as an
activation folder). ``experiments``: one config and ``run_...`` per table and figure, one module each;
``figures``: their plots and report views.
"""

from countlens.toy.budget import (
    CLAIMED,
    TABLE3_B,
    TABLE3_PAPER,
    TABLE3_VARIANTS,
    b_min,
    b_min_construction,
    fit_rates,
    fit_slope,
    l_cap,
    l_max,
)
from countlens.toy.check import CheckResult, full_domain_check
from countlens.toy.classification import arc_angle, classifier_construction, min_gap_by_count
from countlens.toy.constructions import best_construction, construct
from countlens.toy.experiments import (
    CheckConfig,
    ConstructConfig,
    ConstructionsConfig,
    ConstructionsResult,
    Figure1Config,
    Figure1Result,
    Figure2Config,
    Figure2Result,
    Figure3Config,
    Figure3Result,
    Figure4Config,
    Figure4Result,
    LcapConfig,
    LcapResult,
    RatesConfig,
    RatesResult,
    Table2Config,
    Table2Result,
    Table3Config,
    Table3Result,
    run_check,
    run_construct,
    run_constructions,
    run_figure1,
    run_figure2,
    run_figure3,
    run_figure4,
    run_lcap,
    run_rates,
    run_table2,
    run_table3,
)
from countlens.toy.experiments.construct import COMPARE_CONSTRUCTIONS
from countlens.toy.model import (
    VARIANTS,
    ParamsFile,
    ToyConfig,
    ToyParams,
    boundary_representation,
    read_params,
    winning_gap,
)
from countlens.toy.train import TrainConfig, TrainResult, train

__all__ = [
    "CLAIMED", "TABLE3_B", "TABLE3_PAPER", "TABLE3_VARIANTS", "VARIANTS", "ToyConfig", "ToyParams",
    "ParamsFile", "read_params", "ConstructionsConfig", "ConstructionsResult", "run_constructions",
    "b_min", "fit_rates", "l_cap", "l_max", "CheckResult", "full_domain_check", "arc_angle",
    "classifier_construction", "min_gap_by_count", "best_construction", "construct", "TrainConfig", "TrainResult",
    "train", "ConstructConfig", "run_construct", "CheckConfig", "run_check", "RatesConfig", "RatesResult",
    "run_rates", "LcapConfig", "LcapResult", "run_lcap", "Table2Config", "Table2Result", "run_table2",
    "Table3Config", "Table3Result", "run_table3", "Figure1Config", "Figure1Result", "run_figure1",
    "Figure2Config", "Figure2Result", "run_figure2", "Figure3Config", "Figure4Config", "Figure3Result",
    "Figure4Result",
    "run_figure3", "run_figure4", "plot_figure1", "plot_figure2", "plot_figure3", "plot_figure4",
    "draw_figure1", "draw_figure2", "draw_figure3", "draw_figure4", "export_toy_activations",
    "COMPARE_CONSTRUCTIONS", "boundary_representation", "b_min_construction", "fit_slope", "winning_gap",
]
_FIGURES = ("plot_figure1", "plot_figure2", "plot_figure3", "plot_figure4", "draw_figure1", "draw_figure2",
            "draw_figure3", "draw_figure4")


def __getattr__(name: str):
    """The figure functions, imported on first use so that ``import countlens.toy`` needs no matplotlib."""
    if name in _FIGURES:
        from countlens.toy import figures

        return getattr(figures, name)
    if name == "export_toy_activations":  # brings the activation store (datasets), which the toy itself never needs
        from countlens.toy.export import export_toy_activations

        return export_toy_activations
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
