"""Benchmark: `countlens geometry`'s streamed centroids against the direct approach a researcher writes.

Baseline: load every activation as one float64 array (``acts_array``), then per seed and count take boolean-mask
means, and compute each location's ratios with explicit loops. Ours: ``centroids_from_capture`` (batched float64
sums per (seed, count), never the whole array) + ``compute_geometry``. Same synthetic capture with the LLM's
shapes (31 locations x 576 dims, counts 0..100, 3 seeds); both must give the same ratios.

    python bench/bench_geometry.py [--rows-per-cell 4]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
from record import this_command, write_row  # bench/ is on sys.path when run as a script

from countlens.analysis.geometry import effective_rank
from countlens.analysis.layerwise import centroids_from_capture, compute_geometry
from countlens.core.capture import open_capture
from countlens.core.store import ActivationWriter, acts_array, load_capture


def make_capture(path: Path, per_cell: int, n_loc: int = 31, d: int = 576, seeds=(0, 1, 2)) -> None:
    rng = np.random.default_rng(0)
    dirs = rng.normal(size=(2, n_loc, d)).astype(np.float32)
    writer = ActivationWriter(path, {"locations": [f"l{i}" for i in range(n_loc)], "d": d,
                                     "settings": {"bench": per_cell}})
    for shard, s in enumerate(seeds):
        n = np.repeat(np.arange(101), per_cell)
        acts = (np.log1p(n)[:, None, None] * dirs[0] + np.sqrt(n)[:, None, None] * dirs[1]
                + rng.normal(size=(len(n), n_loc, d)).astype(np.float32))
        writer.write_shard(shard, {"acts": acts, "n": n.tolist(), "m": [0] * len(n), "pair": ["a"] * len(n),
                                   "config": ["c"] * len(n), "seed": [s] * len(n), "prompt": [""] * len(n),
                                   "boundary_index": [0] * len(n), "n_tokens": (n + 1).tolist()})
    writer.finish()


def baseline(ds) -> list[float]:
    acts = acts_array(ds)  # (rows, L, d) float64: the whole capture in memory
    n = np.asarray(ds["n"])
    seed = np.asarray(ds["seed"])
    ratios = []
    for li in range(acts.shape[1]):
        gaps, ranks = [], []
        for s in np.unique(seed):
            C = np.stack([acts[(seed == s) & (n == c), li].mean(axis=0) for c in range(101)])
            lo = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(1, 10)])
            hi = np.mean([np.linalg.norm(C[k + 1] - C[k]) for k in range(91, 100)])
            gaps.append(hi / lo)
            ranks.append(effective_rank(C[91:101]) / effective_rank(C[1:11]))
        ratios.append(float(np.mean(gaps)))
    return ratios


def ours(capture) -> list[float]:
    cs = centroids_from_capture(capture)
    per_location, _ = compute_geometry(cs)
    return [r["gap_ratio"] for r in per_location]


def measure(fn, ds) -> tuple[float, float, list[float]]:
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn(ds)
    wall = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return wall, peak, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows-per-cell", type=int, default=4, help="prompts per (seed, count)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        make_capture(Path(tmp) / "acts", args.rows_per_cell)
        ds = load_capture(Path(tmp) / "acts")
        rows = len(ds)
        t_base, m_base, r_base = measure(baseline, ds)
        t_ours, m_ours, r_ours = measure(ours, open_capture(Path(tmp) / "acts"))
    np.testing.assert_allclose(r_ours, r_base, rtol=1e-6)
    print(f"capture: {rows} rows x 31 locations x 576 dims (float32 on disk)")
    print(f"baseline (whole array + masks): {t_base:6.2f} s, peak {m_base:7.1f} MiB")
    print(f"countlens geometry (streamed):  {t_ours:6.2f} s, peak {m_ours:7.1f} MiB")
    print(f"speed ratio {t_base / t_ours:.2f}x, memory ratio {m_base / m_ours:.1f}x; gap ratios agree to 1e-6")
    write_row("bench_geometry", "geometry", what=f"geometry of a {rows:,}-row capture (31 locations × 576)",
              countlens=f"one streamed pass, {t_ours:.2f} s, peak {m_ours:.0f} MiB",
              baseline=f"direct masked means over the whole array ({t_base:.2f} s, peak {m_base:.0f} MiB)",
              ratio=f"{t_base / t_ours:.1f}×", note=f"{m_base / m_ours:.1f}× less memory; gap ratios equal to 1e-6",
              command=this_command())


if __name__ == "__main__":
    main()
