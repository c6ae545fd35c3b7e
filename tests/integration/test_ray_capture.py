"""Sharded capture on a local Ray cluster: the same rows as one process, a SIGKILLed worker, resume."""

import json
import os
import shutil
import signal
import sys
import threading
import time

import numpy as np
import pytest

from countlens.core.io import read_json, write_json_atomic
from countlens.core.store import COLUMNS, SHARDS, load_capture, read_meta
from countlens.pipeline.cli import main
from tests.helpers.llm_fixtures import smollm2_tokenizer, tiny_models  # noqa: F401

ray = pytest.importorskip("ray")

from countlens.llm import CaptureConfig, run_capture  # noqa: E402
from countlens.llm.capture.distributed import (  # noqa: E402
    RayCaptureResult,
    RayShards,
    parse_target,
    run_capture_on_ray,
)

SMALL = ["--L", "12", "--counts", "0:12", "--pairs", "a/b", "--configs", "count", "--seeds", "0,1", "--quiet"]


def config(model, **extra) -> CaptureConfig:
    """26 prompts (counts 0..12, two seeds) of one pair and one wording."""
    return CaptureConfig().with_options(model=str(model), **{"L": 12, "counts": list(range(13)), "pairs": [["a", "b"]],
                                               "configs": ["count"], "seeds": [0, 1], **extra})


@pytest.fixture(scope="module")
def local_cluster():
    """A private two-slot Ray cluster on this machine, shared by the tests of this module: the one a
    ``--ray local:2`` run starts (its workers at this process's niceness)."""
    ray.init(logging_level="ERROR", **parse_target("local:2"))
    yield ray
    ray.shutdown()


def rows(path) -> dict:
    ds = load_capture(path).with_format("numpy")
    return {name: ds[name] for name in COLUMNS}


def assert_same_rows(a, b) -> None:
    for name in COLUMNS:
        assert np.array_equal(a[name], b[name]), name


def row_keys(path) -> list[tuple]:
    ds = load_capture(path)
    return list(zip(ds["n"], ds["m"], ds["pair"], ds["config"], ds["seed"], strict=True))


def test_two_workers_equal_one_process_row_for_row(tiny_models, tmp_path, local_cluster, capsys):  # noqa: F811
    model = str(tiny_models["llama"])
    base = ["llm", "capture", "--model", model, *SMALL, "--shard-rows", "4", "--batch-size", "2"]
    assert main([*base, "--out", str(tmp_path / "single")]) == 0
    assert main([*base, "--ray", "local:2", "--out", str(tmp_path / "ray")]) == 0
    assert "captured 26 prompts x 3 locations x 32 dims" in capsys.readouterr().out
    assert_same_rows(rows(tmp_path / "single"), rows(tmp_path / "ray"))
    single, sharded = read_meta(tmp_path / "single"), read_meta(tmp_path / "ray")
    assert sharded["complete"] and sharded["settings"] == single["settings"]
    assert {k for k in single if k not in ("provenance", "capture_seconds")} <= set(sharded)
    assert len(list((tmp_path / "ray" / SHARDS).iterdir())) == 7


def test_items_capture_on_two_workers_equals_one_process(tiny_models, tmp_path, local_cluster):  # noqa: F811
    """``--positions items`` shards (each holding its prompts' rows) spread over Ray: the same rows, the
    plan's prompt ids included, as one process."""
    from countlens.core.store import POSITION_COLUMNS
    from countlens.llm import run_capture

    cfg = config(tiny_models["llama"], positions="items", shard_rows=5, batch_size=2)
    single = run_capture(cfg, tmp_path / "single", progress=False)
    sharded = run_capture_on_ray(cfg, tmp_path / "ray", "local:2", progress=False)
    assert sharded.n_rows == single.n_rows == len(load_capture(tmp_path / "ray")) > 26
    a = load_capture(tmp_path / "single").with_format("numpy")
    b = load_capture(tmp_path / "ray").with_format("numpy")
    for name in (*COLUMNS, *POSITION_COLUMNS):
        assert np.array_equal(a[name], b[name]), name
    assert sorted(set(np.asarray(b["prompt_id"]).tolist())) == list(range(26))


