"""``countlens study``: the whole analysis over several models, then one comparison across them.

For each model, capture (with the model's own answers, as the size presets record them) → probes →
geometry → toy-vs-LLM comparison (→ Figure 9's patching and steering, where asked) into
``OUT/models/<name>/``, with that model's own report (``index.html``): the model's stages of
:func:`countlens.pipeline.reproduce.reproduce`. With a Ray target every model is one Ray task on its own GPU
(or CPU slot); without it, the models run one after another in this process, each model's weights loaded
once for all its stages and released before the next model loads (its resolution, tokenizer and config,
read by the check before any model runs, are read once: :func:`countlens.llm.models.model_pool`). A
finished model leaves its summary in ``OUT/.study/`` (keyed by the model and every setting that changes it),
so a rerun recomputes only the models that did not finish.

Then the comparison across models (:class:`StudyResult`): ``study.json`` and ``study.csv`` (one row per
model: best validation-selected probe accuracy and where, gap and effective-rank ratios after the first,
middle and last block, the nearest toy variant, behavioural accuracy where captured), and the figure and
page of :mod:`countlens.pipeline.study_report`. Definitions: ``docs/definitions.md §2``.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from countlens.analysis.experiments import CompareResult, GeometryResult
from countlens.core.cache import ResultCache
from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.locations import location_label, location_names
from countlens.core.results import Result, result_provenance
from countlens.llm import CaptureResult, preflight_capture
from countlens.llm.models import ModelPool, model_pool
from countlens.llm.tasks import DEFAULT_TASK, parse_task
from countlens.pipeline.experiments import PRESETS, study_stages
from countlens.pipeline.reproduce import ACTS_PLACE, capture_config, reproduce
from countlens.pipeline.study_report import (
    TABLE_COLUMNS,
    TABLE_FILE,
    TABLE_HEADER,
    draw_study,
    write_study_page,
)
from countlens.pipeline.tasks import LENS_STAGE, TASKS_DIR, compare_tasks, parse_tasks, task_folder_name
from countlens.probes.probe import ProbeResult

MODELS_DIR = "models"
CACHE_DIR = ".study"
RETRIES = 2  # retries of a model's Ray task whose worker died; the model resumes from its finished stages
# A model's own report runs the experiments declared in study group "model" (the rest of `reproduce` is the
# toy theory, which is model-free), and those of groups "patching" (--patching) and "where" (--where) where
# asked (:func:`countlens.pipeline.experiments.study_stages`).

def model_folder_names(models: list[str]) -> list[str]:
    """One folder name per model spec (``org/name`` → ``org--name``, a path → its last part), unique."""
    names: list[str] = []
    for spec in models:
        path = Path(spec).expanduser()
        base = path.name if path.exists() else spec.replace("/", "--")
        base = re.sub(r"[^A-Za-z0-9._-]+", "-", base).strip("-.") or "model"
        name, k = base, 2
        while name in names:
            name, k = f"{base}-{k}", k + 1
        names.append(name)
    return names


def block_positions(n_blocks: int) -> dict[str, int]:
    """Location indices after the first, the middle and the last block (location ``l`` is the output of
    block ``l``; the middle is Figure 6's, ``(n_blocks + 1) // 2``)."""
    return {"first": min(1, n_blocks), "middle": max(min(1, n_blocks), (n_blocks + 1) // 2), "last": n_blocks}


@dataclass
class StudyConfig:
    """``countlens study``: ``models`` (specs as for ``llm capture --model``), the size ``preset`` of
    size preset (``quick``, ``full``, ``test``) every model runs at, and ``capture`` — fields of the preset's
    capture config set for every model (``device``, ``dtype``, ``batch_size``, ``template``, ...);
    ``patching`` adds Figure 9's patching and steering to every model's report, ``where`` Figures 10-13 (the
    count at every item, patching over positions, the heads, the lenses). ``tasks`` (``--tasks``, checked by
    :func:`~countlens.pipeline.tasks.parse_tasks`): run every model on each of these counting tasks (a report
    per model and task, the lenses added) and compare the tasks of each model side by side. ``task``
    (``--task``; given among the ``capture`` settings, it is moved here): the counting task of every model's own
    report, passed to its stages as ``reproduce --task`` is; with ``tasks`` it comes first and the others are
    compared with it, as ``reproduce --tasks`` does. A task other than the default, and a file task's records
    (their digest), are part of each model's resume key, so a study on another task never reuses a model
    finished on this one."""

    models: tuple[str, ...]
    preset: str = "quick"
    capture: dict[str, Any] = field(default_factory=dict)
    patching: bool = False
    where: bool = False
    tasks: tuple[str, ...] = ()
    task: str = DEFAULT_TASK

    def __post_init__(self) -> None:
        self.models = tuple(str(m).strip() for m in self.models if str(m).strip())
        if not self.models:
            raise ConfigError("models", "{models} must name at least one model")
        twice = sorted({m for m in self.models if self.models.count(m) > 1})
        if twice:
            raise ConfigError("models", f"{{models}} names {', '.join(twice)} more than once")
        if self.preset not in PRESETS:
            raise ConfigError("preset", f"unknown size {{preset}} {self.preset!r}; choose {', '.join(PRESETS)}")
        if "model" in self.capture:
            raise ConfigError("models", "capture settings are for every model; name the models in {models}")
        if "task" in self.capture:
            self.capture = dict(self.capture)
            self.task = self.capture.pop("task")
        self.task = parse_task(self.task).text
        capture_config(self.preset, self.capture)  # every override is a valid capture setting (checked when built)
        self.tasks = parse_tasks(",".join(self.tasks)) if self.tasks else ()
        for name, task in (("task", self.task), *(("tasks", t) for t in self.tasks)):
            try:  # each task holds prompts at the preset's sizes (a file's records), checked before any run
                capture_config(self.preset, self._capture(task))
            except ConfigError as exc:
                raise ConfigError(name, f"{{{name}}}: " + literal(f"{task} at the {self.preset} sizes: {exc}")) from None

    def _capture(self, task: str, model: str | None = None) -> dict[str, Any]:
        """The capture settings of one run on ``task`` (the default task left implicit, as a capture's resume
        key leaves it)."""
        return {**self.capture, **({"model": model} if model else {}),
                **({"task": task} if task != DEFAULT_TASK else {})}

    def jobs(self) -> list[dict[str, Any]]:
        """One job per model: its folder name, the preset, its capture settings and stages (what keys its
        result)."""
        groups = ("model",) + (("patching",) if self.patching else ()) + (("where",) if self.where else ())
        stages = study_stages(*groups)
        names = model_folder_names(list(self.models))
        digests = {t: parse_task(t).digest() for t in (self.task, *self.tasks)}  # a file task's records

        def keyed(job: dict[str, Any], task: str) -> dict[str, Any]:
            return {**job, **({"task_digest": digests[task]} if digests[task] else {})}
        if not self.tasks:
            mine = {"task": self.task} if self.task != DEFAULT_TASK else {}
            return [keyed({"model": m, "name": name, **mine, "preset": self.preset,
                           "capture": self._capture(self.task, m), "stages": stages}, self.task)
                    for m, name in zip(self.models, names, strict=True)]
        stages = [s for s in study_stages(*groups, "where") if s in stages or s == LENS_STAGE]
        tasks = (self.task, *(t for t in self.tasks if t != self.task))  # the own task first, as reproduce's
        return [keyed({"model": m, "name": f"{name}--{task_folder_name(task)}", "model_name": name, "task": task,
                       "preset": self.preset, "capture": {**self.capture, "model": m, "task": task},
                       "stages": stages}, task)
                for m, name in zip(self.models, names, strict=True) for task in tasks]


@dataclass
class ModelSummary:
    """One model's row of the comparison, and its Figure 5 curves.

    ``relative_depth`` (L+1,) is location / number of blocks (0 = embeddings, 1 = after the last block);
    ``gap_ratio`` and ``erank_ratio`` (L+1,) are Figure 5's two curves at those locations (mean over
    seeds). ``best_probe`` holds the validation-selected location and its test rounded accuracy;
    ``at_blocks`` the two ratios after the first, middle and last block; ``behaviour_accuracy`` is the
    share of prompts the model answered correctly (the probe result's), ``None`` where answers were not
    captured.
    """

    model: str
    name: str
    n_blocks: int
    relative_depth: list[float]
    gap_ratio: list[float]
    erank_ratio: list[float]
    best_probe: dict[str, Any]
    at_blocks: dict[str, dict[str, Any]]
    nearest_toy_variant: str | None
    behaviour_accuracy: float | None
    report: str
    task: str | None = None

    def value(self, keys: tuple[str, ...]) -> Any:
        """The field at the key path ``keys`` (``("at_blocks", "first", "gap_ratio")``)."""
        value: Any = asdict(self)
        for key in keys:
            value = value[key]
        return value

    def table_row(self) -> list[Any]:
        """The model's row of ``study.csv`` (:data:`TABLE_HEADER`)."""
        return [self.model, *(self.value(keys) for _, keys in TABLE_COLUMNS), self.report]


@dataclass
class StudyResult(Result):
    """``countlens study``: one :class:`ModelSummary` per model, in the order asked, and the settings."""

    FILE: ClassVar[str] = "study.json"
    COMMAND: ClassVar[str] = "countlens study"

    config: dict[str, Any]
    models: list[ModelSummary]
    provenance: dict[str, Any] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)  # each model's tasks-side-by-side page (``--tasks``)

    def tables(self) -> dict[str, tuple[list[str], list[list[Any]]]]:
        """``study.csv``: one row per model."""
        return {TABLE_FILE: (TABLE_HEADER, [m.table_row() for m in self.models])}


# ---------------------------------------------------------------- one model

def model_folder(out: str | Path, job: dict[str, Any]) -> Path:
    return Path(out) / MODELS_DIR / job["name"]


def preflight_model(out: str | Path, job: dict[str, Any], pool: ModelPool | None = None) -> None:
    """Refuse (one line) a model that cannot be captured, or a folder holding another capture; reads only
    the tokenizer and the model's config (once in ``pool``, with the plan the model's capture then runs)."""
    try:
        preflight_capture(capture_config(job["preset"], job["capture"]),
                          model_folder(out, job) / "capture" / ACTS_PLACE, progress=False, pool=pool)
    except ConfigError as exc:
        raise exc.within(f"model {job['model']}") from None
    except UsageError as exc:
        raise UsageError(f"model {job['model']}: {exc}") from None


def run_study_model(job: dict[str, Any], out: str | Path, device: str | None = None,
                    pool: ModelPool | None = None, progress: bool = True) -> dict[str, Any]:
    """One model's pipeline (its stages of :func:`countlens.pipeline.reproduce.reproduce`, so its own report
    and its per-stage resume) into ``OUT/models/<name>/``; returns its :class:`ModelSummary` as a dict.
    ``device`` overrides the job's (a Ray task's own GPU). :class:`UsageError` names the model and the first
    stage that did not finish. ``pool``: the study's :class:`~countlens.llm.models.ModelPool` (the model's
    weights are released from it when its turn ends). ``progress``: ``False`` hides its stages' progress
    bars and model-loading messages."""
    folder = model_folder(out, job)
    capture = {**job["capture"], **({"device": device} if device else {})}
    report = reproduce(folder, job["preset"], capture, only=job["stages"], pool=pool, progress=progress)
    for stage in report["stages"]:
        if stage["stage"] in job["stages"] and stage["status"] not in ("done", "not run"):  # not run: refused
            raise UsageError(f"model {job['model']}: stage {stage['stage']} {stage['status']}: "
                             f"{stage.get('reason', '')}")
    return asdict(summarize_model(job, folder, Path(out)))


def summarize_model(job: dict[str, Any], folder: Path, out: Path) -> ModelSummary:
    """A model's :class:`ModelSummary` from its stages' saved results (capture, geometry, probes, compare)."""
    n_blocks = int(CaptureResult.read(folder / "capture").meta.n_blocks)
    geometry = GeometryResult.read(folder / "geometry")
    probes = ProbeResult.read(folder / "probe")
    compare = CompareResult.read(folder / "compare")
    names = location_names(n_blocks)
    by_name = {r["name"]: r for r in geometry.per_location}
    curve = [(i / n_blocks, by_name[n]) for i, n in enumerate(names) if n in by_name]
    at_blocks = {}
    for where, li in block_positions(n_blocks).items():
        row = by_name.get(names[li], {})
        at_blocks[where] = {"location": location_label(names[li]), "gap_ratio": float(row.get("gap_ratio", "nan")),
                            "erank_ratio": float(row.get("erank_ratio", "nan"))}
    best = probes.best_location()
    nearest = compare.closest_toy().get(f"LLM {location_label(names[min(1, n_blocks)])}")
    return ModelSummary(
        model=job["model"], name=job["name"], n_blocks=n_blocks, relative_depth=[d for d, _ in curve],
        gap_ratio=[float(r["gap_ratio"]) for _, r in curve], erank_ratio=[float(r["erank_ratio"]) for _, r in curve],
        best_probe={"location": location_label(best.name), "index": best.index,
                    "test_rounded_acc": best.stat("test_rounded_acc")[0],
                    "val_rounded_acc": best.stat("val_rounded_acc")[0]},
        at_blocks=at_blocks, nearest_toy_variant=nearest,
        behaviour_accuracy=probes.behaviour.accuracy if probes.behaviour else None,
        report=str((folder / "index.html").relative_to(out)), task=job.get("task"))


# ---------------------------------------------------------------- the study

def run_study(config: StudyConfig, out: str | Path, ray: str | None = None,
              log=None, progress: bool = True) -> tuple[StudyResult, dict[str, str]]:
    """Every model of ``config`` (reusing those finished before), then the comparison across the models
    that finished; saves it, its figure and its page into ``out``. Returns the result and, per model that
    did not finish, why. ``ray`` runs each model as a Ray task (a target as for ``llm capture --ray``);
    ``log(line)`` receives one line per model; ``progress``: ``False`` hides the stages' progress bars."""
    out = Path(out)
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    cache = ResultCache(out / CACHE_DIR, "model")
    jobs = config.jobs()
    summaries: dict[str, dict[str, Any]] = {}
    for job in jobs:
        hit = cache.get(job)
        if hit is not None:
            summaries[job["name"]] = hit
            log(f"study: {job['model']} reused")
    todo = [job for job in jobs if job["name"] not in summaries]
    if ray is not None:
        from countlens.llm.capture.distributed import parse_target

        parse_target(ray)  # a bad target is refused before any work
    with model_pool() as pool:  # every model resolved and read once; each one's weights released after its turn
        for job in todo:
            preflight_model(out, job, pool)
        out.mkdir(parents=True, exist_ok=True)
        if ray is not None:
            failures = _run_on_ray(todo, out, ray, cache, summaries, log, progress)
        else:
            failures = _run_in_turn(todo, out, pool, cache, summaries, log, progress)
    result = StudyResult(config=asdict(config), models=[ModelSummary(**summaries[j["name"]]) for j in jobs
                                                        if j["name"] in summaries],
                         provenance=result_provenance(config), tasks=_compare_tasks(out, config, jobs, summaries))
    if result.models:
        result.save(out)
        draw_study(result, out)
        write_study_page(result, out)
    return result, failures


def _compare_tasks(out: Path, config: StudyConfig, jobs, summaries) -> list[str]:
    """Per model run on ``--tasks``, its finished tasks side by side in ``OUT/tasks/<model>/``; the pages."""
    pages = []
    for model in config.models if config.tasks else ():
        done = [j for j in jobs if j["model"] == model and j["name"] in summaries]
        if done:
            folder = out / TASKS_DIR / done[0]["model_name"]
            compare_tasks([(j["task"], model_folder(out, j)) for j in done], folder, model, config.preset)
            pages.append(str((folder / "index.html").relative_to(out)))
    return pages


def _run_in_turn(todo, out, pool, cache, summaries, log, progress=True) -> dict[str, str]:
    failures = {}
    for job in todo:
        started = time.perf_counter()
        try:
            summaries[job["name"]] = cache.put(job, run_study_model(job, out, pool=pool, progress=progress))
        except UsageError as exc:
            failures[job["model"]] = str(exc)
            log(f"study: {exc}")
            continue
        log(f"study: {job['model']} done in {time.perf_counter() - started:.1f} s")
    return failures


def _run_on_ray(todo, out, target, cache, summaries, log, progress=True) -> dict[str, str]:
    """One Ray task per model, on its own GPU where the cluster has them (each task sees only its own, as
    ``cuda``), else one CPU slot; a task whose worker died is retried and resumes from its finished stages."""
    from countlens.llm.capture.distributed import ray_cluster

    failures: dict[str, str] = {}
    if not todo:
        return failures
    with ray_cluster(target) as ray:
        on_gpu = (ray.cluster_resources().get("GPU", 0) >= 1
                  and capture_config(todo[0]["preset"], todo[0]["capture"]).model.device != "cpu")
        resources = {"num_gpus": 1, "num_cpus": 1} if on_gpu else {"num_cpus": 1}
        task = ray.remote(run_study_model).options(max_retries=RETRIES, **resources)
        pending = {task.remote(job, str(out), "cuda" if on_gpu else None, progress=progress): (job, time.perf_counter())
                   for job in todo}
        while pending:
            [ref], _ = ray.wait(list(pending), num_returns=1)
            job, started = pending.pop(ref)
            try:
                summaries[job["name"]] = cache.put(job, ray.get(ref))
            except Exception as exc:  # noqa: BLE001 - one model failing leaves the others running
                cause = getattr(exc, "cause", None) or exc
                failures[job["model"]] = str(cause).strip().splitlines()[0] if str(cause).strip() else repr(cause)
                log(f"study: {failures[job['model']]}")
                continue
            log(f"study: {job['model']} done in {time.perf_counter() - started:.1f} s on Ray")
    return failures


__all__ = ["StudyConfig", "ModelSummary",
           "StudyResult", "model_folder_names", "block_positions", "preflight_model", "run_study_model",
           "summarize_model", "run_study"]
