"""Figure 14's direct logit attribution against the capture it would otherwise follow: ``countlens llm
components`` (DLA alone, no ablation) and ``countlens llm capture --answers`` of the same prompt set on the
embedded SmolLM2-135M-Instruct, the model loaded once and handed to both, timed alternately (A B A B ...) in
one run so that the machine's load falls on both alike; reports the ratio of the medians (issue 31's target:
at most 1.3) and checks that both answered every prompt the same way.

    python bench/bench_components.py [--repeats 3] [--counts 1:12] [--batch-size 8]
"""

import argparse
import os
import shutil
import statistics
import tempfile
import time

from record import env_prefix, this_command, write_row  # bench/ is on sys.path when run as a script

from countlens.core.args import parse_int_list
from countlens.llm.capture.experiment import CaptureConfig, run_capture
from countlens.llm.components.experiment import ComponentsConfig, run_components
from countlens.llm.models import ModelSpec, load_model, quiet_transformers
from countlens.llm.prompts import PromptSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--counts", default="1:12")
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    quiet_transformers()
    prompts = PromptSettings(L=24, counts=parse_int_list(args.counts, "counts"), per_count=1, configs=["count"],
                             seeds=[0])
    spec = ModelSpec()
    loaded = load_model("default", progress=False)
    components = ComponentsConfig(model=spec, prompts=prompts, batch_size=args.batch_size, ablate_prompts=0)
    capture = CaptureConfig(model=spec, prompts=prompts, batch_size=args.batch_size, answers=True)
    dla, cap = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = run_components(components, loaded=loaded)
        dla.append(time.perf_counter() - start)
        out = tempfile.mkdtemp()
        start = time.perf_counter()
        captured = run_capture(capture, os.path.join(out, "acts"), loaded=loaded, progress=False)
        cap.append(time.perf_counter() - start)
        answers = {t: (int(a) if a == a else None) for t, a in zip(captured.column("prompt"), captured.column("answer"),
                                                                   strict=True)}
        shutil.rmtree(out)
    same = all(answers[p["text"]] == p["answer"] for p in result.prompts)  # the capture's rows are in its own order
    print(f"{len(result.prompts)} prompts, batch {args.batch_size}, threads {os.environ.get('OMP_NUM_THREADS', 'default')}, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"DLA (components, no ablation): median {statistics.median(dla):.2f} s of {[round(t, 2) for t in dla]}")
    print(f"capture --answers:             median {statistics.median(cap):.2f} s of {[round(t, 2) for t in cap]}")
    print(f"ratio DLA / capture: {statistics.median(dla) / statistics.median(cap):.2f} (target <= 1.3); "
          f"the same greedy answers: {same}")
    write_row("bench_components", "dla", what=f"direct logit attribution (Figure 14), {len(result.prompts)} prompts",
              countlens=f"{statistics.median(dla):.1f} s (median of {args.repeats})",
              baseline=f"`capture --answers` of the same prompts ({statistics.median(cap):.1f} s)",
              ratio=f"{statistics.median(dla) / statistics.median(cap):.2f}×",
              note="target ≤ 1.3" + ("; the same greedy answers" if same else "; the greedy answers DIFFER"),
              command=this_command(env_prefix()))


if __name__ == "__main__":
    main()
