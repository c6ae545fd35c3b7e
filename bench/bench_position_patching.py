"""Figure 11's cost on the embedded SmolLM2-135M-Instruct: patching over positions and layers with the corrupted
run reused (``method="cached"``: the key/value cache below each position, the residuals below each location)
against one whole forward of the corrupted prompt per (position, location) (``method="naive"``), the same cells
in one run, interleaved, with the largest difference of their scores.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python bench/bench_position_patching.py [--L 12] [--pairs 1] [--flip first]

Both sides are countlens's ``PositionPatcher`` and score each cell the same way, as final answers (SPEC §3:
``score_candidates``, the candidate's tokens fed after the patched prompt pass and the stop factor
log(1 − p(a digit-initial token follows)) read after them), so the naive loop already pays for the stop factor
and the comparison stays like for like; LD = log P(n) − log P(n − 1). A cell differing by more than ``TOLERANCE``
nats exits 1.

``cached`` is timed twice: as it runs (cells whose clean and corrupted vectors are equal — every position before
the flipped item, and at the embeddings every other position — are the corrupted run itself and are not run)
and with every cell run (``skip_unchanged=False``), so the reuse alone is measured too.
"""

import argparse
import os
import sys
import time

import numpy as np
import torch

from countlens.llm.answers import candidate_token_ids
from countlens.llm.models import load_model, quiet_transformers
from countlens.llm.patching.replay import PositionPatcher
from countlens.llm.positions.experiment import PositionPatchingConfig, patched_positions, prompt_pairs
from countlens.llm.prompts import PromptSettings

TOLERANCE = 1e-3  # nats: the same cells in float32, batched differently, agree to ~1e-5

VARIANTS = {"naive": dict(method="naive", skip_unchanged=False), "cached": dict(method="cached"),
            "cached, every cell run": dict(method="cached", skip_unchanged=False)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--L", type=int, default=12, help="most items per prompt (default: 12)")
    parser.add_argument("--pairs", type=int, default=1, help="prompt pairs (counts 3 and 6 alternate; default: 1)")
    parser.add_argument("--flip", default="first", choices=("first", "middle", "last"),
                        help="which target the corrupted twin turns into the distractor (default: first)")
    parser.add_argument("--batch-size", type=int, default=16, help="patched rows per forward (default: 16)")
    args = parser.parse_args()
    quiet_transformers()
    print(f"load average at start {os.getloadavg()[0]:.2f} (1 min) on {os.cpu_count()} cores", flush=True)
    loaded = load_model("default", progress=False)
    model, tok = loaded.model, loaded.tokenizer
    config = PositionPatchingConfig(prompts=PromptSettings(L=args.L, counts=[3, 6], per_count=(args.pairs + 1) // 2,
                                                           pairs=[["a", "b"]], configs=["count"], seeds=[0]),
                                    flip=args.flip)
    pairs = prompt_pairs(tok, config)[:args.pairs]
    locations = list(range(len(model.model.layers) + 1))
    runs = dict.fromkeys(VARIANTS, 0)
    worst, cells = 0.0, 0
    wall, cpu = dict.fromkeys(VARIANTS, 0.0), dict.fromkeys(VARIANTS, 0.0)
    with torch.inference_mode():
        for pair in pairs:
            candidates = candidate_token_ids(tok, [pair.clean.n, pair.clean.n - 1])
            positions = patched_positions(pair, "all")
            cells += len(positions) * len(locations)
            patchers, out = {}, {name: [] for name in VARIANTS}
            for name, options in VARIANTS.items():
                t, c = time.perf_counter(), time.process_time()
                patchers[name] = PositionPatcher(model, pair.clean.ids, pair.corrupt.ids, candidates,
                                                 batch_size=args.batch_size, **options)
                wall[name] += time.perf_counter() - t
                cpu[name] += time.process_time() - c
            for loc in locations:  # interleaved: every variant sees the same machine load
                for name, patcher in patchers.items():
                    t, c = time.perf_counter(), time.process_time()
                    out[name].append(patcher.logprobs(loc, positions))
                    wall[name] += time.perf_counter() - t
                    cpu[name] += time.process_time() - c
            for name, patcher in patchers.items():
                runs[name] += patcher.runs
            ld = {k: np.stack(v)[..., 0] - np.stack(v)[..., 1] for k, v in out.items()}
            worst = max(worst, *(float(np.abs(ld[k] - ld["naive"]).max()) for k in ld))
    T = pairs[0].clean.n_tokens
    print(f"patching over positions and layers, {len(pairs)} prompt pair(s) of {T} tokens (L={args.L}, flip "
          f"{args.flip}), {len(locations)} locations x {cells // len(locations) // len(pairs)} positions = {cells} "
          f"cells, torch threads {torch.get_num_threads()}:")
    for name in VARIANTS:
        print(f"  {name:>24}: {wall[name]:7.2f} s wall, {cpu[name]:7.2f} s CPU ({runs[name]} patched runs): "
              f"{wall['naive'] / wall[name]:5.2f}x faster than the naive loop by wall time, "
              f"{cpu['naive'] / cpu[name]:5.2f}x by CPU time")
    print(f"  largest |LD difference| against the naive loop: {worst:.2e} nats")
    print(f"load average at end {os.getloadavg()[0]:.2f} (1 min)")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from record import env_prefix, this_command, write_row

    write_row("bench_position_patching", "cells",
              what=f"patching over positions and layers (Figure 11), {cells} cells",
              countlens=f"{cpu['cached']:.1f} s CPU (cached; {wall['cached']:.1f} s wall)",
              baseline=f"one forward per cell ({cpu['naive']:.1f} s CPU)",
              ratio=f"{cpu['naive'] / cpu['cached']:.1f}×", command=this_command(env_prefix()),
              note=f"by CPU time; final-answer LD equal to {worst:.1e} nats")
    if worst > TOLERANCE:
        sys.exit(f"FAILED: a cell differs by {worst:.2e} nats (tolerance {TOLERANCE:.0e})")


if __name__ == "__main__":
    main()
