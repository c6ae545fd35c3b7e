"""Figure 9's costs on the embedded SmolLM2-135M-Instruct: capture prompts/s with and without the model's own
answers, the answer distribution's cost (the capture's shard runner with ``--answers`` as it ran before the
distribution — greedy answers and the correct answer's log-probability — against now, with every candidate
count teacher-forced from the same KV cache; same batches, interleaved rounds), patched prompt passes against
plain ones, and the quick preset's patching and steering stages.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python3 bench/bench_behaviour.py [--prompts 32]
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from record import env_prefix, this_command, write_row  # bench/ is on sys.path when run as a script

from countlens.llm import (
    CaptureConfig,
    PatchingConfig,
    SteeringConfig,
    boundary_vectors,
    plan_capture,
    run_capture,
    run_patching,
    run_steering,
)
from countlens.llm.answers import answer_prompts, answering_runner
from countlens.llm.capture.residuals import batches, pad_batch, pad_token_id, shard_runner
from countlens.llm.models import load_model, quiet_transformers
from countlens.llm.patching.edits import BoundaryEdit, edited_answers
from countlens.llm.patching.experiment import plan_patching
from countlens.llm.prompts import build_prompts
from countlens.probes.probe import ProbeConfig, run_probes


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def greedy_patching(config, loaded) -> None:
    """Figure 9a's greedy read-out alone, as the stage ran before it scored every candidate: the sources'
    boundary vectors, the targets' answers, and one patched prompt pass plus decode steps per (pair, location)."""
    plan = plan_patching(config)
    model, tok = loaded.model, loaded.tokenizer
    sources, targets = [s for s, _ in plan.pairs], [t for _, t in plan.pairs]
    with torch.inference_mode():
        vectors = boundary_vectors(model, tok, sources, plan.locations, config.batch_size)
        answer_prompts(model, tok, targets, config.prompts.template, config.batch_size, config.answer_tokens)
        edits = [(loc, "replace", vectors[i, j]) for j, loc in enumerate(plan.locations) for i in range(len(targets))]
        edited_answers(model, tok, targets * len(plan.locations), edits, config.prompts.template, config.batch_size,
                       config.answer_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="prompts per capture measurement (default: 16)")
    args = parser.parse_args()
    quiet_transformers()
    loaded = load_model("default", progress=False)
    model, tok = loaded.model, loaded.tokenizer
    counts = np.linspace(0, 100, args.prompts // 4).astype(int).tolist()
    base = dict(L=256, counts=sorted(set(counts)), seeds=[0], configs=["count"], batch_size=16)
    n = len(base["counts"]) * 4
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        capture = CaptureConfig().with_options(**base)
        _, plain = timed(lambda: run_capture(capture, tmp / "plain", loaded=loaded, progress=False))
        _, answered = timed(lambda: run_capture(capture.with_options(answers=True), tmp / "answers", loaded=loaded,
                                                progress=False))
        print(f"capture, {n} prompts (L=256, 4 pairs): {n / plain:.2f} prompts/s plain, {n / answered:.2f} "
              f"prompts/s with --answers (16 answer tokens); ratio {answered / plain:.2f}x")

        plan = plan_capture(capture.with_options(answers=True), progress=False)
        groups = [[plan.prompts[i] for i in idx] for idx in batches(plan.prompts, capture.batch_size)]
        runners = {"plain": shard_runner(loaded, plan.locations, "hf", "right", capture.batch_size),
                   "greedy answers (before)": answering_runner(loaded, plan.locations, capture.batch_size),
                   "answers + distribution (now)": answering_runner(loaded, plan.locations, capture.batch_size,
                                                                    candidates=plan.candidates)}
        rounds: dict[str, list[float]] = {k: [] for k in runners}
        with torch.inference_mode():
            for _ in range(3):  # interleaved rounds: a noisy neighbour hurts every method alike
                for name, runner in runners.items():
                    rounds[name].append(timed(lambda r=runner: [r.run_batch(g) for g in groups])[1])
        best = {k: min(v) for k, v in rounds.items()}
        print(f"shard runner, {len(plan.prompts)} prompts, {len(plan.candidates)} candidate counts, best of 3 "
              f"interleaved rounds: " + ", ".join(f"{k} {v:.2f} s" for k, v in best.items()))
        print(f"  the answer distribution costs {best['answers + distribution (now)'] / best['greedy answers (before)']:.3f}x "
              f"the capture with --answers before it (target <= 1.3); --answers now / plain "
              f"{best['answers + distribution (now)'] / best['plain']:.2f}x")
        now, before = best["answers + distribution (now)"], best["greedy answers (before)"]
        write_row("bench_behaviour", "distribution",
                  what=f"the answer distribution ({len(plan.candidates)} candidate counts teacher-forced, packed)",
                  countlens=f"{now:.1f} s for {len(plan.prompts)} prompts, L = {capture.prompts.L}",
                  baseline=f"greedy answers alone ({before:.1f} s)", ratio=f"{now / before:.2f}×",
                  note="target ≤ 1.3; best of 3 interleaved rounds", command=this_command(env_prefix()))

        prompts = build_prompts(tok, capture.prompts)[:16]
        ids, mask, index = pad_batch(prompts, pad_token_id(tok), "left")
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            vectors = boundary_vectors(model, tok, prompts[::-1], [15])[:, 0]

            def forward():
                return model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=1)

            def patched():
                with BoundaryEdit(model, 15, index, replace=vectors):
                    return forward()
            forward()
            rounds = [(timed(forward)[1], timed(patched)[1]) for _ in range(3)]  # interleaved: same load
            t_plain, t_patch = min(r[0] for r in rounds), min(r[1] for r in rounds)
        print(f"prompt pass, batch of 16: plain {16 / t_plain:.2f} prompts/s, patched at location 15 "
              f"{16 / t_patch:.2f} prompts/s (overhead {t_patch / t_plain:.2f}x)")

        patch = PatchingConfig()
        result, t = timed(lambda: run_patching(patch, loaded=loaded))
        _, greedy = timed(lambda: greedy_patching(patch, loaded))
        passes = len(result.rows) + 2 * len(result.rows) // len(result.locations)
        print(f"quick patching stage ({len(result.rows)} patched prompts, {len(result.locations)} locations, "
              f"L={patch.prompts.L}): {t:.1f} s, {passes / t:.2f} prompt passes (+answers)/s; the greedy part alone (the "
              f"stage before the teacher-forced scores) {greedy:.1f} s: the scores cost {t / greedy:.2f}x")

        probes = run_probes(ProbeConfig(acts=str(tmp / "answers"), seeds=(0,)))
        probes.save(tmp)
        steer = SteeringConfig(acts=str(tmp / "answers"), probes=str(tmp / "probes.json"),
                               counts=sorted(set(counts)))
        result, t = timed(lambda: run_steering(steer, loaded=loaded))
        print(f"quick steering stage ({len(result.rows)} steered prompts): {t:.1f} s")


if __name__ == "__main__":
    main()
