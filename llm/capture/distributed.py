"""Sharded capture on a Ray cluster: the driver plans the shards, actors capture them into one folder.

The driver builds and checks the prompts (:func:`~countlens.llm.capture.experiment.plan_capture`: tokenizer and
model config only), writes ``meta.json`` and schedules every unfinished shard on :class:`CaptureActor` s,
one per GPU (``num_gpus=1``) or per CPU slot. Each actor loads the model once and captures the shards it
is given with the same function as a single-process run (:func:`~countlens.llm.capture.residuals.capture_shard`), so
the rows are the same bit for bit given the same batches, writing each one with
:meth:`countlens.core.store.ActivationWriter.write_shard` (atomic). Activations travel through the capture
folder only, so it must be on storage every node mounts; that is checked in one line before any work. A
worker that dies mid-shard leaves no shard behind; Ray restarts its actor and retries the shard. The
driver marks the capture complete only when every shard reads back whole.

Targets: ``local:N`` starts a private cluster of N CPU slots on this machine, ``auto`` joins the cluster
this machine is part of (``ray start``), anything else is a cluster address (``HOST:6379`` or
``ray://HOST:10001``).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.io import write_json_atomic
from countlens.core.store import ActivationWriter, existing_capture
from countlens.llm.capture.experiment import (
    CaptureConfig,
    CaptureResult,
    capture_is_whole,
    capture_runner,
    check_disk,
    plan_capture,
)
from countlens.llm.capture.residuals import capture_shard, model_facts

RAY_INSTALL = "pip install 'countlens[ray]'"
RETRIES = 3  # restarts of a dead actor, and retries of the shard it was capturing


def import_ray():
    """The ``ray`` module, or a one-line :class:`UsageError` naming the install command."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"Ray is not installed; install it with {RAY_INSTALL}") from None
    return ray


def parse_target(target: str) -> dict[str, Any]:
    """``ray.init`` arguments for a target: ``local:N``, ``auto`` or a cluster address; a bad one is a
    ``ConfigError("ray")`` (the setting that names the target)."""
    target = str(target).strip()
    if target.startswith("local:"):
        n = target[len("local:"):]
        if not n.isdigit() or int(n) < 1:
            raise ConfigError("ray", "{ray} local:N takes a number of CPU slots N >= 1, got " + literal(repr(target)))
        return {"num_cpus": int(n), "include_dashboard": False}
    if not target:
        raise ConfigError("ray", "{ray} must be auto, local:N or a cluster address")
    return {"address": target}


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [exc.__class__.__name__])[0][:200]


