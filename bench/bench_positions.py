"""Benchmark: the item-position capture (``llm capture --positions items``) against the boundary capture of
the same prompts, on the embedded SmolLM2-135M-Instruct, as ratios in one run.

The item rows come from the same forward pass as the boundary row (the hooks gather every item position
instead of one), so the cost that can grow is the gather, the copy to CPU and the writing of many more rows.
Two measurements, methods interleaved round by round (the median and the fastest round are reported, so
a noisy neighbour hurts both alike; on a shared machine the fastest round is the steadier ratio):

  runner      the capture's own shard runner over the same length-sorted batches, boundary vs items: the
              forward pass and the gather (all 31 locations unless --locations)
  end-to-end  ``run_capture`` into a fresh folder (prompts -> Arrow shards), boundary vs items, at the
              locations and dtype of the quick preset's items stage (``--e2e-locations``, float16)

    python bench/bench_positions.py                           # 48 prompts, L = 24, 3 rounds
    python bench/bench_positions.py --prompts 96 --L 64 --json bench/out/positions.json
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time

import numpy as np
import torch
from record import this_command, write_row  # bench/ is on sys.path when run as a script


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=48, help="number of prompts (counts spread over 0..L)")
    parser.add_argument("--L", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--locations", default="all", help="locations of the runner measurement")
    parser.add_argument("--e2e-locations", default="0,1,8,15,30", help="locations of the end-to-end measurement")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", default=None, help="write the measurements here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from countlens.llm import CaptureConfig, plan_capture, run_capture
    from countlens.llm.capture.residuals import batches, shard_runner
    from countlens.llm.models import load_model, quiet_transformers

    quiet_transformers()
    loaded = load_model("default", progress=False)
    per_pair = max(1, args.prompts // 4)
    counts = sorted({int(round(c)) for c in np.linspace(0, args.L, per_pair)})
    base = CaptureConfig().with_options(L=args.L, counts=counts, configs=["count"], seeds=[0],
                                        batch_size=args.batch_size, locations=args.locations)
    plan = plan_capture(base.with_options(positions="items"), progress=False)
    prompts = plan.prompts
    groups = [[prompts[i] for i in idx] for idx in batches(prompts, args.batch_size)]
    runners = {name: shard_runner(loaded, plan.locations, "hf", "right", args.batch_size, positions=name)
               for name in ("boundary", "items")}

    def runner(name):
        def run():
            with torch.inference_mode():
                return [runners[name].run_batch(g) for g in groups]
        return run

    tmp = tempfile.mkdtemp(prefix="countlens-bench-positions-")

    def end_to_end(name):
        config = base.with_options(positions=name, locations=args.e2e_locations, acts_dtype="float16")

        def run():
            out = os.path.join(tmp, name)
            shutil.rmtree(out, ignore_errors=True)
            return run_capture(config, out, loaded=loaded, progress=False)
        return run

    methods = {"runner-boundary": runner("boundary"), "runner-items": runner("items"),
               "e2e-boundary": end_to_end("boundary"), "e2e-items": end_to_end("items")}
    times: dict[str, list[float]] = {m: [] for m in methods}
    try:
        runner("boundary")()  # warm-up
        # correctness first: the items runner's boundary rows are the boundary runner's vectors
        sizes = [[p.n + p.m + 1 if p.first_item_index >= 0 else 1 for p in g] for g in groups]
        for b, it, s in zip(runner("boundary")(), runner("items")(), sizes, strict=True):
            last = np.cumsum(s) - 1
            assert np.array_equal(it[last], b), "the boundary rows differ"
        for _ in range(args.rounds):
            for name, fn in methods.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
        e2e_rows = {name: methods[f"e2e-{name}"]().n_rows for name in ("boundary", "items")}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    med = {m: statistics.median(v) for m, v in times.items()}
    best = {m: min(v) for m, v in times.items()}
    rows = plan.rows()
    n_loc = plan.n_locations()
    load = os.getloadavg()[0]
    print(f"SmolLM2-135M-Instruct, {len(prompts)} prompts (L={args.L}, {rows} item + boundary rows), batch "
          f"{args.batch_size}, {args.rounds} rounds, torch threads {torch.get_num_threads()}, "
          f"{platform.processor() or platform.machine()}, load average {load:.2f}")
    print(f"{'method':<16} {'median s':>9} {'best s':>8} {'rows':>7}")
    for name in methods:
        kind = name.split("-")[1]
        n = (len(prompts) if kind == "boundary" else rows) if name.startswith("runner") else e2e_rows[kind]
        print(f"{name:<16} {med[name]:9.2f} {best[name]:8.2f} {n:7d}")
    print(f"items / boundary, runner ({n_loc} locations, forward + gather): median "
          f"{med['runner-items'] / med['runner-boundary']:.3f}x, best {best['runner-items'] / best['runner-boundary']:.3f}x"
          " (target <= 1.15)")
    print(f"items / boundary, end to end ({args.e2e_locations}, float16, incl. Arrow writes): median "
          f"{med['e2e-items'] / med['e2e-boundary']:.3f}x, best {best['e2e-items'] / best['e2e-boundary']:.3f}x")
    write_row("bench_positions", "items",
              what=f"items capture (`--positions items`), {len(prompts)} prompts, {rows:,} item + boundary rows, "
                   f"{n_loc} locations",
              countlens=f"{med['runner-items']:.1f} s (median of {args.rounds})",
              baseline=f"the boundary capture ({med['runner-boundary']:.1f} s)",
              ratio=f"{med['runner-items'] / med['runner-boundary']:.2f}×",
              note=f"target ≤ 1.15; end to end with Arrow writes {med['e2e-items'] / med['e2e-boundary']:.2f}×",
              command=this_command())
    if args.json:
        from countlens.core.io import provenance, write_json_atomic

        write_json_atomic(args.json, {"prompts": len(prompts), "rows": rows, "median_seconds": med, "best_seconds": best,
                                      "ratio_runner": med["runner-items"] / med["runner-boundary"],
                                      "ratio_end_to_end": med["e2e-items"] / med["e2e-boundary"],
                                      "load_average": load, "provenance": provenance(vars(args))})


if __name__ == "__main__":
    main()