def test_sigkilled_worker_is_retried_and_every_row_is_there_once(tiny_models, tmp_path, local_cluster):  # noqa: F811
    out = tmp_path / "cap"
    cfg = config(tiny_models["qwen2"], shard_rows=1, batch_size=1)  # 26 one-row shards
    shards = RayShards("local:2")
    result: dict = {}

    def run() -> None:
        try:
            result["run"] = run_capture(cfg, out, shards=shards, progress=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        victim, n_before = kill_an_actor_mid_run(shards, out, thread, result)
        thread.join(timeout=600)
        assert not thread.is_alive(), "the run did not end within 10 minutes of the kill"
    finally:
        stop_run(shards, thread)  # a failed check must not leave this run holding the cluster's slots
    assert "error" not in result, result.get("error")
    run = result["run"]
    assert n_before < 26, "the kill came after the last shard"
    first_pids = {a["pid"] for a in run.actors}
    assert victim in first_pids
    assert {r["pid"] for r in run.shards} - first_pids, "no shard was captured by the restarted actor"
    keys = row_keys(out)
    assert len(keys) == 26 and len(set(keys)) == 26
    names = sorted(p.name for p in (out / SHARDS).iterdir())
    assert names == [f"{i:05d}" for i in range(26)]  # no temporary folder of the killed write is left
    assert read_meta(out)["complete"]


def kill_an_actor_mid_run(shards: RayShards, out, thread, result: dict) -> tuple[int, int]:
    """SIGKILL one of the run's own actors, as the run started them, once 3 shards are written (no other
    process is looked at: an earlier test's actor can still be exiting). Checks first that the actors run
    at this process's niceness. Returns (the victim's pid, the shards written before the kill)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and thread.is_alive():
        finished = list((out / SHARDS).glob("[0-9]*")) if (out / SHARDS).exists() else []
        if len(finished) >= 3 and shards.described:
            break
        time.sleep(0.01)
    assert thread.is_alive(), result
    assert shards.described, "the run's actors did not load the model within 10 minutes"
    for actor in shards.described:
        assert os.getpriority(os.PRIO_PROCESS, actor["pid"]) == os.getpriority(os.PRIO_PROCESS, 0)
    n_before = len(list((out / SHARDS).glob("[0-9]*")))
    victim = shards.described[0]["pid"]
    os.kill(victim, signal.SIGKILL)
    return victim, n_before


def stop_run(shards: RayShards, thread) -> None:
    """End a run that is still going (its actors killed, so its waits fail) and wait for its thread."""
    if thread.is_alive():
        for actor in shards.actors:
            ray.kill(actor)
        thread.join(timeout=120)


def test_resumed_run_schedules_only_missing_shards(tiny_models, tmp_path, local_cluster):  # noqa: F811
    out = tmp_path / "cap"
    cfg = config(tiny_models["gpt2"], shard_rows=8)
    first = run_capture_on_ray(cfg, out, "local:2", progress=False)
    assert first.scheduled == [0, 1, 2, 3]
    assert RayCaptureResult.from_dict(json.loads(json.dumps(first.to_dict()))) == first
    reference = rows(out)
    # an interrupted run: a shard is missing and the folder is not complete
    shutil.rmtree(out / SHARDS / "00002")
    write_json_atomic(out / "meta.json", {**read_json(out / "meta.json", "meta"), "complete": False})
    again = run_capture_on_ray(cfg, out, "local:2", progress=False)
    assert again.scheduled == [2] and [r["shard"] for r in again.shards] == [2]
    assert_same_rows(rows(out), reference)
    done = run_capture_on_ray(cfg, out, "local:2", progress=False)
    assert done.scheduled == [] and done.actors == []


def test_without_ray_the_flag_is_one_line_naming_the_install(tiny_models, tmp_path, monkeypatch, capsys):  # noqa: F811
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    code = main(["llm", "capture", "--model", str(tiny_models["llama"]), *SMALL, "--ray", "local:2",
                 "--out", str(tmp_path / "cap")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "pip install 'countlens[ray]'" in lines[0], lines
    assert not (tmp_path / "cap").exists()
