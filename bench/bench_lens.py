"""Figure 13's and Figure 9b's costs on a quick-preset capture of the embedded SmolLM2-135M-Instruct (404
prompts, 31 locations, d = 576): the tuned lens's many-output ridge map against one ``native_ridge_path`` per
output (the project's single-output path, the naive way to fit an affine map), the lens stage with one thread
and with the process's threads, and the steering stage (greedy answers only, as it ran before it scored the
answer distribution, against the whole stage, in read-out and in count units).

    python bench/bench_lens.py --acts report/capture/acts --probes report/probe/probes.json [--skip-steering]

(``countlens reproduce --quick --out report`` makes both; the lens and the ridge map need the capture only.)
"""

import argparse
import dataclasses
import os
import time

import numpy as np
import torch
from record import this_command, write_row  # bench/ is on sys.path when run as a script

from countlens.core.capture import Capture
from countlens.core.store import acts_array, load_capture
from countlens.core.threads import blas_threads
from countlens.llm.answers import answer_prompts
from countlens.llm.capture.experiment import capture_prompts
from countlens.llm.lens.experiment import LensConfig, run_lens
from countlens.llm.lens.readout import RidgeMap
from countlens.llm.models import quiet_transformers
from countlens.llm.patching.edits import edited_answers
from countlens.llm.prompts import build_prompts
from countlens.llm.steering.experiment import SteeringConfig, capture_model, run_steering, step_rules
from countlens.probes.ridge import native_ridge_path
from countlens.probes.splits import split_rows


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def bench_ridge(acts: np.ndarray, alphas) -> None:
    train, val, _ = split_rows(len(acts), 0)
    X, Y = acts[train, 1], acts[train, -1]  # after block 1 -> the last location, as the tuned lens fits it
    with blas_threads(1):
        fit, t_map, _ = timed(lambda: RidgeMap(X, Y))
        preds, t_pred, _ = timed(lambda: [fit.predict(acts[val, 1], a) for a in alphas])
        outputs = min(Y.shape[1], 64)  # the naive loop on a subset of the outputs, scaled to all of them
        paths, t_loop, _ = timed(lambda: [native_ridge_path(X, Y[:, j], alphas, relative=True) for j in range(outputs)])
    worst = max(float(np.max(np.abs(acts[val, 1] @ p.coefs[i] + p.intercepts[i] - preds[i][:, j])))
                for j, p in enumerate(paths) for i in range(len(alphas)))
    naive = t_loop * Y.shape[1] / outputs
    print(f"ridge map, {X.shape[0]} x {X.shape[1]} -> {Y.shape[1]} outputs, {len(alphas)} alphas: one SVD "
          f"{t_map + t_pred:.3f} s; one native_ridge_path per output {naive:.2f} s (measured on {outputs} outputs); "
          f"ratio {naive / (t_map + t_pred):.0f}x; largest prediction difference {worst:.2e}")
    write_row("bench_lens", "tuned_lens",
              what=f"tuned lens (Figure 13), {X.shape[0]} × {X.shape[1]} → {Y.shape[1]}, {len(alphas)} α",
              countlens=f"one SVD for all outputs, {t_map + t_pred:.3f} s",
              baseline=f"one ridge path per output ({naive:.2f} s, from {outputs} outputs)",
              ratio=f"{naive / (t_map + t_pred):.0f}×", note=f"predictions equal to {worst:.1e}", command=this_command())


def bench_lens(acts_dir: str, probes: str | None, loaded) -> None:
    for threads in (1, None):
        config = LensConfig(acts=acts_dir, probes=probes, threads=threads)
        result, wall, cpu = timed(lambda c=config: run_lens(c, loaded=loaded))
        print(f"lens stage, threads {threads or torch.get_num_threads()}: {wall:.1f} s wall, {cpu:.1f} s CPU "
              f"({len(result.locations)} locations, {result.split['n_test']} test prompts)")


def greedy_steering(config: SteeringConfig, loaded) -> None:
    """Figure 9b's greedy read-out alone (the stage before it scored the answer distribution)."""
    from countlens.llm.steering.experiment import mean_difference, probe_direction
    from countlens.probes.probe import ProbeResult

    meta = Capture.from_folder(config.acts).meta
    location, w = probe_direction(ProbeResult.read(config.probes), meta, config.location)
    v = mean_difference(config.acts, location) if config.units == "count" else None
    rules, _ = step_rules(config, w, v)
    model, tok = loaded.model, loaded.tokenizer
    prompts = build_prompts(tok, dataclasses.replace(capture_prompts(meta), counts=list(config.counts)))
    prompts = [prompts[i] for i in np.linspace(0, len(prompts) - 1, min(config.max_prompts, len(prompts))).astype(int)]
    loc = meta.location_index(location)
    edits = [(loc, "add", rules[d](delta)) for d in rules for delta in config.deltas for _ in prompts]
    with torch.inference_mode():
        answer_prompts(model, tok, prompts, meta.template, config.batch_size, config.answer_tokens)
        edited_answers(model, tok, prompts * (len(edits) // len(prompts)), edits, meta.template,
                       config.batch_size, config.answer_tokens)


def bench_steering(acts_dir: str, probes: str, loaded) -> None:
    for units, directions in (("readout", ["probe"]), ("count", ["probe", "mean-diff"])):
        config = SteeringConfig(acts=acts_dir, probes=probes, max_prompts=4, units=units, directions=directions)
        _, old, old_cpu = timed(lambda c=config: greedy_steering(c, loaded))
        _, new, new_cpu = timed(lambda c=config: run_steering(c, loaded=loaded))
        print(f"steering, {units} units along {'+'.join(directions)} (+ random), 4 prompts x 5 deltas: greedy only "
              f"{old:.1f} s ({old_cpu:.1f} s CPU), the whole stage {new:.1f} s ({new_cpu:.1f} s CPU); "
              f"ratio {new / old:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--acts", default="report/capture/acts",
                        help="a quick-preset capture folder (default: make demo's, report/capture/acts)")
    parser.add_argument("--probes", default="report/probe/probes.json",
                        help="probes.json fitted on it, for the steering part (default: report/probe/probes.json)")
    parser.add_argument("--skip-steering", action="store_true", help="the ridge map and the lens only")
    args = parser.parse_args()
    if not os.path.isdir(args.acts):
        parser.exit(2, f"bench_lens: no capture at {args.acts}; run `make demo` first or pass --acts\n")
    if args.probes and not os.path.isfile(args.probes):
        args.probes = None  # the ridge map and the lens need the capture only
    quiet_transformers()
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; torch threads {torch.get_num_threads()}")
    acts = acts_array(load_capture(args.acts), dtype=np.float64)
    bench_ridge(acts, list(LensConfig(acts=args.acts).alphas))
    loaded = capture_model(Capture.from_folder(args.acts).meta)
    bench_lens(args.acts, args.probes, loaded)
    if args.probes and not args.skip_steering:
        bench_steering(args.acts, args.probes, loaded)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
