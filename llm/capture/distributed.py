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
import dataclasses
import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from countlens.core.capture import Capture
from countlens.core.errors import ConfigError, UsageError, literal
from countlens.core.store import ActivationWriter
from countlens.llm.capture.experiment import (
    CaptureConfig,
    CapturePlan,
    CaptureResult,
    capture_runner,
    plan_capture,
    run_capture,
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
    ``ConfigError("ray")`` (the setting that names the target).

    A ``local:N`` cluster's workers run at this process's own niceness. Ray's default (15) puts them below
    every normal-priority process: beside three busy programs on 2 cores they got about 3 % of a core each,
    and the Ray tests took 23-24 min, against 3-4 min at this process's niceness (``docs/guide/ray.md``).
    """
    target = str(target).strip()
    if target.startswith("local:"):
        n = target[len("local:"):]
        if not n.isdigit() or int(n) < 1:
            raise ConfigError("ray", "{ray} local:N takes a number of CPU slots N >= 1, got " + literal(repr(target)))
        return {"num_cpus": int(n), "include_dashboard": False, "_system_config": {"worker_niceness": os.nice(0)}}
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


def create_actors(ray, n: int, resources: dict[str, float], config: CaptureConfig) -> list:
    """``n`` :class:`CaptureActor` s of ``config`` (restarted, their shard retried, when a worker dies); they
    load the model in the background: :func:`describe_actors` waits for them."""
    remote = ray.remote(CaptureActor).options(max_restarts=RETRIES, max_task_retries=RETRIES, **resources)
    return [remote.remote(config.to_dict()) for _ in range(n)]


def describe_actors(ray, actors: list) -> list[dict]:
    """What each actor :meth:`~CaptureActor.describe` s once its model has loaded; a model that cannot load
    is one line, as without Ray (the actors are killed)."""
    try:
        return ray.get([a.describe.remote() for a in actors])
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
                       plan: CapturePlan | None = None, progress: bool = True,
                       notify: Callable[[str], Any] | None = None) -> RayCaptureResult:
    """:func:`~countlens.llm.capture.experiment.run_capture` with the shards spread over the Ray cluster
    ``target`` (:class:`RayShards` under the one lifecycle); the same folder, rows and resume rules (an items
    capture's shards too: each holds its prompts' rows, their ``prompt_id`` the plan's).

    Raises :class:`UsageError` for everything ``run_capture`` refuses (a capture the disk cannot hold
    included; ``notify(line)`` is told an items capture's expected size), for a missing Ray, an unreachable
    cluster, or a capture folder some node cannot see; all before any model loads.
    """
    return run_capture(config, out, plan=plan, shards=RayShards(target), progress=progress, notify=notify)


class RayShards:
    """Captures a plan's shards on the Ray cluster ``target``: one :class:`CaptureActor` per GPU or CPU slot
    (no more than there are shards), each shard to whichever actor is free
    (:func:`~countlens.llm.capture.experiment.capture_lifecycle` runs the rest)."""

    def __init__(self, target: str):
        self.target = target
        self.ray: Any = None
        self.actors: list = []
        self.described: list[dict[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.out: Path | None = None

    @property
    def label(self) -> str:
        return f"capture on {len(self.actors)} Ray workers"

    @contextlib.contextmanager
    def session(self, out: Path) -> Iterator[None]:
        """The cluster, checked to see ``out`` from every node, for the block; the actors end with it."""
        out = Path(out).resolve()  # workers need the absolute path: their cwd is not ours
        with ray_cluster(self.target) as ray:
            check_shared_storage(ray, out)
            self.ray, self.out = ray, out
            try:
                yield
            finally:
                for actor in self.actors:
                    ray.kill(actor)

    def start(self, plan: CapturePlan, n_shards: int) -> dict[str, Any]:
        """Start the actors (each loads the model); the capture's ``meta.json`` from the model they loaded."""
        slots, resources, device = actor_resources(self.ray, plan.config.model.device)
        config = plan.config.with_options(device=device)
        # the handles are kept before the models load, so that the session's end kills actors still loading
        self.actors = create_actors(self.ray, min(slots, n_shards), resources, config)
        self.described = describe_actors(self.ray, self.actors)
        meta = plan.meta(self.described[0]["facts"])
        meta["provenance"]["config"]["ray"] = {"target": self.target, "workers": len(self.actors)}
        return meta

    def capture(self, plan: CapturePlan, writer: ActivationWriter, todo: dict[int, list], update) -> None:
        self.records = schedule_shards(self.ray, self.actors, self.out, writer.meta, todo, update)

    def result(self, capture: Capture, scheduled: list[int], wall_s: float) -> RayCaptureResult:
        fields = {f.name: getattr(capture, f.name) for f in dataclasses.fields(capture)}
        return RayCaptureResult(**fields, scheduled=scheduled, shards=self.records,
                                actors=[{"pid": d["pid"], "load_seconds": d["load_seconds"]} for d in self.described],
                                wall_s=wall_s)


__all__ = ["RAY_INSTALL", "RETRIES", "import_ray", "parse_target", "ray_cluster", "check_shared_storage",
           "CaptureActor", "RayCaptureResult", "RayShards", "actor_resources", "create_actors", "describe_actors",
           "schedule_shards", "run_capture_on_ray"]
