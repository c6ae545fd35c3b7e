"""Benchmark: the same capture in one process and on a local Ray cluster of 1 and 2 workers.

Embedded SmolLM2, length-sorted right-padded batches of 16, shards of ``--shard-rows`` prompts. Reported
per run: wall time (the Ray runs include starting the cluster), and for the Ray runs, per shard, the time
the worker spent capturing and writing it and the overhead Ray adds (submission to result on the driver,
minus the worker's own time), and the model load per actor. From the measured per-row cost and per-shard
overhead it projects the wall time of a capture of ``--project-prompts`` prompts at the default shard size
(256) on N GPUs, as ``start + load + ceil(shards / N) * (shard cost + overhead)``.

    python bench/bench_ray_capture.py                          # 128 prompts, L=64, shards of 32
    python bench/bench_ray_capture.py --json bench/out/ray_capture.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from record import span, this_command, write_row  # bench/ is on sys.path when run as a script

SHARD_DEFAULT = 256


def config(args):
    from countlens.llm import CaptureConfig

    return CaptureConfig().with_options(L=args.L, counts=list(range(max(1, args.prompts // 2))), pairs=[["a", "b"]],
                                        configs=["count"], seeds=[0, 1], batch_size=16, shard_rows=args.shard_rows)


def run_single(root: Path, args) -> dict:
    from countlens.llm import run_capture

    started = time.perf_counter()
    result = run_capture(config(args), root / "single", progress=False)
    return {"wall_s": time.perf_counter() - started, "capture_s": result.meta.capture_seconds,
            "rows": result.n_rows}


def run_ray(root: Path, args, workers: int) -> dict:
    import ray

    from countlens.llm.capture.distributed import parse_target, run_capture_on_ray

    started = time.perf_counter()
    ray.init(logging_level="ERROR", **parse_target(f"local:{workers}"))  # the cluster a --ray local:N run starts
    up = time.perf_counter()
    try:
        run = run_capture_on_ray(config(args), root / f"ray{workers}", f"local:{workers}", progress=False)
    finally:
        ray.shutdown()
    wall = time.perf_counter() - started
    work = [r["compute_s"] + r["write_s"] for r in run.shards]
    overhead = [r["latency_s"] - w for r, w in zip(run.shards, work, strict=True)]
    return {"wall_s": wall, "ray_start_s": up - started, "capture_s": run.wall_s, "shards": len(run.shards),
            "rows": sum(r["rows"] for r in run.shards),
            "shard_compute_s": statistics.median(r["compute_s"] for r in run.shards),
            "shard_write_s": statistics.median(r["write_s"] for r in run.shards),
            "shard_overhead_s": statistics.median(overhead), "shard_overhead_max_s": max(overhead),
            "load_s": statistics.median(a["load_seconds"] for a in run.actors), "actors": len(run.actors)}


def project(one: dict, shard_rows: int, n_prompts: int, gpus: list[int]) -> list[dict]:
    """Projected wall time of ``n_prompts`` at the default shard size on N workers, from run ``one``."""
    per_row = (one["shard_compute_s"] + one["shard_write_s"]) / shard_rows
    shard_cost = per_row * SHARD_DEFAULT
    n_shards = math.ceil(n_prompts / SHARD_DEFAULT)
    return [{"workers": n, "wall_s": one["ray_start_s"] + one["load_s"]
             + math.ceil(n_shards / n) * (shard_cost + one["shard_overhead_s"]),
             "shard_cost_s": shard_cost, "overhead_fraction": one["shard_overhead_s"] / shard_cost}
            for n in gpus]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=128, help="prompts in the capture (default 128)")
    parser.add_argument("--L", type=int, default=64, help="maximum items per prompt (default 64)")
    parser.add_argument("--shard-rows", type=int, default=32, help="prompts per shard (default 32)")
    parser.add_argument("--project-prompts", type=int, default=36360,
                        help="prompts of the projected capture (default 36360: 10x the paper's design)")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args()

    from countlens.llm.models import default_model_dir, quiet_transformers

    quiet_transformers()
    default_model_dir(progress=False)  # the dequantised copy is cached once, outside the timings
    root = Path(tempfile.mkdtemp(prefix="countlens-bench-ray-"))
    try:
        results = {"single": run_single(root, args), "ray1": run_ray(root, args, 1), "ray2": run_ray(root, args, 2)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    results["projection"] = project(results["ray1"], args.shard_rows, args.project_prompts, [1, 2, 4, 8, 16, 64])
    results["args"] = vars(args)
    s, r1, r2 = results["single"], results["ray1"], results["ray2"]
    print(f"{s['rows']} prompts, shards of {args.shard_rows}, L={args.L}")
    print(f"single process     wall {s['wall_s']:7.2f} s (capture {s['capture_s']:.2f} s)")
    for name, r in (("ray, 1 worker", r1), ("ray, 2 workers", r2)):
        print(f"{name:<18} wall {r['wall_s']:7.2f} s (cluster start {r['ray_start_s']:.2f} s, model load per actor "
              f"{r['load_s']:.2f} s, {r['shards']} shards: compute {r['shard_compute_s']:.2f} s + write "
              f"{r['shard_write_s']:.3f} s, Ray overhead {r['shard_overhead_s'] * 1e3:.1f} ms median, "
              f"{r['shard_overhead_max_s'] * 1e3:.1f} ms max)")
    for p in results["projection"]:
        print(f"projection: {args.project_prompts} prompts in shards of {SHARD_DEFAULT} on {p['workers']:>2} "
              f"workers of this speed: {p['wall_s']:9.1f} s (Ray overhead {100 * p['overhead_fraction']:.3f}% "
              "of a shard)")
    overheads = [r["shard_overhead_s"] * 1e3 for r in (r1, r2)]
    write_row("bench_ray_capture", "overhead",
              what=f"Ray capture, SmolLM2, {s['rows']} prompts, {r1['shards']} shards, 1 and 2 workers",
              countlens=f"Ray's overhead {span(overheads, '{:.1f}', ' ms')} per shard (median)",
              baseline=f"one process ({s['wall_s']:.1f} s)",
              ratio=f"{100 * results['projection'][0]['overhead_fraction']:.3f} %",
              note=f"of a {SHARD_DEFAULT}-row shard's time", command=this_command())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
