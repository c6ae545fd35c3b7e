"""Train one scaling organism (issue 32) at a chosen recipe and print its held-out accuracy curve.

The recipes of BENCHMARKS.md's L = 100 rows:
``python bench/organism_recipe.py L SEED LR WARMUP DECAY MAX_STEPS OUT [WIDTH [BATCH]]``, e.g.
``python bench/organism_recipe.py 100 0 1e-2 300 1000000000 3000 /tmp/o100 32 128`` (a constant 1e-2, 128
prompts a step). ``DECAY``: steps at the peak rate before it falls as 1 / step (the module's ``DECAY`` is 250;
a huge value keeps it constant). One torch thread; the folder resumes like any organism's.
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
    E.DECAY = decay
    sc = ScalingConfig(lr=lr, warmup=warmup, max_steps=steps, width=width, batch_size=batch)
    with torch_threads(1):
        config = sc.organism(L, seed, counting_tokenizer(sc.tokenizer, L))
        started = time.time()
        result = E.run_organism(config, out=out, progress=True)
    print(json.dumps({"held_out_accuracy": result.held_out_accuracy, "steps": result.steps,
                      "B": result.largest_parameter_norm, "seconds": round(time.time() - started, 1)}))
    for point in result.curve:
        print(point)
