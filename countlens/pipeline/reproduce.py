"""``countlens reproduce``: every table and figure of the paper as resumable stages, and one HTML report.

The stages (:mod:`countlens.pipeline.stages`) are the rooms' experiments at the sizes of one preset
(:mod:`countlens.pipeline.presets`), run in order into ``OUT/<stage>/``: an interrupted ``reproduce`` only
does what is missing, a stage finished with another config (another preset or model) is refused rather
than mixed in, and a failing stage is reported by name while the others still run. Inside a stage, long
experiments keep their finished parts in a :class:`~countlens.core.cache.ResultCache`
(``OUT/<stage>/.cache``, removed once the stage is done).

The run loads each model once (:func:`countlens.llm.models.model_pool`): a stage that declares the model it
runs (``Stage(model=...)``) is handed it loaded, and every resolution, tokenizer and config the stages'
plans read is read once.

``OUT/index.html`` (:mod:`countlens.pipeline.report`) shows every figure and table with the configs and
package versions that made them; every number on it is read from the JSON file beside it.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from countlens.analysis.experiments import CompareResult, GeometryResult, run_compare, run_geometry
from countlens.analysis.figures import compare_view, draw_compare, draw_geometry, geometry_view
from countlens.core.errors import UsageError
from countlens.core.io import provenance, write_json_atomic
from countlens.core.report import REPORT_FILE
from countlens.core.results import config_record
from countlens.core.threads import TOY_THREADS
from countlens.llm import (
    CaptureResult,
    HeadsResult,
    LensResult,
    PatchingResult,
    PositionPatchingResult,
    SteeringResult,
    preflight_capture,
    run_capture,
    run_heads,
    run_lens,
    run_patching,
    run_position_patching,
    run_steering,
)
from countlens.llm.heads.figures import draw_heads, heads_view
from countlens.llm.lens.figures import draw_lens, lens_view
from countlens.llm.models import model_pool
from countlens.llm.patching.figures import draw_patching, patching_view
from countlens.llm.positions.figures import draw_position_patching, position_patching_view
from countlens.llm.steering.figures import draw_steering, steering_view
from countlens.pipeline.presets import PRESETS
from countlens.pipeline.report import write_index
from countlens.pipeline.stages import CACHE_FOLDER, Stage, refuse_other_stages, run_stages, select, stage_done
from countlens.probes.experiments import ProbeResult, SweepResult, run_probes, run_sweep
from countlens.probes.figures import (
    draw_probes,
    draw_running_count,
    draw_sweep,
    probe_view,
    running_count_view,
    sweep_view,
)
from countlens.probes.running import RunningCountResult, run_running_count
from countlens.toy.budget import TABLE3_VARIANTS
from countlens.toy.experiments import (
    ConstructionsResult,
    Figure1Result,
    Figure2Result,
    Figure3Result,
    Figure4Result,
    LcapResult,
    RatesResult,
    Table2Result,
    Table3Result,
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
from countlens.toy.figures import (
    draw_figure1,
    draw_figure2,
    draw_figure3,
    draw_figure4,
    figure1_view,
    figure2_view,
    figure3_view,
    figure4_view,
    lcap_view,
    rates_view,
    table2_view,
    table3_view,
)

ACTS_PLACE = "acts"  # the capture's activation folder inside its stage folder


def toy_workers(jobs: int) -> int:
    """Processes for ``jobs`` independent toy trainings (Table 2's runs, Table 3's attained columns): one per
    core, at most one per job."""
    return max(1, min(int(jobs), os.cpu_count() or 1))


def capture_config(preset: str, capture: dict[str, Any] | None = None):
    """The preset's capture config with the command line's overrides (``model``, ``device``, ...)."""
    if preset not in PRESETS:
        raise UsageError(f"unknown size preset {preset!r}; choose {', '.join(PRESETS)}")
    return PRESETS[preset]["capture"].with_options(**(capture or {}))


def build_stages(preset: str, capture: dict[str, Any] | None = None) -> list[Stage]:
    """The stages of ``reproduce`` for ``preset`` (quick, full, test). ``capture`` overrides fields of the
    preset's capture config (``model``, ``device``, ...); Figure 9 runs the capture's own model and wording."""
    captured = capture_config(preset, capture)
    p = PRESETS[preset]
    model, template = captured.model, captured.prompts.template
    patching = dataclasses.replace(p["patching"], model=model, template=template)
    steering = dataclasses.replace(p["steering"], device=model.device)

    def on_model(config, **more):  # the capture's model and wording
        return dataclasses.replace(config, model=model, prompts=dataclasses.replace(config.prompts, template=template),
                                   **more)
    items = on_model(p["capture-items"], batch_size=captured.batch_size)
    positions, heads = on_model(p["patching-positions"]), on_model(p["heads"])
    lens = dataclasses.replace(p["lens"], device=model.device)
    llm = {"model": model, "options": {"progress": True}}  # handed the run's one load of the model
    table2 = p["toy-table2"]
    toy = {"threads": TOY_THREADS, "options": {"progress": True}}  # one torch thread, as `countlens toy` runs
    trained = {**toy, "cache": True}
    return [
        Stage("toy-rates", "Table 1: B_min rates", p["toy-rates"], run_rates, RatesResult, view=rates_view, **toy),
        Stage("toy-lcap", "Table 1: L_cap of bare pre-LN", p["toy-lcap"], run_lcap, LcapResult, view=lcap_view, **toy),
        Stage("toy-table2", "Table 2: trained softmax", p["toy-table2"], run_table2, Table2Result, view=table2_view,
              **{**trained, "options": {"progress": True,
                                        "workers": toy_workers(len(table2.d) * len(table2.L) * len(table2.seeds))}}),
        Stage("toy-table3", "Table 3: capacity under a cap", p["toy-table3"], run_table3, Table3Result,
              view=table3_view, **{**trained, "options": {"progress": True,
                                                          "workers": toy_workers(len(TABLE3_VARIANTS))}}),
        Stage("toy-figure1", "Figure 1", p["toy-figure1"], run_figure1, Figure1Result, draw_figure1, figure1_view,
              **toy),
        # Panel (d) of Figure 2 is Table 3's attained column: reuse it rather than train again.
        Stage("toy-figure2", "Figure 2", p["toy-figure2"], run_figure2, Figure2Result, draw_figure2, figure2_view,
              needs=("toy-table3",), links=("table3",), **trained),
        Stage("toy-figure3", "Figure 3", p["toy-figure3"], run_figure3, Figure3Result, draw_figure3, figure3_view,
              **trained),
        Stage("toy-figure4", "Figure 4", p["toy-figure4"], run_figure4, Figure4Result, draw_figure4, figure4_view,
              **trained),
        Stage("toy-construct", "Toy constructions for the comparison", p["toy-construct"], run_constructions,
              ConstructionsResult, **toy),
        Stage("capture", "Capture: assistant-boundary residual stream", captured, run_capture, CaptureResult,
              places={"out": ACTS_PLACE}, options={"progress": True},
              model=None if captured.random_init else model),
        Stage("geometry", "Figures 5 and 6: layerwise geometry", p["geometry"], run_geometry, GeometryResult,
              draw_geometry, geometry_view, needs=("capture",), links=("acts",)),
        Stage("probe", "Figure 7: ridge probes per location", p["probe"], run_probes, ProbeResult, draw_probes,
              probe_view, needs=("capture",), links=("acts",), places={"resume_dir": CACHE_FOLDER},
              options={"progress": True}),
        Stage("probe-sweep", "Figure 8: regularisation–norm sweep", p["probe-sweep"], run_sweep, SweepResult,
              draw_sweep, sweep_view, needs=("capture",), links=("acts",)),
        Stage("compare", "Toy vs LLM", p["compare"], run_compare, CompareResult, draw_compare, compare_view,
              needs=("capture", "toy-construct"), links=("toy", "acts"), places={"work_dir": ""}),
        Stage("patching", "Figure 9a: boundary activation patching", patching, run_patching, PatchingResult,
              draw_patching, patching_view, **llm),
        Stage("steering", "Figure 9b: steering along the probe and the mean difference", steering, run_steering,
              SteeringResult, draw_steering, steering_view, needs=("capture", "probe"), links=("acts", "probes"),
              **llm),
        Stage("capture-items", "Capture at every item", items, run_capture, CaptureResult,
              places={"out": ACTS_PLACE}, **llm),
        Stage("probe-running", "Figure 10: the count at every item", p["probe-running"], run_running_count,
              RunningCountResult, draw_running_count, running_count_view, needs=("capture-items",), links=("acts",),
              places={"resume_dir": CACHE_FOLDER}, options={"progress": True}),
        Stage("patching-positions", "Figure 11: patching over positions and layers", positions,
              run_position_patching, PositionPatchingResult, draw_position_patching, position_patching_view, **llm),
        Stage("heads", "Figure 12: the heads that read the items", heads, run_heads, HeadsResult, draw_heads,
              heads_view, needs=("probe",), links=("probes",), **llm),
        Stage("lens", "Figure 13: lenses at the boundary", lens, run_lens, LensResult, draw_lens, lens_view,
              needs=("capture", "probe"), links=("acts", "probes"), **llm),
    ]


def stage_titles() -> dict[str, str]:
    """Every stage's name and title, in the order they run."""
    return {s.name: s.title for s in build_stages("quick")}


