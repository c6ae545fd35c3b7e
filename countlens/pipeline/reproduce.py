"""``countlens reproduce``: every table and figure of the paper as resumable stages, and one HTML report.

A :class:`Stage` is a room's experiment config, the function that runs it (``run_x(config) -> XResult``),
the function that draws the result's figures (``draw_x(result, folder)``), the files it leaves in
``OUT/<stage>/`` and the stages whose outputs it reads. The presets ``quick`` (``make demo``), ``full`` (the
paper's sizes) and ``test`` (tiny, for the test suite) are one table of configs, :data:`PRESETS`.

A finished stage leaves ``OUT/<stage>/stage.json`` (its config, the call that reruns it, wall and CPU time,
files); a rerun reuses it, so an interrupted ``reproduce`` only does what is missing, and a stage finished
with another config (another preset or model) is refused rather than mixed in. Inside a stage, long
experiments keep their finished parts in a :class:`~countlens.core.cache.ResultCache` (``OUT/<stage>/.cache``,
removed once the stage is done). A failing stage is reported by name, the stages that need it are skipped,
the others still run, and the report shows what exists.

``OUT/index.html`` (:mod:`countlens.pipeline.report`) shows every figure and table with the configs
and package versions that made them; every number on it is read from the JSON file beside it.
"""

from __future__ import annotations

