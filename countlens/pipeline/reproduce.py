"""``countlens reproduce``: every table and figure of the paper as resumable stages, and one HTML report.

The stages (:mod:`countlens.pipeline.stages`) are the rooms' experiments at the sizes of one preset
(:mod:`countlens.pipeline.presets`), run in order into ``OUT/<stage>/``: an interrupted ``reproduce`` only
does what is missing, a stage finished with another config (another preset or model) is refused rather
than mixed in, and a failing stage is reported by name while the others still run. Inside a stage, long
experiments keep their finished parts in a :class:`~countlens.core.cache.ResultCache`
(``OUT/<stage>/.cache``, removed once the stage is done).

The run loads each model once (:func:`countlens.llm.models.model_pool`): a stage that declares the model it
runs (``Stage(model=...)``) is handed it loaded, and a stage whose run takes ``pool=`` is handed the run's
pool, so every resolution, tokenizer and config the stages' plans read is read once.

``OUT/index.html`` (:mod:`countlens.pipeline.report`) shows every figure and table with the configs and
package versions that made them; every number on it is read from the JSON file beside it.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError
from countlens.core.io import provenance, write_json_atomic
from countlens.core.options import option_value, with_options
from countlens.core.report import REPORT_FILE
from countlens.core.results import config_record
from countlens.llm.capture.experiment import preflight_capture
from countlens.llm.models import ModelPool, model_pool
from countlens.pipeline.experiments import (
    SOURCE,
    experiments,
    preset_config,
    read_paths,
    stage_titles,
)
from countlens.pipeline.report import write_index
from countlens.pipeline.stages import Stage, refuse_other_stages, run_stages, select, stage_done
from countlens.pipeline.tasks import (
    LENS_STAGE,
    TASKS_DIR,
    compare_tasks,
    task_capture,
    task_folder_name,
    task_stages,
)

ACTS_PLACE = "acts"  # the capture's activation folder inside its stage folder


def capture_config(preset: str, capture: dict[str, Any] | None = None):
    """The preset's capture config with the command line's overrides (``model``, ``device``, ...)."""
    return preset_config(SOURCE, preset).with_options(**(capture or {}))


def _inherited(captured, name: str):
    """The capture's setting ``name`` as an experiment inherits it: a nested config whole (``model``: the
    ModelSpec with its revision, device and dtype), any other setting by value."""
    if name in {f.name for f in dataclasses.fields(captured)}:
        return getattr(captured, name)
    return option_value(captured, name)


def build_stages(preset: str, capture: dict[str, Any] | None = None, progress: bool = True) -> list[Stage]:
    """The stages of ``reproduce`` for ``preset`` (quick, full, test): every declared experiment
    (:func:`countlens.pipeline.experiments.experiments`) at that size, in report order. ``capture`` overrides
    fields of the preset's capture config (``model``, ``device``, ...); an experiment that ``inherits``
    settings takes them from that config, so it runs the capture's model, wording and task; one that cannot run
    on them (an analysis that needs a corrupted twin, on a task without one) is ``refused``, with the one-line
    reason its config gave, and skipped by the run. ``progress``: ``False`` turns off every stage's progress
    bars and model-loading messages (``reproduce --quiet``)."""
    captured = capture_config(preset, capture)
    stages = []
    for e in experiments():
        refused = None
        if e.name == SOURCE:
            config = captured
        else:
            config = e.preset(preset, **read_paths(e))
            if config is None:  # the experiment declares no report stage at this size
                continue
            if e.inherits:
                try:
                    config = with_options(config, **{k: _inherited(captured, k) for k in e.inherits})
                except ConfigError as exc:  # this experiment cannot run on the capture's task (no twins, say)
                    refused = f"{e.name} cannot run on this capture: {exc}"
        stages.append(Stage(
            e.name, e.title, config, e.run, e.result, e.draw(), e.show(), needs=tuple(dict.fromkeys(e.reads.values())),
            links=tuple(e.reads), places=dict(e.places), options=_run_options(e, config, progress), cache=e.cache,
            threads=e.threads, model=captured.model if e.needs_model(config) else None, refused=refused))
    return stages


def _run_options(e: Any, config: Any, progress: bool) -> dict[str, Any]:
    """The run keywords of experiment ``e`` on ``config``, its progress bars off unless ``progress``."""
    options = e.run_options(config)
    return {**options, "progress": False} if not progress and "progress" in options else options


def reproduce(out: Path, preset: str, capture: dict[str, Any] | None = None, only: list[str] | None = None,
              pool: ModelPool | None = None, tasks: tuple[str, ...] = (), progress: bool = True) -> dict:
    """Run (or reuse) every stage, then write ``reproduce.json`` and ``index.html``. Returns the summary.

    ``tasks`` (``--tasks``): further counting tasks; each runs the model's stages of
    :func:`countlens.pipeline.tasks.task_stages` into ``OUT/tasks/<task>/`` (a report of its own, in the same
    model pool), and :func:`countlens.pipeline.tasks.compare_tasks` sets them side by side with this report's
    own task in ``OUT/tasks/``, shown on this report.

    Before the first stage, the capture is checked (model, template, items, context) when it is to run, so
    a model that cannot be captured is refused (:class:`UsageError`) before any toy stage runs. ``pool``:
    the :class:`~countlens.llm.models.ModelPool` of a larger run (a study) to load the model in, its
    weights released at the end and its reads kept; without one, the run makes its own. ``progress``:
    ``False`` hides every stage's progress bars and model-loading messages.
    """
    out = Path(out)
    stages = build_stages(preset, capture, progress)
    select(stages, only)
    refuse_other_stages(out, stages)
    named = {s.name: s for s in stages}
    handed = pool
    with model_pool() if handed is None else contextlib.nullcontext(handed) as pool:  # each model read, loaded once
        if (not only or SOURCE in only) and stage_done(out, named[SOURCE]) is None:
            # the plan is kept in the pool: the capture stage runs this one
            preflight_capture(named[SOURCE].config, out / SOURCE / ACTS_PLACE, pool=pool)
        out.mkdir(parents=True, exist_ok=True)
        try:
            records = run_stages(out, stages, only, pool)
            task_runs = _run_tasks(out, preset, capture, named, records, tasks, pool, progress) if tasks else []
        finally:
            if handed is not None:
                handed.release_models()
    model = named[SOURCE].config.model.model
    summary = {
        "preset": preset, "model": model, "model_args": capture or {}, "out": str(out),
        "stages": [{"title": s.title, **records[s.name]} for s in stages],
        **({"tasks": task_runs} if tasks else {}),
        "provenance": provenance({"preset": preset, "model": model, "model_args": capture or {},
                                  "sizes": {s.name: config_record(s.config) for s in stages}}),
    }
    write_json_atomic(out / REPORT_FILE, summary)
    write_index(out, stages)
    return summary


def _run_tasks(out: Path, preset: str, capture: dict[str, Any] | None, named: dict[str, Stage],
               records: dict[str, dict], tasks: tuple[str, ...], pool: ModelPool,
               progress: bool = True) -> list[dict[str, Any]]:
    """Each task of ``tasks`` other than the report's own as a report of its own in ``OUT/tasks/<task>/``, then
    their comparison (with the report's own task where its stages are done); one record per task."""
    own = named[SOURCE].config.prompts.task
    needed = task_stages(preset)
    runs, entries = [], []
    if all(records.get(n, {}).get("status") == "done" for n in needed if n != LENS_STAGE):
        entries.append((own, out))
    for task in (t for t in tasks if t != own):
        folder = out / TASKS_DIR / task_folder_name(task)
        summary = reproduce(folder, preset, task_capture(preset, capture, task), only=needed, pool=pool,
                            progress=progress)
        status = {s["stage"]: s for s in summary["stages"]}
        failed = [f"{n} {status[n]['status']}: {status[n].get('reason', '')}" for n in needed
                  if status[n]["status"] != "done" and n != LENS_STAGE]
        runs.append({"task": task, "folder": str(folder.relative_to(out)), "status": "failed" if failed else "done",
                     **({"reason": "; ".join(failed)} if failed else {})})
        if not failed:
            entries.append((task, folder))
    if entries:
        compare_tasks(entries, out / TASKS_DIR, str(named[SOURCE].config.model.model), preset)
    return runs


__all__ = ["ACTS_PLACE", "capture_config", "build_stages", "stage_titles", "reproduce"]
