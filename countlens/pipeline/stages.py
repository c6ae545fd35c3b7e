"""A report's stages: each a room's experiment config, the function that runs it, and how it is saved, drawn
and shown; run in order into ``OUT/<stage>/``, resumable.

A :class:`Stage` is *what* it computes — its config, whose fields in ``links`` are paths relative to OUT
(the outputs of earlier stages it reads) — and *how* it runs: ``options`` (progress bars, worker processes),
``places`` (run keywords that get a folder inside the stage's own, where it writes work files), ``cache``
(a :class:`~countlens.core.cache.ResultCache` to resume from), ``threads`` and ``model`` (the
:class:`~countlens.llm.models.ModelSpec` it runs, when it takes ``loaded=``). Only the first is its identity
(:meth:`Stage.identity`; a config field marked ``metadata={"identity": False}``, such as the model's
``no_cache``, is how it runs and left out): the same report reached by an absolute and a relative ``--out``,
or a folder moved elsewhere, is the same report.

A stage that declares ``model`` is handed that model loaded (``run(config, loaded=...)``) from the run's
:class:`~countlens.llm.models.ModelPool`: every stage of a run that runs one model shares one load, and the
resolution, tokenizer and config its plan reads.

Every stage is saved the same way: its run returns a result of the one contract
(:class:`countlens.core.results.Result`), which ``save`` s itself into the stage folder, and ``draw`` adds the
figures. A finished stage leaves ``OUT/<stage>/stage.json`` (identity, the call that reruns it, wall and CPU
time, the files it wrote); a rerun reuses it while every file is there, and a stage finished with another
identity (another preset or model) is refused rather than mixed in. A failing stage is reported by name, the
stages that need it are skipped, the others still run.
"""

from __future__ import annotations

import dataclasses
import inspect
import resource
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.cache import CACHE_FOLDER, ResultCache, refuse_other_settings
from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.io import read_json, write_json_atomic, write_text_atomic
from countlens.core.report import STAGE_FILE
from countlens.core.results import config_record
from countlens.core.threads import torch_threads

ERROR_LOG = "error.log"


@dataclass(frozen=True)
class Stage:
    """One step of a report (see the module docstring).

    ``run(config, **options, **places[, cache=])`` returns a :class:`~countlens.core.results.Result` of type
    ``result_type``; ``draw(result, folder)`` writes its figures; ``view(page, section)`` shows it on the
    report; ``needs`` names the stages whose outputs ``links`` point at.
    """

    name: str
    title: str
    config: Any
    run: Callable[..., Any]
    result_type: type
    draw: Callable[[Any, Path], Any] | None = None
    view: Callable[..., None] | None = None
    needs: tuple[str, ...] = ()
    links: tuple[str, ...] = ()  # config fields holding paths relative to OUT
    places: dict[str, str] = field(default_factory=dict)  # run keyword -> folder inside the stage's folder
    options: dict[str, Any] = field(default_factory=dict)  # how it runs, never what it computes
    cache: bool = False
    threads: int | None = None  # torch intra-op threads while it runs (None: the process's)
    model: Any = None  # the ModelSpec it runs: the run's pool hands it ``loaded=`` (None: it loads nothing)
    refused: str | None = None  # why it cannot run in this report (checked when built): not run, with this reason

    def configured(self, out: Path) -> Any:
        """The config with every linked path resolved against ``out``."""
        resolved = {}
        for name in self.links:
            value = getattr(self.config, name)
            if isinstance(value, (list, tuple)):
                resolved[name] = type(value)(str(Path(out) / v) for v in value)
            elif value is not None:
                resolved[name] = str(Path(out) / value)
        return dataclasses.replace(self.config, **resolved) if resolved else self.config

    def identity(self) -> dict[str, Any]:
        """What determines the stage's results: its config (linked paths relative to OUT), less the fields
        that only say how it runs (``metadata={"identity": False}``)."""
        return {"config": _identity_record(self.config, config_record(self.config)), "links": list(self.links)}

    def call(self, out: Path) -> str:
        """The Python call that reruns this stage, for the report's "Calls" list."""
        folder = Path(out) / self.name
        args = [repr(self.configured(out))] + [f"{k}={v!r}" for k, v in self.options.items()] + [
            f"{k}={str(folder / v)!r}" for k, v in self.places.items()]
        return f"{self.run.__module__}.{self.run.__qualname__}({', '.join(args)})"