@contextlib.contextmanager
def ray_cluster(target: str) -> Iterator[Any]:
    """Connect to (or start) the cluster of ``target`` for the duration of the block; yields ``ray``.

    A session this process already holds (``ray.init`` by the caller) is used as it is and left running.
    """
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs = parse_target(target)
    try:
        ray.init(logging_level="ERROR", **kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise UsageError(f"cannot reach the Ray cluster at {target}: {_first_line(exc)}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def _sees(path: str) -> bool:
    return Path(path).is_file()


def check_shared_storage(ray, folder: Path) -> None:
    """Raise a one-line :class:`UsageError` unless ``folder`` is visible from every alive Ray node."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    folder.mkdir(parents=True, exist_ok=True)
    token = folder / f".ray-check-{uuid.uuid4().hex}"
    token.write_text("countlens\n", encoding="utf-8")
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        sees = ray.remote(num_cpus=0)(_sees)
        seen = ray.get([sees.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                        .remote(str(token)) for n in nodes])
    finally:
        token.unlink(missing_ok=True)
    blind = [n.get("NodeManagerAddress", n["NodeID"]) for n, ok in zip(nodes, seen, strict=True) if not ok]
    if blind:
        raise UsageError(f"{folder} is not visible from Ray node(s) {', '.join(blind)}; put the capture folder "
                         "on storage every node mounts at the same path (NFS, Lustre, a shared volume)")


class CaptureActor:
    """One Ray worker of a sharded capture: loads the model once, then captures the shards it is given."""

    def __init__(self, config: dict[str, Any]):
        from countlens.llm.models import quiet_transformers

        started = time.perf_counter()
        quiet_transformers()
        plan = plan_capture(CaptureConfig.from_dict(config), progress=False)  # resolved on this worker's node
        self.shard_start = plan.shard_start
        self.loaded, self.runner = capture_runner(plan, progress=False)
        self.load_seconds = time.perf_counter() - started
        self.writer: ActivationWriter | None = None

    def describe(self) -> dict[str, Any]:
        """The model's :func:`~countlens.llm.capture.residuals.model_facts` for ``meta.json``, this worker's pid and
        its model load time."""
        return {"facts": model_facts(self.loaded, self.runner.names), "pid": os.getpid(),
                "load_seconds": self.load_seconds}

    def capture(self, out_dir: str, meta: dict[str, Any], index: int, shard: list) -> dict[str, Any]:
        """Capture one shard of prompts and write it atomically as shard ``index`` of ``out_dir``."""
        if self.writer is None or self.writer.dir != Path(out_dir):
            self.writer = ActivationWriter(out_dir, meta)
        started = time.perf_counter()
        rows = capture_shard(self.runner, shard, first_id=self.shard_start(index))
        computed = time.perf_counter()
        self.writer.write_shard(index, rows)
        return {"shard": index, "rows": len(shard), "pid": os.getpid(), "compute_s": computed - started,
                "write_s": time.perf_counter() - computed}


@dataclass
class RayCaptureResult(CaptureResult):
    """A finished sharded capture, and what it took.

    ``scheduled``: the shard indices this run captured (a resumed run lists only the missing ones).
    ``shards``: one record per finished shard (``shard``, ``rows``, ``pid`` of the worker, ``compute_s`` and
    ``write_s`` in the worker, ``latency_s`` from submission to result on the driver). ``actors``: one record
    per actor started (``pid``, ``load_seconds``); a restarted actor shows up only through its shards' pids.
    """

    scheduled: list[int] = field(default_factory=list)
    shards: list[dict[str, Any]] = field(default_factory=list)
    actors: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0


def actor_resources(ray, device: str) -> tuple[int, dict[str, float], str]:
    """(how many actors the cluster holds, the resources each asks for, the device each uses): one per GPU
    for a GPU device (each sees its own GPU as ``cuda``), else one per CPU slot."""
    resources = ray.cluster_resources()
    if device != "cpu" and resources.get("GPU", 0) >= 1:
        return int(resources["GPU"]), {"num_gpus": 1, "num_cpus": 1}, "cuda"
    if device not in ("cpu", "auto"):
        raise ConfigError("device", f"{{device:{literal(device)}}} needs a GPU per worker but the Ray cluster has "
                                    "none")
    return max(1, int(resources.get("CPU", 1))), {"num_cpus": 1}, "cpu"


def _unwrap(exc: BaseException) -> UsageError:
    """A worker's failure as one line: its own :class:`UsageError` if it raised one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, UsageError):
        return cause
    return UsageError(f"a Ray worker failed ({_first_line(cause or exc)}); finished shards are kept, rerun the "
                      "same command to resume")


def start_actors(ray, n: int, resources: dict[str, float], config: CaptureConfig) -> tuple[list, list[dict]]:
    """``n`` :class:`CaptureActor` s of ``config`` (restarted, their shard retried, when a worker dies) and
    what each :meth:`~CaptureActor.describe` s."""
    remote = ray.remote(CaptureActor).options(max_restarts=RETRIES, max_task_retries=RETRIES, **resources)
    actors = [remote.remote(config.to_dict()) for _ in range(n)]
    try:
        return actors, ray.get([a.describe.remote() for a in actors])
    except Exception as exc:  # noqa: BLE001 - a model that cannot load is one line, as without Ray
        for actor in actors:
            ray.kill(actor)
        raise _unwrap(exc) from None


def schedule_shards(ray, actors: list, out_dir: Path, meta: dict[str, Any], shards: dict[int, list],
                    progress: Callable[[int], Any] | None = None) -> list[dict[str, Any]]:
    """Capture every shard of ``shards`` (index -> prompts) on ``actors``, one shard per actor at a time,
    the next one going to whichever actor finishes first. Returns the per-shard records in finishing order."""
    queue = sorted(shards)
    running: dict[Any, tuple[Any, float]] = {}
    records = []

    def submit(actor) -> None:
        index = queue.pop(0)
        running[actor.capture.remote(str(out_dir), meta, index, shards[index])] = (actor, time.perf_counter())

    for actor in actors[:len(queue)]:
        submit(actor)
    while running:
        [ref], _ = ray.wait(list(running), num_returns=1)
        actor, submitted = running.pop(ref)
        try:
            record = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - a shard that failed past its retries ends the run
            raise _unwrap(exc) from None
        records.append({**record, "latency_s": time.perf_counter() - submitted})
        if progress is not None:
            progress(record["rows"])
        if queue:
            submit(actor)
    return records


def run_capture_on_ray(config: CaptureConfig, out: str | Path, target: str = "auto", *,
                       progress: bool = True, notify: Callable[[str], Any] | None = None) -> RayCaptureResult:
    """:func:`~countlens.llm.capture.experiment.run_capture` with the shards spread over the Ray cluster
    ``target``; the same folder, rows and resume rules (an items capture's shards too: each holds its
    prompts' rows, their ``prompt_id`` the plan's).

    Raises :class:`UsageError` for everything ``run_capture`` refuses (a capture the disk cannot hold
    included; ``notify(line)`` is told an items capture's expected size), for a missing Ray, an unreachable
    cluster, or a capture folder some node cannot see; all before any model loads.
    """
    plan = plan_capture(config, progress)
    folder, out = Path(out), Path(out).resolve()  # workers need the absolute path: their cwd is not ours
    old = existing_capture(out, plan.key)
    if old is not None and old.get("complete") and capture_is_whole(out):
        return RayCaptureResult(**vars(CaptureResult.from_folder(folder, config)))
    shards = plan.shards()
    done = ActivationWriter(out, old).finished_shards() & set(range(len(shards))) if old is not None else set()
    todo = {s: shard for s, shard in enumerate(shards) if s not in done}
    free = check_disk(plan, out, done)
    if notify is not None and config.positions != "boundary":
        notify(plan.size_text(free))
    created = not out.exists()
    started = time.perf_counter()
    records: list[dict[str, Any]] = []
    described: list[dict[str, Any]] = []
    try:
        with ray_cluster(target) as ray:
            check_shared_storage(ray, out)
            if todo:
                writer, described, records = _capture_shards(ray, plan, out, todo, target, progress)
            else:  # every shard is there; only the completion mark was missing
                writer = ActivationWriter(out, old)
    except BaseException:
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()  # a run refused before any work leaves nothing behind
        raise
    missing = sorted(set(range(len(shards))) - writer.finished_shards())  # also drops killed writes' leftovers
    if missing:
        raise UsageError(f"shard(s) {', '.join(map(str, missing))} of {out} did not read back after capture; "
                         "rerun the same command to recompute them")
    writer.finish({"n_rows": plan.rows(), "capture_seconds": round(time.perf_counter() - started, 3)})
    if not capture_is_whole(out):
        write_json_atomic(out / "meta.json", {**writer.meta, "complete": False})
        raise UsageError(f"{out} does not read back whole after capture; rerun the same command to resume")
    return RayCaptureResult(**vars(CaptureResult.from_folder(folder, config)), scheduled=sorted(todo), shards=records,
                            actors=[{"pid": d["pid"], "load_seconds": d["load_seconds"]} for d in described],
                            wall_s=time.perf_counter() - started)


def _capture_shards(ray, plan, out: Path, todo: dict[int, list], target: str, progress: bool):
    """Start the actors, write ``meta.json`` from the model they loaded, capture ``todo`` on them.
    Returns (the writer, the actors' descriptions, the per-shard records)."""
    from tqdm.auto import tqdm

    slots, resources, device = actor_resources(ray, plan.config.model.device)
    config = plan.config.with_options(device=device)
    actors, described = start_actors(ray, min(slots, len(todo)), resources, config)
    try:
        meta = plan.meta(described[0]["facts"])
        meta["provenance"]["config"]["ray"] = {"target": target, "workers": len(actors)}
        writer = ActivationWriter(out, meta)
        # until every shard is back, the folder must not claim to be complete
        write_json_atomic(out / "meta.json", {**writer.meta, "complete": False})
        n_done = len(plan.prompts) - sum(map(len, todo.values()))
        with tqdm(total=len(plan.prompts), initial=n_done, unit="prompt", smoothing=0.1,
                  desc=f"capture on {len(actors)} Ray workers", disable=not progress) as bar:
            records = schedule_shards(ray, actors, out, meta, todo, bar.update)
    finally:
        for actor in actors:
            ray.kill(actor)
    return writer, described, records


__all__ = ["RAY_INSTALL", "RETRIES", "import_ray", "parse_target", "ray_cluster", "check_shared_storage",
           "CaptureActor", "RayCaptureResult", "actor_resources", "start_actors", "schedule_shards",
           "run_capture_on_ray"]
