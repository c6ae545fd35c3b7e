"""Train one scaling organism (issue 32) at a chosen recipe and print its held-out accuracy curve.

The recipes of BENCHMARKS.md's L = 100 rows:
``python bench/organism_recipe.py L SEED LR WARMUP DECAY MAX_STEPS OUT [WIDTH [BATCH]]``, e.g.
``python bench/organism_recipe.py 100 0 1e-2 300 1000000000 3000 /tmp/o100 32 128`` (a constant 1e-2, 128
prompts a step). ``DECAY``: the organism's ``decay``, the step from which the rate falls as 1 / step (250 by
default; a value beyond ``MAX_STEPS`` keeps it constant). One torch thread; the folder resumes like any
organism's, and a converged one is kept in (and reused from) the countlens cache, as `organism scaling` keeps
its own: one trained here at the settings of a scaling preset is the one that preset uses.
"""

import json
import sys
import time

import countlens.llm.organisms.experiment as E
from countlens.core.threads import torch_threads
from countlens.llm.organisms.scaling import ScalingConfig, counting_tokenizer

if __name__ == "__main__":
    L, seed, lr, warmup, decay, steps, out = (int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]),
                                              int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), sys.argv[7])
    width = int(sys.argv[8]) if len(sys.argv) > 8 else 32
    batch = int(sys.argv[9]) if len(sys.argv) > 9 else 32
    sc = ScalingConfig(lr=lr, warmup=warmup, decay=decay, max_steps=steps, width=width, batch_size=batch)
    with torch_threads(1):
        config = sc.organism(L, seed, counting_tokenizer(sc.tokenizer, L))
        started = time.time()
        result = E.run_organism(config, out=out, progress=True, reuse=True)
    print(json.dumps({"held_out_accuracy": result.held_out_accuracy, "steps": result.steps,
                      "B": result.largest_parameter_norm, "seconds": round(time.time() - started, 1)}))
    for point in result.curve:
        print(point)