def _identity_record(config: Any, record: Any) -> Any:
    """``record`` (:func:`config_record` of ``config``) without the fields ``config``'s dataclasses mark
    ``metadata={"identity": False}``, at any depth."""
    if not (dataclasses.is_dataclass(config) and isinstance(record, dict)):
        return record
    out = dict(record)
    for f in dataclasses.fields(config):
        if f.metadata.get("identity", True) is False:
            out.pop(f.name, None)
        elif f.name in out:
            out[f.name] = _identity_record(getattr(config, f.name), out[f.name])
    return out


def _cpu_seconds() -> float:
    """CPU time (user + system, all threads) of this process and its finished worker processes: on a shared
    machine a steadier measure of a stage's cost than wall time."""
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def stage_record(out: Path, stage: Stage) -> dict[str, Any] | None:
    """The stage's ``stage.json``, or ``None`` when there is none (or it does not read)."""
    path = Path(out) / stage.name / STAGE_FILE
    if not path.is_file():
        return None
    try:
        record = read_json(path, "stage record")
    except UsageError:
        return None
    return record if isinstance(record, dict) else None


def stage_done(out: Path, stage: Stage) -> dict[str, Any] | None:
    """The finished stage's record if ``stage.json`` says done and every file it wrote is still there."""
    record = stage_record(out, stage)
    if record is None or record.get("status") != "done":
        return None
    folder = Path(out) / stage.name
    kept = [*record.get("files", [stage.result_type.FILE]), *record.get("places", [])]
    if not all((folder / f).exists() for f in kept):
        return None
    return record


def refuse_other_stages(out: Path, stages: list[Stage]) -> None:
    """A finished stage made with another identity (another preset or model) is never mixed into this report."""
    for stage in stages:
        record = stage_record(out, stage)
        if record is not None and "settings" in record:
            refuse_other_settings(out, f"a report (stage {stage.name})", record["settings"], stage.identity())


def _failed(stage: Stage, out: Path, reason: str, start: float) -> dict[str, Any]:
    return {"stage": stage.name, "status": "failed", "reason": reason, "command": stage.call(out),
            "wall_s": time.perf_counter() - start}