import dataclasses
import os
import resource
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.analysis.experiments import (
    CompareConfig,
    CompareResult,
    GeometryConfig,
    GeometryResult,
    run_compare,
    run_geometry,
)
from countlens.analysis.figures import compare_view, draw_compare, draw_geometry, geometry_view
from countlens.core.cache import ResultCache, refuse_other_settings
from countlens.core.errors import UsageError
from countlens.core.io import provenance, read_json, to_jsonable, write_json_atomic, write_text_atomic
from countlens.core.report import REPORT_FILE, STAGE_FILE
from countlens.core.threads import TOY_THREADS, torch_threads
from countlens.llm.experiments import (
    CaptureConfig,
    PatchingConfig,
    PatchingResult,
    SteeringConfig,
    SteeringResult,
    preflight_capture,
    run_capture,
    run_patching,
    run_steering,
)
from countlens.llm.figures import draw_patching, draw_steering, patching_view, steering_view
from countlens.pipeline.report import write_index
from countlens.probes.experiments import (
    ProbeConfig,
    ProbeResult,
    SweepConfig,
    SweepResult,
    run_probes,
    run_sweep,
)
from countlens.probes.figures import draw_probes, draw_sweep, probe_view, sweep_view
from countlens.toy.budget import TABLE3_VARIANTS
from countlens.toy.experiments import (
    ConstructConfig,
    DynamicsResult,
    Figure1Config,
    Figure1Result,
    Figure2Config,
    Figure2Result,
    Figure3Config,
    Figure4Config,
    LcapConfig,
    LcapResult,
    RatesConfig,
    RatesResult,
    Table2Config,
    Table2Result,
    Table3Config,
    Table3Result,
    run_construct,
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

CACHE_FOLDER = ".cache"
ACTS = "acts"  # the capture's activation folder inside its stage folder
COMPARE_VARIANTS = ("linear", "softmax", "softmax-postln-bare", "softmax-postln-learned")


@dataclass(frozen=True)
class Stage:
    """One step of the report.

    ``run(config, **inputs)`` returns the stage's result, which ``save``s itself into the stage folder (or,
    with ``save_to_file``, to the first of ``outputs``); ``draw(result, folder)`` writes its figures;
    ``outputs`` (relative to the stage folder) must exist afterwards; ``needs`` names the stages whose
    outputs ``inputs`` point at. With ``cache``, ``run`` also gets ``cache=`` a :class:`ResultCache` to resume
    from. ``result_type`` reads the saved result back (``from_dict``) and ``view`` shows it on the report.
    ``threads`` caps torch's intra-op threads while it runs (the toy stages: one, as ``countlens toy``);
    ``options`` are further keyword arguments of ``run`` that change how it runs but never what it computes
    (Table 3's ``workers``), so they are not part of the stage's settings.
    """

    name: str
    title: str
    config: Any
    run: Callable[..., Any]
    outputs: tuple[str, ...]
    draw: Callable[[Any, Path], Any] | None = None
    needs: list[str] = field(default_factory=list)
    inputs: dict[str, Any] = field(default_factory=dict)
    cache: bool = False
    save_to_file: bool = False
    result_type: Any = None
    view: Callable[..., None] | None = None
    threads: int | None = None  # torch intra-op threads while it runs (None: the process's)
    options: dict[str, Any] = field(default_factory=dict)  # how it runs, never what it computes

    def call(self) -> str:
        """The Python call that reruns this stage, for the report's "Calls" list."""
        args = [repr(self.config)] + [f"{k}={str(v) if isinstance(v, Path) else v!r}"
                                      for k, v in {**self.inputs, **self.options}.items()]
        return f"{self.run.__module__}.{self.run.__qualname__}({', '.join(args)})"

    def settings(self) -> dict[str, Any]:
        """What determines the stage's outputs: its config and inputs (JSON-able)."""
        return to_jsonable({"config": self.config, "inputs": self.inputs})


def _cpu_seconds() -> float:
    """CPU time (user + system, all threads) of this process and its finished worker processes: on a shared
    machine a steadier measure of a stage's cost than wall time."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def _record(out: Path, stage: Stage) -> dict[str, Any] | None:
    path = out / stage.name / STAGE_FILE
    if not path.is_file():
        return None
    try:
        record = read_json(path, "stage record")
    except UsageError:
        return None
    return record if isinstance(record, dict) else None


def stage_done(out: Path, stage: Stage) -> dict[str, Any] | None:
    """The finished stage's record if ``stage.json`` says done and every output is there."""
    record = _record(out, stage)
    if record is None or record.get("status") != "done":
        return None
    if not all((out / stage.name / o).exists() for o in stage.outputs):
        return None
    return record


def refuse_other_stages(out: Path, stages: list[Stage]) -> None:
    """A finished stage made with another config (another preset or model) is never mixed into this report."""
    for stage in stages:
        record = _record(out, stage)
        if record is not None and "settings" in record:
            refuse_other_settings(out, f"a report (stage {stage.name})", record["settings"], stage.settings())


def _stage_files(folder: Path) -> list[str]:
    """The stage's own top-level files (sub-folders hold activations or resume state, not results)."""
    return sorted(p.name for p in folder.iterdir()
                  if p.is_file() and p.name not in (STAGE_FILE, "error.log") and not p.name.startswith("."))


def _failed(stage: Stage, reason: str, start: float) -> dict[str, Any]:
    return {"stage": stage.name, "status": "failed", "reason": reason, "command": stage.call(),
            "wall_s": time.perf_counter() - start}


def run_stage(out: Path, stage: Stage) -> dict[str, Any]:
    """Run ``stage``, save its result and figures, and write ``stage.json`` on success. Returns the record.

    A :class:`UsageError` fails the stage with its message; any other exception fails it with its type and
    message, its traceback in ``OUT/<stage>/error.log``. ``KeyboardInterrupt`` stops the whole run.
    """
    folder = out / stage.name
    folder.mkdir(parents=True, exist_ok=True)
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    print(f"reproduce: stage {stage.name} ...", file=sys.stderr, flush=True)
    cache = ResultCache(folder / CACHE_FOLDER, stage.name) if stage.cache else None
    kwargs = {**stage.inputs, **stage.options, **({"cache": cache} if cache is not None else {})}
    try:
        with torch_threads(stage.threads):
            result = stage.run(stage.config, **kwargs)
        if hasattr(result, "save"):
            result.save(folder / stage.outputs[0] if stage.save_to_file else folder)
        if stage.draw is not None:
            stage.draw(result, folder)
    except UsageError as exc:
        return _failed(stage, str(exc), start)
    except Exception as exc:  # noqa: BLE001 - a crashing stage is reported, the others go on
        log = folder / "error.log"
        write_text_atomic(log, traceback.format_exc())
        return _failed(stage, f"{exc.__class__.__name__}: {exc} (traceback in {log})", start)
    wall = time.perf_counter() - start
    missing = [o for o in stage.outputs if not (folder / o).exists()]
    if missing:
        return _failed(stage, f"the stage finished but did not write {', '.join(missing)}", start)
    if cache is not None:
        cache.clear()
    record = {"stage": stage.name, "title": stage.title, "status": "done", "wall_s": wall,
              "cpu_s": _cpu_seconds() - cpu_start, "commands": [stage.call()], "files": _stage_files(folder),
              "settings": stage.settings()}
    write_json_atomic(folder / STAGE_FILE, record)
    (folder / "error.log").unlink(missing_ok=True)
    return record


def select(stages: list[Stage], only: list[str] | None) -> None:
    """Check ``--stages`` names against the plan (:class:`UsageError` naming the choices)."""
    names = [s.name for s in stages]
    unknown = [o for o in only or [] if o not in names]
    if unknown:
        raise UsageError(f"unknown stage(s) {', '.join(unknown)}; choose from {', '.join(names)}")


def run_stages(out: Path, stages: list[Stage], only: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Run (or reuse) every stage in order; returns each stage's record by name."""
    records: dict[str, dict[str, Any]] = {}
    for stage in stages:
        done = stage_done(out, stage)
        if done is not None:
            records[stage.name] = {**done, "status": "done", "reused": True}
            continue
        if only and stage.name not in only:
            records[stage.name] = {"stage": stage.name, "status": "not run", "reason": "not selected by --stages"}
            continue
        blocked = [n for n in stage.needs if records.get(n, {}).get("status") != "done"]
        if blocked:
            records[stage.name] = {"stage": stage.name, "status": "skipped",
                                   "reason": f"needs stage {', '.join(blocked)}"}
            continue
        record = records[stage.name] = {**run_stage(out, stage), "reused": False}
        print(f"reproduce: stage {stage.name} {record['status']}"
              + (f": {record['reason']}" if record["status"] != "done" else f" in {record['wall_s']:.1f} s"),
              file=sys.stderr, flush=True)
    return records


# ------------------------------------------------------------------------------------------- the presets
#
# One table: per preset, the config of every stage. "quick" is `make demo` (measured to fit 15 minutes on
# 2 cores, see BENCHMARKS.md), "full" the paper's sizes, "test" tiny sizes for the test suite. The rooms'
# config classes hold the defaults (their reduced sizes) and `.paper()` (the paper's); only what differs
# is written here. Paths are filled in by :func:`build_stages`; the capture's model by ``reproduce``'s flags.


def _constructions(d: int, L: int) -> tuple[ConstructConfig, ...]:
    return tuple(ConstructConfig(variant=v, d=d, L=L) for v in COMPARE_VARIANTS)


_COUNTS = list(range(0, 101))
_WINDOWS = {"low": (1, 10), "high": (91, 100), "pca_counts": (1, 100)}
_TEST_WINDOWS = {"low": (1, 4), "high": (8, 11), "pca_counts": (1, 11)}

PRESETS: dict[str, dict[str, Any]] = {
    "quick": {
        "toy-rates": RatesConfig.paper(), "toy-lcap": LcapConfig(), "toy-table2": Table2Config(),
        "toy-table3": Table3Config(attained=True), "toy-figure1": Figure1Config(), "toy-figure2": Figure2Config(),
        "toy-figure3": Figure3Config(), "toy-figure4": Figure4Config(), "toy-construct": _constructions(16, 100),
        # All four token pairs (Figure 5 averages them, as the paper does), one wording and one seed: 404
        # prompts, each with the model's own answer (Figure 7's behaviour line). At about 0.75 s a prompt
        # on 2 idle cores (BENCHMARKS.md) this is the share of the 15 minutes the capture can have.
        "capture": CaptureConfig(L=256, counts=_COUNTS, per_count=1, seeds=[0], configs=["count"], answers=True),
        "probe": {}, "probe-sweep": {}, "geometry": _WINDOWS, "compare": {"arc_counts": (1, 100), **_WINDOWS},
        "patching": PatchingConfig(), "steering": SteeringConfig(max_prompts=4),
    },
    "full": {
        "toy-rates": RatesConfig.paper(), "toy-lcap": LcapConfig(), "toy-table2": Table2Config.paper(),
        "toy-table3": Table3Config.paper(attained=True), "toy-figure1": Figure1Config(),
        "toy-figure2": Figure2Config.paper(), "toy-figure3": Figure3Config.paper(),
        "toy-figure4": Figure4Config.paper(), "toy-construct": _constructions(16, 100),
        # The capture's own defaults: all four token pairs and every wording (3,636 prompts).
        "capture": CaptureConfig(L=256, counts=_COUNTS, per_count=1, seeds=[0, 1, 2], answers=True),
        "probe": {}, "probe-sweep": {}, "geometry": _WINDOWS, "compare": {"arc_counts": (1, 100), **_WINDOWS},
        # Every token pair and wording, three seeds, counts across the range.
        "patching": PatchingConfig(L=256, sources=[40, 30, 20, 10, 5, 3], targets=[3, 5, 10, 20, 30, 40],
                                   pairs=CaptureConfig().pairs, configs=CaptureConfig().configs, seeds=[0, 1, 2]),
        "steering": SteeringConfig(counts=list(range(5, 51, 5)), max_prompts=40),
    },
    "test": {
        "toy-rates": RatesConfig(d=4, L=(10, 30)), "toy-lcap": LcapConfig(d=(3, 4)),
        "toy-table2": Table2Config(d=(4,), L=(10,), seeds=(0,), steps=5),
        "toy-table3": Table3Config(d=4, B=(10,), attained=True, attained_grid=(5, 10), attained_seeds=(0,),
                                   attained_steps=5),
        "toy-figure1": Figure1Config(L=10), "toy-figure2": Figure2Config(d=4, L=(5, 10), seeds=(0,), steps=5),
        "toy-figure3": Figure3Config(d=4, L=10, seeds=(0,), steps=5),
        "toy-figure4": Figure4Config(d=4, L=10, steps=5, minibatch_steps=5, batch_size=16),
        "toy-construct": _constructions(4, 12),
        "capture": CaptureConfig(L=16, counts=list(range(0, 13)), per_count=1, seeds=[0, 1], pairs=[["a", "b"]],
                                 configs=["count"], answers=True, answer_tokens=3),
        "probe": {}, "probe-sweep": {}, "geometry": _TEST_WINDOWS, "compare": {"arc_counts": (1, 11), **_TEST_WINDOWS},
        "patching": PatchingConfig(L=16, sources=[9, 3], targets=[3, 9], max_new_tokens=3),
        "steering": SteeringConfig(deltas=[-2.0, 0.0, 2.0], counts=[3, 6], max_prompts=2, max_new_tokens=3),
    },
}


def toy_workers(jobs: int) -> int:
    """Processes for ``jobs`` independent toy trainings (Table 2's runs, Table 3's attained columns): one per
    core, at most one per job."""
    return max(1, min(int(jobs), os.cpu_count() or 1))


def run_constructions(configs: tuple[ConstructConfig, ...], folder: Path) -> None:
    """Every construction of ``configs``, each saved as ``folder/<variant>.json``."""
    for config in configs:
        run_construct(config).save(Path(folder) / f"{config.variant}.json")


def build_stages(out: Path, preset: str, capture: dict[str, Any] | None = None) -> list[Stage]:
    """The stages of ``reproduce`` for ``preset`` (quick, full, test), writing under ``out``. ``capture``
    overrides fields of the preset's :class:`CaptureConfig` (``model``, ``device``, ...)."""
    if preset not in PRESETS:
        raise UsageError(f"unknown size preset {preset!r}; choose {', '.join(PRESETS)}")
    p, out = PRESETS[preset], Path(out)
    acts = out / "capture" / ACTS
    capture_config = dataclasses.replace(p["capture"], **(capture or {}))
    # Figure 9 runs the capture's own model and wording
    patching = dataclasses.replace(p["patching"], **{k: getattr(capture_config, k) for k in (
        "model", "gguf_file", "revision", "trust_remote_code", "device", "dtype", "template")})
    steering = dataclasses.replace(p["steering"], acts=str(acts), probes=str(out / "probe" / "probes.json"),
                                   device=capture_config.device)
    table3 = out / "toy-table3" / "table3.json"
    table2_runs = len(p["toy-table2"].d) * len(p["toy-table2"].L) * len(p["toy-table2"].seeds)
    constructs = p["toy-construct"]
    one = {"threads": TOY_THREADS}  # the toy stages run on one torch thread, as `countlens toy` does
    toy = {"inputs": {"progress": True}, "cache": True, "save_to_file": True, **one}
    return [
        Stage("toy-rates", "Table 1: B_min rates", p["toy-rates"], run_rates, ("rates.json",), inputs={"progress": True},
              save_to_file=True, result_type=RatesResult, **one, view=rates_view),
        Stage("toy-lcap", "Table 1: L_cap of bare pre-LN", p["toy-lcap"], run_lcap, ("lcap.json",),
              inputs={"progress": True}, save_to_file=True, result_type=LcapResult, view=lcap_view, **one),
        Stage("toy-table2", "Table 2: trained softmax", p["toy-table2"], run_table2, ("table2.json",), **toy,
              result_type=Table2Result, view=table2_view, options={"workers": toy_workers(table2_runs)}),
        Stage("toy-table3", "Table 3: capacity under a cap", p["toy-table3"], run_table3, ("table3.json",), **toy,
              result_type=Table3Result, view=table3_view, options={"workers": toy_workers(len(TABLE3_VARIANTS))}),
        Stage("toy-figure1", "Figure 1", p["toy-figure1"], run_figure1, ("figure1.json", "figure1.png"),
              draw_figure1, inputs={"progress": True}, save_to_file=True, result_type=Figure1Result,
              view=figure1_view, **one),
        # Panel (d) of Figure 2 is Table 3's attained column: reuse it rather than train again.
        Stage("toy-figure2", "Figure 2", dataclasses.replace(p["toy-figure2"], table3=str(table3)), run_figure2,
              ("figure2.json", "figure2.png"), draw_figure2, ["toy-table3"], **toy, result_type=Figure2Result,
              view=figure2_view),
        Stage("toy-figure3", "Figure 3", p["toy-figure3"], run_figure3, ("figure3.json", "figure3.png"),
              draw_figure3, **toy, result_type=DynamicsResult, view=figure3_view),
        Stage("toy-figure4", "Figure 4", p["toy-figure4"], run_figure4, ("figure4.json", "figure4.png"),
              draw_figure4, **toy, result_type=DynamicsResult, view=figure4_view),
        Stage("toy-construct", "Toy constructions for the comparison", constructs, run_constructions,
              tuple(f"{c.variant}.json" for c in constructs), inputs={"folder": out / "toy-construct"}, **one),
        Stage("capture", "Capture: assistant-boundary residual stream", capture_config, run_capture,
              (f"{ACTS}/meta.json",), inputs={"out": acts}),
        Stage("geometry", "Figures 5 and 6: layerwise geometry", GeometryConfig(acts=str(acts), **p["geometry"]),
              run_geometry, ("geometry.json", "figure5.png", "figure6.png"), draw_geometry, ["capture"],
              result_type=GeometryResult, view=geometry_view),
        Stage("probe", "Figure 7: ridge probes per location", ProbeConfig(acts=str(acts), **p["probe"]), run_probes,
              ("probes.json", "fig7_binned_accuracy.png"), draw_probes, ["capture"],
              inputs={"resume_dir": out / "probe" / CACHE_FOLDER, "progress": True}, result_type=ProbeResult,
              view=probe_view),
        Stage("probe-sweep", "Figure 8: regularisation–norm sweep", SweepConfig(acts=str(acts), **p["probe-sweep"]),
              run_sweep, ("sweep.json", "fig8_norm_sweep.png"), draw_sweep, ["capture"], result_type=SweepResult,
              view=sweep_view),
        Stage("compare", "Toy vs LLM",
              CompareConfig(toy=(str(out / "toy-construct"),), acts=str(acts), toy_L=constructs[0].L, **p["compare"]),
              run_compare, ("compare.json", "compare.png"), draw_compare, ["capture", "toy-construct"],
              inputs={"work_dir": out / "compare"}, result_type=CompareResult, view=compare_view),
        Stage("patching", "Figure 9a: boundary activation patching", patching, run_patching,
              ("patching.json", "fig9a_patching.png"), draw_patching, save_to_file=True, result_type=PatchingResult,
              view=patching_view),
        Stage("steering", "Figure 9b: steering along the probe", steering, run_steering,
              ("steering.json", "fig9b_steering.png"), draw_steering, ["capture", "probe"], save_to_file=True,
              result_type=SteeringResult, view=steering_view),
    ]


def stage_titles() -> dict[str, str]:
    """Every stage's name and title, in the order they run."""
    return {s.name: s.title for s in build_stages(Path("OUT"), "quick")}


def reproduce(out: Path, preset: str, capture: dict[str, Any] | None = None, only: list[str] | None = None) -> dict:
    """Run (or reuse) every stage, then write ``reproduce.json`` and ``index.html``. Returns the summary.

    Before the first stage, the capture is checked (model, template, items, context) when it is to run, so
    a model that cannot be captured is refused (:class:`UsageError`) before any toy stage runs.
    """
    out = Path(out)
    stages = build_stages(out, preset, capture)
    select(stages, only)
    refuse_other_stages(out, stages)
    by_name = {s.name: s for s in stages}
    if (not only or "capture" in only) and stage_done(out, by_name["capture"]) is None:
        preflight_capture(by_name["capture"].config, by_name["capture"].inputs["out"])
    out.mkdir(parents=True, exist_ok=True)
    records = run_stages(out, stages, only)
    summary = {
        "preset": preset, "model": by_name["capture"].config.model, "model_args": capture or {}, "out": str(out),
        "stages": [{"title": s.title, **records[s.name]} for s in stages],
        "provenance": provenance({"preset": preset, "model": by_name["capture"].config.model,
                                  "model_args": capture or {},
                                  "sizes": {s.name: to_jsonable(s.config) for s in stages}}),
    }
    write_json_atomic(out / REPORT_FILE, summary)
    write_index(out, stages)
    return summary
