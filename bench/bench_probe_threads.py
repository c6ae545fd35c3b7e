"""Benchmark: BLAS threads for the per-location probe decompositions, on an idle and on a loaded machine.

Runs the whole probe experiment (:func:`countlens.probes.run_probes`: every location x 3 split seeds x the
default 41-α grid, selection on validation, scoring on test) on synthetic captures of two shapes —
384 rows x 19 locations x 896 dims (a capture with n < d, first reported slow) and 1,212 x 31 x 576 (the SmolLM2 demo
capture) — with ``blas_threads=1`` and with the BLAS threads the process has by default, first idle, then
while one busy-loop process per core competes for the CPUs (what another job on a shared machine does).
Both settings give identical probes (asserted).

    python bench/bench_probe_threads.py [--repeats 3] [--json out.json]
    python bench/bench_probe_threads.py --shapes demo --loads loaded --locations 6   # one cell, fewer locations
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
from record import span, this_command, write_row  # bench/ is on sys.path when run as a script

from countlens.core.capture import CaptureMeta
from countlens.probes.data import ProbeData
from countlens.probes.probe import ProbeConfig, run_probes

SHAPES = {"issue": (384, 19, 896), "demo": (1212, 31, 576)}  # rows, locations, dims


def synthetic(rows: int, locations: int, dim: int, seed: int = 0) -> ProbeData:
    """An LLM-shaped capture in memory: a count direction, anisotropic noise, a few massive dimensions."""
    rng = np.random.default_rng(seed)
    n = rng.integers(0, 101, size=rows).astype(np.float64)
    acts = np.empty((rows, locations, dim), dtype=np.float32)
    for loc in range(locations):
        scales = np.exp(rng.normal(size=dim))
        scales[rng.choice(dim, 3, replace=False)] *= 50.0
        acts[:, loc] = rng.normal(size=(rows, dim)) * scales + np.outer(np.sqrt(n), rng.normal(size=dim))
    names = ["embed"] + [f"blocks.{i}.hook_resid_post" for i in range(locations - 1)]
    meta = CaptureMeta.from_record({"model": "synthetic", "locations": names, "d": dim, "n_rows": rows})
    return ProbeData("synthetic", meta, names, n, acts)


def busy_loops(count: int) -> list[subprocess.Popen]:
    """``count`` processes that spin on a core each until killed, or until this process ends."""
    spin = "import os\nparent = os.getppid()\nwhile os.getppid() == parent: pass"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]


def timed(data: ProbeData, threads: int | None, repeats: int) -> tuple[float, list]:
    """Best wall time of ``repeats`` runs, and the probes of the last."""
    best, result = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run_probes(ProbeConfig("synthetic", blas_threads=threads), data)
        best = min(best, time.perf_counter() - t0)
    return best, [f.coef_norm for loc in result.locations for f in loc.fits]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per setting; the best is reported")
    parser.add_argument("--json", default=None, help="write the measurements here")
    parser.add_argument("--shapes", default="issue,demo", help="which captures: issue (384 x 19 x 896), demo")
    parser.add_argument("--loads", default="idle,loaded", help="idle, loaded (one busy loop per core) or both")
    parser.add_argument("--locations", type=int, default=None,
                        help="probe only the first LOCATIONS locations (default: all; time is linear in it)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_info

    default_threads = max((p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"), default=None)
    cores = os.cpu_count() or 1
    out = {"machine": f"{platform.processor() or platform.machine()}, {cores} cpus",
           "default_blas_threads": default_threads, "busy_loops_when_loaded": cores, "seconds": {}}
    for name in args.shapes.split(","):
        rows, locations, dim = SHAPES[name]
        locations = min(locations, args.locations or locations)
        data = synthetic(rows, locations, dim)
        label = f"{rows} x {locations} x {dim}"
        for load in args.loads.split(","):
            spinners = busy_loops(cores) if load == "loaded" else []
            try:
                one, norms_one = timed(data, 1, args.repeats)
                default, norms_default = timed(data, None, args.repeats)
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
            np.testing.assert_allclose(norms_one, norms_default, rtol=1e-8)
            out["seconds"][f"{label}, {load}"] = {"blas_threads=1": one, f"default ({default_threads})": default,
                                                  "default / one": default / one}
            print(f"{label:16s} {load:6s}: 1 thread {one:7.2f} s   default ({default_threads}) {default:7.2f} s   "
                  f"ratio {default / one:5.2f}", flush=True)
    runs = out["seconds"]
    loaded = {k.rsplit(", ", 1)[0]: v["default / one"] for k, v in runs.items() if k.endswith(", loaded")}
    idle = [v["default / one"] for k, v in runs.items() if k.endswith(", idle")]
    if loaded:
        write_row("bench_probe_threads", "threads", what=f"probes on a busy machine, {' and '.join(loaded)}",
                  countlens="one BLAS thread (the default)", baseline=f"the process's {default_threads} BLAS threads",
                  ratio=span(list(loaded.values()), "{:.1f}", "×"),
                  note="identical probes" + (f"; idle {span(idle, '{:.2f}', '×')}" if idle else ""),
                  command=this_command())
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