def run_stage(out: Path, stage: Stage, pool: Any = None) -> dict[str, Any]:
    """Run ``stage``, save its result and figures, and write ``stage.json`` on success. Returns the record.

    ``pool`` (a :class:`~countlens.llm.models.ModelPool`) hands a stage that declares ``model`` its loaded
    model (``loaded=``), and itself to a run that takes ``pool=``; without one the stage loads its own. A :class:`UsageError` fails the stage with its
    message; any other exception fails it with its type and message, its traceback in
    ``OUT/<stage>/error.log``. ``KeyboardInterrupt`` stops the whole run.
    """
    out = Path(out)
    folder = out / stage.name
    folder.mkdir(parents=True, exist_ok=True)
    start, cpu_start = time.perf_counter(), _cpu_seconds()
    print(f"reproduce: stage {stage.name} ...", file=sys.stderr, flush=True)
    cache = ResultCache(folder / CACHE_FOLDER, stage.name) if stage.cache else None
    kwargs = {**stage.options, **{k: folder / v for k, v in stage.places.items()},
              **({"cache": cache} if cache is not None else {})}
    try:
        with torch_threads(stage.threads):
            if stage.model is not None and pool is not None:
                kwargs["loaded"] = pool.loaded(stage.model, progress=bool(stage.options.get("progress", True)))
            if pool is not None and "pool" in inspect.signature(stage.run).parameters:
                kwargs["pool"] = pool  # the stage's own plan reads the run's resolutions, tokenizers, configs
            result = stage.run(stage.configured(out), **kwargs)
        if not isinstance(result, stage.result_type):
            got = "None" if result is None else f"a {type(result).__name__}"
            return _failed(stage, out, f"the stage returned {got}, not a {stage.result_type.__name__}", start)
        written = list(result.save(folder))
        if stage.draw is not None:
            written += list(stage.draw(result, folder))
    except UsageError as exc:
        return _failed(stage, out, str(exc), start)
    except Exception as exc:  # noqa: BLE001 - a crashing stage is reported, the others go on
        log = folder / ERROR_LOG
        write_text_atomic(log, traceback.format_exc())
        return _failed(stage, out, f"{exc.__class__.__name__}: {exc} (traceback in {log})", start)
    if cache is not None:
        cache.clear()
    record = {"stage": stage.name, "title": stage.title, "status": "done", "wall_s": time.perf_counter() - start,
              "cpu_s": _cpu_seconds() - cpu_start, "commands": [stage.call(out)],
              "files": sorted({str(Path(p).relative_to(folder)) for p in written}),
              # folders the run wrote into that stay (a capture's activations; a resume folder is gone by now)
              "places": sorted(v for v in stage.places.values() if v and (folder / v).exists()),
              "settings": stage.identity()}
    write_json_atomic(folder / STAGE_FILE, record)
    (folder / ERROR_LOG).unlink(missing_ok=True)
    return record


def select(stages: list[Stage], only: list[str] | None) -> None:
    """Check the names of the stages to run (``stages``) against the plan (:class:`ConfigError` naming the
    choices)."""
    names = [s.name for s in stages]
    unknown = [o for o in only or [] if o not in names]
    if unknown:
        raise ConfigError("stages", f"{{stages}} names unknown stage(s) {literal(', '.join(unknown))}; choose from "
                                    f"{', '.join(names)}")


def run_stages(out: Path, stages: list[Stage], only: list[str] | None = None,
               pool: Any = None) -> dict[str, dict[str, Any]]:
    """Run (or reuse) every stage in order, the stages that declare a model handed it from ``pool`` (see
    :func:`run_stage`); returns each stage's record by name."""
    records: dict[str, dict[str, Any]] = {}
    for stage in stages:
        done = stage_done(out, stage)
        if done is not None:
            records[stage.name] = {**done, "status": "done", "reused": True}
            continue
        if only and stage.name not in only:
            records[stage.name] = {"stage": stage.name, "status": "not run", "reason": "not selected by --stages"}
            continue
        if stage.refused:
            records[stage.name] = {"stage": stage.name, "status": "not run", "refused": True, "reason": stage.refused}
            continue
        blocked = [n for n in stage.needs if records.get(n, {}).get("status") != "done"]
        if blocked and all(records.get(n, {}).get("refused") for n in blocked):
            records[stage.name] = {"stage": stage.name, "status": "not run", "refused": True,
                                   "reason": f"reads stage {', '.join(blocked)}, which cannot run on this capture"}
            continue
        if blocked:
            records[stage.name] = {"stage": stage.name, "status": "skipped",
                                   "reason": f"needs stage {', '.join(blocked)}"}
            continue
        record = records[stage.name] = {**run_stage(out, stage, pool), "reused": False}
        print(f"reproduce: stage {stage.name} {record['status']}"
              + (f": {record['reason']}" if record["status"] != "done" else f" in {record['wall_s']:.1f} s"),
              file=sys.stderr, flush=True)
    return records


__all__ = ["CACHE_FOLDER", "Stage", "stage_record", "stage_done", "refuse_other_stages", "run_stage", "select",
           "run_stages"]