def reproduce(out: Path, preset: str, capture: dict[str, Any] | None = None, only: list[str] | None = None) -> dict:
    """Run (or reuse) every stage, then write ``reproduce.json`` and ``index.html``. Returns the summary.

    Before the first stage, the capture is checked (model, template, items, context) when it is to run, so
    a model that cannot be captured is refused (:class:`UsageError`) before any toy stage runs.
    """
    out = Path(out)
    stages = build_stages(preset, capture)
    select(stages, only)
    refuse_other_stages(out, stages)
    by_name = {s.name: s for s in stages}
    with model_pool() as pool:  # each model resolved, read and loaded once for the whole run
        if (not only or "capture" in only) and stage_done(out, by_name["capture"]) is None:
            preflight_capture(by_name["capture"].config, out / "capture" / ACTS_PLACE)
        out.mkdir(parents=True, exist_ok=True)
        records = run_stages(out, stages, only, pool)
    model = by_name["capture"].config.model.model
    summary = {
        "preset": preset, "model": model, "model_args": capture or {}, "out": str(out),
        "stages": [{"title": s.title, **records[s.name]} for s in stages],
        "provenance": provenance({"preset": preset, "model": model, "model_args": capture or {},
                                  "sizes": {s.name: config_record(s.config) for s in stages}}),
    }
    write_json_atomic(out / REPORT_FILE, summary)
    write_index(out, stages)
    return summary


__all__ = ["ACTS_PLACE", "toy_workers", "capture_config", "build_stages", "stage_titles", "reproduce"]
