"""Every toy table, figure and command as a config and a result (definitions: docs/definitions.md §1), one
experiment per module:

- :mod:`.construct`: ``toy construct``, ``toy check`` and the constructions the comparison reads;
- :mod:`.rates`: Table 1 (``B_min`` rates, ``L_cap``); :mod:`.table2`, :mod:`.table3`: Tables 2 and 3;
- :mod:`.figure1`, :mod:`.figure2`, :mod:`.dynamics` (Figures 3 and 4).

Each is a validated, frozen ``...Config`` whose defaults are the reduced ("quick") sizes, with ``.paper()``
for the paper's, and ``run_x(config, progress=False, ...) -> XResult``, a
:class:`countlens.core.results.Result`. Figures are drawn from the results alone by
:mod:`countlens.toy.figures`; :mod:`countlens.toy.cli` only parses flags into a config, runs it and saves.

Training runs (:mod:`countlens.toy.runs`) and Table 3's constructed cells are kept in a
:class:`countlens.core.cache.ResultCache` as they finish, so an interrupted experiment resumes where it
stopped when rerun with the same settings. The paper trained for 20M/100M steps; ours are L-BFGS
iterations, which converge in far fewer, and every result records them.
"""

from countlens.toy.experiments.construct import (
    CheckConfig,
    CheckFileResult,
    ConstructConfig,
    ConstructionsConfig,
    ConstructionsResult,
    ConstructResult,
    run_check,
    run_construct,
    run_constructions,
)
from countlens.toy.experiments.dynamics import (
    DynamicsResult,
    Figure3Config,
    Figure3Result,
    Figure4Config,
    Figure4Result,
    run_figure3,
    run_figure4,
)
from countlens.toy.experiments.figure1 import (
    FIGURE1_PANELS,
    Figure1Config,
    Figure1Panel,
    Figure1Result,
    run_figure1,
)
from countlens.toy.experiments.figure2 import Figure2Config, Figure2Result, readout_norms, run_figure2
from countlens.toy.experiments.rates import (
    RATES_L,
    RATES_L_REPORT,
    LcapConfig,
    LcapResult,
    RatesConfig,
    RatesResult,
    run_lcap,
    run_rates,
)
from countlens.toy.experiments.table2 import Table2Config, Table2Result, run_table2
from countlens.toy.experiments.table3 import (
    PAPER_GRID,
    QUICK_GRID,
    Table3Config,
    Table3Result,
    l_max_cache_key,
    run_table3,
)

__all__ = [
    "RATES_L", "RATES_L_REPORT", "PAPER_GRID", "QUICK_GRID", "FIGURE1_PANELS",
    "ConstructConfig", "ConstructResult", "run_construct", "CheckConfig", "CheckFileResult", "run_check",
    "ConstructionsConfig", "ConstructionsResult", "run_constructions",
    "RatesConfig", "RatesResult", "run_rates", "LcapConfig", "LcapResult", "run_lcap",
    "Table2Config", "Table2Result", "run_table2", "Table3Config", "Table3Result", "run_table3", "l_max_cache_key",
    "Figure1Config", "Figure1Panel", "Figure1Result", "run_figure1", "Figure2Config", "Figure2Result", "run_figure2",
    "readout_norms", "Figure3Config", "Figure4Config", "DynamicsResult", "Figure3Result", "Figure4Result",
    "run_figure3", "run_figure4",
]
